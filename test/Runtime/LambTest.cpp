//===- LambTest.cpp - LAMB's kernels against a float64 FusedLamb ----------===//
//
// cpu::lambMoments, lambTrustRatio and lambApply against a plain float64
// transcription of DeepSpeed's FusedLamb step (fused_lamb_cuda_kernel.cu:
// part 1's moments and norms, part 3's clamped trust ratio and update),
// written here independently of the kernels: over several steps, on a whole
// tensor and on the same tensor cut into shards whose sums are added (what
// the executor's all-reduce does under ZeRO), with both clamps reached, with
// and without bias correction.
//
//===----------------------------------------------------------------------===//

#include "cpu/Optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace zeroc;
using runtime::Tensor;

namespace {

struct Reference {
  std::vector<double> p, m, v;
};

/// One FusedLamb step in float64 (eps outside the root, grad_scale 1):
/// fused_lamb_cuda's step_size is lr sqrt(1 - beta2^t) / (1 - beta1^t) with
/// bias_correction and lr without it. FusedLamb's kernel takes beta1, beta2,
/// eps and the decay as float (fused_lamb_cuda's signature), and so do the
/// kernels here: the reference starts from the same rounded values. Otherwise 1
/// - beta2 alone would differ by 4.7e-5 relative (float(0.999) is 0.999
/// - 4.7e-8), and the test would measure that instead of the kernels'
/// arithmetic.
void referenceStep(const cpu::AdamSettings &s, double maxCoeff, double minCoeff,
                   int step, const std::vector<double> &g, Reference &r) {
  const double beta1 = float(s.beta1), beta2 = float(s.beta2),
               eps = float(s.eps), decay = float(s.weightDecay);
  double w2 = 0, u2 = 0;
  std::vector<double> u(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    r.m[i] = beta1 * r.m[i] + (1 - beta1) * g[i];
    r.v[i] = beta2 * r.v[i] + (1 - beta2) * g[i] * g[i];
    u[i] = r.m[i] / (std::sqrt(r.v[i]) + eps) + decay * r.p[i];
    w2 += r.p[i] * r.p[i];
    u2 += u[i] * u[i];
  }
  double coeff = 1.0;
  if (w2 != 0 && u2 != 0)
    coeff = std::min(maxCoeff, std::max(minCoeff, std::sqrt(w2 / u2)));
  double stepSize = s.lr;
  if (s.biasCorrection)
    stepSize = s.lr * std::sqrt(1 - std::pow(s.beta2, step)) /
               (1 - std::pow(s.beta1, step));
  for (size_t i = 0; i < g.size(); ++i)
    r.p[i] -= stepSize * coeff * u[i];
}

Tensor view(std::vector<float> &x, int64_t begin, int64_t n) {
  return Tensor{x.data() + begin, DType::F32, {n}};
}

/// Runs `steps` steps of the kernels with the parameter cut at `cuts`, and
/// the reference, and returns the largest |p - p_ref| / max |p_ref|.
double lambError(double weightScale, double maxCoeff, double minCoeff,
                 std::vector<int64_t> cuts, int steps = 5,
                 bool biasCorrection = true) {
  const int64_t n = 1000;
  cpu::AdamSettings s;
  s.lr = 1e-2;
  s.weightDecay = 0.01;
  s.biasCorrection = biasCorrection;
  std::mt19937 gen(7);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  Reference r{std::vector<double>(n), std::vector<double>(n, 0.0),
              std::vector<double>(n, 0.0)};
  for (int64_t i = 0; i < n; ++i)
    r.p[i] = p[i] = float(weightScale * dist(gen));
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(n);
  for (int step = 1; step <= steps; ++step) {
    std::vector<double> gd(n);
    for (int64_t i = 0; i < n; ++i)
      gd[i] = g[i] = float(0.1 * dist(gen));
    referenceStep(s, maxCoeff, minCoeff, step, gd, r);
    cpu::LambSums total;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      int64_t b = cuts[k], len = cuts[k + 1] - cuts[k];
      cpu::LambSums part;
      EXPECT_TRUE(cpu::lambMoments(s, view(g, b, len), view(p, b, len),
                                   view(m, b, len), view(v, b, len), part)
                      .ok());
      total.weight += part.weight;
      total.update += part.update;
    }
    float ratio = cpu::lambTrustRatio(total, maxCoeff, minCoeff);
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      int64_t b = cuts[k], len = cuts[k + 1] - cuts[k];
      EXPECT_TRUE(cpu::lambApply(s, step, ratio, view(p, b, len),
                                 view(m, b, len), view(v, b, len), nullptr)
                      .ok());
    }
  }
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(double(p[i]) - r.p[i]));
    scale = std::max(scale, std::abs(r.p[i]));
  }
  return worst / scale;
}

// f32 arithmetic against f64 from the same f32 hyperparameters, relative to
// max |p|, over 5 steps. Each step rounds p once (u = 2^-24 = 6e-8 of |p|)
// and subtracts an update of at most 3% of max |p| here (lr 1e-2 x the
// bias-corrected step <= 0.32 x r |u|: r |u| is ||p|| / ||u|| |u| unclamped,
// 1e-2 x 3.2 against weights of 3.5e-3 at min_coeff) that carries at most
// about 20 roundings (m and v over 5 steps, the root, the quotient, the
// step size and the ratio): 5 x (6e-8 + 0.03 x 20 x 6e-8) = 4.8e-7, hence
// 5e-7. Measured: 1.1e-7 within the clamp and with shards, 8.4e-8 at
// max_coeff, 6.8e-8 at min_coeff.
constexpr double kTolerance = 5e-7;

} // namespace

TEST(Lamb, MatchesFloat64FusedLambWithinTheClamp) {
  // Weights of about 0.5 and updates of about 1: the ratio is unclamped.
  EXPECT_LT(lambError(0.5, 10.0, 0.01, {}), kTolerance);
}

TEST(Lamb, ShardedSumsGiveTheWholeTensorsStep) {
  // Uneven shards, one of them empty-adjacent: the summed norms give the
  // whole tensor's ratio.
  EXPECT_LT(lambError(0.5, 10.0, 0.01, {1, 333, 334, 999}), kTolerance);
}

// bias_correction: false, FusedLamb's step_size = lr. The uncorrected step
// is lr r |u| where the corrected one is at most 0.32 of it (lr sqrt(1 -
// beta2^t) / (1 - beta1^t) is 0.32 lr at t = 1): 3.2 times the update of
// the tolerance's reasoning, 5 x (6e-8 + 0.1 x 20 x 6e-8) = 9e-7, hence
// 1e-6. Measured: 1.1e-7 within the clamp and with shards, 1.5e-7 at
// max_coeff, 1.4e-7 at min_coeff.
TEST(Lamb, MatchesFloat64FusedLambWithoutBiasCorrection) {
  EXPECT_LT(lambError(0.5, 10.0, 0.01, {}, 5, false), 1e-6);
  EXPECT_LT(lambError(0.5, 10.0, 0.01, {1, 333, 334, 999}, 5, false), 1e-6);
  EXPECT_LT(lambError(50.0, 10.0, 0.01, {500}, 5, false), 1e-6);
  EXPECT_LT(lambError(1e-3, 10.0, 0.01, {500}, 5, false), 1e-6);
  cpu::AdamSettings s;
  s.lr = 1e-2;
  s.biasCorrection = false;
  for (int64_t t : {1, 2, 3})
    EXPECT_EQ(cpu::lambStepSize(s, t), float(1e-2)) << t;
  // Corrected, the first step is lr sqrt(1 - 0.999) / (1 - 0.9): 0.316 lr.
  s.biasCorrection = true;
  EXPECT_FLOAT_EQ(cpu::lambStepSize(s, 1),
                  float(1e-2 * std::sqrt(0.001) / 0.1));
}

TEST(Lamb, ClampsAtMaxCoeffAndMinCoeff) {
  // ||p|| / ||u|| is about 100 x 0.5 and about 1e-3: both clamps reached.
  EXPECT_LT(lambError(50.0, 10.0, 0.01, {500}), kTolerance);
  EXPECT_LT(lambError(1e-3, 10.0, 0.01, {500}), kTolerance);
  EXPECT_FLOAT_EQ(cpu::lambTrustRatio({1e4, 1.0}, 10.0, 0.01), 10.0f);
  EXPECT_FLOAT_EQ(cpu::lambTrustRatio({1e-8, 1.0}, 10.0, 0.01), 0.01f);
}

TEST(Lamb, ZeroNormGivesRatioOne) {
  // FusedLamb: a zero weight or update norm leaves the coefficient at 1.
  EXPECT_EQ(cpu::lambTrustRatio({0.0, 4.0}, 10.0, 0.01), 1.0f);
  EXPECT_EQ(cpu::lambTrustRatio({4.0, 0.0}, 10.0, 0.01), 1.0f);
  EXPECT_EQ(cpu::lambTrustRatio({4.0, 1.0}, 10.0, 0.01), 2.0f);
}
