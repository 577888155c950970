//===- PreparedPhase.h - A plan phase, ready to run -------------*- C++ -*-===//
//
// Everything about a phase that does not change from one run to the next,
// worked out once (on its first run) instead of every micro-step: its
// values as arena views, which op waits for which start, the collectives'
// issue order, and its ops by stream. Each run then only binds what does
// change: `read` views of persistent tensors and values the plan left
// outside the arena.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_PREPAREDPHASE_H
#define ZEROC_RUNTIME_EXEC_PREPAREDPHASE_H

#include "KernelTypes.h"
#include "zeroc/Plan/Plan.h"

#include <map>
#include <memory>
#include <vector>

namespace zeroc::runtime {

class MemoryTracker;

namespace exec {

struct PreparedPhase {
  const PlanPhase *phase = nullptr;
  std::map<int64_t, const PlanValue *> valueInfo;
  /// Every value of the phase: arena views; `read` outputs and unplanned
  /// values without data until a run binds them.
  std::map<int64_t, Tensor> values;
  std::vector<int64_t> readViews; ///< Outputs of `read` ops.
  std::vector<int64_t> unplanned; ///< Values without an arena offset.
  int64_t arenaEnd = 0;           ///< The highest arena byte of a value.
  std::map<int64_t, const PlanOp *> waitOf; ///< start index -> wait op.
  /// Op index -> its collective's place in the issue order (program order,
  /// whichever stream runs it: the same order on every rank).
  std::map<int64_t, int64_t> ticketOf;
  /// Op index -> the plan stream that runs it (0 for every op when the
  /// executor runs on one stream).
  std::map<int64_t, int64_t> streamOf;
  /// The ops of each stream in program order, by ascending stream id (the
  /// first is the compute stream).
  std::vector<std::pair<int64_t, std::vector<const PlanOp *>>> streams;
  int64_t opCount = 0; ///< The largest op index + 1.

  /// Checks the values against an arena of `arenaBytes` and lays them out
  /// at `arena`. `oneStream`: every op on stream 0. `threadPerStream`: the
  /// device runs each stream on a thread of its own (the CPU); then, at
  /// world size 1, a stream of nothing but collectives (local copies) runs
  /// on the compute stream, `compute` (computeStream and
  /// collectiveOnlyStreams in zeroc/Plan/Plan.h).
  static PreparedPhase prepare(const PlanPhase &phase, char *arena,
                               int64_t arenaBytes, int64_t worldSize,
                               bool oneStream, bool threadPerStream = false,
                               int64_t compute = 0);
  /// Before a run: `read` views unset, unplanned values allocated anew
  /// (kept in `keep` until the next run), the arena use recorded.
  void bind(MemoryTracker &memory, std::vector<std::shared_ptr<char>> &keep);
};

} // namespace exec
} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_PREPAREDPHASE_H
