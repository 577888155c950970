//===- AttentionGeometry.h - A flash attention op's shape -------*- C++ -*-===//
//
// What `zerorun --calibrate --shapes PLAN` times of a plan's attention and
// what the cost model looks up: the batch, the sequence, the query and
// key/value heads, the head size and the window. One definition for the
// calibration, the cluster file and the cost model.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_ATTENTIONGEOMETRY_H
#define ZEROC_SUPPORT_ATTENTIONGEOMETRY_H

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace zeroc {

struct AttentionGeometry {
  int64_t batch = 0, seq = 0, heads = 0, kvHeads = 0, headDim = 0;
  /// Sliding window (0: none).
  int64_t window = 0;

  /// seq^2 x head_dim: one (batch, head) item's work, the coordinate the
  /// cost model interpolates the attention classes' rates in.
  double itemWork() const {
    return double(seq) * double(seq) * double(headDim);
  }

  auto tied() const {
    return std::tie(batch, seq, heads, kvHeads, headDim, window);
  }
  bool operator<(const AttentionGeometry &o) const { return tied() < o.tied(); }
  bool operator==(const AttentionGeometry &o) const {
    return tied() == o.tied();
  }
};

/// The geometry of an attention op whose query is [batch, seq, heads x
/// head_dim] (the first operand of causal_attention and its backward);
/// none for another shape or a head count that does not divide it.
inline std::optional<AttentionGeometry>
attentionGeometry(const std::vector<int64_t> &query, int64_t heads,
                  int64_t kvHeads, int64_t window) {
  if (query.size() != 3 || heads <= 0 || query[2] % heads != 0 ||
      query[0] <= 0 || query[1] <= 0 || query[2] <= 0)
    return std::nullopt;
  AttentionGeometry g;
  g.batch = query[0];
  g.seq = query[1];
  g.heads = heads;
  g.kvHeads = kvHeads > 0 ? kvHeads : heads;
  g.headDim = query[2] / heads;
  g.window = window > 0 && window < g.seq ? window : 0;
  return g;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_ATTENTIONGEOMETRY_H
