module {
  model.param @w : tensor<4x4xf32> init <zeros>
  func.func @forward(%ids: tensor<1x2xi32>) -> tensor<f32> {
    %w = model.param_ref @w : tensor<4x4xf32
  }
}
