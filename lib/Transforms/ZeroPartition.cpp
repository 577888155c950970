//===- ZeroPartition.cpp - Persistent per-rank state with ZeRO layouts ----===//
//
// Declares parameters, gradient accumulators and optimizer states as
// sched.tensors laid out for the chosen ZeRO stage. The layouts themselves
// come from zeroc/Support/ShardLayout.h, the one place that computes them.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Transforms/Passes.h"
#include "zeroc/Transforms/ZeroNames.h"

#include "sched/SchedOps.h"
#include "zeroc/Support/ShardLayout.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace zeroc {
#define GEN_PASS_DEF_ZEROPARTITION
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;
using sched::Placement;
using sched::Role;

namespace {

struct ZeroPartition : zeroc::impl::ZeroPartitionBase<ZeroPartition> {
  using ZeroPartitionBase::ZeroPartitionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkOptions(module)))
      return signalPassFailure();
    auto params = llvm::to_vector(module.getOps<model::ParamOp>());
    if (params.empty()) {
      module.emitError() << "zero-partition found no model.param to "
                            "partition";
      return signalPassFailure();
    }
    sched::setWorldSize(module, worldSize);
    sched::setStage(module, stage);

    SymbolTable symbols(module);
    OpBuilder b(module.getContext());
    std::vector<int64_t> numels;
    SmallVector<Attribute> members;
    Type groupType;
    Operation *lastDeclared = nullptr;
    for (model::ParamOp param : params) {
      RankedTensorType type = param.getTensorType();
      std::string name = param.getSymName().str();
      b.setInsertionPoint(param);
      bool sharded =
          stage == 3 && param.getNumElements() > persistenceThreshold;
      auto tensor = b.create<sched::TensorOp>(
          param.getLoc(), name, type, Role::Param, FlatSymbolRefAttr(), sharded,
          Placement::Device, param.getInit());
      symbols.erase(param);
      symbols.insert(tensor, tensor->getIterator());
      lastDeclared = tensor;
      numels.push_back(type.getNumElements());
      members.push_back(FlatSymbolRefAttr::get(tensor.getSymNameAttr()));
      // Only stages 1 and 2 flatten the parameters into one buffer.
      if ((stage == 1 || stage == 2) && groupType &&
          groupType != type.getElementType()) {
        tensor.emitError()
            << "stage " << stage.getValue()
            << " flattens all parameters into one group of one dtype, but @"
            << name << " is " << type.getElementType() << " and earlier "
            << "parameters are " << groupType;
        return signalPassFailure();
      }
      groupType = type.getElementType();
      // Stages 0 and 3 keep per-parameter state next to the parameter.
      if (stage == 0 || stage == 3) {
        b.setInsertionPointAfter(tensor);
        if (failed(declareState(b, symbols, tensor.getLoc(), name,
                                type.getShape(), type.getElementType(),
                                /*sharded=*/stage == 3,
                                /*gradSharded=*/stage == 3)))
          return signalPassFailure();
      }
    }
    if (stage == 1 || stage == 2) {
      FlatGroupLayout layout(numels, worldSize);
      b.setInsertionPointAfter(lastDeclared);
      // The group belongs to no one parameter: it and its state are the
      // module's, so diagnostics about them point there.
      Location loc = module.getLoc();
      if (symbols.lookup(kFlatGroupName)) {
        module.emitError() << "a symbol is already named @" << kFlatGroupName;
        return signalPassFailure();
      }
      auto group = b.create<sched::FlatGroupOp>(loc, kFlatGroupName,
                                                b.getArrayAttr(members),
                                                layout.numel, layout.padded);
      symbols.insert(group, group->getIterator());
      b.setInsertionPointAfter(group);
      if (failed(declareState(b, symbols, loc, kFlatGroupName, {layout.padded},
                              groupType, /*sharded=*/true,
                              /*gradSharded=*/stage == 2)))
        return signalPassFailure();
    }
  }

  LogicalResult checkOptions(ModuleOp module) {
    if (worldSize < 1)
      return module.emitError()
             << "world-size must be at least 1, found " << worldSize.getValue();
    if (stage < 0 || stage > 3)
      return module.emitError()
             << "ZeRO stage must be 0, 1, 2 or 3, found " << stage.getValue();
    if (persistenceThreshold < 0)
      return module.emitError()
             << "persistence-threshold must not be negative, found "
             << persistenceThreshold.getValue();
    if (expertParallelSize < 1)
      return module.emitError()
             << "expert-parallel-size must be at least 1, found "
             << expertParallelSize.getValue();
    // The config reader checks the size against the world and the experts;
    // the schedule of expert parallelism (local experts, all-to-all
    // dispatch and combine, expert-data-parallel ZeRO groups) is not built
    // yet, and a plan without it would misstate every rank's memory and
    // traffic.
    if (expertParallelSize > 1)
      return module.emitError()
             << "expert parallelism (expert-parallel-size "
             << expertParallelSize.getValue()
             << ") is not planned yet: zeroc plans every rank holding all "
                "experts; use an expert-parallel size of 1";
    if (module->hasAttr(sched::kWorldSizeAttr))
      return module.emitError() << "module is already partitioned (it has "
                                << sched::kWorldSizeAttr << ")";
    return success();
  }

  /// Declares the gradient accumulator and optimizer state of `owner` (a
  /// parameter or the flat group): f32 master copy for 16-bit owners, Adam
  /// moments in f32.
  LogicalResult declareState(OpBuilder &b, SymbolTable &symbols, Location loc,
                             StringRef owner, ArrayRef<int64_t> shape,
                             Type dtype, bool sharded, bool gradSharded) {
    auto ownerRef = FlatSymbolRefAttr::get(b.getContext(), owner);
    Type f32 = b.getF32Type();
    auto declare = [&](Role role, Type element, bool isSharded) {
      std::string name = stateName(owner, role);
      if (symbols.lookup(name)) {
        emitError(loc) << "cannot declare the " << sched::stringifyRole(role)
                       << " of @" << owner << ": a symbol is already named @"
                       << name;
        return failure();
      }
      auto t = b.create<sched::TensorOp>(
          loc, name, RankedTensorType::get(shape, element), role, ownerRef,
          isSharded, Placement::Device, Attribute());
      symbols.insert(t, t->getIterator());
      b.setInsertionPointAfter(t);
      return success();
    };
    if (failed(declare(Role::Grad, dtype, gradSharded)))
      return failure();
    if (!dtype.isF32() && failed(declare(Role::Master, f32, sharded)))
      return failure();
    if (failed(declare(Role::ExpAvg, f32, sharded)) ||
        failed(declare(Role::ExpAvgSq, f32, sharded)))
      return failure();
    return success();
  }
};

} // namespace
