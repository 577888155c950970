// Every module zero-insert-collectives rejects, one case each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-insert-collectives

// expected-error @+1 {{module has no sched.stage: run zero-partition first}}
module @not_partitioned {
  model.param @w : tensor<4xf32> init <zeros>
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// expected-error @+1 {{expected functions @micro_step and @optimizer_step: run zero-expand-training-step first}}
module @no_optimizer_step attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() {
    return
  }
}

// -----

// expected-error @+1 {{expected functions @micro_step and @optimizer_step: run zero-expand-training-step first}}
module @only_forward attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @forward() {
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @no_seed attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  sched.tensor @w.grad : tensor<4xf32> grad of @w on device
  // expected-error @+1 {{@micro_step has no model.backward_seed: run zero-expand-training-step first}}
  func.func @micro_step() {
    %w = model.param_ref @w : tensor<4xf32>
    model.accumulate_grad @w, %w : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// A model.param left behind (or declared after zero-partition) is not
// partitioned state.
module @unpartitioned_param attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  model.param @w : tensor<4xf32> init <zeros>
  func.func @micro_step() {
    %seed = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    // expected-error @+1 {{'model.param_ref' op names @w, which is not a partitioned parameter (run zero-partition first)}}
    %w = model.param_ref @w : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// expected-error @+1 {{stage 2 needs the flat group @zero.flat0 that zero-partition declares}}
module @no_flat_group attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() {
    %seed = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @no_update attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4xf32> param on device
  func.func @micro_step() {
    %seed = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return
  }
  // expected-error @+1 {{@optimizer_step updates no parameter}}
  func.func @optimizer_step() {
    return
  }
}

// -----

// Stages 1 and 2 update the flat group with one set of settings.
module @mixed_settings attributes {sched.stage = 1 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @b : tensor<4xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 8 padded 8
  sched.tensor @zero.flat0.grad : tensor<8xf32> grad of @zero.flat0 on device
  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on device
  func.func @micro_step() {
    %seed = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    model.adam_update @a {adamw, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.1 : f64}
    // expected-error @+1 {{'model.adam_update' op differs from the optimizer settings of @a: stage 1 updates all parameters as one flat group with one set of settings}}
    model.adam_update @b {adamw, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64}
    return
  }
}

// -----

module @mixed_adamw attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @b : tensor<4xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 8 padded 8
  sched.tensor @zero.flat0.grad : tensor<8xf32> grad of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on device
  func.func @micro_step() {
    %seed = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    model.adam_update @a {adamw, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64}
    // expected-error @+1 {{'model.adam_update' op differs from the optimizer settings of @a: stage 2 updates}}
    model.adam_update @b {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64}
    return
  }
}

// -----

// bias_correction is one of the flat group's settings.
module @mixed_bias_correction attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @b : tensor<4xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 8 padded 8
  sched.tensor @zero.flat0.grad : tensor<8xf32> grad of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on device
  func.func @micro_step() {
    %seed = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    model.adam_update @a {adamw, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64}
    // expected-error @+1 {{'model.adam_update' op differs from the optimizer settings of @a: stage 2 updates}}
    model.adam_update @b {adamw, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, no_bias_correction}
    return
  }
}
