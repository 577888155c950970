// Round trip of the ops and attributes of Mistral, Gemma and Phi-3: the
// sliding window, scale, split and its backward, rmsnorm's unit offset.
// RUN: zeroc-opt %s -split-input-file | zeroc-opt -split-input-file | FileCheck %s
// RUN: zeroc-opt %s -split-input-file --mlir-print-op-generic | zeroc-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @archs
func.func @archs(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>, %qkv: tensor<2x8x32xf32>,
                 %dy: tensor<2x8x16xf32>, %dk: tensor<2x8x8xf32>) {
  // CHECK: model.scale %{{.*}} {factor = 4.000000e+00 : f64} : tensor<2x8x16xf32>
  %0 = model.scale %x {factor = 4.0 : f64} : tensor<2x8x16xf32>
  // CHECK: %{{.*}}:3 = model.split %{{.*}} : (tensor<2x8x32xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)
  %q, %k, %v = model.split %qkv : (tensor<2x8x32xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)
  // CHECK: model.split_backward %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x32xf32>
  %1 = model.split_backward %dy, %dk, %dk : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x32xf32>
  // The window is printed when set, left out when 0.
  // CHECK: model.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 3 : i64}
  %a = model.causal_attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 3 : i64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
  // CHECK: model.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 4 : i64, num_kv_heads = 2 : i64} :
  %b = model.causal_attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 0 : i64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
  // CHECK: %{{.*}}, %[[L:.*]] = model.causal_attention %{{.*}}, %{{.*}}, %{{.*}} {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 5 : i64} : ({{.*}}) -> (tensor<2x8x16xf32>, tensor<2x4x8xf32>)
  %c, %lse = model.causal_attention %q, %k, %v {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 5 : i64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x4x8xf32>)
  // CHECK: model.causal_attention_backward {{.*}}, %[[L]] {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 5 : i64}
  %2:3 = model.causal_attention_backward %q, %k, %v, %c, %dy, %lse {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 5 : i64} : (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x4x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>)
  // CHECK: %{{.*}}, %[[R:.*]] = model.rmsnorm %{{.*}}, %{{.*}} {unit_offset} : (tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  %n, %rrms = model.rmsnorm %x, %g {unit_offset} : (tensor<2x8x16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
  // CHECK: model.rmsnorm_backward %{{.*}}, %{{.*}}, %{{.*}}, %[[R]] {unit_offset}
  %3:2 = model.rmsnorm_backward %x, %g, %dy, %rrms {unit_offset} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>, tensor<2x8xf32>) -> (tensor<2x8x16xf32>, tensor<16xf32>)
  return
}
