//===- CrossEntropy.cpp - Mean softmax cross-entropy and the seed ---------===//

#include "cpu/CrossEntropy.h"
#include "cpu/Parallel.h"
#include "cpu/VectorMath.h"

#include <algorithm>
#include <cmath>

namespace zeroc::cpu {

static std::string checkScalar(const char *op, const char *name,
                               const Tensor &t) {
  if (t.dtype != DType::F32 || t.numel() != 1)
    return std::string(op) + ": " + name + " must be a 0-d f32 tensor, found " +
           describe(t);
  if (!t.data)
    return std::string(op) + ": " + name + " has no data";
  return "";
}

static Status checkCrossEntropy(const char *op, const Tensor &logits,
                                const Tensor &targets, int64_t classes) {
  ZEROC_RETURN_IF_ERROR(firstError({checkFloat(op, "logits", logits),
                                    checkRank(op, "logits", logits, 3),
                                    checkIds(op, "targets", targets)}));
  if (targets.shape != std::vector<int64_t>{logits.dim(0), logits.dim(1)})
    return {std::string(op) + ": targets must be [batch, seq] of logits " +
            describe(logits) + ", found " + describe(targets)};
  if (classes < 0 || classes > logits.dim(2))
    return {std::string(op) +
            ": classes must be from 1 to the logits' last "
            "dimension " +
            std::to_string(logits.dim(2)) + ", found " +
            std::to_string(classes)};
  return {};
}

Status checkTargetsInRange(const char *op, const Tensor &logits,
                           const Tensor &targets, int64_t classes) {
  const int32_t *t = targets.i32();
  int64_t bound = crossEntropyClasses(logits, classes);
  for (int64_t r = 0, n = targets.numel(); r < n; ++r)
    if ((t[r] < 0 || t[r] >= bound) && t[r] != kIgnoredTarget)
      return {std::string(op) + ": target " + std::to_string(t[r]) +
              " at position " + std::to_string(r) + " is outside [0, " +
              std::to_string(bound) + ") and not " +
              std::to_string(kIgnoredTarget) + " (ignored)"};
  return {};
}

// Replaces `row` by its softmax and returns its log-sum-exp. The
// exponentials in a loop of their own, which the compiler vectorizes
// (cpu/VectorMath.h; libm's expf was a call per logit), then summed in
// index order: the same bits for any vector width.
static float softmaxInPlace(float *row, int64_t n) {
  const float max = *std::max_element(row, row + n);
  for (int64_t i = 0; i < n; ++i)
    row[i] = expApprox(row[i] - max);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    sum += row[i];
  for (int64_t i = 0; i < n; ++i)
    row[i] /= sum;
  return max + std::log(sum);
}

Status checkCrossEntropyForward(const Tensor &logits, const Tensor &targets,
                                const Tensor &loss, int64_t classes) {
  const char *op = "cross_entropy";
  ZEROC_RETURN_IF_ERROR(checkCrossEntropy(op, logits, targets, classes));
  return firstError({checkScalar(op, "loss", loss)});
}

Status checkCrossEntropyBackward(const Tensor &logits, const Tensor &targets,
                                 const Tensor &dloss, const Tensor &dlogits,
                                 int64_t classes) {
  const char *op = "cross_entropy_backward";
  ZEROC_RETURN_IF_ERROR(checkCrossEntropy(op, logits, targets, classes));
  return firstError({checkScalar(op, "dloss", dloss),
                     checkFloat(op, "result", dlogits),
                     checkSameShape(op, "result", dlogits, "logits", logits)});
}

Status checkBackwardSeed(int64_t microSteps, double lossScale,
                         const Tensor &seed) {
  ZEROC_RETURN_IF_ERROR(
      firstError({checkScalar("backward_seed", "seed", seed)}));
  if (microSteps < 1 || !(lossScale > 0.0))
    return {"backward_seed: micro_steps must be >= 1 and the loss scale "
            "positive, found " +
            std::to_string(microSteps) + " and " + std::to_string(lossScale)};
  return {};
}

/// The divisor of the loss: `tokens`, or the counted rows when <= 0.
static double lossDivisor(const Tensor &targets, double tokens) {
  if (tokens > 0)
    return tokens;
  const int32_t *t = targets.i32();
  int64_t counted = 0;
  for (int64_t r = 0, n = targets.numel(); r < n; ++r)
    counted += t[r] != kIgnoredTarget;
  return double(std::max<int64_t>(counted, 1));
}

Status crossEntropyForward(const Tensor &logits, const Tensor &targets,
                           const Tensor &loss, double tokens, int64_t classes) {
  ZEROC_RETURN_IF_ERROR(
      checkCrossEntropyForward(logits, targets, loss, classes));
  ZEROC_RETURN_IF_ERROR(
      checkTargetsInRange("cross_entropy", logits, targets, classes));
  int64_t rows = targets.numel(), vocab = logits.dim(2);
  int64_t n = crossEntropyClasses(logits, classes);
  const int32_t *t = targets.i32();
  // Rows on the pool, each row's loss kept (0 for an ignored target); their
  // sum in row order.
  ScratchVector<float> rowLoss(rows);
  parallelChunks(rows, 4, vocab, [&](int64_t first, int64_t count) {
    ScratchVector<float> row(n);
    for (int64_t r = first; r < first + count; ++r) {
      if (t[r] == kIgnoredTarget) {
        rowLoss[r] = 0.0f;
        continue;
      }
      loadF32(logits, r * vocab, n, row.data());
      float target = row[t[r]];
      rowLoss[r] = softmaxInPlace(row.data(), n) - target;
    }
  });
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] != kIgnoredTarget)
      total += double(rowLoss[r]);
  *loss.f32() = rows ? float(total / lossDivisor(targets, tokens)) : 0.0f;
  return {};
}

Status crossEntropyBackward(const Tensor &logits, const Tensor &targets,
                            const Tensor &dloss, const Tensor &dlogits,
                            double tokens, int64_t classes) {
  ZEROC_RETURN_IF_ERROR(
      checkCrossEntropyBackward(logits, targets, dloss, dlogits, classes));
  ZEROC_RETURN_IF_ERROR(
      checkTargetsInRange("cross_entropy_backward", logits, targets, classes));
  int64_t rows = targets.numel(), vocab = logits.dim(2);
  int64_t n = crossEntropyClasses(logits, classes);
  const int32_t *t = targets.i32();
  float factor = *dloss.f32() / float(lossDivisor(targets, tokens));
  parallelChunks(rows, 4, vocab, [&](int64_t first, int64_t count) {
    // The padding columns [n, vocab) stay zero.
    ScratchVector<float> row(vocab);
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t r = first; r < first + count; ++r) {
      if (t[r] == kIgnoredTarget) {
        std::fill(row.begin(), row.begin() + n, 0.0f);
      } else {
        loadF32(logits, r * vocab, n, row.data());
        softmaxInPlace(row.data(), n);
        row[t[r]] -= 1.0f;
        for (int64_t i = 0; i < n; ++i)
          row[i] *= factor;
      }
      storeF32(dlogits, r * vocab, vocab, row.data());
    }
  });
  return {};
}

Status backwardSeed(int64_t microSteps, double lossScale, const Tensor &seed) {
  ZEROC_RETURN_IF_ERROR(checkBackwardSeed(microSteps, lossScale, seed));
  *seed.f32() = float(lossScale / double(microSteps));
  return {};
}

} // namespace zeroc::cpu
