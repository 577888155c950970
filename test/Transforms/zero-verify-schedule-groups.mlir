// The same-order proof over communicator groups (expert parallelism): a
// schedule of 4 ranks with ep_size 2, stage 3. The expert parameter @e is
// this rank's 2 experts (of 4), sharded over the expert-data-parallel group
// (4 / 2 = 2 ranks: 4 of its 8 elements each); @a over the world (1 of 4).
// Tokens go to their experts and back by all-to-all over the
// expert-parallel group, forward and backward. The verifier accepts it
// unchanged.
// RUN: zeroc-opt %s -verify-diagnostics --zero-verify-schedule | FileCheck %s
// RUN: zeroc-opt %s --zero-verify-schedule | zeroc-opt --zero-verify-schedule | FileCheck %s

module @expert_parallel attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 3 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<4xf32> param sharded on device
  sched.tensor @a.grad : tensor<4xf32> grad of @a sharded on device
  sched.tensor @e : tensor<2x4xf32> param expert sharded on device
  sched.tensor @e.grad : tensor<2x4xf32> grad of @e expert sharded on device
  // CHECK-LABEL: func.func @micro_step
  func.func @micro_step(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %sa = sched.read @a : tensor<1xf32>
    // CHECK: sched.all_gather_start %{{.*}} for [@a] :
    %ta = sched.all_gather_start %sa for [@a] : tensor<1xf32>
    %a = sched.wait %ta : tensor<4xf32>
    %se = sched.read @e : tensor<4xf32>
    // CHECK: sched.all_gather_start %{{.*}} for [@e] over expert_data_parallel :
    %te = sched.all_gather_start %se for [@e] over expert_data_parallel : tensor<4xf32>
    %e = sched.wait %te : tensor<2x4xf32>
    // CHECK: sched.all_to_all_start dispatch %{{.*}} over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<8x4xf32>
    %d = sched.all_to_all_start dispatch %x over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<8x4xf32>
    %rows = sched.wait %d : tensor<8x4xf32>
    %out = model.add %rows, %rows : tensor<8x4xf32>
    // CHECK: sched.all_to_all_start combine
    %c = sched.all_to_all_start combine %out over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<8x4xf32> -> tensor<4x4xf32>
    %y = sched.wait %c : tensor<4x4xf32>
    // CHECK: sched.all_to_all_start combine_grad
    %cg = sched.all_to_all_start combine_grad %y over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<8x4xf32>
    %dy = sched.wait %cg : tensor<8x4xf32>
    // CHECK: sched.all_to_all_start dispatch_grad
    %dg = sched.all_to_all_start dispatch_grad %dy over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<8x4xf32> -> tensor<4x4xf32>
    %dx = sched.wait %dg : tensor<4x4xf32>
    %ga = model.add %a, %a : tensor<4xf32>
    %ge = model.add %e, %e : tensor<2x4xf32>
    sched.release %a, %e : tensor<4xf32>, tensor<2x4xf32>
    %ra = sched.reduce_scatter_start %ga into [@a.grad] at [0] {stream = 2 : i64} : tensor<4xf32>
    // CHECK: sched.reduce_scatter_start %{{.*}} into [@e.grad] at [0] over expert_data_parallel {stream = 2 : i64} :
    %re = sched.reduce_scatter_start %ge into [@e.grad] at [0] over expert_data_parallel {stream = 2 : i64} : tensor<2x4xf32>
    sched.wait %ra {stream = 2 : i64}
    sched.wait %re {stream = 2 : i64}
    return %dx : tensor<4x4xf32>
  }
  // CHECK-LABEL: func.func @optimizer_step
  func.func @optimizer_step() {
    return
  }
}
