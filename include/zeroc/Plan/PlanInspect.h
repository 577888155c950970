//===- PlanInspect.h - What `zeroc inspect` reports about a plan -*- C++
//-*-===//
//
// The figures a reader of a plan file wants first: the persistent bytes each
// rank holds, by role and placement, and the communication each rank does
// per step, by collective kind, next to the ZeRO paper's expectation. Both
// are recomputed from the plan's tensors and ops, not copied from its
// summary fields, so they check the compiler. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PLAN_PLANINSPECT_H
#define ZEROC_PLAN_PLANINSPECT_H

#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/Steadiness.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zeroc {

/// The collective kind a plan op names ("all_gather", ...), if any.
std::optional<CollectiveKind> parseCollectiveKind(const std::string &name);

/// Bytes of persistent state one rank stores: local_numel x dtype bytes,
/// summed by role (param, grad, master, ...) and placement (device, host,
/// nvme).
struct PersistentBytes {
  /// Indexed by TensorRole, then by Placement.
  std::array<std::array<int64_t, std::size(kAllPlacements)>,
             std::size(kAllTensorRoles)>
      byRole{};
  /// Whether the plan has a tensor of the role (of any size).
  std::array<bool, std::size(kAllTensorRoles)> hasRole{};
  /// Device state that is no plan tensor: the 1-bit optimizers'
  /// (oneBitStateBytes). Counted in placement(Device) and total().
  int64_t oneBitState = 0;

  int64_t at(TensorRole role, Placement placement) const {
    return byRole[size_t(role)][size_t(placement)];
  }
  int64_t role(TensorRole role) const;
  int64_t placement(Placement placement) const;
  int64_t total() const;
};

PersistentBytes persistentBytesPerRank(const Plan &plan);

/// The `optimizer.type` of the plan's resolved config ("Adam", "Lamb",
/// "OneBitAdam", ... as zeroc spells it), or "" when it has none.
std::string planOptimizerType(const Plan &plan);

/// What the 1-bit optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb; DeepSpeed
/// runs them at stage 0 only, on the device) allocate per rank beyond
/// Adam's state when their compressed phase starts
/// (deepspeed/runtime/fp16/onebit/*.py): for each parameter of n elements,
/// padded to a multiple of w lcm(w, 8) elements on w ranks, the error
/// feedback `worker_error` (padded n f32) and `server_error` (padded n / w
/// f32); ZeroOneAdam's `momentum_accumulator` and OneBitLamb's
/// `exp_avg_sq_fresh` (n f32 each). OneBitLamb pads its flattened momenta
/// once rather than per parameter: less than w lcm(w, 8) elements per
/// parameter apart. 0 for any other optimizer.
int64_t oneBitStateBytes(const Plan &plan);

/// What one rank sends per step for one collective kind: every op of that
/// kind counted once per run of its phase.
struct CommKindVolume {
  double elements = 0; ///< commElementsPerRank, before bucket padding.
  /// Elements x the bytes of their dtype; empty when a collective's dtype
  /// cannot be told from its input values or the tensors it names.
  std::optional<double> bytes = 0.0;
  int64_t collectives = 0;
};

struct CommPerStep {
  /// Indexed by CollectiveKind.
  std::array<CommKindVolume, 4> byKind;
  /// The same per communicator group (only groups with collectives).
  std::map<CommGroupKind, std::array<CommKindVolume, 4>> byGroup;

  const CommKindVolume &operator[](CollectiveKind kind) const {
    return byKind[static_cast<size_t>(kind)];
  }
  CommKindVolume total() const;
};

CommPerStep commPerRankPerStep(const Plan &plan);

/// The ZeRO paper's communication per rank per step (section 7): 2 psi
/// (n-1)/n elements for stages 0-2 (one all-reduce's worth), 3 psi (n-1)/n
/// for stage 3 (an extra all-gather of the parameters), psi the model's
/// parameters. It assumes one micro-batch per step.
double zeroPaperCommElements(int64_t stage, int64_t params, int64_t worldSize);

/// Finds the element type of a collective: that of the values it sends (its
/// inputs), else that of the persistent tensors it names (a flat group
/// standing for its parameters). Nothing when they disagree or are absent.
/// The inspector's byte counts and the cost model both ask it.
class CollectiveDTypes {
public:
  explicit CollectiveDTypes(const Plan &plan);

  /// `values`: the dtype of each value id of the op's phase.
  std::optional<DType> of(const std::unordered_map<int64_t, DType> &values,
                          const PlanOp &op) const;

private:
  std::unordered_map<std::string, const PlanTensor *> tensors;
  std::unordered_map<std::string, const PlanFlatGroup *> groups;
};

/// What the cost model (zeroc/Cost, `stepTimeReport`) predicts for one
/// training step on a cluster, as the inspector reports it. The inspector
/// only formats it, so that this library does not depend on the cost model.
struct StepTimeReport {
  std::string cluster;     ///< The cluster's name.
  std::string clusterGpus; ///< "8 x NVIDIA H100 SXM5 80GB (1 node)"
  double stepSeconds = 0;
  /// Compute-stream time spent waiting for collectives (or running them on
  /// the compute stream), per step.
  double exposedCommSeconds = 0;
  /// The same for offload copies (fetches, host-device and NVMe traffic).
  double exposedOffloadSeconds = 0;
  /// A GPU rank: the compute stream's wait for the host to issue its next
  /// op, per step (launch-bound time); `hostAhead`: the cluster's device
  /// runs behind its host (not a CPU calibration), so the figure applies.
  double hostWaitSeconds = 0;
  bool hostAhead = false;
  /// Bytes one rank moves per step over PCIe (to the GPU, to the host) and
  /// to and from NVMe, as zerorun moves them (zeroc/Cost/CostModel.h,
  /// OffloadTraffic).
  struct Offload {
    double pcieToDevice = 0, pcieToHost = 0, nvmeRead = 0, nvmeWrite = 0;
  } offload;
  /// Busy seconds per step of each stream, in stream order.
  std::vector<std::pair<std::string, double>> streamBusySeconds;
  struct Phase {
    std::string name;
    int64_t runsPerStep = 1;
    double seconds = 0; ///< One run.
  };
  std::vector<Phase> phases;
  double flopsPerStep = 0; ///< Per GPU: the ops' FLOPs x runs.
  /// Per GPU: the model FLOPs (matrix products, no recomputation).
  double modelFlopsPerStep = 0;
  double achievedTflopsPerGpu = 0; ///< flopsPerStep / step time.
  /// Model FLOPs per second over the GPU's dense peak in the model dtype.
  double mfu = 0;
  /// Executed FLOPs per second over the same peak.
  double hfu = 0;
  double tokensPerSecond = 0; ///< All ranks together.
  /// Per step: the time linear-class ops lose to rows that are not 16-byte
  /// aligned (the calibration's misaligned rate, or the plan's own GEMM
  /// timed by shape, against the aligned classes), in how many ops; and
  /// the vocabulary when the logits' rows are among them (0 otherwise),
  /// which `zeroc gen --pad-vocab-to-multiple-of` aligns.
  double misalignedSeconds = 0;
  int64_t misalignedOps = 0;
  int64_t misalignedVocab = 0;
  struct ExposedCollective {
    std::string phase;
    int64_t op = 0;
    std::string kind;       ///< "all_gather_start", "fetch_start", ...
    std::string collective; ///< Empty for copies.
    /// The tensors it moves, else its module (opSubject).
    std::string subject;
    int64_t commElements = 0;
    double seconds = 0; ///< Exposed per step.
  };
  /// The ops that held the compute stream up longest, longest first.
  std::vector<ExposedCollective> mostExposed;
  /// How steady the calibrating machine was (calibration.steadiness;
  /// samples 0: not measured, or the cluster is not a calibration).
  Steadiness steadiness;
};

/// What `zeroc inspect` adds to its report.
struct InspectOptions {
  /// With a cluster: the predicted step time and where it goes.
  std::optional<StepTimeReport> time;
};

/// One JSON object: the summary, "persistent_bytes_per_rank",
/// "comm_elements_per_rank_per_step", "comm_bytes_per_rank_per_step",
/// "collectives_per_step", "zero_paper", "ops_per_phase", ...
/// docs/plan-format.md lists the keys.
/// With `options.time`, also "cluster", "predicted_step_time_s",
/// "exposed_comm_s", "stream_busy_s", "achieved_tflops_per_gpu",
/// "most_exposed_collectives", ... (docs/cost-model.md).
nlohmann::json inspectJson(const Plan &plan,
                           const InspectOptions &options = {});

/// The human-readable report of `zeroc inspect`: a summary and one table per
/// section.
std::string inspectText(const Plan &plan, const InspectOptions &options = {});

} // namespace zeroc

#endif // ZEROC_PLAN_PLANINSPECT_H
