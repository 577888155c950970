// zero-expand-training-step on hand-written models: the exact backward of a
// small MLP, weight tying, residuals, dead code, and the optimizer step under
// each setting.
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step="grad-accum=4 clip=1.0" | FileCheck %s
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step | FileCheck %s --check-prefix=DEFAULT
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step="loss-scaling=true optimizer=adam lr=3e-4 beta2=0.95 weight-decay=0.1 hysteresis=4 initial-scale-power=12" | FileCheck %s --check-prefix=FP16
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step="loss-scaling=true loss-scale=128 grad-accum=2 clip=0.5 eps=1e-6" | FileCheck %s --check-prefix=STATIC
// The output is valid IR, and generic cleanups keep every training op.
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step --cse --canonicalize | FileCheck %s --check-prefix=CLEANUP

// An MLP: embedding, linear with bias, GELU, linear, loss.
// CHECK-LABEL: module @mlp
// DEFAULT-LABEL: module @mlp
// FP16-LABEL: module @mlp
// STATIC-LABEL: module @mlp
// CLEANUP-LABEL: module @mlp
module @mlp {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  model.param @fc.weight : tensor<16x8xf32> init <normal(0.02)>
  model.param @fc.bias : tensor<16xf32> init <zeros>
  model.param @proj.weight : tensor<32x16xf32> init <normal(0.02)>

  // CHECK-NOT: func.func @forward
  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[TOK:[^:]*]]: tensor<2x4xi32>, %[[TGT:[^:]*]]: tensor<2x4xi32>) -> tensor<f32>
  // CHECK-NEXT: %[[WTE:.*]] = model.param_ref @wte
  // CHECK-NEXT: %[[X:.*]] = model.embedding %[[WTE]], %[[TOK]]
  // CHECK-NEXT: %[[W1:.*]] = model.param_ref @fc.weight
  // CHECK-NEXT: %[[B1:.*]] = model.param_ref @fc.bias
  // CHECK-NEXT: %[[H:.*]] = model.linear %[[X]], %[[W1]], %[[B1]]
  // CHECK-NEXT: %[[G:.*]] = model.gelu %[[H]]
  // CHECK-NEXT: %[[W2:.*]] = model.param_ref @proj.weight
  // CHECK-NEXT: %[[LOGITS:.*]] = model.linear %[[G]], %[[W2]]
  // CHECK-NEXT: %[[LOSS:.*]] = model.cross_entropy %[[LOGITS]], %[[TGT]]
  // The seed is 1/grad-accum; the backward runs in reverse.
  // CHECK-NEXT: %[[SEED:.*]] = model.backward_seed {micro_steps = 4 : i64} : tensor<f32>
  // CHECK-NEXT: %[[DLOGITS:.*]] = model.cross_entropy_backward %[[LOGITS]], %[[TGT]], %[[SEED]] : (tensor<2x4x32xf32>, tensor<2x4xi32>, tensor<f32>) -> tensor<2x4x32xf32>
  // CHECK-NEXT: %[[DG:.*]] = model.linear_grad_input %[[DLOGITS]], %[[W2]] : (tensor<2x4x32xf32>, tensor<32x16xf32>) -> tensor<2x4x16xf32>
  // CHECK-NEXT: %[[DW2:.*]] = model.linear_grad_weight %[[DLOGITS]], %[[G]] : (tensor<2x4x32xf32>, tensor<2x4x16xf32>) -> tensor<32x16xf32>
  // A parameter's gradient is accumulated as soon as it is complete.
  // CHECK-NEXT: model.accumulate_grad @proj.weight, %[[DW2]] : tensor<32x16xf32>
  // CHECK-NEXT: %[[DH:.*]] = model.gelu_backward %[[H]], %[[DG]] : tensor<2x4x16xf32>
  // CHECK-NEXT: %[[DX:.*]] = model.linear_grad_input %[[DH]], %[[W1]]
  // CHECK-NEXT: %[[DW1:.*]] = model.linear_grad_weight %[[DH]], %[[X]]
  // CHECK-NEXT: %[[DB1:.*]] = model.linear_grad_bias %[[DH]] : (tensor<2x4x16xf32>) -> tensor<16xf32>
  // CHECK-NEXT: model.accumulate_grad @fc.bias, %[[DB1]] : tensor<16xf32>
  // CHECK-NEXT: model.accumulate_grad @fc.weight, %[[DW1]] : tensor<16x8xf32>
  // CHECK-NEXT: %[[DWTE:.*]] = model.embedding_backward %[[DX]], %[[TOK]] : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<32x8xf32>
  // CHECK-NEXT: model.accumulate_grad @wte, %[[DWTE]] : tensor<32x8xf32>
  // CHECK-NEXT: return %[[LOSS]] : tensor<f32>
  // CHECK-NEXT: }
  // Clipping, then Adam in parameter declaration order.
  // CHECK-NEXT: func.func @optimizer_step() {
  // CHECK-NEXT: model.clip_grad_norm {max_norm = 1.000000e+00 : f64}
  // CHECK-NEXT: model.adam_update @wte {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
  // CHECK-NEXT: model.adam_update @fc.weight {adamw,
  // CHECK-NEXT: model.adam_update @fc.bias {adamw,
  // CHECK-NEXT: model.adam_update @proj.weight {adamw,
  // CHECK-NEXT: return
  // CHECK-NEXT: }

  // Defaults: one micro-step, no loss scaling, no clipping, AdamW.
  // DEFAULT-LABEL: func.func @micro_step
  // DEFAULT: model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
  // DEFAULT-LABEL: func.func @optimizer_step() {
  // DEFAULT-NEXT: model.adam_update @wte {adamw,
  // DEFAULT-NOT: model.clip_grad_norm

  // fp16 with dynamic loss scaling and Adam with L2 weight decay.
  // FP16-LABEL: func.func @micro_step
  // FP16: model.backward_seed {loss_scaling, micro_steps = 1 : i64} : tensor<f32>
  // FP16-LABEL: func.func @optimizer_step() {
  // FP16-NEXT: model.unscale_grads {hysteresis = 4 : i64, initial_scale_power = 12 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
  // FP16-NEXT: model.adam_update @wte {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, lr = 3.000000e-04 : f64, weight_decay = 1.000000e-01 : f64}
  // FP16-NOT: adamw
  // FP16-NOT: model.clip_grad_norm

  // A static loss scale; unscale comes before clipping.
  // STATIC-LABEL: func.func @micro_step
  // STATIC: model.backward_seed {loss_scaling, micro_steps = 2 : i64} : tensor<f32>
  // STATIC-LABEL: func.func @optimizer_step() {
  // STATIC-NEXT: model.unscale_grads {hysteresis = 2 : i64, {{.*}}, static_loss_scale = 1.280000e+02 : f64}
  // STATIC-NEXT: model.clip_grad_norm {max_norm = 5.000000e-01 : f64}
  // STATIC-NEXT: model.adam_update @wte {adamw, {{.*}}eps = 9.9999999999999995E-7 : f64

  // CLEANUP-COUNT-4: model.accumulate_grad
  // CLEANUP: func.func @optimizer_step
  // CLEANUP-COUNT-4: model.adam_update
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %w1 = model.param_ref @fc.weight : tensor<16x8xf32>
    %b1 = model.param_ref @fc.bias : tensor<16xf32>
    %h = model.linear %x, %w1, %b1 : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
    %g = model.gelu %h : tensor<2x4x16xf32>
    %w2 = model.param_ref @proj.weight : tensor<32x16xf32>
    %logits = model.linear %g, %w2 : (tensor<2x4x16xf32>, tensor<32x16xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Weight tying: the head reuses the embedding table through a second
// param_ref. The two contributions are summed and accumulated once, when the
// first use in program order (the embedding) has been differentiated.
// CHECK-LABEL: module @tied
module @tied {
  model.param @wte : tensor<32x8xbf16> init <normal(0.02)>
  model.param @ln.weight : tensor<8xbf16> init <ones>

  // CHECK-LABEL: func.func @micro_step
  // CHECK: %[[HEAD:.*]] = model.linear_grad_weight %{{.*}}, %{{.*}} : (tensor<2x4x32xbf16>, tensor<2x4x8xbf16>) -> tensor<32x8xbf16>
  // CHECK-NOT: model.accumulate_grad @wte
  // CHECK: model.accumulate_grad @ln.weight
  // CHECK-NOT: model.accumulate_grad @wte
  // CHECK: %[[EMB:.*]] = model.embedding_backward %{{.*}}, %{{.*}} : (tensor<2x4x8xbf16>, tensor<2x4xi32>) -> tensor<32x8xbf16>
  // CHECK-NEXT: %[[SUM:.*]] = model.add %[[HEAD]], %[[EMB]] {in_place} : tensor<32x8xbf16>
  // CHECK-NEXT: model.accumulate_grad @wte, %[[SUM]] : tensor<32x8xbf16>
  // CHECK-NEXT: return
  // CHECK-LABEL: func.func @optimizer_step
  // CHECK-COUNT-1: model.adam_update @wte
  // CHECK-NOT: model.adam_update @wte
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xbf16>
    %x = model.embedding %wte, %tokens : (tensor<32x8xbf16>, tensor<2x4xi32>) -> tensor<2x4x8xbf16>
    %g = model.param_ref @ln.weight : tensor<8xbf16>
    %h = model.rmsnorm %x, %g : (tensor<2x4x8xbf16>, tensor<8xbf16>) -> tensor<2x4x8xbf16>
    %head = model.param_ref @wte : tensor<32x8xbf16>
    %logits = model.linear %h, %head : (tensor<2x4x8xbf16>, tensor<32x8xbf16>) -> tensor<2x4x32xbf16>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xbf16>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tying through one param_ref used twice (as after CSE) gives the same sum.
// CHECK-LABEL: module @tied_one_ref
module @tied_one_ref {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>

  // CHECK-LABEL: func.func @micro_step
  // CHECK: %[[HEAD:.*]] = model.linear_grad_weight
  // CHECK-NEXT: %[[EMB:.*]] = model.embedding_backward
  // CHECK-NEXT: %[[SUM:.*]] = model.add %[[HEAD]], %[[EMB]] {in_place} : tensor<32x8xf32>
  // CHECK-NEXT: model.accumulate_grad @wte, %[[SUM]] : tensor<32x8xf32>
  // CHECK-NEXT: return
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %logits = model.linear %x, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A residual: %x feeds both the branch and the add, so its gradient is the
// sum of the add's pass-through and the branch's input gradient. A product of
// a value with itself gets both halves of the product rule, summed.
// CHECK-LABEL: module @residual
module @residual {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  model.param @fc.weight : tensor<8x8xf32> init <normal(0.02)>
  model.param @head.weight : tensor<32x8xf32> init <normal(0.02)>

  // CHECK-LABEL: func.func @micro_step
  // CHECK: %[[X:.*]] = model.embedding
  // CHECK: %[[F:.*]] = model.linear %[[X]]
  // CHECK-NEXT: %[[SQ:.*]] = model.mul %[[F]], %[[F]]
  // CHECK-NEXT: %[[R:.*]] = model.add %[[X]], %[[SQ]]
  // CHECK: %[[DR:.*]] = model.linear_grad_input
  // CHECK: model.accumulate_grad @head.weight
  // CHECK-NEXT: %[[DF1:.*]] = model.mul %[[DR]], %[[F]] : tensor<2x4x8xf32>
  // CHECK-NEXT: %[[DF2:.*]] = model.mul %[[DR]], %[[F]] : tensor<2x4x8xf32>
  // CHECK-NEXT: %[[DF:.*]] = model.add %[[DF1]], %[[DF2]] {in_place} : tensor<2x4x8xf32>
  // CHECK-NEXT: %[[DXB:.*]] = model.linear_grad_input %[[DF]], %{{.*}}
  // CHECK-NEXT: %[[DW:.*]] = model.linear_grad_weight %[[DF]], %[[X]]
  // CHECK-NEXT: %[[DX:.*]] = model.add %[[DR]], %[[DXB]] {in_place} : tensor<2x4x8xf32>
  // CHECK-NEXT: model.accumulate_grad @fc.weight, %[[DW]]
  // CHECK-NEXT: model.embedding_backward %[[DX]], %{{.*}}
  // CHECK-NEXT: model.accumulate_grad @wte
  // CHECK-NEXT: return
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %w = model.param_ref @fc.weight : tensor<8x8xf32>
    %f = model.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %sq = model.mul %f, %f : tensor<2x4x8xf32>
    %r = model.add %x, %sq : tensor<2x4x8xf32>
    %head = model.param_ref @head.weight : tensor<32x8xf32>
    %logits = model.linear %r, %head : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Every other forward op: position embedding, layernorm, rotary, grouped-query
// attention, SiLU. Each backward reads what its forward op saved.
// CHECK-LABEL: module @every_op
module @every_op {
  model.param @wte : tensor<32x16xf32> init <normal(0.02)>
  model.param @wpe : tensor<8x16xf32> init <normal(0.01)>
  model.param @ln.weight : tensor<16xf32> init <ones>
  model.param @ln.bias : tensor<16xf32> init <zeros>
  model.param @k.weight : tensor<8x16xf32> init <normal(0.02)>
  model.param @head.weight : tensor<32x16xf32> init <normal(0.02)>

  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[TOK:[^:]*]]: tensor<2x4xi32>
  // CHECK: %[[TOKX:.*]] = model.embedding
  // CHECK: %[[POS:.*]] = model.position_embedding
  // CHECK: %[[X:.*]] = model.add %[[TOKX]], %[[POS]]
  // CHECK: %[[LNW:.*]] = model.param_ref @ln.weight
  // Ops whose backward reads internal state yield it as a second result.
  // CHECK: %[[H:[^,]*]], %[[STATS:[^ ]*]] = model.layernorm %[[X]], %[[LNW]], %{{.*}} {epsilon = 2.500000e-01 : f64} : {{.*}} -> (tensor<2x4x16xf32>, tensor<2x2x4xf32>)
  // CHECK: %[[K:.*]] = model.linear %[[H]]
  // CHECK: %[[Q:.*]] = model.rotary %[[H]] {head_dim = 4 : i64}
  // CHECK: %[[KR:.*]] = model.rotary %[[K]] {head_dim = 4 : i64}
  // Flash attention (the default) keeps the row log-sum-exp, f32 [b, heads, s].
  // CHECK: %[[A:[^,]*]], %[[LSE:[^ ]*]] = model.causal_attention %[[Q]], %[[KR]], %[[K]] {{.*}} -> (tensor<2x4x16xf32>, tensor<2x4x4xf32>)
  // CHECK: %[[S:.*]] = model.silu %[[A]]
  // CHECK: %[[DS:.*]] = model.linear_grad_input
  // CHECK: %[[DA:.*]] = model.silu_backward %[[A]], %[[DS]] : tensor<2x4x16xf32>
  // CHECK-NEXT: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = model.causal_attention_backward %[[Q]], %[[KR]], %[[K]], %[[A]], %[[DA]], %[[LSE]] {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x4xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  // CHECK-NEXT: %[[DKR:.*]] = model.rotary_backward %[[DK]] {head_dim = 4 : i64} : tensor<2x4x8xf32>
  // The value input of attention is the un-rotated k: its two gradients sum.
  // CHECK-NEXT: %[[DKSUM:.*]] = model.add %[[DV]], %[[DKR]] {in_place} : tensor<2x4x8xf32>
  // CHECK-NEXT: %[[DQR:.*]] = model.rotary_backward %[[DQ]] {head_dim = 4 : i64} : tensor<2x4x16xf32>
  // CHECK-NEXT: %[[DHK:.*]] = model.linear_grad_input %[[DKSUM]], %{{.*}} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  // CHECK-NEXT: %[[DWK:.*]] = model.linear_grad_weight %[[DKSUM]], %[[H]]
  // CHECK-NEXT: %[[DH:.*]] = model.add %[[DQR]], %[[DHK]]
  // CHECK-NEXT: model.accumulate_grad @k.weight, %[[DWK]]
  // CHECK-NEXT: %[[DX:.*]], %[[DLNW:.*]], %[[DLNB:.*]] = model.layernorm_backward %[[X]], %[[LNW]], %[[DH]], %[[STATS]] {epsilon = 2.500000e-01 : f64}
  // CHECK-NEXT: model.accumulate_grad @ln.bias, %[[DLNB]]
  // CHECK-NEXT: model.accumulate_grad @ln.weight, %[[DLNW]]
  // CHECK-NEXT: %[[DWPE:.*]] = model.position_embedding_backward %[[DX]] : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  // CHECK-NEXT: model.accumulate_grad @wpe, %[[DWPE]]
  // CHECK-NEXT: %[[DWTE:.*]] = model.embedding_backward %[[DX]], %[[TOK]]
  // CHECK-NEXT: model.accumulate_grad @wte, %[[DWTE]]
  // CHECK-NEXT: return
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x16xf32>
    %tok = model.embedding %wte, %tokens : (tensor<32x16xf32>, tensor<2x4xi32>) -> tensor<2x4x16xf32>
    %wpe = model.param_ref @wpe : tensor<8x16xf32>
    %pos = model.position_embedding %wpe : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %x = model.add %tok, %pos : tensor<2x4x16xf32>
    %g = model.param_ref @ln.weight : tensor<16xf32>
    %b = model.param_ref @ln.bias : tensor<16xf32>
    %h = model.layernorm %x, %g, %b {epsilon = 2.5e-1 : f64} : (tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
    %wk = model.param_ref @k.weight : tensor<8x16xf32>
    %k = model.linear %h, %wk : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
    %q = model.rotary %h {head_dim = 4 : i64} : tensor<2x4x16xf32>
    %kr = model.rotary %k {head_dim = 4 : i64} : tensor<2x4x8xf32>
    %a = model.causal_attention %q, %kr, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
    %s = model.silu %a : tensor<2x4x16xf32>
    %head = model.param_ref @head.weight : tensor<32x16xf32>
    %logits = model.linear %s, %head : (tensor<2x4x16xf32>, tensor<32x16xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Ops that do not reach the loss get no backward; the function need not be
// called @forward when it is the only one.
// CHECK-LABEL: module @dead_code
module @dead_code {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>

  // CHECK-LABEL: func.func @micro_step
  // CHECK: model.gelu
  // CHECK-NOT: model.gelu_backward
  // CHECK: return
  func.func @step(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %unused = model.gelu %x : tensor<2x4x8xf32>
    %logits = model.linear %x, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
