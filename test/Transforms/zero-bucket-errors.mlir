// zero-bucket rejects negative bucket sizes, naming both.
// RUN: not zeroc-opt %s --zero-bucket=reduce-bucket-size=-1 2>&1 | FileCheck %s --check-prefix=REDUCE
// RUN: not zeroc-opt %s --zero-bucket=allgather-bucket-size=-5 2>&1 | FileCheck %s --check-prefix=GATHER

// REDUCE: error: bucket sizes must not be negative, found reduce-bucket-size -1 and allgather-bucket-size 500000000{{$}}
// GATHER: error: bucket sizes must not be negative, found reduce-bucket-size 500000000 and allgather-bucket-size -5{{$}}
module attributes {sched.stage = 2 : i64, sched.world_size = 2 : i64} {
}
