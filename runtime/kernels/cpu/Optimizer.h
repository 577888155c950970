//===- Optimizer.h - Adam, gradient clipping, loss scaling ------*- C++ -*-===//
//
// adam_update, with step count t >= 1, on the f32 master copy p and f32
// moments m, v (a whole parameter or this rank's shard of it):
//   adamw: p -= lr * weight_decay * p        (decoupled, before the step)
//   adam:  g += weight_decay * p             (L2, added to the gradient)
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
//   (without bias correction: p -= lr * m / (sqrt(v) + eps))
// then the 16-bit copy of the parameter, when there is one, is p rounded.
// clip_grad_norm: norm = sqrt(sum over all gradients of g^2) (each rank sums
//   its shards, the caller all-reduces), then every g *= max_norm /
//   max(norm, max_norm).
// unscale_grads: g /= loss_scale, and whether any g is now inf or NaN; the
//   dynamic loss scale then moves as DeepSpeed's DynamicLossScaler does.
//
// Arithmetic in f32 per element (sums of squares in f64); gradients may be
// stored in any float dtype. Nothing here clears a gradient: that is the
// plan's zero_grads.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_OPTIMIZER_H
#define ZEROC_RUNTIME_KERNELS_CPU_OPTIMIZER_H

#include "cpu/Tensor.h"

#include <cmath>

namespace zeroc::cpu {

/// The attributes of model.adam_update.
struct AdamSettings {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
  bool adamw = false;
  /// Divide the moments by 1 - beta^t; false (no_bias_correction, DeepSpeed's
  /// `bias_correction: false`) steps on the raw moments, Adam and LAMB alike.
  bool biasCorrection = true;
};

/// The per-step constants of adam_update in the f32 (and f64-derived) form
/// every backend uses, so that the CPU, host and CUDA updates agree bit for
/// bit: `stepSize = lr / (1 - beta1^t)` and `rootCorrection2 =
/// 1 / sqrt(1 - beta2^t)` are computed in f64 and rounded once. Without bias
/// correction they are `lr` and 1, as DeepSpeed's CPU Adam sets them (its
/// `_bias_correction1` and `_bias_correction2` stay 1), so the step is
/// exactly `lr * m / (sqrt(v) + eps)`.
struct AdamStepConstants {
  float lr, beta1, beta2, eps, decay;
  float oneMinusBeta1, oneMinusBeta2;
  float stepSize, rootCorrection2;
  bool adamw;
};
AdamStepConstants adamStepConstants(const AdamSettings &settings, int64_t step);

/// One element of adam_update, in the order the CPU kernel computes it
/// (no fused multiply-adds: compile with -ffp-contract=off where FMA is on).
inline void adamElement(const AdamStepConstants &c, float g, float &p, float &m,
                        float &v) {
  if (c.adamw)
    p -= c.lr * c.decay * p;
  else
    g += c.decay * p;
  m = c.beta1 * m + c.oneMinusBeta1 * g;
  v = c.beta2 * v + c.oneMinusBeta2 * g * g;
  p -= c.stepSize * m / (std::sqrt(v) * c.rootCorrection2 + c.eps);
}

/// The element loop of adamUpdate. Every loop does adamElement's operations
/// in its order, each correctly rounded, so all give the same bits.
enum class AdamLoop {
  Best,   ///< The widest this CPU has.
  Avx512, ///< 16 lanes; f32 or bf16 gradients and a bf16 copy converted in
          ///< the loop (f16 a chunk at a time).
  Avx2,   ///< 8 lanes, converting as Avx512 does.
  /// 8 lanes; 16-bit values converted a chunk at a time through a buffer
  /// (the loop before the fused ones, kept for comparison).
  Avx2Chunked,
  Portable, ///< adamElement in a plain loop (the compiler's vectors).
};

/// How adamUpdate runs; every choice gives the same bits.
struct AdamOptions {
  /// At most this many threads (0: cpu::threads(), cpu/Threads.h);
  /// fewer for small tensors, each thread taking at least 64 Ki elements.
  unsigned threads = 0;
  /// A loop this CPU lacks falls back to the next narrower one.
  AdamLoop loop = AdamLoop::Best;
};

/// `master`, `expAvg`, `expAvgSq` are f32 and have the element count of
/// `grad` (their shapes may differ: flat shards). `param16` (may be null)
/// receives the updated master in its own dtype. `step` is t >= 1.
/// Vectorized (AVX-512 or AVX2 where the CPU has it, chosen at run time,
/// else the compiler's vectorization of the portable loop of adamElement)
/// and split over the OpenMP threads in contiguous ranges; the CPU backend's
/// Adam and, with the optimizer offloaded (ZeRO-Offload), the CUDA backend's
/// for states in host memory.
Status adamUpdate(const AdamSettings &settings, int64_t step,
                  const Tensor &grad, const Tensor &master,
                  const Tensor &expAvg, const Tensor &expAvgSq,
                  const Tensor *param16, const AdamOptions &options = {});

/// The loop adamUpdate runs on this CPU when asked for `requested`.
AdamLoop adamLoopFor(AdamLoop requested);
/// "avx512", "avx2", "avx2-chunked" or "portable" ("best" for Best).
const char *adamLoopName(AdamLoop loop);

// LAMB (DeepSpeed's FusedLamb, csrc/lamb/fused_lamb_cuda_kernel.cu), in two
// halves around the trust ratio, because under ZeRO the norms it needs are
// sums over every rank's part of a parameter:
//   lambMoments: m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2,
//     u = m / (sqrt(v) + eps) + weight_decay p; returns sum p^2 and sum u^2
//     (p before the step) in f64.
//   lambTrustRatio: r = clamp(sqrt(P) / sqrt(U), min_coeff, max_coeff), or 1
//     when either norm is 0.
//   lambApply: p -= lr sqrt(1 - beta2^t) / (1 - beta1^t) r u (u recomputed
//     from the stored m, v), then the 16-bit copy when there is one; without
//     bias correction, p -= lr r u (FusedLamb's step_size = lr).
// `settings.adamw` plays no part: LAMB adds the decay to the update.

/// The two sums of lambMoments over a parameter or a part of it.
struct LambSums {
  double weight = 0;
  double update = 0;
};
/// The f32 form of lambApply's step size, lr sqrt(1 - beta2^t) / (1 -
/// beta1^t) (lr without bias correction), computed in f64 and rounded once,
/// shared by every backend.
float lambStepSize(const AdamSettings &settings, int64_t step);
/// FusedLamb's clamp of ||p|| / ||u||.
float lambTrustRatio(const LambSums &total, double maxCoeff, double minCoeff);
/// One element of u, in the order every backend computes it.
inline float lambUpdateElement(float decay, float eps, float p, float m,
                               float v) {
  return m / (std::sqrt(v) + eps) + decay * p;
}
Status lambMoments(const AdamSettings &settings, const Tensor &grad,
                   const Tensor &master, const Tensor &expAvg,
                   const Tensor &expAvgSq, LambSums &sums);
Status lambApply(const AdamSettings &settings, int64_t step, float trustRatio,
                 const Tensor &master, const Tensor &expAvg,
                 const Tensor &expAvgSq, const Tensor *param16);

/// Sum of g^2 over `grad`, in f64: one term of the global norm's square.
double sumOfSquares(const Tensor &grad);

/// max_norm / max(norm, max_norm) for norm = sqrt(totalSumOfSquares): 1 when
/// the norm is within bounds. A NaN norm gives NaN, as in PyTorch.
float clipCoefficient(double totalSumOfSquares, double maxNorm);

/// t *= factor, in place.
Status scaleInPlace(const Tensor &t, float factor);

/// grad /= lossScale in place; sets `overflow` (never clears it, so one flag
/// can collect every gradient) when an element is then inf or NaN.
Status unscaleGrads(const Tensor &grad, double lossScale, bool &overflow);

/// The attributes of model.unscale_grads. A positive `staticLossScale` fixes
/// the scale; otherwise it is dynamic.
struct LossScaleSettings {
  double staticLossScale = 0.0;
  int64_t initialScalePower = 16;
  int64_t lossScaleWindow = 1000;
  int64_t hysteresis = 2;
  double minLossScale = 1.0;
};

/// The dynamic loss scale between steps.
struct LossScaleState {
  double scale = 1.0;
  int64_t iteration = 0;     ///< Optimizer steps seen, skipped ones included.
  int64_t lastOverflow = -1; ///< The iteration of the latest overflow.
  int64_t hysteresisLeft = 1;
};

LossScaleState initialLossScale(const LossScaleSettings &settings);

/// After a step's overflow check: on overflow, count down the hysteresis and
/// once it is spent halve the scale (not below min_loss_scale); after
/// loss_scale_window steps in a row without one, double it and restore the
/// hysteresis. A static scale never moves.
void updateLossScale(const LossScaleSettings &settings, bool overflow,
                     LossScaleState &state);

/// The argument checks of the kernels above, shared with the host and CUDA
/// optimizers.
Status checkAdamUpdate(int64_t step, const Tensor &grad, const Tensor &master,
                       const Tensor &expAvg, const Tensor &expAvgSq,
                       const Tensor *param16);
Status checkScaleInPlace(const Tensor &t);
Status checkUnscaleGrads(const Tensor &grad, double lossScale);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_OPTIMIZER_H
