//===- ExpandTrainingStep.cpp - Forward graph to one training step --------===//
//
// zero-expand-training-step: replaces the forward function with @micro_step
// (forward, backward built through DifferentiableOpInterface, gradient
// accumulation, optionally recomputing each transformer layer before its
// backward) and @optimizer_step (unscale, clip, Adam), the two phases of a
// DeepSpeed engine step.
//
//===----------------------------------------------------------------------===//

#include "sched/SchedOps.h"
#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>

namespace zeroc {
#define GEN_PASS_DEF_EXPANDTRAININGSTEP
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc::model;

namespace {

/// The functions it defines, named as the sched dialect's phases.
StringRef phaseFunction(zeroc::sched::Phase phase) {
  return zeroc::sched::stringifyPhase(phase);
}
/// Names the checkpointed layer on each recomputed op. Besides telling the
/// reader (and the plan) what is recomputed, it keeps CSE from folding a
/// recomputed op into the forward op it duplicates.
constexpr llvm::StringLiteral kRecomputeAttr = "model.recompute";

/// A transformer layer whose activations are recomputed for its backward.
struct CheckpointedLayer {
  std::string name;
  /// What is emitted again before the layer's backward, in program order:
  /// the layer's ops that reach the loss, but for those selective
  /// recomputation keeps, and the param_refs they all read.
  SmallVector<Operation *> recomputed;
  /// The forward values the layer's backward must not read: the results of
  /// the layer's recomputed ops and of the param_refs it reads. Its inputs
  /// are the other values its ops read; the kept ops' results stay
  /// readable.
  llvm::DenseSet<Value> forwardValues;
};

/// What the backward needs to know about the forward function, gathered and
/// checked before anything is rewritten.
struct ForwardInfo {
  func::FuncOp func;
  func::ReturnOp ret;
  /// The forward ops in program order, the terminator excluded.
  SmallVector<Operation *> ops;
  /// Parameters in declaration order.
  SmallVector<ParamOp> params;
  /// Per parameter name, its param_refs whose value reaches the loss: the
  /// contributions its gradient is the sum of.
  llvm::DenseMap<StringAttr, unsigned> contributions;
  /// The forward ops whose results reach the loss.
  llvm::DenseSet<Operation *> reachesLoss;
  /// With recompute: the checkpointed layers, and the one of each forward
  /// op that belongs to one (param_refs excluded).
  SmallVector<CheckpointedLayer> layers;
  llvm::DenseMap<Operation *, unsigned> checkpointedLayerOf;
  /// The ops of checkpointed layers whose outputs selective recomputation
  /// keeps from forward.
  llvm::DenseSet<Operation *> kept;
};

struct ExpandTrainingStep
    : zeroc::impl::ExpandTrainingStepBase<ExpandTrainingStep> {
  using ExpandTrainingStepBase::ExpandTrainingStepBase;

  void runOnOperation() override;

private:
  LogicalResult checkOptions(ModuleOp module);
  FailureOr<ForwardInfo> analyzeForward(ModuleOp module);
  void yieldSavedStates(ForwardInfo &info);
  void findCheckpointedLayers(ModuleOp module, ForwardInfo &info);
  LogicalResult buildMicroStep(ForwardInfo &info);
  void buildOptimizerStep(ForwardInfo &info);
};

} // namespace

LogicalResult ExpandTrainingStep::checkOptions(ModuleOp module) {
  auto emitError = [&] {
    return module.emitError() << "zero-expand-training-step: ";
  };
  if (gradAccum < 1)
    return emitError() << "grad-accum must be >= 1, found "
                       << gradAccum.getValue();
  if (recomputeEvery < 1)
    return emitError() << "recompute-every must be >= 1, found "
                       << recomputeEvery.getValue();
  if (!(gradientClipping >= 0.0) || !std::isfinite(gradientClipping))
    return emitError() << "clip must be >= 0 (0 disables clipping), found "
                       << gradientClipping.getValue();
  if (failed(AdamUpdateOp::verifySettings(emitError, lr, beta1, beta2, eps,
                                          weightDecay)))
    return failure();
  if (optimizer == zeroc::AdamMode::Lamb &&
      failed(AdamUpdateOp::verifyLambSettings(emitError, maxCoeff, minCoeff)))
    return failure();
  if (lossScaling && failed(UnscaleGradsOp::verifySettings(
                         emitError, staticLossScale, initialScalePower,
                         lossScaleWindow, hysteresis, minLossScale)))
    return failure();
  return success();
}

/// A token tensor: static [batch, seq] of i32.
static bool isTokenTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() == 2 && tensor.hasStaticShape() &&
         tensor.getElementType().isSignlessInteger(32);
}

FailureOr<ForwardInfo> ExpandTrainingStep::analyzeForward(ModuleOp module) {
  FailureOr<Operation *> found = zeroc::findForwardFunction(module);
  if (failed(found))
    return failure();
  ForwardInfo info;
  info.func = cast<func::FuncOp>(*found);
  func::FuncOp func = info.func;
  StringRef name = func.getSymName();
  if (func.isExternal())
    return func.emitError()
           << "forward function @" << name << " has no body to differentiate";
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "forward function @" << name << " has " << func.getBlocks().size()
           << " blocks, expected a single block";

  FunctionType type = func.getFunctionType();
  if (type.getNumInputs() != 2 || !isTokenTensor(type.getInput(0)) ||
      type.getInput(0) != type.getInput(1))
    return func.emitError()
           << "forward function @" << name
           << " must take (tokens, targets), two tensor<BATCHxSEQxi32> of "
              "one shape, found ("
           << type.getInputs() << ")";
  auto loss = RankedTensorType::get({}, Float32Type::get(func.getContext()));
  if (type.getNumResults() != 1 || type.getResult(0) != loss)
    return func.emitError()
           << "forward function @" << name << " must return the loss, a single "
           << Type(loss) << ", found (" << type.getResults() << ")";

  for (StringRef defined :
       {phaseFunction(zeroc::sched::Phase::MicroStep),
        phaseFunction(zeroc::sched::Phase::OptimizerStep)}) {
    Operation *existing = SymbolTable::lookupSymbolIn(module, defined);
    if (existing && existing != func)
      return existing->emitError()
             << "symbol @" << defined
             << " already exists; zero-expand-training-step defines it";
  }

  // Every op must be differentiable, whether or not it reaches the loss: a
  // forward op without a backward is a gap in the dialect, not in the model.
  Block &body = func.getBody().front();
  info.ret = dyn_cast<func::ReturnOp>(body.back());
  if (!info.ret)
    return body.back().emitError() << "forward function @" << name
                                   << " must end with func.return, found '"
                                   << body.back().getName() << "'";
  for (Operation &op : body.without_terminator()) {
    if (!isa<ParamRefOp, DifferentiableOpInterface>(op))
      return op.emitError() << "op '" << op.getName()
                            << "' has no backward: it does not implement "
                               "DifferentiableOpInterface";
    info.ops.push_back(&op);
  }

  // The ops whose results reach the loss, found backward from the return.
  llvm::DenseSet<Operation *> &reachesLoss = info.reachesLoss;
  reachesLoss.insert(info.ret);
  for (Operation *op : llvm::reverse(info.ops))
    if (llvm::any_of(op->getUsers(),
                     [&](Operation *user) { return reachesLoss.count(user); }))
      reachesLoss.insert(op);

  llvm::DenseSet<StringAttr> used;
  for (Operation *op : info.ops)
    if (auto ref = dyn_cast<ParamRefOp>(op)) {
      used.insert(ref.getParamAttr().getAttr());
      if (reachesLoss.count(op))
        ++info.contributions[ref.getParamAttr().getAttr()];
    }
  for (ParamOp param : module.getOps<ParamOp>()) {
    if (!used.count(param.getSymNameAttr()))
      return param.emitError()
             << "parameter @" << param.getSymName()
             << " is never used by the forward function; remove it or use it";
    if (!info.contributions.count(param.getSymNameAttr()))
      return param.emitError()
             << "parameter @" << param.getSymName()
             << " does not affect the loss: none of its uses reaches the "
                "value the forward function returns; remove it or use it";
    info.params.push_back(param);
  }
  return info;
}

// Forward ops whose backward reads internal state (normalization statistics,
// attention probabilities) are rebuilt to yield it as a result; their
// buildBackward passes that value to the backward op, so forward and backward
// are linked by dataflow (and liveness sees the state), never by location.
// Ops that do not reach the loss have no backward and keep their form.
void ExpandTrainingStep::yieldSavedStates(ForwardInfo &info) {
  for (Operation *&op : info.ops) {
    auto keeps = dyn_cast<SavesForBackwardOpInterface>(op);
    if (!keeps || !keeps.getSavedStateType() || keeps.getSavedState() ||
        !info.reachesLoss.contains(op))
      continue;
    OpBuilder builder(op);
    OperationState state(op->getLoc(), op->getName());
    state.addOperands(op->getOperands());
    state.propertiesAttr = op->getPropertiesAsAttribute();
    state.addAttributes(op->getDiscardableAttrDictionary().getValue());
    state.addTypes(op->getResultTypes());
    state.addTypes(keeps.getSavedStateType());
    Operation *yielding = builder.create(state);
    op->replaceAllUsesWith(
        yielding->getResults().take_front(op->getNumResults()));
    info.reachesLoss.erase(op);
    info.reachesLoss.insert(yielding);
    op->erase();
    op = yielding;
  }
}

// Attributes the forward ops to layers exactly as computeModelStats does, so
// that a checkpointed segment is a row of `zeroc stats`: layers rank in
// parameter declaration order; a param_ref belongs to its parameter's layer,
// any other op to the latest layer among its operands', or, reading none, to
// a pseudo-layer of the inputs that ranks last and is never checkpointed.
void ExpandTrainingStep::findCheckpointedLayers(ModuleOp module,
                                                ForwardInfo &info) {
  llvm::StringMap<unsigned> rank;
  SmallVector<std::string> names;
  auto rankOf = [&](StringRef param) {
    std::string layer = zeroc::layerOfParameter(param);
    auto [it, inserted] = rank.try_emplace(layer, names.size());
    if (inserted)
      names.push_back(layer);
    return it->second;
  };
  for (ParamOp param : module.getOps<ParamOp>())
    rankOf(param.getSymName());
  const unsigned inputs = names.size();

  llvm::DenseMap<Value, unsigned> layerOfValue;
  llvm::DenseMap<unsigned, unsigned> checkpointOfRank;
  for (Operation *op : info.ops) {
    unsigned layer;
    if (auto ref = dyn_cast<ParamRefOp>(op)) {
      layer = rankOf(ref.getParam());
    } else {
      std::optional<unsigned> latest;
      for (Value operand : op->getOperands()) {
        auto it = layerOfValue.find(operand);
        if (it != layerOfValue.end())
          latest = std::max(latest.value_or(0), it->second);
      }
      layer = latest.value_or(inputs);
    }
    for (Value result : op->getResults())
      layerOfValue[result] = layer;
    if (layer == inputs)
      continue;
    std::optional<int64_t> number = zeroc::layerNumber(names[layer]);
    if (!number || *number % recomputeEvery != 0)
      continue;

    auto [it, inserted] =
        checkpointOfRank.try_emplace(layer, info.layers.size());
    if (inserted)
      info.layers.push_back({names[layer], {}, {}});
    CheckpointedLayer &checkpoint = info.layers[it->second];
    checkpoint.forwardValues.insert(op->result_begin(), op->result_end());
    if (isa<ParamRefOp>(op))
      continue; // Re-read where the layer's ops read it, below.
    info.checkpointedLayerOf[op] = it->second;
    if (!info.reachesLoss.count(op))
      continue; // No backward, nothing to recompute.
    // Its backward, built from the recomputation, reads the parameters
    // again, kept or not.
    for (Value operand : op->getOperands())
      if (auto ref = operand.getDefiningOp<ParamRefOp>()) {
        checkpoint.forwardValues.insert(ref.getResult());
        if (!llvm::is_contained(checkpoint.recomputed, ref.getOperation()))
          checkpoint.recomputed.push_back(ref);
      }
    auto keeps = dyn_cast<SavesForBackwardOpInterface>(op);
    if (recompute == zeroc::RecomputeMode::Selective && keeps &&
        keeps.isKeptBySelectiveRecompute()) {
      for (Value result : op->getResults())
        checkpoint.forwardValues.erase(result);
      info.kept.insert(op);
      continue;
    }
    checkpoint.recomputed.push_back(op);
  }
  // A param_ref read by the layer may precede the layer's first op.
  for (CheckpointedLayer &checkpoint : info.layers)
    llvm::stable_sort(checkpoint.recomputed, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
}

/// A broken promise of recomputation (by this pass, or by a buildBackward that
/// reaches past its op's operands and results), never a user error.
static LogicalResult readsForwardValue(Operation *at, Value value,
                                       StringRef layer) {
  InFlightDiagnostic diag =
      at->emitError() << "internal error: the backward of checkpointed layer '"
                      << layer
                      << "' reads a forward value of the layer instead of "
                         "its recomputation";
  diag.attachNote(value.getLoc()) << "the forward value";
  return diag;
}

// Walks the forward ops in reverse, asking each for its backward. A value
// used several times receives the sum of its uses' gradients; a parameter's
// gradient is complete when all its param_refs have contributed, and is
// accumulated right there, so a later pass can start reducing it while the
// backward goes on. A checkpointed layer is recomputed before its first
// backward op, and its ops are differentiated through their recomputation;
// gradients stay keyed by the forward values, so the accumulation is the
// same with or without recomputation.
LogicalResult ExpandTrainingStep::buildMicroStep(ForwardInfo &info) {
  OpBuilder builder(info.ret);
  MLIRContext *ctx = builder.getContext();
  llvm::DenseMap<Value, Value> grads;
  auto addGradient = [&](Value value, Value grad, Location loc) {
    Value &sum = grads[value];
    sum = sum ? builder.create<AddOp>(loc, sum, grad, /*in_place=*/true)
                    .getResult()
              : grad;
  };

  Value loss = info.ret.getOperand(0);
  grads[loss] = builder.create<BackwardSeedOp>(
      loss.getLoc(), RankedTensorType::get({}, Float32Type::get(ctx)),
      builder.getI64IntegerAttr(gradAccum),
      lossScaling ? builder.getUnitAttr() : UnitAttr());

  llvm::DenseMap<StringAttr, Value> paramGrads;
  SmallVector<Value> resultGrads, operandGrads;

  // Per checkpointed layer, forward values to their recomputation, filled
  // when the layer's backward begins.
  SmallVector<IRMapping> recomputation(info.layers.size());
  SmallVector<SmallVector<Operation *>> clones(info.layers.size());
  SmallVector<bool> emitted(info.layers.size(), false);
  auto emitRecomputation = [&](unsigned index) {
    emitted[index] = true;
    CheckpointedLayer &layer = info.layers[index];
    auto name = builder.getStringAttr(layer.name);
    for (Operation *op : layer.recomputed) {
      clones[index].push_back(builder.clone(*op, recomputation[index]));
      clones[index].back()->setAttr(kRecomputeAttr, name);
    }
  };
  // The recomputation and the backward of a layer read its inputs, never
  // its forward values, which must die in forward. A buildBackward reaching
  // past its op's operands and results would break that.
  auto checkBackward = [&](unsigned index, Operation *forward,
                           Operation *first) -> LogicalResult {
    const CheckpointedLayer &layer = info.layers[index];
    for (Operation *op = first; op != info.ret; op = op->getNextNode())
      for (Value operand : op->getOperands())
        if (layer.forwardValues.contains(operand))
          return readsForwardValue(op, operand, layer.name);
    for (Value grad : operandGrads)
      if (grad && layer.forwardValues.contains(grad))
        return readsForwardValue(forward, grad, layer.name);
    return success();
  };

  for (Operation *op : llvm::reverse(info.ops)) {
    if (auto ref = dyn_cast<ParamRefOp>(op)) {
      Value grad = grads.lookup(ref.getResult());
      if (!grad)
        continue; // A use that does not reach the loss.
      StringAttr param = ref.getParamAttr().getAttr();
      Value &sum = paramGrads[param];
      sum = sum ? builder
                      .create<AddOp>(ref.getLoc(), sum, grad,
                                     /*in_place=*/true)
                      .getResult()
                : grad;
      if (--info.contributions[param] == 0)
        builder.create<AccumulateGradOp>(ref.getLoc(), ref.getParamAttr(), sum);
      continue;
    }

    resultGrads.clear();
    for (Value result : op->getResults())
      resultGrads.push_back(grads.lookup(result));
    if (llvm::all_of(resultGrads, [](Value g) { return !g; }))
      continue; // Does not reach the loss.
    operandGrads.clear();
    Operation *before = info.ret->getPrevNode();
    Operation *differentiated = op;
    Operation *keptCopy = nullptr;
    std::optional<unsigned> layer;
    if (auto it = info.checkpointedLayerOf.find(op);
        it != info.checkpointedLayerOf.end()) {
      layer = it->second;
      if (!emitted[*layer])
        emitRecomputation(*layer);
      if (info.kept.contains(op)) {
        // Selective: a copy reading the recomputed operands, never run;
        // its results become the kept forward results below.
        IRMapping operands = recomputation[*layer];
        keptCopy = builder.clone(*op, operands);
        differentiated = keptCopy;
      } else {
        differentiated = recomputation[*layer].lookupOrNull(op);
      }
      if (!differentiated)
        return op->emitError()
               << "internal error: op of checkpointed layer '"
               << info.layers[*layer].name
               << "' receives a gradient but was not recomputed";
    }
    if (failed(cast<DifferentiableOpInterface>(differentiated)
                   .buildBackward(builder, resultGrads, operandGrads)))
      return failure();
    if (keptCopy) {
      keptCopy->replaceAllUsesWith(op->getResults());
      keptCopy->erase();
    }
    if (layer && failed(checkBackward(*layer, op, before->getNextNode())))
      return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError()
             << "buildBackward returned " << operandGrads.size()
             << " operand gradients, expected " << op->getNumOperands();
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads)) {
      if (!grad)
        continue;
      if (grad.getType() != operand.getType())
        return op->emitOpError()
               << "buildBackward returned a gradient of type " << grad.getType()
               << " for an operand of type " << operand.getType();
      addGradient(operand, grad, operand.getLoc());
    }
  }

  // Like PyTorch's checkpoint, which stops recomputing once it has what
  // backward needs, drop the recomputed ops that backward does not read (a
  // layer's last projection and residual add).
  for (SmallVector<Operation *> &layer : clones)
    for (Operation *op : llvm::reverse(layer))
      if (op->use_empty())
        op->erase();

  // Every contribution counted in analyzeForward arrives unless an op's
  // buildBackward left a float operand without a gradient.
  for (ParamOp param : info.params)
    if (info.contributions[param.getSymNameAttr()] != 0)
      return param.emitError()
             << "parameter @" << param.getSymName()
             << " received no gradient from some of its uses: an op's "
                "buildBackward returned no gradient for it";
  return success();
}

void ExpandTrainingStep::buildOptimizerStep(ForwardInfo &info) {
  OpBuilder builder(info.func.getContext());
  builder.setInsertionPointAfter(info.func);
  Location loc = info.func.getLoc();
  auto step = builder.create<func::FuncOp>(
      loc, phaseFunction(zeroc::sched::Phase::OptimizerStep),
      builder.getFunctionType({}, {}));
  builder.setInsertionPointToStart(step.addEntryBlock());
  if (lossScaling)
    builder.create<UnscaleGradsOp>(loc,
                                   builder.getF64FloatAttr(staticLossScale),
                                   builder.getI64IntegerAttr(initialScalePower),
                                   builder.getI64IntegerAttr(lossScaleWindow),
                                   builder.getI64IntegerAttr(hysteresis),
                                   builder.getF64FloatAttr(minLossScale));
  if (gradientClipping > 0.0)
    builder.create<ClipGradNormOp>(loc,
                                   builder.getF64FloatAttr(gradientClipping));
  UnitAttr adamw =
      optimizer == zeroc::AdamMode::AdamW ? builder.getUnitAttr() : UnitAttr();
  bool isLamb = optimizer == zeroc::AdamMode::Lamb;
  UnitAttr lamb = isLamb ? builder.getUnitAttr() : UnitAttr();
  FloatAttr maxCoeffAttr = isLamb ? builder.getF64FloatAttr(maxCoeff) : nullptr;
  FloatAttr minCoeffAttr = isLamb ? builder.getF64FloatAttr(minCoeff) : nullptr;
  UnitAttr noBiasCorrection =
      biasCorrection ? UnitAttr() : builder.getUnitAttr();
  for (ParamOp param : info.params)
    builder.create<AdamUpdateOp>(
        param.getLoc(), FlatSymbolRefAttr::get(param.getSymNameAttr()),
        builder.getF64FloatAttr(lr), builder.getF64FloatAttr(beta1),
        builder.getF64FloatAttr(beta2), builder.getF64FloatAttr(eps),
        builder.getF64FloatAttr(weightDecay), adamw, lamb, maxCoeffAttr,
        minCoeffAttr, noBiasCorrection);
  builder.create<func::ReturnOp>(loc);
}

void ExpandTrainingStep::runOnOperation() {
  ModuleOp module = getOperation();
  if (failed(checkOptions(module)))
    return signalPassFailure();
  FailureOr<ForwardInfo> info = analyzeForward(module);
  if (failed(info))
    return signalPassFailure();
  yieldSavedStates(*info);
  if (recompute != zeroc::RecomputeMode::None)
    findCheckpointedLayers(module, *info);
  if (failed(buildMicroStep(*info)))
    return signalPassFailure();
  info->func.setSymName(phaseFunction(zeroc::sched::Phase::MicroStep));
  buildOptimizerStep(*info);
}
