// zero-plan-memory: live ranges from Liveness, extended for asynchronous
// collectives; arena offsets; the peak and what is live there.
// RUN: zeroc-opt %s -split-input-file --zero-plan-memory | FileCheck %s

// Sizes: x, y, z and the gathered @w are 4x4 f32 = 64 bytes (256 aligned).
// The gathered @w lives from its all_gather_start (op 1) to its release (op
// 4), so z (op 5) reuses its offset; y lives until the mul reads it. The peak
// is at the add (op 3): x, y and @w.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: sched.arg_offsets = array<i64: [[X:[0-9]+]]>
// CHECK-SAME: sched.memory = {activations = 128 : i64, arena_bytes = 768 : i64, gather_buffers = 64 : i64, peak_live_bytes = 192 : i64, peak_op = 3 : i64, reduce_buckets = 0 : i64, workspace = 0 : i64}
// CHECK: sched.wait {{.*}} {sched.offsets = array<i64: [[W:[0-9]+]]>}
// CHECK: model.add {{.*}} {sched.offsets = array<i64: [[Y:[0-9]+]]>}
// CHECK: sched.release
// CHECK: model.mul {{.*}} {sched.offsets = array<i64: [[W]]>}
module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4x4xf32> param sharded on device
  sched.tensor @w.grad : tensor<4x4xf32> grad of @w sharded on device
  func.func @micro_step(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %s = sched.read @w : tensor<8xf32>
    %t = sched.all_gather_start %s for [@w] : tensor<8xf32>
    %w = sched.wait %t : tensor<4x4xf32>
    %y = model.add %w, %x : tensor<4x4xf32>
    sched.release %w : tensor<4x4xf32>
    %z = model.mul %y, %x : tensor<4x4xf32>
    return %z : tensor<4x4xf32>
  }
}

// -----

// A gradient in a reduce bucket lives until the reduction's wait, not until
// the start that reads it: at the mul (op 2), x, the gradient and the mul's
// result are live, and the reduce-scatter's receive buffer (its workspace:
// a shard of 8 f32, 32 bytes), from the start to the wait.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: activations = 128 : i64
// CHECK-SAME: peak_live_bytes = 224 : i64, peak_op = 2 : i64, reduce_buckets = 64 : i64, workspace = 32 : i64
// CHECK: sched.reduce_scatter_start {{.*}}sched.workspace_bytes = 32 : i64, sched.workspace_offset = {{[0-9]+}} : i64
module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4x4xf32> param sharded on device
  sched.tensor @w.grad : tensor<4x4xf32> grad of @w sharded on device
  func.func @micro_step(%x: tensor<4x4xf32>) {
    %g = model.add %x, %x : tensor<4x4xf32>
    %r = sched.reduce_scatter_start %g into [@w.grad] at [0] {stream = 2 : i64} : tensor<4x4xf32>
    %h = model.mul %x, %x : tensor<4x4xf32>
    sched.wait %r
    return
  }
}

// -----

// Attention keeps its probabilities for backward: 2 x 2 heads x 4 x 4 f32 =
// 256 bytes, its second result, placed in the arena like any value and live
// until its backward reads it (no location is involved). At the backward: q,
// the output, the probabilities and three gradients, 6 x 256 bytes.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: activations = 1536 : i64
// CHECK: model.causal_attention {{.*}}sched.offsets = array<i64: {{[0-9]+}}, {{[0-9]+}}>
module attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  func.func @micro_step(%q: tensor<2x4x8xf32>) {
    %a, %p = model.causal_attention %q, %q, %q kernel = materialized {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x2x4x4xf32>)
    %d:3 = model.causal_attention_backward %q, %q, %q, %a, %a, %p kernel = materialized {num_heads = 2 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x2x4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
    return
  }
}

// -----

// A parameter that does not divide by the world size: 3x3 = 9 f32 over 2
// ranks, shards of 5. The gathered buffer holds the padded 10 elements (40
// bytes, where the tensor is 36) and the reduce-scatter's workspace holds
// the shard it receives (20 bytes, at 0) and the zero-padded send buffer
// (40 bytes, at the next 256-byte boundary): 296 bytes.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: sched.live_bytes = array<i64: 36, 76, 76, 112,
// CHECK: sched.reduce_scatter_start {{.*}}sched.workspace_bytes = 296 : i64
module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<3x3xf32> param sharded on device
  sched.tensor @w.grad : tensor<3x3xf32> grad of @w sharded on device
  func.func @micro_step(%x: tensor<3x3xf32>) {
    %s = sched.read @w : tensor<5xf32>
    %t = sched.all_gather_start %s for [@w] : tensor<5xf32>
    %w = sched.wait %t : tensor<3x3xf32>
    %y = model.add %w, %x : tensor<3x3xf32>
    sched.release %w : tensor<3x3xf32>
    %r = sched.reduce_scatter_start %y into [@w.grad] at [0] {stream = 2 : i64} : tensor<3x3xf32>
    sched.wait %r
    return
  }
}

// -----

// Two stage-3 gradients in one reduce-scatter are packed into one send
// buffer, as DeepSpeed's reduce_scatter_coalesced does (Workspace.h): @w
// (9 f32, shards of 5) and @v (4 f32, shards of 2) at world size 2, each in
// a 64-byte slot (16 f32) of each rank's block of 32 elements. The receive
// buffer is one block (128 bytes, at 0), the send buffer two (256 bytes, at
// the next 256-byte boundary): 512 bytes (one by one they took 520).
// CHECK-LABEL: func.func @micro_step
// CHECK: sched.reduce_scatter_start {{.*}}sched.workspace_bytes = 512 : i64
module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<3x3xf32> param sharded on device
  sched.tensor @w.grad : tensor<3x3xf32> grad of @w sharded on device
  sched.tensor @v : tensor<4xf32> param sharded on device
  sched.tensor @v.grad : tensor<4xf32> grad of @v sharded on device
  func.func @micro_step(%x: tensor<3x3xf32>, %y: tensor<4xf32>) {
    %r = sched.reduce_scatter_start %x, %y into [@w.grad, @v.grad] at [0, 0] {stream = 2 : i64} : tensor<3x3xf32>, tensor<4xf32>
    sched.wait %r
    return
  }
}

// -----

// Stage 2: two gradients of one flat group (8 + 6 elements, padded to 16:
// partitions of 4 at world size 4) go out in one reduce-scatter. Their
// ranges tile [0, 14), so they go out as one collective out of a staging
// copy of the range (Workspace.h, FlatUnit). Each rank receives what it
// owns of it: rank 0 [0, 4), rank 1 [4, 8), rank 2 [8, 12), rank 3
// [12, 14); the largest is 4 elements (16 bytes, at 0); the staging range
// of 14 f32 (56 bytes) at the next 256-byte boundary: 312 bytes.
// CHECK-LABEL: func.func @micro_step
// CHECK: sched.reduce_scatter_start {{.*}}sched.workspace_bytes = 312 : i64
module attributes {sched.stage = 2 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<8xf32> param on device
  sched.tensor @b : tensor<6xf32> param on device
  sched.flat_group @g [@a, @b] numel 14 padded 16
  sched.tensor @g.grad : tensor<16xf32> grad of @g sharded on device
  func.func @micro_step(%x: tensor<8xf32>, %y: tensor<6xf32>) {
    %r = sched.reduce_scatter_start %x, %y into [@g.grad, @g.grad] at [0, 8] {stream = 2 : i64} : tensor<8xf32>, tensor<6xf32>
    sched.wait %r
    return
  }
}

// -----

// Streams run concurrently, so memory reused across streams is ordered: the
// gather (op 4, stream 1) writes where the add's result lived, which died at
// the mul (op 3, stream 0), so the gather follows the mul (`sched.after`).
// CHECK-LABEL: func.func @micro_step
// CHECK: model.mul {{.*}}sched.offsets = array<i64: [[M:[0-9]+]]>
// CHECK: sched.all_gather_start {{.*}}sched.after = array<i64: 3>
module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @w : tensor<4x4xf32> param sharded on device
  func.func @micro_step(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %a = model.add %x, %x : tensor<4x4xf32>
    %b = model.add %a, %x : tensor<4x4xf32>
    %s = sched.read @w : tensor<8xf32>
    %m = model.mul %b, %x : tensor<4x4xf32>
    %t = sched.all_gather_start %s for [@w] {stream = 1 : i64} : tensor<8xf32>
    %w = sched.wait %t : tensor<4x4xf32>
    %z = model.add %w, %m : tensor<4x4xf32>
    sched.release %w : tensor<4x4xf32>
    return %z : tensor<4x4xf32>
  }
}

// -----

// The previous occupant's last use is on this stream (the mul), but an
// earlier one is on another (the accumulate on stream 2): the add that
// reuses its memory follows that one too.
// CHECK-LABEL: func.func @micro_step
// CHECK: model.add {{.*}}sched.offsets = array<i64: [[A:[0-9]+]]>
// CHECK: sched.accumulate
// CHECK: model.mul
// CHECK: model.add {{.*}}sched.after = array<i64: 1>, sched.offsets = array<i64: [[A]]>
module attributes {sched.stage = 2 : i64, sched.world_size = 1 : i64} {
  sched.tensor @w : tensor<4x4xf32> param on device
  sched.tensor @w.grad : tensor<4x4xf32> grad of @w on device
  func.func @micro_step(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %a = model.add %x, %x : tensor<4x4xf32>
    sched.accumulate %a into @w.grad {stream = 2 : i64} : tensor<4x4xf32>
    %c = model.mul %a, %x : tensor<4x4xf32>
    %b = model.add %c, %x : tensor<4x4xf32>
    return %b : tensor<4x4xf32>
  }
}

// -----

// An in_place sum of gradients takes its lhs's memory when the lhs dies
// there (PyTorch accumulates a gradient into the one that came first): %s
// gets %a's offset, and at the sum (op 2) x, %c and %a-then-%s are live,
// 192 bytes, not 256. An lhs that lives on (%b is read after) or a sum
// without in_place gets its own buffer.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: sched.live_bytes = array<i64: 128, 192, 192, 192, 256,
// CHECK: %[[A:.*]] = model.mul {{.*}} {sched.offsets = array<i64: [[OA:[0-9]+]]>}
// CHECK: model.add %[[A]], {{.*}} {in_place, sched.offsets = array<i64: [[OA]]>}
// CHECK: %[[B:.*]] = model.mul {{.*}} {sched.offsets = array<i64: [[OB:[0-9]+]]>}
// CHECK: model.add %[[B]], {{.*}} {in_place, sched.offsets = array<i64: [[OS:[0-9]+]]>}
// CHECK-NOT: sched.offsets = array<i64: [[OB]]>}
// CHECK: model.add {{.*}} {sched.offsets
module attributes {sched.stage = 0 : i64, sched.world_size = 1 : i64} {
  func.func @micro_step(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %a = model.mul %x, %x : tensor<4x4xf32>
    %c = model.mul %x, %x : tensor<4x4xf32>
    %s = model.add %a, %c {in_place} : tensor<4x4xf32>
    %b = model.mul %s, %x : tensor<4x4xf32>
    %t = model.add %b, %s {in_place} : tensor<4x4xf32>
    %u = model.mul %b, %t : tensor<4x4xf32>
    %v = model.add %u, %u : tensor<4x4xf32>
    return %v : tensor<4x4xf32>
  }
}

// -----

// The same group, but the gradients' ranges leave a gap ([0, 8) and
// [10, 14)): one collective each, sent as they are. Each rank's shares of
// both packed: rank 0 4 (of x), rank 1 4 (of x), rank 2 2 (of y, [10, 12)),
// rank 3 2; the largest total is 4 elements.
// CHECK-LABEL: func.func @micro_step
// CHECK: sched.reduce_scatter_start {{.*}}sched.workspace_bytes = 16 : i64
module attributes {sched.stage = 2 : i64, sched.world_size = 4 : i64} {
  sched.tensor @a : tensor<8xf32> param on device
  sched.tensor @b : tensor<6xf32> param on device
  sched.flat_group @g [@a, @b] numel 14 padded 16
  sched.tensor @g.grad : tensor<16xf32> grad of @g sharded on device
  func.func @micro_step(%x: tensor<8xf32>, %y: tensor<4xf32>) {
    %r = sched.reduce_scatter_start %x, %y into [@g.grad, @g.grad] at [0, 10] {stream = 2 : i64} : tensor<8xf32>, tensor<4xf32>
    sched.wait %r
    return
  }
}
