//===- KernelTest.cpp - Tests of the runtime's CPU kernels ---------------===//
//
// Every backward kernel against central finite differences of its forward,
// plus hand computations (cross-entropy, Adam, clipping, loss scaling), the
// 16-bit conversions, causal masking and argument checks.
//
// Finite differences. The kernels compute in f32 only, so the differences are
// taken in f32 too: the objective is J(x) = sum_j r_j y_j(x) for fixed random
// r, summed in f64 from the f32 outputs, and each input element is moved by
// +-h with h = 1e-2, dividing by the step actually taken in f32. The error is
// truncation, about h^2 |f'''| / 6 ~ 2e-5, plus f32 rounding of the outputs,
// about sqrt(n) 6e-8 |y| / (2h) ~ 1e-5 for the sizes here. We check
//   max_i |analytic_i - numeric_i| <= 3e-4 * max(max_i |numeric_i|, 1e-2),
// an error relative to the gradient's scale: 10 times that estimate, and 4
// times the worst observed error (3e-8 to 7.1e-5; ZEROC_PRINT_GRAD_ERRORS=1
// prints them).
//
// Other tolerances are in units of the unit roundoff, u = 2^-24 for f32,
// 2^-8 for bf16 and 2^-11 for f16 (Higham, Accuracy and Stability, 2.1): a
// sum of k terms in f32, in any order, errs by at most about k u sum |term_i|
// (3.1), each test says how many terms and roundings it has.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "cpu/VectorMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

using namespace zeroc;
using namespace zeroc::cpu;

namespace {

constexpr float kStep = 1e-2f;
constexpr double kGradTolerance = 3e-4;
constexpr double kF32Unit = 0x1p-24;

/// A tensor the test owns, filled with f32 values and read back as f32.
struct Owned {
  std::vector<uint32_t> storage;
  Tensor view;

  Owned(std::vector<int64_t> shape, DType dtype = DType::F32) {
    view.dtype = dtype;
    view.shape = std::move(shape);
    storage.assign(view.bytes() / 4 + 1, 0);
    view.data = storage.data();
  }
  Owned(std::vector<int64_t> shape, const std::vector<float> &values,
        DType dtype = DType::F32)
      : Owned(std::move(shape), dtype) {
    set(values);
  }
  void set(const std::vector<float> &values) {
    EXPECT_EQ(int64_t(values.size()), view.numel());
    storeF32(view, 0, view.numel(), values.data());
  }
  std::vector<float> values() const {
    std::vector<float> v(view.numel());
    loadF32(view, 0, view.numel(), v.data());
    return v;
  }
  float at(int64_t i) const { return loadElement(view, i); }
  int64_t numel() const { return view.numel(); }
  operator const Tensor &() const { return view; }
};

Owned ids(std::vector<int64_t> shape, const std::vector<int32_t> &values) {
  Owned t(std::move(shape), DType::I32);
  std::copy(values.begin(), values.end(), t.view.i32());
  return t;
}

std::vector<float> randomValues(int64_t n, unsigned seed, float lo = -1.0f,
                                float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

Owned random(std::vector<int64_t> shape, unsigned seed,
             DType dtype = DType::F32) {
  Owned t(std::move(shape), dtype);
  t.set(randomValues(t.numel(), seed));
  return t;
}

double dot(const std::vector<float> &a, const std::vector<float> &b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    s += double(a[i]) * double(b[i]);
  return s;
}

/// dJ/dx by central differences, where `objective` runs the forward with
/// the current contents of `x` (an f32 tensor) and returns J.
std::vector<double> numericGradient(Owned &x,
                                    const std::function<double()> &objective) {
  std::vector<double> grad(x.numel());
  float *data = x.view.f32();
  for (int64_t i = 0; i < x.numel(); ++i) {
    float saved = data[i];
    float plus = saved + kStep, minus = saved - kStep;
    data[i] = plus;
    double jPlus = objective();
    data[i] = minus;
    double jMinus = objective();
    data[i] = saved;
    grad[i] = (jPlus - jMinus) / (double(plus) - double(minus));
  }
  return grad;
}

/// max |analytic - numeric| / max(max |numeric|, 1e-2).
double gradientError(const std::vector<float> &analytic,
                     const std::vector<double> &numeric) {
  EXPECT_EQ(analytic.size(), numeric.size());
  double worst = 0.0, scale = 1e-2;
  for (size_t i = 0; i < numeric.size(); ++i) {
    worst = std::max(worst, std::abs(double(analytic[i]) - numeric[i]));
    scale = std::max(scale, std::abs(numeric[i]));
  }
  if (std::getenv("ZEROC_PRINT_GRAD_ERRORS"))
    std::printf("    gradient error %.2e (scale %.2e)\n", worst / scale, scale);
  return worst / scale;
}

#define EXPECT_GRAD_NEAR(analytic, numeric)                                    \
  EXPECT_LE(gradientError((analytic), (numeric)), kGradTolerance)

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    Status status_ = (expr);                                                   \
    ASSERT_TRUE(status_.ok()) << status_.error;                                \
  } while (0)

void expectAllNear(const std::vector<float> &a, const std::vector<float> &b,
                   double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tolerance) << "at " << i;
}

//===----------------------------------------------------------------------===//
// 16-bit storage
//===----------------------------------------------------------------------===//

TEST(Conversion, Bf16KnownValues) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.5f), 0xc020);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(bf16ToFloat(0xc020), -2.5f);
  // 65504 needs 11 significant bits; bf16 has 8 and rounds it to 2^16.
  EXPECT_EQ(bf16ToFloat(floatToBf16(65504.0f)), 65536.0f);
  // Ties go to even: 1 + 2^-8 down to 1, 1 + 3 * 2^-8 up to 1 + 2^-6.
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.00390625f)), 1.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.01171875f)), 1.015625f);
  // Denormals are kept (bf16 has f32's exponent range).
  float denormal = bitsFloat(0x00010000u);
  EXPECT_EQ(floatToBf16(denormal), 0x0001);
  EXPECT_EQ(bf16ToFloat(0x0001), denormal);
  EXPECT_EQ(floatToBf16(bitsFloat(0x00018000u)), 0x0002); // a tie, to even
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(bitsFloat(0x7f800001u)))));
  EXPECT_EQ(bf16ToFloat(floatToBf16(INFINITY)), INFINITY);
  EXPECT_EQ(bf16ToFloat(floatToBf16(std::numeric_limits<float>::max())),
            INFINITY);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
}

TEST(Conversion, F16KnownValues) {
  EXPECT_EQ(floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(floatToF16(-2.5f), 0xc100);
  EXPECT_EQ(floatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(f16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(floatToF16(65519.0f), 0x7bff); // below the midpoint to 2^16
  EXPECT_EQ(floatToF16(65520.0f), 0x7c00); // the midpoint rounds to even: inf
  EXPECT_EQ(floatToF16(1e6f), 0x7c00);
  EXPECT_EQ(floatToF16(-1e6f), 0xfc00);
  // Subnormals: the smallest, 2^-24; half of it ties to 0; the largest.
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(floatToF16(std::ldexp(3.0f, -25)), 0x0002); // 1.5 ulp: to even
  EXPECT_EQ(f16ToFloat(0x03ff), 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
  EXPECT_EQ(floatToF16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(floatToF16(1e-10f), 0x0000);
  EXPECT_EQ(floatToF16(-0.0f), 0x8000);
  // Ties to even among normals: 1 + 2^-11 down, 1 + 3 * 2^-11 up.
  EXPECT_EQ(floatToF16(1.00048828125f), 0x3c00);
  EXPECT_EQ(floatToF16(1.00146484375f), 0x3c02);
  EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(std::nanf("")))));
  EXPECT_EQ(f16ToFloat(floatToF16(INFINITY)), INFINITY);
}

TEST(Conversion, RoundTripEveryBitPattern) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float f = f16ToFloat(uint16_t(h));
    float b = bf16ToFloat(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(f))));
    } else {
      EXPECT_EQ(floatToF16(f), h) << std::hex << h;
    }
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(b))));
    } else {
      EXPECT_EQ(floatToBf16(b), h) << std::hex << h;
    }
  }
}

#ifdef __FLT16_MANT_DIG__
// The compiler's own conversion as a reference, over random bit patterns
// that cover every exponent, subnormals and overflow included.
TEST(Conversion, F16MatchesCompiler) {
  std::mt19937 gen(7);
  for (int i = 0; i < 1000000; ++i) {
    float f = bitsFloat(uint32_t(gen()));
    if (std::isnan(f))
      continue;
    _Float16 reference = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &reference, sizeof bits);
    ASSERT_EQ(floatToF16(f), bits) << f;
  }
}
#endif

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

TEST(Embedding, ForwardCopiesRows) {
  Owned table = random({5, 3}, 1, DType::BF16);
  Owned tokens = ids({2, 2}, {4, 0, 4, 2});
  Owned out({2, 2, 3});
  ASSERT_OK(embeddingForward(table, tokens, out));
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t h = 0; h < 3; ++h)
      EXPECT_EQ(out.at(t * 3 + h), table.at(tokens.view.i32()[t] * 3 + h));
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  Owned table = random({6, 4}, 2);
  Owned tokens = ids({2, 3}, {1, 5, 1, 0, 1, 3});
  Owned out({2, 3, 4}), dy = random({2, 3, 4}, 3), dtable({6, 4});
  std::vector<float> r = dy.values();
  ASSERT_OK(embeddingBackward(dy, tokens, dtable));
  auto numeric = numericGradient(table, [&] {
    EXPECT_TRUE(embeddingForward(table, tokens, out).ok());
    return dot(out.values(), r);
  });
  EXPECT_GRAD_NEAR(dtable.values(), numeric);
  // Rows 2 and 4 were not read: zero gradient; row 1 sums three tokens.
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_EQ(dtable.at(2 * 4 + h), 0.0f);
    EXPECT_FLOAT_EQ(dtable.at(1 * 4 + h),
                    dy.at(0 * 4 + h) + dy.at(2 * 4 + h) + dy.at(4 * 4 + h));
  }
}

TEST(Embedding, RejectsIdsOutsideTheTable) {
  Owned table = random({4, 2}, 1), out({1, 2, 2});
  Status s = embeddingForward(table, ids({1, 2}, {0, 4}), out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error.find("token id 4 at position 1 is outside [0, 4)"),
            std::string::npos)
      << s.error;
  EXPECT_FALSE(embeddingForward(table, ids({1, 2}, {-1, 0}), out).ok());
  Owned wrong({1, 2, 3});
  EXPECT_FALSE(embeddingForward(table, ids({1, 2}, {0, 1}), wrong).ok());
}

TEST(PositionEmbedding, ForwardAndBackward) {
  Owned table = random({5, 3}, 4);
  Owned out({2, 3, 3}), dy = random({2, 3, 3}, 5), dtable({5, 3});
  ASSERT_OK(positionEmbeddingForward(table, out));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 9; ++i)
      EXPECT_EQ(out.at(b * 9 + i), table.at(i));
  ASSERT_OK(positionEmbeddingBackward(dy, dtable));
  std::vector<float> r = dy.values();
  auto numeric = numericGradient(table, [&] {
    EXPECT_TRUE(positionEmbeddingForward(table, out).ok());
    return dot(out.values(), r);
  });
  EXPECT_GRAD_NEAR(dtable.values(), numeric);
  for (int64_t i = 9; i < 15; ++i)
    EXPECT_EQ(dtable.at(i), 0.0f);
  Owned tooLong({1, 6, 3});
  EXPECT_FALSE(positionEmbeddingForward(table, tooLong).ok());
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

TEST(Linear, ForwardMatchesLoops) {
  Owned x = random({2, 3, 4}, 6), w = random({5, 4}, 7), b = random({5}, 8);
  Owned y({2, 3, 5});
  ASSERT_OK(linearForward(x, w, &b.view, y));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 5; ++o) {
      double s = b.at(o), magnitude = std::abs(b.at(o));
      for (int64_t i = 0; i < 4; ++i) {
        s += double(x.at(r * 4 + i)) * w.at(o * 4 + i);
        magnitude += std::abs(double(x.at(r * 4 + i)) * w.at(o * 4 + i));
      }
      // Four products and the bias summed in f32, in any order: at most
      // 5 u sum |terms| (Higham 3.1), and 6 u with the bias added apart.
      EXPECT_NEAR(y.at(r * 5 + o), s, 6 * kF32Unit * magnitude);
    }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  Owned x = random({2, 3, 4}, 9), w = random({5, 4}, 10), b = random({5}, 11);
  Owned y({2, 3, 5}), dy = random({2, 3, 5}, 12);
  Owned dx({2, 3, 4}), dw({5, 4}), db({5});
  ASSERT_OK(linearGradInput(dy, w, dx));
  ASSERT_OK(linearGradWeight(dy, x, dw));
  ASSERT_OK(linearGradBias(dy, db));
  std::vector<float> r = dy.values();
  auto objective = [&] {
    EXPECT_TRUE(linearForward(x, w, &b.view, y).ok());
    return dot(y.values(), r);
  };
  EXPECT_GRAD_NEAR(dx.values(), numericGradient(x, objective));
  EXPECT_GRAD_NEAR(dw.values(), numericGradient(w, objective));
  EXPECT_GRAD_NEAR(db.values(), numericGradient(b, objective));
}

// 16-bit storage: the operands are widened exactly, the product accumulates
// in f32, and the result is rounded once. So against f32 on the same values
// the only difference is that rounding: half an ulp, u = 2^-8 relative for
// bf16 (8 significant bits) and 2^-11 for f16 (11 bits). Observed: the worst
// element uses 0.95 of that bound in bf16 and 0.98 in f16.
TEST(Linear, Bf16StorageMatchesF32) {
  const double bf16Unit = 0x1p-8, f16Unit = 0x1p-11;
  Owned x = random({3, 4, 32}, 13, DType::BF16);
  Owned w = random({16, 32}, 14, DType::BF16);
  Owned b = random({16}, 15, DType::BF16);
  Owned y({3, 4, 16}, DType::BF16);
  ASSERT_OK(linearForward(x, w, &b.view, y));
  Owned x32({3, 4, 32}, x.values()), w32({16, 32}, w.values());
  Owned b32({16}, b.values()), y32({3, 4, 16});
  ASSERT_OK(linearForward(x32, w32, &b32.view, y32));
  for (int64_t i = 0; i < y.numel(); ++i)
    EXPECT_NEAR(y.at(i), y32.at(i), std::abs(y32.at(i)) * bf16Unit);

  // Against f32 data that was never rounded: each input is off by at most
  // u relative, so y is off by sum |x||w| 2u + |b| u, plus u |y| on store
  // (the f32 sums' own errors, at most 2 x 33 x 2^-24 sum |x||w|, are
  // under 0.1% of the first term). A worst-case bound: observed, the worst
  // element uses 0.25 of it.
  Owned xExact({3, 4, 32}, randomValues(3 * 4 * 32, 13));
  Owned wExact({16, 32}, randomValues(16 * 32, 14));
  Owned bExact({16}, randomValues(16, 15)), yExact({3, 4, 16});
  ASSERT_OK(linearForward(xExact, wExact, &bExact.view, yExact));
  for (int64_t r = 0; r < 12; ++r)
    for (int64_t o = 0; o < 16; ++o) {
      double magnitude = 0;
      for (int64_t i = 0; i < 32; ++i)
        magnitude += std::abs(xExact.at(r * 32 + i) * wExact.at(o * 32 + i));
      double exact = yExact.at(r * 16 + o);
      double bound = 2 * bf16Unit * magnitude +
                     bf16Unit * std::abs(bExact.at(o)) +
                     bf16Unit * (std::abs(exact) + 1e-3);
      EXPECT_NEAR(y.at(r * 16 + o), exact, bound);
    }

  // The input gradient in f16.
  Owned dy = random({3, 4, 16}, 16, DType::F16), dx({3, 4, 32}, DType::F16);
  Owned wf16 = random({16, 32}, 14, DType::F16);
  Owned dy32({3, 4, 16}, dy.values()), wf32({16, 32}, wf16.values());
  Owned dx32({3, 4, 32});
  ASSERT_OK(linearGradInput(dy, wf16, dx));
  ASSERT_OK(linearGradInput(dy32, wf32, dx32));
  for (int64_t i = 0; i < dx.numel(); ++i)
    EXPECT_NEAR(dx.at(i), dx32.at(i), std::abs(dx32.at(i)) * f16Unit);
}

TEST(Linear, RejectsMismatchedShapes) {
  Owned x = random({2, 4}, 1), w = random({5, 3}, 2), y({2, 5});
  Status s = linearForward(x, w, nullptr, y);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error.find("weight must be [out, in] = [5, 4], found [5, 3] f32"),
            std::string::npos)
      << s.error;
  Owned w2 = random({5, 4}, 2), b({4});
  EXPECT_FALSE(linearForward(x, w2, &b.view, y).ok());
  Owned y3({3, 5});
  EXPECT_FALSE(linearForward(x, w2, nullptr, y3).ok());
  EXPECT_FALSE(linearGradWeight(y, x, w).ok());
}

TEST(Linear, ZeroSizedShapes) {
  Owned x({0, 4}), w = random({3, 4}, 1), y({0, 3}), dw({3, 4});
  ASSERT_OK(linearForward(x, w, nullptr, y));
  ASSERT_OK(linearGradWeight(y, x, dw));
  for (float v : dw.values())
    EXPECT_EQ(v, 0.0f);
  Owned x0({2, 0}), w0({3, 0}), b = random({3}, 2), y0({2, 3});
  ASSERT_OK(linearForward(x0, w0, &b.view, y0));
  EXPECT_EQ(y0.at(4), b.at(1));
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  Owned x = random({2, 3, 8}, 17), w = random({8}, 18), b = random({8}, 19);
  Owned y({2, 3, 8}), dy = random({2, 3, 8}, 20);
  Owned dx({2, 3, 8}), dw({8}), db({8});
  std::vector<float> saved(12);
  const float eps = 1e-5f;
  ASSERT_OK(layerNormForward(x, w, b, eps, y, saved.data()));
  ASSERT_OK(layerNormBackward(x, w, dy, eps, saved.data(), dx, dw, db));
  // The saved statistics are the rows' mean and 1/std, from two passes in
  // f32 over rows of 8 in [-1, 1): the mean errs by at most 8 u max |x|
  // (7 additions, one division), 4.8e-7; the variance by (8 + 4) u relative
  // (a subtraction and a product per term, 7 additions, the division and
  // eps), so 1/sqrt(var + eps) by half that plus 2 u, 8 u relative.
  // Observed: 7.5e-9 and 1.3e-7 (1.4 u relative).
  for (int64_t r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 8; ++i)
      mean += x.at(r * 8 + i) / 8.0;
    for (int64_t i = 0; i < 8; ++i)
      var += std::pow(x.at(r * 8 + i) - mean, 2) / 8.0;
    EXPECT_NEAR(saved[r], mean, 1e-6);
    EXPECT_NEAR(saved[6 + r], 1.0 / std::sqrt(var + eps),
                8 * kF32Unit / std::sqrt(var + eps));
  }
  std::vector<float> r = dy.values();
  auto objective = [&] {
    EXPECT_TRUE(layerNormForward(x, w, b, eps, y, nullptr).ok());
    return dot(y.values(), r);
  };
  EXPECT_GRAD_NEAR(dx.values(), numericGradient(x, objective));
  EXPECT_GRAD_NEAR(dw.values(), numericGradient(w, objective));
  EXPECT_GRAD_NEAR(db.values(), numericGradient(b, objective));
  // Recomputing the statistics gives the same gradients.
  Owned dx2({2, 3, 8}), dw2({8}), db2({8});
  ASSERT_OK(layerNormBackward(x, w, dy, eps, nullptr, dx2, dw2, db2));
  EXPECT_EQ(dx2.values(), dx.values());
  EXPECT_EQ(dw2.values(), dw.values());
}

TEST(LayerNorm, RejectsWrongParameterShape) {
  Owned x = random({2, 8}, 1), w({7}), b({8}), y({2, 8});
  Status s = layerNormForward(x, w, b, 1e-5f, y, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error.find("weight must be [8]"), std::string::npos) << s.error;
}

TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
  Owned x = random({2, 3, 8}, 21), w = random({8}, 22);
  Owned y({2, 3, 8}), dy = random({2, 3, 8}, 23), dx({2, 3, 8}), dw({8});
  std::vector<float> saved(6);
  const float eps = 1e-5f;
  ASSERT_OK(rmsNormForward(x, w, eps, y, saved.data()));
  ASSERT_OK(rmsNormBackward(x, w, dy, eps, saved.data(), dx, dw));
  // 1/sqrt(mean(x^2) + eps) in f32 over rows of 8: the mean of squares errs
  // by (8 + 2) u relative (products, 7 additions, the division, eps), the
  // result by half that plus 2 u, 7 u relative. Observed 2 u.
  for (int64_t r = 0; r < 6; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < 8; ++i)
      ms += std::pow(x.at(r * 8 + i), 2) / 8.0;
    EXPECT_NEAR(saved[r], 1.0 / std::sqrt(ms + eps),
                7 * kF32Unit / std::sqrt(ms + eps));
  }
  std::vector<float> r = dy.values();
  auto objective = [&] {
    EXPECT_TRUE(rmsNormForward(x, w, eps, y, nullptr).ok());
    return dot(y.values(), r);
  };
  EXPECT_GRAD_NEAR(dx.values(), numericGradient(x, objective));
  EXPECT_GRAD_NEAR(dw.values(), numericGradient(w, objective));
  Owned dx2({2, 3, 8}), dw2({8});
  ASSERT_OK(rmsNormBackward(x, w, dy, eps, nullptr, dx2, dw2));
  EXPECT_EQ(dx2.values(), dx.values());
}

// Gemma's RMSNorm scales by 1 + weight, in f32: equal to the plain norm of
// the weight plus one, and its backward to finite differences.
TEST(RMSNorm, UnitOffsetIsOnePlusWeight) {
  Owned x = random({2, 3, 8}, 26), w = random({8}, 27);
  std::vector<float> plusOne = w.values();
  for (float &v : plusOne)
    v += 1.0f;
  Owned w1({8}, plusOne);
  Owned y({2, 3, 8}), y1({2, 3, 8});
  const float eps = 1e-6f;
  ASSERT_OK(rmsNormForward(x, w, eps, /*unitOffset=*/true, y, nullptr));
  ASSERT_OK(rmsNormForward(x, w1, eps, y1, nullptr));
  // The kernel forms 1 + w in f32 as the test does: the same arithmetic.
  EXPECT_EQ(y.values(), y1.values());

  Owned dy = random({2, 3, 8}, 28), dx({2, 3, 8}), dw({8});
  std::vector<float> saved(6);
  ASSERT_OK(rmsNormForward(x, w, eps, true, y, saved.data()));
  ASSERT_OK(rmsNormBackward(x, w, dy, eps, true, saved.data(), dx, dw));
  std::vector<float> r = dy.values();
  auto objective = [&] {
    EXPECT_TRUE(rmsNormForward(x, w, eps, true, y, nullptr).ok());
    return dot(y.values(), r);
  };
  EXPECT_GRAD_NEAR(dx.values(), numericGradient(x, objective));
  EXPECT_GRAD_NEAR(dw.values(), numericGradient(w, objective));
}

// bf16: the normalization and the 1 + weight scale in f32, one rounding.
TEST(RMSNorm, UnitOffsetBf16RoundsOnce) {
  Owned x = random({2, 16}, 29, DType::BF16), w = random({16}, 30, DType::BF16);
  Owned y({2, 16}, DType::BF16);
  ASSERT_OK(rmsNormForward(x, w, 1e-6f, true, y, nullptr));
  for (int64_t r = 0; r < 2; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < 16; ++i)
      ms += std::pow(x.at(r * 16 + i), 2) / 16.0;
    double rrms = 1.0 / std::sqrt(ms + 1e-6);
    for (int64_t i = 0; i < 16; ++i) {
      double exact = x.at(r * 16 + i) * rrms * (1.0 + w.at(i));
      // One bf16 rounding (u = 2^-8 relative) plus f32 noise.
      EXPECT_NEAR(y.at(r * 16 + i), exact, 0x1p-8 * std::abs(exact) + 1e-6);
    }
  }
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// Gemma's embedding scale: the factor is rounded to the tensor's dtype
// first, as Hugging Face casts its normalizer (sqrt(3072) = 55.43 is 55.5 in
// bf16); the gradient is the same op.
TEST(Scale, FactorRoundedToTheDtype) {
  const double factor = std::sqrt(3072.0);
  EXPECT_EQ(scaleFactor(factor, DType::BF16), 55.5f);
  EXPECT_EQ(scaleFactor(factor, DType::F32), float(factor));
  Owned x({3}, {1.0f, -2.0f, 0.25f}, DType::BF16), y({3}, DType::BF16);
  ASSERT_OK(scale(x, factor, y));
  EXPECT_EQ(y.values(), (std::vector<float>{55.5f, -111.0f, 13.875f}));
  Owned xf = random({4, 5}, 31), yf({4, 5});
  ASSERT_OK(scale(xf, 8.0, yf));
  for (int64_t i = 0; i < xf.numel(); ++i)
    EXPECT_EQ(yf.at(i), 8.0f * xf.at(i));
  EXPECT_FALSE(scale(xf, INFINITY, yf).ok());
  Owned wrong({5, 4});
  EXPECT_FALSE(scale(xf, 2.0, wrong).ok());
}

// Phi-3's fused projections: split cuts the last dimension into pieces in
// order, its backward concatenates them back, in any mix of dtypes.
TEST(Split, PiecesInOrderAndBackwardConcatenates) {
  Owned x = random({2, 3, 10}, 32);
  Owned a({2, 3, 4}), b({2, 3, 2}), c({2, 3, 4});
  ASSERT_OK(split(x, {a.view, b.view, c.view}));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = 0; i < 10; ++i) {
      float expected = x.at(r * 10 + i);
      float got = i < 4   ? a.at(r * 4 + i)
                  : i < 6 ? b.at(r * 2 + i - 4)
                          : c.at(r * 4 + i - 6);
      EXPECT_EQ(got, expected) << r << ", " << i;
    }
  Owned back({2, 3, 10});
  ASSERT_OK(splitBackward({a.view, b.view, c.view}, back));
  EXPECT_EQ(back.values(), x.values());
  // bf16 pieces from an f32 whole: rounded once each way.
  Owned h({2, 3, 4}, DType::BF16), rest({2, 3, 6}, DType::BF16);
  ASSERT_OK(split(x, {h.view, rest.view}));
  EXPECT_EQ(h.at(5), roundToDType(x.at(11), DType::BF16));
  Owned narrow({2, 3, 3});
  EXPECT_FALSE(split(x, {a.view, narrow.view}).ok());
  Owned otherRows({3, 2, 10});
  EXPECT_FALSE(splitBackward({otherRows.view}, x).ok());
}

TEST(Gelu, KnownValuesAndGradient) {
  // The references are printed to 10 digits; the f32 formula takes about ten
  // roundings, tanhf's within a few ulp: 1e-6 is about 16 u |y| (observed
  // 1.6e-8 and 7e-9, under half an ulp).
  Owned x({3}, {1.0f, -0.5f, 0.0f}), y({3});
  ASSERT_OK(geluForward(x, y));
  EXPECT_NEAR(y.at(0), 0.8411919906, 1e-6);
  EXPECT_NEAR(y.at(1), -0.1542859902, 1e-6);
  EXPECT_EQ(y.at(2), 0.0f);

  Owned xs = random({4, 6}, 24, DType::F32), ys({4, 6}),
        dy = random({4, 6}, 25);
  xs.set(randomValues(24, 24, -3.0f, 3.0f));
  Owned dx({4, 6});
  ASSERT_OK(geluBackward(xs, dy, dx));
  std::vector<float> r = dy.values();
  EXPECT_GRAD_NEAR(dx.values(), numericGradient(xs, [&] {
                     EXPECT_TRUE(geluForward(xs, ys).ok());
                     return dot(ys.values(), r);
                   }));
}

TEST(Silu, KnownValuesAndGradient) {
  // As for gelu: 1e-6 is about 16 u |y| (observed 1.9e-8).
  Owned x({2}, {1.0f, 0.0f}), y({2});
  ASSERT_OK(siluForward(x, y));
  EXPECT_NEAR(y.at(0), 0.7310585786, 1e-6);
  EXPECT_EQ(y.at(1), 0.0f);

  Owned xs({4, 6}, randomValues(24, 26, -4.0f, 4.0f)), ys({4, 6});
  Owned dy = random({4, 6}, 27), dx({4, 6});
  ASSERT_OK(siluBackward(xs, dy, dx));
  std::vector<float> r = dy.values();
  EXPECT_GRAD_NEAR(dx.values(), numericGradient(xs, [&] {
                     EXPECT_TRUE(siluForward(xs, ys).ok());
                     return dot(ys.values(), r);
                   }));
  // Far in the tails: finite, and the limits 0 and dy.
  Owned tails({2}, {-100.0f, 100.0f}), ones({2}, {1.0f, 1.0f}), dt({2});
  ASSERT_OK(siluBackward(tails, ones, dt));
  EXPECT_EQ(dt.at(0), 0.0f);
  EXPECT_EQ(dt.at(1), 1.0f);
}

// expApprox (cpu/VectorMath.h) against exp in double: every 97th float of
// its range, within 2 ulp of the correctly rounded result (observed: 1);
// the ends and the special values as the header says.
TEST(ExpApprox, WithinTwoUlpOfExp) {
  auto ulps = [](float got, double exact) {
    float want = float(exact);
    int32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    return std::abs(int64_t(a) - int64_t(b));
  };
  int64_t worst = 0, checked = 0;
  float worstAt = 0;
  auto check = [&](float x) {
    int64_t u = ulps(expApprox(x), std::exp(double(x)));
    if (u > worst)
      worst = u, worstAt = x;
    ++checked;
  };
  auto fromBits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  auto toBits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  // The magnitudes' bit patterns, each sign.
  for (uint32_t m = 0; m <= toBits(87.0f); m += 97)
    check(-fromBits(m));
  for (uint32_t m = 0; m <= toBits(88.72f); m += 97)
    check(fromBits(m));
  EXPECT_GT(checked, 20000000);
  EXPECT_LE(worst, 2) << "at " << worstAt;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(expApprox(0.0f), 1.0f);
  EXPECT_EQ(expApprox(88.73f), inf);
  EXPECT_EQ(expApprox(inf), inf);
  EXPECT_EQ(expApprox(-87.4f), 0.0f);
  EXPECT_EQ(expApprox(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(expApprox(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(sigmoidApprox(-100.0f), 0.0f);
  EXPECT_EQ(sigmoidApprox(100.0f), 1.0f);
}

// gelu and silu, forward and backward, against the tanh and sigmoid forms
// in double (Activations.h), over [-12, 12] in steps of 2^-10: within 8 ulp
// of max(|result|, 1). Observed 1.4e-7, 1.6e-7, 1.4e-7 and 1.8e-7; the f32
// formulas through libm's tanhf and expf (before cpu/VectorMath.h) gave
// 1.1e-7, 5.5e-7, 1.4e-7 and 7.6e-7 on the same grid.
TEST(GeluSilu, MatchDoublePrecisionForms) {
  std::vector<float> xs;
  for (float x = -12.0f; x <= 12.0f; x += 1.0f / 1024)
    xs.push_back(x);
  const int64_t n = int64_t(xs.size());
  Owned x({n}, xs), ones({n}, std::vector<float>(size_t(n), 1.0f)), y({n}),
      g({n}), sy({n}), sg({n});
  ASSERT_OK(geluForward(x, y));
  ASSERT_OK(geluBackward(x, ones, g));
  ASSERT_OK(siluForward(x, sy));
  ASSERT_OK(siluBackward(x, ones, sg));
  double worst[4] = {};
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[size_t(i)], c = 0.044715, k = std::sqrt(2.0 / M_PI);
    const double u = k * (v + c * v * v * v), t = std::tanh(u);
    const double gelu = 0.5 * v * (1 + t);
    const double dgelu =
        0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v);
    const double s = 1 / (1 + std::exp(-v));
    const double silu = v * s, dsilu = s * (1 + v * (1 - s));
    // Relative to max(|exact|, 1): the functions are O(1) near 0 (where
    // the derivatives pass through 0), about x or 0 in the tails.
    auto err = [](float got, double exact) {
      return std::abs(got - exact) / std::max(std::abs(exact), 1.0);
    };
    worst[0] = std::max(worst[0], err(y.at(i), gelu));
    worst[1] = std::max(worst[1], err(g.at(i), dgelu));
    worst[2] = std::max(worst[2], err(sy.at(i), silu));
    worst[3] = std::max(worst[3], err(sg.at(i), dsilu));
  }
  for (int k = 0; k < 4; ++k)
    EXPECT_LT(worst[k], 8 * 6e-8) << k;
}

// Every loop gives the same bits, on ordinary values, the tails, zeros,
// infinities and NaN (which stays NaN: an fp16 overflow must reach the
// loss scaler).
TEST(GeluSilu, SameBitsOnEveryLoop) {
  std::vector<float> xs = randomValues(4099, 31, -20.0f, 20.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float special :
       {0.0f, -0.0f, inf, -inf, 1e-30f, -1e-30f, 88.8f, -88.8f, 200.0f, -200.0f,
        std::numeric_limits<float>::quiet_NaN()})
    xs.push_back(special);
  const int64_t n = int64_t(xs.size());
  Owned x({n}, xs), dy({n}, randomValues(n, 32, -2.0f, 2.0f));
  auto run = [&](VectorLoop loop) {
    std::vector<std::vector<float>> out;
    for (int k = 0; k < 4; ++k) {
      Owned r({n});
      Status st = k == 0   ? geluForwardLoop(x, r, loop)
                  : k == 1 ? geluBackwardLoop(x, dy, r, loop)
                  : k == 2 ? siluForwardLoop(x, r, loop)
                           : siluBackwardLoop(x, dy, r, loop);
      EXPECT_TRUE(st.ok());
      out.push_back(r.values());
    }
    return out;
  };
  auto portable = run(VectorLoop::Portable);
  // NaN's sign is not part of the result (AVX-512 and SSE give NaN inputs
  // back with different signs): one NaN for all.
  auto canonical = [](std::vector<std::vector<float>> r) {
    for (auto &v : r)
      for (float &f : v)
        if (std::isnan(f))
          f = std::numeric_limits<float>::quiet_NaN();
    return r;
  };
  portable = canonical(portable);
  for (VectorLoop loop : {VectorLoop::Avx2, VectorLoop::Avx512}) {
    auto other = canonical(run(loop));
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(std::memcmp(other[size_t(k)].data(), portable[size_t(k)].data(),
                            size_t(n) * 4),
                0)
          << "kernel " << k << ", loop " << int(vectorLoopFor(loop));
  }
  // NaN in, NaN out; the infinities' limits.
  EXPECT_TRUE(std::isnan(portable[0][size_t(n) - 1]));
  EXPECT_TRUE(std::isnan(portable[3][size_t(n) - 1]));
  EXPECT_EQ(portable[0][4099 + 2], inf);   // gelu(inf)
  EXPECT_EQ(portable[2][4099 + 2], inf);   // silu(inf)
  EXPECT_EQ(portable[2][4099 + 9], -0.0f); // silu(-200)
}

// add's gradient is dy to both operands; mul's is mul(dy, other operand),
// which is what the expansion emits: checked here against the forward.
TEST(AddMul, ForwardAndGradients) {
  Owned a = random({3, 5}, 28), b = random({3, 5}, 29), out({3, 5});
  ASSERT_OK(add(a, b, out));
  for (int64_t i = 0; i < 15; ++i)
    EXPECT_EQ(out.at(i), a.at(i) + b.at(i));
  Owned dy = random({3, 5}, 30), da({3, 5}), db({3, 5});
  ASSERT_OK(mul(dy, b, da));
  ASSERT_OK(mul(dy, a, db));
  std::vector<float> r = dy.values();
  auto objective = [&] {
    EXPECT_TRUE(mul(a, b, out).ok());
    return dot(out.values(), r);
  };
  EXPECT_GRAD_NEAR(da.values(), numericGradient(a, objective));
  EXPECT_GRAD_NEAR(db.values(), numericGradient(b, objective));
  std::vector<double> addGrad = numericGradient(a, [&] {
    EXPECT_TRUE(add(a, b, out).ok());
    return dot(out.values(), r);
  });
  EXPECT_GRAD_NEAR(r, addGrad);
  // In place, mixed dtypes.
  Owned h({3, 5}, a.values(), DType::BF16);
  ASSERT_OK(add(h, b, h));
  for (int64_t i = 0; i < 15; ++i)
    EXPECT_EQ(h.at(i),
              roundToDType(roundToDType(a.at(i), DType::BF16) + b.at(i),
                           DType::BF16));
  Owned other({5, 3});
  EXPECT_FALSE(add(a, other, out).ok());
}

//===----------------------------------------------------------------------===//
// Rotary
//===----------------------------------------------------------------------===//

TEST(Rotary, HuggingFacePairingAndAngles) {
  // One head of dim 4 at positions 0 and 1: pairs (0, 2) and (1, 3), angles
  // pos * 1 and pos * theta^(-1/2) = pos * 0.01.
  Owned x({1, 2, 4}, {1, 2, 3, 4, 1, 2, 3, 4}), y({1, 2, 4});
  ASSERT_OK(rotaryForward(x, 4, 10000.0, y));
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(y.at(i), x.at(i)); // position 0: no rotation
  double c0 = std::cos(1.0), s0 = std::sin(1.0);
  double c1 = std::cos(0.01), s1 = std::sin(0.01);
  // a c - b s in f32 with cos and sin rounded: at most about 4 u (|a| + |b|)
  // <= 4 x 2^-24 x 4 = 9.5e-7 (observed 1.2e-7).
  EXPECT_NEAR(y.at(4), 1 * c0 - 3 * s0, 1e-6);
  EXPECT_NEAR(y.at(6), 3 * c0 + 1 * s0, 1e-6);
  EXPECT_NEAR(y.at(5), 2 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(y.at(7), 4 * c1 + 2 * s1, 1e-6);
}

TEST(Rotary, BackwardIsTheInverseRotationAndTheGradient) {
  const int64_t headDim = 8;
  const double theta = 500000.0;
  Owned x = random({2, 5, 3 * headDim}, 31), y({2, 5, 3 * headDim});
  Owned back({2, 5, 3 * headDim});
  ASSERT_OK(rotaryForward(x, headDim, theta, y));
  ASSERT_OK(rotaryBackward(y, headDim, theta, back));
  // Each rotation of a pair of length r <= sqrt(2) errs by at most about
  // 3 u sqrt(2) r (two products and a sum per element, Higham 3.1), and the
  // angle's cos and sin add u r: forward and back, about 2 x 4 u x 2 = 9.5e-7.
  // Observed 1.2e-7 for both checks.
  expectAllNear(back.values(), x.values(), 1e-6);
  // Rotations keep each pair's length.
  for (int64_t i = 0; i < x.numel(); i += headDim)
    for (int64_t k = 0; k < headDim / 2; ++k) {
      double before = std::hypot(x.at(i + k), x.at(i + k + headDim / 2));
      double after = std::hypot(y.at(i + k), y.at(i + k + headDim / 2));
      EXPECT_NEAR(before, after, 1e-6);
    }
  Owned dy = random({2, 5, 3 * headDim}, 32), dx({2, 5, 3 * headDim});
  ASSERT_OK(rotaryBackward(dy, headDim, theta, dx));
  std::vector<float> r = dy.values();
  EXPECT_GRAD_NEAR(dx.values(), numericGradient(x, [&] {
                     EXPECT_TRUE(rotaryForward(x, headDim, theta, y).ok());
                     return dot(y.values(), r);
                   }));
  // In place.
  Owned inPlace({2, 5, 3 * headDim}, x.values());
  ASSERT_OK(rotaryForward(inPlace, headDim, theta, inPlace));
  ASSERT_OK(rotaryForward(x, headDim, theta, y));
  EXPECT_EQ(inPlace.values(), y.values());
}

TEST(Rotary, RejectsOddOrNonDividingHeadDim) {
  Owned x = random({1, 2, 12}, 1), y({1, 2, 12});
  EXPECT_FALSE(rotaryForward(x, 3, 10000.0, y).ok());
  EXPECT_FALSE(rotaryForward(x, 8, 10000.0, y).ok());
  EXPECT_FALSE(rotaryForward(x, 4, 0.0, y).ok());
  EXPECT_TRUE(rotaryForward(x, 6, 10000.0, y).ok());
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

// Causal attention in f64 loops, the reference for the GEMM kernel; with a
// `window` w > 0, query i sees keys i - w < j <= i only; with `documents`
// ([batch, seq] document starts), keys of its own document only.
std::vector<double>
referenceAttention(const Owned &q, const Owned &k, const Owned &v,
                   int64_t heads, int64_t kvHeads, std::vector<double> *probs,
                   int64_t window = 0,
                   const std::vector<int32_t> *documents = nullptr) {
  int64_t batch = q.view.dim(0), seq = q.view.dim(1);
  int64_t d = q.view.dim(2) / heads, qw = heads * d, kw = kvHeads * d;
  std::vector<double> out(q.numel(), 0.0);
  if (probs)
    probs->assign(batch * heads * seq * seq, 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t g = h / (heads / kvHeads);
      for (int64_t i = 0; i < seq; ++i) {
        int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        if (documents) {
          // The document of token i: from the last start at or before i.
          int64_t start = 0;
          for (int64_t j = 0; j <= i; ++j)
            if ((*documents)[size_t(b * seq + j)] == j)
              start = j;
          first = std::max(first, start);
        }
        std::vector<double> p(i + 1, -INFINITY);
        double max = -INFINITY, sum = 0;
        for (int64_t j = first; j <= i; ++j) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c)
            s += double(q.at((b * seq + i) * qw + h * d + c)) *
                 k.at((b * seq + j) * kw + g * d + c);
          p[j] = s / std::sqrt(double(d));
          max = std::max(max, p[j]);
        }
        for (double &x : p)
          sum += (x = std::exp(x - max));
        for (int64_t j = first; j <= i; ++j) {
          p[j] /= sum;
          if (probs)
            (*probs)[((b * heads + h) * seq + i) * seq + j] = p[j];
          for (int64_t c = 0; c < d; ++c)
            out[(b * seq + i) * qw + h * d + c] +=
                p[j] * v.at((b * seq + j) * kw + g * d + c);
        }
      }
    }
  return out;
}

struct AttentionCase {
  int64_t batch, seq, heads, kvHeads, headDim;
};

void checkAttentionGradients(const AttentionCase &c, unsigned seed) {
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Owned q = random({c.batch, c.seq, qw}, seed);
  Owned k = random({c.batch, c.seq, kw}, seed + 1);
  Owned v = random({c.batch, c.seq, kw}, seed + 2);
  Owned out({c.batch, c.seq, qw}), probs({c.batch, c.heads, c.seq, c.seq});
  ASSERT_OK(attentionForward(q, k, v, c.heads, c.kvHeads, out, &probs.view));

  std::vector<double> refProbs;
  std::vector<double> ref =
      referenceAttention(q, k, v, c.heads, c.kvHeads, &refProbs);
  // Scores are f32 dot products of length d <= 8 of values in [-1, 1),
  // scaled by 1/sqrt(d): within about d u sqrt(d) <= 23 u; the softmax and
  // P V over at most 6 positions add about 10 u. 1e-6 is 17 u, below that
  // worst case and 17 times the observed 5.8e-8 (out) and 4.8e-8 (probs).
  for (int64_t i = 0; i < out.numel(); ++i)
    EXPECT_NEAR(out.at(i), ref[i], 1e-6);
  for (int64_t i = 0; i < probs.numel(); ++i)
    EXPECT_NEAR(probs.at(i), refProbs[i], 1e-6);

  Owned dout = random({c.batch, c.seq, qw}, seed + 3);
  Owned dq({c.batch, c.seq, qw}), dk({c.batch, c.seq, kw}),
      dv({c.batch, c.seq, kw});
  ASSERT_OK(attentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                              &probs.view, dq, dk, dv));
  std::vector<float> r = dout.values();
  Owned y({c.batch, c.seq, qw});
  auto objective = [&] {
    EXPECT_TRUE(attentionForward(q, k, v, c.heads, c.kvHeads, y, nullptr).ok());
    return dot(y.values(), r);
  };
  EXPECT_GRAD_NEAR(dq.values(), numericGradient(q, objective));
  EXPECT_GRAD_NEAR(dk.values(), numericGradient(k, objective));
  EXPECT_GRAD_NEAR(dv.values(), numericGradient(v, objective));

  // Without the saved probabilities the backward recomputes them.
  Owned dq2({c.batch, c.seq, qw}), dk2({c.batch, c.seq, kw}),
      dv2({c.batch, c.seq, kw});
  ASSERT_OK(attentionBackward(q, k, v, out, dout, c.heads, c.kvHeads, nullptr,
                              dq2, dk2, dv2));
  EXPECT_EQ(dq2.values(), dq.values());
  EXPECT_EQ(dk2.values(), dk.values());
  EXPECT_EQ(dv2.values(), dv.values());
}

TEST(Attention, GroupedQueryBackwardMatchesFiniteDifferences) {
  checkAttentionGradients({2, 5, 4, 2, 4}, 40);
}

TEST(Attention, MultiHeadBackwardMatchesFiniteDifferences) {
  checkAttentionGradients({1, 6, 2, 2, 8}, 50);
}

TEST(Attention, MultiQueryBackwardMatchesFiniteDifferences) {
  checkAttentionGradients({1, 4, 3, 1, 2}, 60);
}

/// The causal mask of an attention kernel pair (materialized or flash):
/// changing q, k and v at `pos` leaves every earlier output bit-identical to
/// `before` (the outputs of the unchanged q, k, v) and changes the output at
/// `pos`; the gradient of output 2 reaches no key or value after position 2.
using AttentionForwardFn = Status (*)(const Tensor &, const Tensor &,
                                      const Tensor &, int64_t, int64_t,
                                      const Tensor &, const Tensor *);
using AttentionBackwardFn = Status (*)(const Tensor &, const Tensor &,
                                       const Tensor &, const Tensor &,
                                       const Tensor &, int64_t, int64_t,
                                       const Tensor *, const Tensor &,
                                       const Tensor &, const Tensor &);
void expectCausal(AttentionForwardFn forward, AttentionBackwardFn backward,
                  Owned &q, Owned &k, Owned &v, int64_t heads, int64_t kvHeads,
                  int64_t d, int64_t pos, const Owned &before) {
  const int64_t seq = q.view.shape[1];
  for (int64_t c = 0; c < kvHeads * d; ++c) {
    k.view.f32()[pos * kvHeads * d + c] += 0.5f;
    v.view.f32()[pos * kvHeads * d + c] -= 0.5f;
  }
  for (int64_t c = 0; c < heads * d; ++c)
    q.view.f32()[pos * heads * d + c] += 0.5f;
  Owned after({1, seq, heads * d});
  ASSERT_OK(forward(q, k, v, heads, kvHeads, after, nullptr));
  for (int64_t i = 0; i < pos * heads * d; ++i)
    EXPECT_EQ(after.at(i), before.at(i)) << "at " << i;
  bool changed = false;
  for (int64_t i = pos * heads * d; i < (pos + 1) * heads * d; ++i)
    changed |= after.at(i) != before.at(i);
  EXPECT_TRUE(changed);
  Owned dout({1, seq, heads * d}), dq({1, seq, heads * d});
  Owned dk({1, seq, kvHeads * d}), dv({1, seq, kvHeads * d});
  for (int64_t c = 0; c < heads * d; ++c)
    dout.view.f32()[2 * heads * d + c] = 1.0f;
  ASSERT_OK(
      backward(q, k, v, after, dout, heads, kvHeads, nullptr, dq, dk, dv));
  for (int64_t i = 3 * kvHeads * d; i < seq * kvHeads * d; ++i) {
    EXPECT_EQ(dk.at(i), 0.0f);
    EXPECT_EQ(dv.at(i), 0.0f);
  }
}

TEST(Attention, CausalMasking) {
  const int64_t heads = 4, kvHeads = 2, d = 4, seq = 6;
  Owned q = random({1, seq, heads * d}, 70);
  Owned k = random({1, seq, kvHeads * d}, 71);
  Owned v = random({1, seq, kvHeads * d}, 72);
  Owned before({1, seq, heads * d});
  Owned probs({1, heads, seq, seq});
  ASSERT_OK(attentionForward(q, k, v, heads, kvHeads, before, &probs.view));
  // The probabilities are zero above the diagonal and sum to 1 below it.
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < seq; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < seq; ++j) {
        float p = probs.at((h * seq + i) * seq + j);
        if (j > i) {
          EXPECT_EQ(p, 0.0f);
        }
        sum += p;
      }
      // At most 6 probabilities, each within about 10 u relative (see
      // checkAttentionGradients), summed in f64: 10 u = 6e-7 (observed
      // 8.9e-8).
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  // Changing k and v at position 4 (and q there) leaves positions 0..3
  // exactly as they were, and changes position 4.
  expectCausal(attentionForward, attentionBackward, q, k, v, heads, kvHeads, d,
               /*pos=*/4, before);
}

TEST(Attention, Bf16StorageMatchesF32) {
  const int64_t heads = 4, kvHeads = 2, d = 8, seq = 7;
  Owned q = random({2, seq, heads * d}, 80, DType::BF16);
  Owned k = random({2, seq, kvHeads * d}, 81, DType::BF16);
  Owned v = random({2, seq, kvHeads * d}, 82, DType::BF16);
  Owned out({2, seq, heads * d}, DType::BF16);
  Owned probs({2, heads, seq, seq}, DType::BF16);
  ASSERT_OK(attentionForward(q, k, v, heads, kvHeads, out, &probs.view));
  std::vector<double> ref =
      referenceAttention(q, k, v, heads, kvHeads, nullptr);
  // The reference takes the same (bf16) inputs in f64. P is rounded to bf16
  // before P V, off by at most u = 2^-8 relative, so with |v| <= 1 the sum is
  // off by at most u; the result's rounding adds u |out| <= u; the 1e-6 is
  // the f32 arithmetic's, as in checkAttentionGradients. Observed: the worst
  // element is off by 2.6e-3, a third of the bound.
  for (int64_t i = 0; i < out.numel(); ++i)
    EXPECT_NEAR(out.at(i), ref[i], 2 * 0x1p-8 + 1e-6);
}

TEST(Attention, RejectsBadHeadCounts) {
  Owned q = random({1, 3, 12}, 1), k = random({1, 3, 6}, 2);
  Owned v = random({1, 3, 6}, 3), out({1, 3, 12});
  EXPECT_FALSE(attentionForward(q, k, v, 4, 3, out, nullptr).ok());
  EXPECT_FALSE(attentionForward(q, k, v, 5, 1, out, nullptr).ok());
  EXPECT_FALSE(attentionForward(q, k, v, 4, 4, out, nullptr).ok());
  EXPECT_TRUE(attentionForward(q, k, v, 4, 2, out, nullptr).ok());
  Owned probs({1, 4, 3, 2});
  EXPECT_FALSE(attentionForward(q, k, v, 4, 2, out, &probs.view).ok());
  Owned none({0, 3, 12}), kNone({0, 3, 6}), vNone({0, 3, 6}), oNone({0, 3, 12});
  EXPECT_TRUE(attentionForward(none, kNone, vNone, 4, 2, oNone, nullptr).ok());
}

//===----------------------------------------------------------------------===//
// Flash attention
//===----------------------------------------------------------------------===//

// The row log-sum-exp of the scaled scores in f64, [batch, heads, seq].
std::vector<double> referenceLse(const Owned &q, const Owned &k, int64_t heads,
                                 int64_t kvHeads) {
  int64_t batch = q.view.dim(0), seq = q.view.dim(1);
  int64_t d = q.view.dim(2) / heads, qw = heads * d, kw = kvHeads * d;
  std::vector<double> lse(batch * heads * seq);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> s(i + 1);
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dotQK = 0;
          for (int64_t c = 0; c < d; ++c)
            dotQK += double(q.at((b * seq + i) * qw + h * d + c)) *
                     k.at((b * seq + j) * kw + h / (heads / kvHeads) * d + c);
          s[j] = dotQK / std::sqrt(double(d));
          max = std::max(max, s[j]);
        }
        for (double x : s)
          sum += std::exp(x - max);
        lse[(b * heads + h) * seq + i] = max + std::log(sum);
      }
  return lse;
}

void checkFlashGradients(const AttentionCase &c, unsigned seed) {
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Owned q = random({c.batch, c.seq, qw}, seed);
  Owned k = random({c.batch, c.seq, kw}, seed + 1);
  Owned v = random({c.batch, c.seq, kw}, seed + 2);
  Owned out({c.batch, c.seq, qw}), lse({c.batch, c.heads, c.seq});
  ASSERT_OK(flashAttentionForward(q, k, v, c.heads, c.kvHeads, out, &lse.view));
  Owned dout = random({c.batch, c.seq, qw}, seed + 3);
  Owned dq({c.batch, c.seq, qw}), dk({c.batch, c.seq, kw}),
      dv({c.batch, c.seq, kw});
  ASSERT_OK(flashAttentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                   &lse.view, dq, dk, dv));
  std::vector<float> r = dout.values();
  Owned y({c.batch, c.seq, qw});
  auto objective = [&] {
    EXPECT_TRUE(
        flashAttentionForward(q, k, v, c.heads, c.kvHeads, y, nullptr).ok());
    return dot(y.values(), r);
  };
  EXPECT_GRAD_NEAR(dq.values(), numericGradient(q, objective));
  EXPECT_GRAD_NEAR(dk.values(), numericGradient(k, objective));
  EXPECT_GRAD_NEAR(dv.values(), numericGradient(v, objective));

  // Without the saved log-sum-exp the backward recomputes it, bit for bit.
  Owned dq2({c.batch, c.seq, qw}), dk2({c.batch, c.seq, kw}),
      dv2({c.batch, c.seq, kw});
  ASSERT_OK(flashAttentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                   nullptr, dq2, dk2, dv2));
  EXPECT_EQ(dq2.values(), dq.values());
  EXPECT_EQ(dk2.values(), dk.values());
  EXPECT_EQ(dv2.values(), dv.values());
}

TEST(FlashAttention, GroupedQueryBackwardMatchesFiniteDifferences) {
  checkFlashGradients({2, 5, 4, 2, 4}, 140);
}

TEST(FlashAttention, MultiQueryBackwardMatchesFiniteDifferences) {
  checkFlashGradients({1, 4, 3, 1, 2}, 160);
}

// Two query and key tiles, the second partial.
TEST(FlashAttention, TiledBackwardMatchesFiniteDifferences) {
  checkFlashGradients({1, kFlashTile + 3, 2, 1, 2}, 170);
}

// Against the f64 reference and the materialized kernels over three tiles
// (the last partial), with grouped-query heads.
TEST(FlashAttention, MatchesReferenceAndMaterializedAcrossTiles) {
  const AttentionCase c{2, 2 * kFlashTile + 22, 4, 2, 8};
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Owned q = random({c.batch, c.seq, qw}, 180);
  Owned k = random({c.batch, c.seq, kw}, 181);
  Owned v = random({c.batch, c.seq, kw}, 182);
  Owned flash({c.batch, c.seq, qw}), lse({c.batch, c.heads, c.seq});
  Owned materialized({c.batch, c.seq, qw});
  Owned probs({c.batch, c.heads, c.seq, c.seq});
  ASSERT_OK(
      flashAttentionForward(q, k, v, c.heads, c.kvHeads, flash, &lse.view));
  ASSERT_OK(
      attentionForward(q, k, v, c.heads, c.kvHeads, materialized, &probs.view));
  std::vector<double> ref =
      referenceAttention(q, k, v, c.heads, c.kvHeads, nullptr);
  std::vector<double> refLse = referenceLse(q, k, c.heads, c.kvHeads);
  // Sums over up to 150 keys in f32, each term within ~20 u (see
  // checkAttentionGradients), the online rescaling adding a few u per tile:
  // 1e-5 (168 u) leaves room over the observed error.
  for (int64_t i = 0; i < flash.numel(); ++i) {
    EXPECT_NEAR(flash.at(i), ref[i], 1e-5) << "at " << i;
    EXPECT_NEAR(flash.at(i), materialized.at(i), 1e-5) << "at " << i;
  }
  for (int64_t i = 0; i < lse.numel(); ++i)
    EXPECT_NEAR(lse.at(i), refLse[i], 1e-5) << "at " << i;

  Owned dout = random({c.batch, c.seq, qw}, 183);
  Owned dq({c.batch, c.seq, qw}), dk({c.batch, c.seq, kw}),
      dv({c.batch, c.seq, kw});
  Owned mdq({c.batch, c.seq, qw}), mdk({c.batch, c.seq, kw}),
      mdv({c.batch, c.seq, kw});
  ASSERT_OK(flashAttentionBackward(q, k, v, flash, dout, c.heads, c.kvHeads,
                                   &lse.view, dq, dk, dv));
  ASSERT_OK(attentionBackward(q, k, v, materialized, dout, c.heads, c.kvHeads,
                              &probs.view, mdq, mdk, mdv));
  // The same sums in another order and tiling; relative to the largest
  // gradient element, as the finite-difference checks are.
  auto asDouble = [](const Owned &t) {
    std::vector<float> v = t.values();
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_LE(gradientError(dq.values(), asDouble(mdq)), 1e-5);
  EXPECT_LE(gradientError(dk.values(), asDouble(mdk)), 1e-5);
  EXPECT_LE(gradientError(dv.values(), asDouble(mdv)), 1e-5);
}

TEST(FlashAttention, CausalMaskingAcrossTiles) {
  const int64_t heads = 2, kvHeads = 1, d = 4, seq = kFlashTile + 8;
  Owned q = random({1, seq, heads * d}, 190);
  Owned k = random({1, seq, kvHeads * d}, 191);
  Owned v = random({1, seq, kvHeads * d}, 192);
  Owned before({1, seq, heads * d});
  ASSERT_OK(flashAttentionForward(q, k, v, heads, kvHeads, before, nullptr));
  // Changing q, k and v at a position in the second tile leaves every
  // earlier position bit-identical and changes that one.
  expectCausal(flashAttentionForward, flashAttentionBackward, q, k, v, heads,
               kvHeads, d, /*pos=*/kFlashTile + 2, before);
}

TEST(FlashAttention, Bf16StorageMatchesF32) {
  const int64_t heads = 4, kvHeads = 2, d = 8, seq = 7;
  Owned q = random({2, seq, heads * d}, 200, DType::BF16);
  Owned k = random({2, seq, kvHeads * d}, 201, DType::BF16);
  Owned v = random({2, seq, kvHeads * d}, 202, DType::BF16);
  Owned out({2, seq, heads * d}, DType::BF16), lse({2, heads, seq});
  ASSERT_OK(flashAttentionForward(q, k, v, heads, kvHeads, out, &lse.view));
  std::vector<double> ref =
      referenceAttention(q, k, v, heads, kvHeads, nullptr);
  // P stays in f32: only the result's rounding (u |out| <= u) and the f32
  // arithmetic's 1e-6.
  for (int64_t i = 0; i < out.numel(); ++i)
    EXPECT_NEAR(out.at(i), ref[i], 0x1p-8 + 1e-6);
}

//===----------------------------------------------------------------------===//
// Sliding-window attention (Mistral, Phi-3)
//===----------------------------------------------------------------------===//

/// Both kernels with a window against the f64 reference, and their
/// backwards against finite differences of their own forward.
void checkWindowedAttention(const AttentionCase &c, int64_t window,
                            unsigned seed) {
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Owned q = random({c.batch, c.seq, qw}, seed);
  Owned k = random({c.batch, c.seq, kw}, seed + 1);
  Owned v = random({c.batch, c.seq, kw}, seed + 2);
  Owned dout = random({c.batch, c.seq, qw}, seed + 3);
  std::vector<double> ref =
      referenceAttention(q, k, v, c.heads, c.kvHeads, nullptr, window);
  std::vector<float> r = dout.values();
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "materialized");
    auto forward = [&](const Tensor &out, const Tensor *state) {
      return flash ? flashAttentionForward(q, k, v, c.heads, c.kvHeads, window,
                                           out, state)
                   : attentionForward(q, k, v, c.heads, c.kvHeads, window, out,
                                      state);
    };
    Owned out({c.batch, c.seq, qw});
    Owned state(flash ? std::vector<int64_t>{c.batch, c.heads, c.seq}
                      : std::vector<int64_t>{c.batch, c.heads, c.seq, c.seq});
    ASSERT_OK(forward(out, &state.view));
    // As checkAttentionGradients: 1e-6 is 17 u of the f32 arithmetic.
    for (int64_t i = 0; i < out.numel(); ++i)
      EXPECT_NEAR(out.at(i), ref[i], 1e-6) << "at " << i;
    Owned dq({c.batch, c.seq, qw}), dk({c.batch, c.seq, kw}),
        dv({c.batch, c.seq, kw});
    ASSERT_OK(flash ? flashAttentionBackward(q, k, v, out, dout, c.heads,
                                             c.kvHeads, window, &state.view, dq,
                                             dk, dv)
                    : attentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                        window, &state.view, dq, dk, dv));
    Owned y({c.batch, c.seq, qw});
    auto objective = [&] {
      EXPECT_TRUE(forward(y, nullptr).ok());
      return dot(y.values(), r);
    };
    EXPECT_GRAD_NEAR(dq.values(), numericGradient(q, objective));
    EXPECT_GRAD_NEAR(dk.values(), numericGradient(k, objective));
    EXPECT_GRAD_NEAR(dv.values(), numericGradient(v, objective));
  }
}

TEST(SlidingWindow, GroupedQueryMatchesReferenceAndFiniteDifferences) {
  checkWindowedAttention({2, 7, 4, 2, 4}, 3, 300);
}

TEST(SlidingWindow, WindowOfOneSeesOnlyItself) {
  checkWindowedAttention({1, 5, 2, 1, 4}, 1, 310);
}

// A key outside a query's window does not reach it: changing k and v at
// position 1 leaves outputs from position 1 + window on bit-identical, and
// the gradient of output 6 reaches no key or value before 6 - window + 1.
TEST(SlidingWindow, KeysBeforeTheWindowAreMasked) {
  const int64_t heads = 2, kvHeads = 1, d = 4, seq = 8, window = 3;
  Owned q = random({1, seq, heads * d}, 320);
  Owned k = random({1, seq, kvHeads * d}, 321);
  Owned v = random({1, seq, kvHeads * d}, 322);
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "materialized");
    auto forward = [&](const Tensor &out) {
      return flash ? flashAttentionForward(q, k, v, heads, kvHeads, window, out,
                                           nullptr)
                   : attentionForward(q, k, v, heads, kvHeads, window, out,
                                      nullptr);
    };
    Owned before({1, seq, heads * d}), after({1, seq, heads * d});
    ASSERT_OK(forward(before));
    for (int64_t c = 0; c < kvHeads * d; ++c) {
      k.view.f32()[1 * kvHeads * d + c] += 0.5f;
      v.view.f32()[1 * kvHeads * d + c] -= 0.5f;
    }
    ASSERT_OK(forward(after));
    for (int64_t i = (1 + window) * heads * d; i < seq * heads * d; ++i)
      EXPECT_EQ(after.at(i), before.at(i)) << "at " << i;
    bool changed = false;
    for (int64_t i = heads * d; i < (1 + window) * heads * d; ++i)
      changed |= after.at(i) != before.at(i);
    EXPECT_TRUE(changed);
    Owned dout({1, seq, heads * d}), dq({1, seq, heads * d});
    Owned dk({1, seq, kvHeads * d}), dv({1, seq, kvHeads * d});
    for (int64_t c = 0; c < heads * d; ++c)
      dout.view.f32()[6 * heads * d + c] = 1.0f;
    ASSERT_OK(flash
                  ? flashAttentionBackward(q, k, v, after, dout, heads, kvHeads,
                                           window, nullptr, dq, dk, dv)
                  : attentionBackward(q, k, v, after, dout, heads, kvHeads,
                                      window, nullptr, dq, dk, dv));
    for (int64_t i = 0; i < (6 - window + 1) * kvHeads * d; ++i) {
      EXPECT_EQ(dk.at(i), 0.0f) << "at " << i;
      EXPECT_EQ(dv.at(i), 0.0f) << "at " << i;
    }
  }
}

// A window of seq or more is no window: forward and backward bit-identical
// to the unwindowed kernels, both kernels, across flash tiles.
TEST(SlidingWindow, WindowOfSeqOrMoreEqualsNoWindow) {
  const AttentionCase c{1, kFlashTile + 9, 4, 2, 4};
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Owned q = random({c.batch, c.seq, qw}, 330);
  Owned k = random({c.batch, c.seq, kw}, 331);
  Owned v = random({c.batch, c.seq, kw}, 332);
  Owned dout = random({c.batch, c.seq, qw}, 333);
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "materialized");
    std::vector<std::vector<float>> results[2];
    for (int64_t window : {int64_t(0), c.seq, c.seq + 5}) {
      Owned out({c.batch, c.seq, qw}), dq({c.batch, c.seq, qw});
      Owned dk({c.batch, c.seq, kw}), dv({c.batch, c.seq, kw});
      if (flash) {
        ASSERT_OK(flashAttentionForward(q, k, v, c.heads, c.kvHeads, window,
                                        out, nullptr));
        ASSERT_OK(flashAttentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                         window, nullptr, dq, dk, dv));
      } else {
        ASSERT_OK(attentionForward(q, k, v, c.heads, c.kvHeads, window, out,
                                   nullptr));
        ASSERT_OK(attentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                    window, nullptr, dq, dk, dv));
      }
      std::vector<std::vector<float>> got = {out.values(), dq.values(),
                                             dk.values(), dv.values()};
      if (window == 0)
        results[0] = got;
      else
        EXPECT_EQ(got, results[0]) << "window " << window;
    }
  }
}

// Flash against the reference and the materialized kernel over three tiles,
// windows shorter and longer than a tile (whole key tiles skipped).
TEST(SlidingWindow, FlashMatchesMaterializedAcrossTiles) {
  const AttentionCase c{1, 2 * kFlashTile + 22, 4, 2, 8};
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Owned q = random({c.batch, c.seq, qw}, 340);
  Owned k = random({c.batch, c.seq, kw}, 341);
  Owned v = random({c.batch, c.seq, kw}, 342);
  Owned dout = random({c.batch, c.seq, qw}, 343);
  auto asDouble = [](const Owned &t) {
    std::vector<float> v = t.values();
    return std::vector<double>(v.begin(), v.end());
  };
  for (int64_t window : {int64_t(17), kFlashTile + 5}) {
    SCOPED_TRACE("window " + std::to_string(window));
    Owned flash({c.batch, c.seq, qw}), lse({c.batch, c.heads, c.seq});
    Owned materialized({c.batch, c.seq, qw});
    ASSERT_OK(flashAttentionForward(q, k, v, c.heads, c.kvHeads, window, flash,
                                    &lse.view));
    ASSERT_OK(attentionForward(q, k, v, c.heads, c.kvHeads, window,
                               materialized, nullptr));
    std::vector<double> ref =
        referenceAttention(q, k, v, c.heads, c.kvHeads, nullptr, window);
    // As MatchesReferenceAndMaterializedAcrossTiles: 1e-5.
    for (int64_t i = 0; i < flash.numel(); ++i) {
      EXPECT_NEAR(flash.at(i), ref[i], 1e-5) << "at " << i;
      EXPECT_NEAR(flash.at(i), materialized.at(i), 1e-5) << "at " << i;
    }
    Owned dq({c.batch, c.seq, qw}), dk({c.batch, c.seq, kw}),
        dv({c.batch, c.seq, kw});
    Owned mdq({c.batch, c.seq, qw}), mdk({c.batch, c.seq, kw}),
        mdv({c.batch, c.seq, kw});
    ASSERT_OK(flashAttentionBackward(q, k, v, flash, dout, c.heads, c.kvHeads,
                                     window, &lse.view, dq, dk, dv));
    ASSERT_OK(attentionBackward(q, k, v, materialized, dout, c.heads, c.kvHeads,
                                window, nullptr, mdq, mdk, mdv));
    EXPECT_LE(gradientError(dq.values(), asDouble(mdq)), 1e-5);
    EXPECT_LE(gradientError(dk.values(), asDouble(mdk)), 1e-5);
    EXPECT_LE(gradientError(dv.values(), asDouble(mdv)), 1e-5);
  }
}

//===----------------------------------------------------------------------===//
// Packed sequences: attention within each document
//===----------------------------------------------------------------------===//

/// Document starts of a row from its boundaries: [0, 0, 0, 3, 3, ...].
std::vector<int32_t> documentStarts(int64_t batch, int64_t seq,
                                    std::vector<std::vector<int32_t>> starts) {
  std::vector<int32_t> d(size_t(batch * seq), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 1; i < seq; ++i) {
      const auto &s = starts[size_t(b)];
      bool begins = std::find(s.begin(), s.end(), int32_t(i)) != s.end();
      d[size_t(b * seq + i)] = begins ? int32_t(i) : d[size_t(b * seq + i - 1)];
    }
  return d;
}

/// Both kernels with documents (and a window) against the f64 reference,
/// their backwards against finite differences of their own forward, and
/// every document against the same kernel run on that document alone.
void checkPackedAttention(const AttentionCase &c, int64_t window,
                          std::vector<std::vector<int32_t>> starts,
                          unsigned seed, double tolerance) {
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Owned q = random({c.batch, c.seq, qw}, seed);
  Owned k = random({c.batch, c.seq, kw}, seed + 1);
  Owned v = random({c.batch, c.seq, kw}, seed + 2);
  Owned dout = random({c.batch, c.seq, qw}, seed + 3);
  std::vector<int32_t> docs = documentStarts(c.batch, c.seq, starts);
  Owned documents = ids({c.batch, c.seq}, docs);
  std::vector<double> ref =
      referenceAttention(q, k, v, c.heads, c.kvHeads, nullptr, window, &docs);
  std::vector<double> unmasked =
      referenceAttention(q, k, v, c.heads, c.kvHeads, nullptr, window);
  std::vector<float> r = dout.values();
  bool small = c.seq * c.batch <= 40;
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "materialized");
    auto forward = [&](const Owned &q, const Owned &k, const Owned &v,
                       const Tensor &out, const Tensor *state,
                       const Tensor *documents) {
      return flash ? flashAttentionForward(q, k, v, c.heads, c.kvHeads, window,
                                           out, state, documents)
                   : attentionForward(q, k, v, c.heads, c.kvHeads, window, out,
                                      state, documents);
    };
    auto backward = [&](const Owned &q, const Owned &k, const Owned &v,
                        const Owned &out, const Owned &dout,
                        const Tensor *state, const Owned &dq, const Owned &dk,
                        const Owned &dv, const Tensor *documents) {
      return flash ? flashAttentionBackward(q, k, v, out, dout, c.heads,
                                            c.kvHeads, window, state, dq, dk,
                                            dv, documents)
                   : attentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                       window, state, dq, dk, dv, documents);
    };
    auto stateShape = [&](int64_t batch, int64_t seq) {
      return flash ? std::vector<int64_t>{batch, c.heads, seq}
                   : std::vector<int64_t>{batch, c.heads, seq, seq};
    };
    Owned out({c.batch, c.seq, qw}), state(stateShape(c.batch, c.seq));
    ASSERT_OK(forward(q, k, v, out, &state.view, &documents.view));
    double apart = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      EXPECT_NEAR(out.at(i), ref[i], tolerance) << "at " << i;
      apart = std::max(apart, std::abs(ref[i] - unmasked[i]));
    }
    // The mask matters: without it the outputs differ.
    EXPECT_GT(apart, 1e-2);
    Owned dq({c.batch, c.seq, qw}), dk({c.batch, c.seq, kw}),
        dv({c.batch, c.seq, kw});
    ASSERT_OK(
        backward(q, k, v, out, dout, &state.view, dq, dk, dv, &documents.view));
    if (small) {
      Owned y({c.batch, c.seq, qw});
      auto objective = [&] {
        EXPECT_TRUE(forward(q, k, v, y, nullptr, &documents.view).ok());
        return dot(y.values(), r);
      };
      EXPECT_GRAD_NEAR(dq.values(), numericGradient(q, objective));
      EXPECT_GRAD_NEAR(dk.values(), numericGradient(k, objective));
      EXPECT_GRAD_NEAR(dv.values(), numericGradient(v, objective));
    }

    // Each document alone: rows [s, e) of batch row b as a batch of one.
    for (int64_t b = 0; b < c.batch; ++b) {
      std::vector<int32_t> bounds = starts[size_t(b)];
      bounds.insert(bounds.begin(), 0);
      bounds.push_back(int32_t(c.seq));
      for (size_t n = 0; n + 1 < bounds.size(); ++n) {
        int64_t s = bounds[n], len = bounds[n + 1] - s;
        SCOPED_TRACE("row " + std::to_string(b) + " document at " +
                     std::to_string(s));
        auto slice = [&](const Owned &t, int64_t width) {
          Owned part({1, len, width});
          std::vector<float> all = t.values(), mine;
          for (int64_t i = 0; i < len; ++i)
            for (int64_t w = 0; w < width; ++w)
              mine.push_back(all[size_t((b * c.seq + s + i) * width + w)]);
          part.set(mine);
          return part;
        };
        Owned q1 = slice(q, qw), k1 = slice(k, kw), v1 = slice(v, kw),
              do1 = slice(dout, qw);
        Owned o1({1, len, qw}), st1(stateShape(1, len));
        ASSERT_OK(forward(q1, k1, v1, o1, &st1.view, nullptr));
        Owned dq1({1, len, qw}), dk1({1, len, kw}), dv1({1, len, kw});
        ASSERT_OK(
            backward(q1, k1, v1, o1, do1, &st1.view, dq1, dk1, dv1, nullptr));
        auto expectRows = [&](const Owned &whole, const Owned &part,
                              int64_t width, const char *what) {
          std::vector<float> w = whole.values(), p = part.values();
          for (int64_t i = 0; i < len * width; ++i)
            EXPECT_NEAR(w[size_t((b * c.seq + s) * width + i)], p[size_t(i)],
                        tolerance)
                << what << " at " << i;
        };
        expectRows(out, o1, qw, "out");
        expectRows(dq, dq1, qw, "dq");
        expectRows(dk, dk1, kw, "dk");
        expectRows(dv, dv1, kw, "dv");
      }
    }
  }
}

// Scores of d <= 8 values in [-1, 1): as checkAttentionGradients, 1e-6 is
// 17 u of the f32 arithmetic; a lone document runs the same sums with
// fewer zeros (P is 0 outside the document), within a few u.
TEST(PackedDocuments, GroupedQueryMatchesReferenceDocumentsAloneAndFd) {
  checkPackedAttention({2, 9, 4, 2, 4}, 0, {{3, 7}, {5}}, 400, 1e-6);
}

TEST(PackedDocuments, WithASlidingWindow) {
  checkPackedAttention({1, 11, 2, 1, 4}, 3, {{6}}, 410, 1e-6);
}

TEST(PackedDocuments, OneTokenDocumentsSeeOnlyThemselves) {
  checkPackedAttention({1, 6, 2, 2, 4}, 0, {{1, 2, 4, 5}}, 420, 1e-6);
}

// Documents across the flash kernels' tiles (64): boundaries inside a tile,
// on a tile edge and a document spanning two tiles. Sums over up to 150
// keys: 1e-5, as MatchesReferenceAndMaterializedAcrossTiles.
TEST(PackedDocuments, AcrossFlashTiles) {
  checkPackedAttention(
      {1, 2 * kFlashTile + 22, 4, 2, 8}, 0,
      {{10, int32_t(kFlashTile), int32_t(kFlashTile) + 3, 140}}, 430, 1e-5);
}

// --reset-position-ids: token s of row b takes position s - documents[b, s].
TEST(PackedDocuments, PositionEmbeddingCountsFromEachDocument) {
  Owned table = random({6, 3}, 440);
  Owned documents = ids({2, 5}, documentStarts(2, 5, {{2}, {1, 3}}));
  const int64_t positions[10] = {0, 1, 0, 1, 2, 0, 0, 1, 0, 1};
  Owned out({2, 5, 3}), dy = random({2, 5, 3}, 441), dtable({6, 3});
  ASSERT_OK(positionEmbeddingForward(table, out, &documents.view));
  for (int64_t t = 0; t < 10; ++t)
    for (int64_t h = 0; h < 3; ++h)
      EXPECT_EQ(out.at(t * 3 + h), table.at(positions[t] * 3 + h));
  ASSERT_OK(positionEmbeddingBackward(dy, dtable, &documents.view));
  std::vector<float> r = dy.values();
  EXPECT_GRAD_NEAR(
      dtable.values(), numericGradient(table, [&] {
        EXPECT_TRUE(positionEmbeddingForward(table, out, &documents.view).ok());
        return dot(out.values(), r);
      }));
  for (int64_t i = 9; i < 18; ++i) // No token at positions 3-5.
    EXPECT_EQ(dtable.at(i), 0.0f);
  Owned bad = ids({2, 5}, {0, 0, 1, 1, 1, 0, 0, 0, 0, 0});
  EXPECT_EQ(positionEmbeddingForward(table, out, &bad.view).error,
            "position_embedding: documents[0, 2] is 1; expected 0 (the "
            "document of the token before) or 2 (a document starting here)");
}

// RoPE with --reset-position-ids: every document rotated exactly as when
// run alone (the same angles from the same table), forward and backward.
TEST(PackedDocuments, RotaryEqualsEachDocumentAlone) {
  const int64_t headDim = 4, width = 2 * headDim, seq = 7;
  const double theta = 10000.0;
  std::vector<std::vector<int32_t>> starts = {{3}, {2, 6}};
  Owned documents = ids({2, seq}, documentStarts(2, seq, starts));
  Owned x = random({2, seq, width}, 450), y({2, seq, width});
  Owned dy = random({2, seq, width}, 451), dx({2, seq, width});
  ASSERT_OK(rotaryForward(x, headDim, theta, y, &documents.view));
  ASSERT_OK(rotaryBackward(dy, headDim, theta, dx, &documents.view));
  for (int64_t b = 0; b < 2; ++b) {
    std::vector<int32_t> bounds = starts[size_t(b)];
    bounds.insert(bounds.begin(), 0);
    bounds.push_back(int32_t(seq));
    for (size_t n = 0; n + 1 < bounds.size(); ++n) {
      int64_t s = bounds[n], len = bounds[n + 1] - s;
      auto slice = [&](const Owned &t) {
        std::vector<float> all = t.values();
        Owned part({1, len, width});
        part.set(std::vector<float>(all.begin() + (b * seq + s) * width,
                                    all.begin() + (b * seq + s + len) * width));
        return part;
      };
      Owned x1 = slice(x), y1({1, len, width}), dy1 = slice(dy),
            dx1({1, len, width});
      ASSERT_OK(rotaryForward(x1, headDim, theta, y1));
      ASSERT_OK(rotaryBackward(dy1, headDim, theta, dx1));
      EXPECT_EQ(slice(y).values(), y1.values()) << b << ", " << s;
      EXPECT_EQ(slice(dx).values(), dx1.values()) << b << ", " << s;
    }
  }
  std::vector<float> r = dy.values();
  EXPECT_GRAD_NEAR(
      dx.values(), numericGradient(x, [&] {
        EXPECT_TRUE(rotaryForward(x, headDim, theta, y, &documents.view).ok());
        return dot(y.values(), r);
      }));
}

TEST(PackedDocuments, RejectsBadDocuments) {
  Owned q = random({1, 4, 8}, 1), k = random({1, 4, 4}, 2),
        v = random({1, 4, 4}, 3), out({1, 4, 8});
  auto error = [&](const Owned &documents) {
    Status s =
        attentionForward(q, k, v, 2, 1, 0, out, nullptr, &documents.view);
    Status f =
        flashAttentionForward(q, k, v, 2, 1, 0, out, nullptr, &documents.view);
    EXPECT_EQ(s.error, f.error);
    return s.error;
  };
  EXPECT_EQ(error(ids({1, 3}, {0, 0, 0})),
            "causal_attention: documents must be i32 [batch, seq] = [1, 4], "
            "found " +
                describe(ids({1, 3}, {0, 0, 0}).view));
  EXPECT_EQ(error(ids({1, 4}, {0, 0, 1, 2})),
            "causal_attention: documents[0, 2] is 1; expected 0 (the document "
            "of the token before) or 2 (a document starting here)");
  EXPECT_EQ(error(ids({1, 4}, {1, 1, 1, 1})),
            "causal_attention: documents[0, 0] is 1; expected 0 (the document "
            "of the token before) or 0 (a document starting here)");
  EXPECT_EQ(error(ids({1, 4}, {0, 1, 1, 3})), "");
}

TEST(SlidingWindow, RejectsNegativeWindow) {
  Owned q = random({1, 3, 8}, 1), k = random({1, 3, 4}, 2);
  Owned v = random({1, 3, 4}, 3), out({1, 3, 8});
  Status s = flashAttentionForward(q, k, v, 2, 1, -1, out, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error.find("window must be >= 0"), std::string::npos) << s.error;
  EXPECT_FALSE(attentionForward(q, k, v, 2, 1, -1, out, nullptr).ok());
}

TEST(FlashAttention, RejectsBadLse) {
  Owned q = random({1, 3, 12}, 1), k = random({1, 3, 6}, 2);
  Owned v = random({1, 3, 6}, 3), out({1, 3, 12});
  Owned good({1, 4, 3}), wrongShape({1, 4, 3, 3}),
      wrongType({1, 4, 3}, DType::BF16);
  EXPECT_TRUE(flashAttentionForward(q, k, v, 4, 2, out, &good.view).ok());
  Status st = flashAttentionForward(q, k, v, 4, 2, out, &wrongShape.view);
  EXPECT_NE(st.error.find("lse must be f32 [batch, num_heads, seq] = [1, 4, "
                          "3]"),
            std::string::npos)
      << st.error;
  EXPECT_FALSE(flashAttentionForward(q, k, v, 4, 2, out, &wrongType.view).ok());
  EXPECT_FALSE(flashAttentionForward(q, k, v, 4, 3, out, nullptr).ok());
  Owned none({0, 3, 12}), kNone({0, 3, 6}), vNone({0, 3, 6}), oNone({0, 3, 12});
  EXPECT_TRUE(
      flashAttentionForward(none, kNone, vNone, 4, 2, oNone, nullptr).ok());
}

//===----------------------------------------------------------------------===//
// Cross-entropy and the backward seed
//===----------------------------------------------------------------------===//

TEST(CrossEntropy, MatchesHandComputation) {
  // Row 0: logits (0, 1, 2), target 2: log(1 + e + e^2) - 2.
  // Row 1: logits (5, 5, 5), target 0: log 3.
  Owned logits({1, 2, 3}, {0, 1, 2, 5, 5, 5}), loss({});
  Owned targets = ids({1, 2}, {2, 0});
  ASSERT_OK(crossEntropyForward(logits, targets, loss));
  double row0 = std::log(1 + std::exp(1.0) + std::exp(2.0)) - 2.0;
  // A log-sum-exp of 3 terms and a mean of 2 rows in f32: about 10 roundings
  // of values below 3, 10 u x 3 = 1.8e-6 at worst (observed 2.9e-8).
  EXPECT_NEAR(loss.at(0), (row0 + std::log(3.0)) / 2.0, 1e-6);
  // Large logits do not overflow: 1000 + log(1 + e^-1000) - 0 is 1000 in
  // f32, within a few roundings of 1000, 4 u x 1000 = 2.4e-4; 1e-3 is 16 ulp
  // (observed exact).
  Owned big({1, 1, 2}, {1000.0f, 0.0f}), bigLoss({});
  ASSERT_OK(crossEntropyForward(big, ids({1, 1}, {1}), bigLoss));
  EXPECT_NEAR(bigLoss.at(0), 1000.0, 1e-3);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  Owned logits = random({2, 3, 7}, 90), loss({}), dlogits({2, 3, 7});
  logits.set(randomValues(42, 90, -3.0f, 3.0f));
  Owned targets = ids({2, 3}, {0, 6, 3, 3, 1, 5});
  Owned dloss({}, {0.25f});
  ASSERT_OK(crossEntropyBackward(logits, targets, dloss, dlogits));
  std::vector<double> numeric = numericGradient(logits, [&] {
    EXPECT_TRUE(crossEntropyForward(logits, targets, loss).ok());
    return 0.25 * double(loss.at(0));
  });
  EXPECT_GRAD_NEAR(dlogits.values(), numeric);
  // Each row of the gradient sums to zero: 7 elements (softmax - one-hot)
  // x 0.25 / 6, each within about 10 u relative, summed in f64: at most
  // 10 u x 2 x 0.25 / 6 = 5e-8 (observed 3.4e-9).
  for (int64_t r = 0; r < 6; ++r) {
    double sum = 0;
    for (int64_t i = 0; i < 7; ++i)
      sum += dlogits.at(r * 7 + i);
    EXPECT_NEAR(sum, 0.0, 1e-7);
  }
  Owned half({2, 3, 7}, DType::BF16);
  ASSERT_OK(crossEntropyBackward(logits, targets, dloss, half));
  for (int64_t i = 0; i < 42; ++i)
    EXPECT_EQ(half.at(i), roundToDType(dlogits.at(i), DType::BF16));
}

// Targets -100 (ignored) add nothing; the loss is the counted rows' sum over
// `tokens` (their count by default), against a float64 hand computation,
// and the backward is the finite differences of that loss, 0 on ignored rows.
TEST(CrossEntropy, IgnoredTargetsAndTheTokenDivisor) {
  Owned logits({1, 3, 3}, {0, 1, 2, 5, 5, 5, 3, -1, 0}), loss({});
  Owned targets = ids({1, 3}, {2, -100, 0});
  double row0 = std::log(1 + std::exp(1.0) + std::exp(2.0)) - 2.0;
  double row2 = std::log(std::exp(3.0) + std::exp(-1.0) + 1.0) - 3.0;
  ASSERT_OK(crossEntropyForward(logits, targets, loss));
  // As MatchesHandComputation: a few roundings of values below 4.
  EXPECT_NEAR(loss.at(0), (row0 + row2) / 2.0, 1e-6);
  ASSERT_OK(crossEntropyForward(logits, targets, loss, 5.0));
  EXPECT_NEAR(loss.at(0), (row0 + row2) / 5.0, 1e-6);

  Owned dloss({}, {0.5f}), dlogits({1, 3, 3});
  ASSERT_OK(crossEntropyBackward(logits, targets, dloss, dlogits, 5.0));
  std::vector<double> numeric = numericGradient(logits, [&] {
    EXPECT_TRUE(crossEntropyForward(logits, targets, loss, 5.0).ok());
    return 0.5 * double(loss.at(0));
  });
  EXPECT_GRAD_NEAR(dlogits.values(), numeric);
  for (int64_t i = 3; i < 6; ++i)
    EXPECT_EQ(dlogits.at(i), 0.0f);

  // Every target ignored: loss 0, gradient 0.
  Owned none = ids({1, 3}, {-100, -100, -100});
  ASSERT_OK(crossEntropyForward(logits, none, loss));
  EXPECT_EQ(loss.at(0), 0.0f);
  Status s = crossEntropyForward(logits, ids({1, 3}, {0, -99, 0}), loss);
  EXPECT_NE(s.error.find("target -99 at position 1 is outside [0, 3) and not "
                         "-100 (ignored)"),
            std::string::npos)
      << s.error;
}

TEST(CrossEntropy, RejectsBadTargetsAndLoss) {
  Owned logits = random({1, 2, 3}, 1), loss({});
  Status s = crossEntropyForward(logits, ids({1, 2}, {0, 3}), loss);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error.find("target 3 at position 1 is outside [0, 3)"),
            std::string::npos)
      << s.error;
  Owned wideLoss({2});
  EXPECT_FALSE(crossEntropyForward(logits, ids({1, 2}, {0, 1}), wideLoss).ok());
  Owned halfLoss({}, DType::BF16);
  EXPECT_FALSE(crossEntropyForward(logits, ids({1, 2}, {0, 1}), halfLoss).ok());
}

// A padded vocabulary (classes < the logits' width): the loss and gradient
// are those of the first `classes` logits alone, whatever the padding
// columns hold, and the padding columns' gradient is exactly zero.
TEST(CrossEntropy, PaddedClassesAreTheUnpaddedVocabulary) {
  const int64_t classes = 5, width = 8;
  Owned padded = random({2, 3, width}, 7), loss({}), unpaddedLoss({});
  std::vector<float> values = randomValues(6 * width, 7, -3.0f, 3.0f);
  std::vector<float> valid;
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = 0; i < width; ++i) {
      if (i < classes)
        valid.push_back(values[r * width + i]);
      else // Padding that would dominate a softmax over the whole row.
        values[r * width + i] = 50.0f;
    }
  padded.set(values);
  Owned unpadded({2, 3, classes}, valid);
  Owned targets = ids({2, 3}, {0, 4, -100, 3, 1, 2});
  ASSERT_OK(crossEntropyForward(unpadded, targets, unpaddedLoss));
  ASSERT_OK(crossEntropyForward(padded, targets, loss, 0, classes));
  EXPECT_EQ(loss.at(0), unpaddedLoss.at(0));

  Owned dloss({}, {0.5f}), dPadded({2, 3, width}), dUnpadded({2, 3, classes});
  ASSERT_OK(crossEntropyBackward(unpadded, targets, dloss, dUnpadded));
  ASSERT_OK(crossEntropyBackward(padded, targets, dloss, dPadded, 0, classes));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = 0; i < width; ++i)
      EXPECT_EQ(dPadded.at(r * width + i),
                i < classes ? dUnpadded.at(r * classes + i) : 0.0f)
          << "row " << r << " column " << i;

  // A target in the padding, and classes outside [1, width].
  Status s = crossEntropyForward(padded, ids({2, 3}, {0, 5, 0, 0, 0, 0}), loss,
                                 0, classes);
  EXPECT_NE(s.error.find("target 5 at position 1 is outside [0, 5)"),
            std::string::npos)
      << s.error;
  s = crossEntropyBackward(padded, targets, dloss, dPadded, 0, width + 1);
  EXPECT_NE(s.error.find("cross_entropy_backward: classes must be from 1 to "
                         "the logits' last dimension 8, found 9"),
            std::string::npos)
      << s.error;
  EXPECT_FALSE(crossEntropyForward(padded, targets, loss, 0, -1).ok());
}

TEST(BackwardSeed, MicroStepsAndLossScale) {
  Owned seed({});
  ASSERT_OK(backwardSeed(4, 1.0, seed));
  EXPECT_EQ(seed.at(0), 0.25f);
  ASSERT_OK(backwardSeed(4, 65536.0, seed));
  EXPECT_EQ(seed.at(0), 16384.0f);
  EXPECT_FALSE(backwardSeed(0, 1.0, seed).ok());
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

// Two Adam steps of one element, in f64, as the op's description states them.
struct HandAdam {
  double p, m = 0, v = 0;
  void step(const AdamSettings &s, int t, double g) {
    if (s.adamw)
      p -= s.lr * s.weightDecay * p;
    else
      g += s.weightDecay * p;
    m = s.beta1 * m + (1 - s.beta1) * g;
    v = s.beta2 * v + (1 - s.beta2) * g * g;
    double mHat = m / (1 - std::pow(s.beta1, t));
    double vHat = v / (1 - std::pow(s.beta2, t));
    p -= s.lr * mHat / (std::sqrt(vHat) + s.eps);
  }
};

void checkTwoAdamSteps(bool adamw) {
  AdamSettings settings;
  settings.lr = 0.01;
  settings.beta1 = 0.9;
  settings.beta2 = 0.99;
  settings.eps = 1e-8;
  settings.weightDecay = 0.1;
  settings.adamw = adamw;
  std::vector<float> p0 = {0.5f, -1.0f, 2.0f, 0.0f};
  std::vector<float> g1 = {0.1f, -0.2f, 0.0f, 1.5f};
  std::vector<float> g2 = {-0.3f, 0.05f, 0.4f, 1.0f};
  Owned master({4}, p0), m({4}), v({4}), param({2, 2}, DType::BF16);
  Owned grad1({4}, g1), grad2({2, 2}, g2, DType::BF16);
  ASSERT_OK(adamUpdate(settings, 1, grad1, master, m, v, &param.view));
  ASSERT_OK(adamUpdate(settings, 2, grad2, master, m, v, &param.view));
  for (int64_t i = 0; i < 4; ++i) {
    HandAdam hand{p0[i]};
    hand.step(settings, 1, g1[i]);
    hand.step(settings, 2, roundToDType(g2[i], DType::BF16));
    // Two steps of about 15 f32 operations each (the betas rounded to f32
    // too) against f64 on the same inputs: master (|p| <= 2) within about
    // 2 x (2 u |p| + lr 10 u) = 4.9e-7, m and v (below 0.4) within about
    // 2 x 4 u x 0.4 = 1.9e-7. Observed 8.3e-8, 5.9e-8 and 3.1e-8.
    EXPECT_NEAR(master.at(i), hand.p, 1e-6) << "element " << i;
    EXPECT_NEAR(m.at(i), hand.m, 1e-6);
    EXPECT_NEAR(v.at(i), hand.v, 1e-6);
    EXPECT_EQ(param.at(i), roundToDType(master.at(i), DType::BF16));
  }
}

TEST(Adam, AdamWTwoStepsMatchHandComputation) { checkTwoAdamSteps(true); }
TEST(Adam, AdamL2TwoStepsMatchHandComputation) { checkTwoAdamSteps(false); }

TEST(Adam, FirstStepMovesByLearningRate) {
  // Bias correction makes the first step lr * sign(g) (for |g| >> eps).
  AdamSettings settings;
  Owned master({3}, {1.0f, 1.0f, 1.0f}), m({3}), v({3});
  Owned grad({3}, {1e-3f, -5.0f, 0.0f});
  ASSERT_OK(adamUpdate(settings, 1, grad, master, m, v, nullptr));
  // The step is lr |g| / (|g| + eps), off lr by lr eps / |g| = 1e-8 for
  // g = 1e-3; storing 1 -+ 1e-3 in f32 rounds by half an ulp, at most 6e-8:
  // 7e-8 in all (observed 1.3e-8 and 4.7e-8).
  EXPECT_NEAR(master.at(0), 1.0 - 1e-3, 1e-7);
  EXPECT_NEAR(master.at(1), 1.0 + 1e-3, 1e-7);
  EXPECT_EQ(master.at(2), 1.0f);
}

TEST(Adam, RejectsBadState) {
  AdamSettings settings;
  Owned grad({4}), master({4}), m({4}), v({3}), half({4}, DType::BF16);
  EXPECT_FALSE(adamUpdate(settings, 1, grad, master, m, v, nullptr).ok());
  Owned v4({4});
  EXPECT_FALSE(adamUpdate(settings, 1, grad, half, m, v4, nullptr).ok());
  EXPECT_FALSE(adamUpdate(settings, 0, grad, master, m, v4, nullptr).ok());
  EXPECT_TRUE(adamUpdate(settings, 1, grad, master, m, v4, &half.view).ok());
}

TEST(ClipGradNorm, ScalesToMaxNorm) {
  Owned a({2, 2}, {3, 0, 0, 0}), b({3}, {0, 4, 0}, DType::BF16);
  double total = sumOfSquares(a) + sumOfSquares(b);
  EXPECT_EQ(total, 25.0);
  float coefficient = clipCoefficient(total, 1.0);
  EXPECT_FLOAT_EQ(coefficient, 0.2f);
  ASSERT_OK(scaleInPlace(a, coefficient));
  ASSERT_OK(scaleInPlace(b, coefficient));
  // 0.8 stored in bf16 is 0.80078125: each element is rounded by at most
  // u = 2^-8 relative, so the norm of the clipped vector (1) by at most u.
  // Observed 6.3e-4.
  EXPECT_NEAR(std::sqrt(sumOfSquares(a) + sumOfSquares(b)), 1.0, 0x1p-8);
  EXPECT_FLOAT_EQ(a.at(0), 0.6f);
  // Within the bound: unchanged.
  EXPECT_EQ(clipCoefficient(25.0, 5.0), 1.0f);
  EXPECT_EQ(clipCoefficient(0.0, 1.0), 1.0f);
  EXPECT_TRUE(std::isnan(clipCoefficient(NAN, 1.0)));
}

TEST(UnscaleGrads, DividesAndDetectsOverflow) {
  Owned a({3}, {1024, -512, 2}), b({2}, {8, INFINITY}, DType::F16);
  bool overflow = false;
  ASSERT_OK(unscaleGrads(a, 1024.0, overflow));
  EXPECT_FALSE(overflow);
  EXPECT_EQ(a.values(), (std::vector<float>{1, -0.5f, 1.0f / 512}));
  ASSERT_OK(unscaleGrads(b, 1024.0, overflow));
  EXPECT_TRUE(overflow);
  // The flag collects: a clean tensor does not clear it.
  ASSERT_OK(unscaleGrads(a, 1.0, overflow));
  EXPECT_TRUE(overflow);
  bool nan = false;
  Owned c({2}, {1, NAN});
  ASSERT_OK(unscaleGrads(c, 2.0, nan));
  EXPECT_TRUE(nan);
  // Overflow of the 16-bit storage counts.
  bool f16Overflow = false;
  Owned d({1}, {60000}, DType::F16);
  ASSERT_OK(unscaleGrads(d, 0.5, f16Overflow));
  EXPECT_TRUE(f16Overflow);
  EXPECT_FALSE(unscaleGrads(a, 0.0, overflow).ok());
}

TEST(LossScale, DynamicHysteresisWindowAndFloor) {
  LossScaleSettings settings;
  settings.initialScalePower = 4;
  settings.lossScaleWindow = 3;
  settings.hysteresis = 2;
  settings.minLossScale = 4.0;
  LossScaleState state = initialLossScale(settings);
  EXPECT_EQ(state.scale, 16.0);
  updateLossScale(settings, true, state); // first overflow: hysteresis
  EXPECT_EQ(state.scale, 16.0);
  updateLossScale(settings, true, state); // second: halve
  EXPECT_EQ(state.scale, 8.0);
  updateLossScale(settings, false, state);
  updateLossScale(settings, false, state);
  EXPECT_EQ(state.scale, 8.0);
  updateLossScale(settings, false, state); // 3 clean steps: double
  EXPECT_EQ(state.scale, 16.0);
  EXPECT_EQ(state.hysteresisLeft, 2);
  for (int i = 0; i < 6; ++i)
    updateLossScale(settings, true, state);
  EXPECT_EQ(state.scale, 4.0); // not below min_loss_scale

  LossScaleSettings fixed;
  fixed.staticLossScale = 128.0;
  LossScaleState constant = initialLossScale(fixed);
  updateLossScale(fixed, true, constant);
  updateLossScale(fixed, false, constant);
  EXPECT_EQ(constant.scale, 128.0);
}

//===----------------------------------------------------------------------===//
// Casts and accumulation
//===----------------------------------------------------------------------===//

TEST(Cast, RoundsOnceBetweenDtypes) {
  Owned src({4}, {1.0f, -2.5f, 1.00390625f, 3.14159265f});
  Owned half({2, 2}, DType::BF16), f16({4}, DType::F16), back({4});
  ASSERT_OK(castTensor(src, half));
  ASSERT_OK(castTensor(half, back));
  EXPECT_EQ(back.values(), (std::vector<float>{1.0f, -2.5f, 1.0f, 3.140625f}));
  ASSERT_OK(castTensor(src, f16));
  EXPECT_EQ(f16.at(3), f16ToFloat(floatToF16(3.14159265f)));
  Owned wrong({3});
  EXPECT_FALSE(castTensor(src, wrong).ok());
}

TEST(Accumulate, SumsInF32AndRoundsOnce) {
  Owned acc({3}, {1.0f, 256.0f, 0.0f}, DType::BF16);
  Owned g({3}, {0.00390625f, 1.0f, -2.5f});
  ASSERT_OK(accumulate(acc, g));
  // bf16 has 8 significant bits: 1 + 2^-8 ties to 1, 257 ties to 256.
  EXPECT_EQ(acc.values(), (std::vector<float>{1.0f, 256.0f, -2.5f}));
  Owned f32acc({3}, {1, 2, 3});
  ASSERT_OK(accumulate(f32acc, g));
  ASSERT_OK(accumulate(f32acc, g));
  EXPECT_FLOAT_EQ(f32acc.at(2), -2.0f);
  ASSERT_OK(zeroTensor(f32acc));
  EXPECT_EQ(f32acc.values(), (std::vector<float>{0, 0, 0}));
}

} // namespace
