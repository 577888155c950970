// Every verifier error of the model dialect, one case each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{unknown initialization 'uniform', expected one of: zeros, ones, normal(STD)}}
model.param @w : tensor<4xf32> init <uniform>

// -----

// expected-error @+1 {{normal initialization needs a positive, finite standard deviation, found -1}}
model.param @w : tensor<4xf32> init <normal(-1.0)>

// -----

// expected-error @+1 {{parameter @w must have rank >= 1, found a 0-d tensor}}
model.param @w : tensor<f32> init <zeros>

// -----

// expected-error @+1 {{parameter @w has an empty dimension in its shape [4, 0]}}
model.param @w : tensor<4x0xf32> init <zeros>

// -----

// expected-error @+1 {{parameter @w has valid_rows 5; expected 1 to its first dimension, 4}}
model.param @w : tensor<4x2xf32> init <zeros> {valid_rows = 5 : i64}

// -----

// expected-error @+1 {{parameter @w has valid_rows 0; expected 1 to its first dimension, 4}}
model.param @w : tensor<4x2xf32> init <zeros> {valid_rows = 0 : i64}

// -----

// expected-error @+1 {{attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
model.param @w : tensor<4xi32> init <zeros>

// -----

// expected-error @+1 {{attribute 'type' failed to satisfy constraint}}
model.param @w : tensor<?x4xf32> init <zeros>

// -----

func.func @f() {
  // expected-error @+1 {{'model.param' op expects parent op 'builtin.module'}}
  "model.param"() <{init = #model.init<zeros>, sym_name = "w", type = tensor<4xf32>}> : () -> ()
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{@missing does not name a model.param in the enclosing module}}
  %0 = model.param_ref @missing : tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{@f is not a model.param}}
  %0 = model.param_ref @f : tensor<4xf32>
  return
}

// -----

model.param @w : tensor<4x8xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{result type 'tensor<8x4xf32>' does not match the type 'tensor<4x8xf32>' of parameter @w}}
  %0 = model.param_ref @w : tensor<8x4xf32>
  return
}

// -----

func.func @f(%t: tensor<10x4x2xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{table must be rank 2 ([vocab, hidden]), found rank 3 [10, 4, 2]}}
  %0 = model.embedding %t, %ids : (tensor<10x4x2xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%t: tensor<10x4xf32>, %ids: tensor<6xi32>) {
  // expected-error @+1 {{ids must be rank 2 ([batch, seq]), found rank 1 [6]}}
  %0 = model.embedding %t, %ids : (tensor<10x4xf32>, tensor<6xi32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%t: tensor<10x4xf32>, %ids: tensor<2x3xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer values, but got 'tensor<2x3xf32>'}}
  %0 = model.embedding %t, %ids : (tensor<10x4xf32>, tensor<2x3xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%t: tensor<10x4xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{result has shape [2, 3, 5], expected [2, 3, 4] ([batch, seq] of ids, hidden of the table)}}
  %0 = model.embedding %t, %ids : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x5xf32>
  return
}

// -----

func.func @f(%t: tensor<10x4xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{result #0 has element type 'bf16', expected 'f32' (the element type of the table)}}
  %0 = model.embedding %t, %ids : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xbf16>
  return
}

// -----

func.func @f(%t: tensor<8xf32>) {
  // expected-error @+1 {{table must be rank 2 ([max_positions, hidden]), found rank 1 [8]}}
  %0 = model.position_embedding %t : (tensor<8xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @f(%t: tensor<8x4xf32>) {
  // expected-error @+1 {{result must be rank 3 ([batch, seq, hidden]), found rank 2 [3, 4]}}
  %0 = model.position_embedding %t : (tensor<8x4xf32>) -> tensor<3x4xf32>
  return
}

// -----

func.func @f(%t: tensor<8x4xf32>) {
  // expected-error @+1 {{sequence length 16 exceeds the 8 positions of the table}}
  %0 = model.position_embedding %t : (tensor<8x4xf32>) -> tensor<2x16x4xf32>
  return
}

// -----

func.func @f(%t: tensor<8x4xf32>) {
  // expected-error @+1 {{result hidden size 5 does not match the table's hidden size 4}}
  %0 = model.position_embedding %t : (tensor<8x4xf32>) -> tensor<2x8x5xf32>
  return
}

// -----

func.func @f(%t: tensor<8x4xf16>) {
  // expected-error @+1 {{result #0 has element type 'f32', expected 'f16' (the element type of the table)}}
  %0 = model.position_embedding %t : (tensor<8x4xf16>) -> tensor<2x8x4xf32>
  return
}

// -----

func.func @f(%x: tensor<16xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{input must be rank >= 2 ([..., in_features]), found rank 1}}
  %0 = model.linear %x, %w : (tensor<16xf32>, tensor<8x16xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x16xf32>, %w: tensor<8x16x1xf32>) {
  // expected-error @+1 {{weight must be rank 2 ([out_features, in_features]), found rank 3 [8, 16, 1]}}
  %0 = model.linear %x, %w : (tensor<2x16xf32>, tensor<8x16x1xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %w: tensor<8x12xf32>) {
  // expected-error @+1 {{weight [8, 12] expects 12 input features, but the input [2, 3, 16] has 16}}
  %0 = model.linear %x, %w : (tensor<2x3x16xf32>, tensor<8x12xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{bias has shape [16], expected [8] ([out_features] of the weight)}}
  %0 = model.linear %x, %w, %b : (tensor<2x3x16xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{result has shape [2, 3, 16], expected [2, 3, 8] (input with its last dimension replaced by out_features)}}
  %0 = model.linear %x, %w : (tensor<2x3x16xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %w: tensor<8x16xbf16>) {
  // expected-error @+1 {{operand #1 has element type 'bf16', expected 'f32' (the element type of the input)}}
  %0 = model.linear %x, %w : (tensor<2x3x16xf32>, tensor<8x16xbf16>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<8xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{weight has shape [8], expected [16] ([hidden], the last dimension of the input)}}
  %0 = model.layernorm %x, %g, %b : (tensor<2x3x16xf32>, tensor<8xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %b: tensor<2x16xf32>) {
  // expected-error @+1 {{bias has shape [2, 16], expected [16] ([hidden], the last dimension of the input)}}
  %0 = model.layernorm %x, %g, %b : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{result type 'tensor<3x2x16xf32>' does not match the input type 'tensor<2x3x16xf32>'}}
  %0 = model.layernorm %x, %g, %b : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<3x2x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{epsilon must be positive, found 0}}
  %0 = model.layernorm %x, %g, %b {epsilon = 0.0 : f64} : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<16xf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{operand #1 has element type 'f16', expected 'f32' (the element type of the input)}}
  %0 = model.layernorm %x, %g, %b : (tensor<2x3x16xf32>, tensor<16xf16>, tensor<16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>, %g: tensor<15xf32>) {
  // expected-error @+1 {{weight has shape [15], expected [16] ([hidden], the last dimension of the input)}}
  %0 = model.rmsnorm %x, %g : (tensor<2x3x16xf32>, tensor<15xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%x: tensor<6x16xf32>) {
  // expected-error @+1 {{input must be rank 3 ([batch, seq, heads * head_dim]), found rank 2 [6, 16]}}
  %0 = model.rotary %x {head_dim = 8 : i64} : tensor<6x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x15xf32>) {
  // expected-error @+1 {{head_dim must be even (RoPE rotates pairs), found 5}}
  %0 = model.rotary %x {head_dim = 5 : i64} : tensor<2x3x15xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x12xf32>) {
  // expected-error @+1 {{last dimension 12 is not a multiple of head_dim 8}}
  %0 = model.rotary %x {head_dim = 8 : i64} : tensor<2x3x12xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>) {
  // expected-error @+1 {{theta must be positive, found -1}}
  %0 = model.rotary %x {head_dim = 8 : i64, theta = -1.0 : f64} : tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%x: tensor<2x3x16xf32>) {
  // expected-error @+1 {{attribute 'head_dim' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = model.rotary %x {head_dim = 0 : i64} : tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%q: tensor<6x16xf32>, %k: tensor<2x3x16xf32>) {
  // expected-error @+1 {{q must be rank 3 ([batch, seq, heads * head_dim]), found rank 2 [6, 16]}}
  %0 = model.causal_attention %q, %k, %k {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<6x16xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<6x16xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>) {
  // expected-error @+1 {{q width 16 is not a multiple of num_heads 3}}
  %0 = model.causal_attention %q, %q, %q {num_heads = 3 : i64, num_kv_heads = 3 : i64} : (tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>) {
  // expected-error @+1 {{num_heads 4 is not a multiple of num_kv_heads 3}}
  %0 = model.causal_attention %q, %q, %q {num_heads = 4 : i64, num_kv_heads = 3 : i64} : (tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x16xf32>, %v: tensor<2x3x8xf32>) {
  // expected-error @+1 {{k has shape [2, 3, 16], expected [2, 3, 8] (num_kv_heads 2 x head_dim 4 for batch and seq of q)}}
  %0 = model.causal_attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x8xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{v has shape [2, 4, 8], expected [2, 3, 8] (num_kv_heads 2 x head_dim 4 for batch and seq of q)}}
  %0 = model.causal_attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x4x8xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>) {
  // expected-error @+1 {{result has shape [2, 3, 8], expected [2, 3, 16] (the shape of q)}}
  %0 = model.causal_attention %q, %k, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xbf16>) {
  // expected-error @+1 {{operand #1 has element type 'bf16', expected 'f32' (the element type of q)}}
  %0 = model.causal_attention %q, %k, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xbf16>, tensor<2x3x8xbf16>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>) {
  // expected-error @+1 {{attribute 'num_kv_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = model.causal_attention %q, %q, %q {num_heads = 4 : i64, num_kv_heads = 0 : i64} : (tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @f(%l: tensor<6x10xf32>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{logits must be rank 3 ([batch, seq, vocab]), found rank 2 [6, 10]}}
  %0 = model.cross_entropy %l, %t : (tensor<6x10xf32>, tensor<2x3xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<6xi32>) {
  // expected-error @+1 {{targets must be rank 2 ([batch, seq]), found rank 1 [6]}}
  %0 = model.cross_entropy %l, %t : (tensor<2x3x10xf32>, tensor<6xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<3x2xi32>) {
  // expected-error @+1 {{targets has shape [3, 2], expected [2, 3] ([batch, seq] of the logits)}}
  %0 = model.cross_entropy %l, %t : (tensor<2x3x10xf32>, tensor<3x2xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{classes 11 must be from 1 to the logits' last dimension, 10}}
  %0 = model.cross_entropy %l, %t {classes = 11 : i64} : (tensor<2x3x10xf32>, tensor<2x3xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<2x3x10xf32>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values, but got 'tensor<bf16>'}}
  %0 = model.cross_entropy %l, %t : (tensor<2x3x10xf32>, tensor<2x3xi32>) -> tensor<bf16>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{'model.add' op requires the same type for all operands and results}}
  %0 = "model.add"(%a, %b) : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) {
  // expected-error @+1 {{'model.mul' op requires the same type for all operands and results}}
  %0 = "model.mul"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'model.gelu' op requires the same type for all operands and results}}
  %0 = "model.gelu"(%a) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{custom op 'model.softmax' is unknown}}
  %0 = model.softmax %a : tensor<2x3xf32>
  return
}

// -----
// In a training graph a forward op yields the state its backward reads, of
// exactly the type the op defines.

func.func @f(%x: tensor<2x3x16xbf16>, %g: tensor<16xbf16>, %b: tensor<16xbf16>) {
  // expected-error @+1 {{saved state type 'tensor<2x3xf32>' does not match the expected 'tensor<2x2x3xf32>'}}
  %y, %s = model.layernorm %x, %g, %b : (tensor<2x3x16xbf16>, tensor<16xbf16>, tensor<16xbf16>) -> (tensor<2x3x16xbf16>, tensor<2x3xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>) {
  // expected-error @+1 {{saved state type 'tensor<2x2x3x3xf32>' does not match the expected 'tensor<2x4x3x3xf32>'}}
  %o, %p = model.causal_attention %q, %k, %k kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x16xf32>, tensor<2x2x3x3xf32>)
  return
}

// -----

// Flash (the default) keeps the row log-sum-exp, not the probabilities.
func.func @f(%q: tensor<2x3x16xbf16>, %k: tensor<2x3x8xbf16>) {
  // expected-error @+1 {{saved state type 'tensor<2x4x3x3xbf16>' does not match the expected 'tensor<2x4x3xf32>'}}
  %o, %p = model.causal_attention %q, %k, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xbf16>, tensor<2x3x8xbf16>, tensor<2x3x8xbf16>) -> (tensor<2x3x16xbf16>, tensor<2x4x3x3xbf16>)
  return
}

// -----

func.func @f(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'kernel' [flash, materialized]}}
  %o = model.causal_attention %q, %k, %k kernel = tiled {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x16xf32>
  return
}
