//===- Optimizer.h - Adam, clipping and loss scaling on the GPU -*- C++ -*-===//
//
// cpu/Optimizer.h on device data, same checks and math:
// - adamUpdate and multiTensorAdamUpdate: Adam / AdamW on f32 master
//   weights and moments, with the CPU's per-step constants
//   (cpu::adamStepConstants) and its per-element order of operations, every
//   operation IEEE-rounded and none fused (__fmul_rn, ...), so the results
//   equal cpu::adamUpdate's bit for bit. The optional 16-bit parameter copy
//   receives the updated master, rounded. The multi-tensor form updates a
//   list of tensors in one launch per 64 tensors.
// - sumOfSquares adds sum(g^2), accumulated in f64 in a fixed order, to a
//   device f64 scalar (zero it first; sum every gradient or shard into it;
//   all-reduce it; then clip with clipGradNormInPlace, which computes the
//   CPU's clipCoefficient on the device, or copy it to the host).
//   multiTensorSumOfSquares does the same for a list of tensors in one
//   pass, and multiTensorScale scales a list.
// - lambMoments and lambApply: the two halves of LAMB (cpu/Optimizer.h),
//   FusedLamb's part 1 (moments and the two squared norms, reduced per block
//   and then over blocks) and part 3 (the scaled update); the trust ratio
//   between them is the caller's, on the host, because under ZeRO it needs
//   the other ranks' sums.
// - unscaleGrads divides by the loss scale and sets a device int flag to 1
//   when an element is then inf or NaN as stored (it never clears it).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_OPTIMIZER_H
#define ZEROC_RUNTIME_KERNELS_CUDA_OPTIMIZER_H

#include "cpu/Optimizer.h"
#include "cuda/Types.h"

#include <vector>

namespace zeroc::cuda {

Status adamUpdate(const cpu::AdamSettings &settings, int64_t step,
                  const Tensor &grad, const Tensor &master,
                  const Tensor &expAvg, const Tensor &expAvgSq,
                  const Tensor *param16, cudaStream_t stream);

/// One tensor of a multi-tensor update (the arguments of adamUpdate).
struct AdamTensors {
  Tensor grad, master, expAvg, expAvgSq;
  const Tensor *param16 = nullptr;
};

/// adamUpdate on every entry, fused. All entries are checked before
/// anything is launched.
Status multiTensorAdamUpdate(const cpu::AdamSettings &settings, int64_t step,
                             const std::vector<AdamTensors> &tensors,
                             cudaStream_t stream);

/// cpu::lambMoments on the device: m and v updated, and sums[0] += sum p^2,
/// sums[1] += sum u^2 (f64, device memory, zeroed by the caller), in a fixed
/// order for a given size. Each element rounded as on the CPU; the sums'
/// order differs from the CPU's.
Status lambMoments(const cpu::AdamSettings &settings, const Tensor &grad,
                   const Tensor &master, const Tensor &expAvg,
                   const Tensor &expAvgSq, double *sums, cudaStream_t stream);
/// cpu::lambApply on the device, bit for bit.
Status lambApply(const cpu::AdamSettings &settings, int64_t step,
                 float trustRatio, const Tensor &master, const Tensor &expAvg,
                 const Tensor &expAvgSq, const Tensor *param16,
                 cudaStream_t stream);
/// *sum += sum of g^2 over `grad` (f64; `sum` is device memory).
Status sumOfSquares(const Tensor &grad, double *sum, cudaStream_t stream);

/// *sum += the sum of g^2 over every tensor of `grads` (f64; `sum` is device
/// memory), in one pass over all of them: fixed chunks of 32 Ki elements,
/// each chunk's f64 partial from one block in a fixed order, then the
/// partials in chunk order. Deterministic for a given list of sizes; the
/// order differs from sumOfSquares on each tensor (equal within rounding).
/// All tensors are checked before anything is launched. Unvalidated on a
/// device (ZEROC_CUDA_CLIP=grid, docs/gpu-kernels.md).
Status multiTensorSumOfSquares(const std::vector<Tensor> &grads, double *sum,
                               cudaStream_t stream);

/// scaleInPlace on every tensor, one launch per 64 tensors: the same bits.
Status multiTensorScale(const std::vector<Tensor> &tensors, float factor,
                        cudaStream_t stream);

/// grad *= cpu::clipCoefficient(*totalSumOfSquares, maxNorm), with the
/// total read from device memory.
Status clipGradNormInPlace(const Tensor &grad, const double *totalSumOfSquares,
                           double maxNorm, cudaStream_t stream);

/// t *= factor, in place.
Status scaleInPlace(const Tensor &t, float factor, cudaStream_t stream);

/// grad /= lossScale in place; sets *overflow (device) to 1 when an element
/// is then inf or NaN in grad's dtype.
Status unscaleGrads(const Tensor &grad, double lossScale, int *overflow,
                    cudaStream_t stream);

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_OPTIMIZER_H
