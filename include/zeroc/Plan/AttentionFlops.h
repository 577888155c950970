//===- AttentionFlops.h - Causal attention's work, counted once -*- C++ -*-===//
//
// The FLOPs of causal_attention and its backward as the model dialect
// counts them (CausalAttentionOp::getForwardFlops, the plans' `flops`), in
// a header without MLIR so that zerorun's calibration measures its
// attention rate by the same count the cost model divides by.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PLAN_ATTENTIONFLOPS_H
#define ZEROC_PLAN_ATTENTIONFLOPS_H

#include <cstdint>

namespace zeroc {

/// The (query, key) score pairs of causal attention counted as work:
/// batch x heads x s^2 without a window (the full square, as the usual
/// 6N + 12 L H S accounting does), and with a window w < s the pairs a
/// window keeps counted the same way, twice its w (w + 1) / 2 + (s - w) w
/// pairs less the diagonal, (2w - 1) s - w (w - 1), which is s^2 at w = s.
inline int64_t attentionScores(int64_t batch, int64_t seq, int64_t heads,
                               int64_t window) {
  int64_t s = seq, w = window;
  int64_t perHead = w > 0 && w < s ? (2 * w - 1) * s - w * (w - 1) : s * s;
  return batch * heads * perHead;
}

/// Q K^T and P V are 2 x scores x head_dim each; the softmax 5 per score.
/// Both kernels do this work (flash in tiles, with an online softmax).
inline int64_t attentionForwardFlops(int64_t scores, int64_t headDim) {
  return 4 * scores * headDim + 5 * scores;
}

/// dV = P^T dO, dP = dO V^T, dQ = dS K and dK = dS^T Q are 2 x scores x
/// head_dim each; the softmax backward twice the forward's 5 per score. The
/// flash kernel first recomputes S = Q K^T (2 x scores x head_dim) and
/// P = exp(S - L) (2 per score) from the saved log-sum-exp L.
inline int64_t attentionBackwardFlops(int64_t scores, int64_t headDim,
                                      bool flash) {
  int64_t flops = 8 * scores * headDim + 10 * scores;
  if (flash)
    flops += 2 * scores * headDim + 2 * scores;
  return flops;
}

} // namespace zeroc

#endif // ZEROC_PLAN_ATTENTIONFLOPS_H
