//===- Cast.h - Dtype casts, copies, accumulation on the GPU ----*- C++ -*-===//
//
// cpu/Cast.h on device data: cast (rounded once, a cudaMemcpyAsync when the
// dtypes agree), accumulate (acc += g in f32, rounded once), zero
// (cudaMemsetAsync: all-zero bits are +0 in every dtype), and copyElements
// (cpu/Tensor.h's, between any float dtypes). Element counts must match;
// shapes may differ.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_CAST_H
#define ZEROC_RUNTIME_KERNELS_CUDA_CAST_H

#include "cuda/Types.h"

namespace zeroc::cuda {

Status castTensor(const Tensor &src, const Tensor &dst, cudaStream_t stream);
Status accumulate(const Tensor &acc, const Tensor &g, cudaStream_t stream);
Status zeroTensor(const Tensor &t, cudaStream_t stream);

/// Copies `n` elements, `src[srcOffset...]` to `dst[dstOffset...]`, rounding
/// once. Unchecked, like the CPU version; the ranges must not overlap unless
/// the dtypes agree. Returns only launch errors.
Status copyElements(const Tensor &src, int64_t srcOffset, const Tensor &dst,
                    int64_t dstOffset, int64_t n, cudaStream_t stream);

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_CAST_H
