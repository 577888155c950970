// Round trip of the mixture-of-experts ops: the router (with and without
// its saved logits), the experts (with the planning assumption and the
// saved state), and both backwards.
// RUN: zeroc-opt %s | zeroc-opt | FileCheck %s
// RUN: zeroc-opt %s --mlir-print-op-generic | zeroc-opt | FileCheck %s

// CHECK-LABEL: func.func @moe
func.func @moe(%x: tensor<2x8x16xbf16>, %gate: tensor<4x16xbf16>,
               %w1: tensor<4x24x16xbf16>, %w2: tensor<4x16x24xbf16>,
               %dy: tensor<2x8x16xbf16>) {
  // CHECK: model.moe_router %{{.*}}, %{{.*}} {normalize, top_k = 2 : i64} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>) -> (tensor<2x8x2xf32>, tensor<2x8x2xi32>)
  %w, %i = model.moe_router %x, %gate {normalize, top_k = 2 : i64} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>) -> (tensor<2x8x2xf32>, tensor<2x8x2xi32>)
  // CHECK: model.moe_router %{{.*}}, %{{.*}} {top_k = 1 : i64} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>) -> (tensor<2x8x1xf32>, tensor<2x8x1xi32>, tensor<2x8x4xf32>)
  %w1k, %i1k, %logits1 = model.moe_router %x, %gate {top_k = 1 : i64} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>) -> (tensor<2x8x1xf32>, tensor<2x8x1xi32>, tensor<2x8x4xf32>)
  // CHECK: %{{.*}}, %{{.*}}, %[[LOGITS:.*]] = model.moe_router {{.*}} -> (tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<2x8x4xf32>)
  %wt, %it, %logits = model.moe_router %x, %gate {normalize, top_k = 2 : i64} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>) -> (tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<2x8x4xf32>)
  // CHECK: model.moe_experts %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x16xbf16>, tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<4x24x16xbf16>, tensor<4x24x16xbf16>, tensor<4x16x24xbf16>) -> tensor<2x8x16xbf16>
  %y = model.moe_experts %x, %w, %i, %w1, %w1, %w2 : (tensor<2x8x16xbf16>, tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<4x24x16xbf16>, tensor<4x24x16xbf16>, tensor<4x16x24xbf16>) -> tensor<2x8x16xbf16>
  // The assumption is an attribute; the saved state is 16 tokens x 2 slots
  // x (2 x 24 + 16) = 2048 elements of the model dtype.
  // CHECK: %{{.*}}, %[[S:.*]] = model.moe_experts {{.*}} {max_expert_share = 5.000000e-01 : f64} : ({{.*}}) -> (tensor<2x8x16xbf16>, tensor<2048xbf16>)
  %yt, %saved = model.moe_experts %x, %wt, %it, %w1, %w1, %w2 {max_expert_share = 0.5 : f64} : (tensor<2x8x16xbf16>, tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<4x24x16xbf16>, tensor<4x24x16xbf16>, tensor<4x16x24xbf16>) -> (tensor<2x8x16xbf16>, tensor<2048xbf16>)
  // CHECK: model.moe_experts_backward {{.*}}, %[[S]] : ({{.*}}) -> (tensor<2x8x16xbf16>, tensor<2x8x2xf32>, tensor<4x24x16xbf16>, tensor<4x24x16xbf16>, tensor<4x16x24xbf16>)
  %dx, %dw, %dw1, %dw3, %dw2 = model.moe_experts_backward %x, %wt, %it, %w1, %w1, %w2, %dy, %saved : (tensor<2x8x16xbf16>, tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<4x24x16xbf16>, tensor<4x24x16xbf16>, tensor<4x16x24xbf16>, tensor<2x8x16xbf16>, tensor<2048xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x8x2xf32>, tensor<4x24x16xbf16>, tensor<4x24x16xbf16>, tensor<4x16x24xbf16>)
  // CHECK: model.moe_router_backward %{{.*}}, %{{.*}}, %{{.*}}, %[[LOGITS]], %{{.*}} {normalize} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>, tensor<2x8x2xf32>, tensor<2x8x4xf32>, tensor<2x8x2xi32>) -> (tensor<2x8x16xbf16>, tensor<4x16xbf16>)
  %dxr, %dgate = model.moe_router_backward %x, %gate, %dw, %logits, %it {normalize} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>, tensor<2x8x2xf32>, tensor<2x8x4xf32>, tensor<2x8x2xi32>) -> (tensor<2x8x16xbf16>, tensor<4x16xbf16>)
  return
}

// The load-balancing loss (output_router_logits): each router's statistics,
// the loss over all of them, and both backwards.
// CHECK-LABEL: func.func @load_balancing
func.func @load_balancing(%x: tensor<2x8x16xbf16>, %gate: tensor<4x16xbf16>,
                          %i: tensor<2x8x2xi32>, %ce: tensor<f32>) {
  // CHECK: %[[S0:.*]] = model.moe_router_stats %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x16xbf16>, tensor<4x16xbf16>, tensor<2x8x2xi32>) -> tensor<2x4xf32>
  %s0 = model.moe_router_stats %x, %gate, %i : (tensor<2x8x16xbf16>, tensor<4x16xbf16>, tensor<2x8x2xi32>) -> tensor<2x4xf32>
  %s1 = model.moe_router_stats %x, %gate, %i : (tensor<2x8x16xbf16>, tensor<4x16xbf16>, tensor<2x8x2xi32>) -> tensor<2x4xf32>
  // CHECK: %[[L:.*]] = model.moe_load_balancing_loss %{{.*}}, %[[S0]], %{{.*}} {coefficient = 2.000000e-02 : f64, top_k = 2 : i64} : (tensor<f32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<f32>
  %l = model.moe_load_balancing_loss %ce, %s0, %s1 {coefficient = 0.02 : f64, top_k = 2 : i64} : (tensor<f32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<f32>
  // CHECK: %[[DS:.*]] = model.moe_load_balancing_loss_backward %[[L]], %[[S0]], %{{.*}} {coefficient = 2.000000e-02 : f64, top_k = 2 : i64} : (tensor<f32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %ds = model.moe_load_balancing_loss_backward %l, %s0, %s1 {coefficient = 0.02 : f64, top_k = 2 : i64} : (tensor<f32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: model.moe_router_stats_backward %{{.*}}, %{{.*}}, %[[DS]] : (tensor<2x8x16xbf16>, tensor<4x16xbf16>, tensor<2x4xf32>) -> (tensor<2x8x16xbf16>, tensor<4x16xbf16>)
  %dx, %dg = model.moe_router_stats_backward %x, %gate, %ds : (tensor<2x8x16xbf16>, tensor<4x16xbf16>, tensor<2x4xf32>) -> (tensor<2x8x16xbf16>, tensor<4x16xbf16>)
  return
}
