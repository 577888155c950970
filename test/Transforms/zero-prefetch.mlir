// zero-prefetch: gather starts move up, in order, while the elements in
// flight stay within prefetch-bucket-size and the elements gathered and not
// released within max-live-parameters; a parameter gathered again within
// max-reuse-distance stays gathered, whatever the live budget (DeepSpeed's
// release rule reads only the distance). Sizes: @a and @b 16 elements, @c 64.
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=1000 max-live-parameters=1000 max-reuse-distance=1" | FileCheck %s --check-prefix=BIG
// RUN: zeroc-opt %s --zero-prefetch | FileCheck %s --check-prefix=BIG
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=16 max-live-parameters=1000 max-reuse-distance=1" | FileCheck %s --check-prefix=FLIGHT16
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=32 max-live-parameters=1000 max-reuse-distance=1" | FileCheck %s --check-prefix=FLIGHT32
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=1000 max-live-parameters=16 max-reuse-distance=1" | FileCheck %s --check-prefix=LIVE16
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=1000 max-live-parameters=48 max-reuse-distance=1" | FileCheck %s --check-prefix=LIVE48
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=0 max-live-parameters=1000 max-reuse-distance=0" | FileCheck %s --check-prefix=OFF
// Reuse alone (no hoisting: a zero prefetch bucket).
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=0 max-live-parameters=1000 max-reuse-distance=16" | FileCheck %s --check-prefix=REUSE16
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=0 max-live-parameters=1000 max-reuse-distance=15" | FileCheck %s --check-prefix=REUSE15
// Keeping @a while @b is gathered holds 32 live elements; a live budget
// below that still keeps it.
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=0 max-live-parameters=31 max-reuse-distance=1000" | FileCheck %s --check-prefix=REUSE16
// No live budget hoists nothing but keeps what is reused; no prefetch bucket
// hoists nothing.
// RUN: zeroc-opt %s > %t.input
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=1000000 max-live-parameters=0 max-reuse-distance=1000000" > %t.live0
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=0 max-live-parameters=1000000 max-reuse-distance=1000000" > %t.reuse
// RUN: diff %t.reuse %t.live0
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=1000000 max-live-parameters=0 max-reuse-distance=0" > %t.live0noreuse
// RUN: diff %t.input %t.live0noreuse
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=0 max-live-parameters=1000000 max-reuse-distance=0" | FileCheck %s --check-prefix=FLIGHT0
// The pipeline runs the two steps apart (reuse before zero-bucket, the
// hoisting after): each step alone does what it does with the other's
// budget at zero, and neither changes nothing.
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=1000 max-live-parameters=1000 max-reuse-distance=16 hoist=false" | FileCheck %s --check-prefix=REUSE16
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=0 max-live-parameters=1000 max-reuse-distance=1000 keep-reused=false" | FileCheck %s --check-prefix=OFF
// RUN: zeroc-opt %s --zero-prefetch="prefetch-bucket-size=16 max-live-parameters=1000 max-reuse-distance=1000 keep-reused=false" | FileCheck %s --check-prefix=FLIGHT16
// RUN: zeroc-opt %s --zero-prefetch="keep-reused=false hoist=false" > %t.neither
// RUN: diff %t.input %t.neither
// The output is valid IR.
// RUN: zeroc-opt %s --zero-prefetch | zeroc-opt -verify-diagnostics > /dev/null

module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4x4xf32> param sharded on device
  sched.tensor @b : tensor<4x4xf32> param sharded on device
  sched.tensor @c : tensor<8x8xf32> param sharded on device
  sched.tensor @o : tensor<4x4xf32> param sharded on host

  // Unbounded: every gather starts at the top, in the original order, each
  // with its shard read; the waits stay at the first uses.
  // BIG-LABEL: func.func @chain
  // BIG-NEXT:    %[[SA:.*]] = sched.read @a
  // BIG-NEXT:    %[[TA:.*]] = sched.all_gather_start %[[SA]] for [@a]
  // BIG-NEXT:    %[[SB:.*]] = sched.read @b
  // BIG-NEXT:    %[[TB:.*]] = sched.all_gather_start %[[SB]] for [@b]
  // BIG-NEXT:    %[[SC:.*]] = sched.read @c
  // BIG-NEXT:    %[[TC:.*]] = sched.all_gather_start %[[SC]] for [@c]
  // BIG-NEXT:    %[[A:.*]] = sched.wait %[[TA]]
  // BIG-NEXT:    model.add %[[A]], %arg0
  // BIG-NEXT:    sched.release %[[A]]
  // BIG-NEXT:    %[[B:.*]] = sched.wait %[[TB]]
  // BIG-NEXT:    model.add %[[B]]
  // BIG-NEXT:    sched.release %[[B]]
  // BIG-NEXT:    %[[C:.*]] = sched.wait %[[TC]]
  // BIG-NEXT:    model.add %[[C]]
  // BIG-NEXT:    sched.release %[[C]]
  // BIG-NEXT:    return

  // 16 elements in flight: @b starts once @a has arrived (not before @a's
  // wait), and @c (64) is larger than the bucket, so it is not prefetched.
  // FLIGHT16-LABEL: func.func @chain
  // FLIGHT16-NEXT:    sched.read @a
  // FLIGHT16-NEXT:    sched.all_gather_start %{{.*}} for [@a]
  // FLIGHT16-NEXT:    %[[A:.*]] = sched.wait
  // FLIGHT16-NEXT:    sched.read @b
  // FLIGHT16-NEXT:    %[[TB:.*]] = sched.all_gather_start %{{.*}} for [@b]
  // FLIGHT16-NEXT:    model.add %[[A]], %arg0
  // FLIGHT16-NEXT:    sched.release %[[A]]
  // FLIGHT16-NEXT:    sched.wait %[[TB]]
  // FLIGHT16-NEXT:    model.add
  // FLIGHT16-NEXT:    sched.release
  // FLIGHT16-NEXT:    sched.read @c
  // FLIGHT16-NEXT:    sched.all_gather_start %{{.*}} for [@c]
  // FLIGHT16-NEXT:    sched.wait

  // FLIGHT0-LABEL: func.func @chain
  // FLIGHT0-NEXT:    sched.read @a
  // FLIGHT0-NEXT:    sched.all_gather_start
  // FLIGHT0-NEXT:    sched.wait
  // FLIGHT0-NEXT:    model.add
  // FLIGHT0-NEXT:    sched.release
  // FLIGHT0-NEXT:    sched.read @b
  // FLIGHT0-NEXT:    sched.all_gather_start
  // FLIGHT0-NEXT:    sched.wait
  // FLIGHT0-NEXT:    model.add
  // FLIGHT0-NEXT:    sched.release
  // FLIGHT0-NEXT:    sched.read @c
  // FLIGHT0-NEXT:    sched.all_gather_start
  // FLIGHT0-NEXT:    sched.wait

  // 32 in flight: @a and @b overlap.
  // FLIGHT32-LABEL: func.func @chain
  // FLIGHT32-NEXT:    sched.read @a
  // FLIGHT32-NEXT:    sched.all_gather_start %{{.*}} for [@a]
  // FLIGHT32-NEXT:    sched.read @b
  // FLIGHT32-NEXT:    sched.all_gather_start %{{.*}} for [@b]
  // FLIGHT32-NEXT:    sched.wait

  // 16 live: @b is gathered only once @a is released.
  // LIVE16-LABEL: func.func @chain
  // LIVE16-NEXT:    sched.read @a
  // LIVE16-NEXT:    sched.all_gather_start %{{.*}} for [@a]
  // LIVE16-NEXT:    %[[A:.*]] = sched.wait
  // LIVE16-NEXT:    model.add %[[A]], %arg0
  // LIVE16-NEXT:    sched.release %[[A]]
  // LIVE16-NEXT:    sched.read @b
  // LIVE16-NEXT:    sched.all_gather_start %{{.*}} for [@b]
  // LIVE16-NEXT:    sched.wait

  // 48 live: @a and @b together (32); @c (64) alone exceeds the budget and
  // stays where it was.
  // LIVE48-LABEL: func.func @chain
  // LIVE48-NEXT:    sched.read @a
  // LIVE48-NEXT:    sched.all_gather_start %{{.*}} for [@a]
  // LIVE48-NEXT:    sched.read @b
  // LIVE48-NEXT:    sched.all_gather_start %{{.*}} for [@b]
  // LIVE48-NEXT:    %[[A:.*]] = sched.wait
  // LIVE48-NEXT:    model.add %[[A]], %arg0
  // LIVE48-NEXT:    sched.release %[[A]]
  // LIVE48-NEXT:    %[[B:.*]] = sched.wait
  // LIVE48-NEXT:    model.add %[[B]]
  // LIVE48-NEXT:    sched.release %[[B]]
  // LIVE48-NEXT:    sched.read @c
  // LIVE48-NEXT:    sched.all_gather_start %{{.*}} for [@c]
  func.func @chain(%x: tensor<4x4xf32>) {
    %sa = sched.read @a : tensor<8xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<8xf32>
    %a = sched.wait %ta : tensor<4x4xf32>
    %ya = model.add %a, %x : tensor<4x4xf32>
    sched.release %a : tensor<4x4xf32>
    %sb = sched.read @b : tensor<8xf32>
    %tb = sched.all_gather_start %sb for [@b] : tensor<8xf32>
    %b = sched.wait %tb : tensor<4x4xf32>
    %yb = model.add %b, %ya : tensor<4x4xf32>
    sched.release %b : tensor<4x4xf32>
    %sc = sched.read @c : tensor<32xf32>
    %tc = sched.all_gather_start %sc for [@c] : tensor<32xf32>
    %c = sched.wait %tc : tensor<8x8xf32>
    %yc = model.add %c, %c : tensor<8x8xf32>
    sched.release %c : tensor<8x8xf32>
    return
  }

  // @a is gathered again after 16 elements of @b: within a reuse distance of
  // 16 (and 32 live elements) the first buffer is kept for the second use;
  // its one release is the second gather's.
  // REUSE16-LABEL: func.func @reuse
  // REUSE16-NEXT:    sched.read @a
  // REUSE16-NEXT:    %[[TA:.*]] = sched.all_gather_start %{{.*}} for [@a]
  // REUSE16-NEXT:    %[[A:.*]] = sched.wait %[[TA]]
  // REUSE16-NEXT:    %[[Y:.*]] = model.add %[[A]], %arg0
  // REUSE16-NEXT:    sched.read @b
  // REUSE16-NEXT:    sched.all_gather_start %{{.*}} for [@b]
  // REUSE16-NEXT:    %[[B:.*]] = sched.wait
  // REUSE16-NEXT:    %[[Y2:.*]] = model.add %[[B]], %[[Y]]
  // REUSE16-NEXT:    sched.release %[[B]]
  // REUSE16-NEXT:    model.add %[[A]], %[[Y2]]
  // REUSE16-NEXT:    sched.release %[[A]]
  // REUSE16-NEXT:    return
  // REUSE15-LABEL: func.func @reuse
  // REUSE15:         sched.all_gather_start %{{.*}} for [@a]
  // REUSE15:         sched.release
  // REUSE15:         sched.all_gather_start %{{.*}} for [@b]
  // REUSE15:         sched.release
  // REUSE15:         sched.all_gather_start %{{.*}} for [@a]
  // REUSE15:         sched.release
  // REUSE15-NEXT:    return
  func.func @reuse(%x: tensor<4x4xf32>) {
    %sa = sched.read @a : tensor<8xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<8xf32>
    %a = sched.wait %ta : tensor<4x4xf32>
    %ya = model.add %a, %x : tensor<4x4xf32>
    sched.release %a : tensor<4x4xf32>
    %sb = sched.read @b : tensor<8xf32>
    %tb = sched.all_gather_start %sb for [@b] : tensor<8xf32>
    %b = sched.wait %tb : tensor<4x4xf32>
    %yb = model.add %b, %ya : tensor<4x4xf32>
    sched.release %b : tensor<4x4xf32>
    %sa2 = sched.read @a : tensor<8xf32>
    %ta2 = sched.all_gather_start %sa2 for [@a] : tensor<8xf32>
    %a2 = sched.wait %ta2 : tensor<4x4xf32>
    %ya2 = model.add %a2, %yb : tensor<4x4xf32>
    sched.release %a2 : tensor<4x4xf32>
    return
  }

  // Gathered again right after its release (forward then backward of the
  // last layer): a distance of 0 keeps it whenever reuse is on; a reuse
  // budget of 0 turns reuse off, as DeepSpeed's max_reuse_distance 0 does.
  // REUSE15-LABEL: func.func @adjacent_reuse
  // REUSE15-COUNT-1: sched.all_gather_start
  // REUSE15-NOT:     sched.all_gather_start
  // REUSE15:         %[[A:.*]] = sched.wait
  // REUSE15-NEXT:    model.add %[[A]], %arg0
  // REUSE15-NEXT:    model.add %[[A]]
  // REUSE15-NEXT:    sched.release %[[A]]
  // REUSE15-NEXT:    return
  // LIVE16-LABEL: func.func @adjacent_reuse
  // LIVE16-COUNT-1: sched.all_gather_start
  // LIVE16-NOT:     sched.all_gather_start
  // LIVE16-LABEL: func.func @fetched
  // OFF-LABEL: func.func @adjacent_reuse
  // OFF-COUNT-2: sched.all_gather_start
  // OFF-LABEL: func.func @fetched
  func.func @adjacent_reuse(%x: tensor<4x4xf32>) {
    %sa = sched.read @a : tensor<8xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<8xf32>
    %a = sched.wait %ta : tensor<4x4xf32>
    %ya = model.add %a, %x : tensor<4x4xf32>
    sched.release %a : tensor<4x4xf32>
    %sa2 = sched.read @a : tensor<8xf32>
    %ta2 = sched.all_gather_start %sa2 for [@a] : tensor<8xf32>
    %a2 = sched.wait %ta2 : tensor<4x4xf32>
    %ya2 = model.add %a2, %ya : tensor<4x4xf32>
    sched.release %a2 : tensor<4x4xf32>
    return
  }

  // An offloaded parameter's gather cannot start before its shard is
  // fetched; a kept buffer drops the second fetch and its release too.
  // BIG-LABEL: func.func @fetched
  // BIG-NEXT:    %[[F:.*]] = sched.fetch_start [@o]
  // BIG-NEXT:    %[[S:.*]] = sched.wait %[[F]]
  // BIG-NEXT:    %[[T:.*]] = sched.all_gather_start %[[S]] for [@o]
  // BIG-NEXT:    model.add %arg0, %arg0
  // BIG-NEXT:    %[[O:.*]] = sched.wait %[[T]]
  // BIG-NEXT:    sched.release %[[S]]
  // BIG-NEXT:    model.add %[[O]]
  // BIG-NEXT:    model.add %[[O]]
  // BIG-NEXT:    sched.release %[[O]]
  // BIG-NEXT:    return
  func.func @fetched(%x: tensor<4x4xf32>) {
    %f = sched.fetch_start [@o]
    %so = sched.wait %f : tensor<8xf32>
    %y = model.add %x, %x : tensor<4x4xf32>
    %to = sched.all_gather_start %so for [@o] : tensor<8xf32>
    %o = sched.wait %to : tensor<4x4xf32>
    sched.release %so : tensor<8xf32>
    %yo = model.add %o, %y : tensor<4x4xf32>
    sched.release %o : tensor<4x4xf32>
    %f2 = sched.fetch_start [@o]
    %so2 = sched.wait %f2 : tensor<8xf32>
    %to2 = sched.all_gather_start %so2 for [@o] : tensor<8xf32>
    %o2 = sched.wait %to2 : tensor<4x4xf32>
    sched.release %so2 : tensor<8xf32>
    %yo2 = model.add %o2, %yo : tensor<4x4xf32>
    sched.release %o2 : tensor<4x4xf32>
    return
  }

  // A gather nobody waits on (valid IR, not a valid schedule) is left
  // alone.
  // BIG-LABEL: func.func @unwaited
  // BIG-NEXT:    sched.read @a
  // BIG-NEXT:    sched.all_gather_start
  // BIG-NEXT:    model.add
  // BIG-NEXT:    return
  func.func @unwaited(%x: tensor<4x4xf32>) {
    %sa = sched.read @a : tensor<8xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<8xf32>
    %y = model.add %x, %x : tensor<4x4xf32>
    return
  }
}
