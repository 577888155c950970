// zero-insert-collectives at each ZeRO stage, on one small bf16 model after
// zero-partition (world size 4): an embedding @e (16x4) that the head reuses,
// a linear @w (4x4) with bias @b (4); two micro-steps, fp16-style loss
// scaling and clipping. Stage 3 uses persistence threshold 4, so @b stays
// replicated there.
// RUN: zeroc-opt %s -split-input-file --zero-insert-collectives | FileCheck %s
// DeepSpeed's reduce_scatter=false: stages 1-2 reduce with all-reduce.
// RUN: zeroc-opt %s -split-input-file --zero-insert-collectives=reduce-scatter=false | FileCheck %s --check-prefix=ALLRED
// The output is valid IR and a valid schedule.
// RUN: zeroc-opt %s -split-input-file --zero-insert-collectives | zeroc-opt -split-input-file -verify-diagnostics > /dev/null
// RUN: zeroc-opt %s -split-input-file --zero-insert-collectives --zero-verify-schedule > /dev/null

// Stage 0: parameters are read in place and gradients accumulated locally;
// the boundary all-reduces each accumulator before unscaling and clipping.
// CHECK-LABEL: module @stage0
// CHECK-LABEL: func.func @micro_step
// CHECK-NEXT:    %[[E:.*]] = sched.read @e : tensor<16x4xbf16>
// CHECK-NEXT:    %[[X:.*]] = model.embedding %[[E]], %arg0
// CHECK-NEXT:    %[[W:.*]] = sched.read @w : tensor<4x4xbf16>
// CHECK-NEXT:    %[[B:.*]] = sched.read @b : tensor<4xbf16>
// CHECK-NEXT:    model.linear %[[X]], %[[W]], %[[B]]
// CHECK-NEXT:    model.linear %{{.*}}, %[[E]]
// CHECK-NOT:     sched.read
// CHECK:         %[[DB:.*]] = model.linear_grad_bias
// CHECK-NEXT:    sched.accumulate %[[DB]] into @b.grad : tensor<4xbf16>
// CHECK-NEXT:    sched.accumulate %{{.*}} into @w.grad : tensor<4x4xbf16>
// CHECK-NEXT:    model.embedding_backward
// CHECK-NEXT:    %[[DE:.*]] = model.add
// CHECK-NEXT:    sched.accumulate %[[DE]] into @e.grad : tensor<16x4xbf16>
// CHECK-NEXT:    return
// CHECK-LABEL: func.func @optimizer_step
// CHECK-NEXT:    %[[T0:.*]] = sched.all_reduce_start [@e.grad]
// CHECK-NEXT:    sched.wait %[[T0]]
// CHECK-NEXT:    %[[T1:.*]] = sched.all_reduce_start [@w.grad]
// CHECK-NEXT:    sched.wait %[[T1]]
// CHECK-NEXT:    %[[T2:.*]] = sched.all_reduce_start [@b.grad]
// CHECK-NEXT:    sched.wait %[[T2]]
// CHECK-NEXT:    sched.unscale_grads [@e.grad, @w.grad, @b.grad] {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
// CHECK-NEXT:    sched.clip_grad_norm [@e.grad, @w.grad, @b.grad] {max_norm = 1.000000e+00 : f64}
// CHECK-NEXT:    sched.adam_update @e grad @e.grad master @e.master exp_avg @e.exp_avg exp_avg_sq @e.exp_avg_sq on device {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT:    sched.adam_update @w grad @w.grad master @w.master exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device
// CHECK-NEXT:    sched.adam_update @b grad @b.grad master @b.master exp_avg @b.exp_avg exp_avg_sq @b.exp_avg_sq on device
// CHECK-NEXT:    sched.zero_grads [@e.grad, @w.grad, @b.grad]
// CHECK-NEXT:    return
// Stage 0 has nothing to all-gather after the update.
// CHECK-NOT:   all_gather
// ALLRED-LABEL: module @stage0
// ALLRED:       sched.all_reduce_start [@e.grad]
// ALLRED-NOT:   all_reduce}
module @stage0 attributes {sched.stage = 0 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<16x4xbf16> param on device init #model.init<normal(2.000000e-02)>
  sched.tensor @e.grad : tensor<16x4xbf16> grad of @e on device
  sched.tensor @e.master : tensor<16x4xf32> master of @e on device
  sched.tensor @e.exp_avg : tensor<16x4xf32> exp_avg of @e on device
  sched.tensor @e.exp_avg_sq : tensor<16x4xf32> exp_avg_sq of @e on device
  sched.tensor @w : tensor<4x4xbf16> param on device init #model.init<normal(2.000000e-02)>
  sched.tensor @w.grad : tensor<4x4xbf16> grad of @w on device
  sched.tensor @w.master : tensor<4x4xf32> master of @w on device
  sched.tensor @w.exp_avg : tensor<4x4xf32> exp_avg of @w on device
  sched.tensor @w.exp_avg_sq : tensor<4x4xf32> exp_avg_sq of @w on device
  sched.tensor @b : tensor<4xbf16> param on device init #model.init<zeros>
  sched.tensor @b.grad : tensor<4xbf16> grad of @b on device
  sched.tensor @b.master : tensor<4xf32> master of @b on device
  sched.tensor @b.exp_avg : tensor<4xf32> exp_avg of @b on device
  sched.tensor @b.exp_avg_sq : tensor<4xf32> exp_avg_sq of @b on device
  func.func @micro_step(%arg0: tensor<1x2xi32>, %arg1: tensor<1x2xi32>) -> tensor<f32> {
    %0 = model.param_ref @e : tensor<16x4xbf16>
    %1 = model.embedding %0, %arg0 : (tensor<16x4xbf16>, tensor<1x2xi32>) -> tensor<1x2x4xbf16>
    %2 = model.param_ref @w : tensor<4x4xbf16>
    %3 = model.param_ref @b : tensor<4xbf16>
    %4 = model.linear %1, %2, %3 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>, tensor<4xbf16>) -> tensor<1x2x4xbf16>
    %5 = model.linear %4, %0 : (tensor<1x2x4xbf16>, tensor<16x4xbf16>) -> tensor<1x2x16xbf16>
    %6 = model.cross_entropy %5, %arg1 : (tensor<1x2x16xbf16>, tensor<1x2xi32>) -> tensor<f32>
    %7 = model.backward_seed {loss_scaling, micro_steps = 2 : i64} : tensor<f32>
    %8 = model.cross_entropy_backward %5, %arg1, %7 : (tensor<1x2x16xbf16>, tensor<1x2xi32>, tensor<f32>) -> tensor<1x2x16xbf16>
    %9 = model.linear_grad_input %8, %0 : (tensor<1x2x16xbf16>, tensor<16x4xbf16>) -> tensor<1x2x4xbf16>
    %10 = model.linear_grad_weight %8, %4 : (tensor<1x2x16xbf16>, tensor<1x2x4xbf16>) -> tensor<16x4xbf16>
    %11 = model.linear_grad_input %9, %2 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>) -> tensor<1x2x4xbf16>
    %12 = model.linear_grad_weight %9, %1 : (tensor<1x2x4xbf16>, tensor<1x2x4xbf16>) -> tensor<4x4xbf16>
    %13 = model.linear_grad_bias %9 : (tensor<1x2x4xbf16>) -> tensor<4xbf16>
    model.accumulate_grad @b, %13 : tensor<4xbf16>
    model.accumulate_grad @w, %12 : tensor<4x4xbf16>
    %14 = model.embedding_backward %11, %arg0 : (tensor<1x2x4xbf16>, tensor<1x2xi32>) -> tensor<16x4xbf16>
    %15 = model.add %10, %14 : tensor<16x4xbf16>
    model.accumulate_grad @e, %15 : tensor<16x4xbf16>
    return %6 : tensor<f32>
  }
  func.func @optimizer_step() {
    model.unscale_grads {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
    model.clip_grad_norm {max_norm = 1.000000e+00 : f64}
    model.adam_update @e {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @w {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @b {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    return
  }
}


// -----

// Stage 1: gradients are accumulated into the replicated flat buffer at the
// parameters' offsets in the group (@e 0, @w 64, @b 80); the boundary
// reduce-scatters that buffer in place, before unscaling and clipping, and
// one Adam step updates this rank's partition of the group.
// CHECK-LABEL: module @stage1
// CHECK-LABEL: func.func @micro_step
// CHECK-NOT:     all_gather
// CHECK:         %[[DB:.*]] = model.linear_grad_bias
// CHECK-NEXT:    sched.accumulate %[[DB]] into @zero.flat0.grad at 80 : tensor<4xbf16>
// CHECK-NEXT:    sched.accumulate %{{.*}} into @zero.flat0.grad at 64 : tensor<4x4xbf16>
// CHECK-NEXT:    model.embedding_backward
// CHECK-NEXT:    %[[DE:.*]] = model.add
// CHECK-NEXT:    sched.accumulate %[[DE]] into @zero.flat0.grad : tensor<16x4xbf16>
// CHECK-NEXT:    return
// CHECK-LABEL: func.func @optimizer_step
// CHECK-NEXT:    %[[G:.*]] = sched.read @zero.flat0.grad : tensor<88xbf16>
// CHECK-NEXT:    %[[T:.*]] = sched.reduce_scatter_start %[[G]] into [@zero.flat0.grad] at [0] : tensor<88xbf16>
// CHECK-NEXT:    sched.wait %[[T]]
// CHECK-NEXT:    sched.unscale_grads [@zero.flat0.grad]
// CHECK-NEXT:    sched.clip_grad_norm [@zero.flat0.grad]
// CHECK-NEXT:    sched.adam_update @zero.flat0 grad @zero.flat0.grad master @zero.flat0.master exp_avg @zero.flat0.exp_avg exp_avg_sq @zero.flat0.exp_avg_sq on device {adamw,
// CHECK-NEXT:    %[[U:.*]] = sched.all_gather_updates_start [@zero.flat0]
// CHECK-NEXT:    sched.wait %[[U]]
// CHECK-NEXT:    sched.zero_grads [@zero.flat0.grad]
// CHECK-NEXT:    return
// ALLRED-LABEL: module @stage1
// ALLRED-LABEL: func.func @optimizer_step
// ALLRED-NEXT:    %[[G:.*]] = sched.read @zero.flat0.grad : tensor<88xbf16>
// ALLRED-NEXT:    sched.reduce_scatter_start %[[G]] into [@zero.flat0.grad] at [0] {all_reduce} : tensor<88xbf16>
module @stage1 attributes {sched.stage = 1 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<16x4xbf16> param on device init #model.init<normal(2.000000e-02)>
  sched.tensor @w : tensor<4x4xbf16> param on device init #model.init<normal(2.000000e-02)>
  sched.tensor @b : tensor<4xbf16> param on device init #model.init<zeros>
  sched.flat_group @zero.flat0 [@e, @w, @b] numel 84 padded 88
  sched.tensor @zero.flat0.grad : tensor<88xbf16> grad of @zero.flat0 on device
  sched.tensor @zero.flat0.master : tensor<88xf32> master of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg : tensor<88xf32> exp_avg of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg_sq : tensor<88xf32> exp_avg_sq of @zero.flat0 sharded on device
  func.func @micro_step(%arg0: tensor<1x2xi32>, %arg1: tensor<1x2xi32>) -> tensor<f32> {
    %0 = model.param_ref @e : tensor<16x4xbf16>
    %1 = model.embedding %0, %arg0 : (tensor<16x4xbf16>, tensor<1x2xi32>) -> tensor<1x2x4xbf16>
    %2 = model.param_ref @w : tensor<4x4xbf16>
    %3 = model.param_ref @b : tensor<4xbf16>
    %4 = model.linear %1, %2, %3 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>, tensor<4xbf16>) -> tensor<1x2x4xbf16>
    %5 = model.linear %4, %0 : (tensor<1x2x4xbf16>, tensor<16x4xbf16>) -> tensor<1x2x16xbf16>
    %6 = model.cross_entropy %5, %arg1 : (tensor<1x2x16xbf16>, tensor<1x2xi32>) -> tensor<f32>
    %7 = model.backward_seed {loss_scaling, micro_steps = 2 : i64} : tensor<f32>
    %8 = model.cross_entropy_backward %5, %arg1, %7 : (tensor<1x2x16xbf16>, tensor<1x2xi32>, tensor<f32>) -> tensor<1x2x16xbf16>
    %9 = model.linear_grad_input %8, %0 : (tensor<1x2x16xbf16>, tensor<16x4xbf16>) -> tensor<1x2x4xbf16>
    %10 = model.linear_grad_weight %8, %4 : (tensor<1x2x16xbf16>, tensor<1x2x4xbf16>) -> tensor<16x4xbf16>
    %11 = model.linear_grad_input %9, %2 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>) -> tensor<1x2x4xbf16>
    %12 = model.linear_grad_weight %9, %1 : (tensor<1x2x4xbf16>, tensor<1x2x4xbf16>) -> tensor<4x4xbf16>
    %13 = model.linear_grad_bias %9 : (tensor<1x2x4xbf16>) -> tensor<4xbf16>
    model.accumulate_grad @b, %13 : tensor<4xbf16>
    model.accumulate_grad @w, %12 : tensor<4x4xbf16>
    %14 = model.embedding_backward %11, %arg0 : (tensor<1x2x4xbf16>, tensor<1x2xi32>) -> tensor<16x4xbf16>
    %15 = model.add %10, %14 : tensor<16x4xbf16>
    model.accumulate_grad @e, %15 : tensor<16x4xbf16>
    return %6 : tensor<f32>
  }
  func.func @optimizer_step() {
    model.unscale_grads {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
    model.clip_grad_norm {max_norm = 1.000000e+00 : f64}
    model.adam_update @e {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @w {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @b {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    return
  }
}


// -----

// Stage 2: each gradient is reduce-scattered into the sharded flat buffer
// at its offset in the group as soon as it is complete; the boundary only
// unscales, clips and updates.
// CHECK-LABEL: module @stage2
// CHECK-LABEL: func.func @micro_step
// CHECK-NOT:     sched.accumulate
// CHECK:         %[[DB:.*]] = model.linear_grad_bias
// CHECK-NEXT:    %[[T0:.*]] = sched.reduce_scatter_start %[[DB]] into [@zero.flat0.grad] at [80] : tensor<4xbf16>
// CHECK-NEXT:    sched.wait %[[T0]]
// CHECK-NEXT:    %[[T1:.*]] = sched.reduce_scatter_start %{{.*}} into [@zero.flat0.grad] at [64] : tensor<4x4xbf16>
// CHECK-NEXT:    sched.wait %[[T1]]
// CHECK-NEXT:    model.embedding_backward
// CHECK-NEXT:    %[[DE:.*]] = model.add
// CHECK-NEXT:    %[[T2:.*]] = sched.reduce_scatter_start %[[DE]] into [@zero.flat0.grad] at [0] : tensor<16x4xbf16>
// CHECK-NEXT:    sched.wait %[[T2]]
// CHECK-NEXT:    return
// CHECK-LABEL: func.func @optimizer_step
// CHECK-NEXT:    sched.unscale_grads [@zero.flat0.grad]
// CHECK-NEXT:    sched.clip_grad_norm [@zero.flat0.grad]
// CHECK-NEXT:    sched.adam_update @zero.flat0 grad @zero.flat0.grad master @zero.flat0.master
// CHECK-NEXT:    %[[U:.*]] = sched.all_gather_updates_start [@zero.flat0]
// CHECK-NEXT:    sched.wait %[[U]]
// CHECK-NEXT:    sched.zero_grads [@zero.flat0.grad]
// CHECK-NEXT:    return
// ALLRED-LABEL: module @stage2
// ALLRED-COUNT-3: sched.reduce_scatter_start {{.*}} {all_reduce}
// ALLRED-LABEL: func.func @optimizer_step
module @stage2 attributes {sched.stage = 2 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<16x4xbf16> param on device init #model.init<normal(2.000000e-02)>
  sched.tensor @w : tensor<4x4xbf16> param on device init #model.init<normal(2.000000e-02)>
  sched.tensor @b : tensor<4xbf16> param on device init #model.init<zeros>
  sched.flat_group @zero.flat0 [@e, @w, @b] numel 84 padded 88
  sched.tensor @zero.flat0.grad : tensor<88xbf16> grad of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.master : tensor<88xf32> master of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg : tensor<88xf32> exp_avg of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg_sq : tensor<88xf32> exp_avg_sq of @zero.flat0 sharded on device
  func.func @micro_step(%arg0: tensor<1x2xi32>, %arg1: tensor<1x2xi32>) -> tensor<f32> {
    %0 = model.param_ref @e : tensor<16x4xbf16>
    %1 = model.embedding %0, %arg0 : (tensor<16x4xbf16>, tensor<1x2xi32>) -> tensor<1x2x4xbf16>
    %2 = model.param_ref @w : tensor<4x4xbf16>
    %3 = model.param_ref @b : tensor<4xbf16>
    %4 = model.linear %1, %2, %3 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>, tensor<4xbf16>) -> tensor<1x2x4xbf16>
    %5 = model.linear %4, %0 : (tensor<1x2x4xbf16>, tensor<16x4xbf16>) -> tensor<1x2x16xbf16>
    %6 = model.cross_entropy %5, %arg1 : (tensor<1x2x16xbf16>, tensor<1x2xi32>) -> tensor<f32>
    %7 = model.backward_seed {loss_scaling, micro_steps = 2 : i64} : tensor<f32>
    %8 = model.cross_entropy_backward %5, %arg1, %7 : (tensor<1x2x16xbf16>, tensor<1x2xi32>, tensor<f32>) -> tensor<1x2x16xbf16>
    %9 = model.linear_grad_input %8, %0 : (tensor<1x2x16xbf16>, tensor<16x4xbf16>) -> tensor<1x2x4xbf16>
    %10 = model.linear_grad_weight %8, %4 : (tensor<1x2x16xbf16>, tensor<1x2x4xbf16>) -> tensor<16x4xbf16>
    %11 = model.linear_grad_input %9, %2 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>) -> tensor<1x2x4xbf16>
    %12 = model.linear_grad_weight %9, %1 : (tensor<1x2x4xbf16>, tensor<1x2x4xbf16>) -> tensor<4x4xbf16>
    %13 = model.linear_grad_bias %9 : (tensor<1x2x4xbf16>) -> tensor<4xbf16>
    model.accumulate_grad @b, %13 : tensor<4xbf16>
    model.accumulate_grad @w, %12 : tensor<4x4xbf16>
    %14 = model.embedding_backward %11, %arg0 : (tensor<1x2x4xbf16>, tensor<1x2xi32>) -> tensor<16x4xbf16>
    %15 = model.add %10, %14 : tensor<16x4xbf16>
    model.accumulate_grad @e, %15 : tensor<16x4xbf16>
    return %6 : tensor<f32>
  }
  func.func @optimizer_step() {
    model.unscale_grads {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
    model.clip_grad_norm {max_norm = 1.000000e+00 : f64}
    model.adam_update @e {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @w {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @b {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    return
  }
}


// -----

// Stage 3: @e and @w are gathered before their first use in forward and
// again before their first use in backward, each released after the last
// use in its phase; the replicated @b is read in place. Gradients are
// reduce-scattered into each parameter's own shard. After the update only
// the replicated @b is all-gathered.
// CHECK-LABEL: module @stage3
// CHECK-LABEL: func.func @micro_step
// CHECK-NEXT:    %[[ES:.*]] = sched.read @e : tensor<16xbf16>
// CHECK-NEXT:    %[[ET:.*]] = sched.all_gather_start %[[ES]] for [@e] : tensor<16xbf16>
// CHECK-NEXT:    %[[E:.*]] = sched.wait %[[ET]] : tensor<16x4xbf16>
// CHECK-NEXT:    %[[X:.*]] = model.embedding %[[E]], %arg0
// CHECK-NEXT:    %[[B:.*]] = sched.read @b : tensor<4xbf16>
// CHECK-NEXT:    %[[WS:.*]] = sched.read @w : tensor<4xbf16>
// CHECK-NEXT:    %[[WT:.*]] = sched.all_gather_start %[[WS]] for [@w] : tensor<4xbf16>
// CHECK-NEXT:    %[[W:.*]] = sched.wait %[[WT]] : tensor<4x4xbf16>
// CHECK-NEXT:    %[[H:.*]] = model.linear %[[X]], %[[W]], %[[B]]
// CHECK-NEXT:    sched.release %[[W]] : tensor<4x4xbf16>
// The head is @e's last forward use.
// CHECK-NEXT:    %[[L:.*]] = model.linear %[[H]], %[[E]]
// CHECK-NEXT:    sched.release %[[E]] : tensor<16x4xbf16>
// CHECK-NEXT:    model.cross_entropy
// CHECK-NEXT:    model.backward_seed
// CHECK-NEXT:    %[[DL:.*]] = model.cross_entropy_backward
// CHECK-NEXT:    %[[ES2:.*]] = sched.read @e : tensor<16xbf16>
// CHECK-NEXT:    %[[ET2:.*]] = sched.all_gather_start %[[ES2]] for [@e] : tensor<16xbf16>
// CHECK-NEXT:    %[[E2:.*]] = sched.wait %[[ET2]] : tensor<16x4xbf16>
// CHECK-NEXT:    %[[DH:.*]] = model.linear_grad_input %[[DL]], %[[E2]]
// CHECK-NEXT:    sched.release %[[E2]] : tensor<16x4xbf16>
// CHECK-NEXT:    model.linear_grad_weight %[[DL]], %[[H]]
// CHECK-NEXT:    %[[WS2:.*]] = sched.read @w : tensor<4xbf16>
// CHECK-NEXT:    %[[WT2:.*]] = sched.all_gather_start %[[WS2]] for [@w] : tensor<4xbf16>
// CHECK-NEXT:    %[[W2:.*]] = sched.wait %[[WT2]] : tensor<4x4xbf16>
// CHECK-NEXT:    model.linear_grad_input %[[DH]], %[[W2]]
// CHECK-NEXT:    sched.release %[[W2]] : tensor<4x4xbf16>
// CHECK-NEXT:    model.linear_grad_weight
// CHECK-NEXT:    %[[DB:.*]] = model.linear_grad_bias
// CHECK-NEXT:    %[[T0:.*]] = sched.reduce_scatter_start %[[DB]] into [@b.grad] at [0] : tensor<4xbf16>
// CHECK-NEXT:    sched.wait %[[T0]]
// CHECK-NEXT:    %[[T1:.*]] = sched.reduce_scatter_start %{{.*}} into [@w.grad] at [0] : tensor<4x4xbf16>
// CHECK-NEXT:    sched.wait %[[T1]]
// CHECK-NEXT:    model.embedding_backward
// CHECK-NEXT:    %[[DE:.*]] = model.add
// CHECK-NEXT:    %[[T2:.*]] = sched.reduce_scatter_start %[[DE]] into [@e.grad] at [0] : tensor<16x4xbf16>
// CHECK-NEXT:    sched.wait %[[T2]]
// CHECK-NEXT:    return
// CHECK-LABEL: func.func @optimizer_step
// CHECK-NEXT:    sched.unscale_grads [@e.grad, @w.grad, @b.grad]
// CHECK-NEXT:    sched.clip_grad_norm [@e.grad, @w.grad, @b.grad]
// CHECK-NEXT:    sched.adam_update @e grad @e.grad master @e.master exp_avg @e.exp_avg exp_avg_sq @e.exp_avg_sq on device
// CHECK-NEXT:    sched.adam_update @w grad @w.grad master @w.master
// CHECK-NEXT:    sched.adam_update @b grad @b.grad master @b.master
// CHECK-NEXT:    %[[U:.*]] = sched.all_gather_updates_start [@b]
// CHECK-NEXT:    sched.wait %[[U]]
// CHECK-NEXT:    sched.zero_grads [@e.grad, @w.grad, @b.grad]
// CHECK-NEXT:    return
// reduce-scatter=false is a stage 1-2 setting.
// ALLRED-LABEL: module @stage3
// ALLRED-NOT:   all_reduce
module @stage3 attributes {sched.stage = 3 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<16x4xbf16> param sharded on device init #model.init<normal(2.000000e-02)>
  sched.tensor @e.grad : tensor<16x4xbf16> grad of @e sharded on device
  sched.tensor @e.master : tensor<16x4xf32> master of @e sharded on device
  sched.tensor @e.exp_avg : tensor<16x4xf32> exp_avg of @e sharded on device
  sched.tensor @e.exp_avg_sq : tensor<16x4xf32> exp_avg_sq of @e sharded on device
  sched.tensor @w : tensor<4x4xbf16> param sharded on device init #model.init<normal(2.000000e-02)>
  sched.tensor @w.grad : tensor<4x4xbf16> grad of @w sharded on device
  sched.tensor @w.master : tensor<4x4xf32> master of @w sharded on device
  sched.tensor @w.exp_avg : tensor<4x4xf32> exp_avg of @w sharded on device
  sched.tensor @w.exp_avg_sq : tensor<4x4xf32> exp_avg_sq of @w sharded on device
  sched.tensor @b : tensor<4xbf16> param on device init #model.init<zeros>
  sched.tensor @b.grad : tensor<4xbf16> grad of @b sharded on device
  sched.tensor @b.master : tensor<4xf32> master of @b sharded on device
  sched.tensor @b.exp_avg : tensor<4xf32> exp_avg of @b sharded on device
  sched.tensor @b.exp_avg_sq : tensor<4xf32> exp_avg_sq of @b sharded on device
  func.func @micro_step(%arg0: tensor<1x2xi32>, %arg1: tensor<1x2xi32>) -> tensor<f32> {
    %0 = model.param_ref @e : tensor<16x4xbf16>
    %1 = model.embedding %0, %arg0 : (tensor<16x4xbf16>, tensor<1x2xi32>) -> tensor<1x2x4xbf16>
    %2 = model.param_ref @w : tensor<4x4xbf16>
    %3 = model.param_ref @b : tensor<4xbf16>
    %4 = model.linear %1, %2, %3 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>, tensor<4xbf16>) -> tensor<1x2x4xbf16>
    %5 = model.linear %4, %0 : (tensor<1x2x4xbf16>, tensor<16x4xbf16>) -> tensor<1x2x16xbf16>
    %6 = model.cross_entropy %5, %arg1 : (tensor<1x2x16xbf16>, tensor<1x2xi32>) -> tensor<f32>
    %7 = model.backward_seed {loss_scaling, micro_steps = 2 : i64} : tensor<f32>
    %8 = model.cross_entropy_backward %5, %arg1, %7 : (tensor<1x2x16xbf16>, tensor<1x2xi32>, tensor<f32>) -> tensor<1x2x16xbf16>
    %9 = model.linear_grad_input %8, %0 : (tensor<1x2x16xbf16>, tensor<16x4xbf16>) -> tensor<1x2x4xbf16>
    %10 = model.linear_grad_weight %8, %4 : (tensor<1x2x16xbf16>, tensor<1x2x4xbf16>) -> tensor<16x4xbf16>
    %11 = model.linear_grad_input %9, %2 : (tensor<1x2x4xbf16>, tensor<4x4xbf16>) -> tensor<1x2x4xbf16>
    %12 = model.linear_grad_weight %9, %1 : (tensor<1x2x4xbf16>, tensor<1x2x4xbf16>) -> tensor<4x4xbf16>
    %13 = model.linear_grad_bias %9 : (tensor<1x2x4xbf16>) -> tensor<4xbf16>
    model.accumulate_grad @b, %13 : tensor<4xbf16>
    model.accumulate_grad @w, %12 : tensor<4x4xbf16>
    %14 = model.embedding_backward %11, %arg0 : (tensor<1x2x4xbf16>, tensor<1x2xi32>) -> tensor<16x4xbf16>
    %15 = model.add %10, %14 : tensor<16x4xbf16>
    model.accumulate_grad @e, %15 : tensor<16x4xbf16>
    return %6 : tensor<f32>
  }
  func.func @optimizer_step() {
    model.unscale_grads {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
    model.clip_grad_norm {max_norm = 1.000000e+00 : f64}
    model.adam_update @e {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @w {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    model.adam_update @b {adamw, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64}
    return
  }
}

// -----

// Stage 3, per phase and at module granularity: two param_refs of @w (a
// tied head) share one gather per phase; the bias @b, which no backward op
// reads, is gathered for backward anyway, as DeepSpeed fetches a module's
// parameters: around the op that computes its gradient, found by dataflow
// from its accumulate_grad (locations play no part).
// CHECK-LABEL: module @stage3_module
// CHECK-LABEL: func.func @micro_step
// CHECK-NEXT:    sched.read @w : tensor<8xf32>
// CHECK-NEXT:    sched.all_gather_start %{{.*}} for [@w]
// CHECK-NEXT:    %[[W:.*]] = sched.wait
// CHECK-NEXT:    sched.read @b : tensor<2xf32>
// CHECK-NEXT:    sched.all_gather_start %{{.*}} for [@b]
// CHECK-NEXT:    %[[B:.*]] = sched.wait
// CHECK-NEXT:    %[[Y:.*]] = model.linear %arg0, %[[W]], %[[B]]
// CHECK-NEXT:    sched.release %[[B]]
// CHECK-NEXT:    model.linear %[[Y]], %[[W]]
// CHECK-NEXT:    sched.release %[[W]]
// CHECK-NEXT:    model.backward_seed
// CHECK-NEXT:    sched.read @w
// CHECK-NEXT:    sched.all_gather_start %{{.*}} for [@w]
// CHECK-NEXT:    %[[W2:.*]] = sched.wait
// CHECK-NEXT:    %[[DY:.*]] = model.linear_grad_input %arg1, %[[W2]]
// CHECK-NEXT:    model.linear_grad_weight %arg1, %[[Y]]
// CHECK-NEXT:    model.linear_grad_input %[[DY]], %[[W2]]
// CHECK-NEXT:    sched.release %[[W2]]
// CHECK-NEXT:    model.linear_grad_weight
// CHECK-NEXT:    sched.read @b
// CHECK-NEXT:    sched.all_gather_start %{{.*}} for [@b]
// CHECK-NEXT:    %[[B2:.*]] = sched.wait
// CHECK-NEXT:    model.linear_grad_bias
// CHECK-NEXT:    sched.release %[[B2]]
// CHECK-NEXT:    sched.reduce_scatter_start %{{.*}} into [@b.grad]
// CHECK-NOT:     all_gather_start
// CHECK:         return
#fc = loc("fc")
#head = loc("head")
module @stage3_module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4x4xf32> param sharded on device
  sched.tensor @w.grad : tensor<4x4xf32> grad of @w sharded on device
  sched.tensor @w.exp_avg : tensor<4x4xf32> exp_avg of @w sharded on device
  sched.tensor @w.exp_avg_sq : tensor<4x4xf32> exp_avg_sq of @w sharded on device
  sched.tensor @b : tensor<4xf32> param sharded on device
  sched.tensor @b.grad : tensor<4xf32> grad of @b sharded on device
  sched.tensor @b.exp_avg : tensor<4xf32> exp_avg of @b sharded on device
  sched.tensor @b.exp_avg_sq : tensor<4xf32> exp_avg_sq of @b sharded on device
  func.func @micro_step(%x: tensor<1x2x4xf32>, %dz: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    %w = model.param_ref @w : tensor<4x4xf32>
    %b = model.param_ref @b : tensor<4xf32>
    %y = model.linear %x, %w, %b : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32> loc(#fc)
    %w2 = model.param_ref @w : tensor<4x4xf32>
    %z = model.linear %y, %w2 : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32> loc(#head)
    %seed = model.backward_seed {micro_steps = 1 : i64} : tensor<f32>
    %dy = model.linear_grad_input %dz, %w2 : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32> loc(#head)
    %dw2 = model.linear_grad_weight %dz, %y : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32> loc(#head)
    %dx = model.linear_grad_input %dy, %w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32> loc(#fc)
    %dw1 = model.linear_grad_weight %dy, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32> loc(#fc)
    %db = model.linear_grad_bias %dy : (tensor<1x2x4xf32>) -> tensor<4xf32> loc(#fc)
    model.accumulate_grad @b, %db : tensor<4xf32>
    %dw = model.add %dw2, %dw1 : tensor<4x4xf32>
    model.accumulate_grad @w, %dw : tensor<4x4xf32>
    return %dx : tensor<1x2x4xf32>
  }
  func.func @optimizer_step() {
    model.adam_update @w {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    model.adam_update @b {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    return
  }
}
