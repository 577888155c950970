// zero-bucket: successive collectives of one kind and dtype fuse up to the
// bucket size (elements of the full tensors). Reductions are issued where
// the last gradient of the bucket was, gathers where the first parameter of
// the bucket was (the later shard reads move up with them).
// Sizes: @a 4, @b 16, @c 64 elements (sharded over 2 ranks), @h 16 (bf16).
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=20 allgather-bucket-size=20" | FileCheck %s --check-prefix=B20
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=84 allgather-bucket-size=84" | FileCheck %s --check-prefix=B84
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=83 allgather-bucket-size=19" | FileCheck %s --check-prefix=B83
// The defaults (500M) fuse everything they may.
// RUN: zeroc-opt %s --zero-bucket | FileCheck %s --check-prefix=B84
// Bucket size 0: nothing is fused, the IR is unchanged.
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=0 allgather-bucket-size=0" | FileCheck %s --check-prefix=NONE
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=0 allgather-bucket-size=0" > %t.zero
// RUN: zeroc-opt %s > %t.none
// RUN: diff %t.zero %t.none
// Reduce and gather buckets are sized separately.
// RUN: zeroc-opt %s --zero-bucket="reduce-bucket-size=0 allgather-bucket-size=100" | FileCheck %s --check-prefix=GONLY
// The output is valid IR.
// RUN: zeroc-opt %s --zero-bucket | zeroc-opt -verify-diagnostics > /dev/null

module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
  sched.tensor @a : tensor<4xf32> param sharded on device
  sched.tensor @a.grad : tensor<4xf32> grad of @a sharded on device
  sched.tensor @b : tensor<4x4xf32> param sharded on device
  sched.tensor @b.grad : tensor<4x4xf32> grad of @b sharded on device
  sched.tensor @c : tensor<8x8xf32> param sharded on device
  sched.tensor @c.grad : tensor<8x8xf32> grad of @c sharded on device
  sched.tensor @h : tensor<4x4xbf16> param sharded on device
  sched.tensor @h.grad : tensor<4x4xbf16> grad of @h sharded on device
  sched.tensor @o : tensor<4x4xf32> param sharded on host
  sched.tensor @p : tensor<8xf32> param on device
  sched.tensor @p.grad : tensor<8xf32> grad of @p on device
  sched.tensor @q : tensor<4xf32> param on device
  sched.tensor @q.grad : tensor<4xf32> grad of @q on device
  sched.flat_group @zero.flat0 [@p, @q] numel 12 padded 12
  sched.tensor @zero.flat0.grad : tensor<12xf32> grad of @zero.flat0 sharded on device

  // B20-LABEL: func.func @reductions
  // B20:         %[[DA:.*]] = model.add %arg0, %arg0 : tensor<4xf32>
  // B20-NEXT:    %[[DB:.*]] = model.add %arg1, %arg1 : tensor<4x4xf32>
  // B20-NEXT:    %[[T:.*]] = sched.reduce_scatter_start %[[DA]], %[[DB]] into [@a.grad, @b.grad] at [0, 0] : tensor<4xf32>, tensor<4x4xf32>
  // B20-NEXT:    sched.wait %[[T]]
  // B20-NEXT:    %[[DC:.*]] = model.add %arg2, %arg2 : tensor<8x8xf32>
  // B20-NEXT:    %[[T2:.*]] = sched.reduce_scatter_start %[[DC]] into [@c.grad] at [0] : tensor<8x8xf32>
  // B20-NEXT:    sched.wait %[[T2]]
  // B20-NEXT:    return
  // B84-LABEL: func.func @reductions
  // B84-NEXT:    %[[DA:.*]] = model.add %arg0
  // B84-NEXT:    %[[DB:.*]] = model.add %arg1
  // B84-NEXT:    %[[DC:.*]] = model.add %arg2
  // B84-NEXT:    %[[T:.*]] = sched.reduce_scatter_start %[[DA]], %[[DB]], %[[DC]] into [@a.grad, @b.grad, @c.grad] at [0, 0, 0]
  // B84-NEXT:    sched.wait %[[T]]
  // B84-NEXT:    return
  // One element short of all three: the first two fuse, @c stays alone.
  // B83-LABEL: func.func @reductions
  // B83-COUNT-2: model.add
  // B83-NEXT:    sched.reduce_scatter_start {{.*}} into [@a.grad, @b.grad]
  // B83-NEXT:    sched.wait
  // B83-NEXT:    model.add
  // B83-NEXT:    sched.reduce_scatter_start {{.*}} into [@c.grad]
  // NONE-LABEL: func.func @reductions
  // NONE-COUNT-3: sched.reduce_scatter_start %{{[0-9]+}} into [@{{.}}.grad] at [0]
  // GONLY-LABEL: func.func @reductions
  // GONLY-COUNT-3: sched.reduce_scatter_start %{{[0-9]+}} into [@{{.}}.grad] at [0]
  func.func @reductions(%x: tensor<4xf32>, %y: tensor<4x4xf32>, %z: tensor<8x8xf32>) {
    %da = model.add %x, %x : tensor<4xf32>
    %ta = sched.reduce_scatter_start %da into [@a.grad] at [0] : tensor<4xf32>
    sched.wait %ta
    %db = model.add %y, %y : tensor<4x4xf32>
    %tb = sched.reduce_scatter_start %db into [@b.grad] at [0] : tensor<4x4xf32>
    sched.wait %tb
    %dc = model.add %z, %z : tensor<8x8xf32>
    %tc = sched.reduce_scatter_start %dc into [@c.grad] at [0] : tensor<8x8xf32>
    sched.wait %tc
    return
  }

  // B20-LABEL: func.func @gathers
  // B20-NEXT:    %[[SA:.*]] = sched.read @a : tensor<2xf32>
  // B20-NEXT:    %[[SB:.*]] = sched.read @b : tensor<8xf32>
  // B20-NEXT:    %[[T:.*]] = sched.all_gather_start %[[SA]], %[[SB]] for [@a, @b] : tensor<2xf32>, tensor<8xf32>
  // B20-NEXT:    %[[AB:.*]]:2 = sched.wait %[[T]] : tensor<4xf32>, tensor<4x4xf32>
  // B20-NEXT:    model.add %[[AB]]#0, %[[AB]]#0 : tensor<4xf32>
  // B20-NEXT:    sched.release %[[AB]]#0
  // B20-NEXT:    model.add %[[AB]]#1, %[[AB]]#1 : tensor<4x4xf32>
  // B20-NEXT:    sched.release %[[AB]]#1
  // B20-NEXT:    %[[SC:.*]] = sched.read @c : tensor<32xf32>
  // B20-NEXT:    %[[T2:.*]] = sched.all_gather_start %[[SC]] for [@c]
  // B20-NEXT:    %[[C:.*]] = sched.wait %[[T2]] : tensor<8x8xf32>
  // B20-NEXT:    model.add %[[C]], %[[C]]
  // B20-NEXT:    sched.release %[[C]]
  // B20-NEXT:    return
  // B84-LABEL: func.func @gathers
  // B84-NEXT:    sched.read @a
  // B84-NEXT:    sched.read @b
  // B84-NEXT:    sched.read @c
  // B84-NEXT:    %[[T:.*]] = sched.all_gather_start %{{.*}}, %{{.*}}, %{{.*}} for [@a, @b, @c]
  // B84-NEXT:    %{{.*}}:3 = sched.wait %[[T]] : tensor<4xf32>, tensor<4x4xf32>, tensor<8x8xf32>
  // B84-NEXT:    model.add
  // 19 < 4 + 16: no two gathers fit.
  // B83-LABEL: func.func @gathers
  // B83-COUNT-3: sched.all_gather_start %{{[0-9]+}} for [@{{.}}]
  // NONE-LABEL: func.func @gathers
  // NONE-COUNT-3: sched.all_gather_start %{{[0-9]+}} for [@{{.}}]
  // GONLY-LABEL: func.func @gathers
  // GONLY:       sched.all_gather_start %{{.*}}, %{{.*}}, %{{.*}} for [@a, @b, @c]
  func.func @gathers() {
    %sa = sched.read @a : tensor<2xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<2xf32>
    %a = sched.wait %ta : tensor<4xf32>
    %ya = model.add %a, %a : tensor<4xf32>
    sched.release %a : tensor<4xf32>
    %sb = sched.read @b : tensor<8xf32>
    %tb = sched.all_gather_start %sb for [@b] : tensor<8xf32>
    %b = sched.wait %tb : tensor<4x4xf32>
    %yb = model.add %b, %b : tensor<4x4xf32>
    sched.release %b : tensor<4x4xf32>
    %sc = sched.read @c : tensor<32xf32>
    %tc = sched.all_gather_start %sc for [@c] : tensor<32xf32>
    %c = sched.wait %tc : tensor<8x8xf32>
    %yc = model.add %c, %c : tensor<8x8xf32>
    sched.release %c : tensor<8x8xf32>
    return
  }

  // Each kind fills its own bucket: a gather between two reductions does
  // not keep them apart, nor a reduction between two gathers (stage 3's
  // backward pass, a gather and a reduction for every weight). The
  // reductions fuse where the later one was, the gathers where the earlier
  // one was; @a's shard read moves up with its gather.
  // B84-LABEL: func.func @kinds
  // B84-NEXT:    %[[SC:.*]] = sched.read @c : tensor<32xf32>
  // B84-NEXT:    %[[SA:.*]] = sched.read @a : tensor<2xf32>
  // B84-NEXT:    %[[G:.*]] = sched.all_gather_start %[[SC]], %[[SA]] for [@c, @a]
  // B84-NEXT:    %[[CA:.*]]:2 = sched.wait %[[G]] : tensor<8x8xf32>, tensor<4xf32>
  // B84-NEXT:    sched.release %[[CA]]#0
  // B84-NEXT:    %[[R:.*]] = sched.reduce_scatter_start %arg0, %arg1 into [@a.grad, @b.grad] at [0, 0]
  // B84-NEXT:    sched.wait %[[R]]
  // B84-NEXT:    sched.release %[[CA]]#1
  // B84-NEXT:    return
  // Bucket size 20: @c (64 elements) fits no bucket, @a.grad and @b.grad
  // (4 + 16) fit one.
  // B20-LABEL: func.func @kinds
  // B20:         sched.all_gather_start %{{.*}} for [@c]
  // B20:         sched.reduce_scatter_start %arg0, %arg1 into [@a.grad, @b.grad]
  // B20:         sched.all_gather_start %{{.*}} for [@a]
  // NONE-LABEL: func.func @kinds
  // NONE:         sched.reduce_scatter_start %arg0 into [@a.grad]
  // NONE:         sched.all_gather_start %{{.*}} for [@c]
  // NONE:         sched.reduce_scatter_start %arg1 into [@b.grad]
  // NONE:         sched.all_gather_start %{{.*}} for [@a]
  func.func @kinds(%x: tensor<4xf32>, %y: tensor<4x4xf32>) {
    %ta = sched.reduce_scatter_start %x into [@a.grad] at [0] : tensor<4xf32>
    sched.wait %ta
    %sc = sched.read @c : tensor<32xf32>
    %tc = sched.all_gather_start %sc for [@c] : tensor<32xf32>
    %c = sched.wait %tc : tensor<8x8xf32>
    sched.release %c : tensor<8x8xf32>
    %tb = sched.reduce_scatter_start %y into [@b.grad] at [0] : tensor<4x4xf32>
    sched.wait %tb
    %sa = sched.read @a : tensor<2xf32>
    %t2 = sched.all_gather_start %sa for [@a] : tensor<2xf32>
    %a = sched.wait %t2 : tensor<4xf32>
    sched.release %a : tensor<4xf32>
    return
  }

  // A shard read does not move up past an op that names its tensor (here
  // the copy of @b's values from the host): the gathers stay apart.
  // B84-LABEL: func.func @shard_named_between
  // B84:         sched.all_gather_start %{{.*}} for [@a]
  // B84:         sched.copy_start [@o] to [@b]
  // B84:         sched.read @b
  // B84-NEXT:    sched.all_gather_start %{{.*}} for [@b]
  func.func @shard_named_between() {
    %sa = sched.read @a : tensor<2xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<2xf32>
    %a = sched.wait %ta : tensor<4xf32>
    sched.release %a : tensor<4xf32>
    %cp = sched.copy_start [@o] to [@b]
    sched.wait %cp
    %sb = sched.read @b : tensor<8xf32>
    %tb = sched.all_gather_start %sb for [@b] : tensor<8xf32>
    %b = sched.wait %tb : tensor<4x4xf32>
    sched.release %b : tensor<4x4xf32>
    return
  }

  // bf16 and f32 never share a bucket.
  // B84-LABEL: func.func @dtypes
  // B84:         sched.reduce_scatter_start %{{.*}} into [@b.grad] at [0] : tensor<4x4xf32>
  // B84:         sched.reduce_scatter_start %{{.*}} into [@h.grad] at [0] : tensor<4x4xbf16>
  // B84:         sched.all_gather_start %{{.*}} for [@h] : tensor<8xbf16>
  // B84:         sched.all_gather_start %{{.*}} for [@b] : tensor<8xf32>
  func.func @dtypes(%y: tensor<4x4xf32>, %g: tensor<4x4xbf16>) {
    %tb = sched.reduce_scatter_start %y into [@b.grad] at [0] : tensor<4x4xf32>
    sched.wait %tb
    %th = sched.reduce_scatter_start %g into [@h.grad] at [0] : tensor<4x4xbf16>
    sched.wait %th
    %sh = sched.read @h : tensor<8xbf16>
    %t1 = sched.all_gather_start %sh for [@h] : tensor<8xbf16>
    %h = sched.wait %t1 : tensor<4x4xbf16>
    sched.release %h : tensor<4x4xbf16>
    %sb = sched.read @b : tensor<8xf32>
    %t2 = sched.all_gather_start %sb for [@b] : tensor<8xf32>
    %b = sched.wait %t2 : tensor<4x4xf32>
    sched.release %b : tensor<4x4xf32>
    return
  }

  // A reduce-scatter and an all-reduce (reduce_scatter: false) are different
  // collectives; two all-reduces fuse and stay all-reduces.
  // B84-LABEL: func.func @all_reduce_attr
  // B84-NEXT:    sched.reduce_scatter_start %arg0 into [@a.grad] at [0] :
  // B84-NEXT:    sched.wait
  // B84-NEXT:    sched.reduce_scatter_start %arg1, %arg2 into [@b.grad, @c.grad] at [0, 0] {all_reduce} :
  // B84-NEXT:    sched.wait
  // B84-NEXT:    return
  func.func @all_reduce_attr(%x: tensor<4xf32>, %y: tensor<4x4xf32>, %z: tensor<8x8xf32>) {
    %ta = sched.reduce_scatter_start %x into [@a.grad] at [0] : tensor<4xf32>
    sched.wait %ta
    %tb = sched.reduce_scatter_start %y into [@b.grad] at [0] {all_reduce} : tensor<4x4xf32>
    sched.wait %tb
    %tc = sched.reduce_scatter_start %z into [@c.grad] at [0] {all_reduce} : tensor<8x8xf32>
    sched.wait %tc
    return
  }

  // Stage 2: reductions into the flat group keep their offsets.
  // B84-LABEL: func.func @flat_group
  // B84-NEXT:    %[[T:.*]] = sched.reduce_scatter_start %arg1, %arg0 into [@zero.flat0.grad, @zero.flat0.grad] at [8, 0] : tensor<4xf32>, tensor<8xf32>
  // B84-NEXT:    sched.wait %[[T]]
  // B84-NEXT:    return
  func.func @flat_group(%dp: tensor<8xf32>, %dq: tensor<4xf32>) {
    %tq = sched.reduce_scatter_start %dq into [@zero.flat0.grad] at [8] : tensor<4xf32>
    sched.wait %tq
    %tp = sched.reduce_scatter_start %dp into [@zero.flat0.grad] at [0] : tensor<8xf32>
    sched.wait %tp
    return
  }

  // In-place collectives (the stage 0 boundary all-reduce, the all-gather of
  // updated parameters) fuse at the later position: 8 + 4 elements.
  // B20-LABEL: func.func @in_place
  // B20-NEXT:    %[[R:.*]] = sched.all_reduce_start [@p.grad, @q.grad]
  // B20-NEXT:    sched.wait %[[R]]
  // B20-NEXT:    %[[U:.*]] = sched.all_gather_updates_start [@p, @q]
  // B20-NEXT:    sched.wait %[[U]]
  // B20-NEXT:    return
  // NONE-LABEL: func.func @in_place
  // NONE-NEXT:    sched.all_reduce_start [@p.grad]
  // NONE-NEXT:    sched.wait
  // NONE-NEXT:    sched.all_reduce_start [@q.grad]
  func.func @in_place() {
    %r1 = sched.all_reduce_start [@p.grad]
    sched.wait %r1
    %r2 = sched.all_reduce_start [@q.grad]
    sched.wait %r2
    %u1 = sched.all_gather_updates_start [@p]
    sched.wait %u1
    %u2 = sched.all_gather_updates_start [@q]
    sched.wait %u2
    return
  }

  // An in-place reduction is not delayed past an op that reads its tensor.
  // B84-LABEL: func.func @in_place_read_between
  // B84-NEXT:    sched.all_reduce_start [@p.grad]
  // B84-NEXT:    sched.wait
  // B84-NEXT:    sched.read @p.grad
  // B84-NEXT:    sched.all_reduce_start [@q.grad]
  func.func @in_place_read_between() -> tensor<8xf32> {
    %r1 = sched.all_reduce_start [@p.grad]
    sched.wait %r1
    %g = sched.read @p.grad : tensor<8xf32>
    %r2 = sched.all_reduce_start [@q.grad]
    sched.wait %r2
    return %g : tensor<8xf32>
  }

  // Fetched shards (parameter offload) are not reads that can move: the
  // gathers stay apart.
  // B84-LABEL: func.func @fetched
  // B84:         sched.all_gather_start %{{.*}} for [@a]
  // B84:         sched.all_gather_start %{{.*}} for [@o]
  func.func @fetched() {
    %sa = sched.read @a : tensor<2xf32>
    %ta = sched.all_gather_start %sa for [@a] : tensor<2xf32>
    %a = sched.wait %ta : tensor<4xf32>
    sched.release %a : tensor<4xf32>
    %f = sched.fetch_start [@o]
    %so = sched.wait %f : tensor<8xf32>
    %to = sched.all_gather_start %so for [@o] : tensor<8xf32>
    %o = sched.wait %to : tensor<4x4xf32>
    sched.release %so : tensor<8xf32>
    sched.release %o : tensor<4x4xf32>
    return
  }

  // A start nobody waits on (invalid as a schedule, valid IR) is left alone
  // and splits the buckets around it.
  // B84-LABEL: func.func @unwaited
  // B84-NEXT:    sched.reduce_scatter_start %arg0 into [@a.grad]
  // B84-NEXT:    sched.reduce_scatter_start %arg1, %arg2 into [@b.grad, @c.grad]
  func.func @unwaited(%x: tensor<4xf32>, %y: tensor<4x4xf32>, %z: tensor<8x8xf32>) {
    %ta = sched.reduce_scatter_start %x into [@a.grad] at [0] : tensor<4xf32>
    %tb = sched.reduce_scatter_start %y into [@b.grad] at [0] : tensor<4x4xf32>
    sched.wait %tb
    %tc = sched.reduce_scatter_start %z into [@c.grad] at [0] : tensor<8x8xf32>
    sched.wait %tc
    return
  }
}
