//===- SchedOps.cpp - Verifiers and interfaces of the sched ops -----------===//
//
// The local rules of a schedule: what each op may name and what types it
// yields. Whole-program rules (release after gather, reduce once, waits
// between streams) are checked by the zero-verify-schedule pass.
//
//===----------------------------------------------------------------------===//

#include "sched/SchedOps.h"
#include "zeroc/Support/ExpertParallel.h"

#include "zeroc/Support/ShardLayout.h"
#include "zeroc/Support/Workspace.h"

#include "mlir/IR/Builders.h"

#include "mlir/IR/OpImplementation.h"
#include <deque>

using namespace mlir;
using namespace zeroc;
using namespace zeroc::sched;

/// A positive count the module containing `op` records as `name`; 1 when
/// unset.
static int64_t moduleCount(Operation *op, StringRef name) {
  auto module = dyn_cast<ModuleOp>(op) ? cast<ModuleOp>(op)
                                       : op->getParentOfType<ModuleOp>();
  if (!module)
    return 1;
  auto attr = module->getAttrOfType<IntegerAttr>(name);
  return attr && attr.getInt() > 0 ? attr.getInt() : 1;
}

int64_t zeroc::sched::getWorldSize(Operation *op) {
  return moduleCount(op, kWorldSizeAttr);
}

int64_t zeroc::sched::getExpertParallelSize(Operation *op) {
  return moduleCount(op, kExpertParallelSizeAttr);
}

// DeepSpeed's groups._create_expert_and_data_parallel, as
// zeroc/Support/ExpertParallel.h defines them.
int64_t zeroc::sched::groupSize(CommGroup group, int64_t worldSize,
                                int64_t expertParallelSize) {
  return commGroupShape(commGroupKind(group), worldSize, expertParallelSize)
      .size;
}

zeroc::CommGroupKind zeroc::sched::commGroupKind(CommGroup group) {
  switch (group) {
  case CommGroup::World:
    return CommGroupKind::World;
  case CommGroup::ExpertParallel:
    return CommGroupKind::ExpertParallel;
  case CommGroup::ExpertDataParallel:
    return CommGroupKind::ExpertDataParallel;
  }
  return CommGroupKind::World;
}

std::optional<int64_t> zeroc::sched::getStage(ModuleOp module) {
  if (auto attr = module->getAttrOfType<IntegerAttr>(kStageAttr))
    return attr.getInt();
  return std::nullopt;
}

void zeroc::sched::setWorldSize(ModuleOp module, int64_t worldSize) {
  module->setAttr(kWorldSizeAttr,
                  Builder(module.getContext()).getI64IntegerAttr(worldSize));
}

void zeroc::sched::setExpertParallelSize(ModuleOp module,
                                         int64_t expertParallelSize) {
  module->setAttr(
      kExpertParallelSizeAttr,
      Builder(module.getContext()).getI64IntegerAttr(expertParallelSize));
}

void zeroc::sched::setStage(ModuleOp module, int64_t stage) {
  module->setAttr(kStageAttr,
                  Builder(module.getContext()).getI64IntegerAttr(stage));
}

func::FuncOp zeroc::sched::lookupPhase(ModuleOp module, Phase phase) {
  return module.lookupSymbol<func::FuncOp>(stringifyPhase(phase));
}

StateTable::StateTable(ModuleOp module) {
  for (auto t : module.getOps<TensorOp>()) {
    StringRef owner = t.getOf() ? *t.getOf() : t.getSymName();
    states.try_emplace({owner, t.getRole()}, t);
  }
}

TensorOp StateTable::stateOf(StringRef owner, Role role) const {
  return states.lookup({owner, role});
}

void zeroc::sched::getNamedSymbols(Operation *op,
                                   SmallVectorImpl<StringRef> &names) {
  for (NamedAttribute attr : op->getAttrs()) {
    if (auto ref = dyn_cast<FlatSymbolRefAttr>(attr.getValue()))
      names.push_back(ref.getValue());
    else if (auto array = dyn_cast<ArrayAttr>(attr.getValue()))
      for (Attribute a : array)
        if (auto ref = dyn_cast<FlatSymbolRefAttr>(a))
          names.push_back(ref.getValue());
  }
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// The sched.tensor named by `name`, or an error on `op`.
static FailureOr<TensorOp> lookupTensor(Operation *op,
                                        SymbolTableCollection &symbols,
                                        FlatSymbolRefAttr name,
                                        StringRef what) {
  auto tensor = symbols.lookupNearestSymbolFrom<TensorOp>(op, name);
  if (!tensor)
    return op->emitOpError()
           << what << " " << name << " does not name a sched.tensor";
  return tensor;
}

/// Like lookupTensor, and the tensor must have `role`.
static FailureOr<TensorOp> lookupRole(Operation *op,
                                      SymbolTableCollection &symbols,
                                      FlatSymbolRefAttr name, Role role,
                                      StringRef what) {
  FailureOr<TensorOp> tensor = lookupTensor(op, symbols, name, what);
  if (failed(tensor))
    return failure();
  if (tensor->getRole() != role)
    return op->emitOpError() << what << " " << name << " must be a "
                             << stringifyRole(role) << " tensor, found a "
                             << stringifyRole(tensor->getRole()) << " tensor";
  return tensor;
}

static LogicalResult
forEachSymbol(ArrayAttr names,
              function_ref<LogicalResult(FlatSymbolRefAttr)> fn) {
  for (Attribute a : names)
    if (failed(fn(cast<FlatSymbolRefAttr>(a))))
      return failure();
  return success();
}

static int64_t numElements(Type t) {
  return cast<RankedTensorType>(t).getNumElements();
}

//===----------------------------------------------------------------------===//
// TensorOp, FlatGroupOp
//===----------------------------------------------------------------------===//

int64_t TensorOp::getShardGroupSize(int64_t worldSize) {
  if (!getExpert())
    return worldSize;
  return groupSize(CommGroup::ExpertDataParallel, worldSize,
                   getExpertParallelSize(*this));
}

int64_t TensorOp::getLocalNumElements(int64_t worldSize) {
  if (!getSharded())
    return getNumElements();
  return ParamShardLayout{getNumElements(), getShardGroupSize(worldSize)}
      .shardSize();
}

RankedTensorType TensorOp::getLocalType(int64_t worldSize) {
  if (!getSharded())
    return getTensorType();
  return RankedTensorType::get({getLocalNumElements(worldSize)},
                               getTensorType().getElementType());
}

RankedTensorType TensorOp::getParameterType() {
  return getRole() == Role::Param ? getTensorType() : RankedTensorType();
}

LogicalResult TensorOp::verify() {
  bool isParam = getRole() == Role::Param;
  if (!isParam && !getOf())
    return emitOpError() << "a " << stringifyRole(getRole())
                         << " tensor must name the parameter or group it "
                            "belongs to with 'of'";
  if (isParam && getOf())
    return emitOpError() << "a param tensor cannot be 'of' another symbol";
  if (!isParam && getInit())
    return emitOpError() << "only param tensors have an initialization";
  if (std::optional<int64_t> rows = getValidRows()) {
    if (!isParam)
      return emitOpError() << "only param tensors have valid_rows";
    int64_t first =
        getTensorType().getRank() ? getTensorType().getDimSize(0) : 0;
    if (*rows < 1 || *rows > first)
      return emitOpError() << "valid_rows " << *rows
                           << " must be from 1 to the first dimension, "
                           << first;
  }
  return success();
}

LogicalResult TensorOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!getOf())
    return success();
  Operation *owner = symbols.lookupNearestSymbolFrom(*this, getOfAttr());
  if (auto tensor = dyn_cast_or_null<TensorOp>(owner)) {
    if (tensor.getRole() != Role::Param)
      return emitOpError() << "'of' " << getOfAttr()
                           << " must name a param tensor or a flat group";
    return success();
  }
  if (isa_and_nonnull<FlatGroupOp>(owner))
    return success();
  return emitOpError() << "'of' " << getOfAttr()
                       << " does not name a sched.tensor or sched.flat_group";
}

LogicalResult FlatGroupOp::verifySymbolUses(SymbolTableCollection &symbols) {
  std::vector<int64_t> numels;
  TensorOp first;
  if (failed(forEachSymbol(
          getParams(), [&](FlatSymbolRefAttr name) -> LogicalResult {
            FailureOr<TensorOp> t =
                lookupRole(*this, symbols, name, Role::Param, "member");
            if (failed(t))
              return failure();
            first = first ? first : *t;
            numels.push_back(t->getNumElements());
            return success();
          })))
    return failure();
  // Split over its members' group: the world, or for expert parameters the
  // expert-data-parallel ranks.
  int64_t worldSize = getWorldSize(*this);
  FlatGroupLayout layout(numels, first ? first.getShardGroupSize(worldSize)
                                       : worldSize);
  if (layout.numel != int64_t(getNumel()))
    return emitOpError() << "numel " << getNumel()
                         << " is not the sum of its parameters' elements, "
                         << layout.numel;
  if (layout.padded != int64_t(getPadded()))
    return emitOpError() << "padded " << getPadded() << " should be "
                         << layout.padded << " (" << layout.numel
                         << " rounded up to a multiple of 2 x "
                         << (first && first.getExpert()
                                 ? "expert-data-parallel size "
                                 : "world size ")
                         << layout.worldSize << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Reading and updating persistent state
//===----------------------------------------------------------------------===//

LogicalResult ReadOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<TensorOp> t =
      lookupTensor(*this, symbols, getTensorAttr(), "tensor");
  if (failed(t))
    return failure();
  if (t->getPlacement() != Placement::Device)
    return emitOpError() << "cannot read " << getTensorAttr() << " on the "
                         << stringifyPlacement(t->getPlacement())
                         << ": only device tensors are read in place (fetch "
                            "or copy it first)";
  RankedTensorType local = t->getLocalType(getWorldSize(*this));
  if (getType() != local)
    return emitOpError() << "result type " << getType()
                         << " is not this rank's part of " << getTensorAttr()
                         << ", " << local;
  return success();
}

LogicalResult AccumulateOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<TensorOp> t =
      lookupRole(*this, symbols, getTensorAttr(), Role::Grad, "target");
  if (failed(t))
    return failure();
  if (t->getSharded())
    return emitOpError() << "target " << getTensorAttr()
                         << " is sharded: reduce-scatter into it instead";
  auto value = cast<RankedTensorType>(getValue().getType());
  if (value.getElementType() != t->getTensorType().getElementType())
    return emitOpError() << "value element type " << value.getElementType()
                         << " does not match " << getTensorAttr() << ", "
                         << t->getTensorType().getElementType();
  if (int64_t(getOffset()) + value.getNumElements() > t->getNumElements())
    return emitOpError() << "value of " << value.getNumElements()
                         << " elements at offset " << getOffset()
                         << " does not fit in " << getTensorAttr() << " ("
                         << t->getNumElements() << " elements)";
  return success();
}

LogicalResult ZeroGradsOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return forEachSymbol(
      getTensors(), [&](FlatSymbolRefAttr name) -> LogicalResult {
        return lookupRole(*this, symbols, name, Role::Grad, "tensor");
      });
}

//===----------------------------------------------------------------------===//
// AllGatherStartOp
//===----------------------------------------------------------------------===//

LogicalResult AllGatherStartOp::verify() {
  if (getShards().size() != getParams().size())
    return emitOpError() << "has " << getShards().size() << " shards for "
                         << getParams().size() << " parameters";
  if (getShards().empty())
    return emitOpError() << "gathers nothing";
  return success();
}

LogicalResult
AllGatherStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  int64_t ws = getWorldSize(*this);
  for (auto [name, shard] :
       llvm::zip(getParams().getAsRange<FlatSymbolRefAttr>(), getShards())) {
    FailureOr<TensorOp> t =
        lookupRole(*this, symbols, name, Role::Param, "parameter");
    if (failed(t))
      return failure();
    if (!t->getSharded())
      return emitOpError() << "parameter " << name
                           << " is replicated: there is nothing to gather";
    if (shard.getType() != t->getLocalType(ws))
      return emitOpError() << "shard of " << name << " has type "
                           << shard.getType() << ", expected "
                           << t->getLocalType(ws);
  }
  return success();
}

LogicalResult
AllGatherStartOp::getCompletedTypes(SymbolTableCollection &symbols,
                                    SmallVectorImpl<Type> &types) {
  for (auto name : getParams().getAsRange<FlatSymbolRefAttr>()) {
    auto t = symbols.lookupNearestSymbolFrom<TensorOp>(*this, name);
    if (!t)
      return failure();
    types.push_back(t.getType());
  }
  return success();
}

CollectiveKind AllGatherStartOp::getCollectiveKind() {
  return CollectiveKind::AllGather;
}

int64_t AllGatherStartOp::getLogicalElements(SymbolTableCollection &symbols) {
  int64_t total = 0;
  for (auto name : getParams().getAsRange<FlatSymbolRefAttr>())
    if (auto t = symbols.lookupNearestSymbolFrom<TensorOp>(*this, name))
      total += t.getNumElements();
  return total;
}

//===----------------------------------------------------------------------===//
// ReduceScatterStartOp
//===----------------------------------------------------------------------===//

LogicalResult ReduceScatterStartOp::verify() {
  if (getGrads().size() != getTargets().size() ||
      getGrads().size() != getOffsets().size())
    return emitOpError() << "has " << getGrads().size() << " gradients, "
                         << getTargets().size() << " targets and "
                         << getOffsets().size()
                         << " offsets; expected one of each per gradient";
  if (getGrads().empty())
    return emitOpError() << "reduces nothing";
  return success();
}

LogicalResult
ReduceScatterStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  for (auto [name, grad, offset] :
       llvm::zip(getTargets().getAsRange<FlatSymbolRefAttr>(), getGrads(),
                 getOffsets())) {
    FailureOr<TensorOp> t =
        lookupRole(*this, symbols, name, Role::Grad, "target");
    if (failed(t))
      return failure();
    if (!t->getSharded()) {
      auto read = grad.getDefiningOp<ReadOp>();
      if (!read || read.getTensorAttr() != name)
        return emitOpError() << "target " << name
                             << " is replicated: it is reduced in place, so "
                                "the gradient must be a sched.read of it";
    }
    int64_t n = numElements(grad.getType());
    if (offset < 0 || offset + n > t->getNumElements())
      return emitOpError() << "gradient of " << n << " elements at offset "
                           << offset << " does not fit in " << name << " ("
                           << t->getNumElements() << " elements)";
  }
  return success();
}

LogicalResult ReduceScatterStartOp::getCompletedTypes(SymbolTableCollection &,
                                                      SmallVectorImpl<Type> &) {
  return success();
}

CollectiveKind ReduceScatterStartOp::getCollectiveKind() {
  return getAllReduce() ? CollectiveKind::AllReduce
                        : CollectiveKind::ReduceScatter;
}

// A flat group's whole gradient buffer counts its parameters' elements, not
// the alignment padding.
int64_t
ReduceScatterStartOp::getLogicalElements(SymbolTableCollection &symbols) {
  int64_t total = 0;
  for (auto [grad, target] :
       llvm::zip(getGrads(), getTargets().getAsRange<FlatSymbolRefAttr>())) {
    int64_t n = numElements(grad.getType());
    auto t = symbols.lookupNearestSymbolFrom<TensorOp>(*this, target);
    if (t && t.getOf() && n == t.getNumElements())
      if (auto group = symbols.lookupNearestSymbolFrom<FlatGroupOp>(
              *this, t.getOfAttr()))
        n = group.getNumel();
    total += n;
  }
  return total;
}

//===----------------------------------------------------------------------===//
// AllReduceStartOp, AllGatherUpdatesStartOp
//===----------------------------------------------------------------------===//

LogicalResult AllReduceStartOp::verify() {
  if (getTensors().empty())
    return emitOpError() << "reduces nothing";
  return success();
}

LogicalResult
AllReduceStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return forEachSymbol(
      getTensors(), [&](FlatSymbolRefAttr name) -> LogicalResult {
        FailureOr<TensorOp> t =
            lookupRole(*this, symbols, name, Role::Grad, "tensor");
        if (failed(t))
          return failure();
        if (t->getSharded())
          return emitOpError()
                 << name << " is sharded: reduce-scatter it instead";
        return success();
      });
}

LogicalResult AllReduceStartOp::getCompletedTypes(SymbolTableCollection &,
                                                  SmallVectorImpl<Type> &) {
  return success();
}

CollectiveKind AllReduceStartOp::getCollectiveKind() {
  return CollectiveKind::AllReduce;
}

int64_t AllReduceStartOp::getLogicalElements(SymbolTableCollection &symbols) {
  int64_t total = 0;
  for (auto name : getTensors().getAsRange<FlatSymbolRefAttr>())
    if (auto t = symbols.lookupNearestSymbolFrom<TensorOp>(*this, name))
      total += t.getNumElements();
  return total;
}

LogicalResult AllGatherUpdatesStartOp::verify() {
  if (getTargets().empty())
    return emitOpError() << "gathers nothing";
  return success();
}

LogicalResult
AllGatherUpdatesStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return forEachSymbol(
      getTargets(), [&](FlatSymbolRefAttr name) -> LogicalResult {
        Operation *target = symbols.lookupNearestSymbolFrom(*this, name);
        if (isa_and_nonnull<FlatGroupOp>(target))
          return success();
        auto t = dyn_cast_or_null<TensorOp>(target);
        if (!t || t.getRole() != Role::Param || t.getSharded())
          return emitOpError() << "target " << name
                               << " must be a flat group or a replicated param "
                                  "tensor";
        return success();
      });
}

LogicalResult
AllGatherUpdatesStartOp::getCompletedTypes(SymbolTableCollection &,
                                           SmallVectorImpl<Type> &) {
  return success();
}

CollectiveKind AllGatherUpdatesStartOp::getCollectiveKind() {
  return CollectiveKind::AllGather;
}

int64_t
AllGatherUpdatesStartOp::getLogicalElements(SymbolTableCollection &symbols) {
  int64_t total = 0;
  for (auto name : getTargets().getAsRange<FlatSymbolRefAttr>()) {
    Operation *target = symbols.lookupNearestSymbolFrom(*this, name);
    if (auto group = dyn_cast_or_null<FlatGroupOp>(target))
      total += group.getNumel();
    else if (auto t = dyn_cast_or_null<TensorOp>(target))
      total += t.getNumElements();
  }
  return total;
}

//===----------------------------------------------------------------------===//
// FetchStartOp, CopyStartOp
//===----------------------------------------------------------------------===//

LogicalResult FetchStartOp::verify() {
  if (getTensors().empty())
    return emitOpError() << "fetches nothing";
  return success();
}

//===----------------------------------------------------------------------===//
// AllToAllStartOp
//===----------------------------------------------------------------------===//

LogicalResult AllToAllStartOp::verify() {
  if (getGroup() != CommGroup::ExpertParallel)
    return emitOpError() << "exchanges tokens among the expert-parallel "
                            "group, but names the "
                         << stringifyCommGroup(getGroup()) << " group";
  if (getExpertParallelSize(*this) < 2)
    return emitOpError() << "needs expert parallelism: the module's "
                         << kExpertParallelSizeAttr
                         << " must be at least 2, found "
                         << getExpertParallelSize(*this);
  auto recv = cast<RankedTensorType>(getRecvType());
  auto send = cast<RankedTensorType>(getSend().getType());
  if (recv.getElementType() != send.getElementType())
    return emitOpError() << "receives " << recv.getElementType()
                         << " but sends " << send.getElementType();
  if (getWorstBytes() < getBytes())
    return emitOpError() << "worst_bytes " << getWorstBytes()
                         << " is below the planned bytes " << getBytes()
                         << ": the worst case bounds every assumption";
  return success();
}

LogicalResult AllToAllStartOp::verifySymbolUses(SymbolTableCollection &) {
  return success();
}

LogicalResult AllToAllStartOp::getCompletedTypes(SymbolTableCollection &,
                                                 SmallVectorImpl<Type> &types) {
  types.push_back(getRecvType());
  return success();
}

CollectiveKind AllToAllStartOp::getCollectiveKind() {
  return CollectiveKind::AllToAll;
}

// What one rank exchanges, in elements of its dtype: the planned bytes.
int64_t AllToAllStartOp::getLogicalElements(SymbolTableCollection &) {
  auto send = cast<RankedTensorType>(getSend().getType());
  int64_t elementBytes =
      model::tensorBytes(send) / std::max<int64_t>(send.getNumElements(), 1);
  return getBytes() / std::max<int64_t>(elementBytes, 1);
}

LogicalResult FetchStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return forEachSymbol(
      getTensors(), [&](FlatSymbolRefAttr name) -> LogicalResult {
        FailureOr<TensorOp> t =
            lookupRole(*this, symbols, name, Role::Param, "tensor");
        if (failed(t))
          return failure();
        if (t->getPlacement() == Placement::Device)
          return emitOpError()
                 << name << " is already on the device: read it instead";
        return success();
      });
}

LogicalResult FetchStartOp::getCompletedTypes(SymbolTableCollection &symbols,
                                              SmallVectorImpl<Type> &types) {
  int64_t ws = getWorldSize(*this);
  for (auto name : getTensors().getAsRange<FlatSymbolRefAttr>()) {
    auto t = symbols.lookupNearestSymbolFrom<TensorOp>(*this, name);
    if (!t)
      return failure();
    types.push_back(t.getLocalType(ws));
  }
  return success();
}

LogicalResult CopyStartOp::verify() {
  if (getSources().size() != getDestinations().size() || getSources().empty())
    return emitOpError() << "needs one destination per source, found "
                         << getSources().size() << " sources and "
                         << getDestinations().size() << " destinations";
  return success();
}

LogicalResult CopyStartOp::verifySymbolUses(SymbolTableCollection &symbols) {
  for (auto [src, dst] :
       llvm::zip(getSources().getAsRange<FlatSymbolRefAttr>(),
                 getDestinations().getAsRange<FlatSymbolRefAttr>())) {
    FailureOr<TensorOp> s = lookupTensor(*this, symbols, src, "source");
    if (failed(s))
      return failure();
    FailureOr<TensorOp> d = lookupTensor(*this, symbols, dst, "destination");
    if (failed(d))
      return failure();
    if (s->getNumElements() != d->getNumElements() ||
        s->getSharded() != d->getSharded())
      return emitOpError() << "cannot copy " << src << " to " << dst
                           << ": their shapes or layouts differ";
    if (s->getPlacement() == d->getPlacement())
      return emitOpError() << src << " and " << dst << " are both on the "
                           << stringifyPlacement(s->getPlacement());
  }
  return success();
}

LogicalResult CopyStartOp::getCompletedTypes(SymbolTableCollection &,
                                             SmallVectorImpl<Type> &) {
  return success();
}

//===----------------------------------------------------------------------===//
// WaitOp
//===----------------------------------------------------------------------===//

LogicalResult WaitOp::verify() {
  auto start = getToken().getDefiningOp<AsyncStartOpInterface>();
  if (!start)
    return emitOpError() << "token must come from an asynchronous start op";
  if (!getToken().hasOneUse())
    return emitOpError() << "token is waited on more than once";
  return success();
}

LogicalResult WaitOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto start = getToken().getDefiningOp<AsyncStartOpInterface>();
  SmallVector<Type> expected;
  if (failed(start.getCompletedTypes(symbols, expected)))
    return success(); // The start op reports its own symbol errors.
  if (TypeRange(expected) != getResultTypes()) {
    InFlightDiagnostic diag =
        emitOpError() << "yields " << getNumResults() << " values of types ("
                      << getResultTypes() << ") but '" << start->getName()
                      << "' completes with (" << TypeRange(expected) << ")";
    return diag;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

static LogicalResult verifyGradList(Operation *op, ArrayAttr grads,
                                    SymbolTableCollection &symbols) {
  return forEachSymbol(grads, [&](FlatSymbolRefAttr name) -> LogicalResult {
    return lookupRole(op, symbols, name, Role::Grad, "gradient");
  });
}

LogicalResult UnscaleGradsOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyGradList(*this, getGrads(), symbols);
}

LogicalResult ClipGradNormOp::verify() {
  if (!(getMaxNorm().convertToDouble() > 0.0))
    return emitOpError() << "max_norm must be positive, found "
                         << getMaxNorm().convertToDouble();
  return success();
}

LogicalResult ClipGradNormOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyGradList(*this, getGrads(), symbols);
}

LogicalResult AdamUpdateOp::verify() {
  return model::AdamUpdateOp::verifyStepKind(
      [&] { return emitOpError(); }, getAdamw(), getLamb(), getMaxCoeffAttr(),
      getMinCoeffAttr());
}

LogicalResult AdamUpdateOp::verifySymbolUses(SymbolTableCollection &symbols) {
  Operation *target = symbols.lookupNearestSymbolFrom(*this, getParamAttr());
  auto param = dyn_cast_or_null<TensorOp>(target);
  if (!isa_and_nonnull<FlatGroupOp>(target) &&
      !(param && param.getRole() == Role::Param))
    return emitOpError() << getParamAttr()
                         << " must name a param tensor or a flat group";
  auto check = [&](FlatSymbolRefAttr name, Role role) -> LogicalResult {
    FailureOr<TensorOp> t =
        lookupRole(*this, symbols, name, role, stringifyRole(role));
    if (failed(t))
      return failure();
    if (t->getOfAttr() != getParamAttr())
      return emitOpError() << stringifyRole(role) << " " << name
                           << " belongs to " << t->getOfAttr() << ", not "
                           << getParamAttr();
    return success();
  };
  if (failed(check(getGradAttr(), Role::Grad)) ||
      failed(check(getExpAvgAttr(), Role::ExpAvg)) ||
      failed(check(getExpAvgSqAttr(), Role::ExpAvgSq)))
    return failure();
  if (getMasterAttr() && failed(check(getMasterAttr(), Role::Master)))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Workspaces (zeroc/Support/Workspace.h) and buffer sizes
//===----------------------------------------------------------------------===//

namespace {

int64_t elementBytes(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  Type element = shaped ? shaped.getElementType() : type;
  return std::max<int64_t>(1, element.getIntOrFloatBitWidth() / 8);
}

/// The layout of a flat group's buffer at the module's world size.
std::optional<FlatGroupLayout> flatLayout(Operation *from, FlatGroupOp group,
                                          SymbolTableCollection &symbols) {
  std::vector<int64_t> numels;
  TensorOp first;
  for (auto name : group.getParams().getAsRange<FlatSymbolRefAttr>()) {
    auto t = symbols.lookupNearestSymbolFrom<TensorOp>(from, name);
    if (!t)
      return std::nullopt;
    first = first ? first : t;
    numels.push_back(t.getNumElements());
  }
  // Over the members' group: expert parameters over the
  // expert-data-parallel ranks (zero-verify-schedule keeps a group of one
  // kind).
  int64_t worldSize = getWorldSize(from);
  return FlatGroupLayout(numels, first ? first.getShardGroupSize(worldSize)
                                       : worldSize);
}

} // namespace

int64_t zeroc::sched::bufferBytes(Value value) {
  int64_t bytes = model::tensorBytes(value.getType());
  auto result = dyn_cast<OpResult>(value);
  auto wait = result ? dyn_cast<WaitOp>(result.getOwner()) : WaitOp();
  if (!wait)
    return bytes;
  auto gather = wait.getToken().getDefiningOp<AllGatherStartOp>();
  if (!gather || result.getResultNumber() >= gather.getShards().size())
    return bytes;
  // The padded tensor every rank's shard lands in.
  Value shard = gather.getShards()[result.getResultNumber()];
  return std::max(bytes, model::tensorBytes(shard.getType()) *
                             groupSize(gather.getGroup(), getWorldSize(gather),
                                       getExpertParallelSize(gather)));
}

int64_t
ReduceScatterStartOp::getWorkspaceBytes(SymbolTableCollection &symbols) {
  // Flat-group inputs share one packed receive part (and the staging
  // ranges of the runs sent as one), then the stage-3 parameters' parts:
  // the small ones packed into one send and one receive buffer where there
  // are several, each its own otherwise (Workspace.h).
  int64_t worldSize = getWorldSize(*this);
  std::deque<FlatGroupLayout> layouts;
  llvm::DenseMap<Operation *, const FlatGroupLayout *> layoutOf;
  std::vector<FlatShare> shares;
  std::vector<ParamGradient> params;
  int64_t flatElementBytes = 0;
  for (auto [grad, target, offset] :
       llvm::zip(getGrads(), getTargets().getAsRange<FlatSymbolRefAttr>(),
                 getOffsets())) {
    int64_t n = numElements(grad.getType());
    int64_t esize = elementBytes(grad.getType());
    auto t = symbols.lookupNearestSymbolFrom<TensorOp>(*this, target);
    if (!t)
      continue;
    FlatGroupOp group =
        t.getOf()
            ? symbols.lookupNearestSymbolFrom<FlatGroupOp>(*this, t.getOfAttr())
            : FlatGroupOp();
    if (group) {
      // One layout a group: runs of one group's inputs are found by it.
      const FlatGroupLayout *&layout = layoutOf[group.getOperation()];
      if (!layout)
        if (auto l = flatLayout(*this, group, symbols)) {
          layouts.push_back(*l);
          layout = &layouts.back();
        }
      if (layout) {
        shares.push_back({layout, {offset, offset + n}});
        flatElementBytes = flatElementBytes ? flatElementBytes : esize;
      }
    } else {
      params.push_back(
          {ParamShardLayout{t.getNumElements(), t.getShardGroupSize(worldSize)},
           esize});
    }
  }
  WorkspaceLayout ws;
  reduceScatterFlatParts(ws, shares, flatElementBytes, /*rank=*/0);
  reduceScatterParamParts(ws, params);
  return ws.size();
}

int64_t
AllGatherUpdatesStartOp::getWorkspaceBytes(SymbolTableCollection &symbols) {
  // A flat group is gathered in place in its parameter buffer; a replicated
  // parameter with sharded states through a padded copy.
  WorkspaceLayout ws;
  int64_t worldSize = getWorldSize(*this);
  for (auto name : getTargets().getAsRange<FlatSymbolRefAttr>())
    if (auto t = symbols.lookupNearestSymbolFrom<TensorOp>(*this, name);
        t && !t.getSharded())
      gatherUpdatesParamPart(
          ws,
          ParamShardLayout{t.getNumElements(), t.getShardGroupSize(worldSize)},
          elementBytes(t.getTensorType()));
  return ws.size();
}

int64_t AdamUpdateOp::getWorkspaceBytes(SymbolTableCollection &symbols) {
  // A flat group's owned partition is updated where it lies.
  WorkspaceLayout ws;
  int64_t worldSize = getWorldSize(*this);
  auto state =
      symbols.lookupNearestSymbolFrom<TensorOp>(*this, getExpAvgAttr());
  auto param = symbols.lookupNearestSymbolFrom<TensorOp>(*this, getParamAttr());
  if (!state || !param)
    return 0;
  int64_t n = state.getLocalNumElements(worldSize);
  if (param.getLocalNumElements(worldSize) != n)
    adamPartitionPart(ws, n, elementBytes(param.getTensorType()));
  return ws.size();
}

#include "sched/SchedInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "sched/SchedOps.cpp.inc"
