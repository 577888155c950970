//===- CrossEntropy.h - Mean softmax cross-entropy on the GPU ---*- C++ -*-===//
//
// cpu/CrossEntropy.h on device data: the same mean over rows (per-row
// losses in f32, summed in f64 in a fixed order, so deterministic), the
// same backward (dlogits = (softmax - onehot) * dloss / rows, with dloss read
// from device memory), the same seed (loss_scale / micro_steps), the same
// shape checks. loss, dloss and seed are 0-d f32 device tensors. One block
// per row, the row maximum subtracted before exp.
//
// Targets are device data: a target outside [0, vocab), which the CPU
// kernels reject, makes the loss NaN and that row of dlogits NaN.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_CROSSENTROPY_H
#define ZEROC_RUNTIME_KERNELS_CUDA_CROSSENTROPY_H

#include "cuda/Types.h"

namespace zeroc::cuda {

/// logits [batch, seq, vocab], targets [batch, seq] i32 in [0, vocab) or
/// kIgnoredTarget (-100: no loss, zero gradient). The loss is the counted
/// rows' sum over `tokens`; `tokens` <= 0 counts the rows here (the CPU
/// kernel's semantics, cpu/CrossEntropy.h). `classes` (0 for vocab): a
/// padded vocabulary's real size, as on the CPU.
Status crossEntropyForward(const Tensor &logits, const Tensor &targets,
                           const Tensor &loss, double tokens, int64_t classes,
                           cudaStream_t stream);

/// dlogits may be logits (in place).
Status crossEntropyBackward(const Tensor &logits, const Tensor &targets,
                            const Tensor &dloss, const Tensor &dlogits,
                            double tokens, int64_t classes,
                            cudaStream_t stream);

/// Writes loss_scale / micro_steps into `seed` (device) by a one-thread
/// kernel: no host-to-device copy, no sync.
Status backwardSeed(int64_t microSteps, double lossScale, const Tensor &seed,
                    cudaStream_t stream);

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_CROSSENTROPY_H
