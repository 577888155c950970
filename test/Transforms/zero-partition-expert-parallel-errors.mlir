// Every module zero-partition refuses under expert parallelism, one case
// each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-partition="stage=3 world-size=4 expert-parallel-size=2"

// An expert count the expert-parallel size does not divide.
module {
  model.param @w1 : tensor<3x8x4xf32> init <normal(0.02)>
  model.param @w3 : tensor<3x8x4xf32> init <normal(0.02)>
  model.param @w2 : tensor<3x4x8xf32> init <normal(0.02)>
  func.func @forward(%x: tensor<1x2x4xf32>, %w: tensor<1x2x2xf32>, %i: tensor<1x2x2xi32>) -> tensor<1x2x4xf32> {
    %w1 = model.param_ref @w1 : tensor<3x8x4xf32>
    %w3 = model.param_ref @w3 : tensor<3x8x4xf32>
    %w2 = model.param_ref @w2 : tensor<3x4x8xf32>
    // expected-error @+1 {{has 3 experts, which the expert-parallel size 2 does not divide: each rank holds num_experts / ep of them}}
    %y = model.moe_experts %x, %w, %i, %w1, %w3, %w2 : (tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xi32>, tensor<3x8x4xf32>, tensor<3x8x4xf32>, tensor<3x4x8xf32>) -> tensor<1x2x4xf32>
    return %y : tensor<1x2x4xf32>
  }
}

// -----

// Experts' weights that are not parameters read as such.
module {
  model.param @w1 : tensor<4x8x4xf32> init <normal(0.02)>
  model.param @w2 : tensor<4x4x8xf32> init <normal(0.02)>
  func.func @forward(%x: tensor<1x2x4xf32>, %w: tensor<1x2x2xf32>, %i: tensor<1x2x2xi32>, %w3: tensor<4x8x4xf32>) -> tensor<1x2x4xf32> {
    %w1 = model.param_ref @w1 : tensor<4x8x4xf32>
    %w2 = model.param_ref @w2 : tensor<4x4x8xf32>
    // expected-error @+1 {{w3 is not a model.param_ref: expert parallelism splits the experts' parameters, so they must be read as parameters}}
    %y = model.moe_experts %x, %w, %i, %w1, %w3, %w2 : (tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xi32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x4x8xf32>) -> tensor<1x2x4xf32>
    return %y : tensor<1x2x4xf32>
  }
}

// -----

// An expert parameter read by something else: it would read every expert.
module {
  model.param @w1 : tensor<4x8x4xf32> init <normal(0.02)>
  model.param @w3 : tensor<4x8x4xf32> init <normal(0.02)>
  model.param @w2 : tensor<4x4x8xf32> init <normal(0.02)>
  func.func @forward(%x: tensor<1x2x4xf32>, %w: tensor<1x2x2xf32>, %i: tensor<1x2x2xi32>) -> (tensor<1x2x4xf32>, tensor<4x8x4xf32>) {
    %w1 = model.param_ref @w1 : tensor<4x8x4xf32>
    %w3 = model.param_ref @w3 : tensor<4x8x4xf32>
    %w2 = model.param_ref @w2 : tensor<4x4x8xf32>
    %y = model.moe_experts %x, %w, %i, %w1, %w3, %w2 : (tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xi32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x4x8xf32>) -> tensor<1x2x4xf32>
    // expected-error @+1 {{reads the expert parameter @w1, which expert parallelism splits over ranks; only model.moe_experts and its backward may read it}}
    %z = model.add %w1, %w1 : tensor<4x8x4xf32>
    return %y, %z : tensor<1x2x4xf32>, tensor<4x8x4xf32>
  }
}

// -----

// Expert parallelism for a dense model.
// expected-error @+1 {{expert-parallel-size 2 asks for expert parallelism, but the model has no model.moe_experts}}
module {
  model.param @w : tensor<4xf32> init <zeros>
  func.func @forward() -> tensor<4xf32> {
    %w = model.param_ref @w : tensor<4xf32>
    return %w : tensor<4xf32>
  }
}

// -----

// A backward whose expert weights are not the forward's parameters.
module {
  model.param @w1 : tensor<4x8x4xf32> init <normal(0.02)>
  model.param @w3 : tensor<4x8x4xf32> init <normal(0.02)>
  model.param @w2 : tensor<4x4x8xf32> init <normal(0.02)>
  func.func @forward(%x: tensor<1x2x4xf32>, %w: tensor<1x2x2xf32>, %i: tensor<1x2x2xi32>, %other: tensor<4x8x4xf32>, %dy: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    %w1 = model.param_ref @w1 : tensor<4x8x4xf32>
    %w3 = model.param_ref @w3 : tensor<4x8x4xf32>
    %w2 = model.param_ref @w2 : tensor<4x4x8xf32>
    %y, %s = model.moe_experts %x, %w, %i, %w1, %w3, %w2 : (tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xi32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x4x8xf32>) -> (tensor<1x2x4xf32>, tensor<80xf32>)
    // expected-error @+1 {{w1 is not an expert parameter of a model.moe_experts read by a model.param_ref: expert parallelism splits both together}}
    %dx, %dw, %dw1, %dw3, %dw2 = model.moe_experts_backward %x, %w, %i, %other, %w3, %w2, %dy, %s : (tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xi32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x4x8xf32>, tensor<1x2x4xf32>, tensor<80xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x4x8xf32>)
    return %dx : tensor<1x2x4xf32>
  }
}

// -----

// An expert parameter marked as a padded table: only a vocabulary's
// tables are padded.
module {
  // expected-error @+1 {{@w1 is an expert parameter with valid_rows: only a vocabulary's tables are padded}}
  model.param @w1 : tensor<4x8x4xf32> init <normal(0.02)> {valid_rows = 3 : i64}
  model.param @w3 : tensor<4x8x4xf32> init <normal(0.02)>
  model.param @w2 : tensor<4x4x8xf32> init <normal(0.02)>
  func.func @forward(%x: tensor<1x2x4xf32>, %w: tensor<1x2x2xf32>, %i: tensor<1x2x2xi32>) -> tensor<1x2x4xf32> {
    %w1 = model.param_ref @w1 : tensor<4x8x4xf32>
    %w3 = model.param_ref @w3 : tensor<4x8x4xf32>
    %w2 = model.param_ref @w2 : tensor<4x4x8xf32>
    %y = model.moe_experts %x, %w, %i, %w1, %w3, %w2 : (tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xi32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x4x8xf32>) -> tensor<1x2x4xf32>
    return %y : tensor<1x2x4xf32>
  }
}
