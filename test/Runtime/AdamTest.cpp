//===- AdamTest.cpp - Adam's vector loop and threads against its plain loop ==//
//
// cpu::adamUpdate must give the bits of its portable loop on one thread
// (adamElement, element by element, as the kernel's description states it;
// KernelTest checks that against hand computations) whatever its options:
// master weights, both moments and the 16-bit copy, for Adam and AdamW,
// every gradient and parameter dtype, any thread count, with the AVX-512,
// AVX2 (fused and chunked) and portable loops (those the CPU has), over
// sizes that leave partial vectors, chunks and thread ranges. And, with and
// without bias correction, the update against an f64 transcription of
// DeepSpeed's FusedAdam step written here from DeepSpeed's source, not from the
// kernel.
//
//===----------------------------------------------------------------------===//

#include "cpu/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>

using namespace zeroc;
using runtime::Status;
using runtime::Tensor;

/// The reference: the portable loop on the calling thread.
const cpu::AdamOptions kPlain{1, cpu::AdamLoop::Portable};

namespace {

/// A host tensor the test owns; moves keep `view` pointing at `storage`.
struct Owned {
  std::vector<uint32_t> storage;
  Tensor view;

  explicit Owned(int64_t n, DType dtype = DType::F32) {
    view.dtype = dtype;
    view.shape = {n};
    storage.assign(view.bytes() / 4 + 1, 0);
    view.data = storage.data();
  }
  Owned(Owned &&) = default;
  Owned(const Owned &other) : Owned(other.view.numel(), other.view.dtype) {
    storage = other.storage;
  }
  Owned &operator=(const Owned &) = delete;
  bool sameBits(const Owned &other) const {
    return view.dtype == other.view.dtype &&
           std::memcmp(view.data, other.view.data, size_t(view.bytes())) == 0;
  }
};

Owned random(int64_t n, DType dtype, unsigned seed, float lo, float hi) {
  Owned t(n, dtype);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  cpu::storeF32(t.view, 0, n, v.data());
  return t;
}

/// The state of one parameter: gradient, master, moments, 16-bit copy.
struct State {
  Owned grad, master, m, v, param16;
  State(int64_t n, DType gradType, DType paramType, unsigned seed)
      : grad(random(n, gradType, seed, -1.0f, 1.0f)),
        master(random(n, DType::F32, seed + 1, -1.0f, 1.0f)),
        m(random(n, DType::F32, seed + 2, -0.1f, 0.1f)),
        v(random(n, DType::F32, seed + 3, 0.0f, 0.01f)), param16(n, paramType) {
  }
};

void expectSameBits(const State &a, const State &b) {
  EXPECT_TRUE(a.master.sameBits(b.master)) << "master";
  EXPECT_TRUE(a.m.sameBits(b.m)) << "exp_avg";
  EXPECT_TRUE(a.v.sameBits(b.v)) << "exp_avg_sq";
  EXPECT_TRUE(a.param16.sameBits(b.param16)) << "param";
}

TEST(Adam, EveryOptionGivesThePlainLoopsBits) {
  // 200003 elements: 3 threads of 64 Ki and a ragged tail.
  for (int64_t n :
       {int64_t(0), int64_t(1), int64_t(13), int64_t(4100), int64_t(200003)})
    for (bool adamw : {true, false})
      for (DType gradType : {DType::F32, DType::BF16, DType::F16})
        for (DType paramType : {DType::BF16, DType::F16})
          for (cpu::AdamLoop loop :
               {cpu::AdamLoop::Avx512, cpu::AdamLoop::Avx2,
                cpu::AdamLoop::Avx2Chunked, cpu::AdamLoop::Portable})
            for (unsigned threads : {1u, 3u, 0u}) {
              SCOPED_TRACE(std::to_string(n) + (adamw ? " adamw" : " adam") +
                           " grad " + std::string(dtypeName(gradType)) +
                           " param " + std::string(dtypeName(paramType)) +
                           " loop " +
                           cpu::adamLoopName(cpu::adamLoopFor(loop)) +
                           " threads " + std::to_string(threads));
              cpu::AdamSettings settings;
              settings.lr = 2e-3;
              settings.weightDecay = 0.05;
              settings.adamw = adamw;
              State expected(n, gradType, paramType, 7);
              State actual(n, gradType, paramType, 7);
              for (int64_t step = 1; step <= 3; ++step) {
                Status s = cpu::adamUpdate(settings, step, expected.grad.view,
                                           expected.master.view,
                                           expected.m.view, expected.v.view,
                                           &expected.param16.view, kPlain);
                ASSERT_TRUE(s.ok()) << s.error;
                s = cpu::adamUpdate(settings, step, actual.grad.view,
                                    actual.master.view, actual.m.view,
                                    actual.v.view, &actual.param16.view,
                                    {threads, loop});
                ASSERT_TRUE(s.ok()) << s.error;
              }
              expectSameBits(actual, expected);
            }
}

TEST(Adam, WithoutAParameterCopy) {
  cpu::AdamSettings settings;
  State expected(70000, DType::F32, DType::BF16, 11);
  State actual(70000, DType::F32, DType::BF16, 11);
  ASSERT_TRUE(cpu::adamUpdate(settings, 1, expected.grad.view,
                              expected.master.view, expected.m.view,
                              expected.v.view, nullptr, kPlain)
                  .ok());
  ASSERT_TRUE(cpu::adamUpdate(settings, 1, actual.grad.view, actual.master.view,
                              actual.m.view, actual.v.view, nullptr)
                  .ok());
  expectSameBits(actual, expected);
}

TEST(Adam, EveryOptionRejectsAlike) {
  cpu::AdamSettings settings;
  Owned grad(8), master(8, DType::BF16), m(8), v(8), wrong(7), param(6);
  auto both = [&](const Tensor &g, const Tensor &p, const Tensor &mm,
                  const Tensor &vv, const Tensor *p16, int64_t step) {
    Status expected =
        cpu::adamUpdate(settings, step, g, p, mm, vv, p16, kPlain);
    Status actual = cpu::adamUpdate(settings, step, g, p, mm, vv, p16);
    EXPECT_FALSE(expected.ok());
    EXPECT_EQ(actual.error, expected.error);
  };
  both(grad.view, master.view, m.view, v.view, nullptr, 1);
  Owned good(8);
  both(grad.view, good.view, wrong.view, v.view, nullptr, 1);
  both(grad.view, good.view, m.view, v.view, &param.view, 1);
  both(grad.view, good.view, m.view, v.view, nullptr, 0);
}

/// One element of DeepSpeed's FusedAdam step (csrc/adam/multi_tensor_adam.cu,
/// multi_tensor_adam_cuda and AdamFunctor), in f64: bias_correction1 =
/// 1 - beta1^t and bias_correction2 = 1 - beta2^t, both 1 when
/// bias_correction is off;
///   L2 (ADAM_MODE_0):    g += decay p
///   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
///   denom = sqrt(v / bias_correction2) + eps
///   update = (m / bias_correction1) / denom
///   AdamW (ADAM_MODE_1): update += decay p
///   p -= lr update
/// DeepSpeedCPUAdam (csrc/includes/cpu_adam.h, cpu_adam_impl.cpp) computes the
/// same with the corrections folded into its step size and the root of v
/// (and 1 for both when bias_correction is off).
struct FusedAdamReference {
  double p, m = 0, v = 0;
  void step(const cpu::AdamSettings &s, int t, double g) {
    double correction1 = 1, correction2 = 1;
    if (s.biasCorrection) {
      correction1 = 1 - std::pow(s.beta1, t);
      correction2 = 1 - std::pow(s.beta2, t);
    }
    if (!s.adamw)
      g += s.weightDecay * p;
    m = s.beta1 * m + (1 - s.beta1) * g;
    v = s.beta2 * v + (1 - s.beta2) * g * g;
    double denom = std::sqrt(v / correction2) + s.eps;
    double update = (m / correction1) / denom;
    if (s.adamw)
      update += s.weightDecay * p;
    p -= s.lr * update;
  }
};

/// Settings every f32 kernel holds exactly (powers of two and their
/// complements), so the reference and the kernel start from the same
/// numbers: 1 - beta1 = 1/8 and 1 - beta2 = 1/1024, which makes the
/// uncorrected first step (1 - beta1) / sqrt(1 - beta2) = 4 times the
/// corrected one.
cpu::AdamSettings exactSettings(bool adamw, bool biasCorrection) {
  cpu::AdamSettings s;
  s.lr = 1.0 / 128;
  s.beta1 = 0.875;
  s.beta2 = 1.0 - 1.0 / 1024;
  s.eps = 1e-8;
  s.weightDecay = 1.0 / 16;
  s.adamw = adamw;
  s.biasCorrection = biasCorrection;
  return s;
}

TEST(Adam, MatchesDeepSpeedsStepWithAndWithoutBiasCorrection) {
  // 21 elements: two AVX2 vectors and a tail. Weights in [-1, 1],
  // gradients of either sign away from 0 (eps plays no part).
  const int64_t n = 21;
  std::vector<float> p0(n), grads[3];
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = float(i - 10) / 10;
    for (int t = 0; t < 3; ++t)
      grads[t].push_back(
          float((i % 2 ? 1 : -1) * (0.05 + 0.1 * ((i + t) % 7))));
  }
  for (bool adamw : {true, false})
    for (bool biasCorrection : {true, false}) {
      SCOPED_TRACE(std::string(adamw ? "adamw" : "adam") +
                   (biasCorrection ? " corrected" : " uncorrected"));
      cpu::AdamSettings s = exactSettings(adamw, biasCorrection);
      Owned master(n), m(n), v(n), plainMaster(n), plainM(n), plainV(n);
      cpu::storeF32(master.view, 0, n, p0.data());
      cpu::storeF32(plainMaster.view, 0, n, p0.data());
      std::vector<FusedAdamReference> ref;
      for (float p : p0)
        ref.push_back({p});
      for (int t = 1; t <= 3; ++t) {
        Owned grad(n);
        cpu::storeF32(grad.view, 0, n, grads[t - 1].data());
        ASSERT_TRUE(cpu::adamUpdate(s, t, grad.view, master.view, m.view,
                                    v.view, nullptr)
                        .ok());
        ASSERT_TRUE(cpu::adamUpdate(s, t, grad.view, plainMaster.view,
                                    plainM.view, plainV.view, nullptr, kPlain)
                        .ok());
        for (int64_t i = 0; i < n; ++i) {
          ref[i].step(s, t, grads[t - 1][i]);
          // f32 against f64 on the same inputs: each step rounds p (|p| <=
          // 1.2) once, u = 6e-8 of it, and subtracts a step of at most
          // lr 6.2 = 0.048 (uncorrected at t = 3, |m| / sqrt(v) <=
          // sqrt(sum (1 - beta1)^2 beta1^2k / (1 - beta2)) = 6.1 by
          // Cauchy-Schwarz, plus the decay) carrying about 15 roundings
          // (4.3e-8 in all); m and v stay below 0.3 and 0.002 with a few
          // roundings each. Three steps: 3 x (7.2e-8 + 4.3e-8) = 3.5e-7,
          // hence 5e-7. Measured: 1.3e-7 (p), 2.0e-8 (m), 1.1e-10 (v).
          EXPECT_NEAR(master.view.f32()[i], ref[i].p, 5e-7)
              << "element " << i << " step " << t;
          EXPECT_NEAR(m.view.f32()[i], ref[i].m, 5e-7) << "element " << i;
          EXPECT_NEAR(v.view.f32()[i], ref[i].v, 5e-7) << "element " << i;
        }
      }
      // The vector loop and threads, uncorrected too, give the plain bits.
      EXPECT_TRUE(master.sameBits(plainMaster));
      EXPECT_TRUE(m.sameBits(plainM));
      EXPECT_TRUE(v.sameBits(plainV));
    }
}

TEST(Adam, UncorrectedFirstStepIsLargerByTheRootOfTheMoments) {
  // No decay: at t = 1, m = (1 - beta1) g and v = (1 - beta2) g^2, so the
  // corrected step is lr sign(g) and the uncorrected one
  // lr (1 - beta1) / sqrt(1 - beta2) sign(g) = 4 lr sign(g) here (3.16 lr
  // with DeepSpeed's default betas), both off by lr eps / |g| at most.
  for (bool biasCorrection : {true, false}) {
    cpu::AdamSettings s = exactSettings(true, biasCorrection);
    s.weightDecay = 0;
    Owned grad(2), master(2), m(2), v(2);
    float g[2] = {0.5f, -2.0f}, p[2] = {1.0f, 1.0f};
    cpu::storeF32(grad.view, 0, 2, g);
    cpu::storeF32(master.view, 0, 2, p);
    ASSERT_TRUE(
        cpu::adamUpdate(s, 1, grad.view, master.view, m.view, v.view, nullptr)
            .ok());
    double step = biasCorrection ? s.lr : 4 * s.lr;
    EXPECT_NEAR(master.view.f32()[0], 1.0 - step, 1e-7) << biasCorrection;
    EXPECT_NEAR(master.view.f32()[1], 1.0 + step, 1e-7) << biasCorrection;
  }
  // The per-step constants DeepSpeed's CPU Adam uses: without correction,
  // lr and 1 at every step.
  for (int64_t t : {1, 2, 3, 1000}) {
    cpu::AdamStepConstants c =
        cpu::adamStepConstants(exactSettings(true, false), t);
    EXPECT_EQ(c.stepSize, 1.0f / 128);
    EXPECT_EQ(c.rootCorrection2, 1.0f);
  }
  cpu::AdamStepConstants c =
      cpu::adamStepConstants(exactSettings(true, true), 1);
  EXPECT_EQ(c.stepSize, 1.0f / 16);    // lr / (1 - beta1) = 2^-7 / 2^-3
  EXPECT_EQ(c.rootCorrection2, 32.0f); // 1 / sqrt(2^-10)
}

TEST(Adam, SpecialValuesGiveThePlainLoopsBits) {
  // The vector loops round the bf16 copy and widen the bf16 gradient in
  // registers: masters on bf16 ties (to even, both ways), just below the
  // overflow to infinity, subnormal, signed zeros, infinities, quiet and
  // signalling NaNs with payloads, and gradients of the same kinds, must
  // give what the portable loop (adamElement, then floatToBf16) gives. With
  // lr 0 and no decay most masters stay as they are, so the rounding sees
  // them; with lr 1e-3 they move.
  const uint32_t masters[] = {
      0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f808001u, 0x7f7fffffu,
      0x7f7f7fffu, 0xff7fffffu, 0x00000001u, 0x80400000u, 0x00000000u,
      0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fa00001u,
      0xffc12345u, 0x3f800000u, 0x40490fdbu};
  const uint32_t grads[] = {0x3f800000u, 0x7f800000u, 0x7fc00001u,
                            0x00000001u, 0x80000000u, 0xbf000000u};
  const int64_t n = 16 * 5 + 7; // Vectors and a tail.
  for (bool adamw : {true, false})
    for (DType gradType : {DType::F32, DType::BF16})
      for (double lr : {0.0, 1e-3})
        for (cpu::AdamLoop loop : {cpu::AdamLoop::Avx512, cpu::AdamLoop::Avx2,
                                   cpu::AdamLoop::Avx2Chunked}) {
          SCOPED_TRACE(std::string(adamw ? "adamw" : "adam") + " grad " +
                       std::string(dtypeName(gradType)) + " lr " +
                       std::to_string(lr) + " loop " +
                       cpu::adamLoopName(cpu::adamLoopFor(loop)));
          cpu::AdamSettings settings;
          settings.lr = lr;
          settings.weightDecay = 0;
          settings.adamw = adamw;
          State expected(n, gradType, DType::BF16, 5);
          for (int64_t i = 0; i < n; ++i) {
            std::memcpy(expected.master.view.f32() + i,
                        &masters[i % std::size(masters)], 4);
            float g;
            std::memcpy(&g, &grads[(i / 3) % std::size(grads)], 4);
            cpu::storeF32(expected.grad.view, i, 1, &g);
          }
          State actual = expected;
          ASSERT_TRUE(cpu::adamUpdate(settings, 1, expected.grad.view,
                                      expected.master.view, expected.m.view,
                                      expected.v.view, &expected.param16.view,
                                      kPlain)
                          .ok());
          ASSERT_TRUE(cpu::adamUpdate(settings, 1, actual.grad.view,
                                      actual.master.view, actual.m.view,
                                      actual.v.view, &actual.param16.view,
                                      {1, loop})
                          .ok());
          expectSameBits(actual, expected);
          // The copy is the updated master rounded by Float16.h's definition.
          for (int64_t i = 0; i < n; ++i) {
            float p = expected.master.view.f32()[i];
            if (std::isfinite(p)) {
              EXPECT_EQ(static_cast<uint16_t *>(actual.param16.view.data)[i],
                        floatToBf16(p))
                  << "element " << i;
            }
          }
        }
}

} // namespace
