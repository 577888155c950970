// Backward ops carry the location of the forward op they differentiate;
// gradient sums, the location of the value whose uses they sum; gradient
// accumulation, that of the param_ref that completed the gradient; Adam, that
// of the parameter.
// RUN: zeroc-opt %s --zero-expand-training-step --mlir-print-debuginfo --mlir-print-local-scope | FileCheck %s

// CHECK-LABEL: func.func @micro_step
// CHECK: model.backward_seed {{.*}} loc("loss")
// CHECK: model.cross_entropy_backward {{.*}} loc("loss")
// CHECK: model.linear_grad_input {{.*}} loc("lm_head")
// CHECK: model.linear_grad_weight {{.*}} loc("lm_head")
// CHECK: model.accumulate_grad @lm_head.weight, {{.*}} loc("lm_head.weight")
// CHECK: model.gelu_backward {{.*}} loc("h.0.mlp.act")
// CHECK: model.linear_grad_input {{.*}} loc("h.0.mlp.c_fc")
// CHECK: model.linear_grad_weight {{.*}} loc("h.0.mlp.c_fc")
// CHECK: model.linear_grad_bias {{.*}} loc("h.0.mlp.c_fc")
// CHECK: model.add {{.*}} loc("wte")
// CHECK: model.accumulate_grad @h.0.mlp.c_fc.bias, {{.*}} loc("h.0.mlp.c_fc.bias")
// CHECK: model.accumulate_grad @h.0.mlp.c_fc.weight, {{.*}} loc("h.0.mlp.c_fc.weight")
// CHECK: model.embedding_backward {{.*}} loc("wte")
// CHECK: model.accumulate_grad @wte.weight, {{.*}} loc("wte.weight")
// CHECK-LABEL: func.func @optimizer_step
// CHECK: model.adam_update @wte.weight {{.*}} loc("wte.weight.decl")
module @locations {
  model.param @wte.weight : tensor<32x8xf32> init <normal(0.02)> loc("wte.weight.decl")
  model.param @h.0.mlp.c_fc.weight : tensor<8x8xf32> init <normal(0.02)>
  model.param @h.0.mlp.c_fc.bias : tensor<8xf32> init <zeros>
  model.param @lm_head.weight : tensor<32x8xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte.weight : tensor<32x8xf32> loc("wte.weight")
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32> loc("wte")
    %w = model.param_ref @h.0.mlp.c_fc.weight : tensor<8x8xf32> loc("h.0.mlp.c_fc.weight")
    %b = model.param_ref @h.0.mlp.c_fc.bias : tensor<8xf32> loc("h.0.mlp.c_fc.bias")
    %f = model.linear %x, %w, %b : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> loc("h.0.mlp.c_fc")
    %g = model.gelu %f : tensor<2x4x8xf32> loc("h.0.mlp.act")
    %r = model.add %x, %g : tensor<2x4x8xf32> loc("h.0.mlp.residual")
    %head = model.param_ref @lm_head.weight : tensor<32x8xf32> loc("lm_head.weight")
    %logits = model.linear %r, %head : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32> loc("lm_head")
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32> loc("loss")
    return %loss : tensor<f32>
  }
}
