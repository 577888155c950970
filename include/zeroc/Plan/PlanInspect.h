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

#include <array>
#include <map>
#include <optional>
#include <string>

namespace zeroc {

/// The collective kind a plan op names ("all_gather", ...), if any.
std::optional<CollectiveKind> parseCollectiveKind(const std::string &name);

/// Bytes of persistent state one rank stores: local_numel x dtype bytes,
/// summed by role (param, grad, master, ...) and placement (device, host,
/// nvme).
struct PersistentBytes {
  std::map<std::string, std::map<std::string, int64_t>> byRole;

  int64_t role(const std::string &role) const;
  int64_t placement(const std::string &placement) const;
  int64_t total() const;
};

PersistentBytes persistentBytesPerRank(const Plan &plan);

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
  std::array<CommKindVolume, 3> byKind;

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

/// One JSON object: the summary, "persistent_bytes_per_rank",
/// "comm_elements_per_rank_per_step", "comm_bytes_per_rank_per_step",
/// "collectives_per_step", "zero_paper", "ops_per_phase", ...
/// docs/plan-format.md lists the keys.
nlohmann::json inspectJson(const Plan &plan);

/// The human-readable report of `zeroc inspect`: a summary and one table per
/// section.
std::string inspectText(const Plan &plan);

} // namespace zeroc

#endif // ZEROC_PLAN_PLANINSPECT_H
