//===- ExpandTrainingStep.cpp - Forward graph to one training step --------===//
//
// zero-expand-training-step: replaces the forward function with @micro_step
// (forward, backward built through DifferentiableOpInterface, gradient
// accumulation) and @optimizer_step (unscale, clip, Adam), the two phases of
// a DeepSpeed engine step.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

namespace zeroc {
#define GEN_PASS_DEF_EXPANDTRAININGSTEP
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc::model;

namespace {

constexpr llvm::StringLiteral kMicroStep = "micro_step";
constexpr llvm::StringLiteral kOptimizerStep = "optimizer_step";

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
};

struct ExpandTrainingStep
    : zeroc::impl::ExpandTrainingStepBase<ExpandTrainingStep> {
  using ExpandTrainingStepBase::ExpandTrainingStepBase;

  void runOnOperation() override;

private:
  LogicalResult checkOptions(ModuleOp module);
  FailureOr<ForwardInfo> analyzeForward(ModuleOp module);
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
  if (optimizer != "adam" && optimizer != "adamw")
    return emitError() << "unknown optimizer '" << optimizer.getValue()
                       << "', expected adam or adamw";
  if (!(gradientClipping >= 0.0) || !std::isfinite(gradientClipping))
    return emitError() << "clip must be >= 0 (0 disables clipping), found "
                       << gradientClipping.getValue();
  if (failed(AdamUpdateOp::verifySettings(emitError, lr, beta1, beta2, eps,
                                          weightDecay)))
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

  for (StringRef defined : {kMicroStep, kOptimizerStep}) {
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
  llvm::DenseSet<Operation *> reachesLoss = {info.ret};
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

// Walks the forward ops in reverse, asking each for its backward. A value
// used several times receives the sum of its uses' gradients; a parameter's
// gradient is complete when all its param_refs have contributed, and is
// accumulated right there, so a later pass can start reducing it while the
// backward goes on.
LogicalResult ExpandTrainingStep::buildMicroStep(ForwardInfo &info) {
  OpBuilder builder(info.ret);
  MLIRContext *ctx = builder.getContext();
  llvm::DenseMap<Value, Value> grads;
  auto addGradient = [&](Value value, Value grad, Location loc) {
    Value &sum = grads[value];
    sum = sum ? builder.create<AddOp>(loc, sum, grad).getResult() : grad;
  };

  Value loss = info.ret.getOperand(0);
  grads[loss] = builder.create<BackwardSeedOp>(
      loss.getLoc(), RankedTensorType::get({}, Float32Type::get(ctx)),
      builder.getI64IntegerAttr(gradAccum),
      lossScaling ? builder.getUnitAttr() : UnitAttr());

  llvm::DenseMap<StringAttr, Value> paramGrads;
  SmallVector<Value> resultGrads, operandGrads;
  for (Operation *op : llvm::reverse(info.ops)) {
    if (auto ref = dyn_cast<ParamRefOp>(op)) {
      Value grad = grads.lookup(ref.getResult());
      if (!grad)
        continue; // A use that does not reach the loss.
      StringAttr param = ref.getParamAttr().getAttr();
      Value &sum = paramGrads[param];
      sum = sum ? builder.create<AddOp>(ref.getLoc(), sum, grad).getResult()
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
    if (failed(cast<DifferentiableOpInterface>(op).buildBackward(
            builder, resultGrads, operandGrads)))
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
  auto step = builder.create<func::FuncOp>(loc, kOptimizerStep,
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
  UnitAttr adamw = optimizer == "adamw" ? builder.getUnitAttr() : UnitAttr();
  for (ParamOp param : info.params)
    builder.create<AdamUpdateOp>(
        param.getLoc(), FlatSymbolRefAttr::get(param.getSymNameAttr()),
        builder.getF64FloatAttr(lr), builder.getF64FloatAttr(beta1),
        builder.getF64FloatAttr(beta2), builder.getF64FloatAttr(eps),
        builder.getF64FloatAttr(weightDecay), adamw);
  builder.create<func::ReturnOp>(loc);
}

void ExpandTrainingStep::runOnOperation() {
  ModuleOp module = getOperation();
  if (failed(checkOptions(module)))
    return signalPassFailure();
  FailureOr<ForwardInfo> info = analyzeForward(module);
  if (failed(info) || failed(buildMicroStep(*info)))
    return signalPassFailure();
  info->func.setSymName(kMicroStep);
  buildOptimizerStep(*info);
}
