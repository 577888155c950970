//===- ExpertParallel.h - Rows an expert-parallel rank exchanges -*- C++
//-*-===//
//
// Expert parallelism's facts, once: the token distribution assumption (the
// compiler plans each all-to-all's receive buffer with it, `zeroc stats
// --ep-size` prints it) and the communicator groups' geometry (the sched
// dialect, the plan reader and the runtime's communicators).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_EXPERTPARALLEL_H
#define ZEROC_SUPPORT_EXPERTPARALLEL_H

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace zeroc {

/// The rows the busiest expert receives of a rank's `routedRows` (tokens x
/// top_k) when it gets `share` of them (1 / experts: uniform; 1 / top_k:
/// every token sends one slot to it, the worst case).
inline int64_t busiestExpertRows(double share, int64_t routedRows) {
  return int64_t(std::ceil(share * double(routedRows) - 1e-9));
}

/// The rows the busiest rank of an expert-parallel group of `ep` receives
/// for its `experts / ep` experts: from each of the `ep` ranks at most
/// (busiest expert's rows) x (experts per rank), and at most tokens x
/// min(top_k, experts per rank), since a token sends one slot per expert.
/// With `ep` 1 the rank's own routed rows.
inline int64_t expertParallelReceivedRows(int64_t routedRows, int64_t topK,
                                          int64_t experts, int64_t ep,
                                          int64_t busiestRows) {
  if (ep <= 1 || !experts || !topK)
    return routedRows;
  int64_t local = experts / ep;
  int64_t tokens = routedRows / topK;
  return ep * std::min(busiestRows * local, tokens * std::min(topK, local));
}

/// A communicator group as DeepSpeed's groups._create_expert_and_data_
/// parallel builds them, for a world of `worldSize` ranks and expert-parallel
/// size `ep`: rank r's group is `size` ranks `stride` apart, from
/// `first(r) = floor(r / (size * stride)) * size * stride + r mod stride`.
/// The world: all ranks. Expert-parallel: the `ep` consecutive ranks that
/// split the experts. Expert-data-parallel: the `worldSize / ep` ranks with
/// the same `r mod ep`, which hold the same experts.
enum class CommGroupKind { World, ExpertParallel, ExpertDataParallel };

struct CommGroupShape {
  int64_t size = 1;
  int64_t stride = 1;
  int64_t firstRank(int64_t rank) const {
    int64_t span = size * stride;
    return rank / span * span + rank % stride;
  }
  /// Rank r's position in its group.
  int64_t indexOf(int64_t rank) const {
    return (rank % (size * stride)) / stride;
  }
};

inline CommGroupShape commGroupShape(CommGroupKind kind, int64_t worldSize,
                                     int64_t ep) {
  ep = std::max<int64_t>(ep, 1);
  switch (kind) {
  case CommGroupKind::World:
    return {worldSize, 1};
  case CommGroupKind::ExpertParallel:
    return {ep, 1};
  case CommGroupKind::ExpertDataParallel:
    return {worldSize / ep, ep};
  }
  return {worldSize, 1};
}

/// The names the sched dialect and the plan give the groups.
inline const char *commGroupName(CommGroupKind kind) {
  switch (kind) {
  case CommGroupKind::World:
    return "world";
  case CommGroupKind::ExpertParallel:
    return "expert_parallel";
  case CommGroupKind::ExpertDataParallel:
    return "expert_data_parallel";
  }
  return "?";
}

inline constexpr CommGroupKind kAllCommGroupKinds[] = {
    CommGroupKind::World, CommGroupKind::ExpertParallel,
    CommGroupKind::ExpertDataParallel};

} // namespace zeroc

#endif // ZEROC_SUPPORT_EXPERTPARALLEL_H
