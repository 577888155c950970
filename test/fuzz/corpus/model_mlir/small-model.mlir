// A small model for the ZeRO pass tests: an embedding that the head reuses,
// a linear layer with bias; 84 parameters.
module @small {
  model.param @e : tensor<16x4xf32> init <normal(0.02)>
  model.param @w : tensor<4x4xf32> init <normal(0.02)>
  model.param @b : tensor<4xf32> init <zeros>
  func.func @forward(%tok: tensor<1x2xi32>, %tgt: tensor<1x2xi32>) -> tensor<f32> {
    %e = model.param_ref @e : tensor<16x4xf32>
    %x = model.embedding %e, %tok : (tensor<16x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %w = model.param_ref @w : tensor<4x4xf32>
    %b = model.param_ref @b : tensor<4xf32>
    %h = model.linear %x, %w, %b : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    %logits = model.linear %h, %e : (tensor<1x2x4xf32>, tensor<16x4xf32>) -> tensor<1x2x16xf32>
    %loss = model.cross_entropy %logits, %tgt : (tensor<1x2x16xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
