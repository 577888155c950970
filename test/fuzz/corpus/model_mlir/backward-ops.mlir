// Round trip of every backward and training-step op: custom form, then
// through the generic form.
// RUN: zeroc-opt %s -split-input-file | zeroc-opt -split-input-file | FileCheck %s
// RUN: zeroc-opt %s -split-input-file --mlir-print-op-generic | zeroc-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[DY:.*]]: tensor<2x8x16xf32>, %[[IDS:.*]]: tensor<2x8xi32>,
// CHECK-SAME:  %[[W:.*]]: tensor<32x16xf32>, %[[DF:.*]]: tensor<2x8x32xf32>, %[[G:.*]]: tensor<16xf32>,
// CHECK-SAME:  %[[K:.*]]: tensor<2x8x8xf32>, %[[LOGITS:.*]]: tensor<2x8x64xf32>, %[[SEED:.*]]: tensor<f32>)
func.func @backward(%x: tensor<2x8x16xf32>, %dy: tensor<2x8x16xf32>, %ids: tensor<2x8xi32>,
                    %w: tensor<32x16xf32>, %df: tensor<2x8x32xf32>, %g: tensor<16xf32>,
                    %k: tensor<2x8x8xf32>, %logits: tensor<2x8x64xf32>, %seed: tensor<f32>) {
  // CHECK: model.embedding_backward %[[DY]], %[[IDS]] : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<64x16xf32>
  %0 = model.embedding_backward %dy, %ids : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<64x16xf32>
  // CHECK: model.position_embedding_backward %[[DY]] : (tensor<2x8x16xf32>) -> tensor<12x16xf32>
  %1 = model.position_embedding_backward %dy : (tensor<2x8x16xf32>) -> tensor<12x16xf32>
  // CHECK: model.linear_grad_input %[[DF]], %[[W]] : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %2 = model.linear_grad_input %df, %w : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  // CHECK: model.linear_grad_weight %[[DF]], %[[X]] : (tensor<2x8x32xf32>, tensor<2x8x16xf32>) -> tensor<32x16xf32>
  %3 = model.linear_grad_weight %df, %x : (tensor<2x8x32xf32>, tensor<2x8x16xf32>) -> tensor<32x16xf32>
  // CHECK: model.linear_grad_bias %[[DF]] : (tensor<2x8x32xf32>) -> tensor<32xf32>
  %4 = model.linear_grad_bias %df : (tensor<2x8x32xf32>) -> tensor<32xf32>
  // The state a forward op yields for its backward is its second result.
  // CHECK: %{{.*}}, %[[STATS:.*]] = model.layernorm %[[X]], %[[G]], %[[G]] {epsilon = 6.250000e-02 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x2x8xf32>)
  %ln, %stats = model.layernorm %x, %g, %g {epsilon = 0.0625 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x2x8xf32>)
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = model.layernorm_backward %[[X]], %[[G]], %[[DY]], %[[STATS]] {epsilon = 6.250000e-02 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>, tensor<2x2x8xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
  %5:3 = model.layernorm_backward %x, %g, %dy, %stats {epsilon = 0.0625 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>, tensor<2x2x8xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>)
  // Default epsilon is not printed.
  // CHECK: %{{.*}}, %[[RRMS:.*]] = model.rmsnorm %[[X]], %[[G]] : (tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  %rn, %rrms = model.rmsnorm %x, %g : (tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  // CHECK: %{{.*}}, %{{.*}} = model.rmsnorm_backward %[[X]], %[[G]], %[[DY]], %[[RRMS]] : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>, tensor<2x8xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
  %6:2 = model.rmsnorm_backward %x, %g, %dy, %rrms : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>, tensor<2x8xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
  // CHECK: model.gelu_backward %[[X]], %[[DY]] : tensor<2x8x16xf32>
  %7 = model.gelu_backward %x, %dy : tensor<2x8x16xf32>
  // CHECK: model.silu_backward %[[X]], %[[DY]] : tensor<2x8x16xf32>
  %8 = model.silu_backward %x, %dy : tensor<2x8x16xf32>
  // CHECK: model.rotary_backward %[[DY]] {head_dim = 4 : i64, theta = 5.000000e+05 : f64} : tensor<2x8x16xf32>
  %9 = model.rotary_backward %dy {head_dim = 4 : i64, theta = 500000.0 : f64} : tensor<2x8x16xf32>
  // CHECK: model.rotary_backward %[[K]] {head_dim = 4 : i64} : tensor<2x8x8xf32>
  %10 = model.rotary_backward %k {head_dim = 4 : i64} : tensor<2x8x8xf32>
  // The materialized kernel keeps the probabilities [batch, heads, seq, seq].
  // CHECK: %[[OUT:.*]], %[[PROBS:.*]] = model.causal_attention %[[X]], %[[K]], %[[K]] kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64}
  // CHECK-SAME: : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x4x8x8xf32>)
  %out, %probs = model.causal_attention %x, %k, %k kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x4x8x8xf32>)
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = model.causal_attention_backward %[[X]], %[[K]], %[[K]], %[[OUT]], %[[DY]], %[[PROBS]] kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64}
  // CHECK-SAME: : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)
  %11:3 = model.causal_attention_backward %x, %k, %k, %out, %dy, %probs kernel = materialized {num_heads = 4 : i64, num_kv_heads = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)
  // Flash, the default (elided when printed, accepted when spelled), keeps
  // the row log-sum-exp, f32 [batch, heads, seq].
  // CHECK: %[[FOUT:.*]], %[[LSE:.*]] = model.causal_attention %[[X]], %[[K]], %[[K]] {num_heads = 4 : i64, num_kv_heads = 2 : i64}
  // CHECK-SAME: -> (tensor<2x8x16xf32>, tensor<2x4x8xf32>)
  %fout, %lse = model.causal_attention %x, %k, %k kernel = flash {num_heads = 4 : i64, num_kv_heads = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x4x8xf32>)
  // CHECK: model.causal_attention_backward %[[X]], %[[K]], %[[K]], %[[FOUT]], %[[DY]], %[[LSE]] {num_heads = 4 : i64, num_kv_heads = 2 : i64}
  %13:3 = model.causal_attention_backward %x, %k, %k, %fout, %dy, %lse {num_heads = 4 : i64, num_kv_heads = 2 : i64}
      : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)
  // CHECK: model.cross_entropy_backward %[[LOGITS]], %[[IDS]], %[[SEED]] : (tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x64xf32>
  %12 = model.cross_entropy_backward %logits, %ids, %seed : (tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x64xf32>
  return
}

// -----
// 16-bit activations; the loss gradient stays f32.
// CHECK-LABEL: func.func @half
func.func @half(%x: tensor<1x4x8xbf16>, %w: tensor<8x8xbf16>, %ids: tensor<1x4xi32>, %seed: tensor<f32>) {
  // CHECK: model.linear_grad_weight %{{.*}}, %{{.*}} : (tensor<1x4x8xbf16>, tensor<1x4x8xbf16>) -> tensor<8x8xbf16>
  %0 = model.linear_grad_weight %x, %x : (tensor<1x4x8xbf16>, tensor<1x4x8xbf16>) -> tensor<8x8xbf16>
  // CHECK: model.cross_entropy_backward %{{.*}}, %{{.*}}, %{{.*}} : (tensor<1x4x8xbf16>, tensor<1x4xi32>, tensor<f32>) -> tensor<1x4x8xbf16>
  %1 = model.cross_entropy_backward %x, %ids, %seed : (tensor<1x4x8xbf16>, tensor<1x4xi32>, tensor<f32>) -> tensor<1x4x8xbf16>
  return
}

// -----
// CHECK-LABEL: module @training
module @training {
  model.param @w : tensor<4x8xf16> init <normal(0.02)>
  model.param @"h.0.b" : tensor<4xf16> init <zeros>

  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[DW:.*]]: tensor<4x8xf16>, %[[DB:.*]]: tensor<4xf16>)
  func.func @micro_step(%dw: tensor<4x8xf16>, %db: tensor<4xf16>) -> tensor<f32> {
    // CHECK: %[[SEED:.*]] = model.backward_seed {loss_scaling, micro_steps = 8 : i64} : tensor<f32>
    %seed = model.backward_seed {micro_steps = 8 : i64, loss_scaling} : tensor<f32>
    // CHECK: model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    %plain = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    // CHECK: model.accumulate_grad @w, %[[DW]] : tensor<4x8xf16>
    model.accumulate_grad @w, %dw : tensor<4x8xf16>
    // CHECK: model.accumulate_grad @h.0.b, %[[DB]] : tensor<4xf16>
    model.accumulate_grad @"h.0.b", %db : tensor<4xf16>
    // CHECK: return %[[SEED]]
    return %seed : tensor<f32>
  }

  // CHECK-LABEL: func.func @optimizer_step
  func.func @optimizer_step() {
    // CHECK: model.unscale_grads {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
    model.unscale_grads {static_loss_scale = 0.0 : f64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, hysteresis = 2 : i64, min_loss_scale = 1.0 : f64}
    // CHECK: model.clip_grad_norm {max_norm = 1.000000e+00 : f64}
    model.clip_grad_norm {max_norm = 1.0 : f64}
    // CHECK: model.adam_update @w {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, lr = 3.000000e-04 : f64, weight_decay = 1.000000e-01 : f64}
    model.adam_update @w {lr = 3.0e-4 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, adamw}
    // CHECK: model.adam_update @h.0.b {beta1 = 0.000000e+00 : f64, beta2 = 0.000000e+00 : f64, eps = 1.000000e+00 : f64, lr = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @"h.0.b" {lr = 0.0 : f64, beta1 = 0.0 : f64, beta2 = 0.0 : f64, eps = 1.0 : f64, weight_decay = 0.0 : f64}
    // CHECK: model.adam_update @w {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 9.9999999999999995E-7 : f64, lamb, lr = 2.000000e-03 : f64, max_coeff = 1.000000e+01 : f64, min_coeff = 0.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @w {lr = 2.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-6 : f64, weight_decay = 0.0 : f64, lamb, max_coeff = 10.0 : f64, min_coeff = 0.0 : f64}
    // CHECK: model.adam_update @w {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, no_bias_correction, weight_decay = 1.000000e-02 : f64}
    model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.01 : f64, adamw, no_bias_correction}
    return
  }
}
