// Round trip of every model op: custom form, then through the generic form.
// RUN: zeroc-opt %s -split-input-file | zeroc-opt -split-input-file | FileCheck %s
// RUN: zeroc-opt %s -split-input-file --mlir-print-op-generic | zeroc-opt -split-input-file | FileCheck %s

// CHECK-LABEL: module @gpt
module @gpt {
  // CHECK: model.param @wte.weight : tensor<64x16xf32> init <normal(2.000000e-02)>
  model.param @wte.weight : tensor<64x16xf32> init <normal(0.02)>
  // CHECK: model.param @wpe.weight : tensor<8x16xf32> init <normal(1.000000e-02)>
  model.param @wpe.weight : tensor<8x16xf32> init <normal(0.01)>
  // CHECK: model.param @h.0.ln_1.weight : tensor<16xf32> init <ones>
  model.param @"h.0.ln_1.weight" : tensor<16xf32> init <ones>
  // CHECK: model.param @h.0.ln_1.bias : tensor<16xf32> init <zeros>
  model.param @"h.0.ln_1.bias" : tensor<16xf32> init <zeros>
  model.param @"h.0.k_proj.weight" : tensor<8x16xf32> init <normal(0.02)>
  model.param @"h.0.k_norm.weight" : tensor<8xf32> init <ones>
  model.param @"h.0.fc.weight" : tensor<32x16xf32> init <normal(0.02)>
  model.param @"h.0.fc.bias" : tensor<32xf32> init <zeros>

  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: (%[[IDS:.*]]: tensor<2x8xi32>, %[[TGT:.*]]: tensor<2x8xi32>) -> tensor<f32>
  func.func @forward(%ids: tensor<2x8xi32>, %tgt: tensor<2x8xi32>) -> tensor<f32> {
    // CHECK: %[[WTE:.*]] = model.param_ref @wte.weight : tensor<64x16xf32>
    %wte = model.param_ref @wte.weight : tensor<64x16xf32>
    // CHECK: %[[TOK:.*]] = model.embedding %[[WTE]], %[[IDS]] : (tensor<64x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %tok = model.embedding %wte, %ids : (tensor<64x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %wpe = model.param_ref @wpe.weight : tensor<8x16xf32>
    // CHECK: %[[POS:.*]] = model.position_embedding %{{.*}} : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    %pos = model.position_embedding %wpe : (tensor<8x16xf32>) -> tensor<2x8x16xf32>
    // CHECK: %[[X:.*]] = model.add %[[TOK]], %[[POS]] : tensor<2x8x16xf32>
    %x = model.add %tok, %pos : tensor<2x8x16xf32>
    %g = model.param_ref @"h.0.ln_1.weight" : tensor<16xf32>
    %b = model.param_ref @"h.0.ln_1.bias" : tensor<16xf32>
    // CHECK: %[[H:.*]] = model.layernorm %[[X]], %{{.*}}, %{{.*}} {epsilon = 6.250000e-02 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %h = model.layernorm %x, %g, %b {epsilon = 0.0625 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    // Default epsilon is not printed.
    // CHECK: model.layernorm %[[X]], %{{.*}}, %{{.*}} : (
    %h2 = model.layernorm %x, %g, %b : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %wk = model.param_ref @"h.0.k_proj.weight" : tensor<8x16xf32>
    // CHECK: %[[K:.*]] = model.linear %[[H]], %{{.*}} : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x8xf32>
    %k = model.linear %h, %wk : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x8xf32>
    %gk = model.param_ref @"h.0.k_norm.weight" : tensor<8xf32>
    // CHECK: %[[KN:.*]] = model.rmsnorm %[[K]], %{{.*}} {epsilon = 6.250000e-02 : f64} : (tensor<2x8x8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32>
    %kn = model.rmsnorm %k, %gk {epsilon = 0.0625 : f64} : (tensor<2x8x8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32>
    // CHECK: %[[A:.*]] = model.causal_attention %[[H]], %[[KN]], %[[K]] {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
    %a = model.causal_attention %h, %kn, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
    %fcw = model.param_ref @"h.0.fc.weight" : tensor<32x16xf32>
    %fcb = model.param_ref @"h.0.fc.bias" : tensor<32xf32>
    // CHECK: %[[F:.*]] = model.linear %[[A]], %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %f = model.linear %a, %fcw, %fcb : (tensor<2x8x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    // CHECK: %[[G:.*]] = model.gelu %[[F]] : tensor<2x8x32xf32>
    %gl = model.gelu %f : tensor<2x8x32xf32>
    // CHECK: %[[S:.*]] = model.silu %[[F]] : tensor<2x8x32xf32>
    %sl = model.silu %f : tensor<2x8x32xf32>
    // CHECK: model.mul %[[G]], %[[S]] : tensor<2x8x32xf32>
    %m = model.mul %gl, %sl : tensor<2x8x32xf32>
    // CHECK: model.rotary %[[F]] {head_dim = 8 : i64, theta = 5.000000e+05 : f64} : tensor<2x8x32xf32>
    %r = model.rotary %f {head_dim = 8 : i64, theta = 500000.0 : f64} : tensor<2x8x32xf32>
    // CHECK: %[[L:.*]] = model.linear %[[H]], %[[WTE]] : (tensor<2x8x16xf32>, tensor<64x16xf32>) -> tensor<2x8x64xf32>
    %logits = model.linear %h, %wte : (tensor<2x8x16xf32>, tensor<64x16xf32>) -> tensor<2x8x64xf32>
    // CHECK: %[[LOSS:.*]] = model.cross_entropy %[[L]], %[[TGT]] : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
    %loss = model.cross_entropy %logits, %tgt : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
    // CHECK: return %[[LOSS]]
    return %loss : tensor<f32>
  }
}

// -----
// 16-bit dtypes are accepted throughout.
// CHECK-LABEL: module @half
module @half {
  // CHECK: model.param @w : tensor<4x4xbf16>
  model.param @w : tensor<4x4xbf16> init <normal(1.0)>
  // CHECK: model.param @v : tensor<4x4xf16>
  model.param @v : tensor<4x4xf16> init <zeros>
  func.func @forward(%ids: tensor<1x2xi32>, %tgt: tensor<1x2xi32>) -> tensor<f32> {
    %w = model.param_ref @w : tensor<4x4xbf16>
    %x = model.embedding %w, %ids : (tensor<4x4xbf16>, tensor<1x2xi32>) -> tensor<1x2x4xbf16>
    // CHECK: model.linear %{{.*}}, %{{.*}} : (tensor<1x2x4xbf16>, tensor<4x4xbf16>) -> tensor<1x2x4xbf16>
    %l = model.linear %x, %w : (tensor<1x2x4xbf16>, tensor<4x4xbf16>) -> tensor<1x2x4xbf16>
    %loss = model.cross_entropy %l, %tgt : (tensor<1x2x4xbf16>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
