//===- Passes.td - zeroc's lowering passes ----------------------*- tablegen -*-===//
//
// Every pass of the ZeRO pipeline, in pipeline order. Each is runnable alone
// in zeroc-opt and tested alone with lit; `zeroc` builds the pipeline from a
// DeepSpeed config.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TRANSFORMS_PASSES
#define ZEROC_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def ExpandTrainingStep : Pass<"zero-expand-training-step", "::mlir::ModuleOp"> {
  let summary = "Expand the forward graph into one training step";
  let description = [{
    Replaces `func.func @forward` with the two phases of a training step, the
    way DeepSpeed's engine runs them:

    * `func.func @micro_step(%tokens, %targets) -> tensor<f32>`: the forward
      ops, then the backward ops of every forward op in reverse order (built
      through `DifferentiableOpInterface`), ending with one
      `model.accumulate_grad` per parameter. The runtime calls it
      `grad-accum` times per step. The backward seed
      (`model.backward_seed`) is `1 / grad-accum`, times the dynamic loss
      scale under fp16, so the accumulated gradient is the gradient of the
      mean loss over the global batch.
    * `func.func @optimizer_step()`: under fp16 loss scaling, unscale and
      check for overflow (`model.unscale_grads`); with a clipping norm,
      `model.clip_grad_norm`; then one `model.adam_update` per parameter.

    Gradients of a value used several times are summed; a tied parameter
    receives the sum of its uses' gradients.
  }];
  let dependentDialects = ["::zeroc::model::ModelDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"gradAccum", "grad-accum", "int64_t", /*default=*/"1",
           "Micro-steps per optimizer step (gradient_accumulation_steps)">,
    Option<"lossScaling", "loss-scaling", "bool", /*default=*/"false",
           "fp16 loss scaling: seed backward with the loss scale and "
           "unscale before the optimizer">,
    Option<"staticLossScale", "loss-scale", "double", /*default=*/"0.0",
           "Static loss scale; 0 selects dynamic loss scaling">,
    Option<"initialScalePower", "initial-scale-power", "int64_t",
           /*default=*/"16", "Dynamic loss scaling starts at 2^power">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t",
           /*default=*/"1000", "Steps without overflow before the scale grows">,
    Option<"hysteresis", "hysteresis", "int64_t", /*default=*/"2",
           "Overflows tolerated before the scale shrinks">,
    Option<"minLossScale", "min-loss-scale", "double", /*default=*/"1.0",
           "Lower bound of the dynamic loss scale">,
    Option<"gradientClipping", "clip", "double", /*default=*/"0.0",
           "Global gradient-norm clipping; 0 disables it">,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adam (L2 weight decay added to the gradient) or adamw "
           "(decoupled weight decay)">,
    Option<"lr", "lr", "double", /*default=*/"1.0e-3", "Learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam beta2">,
    Option<"eps", "eps", "double", /*default=*/"1.0e-8", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "Weight decay">,
  ];
}

#endif // ZEROC_TRANSFORMS_PASSES
