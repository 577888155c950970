//===- Activations.h - Elementwise ops and copies -------------*- C++ -*-===//
//
// gelu (tanh):  y = 0.5 x (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   computed as x sigmoid(2u), the same function (1 + tanh u = 2 sigmoid(2u))
//   backward:   dx = dy (0.5 (1 + tanh u)
//                        + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715
//                        x^2))
// silu:         y = x sigmoid(x)
//   backward:   dx = dy sigmoid(x) (1 + x (1 - sigmoid(x)))
// add, mul:     out = lhs + rhs, out = lhs * rhs
//   (their gradients are dy itself and `mul(dy, other operand)`: no kernel)
// scale:        y = x * c, c = factor rounded to x's dtype (Gemma's embedding
//               scale); its gradient is scale(dy, factor)
// split:        pieces[r] = columns [o_r, o_r + n_r) of x's last dimension
//   backward:   splitBackward concatenates the pieces' gradients
//
// gelu and silu take their exponentials from cpu/VectorMath.h in loops the
// compiler vectorizes (AVX-512, AVX2 or the portable build's width, chosen
// at run time); every loop gives the same bits.
//
// All operands have one shape; dtypes may differ (each is read as f32 and the
// result rounded once). The forwards of gelu and silu keep only their input.
// Every kernel here may write in place (an output equal to an input).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_ACTIVATIONS_H
#define ZEROC_RUNTIME_KERNELS_CPU_ACTIVATIONS_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

/// The element loop of gelu and silu (forward and backward). Each does the
/// same operations in the same order, each correctly rounded (the file is
/// compiled without fused multiply-adds), so all give the same bits.
enum class VectorLoop {
  Best,     ///< The widest this CPU has.
  Avx512,   ///< 16 lanes.
  Avx2,     ///< 8 lanes.
  Portable, ///< The compiler's vectors for the build's target.
};
/// The loop `requested` runs as on this CPU: a loop the CPU lacks falls back
/// to the next narrower one.
VectorLoop vectorLoopFor(VectorLoop requested);

Status geluForward(const Tensor &x, const Tensor &y);
Status geluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx);

Status siluForward(const Tensor &x, const Tensor &y);
Status siluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx);

/// The same on a chosen loop (the ones above take VectorLoop::Best).
Status geluForwardLoop(const Tensor &x, const Tensor &y, VectorLoop loop);
Status geluBackwardLoop(const Tensor &x, const Tensor &dy, const Tensor &dx,
                        VectorLoop loop);
Status siluForwardLoop(const Tensor &x, const Tensor &y, VectorLoop loop);
Status siluBackwardLoop(const Tensor &x, const Tensor &dy, const Tensor &dx,
                        VectorLoop loop);

Status add(const Tensor &lhs, const Tensor &rhs, const Tensor &out);
Status mul(const Tensor &lhs, const Tensor &rhs, const Tensor &out);

Status scale(const Tensor &x, double factor, const Tensor &y);

/// x [..., n] into `pieces` [..., n_r], sum of n_r = n; no aliasing.
Status split(const Tensor &x, const std::vector<Tensor> &pieces);
/// The inverse: `dpieces` concatenated along the last dimension into `dx`.
Status splitBackward(const std::vector<Tensor> &dpieces, const Tensor &dx);

/// The argument checks of the kernels above (dtypes and shapes, never the
/// data), shared with the CUDA backend so that both report the same errors.
Status checkGeluForward(const Tensor &x, const Tensor &y);
Status checkGeluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx);
Status checkSiluForward(const Tensor &x, const Tensor &y);
Status checkSiluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx);
Status checkAdd(const Tensor &lhs, const Tensor &rhs, const Tensor &out);
Status checkMul(const Tensor &lhs, const Tensor &rhs, const Tensor &out);
Status checkScale(const Tensor &x, double factor, const Tensor &y);
Status checkSplit(const char *op, const Tensor &whole,
                  const std::vector<Tensor> &pieces);

/// c of scale: the factor rounded to `dtype`, as Hugging Face's Gemma casts
/// its normalizer to the activation dtype.
float scaleFactor(double factor, DType dtype);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_ACTIVATIONS_H
