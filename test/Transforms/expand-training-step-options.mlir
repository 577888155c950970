// Options of zero-expand-training-step that it rejects, with the message
// naming the option (DeepSpeed's config key where there is one).
// RUN: not zeroc-opt %s --zero-expand-training-step="optimizer=sgd" 2>&1 | FileCheck %s --check-prefix=OPTIMIZER
// RUN: not zeroc-opt %s --zero-expand-training-step="grad-accum=0" 2>&1 | FileCheck %s --check-prefix=ACCUM
// RUN: not zeroc-opt %s --zero-expand-training-step="clip=-1" 2>&1 | FileCheck %s --check-prefix=CLIP
// RUN: not zeroc-opt %s --zero-expand-training-step="lr=-0.5" 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not zeroc-opt %s --zero-expand-training-step="beta1=1" 2>&1 | FileCheck %s --check-prefix=BETA1
// RUN: not zeroc-opt %s --zero-expand-training-step="beta2=1.5" 2>&1 | FileCheck %s --check-prefix=BETA2
// RUN: not zeroc-opt %s --zero-expand-training-step="eps=0" 2>&1 | FileCheck %s --check-prefix=EPS
// RUN: not zeroc-opt %s --zero-expand-training-step="weight-decay=-0.01" 2>&1 | FileCheck %s --check-prefix=DECAY
// RUN: not zeroc-opt %s --zero-expand-training-step="loss-scaling=true loss-scale=-2" 2>&1 | FileCheck %s --check-prefix=SCALE
// RUN: not zeroc-opt %s --zero-expand-training-step="loss-scaling=true initial-scale-power=128" 2>&1 | FileCheck %s --check-prefix=POWER
// RUN: not zeroc-opt %s --zero-expand-training-step="loss-scaling=true loss-scale-window=0" 2>&1 | FileCheck %s --check-prefix=WINDOW
// RUN: not zeroc-opt %s --zero-expand-training-step="loss-scaling=true hysteresis=0" 2>&1 | FileCheck %s --check-prefix=HYSTERESIS
// RUN: not zeroc-opt %s --zero-expand-training-step="loss-scaling=true min-loss-scale=0" 2>&1 | FileCheck %s --check-prefix=MINSCALE
// Loss-scaling settings are not checked when loss scaling is off.
// RUN: zeroc-opt %s --zero-expand-training-step="hysteresis=0" | FileCheck %s --check-prefix=UNUSED

// The optimizer is an enum option (adam, adamw): a bad value is refused when
// the pipeline is parsed.
// OPTIMIZER: for the --optimizer option: Cannot find option named 'sgd'!
// ACCUM: error: zero-expand-training-step: grad-accum must be >= 1, found 0
// CLIP: error: zero-expand-training-step: clip must be >= 0 (0 disables clipping), found -1
// LR: error: zero-expand-training-step: lr must be >= 0, found -0.5
// BETA1: error: zero-expand-training-step: beta1 must be in [0, 1), found 1
// BETA2: error: zero-expand-training-step: beta2 must be in [0, 1), found 1.5
// EPS: error: zero-expand-training-step: eps must be positive, found 0
// DECAY: error: zero-expand-training-step: weight_decay must be >= 0, found -0.01
// SCALE: error: zero-expand-training-step: static_loss_scale must be >= 0 (0 selects dynamic loss scaling), found -2
// POWER: error: zero-expand-training-step: initial_scale_power must be in [0, 127] (2^power must be a finite f32), found 128
// WINDOW: error: zero-expand-training-step: loss_scale_window must be >= 1, found 0
// HYSTERESIS: error: zero-expand-training-step: hysteresis must be >= 1, found 0
// MINSCALE: error: zero-expand-training-step: min_loss_scale must be positive, found 0
// UNUSED: func.func @optimizer_step
// UNUSED-NOT: model.unscale_grads

module @options {
  model.param @wte : tensor<32x8xf32> init <normal(0.02)>
  func.func @forward(%tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
    %wte = model.param_ref @wte : tensor<32x8xf32>
    %x = model.embedding %wte, %tokens : (tensor<32x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
    %logits = model.linear %x, %wte : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %loss = model.cross_entropy %logits, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
