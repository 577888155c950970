// Verifier errors of the expert-parallel mixture-of-experts ops, one case
// each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics

func.func @dispatch_rows(%x: tensor<1x8x64xf32>, %idx: tensor<1x8x2xi32>) {
  // expected-error @+1 {{rows has shape [8, 64], expected [16, 64] ([tokens * top_k, hidden], one row per routed slot)}}
  %rows = model.moe_dispatch %x, %idx {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<1x8x2xi32>) -> tensor<8x64xf32>
  return
}

// -----

func.func @dispatch_tokens(%x: tensor<1x8x64xf32>, %idx: tensor<1x4x2xi32>) {
  // expected-error @+1 {{indices [1, 4, 2] do not route the input's tokens [1, 8, 64]}}
  %rows = model.moe_dispatch %x, %idx {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<1x4x2xi32>) -> tensor<8x64xf32>
  return
}

// -----

func.func @dispatch_top_k(%x: tensor<1x8x64xf32>, %idx: tensor<1x8x2xi32>) {
  // expected-error @+1 {{top_k 2 exceeds the 1 experts}}
  %rows = model.moe_dispatch %x, %idx {num_experts = 1 : i64} : (tensor<1x8x64xf32>, tensor<1x8x2xi32>) -> tensor<16x64xf32>
  return
}

// -----

func.func @combine_weights(%rows: tensor<16x64xf32>, %idx: tensor<1x8x2xi32>, %w: tensor<1x8x1xf32>) {
  // expected-error @+1 {{weights has shape [1, 8, 1], expected [1, 8, 2] (the shape of the indices)}}
  %y = model.moe_combine %rows, %idx, %w {num_experts = 4 : i64} : (tensor<16x64xf32>, tensor<1x8x2xi32>, tensor<1x8x1xf32>) -> tensor<1x8x64xf32>
  return
}

// -----

func.func @combine_result(%rows: tensor<16x64xf32>, %idx: tensor<1x8x2xi32>) {
  // expected-error @+1 {{result has shape [1, 8, 32], expected [1, 8, 64] ([batch, seq] of the indices, hidden of the rows)}}
  %y = model.moe_combine %rows, %idx {num_experts = 4 : i64} : (tensor<16x64xf32>, tensor<1x8x2xi32>) -> tensor<1x8x32xf32>
  return
}

// -----

func.func @local_experts_count(%rows: tensor<16x64xf32>, %w1: tensor<3x96x64xf32>, %w2: tensor<3x64x96xf32>) {
  // expected-error @+1 {{holds 3 experts, which does not divide the 4 experts of the layer: each rank of the expert-parallel group holds num_experts / ep of them}}
  %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 4 : i64, top_k = 2 : i64} : (tensor<16x64xf32>, tensor<3x96x64xf32>, tensor<3x96x64xf32>, tensor<3x64x96xf32>) -> (tensor<16x64xf32>, tensor<3072xf32>)
  return
}

// -----

func.func @local_experts_saved(%rows: tensor<16x64xf32>, %w1: tensor<2x96x64xf32>, %w2: tensor<2x64x96xf32>) {
  // expected-error @+1 {{saved has shape [1024], expected [3072] (W1 v and W3 v of every row, rows x 2 x intermediate)}}
  %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 4 : i64, top_k = 2 : i64} : (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>) -> (tensor<16x64xf32>, tensor<1024xf32>)
  return
}

// -----

func.func @local_experts_share(%rows: tensor<16x64xf32>, %w1: tensor<2x96x64xf32>, %w2: tensor<2x64x96xf32>) {
  // expected-error @+1 {{max_expert_share 9.000000e-01 is out of range: from 1/num_experts (2.500000e-01, uniform) to 1/top_k (5.000000e-01)}}
  %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 4 : i64, top_k = 2 : i64, max_expert_share = 0.9 : f64} : (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>) -> (tensor<16x64xf32>, tensor<3072xf32>)
  return
}

// -----

func.func @local_backward_state(%rows: tensor<16x64xf32>, %w1: tensor<2x96x64xf32>, %w2: tensor<2x64x96xf32>, %saved: tensor<3072xf32>) {
  // expected-error @+1 {{saved must be the saved state of a model.moe_local_experts}}
  %drows, %dw1, %dw3, %dw2 = model.moe_local_experts_backward %rows, %w1, %w1, %w2, %rows, %saved : (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>, tensor<16x64xf32>, tensor<3072xf32>) -> (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>)
  return
}

// -----

func.func @combine_backward_drows(%dy: tensor<1x8x64xf32>, %rows: tensor<16x64xf32>, %w: tensor<1x8x2xf32>, %idx: tensor<1x8x2xi32>) {
  // expected-error @+1 {{drows has shape [8, 64], expected [16, 64] (the rows')}}
  %d, %dw = model.moe_combine_backward %dy, %rows, %w, %idx {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<16x64xf32>, tensor<1x8x2xf32>, tensor<1x8x2xi32>) -> (tensor<8x64xf32>, tensor<1x8x2xf32>)
  return
}
