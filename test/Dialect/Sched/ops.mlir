// Round trip of every sched op: a stage-3 schedule with parameter offload,
// and a stage-1/2 optimizer step over a flat group.
// RUN: zeroc-opt %s -split-input-file | zeroc-opt -split-input-file | FileCheck %s
// RUN: zeroc-opt %s -split-input-file --mlir-print-op-generic | zeroc-opt -split-input-file | FileCheck %s

// CHECK-LABEL: module @stage3
module @stage3 attributes {sched.stage = 3 : i64, sched.world_size = 4 : i64} {
  // CHECK: sched.tensor @w : tensor<8x6xbf16> param sharded on device init #model.init<normal(2.000000e-02)>
  sched.tensor @w : tensor<8x6xbf16> param sharded on device init #model.init<normal(0.02)>
  // CHECK: sched.tensor @w.grad : tensor<8x6xbf16> grad of @w sharded on device
  sched.tensor @w.grad : tensor<8x6xbf16> grad of @w sharded on device
  // CHECK: sched.tensor @w.master : tensor<8x6xf32> master of @w sharded on host
  sched.tensor @w.master : tensor<8x6xf32> master of @w sharded on host
  sched.tensor @w.exp_avg : tensor<8x6xf32> exp_avg of @w sharded on host
  // CHECK: sched.tensor @w.exp_avg_sq : tensor<8x6xf32> exp_avg_sq of @w sharded on nvme
  sched.tensor @w.exp_avg_sq : tensor<8x6xf32> exp_avg_sq of @w sharded on nvme
  // CHECK: sched.tensor @v : tensor<6x8xbf16> param sharded on host
  sched.tensor @v : tensor<6x8xbf16> param sharded on host
  sched.tensor @v.grad : tensor<6x8xbf16> grad of @v sharded on device
  sched.tensor @v.master : tensor<6x8xf32> master of @v sharded on host
  sched.tensor @v.exp_avg : tensor<6x8xf32> exp_avg of @v sharded on host
  sched.tensor @v.exp_avg_sq : tensor<6x8xf32> exp_avg_sq of @v sharded on host

  // CHECK-LABEL: func.func @micro_step
  func.func @micro_step(%x: tensor<2x3x6xbf16>, %dw: tensor<8x6xbf16>) {
    // CHECK: %[[S:.*]] = sched.read @w : tensor<12xbf16>
    %s = sched.read @w : tensor<12xbf16>
    // CHECK: %[[F:.*]] = sched.fetch_start [@v] {stream = 3 : i64}
    %f = sched.fetch_start [@v] {stream = 3 : i64}
    // CHECK: %[[VS:.*]] = sched.wait %[[F]] {stream = 1 : i64} : tensor<12xbf16>
    %vs = sched.wait %f {stream = 1 : i64} : tensor<12xbf16>
    // CHECK: %[[T:.*]] = sched.all_gather_start %[[S]], %[[VS]] for [@w, @v] {stream = 1 : i64} : tensor<12xbf16>, tensor<12xbf16>
    %t = sched.all_gather_start %s, %vs for [@w, @v] {stream = 1 : i64} : tensor<12xbf16>, tensor<12xbf16>
    // CHECK: %[[W:.*]]:2 = sched.wait %[[T]] : tensor<8x6xbf16>, tensor<6x8xbf16>
    %w, %v = sched.wait %t : tensor<8x6xbf16>, tensor<6x8xbf16>
    %y = model.linear %x, %w : (tensor<2x3x6xbf16>, tensor<8x6xbf16>) -> tensor<2x3x8xbf16>
    // CHECK: sched.release %[[W]]#0, %[[W]]#1 : tensor<8x6xbf16>, tensor<6x8xbf16>
    sched.release %w, %v : tensor<8x6xbf16>, tensor<6x8xbf16>
    // CHECK: %[[R:.*]] = sched.reduce_scatter_start %{{.*}} into [@w.grad] at [0] {stream = 2 : i64} : tensor<8x6xbf16>
    %r = sched.reduce_scatter_start %dw into [@w.grad] at [0] {stream = 2 : i64} : tensor<8x6xbf16>
    // CHECK: sched.wait %[[R]] {stream = 2 : i64}
    sched.wait %r {stream = 2 : i64}
    return
  }

  // CHECK-LABEL: func.func @optimizer_step
  func.func @optimizer_step() {
    // CHECK: sched.unscale_grads [@w.grad, @v.grad] {hysteresis = 2 : i64
    sched.unscale_grads [@w.grad, @v.grad] {static_loss_scale = 0.0, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, hysteresis = 2 : i64, min_loss_scale = 1.0}
    // CHECK: sched.clip_grad_norm [@w.grad, @v.grad] {max_norm = 1.000000e+00 : f64}
    sched.clip_grad_norm [@w.grad, @v.grad] {max_norm = 1.0 : f64}
    // CHECK: sched.adam_update @w grad @w.grad master @w.master exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on host {adamw,
    sched.adam_update @w grad @w.grad master @w.master exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on host {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1, adamw}
    sched.adam_update @v grad @v.grad master @v.master exp_avg @v.exp_avg exp_avg_sq @v.exp_avg_sq on host {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1}
    // CHECK: sched.adam_update @v grad @v.grad master @v.master exp_avg @v.exp_avg exp_avg_sq @v.exp_avg_sq on device {{{.*}}lamb, {{.*}}max_coeff = 1.000000e+01 : f64, min_coeff = 0.000000e+00 : f64
    sched.adam_update @v grad @v.grad master @v.master exp_avg @v.exp_avg exp_avg_sq @v.exp_avg_sq on device {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1, lamb, max_coeff = 10.0, min_coeff = 0.0}
    // CHECK: sched.adam_update @w grad @w.grad master @w.master exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {adamw, {{.*}}lr = 1.000000e-03 : f64, no_bias_correction, weight_decay
    sched.adam_update @w grad @w.grad master @w.master exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.1, adamw, no_bias_correction}
    // CHECK: sched.zero_grads [@w.grad, @v.grad]
    sched.zero_grads [@w.grad, @v.grad]
    return
  }
}

// -----

// CHECK-LABEL: module @stage1
module @stage1 attributes {sched.stage = 1 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<5xf32> param on device init #model.init<zeros>
  sched.tensor @b : tensor<3x3xf32> param on device init #model.init<ones>
  sched.tensor @a.grad : tensor<5xf32> grad of @a on device
  sched.tensor @b.grad : tensor<3x3xf32> grad of @b on device
  // CHECK: sched.flat_group @group0 [@a, @b] numel 14 padded 16
  sched.flat_group @group0 [@a, @b] numel 14 padded 16
  sched.tensor @group0.grad : tensor<16xf32> grad of @group0 sharded on device
  sched.tensor @group0.exp_avg : tensor<16xf32> exp_avg of @group0 sharded on device
  sched.tensor @group0.exp_avg_sq : tensor<16xf32> exp_avg_sq of @group0 sharded on device
  sched.tensor @group0.host : tensor<16xf32> grad of @group0 sharded on host

  func.func @micro_step(%da: tensor<5xf32>) {
    // CHECK: sched.accumulate %{{.*}} into @a.grad : tensor<5xf32>
    sched.accumulate %da into @a.grad : tensor<5xf32>
    return
  }

  func.func @optimizer_step() {
    // CHECK: %[[A:.*]] = sched.read @a.grad : tensor<5xf32>
    %a = sched.read @a.grad : tensor<5xf32>
    %b = sched.read @b.grad : tensor<3x3xf32>
    // CHECK: sched.reduce_scatter_start %[[A]], %{{.*}} into [@group0.grad, @group0.grad] at [0, 5] {stream = 2 : i64} : tensor<5xf32>, tensor<3x3xf32>
    %t = sched.reduce_scatter_start %a, %b into [@group0.grad, @group0.grad] at [0, 5] {stream = 2 : i64} : tensor<5xf32>, tensor<3x3xf32>
    sched.wait %t
    // CHECK: sched.all_reduce_start [@a.grad]
    %ar = sched.all_reduce_start [@a.grad]
    sched.wait %ar
    // CHECK: sched.copy_start [@group0.grad] to [@group0.host] {stream = 3 : i64}
    %c = sched.copy_start [@group0.grad] to [@group0.host] {stream = 3 : i64}
    sched.wait %c
    // CHECK: sched.adam_update @group0 grad @group0.grad exp_avg @group0.exp_avg exp_avg_sq @group0.exp_avg_sq on device
    sched.adam_update @group0 grad @group0.grad exp_avg @group0.exp_avg exp_avg_sq @group0.exp_avg_sq on device {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0}
    // CHECK: sched.all_gather_updates_start [@group0] {stream = 1 : i64}
    %u = sched.all_gather_updates_start [@group0] {stream = 1 : i64}
    sched.wait %u
    sched.zero_grads [@a.grad, @b.grad]
    return
  }
}
