//===- Rotary.h - Rotary position embedding (RoPE) --------------*- C++ -*-===//
//
// x [batch, seq, heads * head_dim]; in each head, element i < head_dim / 2 is
// paired with i + head_dim / 2 (Hugging Face's rotate_half) and the pair is
// rotated by the angle a = pos * theta^(-2i / head_dim), pos = s:
//   y[i]        = x[i] cos a - x[i + d/2] sin a
//   y[i + d/2]  = x[i + d/2] cos a + x[i] sin a
// A rotation's transpose is its inverse, so rotary_backward rotates dy by -a.
// Angles are computed in f64 and their sines and cosines rounded to f32.
// Nothing is saved for backward. y may be x (in place).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_ROTARY_H
#define ZEROC_RUNTIME_KERNELS_CPU_ROTARY_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

/// head_dim must be even and divide the last dimension; theta > 0. With
/// `documents` (checkDocumentStarts; --reset-position-ids) the position of
/// token s of row b is s - documents[b, s]: each document's from 0.
Status rotaryForward(const Tensor &x, int64_t headDim, double theta,
                     const Tensor &y, const Tensor *documents = nullptr);
Status rotaryBackward(const Tensor &dy, int64_t headDim, double theta,
                      const Tensor &dx, const Tensor *documents = nullptr);

/// The argument checks of the kernels above, shared with the CUDA backend.
Status checkRotaryForward(const Tensor &x, int64_t headDim, double theta,
                          const Tensor &y);
Status checkRotaryBackward(const Tensor &dy, int64_t headDim, double theta,
                           const Tensor &dx);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_ROTARY_H
