module @m {
  model.param @w : tensor<8x4xf32> init <normal(0.02)>
  func.func @helper(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
    return %x : tensor<2x3x4xf32>
  }
  func.func @forward(%ids: tensor<2x3xi32>, %tgt: tensor<2x3xi32>) -> tensor<f32> {
    %w = model.param_ref @w : tensor<8x4xf32>
    %x = model.embedding %w, %ids : (tensor<8x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
    %y = func.call @helper(%x) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
    %l = model.linear %y, %w : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
    %loss = model.cross_entropy %l, %tgt : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
