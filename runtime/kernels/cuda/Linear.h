//===- Linear.h - Affine layers and their gradients on the GPU --*- C++ -*-===//
//
// cpu/Linear.h on device data (y = x W^T + b, dx = dy W, dW = dy^T x,
// db = sum of dy over rows), same checks and messages. The GEMMs run through
// cuBLASLt with f32 accumulation (16-bit operands on tensor cores, f32
// operands in f32 without TF32); the bias rides in cuBLASLt's epilogue when
// its dtype is y's, and each result is rounded once. linearGradBias is a
// deterministic two-pass column sum (no atomics). Outputs must not alias
// inputs.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_LINEAR_H
#define ZEROC_RUNTIME_KERNELS_CUDA_LINEAR_H

#include "cuda/Context.h"
#include "cuda/Types.h"

namespace zeroc::cuda {

/// `bias` may be null.
Status linearForward(const Tensor &x, const Tensor &weight, const Tensor *bias,
                     const Tensor &y, KernelContext &ctx, cudaStream_t stream);

Status linearGradInput(const Tensor &dy, const Tensor &weight, const Tensor &dx,
                       KernelContext &ctx, cudaStream_t stream);

/// dw [out, in] is overwritten.
Status linearGradWeight(const Tensor &dy, const Tensor &x, const Tensor &dw,
                        KernelContext &ctx, cudaStream_t stream);

Status linearGradBias(const Tensor &dy, const Tensor &db, cudaStream_t stream);

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_LINEAR_H
