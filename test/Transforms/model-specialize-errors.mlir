// model-specialize refuses a forward whose values do not carry the model's
// batch as their first dimension, rather than guess which dimension it is.
// RUN: not zeroc-opt %s --model-specialize="micro-batch=4" 2>&1 | FileCheck %s

// CHECK: error: model-specialize: an argument has no batch dimension
// CHECK: error: model-specialize: this value has no batch dimension (its first dimension is 3, the model's batch is 2), so the micro-batch cannot be changed

module {
  model.param @wpe : tensor<4x8xf32> init <normal(0.01)>
  model.param @proj.weight : tensor<32x8xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<3x4xi32>) -> tensor<f32> {
    %wpe = model.param_ref @wpe : tensor<4x8xf32>
    %p = model.position_embedding %wpe : (tensor<4x8xf32>) -> tensor<3x4x8xf32>
    %w = model.param_ref @proj.weight : tensor<32x8xf32>
    %logits = model.linear %p, %w : (tensor<3x4x8xf32>, tensor<32x8xf32>) -> tensor<3x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<3x4x32xf32>, tensor<3x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
