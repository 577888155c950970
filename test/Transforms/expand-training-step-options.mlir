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
// RUN: not zeroc-opt %s --zero-expand-training-step="optimizer=lamb min-coeff=-0.5" 2>&1 | FileCheck %s --check-prefix=MINCOEFF
// RUN: not zeroc-opt %s --zero-expand-training-step="optimizer=lamb max-coeff=0.001" 2>&1 | FileCheck %s --check-prefix=MAXCOEFF
// Loss-scaling settings are not checked when loss scaling is off, nor LAMB's
// bounds without LAMB.
// RUN: zeroc-opt %s --zero-expand-training-step="hysteresis=0" | FileCheck %s --check-prefix=UNUSED
// RUN: zeroc-opt %s --zero-expand-training-step="optimizer=adamw max-coeff=0.001" | FileCheck %s --check-prefix=ADAMW
// LAMB with its bounds on every update, and no adamw.
// RUN: zeroc-opt %s --zero-expand-training-step="optimizer=lamb weight-decay=0.01 max-coeff=5 min-coeff=0.1" | FileCheck %s --check-prefix=LAMB
// bias-correction=false (DeepSpeed's bias_correction: false) marks every
// update no_bias_correction, Adam and LAMB alike; the default marks none.
// RUN: zeroc-opt %s --zero-expand-training-step="bias-correction=false" | FileCheck %s --check-prefix=NOBIAS
// RUN: zeroc-opt %s --zero-expand-training-step="optimizer=lamb bias-correction=false" | FileCheck %s --check-prefix=NOBIAS-LAMB
// RUN: zeroc-opt %s --zero-expand-training-step="bias-correction=true" | FileCheck %s --check-prefix=BIAS

// The optimizer is an enum option (adam, adamw, lamb): a bad value is refused
// when the pipeline is parsed.
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
// MINCOEFF: error: zero-expand-training-step: min_coeff must be >= 0, found -0.5
// MAXCOEFF: error: zero-expand-training-step: max_coeff must be >= min_coeff (0.01), found 0.001
// ADAMW: model.adam_update @wte {adamw,
// ADAMW-NOT: lamb
// LAMB-LABEL: func.func @optimizer_step
// LAMB: model.adam_update @wte {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lamb, lr = 1.000000e-03 : f64, max_coeff = 5.000000e+00 : f64, min_coeff = 1.000000e-01 : f64, weight_decay = 1.000000e-02 : f64}
// NOBIAS-LABEL: func.func @optimizer_step
// NOBIAS: model.adam_update @wte {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, no_bias_correction, weight_decay = 0.000000e+00 : f64}
// NOBIAS-LAMB: model.adam_update @wte {{{.*}}lamb, {{.*}}min_coeff = 1.000000e-02 : f64, no_bias_correction, weight_decay
// BIAS-LABEL: func.func @optimizer_step
// BIAS-NOT: no_bias_correction

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
