// Stages 0 and 3 name each parameter's state "<param>.<role>"; a symbol that
// already has such a name is an error on the parameter, whichever comes
// first.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-partition="stage=0"
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-partition="stage=3 world-size=2"

module @param_named_like_state {
  // expected-error @+1 {{cannot declare the grad of @w: a symbol is already named @w.grad}}
  model.param @w : tensor<4xf32> init <zeros>
  model.param @w.grad : tensor<4xf32> init <zeros>
}

// -----

module @state_declared_first {
  model.param @w.exp_avg_sq : tensor<4xf32> init <zeros>
  // expected-error @+1 {{cannot declare the exp_avg_sq of @w: a symbol is already named @w.exp_avg_sq}}
  model.param @w : tensor<4xf32> init <zeros>
}

// -----

module @function_named_like_master {
  // expected-error @+1 {{cannot declare the master of @w: a symbol is already named @w.master}}
  model.param @w : tensor<4xbf16> init <zeros>
  func.func private @w.master()
}
