//===- ExpertParallel.h - Rows an expert-parallel rank exchanges -*- C++
//-*-===//
//
// Expert parallelism's token distribution assumption, one formula for the
// compiler (zero-insert-collectives plans each all-to-all's receive buffer
// with it) and `zeroc stats --ep-size` (MoeStats::expertParallelRows).
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

} // namespace zeroc

#endif // ZEROC_SUPPORT_EXPERTPARALLEL_H
