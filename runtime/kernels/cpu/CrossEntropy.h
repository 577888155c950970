//===- CrossEntropy.h - Mean softmax cross-entropy and the seed -*- C++ -*-===//
//
// cross_entropy:  loss = mean over the N = batch * seq rows of
//                 logsumexp(logits[r, :]) - logits[r, targets[r]]
// backward:       dlogits[r, :] = (softmax(logits[r, :]) - onehot(targets[r]))
//                                 * dloss / N
// backward_seed:  seed = loss_scale / micro_steps
//
// In f32 with the row maximum subtracted before exp; the per-row losses are
// summed in f64. The loss, dloss and the seed are 0-d f32 tensors (any f32
// tensor of one element is accepted). The forward keeps nothing but the
// logits and targets, which are SSA values. A target outside [0, vocab) is an
// error, reported before anything is written. With no rows the loss is 0.
//
// `classes` (0 for vocab): a padded vocabulary's real size. The softmax runs
// over the first `classes` logits of a row, a target must be below it, and
// the gradient of the padding columns is zero.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_CROSSENTROPY_H
#define ZEROC_RUNTIME_KERNELS_CPU_CROSSENTROPY_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

using runtime::kIgnoredTarget;

/// logits [batch, seq, vocab], targets [batch, seq] i32 in [0, vocab) or
/// kIgnoredTarget. loss = (sum of the counted rows' cross-entropy) /
/// `tokens`; `tokens` <= 0 means the number of counted rows here (PyTorch's
/// mean with ignore_index). The executor passes the global batch's counted
/// targets per micro-step (docs/data-format.md, "The loss").
Status crossEntropyForward(const Tensor &logits, const Tensor &targets,
                           const Tensor &loss, double tokens = 0,
                           int64_t classes = 0);

/// The gradient of crossEntropyForward with the same `tokens`: dloss x
/// (softmax - onehot) / tokens per counted row, 0 for ignored rows.
Status crossEntropyBackward(const Tensor &logits, const Tensor &targets,
                            const Tensor &dloss, const Tensor &dlogits,
                            double tokens = 0, int64_t classes = 0);

/// `lossScale` is 1 without loss scaling; micro_steps >= 1.
Status backwardSeed(int64_t microSteps, double lossScale, const Tensor &seed);

/// The argument checks of the kernels above, shared with the CUDA backend:
/// dtypes and shapes only. The CPU kernels then check the targets' values
/// (`checkTargetsInRange`), which a device cannot do without a sync.
Status checkCrossEntropyForward(const Tensor &logits, const Tensor &targets,
                                const Tensor &loss, int64_t classes = 0);
Status checkCrossEntropyBackward(const Tensor &logits, const Tensor &targets,
                                 const Tensor &dloss, const Tensor &dlogits,
                                 int64_t classes = 0);
/// The classes of logits [batch, seq, vocab]: `classes`, or vocab for 0
/// (after the checks above, which reject any other value out of [1, vocab]).
inline int64_t crossEntropyClasses(const Tensor &logits, int64_t classes) {
  return classes > 0 ? classes : logits.dim(2);
}
Status checkBackwardSeed(int64_t microSteps, double lossScale,
                         const Tensor &seed);
/// Every target in [0, classes) or kIgnoredTarget for logits [batch, seq,
/// vocab] (host data; `classes` 0 for vocab).
Status checkTargetsInRange(const char *op, const Tensor &logits,
                           const Tensor &targets, int64_t classes = 0);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_CROSSENTROPY_H
