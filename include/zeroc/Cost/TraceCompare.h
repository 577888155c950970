//===- TraceCompare.h - Predicted against measured step time ----*- C++ -*-===//
//
// `zeroc inspect PLAN --cluster C --compare TRACE.json`: the simulated step
// (Simulator.h) next to a run's trace from `zerorun --profile`, per step,
// per phase, per op kind, per stream and per op, the ops being paired by
// their phase and index (and checked by their names, zeroc/Plan/PlanTrace.h).
// A trace of another plan (its fingerprint differs) is refused.
//
// Measured figures are medians over the trace's steps after the first (the
// first warms caches and allocators; a one-step trace uses its one step), on
// the slowest rank: a step takes as long as its slowest rank. MLIR-free.
// docs/cost-model.md, "Predicted against measured".
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_COST_TRACECOMPARE_H
#define ZEROC_COST_TRACECOMPARE_H

#include "zeroc/Cost/Simulator.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zeroc {

/// One op run of a measured trace.
struct MeasuredOp {
  int64_t rank = 0;
  size_t phase = 0; ///< Position of its phase in the plan.
  int64_t op = 0;   ///< Its index.
  int64_t step = 0, run = 0;
  double start = 0, end = 0; ///< Seconds.
};

/// One phase run of a measured trace.
struct MeasuredRun {
  int64_t rank = 0;
  size_t phase = 0;
  int64_t step = 0, run = 0;
  double start = 0, end = 0;
};

struct MeasuredTrace {
  std::string fingerprint;
  int64_t ranks = 0;
  std::vector<MeasuredRun> runs;
  std::vector<MeasuredOp> ops;
};

/// Reads a trace of `zerorun --profile` of `plan`. Refuses, with the place
/// in the file, a trace without a plan fingerprint or with another plan's,
/// an event of a phase or op the plan lacks, and an op event whose name is
/// not that op's.
Expected<MeasuredTrace> readMeasuredTrace(const JsonDocument &doc,
                                          const Plan &plan);

struct CompareRow {
  std::string name;
  double predicted = 0; ///< Seconds per step (per run for phases).
  double measured = 0;
  double ratio() const { return measured > 0 ? predicted / measured : 0; }
};

struct OpError {
  std::string phase;
  int64_t op = 0;
  std::string name;                   ///< traceEventName.
  std::string stream;                 ///< traceThreadName.
  double predicted = 0, measured = 0; ///< Seconds per step.
};

struct TraceComparison {
  CompareRow step;
  int64_t stepsMeasured = 0; ///< Steps the medians are over.
  int64_t slowestRank = 0;
  std::vector<CompareRow> phases;     ///< Seconds per run.
  std::vector<CompareRow> kinds;      ///< Busy seconds per step, by op kind.
  std::vector<CompareRow> streams;    ///< Busy seconds per step, by stream.
  std::vector<OpError> largestErrors; ///< At most 10, largest first.
};

/// Pairs `measured` with the simulated step of the same plan.
Expected<TraceComparison> compareTrace(const Plan &plan,
                                       const StepPrediction &prediction,
                                       const MeasuredTrace &measured);

/// {"step": {"predicted_s", "measured_s", "ratio"}, "steps_measured",
///  "slowest_rank", "phases": [...], "op_kinds": [...], "streams": [...],
///  "largest_errors": [...]}; rows {"name", "predicted_s", "measured_s",
///  "ratio"}.
nlohmann::json comparisonJson(const TraceComparison &c);
std::string comparisonText(const TraceComparison &c);

/// The predicted trace (chromeTrace) and the measured one in one file:
/// the measured processes keep their ids (rank r at 1000 (r+1) + ...) and
/// get "measured " in front of their names, the predicted ones "predicted
/// ", and the measured step nearest the median is moved to time 0.
nlohmann::json combinedTrace(const Plan &plan, const StepPrediction &prediction,
                             const nlohmann::json &measuredTrace,
                             const MeasuredTrace &measured);

} // namespace zeroc

#endif // ZEROC_COST_TRACECOMPARE_H
