// Every model zero-expand-training-step rejects, one case each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --allow-unregistered-dialect --zero-expand-training-step

// expected-error @+1 {{expected a function named 'forward' (or exactly one function), found 2 functions and none named 'forward'}}
module @two_functions {
  func.func @a() {
    return
  }
  func.func @b() {
    return
  }
}

// -----

// expected-error @+1 {{expected a function named 'forward' (or exactly one function), found 0 functions and none named 'forward'}}
module @no_function {
  model.param @w : tensor<4xf32> init <zeros>
}

// -----

module @external {
  // expected-error @+1 {{forward function @forward has no body to differentiate}}
  func.func private @forward(tensor<2x4xi32>, tensor<2x4xi32>) -> tensor<f32>
}

// -----

module @float_inputs {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  // expected-error @+1 {{forward function @forward must take (tokens, targets), two tensor<BATCHxSEQxi32> of one shape, found ('tensor<2x4x8xf32>', 'tensor<2x4xi32>')}}
  func.func @forward(%x: tensor<2x4x8xf32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %logits = model.linear %x, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module @one_input {
  // expected-error @+1 {{forward function @forward must take (tokens, targets), two tensor<BATCHxSEQxi32> of one shape, found ('tensor<2x4xi32>')}}
  func.func @forward(%tokens: tensor<2x4xi32>) -> tensor<f32> {
    %0 = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return %0 : tensor<f32>
  }
}

// -----

module @targets_shape {
  // expected-error @+1 {{forward function @forward must take (tokens, targets), two tensor<BATCHxSEQxi32> of one shape, found ('tensor<2x4xi32>', 'tensor<4x2xi32>')}}
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<4x2xi32>) -> tensor<f32> {
    %0 = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return %0 : tensor<f32>
  }
}

// -----

module @no_loss {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  // expected-error @+1 {{forward function @forward must return the loss, a single 'tensor<f32>', found ('tensor<2x4x8xf32>')}}
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<2x4x8xf32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    return %x : tensor<2x4x8xf32>
  }
}

// -----

module @two_blocks {
  // expected-error @+1 {{forward function @forward has 2 blocks, expected a single block}}
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %0 = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return %0 : tensor<f32>
  ^unreachable:
    return %0 : tensor<f32>
  }
}

// -----

// A backward op in the forward function has no backward of its own.
module @not_differentiable {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    // expected-error @+1 {{op 'model.gelu_backward' has no backward: it does not implement DifferentiableOpInterface}}
    %g = model.gelu_backward %x, %x : tensor<2x4x8xf32>
    %logits = model.linear %g, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module @unused_parameter {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  // expected-error @+1 {{parameter @extra.weight is never used by the forward function; remove it or use it}}
  model.param @extra.weight : tensor<8x8xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %logits = model.linear %x, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module @dead_parameter {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  // expected-error @+1 {{parameter @extra.weight does not affect the loss: none of its uses reaches the value the forward function returns; remove it or use it}}
  model.param @extra.weight : tensor<8x8xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %w = model.param_ref @extra.weight : tensor<8x8xf32>
    %dead = model.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %logits = model.linear %x, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

module @name_taken {
  // expected-error @+1 {{symbol @micro_step already exists; zero-expand-training-step defines it}}
  model.param @micro_step : tensor<32x8xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @micro_step : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %logits = model.linear %x, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Running the pass twice: @forward is gone and two functions are left.
// expected-error @+1 {{expected a function named 'forward' (or exactly one function), found 2 functions and none named 'forward'}}
module @expanded {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  func.func @micro_step(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %0 = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    return %0 : tensor<f32>
  }
  func.func @optimizer_step() {
    model.adam_update @wte {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, adamw}
    return
  }
}

// -----

module @other_terminator {
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %0 = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    // expected-error @+1 {{forward function @forward must end with func.return, found 'test.return'}}
    "test.return"(%0) : (tensor<f32>) -> ()
  }
}
