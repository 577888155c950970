//===- KernelThreadsTest.cpp - CPU kernels: same bits at any thread count -===//
//
// The CPU kernels split their work over the OpenMP pool (cpu/Threads.h,
// cpu/Parallel.h) only where each output is computed in the same order
// whatever thread takes it; reductions sum fixed chunks in chunk order.
// Every kernel runs here at 1, 2 and 3 threads on inputs above the parallel
// thresholds, and every output must match the 1-thread run bit for bit.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "cpu/Gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <omp.h>
#include <random>
#include <vector>

using namespace zeroc;
using namespace zeroc::cpu;

namespace {

/// An owned tensor with random contents.
struct Owned {
  std::vector<char> bytes;
  Tensor t;
  Owned(std::vector<int64_t> shape, DType dtype, uint32_t seed,
        float scale = 1.0f) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    bytes.assign(size_t(n * bytesPerElement(dtype)), 0);
    t = Tensor{bytes.data(), dtype, shape};
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    for (int64_t i = 0; i < n; ++i)
      storeElement(t, i, normal(rng));
  }
  // Copies view their own bytes.
  Owned(const Owned &o) : bytes(o.bytes), t(o.t) { t.data = bytes.data(); }
  Owned &operator=(const Owned &o) {
    bytes = o.bytes;
    t = o.t;
    t.data = bytes.data();
    return *this;
  }
};

/// Runs `kernel` on fresh copies of `inputs` (which it may write) at 1, 2
/// and 3 threads; every tensor must come out with the 1-thread bits.
void expectSameBitsForAnyThreadCount(
    const std::string &what, const std::vector<Owned> &inputs,
    const std::function<void(std::vector<Owned> &)> &kernel) {
  int before = omp_get_max_threads();
  std::vector<std::vector<char>> reference;
  for (int threads : {1, 2, 3}) {
    setThreads(threads);
    std::vector<Owned> copy = inputs;
    kernel(copy);
    if (threads == 1) {
      for (const Owned &o : copy)
        reference.push_back(o.bytes);
      continue;
    }
    for (size_t i = 0; i < copy.size(); ++i)
      EXPECT_TRUE(copy[i].bytes == reference[i])
          << what << ": tensor " << i << " differs at " << threads
          << " threads";
  }
  setThreads(before);
}

void ok(const Status &s) { ASSERT_TRUE(s.ok()) << s.error; }

} // namespace

TEST(KernelThreads, PoolSizeFollowsSetThreads) {
  int before = threads();
  setThreads(2);
  EXPECT_EQ(threads(), 2);
  setThreads(0); // at least one
  EXPECT_EQ(threads(), 1);
  setThreads(before);
  EXPECT_GE(availableCores(), 1);
}

TEST(KernelThreads, Norms) {
  const int64_t rows = 300, n = 700;
  for (DType dt : {DType::F32, DType::BF16}) {
    std::vector<Owned> in = {
        Owned({rows, n}, dt, 1), Owned({n}, dt, 2),
        Owned({n}, dt, 3),       Owned({rows, n}, dt, 4),
        Owned({rows, n}, dt, 5), Owned({n}, dt, 6),
        Owned({n}, dt, 7),       Owned({2 * rows}, DType::F32, 8)};
    expectSameBitsForAnyThreadCount("layernorm", in, [](std::vector<Owned> &t) {
      float *saved = t[7].t.f32();
      ok(layerNormForward(t[0].t, t[1].t, t[2].t, 1e-5f, t[4].t, saved));
      ok(layerNormBackward(t[0].t, t[1].t, t[3].t, 1e-5f, saved, t[4].t, t[5].t,
                           t[6].t));
      ok(layerNormBackward(t[0].t, t[1].t, t[3].t, 1e-5f, nullptr, t[4].t,
                           t[5].t, t[6].t));
    });
    expectSameBitsForAnyThreadCount("rmsnorm", in, [](std::vector<Owned> &t) {
      float *saved = t[7].t.f32();
      ok(rmsNormForward(t[0].t, t[1].t, 1e-6f, true, t[4].t, saved));
      ok(rmsNormBackward(t[0].t, t[1].t, t[3].t, 1e-6f, true, saved, t[4].t,
                         t[5].t));
      ok(rmsNormBackward(t[0].t, t[1].t, t[3].t, 1e-6f, false, nullptr, t[4].t,
                         t[5].t));
    });
  }
}

TEST(KernelThreads, CrossEntropy) {
  const int64_t batch = 2, seq = 40, vocab = 3001;
  std::vector<Owned> in = {Owned({batch, seq, vocab}, DType::F32, 1, 3.0f),
                           Owned({batch, seq}, DType::I32, 2),
                           Owned({}, DType::F32, 3),
                           Owned({batch, seq, vocab}, DType::BF16, 4)};
  int32_t *ids = in[1].t.i32();
  for (int64_t i = 0; i < batch * seq; ++i)
    ids[i] = int32_t((i * 7919) % vocab);
  *in[2].t.f32() = 1.0f;
  expectSameBitsForAnyThreadCount(
      "cross_entropy", in, [](std::vector<Owned> &t) {
        ok(crossEntropyForward(t[0].t, t[1].t, t[2].t));
        ok(crossEntropyBackward(t[0].t, t[1].t, t[2].t, t[3].t));
      });
}

TEST(KernelThreads, Embeddings) {
  const int64_t vocab = 2000, hidden = 96, batch = 3, seq = 200;
  std::vector<Owned> in = {Owned({vocab, hidden}, DType::F32, 1),
                           Owned({batch, seq}, DType::I32, 2),
                           Owned({batch, seq, hidden}, DType::BF16, 3),
                           Owned({batch, seq, hidden}, DType::F32, 4),
                           Owned({vocab, hidden}, DType::F32, 5),
                           Owned({seq + 8, hidden}, DType::F32, 6)};
  int32_t *ids = in[1].t.i32();
  for (int64_t i = 0; i < batch * seq; ++i)
    ids[i] = int32_t((i * 31) % 150); // repeated ids: rows sum several
  expectSameBitsForAnyThreadCount("embedding", in, [](std::vector<Owned> &t) {
    ok(embeddingForward(t[0].t, t[1].t, t[2].t));
    ok(embeddingBackward(t[3].t, t[1].t, t[4].t));
    ok(positionEmbeddingForward(t[5].t, t[3].t));
    ok(positionEmbeddingBackward(t[2].t, t[5].t));
  });
}

TEST(KernelThreads, Attention) {
  const int64_t batch = 2, seq = 160, heads = 4, kvHeads = 2, d = 32;
  auto shapeQ = std::vector<int64_t>{batch, seq, heads * d};
  auto shapeK = std::vector<int64_t>{batch, seq, kvHeads * d};
  for (int64_t window : {int64_t(0), int64_t(50)}) {
    std::vector<Owned> in = {Owned(shapeQ, DType::F32, 1),
                             Owned(shapeK, DType::F32, 2),
                             Owned(shapeK, DType::F32, 3),
                             Owned(shapeQ, DType::F32, 4),
                             Owned(shapeQ, DType::F32, 5),
                             Owned(shapeQ, DType::F32, 6),
                             Owned(shapeK, DType::F32, 7),
                             Owned(shapeK, DType::F32, 8),
                             Owned({batch, heads, seq, seq}, DType::F32, 9),
                             Owned({batch, heads, seq}, DType::F32, 10)};
    expectSameBitsForAnyThreadCount(
        "attention", in, [window](std::vector<Owned> &t) {
          ok(attentionForward(t[0].t, t[1].t, t[2].t, heads, kvHeads, window,
                              t[3].t, &t[8].t));
          ok(attentionBackward(t[0].t, t[1].t, t[2].t, t[3].t, t[4].t, heads,
                               kvHeads, window, nullptr, t[5].t, t[6].t,
                               t[7].t));
          ok(flashAttentionForward(t[0].t, t[1].t, t[2].t, heads, kvHeads,
                                   window, t[3].t, &t[9].t));
          ok(flashAttentionBackward(t[0].t, t[1].t, t[2].t, t[3].t, t[4].t,
                                    heads, kvHeads, window, &t[9].t, t[5].t,
                                    t[6].t, t[7].t));
        });
  }
}

TEST(KernelThreads, ElementwiseCastsAndRotary) {
  const int64_t n = 3 * 65536 + 123;
  std::vector<Owned> in = {Owned({n}, DType::F32, 1),
                           Owned({n}, DType::F32, 2),
                           Owned({n}, DType::BF16, 3),
                           Owned({n}, DType::F16, 4),
                           Owned({2, 300, 256}, DType::F32, 5),
                           Owned({2, 300, 256}, DType::BF16, 6)};
  expectSameBitsForAnyThreadCount("elementwise", in, [](std::vector<Owned> &t) {
    ok(geluForward(t[0].t, t[2].t));
    ok(geluBackward(t[0].t, t[1].t, t[3].t));
    ok(siluBackward(t[1].t, t[0].t, t[1].t)); // in place
    ok(add(t[0].t, t[2].t, t[0].t));
    ok(mul(t[3].t, t[2].t, t[3].t));
    ok(scale(t[1].t, 0.37, t[2].t));
    ok(castTensor(t[0].t, t[3].t));
    ok(accumulate(t[1].t, t[3].t));
    ok(rotaryForward(t[4].t, 64, 10000.0, t[5].t));
    ok(rotaryBackward(t[5].t, 64, 10000.0, t[4].t));
  });
}

TEST(KernelThreads, LinearBiasGradient) {
  std::vector<Owned> in = {
      Owned({3, 500, 300}, DType::F32, 1), Owned({300}, DType::F32, 2),
      Owned({3, 500, 300}, DType::BF16, 3), Owned({300}, DType::BF16, 4)};
  expectSameBitsForAnyThreadCount("linear_grad_bias", in,
                                  [](std::vector<Owned> &t) {
                                    ok(linearGradBias(t[0].t, t[1].t));
                                    ok(linearGradBias(t[2].t, t[3].t));
                                  });
}

TEST(KernelThreads, OptimizerAndNorms) {
  const int64_t n = 5 * 65536 + 77;
  std::vector<Owned> in = {
      Owned({n}, DType::BF16, 1),      Owned({n}, DType::F32, 2),
      Owned({n}, DType::F32, 3, 0.1f), Owned({n}, DType::F32, 4, 0.1f),
      Owned({n}, DType::BF16, 5),      Owned({8}, DType::F32, 6)};
  // Second moments must be non-negative.
  for (int64_t i = 0; i < n; ++i)
    in[3].t.f32()[i] = std::abs(in[3].t.f32()[i]);
  AdamSettings s;
  s.weightDecay = 0.01;
  s.adamw = true;
  expectSameBitsForAnyThreadCount("optimizer", in, [&](std::vector<Owned> &t) {
    ok(adamUpdate(s, 3, t[0].t, t[1].t, t[2].t, t[3].t, &t[4].t));
    LambSums sums;
    ok(lambMoments(s, t[0].t, t[1].t, t[2].t, t[3].t, sums));
    ok(lambApply(s, 2, 0.5f, t[1].t, t[2].t, t[3].t, &t[4].t));
    double sq = sumOfSquares(t[0].t);
    ok(scaleInPlace(t[1].t, 0.25f));
    bool overflow = false;
    ok(unscaleGrads(t[0].t, 1024.0, overflow));
    // The f64 sums, whole, land in a tensor compared like the rest.
    char *out = static_cast<char *>(t[5].t.data);
    std::memcpy(out, &sums.weight, 8);
    std::memcpy(out + 8, &sums.update, 8);
    std::memcpy(out + 16, &sq, 8);
    out[24] = overflow ? 1 : 0;
  });
}

namespace {

/// A product gemm slices: row-major op(A) [m, k], op(B) [k, n], C [m, n]
/// with padded leading dimensions (slices start mid-row of A or B).
struct GemmCase {
  bool transA, transB;
  int64_t m, n, k;
  int64_t lda() const { return (transA ? m : k) + 3; }
  int64_t ldb() const { return (transB ? k : n) + 5; }
  int64_t ldc() const { return n + 7; }
  std::vector<Owned> operands() const {
    return {Owned({transA ? k : m, lda()}, DType::F32, 1),
            Owned({transB ? n : k, ldb()}, DType::F32, 2),
            Owned({m, ldc()}, DType::F32, 3)};
  }
  void run(std::vector<Owned> &t, bool sliced) const {
    auto *f = sliced ? &gemm : &gemmSerial;
    f(transA, transB, m, n, k, 0.75f, t[0].t.f32(), lda(), t[1].t.f32(), ldb(),
      0.5f, t[2].t.f32(), ldc());
  }
};

// Every transpose, slices over M and over N, K beyond one of OpenBLAS's
// K blocks, sizes that leave a shorter last slice.
const GemmCase kGemmCases[] = {{false, false, 600, 300, 200},
                               {false, true, 1000, 768, 100},
                               {true, false, 300, 700, 1000},
                               {true, true, 250, 1100, 64},
                               {false, true, 300, 1037, 513}};

} // namespace

TEST(KernelThreads, GemmSlicesDependOnTheShapeOnly) {
  for (const GemmCase &c : kGemmCases) {
    GemmSlices s = gemmSlices(c.m, c.n, c.k);
    ASSERT_GT(s.count, 1) << c.m << "x" << c.n << "x" << c.k;
    EXPECT_EQ(s.alongM, c.m >= c.n);
    int64_t along = s.alongM ? c.m : c.n;
    EXPECT_EQ(s.size % kGemmSliceAlign, 0);
    EXPECT_LE(s.count, kGemmMaxSlices);
    EXPECT_GE(s.size, kGemmSliceMin);
    EXPECT_EQ(s.count, (along + s.size - 1) / s.size);
  }
  // Too little work for one slice more: one call.
  EXPECT_EQ(gemmSlices(64, 64, 64).count, 1);
  // Fewer than two slices' rows or columns: one call, whatever K.
  EXPECT_EQ(gemmSlices(200, 200, 100000).count, 1);
}

TEST(KernelThreads, Gemm) {
  for (const GemmCase &c : kGemmCases)
    expectSameBitsForAnyThreadCount(
        "gemm " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
            std::to_string(c.k),
        c.operands(), [&c](std::vector<Owned> &t) { c.run(t, true); });
}

// Slicing C's rows or columns never splits an element's sum over K, and the
// product is the float64 product to within float rounding. Sliced along C's
// rows, on the BLAS kernel's tile grid (kGemmSliceAlign), it is one BLAS
// call's bit for bit (OpenBLAS blocks K by K alone). Sliced along its
// columns it was too with OpenBLAS's SkylakeX kernels, but not with its Zen
// kernels (AVX2), whatever the slice width (128 to 384 columns: 4-30% of
// the elements differed from one call's in their last bits): a narrower
// call takes another path there. Either way each element is one call's sum,
// the same for any thread count (KernelThreads.Gemm).
TEST(KernelThreads, GemmSlicesKeepEachSumOfOneBlasCall) {
  int before = threads();
  setThreads(2);
  for (const GemmCase &c : kGemmCases) {
    std::vector<Owned> whole = c.operands(), sliced = c.operands();
    c.run(whole, false);
    c.run(sliced, true);
    if (gemmSlices(c.m, c.n, c.k).alongM)
      EXPECT_TRUE(whole[2].bytes == sliced[2].bytes)
          << c.m << "x" << c.n << "x" << c.k;
    std::vector<Owned> in = c.operands();
    const float *a = in[0].t.f32(), *b = in[1].t.f32(), *c0 = in[2].t.f32();
    double worst = 0.0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0.0, mag = 0.0;
        for (int64_t l = 0; l < c.k; ++l) {
          double x = c.transA ? a[l * c.lda() + i] : a[i * c.lda() + l];
          double y = c.transB ? b[j * c.ldb() + l] : b[l * c.ldb() + j];
          sum += x * y;
          mag += std::abs(x * y);
        }
        double want = 0.75 * sum + 0.5 * c0[i * c.ldc() + j];
        double got = sliced[2].t.f32()[i * c.ldc() + j];
        worst = std::max(worst, std::abs(got - want) / (mag + 1.0));
      }
    EXPECT_LT(worst, 1e-5) << c.m << "x" << c.n << "x" << c.k;
    // The padding between rows of C is left alone.
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = c.n; j < c.ldc(); ++j)
        EXPECT_EQ(sliced[2].t.f32()[i * c.ldc() + j], c0[i * c.ldc() + j]);
  }
  setThreads(before);
}
