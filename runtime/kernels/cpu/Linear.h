//===- Linear.h - Affine layers and their gradients -------------*- C++ -*-===//
//
// linear:             y = x W^T + b     x [..., in], W [out, in], b [out]
// linear_grad_input:  dx = dy W         dy [..., out] -> dx [..., in]
// linear_grad_weight: dW = dy^T x       summed over all rows
// linear_grad_bias:   db = sum of dy over all rows
//
// One cblas_sgemm each. 16-bit operands are widened into f32 scratch, the
// product accumulates in f32, and the result is rounded once when stored.
// The forward keeps nothing: its input is an SSA value the backward reads.
// Outputs must not alias inputs.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_LINEAR_H
#define ZEROC_RUNTIME_KERNELS_CPU_LINEAR_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

/// `bias` may be null.
Status linearForward(const Tensor &x, const Tensor &weight, const Tensor *bias,
                     const Tensor &y);

Status linearGradInput(const Tensor &dy, const Tensor &weight,
                       const Tensor &dx);

/// dw [out, in] is overwritten (accumulation is the caller's accumulate op).
Status linearGradWeight(const Tensor &dy, const Tensor &x, const Tensor &dw);

Status linearGradBias(const Tensor &dy, const Tensor &db);

/// The argument checks of the kernels above (dtypes, shapes and the 32-bit
/// GEMM dimension limit), shared with the CUDA backend.
Status checkLinearForward(const Tensor &x, const Tensor &weight,
                          const Tensor *bias, const Tensor &y);
Status checkLinearGradInput(const Tensor &dy, const Tensor &weight,
                            const Tensor &dx);
Status checkLinearGradWeight(const Tensor &dy, const Tensor &x,
                             const Tensor &dw);
Status checkLinearGradBias(const Tensor &dy, const Tensor &db);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_LINEAR_H
