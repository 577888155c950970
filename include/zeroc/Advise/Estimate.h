//===- Estimate.h - A plan at another micro-batch, without compiling -*- C++
//-*-===//
//
// `zeroc advise` compiles each setup at two micro-batches and derives the
// others from those two plans. Nothing in a schedule depends on the
// micro-batch but sizes: the ops, their order, streams, dependencies and
// collectives are the same (the passes partition, bucket and prefetch
// parameters and gradients, whose sizes do not depend on it), and every
// size the cost model and the memory plan read is affine in it: an
// activation's bytes and an op's FLOPs and memory traffic are a part
// proportional to the micro-batch plus a part that is not (weights). So a
// plan at micro-batch m is the two plans' per-op and per-value figures
// interpolated (or extrapolated) linearly. The live bytes per op are those a
// compile would give; the arena the first-fit allocator would lay out (its
// holes) and the cross-stream orderings of its reuse, which the step time
// depends on a little, are estimates (docs/advise.md). MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_ADVISE_ESTIMATE_H
#define ZEROC_ADVISE_ESTIMATE_H

#include "zeroc/Plan/Plan.h"

#include <cstdint>
#include <optional>
#include <string>

namespace zeroc {

/// Nothing when `a` and `b` are the same schedule at two micro-batches
/// (the same phases, ops, streams, collectives and values, and different
/// micro-batches), so that interpolatePlan may derive others from them;
/// else what differs. Dependencies may differ: the memory planner orders
/// the reuse of arena memory across streams, and the arena's layout
/// depends on the sizes.
std::optional<std::string> sameScheduleAtTwoMicroBatches(const Plan &a,
                                                         const Plan &b);

/// The plan of the schedule of `a` and `b` (sameScheduleAtTwoMicroBatches)
/// at `microBatch` sequences per micro-step and `accumulation` micro-steps
/// per step: every op's FLOPs, bytes and workspace, every value's bytes,
/// each phase's live bytes per op (its arena: the live peak with the
/// nearer plan's share of holes), and the step's communication
/// volume interpolated linearly, in the micro-batch, between `a` and `b`
/// (the communication in the accumulation steps); the dependencies, which
/// include the arena-reuse orderings, of the nearer plan. The config's
/// batch triple says the new batch.
Plan interpolatePlan(const Plan &a, const Plan &b, int64_t microBatch,
                     int64_t accumulation);

} // namespace zeroc

#endif // ZEROC_ADVISE_ESTIMATE_H
