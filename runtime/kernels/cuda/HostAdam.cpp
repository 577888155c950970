//===- HostAdam.cpp - The offload path's Adam on the host -----------------===//
//
// Compiled with -ffp-contract=off (as cpu/Optimizer.cpp is): every multiply
// and add rounds on its own, in both loops.
//
//===----------------------------------------------------------------------===//

#include "cuda/HostAdam.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ZEROC_HOST_ADAM_AVX2 1
#include <immintrin.h>
#endif

namespace zeroc::cuda {

using cpu::AdamStepConstants;
using cpu::Status;
using cpu::Tensor;

namespace {

constexpr int64_t kChunk = 4096;
constexpr int64_t kMinPerThread = int64_t(1) << 16;
constexpr int64_t kRangeAlignment = 64; // elements: whole cache lines

using AdamLoop = void (*)(const AdamStepConstants &, const float *, float *,
                          float *, float *, int64_t);

void adamPortable(const AdamStepConstants &c, const float *g, float *p,
                  float *m, float *v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    cpu::adamElement(c, g[i], p[i], m[i], v[i]);
}

#ifdef ZEROC_HOST_ADAM_AVX2
// cpu::adamElement on 8 lanes: the same operations in the same order, each
// correctly rounded (mul, add, sub, div, sqrt; no FMA).
__attribute__((target("avx2"))) void adamAvx2(const AdamStepConstants &c,
                                              const float *g, float *p,
                                              float *m, float *v, int64_t n) {
  const __m256 lrDecay = _mm256_set1_ps(c.lr * c.decay);
  const __m256 decay = _mm256_set1_ps(c.decay);
  const __m256 beta1 = _mm256_set1_ps(c.beta1);
  const __m256 beta2 = _mm256_set1_ps(c.beta2);
  const __m256 oneMinusBeta1 = _mm256_set1_ps(c.oneMinusBeta1);
  const __m256 oneMinusBeta2 = _mm256_set1_ps(c.oneMinusBeta2);
  const __m256 stepSize = _mm256_set1_ps(c.stepSize);
  const __m256 rootCorrection2 = _mm256_set1_ps(c.rootCorrection2);
  const __m256 eps = _mm256_set1_ps(c.eps);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gi = _mm256_loadu_ps(g + i);
    __m256 pi = _mm256_loadu_ps(p + i);
    __m256 mi = _mm256_loadu_ps(m + i);
    __m256 vi = _mm256_loadu_ps(v + i);
    if (c.adamw)
      pi = _mm256_sub_ps(pi, _mm256_mul_ps(lrDecay, pi));
    else
      gi = _mm256_add_ps(gi, _mm256_mul_ps(decay, pi));
    mi = _mm256_add_ps(_mm256_mul_ps(beta1, mi),
                       _mm256_mul_ps(oneMinusBeta1, gi));
    vi = _mm256_add_ps(_mm256_mul_ps(beta2, vi),
                       _mm256_mul_ps(_mm256_mul_ps(oneMinusBeta2, gi), gi));
    __m256 denominator =
        _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), rootCorrection2), eps);
    pi = _mm256_sub_ps(pi,
                       _mm256_div_ps(_mm256_mul_ps(stepSize, mi), denominator));
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  adamPortable(c, g + i, p + i, m + i, v + i, n - i);
}
#endif

// Elements [begin, end): the gradient converted to f32 a chunk at a time,
// the 16-bit copy written after each chunk.
void updateRange(const AdamStepConstants &c, AdamLoop loop, const Tensor &grad,
                 float *p, float *m, float *v, const Tensor *param16,
                 int64_t begin, int64_t end) {
  std::vector<float> buffer(grad.dtype == DType::F32 ? 0 : kChunk);
  for (int64_t done = begin; done < end; done += kChunk) {
    int64_t count = std::min(kChunk, end - done);
    const float *g = buffer.data();
    if (grad.dtype == DType::F32)
      g = grad.f32() + done;
    else
      cpu::loadF32(grad, done, count, buffer.data());
    loop(c, g, p + done, m + done, v + done, count);
    if (param16)
      cpu::storeF32(*param16, done, count, p + done);
  }
}

} // namespace

bool hostAdamUsesAvx2() {
#ifdef ZEROC_HOST_ADAM_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

Status hostAdamUpdate(const cpu::AdamSettings &settings, int64_t step,
                      const Tensor &grad, const Tensor &master,
                      const Tensor &expAvg, const Tensor &expAvgSq,
                      const Tensor *param16, const HostAdamOptions &options) {
  if (Status s =
          cpu::checkAdamUpdate(step, grad, master, expAvg, expAvgSq, param16);
      !s.ok())
    return s;
  AdamStepConstants c = cpu::adamStepConstants(settings, step);
  AdamLoop loop = adamPortable;
#ifdef ZEROC_HOST_ADAM_AVX2
  if (options.simd && hostAdamUsesAvx2())
    loop = adamAvx2;
#endif
  int64_t n = grad.numel();
  int64_t threads = options.threads
                        ? options.threads
                        : std::max(1u, std::thread::hardware_concurrency());
  threads = std::clamp<int64_t>(n / kMinPerThread, 1, threads);
  int64_t perThread = (n + threads - 1) / threads;
  perThread =
      (perThread + kRangeAlignment - 1) / kRangeAlignment * kRangeAlignment;

  float *p = master.f32(), *m = expAvg.f32(), *v = expAvgSq.f32();
  auto run = [&](int64_t begin) {
    updateRange(c, loop, grad, p, m, v, param16, begin,
                std::min(n, begin + perThread));
  };
  std::vector<std::thread> workers;
  std::vector<int64_t> leftover;
  for (int64_t begin = perThread; begin < n; begin += perThread) {
    try {
      workers.emplace_back(run, begin);
    } catch (const std::system_error &) {
      leftover.push_back(begin); // no thread to be had: run it here
    }
  }
  run(0);
  for (int64_t begin : leftover)
    run(begin);
  for (std::thread &w : workers)
    w.join();
  return {};
}

} // namespace zeroc::cuda
