module {
  model.param @w : tensor<8x3xf32> init <normal(0.02)>
  func.func @forward(%ids: tensor<1x2xi32>, %x: tensor<1x2x4xf32>) -> tensor<1x2x8xf32> {
    %w = model.param_ref @w : tensor<8x3xf32>
    %y = model.linear %x, %w : (tensor<1x2x4xf32>, tensor<8x3xf32>) -> tensor<1x2x8xf32>
    return %y : tensor<1x2x8xf32>
  }
}
