//===- Norms.h - Layer and RMS normalization on the GPU ---------*- C++ -*-===//
//
// cpu/Norms.h on device data: the same math, checks and saved statistics
// (`saved` is device memory, f32: layernorm mean[rows] then rstd[rows],
// rmsnorm rrms[rows]). One block per row, statistics in f32 by block
// reductions (two passes for layernorm: mean, then the variance about it).
// The backward recomputes missing statistics with the forward's own code,
// so saved and recomputed give identical results; dweight and dbias are
// deterministic column sums (no atomics). y may be x, dx may be dy.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_NORMS_H
#define ZEROC_RUNTIME_KERNELS_CUDA_NORMS_H

#include "cuda/Types.h"

namespace zeroc::cuda {

/// `saved` (device, 2 * rows floats: mean, then rstd) may be null.
Status layerNormForward(const Tensor &x, const Tensor &weight,
                        const Tensor &bias, float eps, const Tensor &y,
                        float *saved, cudaStream_t stream);

/// `saved` is what the forward wrote, or null to recompute it.
Status layerNormBackward(const Tensor &x, const Tensor &weight,
                         const Tensor &dy, float eps, const float *saved,
                         const Tensor &dx, const Tensor &dweight,
                         const Tensor &dbias, cudaStream_t stream);

/// `saved` (device, rows floats: rrms) may be null; `unitOffset` scales by
/// 1 + weight (Gemma).
Status rmsNormForward(const Tensor &x, const Tensor &weight, float eps,
                      bool unitOffset, const Tensor &y, float *saved,
                      cudaStream_t stream);

Status rmsNormBackward(const Tensor &x, const Tensor &weight, const Tensor &dy,
                       float eps, bool unitOffset, const float *saved,
                       const Tensor &dx, const Tensor &dweight,
                       cudaStream_t stream);

/// Without unit offset (Llama's).
inline Status rmsNormForward(const Tensor &x, const Tensor &weight, float eps,
                             const Tensor &y, float *saved,
                             cudaStream_t stream) {
  return rmsNormForward(x, weight, eps, false, y, saved, stream);
}
inline Status rmsNormBackward(const Tensor &x, const Tensor &weight,
                              const Tensor &dy, float eps, const float *saved,
                              const Tensor &dx, const Tensor &dweight,
                              cudaStream_t stream) {
  return rmsNormBackward(x, weight, dy, eps, false, saved, dx, dweight, stream);
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_NORMS_H
