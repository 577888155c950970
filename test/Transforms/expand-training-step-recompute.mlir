// zero-expand-training-step=recompute=full: activation checkpointing. Each
// numbered layer is emitted again right before its backward, and its
// backward reads only the recomputation, the layer's inputs and gradients.
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step=recompute=full | FileCheck %s
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step=recompute=full | FileCheck %s --check-prefix=LIVE
// Without the option nothing is recomputed.
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step | FileCheck %s --check-prefix=OFF
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step=recompute=none | FileCheck %s --check-prefix=OFF
// CSE does not fold a recomputed op into the forward op it duplicates.
// RUN: zeroc-opt %s -split-input-file --zero-expand-training-step=recompute=full --cse --canonicalize | FileCheck %s --check-prefix=CSE

// Two layers between an embedding and a tied head. h.1 reads two values from
// outside: the residual stream %x1 and the embedding output %x0.
// CHECK-LABEL: module @two_layers
// LIVE-LABEL: module @two_layers
// OFF-LABEL: module @two_layers
// CSE-LABEL: module @two_layers
module @two_layers {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  model.param @h.0.ln.weight : tensor<8xf32> init <ones>
  model.param @h.0.fc.weight : tensor<16x8xf32> init <normal(0.02)>
  model.param @h.0.proj.weight : tensor<8x16xf32> init <normal(0.02)>
  model.param @h.1.ln.weight : tensor<8xf32> init <ones>
  model.param @h.1.fc.weight : tensor<16x8xf32> init <normal(0.02)>
  model.param @h.1.proj.weight : tensor<8x16xf32> init <normal(0.02)>
  model.param @ln_f.weight : tensor<8xf32> init <ones>

  // The forward is unchanged.
  // CHECK-LABEL: func.func @micro_step
  // CHECK-SAME: (%[[TOK:[^:]*]]: tensor<2x4xi32>, %[[TGT:[^:]*]]: tensor<2x4xi32>)
  // CHECK-NEXT: model.param_ref @wte
  // CHECK-NEXT: %[[X0:.*]] = model.embedding
  // CHECK-NEXT: model.param_ref @h.0.ln.weight : tensor<8xf32>
  // CHECK-NEXT: model.rmsnorm
  // CHECK-NEXT: model.param_ref @h.0.fc.weight : tensor<16x8xf32>
  // CHECK-NEXT: model.linear
  // CHECK-NEXT: model.gelu
  // CHECK-NEXT: model.param_ref @h.0.proj.weight : tensor<8x16xf32>
  // CHECK-NEXT: model.linear
  // CHECK-NEXT: %[[X1:.*]] = model.add %[[X0]], %{{.*}} : tensor<2x4x8xf32>
  // CHECK-NEXT: model.param_ref @h.1.ln.weight : tensor<8xf32>
  // CHECK-NEXT: model.rmsnorm
  // CHECK-NEXT: model.mul
  // CHECK-NEXT: model.param_ref @h.1.fc.weight : tensor<16x8xf32>
  // CHECK-NEXT: model.linear
  // CHECK-NEXT: model.gelu
  // CHECK-NEXT: model.param_ref @h.1.proj.weight : tensor<8x16xf32>
  // CHECK-NEXT: model.linear
  // CHECK-NEXT: %[[X2:.*]] = model.add %[[X1]], %{{.*}} : tensor<2x4x8xf32>
  // CHECK-NEXT: %[[GF:.*]] = model.param_ref @ln_f.weight
  // CHECK-NEXT: model.rmsnorm %[[X2]], %[[GF]]
  // CHECK-NEXT: model.param_ref @wte
  // CHECK-NEXT: model.linear
  // CHECK-NEXT: %[[LOSS:.*]] = model.cross_entropy
  // The head is not checkpointed: its backward reads the forward values,
  // among them the last layer's output %x2.
  // CHECK-NEXT: model.backward_seed
  // CHECK-NEXT: model.cross_entropy_backward
  // CHECK-NEXT: model.linear_grad_input
  // CHECK-NEXT: model.linear_grad_weight
  // CHECK-NEXT: %[[DX2:.*]], %{{.*}} = model.rmsnorm_backward %[[X2]], %[[GF]], %{{.*}}
  // CHECK-NEXT: model.accumulate_grad @ln_f.weight
  // h.1 is recomputed from its inputs %x1 and %x0, with new param_refs. Its
  // last linear and residual add are not: backward reads neither result.
  // CHECK-NEXT: %[[G1:.*]] = model.param_ref @h.1.ln.weight {model.recompute = "h.1"} : tensor<8xf32>
  // The recomputed op yields its own state, which its backward reads.
  // CHECK-NEXT: %[[N1:[^,]*]], %[[R1:[^ ]*]] = model.rmsnorm %[[X1]], %[[G1]] {model.recompute = "h.1"}
  // CHECK-NEXT: %[[S1:.*]] = model.mul %[[N1]], %[[X0]] {model.recompute = "h.1"}
  // CHECK-NEXT: %[[W1:.*]] = model.param_ref @h.1.fc.weight {model.recompute = "h.1"}
  // CHECK-NEXT: %[[U1:.*]] = model.linear %[[S1]], %[[W1]] {model.recompute = "h.1"}
  // CHECK-NEXT: %[[A1:.*]] = model.gelu %[[U1]] {model.recompute = "h.1"}
  // CHECK-NEXT: %[[P1:.*]] = model.param_ref @h.1.proj.weight {model.recompute = "h.1"}
  // The backward of h.1 reads the recomputed values.
  // CHECK-NEXT: %[[DA1:.*]] = model.linear_grad_input %[[DX2]], %[[P1]]
  // CHECK-NEXT: %[[DP1:.*]] = model.linear_grad_weight %[[DX2]], %[[A1]]
  // CHECK-NEXT: model.accumulate_grad @h.1.proj.weight, %[[DP1]]
  // CHECK-NEXT: %[[DU1:.*]] = model.gelu_backward %[[U1]], %[[DA1]]
  // CHECK-NEXT: %[[DS1:.*]] = model.linear_grad_input %[[DU1]], %[[W1]]
  // CHECK-NEXT: %[[DW1:.*]] = model.linear_grad_weight %[[DU1]], %[[S1]]
  // CHECK-NEXT: model.accumulate_grad @h.1.fc.weight, %[[DW1]]
  // CHECK-NEXT: %[[DN1:.*]] = model.mul %[[DS1]], %[[X0]]
  // CHECK-NEXT: %[[DX0_MUL:.*]] = model.mul %[[DS1]], %[[N1]]
  // CHECK-NEXT: %[[DX1_NORM:.*]], %[[DG1:.*]] = model.rmsnorm_backward %[[X1]], %[[G1]], %[[DN1]], %[[R1]]
  // CHECK-NEXT: %[[DX1:.*]] = model.add %[[DX2]], %[[DX1_NORM]]
  // CHECK-NEXT: model.accumulate_grad @h.1.ln.weight, %[[DG1]]
  // Then h.0, from its input %x0.
  // CHECK-NEXT: %[[G0:.*]] = model.param_ref @h.0.ln.weight {model.recompute = "h.0"}
  // CHECK-NEXT: %[[N0:[^,]*]], %[[R0:[^ ]*]] = model.rmsnorm %[[X0]], %[[G0]] {model.recompute = "h.0"}
  // CHECK-NEXT: %[[W0:.*]] = model.param_ref @h.0.fc.weight {model.recompute = "h.0"}
  // CHECK-NEXT: %[[U0:.*]] = model.linear %[[N0]], %[[W0]] {model.recompute = "h.0"}
  // CHECK-NEXT: %[[A0:.*]] = model.gelu %[[U0]] {model.recompute = "h.0"}
  // CHECK-NEXT: %[[P0:.*]] = model.param_ref @h.0.proj.weight {model.recompute = "h.0"}
  // CHECK-NEXT: %[[DX0_RES:.*]] = model.add %[[DX0_MUL]], %[[DX1]]
  // CHECK-NEXT: %[[DA0:.*]] = model.linear_grad_input %[[DX1]], %[[P0]]
  // CHECK-NEXT: %[[DP0:.*]] = model.linear_grad_weight %[[DX1]], %[[A0]]
  // CHECK-NEXT: model.accumulate_grad @h.0.proj.weight, %[[DP0]]
  // CHECK-NEXT: %[[DU0:.*]] = model.gelu_backward %[[U0]], %[[DA0]]
  // CHECK-NEXT: model.linear_grad_input %[[DU0]], %[[W0]]
  // CHECK-NEXT: %[[DW0:.*]] = model.linear_grad_weight %[[DU0]], %[[N0]]
  // CHECK-NEXT: model.accumulate_grad @h.0.fc.weight, %[[DW0]]
  // CHECK-NEXT: %[[DX0_NORM:.*]], %[[DG0:.*]] = model.rmsnorm_backward %[[X0]], %[[G0]], %{{.*}}, %[[R0]]
  // CHECK-NEXT: %[[DX0:.*]] = model.add %[[DX0_RES]], %[[DX0_NORM]]
  // CHECK-NEXT: model.accumulate_grad @h.0.ln.weight, %[[DG0]]
  // The embedding is not checkpointed either.
  // CHECK-NEXT: model.embedding_backward %[[DX0]], %[[TOK]]
  // CHECK-NEXT: model.add
  // CHECK-NEXT: model.accumulate_grad @wte
  // CHECK-NEXT: return %[[LOSS]]
  // CHECK-NEXT: }
  // The optimizer step is the same as without recomputation.
  // CHECK-LABEL: func.func @optimizer_step
  // CHECK-COUNT-8: model.adam_update
  // CHECK-NOT: model.adam_update

  // After the seed, no forward value of a layer is read but its inputs (and
  // the last layer's output, which the head's backward reads): the live
  // ranges of the layers' activations end in forward.
  // LIVE-LABEL: func.func @micro_step
  // LIVE-NEXT: model.param_ref @wte
  // LIVE-NEXT: %[[X0:.*]] = model.embedding
  // LIVE-NEXT: %[[G0:.*]] = model.param_ref @h.0.ln.weight
  // LIVE-NEXT: %[[N0:[^,]*]], %{{.*}} = model.rmsnorm
  // LIVE-NEXT: %[[W0:.*]] = model.param_ref @h.0.fc.weight
  // LIVE-NEXT: %[[U0:.*]] = model.linear
  // LIVE-NEXT: %[[A0:.*]] = model.gelu
  // LIVE-NEXT: %[[P0:.*]] = model.param_ref @h.0.proj.weight
  // LIVE-NEXT: %[[M0:.*]] = model.linear
  // LIVE-NEXT: %[[X1:.*]] = model.add
  // LIVE-NEXT: %[[G1:.*]] = model.param_ref @h.1.ln.weight
  // LIVE-NEXT: %[[N1:[^,]*]], %{{.*}} = model.rmsnorm
  // LIVE-NEXT: %[[S1:.*]] = model.mul
  // LIVE-NEXT: %[[W1:.*]] = model.param_ref @h.1.fc.weight
  // LIVE-NEXT: %[[U1:.*]] = model.linear
  // LIVE-NEXT: %[[A1:.*]] = model.gelu
  // LIVE-NEXT: %[[P1:.*]] = model.param_ref @h.1.proj.weight
  // LIVE-NEXT: %[[M1:.*]] = model.linear
  // LIVE-NEXT: %[[X2:.*]] = model.add
  // LIVE: model.backward_seed
  // LIVE-NOT: {{%}}[[G0]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[N0]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[W0]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[U0]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[A0]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[P0]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[M0]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[G1]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[N1]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[S1]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[W1]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[U1]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[A1]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[P1]]{{[^0-9_a-z]}}
  // LIVE-NOT: {{%}}[[M1]]{{[^0-9_a-z]}}
  // LIVE: return

  // OFF-LABEL: func.func @micro_step
  // OFF-NOT: model.recompute
  // OFF-COUNT-2: model.gelu %
  // OFF-NOT: model.gelu %
  // OFF-LABEL: func.func @optimizer_step

  // CSE-LABEL: func.func @micro_step
  // CSE-COUNT-13: {model.recompute = "h.{{[01]}}"
  // CSE-NOT: model.recompute
  // CSE-LABEL: func.func @optimizer_step
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x0 = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %g0 = model.param_ref @h.0.ln.weight : tensor<8xf32>
    %n0 = model.rmsnorm %x0, %g0 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %w0 = model.param_ref @h.0.fc.weight : tensor<16x8xf32>
    %u0 = model.linear %n0, %w0 : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %a0 = model.gelu %u0 : tensor<2x4x16xf32>
    %p0 = model.param_ref @h.0.proj.weight : tensor<8x16xf32>
    %m0 = model.linear %a0, %p0 : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
    %x1 = model.add %x0, %m0 : tensor<2x4x8xf32>
    %g1 = model.param_ref @h.1.ln.weight : tensor<8xf32>
    %n1 = model.rmsnorm %x1, %g1 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %s1 = model.mul %n1, %x0 : tensor<2x4x8xf32>
    %w1 = model.param_ref @h.1.fc.weight : tensor<16x8xf32>
    %u1 = model.linear %s1, %w1 : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %a1 = model.gelu %u1 : tensor<2x4x16xf32>
    %p1 = model.param_ref @h.1.proj.weight : tensor<8x16xf32>
    %m1 = model.linear %a1, %p1 : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
    %x2 = model.add %x1, %m1 : tensor<2x4x8xf32>
    %gf = model.param_ref @ln_f.weight : tensor<8xf32>
    %y = model.rmsnorm %x2, %gf : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %head = model.param_ref @wte : tensor<32x8xf32>
    %logits = model.linear %y, %head : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// An op of a layer that does not reach the loss has no backward and is not
// recomputed; a parameter read by a layer but named after another one (a
// weight shared across layers) gets a new param_ref like the layer's own.
// CHECK-LABEL: module @dead_and_shared
// LIVE-LABEL: module @dead_and_shared
// OFF-LABEL: module @dead_and_shared
// CSE-LABEL: module @dead_and_shared
module @dead_and_shared {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  model.param @layers.0.fc.weight : tensor<8x8xf32> init <normal(0.02)>
  model.param @layers.1.ln.weight : tensor<8xf32> init <ones>
  model.param @lm_head.weight : tensor<32x8xf32> init <normal(0.02)>

  // CHECK-LABEL: func.func @micro_step
  // CHECK: model.backward_seed
  // CHECK: model.accumulate_grad @lm_head.weight
  // layers.1 reads layers.0's weight through layers.0's param_ref; the
  // recomputation reads it again, in program order.
  // CHECK-NEXT: %[[W1:.*]] = model.param_ref @layers.0.fc.weight {model.recompute = "layers.1"}
  // CHECK-NEXT: model.param_ref @layers.1.ln.weight {model.recompute = "layers.1"}
  // CHECK-NEXT: model.rmsnorm {{.*}} {model.recompute = "layers.1"}
  // CHECK-NEXT: model.linear_grad_input %{{.*}}, %[[W1]]
  // CHECK-NOT: model.silu
  // CHECK: model.accumulate_grad @layers.1.ln.weight
  // CHECK-NEXT: %[[W0:.*]] = model.param_ref @layers.0.fc.weight {model.recompute = "layers.0"}
  // CHECK-NEXT: model.linear_grad_input %{{.*}}, %[[W0]]
  // CHECK-NOT: model.recompute
  // The two uses of the weight are summed and accumulated once.
  // CHECK: model.accumulate_grad @layers.0.fc.weight
  // CHECK-NOT: model.accumulate_grad @layers.0.fc.weight
  // CHECK: return
  // The dead silu stays in forward only.
  // OFF-LABEL: func.func @micro_step
  // OFF-COUNT-1: model.silu
  // OFF-NOT: model.silu
  // CSE-LABEL: func.func @micro_step
  // CSE-NOT: model.silu
  // CSE: func.func @optimizer_step
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x0 = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %w = model.param_ref @layers.0.fc.weight : tensor<8x8xf32>
    %h0 = model.linear %x0, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %x1 = model.add %x0, %h0 : tensor<2x4x8xf32>
    %g = model.param_ref @layers.1.ln.weight : tensor<8xf32>
    %n = model.rmsnorm %x1, %g : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %dead = model.silu %n : tensor<2x4x8xf32>
    %h1 = model.linear %n, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %x2 = model.add %x1, %h1 : tensor<2x4x8xf32>
    %head = model.param_ref @lm_head.weight : tensor<32x8xf32>
    %logits = model.linear %x2, %head : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A model without numbered layers has nothing to checkpoint.
// CHECK-LABEL: module @no_layers
// LIVE-LABEL: module @no_layers
// OFF-LABEL: module @no_layers
// CSE-LABEL: module @no_layers
module @no_layers {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  model.param @fc.weight : tensor<32x8xf32> init <normal(0.02)>

  // CHECK-LABEL: func.func @micro_step
  // CHECK-NOT: model.recompute
  // CHECK: func.func @optimizer_step
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %w = model.param_ref @fc.weight : tensor<32x8xf32>
    %logits = model.linear %x, %w : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
