// Verifier errors of the mixture-of-experts ops, one case each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics

func.func @top_k_exceeds_experts(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>) {
  // expected-error @+1 {{top_k 3 exceeds the 2 experts}}
  %w, %i = model.moe_router %x, %g {top_k = 3 : i64} : (tensor<1x4x8xf32>, tensor<2x8xf32>) -> (tensor<1x4x3xf32>, tensor<1x4x3xi32>)
  return
}

// -----

func.func @gate_width(%x: tensor<1x4x8xf32>, %g: tensor<2x6xf32>) {
  // expected-error @+1 {{gate has shape [2, 6], expected [2, 8] ([num_experts, hidden of the input])}}
  %w, %i = model.moe_router %x, %g {top_k = 1 : i64} : (tensor<1x4x8xf32>, tensor<2x6xf32>) -> (tensor<1x4x1xf32>, tensor<1x4x1xi32>)
  return
}

// -----

func.func @weights_not_top_k(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>) {
  // expected-error @+1 {{weights has shape [1, 4, 1], expected [1, 4, 2] ([batch, seq] of the input, top_k)}}
  %w, %i = model.moe_router %x, %g {top_k = 2 : i64} : (tensor<1x4x8xf32>, tensor<2x8xf32>) -> (tensor<1x4x1xf32>, tensor<1x4x1xi32>)
  return
}

// -----

func.func @bf16_weights(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor of 32-bit float values}}
  %w, %i = model.moe_router %x, %g {top_k = 1 : i64} : (tensor<1x4x8xf32>, tensor<2x8xf32>) -> (tensor<1x4x1xbf16>, tensor<1x4x1xi32>)
  return
}

// -----

func.func @router_logits_shape(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>) {
  // expected-error @+1 {{saved state type 'tensor<1x4x3xf32>' does not match the expected 'tensor<1x4x2xf32>'}}
  %w, %i, %l = model.moe_router %x, %g {top_k = 1 : i64} : (tensor<1x4x8xf32>, tensor<2x8xf32>) -> (tensor<1x4x1xf32>, tensor<1x4x1xi32>, tensor<1x4x3xf32>)
  return
}

// -----

func.func @w2_layout(%x: tensor<1x4x8xf32>, %w: tensor<1x4x2xf32>, %i: tensor<1x4x2xi32>, %w1: tensor<3x5x8xf32>) {
  // expected-error @+1 {{w2 has shape [3, 5, 8], expected [3, 8, 5] ([num_experts, hidden, intermediate] of w1)}}
  %y = model.moe_experts %x, %w, %i, %w1, %w1, %w1 : (tensor<1x4x8xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<3x5x8xf32>, tensor<3x5x8xf32>, tensor<3x5x8xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

func.func @w1_hidden(%x: tensor<1x4x8xf32>, %w: tensor<1x4x2xf32>, %i: tensor<1x4x2xi32>, %w1: tensor<3x5x6xf32>, %w2: tensor<3x6x5xf32>) {
  // expected-error @+1 {{w1 [3, 5, 6] expects hidden size 6, but the input [1, 4, 8] has 8}}
  %y = model.moe_experts %x, %w, %i, %w1, %w1, %w2 : (tensor<1x4x8xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<3x5x6xf32>, tensor<3x5x6xf32>, tensor<3x6x5xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

func.func @mixed_dtypes(%x: tensor<1x4x8xf32>, %w: tensor<1x4x2xf32>, %i: tensor<1x4x2xi32>, %w1: tensor<3x5x8xbf16>, %w2: tensor<3x8x5xbf16>) {
  // expected-error @+1 {{w1 has element type 'bf16', expected 'f32' (the element type of input)}}
  %y = model.moe_experts %x, %w, %i, %w1, %w1, %w2 : (tensor<1x4x8xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<3x5x8xbf16>, tensor<3x5x8xbf16>, tensor<3x8x5xbf16>) -> tensor<1x4x8xf32>
  return
}

// -----

func.func @share_below_uniform(%x: tensor<1x4x8xf32>, %w: tensor<1x4x2xf32>, %i: tensor<1x4x2xi32>, %w1: tensor<4x5x8xf32>, %w2: tensor<4x8x5xf32>) {
  // expected-error @+1 {{max_expert_share 1.000000e-01 is out of range: the busiest expert receives from 1/num_experts (2.500000e-01, uniform) to 1/top_k (5.000000e-01, every token routed to it) of the dispatched rows}}
  %y = model.moe_experts %x, %w, %i, %w1, %w1, %w2 {max_expert_share = 0.1 : f64} : (tensor<1x4x8xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<4x5x8xf32>, tensor<4x5x8xf32>, tensor<4x8x5xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

func.func @experts_state_size(%x: tensor<1x4x8xf32>, %w: tensor<1x4x2xf32>, %i: tensor<1x4x2xi32>, %w1: tensor<4x5x8xf32>, %w2: tensor<4x8x5xf32>) {
  // expected-error @+1 {{saved state type 'tensor<100xf32>' does not match the expected 'tensor<144xf32>'}}
  %y, %s = model.moe_experts %x, %w, %i, %w1, %w1, %w2 : (tensor<1x4x8xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<4x5x8xf32>, tensor<4x5x8xf32>, tensor<4x8x5xf32>) -> (tensor<1x4x8xf32>, tensor<100xf32>)
  return
}

// -----

func.func @backward_state_not_forward(%x: tensor<1x4x8xf32>, %w: tensor<1x4x2xf32>, %i: tensor<1x4x2xi32>, %w1: tensor<4x5x8xf32>, %w2: tensor<4x8x5xf32>, %s: tensor<144xf32>) {
  // expected-error @+1 {{saved state must be the saved result of a 'model.moe_experts'}}
  %0:5 = model.moe_experts_backward %x, %w, %i, %w1, %w1, %w2, %x, %s : (tensor<1x4x8xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<4x5x8xf32>, tensor<4x5x8xf32>, tensor<4x8x5xf32>, tensor<1x4x8xf32>, tensor<144xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x2xf32>, tensor<4x5x8xf32>, tensor<4x5x8xf32>, tensor<4x8x5xf32>)
  return
}

// -----

func.func @router_backward_state(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>, %dw: tensor<1x4x1xf32>, %l: tensor<1x4x2xf32>, %i: tensor<1x4x1xi32>) {
  // expected-error @+1 {{saved state must be the saved result of a 'model.moe_router'}}
  %0:2 = model.moe_router_backward %x, %g, %dw, %l, %i : (tensor<1x4x8xf32>, tensor<2x8xf32>, tensor<1x4x1xf32>, tensor<1x4x2xf32>, tensor<1x4x1xi32>) -> (tensor<1x4x8xf32>, tensor<2x8xf32>)
  return
}

// -----

func.func @stats_shape(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>, %i: tensor<1x4x1xi32>) {
  // expected-error @+1 {{result has shape [2, 3], expected [2, 2] ([2, num_experts]: the counts, then the probability sums)}}
  %s = model.moe_router_stats %x, %g, %i : (tensor<1x4x8xf32>, tensor<2x8xf32>, tensor<1x4x1xi32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @stats_indices(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>, %i: tensor<1x5x1xi32>) {
  // expected-error @+1 {{indices has shape [1, 5, 1], expected [1, 4, 1] ([batch, seq] of the input, top_k)}}
  %s = model.moe_router_stats %x, %g, %i : (tensor<1x4x8xf32>, tensor<2x8xf32>, tensor<1x5x1xi32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @stats_top_k(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>, %i: tensor<1x4x3xi32>) {
  // expected-error @+1 {{top_k 3 exceeds the 2 experts}}
  %s = model.moe_router_stats %x, %g, %i : (tensor<1x4x8xf32>, tensor<2x8xf32>, tensor<1x4x3xi32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @load_balancing_no_stats(%l: tensor<f32>) {
  // expected-error @+1 {{needs the statistics of at least one router}}
  %r = model.moe_load_balancing_loss %l, {coefficient = 0.02 : f64, top_k = 1 : i64} : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @load_balancing_experts(%l: tensor<f32>, %a: tensor<2x4xf32>, %b: tensor<2x3xf32>) {
  // expected-error @+1 {{stats #1 has shape [2, 3], expected [2, 4] ([2, num_experts]: the counts, then the probability sums)}}
  %r = model.moe_load_balancing_loss %l, %a, %b {coefficient = 0.02 : f64, top_k = 1 : i64} : (tensor<f32>, tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<f32>
  return
}

// -----

func.func @load_balancing_top_k(%l: tensor<f32>, %a: tensor<2x4xf32>) {
  // expected-error @+1 {{top_k 5 exceeds the 4 experts}}
  %r = model.moe_load_balancing_loss %l, %a {coefficient = 0.02 : f64, top_k = 5 : i64} : (tensor<f32>, tensor<2x4xf32>) -> tensor<f32>
  return
}

// -----

func.func @load_balancing_coefficient(%l: tensor<f32>, %a: tensor<2x4xf32>) {
  // expected-error @+1 {{coefficient must be finite, found INF}}
  %r = model.moe_load_balancing_loss %l, %a {coefficient = 0x7FF0000000000000 : f64, top_k = 1 : i64} : (tensor<f32>, tensor<2x4xf32>) -> tensor<f32>
  return
}

// -----

func.func @stats_backward_shape(%x: tensor<1x4x8xf32>, %g: tensor<2x8xf32>, %ds: tensor<1x2xf32>) {
  // expected-error @+1 {{dstats has shape [1, 2], expected [2, 2]}}
  %0:2 = model.moe_router_stats_backward %x, %g, %ds : (tensor<1x4x8xf32>, tensor<2x8xf32>, tensor<1x2xf32>) -> (tensor<1x4x8xf32>, tensor<2x8xf32>)
  return
}
