//===- Activations.h - GPU elementwise ops and copies -----------*- C++ -*-===//
//
// The math, dtype rules and in-place use of cpu/Activations.h, one thread
// per element: each operand is read as f32 and the result rounded once. GELU
// is the same tanh approximation. Any dtype mix; outputs may alias inputs
// (not for split and its backward, which copy columns).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_ACTIVATIONS_H
#define ZEROC_RUNTIME_KERNELS_CUDA_ACTIVATIONS_H

#include "cuda/Types.h"

#include <vector>

namespace zeroc::cuda {

Status geluForward(const Tensor &x, const Tensor &y, cudaStream_t stream);
Status geluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx,
                    cudaStream_t stream);

Status siluForward(const Tensor &x, const Tensor &y, cudaStream_t stream);
Status siluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx,
                    cudaStream_t stream);

Status add(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
           cudaStream_t stream);
Status mul(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
           cudaStream_t stream);

Status scale(const Tensor &x, double factor, const Tensor &y,
             cudaStream_t stream);

Status split(const Tensor &x, const std::vector<Tensor> &pieces,
             cudaStream_t stream);
Status splitBackward(const std::vector<Tensor> &dpieces, const Tensor &dx,
                     cudaStream_t stream);

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_ACTIVATIONS_H
