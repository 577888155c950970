//===- ZeroInsertCollectives.cpp - Make every rank's communication explicit
//===//
//
// Lowers the logical uses of parameters, gradients and the optimizer that
// the training-step expansion emits to sched ops: in-place reads, gathers
// and releases, local accumulation or reduce-scatter, the boundary
// reductions and the all-gather of updated parameters, per ZeRO stage.
// Under expert parallelism, expert state moves over the expert-data-parallel
// group and tokens reach this rank's experts, and return, by all-to-all over
// the expert-parallel group.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Transforms/Passes.h"
#include "zeroc/Transforms/ZeroNames.h"

#include "sched/SchedOps.h"
#include "zeroc/Support/ExpertParallel.h"
#include "zeroc/Support/ShardLayout.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"

namespace zeroc {
#define GEN_PASS_DEF_ZEROINSERTCOLLECTIVES
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;
using sched::Placement;
using sched::Role;

namespace {

class CollectiveInserter {
public:
  CollectiveInserter(ModuleOp module, int64_t stage, bool reduceScatter)
      : module(module), stage(stage), worldSize(sched::getWorldSize(module)),
        expertParallelSize(sched::getExpertParallelSize(module)),
        reduceScatter(reduceScatter), symbols(module), states(module),
        b(module.getContext()) {}

  LogicalResult run(func::FuncOp micro, func::FuncOp optimizer) {
    if (failed(collectGroupOffsets()) || failed(exchangeTokens(micro)) ||
        failed(lowerMicroStep(micro)))
      return failure();
    return lowerOptimizerStep(optimizer);
  }

private:
  sched::TensorOp tensor(StringRef name) {
    return symbols.lookup<sched::TensorOp>(name);
  }

  FlatSymbolRefAttr ref(StringRef name) {
    return FlatSymbolRefAttr::get(module.getContext(), name);
  }

  /// The `role` tensor of `owner`, found by what it belongs to. A missing
  /// one keeps its conventional name, for the op verifier to report.
  FlatSymbolRefAttr state(StringRef owner, Role role) {
    if (sched::TensorOp t = states.stateOf(owner, role))
      return ref(t.getSymName());
    return ref(stateName(owner, role));
  }

  /// Where each parameter starts in its flat group (stages 1 and 2): the
  /// world's, or under expert parallelism the experts'.
  LogicalResult collectGroupOffsets() {
    if (stage != 1 && stage != 2)
      return success();
    if (!symbols.lookup<sched::FlatGroupOp>(kFlatGroupName))
      return module.emitError()
             << "stage " << stage << " needs the flat group @" << kFlatGroupName
             << " that zero-partition declares";
    for (StringRef name : {kFlatGroupName, kExpertFlatGroupName}) {
      auto group = symbols.lookup<sched::FlatGroupOp>(name);
      if (!group)
        continue;
      flatGroups.push_back(name);
      std::vector<int64_t> numels;
      sched::TensorOp first;
      for (auto member : group.getParams().getAsRange<FlatSymbolRefAttr>()) {
        FailureOr<sched::TensorOp> t = param(group, member.getValue());
        if (failed(t))
          return failure();
        first = first ? first : *t;
        numels.push_back(t->getNumElements());
      }
      FlatGroupLayout layout(numels, first.getShardGroupSize(worldSize));
      for (auto [i, member] :
           llvm::enumerate(group.getParams().getAsRange<FlatSymbolRefAttr>())) {
        groupOffset[member.getValue()] = layout.offsets[i];
        groupOf[member.getValue()] = name;
      }
    }
    return success();
  }

  /// The flat group holding `param` (stages 1 and 2).
  StringRef flatGroupOf(StringRef param) { return groupOf.lookup(param); }

  /// The communicator group of a collective on `owner`'s state: the
  /// expert-data-parallel ranks for expert state, the world otherwise.
  sched::CommGroupAttr groupFor(StringRef owner) {
    bool expert = false;
    if (auto t = tensor(owner))
      expert = t.getExpert();
    else if (owner == kExpertFlatGroupName)
      expert = true;
    return sched::CommGroupAttr::get(
        b.getContext(), expert ? sched::CommGroup::ExpertDataParallel
                               : sched::CommGroup::World);
  }

  /// The sched.tensor a logical parameter use names, or an error.
  FailureOr<sched::TensorOp> param(Operation *use, StringRef name) {
    auto t = tensor(name);
    if (!t || t.getRole() != Role::Param)
      return use->emitOpError()
             << "names @" << name
             << ", which is not a partitioned parameter (run zero-partition "
                "first)";
    return t;
  }

  /// Every op is created on the compute stream; zero-assign-streams moves
  /// collectives and copies.
  sched::StreamAttr computeStream() {
    return sched::StreamAttr::get(b.getContext(), sched::Stream::Compute);
  }

  /// Starts a collective and waits for it right away on the compute stream;
  /// zero-prefetch and zero-assign-streams move the pair apart.
  sched::WaitOp startAndWait(Location loc, Operation *start,
                             TypeRange results = {}) {
    return b.create<sched::WaitOp>(loc, results, start->getResult(0),
                                   computeStream());
  }

  //===--------------------------------------------------------------------===//
  // Expert parallelism's token exchanges
  //===--------------------------------------------------------------------===//

  /// One all-to-all over the expert-parallel group and its wait: `send`'s
  /// rows out, `recvRows` rows of the same width back. `bytes` is the
  /// busiest rank's traffic under the planning assumption, `worstBytes`
  /// under the worst routing (zeroc/Support/ExpertParallel.h).
  Value allToAll(Location loc, sched::AllToAllPurpose purpose, Value send,
                 int64_t recvRows, int64_t bytes, int64_t worstBytes) {
    auto sendType = cast<RankedTensorType>(send.getType());
    auto recvType = RankedTensorType::get({recvRows, sendType.getDimSize(1)},
                                          sendType.getElementType());
    auto start = b.create<sched::AllToAllStartOp>(
        loc, sched::TokenType::get(b.getContext()), send, purpose, recvType,
        uint64_t(bytes), uint64_t(worstBytes), sched::Stream::Compute,
        sched::CommGroup::ExpertParallel);
    return startAndWait(loc, start, {recvType}).getResult(0);
  }

  /// Around each model.moe_local_experts (zero-partition's split of a
  /// model.moe_experts): the dispatch to the ranks holding the rows'
  /// experts before it and the combine back after it; around its backward,
  /// the combine's gradient (back to the experts) and the dispatch's. The
  /// local experts run on the rows this rank receives, as many as the
  /// planning assumption gives the busiest rank.
  LogicalResult exchangeTokens(func::FuncOp micro) {
    auto forwards = llvm::to_vector(micro.getOps<model::MoeLocalExpertsOp>());
    if (forwards.empty())
      return success();
    if (expertParallelSize < 2)
      return forwards.front().emitOpError()
             << "runs this rank's experts, but the schedule has no expert "
                "parallelism ("
             << sched::kExpertParallelSizeAttr << " is " << expertParallelSize
             << ")";
    for (model::MoeLocalExpertsOp fwd : forwards) {
      Location loc = fwd.getLoc();
      auto rowsType = cast<RankedTensorType>(fwd.getRows().getType());
      int64_t sent = rowsType.getDimSize(0);
      int64_t experts = fwd.getNumExperts(), topK = fwd.getTopK();
      if (sent % topK != 0)
        return fwd.emitOpError() << "has " << sent << " rows, not a multiple "
                                 << "of top_k " << topK;
      if (fwd.getLocalExperts() * expertParallelSize != experts)
        return fwd.emitOpError()
               << "holds " << fwd.getLocalExperts() << " of " << experts
               << " experts, but an expert-parallel size of "
               << expertParallelSize << " gives each rank "
               << experts / expertParallelSize;
      // The planning assumption (uniform unless max_expert_share says)
      // and the worst case, as `zeroc stats --ep-size` reports them.
      double share = 1.0 / double(experts);
      if (auto attr = fwd.getMaxExpertShareAttr())
        share = attr.getValueAsDouble();
      auto receivedRows = [&](double s) {
        return expertParallelReceivedRows(sent, topK, experts,
                                          expertParallelSize,
                                          busiestExpertRows(s, sent));
      };
      int64_t received = receivedRows(share);
      int64_t worst = receivedRows(1.0 / double(topK));
      int64_t rowBytes =
          model::tensorBytes(rowsType) / std::max<int64_t>(sent, 1);
      int64_t bytes = std::max(sent, received) * rowBytes;
      int64_t worstBytes = std::max(sent, worst) * rowBytes;
      auto exchange = [&](sched::AllToAllPurpose purpose, Value send,
                          int64_t rows) {
        return allToAll(loc, purpose, send, rows, bytes, worstBytes);
      };

      b.setInsertionPoint(fwd);
      Value recv =
          exchange(sched::AllToAllPurpose::Dispatch, fwd.getRows(), received);
      auto savedType = RankedTensorType::get(
          {received * 2 *
           cast<RankedTensorType>(fwd.getW1().getType()).getDimSize(1)},
          rowsType.getElementType());
      auto local = b.create<model::MoeLocalExpertsOp>(
          loc, TypeRange{recv.getType(), savedType}, recv, fwd.getW1(),
          fwd.getW3(), fwd.getW2(), fwd.getNumExpertsAttr(), fwd.getTopKAttr(),
          fwd.getMaxExpertShareAttr());
      local->setDiscardableAttrs(fwd->getDiscardableAttrDictionary());
      Value back =
          exchange(sched::AllToAllPurpose::Combine, local.getResult(), sent);
      fwd.getResult().replaceAllUsesWith(back);
      for (Operation *user :
           llvm::make_early_inc_range(fwd.getSaved().getUsers())) {
        auto bwd = dyn_cast<model::MoeLocalExpertsBackwardOp>(user);
        if (!bwd)
          return user->emitOpError()
                 << "reads the saved state of model.moe_local_experts; only "
                    "its backward may";
        b.setInsertionPoint(bwd);
        Location at = bwd.getLoc();
        Value dout = exchange(sched::AllToAllPurpose::CombineGrad,
                              bwd.getDout(), received);
        auto grads = b.create<model::MoeLocalExpertsBackwardOp>(
            at,
            TypeRange{recv.getType(), bwd.getDw1().getType(),
                      bwd.getDw3().getType(), bwd.getDw2().getType()},
            recv, bwd.getW1(), bwd.getW3(), bwd.getW2(), dout,
            local.getSaved());
        grads->setDiscardableAttrs(bwd->getDiscardableAttrDictionary());
        Value drows = exchange(sched::AllToAllPurpose::DispatchGrad,
                               grads.getDrows(), sent);
        bwd.getDrows().replaceAllUsesWith(drows);
        bwd.getDw1().replaceAllUsesWith(grads.getDw1());
        bwd.getDw3().replaceAllUsesWith(grads.getDw3());
        bwd.getDw2().replaceAllUsesWith(grads.getDw2());
        bwd.erase();
      }
      fwd.erase();
    }
    return success();
  }

  //===--------------------------------------------------------------------===//
  // @micro_step
  //===--------------------------------------------------------------------===//

  LogicalResult lowerMicroStep(func::FuncOp micro) {
    Block &body = micro.getBody().front();
    Operation *seed = nullptr;
    for (Operation &op : body)
      if (isa<model::BackwardSeedOp>(op))
        seed = &op;
    if (!seed)
      return micro.emitError()
             << "@" << micro.getSymName()
             << " has no model.backward_seed: run zero-expand-training-step "
                "first";

    // Uses of one parameter may come from several param_refs (a tied
    // embedding and head): lower them together.
    llvm::MapVector<StringRef, SmallVector<model::ParamRefOp>> refsOf;
    for (auto ref : micro.getOps<model::ParamRefOp>())
      refsOf[ref.getParam()].push_back(ref);
    // What each parameter's accumulate_grad adds up, looked up per
    // parameter below.
    gradientsOf.clear();
    for (auto acc : micro.getOps<model::AccumulateGradOp>())
      gradientsOf[acc.getParam()].push_back(acc.getGrad());
    for (auto &[name, refs] : refsOf)
      if (failed(lowerParam(name, refs, seed)))
        return failure();
    for (auto acc : llvm::to_vector(micro.getOps<model::AccumulateGradOp>()))
      if (failed(lowerAccumulate(acc)))
        return failure();
    return success();
  }

  /// A replicated parameter is read in place. A sharded one is gathered once
  /// for its forward uses and once for the backward of the ops that used it,
  /// each gather released after the phase's last use. Like DeepSpeed, which
  /// fetches a module's parameters for its backward, a parameter is gathered
  /// for backward even when backward does not read it (a bias): around the
  /// backward ops that compute its gradient, found by dataflow from its
  /// model.accumulate_grad.
  LogicalResult lowerParam(StringRef name,
                           MutableArrayRef<model::ParamRefOp> refs,
                           Operation *seed) {
    FailureOr<sched::TensorOp> t = param(refs.front(), name);
    if (failed(t))
      return failure();
    if (!t->getSharded()) {
      for (model::ParamRefOp ref : refs) {
        b.setInsertionPoint(ref);
        auto read = b.create<sched::ReadOp>(
            ref.getLoc(), ref.getType(), ref.getParamAttr(), computeStream());
        ref.replaceAllUsesWith(read.getResult());
        ref.erase();
      }
      return success();
    }
    // Users in block order, split at the backward seed.
    Block *block = seed->getBlock();
    SmallVector<SmallVector<OpOperand *>, 2> phases(2);
    for (model::ParamRefOp ref : refs)
      for (OpOperand &use : ref->getUses()) {
        Operation *user = block->findAncestorOpInBlock(*use.getOwner());
        phases[user->isBeforeInBlock(seed) ? 0 : 1].push_back(&use);
      }
    auto blockOrder = [](Operation *a, Operation *c) {
      return a->isBeforeInBlock(c);
    };
    // Backward ops of the forward users, for a parameter backward does not
    // read.
    SmallVector<Operation *> backwardOfUsers;
    if (phases[1].empty())
      backwardOfUsers = gradientProducers(gradientsOf.lookup(name));
    Location loc = refs.front().getLoc();
    FlatSymbolRefAttr paramRef = refs.front().getParamAttr();
    RankedTensorType fullType = refs.front().getType();
    auto gatherAround = [&](Operation *first, Operation *last,
                            ArrayRef<OpOperand *> uses) {
      b.setInsertionPoint(first);
      auto shard = b.create<sched::ReadOp>(loc, t->getLocalType(worldSize),
                                           paramRef, computeStream());
      auto start = b.create<sched::AllGatherStartOp>(
          loc, sched::TokenType::get(b.getContext()), ValueRange{shard},
          b.getArrayAttr({paramRef}), computeStream(), groupFor(name));
      auto wait = startAndWait(loc, start, {fullType});
      for (OpOperand *use : uses)
        use->set(wait.getResult(0));
      b.setInsertionPointAfter(last);
      b.create<sched::ReleaseOp>(loc, wait.getResults(), computeStream());
    };
    for (auto &uses : phases) {
      if (uses.empty())
        continue;
      SmallVector<Operation *> users;
      for (OpOperand *use : uses)
        users.push_back(use->getOwner());
      llvm::sort(users, blockOrder);
      gatherAround(users.front(), users.back(), uses);
    }
    if (!backwardOfUsers.empty())
      gatherAround(backwardOfUsers.front(), backwardOfUsers.back(), {});
    for (model::ParamRefOp ref : refs)
      ref.erase();
    return success();
  }

  /// Per parameter, the gradients its model.accumulate_grad ops add up.
  llvm::StringMap<SmallVector<Value, 1>> gradientsOf;

  /// The ops that compute a parameter's gradient contributions, in block
  /// order: the producers of `pending` (what its model.accumulate_grad adds
  /// up), seen through the sums of several contributions.
  static SmallVector<Operation *>
  gradientProducers(SmallVector<Value, 1> pending) {
    SmallVector<Operation *> producers;
    while (!pending.empty()) {
      Operation *def = pending.pop_back_val().getDefiningOp();
      if (!def)
        continue;
      if (auto sum = dyn_cast<model::AddOp>(def); sum && sum->hasOneUse()) {
        pending.append({sum.getLhs(), sum.getRhs()});
        continue;
      }
      if (!llvm::is_contained(producers, def))
        producers.push_back(def);
    }
    llvm::sort(producers, [](Operation *a, Operation *c) {
      return a->isBeforeInBlock(c);
    });
    return producers;
  }

  LogicalResult lowerAccumulate(model::AccumulateGradOp acc) {
    FailureOr<sched::TensorOp> t = param(acc, acc.getParam());
    if (failed(t))
      return failure();
    Location loc = acc.getLoc();
    StringRef name = acc.getParam();
    Value grad = acc.getGrad();
    sched::StreamAttr zero = computeStream();
    b.setInsertionPoint(acc);
    switch (stage) {
    case 0:
      b.create<sched::AccumulateOp>(loc, grad, state(name, Role::Grad),
                                    b.getI64IntegerAttr(0), zero);
      break;
    case 1:
      b.create<sched::AccumulateOp>(
          loc, grad, state(flatGroupOf(name), Role::Grad),
          b.getI64IntegerAttr(groupOffset.lookup(name)), zero);
      break;
    default: {
      // Stage 2 reduces into the flat group's gradient partition, stage 3
      // into the parameter's own gradient shard.
      FlatSymbolRefAttr target = stage == 2
                                     ? state(flatGroupOf(name), Role::Grad)
                                     : state(name, Role::Grad);
      int64_t offset = stage == 2 ? groupOffset.lookup(name) : 0;
      auto start = b.create<sched::ReduceScatterStartOp>(
          loc, sched::TokenType::get(b.getContext()), ValueRange{grad},
          b.getArrayAttr({target}), b.getDenseI64ArrayAttr({offset}),
          allReduceAttr(), zero, groupFor(name));
      startAndWait(loc, start);
    }
    }
    acc.erase();
    return success();
  }

  //===--------------------------------------------------------------------===//
  // @optimizer_step
  //===--------------------------------------------------------------------===//

  LogicalResult lowerOptimizerStep(func::FuncOp optimizer) {
    auto updates = llvm::to_vector(optimizer.getOps<model::AdamUpdateOp>());
    if (updates.empty())
      return optimizer.emitError()
             << "@" << optimizer.getSymName() << " updates no parameter";
    for (model::AdamUpdateOp update : updates)
      if (failed(param(update, update.getParam())))
        return failure();

    Block &body = optimizer.getBody().front();
    b.setInsertionPointToStart(&body);
    Location loc = optimizer.getLoc();
    sched::StreamAttr zero = computeStream();

    // The gradient tensors the optimizer reads.
    SmallVector<Attribute> grads;
    if (stage == 1 || stage == 2)
      for (StringRef group : flatGroups)
        grads.push_back(state(group, Role::Grad));
    else
      for (model::AdamUpdateOp update : updates)
        grads.push_back(state(update.getParam(), Role::Grad));
    ArrayAttr gradList = b.getArrayAttr(grads);

    // Boundary reductions, before anything reads the gradients.
    if (stage == 0) {
      for (Attribute g : grads)
        startAndWait(loc, b.create<sched::AllReduceStartOp>(
                              loc, sched::TokenType::get(b.getContext()),
                              b.getArrayAttr({g}), zero,
                              groupFor(cast<FlatSymbolRefAttr>(g).getValue())));
    } else if (stage == 1) {
      for (StringRef group : flatGroups) {
        sched::TensorOp grad = states.stateOf(group, Role::Grad);
        FlatSymbolRefAttr name = ref(grad.getSymName());
        auto read =
            b.create<sched::ReadOp>(loc, grad.getTensorType(), name, zero);
        startAndWait(loc, b.create<sched::ReduceScatterStartOp>(
                              loc, sched::TokenType::get(b.getContext()),
                              ValueRange{read}, b.getArrayAttr({name}),
                              b.getDenseI64ArrayAttr({0}), allReduceAttr(),
                              zero, groupFor(group)));
      }
    }

    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (auto unscale = dyn_cast<model::UnscaleGradsOp>(op)) {
        b.setInsertionPoint(unscale);
        b.create<sched::UnscaleGradsOp>(
            unscale.getLoc(), gradList, unscale.getStaticLossScaleAttr(),
            unscale.getInitialScalePowerAttr(),
            unscale.getLossScaleWindowAttr(), unscale.getHysteresisAttr(),
            unscale.getMinLossScaleAttr(), zero);
        unscale.erase();
      } else if (auto clip = dyn_cast<model::ClipGradNormOp>(op)) {
        b.setInsertionPoint(clip);
        b.create<sched::ClipGradNormOp>(clip.getLoc(), gradList,
                                        clip.getMaxNormAttr(), zero);
        clip.erase();
      }
    }

    // The update itself: per parameter in stages 0 and 3, one update of the
    // flat group in stages 1 and 2.
    b.setInsertionPoint(updates.front());
    if (stage == 1 || stage == 2) {
      for (model::AdamUpdateOp update : updates)
        if (!sameSettings(update, updates.front()))
          return update.emitOpError()
                 << "differs from the optimizer settings of @"
                 << updates.front().getParam() << ": stage " << stage
                 << " updates all parameters as one flat group with one set "
                    "of settings";
      for (StringRef group : flatGroups)
        createAdam(updates.front(), group);
    } else {
      for (model::AdamUpdateOp update : updates) {
        b.setInsertionPoint(update);
        createAdam(update, update.getParam());
      }
    }
    b.setInsertionPointAfter(updates.back());

    // Share the updated parameters with the ranks that did not update them.
    if (stage == 1 || stage == 2) {
      for (StringRef group : flatGroups)
        startAndWait(loc,
                     b.create<sched::AllGatherUpdatesStartOp>(
                         loc, sched::TokenType::get(b.getContext()),
                         b.getArrayAttr({ref(group)}), zero, groupFor(group)));
    } else if (stage == 3) {
      for (model::AdamUpdateOp update : updates)
        if (!tensor(update.getParam()).getSharded())
          startAndWait(loc, b.create<sched::AllGatherUpdatesStartOp>(
                                loc, sched::TokenType::get(b.getContext()),
                                b.getArrayAttr({update.getParamAttr()}), zero,
                                groupFor(update.getParam())));
    }
    b.create<sched::ZeroGradsOp>(loc, gradList, zero);
    for (model::AdamUpdateOp update : updates)
      update.erase();
    return success();
  }

  static bool sameSettings(model::AdamUpdateOp a, model::AdamUpdateOp c) {
    return a.getLrAttr() == c.getLrAttr() &&
           a.getBeta1Attr() == c.getBeta1Attr() &&
           a.getBeta2Attr() == c.getBeta2Attr() &&
           a.getEpsAttr() == c.getEpsAttr() &&
           a.getWeightDecayAttr() == c.getWeightDecayAttr() &&
           a.getAdamw() == c.getAdamw() && a.getLamb() == c.getLamb() &&
           a.getMaxCoeffAttr() == c.getMaxCoeffAttr() &&
           a.getMinCoeffAttr() == c.getMinCoeffAttr() &&
           a.getNoBiasCorrection() == c.getNoBiasCorrection();
  }

  void createAdam(model::AdamUpdateOp update, StringRef owner) {
    sched::TensorOp master = states.stateOf(owner, Role::Master);
    FlatSymbolRefAttr masterRef =
        master ? ref(master.getSymName()) : FlatSymbolRefAttr();
    b.create<sched::AdamUpdateOp>(
        update.getLoc(), ref(owner), state(owner, Role::Grad), masterRef,
        state(owner, Role::ExpAvg), state(owner, Role::ExpAvgSq),
        update.getLrAttr(), update.getBeta1Attr(), update.getBeta2Attr(),
        update.getEpsAttr(), update.getWeightDecayAttr(), update.getAdamwAttr(),
        update.getLambAttr(), update.getMaxCoeffAttr(),
        update.getMinCoeffAttr(), update.getNoBiasCorrectionAttr(),
        sched::PlacementAttr::get(b.getContext(), Placement::Device),
        computeStream());
  }

  /// Stages 1-2 with reduce_scatter false reduce with all-reduce instead.
  UnitAttr allReduceAttr() {
    return !reduceScatter && (stage == 1 || stage == 2) ? b.getUnitAttr()
                                                        : UnitAttr();
  }

  ModuleOp module;
  int64_t stage;
  int64_t worldSize;
  int64_t expertParallelSize;
  bool reduceScatter;
  SymbolTable symbols;
  sched::StateTable states;
  OpBuilder b;
  llvm::StringMap<int64_t> groupOffset;
  llvm::StringMap<StringRef> groupOf;
  SmallVector<StringRef, 2> flatGroups;
};

struct ZeroInsertCollectives
    : zeroc::impl::ZeroInsertCollectivesBase<ZeroInsertCollectives> {
  using ZeroInsertCollectivesBase::ZeroInsertCollectivesBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto stage = module->getAttrOfType<IntegerAttr>(sched::kStageAttr);
    if (!stage) {
      module.emitError() << "module has no " << sched::kStageAttr
                         << ": run zero-partition first";
      return signalPassFailure();
    }
    func::FuncOp micro = sched::lookupPhase(module, sched::Phase::MicroStep);
    func::FuncOp optimizer =
        sched::lookupPhase(module, sched::Phase::OptimizerStep);
    if (!micro || !optimizer) {
      module.emitError() << "expected functions @micro_step and "
                            "@optimizer_step: run zero-expand-training-step "
                            "first";
      return signalPassFailure();
    }
    if (failed(CollectiveInserter(module, stage.getInt(), reduceScatter)
                   .run(micro, optimizer)))
      signalPassFailure();
  }
};

} // namespace
