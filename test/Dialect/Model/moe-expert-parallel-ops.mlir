// Round trip of the expert-parallel split of the mixture-of-experts ops
// (zero-partition builds them): dispatch, local experts, combine (weighted
// and not) and the backwards.
// RUN: zeroc-opt %s | zeroc-opt | FileCheck %s
// RUN: zeroc-opt %s --mlir-print-op-generic | zeroc-opt | FileCheck %s

// CHECK-LABEL: func.func @split
func.func @split(%x: tensor<1x8x64xf32>, %w: tensor<1x8x2xf32>,
                 %idx: tensor<1x8x2xi32>, %w1: tensor<2x96x64xf32>,
                 %w2: tensor<2x64x96xf32>, %dy: tensor<1x8x64xf32>) {
  // CHECK: model.moe_dispatch %{{.*}}, %{{.*}} {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<1x8x2xi32>) -> tensor<16x64xf32>
  %rows = model.moe_dispatch %x, %idx {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<1x8x2xi32>) -> tensor<16x64xf32>
  // 16 rows x 2 x 96 = 3072 saved elements.
  // CHECK: model.moe_local_experts {{.*}} {max_expert_share = 5.000000e-01 : f64, num_experts = 4 : i64, top_k = 2 : i64} : {{.*}} -> (tensor<16x64xf32>, tensor<3072xf32>)
  %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 4 : i64, top_k = 2 : i64, max_expert_share = 0.5 : f64} : (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>) -> (tensor<16x64xf32>, tensor<3072xf32>)
  // CHECK: model.moe_combine %{{.*}}, %{{.*}}, %{{.*}} {num_experts = 4 : i64} : (tensor<16x64xf32>, tensor<1x8x2xi32>, tensor<1x8x2xf32>) -> tensor<1x8x64xf32>
  %y = model.moe_combine %out, %idx, %w {num_experts = 4 : i64} : (tensor<16x64xf32>, tensor<1x8x2xi32>, tensor<1x8x2xf32>) -> tensor<1x8x64xf32>
  // CHECK: model.moe_combine_backward {{.*}} -> (tensor<16x64xf32>, tensor<1x8x2xf32>)
  %dout, %dw = model.moe_combine_backward %dy, %out, %w, %idx {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<16x64xf32>, tensor<1x8x2xf32>, tensor<1x8x2xi32>) -> (tensor<16x64xf32>, tensor<1x8x2xf32>)
  // CHECK: model.moe_local_experts_backward
  %drows, %dw1, %dw3, %dw2 = model.moe_local_experts_backward %rows, %w1, %w1, %w2, %dout, %saved : (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>, tensor<16x64xf32>, tensor<3072xf32>) -> (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>)
  // CHECK: model.moe_combine %{{.*}}, %{{.*}} {num_experts = 4 : i64} : (tensor<16x64xf32>, tensor<1x8x2xi32>) -> tensor<1x8x64xf32>
  %dx = model.moe_combine %drows, %idx {num_experts = 4 : i64} : (tensor<16x64xf32>, tensor<1x8x2xi32>) -> tensor<1x8x64xf32>
  return
}
