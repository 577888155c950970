//===- Optimizer.cpp - Adam / AdamW, gradient clipping, loss scaling ------===//
//
// Compiled with -ffp-contract=off: every multiply and add of Adam rounds on
// its own, in the portable loop and the AVX2 and AVX-512 ones alike, so they
// agree bit for bit with each other and with the CUDA kernel.
//
//===----------------------------------------------------------------------===//

#include "cpu/Optimizer.h"
#include "cpu/CpuFeatures.h"
#include "cpu/Parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#ifdef ZEROC_CPU_X86
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

using ElementLoop = void (*)(const AdamStepConstants &, const float *, float *,
                             float *, float *, int64_t);

void adamPortable(const AdamStepConstants &c, const float *g, float *p,
                  float *m, float *v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    adamElement(c, g[i], p[i], m[i], v[i]);
}

// Elements [begin, end) with an f32 element loop: a 16-bit gradient widened
// a chunk at a time, the 16-bit copy written after each chunk.
void updateRangeChunked(const AdamStepConstants &c, ElementLoop loop,
                        const Tensor &grad, float *p, float *m, float *v,
                        const Tensor *param16, int64_t begin, int64_t end) {
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

void updateRangePortable(const AdamStepConstants &c, const Tensor &grad,
                         float *p, float *m, float *v, const Tensor *param16,
                         int64_t begin, int64_t end) {
  updateRangeChunked(c, adamPortable, grad, p, m, v, param16, begin, end);
}

#ifdef ZEROC_CPU_X86
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

void updateRangeAvx2Chunked(const AdamStepConstants &c, const Tensor &grad,
                            float *p, float *m, float *v, const Tensor *param16,
                            int64_t begin, int64_t end) {
  updateRangeChunked(c, adamAvx2, grad, p, m, v, param16, begin, end);
}

// A loop over f32 or bf16 gradients (GradBf16) writing no copy or a bf16
// one (CopyBf16) in the same pass: fusedLoops[GradBf16][CopyBf16].
using FusedLoop = void (*)(const AdamStepConstants &, const void *, float *,
                           float *, float *, uint16_t *, int64_t);

// Elements [begin, end) with a fused loop where the dtypes allow (f32 or
// bf16 gradients, no copy or a bf16 one: the mixed-precision cases), else
// (f16) with `chunked` through the chunked conversions.
void updateRangeFused(const FusedLoop fusedLoops[2][2], ElementLoop chunked,
                      const AdamStepConstants &c, const Tensor &grad, float *p,
                      float *m, float *v, const Tensor *param16, int64_t begin,
                      int64_t end) {
  bool gradBf16 = grad.dtype == DType::BF16;
  bool copyBf16 = param16 && param16->dtype == DType::BF16;
  if ((!gradBf16 && grad.dtype != DType::F32) || (param16 && !copyBf16)) {
    updateRangeChunked(c, chunked, grad, p, m, v, param16, begin, end);
    return;
  }
  const void *g = static_cast<const char *>(grad.data) +
                  begin * bytesPerElement(grad.dtype);
  uint16_t *copy =
      copyBf16 ? static_cast<uint16_t *>(param16->data) + begin : nullptr;
  fusedLoops[gradBf16][copyBf16](c, g, p + begin, m + begin, v + begin, copy,
                                 end - begin);
}

#define ZEROC_AVX2 __attribute__((target("avx2")))

// bf16 to f32 on 8 lanes: the 16 bits become the top half (bf16ToFloat).
ZEROC_AVX2 inline __m256 loadBf16x8(const uint16_t *src) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// f32 to bf16 on 8 lanes as floatToBf16 computes it: round to nearest even
// by integer addition, NaN kept quiet.
ZEROC_AVX2 inline void storeBf16x8(uint16_t *dst, __m256 x) {
  __m256i u = _mm256_castps_si256(x);
  // |x|'s bits are a non-negative int32: the signed compare is unsigned's.
  __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                         _mm256_set1_epi32(0x7f800000));
  __m256i high = _mm256_srli_epi32(u, 16);
  __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))),
      16);
  __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);
  // Every lane holds at most 0xffff, so the saturating pack is exact; it
  // packs within 128-bit halves ([b0-3 b0-3 | b4-7 b4-7]), the permute
  // takes quadwords 0 and 2.
  __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(dst),
                   _mm256_castsi256_si128(packed));
}

// adamAvx2 with the gradient read and the copy written in registers.
template <bool GradBf16, bool CopyBf16>
ZEROC_AVX2 void adamAvx2Fused(const AdamStepConstants &c, const void *gradData,
                              float *p, float *m, float *v, uint16_t *copy,
                              int64_t n) {
  const float *g32 = static_cast<const float *>(gradData);
  const uint16_t *g16 = static_cast<const uint16_t *>(gradData);
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
    __m256 gi = GradBf16 ? loadBf16x8(g16 + i) : _mm256_loadu_ps(g32 + i);
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
    if (CopyBf16)
      storeBf16x8(copy + i, pi);
  }
  for (; i < n; ++i) {
    adamElement(c, GradBf16 ? bf16ToFloat(g16[i]) : g32[i], p[i], m[i], v[i]);
    if (CopyBf16)
      copy[i] = floatToBf16(p[i]);
  }
}

const FusedLoop kAvx2Loops[2][2] = {
    {adamAvx2Fused<false, false>, adamAvx2Fused<false, true>},
    {adamAvx2Fused<true, false>, adamAvx2Fused<true, true>}};

void updateRangeAvx2(const AdamStepConstants &c, const Tensor &grad, float *p,
                     float *m, float *v, const Tensor *param16, int64_t begin,
                     int64_t end) {
  updateRangeFused(kAvx2Loops, adamAvx2, c, grad, p, m, v, param16, begin, end);
}

#define ZEROC_AVX512 __attribute__((target("avx512f")))
// GCC 12 warns of the `_mm512_undefined_epi32()` pass-through operand of its
// own AVX-512 intrinsics (a false positive: the mask is all ones).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// bf16 to f32: the 16 bits become the top half (bf16ToFloat).
ZEROC_AVX512 inline __m512 loadBf16x16(const uint16_t *src) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// f32 to bf16 as floatToBf16 computes it: round to nearest even by integer
// addition, NaN kept quiet.
ZEROC_AVX512 inline void storeBf16x16(uint16_t *dst, __m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
      _mm512_set1_epi32(0x7f800000));
  __m512i high = _mm512_srli_epi32(u, 16);
  __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
      16);
  __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  __m512i bits = _mm512_mask_blend_epi32(nan, rounded, quiet);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst),
                      _mm512_cvtepi32_epi16(bits));
}

// adamElement on 16 lanes, the AVX2 loop's operations. The gradient is f32
// or bf16 (GradBf16) and the 16-bit copy none or bf16 (CopyBf16), converted
// in registers; the tail runs adamElement with the scalar conversions.
template <bool GradBf16, bool CopyBf16>
ZEROC_AVX512 void adamAvx512(const AdamStepConstants &c, const void *gradData,
                             float *p, float *m, float *v, uint16_t *copy,
                             int64_t n) {
  const float *g32 = static_cast<const float *>(gradData);
  const uint16_t *g16 = static_cast<const uint16_t *>(gradData);
  const __m512 lrDecay = _mm512_set1_ps(c.lr * c.decay);
  const __m512 decay = _mm512_set1_ps(c.decay);
  const __m512 beta1 = _mm512_set1_ps(c.beta1);
  const __m512 beta2 = _mm512_set1_ps(c.beta2);
  const __m512 oneMinusBeta1 = _mm512_set1_ps(c.oneMinusBeta1);
  const __m512 oneMinusBeta2 = _mm512_set1_ps(c.oneMinusBeta2);
  const __m512 stepSize = _mm512_set1_ps(c.stepSize);
  const __m512 rootCorrection2 = _mm512_set1_ps(c.rootCorrection2);
  const __m512 eps = _mm512_set1_ps(c.eps);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 gi = GradBf16 ? loadBf16x16(g16 + i) : _mm512_loadu_ps(g32 + i);
    __m512 pi = _mm512_loadu_ps(p + i);
    __m512 mi = _mm512_loadu_ps(m + i);
    __m512 vi = _mm512_loadu_ps(v + i);
    if (c.adamw)
      pi = _mm512_sub_ps(pi, _mm512_mul_ps(lrDecay, pi));
    else
      gi = _mm512_add_ps(gi, _mm512_mul_ps(decay, pi));
    mi = _mm512_add_ps(_mm512_mul_ps(beta1, mi),
                       _mm512_mul_ps(oneMinusBeta1, gi));
    vi = _mm512_add_ps(_mm512_mul_ps(beta2, vi),
                       _mm512_mul_ps(_mm512_mul_ps(oneMinusBeta2, gi), gi));
    __m512 denominator =
        _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vi), rootCorrection2), eps);
    pi = _mm512_sub_ps(pi,
                       _mm512_div_ps(_mm512_mul_ps(stepSize, mi), denominator));
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    if (CopyBf16)
      storeBf16x16(copy + i, pi);
  }
  for (; i < n; ++i) {
    adamElement(c, GradBf16 ? bf16ToFloat(g16[i]) : g32[i], p[i], m[i], v[i]);
    if (CopyBf16)
      copy[i] = floatToBf16(p[i]);
  }
}

ZEROC_AVX512 void adamAvx512F32(const AdamStepConstants &c, const float *g,
                                float *p, float *m, float *v, int64_t n) {
  adamAvx512<false, false>(c, g, p, m, v, nullptr, n);
}

const FusedLoop kAvx512Loops[2][2] = {
    {adamAvx512<false, false>, adamAvx512<false, true>},
    {adamAvx512<true, false>, adamAvx512<true, true>}};

void updateRangeAvx512(const AdamStepConstants &c, const Tensor &grad, float *p,
                       float *m, float *v, const Tensor *param16, int64_t begin,
                       int64_t end) {
  updateRangeFused(kAvx512Loops, adamAvx512F32, c, grad, p, m, v, param16,
                   begin, end);
}
#pragma GCC diagnostic pop
#endif

using RangeUpdate = void (*)(const AdamStepConstants &, const Tensor &, float *,
                             float *, float *, const Tensor *, int64_t,
                             int64_t);

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

AdamLoop adamLoopFor(AdamLoop requested) {
#ifdef ZEROC_CPU_X86
  if ((requested == AdamLoop::Best || requested == AdamLoop::Avx512) &&
      cpuHasAvx512())
    return AdamLoop::Avx512;
  if (requested == AdamLoop::Avx2Chunked && cpuHasAvx2())
    return AdamLoop::Avx2Chunked;
  if (requested != AdamLoop::Portable && cpuHasAvx2())
    return AdamLoop::Avx2;
#else
  (void)requested;
#endif
  return AdamLoop::Portable;
}

const char *adamLoopName(AdamLoop loop) {
  switch (loop) {
  case AdamLoop::Best:
    return "best";
  case AdamLoop::Avx512:
    return "avx512";
  case AdamLoop::Avx2:
    return "avx2";
  case AdamLoop::Avx2Chunked:
    return "avx2-chunked";
  case AdamLoop::Portable:
    return "portable";
  }
  return "?";
}

Status adamUpdate(const AdamSettings &settings, int64_t step,
                  const Tensor &grad, const Tensor &master,
                  const Tensor &expAvg, const Tensor &expAvgSq,
                  const Tensor *param16, const AdamOptions &options) {
  ZEROC_RETURN_IF_ERROR(
      checkAdamUpdate(step, grad, master, expAvg, expAvgSq, param16));
  AdamStepConstants c = adamStepConstants(settings, step);
  RangeUpdate update = updateRangePortable;
#ifdef ZEROC_CPU_X86
  AdamLoop loop = adamLoopFor(options.loop);
  if (loop == AdamLoop::Avx512)
    update = updateRangeAvx512;
  else if (loop == AdamLoop::Avx2)
    update = updateRangeAvx2;
  else if (loop == AdamLoop::Avx2Chunked)
    update = updateRangeAvx2Chunked;
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
  cpu::OmpEdges edges;
#pragma omp parallel for schedule(static, 1)                                   \
    num_threads(int(threads)) if (ranges > 1)
  for (int64_t r = 0; r < ranges; ++r) {
    edges.enter();
    int64_t begin = r * perThread;
    update(c, grad, p, m, v, param16, begin, std::min(n, begin + perThread));
    edges.leave();
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
