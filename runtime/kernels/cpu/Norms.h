//===- Norms.h - Layer and RMS normalization --------------------*- C++ -*-===//
//
// Over the last dimension (hidden) of x [..., hidden], per row:
// layernorm:  xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps),
//             y = xhat * weight + bias
//   backward: g = dy * weight,
//             dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//             dweight = sum over rows of dy * xhat, dbias = sum of dy
// rmsnorm:    xhat = x * rrms, rrms = 1 / sqrt(mean(x^2) + eps),
//             y = xhat * w, w = weight (or 1 + weight with unit_offset,
//             Gemma's), all in f32 and y rounded once
//   backward: g = dy * w, dx = rrms * (g - xhat * mean(g * xhat)),
//             dweight = sum over rows of dy * xhat
//
// Statistics are f32 whatever the storage dtype (two passes: mean, then the
// variance about it). What the forward keeps for backward (the op's
// saved-state output in the plan) is f32 per row: layernorm `mean[rows]`
// followed by `rstd[rows]` (8 bytes a row), rmsnorm `rrms[rows]` (4 bytes a
// row). The backward uses them when given and recomputes them from x otherwise,
// with the same result. y may be x, and dx may be dy (in place).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_NORMS_H
#define ZEROC_RUNTIME_KERNELS_CPU_NORMS_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

/// `saved` (2 * rows floats: mean, then rstd) may be null.
Status layerNormForward(const Tensor &x, const Tensor &weight,
                        const Tensor &bias, float eps, const Tensor &y,
                        float *saved);

/// `saved` is what the forward wrote, or null to recompute it.
Status layerNormBackward(const Tensor &x, const Tensor &weight,
                         const Tensor &dy, float eps, const float *saved,
                         const Tensor &dx, const Tensor &dweight,
                         const Tensor &dbias);

/// `saved` (rows floats: rrms) may be null. `unitOffset` scales by
/// 1 + weight.
Status rmsNormForward(const Tensor &x, const Tensor &weight, float eps,
                      bool unitOffset, const Tensor &y, float *saved);

Status rmsNormBackward(const Tensor &x, const Tensor &weight, const Tensor &dy,
                       float eps, bool unitOffset, const float *saved,
                       const Tensor &dx, const Tensor &dweight);

/// Without unit offset (Llama's).
inline Status rmsNormForward(const Tensor &x, const Tensor &weight, float eps,
                             const Tensor &y, float *saved) {
  return rmsNormForward(x, weight, eps, false, y, saved);
}
inline Status rmsNormBackward(const Tensor &x, const Tensor &weight,
                              const Tensor &dy, float eps, const float *saved,
                              const Tensor &dx, const Tensor &dweight) {
  return rmsNormBackward(x, weight, dy, eps, false, saved, dx, dweight);
}

/// The argument checks of the kernels above, shared with the CUDA backend.
Status checkLayerNormForward(const Tensor &x, const Tensor &weight,
                             const Tensor &bias, const Tensor &y);
Status checkLayerNormBackward(const Tensor &x, const Tensor &weight,
                              const Tensor &dy, const Tensor &dx,
                              const Tensor &dweight, const Tensor &dbias);
Status checkRmsNormForward(const Tensor &x, const Tensor &weight,
                           const Tensor &y);
Status checkRmsNormBackward(const Tensor &x, const Tensor &weight,
                            const Tensor &dy, const Tensor &dx,
                            const Tensor &dweight);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_NORMS_H
