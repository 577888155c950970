//===- FitCheck.h - Does a plan fit every memory of a cluster ---*- C++ -*-===//
//
// The one fit check of `zeroc --cluster` and `zeroc advise`: the plan's
// device peak against what a GPU can give the plan (usable capacity less
// the runtime's reserve), the pinned and pageable host memory of every rank
// on a node (plus the node's own reserve) against the node's memory, and the
// NVMe bytes of a node against its drives. A refusal names the memory, by
// how much it is over, the breakdown and the ways out.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_COST_FITCHECK_H
#define ZEROC_COST_FITCHECK_H

#include "zeroc/Config/Cluster.h"
#include "zeroc/Plan/Plan.h"

#include <optional>
#include <string>

namespace zeroc {

/// What one node holds for a plan: ranks fill nodes in order.
struct NodeMemory {
  int64_t ranksPerNode = 1;
  double hostBytes = 0; ///< Every rank's pinned and pageable host state.
  double nvmeBytes = 0; ///< Every rank's NVMe files.
};
NodeMemory nodeMemory(const Plan &plan, const Cluster &cluster);

/// Nothing when the plan fits every memory of `cluster`; else why not.
std::optional<std::string> checkClusterFit(const Plan &plan,
                                           const Cluster &cluster);

/// The node's part of checkClusterFit, without the GPU: nothing when a
/// node's host memory holds its ranks' offloaded state and its reserve, and
/// its NVMe their files; else why not. `zeroc advise` checks the GPU against
/// its own, smaller budget (the margin).
std::optional<std::string> checkNodeFit(const Plan &plan,
                                        const Cluster &cluster);

} // namespace zeroc

#endif // ZEROC_COST_FITCHECK_H
