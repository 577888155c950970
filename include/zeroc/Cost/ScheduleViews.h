//===- ScheduleViews.h - Chrome trace and SVG of a simulated step -*- C++
//-*-===//
//
// Pictures of a simulated step, one micro-step followed by the optimizer
// step: Chrome trace-event JSON (opens in Perfetto and chrome://tracing) and
// a self-contained SVG with device memory over the schedule above the
// per-stream timeline. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_COST_SCHEDULEVIEWS_H
#define ZEROC_COST_SCHEDULEVIEWS_H

#include "zeroc/Cost/Simulator.h"
#include "zeroc/Plan/Plan.h"

#include <string>
#include <vector>

namespace zeroc {

/// Where each phase's one run starts on the shared time axis: phases follow
/// each other in plan order.
std::vector<double> phaseOffsets(const StepPrediction &prediction);

/// Device bytes of one rank over one run of each phase: the persistent
/// device tensors plus the transient values live at each moment. A value is
/// live from the start of the op that defines it (for a wait's results, the
/// start of the *_start it completes, which fills the buffer) to the end of
/// its last use (a `release` is a use). `read` results are views of
/// persistent tensors and add nothing.
struct MemoryCurve {
  double persistentBytes = 0;
  /// (seconds on the shared axis, bytes from then on), in time order,
  /// starting at (0, persistentBytes).
  std::vector<std::pair<double, double>> points;
  double peakBytes = 0;
  double peakSeconds = 0;
};
MemoryCurve deviceMemoryCurve(const Plan &plan,
                              const StepPrediction &prediction);

/// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: one
/// process per phase, one thread per stream (named by "M" metadata events),
/// an "X" event per op that takes time and per wait that blocks, with
/// microsecond timestamps.
nlohmann::json chromeTrace(const Plan &plan, const StepPrediction &prediction);

/// A self-contained SVG document (no scripts, fonts or links): device
/// memory over the schedule on top, the per-stream timeline below, on one
/// time axis, with axis labels and a legend.
std::string scheduleSvg(const Plan &plan, const StepPrediction &prediction);

} // namespace zeroc

#endif // ZEROC_COST_SCHEDULEVIEWS_H
