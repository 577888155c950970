// zero-bucket under expert parallelism: a collective runs over one
// communicator group, so expert state (over the expert-data-parallel group)
// and other state never share a bucket, and a fused bucket keeps its group.
// 4 ranks, ep_size 2: @e and @f are expert parameters (this rank's 2
// experts, 8 elements, sharded over 2 ranks), @a and @b the others.
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=100 allgather-bucket-size=100" | FileCheck %s
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=100 allgather-bucket-size=100" | zeroc-opt --zero-verify-schedule > /dev/null

module attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 3 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<4xf32> param sharded on device
  sched.tensor @a.grad : tensor<4xf32> grad of @a sharded on device
  sched.tensor @b : tensor<4xf32> param sharded on device
  sched.tensor @b.grad : tensor<4xf32> grad of @b sharded on device
  sched.tensor @e : tensor<2x4xf32> param expert sharded on device
  sched.tensor @e.grad : tensor<2x4xf32> grad of @e expert sharded on device
  sched.tensor @f : tensor<2x4xf32> param expert sharded on device
  sched.tensor @f.grad : tensor<2x4xf32> grad of @f expert sharded on device
  // CHECK-LABEL: func.func @micro_step
  func.func @micro_step() {
    // The two expert gathers fuse over their group; the world ones apart.
    // CHECK: sched.all_gather_start %{{.*}}, %{{.*}} for [@e, @f] over expert_data_parallel :
    // CHECK: sched.all_gather_start %{{.*}}, %{{.*}} for [@a, @b] :
    %se = sched.read @e : tensor<4xf32>
    %te = sched.all_gather_start %se for [@e] over expert_data_parallel : tensor<4xf32>
    %e = sched.wait %te : tensor<2x4xf32>
    %sf = sched.read @f : tensor<4xf32>
    %tf = sched.all_gather_start %sf for [@f] over expert_data_parallel : tensor<4xf32>
    %f = sched.wait %tf : tensor<2x4xf32>
    %sa = sched.read @a : tensor<1xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<1xf32>
    %a = sched.wait %ta : tensor<4xf32>
    %sb = sched.read @b : tensor<1xf32>
    %tb = sched.all_gather_start %sb for [@b] : tensor<1xf32>
    %b = sched.wait %tb : tensor<4xf32>
    // Adjacent reductions of the two groups stay two collectives.
    // CHECK: sched.reduce_scatter_start %{{.*}} into [@e.grad, @f.grad] at [0, 0] over expert_data_parallel :
    // CHECK: sched.reduce_scatter_start %{{.*}} into [@a.grad, @b.grad] at [0, 0] :
    %r1 = sched.reduce_scatter_start %e into [@e.grad] at [0] over expert_data_parallel : tensor<2x4xf32>
    sched.wait %r1
    %r2 = sched.reduce_scatter_start %f into [@f.grad] at [0] over expert_data_parallel : tensor<2x4xf32>
    sched.wait %r2
    %r3 = sched.reduce_scatter_start %a into [@a.grad] at [0] : tensor<4xf32>
    sched.wait %r3
    %r4 = sched.reduce_scatter_start %b into [@b.grad] at [0] : tensor<4xf32>
    sched.wait %r4
    sched.release %e, %f, %a, %b : tensor<2x4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}
