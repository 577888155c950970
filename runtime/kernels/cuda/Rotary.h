//===- Rotary.h - Rotary position embedding (RoPE) on the GPU ---*- C++ -*-===//
//
// cpu/Rotary.h on device data: the Hugging Face pairing (i with
// i + head_dim / 2), angle pos * theta^(-2i / head_dim) computed in f64 and
// its sine and cosine rounded to f32, same checks. One thread per pair;
// y may be x.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_ROTARY_H
#define ZEROC_RUNTIME_KERNELS_CUDA_ROTARY_H

#include "cuda/Types.h"

namespace zeroc::cuda {

Status rotaryForward(const Tensor &x, int64_t headDim, double theta,
                     const Tensor &y, cudaStream_t stream);
Status rotaryBackward(const Tensor &dy, int64_t headDim, double theta,
                      const Tensor &dx, cudaStream_t stream);

/// The two above with the CPU kernels' `documents` (--reset-position-ids):
/// refused unless null (refuseDocuments, cuda/Types.h).
inline Status rotaryForward(const Tensor &x, int64_t headDim, double theta,
                            const Tensor &y, const Tensor *documents,
                            cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(refuseDocuments("rotary", documents));
  return rotaryForward(x, headDim, theta, y, stream);
}
inline Status rotaryBackward(const Tensor &dy, int64_t headDim, double theta,
                             const Tensor &dx, const Tensor *documents,
                             cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(refuseDocuments("rotary_backward", documents));
  return rotaryBackward(dy, headDim, theta, dx, stream);
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_ROTARY_H
