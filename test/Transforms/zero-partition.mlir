// zero-partition at each ZeRO stage: roles, layouts, placement, owners, the
// f32 master of 16-bit parameters only, the stage 1-2 flat group, and stage
// 3's persistence threshold.
// RUN: zeroc-opt %s -split-input-file --zero-partition="stage=0 world-size=2" | FileCheck %s --check-prefix=S0
// RUN: zeroc-opt %s -split-input-file --zero-partition="stage=1 world-size=4" | FileCheck %s --check-prefix=S1
// RUN: zeroc-opt %s -split-input-file --zero-partition="stage=2 world-size=4" | FileCheck %s --check-prefix=S2
// RUN: zeroc-opt %s -split-input-file --zero-partition="stage=2 world-size=3" | FileCheck %s --check-prefix=S2W3
// RUN: zeroc-opt %s -split-input-file --zero-partition="stage=3 world-size=4 persistence-threshold=16" | FileCheck %s --check-prefix=S3
// RUN: zeroc-opt %s -split-input-file --zero-partition="stage=3 world-size=4 persistence-threshold=0" | FileCheck %s --check-prefix=S3ALL
// Defaults: stage 0 on one rank.
// RUN: zeroc-opt %s -split-input-file --zero-partition | FileCheck %s --check-prefix=DEFAULT
// The output is valid sched IR that round-trips.
// RUN: zeroc-opt %s -split-input-file --zero-partition="stage=3 world-size=4" | zeroc-opt -split-input-file | FileCheck %s --check-prefix=S3DEF

// Two f32 parameters of 5 and 9 elements; the uses are left for
// zero-insert-collectives.
// S0-LABEL: module @f32 attributes {sched.stage = 0 : i64, sched.world_size = 2 : i64}
// S0-NEXT:  sched.tensor @a : tensor<5xf32> param on device init #model.init<zeros>
// S0-NEXT:  sched.tensor @a.grad : tensor<5xf32> grad of @a on device
// S0-NEXT:  sched.tensor @a.exp_avg : tensor<5xf32> exp_avg of @a on device
// S0-NEXT:  sched.tensor @a.exp_avg_sq : tensor<5xf32> exp_avg_sq of @a on device
// S0-NEXT:  sched.tensor @b : tensor<3x3xf32> param on device init #model.init<ones>
// S0-NEXT:  sched.tensor @b.grad : tensor<3x3xf32> grad of @b on device
// S0-NEXT:  sched.tensor @b.exp_avg : tensor<3x3xf32> exp_avg of @b on device
// S0-NEXT:  sched.tensor @b.exp_avg_sq : tensor<3x3xf32> exp_avg_sq of @b on device
// S0-NEXT:  func.func @f() -> tensor<5xf32>
// S0-NEXT:  model.param_ref @a : tensor<5xf32>
// S0-NOT:   master
// S0-NOT:   flat_group

// Stages 1 and 2 keep the parameters whole and replicated and flatten them
// into one group: 14 elements padded to a multiple of 2 x 4.
// S1-LABEL: module @f32 attributes {sched.stage = 1 : i64, sched.world_size = 4 : i64}
// S1-NEXT:  sched.tensor @a : tensor<5xf32> param on device init #model.init<zeros>
// S1-NEXT:  sched.tensor @b : tensor<3x3xf32> param on device init #model.init<ones>
// S1-NEXT:  sched.flat_group @zero.flat0 [@a, @b] numel 14 padded 16
// Stage 1: the gradient buffer is replicated, the optimizer state sharded.
// S1-NEXT:  sched.tensor @zero.flat0.grad : tensor<16xf32> grad of @zero.flat0 on device
// S1-NEXT:  sched.tensor @zero.flat0.exp_avg : tensor<16xf32> exp_avg of @zero.flat0 sharded on device
// S1-NEXT:  sched.tensor @zero.flat0.exp_avg_sq : tensor<16xf32> exp_avg_sq of @zero.flat0 sharded on device
// S1-NEXT:  func.func @f()
// S1-NOT:   @a.grad
// S1-NOT:   master

// S2-LABEL: module @f32 attributes {sched.stage = 2 : i64, sched.world_size = 4 : i64}
// S2-NEXT:  sched.tensor @a : tensor<5xf32> param on device
// S2-NEXT:  sched.tensor @b : tensor<3x3xf32> param on device
// S2-NEXT:  sched.flat_group @zero.flat0 [@a, @b] numel 14 padded 16
// Stage 2 shards the gradient too.
// S2-NEXT:  sched.tensor @zero.flat0.grad : tensor<16xf32> grad of @zero.flat0 sharded on device
// S2-NEXT:  sched.tensor @zero.flat0.exp_avg : tensor<16xf32> exp_avg of @zero.flat0 sharded on device
// S2-NEXT:  sched.tensor @zero.flat0.exp_avg_sq : tensor<16xf32> exp_avg_sq of @zero.flat0 sharded on device
// S2-NEXT:  func.func @f()

// Three ranks: 14 rounded up to a multiple of 6.
// S2W3-LABEL: module @f32
// S2W3:       sched.flat_group @zero.flat0 [@a, @b] numel 14 padded 18
// S2W3-NEXT:  sched.tensor @zero.flat0.grad : tensor<18xf32> grad of @zero.flat0 sharded on device

// Stage 3 with a threshold of 16 elements: @b (9) stays replicated, @a (5)
// too; their gradients and states are sharded all the same.
// S3-LABEL: module @f32 attributes {sched.stage = 3 : i64, sched.world_size = 4 : i64}
// S3-NEXT:  sched.tensor @a : tensor<5xf32> param on device init #model.init<zeros>
// S3-NEXT:  sched.tensor @a.grad : tensor<5xf32> grad of @a sharded on device
// S3-NEXT:  sched.tensor @a.exp_avg : tensor<5xf32> exp_avg of @a sharded on device
// S3-NEXT:  sched.tensor @a.exp_avg_sq : tensor<5xf32> exp_avg_sq of @a sharded on device
// S3-NEXT:  sched.tensor @b : tensor<3x3xf32> param on device init #model.init<ones>
// S3-NOT:   flat_group

// Threshold 0: every parameter is sharded.
// S3ALL-LABEL: module @f32
// S3ALL-NEXT:  sched.tensor @a : tensor<5xf32> param sharded on device init #model.init<zeros>
// S3ALL-NEXT:  sched.tensor @a.grad : tensor<5xf32> grad of @a sharded on device
// S3ALL:       sched.tensor @b : tensor<3x3xf32> param sharded on device init #model.init<ones>

// DEFAULT-LABEL: module @f32 attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64}
// DEFAULT-NEXT:  sched.tensor @a : tensor<5xf32> param on device
// DEFAULT-NEXT:  sched.tensor @a.grad : tensor<5xf32> grad of @a on device

// The default threshold (100000) keeps both replicated.
// S3DEF-LABEL: module @f32
// S3DEF-NEXT:  sched.tensor @a : tensor<5xf32> param on device
// S3DEF-NEXT:  sched.tensor @a.grad : tensor<5xf32> grad of @a sharded on device
module @f32 {
  model.param @a : tensor<5xf32> init <zeros>
  model.param @b : tensor<3x3xf32> init <ones>
  func.func @f() -> tensor<5xf32> {
    %a = model.param_ref @a : tensor<5xf32>
    return %a : tensor<5xf32>
  }
}

// -----

// 16-bit parameters get an f32 master copy, laid out like the moments.
// S0-LABEL: module @bf16
// S0-NEXT:  sched.tensor @w : tensor<4x8xbf16> param on device init #model.init<normal(2.000000e-02)>
// S0-NEXT:  sched.tensor @w.grad : tensor<4x8xbf16> grad of @w on device
// S0-NEXT:  sched.tensor @w.master : tensor<4x8xf32> master of @w on device
// S0-NEXT:  sched.tensor @w.exp_avg : tensor<4x8xf32> exp_avg of @w on device
// S0-NEXT:  sched.tensor @w.exp_avg_sq : tensor<4x8xf32> exp_avg_sq of @w on device
// S0-NEXT:  sched.tensor @v : tensor<2xbf16> param on device init #model.init<zeros>

// The flat group of 34 elements, padded to 40; its gradient keeps the
// parameters' dtype.
// S1-LABEL: module @bf16
// S1:       sched.flat_group @zero.flat0 [@w, @v] numel 34 padded 40
// S1-NEXT:  sched.tensor @zero.flat0.grad : tensor<40xbf16> grad of @zero.flat0 on device
// S1-NEXT:  sched.tensor @zero.flat0.master : tensor<40xf32> master of @zero.flat0 sharded on device
// S1-NEXT:  sched.tensor @zero.flat0.exp_avg : tensor<40xf32> exp_avg of @zero.flat0 sharded on device
// S1-NEXT:  sched.tensor @zero.flat0.exp_avg_sq : tensor<40xf32> exp_avg_sq of @zero.flat0 sharded on device

// S2-LABEL: module @bf16
// S2:       sched.tensor @zero.flat0.grad : tensor<40xbf16> grad of @zero.flat0 sharded on device
// S2-NEXT:  sched.tensor @zero.flat0.master : tensor<40xf32> master of @zero.flat0 sharded on device

// S2W3-LABEL: module @bf16
// S2W3:       sched.flat_group @zero.flat0 [@w, @v] numel 34 padded 36

// @w (32 elements) is over the threshold, @v (2) under it.
// S3-LABEL: module @bf16
// S3-NEXT:  sched.tensor @w : tensor<4x8xbf16> param sharded on device
// S3-NEXT:  sched.tensor @w.grad : tensor<4x8xbf16> grad of @w sharded on device
// S3-NEXT:  sched.tensor @w.master : tensor<4x8xf32> master of @w sharded on device
// S3-NEXT:  sched.tensor @w.exp_avg : tensor<4x8xf32> exp_avg of @w sharded on device
// S3-NEXT:  sched.tensor @w.exp_avg_sq : tensor<4x8xf32> exp_avg_sq of @w sharded on device
// S3-NEXT:  sched.tensor @v : tensor<2xbf16> param on device
// S3-NEXT:  sched.tensor @v.grad : tensor<2xbf16> grad of @v sharded on device
// S3-NEXT:  sched.tensor @v.master : tensor<2xf32> master of @v sharded on device
module @bf16 {
  model.param @w : tensor<4x8xbf16> init <normal(0.02)>
  model.param @v : tensor<2xbf16> init <zeros>
}
