// zero-offload: where optimizer states go for optimizer=cpu|nvme, at stages
// 1, 2 and 3 (parameter offload: zero-offload-param.mlir).
// RUN: zeroc-opt %s -split-input-file --zero-offload | FileCheck %s --check-prefix=NONE
// RUN: zeroc-opt %s -split-input-file --zero-offload=optimizer=none | FileCheck %s --check-prefix=NONE
// RUN: zeroc-opt %s -split-input-file --zero-offload=optimizer=cpu | FileCheck %s --check-prefix=CPU
// RUN: zeroc-opt %s -split-input-file --zero-offload=optimizer=nvme | FileCheck %s --check-prefix=NVME

// Without offload nothing moves.
// NONE-LABEL: module @stage1
// NONE-NOT:   on host
// NONE-NOT:   on nvme
// NONE-LABEL: module @stage2
// NONE-NOT:   on host
// NONE-NOT:   on nvme
// NONE-LABEL: module @stage3
// NONE-NOT:   on host
// NONE-NOT:   on nvme
// NONE-NOT:   fetch_start

// Stage 1: the replicated flat gradient buffer stays on the device, where
// the micro-steps accumulate into it; the sharded moments (and the master
// of 16-bit parameters) move, and Adam runs on the host.
// CPU-LABEL: module @stage1
// CPU-NEXT:  sched.tensor @a : tensor<6xbf16> param on device
// CPU-NEXT:  sched.tensor @b : tensor<2xbf16> param on device
// CPU-NEXT:  sched.flat_group @zero.flat0
// CPU-NEXT:  sched.tensor @zero.flat0.grad : tensor<8xbf16> grad of @zero.flat0 on device
// CPU-NEXT:  sched.tensor @zero.flat0.master : tensor<8xf32> master of @zero.flat0 sharded on host
// CPU-NEXT:  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on host
// CPU-NEXT:  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on host
// CPU-LABEL: func.func @optimizer_step
// CPU:       sched.adam_update @zero.flat0 grad @zero.flat0.grad master @zero.flat0.master exp_avg @zero.flat0.exp_avg exp_avg_sq @zero.flat0.exp_avg_sq on host

// NVMe: the moments go to NVMe files. The master copy goes with them, as
// DeepSpeed swaps the fp32 partitions too (Passes.td says "host").
// NVME-LABEL: module @stage1
// NVME:       sched.tensor @zero.flat0.grad : tensor<8xbf16> grad of @zero.flat0 on device
// NVME-NEXT:  sched.tensor @zero.flat0.master : tensor<8xf32> master of @zero.flat0 sharded on nvme
// NVME-NEXT:  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on nvme
// NVME-NEXT:  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on nvme
// NVME-LABEL: func.func @optimizer_step
// NVME:       sched.adam_update @zero.flat0 {{.*}} on host
module @stage1 attributes {sched.stage = 1 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<6xbf16> param on device
  sched.tensor @b : tensor<2xbf16> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 8 padded 8
  sched.tensor @zero.flat0.grad : tensor<8xbf16> grad of @zero.flat0 on device
  sched.tensor @zero.flat0.master : tensor<8xf32> master of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on device
  func.func @micro_step(%da: tensor<6xbf16>) {
    sched.accumulate %da into @zero.flat0.grad : tensor<6xbf16>
    return
  }
  func.func @optimizer_step() {
    %g = sched.read @zero.flat0.grad : tensor<8xbf16>
    %t = sched.reduce_scatter_start %g into [@zero.flat0.grad] at [0] : tensor<8xbf16>
    sched.wait %t
    sched.adam_update @zero.flat0 grad @zero.flat0.grad master @zero.flat0.master exp_avg @zero.flat0.exp_avg exp_avg_sq @zero.flat0.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    %u = sched.all_gather_updates_start [@zero.flat0]
    sched.wait %u
    sched.zero_grads [@zero.flat0.grad]
    return
  }
}

// -----

// Stage 2 (f32: no master): the sharded gradient partition goes to the host
// with the moments, under both cpu and nvme.
// CPU-LABEL: module @stage2
// CPU:       sched.tensor @zero.flat0.grad : tensor<8xf32> grad of @zero.flat0 sharded on host
// CPU-NEXT:  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on host
// CPU-NEXT:  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on host
// CPU-LABEL: func.func @optimizer_step
// CPU-NEXT:  sched.adam_update @zero.flat0 grad @zero.flat0.grad exp_avg @zero.flat0.exp_avg exp_avg_sq @zero.flat0.exp_avg_sq on host
// NVME-LABEL: module @stage2
// NVME:       sched.tensor @zero.flat0.grad : tensor<8xf32> grad of @zero.flat0 sharded on host
// NVME-NEXT:  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on nvme
// NVME-NEXT:  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on nvme
// The schedule itself is unchanged: no copies, no fetches.
// CPU-NEXT:  %[[U:.*]] = sched.all_gather_updates_start [@zero.flat0]
// CPU-NEXT:  sched.wait %[[U]]
// CPU-NEXT:  sched.zero_grads [@zero.flat0.grad]
// CPU-NEXT:  return
// NVME-NOT:  copy_start
// NVME-NOT:  fetch_start
module @stage2 attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<6xf32> param on device
  sched.tensor @b : tensor<2xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 8 padded 8
  sched.tensor @zero.flat0.grad : tensor<8xf32> grad of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg : tensor<8xf32> exp_avg of @zero.flat0 sharded on device
  sched.tensor @zero.flat0.exp_avg_sq : tensor<8xf32> exp_avg_sq of @zero.flat0 sharded on device
  func.func @micro_step(%da: tensor<6xf32>) {
    %t = sched.reduce_scatter_start %da into [@zero.flat0.grad] at [0] : tensor<6xf32>
    sched.wait %t
    return
  }
  func.func @optimizer_step() {
    sched.adam_update @zero.flat0 grad @zero.flat0.grad exp_avg @zero.flat0.exp_avg exp_avg_sq @zero.flat0.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    %u = sched.all_gather_updates_start [@zero.flat0]
    sched.wait %u
    sched.zero_grads [@zero.flat0.grad]
    return
  }
}

// -----

// Stage 3, optimizer offload only: parameters (sharded @w, persistent @b)
// stay on the device and their gathers are untouched; every parameter's
// gradient shard, master and moments move.
// CPU-LABEL: module @stage3
// CPU-NEXT:  sched.tensor @w : tensor<4x4xbf16> param sharded on device
// CPU-NEXT:  sched.tensor @w.grad : tensor<4x4xbf16> grad of @w sharded on host
// CPU-NEXT:  sched.tensor @w.master : tensor<4x4xf32> master of @w sharded on host
// CPU-NEXT:  sched.tensor @w.exp_avg : tensor<4x4xf32> exp_avg of @w sharded on host
// CPU-NEXT:  sched.tensor @w.exp_avg_sq : tensor<4x4xf32> exp_avg_sq of @w sharded on host
// CPU-NEXT:  sched.tensor @b : tensor<4xbf16> param on device
// CPU-NEXT:  sched.tensor @b.grad : tensor<4xbf16> grad of @b sharded on host
// CPU-NEXT:  sched.tensor @b.master : tensor<4xf32> master of @b sharded on host
// CPU-LABEL: func.func @micro_step
// CPU-NEXT:  %[[S:.*]] = sched.read @w : tensor<8xbf16>
// CPU-NEXT:  sched.all_gather_start %[[S]] for [@w]
// CPU-LABEL: func.func @optimizer_step
// CPU-NEXT:  sched.adam_update @w {{.*}} on host
// CPU-NEXT:  sched.adam_update @b {{.*}} on host
// CPU-NEXT:  sched.all_gather_updates_start [@b]
// NVME-LABEL: module @stage3
// NVME-NEXT:  sched.tensor @w : tensor<4x4xbf16> param sharded on device
// NVME-NEXT:  sched.tensor @w.grad : tensor<4x4xbf16> grad of @w sharded on host
// NVME-NEXT:  sched.tensor @w.master : tensor<4x4xf32> master of @w sharded on nvme
// NVME-NEXT:  sched.tensor @w.exp_avg : tensor<4x4xf32> exp_avg of @w sharded on nvme
// NVME-NEXT:  sched.tensor @w.exp_avg_sq : tensor<4x4xf32> exp_avg_sq of @w sharded on nvme
// NVME-NEXT:  sched.tensor @b : tensor<4xbf16> param on device
// NVME-NOT:   fetch_start
module @stage3 attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4x4xbf16> param sharded on device
  sched.tensor @w.grad : tensor<4x4xbf16> grad of @w sharded on device
  sched.tensor @w.master : tensor<4x4xf32> master of @w sharded on device
  sched.tensor @w.exp_avg : tensor<4x4xf32> exp_avg of @w sharded on device
  sched.tensor @w.exp_avg_sq : tensor<4x4xf32> exp_avg_sq of @w sharded on device
  sched.tensor @b : tensor<4xbf16> param on device
  sched.tensor @b.grad : tensor<4xbf16> grad of @b sharded on device
  sched.tensor @b.master : tensor<4xf32> master of @b sharded on device
  sched.tensor @b.exp_avg : tensor<4xf32> exp_avg of @b sharded on device
  sched.tensor @b.exp_avg_sq : tensor<4xf32> exp_avg_sq of @b sharded on device
  func.func @micro_step(%x: tensor<1x2x4xbf16>, %dw: tensor<4x4xbf16>) -> tensor<1x2x4xbf16> {
    %s = sched.read @w : tensor<8xbf16>
    %t = sched.all_gather_start %s for [@w] : tensor<8xbf16>
    %w = sched.wait %t : tensor<4x4xbf16>
    %b = sched.read @b : tensor<4xbf16>
    %y = model.linear %x, %w, %b : (tensor<1x2x4xbf16>, tensor<4x4xbf16>, tensor<4xbf16>) -> tensor<1x2x4xbf16>
    sched.release %w : tensor<4x4xbf16>
    %r = sched.reduce_scatter_start %dw into [@w.grad] at [0] : tensor<4x4xbf16>
    sched.wait %r
    return %y : tensor<1x2x4xbf16>
  }
  func.func @optimizer_step() {
    sched.adam_update @w grad @w.grad master @w.master exp_avg @w.exp_avg exp_avg_sq @w.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    sched.adam_update @b grad @b.grad master @b.master exp_avg @b.exp_avg exp_avg_sq @b.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    %u = sched.all_gather_updates_start [@b]
    sched.wait %u
    sched.zero_grads [@w.grad, @b.grad]
    return
  }
}
