// zero-prefetch rejects negative budgets, naming all three.
// RUN: not zeroc-opt %s --zero-prefetch=prefetch-bucket-size=-1 2>&1 | FileCheck %s --check-prefix=BUCKET
// RUN: not zeroc-opt %s --zero-prefetch=max-live-parameters=-2 2>&1 | FileCheck %s --check-prefix=LIVE
// RUN: not zeroc-opt %s --zero-prefetch=max-reuse-distance=-3 2>&1 | FileCheck %s --check-prefix=REUSE

// BUCKET: error: zero-prefetch budgets must not be negative, found prefetch-bucket-size -1, max-live-parameters 1000000000 and max-reuse-distance 1000000000{{$}}
// LIVE: error: zero-prefetch budgets must not be negative, found prefetch-bucket-size 50000000, max-live-parameters -2 and max-reuse-distance 1000000000{{$}}
// REUSE: error: zero-prefetch budgets must not be negative, found prefetch-bucket-size 50000000, max-live-parameters 1000000000 and max-reuse-distance -3{{$}}
module attributes {sched.stage = 3 : i64, sched.world_size = 2 : i64} {
}
