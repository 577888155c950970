//===- Collectives.h - Collective kinds and their volume --------*- C++ -*-===//
//
// The one collective-volume formula, used by the compiler's accounting, the
// inspector, the cost model and the runtime's logs. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_COLLECTIVES_H
#define ZEROC_SUPPORT_COLLECTIVES_H

#include <cstdint>
#include <string_view>

namespace zeroc {

/// AllToAll is expert parallelism's token exchange (dispatch and combine)
/// over the expert-parallel group.
enum class CollectiveKind : uint8_t {
  AllGather,
  ReduceScatter,
  AllReduce,
  AllToAll
};

constexpr std::string_view collectiveName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  }
  return "?";
}

/// Elements each rank sends (and receives) in a bandwidth-optimal (ring)
/// collective over `numel` elements among `worldSize` ranks: (n-1)/n of the
/// data for all-gather and reduce-scatter, twice that for all-reduce (a
/// reduce-scatter then an all-gather). The ZeRO paper's accounting, and the
/// bus-bandwidth factors of nccl-tests. For an all-to-all, `numel` is what
/// one rank exchanges (its send buffer): it keeps 1/n for itself and sends
/// (n-1)/n, nccl-tests' alltoall busbw factor.
constexpr double commElementsPerRank(CollectiveKind kind, double numel,
                                     int64_t worldSize) {
  if (worldSize <= 1)
    return 0.0;
  double fraction = double(worldSize - 1) / double(worldSize);
  return (kind == CollectiveKind::AllReduce ? 2.0 : 1.0) * numel * fraction;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_COLLECTIVES_H
