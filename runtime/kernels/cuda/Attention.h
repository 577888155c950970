//===- Attention.h - Causal grouped-query attention on the GPU --*- C++ -*-===//
//
// cpu/Attention.h on device data: the same math, head layout, grouped-query
// sharing, checks, and the same saved state: `probs` [batch, heads, seq, seq]
// in its own dtype, P rounded to the activation dtype (out's) before P V,
// zeros above the diagonal (and before a sliding window). The backward reads
// `probs` or, when null, recomputes P with the forward's own calls (the same
// result).
//
// Like the CPU kernels, this computes in f32 throughout: 16-bit operands are
// widened into f32 scratch, the six products per (batch, head) are strided
// batched f32 cuBLAS GEMMs over the heads that share a kv head position
// (no TF32), and a fused kernel takes the causal softmax of each score row.
// Scores take f32 scratch of batch-chunk * heads * seq^2 floats (chunks of
// the batch up to 256 MiB, at least one batch entry); dK and dV sum over the
// query heads of a group in head order. Deterministic. Outputs must not
// alias inputs.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_ATTENTION_H
#define ZEROC_RUNTIME_KERNELS_CUDA_ATTENTION_H

#include "cuda/Context.h"
#include "cuda/Types.h"

#include <string>
#include <string_view>

namespace zeroc::cuda {

/// `probs` may be null (nothing saved). `window` 0: none.
Status attentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                        int64_t numHeads, int64_t numKvHeads, int64_t window,
                        const Tensor &out, const Tensor *probs,
                        KernelContext &ctx, cudaStream_t stream);

/// `out` is the forward's result, `probs` what it saved (or null).
Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &out, const Tensor &dout,
                         int64_t numHeads, int64_t numKvHeads, int64_t window,
                         const Tensor *probs, const Tensor &dq,
                         const Tensor &dk, const Tensor &dv, KernelContext &ctx,
                         cudaStream_t stream);

/// cpu::flashAttentionForward on the GPU (FlashAttention.cu): `lse`
/// [batch, heads, seq] f32 may be null.
Status flashAttentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                             int64_t numHeads, int64_t numKvHeads,
                             int64_t window, const Tensor &out,
                             const Tensor *lse, KernelContext &ctx,
                             cudaStream_t stream);

/// cpu::flashAttentionBackward on the GPU; `lse` null recomputes it.
Status flashAttentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                              const Tensor &out, const Tensor &dout,
                              int64_t numHeads, int64_t numKvHeads,
                              int64_t window, const Tensor *lse,
                              const Tensor &dq, const Tensor &dk,
                              const Tensor &dv, KernelContext &ctx,
                              cudaStream_t stream);

/// Which flash kernels a call runs (docs/gpu-kernels.md): where every
/// operand is of one 16-bit dtype and 16-byte aligned (`sixteenBitAligned`),
/// head_dim is a multiple of 8 and the device is sm_80 or newer, the
/// register (mma.sync) kernels up to head_dim 64 and the WMMA tensor-core
/// kernels up to 128; the f32 tiled kernels for other head_dim up to 128;
/// the warp-per-row kernels past that (or past 65535 heads or batch rows).
/// `choice` is ZEROC_CUDA_FLASH: empty, "auto" or "registers" (that
/// order), "wmma" (the WMMA kernels where the register kernels would run),
/// "tiled" (at most the tiled kernels), "rows"; any other value is an
/// error naming the variable.
enum class FlashKernel { Rows, Tiled, TensorCores, Registers };
/// ZEROC_CUDA_FLASH's value, read once; tests may change it.
std::string &flashKernelChoice();
Status chooseFlashKernel(const char *op, std::string_view choice,
                         int64_t headDim, int64_t heads, int64_t kvHeads,
                         int64_t batch, bool sixteenBitAligned,
                         int computeMajor, FlashKernel &kind);

/// The kernels above without a window.
inline Status attentionForward(const Tensor &q, const Tensor &k,
                               const Tensor &v, int64_t numHeads,
                               int64_t numKvHeads, const Tensor &out,
                               const Tensor *probs, KernelContext &ctx,
                               cudaStream_t stream) {
  return attentionForward(q, k, v, numHeads, numKvHeads, 0, out, probs, ctx,
                          stream);
}
inline Status attentionBackward(const Tensor &q, const Tensor &k,
                                const Tensor &v, const Tensor &out,
                                const Tensor &dout, int64_t numHeads,
                                int64_t numKvHeads, const Tensor *probs,
                                const Tensor &dq, const Tensor &dk,
                                const Tensor &dv, KernelContext &ctx,
                                cudaStream_t stream) {
  return attentionBackward(q, k, v, out, dout, numHeads, numKvHeads, 0, probs,
                           dq, dk, dv, ctx, stream);
}
inline Status flashAttentionForward(const Tensor &q, const Tensor &k,
                                    const Tensor &v, int64_t numHeads,
                                    int64_t numKvHeads, const Tensor &out,
                                    const Tensor *lse, KernelContext &ctx,
                                    cudaStream_t stream) {
  return flashAttentionForward(q, k, v, numHeads, numKvHeads, 0, out, lse, ctx,
                               stream);
}
inline Status flashAttentionBackward(const Tensor &q, const Tensor &k,
                                     const Tensor &v, const Tensor &out,
                                     const Tensor &dout, int64_t numHeads,
                                     int64_t numKvHeads, const Tensor *lse,
                                     const Tensor &dq, const Tensor &dk,
                                     const Tensor &dv, KernelContext &ctx,
                                     cudaStream_t stream) {
  return flashAttentionBackward(q, k, v, out, dout, numHeads, numKvHeads, 0,
                                lse, dq, dk, dv, ctx, stream);
}

/// The kernels above with the CPU kernels' `documents` (packed sequences,
/// cpu/Attention.h): refused unless null (refuseDocuments, cuda/Types.h).
inline Status attentionForward(const Tensor &q, const Tensor &k,
                               const Tensor &v, int64_t numHeads,
                               int64_t numKvHeads, int64_t window,
                               const Tensor &out, const Tensor *probs,
                               const Tensor *documents, KernelContext &ctx,
                               cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(refuseDocuments("causal_attention", documents));
  return attentionForward(q, k, v, numHeads, numKvHeads, window, out, probs,
                          ctx, stream);
}
inline Status attentionBackward(
    const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out,
    const Tensor &dout, int64_t numHeads, int64_t numKvHeads, int64_t window,
    const Tensor *probs, const Tensor &dq, const Tensor &dk, const Tensor &dv,
    const Tensor *documents, KernelContext &ctx, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(
      refuseDocuments("causal_attention_backward", documents));
  return attentionBackward(q, k, v, out, dout, numHeads, numKvHeads, window,
                           probs, dq, dk, dv, ctx, stream);
}
inline Status flashAttentionForward(const Tensor &q, const Tensor &k,
                                    const Tensor &v, int64_t numHeads,
                                    int64_t numKvHeads, int64_t window,
                                    const Tensor &out, const Tensor *lse,
                                    const Tensor *documents, KernelContext &ctx,
                                    cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(refuseDocuments("causal_attention", documents));
  return flashAttentionForward(q, k, v, numHeads, numKvHeads, window, out, lse,
                               ctx, stream);
}
inline Status flashAttentionBackward(
    const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &out,
    const Tensor &dout, int64_t numHeads, int64_t numKvHeads, int64_t window,
    const Tensor *lse, const Tensor &dq, const Tensor &dk, const Tensor &dv,
    const Tensor *documents, KernelContext &ctx, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(
      refuseDocuments("causal_attention_backward", documents));
  return flashAttentionBackward(q, k, v, out, dout, numHeads, numKvHeads,
                                window, lse, dq, dk, dv, ctx, stream);
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_ATTENTION_H
