//===- Simulator.h - Event simulation of a plan's streams -------*- C++ -*-===//
//
// Runs a plan's phases on a cluster in simulated time: every stream is an
// in-order queue, `deps` are cross-stream events, a `wait` blocks its stream
// until the ops it waits for are done, and each op takes what the cost model
// says. The result is the predicted step time, where the compute stream
// waited on communication, per-stream busy time, achieved TFLOP/s, and a
// timeline for the Chrome trace and the SVG. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_COST_SIMULATOR_H
#define ZEROC_COST_SIMULATOR_H

#include "zeroc/Config/Cluster.h"
#include "zeroc/Cost/CostModel.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Plan/PlanInspect.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zeroc {

/// One op in simulated time, seconds from the start of its phase.
struct OpTiming {
  int64_t op = 0; ///< The op's index.
  int64_t stream = 0;
  OpClass cls = OpClass::Free;
  double ready = 0; ///< When its stream finished the op before it.
  double start = 0; ///< ready, or later when a dependency finished later.
  double end = 0;   ///< start + its cost.
  double flops = 0;
  /// When start > ready: the op that held it up, seen through waits (the
  /// collective a wait waited for), else -1.
  int64_t blockedBy = -1;
  /// A collective: when this rank could have launched it (its stream free,
  /// its dependencies done), before it waited for the network and for the
  /// other ranks. `end - issue` is what NCCL's watchdog sees.
  double issue = 0;
  /// A collective: the seconds it waited for a slower rank to reach it
  /// (SimulationOptions::stragglerFactor); 0 on a healthy cluster. (The
  /// calibrated meeting wait of alike ranks is in `start - issue` only.)
  double stragglerWait = 0;
};

/// One run of one phase.
struct PhaseTimeline {
  PhaseKind kind = PhaseKind::MicroStep;
  int64_t runsPerStep = 1;
  double seconds = 0; ///< From the first op's start to the last op's end.
  std::vector<OpTiming> ops; ///< In program order.
  std::vector<double> streamBusy;
  double exposedComm = 0;
  double exposedOffload = 0;
  /// A GPU rank: seconds the compute stream waited for the host to issue
  /// its next op (launch-bound time; 0 on CPU ranks).
  double hostWait = 0;
  double flops = 0;
  double modelFlops = 0;
  /// The linear-class ops' time lost to rows that are not 16-byte aligned
  /// (OpCost::misaligned), and how many ops lose it.
  double misaligned = 0;
  int64_t misalignedOps = 0;
  /// Exposed seconds per op that held the compute stream up (by op index).
  std::vector<std::pair<int64_t, double>> exposedBy;
};

/// A step: every phase, run as often as it runs per step.
struct StepPrediction {
  std::string cluster;
  std::vector<PhaseTimeline> phases;
  std::vector<std::string> streams; ///< Names, by stream id.
  /// The stream whose idle time counts as exposed: the one named "compute",
  /// else stream 0.
  int64_t computeStream = 0;
  double stepSeconds = 0;
  double exposedComm = 0;          ///< Per step.
  double exposedOffload = 0;       ///< Per step.
  double hostWait = 0;             ///< Per step (PhaseTimeline::hostWait).
  std::vector<double> streamBusy;  ///< Per step, by stream id.
  double flops = 0;                ///< Per GPU per step, executed.
  double modelFlops = 0;           ///< Per GPU per step (modelFlops()).
  double misaligned = 0;           ///< Per step (PhaseTimeline::misaligned).
  int64_t misalignedOps = 0;       ///< Per step.
  double achievedTflopsPerGpu = 0; ///< Executed FLOPs per second.
  /// Model FLOPs per second over the dense peak in the model dtype.
  double mfu = 0;
  /// Executed FLOPs (recomputation and every op's) over the same peak.
  double hfu = 0;
  double tokensPerSecond = 0;
};

/// What the simulation perturbs (zeroc inspect --what-if).
struct SimulationOptions {
  /// One rank's compute ops (OpClass::Compute) take this many times their
  /// cost; the other ranks are healthy. A collective starts only when every
  /// rank has reached it, so the slow rank's delay reaches the healthy ranks
  /// through the collectives. The timeline reported is a healthy rank's; a
  /// phase lasts until the slower of the two finishes. 1 = no straggler.
  double stragglerFactor = 1;
};

/// Simulates one training step. Fails when the plan's ranks do not fit on
/// the cluster, or when a straggler is asked of a one-rank plan.
Expected<StepPrediction> predictStep(const Plan &plan, const Cluster &cluster,
                                     const SimulationOptions &options = {});

/// The ops that held the compute stream up longest over a step, longest
/// first, at most `limit` of them.
std::vector<StepTimeReport::ExposedCollective>
mostExposed(const Plan &plan, const StepPrediction &prediction,
            size_t limit = 10);

/// The prediction as `zeroc inspect` reports it.
StepTimeReport stepTimeReport(const Plan &plan, const Cluster &cluster,
                              const StepPrediction &prediction);

/// Inspect options with the time sections for `cluster`: what
/// `zeroc inspect --cluster` passes to inspectJson / inspectText.
Expected<InspectOptions> inspectOptions(const Plan &plan,
                                        const Cluster &cluster);

} // namespace zeroc

#endif // ZEROC_COST_SIMULATOR_H
