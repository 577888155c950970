// An expert-parallel size that does not divide the world size: the
// expert-parallel groups partition the ranks.
// RUN: zeroc-opt %s -verify-diagnostics --zero-partition="stage=3 world-size=6 expert-parallel-size=4"

// expected-error @+1 {{expert-parallel-size 4 does not divide the world size 6: the expert-parallel groups partition the ranks}}
module {
  model.param @w : tensor<4xf32> init <zeros>
}
