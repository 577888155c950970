// The same-order proof over communicator groups, broken once per case: a
// collective's group must follow from what it names (expert state over the
// expert-data-parallel group, other state over the world, tokens over the
// expert-parallel group), never two groups in one collective, and the groups
// must partition the ranks.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-verify-schedule

module @expert_over_world attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 3 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<2x4xf32> param expert sharded on device
  sched.tensor @e.grad : tensor<2x4xf32> grad of @e expert sharded on device
  func.func @micro_step() {
    %se = sched.read @e : tensor<4xf32>
    // expected-error @+1 {{'sched.all_gather_start' op acts on expert state (@e) over the world group; it belongs on the expert_data_parallel group, the ranks that hold the same experts}}
    %te = sched.all_gather_start %se for [@e] : tensor<4xf32>
    %e = sched.wait %te : tensor<2x4xf32>
    %re = sched.reduce_scatter_start %e into [@e.grad] at [0] over expert_data_parallel : tensor<2x4xf32>
    sched.wait %re
    sched.release %e : tensor<2x4xf32>
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @dense_over_expert_group attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 0 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @a.grad : tensor<4xf32> grad of @a on device
  func.func @micro_step(%g: tensor<4xf32>) {
    sched.accumulate %g into @a.grad : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'sched.all_reduce_start' op acts on non-expert state (@a.grad) over the expert_data_parallel group; it belongs on the world group, every rank holding it}}
    %t = sched.all_reduce_start [@a.grad] over expert_data_parallel
    sched.wait %t
    return
  }
}

// -----

// A bucket that fuses an expert gradient with another: ranks of the
// expert-data-parallel group and of the world would disagree on who takes
// part.
module @mixed_bucket attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 3 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @a.grad : tensor<4xf32> grad of @a sharded on device
  sched.tensor @e : tensor<2x4xf32> param expert on device
  sched.tensor @e.grad : tensor<2x4xf32> grad of @e expert sharded on device
  func.func @micro_step(%ga: tensor<4xf32>, %ge: tensor<2x4xf32>) {
    // expected-error @+1 {{'sched.reduce_scatter_start' op mixes expert state (@e.grad) with other state (@a.grad): one collective runs over one group, and the expert-data-parallel group is not the world}}
    %r = sched.reduce_scatter_start %ga, %ge into [@a.grad, @e.grad] at [0, 0] : tensor<4xf32>, tensor<2x4xf32>
    sched.wait %r
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @token_group_for_state attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 0 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<2x4xf32> param expert on device
  sched.tensor @e.grad : tensor<2x4xf32> grad of @e expert on device
  func.func @micro_step(%g: tensor<2x4xf32>) {
    sched.accumulate %g into @e.grad : tensor<2x4xf32>
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'sched.all_reduce_start' op runs over the expert_parallel group, where only the token all-to-alls run}}
    %t = sched.all_reduce_start [@e.grad] over expert_parallel
    sched.wait %t
    return
  }
}

// -----

module @group_without_expert_parallelism attributes {sched.stage = 0 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @a.grad : tensor<4xf32> grad of @a on device
  func.func @micro_step(%g: tensor<4xf32>) {
    sched.accumulate %g into @a.grad : tensor<4xf32>
    return
  }
  func.func @optimizer_step() {
    // expected-error @+1 {{'sched.all_reduce_start' op runs over the expert_data_parallel group, but the schedule has no expert parallelism (sched.expert_parallel_size is 1)}}
    %t = sched.all_reduce_start [@a.grad] over expert_data_parallel
    sched.wait %t
    return
  }
}

// -----

module @expert_state_without_expert_parallelism attributes {sched.stage = 0 : i64, sched.world_size = 4 : i64} {
  // expected-error @+1 {{'sched.tensor' op is expert state, but the schedule has no expert parallelism (sched.expert_parallel_size is 1)}}
  sched.tensor @e : tensor<2x4xf32> param expert on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @state_not_marked attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 0 : i64, sched.world_size = 4 : i64} {
  sched.tensor @e : tensor<2x4xf32> param expert on device
  // expected-error @+1 {{'sched.tensor' op is not expert state, but what it belongs to, @e, is expert state}}
  sched.tensor @e.grad : tensor<2x4xf32> grad of @e on device
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

// expected-error @+1 {{sched.expert_parallel_size 4 does not divide the world size 6: the expert-parallel groups must partition the ranks}}
module @groups_do_not_partition attributes {sched.expert_parallel_size = 4 : i64, sched.stage = 0 : i64, sched.world_size = 6 : i64} {
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module @mixed_flat_group attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 2 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<4xf32> param on device
  sched.tensor @e : tensor<2x4xf32> param expert on device
  // expected-error @+1 {{'sched.flat_group' op flattens expert parameters with others (@a, @e): they are data-parallel over different groups}}
  sched.flat_group @flat [@a, @e] numel 12 padded 16
  func.func @micro_step() {
    return
  }
  func.func @optimizer_step() {
    return
  }
}
