module {
  func.func @a(%ids: tensor<1x2xi32>) { return }
  func.func @b(%ids: tensor<1x2xi32>) { return }
}
