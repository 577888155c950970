// model-specialize: the config's micro-batch becomes the first dimension of
// the token arguments and of every value computed in the forward (learned
// positions included), and the training dtype the element type of the
// parameters and activations; the loss stays f32.
// RUN: zeroc-opt %s --model-specialize="micro-batch=4 dtype=bf16" | FileCheck %s
// Neither option: the module is unchanged.
// RUN: zeroc-opt %s --model-specialize > %t.keep
// RUN: zeroc-opt %s > %t.none
// RUN: diff %t.keep %t.none
// The dtype alone keeps the batch; the micro-batch alone keeps the dtype.
// RUN: zeroc-opt %s --model-specialize="dtype=f16" | FileCheck %s --check-prefix=F16
// RUN: zeroc-opt %s --model-specialize="micro-batch=1" | FileCheck %s --check-prefix=MB1
// The result is valid IR that the next pass takes.
// RUN: zeroc-opt %s --model-specialize="micro-batch=3 dtype=bf16" --zero-expand-training-step | zeroc-opt -verify-diagnostics > /dev/null
// A bad option value is refused.
// RUN: not zeroc-opt %s --model-specialize="dtype=fp8" 2>&1 | FileCheck %s --check-prefix=BADTYPE
// RUN: not zeroc-opt %s --model-specialize="micro-batch=-2" 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// CHECK: model.param @wte : tensor<32x8xbf16>
// CHECK: model.param @wpe : tensor<4x8xbf16>
// CHECK: model.param @fc.weight : tensor<16x8xbf16>
// CHECK: func.func @forward(%{{.*}}: tensor<4x4xi32>, %{{.*}}: tensor<4x4xi32>) -> tensor<f32>
// CHECK: model.param_ref @wte : tensor<32x8xbf16>
// CHECK: model.embedding {{.*}} -> tensor<4x4x8xbf16>
// CHECK: model.position_embedding {{.*}} : (tensor<4x8xbf16>) -> tensor<4x4x8xbf16>
// CHECK: model.add {{.*}} : tensor<4x4x8xbf16>
// CHECK: model.linear {{.*}} -> tensor<4x4x16xbf16>
// CHECK: model.gelu {{.*}} : tensor<4x4x16xbf16>
// CHECK: model.cross_entropy {{.*}} : (tensor<4x4x32xbf16>, tensor<4x4xi32>) -> tensor<f32>

// F16: model.param @wte : tensor<32x8xf16>
// F16: func.func @forward(%{{.*}}: tensor<2x4xi32>, %{{.*}}: tensor<2x4xi32>)
// F16: model.gelu {{.*}} : tensor<2x4x16xf16>

// MB1: model.param @wte : tensor<32x8xf32>
// MB1: func.func @forward(%{{.*}}: tensor<1x4xi32>, %{{.*}}: tensor<1x4xi32>)
// MB1: model.gelu {{.*}} : tensor<1x4x16xf32>

// BADTYPE: Cannot find option named 'fp8'
// NEGATIVE: error: model-specialize: micro-batch must be at least 1, found -2

module {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  model.param @wpe : tensor<4x8xf32> init <normal(0.01)>
  model.param @fc.weight : tensor<16x8xf32> init <normal(0.02)>
  model.param @fc.bias : tensor<16xf32> init <zeros>
  model.param @proj.weight : tensor<32x16xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %e = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %wpe = model.param_ref @wpe : tensor<4x8xf32>
    %p = model.position_embedding %wpe : (tensor<4x8xf32>) -> tensor<2x4x8xf32>
    %x = model.add %e, %p : tensor<2x4x8xf32>
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
