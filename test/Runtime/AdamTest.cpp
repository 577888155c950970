//===- AdamTest.cpp - Adam's vector loop and threads against its plain loop ==//
//
// cpu::adamUpdate must give the bits of its portable loop on one thread
// (adamElement, element by element, as the kernel's description states it;
// KernelTest checks that against hand computations) whatever its options:
// master weights, both moments and the 16-bit copy, for Adam and AdamW,
// every gradient and parameter dtype, any thread count, with the AVX2 loop
// and the portable one, over sizes that leave partial vectors, chunks and
// thread ranges.
//
//===----------------------------------------------------------------------===//

#include "cpu/Optimizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

using namespace zeroc;
using runtime::Status;
using runtime::Tensor;

/// The reference: the portable loop on the calling thread.
const cpu::AdamOptions kPlain{1, false};

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
          for (bool simd : {true, false})
            for (unsigned threads : {1u, 3u, 0u}) {
              SCOPED_TRACE(std::to_string(n) + (adamw ? " adamw" : " adam") +
                           " grad " + std::string(dtypeName(gradType)) +
                           " param " + std::string(dtypeName(paramType)) +
                           (simd ? " simd" : " portable") + " threads " +
                           std::to_string(threads));
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
                                    {threads, simd});
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

TEST(Adam, ReportsItsSpeed) {
  // Not a benchmark gate: prints elements per second of the default and the
  // plain loop, for the record.
  const int64_t n = int64_t(1) << 22;
  cpu::AdamSettings settings;
  settings.adamw = true;
  State a(n, DType::BF16, DType::BF16, 3), b(n, DType::BF16, DType::BF16, 3);
  auto time = [](auto &&f) {
    auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  double plainSeconds = time([&] {
    ASSERT_TRUE(cpu::adamUpdate(settings, 1, a.grad.view, a.master.view,
                                a.m.view, a.v.view, &a.param16.view, kPlain)
                    .ok());
  });
  double fastSeconds = time([&] {
    ASSERT_TRUE(cpu::adamUpdate(settings, 1, b.grad.view, b.master.view,
                                b.m.view, b.v.view, &b.param16.view)
                    .ok());
  });
  expectSameBits(b, a);
  std::printf("    adam on %lld elements: plain loop %.1f M/s, "
              "default %.1f M/s (avx2: %s)\n",
              (long long)n, n / plainSeconds / 1e6, n / fastSeconds / 1e6,
              cpu::adamUsesAvx2() ? "yes" : "no");
}

} // namespace
