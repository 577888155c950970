//===- PlanTrace.h - Names shared by predicted and measured traces -*- C++
//-*-===//
//
// One definition of how a plan appears in a Chrome trace (Perfetto,
// chrome://tracing): a process per phase (and rank, for a measured run), a
// thread per plan stream, an event per op named by its kind and module path
// or the tensors it moves, with the op's index, module, tensors, FLOPs and
// collective in its arguments. `zeroc inspect --trace` (the simulated step)
// and `zerorun --profile` (the measured one) both use it, so that the two
// timelines read alike and `zeroc inspect --compare` can pair their events;
// the plan fingerprint tells which plan a measured trace is of. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PLAN_PLANTRACE_H
#define ZEROC_PLAN_PLANTRACE_H

#include "zeroc/Plan/Plan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace zeroc {

/// What an op works on, for a reader: a model op's module path
/// (`h.3.attn.c_attn`); a scheduling op's persistent tensors
/// (`h.3.mlp.c_fc.weight +2 more`), else its module path; else "".
std::string opSubject(const PlanOp &op);

/// An op's event name: its kind, then its subject ("linear h.3.mlp.c_fc",
/// "all_gather_start h.3.attn.c_attn.weight +3 more").
std::string traceEventName(const PlanOp &op);

/// An op's event arguments: {"op": index, "where", "tensors", "flops",
/// "bytes", "collective", "comm_elements"} (the ones it has).
nlohmann::json traceEventArgs(const PlanOp &op);

/// A phase's process name: "micro_step (4 runs per step)", prefixed by
/// "rank R: " for a measured trace (rank >= 0).
std::string traceProcessName(const PlanPhase &phase, int64_t rank = -1);

/// A stream's thread name: the plan's name for it, else "stream N".
std::string traceThreadName(const Plan &plan, int64_t stream);

/// The process id of a phase (by its position in the plan) of a rank:
/// 1, 2, ... for the predicted trace (rank < 0); 1000 (rank + 1) + 1, ...
/// for a measured one.
int64_t tracePid(size_t phasePosition, int64_t rank = -1);

/// A hash of what a trace's events are paired by: the world size, stage,
/// streams, and every phase's ops (index, kind, stream, deps, module,
/// tensors, collective and its elements, FLOPs and bytes). 16 hex digits.
std::string planFingerprint(const Plan &plan);

} // namespace zeroc

#endif // ZEROC_PLAN_PLANTRACE_H
