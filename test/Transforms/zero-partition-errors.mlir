// Every module zero-partition rejects, one case each (stage 1, where the
// flat group's names are taken too).
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-partition="stage=1 world-size=2"

// expected-error @+1 {{module is already partitioned (it has sched.world_size)}}
module @twice attributes {sched.stage = 1 : i64, sched.world_size = 2 : i64} {
  model.param @w : tensor<4xf32> init <zeros>
}

// -----

// expected-error @+1 {{zero-partition found no model.param to partition}}
module @no_params {
  func.func @f() {
    return
  }
}

// -----

// The flat group's name is taken by a parameter.
// expected-error @+1 {{a symbol is already named @zero.flat0}}
module @group_name {
  model.param @zero.flat0 : tensor<4xf32> init <zeros>
}

// -----

// The name of the flat group's first moment is taken by a function.
// expected-error @+1 {{cannot declare the exp_avg of @zero.flat0: a symbol is already named @zero.flat0.exp_avg}}
module @group_state_name {
  model.param @w : tensor<4xf32> init <zeros>
  func.func private @zero.flat0.exp_avg()
}
