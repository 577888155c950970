// zero-assign-streams: with overlap-comm, gathers on stream 1, reductions on
// stream 2, copies and fetches on stream 3, compute (and every wait, on the
// stream that consumes it) on stream 0; a reduction's wait moves down to the
// next reduction, the next op that names its tensors, or the return.
// Without overlap-comm everything is on stream 0 in program order.
// RUN: zeroc-opt %s --zero-assign-streams=overlap-comm=true | FileCheck %s --check-prefix=OVERLAP
// RUN: zeroc-opt %s --zero-assign-streams | FileCheck %s --check-prefix=SERIAL
// RUN: zeroc-opt %s --zero-assign-streams=overlap-comm=false | FileCheck %s --check-prefix=SERIAL
// The output is valid IR.
// RUN: zeroc-opt %s --zero-assign-streams=overlap-comm=true | zeroc-opt -verify-diagnostics > /dev/null

module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4x4xf32> param sharded on device
  sched.tensor @a.grad : tensor<4x4xf32> grad of @a sharded on device
  sched.tensor @b : tensor<4x4xf32> param sharded on host
  sched.tensor @b.grad : tensor<4x4xf32> grad of @b sharded on device
  sched.tensor @p : tensor<4xf32> param on device
  sched.tensor @p.grad : tensor<4xf32> grad of @p on device
  sched.tensor @p.master : tensor<4xf32> master of @p on device
  sched.tensor @p.host : tensor<4xf32> master of @p on host
  sched.tensor @q : tensor<4xf32> param on device
  sched.tensor @q.grad : tensor<4xf32> grad of @q on device

  // OVERLAP-LABEL: func.func @micro_step
  // OVERLAP-NEXT:    %[[SA:.*]] = sched.read @a : tensor<8xf32>
  // OVERLAP-NEXT:    %[[TA:.*]] = sched.all_gather_start %[[SA]] for [@a] {stream = 1 : i64}
  // OVERLAP-NEXT:    %[[A:.*]] = sched.wait %[[TA]] : tensor<4x4xf32>
  // OVERLAP-NEXT:    %[[Y:.*]] = model.add %[[A]], %arg0
  // OVERLAP-NEXT:    sched.release %[[A]] : tensor<4x4xf32>
  // The reduction of @a.grad is waited for just before the next reduction.
  // OVERLAP-NEXT:    %[[RA:.*]] = sched.reduce_scatter_start %[[Y]] into [@a.grad] at [0] {stream = 2 : i64}
  // OVERLAP-NEXT:    %[[F:.*]] = sched.fetch_start [@b] {stream = 3 : i64}
  // OVERLAP-NEXT:    %[[SB:.*]] = sched.wait %[[F]] : tensor<8xf32>
  // OVERLAP-NEXT:    %[[TB:.*]] = sched.all_gather_start %[[SB]] for [@b] {stream = 1 : i64}
  // OVERLAP-NEXT:    %[[B:.*]] = sched.wait %[[TB]] : tensor<4x4xf32>
  // OVERLAP-NEXT:    sched.release %[[SB]]
  // OVERLAP-NEXT:    %[[Z:.*]] = model.add %[[B]], %[[Y]]
  // OVERLAP-NEXT:    sched.release %[[B]]
  // OVERLAP-NEXT:    sched.wait %[[RA]]{{$}}
  // OVERLAP-NEXT:    %[[RB:.*]] = sched.reduce_scatter_start %[[Z]] into [@b.grad] at [0] {stream = 2 : i64}
  // OVERLAP-NEXT:    model.add %[[Z]], %[[Z]]
  // The last one is waited for before the return.
  // OVERLAP-NEXT:    sched.wait %[[RB]]{{$}}
  // OVERLAP-NEXT:    return

  // Serial: the original order, stream 0 everywhere (the default, which the
  // printer leaves out).
  // SERIAL-LABEL: func.func @micro_step
  // SERIAL-NOT:     stream =
  // SERIAL:         %[[RA:.*]] = sched.reduce_scatter_start %{{.*}} into [@a.grad] at [0] :
  // SERIAL-NEXT:    sched.wait %[[RA]]
  // SERIAL-NEXT:    sched.fetch_start [@b]{{$}}
  // SERIAL-NOT:     stream =
  // SERIAL:         %[[RB:.*]] = sched.reduce_scatter_start
  // SERIAL-NEXT:    sched.wait %[[RB]]
  // SERIAL-NEXT:    model.add
  // SERIAL-NEXT:    return
  func.func @micro_step(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %sa = sched.read @a : tensor<8xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<8xf32>
    %a = sched.wait %ta : tensor<4x4xf32>
    %y = model.add %a, %x : tensor<4x4xf32>
    sched.release %a : tensor<4x4xf32>
    %ra = sched.reduce_scatter_start %y into [@a.grad] at [0] : tensor<4x4xf32>
    sched.wait %ra
    %f = sched.fetch_start [@b]
    %sb = sched.wait %f : tensor<8xf32>
    %tb = sched.all_gather_start %sb for [@b] : tensor<8xf32>
    %b = sched.wait %tb : tensor<4x4xf32>
    sched.release %sb : tensor<8xf32>
    %z = model.add %b, %y : tensor<4x4xf32>
    sched.release %b : tensor<4x4xf32>
    %rb = sched.reduce_scatter_start %z into [@b.grad] at [0] : tensor<4x4xf32>
    sched.wait %rb
    %out = model.add %z, %z : tensor<4x4xf32>
    return %out : tensor<4x4xf32>
  }

  // Boundary all-reduces: each wait moves down to the next reduction, and
  // the last one stops at the first op that names its tensor; all-gathers
  // of updates (stream 1) and copies (stream 3) keep their waits in place.
  // OVERLAP-LABEL: func.func @optimizer_step
  // OVERLAP-NEXT:    %[[R1:.*]] = sched.all_reduce_start [@p.grad] {stream = 2 : i64}
  // OVERLAP-NEXT:    sched.wait %[[R1]]{{$}}
  // OVERLAP-NEXT:    %[[R2:.*]] = sched.all_reduce_start [@q.grad] {stream = 2 : i64}
  // OVERLAP-NEXT:    %[[C:.*]] = sched.copy_start [@p.master] to [@p.host] {stream = 3 : i64}
  // OVERLAP-NEXT:    sched.wait %[[C]]{{$}}
  // OVERLAP-NEXT:    sched.wait %[[R2]]{{$}}
  // OVERLAP-NEXT:    sched.clip_grad_norm [@p.grad, @q.grad] {max_norm = 1.000000e+00 : f64}
  // OVERLAP-NEXT:    %[[U:.*]] = sched.all_gather_updates_start [@p] {stream = 1 : i64}
  // OVERLAP-NEXT:    sched.wait %[[U]]{{$}}
  // OVERLAP-NEXT:    sched.zero_grads [@p.grad, @q.grad]{{$}}
  // OVERLAP-NEXT:    return
  // Streams already set are reset without overlap.
  // SERIAL-LABEL: func.func @optimizer_step
  // SERIAL-NEXT:    %[[R1:.*]] = sched.all_reduce_start [@p.grad]{{$}}
  // SERIAL-NEXT:    sched.wait %[[R1]]{{$}}
  // SERIAL-NEXT:    %[[R2:.*]] = sched.all_reduce_start [@q.grad]{{$}}
  // SERIAL-NEXT:    sched.wait %[[R2]]{{$}}
  // SERIAL-NEXT:    sched.copy_start [@p.master] to [@p.host]{{$}}
  func.func @optimizer_step() {
    %r1 = sched.all_reduce_start [@p.grad]
    sched.wait %r1
    %r2 = sched.all_reduce_start [@q.grad] {stream = 2 : i64}
    sched.wait %r2 {stream = 2 : i64}
    %c = sched.copy_start [@p.master] to [@p.host]
    sched.wait %c
    sched.clip_grad_norm [@p.grad, @q.grad] {max_norm = 1.0 : f64}
    %u = sched.all_gather_updates_start [@p]
    sched.wait %u
    sched.zero_grads [@p.grad, @q.grad]
    return
  }
}
