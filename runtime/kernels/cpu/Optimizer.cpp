//===- Optimizer.cpp - Adam / AdamW, gradient clipping, loss scaling ------===//
//
// Compiled with -ffp-contract=off: every multiply and add of Adam rounds on
// its own, in the portable loop and the AVX2 one alike, so they agree bit
// for bit with each other and with the CUDA kernel.
//
//===----------------------------------------------------------------------===//

#include "cpu/Optimizer.h"
#include "cpu/Parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ZEROC_ADAM_AVX2 1
#include <immintrin.h>
#endif

namespace zeroc::cpu {

namespace {

constexpr int64_t kChunk = 4096;

std::string checkState(const char *name, const Tensor &t, int64_t numel) {
  if (t.dtype != DType::F32 || t.numel() != numel)
    return std::string("adam_update: ") + name + " must be f32 with " +
           std::to_string(numel) + " elements, found " + describe(t);
  return checkFloat("adam_update", name, t);
}

constexpr int64_t kMinPerThread = int64_t(1) << 16;
constexpr int64_t kRangeAlignment = 64; // elements: whole cache lines

using AdamLoop = void (*)(const AdamStepConstants &, const float *, float *,
                          float *, float *, int64_t);

void adamPortable(const AdamStepConstants &c, const float *g, float *p,
                  float *m, float *v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    adamElement(c, g[i], p[i], m[i], v[i]);
}

#ifdef ZEROC_ADAM_AVX2
// adamElement on 8 lanes: the same operations in the same order, each
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
  ScratchVector<float> buffer(grad.dtype == DType::F32 ? 0 : kChunk);
  for (int64_t done = begin; done < end; done += kChunk) {
    int64_t count = std::min(kChunk, end - done);
    const float *g = buffer.data();
    if (grad.dtype == DType::F32)
      g = grad.f32() + done;
    else
      loadF32(grad, done, count, buffer.data());
    loop(c, g, p + done, m + done, v + done, count);
    if (param16)
      storeF32(*param16, done, count, p + done);
  }
}

} // namespace

Status checkAdamUpdate(int64_t step, const Tensor &grad, const Tensor &master,
                       const Tensor &expAvg, const Tensor &expAvgSq,
                       const Tensor *param16) {
  int64_t n = grad.numel();
  ZEROC_RETURN_IF_ERROR(firstError({checkFloat("adam_update", "grad", grad),
                                    checkState("master", master, n),
                                    checkState("exp_avg", expAvg, n),
                                    checkState("exp_avg_sq", expAvgSq, n)}));
  if (param16) {
    ZEROC_RETURN_IF_ERROR(
        firstError({checkFloat("adam_update", "param", *param16)}));
    if (param16->numel() != n)
      return {"adam_update: param must have " + std::to_string(n) +
              " elements, found " + describe(*param16)};
  }
  if (step < 1)
    return {"adam_update: step must be >= 1, found " + std::to_string(step)};
  return {};
}

AdamStepConstants adamStepConstants(const AdamSettings &settings,
                                    int64_t step) {
  AdamStepConstants c;
  c.lr = float(settings.lr);
  c.beta1 = float(settings.beta1);
  c.beta2 = float(settings.beta2);
  c.eps = float(settings.eps);
  c.decay = float(settings.weightDecay);
  c.oneMinusBeta1 = 1.0f - c.beta1;
  c.oneMinusBeta2 = 1.0f - c.beta2;
  if (settings.biasCorrection) {
    c.stepSize =
        float(settings.lr / (1.0 - std::pow(settings.beta1, double(step))));
    c.rootCorrection2 =
        float(1.0 / std::sqrt(1.0 - std::pow(settings.beta2, double(step))));
  } else {
    c.stepSize = c.lr;
    c.rootCorrection2 = 1.0f;
  }
  c.adamw = settings.adamw;
  return c;
}

bool adamUsesAvx2() {
#ifdef ZEROC_ADAM_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

Status adamUpdate(const AdamSettings &settings, int64_t step,
                  const Tensor &grad, const Tensor &master,
                  const Tensor &expAvg, const Tensor &expAvgSq,
                  const Tensor *param16, const AdamOptions &options) {
  ZEROC_RETURN_IF_ERROR(
      checkAdamUpdate(step, grad, master, expAvg, expAvgSq, param16));
  AdamStepConstants c = adamStepConstants(settings, step);
  AdamLoop loop = adamPortable;
#ifdef ZEROC_ADAM_AVX2
  if (options.simd && adamUsesAvx2())
    loop = adamAvx2;
#endif
  int64_t n = grad.numel();
  int64_t threads = options.threads ? options.threads : cpu::threads();
  threads = std::clamp<int64_t>(n / kMinPerThread, 1, threads);
  int64_t perThread = (n + threads - 1) / threads;
  perThread =
      (perThread + kRangeAlignment - 1) / kRangeAlignment * kRangeAlignment;
  int64_t ranges = perThread > 0 ? (n + perThread - 1) / perThread : 0;

  // Each element's update is the same code whatever range holds it: the
  // same bits for any thread count.
  float *p = master.f32(), *m = expAvg.f32(), *v = expAvgSq.f32();
#pragma omp parallel for schedule(static, 1)                                   \
    num_threads(int(threads)) if (ranges > 1)
  for (int64_t r = 0; r < ranges; ++r) {
    int64_t begin = r * perThread;
    updateRange(c, loop, grad, p, m, v, param16, begin,
                std::min(n, begin + perThread));
  }
  return {};
}

float lambStepSize(const AdamSettings &settings, int64_t step) {
  if (!settings.biasCorrection)
    return float(settings.lr);
  return float(settings.lr *
               std::sqrt(1.0 - std::pow(settings.beta2, double(step))) /
               (1.0 - std::pow(settings.beta1, double(step))));
}

float lambTrustRatio(const LambSums &total, double maxCoeff, double minCoeff) {
  double w = std::sqrt(total.weight), u = std::sqrt(total.update);
  if (w == 0 || u == 0)
    return 1.0f;
  return float(std::clamp(w / u, minCoeff, maxCoeff));
}

Status lambMoments(const AdamSettings &settings, const Tensor &grad,
                   const Tensor &master, const Tensor &expAvg,
                   const Tensor &expAvgSq, LambSums &sums) {
  ZEROC_RETURN_IF_ERROR(
      checkAdamUpdate(1, grad, master, expAvg, expAvgSq, nullptr));
  AdamStepConstants c = adamStepConstants(settings, 1);
  float *p = master.f32(), *m = expAvg.f32(), *v = expAvgSq.f32();
  // Fixed chunks of kReduceChunk on the pool, their partial sums added in
  // chunk order: the same bits for any thread count.
  int64_t n = grad.numel();
  int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  std::vector<LambSums> partial(static_cast<size_t>(chunks));
  parallelFor(chunks, kReduceChunk, [&](int64_t chunk) {
    float g[kChunk];
    LambSums &part = partial[size_t(chunk)];
    int64_t end = std::min(n, (chunk + 1) * kReduceChunk);
    for (int64_t done = chunk * kReduceChunk; done < end; done += kChunk) {
      int64_t count = std::min(kChunk, end - done);
      loadF32(grad, done, count, g);
      for (int64_t i = 0; i < count; ++i) {
        int64_t j = done + i;
        m[j] = c.beta1 * m[j] + c.oneMinusBeta1 * g[i];
        v[j] = c.beta2 * v[j] + c.oneMinusBeta2 * g[i] * g[i];
        float u = lambUpdateElement(c.decay, c.eps, p[j], m[j], v[j]);
        part.weight += double(p[j]) * double(p[j]);
        part.update += double(u) * double(u);
      }
    }
  });
  sums = {};
  for (const LambSums &part : partial) {
    sums.weight += part.weight;
    sums.update += part.update;
  }
  return {};
}

Status lambApply(const AdamSettings &settings, int64_t step, float trustRatio,
                 const Tensor &master, const Tensor &expAvg,
                 const Tensor &expAvgSq, const Tensor *param16) {
  ZEROC_RETURN_IF_ERROR(
      checkAdamUpdate(step, master, master, expAvg, expAvgSq, param16));
  AdamStepConstants c = adamStepConstants(settings, step);
  float scale = lambStepSize(settings, step) * trustRatio;
  float *p = master.f32(), *m = expAvg.f32(), *v = expAvgSq.f32();
  int64_t n = master.numel();
  parallelChunks(n, kChunk, [&](int64_t begin, int64_t count) {
    for (int64_t j = begin; j < begin + count; ++j)
      p[j] -= scale * lambUpdateElement(c.decay, c.eps, p[j], m[j], v[j]);
  });
  if (param16)
    storeF32(*param16, 0, n, p);
  return {};
}

double sumOfSquares(const Tensor &grad) {
  // Fixed chunks, partial sums in chunk order (cpu/Parallel.h).
  return parallelSum(grad.numel(), [&](int64_t begin, int64_t count) {
    float g[kChunk];
    double sum = 0.0;
    for (int64_t done = begin; done < begin + count; done += kChunk) {
      int64_t k = std::min(kChunk, begin + count - done);
      loadF32(grad, done, k, g);
      for (int64_t i = 0; i < k; ++i)
        sum += double(g[i]) * double(g[i]);
    }
    return sum;
  });
}

float clipCoefficient(double totalSumOfSquares, double maxNorm) {
  double norm = std::sqrt(totalSumOfSquares);
  if (std::isnan(norm))
    return std::nanf("");
  return float(maxNorm / std::max(norm, maxNorm));
}

Status checkScaleInPlace(const Tensor &t) {
  return firstError({checkFloat("scale", "tensor", t)});
}

Status scaleInPlace(const Tensor &t, float factor) {
  ZEROC_RETURN_IF_ERROR(checkScaleInPlace(t));
  parallelChunks(t.numel(), kChunk, [&](int64_t done, int64_t count) {
    float x[kChunk];
    loadF32(t, done, count, x);
    for (int64_t i = 0; i < count; ++i)
      x[i] *= factor;
    storeF32(t, done, count, x);
  });
  return {};
}

Status checkUnscaleGrads(const Tensor &grad, double lossScale) {
  ZEROC_RETURN_IF_ERROR(
      firstError({checkFloat("unscale_grads", "grad", grad)}));
  if (!(lossScale > 0.0))
    return {"unscale_grads: the loss scale must be positive, found " +
            std::to_string(lossScale)};
  return {};
}

Status unscaleGrads(const Tensor &grad, double lossScale, bool &overflow) {
  ZEROC_RETURN_IF_ERROR(checkUnscaleGrads(grad, lossScale));
  float scale = float(lossScale);
  std::atomic<bool> found{false};
  parallelChunks(grad.numel(), kChunk, [&](int64_t done, int64_t count) {
    float g[kChunk];
    loadF32(grad, done, count, g);
    for (int64_t i = 0; i < count; ++i)
      g[i] /= scale;
    storeF32(grad, done, count, g);
    // Checked as stored: a value that overflows its 16-bit storage counts.
    for (int64_t i = 0; i < count; ++i)
      if (!std::isfinite(roundToDType(g[i], grad.dtype)))
        found.store(true, std::memory_order_relaxed);
  });
  if (found.load())
    overflow = true;
  return {};
}

LossScaleState initialLossScale(const LossScaleSettings &settings) {
  LossScaleState state;
  state.scale = settings.staticLossScale > 0.0
                    ? settings.staticLossScale
                    : std::ldexp(1.0, int(settings.initialScalePower));
  state.hysteresisLeft = settings.hysteresis;
  return state;
}

void updateLossScale(const LossScaleSettings &settings, bool overflow,
                     LossScaleState &state) {
  if (settings.staticLossScale > 0.0) {
    ++state.iteration;
    return;
  }
  if (overflow) {
    if (settings.hysteresis <= 1 || state.hysteresisLeft <= 1)
      state.scale = std::max(state.scale / 2.0, settings.minLossScale);
    else
      --state.hysteresisLeft;
    state.lastOverflow = state.iteration;
  } else if (settings.lossScaleWindow > 0 &&
             (state.iteration - state.lastOverflow) %
                     settings.lossScaleWindow ==
                 0) {
    state.hysteresisLeft = settings.hysteresis;
    state.scale *= 2.0;
  }
  ++state.iteration;
}

} // namespace zeroc::cpu
