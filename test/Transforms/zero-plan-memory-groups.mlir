// zero-plan-memory under expert parallelism: a reduce-scatter of expert
// gradients over the expert-data-parallel group (4 ranks, ep_size 2: 2
// ranks) receives a shard of 2000 / 2 = 1000 f32 elements, 4000 bytes (over
// the world it would be 500, 2000 bytes).
// RUN: zeroc-opt %s --zero-verify-schedule --zero-plan-memory | FileCheck %s

module attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 3 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<2x1000xf32> param expert sharded on device
  sched.tensor @e.grad : tensor<2x1000xf32> grad of @e expert sharded on device
  func.func @micro_step(%g: tensor<2x1000xf32>) {
    // CHECK: sched.reduce_scatter_start %{{.*}} into [@e.grad] at [0] over expert_data_parallel {sched.workspace_bytes = 4000 : i64
    %r = sched.reduce_scatter_start %g into [@e.grad] at [0] over expert_data_parallel : tensor<2x1000xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() {
    return
  }
}
