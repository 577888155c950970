//===- ZeroPartition.cpp - Persistent per-rank state with ZeRO layouts ----===//
//
// Declares parameters, gradient accumulators and optimizer states as
// sched.tensors laid out for the chosen ZeRO stage. The layouts themselves
// come from zeroc/Support/ShardLayout.h, the one place that computes them.
// Under expert parallelism each rank declares only its experts, sharded over
// the expert-data-parallel group, and each mixture-of-experts op is split at
// its token exchanges (dispatch, local experts, combine).
//
//===----------------------------------------------------------------------===//

#include "zeroc/Transforms/Passes.h"
#include "zeroc/Transforms/ZeroNames.h"

#include "sched/SchedOps.h"
#include "zeroc/Support/ShardLayout.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

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
    // The expert parameters, found by dataflow (the stacked weights of
    // model.moe_experts), before anything is rewritten.
    llvm::StringSet<> experts;
    if (expertParallelSize > 1 && failed(findExperts(module, experts)))
      return signalPassFailure();
    sched::setWorldSize(module, worldSize);
    sched::setStage(module, stage);
    if (expertParallelSize > 1)
      sched::setExpertParallelSize(module, expertParallelSize);

    SymbolTable symbols(module);
    OpBuilder b(module.getContext());
    // Stages 1 and 2: the flat groups, the world's and, under expert
    // parallelism, the experts' (data-parallel over another group).
    FlatGroupPlan groups[2];
    groups[0].name = kFlatGroupName;
    groups[0].shardRanks = worldSize;
    groups[1].name = kExpertFlatGroupName;
    groups[1].shardRanks = worldSize / expertParallelSize;
    for (model::ParamOp param : params) {
      RankedTensorType type = param.getTensorType();
      std::string name = param.getSymName().str();
      bool expert = experts.contains(name);
      if (expert) {
        // This rank's slice of the stacked experts.
        SmallVector<int64_t> shape(type.getShape());
        shape[0] /= expertParallelSize;
        type = RankedTensorType::get(shape, type.getElementType());
      }
      if (expert && param.getValidRows()) {
        param.emitError() << "@" << name
                          << " is an expert parameter with valid_rows: only "
                             "a vocabulary's tables are padded";
        return signalPassFailure();
      }
      b.setInsertionPoint(param);
      bool sharded = stage == 3 && type.getNumElements() > persistenceThreshold;
      auto tensor = b.create<sched::TensorOp>(
          param.getLoc(), name, type, Role::Param, FlatSymbolRefAttr(), sharded,
          Placement::Device, param.getInit(), expert, param.getValidRowsAttr());
      symbols.erase(param);
      symbols.insert(tensor, tensor->getIterator());
      FlatGroupPlan &group = groups[expert ? 1 : 0];
      group.lastDeclared = tensor;
      group.numels.push_back(type.getNumElements());
      group.members.push_back(FlatSymbolRefAttr::get(tensor.getSymNameAttr()));
      // Only stages 1 and 2 flatten the parameters into one buffer.
      if ((stage == 1 || stage == 2) && group.dtype &&
          group.dtype != type.getElementType()) {
        tensor.emitError() << "stage " << stage.getValue() << " flattens all "
                           << (expert ? "expert " : "")
                           << "parameters into one group of one "
                           << "dtype, but @" << name << " is "
                           << type.getElementType()
                           << " and earlier parameters are " << group.dtype;
        return signalPassFailure();
      }
      group.dtype = type.getElementType();
      // Stages 0 and 3 keep per-parameter state next to the parameter.
      if (stage == 0 || stage == 3) {
        b.setInsertionPointAfter(tensor);
        if (failed(declareState(b, symbols, tensor.getLoc(), name,
                                type.getShape(), type.getElementType(),
                                /*sharded=*/stage == 3,
                                /*gradSharded=*/stage == 3, expert)))
          return signalPassFailure();
      }
    }
    if (stage == 1 || stage == 2)
      for (FlatGroupPlan &group : groups)
        if (!group.members.empty() &&
            failed(declareFlatGroup(b, symbols, module, group,
                                    /*expert=*/&group == &groups[1])))
          return signalPassFailure();
    if (expertParallelSize > 1 && failed(splitExperts(module)))
      return signalPassFailure();
  }

  /// The parameters of one flat group, in declaration order.
  struct FlatGroupPlan {
    StringRef name;
    int64_t shardRanks = 1;
    std::vector<int64_t> numels;
    SmallVector<Attribute> members;
    Type dtype;
    Operation *lastDeclared = nullptr;
  };

  LogicalResult declareFlatGroup(OpBuilder &b, SymbolTable &symbols,
                                 ModuleOp module, FlatGroupPlan &plan,
                                 bool expert) {
    FlatGroupLayout layout(plan.numels, plan.shardRanks);
    b.setInsertionPointAfter(plan.lastDeclared);
    // The group belongs to no one parameter: it and its state are the
    // module's, so diagnostics about them point there.
    Location loc = module.getLoc();
    if (symbols.lookup(plan.name))
      return module.emitError() << "a symbol is already named @" << plan.name;
    auto group = b.create<sched::FlatGroupOp>(loc, plan.name,
                                              b.getArrayAttr(plan.members),
                                              layout.numel, layout.padded);
    symbols.insert(group, group->getIterator());
    b.setInsertionPointAfter(group);
    return declareState(b, symbols, loc, plan.name, {layout.padded}, plan.dtype,
                        /*sharded=*/true,
                        /*gradSharded=*/stage == 2, expert);
  }

  /// The stacked weights of every model.moe_experts, each a parameter read
  /// by a model.param_ref; their expert count divisible by the
  /// expert-parallel size.
  LogicalResult findExperts(ModuleOp module, llvm::StringSet<> &experts) {
    bool any = false;
    WalkResult walk = module.walk([&](model::MoeExpertsOp op) {
      any = true;
      if (op.getNumExperts() % expertParallelSize != 0) {
        op.emitOpError() << "has " << op.getNumExperts()
                         << " experts, which the expert-parallel size "
                         << expertParallelSize.getValue()
                         << " does not divide: each rank holds num_experts / "
                            "ep of them";
        return WalkResult::interrupt();
      }
      for (auto [what, w] : {std::pair<StringRef, Value>{"w1", op.getW1()},
                             {"w3", op.getW3()},
                             {"w2", op.getW2()}}) {
        auto ref = w.getDefiningOp<model::ParamRefOp>();
        if (!ref) {
          op.emitOpError() << what
                           << " is not a model.param_ref: expert parallelism "
                              "splits the experts' parameters, so they must "
                              "be read as parameters";
          return WalkResult::interrupt();
        }
        experts.insert(ref.getParam());
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    if (!any)
      return module.emitError()
             << "expert-parallel-size " << expertParallelSize.getValue()
             << " asks for expert parallelism, but the model has no "
                "model.moe_experts";
    // The backward reads the same expert parameters, as parameters.
    walk = module.walk([&](model::MoeExpertsBackwardOp op) {
      for (auto [what, w] : {std::pair<StringRef, Value>{"w1", op.getW1()},
                             {"w3", op.getW3()},
                             {"w2", op.getW2()}}) {
        auto ref = w.getDefiningOp<model::ParamRefOp>();
        if (!ref || !experts.contains(ref.getParam())) {
          op.emitOpError() << what
                           << " is not an expert parameter of a "
                              "model.moe_experts read by a model.param_ref: "
                              "expert parallelism splits both together";
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    // Anything else that reads an expert parameter would read all experts.
    walk = module.walk([&](model::ParamRefOp ref) {
      if (!experts.contains(ref.getParam()))
        return WalkResult::advance();
      for (Operation *user : ref->getUsers())
        if (!isa<model::MoeExpertsOp, model::MoeExpertsBackwardOp>(user)) {
          user->emitOpError()
              << "reads the expert parameter @" << ref.getParam()
              << ", which expert parallelism splits over ranks; only "
                 "model.moe_experts and its backward may read it";
          return WalkResult::interrupt();
        }
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }

  /// The forward of one mixture-of-experts op split at its token exchanges:
  /// what its backward reads.
  struct SplitForward {
    Value rows, out, saved;
  };

  /// A model.param_ref of `param` with the type of this rank's experts.
  Value localWeight(OpBuilder &b, SymbolTable &symbols, Location loc, Value w) {
    StringRef name = w.getDefiningOp<model::ParamRefOp>().getParam();
    auto t = symbols.lookup<sched::TensorOp>(name);
    return b.create<model::ParamRefOp>(loc, t.getTensorType(), name);
  }

  /// model.moe_experts -> moe_dispatch, moe_local_experts, moe_combine; its
  /// backward -> moe_combine_backward, moe_local_experts_backward and the
  /// unweighted moe_combine (the dispatch's gradient). The token exchanges
  /// between them are zero-insert-collectives'.
  LogicalResult splitExperts(ModuleOp module) {
    SymbolTable symbols(module);
    OpBuilder b(module.getContext());
    llvm::DenseMap<Operation *, SplitForward> split;
    SmallVector<Operation *> dead;
    llvm::SetVector<Operation *> refs;
    auto noteRefs = [&](ValueRange ws) {
      for (Value w : ws)
        refs.insert(w.getDefiningOp());
    };
    module.walk([&](model::MoeExpertsOp op) {
      b.setInsertionPoint(op);
      Location loc = op.getLoc();
      int64_t experts = op.getNumExperts();
      auto rowsType =
          RankedTensorType::get({op.getIndices().getType().getNumElements(),
                                 op.getInput().getType().getShape().back()},
                                op.getInput().getType().getElementType());
      auto rows = b.create<model::MoeDispatchOp>(loc, rowsType, op.getInput(),
                                                 op.getIndices(), experts);
      Value w1 = localWeight(b, symbols, loc, op.getW1());
      Value w3 = localWeight(b, symbols, loc, op.getW3());
      Value w2 = localWeight(b, symbols, loc, op.getW2());
      auto savedType = RankedTensorType::get(
          {rowsType.getDimSize(0) * 2 * op.getIntermediateSize()},
          rowsType.getElementType());
      auto local = b.create<model::MoeLocalExpertsOp>(
          loc, TypeRange{rowsType, savedType}, rows, w1, w3, w2, experts,
          op.getTopK(), op.getMaxExpertShareAttr());
      auto combine = b.create<model::MoeCombineOp>(
          loc, op.getResult().getType(), local.getResult(), op.getIndices(),
          op.getWeights(), experts);
      // The three carry the op's marks (a recomputation's layer).
      for (Operation *part :
           {rows.getOperation(), local.getOperation(), combine.getOperation()})
        part->setDiscardableAttrs(op->getDiscardableAttrDictionary());
      op.getResult().replaceAllUsesWith(combine.getResult());
      split[op] = {rows, local.getResult(), local.getSaved()};
      noteRefs({op.getW1(), op.getW3(), op.getW2()});
      dead.push_back(op);
    });
    WalkResult walk = module.walk([&](model::MoeExpertsBackwardOp op) {
      auto forward = split.find(op.getSaved().getDefiningOp());
      if (forward == split.end()) {
        op.emitOpError() << "reads saved state that no model.moe_experts "
                            "yields; expert parallelism splits the two "
                            "together";
        return WalkResult::interrupt();
      }
      b.setInsertionPoint(op);
      Location loc = op.getLoc();
      int64_t experts = op.getW1().getType().getDimSize(0);
      SplitForward &f = forward->second;
      auto combineGrad = b.create<model::MoeCombineBackwardOp>(
          loc, TypeRange{f.out.getType(), op.getWeights().getType()},
          op.getDy(), f.out, op.getWeights(), op.getIndices(), experts);
      Value w1 = localWeight(b, symbols, loc, op.getW1());
      Value w3 = localWeight(b, symbols, loc, op.getW3());
      Value w2 = localWeight(b, symbols, loc, op.getW2());
      auto local = b.create<model::MoeLocalExpertsBackwardOp>(
          loc,
          TypeRange{f.rows.getType(), w1.getType(), w3.getType(), w2.getType()},
          f.rows, w1, w3, w2, combineGrad.getDrows(), f.saved);
      auto dx = b.create<model::MoeCombineOp>(loc, op.getDinput().getType(),
                                              local.getDrows(), op.getIndices(),
                                              Value(), experts);
      for (Operation *part : {combineGrad.getOperation(), local.getOperation(),
                              dx.getOperation()})
        part->setDiscardableAttrs(op->getDiscardableAttrDictionary());
      op.getDinput().replaceAllUsesWith(dx.getResult());
      op.getDweights().replaceAllUsesWith(combineGrad.getDweights());
      op.getDw1().replaceAllUsesWith(local.getDw1());
      op.getDw3().replaceAllUsesWith(local.getDw3());
      op.getDw2().replaceAllUsesWith(local.getDw2());
      noteRefs({op.getW1(), op.getW3(), op.getW2()});
      op.erase();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    for (Operation *op : dead)
      op->erase();
    for (Operation *ref : refs)
      if (ref->use_empty())
        ref->erase();
    return success();
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
    if (worldSize % expertParallelSize != 0)
      return module.emitError()
             << "expert-parallel-size " << expertParallelSize.getValue()
             << " does not divide the world size " << worldSize.getValue()
             << ": the expert-parallel groups partition the ranks";
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
                             Type dtype, bool sharded, bool gradSharded,
                             bool expert) {
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
          isSharded, Placement::Device, Attribute(), expert, IntegerAttr());
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
