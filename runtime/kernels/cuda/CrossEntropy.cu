//===- CrossEntropy.cu - Mean softmax cross-entropy on the GPU ------------===//

#include "cuda/CrossEntropy.h"

#include "cpu/CrossEntropy.h"
#include "cuda/Device.cuh"

namespace zeroc::cuda {

namespace {

constexpr int kSumThreads = 1024;

// The maximum and the sum of exp(x - max) of a row; every thread gets both.
__device__ float2 softmaxStats(const void *logits, DType type, int64_t offset,
                               int64_t vocab) {
  float max = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    max = fmaxf(max, loadAsFloat(logits, type, offset + i));
  max = blockMax(max);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    sum += expf(loadAsFloat(logits, type, offset + i) - max);
  return make_float2(max, blockSum(sum));
}

// Rows of `vocab` logits, the first `classes` of them the vocabulary.
__global__ void rowLossKernel(const void *logits, DType type,
                              const int32_t *targets, int64_t rows,
                              int64_t vocab, int64_t classes, float *rowLoss) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float2 stats = softmaxStats(logits, type, r * vocab, classes);
    if (threadIdx.x == 0) {
      int32_t t = targets[r];
      rowLoss[r] = t == runtime::kIgnoredTarget ? 0.0f
                   : t >= 0 && t < classes
                       ? stats.x + logf(stats.y) -
                             loadAsFloat(logits, type, r * vocab + t)
                       : quietNaN();
    }
  }
}

// The rows whose target is not ignored, by one block: the divisor when the
// caller gives none.
__global__ void countedRowsKernel(const int32_t *targets, int64_t rows,
                                  float *counted) {
  double n = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    n += targets[r] != runtime::kIgnoredTarget ? 1.0 : 0.0;
  n = blockSum(n);
  if (threadIdx.x == 0)
    *counted = float(n > 1.0 ? n : 1.0);
}

// loss = (sum of rowLoss in f64) / divisor, by one block in a fixed order.
__global__ void meanLossKernel(const float *rowLoss, int64_t rows,
                               const float *divisor, float *loss) {
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    sum += double(rowLoss[r]);
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    *loss = rows ? float(sum / double(*divisor)) : 0.0f;
}

// Each element is read and written by one thread: dlogits may be logits.
// The padding columns [classes, vocab) get zero.
__global__ void crossEntropyBackwardKernel(const void *logits, DType type,
                                           const int32_t *targets,
                                           const float *dloss, int64_t rows,
                                           int64_t vocab, int64_t classes,
                                           const float *divisor, void *dlogits,
                                           DType dType) {
  float factor = *dloss / *divisor;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float2 stats = softmaxStats(logits, type, r * vocab, classes);
    int32_t t = targets[r];
    bool ignored = t == runtime::kIgnoredTarget;
    bool valid = t >= 0 && t < classes;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      if (i >= classes) {
        storeFromFloat(dlogits, dType, r * vocab + i, 0.0f);
        continue;
      }
      float p =
          expf(loadAsFloat(logits, type, r * vocab + i) - stats.x) / stats.y;
      if (i == t)
        p -= 1.0f;
      storeFromFloat(dlogits, dType, r * vocab + i,
                     ignored ? 0.0f
                     : valid ? p * factor
                             : quietNaN());
    }
  }
}

__global__ void fillKernel(float *out, float value) { *out = value; }

} // namespace

// The divisor in device memory: `tokens`, or the counted rows when <= 0.
static Status lossDivisor(const char *op, const Tensor &targets, double tokens,
                          Scratch &divisor, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(divisor.allocate(op, 4, stream));
  if (tokens > 0)
    fillKernel<<<1, 1, 0, stream>>>(divisor.get<float>(), float(tokens));
  else
    countedRowsKernel<<<1, kSumThreads, 0, stream>>>(
        targets.i32(), targets.numel(), divisor.get<float>());
  return launchStatus(op);
}

Status crossEntropyForward(const Tensor &logits, const Tensor &targets,
                           const Tensor &loss, double tokens, int64_t classes,
                           cudaStream_t stream) {
  const char *op = "cross_entropy";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkCrossEntropyForward(logits, targets, loss, classes));
  int64_t rows = targets.numel(), vocab = logits.dim(2);
  int64_t n = cpu::crossEntropyClasses(logits, classes);
  Scratch rowLoss, divisor;
  if (rows > 0) {
    ZEROC_RETURN_IF_ERROR(rowLoss.allocate(op, size_t(rows) * 4, stream));
    rowLossKernel<<<rowGrid(rows), kThreads, 0, stream>>>(
        logits.data, logits.dtype, targets.i32(), rows, vocab, n,
        rowLoss.get<float>());
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
  }
  ZEROC_RETURN_IF_ERROR(lossDivisor(op, targets, tokens, divisor, stream));
  meanLossKernel<<<1, kSumThreads, 0, stream>>>(
      rowLoss.get<float>(), rows, divisor.get<float>(), loss.f32());
  return launchStatus(op);
}

Status crossEntropyBackward(const Tensor &logits, const Tensor &targets,
                            const Tensor &dloss, const Tensor &dlogits,
                            double tokens, int64_t classes,
                            cudaStream_t stream) {
  const char *op = "cross_entropy_backward";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkCrossEntropyBackward(logits, targets, dloss, dlogits, classes));
  int64_t rows = targets.numel(), vocab = logits.dim(2);
  int64_t n = cpu::crossEntropyClasses(logits, classes);
  if (rows == 0 || vocab == 0)
    return {};
  Scratch divisor;
  ZEROC_RETURN_IF_ERROR(lossDivisor(op, targets, tokens, divisor, stream));
  crossEntropyBackwardKernel<<<rowGrid(rows), kThreads, 0, stream>>>(
      logits.data, logits.dtype, targets.i32(), dloss.f32(), rows, vocab, n,
      divisor.get<float>(), dlogits.data, dlogits.dtype);
  return launchStatus(op);
}

Status backwardSeed(int64_t microSteps, double lossScale, const Tensor &seed,
                    cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkBackwardSeed(microSteps, lossScale, seed));
  fillKernel<<<1, 1, 0, stream>>>(seed.f32(),
                                  float(lossScale / double(microSteps)));
  return launchStatus("backward_seed");
}

} // namespace zeroc::cuda
