//===- ModelSpecialize.cpp - The config's micro-batch and precision -------===//
//
// Rewrites the forward function's types for the micro-batch and the element
// type the DeepSpeed config trains with (Passes.td describes the rules).
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"
#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace zeroc {
#define GEN_PASS_DEF_MODELSPECIALIZE
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;

namespace {

class ModelSpecialize
    : public zeroc::impl::ModelSpecializeBase<ModelSpecialize> {
public:
  using ModelSpecializeBase::ModelSpecializeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (microBatch < 0 || (microBatch == 0 && dtype == TrainingDType::Keep)) {
      if (microBatch < 0) {
        module.emitError() << "model-specialize: micro-batch must be at "
                              "least 1, found "
                           << static_cast<int64_t>(microBatch);
        signalPassFailure();
      }
      return;
    }
    FailureOr<Operation *> found = findForwardFunction(module);
    if (failed(found))
      return signalPassFailure();
    auto forward = dyn_cast<func::FuncOp>(*found);
    if (!forward || forward.getNumArguments() == 0 ||
        forward.getFunctionBody().empty()) {
      module.emitError() << "model-specialize: the forward function has no "
                            "token arguments to take the batch from";
      return signalPassFailure();
    }
    auto tokens = dyn_cast<RankedTensorType>(forward.getArgument(0).getType());
    if (!tokens || tokens.getRank() < 1) {
      forward.emitError() << "model-specialize: the first argument must be "
                             "the token ids, [batch, seq]; found "
                          << forward.getArgument(0).getType();
      return signalPassFailure();
    }
    int64_t modelBatch = tokens.getDimSize(0);
    Type element = elementType(module.getContext());

    // Parameters: their element type only.
    for (auto param : module.getOps<model::ParamOp>())
      param.setTypeAttr(TypeAttr::get(convert(param.getType(), element)));

    bool ok = true;
    auto specialize = [&](Value value, bool batched, bool keepElement) {
      auto type = dyn_cast<RankedTensorType>(value.getType());
      if (!type || type.getRank() == 0)
        return; // The loss.
      Type converted = keepElement ? type : convert(type, element);
      if (batched && microBatch > 0) {
        if (type.getDimSize(0) != modelBatch) {
          if (Operation *def = value.getDefiningOp())
            def->emitError()
                << "model-specialize: this value has no batch dimension "
                   "(its first dimension is "
                << type.getDimSize(0) << ", the model's batch is " << modelBatch
                << "), so the micro-batch cannot be changed";
          else
            forward.emitError() << "model-specialize: an argument has no "
                                   "batch dimension";
          ok = false;
          return;
        }
        SmallVector<int64_t> shape(type.getShape());
        shape[0] = microBatch;
        converted = RankedTensorType::get(
            shape, cast<RankedTensorType>(converted).getElementType());
      }
      value.setType(converted);
    };
    for (BlockArgument arg : forward.getArguments())
      specialize(arg, /*batched=*/true, /*keepElement=*/false);
    forward.walk([&](Operation *op) {
      // A router's statistics are per expert, not per sequence.
      bool batched = !isa<model::ParamRefOp, model::MoeRouterStatsOp>(op);
      // The router's weights and statistics are f32 whatever the model's
      // dtype.
      bool keepElement = isa<model::MoeRouterOp, model::MoeRouterStatsOp>(op);
      for (Value result : op->getResults())
        specialize(result, batched, keepElement);
    });
    if (!ok)
      return signalPassFailure();
    Block &body = forward.getFunctionBody().front();
    forward.setFunctionType(
        FunctionType::get(module.getContext(), body.getArgumentTypes(),
                          body.getTerminator()->getOperandTypes()));
  }

private:
  /// The element type to train with; null keeps each value's.
  Type elementType(MLIRContext *ctx) const {
    switch (dtype) {
    case TrainingDType::Keep:
      return {};
    case TrainingDType::F32:
      return Float32Type::get(ctx);
    case TrainingDType::BF16:
      return BFloat16Type::get(ctx);
    case TrainingDType::F16:
      return Float16Type::get(ctx);
    }
    llvm_unreachable("unknown TrainingDType");
  }

  /// `type` with its floating-point elements as `element` (when given).
  static Type convert(Type type, Type element) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !element || !isa<FloatType>(tensor.getElementType()))
      return type;
    return RankedTensorType::get(tensor.getShape(), element);
  }
};

} // namespace
