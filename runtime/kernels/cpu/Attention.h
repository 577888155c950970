//===- Attention.h - Causal grouped-query self-attention --------*- C++ -*-===//
//
// q [batch, seq, heads * d], k and v [batch, seq, kv_heads * d], heads
// concatenated in the last dimension; query head h reads kv head
// h / (heads / kv_heads). Per (batch, head), with scale 1 / sqrt(d):
//   S = scale * Q K^T,  P = softmax over j <= i of S[i, j] (0 for j > i),
//   out = P V
// backward, with D[i] = sum over d of dout[i, d] * out[i, d]:
//   dV = P^T dout,  dP = dout V^T,  dS = P * (dP - D) * scale,
//   dQ = dS K,      dK = dS^T Q
// and dK, dV summed over the query heads that share a kv head.
//
// Four cblas GEMMs a (batch, head) over the full [seq, seq] square, in f32.
// P is rounded to the activation dtype (out's) before P V, as it is stored:
// the forward keeps it in `probs` [batch, heads, seq, seq] (the op's
// saved-state output in the plan, in the activation dtype), and
// the backward reads it back, or recomputes it from q and k when `probs` is
// null, with the same result. Outputs must not alias inputs.
//
// The flash kernels (`flashAttention*`) compute the same function in tiles of
// kFlashTile queries x kFlashTile keys, never holding more than one tile of
// scores: the forward keeps a running row maximum m and sum l (the online
// softmax) and rescales its accumulator as m grows; it keeps for the
// backward only L = m + log l, the log-sum-exp of the scaled scores, f32
// [batch, heads, seq]. The backward recomputes each tile's S and
// P = exp(S - L) from q, k and L, then forms dV, dS, dQ and dK tile by tile.
// P stays in f32 (it is never stored), so flash and materialized outputs
// agree to f32 rounding in f32 and to the activation dtype's in 16 bits.
//
// A sliding window w > 0 (Mistral, Phi-3) limits query i to the keys
// i - w < j <= i: P is 0 outside, and the flash kernels skip the tiles that
// hold no visible key. w >= seq is no window; w = 0 means none.
//
// Packed sequences (`documents`, optional, i32 [batch, seq], host data):
// token i of a row belongs to the document that starts at position
// documents[b, i] of that row (0 <= documents[b, i] <= i, and each entry is
// the one before it or i itself: documents are contiguous). Query i then
// sees only the keys of its own document, max(window start, documents[b,
// i]) <= j <= i: the same kind of contiguous range as a window, so every
// kernel (and the flash kernels' tile skipping) handles it as a later first
// key. Positions are not reset (docs/data-format.md).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_ATTENTION_H
#define ZEROC_RUNTIME_KERNELS_CPU_ATTENTION_H

#include "cpu/Tensor.h"

#include <algorithm>

namespace zeroc::cpu {

/// `probs` may be null (nothing saved). `window` 0: none. `documents` null:
/// one document per row.
Status attentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                        int64_t numHeads, int64_t numKvHeads, int64_t window,
                        const Tensor &out, const Tensor *probs,
                        const Tensor *documents = nullptr);

/// `out` is the forward's result, `probs` what it saved (or null).
Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &out, const Tensor &dout,
                         int64_t numHeads, int64_t numKvHeads, int64_t window,
                         const Tensor *probs, const Tensor &dq,
                         const Tensor &dk, const Tensor &dv,
                         const Tensor *documents = nullptr);

/// Flash attention: `lse` [batch, heads, seq] f32 may be null (nothing
/// saved).
Status flashAttentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                             int64_t numHeads, int64_t numKvHeads,
                             int64_t window, const Tensor &out,
                             const Tensor *lse,
                             const Tensor *documents = nullptr);

/// `out` is the forward's result, `lse` what it saved (or null: recomputed).
Status flashAttentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                              const Tensor &out, const Tensor &dout,
                              int64_t numHeads, int64_t numKvHeads,
                              int64_t window, const Tensor *lse,
                              const Tensor &dq, const Tensor &dk,
                              const Tensor &dv,
                              const Tensor *documents = nullptr);

/// The kernels above without a window.
inline Status attentionForward(const Tensor &q, const Tensor &k,
                               const Tensor &v, int64_t numHeads,
                               int64_t numKvHeads, const Tensor &out,
                               const Tensor *probs) {
  return attentionForward(q, k, v, numHeads, numKvHeads, 0, out, probs);
}
inline Status attentionBackward(const Tensor &q, const Tensor &k,
                                const Tensor &v, const Tensor &out,
                                const Tensor &dout, int64_t numHeads,
                                int64_t numKvHeads, const Tensor *probs,
                                const Tensor &dq, const Tensor &dk,
                                const Tensor &dv) {
  return attentionBackward(q, k, v, out, dout, numHeads, numKvHeads, 0, probs,
                           dq, dk, dv);
}
inline Status flashAttentionForward(const Tensor &q, const Tensor &k,
                                    const Tensor &v, int64_t numHeads,
                                    int64_t numKvHeads, const Tensor &out,
                                    const Tensor *lse) {
  return flashAttentionForward(q, k, v, numHeads, numKvHeads, 0, out, lse);
}
inline Status flashAttentionBackward(const Tensor &q, const Tensor &k,
                                     const Tensor &v, const Tensor &out,
                                     const Tensor &dout, int64_t numHeads,
                                     int64_t numKvHeads, const Tensor *lse,
                                     const Tensor &dq, const Tensor &dk,
                                     const Tensor &dv) {
  return flashAttentionBackward(q, k, v, out, dout, numHeads, numKvHeads, 0,
                                lse, dq, dk, dv);
}

/// Queries and keys per tile of the flash kernels.
inline constexpr int64_t kFlashTile = 64;

/// The sizes of one attention call, once its operands are checked.
struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, kvHeads = 0, headDim = 0;
  int64_t window = 0; ///< Sliding window; 0: none.
  /// The current row's document starts (documents[b, :]); null: none.
  const int32_t *docStart = nullptr;
  int64_t qWidth() const { return heads * headDim; }
  int64_t kvWidth() const { return kvHeads * headDim; }
  int64_t group() const { return heads / kvHeads; }
  float scale() const;
  /// The first key query i sees (its last is i).
  int64_t firstKey(int64_t i) const {
    int64_t first = window > 0 && i >= window ? i - window + 1 : 0;
    return docStart ? std::max<int64_t>(first, docStart[i]) : first;
  }
};

/// Checks `documents` (null, or i32 [batch, seq] of contiguous documents,
/// as above).
Status checkAttentionDocuments(const char *op, const Tensor *documents,
                               const AttentionShape &shape);

/// Checks a sliding window (>= 0) and records it in `shape`.
Status checkAttentionWindow(const char *op, int64_t window,
                            AttentionShape &shape);

/// The argument checks of the kernels above, shared with the CUDA backend;
/// on success `shape` holds the call's sizes.
Status checkAttentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                             int64_t numHeads, int64_t numKvHeads,
                             const Tensor &out, const Tensor *probs,
                             AttentionShape &shape);
Status checkAttentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                              const Tensor &out, const Tensor &dout,
                              int64_t numHeads, int64_t numKvHeads,
                              const Tensor *probs, const Tensor &dq,
                              const Tensor &dk, const Tensor &dv,
                              AttentionShape &shape);

/// The checks of the flash kernels: those above, and `lse` f32
/// [batch, num_heads, seq] where given.
Status checkFlashAttentionForward(const Tensor &q, const Tensor &k,
                                  const Tensor &v, int64_t numHeads,
                                  int64_t numKvHeads, const Tensor &out,
                                  const Tensor *lse, AttentionShape &shape);
Status checkFlashAttentionBackward(const Tensor &q, const Tensor &k,
                                   const Tensor &v, const Tensor &out,
                                   const Tensor &dout, int64_t numHeads,
                                   int64_t numKvHeads, const Tensor *lse,
                                   const Tensor &dq, const Tensor &dk,
                                   const Tensor &dv, AttentionShape &shape);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_ATTENTION_H
