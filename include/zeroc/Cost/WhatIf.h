//===- WhatIf.h - The step re-simulated under perturbations -----*- C++ -*-===//
//
// `zeroc inspect --what-if`: the plan's step simulated on the healthy cluster
// and again under each scenario (a straggler rank, a slower link class, a
// different cluster; in the compile driver also fewer nodes, a plan
// recompiled for the smaller world), with the step time, throughput,
// exposed communication, memory peak and slowest collectives of each, and
// every collective's worst duration against NCCL's watchdog.
// docs/cost-model.md, "What if", names the assumptions. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_COST_WHATIF_H
#define ZEROC_COST_WHATIF_H

#include "zeroc/Config/Cluster.h"
#include "zeroc/Cost/Simulator.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Diagnostic.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace zeroc {

/// NCCL's default watchdog (TORCH_NCCL / ProcessGroupNCCL's 30 minutes):
/// a collective not done by then kills the job.
inline constexpr double kNcclWatchdogSeconds = 1800;

/// One `--what-if` argument.
struct WhatIfScenario {
  enum class Kind {
    Straggler,
    InterNodeBandwidth,
    IntraNodeBandwidth,
    Cluster,
    /// Fewer nodes: the plan recompiled for the smaller world (only the
    /// compile driver has the model and config to do that).
    Nodes
  };
  std::string spec; ///< As given: "straggler=1.2".
  Kind kind = Kind::Straggler;
  double factor = 1;       ///< Straggler and bandwidth scenarios.
  std::string clusterSpec; ///< Kind::Cluster: a file or a preset.
  int64_t nodes = 0;       ///< Kind::Nodes: the change, negative.
  /// Kind::Nodes: how the recompiled plan's batch follows DeepSpeed's rule
  /// (filled by whoever recompiles it; printed with the scenario).
  std::vector<std::string> notes;
};

/// Parses "straggler=F", "inter-node-bw=F", "intra-node-bw=F",
/// "cluster=FILE|PRESET" or "nodes=-K"; F a finite number > 0, K a whole
/// number >= 1. Errors name the scenario and what was expected.
Expected<WhatIfScenario> parseWhatIf(const std::string &spec);

/// `cluster` with a link class's bus bandwidth (the calibrated collective
/// fits too, for the intra-node class) multiplied by `factor`.
Cluster scaledLinks(const Cluster &cluster, WhatIfScenario::Kind kind,
                    double factor);

/// The plan's step under one scenario: the straggler through
/// SimulationOptions, a bandwidth factor through scaledLinks, Kind::Cluster
/// on `other` (required for it), Kind::Nodes the recompiled `otherPlan`
/// (required for it) on the healthy cluster. The one place a scenario is
/// applied: `zeroc inspect --what-if` and advise's sensitivity both simulate
/// through it.
Expected<StepPrediction> predictScenario(const Plan &plan,
                                         const Cluster &healthy,
                                         const WhatIfScenario &scenario,
                                         const Cluster *other = nullptr,
                                         const Plan *otherPlan = nullptr);

/// The sensitivity `zeroc advise` shows per candidate (docs/advise.md,
/// "Sensitivity"): one rank 10% slower, and the inter-node bandwidth halved.
inline constexpr double kSensitivityStraggler = 1.1;
inline constexpr double kSensitivityInterNodeBandwidth = 0.5;
/// Those two as scenarios, straggler first, spelled as --what-if takes them
/// ("straggler=1.1", "inter-node-bw=0.5").
const std::vector<WhatIfScenario> &sensitivityScenarios();

/// One collective of the plan in one scenario.
struct CollectiveTiming {
  std::string phase;
  int64_t op = 0;
  std::string collective;   ///< all_gather, reduce_scatter, all_reduce.
  double bytes = 0;         ///< S: comm_elements x bytes of its dtype.
  std::string module;       ///< Its layer's module path, else its tensors.
  double seconds = 0;       ///< Its own time on the network.
  double waited = 0;        ///< Before it could run: other ranks, the network.
  double stragglerWait = 0; ///< Of `waited`, the wait for the slow rank.
  /// From when this rank launched it to its end: what the watchdog sees.
  double duration = 0;
};

struct ScenarioResult {
  std::string name; ///< "healthy" or the scenario's spec.
  std::string cluster;
  /// The plan simulated: the healthy one, or a Kind::Nodes recompilation.
  int64_t worldSize = 0;
  int64_t microBatch = 0;
  int64_t gradientAccumulationSteps = 0;
  /// Sequences per optimizer step: micro x accumulation x world.
  int64_t trainBatchSize = 0;
  double tokensPerSecond = 0;
  int64_t peakDeviceBytes = 0; ///< Per rank (summarizeMemory).
  double gpuBudgetBytes = 0;   ///< What a GPU of `cluster` gives the plan.
  std::optional<std::string> refusal; ///< checkClusterFit's, if it fails.
  std::vector<std::string> notes;     ///< WhatIfScenario::notes.
  double stepSeconds = 0;
  /// Per step, a healthy rank's: with a straggler, its wait for the slow
  /// rank at the collectives it needs is in here.
  double exposedComm = 0;
  /// Every collective of the plan, slowest (by duration) first.
  std::vector<CollectiveTiming> collectives;
};

struct WhatIfReport {
  ScenarioResult healthy;
  std::vector<ScenarioResult> scenarios;
  /// Per scenario: whether it simulated a recompiled plan (Kind::Nodes).
  std::vector<bool> recompiled;
  double watchdogSeconds = kNcclWatchdogSeconds;
  /// Every collective at its worst over the healthy case and the scenarios,
  /// longest first, with the scenario that gave it.
  std::vector<std::pair<CollectiveTiming, std::string>> worst;
  /// Whether the longest collective reaches the watchdog.
  bool exceedsWatchdog() const {
    return !worst.empty() && worst.front().first.duration >= watchdogSeconds;
  }
};

/// Simulates the plan on `healthy` and under each scenario; a Kind::Cluster
/// scenario runs on `clusters[i]`, a Kind::Nodes one simulates `plans[i]`
/// (the same index as its scenario; ignored for the other kinds). Without
/// its plan, Kind::Nodes is refused: a plan cannot change its world size.
Expected<WhatIfReport>
whatIf(const Plan &plan, const Cluster &healthy,
       const std::vector<WhatIfScenario> &scenarios,
       const std::vector<std::optional<Cluster>> &clusters,
       double watchdogSeconds = kNcclWatchdogSeconds,
       const std::vector<const Plan *> &plans = {});

/// The tables `zeroc inspect --what-if` prints, and its JSON.
std::string whatIfText(const WhatIfReport &report);
nlohmann::json whatIfJson(const WhatIfReport &report);

} // namespace zeroc

#endif // ZEROC_COST_WHATIF_H
