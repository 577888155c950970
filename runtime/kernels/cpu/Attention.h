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
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_ATTENTION_H
#define ZEROC_RUNTIME_KERNELS_CPU_ATTENTION_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

/// `probs` may be null (nothing saved).
Status attentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                        int64_t numHeads, int64_t numKvHeads, const Tensor &out,
                        const Tensor *probs);

/// `out` is the forward's result, `probs` what it saved (or null).
Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &out, const Tensor &dout,
                         int64_t numHeads, int64_t numKvHeads,
                         const Tensor *probs, const Tensor &dq,
                         const Tensor &dk, const Tensor &dv);

/// The sizes of one attention call, once its operands are checked.
struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, kvHeads = 0, headDim = 0;
  int64_t qWidth() const { return heads * headDim; }
  int64_t kvWidth() const { return kvHeads * headDim; }
  int64_t group() const { return heads / kvHeads; }
  float scale() const;
};

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

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_ATTENTION_H
