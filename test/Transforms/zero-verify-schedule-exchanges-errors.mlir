// The verifier's rule on expert parallelism's token exchanges: this rank's
// experts run on the rows the dispatch all-to-all received and give their
// result back by the combine; their backward reads the combine's gradient
// and sends its input gradient back by the dispatch's. One broken schedule
// per rule (ep 2, 2 experts per layer, one per rank).
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics --zero-verify-schedule

module attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w1 : tensor<1x8x4xf32> param expert on device
  sched.tensor @w2 : tensor<1x4x8xf32> param expert on device
  func.func @micro_step(%rows: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %w1 = sched.read @w1 : tensor<1x8x4xf32>
    %w2 = sched.read @w2 : tensor<1x4x8xf32>
    // expected-error @+1 {{reads rows that no dispatch all-to-all received: this rank's experts run on the rows sent to them (run zero-insert-collectives)}}
    %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 2 : i64, top_k = 1 : i64} : (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>) -> (tensor<4x4xf32>, tensor<64xf32>)
    return %out : tensor<4x4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w1 : tensor<1x8x4xf32> param expert on device
  sched.tensor @w2 : tensor<1x4x8xf32> param expert on device
  func.func @micro_step(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %d = sched.all_to_all_start dispatch %x over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    %rows = sched.wait %d : tensor<4x4xf32>
    %w1 = sched.read @w1 : tensor<1x8x4xf32>
    %w2 = sched.read @w2 : tensor<1x4x8xf32>
    // expected-error @+1 {{result must go back to the tokens' ranks by a combine all-to-all, and only by it}}
    %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 2 : i64, top_k = 1 : i64} : (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>) -> (tensor<4x4xf32>, tensor<64xf32>)
    return %out : tensor<4x4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w1 : tensor<1x8x4xf32> param expert on device
  sched.tensor @w2 : tensor<1x4x8xf32> param expert on device
  func.func @micro_step(%x: tensor<4x4xf32>, %dy: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %d = sched.all_to_all_start dispatch %x over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    %rows = sched.wait %d : tensor<4x4xf32>
    %w1 = sched.read @w1 : tensor<1x8x4xf32>
    %w2 = sched.read @w2 : tensor<1x4x8xf32>
    %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 2 : i64, top_k = 1 : i64} : (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>) -> (tensor<4x4xf32>, tensor<64xf32>)
    %c = sched.all_to_all_start combine %out over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    %y = sched.wait %c : tensor<4x4xf32>
    // expected-error @+1 {{reads an output gradient that no combine_grad all-to-all received}}
    %drows, %dw1, %dw3, %dw2 = model.moe_local_experts_backward %rows, %w1, %w1, %w2, %dy, %saved : (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>, tensor<4x4xf32>, tensor<64xf32>) -> (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>)
    return %y : tensor<4x4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}

// -----

module attributes {sched.expert_parallel_size = 2 : i64, sched.stage = 0 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w1 : tensor<1x8x4xf32> param expert on device
  sched.tensor @w2 : tensor<1x4x8xf32> param expert on device
  func.func @micro_step(%x: tensor<4x4xf32>, %dy: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %d = sched.all_to_all_start dispatch %x over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    %rows = sched.wait %d : tensor<4x4xf32>
    %w1 = sched.read @w1 : tensor<1x8x4xf32>
    %w2 = sched.read @w2 : tensor<1x4x8xf32>
    %out, %saved = model.moe_local_experts %rows, %w1, %w1, %w2 {num_experts = 2 : i64, top_k = 1 : i64} : (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>) -> (tensor<4x4xf32>, tensor<64xf32>)
    %c = sched.all_to_all_start combine %out over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    %y = sched.wait %c : tensor<4x4xf32>
    %cg = sched.all_to_all_start combine_grad %dy over expert_parallel {bytes = 64 : i64, worst_bytes = 128 : i64} : tensor<4x4xf32> -> tensor<4x4xf32>
    %dout = sched.wait %cg : tensor<4x4xf32>
    // expected-error @+1 {{input gradient must go back by a dispatch_grad all-to-all, and only by it}}
    %drows, %dw1, %dw3, %dw2 = model.moe_local_experts_backward %rows, %w1, %w1, %w2, %dout, %saved : (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>, tensor<4x4xf32>, tensor<64xf32>) -> (tensor<4x4xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x4x8xf32>)
    return %drows : tensor<4x4xf32>
  }
  func.func @optimizer_step() {
    return
  }
}
