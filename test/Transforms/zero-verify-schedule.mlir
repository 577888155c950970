// zero-verify-schedule accepts valid schedules and leaves them unchanged:
// hand-written ones of each stage with the shapes the later passes give
// them (fused buckets, hoisted gathers, streams, deferred waits, fetches),
// and the output of zero-insert-collectives at every stage on a small model.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-verify-schedule | FileCheck %s
// RUN: zeroc-opt %s -split-input-file --zero-verify-schedule > %t.verified
// RUN: zeroc-opt %s -split-input-file > %t.input
// RUN: diff %t.verified %t.input
// The pipeline up to each point on a small model.
// RUN: zeroc-opt %S/Inputs/small-model.mlir --zero-expand-training-step="grad-accum=2" --zero-partition="stage=0 world-size=4" --zero-insert-collectives --zero-verify-schedule | FileCheck %s --check-prefix=SMALL
// RUN: zeroc-opt %S/Inputs/small-model.mlir --zero-expand-training-step="grad-accum=2" --zero-partition="stage=1 world-size=4" --zero-insert-collectives --zero-verify-schedule | FileCheck %s --check-prefix=SMALL
// RUN: zeroc-opt %S/Inputs/small-model.mlir --zero-expand-training-step="grad-accum=2" --zero-partition="stage=2 world-size=4" --zero-insert-collectives=reduce-scatter=false --zero-verify-schedule | FileCheck %s --check-prefix=SMALL
// RUN: zeroc-opt %S/Inputs/small-model.mlir --zero-expand-training-step="grad-accum=2" --zero-partition="stage=3 world-size=4 persistence-threshold=4" --zero-insert-collectives --zero-offload="optimizer=cpu param=nvme" --zero-verify-schedule | FileCheck %s --check-prefix=SMALL
// RUN: zeroc-opt %S/Inputs/small-model.mlir --zero-expand-training-step="grad-accum=2" --zero-partition="stage=3 world-size=4 persistence-threshold=4" --zero-insert-collectives --zero-bucket --zero-prefetch --zero-assign-streams=overlap-comm=true --zero-verify-schedule | FileCheck %s --check-prefix=SMALL
// SMALL-LABEL: func.func @micro_step
// SMALL-LABEL: func.func @optimizer_step

// Stage 3 with overlapped communication: a prefetched, fused gather on
// stream 1, a fetched shard on stream 3, reductions on stream 2 waited just
// before the next one and before the return.
// CHECK-LABEL: module @stage3_overlap
module @stage3_overlap attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4xf32> param sharded on device
  sched.tensor @a.grad : tensor<4xf32> grad of @a sharded on device
  sched.tensor @b : tensor<4xf32> param sharded on device
  sched.tensor @b.grad : tensor<4xf32> grad of @b sharded on device
  sched.tensor @o : tensor<4xf32> param sharded on host
  sched.tensor @o.grad : tensor<4xf32> grad of @o sharded on host
  sched.tensor @p : tensor<4xf32> param on device
  sched.tensor @p.grad : tensor<4xf32> grad of @p sharded on device
  sched.tensor @p.exp_avg : tensor<4xf32> exp_avg of @p sharded on device
  sched.tensor @p.exp_avg_sq : tensor<4xf32> exp_avg_sq of @p sharded on device
  // CHECK-LABEL: func.func @micro_step
  func.func @micro_step(%x: tensor<4xf32>) -> tensor<4xf32> {
    %sa = sched.read @a : tensor<2xf32>
    %sb = sched.read @b : tensor<2xf32>
    %t = sched.all_gather_start %sa, %sb for [@a, @b] {stream = 1 : i64} : tensor<2xf32>, tensor<2xf32>
    %f = sched.fetch_start [@o] {stream = 3 : i64}
    %p = sched.read @p : tensor<4xf32>
    %y0 = model.add %x, %p : tensor<4xf32>
    %a, %b = sched.wait %t : tensor<4xf32>, tensor<4xf32>
    %y1 = model.add %y0, %a : tensor<4xf32>
    sched.release %a : tensor<4xf32>
    %so = sched.wait %f : tensor<2xf32>
    %to = sched.all_gather_start %so for [@o] {stream = 1 : i64} : tensor<2xf32>
    %y2 = model.add %y1, %b : tensor<4xf32>
    sched.release %b : tensor<4xf32>
    %o = sched.wait %to : tensor<4xf32>
    sched.release %so : tensor<2xf32>
    %y3 = model.add %y2, %o : tensor<4xf32>
    sched.release %o : tensor<4xf32>
    %r1 = sched.reduce_scatter_start %y3, %y2 into [@a.grad, @b.grad] at [0, 0] {stream = 2 : i64} : tensor<4xf32>, tensor<4xf32>
    %y4 = model.add %y3, %y3 : tensor<4xf32>
    sched.wait %r1
    %r2 = sched.reduce_scatter_start %y4, %y1 into [@o.grad, @p.grad] at [0, 0] {stream = 2 : i64} : tensor<4xf32>, tensor<4xf32>
    sched.wait %r2
    return %y4 : tensor<4xf32>
  }
  // CHECK-LABEL: func.func @optimizer_step
  func.func @optimizer_step() {
    sched.adam_update @p grad @p.grad exp_avg @p.exp_avg exp_avg_sq @p.exp_avg_sq on device {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    %u = sched.all_gather_updates_start [@p] {stream = 1 : i64}
    sched.wait %u
    sched.zero_grads [@a.grad, @b.grad, @o.grad, @p.grad]
    return
  }
}

// -----

// Stage 1: local accumulation at the flat offsets, one in-place
// reduce-scatter of the whole buffer at the boundary.
// CHECK-LABEL: module @stage1
module @stage1 attributes {sched.stage = 1 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<2xf32> param on device
  sched.tensor @b : tensor<2xf32> param on device
  sched.flat_group @zero.flat0 [@a, @b] numel 4 padded 4
  sched.tensor @zero.flat0.grad : tensor<4xf32> grad of @zero.flat0 on device
  sched.tensor @zero.flat0.exp_avg : tensor<4xf32> exp_avg of @zero.flat0 sharded on host
  sched.tensor @zero.flat0.exp_avg_sq : tensor<4xf32> exp_avg_sq of @zero.flat0 sharded on host
  func.func @micro_step(%ga: tensor<2xf32>, %gb: tensor<2xf32>) {
    sched.accumulate %gb into @zero.flat0.grad at 2 : tensor<2xf32>
    sched.accumulate %ga into @zero.flat0.grad : tensor<2xf32>
    return
  }
  func.func @optimizer_step() {
    %g = sched.read @zero.flat0.grad : tensor<4xf32>
    %r = sched.reduce_scatter_start %g into [@zero.flat0.grad] at [0] {all_reduce, stream = 2 : i64} : tensor<4xf32>
    sched.wait %r
    sched.clip_grad_norm [@zero.flat0.grad] {max_norm = 1.0 : f64}
    sched.adam_update @zero.flat0 grad @zero.flat0.grad exp_avg @zero.flat0.exp_avg exp_avg_sq @zero.flat0.exp_avg_sq on host {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}
    %u = sched.all_gather_updates_start [@zero.flat0] {stream = 1 : i64}
    sched.wait %u
    sched.zero_grads [@zero.flat0.grad]
    return
  }
}

// -----

// Stage 0: one fused all-reduce of both accumulators.
// CHECK-LABEL: module @stage0
module @stage0 attributes {sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<2xbf16> param on device
  sched.tensor @a.grad : tensor<2xbf16> grad of @a on device
  sched.tensor @b : tensor<2xbf16> param on device
  sched.tensor @b.grad : tensor<2xbf16> grad of @b on device
  func.func @micro_step(%ga: tensor<2xbf16>, %gb: tensor<2xbf16>) {
    sched.accumulate %gb into @b.grad : tensor<2xbf16>
    sched.accumulate %ga into @a.grad : tensor<2xbf16>
    return
  }
  func.func @optimizer_step() {
    %r = sched.all_reduce_start [@a.grad, @b.grad]
    sched.wait %r
    sched.zero_grads [@a.grad, @b.grad]
    return
  }
}
