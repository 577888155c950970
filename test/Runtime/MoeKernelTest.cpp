//===- MoeKernelTest.cpp - Tests of the mixture-of-experts CPU kernels ----===//
//
// The kernels of cpu/Moe.h against a float64 reference written here from
// Hugging Face's MixtralSparseMoeBlock (softmax router, top-k by decreasing
// probability with ties to the lower expert, optional renormalisation,
// SwiGLU experts, weighted sum), with no code shared with the kernels:
// - forward: logits, weights, indices and y of the whole block;
// - backward: the gradients of J = sum r * y with respect to x, gate, w1, w3
//   and w2, through combine, experts, router and the logits' linear, against
//   central finite differences of J in float64 and against the reference's
//   own analytic gradients (which are checked against the differences too);
// - the router's ties and normalisation, the dispatch plan's order;
// - one expert with top-1 against the dense SwiGLU MLP of Linear.h and
//   Activations.h, bit for bit (the experts run those kernels on the same
//   rows, and the routing weight is exactly 1);
// - 16-bit storage within a rounding bound computed alongside the
//   reference; determinism; every argument check.
//
// Tolerances, u = 2^-24 (f32): the kernels sum at most h = 16 or I = 24
// products per GEMM and chain five of them (router, w1/w3, w2, and their
// transposes in the backward), each a relative error of about k u for k
// terms (Higham, Accuracy and Stability, 3.1). Relative to the largest
// magnitude of the result, 1e-5 (170 u) covers 24-term sums through the
// chain with a wide margin; the errors observed are below 1e-6
// (ZEROC_PRINT_MOE_ERRORS=1 prints them). The float64 finite differences
// take a step of 1e-6: truncation h^2 f''' / 6 ~ 1e-12 and cancellation
// 1e-16 / 1e-6 ~ 1e-10, so 1e-7 relative is a loose bound.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <tuple>

using namespace zeroc;
using namespace zeroc::cpu;

namespace {

constexpr double kF32Tolerance = 1e-5;
constexpr double kFiniteDifferenceTolerance = 1e-7;
constexpr double kFiniteDifferenceStep = 1e-6;

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    Status status_ = (expr);                                                   \
    ASSERT_TRUE(status_.ok()) << status_.error;                                \
  } while (0)

/// A tensor the test owns.
struct Owned {
  std::vector<uint32_t> storage;
  Tensor view;

  explicit Owned(std::vector<int64_t> shape, DType dtype = DType::F32) {
    view.dtype = dtype;
    view.shape = std::move(shape);
    storage.assign(size_t(view.bytes() / 4 + 1), 0);
    view.data = storage.data();
  }
  Owned(Owned &&) = default;
  Owned &operator=(Owned &&) = default;
  void set(const std::vector<double> &values) {
    ASSERT_EQ(int64_t(values.size()), view.numel());
    for (int64_t i = 0; i < view.numel(); ++i)
      storeElement(view, i, float(values[size_t(i)]));
  }
  std::vector<double> values() const {
    std::vector<double> v(size_t(view.numel()));
    for (int64_t i = 0; i < view.numel(); ++i)
      v[size_t(i)] = loadElement(view, i);
    return v;
  }
  std::vector<int32_t> ints() const {
    return std::vector<int32_t>(view.i32(), view.i32() + view.numel());
  }
  bool sameBits(const Owned &o) const {
    return view.bytes() == o.view.bytes() &&
           std::memcmp(view.data, o.view.data, size_t(view.bytes())) == 0;
  }
  operator const Tensor &() const { return view; }
};

Owned ids(std::vector<int64_t> shape, const std::vector<int32_t> &values) {
  Owned t(std::move(shape), DType::I32);
  std::copy(values.begin(), values.end(), t.view.i32());
  return t;
}

std::vector<double> randomValues(size_t n, unsigned seed, double lo = -1.0,
                                 double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist{float(lo), float(hi)};
  std::vector<double> v(n);
  for (double &x : v)
    x = dist(gen);
  return v;
}

/// max |a - b| / max(max |b|, floor).
double relativeError(const std::vector<double> &a, const std::vector<double> &b,
                     const char *what, double floor = 1e-3) {
  EXPECT_EQ(a.size(), b.size()) << what;
  double worst = 0.0, scale = floor;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  if (std::getenv("ZEROC_PRINT_MOE_ERRORS"))
    std::printf("    %s: error %.2e (scale %.2e)\n", what, worst / scale,
                scale);
  return worst / scale;
}

#define EXPECT_CLOSE(a, b, tol, what)                                          \
  EXPECT_LE(relativeError((a), (b), (what)), (tol)) << (what)

//===----------------------------------------------------------------------===//
// The float64 reference: Hugging Face's MixtralSparseMoeBlock
//===----------------------------------------------------------------------===//

double silu(double v) { return v / (1.0 + std::exp(-v)); }
double siluGrad(double v) {
  double s = 1.0 / (1.0 + std::exp(-v));
  return s + v * s * (1.0 - s);
}

struct Params {
  int64_t T, h, E, I, k;
  bool normalize;
  std::vector<double> x, gate, w1, w3, w2;
};

struct Gradients {
  std::vector<double> x, gate, w1, w3, w2;
};

struct Reference {
  std::vector<double> logits, weights, y;
  std::vector<int32_t> indices;
};

/// One token's routing: torch.softmax then torch.topk (a stable sort by
/// decreasing probability: equal ones keep the lower index first).
void route(const Params &p, int64_t t, std::vector<double> &logits,
           std::vector<double> &prob, std::vector<int32_t> &top,
           std::vector<double> &w) {
  logits.assign(size_t(p.E), 0.0);
  for (int64_t e = 0; e < p.E; ++e)
    for (int64_t i = 0; i < p.h; ++i)
      logits[size_t(e)] +=
          p.x[size_t(t * p.h + i)] * p.gate[size_t(e * p.h + i)];
  double m = *std::max_element(logits.begin(), logits.end()), z = 0.0;
  prob.resize(size_t(p.E));
  for (int64_t e = 0; e < p.E; ++e)
    z += prob[size_t(e)] = std::exp(logits[size_t(e)] - m);
  for (double &v : prob)
    v /= z;
  std::vector<int32_t> order(size_t(p.E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return prob[size_t(a)] > prob[size_t(b)];
  });
  top.assign(order.begin(), order.begin() + p.k);
  w.resize(size_t(p.k));
  double s = 0.0;
  for (int64_t j = 0; j < p.k; ++j)
    s += w[size_t(j)] = prob[size_t(top[size_t(j)])];
  if (p.normalize)
    for (double &v : w)
      v /= s;
}

/// expert e applied to row v: u1 = W1 v, u3 = W3 v, a = silu(u1) u3, o = W2 a.
void expert(const Params &p, int64_t e, const double *v,
            std::vector<double> &u1, std::vector<double> &u3,
            std::vector<double> &a, std::vector<double> &o) {
  u1.assign(size_t(p.I), 0.0);
  u3.assign(size_t(p.I), 0.0);
  for (int64_t n = 0; n < p.I; ++n)
    for (int64_t i = 0; i < p.h; ++i) {
      u1[size_t(n)] += p.w1[size_t((e * p.I + n) * p.h + i)] * v[i];
      u3[size_t(n)] += p.w3[size_t((e * p.I + n) * p.h + i)] * v[i];
    }
  a.resize(size_t(p.I));
  for (int64_t n = 0; n < p.I; ++n)
    a[size_t(n)] = silu(u1[size_t(n)]) * u3[size_t(n)];
  o.assign(size_t(p.h), 0.0);
  for (int64_t i = 0; i < p.h; ++i)
    for (int64_t n = 0; n < p.I; ++n)
      o[size_t(i)] += p.w2[size_t((e * p.h + i) * p.I + n)] * a[size_t(n)];
}

Reference referenceForward(const Params &p) {
  Reference r;
  r.y.assign(size_t(p.T * p.h), 0.0);
  std::vector<double> logits, prob, w, u1, u3, a, o;
  std::vector<int32_t> top;
  for (int64_t t = 0; t < p.T; ++t) {
    route(p, t, logits, prob, top, w);
    r.logits.insert(r.logits.end(), logits.begin(), logits.end());
    r.weights.insert(r.weights.end(), w.begin(), w.end());
    r.indices.insert(r.indices.end(), top.begin(), top.end());
    for (int64_t j = 0; j < p.k; ++j) {
      expert(p, top[size_t(j)], &p.x[size_t(t * p.h)], u1, u3, a, o);
      for (int64_t i = 0; i < p.h; ++i)
        r.y[size_t(t * p.h + i)] += w[size_t(j)] * o[size_t(i)];
    }
  }
  return r;
}

double objective(const Params &p, const std::vector<double> &r) {
  std::vector<double> y = referenceForward(p).y;
  return std::inner_product(y.begin(), y.end(), r.begin(), 0.0);
}

/// dJ/d(everything) for J = sum r * y, by hand.
Gradients referenceBackward(const Params &p, const std::vector<double> &r) {
  Gradients g{
      std::vector<double>(p.x.size()), std::vector<double>(p.gate.size()),
      std::vector<double>(p.w1.size()), std::vector<double>(p.w3.size()),
      std::vector<double>(p.w2.size())};
  std::vector<double> logits, prob, w, u1, u3, a, o;
  std::vector<int32_t> top;
  for (int64_t t = 0; t < p.T; ++t) {
    route(p, t, logits, prob, top, w);
    const double *xt = &p.x[size_t(t * p.h)], *dy = &r[size_t(t * p.h)];
    std::vector<double> dw(size_t(p.k));
    for (int64_t j = 0; j < p.k; ++j) {
      int64_t e = top[size_t(j)];
      expert(p, e, xt, u1, u3, a, o);
      for (int64_t i = 0; i < p.h; ++i)
        dw[size_t(j)] += dy[i] * o[size_t(i)];
      // do = w dy; W2 and a; then the SwiGLU; then W1, W3 and x.
      std::vector<double> da(size_t(p.I), 0.0);
      for (int64_t i = 0; i < p.h; ++i)
        for (int64_t n = 0; n < p.I; ++n) {
          double d = w[size_t(j)] * dy[i];
          g.w2[size_t((e * p.h + i) * p.I + n)] += d * a[size_t(n)];
          da[size_t(n)] += p.w2[size_t((e * p.h + i) * p.I + n)] * d;
        }
      for (int64_t n = 0; n < p.I; ++n) {
        double du1 = da[size_t(n)] * u3[size_t(n)] * siluGrad(u1[size_t(n)]);
        double du3 = da[size_t(n)] * silu(u1[size_t(n)]);
        for (int64_t i = 0; i < p.h; ++i) {
          size_t wi = size_t((e * p.I + n) * p.h + i);
          g.w1[wi] += du1 * xt[i];
          g.w3[wi] += du3 * xt[i];
          g.x[size_t(t * p.h + i)] += du1 * p.w1[wi] + du3 * p.w3[wi];
        }
      }
    }
    // Through w_j = p_j / s (or w_j = p_j), then the softmax.
    std::vector<double> dp(size_t(p.E), 0.0);
    double s = 0.0, c = 0.0;
    for (int64_t j = 0; j < p.k; ++j)
      s += prob[size_t(top[size_t(j)])];
    for (int64_t j = 0; j < p.k; ++j)
      c += dw[size_t(j)] * w[size_t(j)];
    for (int64_t j = 0; j < p.k; ++j)
      dp[size_t(top[size_t(j)])] =
          p.normalize ? (dw[size_t(j)] - c) / s : dw[size_t(j)];
    double pdp = 0.0;
    for (int64_t e = 0; e < p.E; ++e)
      pdp += prob[size_t(e)] * dp[size_t(e)];
    for (int64_t e = 0; e < p.E; ++e) {
      double dl = prob[size_t(e)] * (dp[size_t(e)] - pdp);
      for (int64_t i = 0; i < p.h; ++i) {
        g.gate[size_t(e * p.h + i)] += dl * xt[i];
        g.x[size_t(t * p.h + i)] += dl * p.gate[size_t(e * p.h + i)];
      }
    }
  }
  return g;
}

/// Random parameters, rounded to `dtype` (so the reference sees what the
/// kernels see).
Params randomParams(int64_t T, int64_t h, int64_t E, int64_t I, int64_t k,
                    bool normalize, unsigned seed, DType dtype = DType::F32) {
  Params p{T, h, E, I, k, normalize, {}, {}, {}, {}, {}};
  p.x = randomValues(size_t(T * h), seed);
  // A larger gate spreads the router's probabilities (fewer near-ties).
  p.gate = randomValues(size_t(E * h), seed + 1, -2.0, 2.0);
  p.w1 = randomValues(size_t(E * I * h), seed + 2, -0.5, 0.5);
  p.w3 = randomValues(size_t(E * I * h), seed + 3, -0.5, 0.5);
  p.w2 = randomValues(size_t(E * h * I), seed + 4, -0.5, 0.5);
  for (auto *v : {&p.x, &p.gate, &p.w1, &p.w3, &p.w2})
    for (double &x : *v)
      x = roundToDType(float(x), dtype);
  return p;
}

//===----------------------------------------------------------------------===//
// The kernels, chained as the executor chains them
//===----------------------------------------------------------------------===//

struct Block {
  Params p;
  DType dtype;
  Owned x, gate, w1, w3, w2;
  Owned logits, weights, indices, offsets, rowToken, rowSlot, h1, h3, ysorted,
      y;

  Block(const Params &params, DType dtype)
      : p(params), dtype(dtype), x({p.T, p.h}, dtype), gate({p.E, p.h}, dtype),
        w1({p.E, p.I, p.h}, dtype), w3({p.E, p.I, p.h}, dtype),
        w2({p.E, p.h, p.I}, dtype), logits({p.T, p.E}), weights({p.T, p.k}),
        indices({p.T, p.k}, DType::I32), offsets({p.E + 1}, DType::I32),
        rowToken({p.T * p.k}, DType::I32), rowSlot({p.T * p.k}, DType::I32),
        h1({p.T * p.k, p.I}, dtype), h3({p.T * p.k, p.I}, dtype),
        ysorted({p.T * p.k, p.h}, dtype), y({p.T, p.h}, dtype) {
    x.set(p.x);
    gate.set(p.gate);
    w1.set(p.w1);
    w3.set(p.w3);
    w2.set(p.w2);
  }

  Status forward() {
    ZEROC_RETURN_IF_ERROR(
        moeRouterForward(x, gate, p.k, p.normalize, logits, weights, indices));
    ZEROC_RETURN_IF_ERROR(
        moeDispatchPlan(indices, p.E, offsets, rowToken, rowSlot));
    ZEROC_RETURN_IF_ERROR(
        moeExpertsForward(x, w1, w3, w2, offsets, rowToken, h1, h3, ysorted));
    return moeCombineForward(ysorted, weights, rowToken, rowSlot, y);
  }

  struct Grads {
    Owned dysorted, dweights, dxExperts, dw1, dw3, dw2, dlogits, dxRouter,
        dgate, dx;
  };

  /// The backward of J = sum r * y: dy = r.
  Status backward(const std::vector<double> &r, Grads &g) {
    Owned dy({p.T, p.h}, dtype);
    dy.set(r);
    ZEROC_RETURN_IF_ERROR(moeCombineBackward(dy, ysorted, weights, rowToken,
                                             rowSlot, g.dysorted, g.dweights));
    ZEROC_RETURN_IF_ERROR(moeExpertsBackward(g.dysorted, x, w1, w3, w2, offsets,
                                             rowToken, h1, h3, g.dxExperts,
                                             g.dw1, g.dw3, g.dw2));
    ZEROC_RETURN_IF_ERROR(
        moeRouterBackward(g.dweights, logits, indices, p.normalize, g.dlogits));
    ZEROC_RETURN_IF_ERROR(linearGradInput(g.dlogits, gate, g.dxRouter));
    ZEROC_RETURN_IF_ERROR(linearGradWeight(g.dlogits, x, g.dgate));
    return add(g.dxExperts, g.dxRouter, g.dx);
  }

  Grads makeGrads() {
    return Grads{Owned({p.T * p.k, p.h}, dtype),
                 Owned({p.T, p.k}),
                 Owned({p.T, p.h}, dtype),
                 Owned({p.E, p.I, p.h}, dtype),
                 Owned({p.E, p.I, p.h}, dtype),
                 Owned({p.E, p.h, p.I}, dtype),
                 Owned({p.T, p.E}),
                 Owned({p.T, p.h}, dtype),
                 Owned({p.E, p.h}, dtype),
                 Owned({p.T, p.h}, dtype)};
  }
};

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

void checkForwardAgainstReference(const Params &p) {
  Block b(p, DType::F32);
  ASSERT_OK(b.forward());
  Reference ref = referenceForward(p);
  EXPECT_EQ(b.indices.ints(), ref.indices);
  EXPECT_CLOSE(b.logits.values(), ref.logits, kF32Tolerance, "logits");
  EXPECT_CLOSE(b.weights.values(), ref.weights, kF32Tolerance, "weights");
  EXPECT_CLOSE(b.y.values(), ref.y, kF32Tolerance, "y");
}

TEST(MoeForward, MatchesFloat64ReferenceNormalized) {
  checkForwardAgainstReference(randomParams(13, 16, 8, 24, 2, true, 10));
}

TEST(MoeForward, MatchesFloat64ReferenceUnnormalized) {
  checkForwardAgainstReference(randomParams(13, 16, 8, 24, 2, false, 20));
}

TEST(MoeForward, MatchesFloat64ReferenceTopThreeAndAllExperts) {
  checkForwardAgainstReference(randomParams(9, 16, 6, 8, 3, true, 30));
  checkForwardAgainstReference(randomParams(5, 8, 4, 8, 4, true, 40));
  checkForwardAgainstReference(randomParams(5, 8, 4, 8, 1, false, 50));
}

//===----------------------------------------------------------------------===//
// Router: ties and normalisation
//===----------------------------------------------------------------------===//

struct RouterOut {
  std::vector<double> weights;
  std::vector<int32_t> indices;
};

RouterOut runRouter(const std::vector<double> &x, const std::vector<double> &g,
                    int64_t T, int64_t h, int64_t E, int64_t k,
                    bool normalize) {
  Owned xt({T, h}), gt({E, h}), logits({T, E}), weights({T, k}),
      indices({T, k}, DType::I32);
  xt.set(x);
  gt.set(g);
  Status s = moeRouterForward(xt, gt, k, normalize, logits, weights, indices);
  EXPECT_TRUE(s.ok()) << s.error;
  return {weights.values(), indices.ints()};
}

TEST(MoeRouter, AllTiedPicksTheLowestExperts) {
  // A zero gate: every logit 0, every probability 1/8 exactly.
  std::vector<double> x = randomValues(2 * 4, 1), g(8 * 4, 0.0);
  RouterOut n = runRouter(x, g, 2, 4, 8, 3, true);
  EXPECT_EQ(n.indices, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  for (double w : n.weights)
    EXPECT_EQ(w, double(0.125f / 0.375f)); // 1/3 rounded once
  RouterOut u = runRouter(x, g, 2, 4, 8, 3, false);
  EXPECT_EQ(u.indices, n.indices);
  for (double w : u.weights)
    EXPECT_EQ(w, 0.125);
}

TEST(MoeRouter, PartialTiesKeepTheLowerIndexFirst) {
  // x = [1, 0]: logit e = gate[e, 0]. Experts 5 and 2 tie highest, 1 and 6
  // tie next, 7 is below them.
  std::vector<double> x = {1.0, 0.0};
  std::vector<double> g = {0.0,  0, 1.0, 0, 3.0, 0, 0.5, 0,
                           -1.0, 0, 3.0, 0, 1.0, 0, 0.9, 0};
  EXPECT_EQ(runRouter(x, g, 1, 2, 8, 4, true).indices,
            (std::vector<int32_t>{2, 5, 1, 6}));
  EXPECT_EQ(runRouter(x, g, 1, 2, 8, 3, true).indices,
            (std::vector<int32_t>{2, 5, 1}));
  EXPECT_EQ(runRouter(x, g, 1, 2, 8, 1, true).indices,
            (std::vector<int32_t>{2}));
}

TEST(MoeRouter, NormalisedWeightsSumToOneAndKeepTheirRatios) {
  Params p = randomParams(17, 8, 8, 4, 3, true, 60);
  RouterOut n = runRouter(p.x, p.gate, p.T, p.h, p.E, p.k, true);
  RouterOut u = runRouter(p.x, p.gate, p.T, p.h, p.E, p.k, false);
  EXPECT_EQ(n.indices, u.indices);
  for (int64_t t = 0; t < p.T; ++t) {
    double sn = 0.0, su = 0.0;
    for (int64_t j = 0; j < p.k; ++j) {
      sn += n.weights[size_t(t * p.k + j)];
      su += u.weights[size_t(t * p.k + j)];
      if (j > 0) { // decreasing
        EXPECT_GE(u.weights[size_t(t * p.k + j - 1)],
                  u.weights[size_t(t * p.k + j)]);
      }
    }
    // k + 1 roundings of f32.
    EXPECT_NEAR(sn, 1.0, 4 * 0x1p-24) << "token " << t;
    for (int64_t j = 0; j < p.k; ++j)
      EXPECT_NEAR(n.weights[size_t(t * p.k + j)],
                  u.weights[size_t(t * p.k + j)] / su, 4 * 0x1p-24);
  }
  // With k = E the weights are the whole softmax, sorted: they sum to 1.
  RouterOut all = runRouter(p.x, p.gate, p.T, p.h, p.E, p.E, false);
  for (int64_t t = 0; t < p.T; ++t) {
    double s = 0.0;
    for (int64_t j = 0; j < p.E; ++j)
      s += all.weights[size_t(t * p.E + j)];
    EXPECT_NEAR(s, 1.0, 8 * 0x1p-24);
  }
}

//===----------------------------------------------------------------------===//
// Dispatch plan
//===----------------------------------------------------------------------===//

TEST(MoeDispatch, StableCountingSortByExpertThenTokenThenSlot) {
  // T = 4, k = 2, E = 4; expert 3 gets nothing.
  Owned indices = ids({4, 2}, {1, 0, 0, 2, 1, 2, 0, 1});
  Owned offsets({5}, DType::I32), tok({8}, DType::I32), slot({8}, DType::I32);
  ASSERT_OK(moeDispatchPlan(indices, 4, offsets, tok, slot));
  // Expert 0: (0,1) (1,0) (3,0); expert 1: (0,0) (2,0) (3,1); expert 2:
  // (1,1) (2,1).
  EXPECT_EQ(offsets.ints(), (std::vector<int32_t>{0, 3, 6, 8, 8}));
  EXPECT_EQ(tok.ints(), (std::vector<int32_t>{0, 1, 3, 0, 2, 3, 1, 2}));
  EXPECT_EQ(slot.ints(), (std::vector<int32_t>{1, 0, 0, 0, 0, 1, 1, 1}));
}

TEST(MoeDispatch, RandomIndicesSortLikeStdSort) {
  const int64_t T = 50, k = 3, E = 7;
  std::mt19937 gen(7);
  std::vector<int32_t> idx(size_t(T * k));
  for (int32_t &e : idx)
    e = int32_t(gen() % E);
  Owned indices = ids({T, k}, idx);
  Owned offsets({E + 1}, DType::I32), tok({T * k}, DType::I32),
      slot({T * k}, DType::I32);
  ASSERT_OK(moeDispatchPlan(indices, E, offsets, tok, slot));
  std::vector<std::tuple<int32_t, int32_t, int32_t>> pairs;
  for (int32_t t = 0; t < T; ++t)
    for (int32_t j = 0; j < k; ++j)
      pairs.emplace_back(idx[size_t(t * k + j)], t, j);
  std::sort(pairs.begin(), pairs.end());
  std::vector<int32_t> off = offsets.ints();
  for (int64_t r = 0; r < T * k; ++r) {
    auto [e, t, j] = pairs[size_t(r)];
    EXPECT_EQ(tok.ints()[size_t(r)], t) << "row " << r;
    EXPECT_EQ(slot.ints()[size_t(r)], j) << "row " << r;
    EXPECT_TRUE(off[size_t(e)] <= r && r < off[size_t(e) + 1]) << "row " << r;
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// The reference's analytic gradients against central finite differences of
/// J in float64 (checking the reference), then the kernels' against both.
void checkBackward(const Params &p, unsigned seed) {
  std::vector<double> r = randomValues(size_t(p.T * p.h), seed);
  Gradients ref = referenceBackward(p, r);
  std::vector<int32_t> selection = referenceForward(p).indices;

  Params q = p;
  std::vector<double> *params[] = {&q.x, &q.gate, &q.w1, &q.w3, &q.w2};
  std::vector<double> *refGrads[] = {&ref.x, &ref.gate, &ref.w1, &ref.w3,
                                     &ref.w2};
  const char *names[] = {"dx", "dgate", "dw1", "dw3", "dw2"};
  std::vector<double> numerics[5];
  for (int n = 0; n < 5; ++n) {
    std::vector<double> &numeric = numerics[n];
    numeric.resize(params[n]->size());
    for (size_t i = 0; i < numeric.size(); ++i) {
      double saved = (*params[n])[i];
      (*params[n])[i] = saved + kFiniteDifferenceStep;
      double plus = objective(q, r);
      ASSERT_EQ(referenceForward(q).indices, selection)
          << "a step of " << kFiniteDifferenceStep << " changes the routing";
      (*params[n])[i] = saved - kFiniteDifferenceStep;
      double minus = objective(q, r);
      (*params[n])[i] = saved;
      numeric[i] = (plus - minus) / (2 * kFiniteDifferenceStep);
    }
    EXPECT_CLOSE(*refGrads[n], numeric, kFiniteDifferenceTolerance,
                 (std::string("reference ") + names[n] +
                  " vs finite "
                  "differences")
                     .c_str());
  }

  Block b(p, DType::F32);
  ASSERT_OK(b.forward());
  ASSERT_EQ(b.indices.ints(), selection);
  Block::Grads g = b.makeGrads();
  ASSERT_OK(b.backward(r, g));
  EXPECT_CLOSE(g.dx.values(), ref.x, kF32Tolerance, "dx");
  EXPECT_CLOSE(g.dgate.values(), ref.gate, kF32Tolerance, "dgate");
  EXPECT_CLOSE(g.dw1.values(), ref.w1, kF32Tolerance, "dw1");
  EXPECT_CLOSE(g.dw3.values(), ref.w3, kF32Tolerance, "dw3");
  EXPECT_CLOSE(g.dw2.values(), ref.w2, kF32Tolerance, "dw2");
  Owned *kernel[] = {&g.dx, &g.dgate, &g.dw1, &g.dw3, &g.dw2};
  for (int n = 0; n < 5; ++n)
    EXPECT_CLOSE(kernel[n]->values(), numerics[n], kF32Tolerance,
                 (std::string(names[n]) + " vs finite differences").c_str());
}

TEST(MoeBackward, MatchesFiniteDifferencesNormalized) {
  checkBackward(randomParams(6, 8, 4, 6, 2, true, 70), 71);
}

TEST(MoeBackward, MatchesFiniteDifferencesUnnormalized) {
  checkBackward(randomParams(6, 8, 4, 6, 2, false, 80), 81);
}

TEST(MoeBackward, MatchesFiniteDifferencesTopOneAndTopThree) {
  checkBackward(randomParams(5, 8, 4, 6, 1, true, 90), 91);
  checkBackward(randomParams(5, 8, 5, 6, 3, true, 100), 101);
}

TEST(MoeBackward, AnExpertWithoutTokensGetsZeroGradients) {
  // x > 0 and gate row 3 < 0: expert 3's logit is the lowest of every token.
  Params p = randomParams(6, 8, 4, 6, 2, true, 110);
  for (double &v : p.x)
    v = std::abs(v) + 0.125;
  for (int64_t i = 0; i < p.h; ++i)
    p.gate[size_t(3 * p.h + i)] = -4.0;
  Block b(p, DType::F32);
  ASSERT_OK(b.forward());
  EXPECT_EQ(b.offsets.ints()[3], b.offsets.ints()[4]);
  Block::Grads g = b.makeGrads();
  // Outputs start as NaN bits: the kernel must write the zeros.
  for (Owned *o : {&g.dw1, &g.dw3, &g.dw2})
    std::fill(o->storage.begin(), o->storage.end(), 0xffffffffu);
  ASSERT_OK(b.backward(randomValues(size_t(p.T * p.h), 111), g));
  int64_t block = p.I * p.h;
  for (Owned *o : {&g.dw1, &g.dw3, &g.dw2}) {
    std::vector<double> v = o->values();
    for (int64_t i = 3 * block; i < 4 * block; ++i)
      ASSERT_EQ(v[size_t(i)], 0.0) << i;
  }
  checkBackward(p, 111);
}

TEST(MoeBackward, BitIdenticalRunToRun) {
  Params p = randomParams(31, 16, 8, 24, 2, true, 120);
  std::vector<double> r = randomValues(size_t(p.T * p.h), 121);
  Block a(p, DType::F32), b(p, DType::F32);
  ASSERT_OK(a.forward());
  ASSERT_OK(b.forward());
  Block::Grads ga = a.makeGrads(), gb = b.makeGrads();
  ASSERT_OK(a.backward(r, ga));
  ASSERT_OK(b.backward(r, gb));
  EXPECT_TRUE(a.y.sameBits(b.y));
  EXPECT_TRUE(a.h1.sameBits(b.h1));
  for (auto m : {&Block::Grads::dx, &Block::Grads::dgate, &Block::Grads::dw1,
                 &Block::Grads::dw3, &Block::Grads::dw2})
    EXPECT_TRUE((ga.*m).sameBits(gb.*m));
}

//===----------------------------------------------------------------------===//
// One expert, top-1: the dense SwiGLU MLP
//===----------------------------------------------------------------------===//

void checkDenseEquivalence(DType dtype, bool normalize) {
  SCOPED_TRACE(std::string(dtypeName(dtype)) +
               (normalize ? " normalized" : " unnormalized"));
  Params p = randomParams(11, 16, 1, 24, 1, normalize, 130, dtype);
  Block b(p, dtype);
  ASSERT_OK(b.forward());
  ASSERT_EQ(b.weights.values(), std::vector<double>(size_t(p.T), 1.0));

  // The dense MLP: y = W2 (silu(W1 x) * W3 x), with the same weights as
  // [I, h] and [h, I] matrices.
  Owned w1({p.I, p.h}, dtype), w3({p.I, p.h}, dtype), w2({p.h, p.I}, dtype);
  w1.set(p.w1);
  w3.set(p.w3);
  w2.set(p.w2);
  Owned h1({p.T, p.I}, dtype), h3({p.T, p.I}, dtype), s({p.T, p.I}, dtype),
      a({p.T, p.I}, dtype), y({p.T, p.h}, dtype);
  ASSERT_OK(linearForward(b.x, w1, nullptr, h1));
  ASSERT_OK(linearForward(b.x, w3, nullptr, h3));
  ASSERT_OK(siluForward(h1, s));
  ASSERT_OK(mul(s, h3, a));
  ASSERT_OK(linearForward(a, w2, nullptr, y));
  EXPECT_TRUE(y.sameBits(b.y));
  EXPECT_TRUE(h1.sameBits(b.h1));

  std::vector<double> r = randomValues(size_t(p.T * p.h), 131);
  Owned dy({p.T, p.h}, dtype);
  dy.set(r);
  Owned da({p.T, p.I}, dtype), dh1({p.T, p.I}, dtype), dh3({p.T, p.I}, dtype),
      dx1({p.T, p.h}, dtype), dx3({p.T, p.h}, dtype), dx({p.T, p.h}, dtype),
      dw1({p.I, p.h}, dtype), dw3({p.I, p.h}, dtype), dw2({p.h, p.I}, dtype);
  ASSERT_OK(linearGradWeight(dy, a, dw2));
  ASSERT_OK(linearGradInput(dy, w2, da));
  ASSERT_OK(mul(da, h3, dh1));
  ASSERT_OK(mul(da, s, dh3));
  ASSERT_OK(siluBackward(h1, dh1, dh1));
  ASSERT_OK(linearGradWeight(dh1, b.x, dw1));
  ASSERT_OK(linearGradWeight(dh3, b.x, dw3));
  ASSERT_OK(linearGradInput(dh1, w1, dx1));
  ASSERT_OK(linearGradInput(dh3, w3, dx3));
  ASSERT_OK(add(dx1, dx3, dx));

  Block::Grads g = b.makeGrads();
  ASSERT_OK(b.backward(r, g));
  EXPECT_TRUE(dx.sameBits(g.dxExperts));
  EXPECT_TRUE(dw1.sameBits(g.dw1));
  EXPECT_TRUE(dw3.sameBits(g.dw3));
  EXPECT_TRUE(dw2.sameBits(g.dw2));
  // With one expert the router's probability is constant: no gradient.
  for (double v : g.dlogits.values())
    EXPECT_EQ(v, 0.0);
}

TEST(MoeDense, OneExpertTopOneIsTheDenseMlpBitForBit) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (bool normalize : {true, false})
      checkDenseEquivalence(t, normalize);
}

//===----------------------------------------------------------------------===//
// 16-bit storage
//===----------------------------------------------------------------------===//

// The block on bf16 / f16 inputs against the float64 reference on the same
// (rounded) inputs. Each stored intermediate is rounded once (relative error
// u): h1 and h3, silu(h1), the product, ysorted and y. Through silu (slope
// at most 1.1) and the product, a carries at most about 4u of relative
// error per element, which w2's sum carries to at most 4u sum_n |W2_in a_n|;
// ysorted and y add u each. So per element
//   |y - y_ref| <= 6u sum_j w_j sum_n |W2_e,in| |a_n| + u |y_ref| (+ f32).
void checkSixteenBit(DType dtype) {
  SCOPED_TRACE(dtypeName(dtype));
  double u = dtype == DType::BF16 ? 0x1p-8 : 0x1p-11;
  Params p = randomParams(13, 16, 8, 24, 2, true, 140, dtype);
  Block b(p, dtype);
  ASSERT_OK(b.forward());
  Reference ref = referenceForward(p);
  ASSERT_EQ(b.indices.ints(), ref.indices);

  std::vector<double> bound(size_t(p.T * p.h), 0.0), u1, u3, a, o;
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t j = 0; j < p.k; ++j) {
      int64_t e = ref.indices[size_t(t * p.k + j)];
      expert(p, e, &p.x[size_t(t * p.h)], u1, u3, a, o);
      for (int64_t i = 0; i < p.h; ++i) {
        double sum = 0.0;
        for (int64_t n = 0; n < p.I; ++n)
          sum += std::abs(p.w2[size_t((e * p.h + i) * p.I + n)] * a[size_t(n)]);
        bound[size_t(t * p.h + i)] += ref.weights[size_t(t * p.k + j)] * sum;
      }
    }
  std::vector<double> y = b.y.values();
  double worst = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    double limit = 6 * u * bound[i] + u * std::abs(ref.y[i]) + 1e-6;
    worst = std::max(worst, std::abs(y[i] - ref.y[i]) / limit);
    EXPECT_LE(std::abs(y[i] - ref.y[i]), limit) << "element " << i;
  }
  if (std::getenv("ZEROC_PRINT_MOE_ERRORS"))
    std::printf("    %s y: worst error %.2f of the bound\n",
                std::string(dtypeName(dtype)).c_str(), worst);
}

TEST(MoeSixteenBit, ForwardWithinRoundingBound) {
  checkSixteenBit(DType::BF16);
  checkSixteenBit(DType::F16);
}

//===----------------------------------------------------------------------===//
// Argument checks
//===----------------------------------------------------------------------===//

void expectError(const Status &s, const std::string &message) {
  EXPECT_FALSE(s.ok()) << "expected: " << message;
  EXPECT_NE(s.error.find(message), std::string::npos)
      << "expected: " << message << "\nfound: " << s.error;
}

TEST(MoeChecks, RouterForward) {
  Owned x({4, 8}), gate({3, 8}), logits({4, 3}), weights({4, 2}),
      indices({4, 2}, DType::I32);
  ASSERT_OK(checkMoeRouterForward(x, gate, 2, logits, weights, indices));
  expectError(moeRouterForward(x, gate, 4, true, logits, weights, indices),
              "moe_router: k = 4 must be between 1 and the number of experts "
              "E = 3");
  expectError(moeRouterForward(x, gate, 0, true, logits, weights, indices),
              "moe_router: k = 0 must be between 1");
  Owned gate7({3, 7});
  expectError(moeRouterForward(x, gate7, 2, true, logits, weights, indices),
              "moe_router: gate must be [E, h] = [3, 8], found [3, 7] f32");
  Owned logits44({4, 4});
  expectError(moeRouterForward(x, gate, 2, true, logits44, weights, indices),
              "moe_router: logits must be [..., E] = [4, 3], found [4, 4] "
              "f32");
  Owned weights43({4, 3});
  expectError(moeRouterForward(x, gate, 2, true, logits, weights43, indices),
              "moe_router: weights must be [..., k] = [4, 2], found [4, 3] "
              "f32");
  Owned indicesF({4, 2});
  expectError(moeRouterForward(x, gate, 2, true, logits, weights, indicesF),
              "moe_router: indices must be i32, found [4, 2] f32");
  Owned xi({4, 8}, DType::I32);
  expectError(moeRouterForward(xi, gate, 2, true, logits, weights, indices),
              "moe_router: x must be f32, bf16 or f16, found [4, 8] i32");
  // Tokens in any leading dimensions, the same for every [..., n] tensor.
  Owned x3({1, 4, 8});
  expectError(moeRouterForward(x3, gate, 2, true, logits, weights, indices),
              "moe_router: logits must be [..., E] = [1, 4, 3], found [4, 3] "
              "f32");
  Owned x0({});
  expectError(moeRouterForward(x0, gate, 2, true, logits, weights, indices),
              "moe_router: x must have at least one dimension, found [] f32");
}

TEST(MoeChecks, RouterBackward) {
  Owned dweights({3, 2}), logits({3, 3}), dlogits({3, 3});
  Owned good = ids({3, 2}, {0, 1, 2, 0, 1, 2});
  ASSERT_OK(moeRouterBackward(dweights, logits, good, true, dlogits));
  expectError(moeRouterBackward(dweights, logits,
                                ids({3, 2}, {0, 1, 2, 3, 1, 2}), true, dlogits),
              "moe_router_backward: indices[1, 1] = 3 is out of range [0, 3)");
  expectError(moeRouterBackward(dweights, logits,
                                ids({3, 2}, {0, -1, 2, 0, 1, 2}), true,
                                dlogits),
              "moe_router_backward: indices[0, 1] = -1 is out of range [0, 3)");
  expectError(moeRouterBackward(dweights, logits,
                                ids({3, 2}, {0, 1, 2, 0, 1, 1}), true, dlogits),
              "moe_router_backward: indices[2, 1] = 1 repeats slot 0 of its "
              "token");
  Owned dweights4({3, 4}), big = ids({3, 4}, std::vector<int32_t>(12, 0));
  expectError(moeRouterBackward(dweights4, logits, big, true, dlogits),
              "moe_router_backward: k = 4 must be between 1 and the number of "
              "experts E = 3");
  Owned dweights33({3, 3});
  expectError(moeRouterBackward(dweights33, logits, good, true, dlogits),
              "moe_router_backward: dweights must be [..., k] = [3, 2], found "
              "[3, 3] f32");
  Owned dlogits32({3, 2});
  expectError(moeRouterBackward(dweights, logits, good, true, dlogits32),
              "moe_router_backward: dlogits must be [..., E] = [3, 3], found "
              "[3, 2] f32");
}

TEST(MoeChecks, DispatchPlan) {
  Owned indices = ids({3, 2}, {0, 1, 2, 0, 1, 2});
  Owned offsets({4}, DType::I32), tok({6}, DType::I32), slot({6}, DType::I32);
  ASSERT_OK(moeDispatchPlan(indices, 3, offsets, tok, slot));
  expectError(
      moeDispatchPlan(ids({3, 2}, {0, 1, 2, 5, 1, 2}), 3, offsets, tok, slot),
      "moe_dispatch_plan: indices[1, 1] = 5 is out of range [0, 3)");
  Owned offsets2({2}, DType::I32);
  expectError(moeDispatchPlan(indices, 1, offsets2, tok, slot),
              "moe_dispatch_plan: k = 2 must be between 1 and the number of "
              "experts E = 1");
  expectError(
      moeDispatchPlan(indices, 4, offsets, tok, slot),
      "moe_dispatch_plan: offsets must be [E + 1] = [5], found [4] i32");
  Owned tok5({5}, DType::I32), slotF({6});
  expectError(moeDispatchPlan(indices, 3, offsets, tok5, slot),
              "moe_dispatch_plan: rowToken must be [T * k] = [6], found [5] "
              "i32");
  expectError(moeDispatchPlan(indices, 3, offsets, tok, slotF),
              "moe_dispatch_plan: rowSlot must be i32, found [6] f32");
}

struct ExpertArgs {
  Owned x{{4, 8}}, w1{{3, 5, 8}}, w3{{3, 5, 8}}, w2{{3, 8, 5}};
  Owned offsets = ids({4}, {0, 3, 3, 8});
  Owned tok = ids({8}, {0, 1, 3, 0, 1, 2, 2, 3});
  Owned h1{{8, 5}}, h3{{8, 5}}, ys{{8, 8}};
  Owned dx{{4, 8}}, dw1{{3, 5, 8}}, dw3{{3, 5, 8}}, dw2{{3, 8, 5}};
  Status forward() {
    return moeExpertsForward(x, w1, w3, w2, offsets, tok, h1, h3, ys);
  }
  Status backward() {
    return moeExpertsBackward(ys, x, w1, w3, w2, offsets, tok, h1, h3, dx, dw1,
                              dw3, dw2);
  }
};

TEST(MoeChecks, Experts) {
  {
    ExpertArgs a;
    ASSERT_OK(a.forward());
    ASSERT_OK(a.backward());
  }
  {
    ExpertArgs a;
    a.w2 = Owned({3, 5, 8});
    expectError(a.forward(), "moe_experts: w2 must be [E, h, I] = [3, 8, 5], "
                             "found [3, 5, 8] f32");
    expectError(a.backward(), "moe_experts_backward: w2 must be [E, h, I]");
  }
  {
    ExpertArgs a;
    a.w3 = Owned({2, 5, 8});
    expectError(a.forward(), "moe_experts: w3 must be [E, I, h] = [3, 5, 8], "
                             "found [2, 5, 8] f32");
  }
  {
    ExpertArgs a;
    a.h1 = Owned({8, 4});
    expectError(a.forward(),
                "moe_experts: h1 must be [N, I] = [8, 5], found [8, 4] f32");
    a = ExpertArgs();
    a.ys = Owned({7, 8});
    expectError(a.forward(),
                "moe_experts: ysorted must be [N, h] = [8, 8], found [7, 8]");
    a = ExpertArgs();
    a.offsets = ids({3}, {0, 3, 8});
    expectError(a.forward(),
                "moe_experts: offsets must be [E + 1] = [4], found [3] i32");
    a = ExpertArgs();
    a.tok = Owned({8});
    expectError(a.forward(), "moe_experts: rowToken must be i32");
  }
  {
    ExpertArgs a;
    a.offsets = ids({4}, {0, 3, 3, 7});
    expectError(a.forward(), "moe_experts: offsets must run from 0 to the 8 "
                             "rows, found offsets[0] = 0 and offsets[3] = 7");
    a.offsets = ids({4}, {0, 5, 3, 8});
    expectError(a.forward(), "moe_experts: offsets must not decrease, found "
                             "offsets[2] = 3 after 5");
    expectError(a.backward(), "moe_experts_backward: offsets must not "
                              "decrease");
    a.offsets = ids({4}, {0, 3, 3, 8});
    a.tok = ids({8}, {0, 1, 3, 0, 4, 2, 2, 3});
    expectError(a.forward(),
                "moe_experts: rowToken[4] = 4 is out of range [0, 4)");
  }
  {
    ExpertArgs a;
    a.dw2 = Owned({3, 5, 8});
    expectError(a.backward(), "moe_experts_backward: dw2 must have the shape "
                              "of w2 ([3, 8, 5] f32), found [3, 5, 8] f32");
    a = ExpertArgs();
    a.dx = Owned({4, 8}, DType::I32);
    expectError(a.backward(), "moe_experts_backward: dx must be f32, bf16 or "
                              "f16, found [4, 8] i32");
  }
}

TEST(MoeChecks, Combine) {
  Owned ys({6, 4}), weights({3, 2}), y({3, 4}), dys({6, 4}), dweights({3, 2});
  Owned tok = ids({6}, {0, 1, 2, 0, 1, 2}), slot = ids({6}, {0, 0, 0, 1, 1, 1});
  ASSERT_OK(moeCombineForward(ys, weights, tok, slot, y));
  ASSERT_OK(moeCombineBackward(y, ys, weights, tok, slot, dys, dweights));
  Owned twice = ids({6}, {0, 1, 2, 0, 1, 1});
  expectError(moeCombineForward(ys, weights, twice, slot, y),
              "moe_combine: row 5 = (token 1, slot 1) appears twice: rowToken "
              "and rowSlot must be a permutation of the (token, slot) pairs");
  expectError(moeCombineBackward(y, ys, weights, twice, slot, dys, dweights),
              "moe_combine_backward: row 5 = (token 1, slot 1) appears twice");
  Owned slot2 = ids({6}, {0, 0, 0, 1, 2, 1});
  expectError(moeCombineForward(ys, weights, tok, slot2, y),
              "moe_combine: row 4 = (token 1, slot 2) is out of range [0, 3) "
              "x [0, 2)");
  Owned tok3 = ids({6}, {0, 3, 2, 0, 1, 2});
  expectError(moeCombineForward(ys, weights, tok3, slot, y),
              "moe_combine: row 1 = (token 3, slot 0) is out of range");
  Owned y5({3, 5});
  expectError(moeCombineForward(ys, weights, tok, slot, y5),
              "moe_combine: y must be [..., h] = [3, 4], found [3, 5] f32");
  Owned ys5({5, 4});
  expectError(moeCombineForward(ys5, weights, tok, slot, y),
              "moe_combine: ysorted must be [T * k, h] = [6, 4], found [5, 4]");
  Owned weightsI({3, 2}, DType::I32);
  expectError(moeCombineForward(ys, weightsI, tok, slot, y),
              "moe_combine: weights must be f32, bf16 or f16, found [3, 2] "
              "i32");
  Owned dweights3({3, 3}), dys5({6, 5});
  expectError(moeCombineBackward(y, ys, weights, tok, slot, dys, dweights3),
              "moe_combine_backward: dweights must have the shape of weights");
  expectError(moeCombineBackward(y, ys, weights, tok, slot, dys5, dweights),
              "moe_combine_backward: dysorted must have the shape of ysorted");
  Owned dy5({3, 5});
  expectError(moeCombineBackward(dy5, ys, weights, tok, slot, dys, dweights),
              "moe_combine_backward: dy must be [..., h] = [3, 4]");
}

// [batch, seq, .] tensors (the model dialect's) give the bits of the
// [T, .] ones.
TEST(MoeShapes, LeadingDimensionsAreTokens) {
  Params p = randomParams(12, 8, 4, 6, 2, true, 160);
  std::vector<double> r = randomValues(size_t(p.T * p.h), 161);
  Block flat(p, DType::F32), batched(p, DType::F32);
  for (Owned *t : {&batched.x, &batched.y})
    t->view.shape = {3, 4, p.h};
  for (Owned *t : {&batched.weights, &batched.indices})
    t->view.shape = {3, 4, p.k};
  batched.logits.view.shape = {3, 4, p.E};
  ASSERT_OK(flat.forward());
  ASSERT_OK(batched.forward());
  EXPECT_TRUE(flat.y.sameBits(batched.y));
  Block::Grads gf = flat.makeGrads(), gb = batched.makeGrads();
  for (Owned *t : {&gb.dxExperts, &gb.dxRouter, &gb.dx})
    t->view.shape = {3, 4, p.h};
  gb.dweights.view.shape = {3, 4, p.k};
  gb.dlogits.view.shape = {3, 4, p.E};
  ASSERT_OK(flat.backward(r, gf));
  // dy is made [T, h]: the batched block's backward needs [3, 4, h].
  Owned dy({3, 4, p.h});
  dy.set(r);
  ASSERT_OK(moeCombineBackward(dy, batched.ysorted, batched.weights,
                               batched.rowToken, batched.rowSlot, gb.dysorted,
                               gb.dweights));
  ASSERT_OK(moeExpertsBackward(gb.dysorted, batched.x, batched.w1, batched.w3,
                               batched.w2, batched.offsets, batched.rowToken,
                               batched.h1, batched.h3, gb.dxExperts, gb.dw1,
                               gb.dw3, gb.dw2));
  ASSERT_OK(moeRouterBackward(gb.dweights, batched.logits, batched.indices,
                              true, gb.dlogits));
  EXPECT_TRUE(gf.dxExperts.sameBits(gb.dxExperts));
  EXPECT_TRUE(gf.dw1.sameBits(gb.dw1));
  EXPECT_TRUE(gf.dw2.sameBits(gb.dw2));
  EXPECT_TRUE(gf.dlogits.sameBits(gb.dlogits));
}

TEST(MoeChecks, ZeroTokensRun) {
  Params p = randomParams(0, 8, 4, 6, 2, true, 150);
  Block b(p, DType::F32);
  ASSERT_OK(b.forward());
  EXPECT_EQ(b.offsets.ints(), (std::vector<int32_t>{0, 0, 0, 0, 0}));
  Block::Grads g = b.makeGrads();
  ASSERT_OK(b.backward({}, g));
  for (double v : g.dw1.values())
    EXPECT_EQ(v, 0.0);
}

//===----------------------------------------------------------------------===//
// Expert parallelism's row moves (moe_dispatch, moe_local_experts)
//===----------------------------------------------------------------------===//

// Rows arrive by source, then local expert; the plan regroups them by
// expert, sources ascending, and leaves experts without rows empty. Here
// counts[s * 2 + l] for 3 sources: arrival blocks (s0 l0: 0-2), (s1 l0:
// 3-4), (s1 l1: 5-8), (s2 l1: 9); source 0 sends expert 1 nothing and
// source 2 sends expert 0 nothing.
TEST(MoeRowMoves, ReceivedPlanGroupsByExpertThenSource) {
  Owned offsets({3}, DType::I32), rowToken({10}, DType::I32);
  ASSERT_OK(moeReceivedPlan({3, 0, 2, 4, 0, 1}, 2, offsets, rowToken));
  EXPECT_EQ(offsets.ints(), (std::vector<int32_t>{0, 5, 10}));
  EXPECT_EQ(rowToken.ints(),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // Source-major arrival is expert-major only with one expert per rank;
  // with two sources interleaving their experts the plan reorders.
  Owned off2({3}, DType::I32), tok2({6}, DType::I32);
  ASSERT_OK(moeReceivedPlan({1, 2, 2, 1}, 2, off2, tok2));
  EXPECT_EQ(off2.ints(), (std::vector<int32_t>{0, 3, 6}));
  EXPECT_EQ(tok2.ints(), (std::vector<int32_t>{0, 3, 4, 1, 2, 5}));
  // Nothing received at all.
  Owned off0({3}, DType::I32), tok0({0}, DType::I32);
  ASSERT_OK(moeReceivedPlan({0, 0, 0, 0}, 2, off0, tok0));
  EXPECT_EQ(off0.ints(), (std::vector<int32_t>{0, 0, 0}));
}

// y[t] is the f32 sum of t's rows in ascending row order, rounded once to
// y's dtype; a token without rows gets 0. bf16 (7 fraction bits) shows the
// single rounding: 1 + 2^-8 + 2^-8 is 1 + 2^-7 in f32 and in bf16, while
// rounding after each add would leave 1 (each 1 + 2^-8 a tie, to even).
TEST(MoeRowMoves, ScatterAddSumsAscendingRowsRoundedOnce) {
  Owned rows({4, 2}), y({3, 2}, DType::BF16);
  rows.set({1.0, -2.0, 0x1p-8, 3.0, 5.0, 0.5, 0x1p-8, 0.25});
  ASSERT_OK(moeScatterAddRows(rows, ids({4}, {0, 0, 2, 0}), y));
  EXPECT_EQ(y.values(),
            (std::vector<double>{1.0 + 0x1p-7, 1.25, 0.0, 0.0, 5.0, 0.5}));
}

// The gather copies rows (a permutation and its scatter-add are inverse),
// and both kernels refuse a token out of range, naming the row.
TEST(MoeRowMoves, GatherAndScatterAreInverseAndCheckTokens) {
  Owned x({3, 2});
  x.set({1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  Owned perm = ids({3}, {2, 0, 1}), rows({3, 2}), back({3, 2});
  ASSERT_OK(moeGatherRows(x, perm, rows));
  EXPECT_EQ(rows.values(), (std::vector<double>{5.0, 6.0, 1.0, 2.0, 3.0, 4.0}));
  ASSERT_OK(moeScatterAddRows(rows, perm, back));
  EXPECT_TRUE(back.sameBits(x));
  Owned bad = ids({3}, {2, 3, 1});
  expectError(moeGatherRows(x, bad, rows),
              "moe_gather_rows: rowToken[1] = 3 is out of range [0, 3)");
  expectError(moeScatterAddRows(rows, bad, back),
              "moe_scatter_add_rows: rowToken[1] = 3 is out of range [0, 3)");
}

TEST(MoeChecks, RowMoves) {
  Owned x({3, 2}), rows({2, 2}), tokens = ids({2}, {0, 1});
  expectError(moeGatherRows(x, tokens, Owned({2, 2}, DType::BF16)),
              "moe_gather_rows: rows must be x's dtype");
  expectError(moeGatherRows(x, tokens, Owned({3, 2})),
              "moe_gather_rows: rows must be [N, h] = [2, 2]");
  expectError(moeScatterAddRows(Owned({2, 3}), tokens, x),
              "moe_scatter_add_rows: rows must be [N, h] = [2, 2]");
  Owned offsets({3}, DType::I32), rowToken({3}, DType::I32);
  expectError(moeReceivedPlan({1, 2, 0}, 2, offsets, rowToken),
              "moe_received_plan: 3 counts are not a whole number of sources "
              "of 2 local experts");
  expectError(moeReceivedPlan({1, -1}, 2, offsets, rowToken),
              "moe_received_plan: a negative row count -1");
  expectError(moeReceivedPlan({1, 1}, 2, offsets, rowToken),
              "moe_received_plan: rowToken must be [rows received] = [2]");
  expectError(moeReceivedPlan({1, 2}, 2, Owned({2}, DType::I32), rowToken),
              "moe_received_plan: offsets must be [local + 1] = [3]");
}

//===----------------------------------------------------------------------===//
// The auxiliary load-balancing loss (Mixtral's output_router_logits)
//
// The float64 reference, from Hugging Face's load_balancing_loss_func
// (transformers 5.24, modeling_mixtral.py): per layer, p = softmax(x gate^T)
// and the top-k experts of p; tokens_per_expert = histc of every layer's
// selected experts / total rows, router_prob_per_expert = the sum of every
// layer's p / total rows, aux = E * sum(tokens_per_expert *
// router_prob_per_expert); MixtralForCausalLM adds router_aux_loss_coef *
// aux to the loss. The selection is held fixed for the finite differences
// (its gradient is zero almost everywhere, as torch's histc has none).
//===----------------------------------------------------------------------===//

struct RouterLayer {
  std::vector<double> x, gate;  // [T, h], [E, h]
  std::vector<int32_t> indices; // [T, k]
};

double referenceAux(const std::vector<RouterLayer> &layers, int64_t T,
                    int64_t h, int64_t E, int64_t k, double coefficient,
                    double loss) {
  std::vector<double> count(size_t(E), 0.0), prob(size_t(E), 0.0);
  double rows = 0.0;
  for (const RouterLayer &l : layers) {
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> logit(static_cast<size_t>(E));
      double m = -INFINITY, sum = 0.0;
      for (int64_t e = 0; e < E; ++e) {
        double v = 0.0;
        for (int64_t i = 0; i < h; ++i)
          v += l.x[size_t(t * h + i)] * l.gate[size_t(e * h + i)];
        logit[size_t(e)] = v;
        m = std::max(m, v);
      }
      for (double v : logit)
        sum += std::exp(v - m);
      for (int64_t e = 0; e < E; ++e)
        prob[size_t(e)] += std::exp(logit[size_t(e)] - m) / sum;
      for (int64_t j = 0; j < k; ++j)
        count[size_t(l.indices[size_t(t * k + j)])] += 1.0;
    }
    rows += double(T);
  }
  double aux = 0.0;
  for (int64_t e = 0; e < E; ++e)
    aux += (count[size_t(e)] / rows) * (prob[size_t(e)] / rows);
  return loss + coefficient * double(E) * aux;
}

// The top-k of softmax(x gate^T) per token (float64; ties are measure zero
// on random data).
std::vector<int32_t> referenceTopK(const std::vector<double> &x,
                                   const std::vector<double> &gate, int64_t T,
                                   int64_t h, int64_t E, int64_t k) {
  std::vector<int32_t> out;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<std::pair<double, int32_t>> logits;
    for (int64_t e = 0; e < E; ++e) {
      double v = 0.0;
      for (int64_t i = 0; i < h; ++i)
        v += x[size_t(t * h + i)] * gate[size_t(e * h + i)];
      logits.push_back({-v, int32_t(e)});
    }
    std::sort(logits.begin(), logits.end());
    for (int64_t j = 0; j < k; ++j)
      out.push_back(logits[size_t(j)].second);
  }
  return out;
}

struct LoadBalancingRun {
  std::vector<Owned> logits, stats;
  Owned result{{}};
  std::vector<std::vector<double>> dx, dgate;
};

// The kernels as the executor chains them (Dispatch.h): per layer the
// logits (linear, f32), the statistics; the loss; then its backward and,
// per layer, dlogits and the logits' linear backward.
void runLoadBalancing(const std::vector<RouterLayer> &layers, int64_t T,
                      int64_t h, int64_t E, int64_t k, double coefficient,
                      double loss, LoadBalancingRun &run) {
  std::vector<Tensor> stats;
  std::vector<Owned> xs, gates;
  for (const RouterLayer &l : layers) {
    xs.emplace_back(std::vector<int64_t>{T, h});
    xs.back().set(l.x);
    gates.emplace_back(std::vector<int64_t>{E, h});
    gates.back().set(l.gate);
    run.logits.emplace_back(std::vector<int64_t>{T, E});
    run.stats.emplace_back(std::vector<int64_t>{2, E});
    ASSERT_OK(
        linearForward(xs.back(), gates.back(), nullptr, run.logits.back()));
    ASSERT_OK(moeRouterStats(run.logits.back(), ids({T, k}, l.indices),
                             run.stats.back()));
  }
  for (const Owned &s : run.stats)
    stats.push_back(s.view);
  Owned lossT({});
  lossT.set({loss});
  ASSERT_OK(moeLoadBalancingLoss(lossT, stats, k, coefficient, run.result));
  Owned one({}), dstats({2, E});
  one.set({1.0});
  ASSERT_OK(moeLoadBalancingLossBackward(one, stats, k, coefficient, dstats));
  for (size_t l = 0; l < layers.size(); ++l) {
    Owned dlogits({T, E}), dx({T, h}), dgate({E, h});
    ASSERT_OK(moeRouterStatsBackward(dstats, run.logits[l], dlogits));
    ASSERT_OK(linearGradInput(dlogits, gates[l], dx));
    ASSERT_OK(linearGradWeight(dlogits, xs[l], dgate));
    run.dx.push_back(dx.values());
    run.dgate.push_back(dgate.values());
  }
}

std::vector<RouterLayer> randomRouterLayers(int64_t layers, int64_t T,
                                            int64_t h, int64_t E, int64_t k,
                                            unsigned seed) {
  std::vector<RouterLayer> out;
  for (int64_t l = 0; l < layers; ++l) {
    RouterLayer r;
    r.x = randomValues(size_t(T * h), seed + 10 * unsigned(l));
    r.gate = randomValues(size_t(E * h), seed + 10 * unsigned(l) + 1);
    r.indices = referenceTopK(r.x, r.gate, T, h, E, k);
    out.push_back(r);
  }
  return out;
}

TEST(MoeLoadBalancing, LossMatchesHuggingFaceFormulaInFloat64) {
  const int64_t T = 12, h = 16, E = 4, k = 2;
  for (double coefficient : {0.02, 1.0}) {
    auto layers = randomRouterLayers(3, T, h, E, k, 41);
    LoadBalancingRun run;
    runLoadBalancing(layers, T, h, E, k, coefficient, 2.5, run);
    double expected = referenceAux(layers, T, h, E, k, coefficient, 2.5);
    EXPECT_NEAR(loadElement(run.result, 0), expected, 1e-6 * expected);
    // The statistics themselves: k counts per token, probabilities summing
    // to one per token.
    for (const Owned &s : run.stats) {
      std::vector<double> v = s.values();
      EXPECT_DOUBLE_EQ(std::accumulate(v.begin(), v.begin() + E, 0.0),
                       double(T * k));
      EXPECT_NEAR(std::accumulate(v.begin() + E, v.end(), 0.0), double(T),
                  1e-5);
    }
  }
}

TEST(MoeLoadBalancing, BalancedRoutingGivesTheMinimumTopK) {
  // T = 8 tokens, every expert gets T k / E = 4 pairs and probability mass
  // T / E = 2: f_e = k / E, P_e = 1 / E, aux = E sum_e f_e P_e = k (Switch
  // Transformer's minimum 1 for top-1); the coefficient 0.5 scales it.
  const int64_t E = 4, k = 2;
  Owned stats({2, E}), loss({}), result({});
  stats.set({4, 4, 4, 4, 2, 2, 2, 2});
  loss.set({0.25});
  ASSERT_OK(moeLoadBalancingLoss(loss, {stats.view}, k, 0.5, result));
  EXPECT_DOUBLE_EQ(loadElement(result, 0), 0.25 + 0.5 * 2.0);
  // Every token to experts 0 and 1, which hold all the probability (6 and
  // 2 of 8): f = (1, 1, 0, 0), P = (0.75, 0.25, 0, 0), aux = E = 4.
  stats.set({8, 8, 0, 0, 6, 2, 0, 0});
  ASSERT_OK(moeLoadBalancingLoss(loss, {stats.view}, k, 0.5, result));
  EXPECT_DOUBLE_EQ(loadElement(result, 0), 0.25 + 0.5 * 4.0);
}

TEST(MoeLoadBalancing, GradientsMatchFiniteDifferences) {
  const int64_t T = 6, h = 8, E = 4, k = 2;
  const double coefficient = 0.7;
  auto layers = randomRouterLayers(2, T, h, E, k, 7);
  LoadBalancingRun run;
  runLoadBalancing(layers, T, h, E, k, coefficient, 0.0, run);
  for (size_t l = 0; l < layers.size(); ++l) {
    for (bool gate : {false, true}) {
      std::vector<double> numeric;
      std::vector<double> &param = gate ? layers[l].gate : layers[l].x;
      for (size_t i = 0; i < param.size(); ++i) {
        double saved = param[i];
        param[i] = saved + kFiniteDifferenceStep;
        double up = referenceAux(layers, T, h, E, k, coefficient, 0.0);
        param[i] = saved - kFiniteDifferenceStep;
        double down = referenceAux(layers, T, h, E, k, coefficient, 0.0);
        param[i] = saved;
        numeric.push_back((up - down) / (2 * kFiniteDifferenceStep));
      }
      EXPECT_CLOSE(gate ? run.dgate[l] : run.dx[l], numeric, 1e-4,
                   gate ? "dgate" : "dx");
    }
  }
}

TEST(MoeLoadBalancing, BitIdenticalRunToRun) {
  const int64_t T = 10, h = 8, E = 4, k = 2;
  auto layers = randomRouterLayers(2, T, h, E, k, 3);
  LoadBalancingRun a, b;
  runLoadBalancing(layers, T, h, E, k, 0.02, 1.0, a);
  runLoadBalancing(layers, T, h, E, k, 0.02, 1.0, b);
  EXPECT_TRUE(a.result.sameBits(b.result));
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dgate, b.dgate);
}

TEST(MoeChecks, LoadBalancing) {
  Owned logits({3, 4}), stats({2, 4}), loss({}), result({}), dlogits({3, 4});
  Owned good = ids({3, 2}, {0, 1, 2, 3, 1, 2});
  ASSERT_OK(moeRouterStats(logits, good, stats));
  expectError(moeRouterStats(logits, ids({3, 2}, {0, 1, 2, 4, 1, 2}), stats),
              "moe_router_stats: indices[1, 1] = 4 is out of range [0, 4)");
  Owned stats3({2, 3});
  expectError(moeRouterStats(logits, good, stats3),
              "moe_router_stats: stats must be [2, E] = [2, 4], found [2, 3] "
              "f32");
  Owned statsBf({2, 4}, DType::BF16);
  expectError(moeRouterStats(logits, good, statsBf),
              "moe_router_stats: stats must be f32, found [2, 4] bf16");
  expectError(moeRouterStatsBackward(stats3, logits, dlogits),
              "moe_router_stats_backward: dstats must be [2, E] = [2, 4]");
  ASSERT_OK(moeLoadBalancingLoss(loss, {stats.view}, 2, 0.02, result));
  expectError(moeLoadBalancingLoss(loss, {}, 2, 0.02, result),
              "moe_load_balancing_loss: needs the statistics of at least one "
              "router");
  expectError(
      moeLoadBalancingLoss(loss, {stats.view, stats3.view}, 2, 0.02, result),
      "moe_load_balancing_loss: stats must be [2, E] = [2, 4], found "
      "[2, 3] f32");
  expectError(moeLoadBalancingLoss(loss, {stats.view}, 5, 0.02, result),
              "moe_load_balancing_loss: k = 5 must be between 1 and the "
              "number of experts E = 4");
  expectError(moeLoadBalancingLoss(loss, {stats.view}, 2, INFINITY, result),
              "moe_load_balancing_loss: the coefficient must be finite");
  expectError(moeLoadBalancingLoss(stats, {stats.view}, 2, 0.02, result),
              "moe_load_balancing_loss: loss must be a 0-d f32 loss, found "
              "[2, 4] f32");
  Owned dstats({2, 4});
  ASSERT_OK(moeLoadBalancingLossBackward(loss, {stats.view}, 2, 0.02, dstats));
  expectError(moeLoadBalancingLossBackward(loss, {stats.view}, 2, 0.02, result),
              "moe_load_balancing_loss_backward: dstats must be [2, E] = [2, "
              "4], found [] f32");
}

} // namespace
