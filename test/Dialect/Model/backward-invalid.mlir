// Every verifier error of the backward and training-step ops, one case each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics

func.func @f(%dy: tensor<16x4xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{dy must be rank 3 ([batch, seq, hidden]), found rank 2 [16, 4]}}
  %0 = model.embedding_backward %dy, %ids : (tensor<16x4xf32>, tensor<2x8xi32>) -> tensor<10x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>, %ids: tensor<6xi32>) {
  // expected-error @+1 {{ids must be rank 2 ([batch, seq]), found rank 1 [6]}}
  %0 = model.embedding_backward %dy, %ids : (tensor<2x3x4xf32>, tensor<6xi32>) -> tensor<10x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{result must be rank 2 ([vocab, hidden]), found rank 3 [10, 4, 1]}}
  %0 = model.embedding_backward %dy, %ids : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<10x4x1xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>, %ids: tensor<3x2xi32>) {
  // expected-error @+1 {{ids has shape [3, 2], expected [2, 3] ([batch, seq] of dy)}}
  %0 = model.embedding_backward %dy, %ids : (tensor<2x3x4xf32>, tensor<3x2xi32>) -> tensor<10x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{result has shape [10, 5], expected [10, 4] ([vocab, hidden] with the hidden size of dy)}}
  %0 = model.embedding_backward %dy, %ids : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<10x5xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{result #0 has element type 'bf16', expected 'f32' (the element type of dy)}}
  %0 = model.embedding_backward %dy, %ids : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<10x4xbf16>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>, %ids: tensor<2x3xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer values, but got 'tensor<2x3xf32>'}}
  %0 = model.embedding_backward %dy, %ids : (tensor<2x3x4xf32>, tensor<2x3xf32>) -> tensor<10x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<6x4xf32>) {
  // expected-error @+1 {{dy must be rank 3 ([batch, seq, hidden]), found rank 2 [6, 4]}}
  %0 = model.position_embedding_backward %dy : (tensor<6x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>) {
  // expected-error @+1 {{result must be rank 2 ([max_positions, hidden]), found rank 1 [32]}}
  %0 = model.position_embedding_backward %dy : (tensor<2x3x4xf32>) -> tensor<32xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x16x4xf32>) {
  // expected-error @+1 {{sequence length 16 of dy exceeds the 8 positions of the result}}
  %0 = model.position_embedding_backward %dy : (tensor<2x16x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8x4xf32>) {
  // expected-error @+1 {{result hidden size 5 does not match the hidden size 4 of dy}}
  %0 = model.position_embedding_backward %dy : (tensor<2x8x4xf32>) -> tensor<8x5xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8x4xf16>) {
  // expected-error @+1 {{result #0 has element type 'f32', expected 'f16' (the element type of dy)}}
  %0 = model.position_embedding_backward %dy : (tensor<2x8x4xf16>) -> tensor<8x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{dy must be rank >= 2 ([..., out_features]), found rank 1}}
  %0 = model.linear_grad_input %dy, %w : (tensor<8xf32>, tensor<8x16xf32>) -> tensor<16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8xf32>, %w: tensor<8x16x1xf32>) {
  // expected-error @+1 {{weight must be rank 2 ([out_features, in_features]), found rank 3 [8, 16, 1]}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x8xf32>, tensor<8x16x1xf32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x4xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{weight [8, 16] expects 8 output features, but dy [2, 3, 4] has 4}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x3x4xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{result has shape [2, 3, 8], expected [2, 3, 16] (dy with its last dimension replaced by in_features)}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>, %w: tensor<8x16xbf16>) {
  // expected-error @+1 {{operand #1 has element type 'bf16', expected 'f32' (the element type of dy)}}
  %0 = model.linear_grad_input %dy, %w : (tensor<2x3x8xf32>, tensor<8x16xbf16>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<8xf32>, %x: tensor<2x16xf32>) {
  // expected-error @+1 {{dy must be rank >= 2 ([..., out_features]), found rank 1}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<8xf32>, tensor<2x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8xf32>, %x: tensor<f32>) {
  // expected-error @+1 {{input must be rank >= 2 ([..., in_features]), found rank 0}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<2x8xf32>, tensor<f32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>, %x: tensor<2x4x16xf32>) {
  // expected-error @+1 {{input has shape [2, 4, 16], expected [2, 3, 16] (the leading dimensions of dy)}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<2x3x8xf32>, tensor<2x4x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>, %x: tensor<2x3x16xf32>) {
  // expected-error @+1 {{result has shape [16, 8], expected [8, 16] ([out_features, in_features] of dy and the input)}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<2x3x8xf32>, tensor<2x3x16xf32>) -> tensor<16x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>, %x: tensor<2x3x16xf16>) {
  // expected-error @+1 {{operand #1 has element type 'f16', expected 'f32' (the element type of dy)}}
  %0 = model.linear_grad_weight %dy, %x : (tensor<2x3x8xf32>, tensor<2x3x16xf16>) -> tensor<8x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<8xf32>) {
  // expected-error @+1 {{dy must be rank >= 2 ([..., out_features]), found rank 1}}
  %0 = model.linear_grad_bias %dy : (tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>) {
  // expected-error @+1 {{result has shape [3, 8], expected [8] ([out_features] of dy)}}
  %0 = model.linear_grad_bias %dy : (tensor<2x3x8xf32>) -> tensor<3x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x8xf32>) {
  // expected-error @+1 {{result #0 has element type 'bf16', expected 'f32' (the element type of dy)}}
  %0 = model.linear_grad_bias %dy : (tensor<2x3x8xf32>) -> tensor<8xbf16>
  return
}

// -----

func.func @f(%x: tensor<f32>, %g: tensor<16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<f32>, tensor<16xf32>, tensor<f32>, tensor<1xf32>) -> (tensor<f32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<8xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{weight has shape [8], expected [16] ([hidden], the last dimension of the input)}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<8xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dweight has shape [3, 16], expected [16] ([hidden], the last dimension of the input)}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<3x16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dbias has shape [15], expected [16] ([hidden], the last dimension of the input)}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>, tensor<15xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %dy: tensor<3x2x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dy type 'tensor<3x2x16xf32>' does not match the input type 'tensor<2x3x16xf32>'}}
  %0:3 = model.layernorm_backward %x, %g, %dy, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<3x2x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dinput type 'tensor<2x3x16xbf16>' does not match the input type 'tensor<2x3x16xf32>'}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xbf16>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{epsilon must be positive, found -1}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s {epsilon = -1.0 : f64} : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf16>, %s: tensor<1xf32>) {
  // expected-error @+1 {{operand #1 has element type 'f16', expected 'f32' (the element type of the input)}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf16>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<16xf16>, tensor<16xf16>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dweight has shape [8], expected [16] ([hidden], the last dimension of the input)}}
  %0:2 = model.rmsnorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<8xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %dy: tensor<2x3x16xf16>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dy type 'tensor<2x3x16xf16>' does not match the input type 'tensor<2x3x16xf32>'}}
  %0:2 = model.rmsnorm_backward %x, %g, %dy, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf16>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{epsilon must be positive, found 0}}
  %0:2 = model.rmsnorm_backward %x, %g, %x, %s {epsilon = 0.0 : f64} : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3xf32>, %dy: tensor<2x4xf32>) {
  // expected-error @+1 {{'model.gelu_backward' op requires the same type for all operands and results}}
  %0 = "model.gelu_backward"(%x, %dy) : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3xf32>, %dy: tensor<2x3xf16>) {
  // expected-error @+1 {{'model.silu_backward' op requires the same type for all operands and results}}
  %0 = "model.silu_backward"(%x, %dy) : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%dy: tensor<6x16xf32>) {
  // expected-error @+1 {{dy must be rank 3 ([batch, seq, heads * head_dim]), found rank 2 [6, 16]}}
  %0 = model.rotary_backward %dy {head_dim = 8 : i64} : tensor<6x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x15xf32>) {
  // expected-error @+1 {{head_dim must be even (RoPE rotates pairs), found 5}}
  %0 = model.rotary_backward %dy {head_dim = 5 : i64} : tensor<2x3x15xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x12xf32>) {
  // expected-error @+1 {{last dimension 12 is not a multiple of head_dim 8}}
  %0 = model.rotary_backward %dy {head_dim = 8 : i64} : tensor<2x3x12xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x16xf32>) {
  // expected-error @+1 {{theta must be positive, found 0}}
  %0 = model.rotary_backward %dy {head_dim = 8 : i64, theta = 0.0 : f64} : tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x16xf32>) {
  // expected-error @+1 {{attribute 'head_dim' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = model.rotary_backward %dy {head_dim = -2 : i64} : tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x3x16xf32>, %x: tensor<2x3x16xf16>) {
  // expected-error @+1 {{'model.rotary_backward' op requires the same type for all operands and results}}
  %0 = "model.rotary_backward"(%x) {head_dim = 8 : i64} : (tensor<2x3x16xf16>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%q: tensor<6x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{q must be rank 3 ([batch, seq, heads * head_dim]), found rank 2 [6, 16]}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<6x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{q width 16 is not a multiple of num_heads 3}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 3 : i64, num_kv_heads = 3 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{num_heads 4 is not a multiple of num_kv_heads 3}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 3 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x16xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{k has shape [2, 3, 16], expected [2, 3, 8] (num_kv_heads 2 x head_dim 4 for batch and seq of q)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x4x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{v has shape [2, 4, 8], expected [2, 3, 8] (num_kv_heads 2 x head_dim 4 for batch and seq of q)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x4x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x4x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x8xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{out has shape [2, 3, 8], expected [2, 3, 16] (the shape of q)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<3x2x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dout has shape [3, 2, 16], expected [2, 3, 16] (the shape of q)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<3x2x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dq has shape [2, 3, 8], expected [2, 3, 16] (the shape of q)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dk has shape [2, 3, 16], expected [2, 3, 8] (the shape of k)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{dv has shape [2, 3, 4], expected [2, 3, 8] (the shape of v)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x4xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{result #2 has element type 'bf16', expected 'f32' (the element type of q)}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xbf16>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %o: tensor<2x3x16xf32>, %do: tensor<2x3x16xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{attribute 'num_kv_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %s {num_heads = 4 : i64, num_kv_heads = 0 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<1xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @f(%l: tensor<6x10xf32>, %t: tensor<2x3xi32>, %s: tensor<f32>) {
  // expected-error @+1 {{logits must be rank 3 ([batch, seq, vocab]), found rank 2 [6, 10]}}
  %0 = model.cross_entropy_backward %l, %t, %s : (tensor<6x10xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<6x10xf32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<6xi32>, %s: tensor<f32>) {
  // expected-error @+1 {{targets must be rank 2 ([batch, seq]), found rank 1 [6]}}
  %0 = model.cross_entropy_backward %l, %t, %s : (tensor<2x3x10xf32>, tensor<6xi32>, tensor<f32>) -> tensor<2x3x10xf32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<3x2xi32>, %s: tensor<f32>) {
  // expected-error @+1 {{targets has shape [3, 2], expected [2, 3] ([batch, seq] of the logits)}}
  %0 = model.cross_entropy_backward %l, %t, %s : (tensor<2x3x10xf32>, tensor<3x2xi32>, tensor<f32>) -> tensor<2x3x10xf32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<2x3xi32>, %s: tensor<f32>) {
  // expected-error @+1 {{classes 0 must be from 1 to the logits' last dimension, 10}}
  %0 = model.cross_entropy_backward %l, %t, %s {classes = 0 : i64} : (tensor<2x3x10xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<2x3x10xf32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<2x3xi32>, %s: tensor<f32>) {
  // expected-error @+1 {{result type 'tensor<2x3x10xbf16>' does not match the logits type 'tensor<2x3x10xf32>'}}
  %0 = model.cross_entropy_backward %l, %t, %s : (tensor<2x3x10xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<2x3x10xbf16>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<2x3xi32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{operand #2 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %0 = model.cross_entropy_backward %l, %t, %s : (tensor<2x3x10xf32>, tensor<2x3xi32>, tensor<1xf32>) -> tensor<2x3x10xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{attribute 'micro_steps' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = model.backward_seed {micro_steps = 0 : i64} : tensor<f32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values, but got 'tensor<f16>'}}
  %0 = model.backward_seed {micro_steps = 2 : i64} : tensor<f16>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'model.backward_seed' op requires attribute 'micro_steps'}}
  %0 = model.backward_seed : tensor<f32>
  return
}

// -----

func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{@missing does not name a model.param in the enclosing module}}
  model.accumulate_grad @missing, %g : tensor<4xf32>
  return
}

// -----

func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{@f is not a model.param}}
  model.accumulate_grad @f, %g : tensor<4xf32>
  return
}

// -----

model.param @w : tensor<4x8xf32> init <zeros>
func.func @f(%g: tensor<8x4xf32>) {
  // expected-error @+1 {{gradient type 'tensor<8x4xf32>' does not match the type 'tensor<4x8xf32>' of parameter @w}}
  model.accumulate_grad @w, %g : tensor<8x4xf32>
  return
}

// -----

model.param @w : tensor<4x8xf32> init <zeros>
func.func @f(%g: tensor<4x8xbf16>) {
  // expected-error @+1 {{gradient type 'tensor<4x8xbf16>' does not match the type 'tensor<4x8xf32>' of parameter @w}}
  model.accumulate_grad @w, %g : tensor<4x8xbf16>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{static_loss_scale must be >= 0 (0 selects dynamic loss scaling), found -1}}
  model.unscale_grads {static_loss_scale = -1.0 : f64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, hysteresis = 2 : i64, min_loss_scale = 1.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{initial_scale_power must be in [0, 127] (2^power must be a finite f32), found 200}}
  model.unscale_grads {static_loss_scale = 0.0 : f64, initial_scale_power = 200 : i64, loss_scale_window = 1000 : i64, hysteresis = 2 : i64, min_loss_scale = 1.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{initial_scale_power must be in [0, 127] (2^power must be a finite f32), found -1}}
  model.unscale_grads {static_loss_scale = 0.0 : f64, initial_scale_power = -1 : i64, loss_scale_window = 1000 : i64, hysteresis = 2 : i64, min_loss_scale = 1.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{loss_scale_window must be >= 1, found 0}}
  model.unscale_grads {static_loss_scale = 0.0 : f64, initial_scale_power = 16 : i64, loss_scale_window = 0 : i64, hysteresis = 2 : i64, min_loss_scale = 1.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{hysteresis must be >= 1, found 0}}
  model.unscale_grads {static_loss_scale = 0.0 : f64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, hysteresis = 0 : i64, min_loss_scale = 1.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{min_loss_scale must be positive, found 0}}
  model.unscale_grads {static_loss_scale = 0.0 : f64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, hysteresis = 2 : i64, min_loss_scale = 0.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'model.unscale_grads' op requires attribute 'hysteresis'}}
  model.unscale_grads {static_loss_scale = 0.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{max_norm must be positive, found 0}}
  model.clip_grad_norm {max_norm = 0.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{max_norm must be positive, found -1}}
  model.clip_grad_norm {max_norm = -1.0 : f64}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{attribute 'max_norm' failed to satisfy constraint: 64-bit float attribute}}
  model.clip_grad_norm {max_norm = 1 : i64}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{lr must be >= 0, found -1}}
  model.adam_update @w {lr = -1.0 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, adamw}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{beta1 must be in [0, 1), found 1}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 1.0 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, adamw}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{beta2 must be in [0, 1), found -0.5}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = -0.5 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, adamw}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{eps must be positive, found 0}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0.0 : f64, weight_decay = 0.0 : f64, adamw}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{weight_decay must be >= 0, found -0.1}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = -0.1 : f64, adamw}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{lamb applies its own weight decay; adamw must not be set with it}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64, adamw, lamb, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{lamb needs max_coeff and min_coeff}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64, lamb, max_coeff = 10.0 : f64}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{max_coeff and min_coeff need lamb}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{min_coeff must be >= 0, found -1}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64, lamb, max_coeff = 10.0 : f64, min_coeff = -1.0 : f64}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{max_coeff must be >= min_coeff (0.5), found 0.1}}
  model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64, lamb, max_coeff = 0.1 : f64, min_coeff = 0.5 : f64}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{@missing does not name a model.param in the enclosing module}}
  model.adam_update @missing {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, adamw}
  return
}

// -----

model.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{@f is not a model.param}}
  model.adam_update @f {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, adamw}
  return
}

// -----
// A backward op reads the state its forward op yielded, never a value from
// elsewhere: that dataflow is the link between the two.

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %s: tensor<2x2x3xf32>) {
  // expected-error @+1 {{saved state must be the saved result of a 'model.layernorm'}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<2x2x3xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %z: tensor<2x2x3x16xf32>) {
  // The statistics of another kind of op, of the expected type.
  %y, %s = model.rmsnorm %z, %g : (tensor<2x2x3x16xf32>, tensor<16xf32>) -> (tensor<2x2x3x16xf32>, tensor<2x2x3xf32>)
  // expected-error @+1 {{saved state must be the saved result of a 'model.layernorm'}}
  %0:3 = model.layernorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<2x2x3xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x16xbf16>, %g: tensor<16xbf16>, %b: tensor<16xbf16>) {
  %y, %s = model.layernorm %x, %g, %b : (tensor<2x3x16xbf16>, tensor<16xbf16>, tensor<16xbf16>) -> (tensor<2x3x16xbf16>, tensor<2x2x3xf32>)
  // expected-error @+1 {{saved state type 'tensor<2x2x3xf32>' does not match the expected 'tensor<2x3xf32>'}}
  %0:2 = model.rmsnorm_backward %x, %g, %x, %s : (tensor<2x3x16xbf16>, tensor<16xbf16>, tensor<2x3x16xbf16>, tensor<2x2x3xf32>) -> (tensor<2x3x16xbf16>, tensor<16xbf16>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %do: tensor<2x3x16xf32>, %p: tensor<2x4x3x3xf32>) {
  %o = model.causal_attention %q, %k, %v kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x16xf32>
  // expected-error @+1 {{saved state must be the saved result of a 'model.causal_attention'}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %p kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x4x3x3xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

// A flash backward reads the row log-sum-exp.
func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x3x8xf32>, %do: tensor<2x3x16xf32>) {
  %o, %p = model.causal_attention %q, %k, %v kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x16xf32>, tensor<2x4x3x3xf32>)
  // expected-error @+1 {{saved state type 'tensor<2x4x3x3xf32>' does not match the expected 'tensor<2x4x3xf32>'}}
  %0:3 = model.causal_attention_backward %q, %k, %v, %o, %do, %p {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x4x3x3xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}
