//===- InitTest.cpp - Philox and layout-independent parameter init --------===//

#include "init/Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <omp.h>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

PlanTensor param(std::string name, int64_t numel, std::string init) {
  PlanTensor t;
  t.name = std::move(name);
  t.role = TensorRole::Param;
  t.shape = {numel};
  t.numel = numel;
  t.localNumel = numel;
  t.init = std::move(init);
  return t;
}

std::vector<float> whole(const PlanTensor &t, uint64_t seed) {
  std::vector<float> v(size_t(t.numel));
  initParameter(t, t.init, seed, 0, t.numel, v.data());
  return v;
}

} // namespace

// Random123's known-answer tests (kat_vectors, philox4x32 10 rounds).
TEST(Philox, KnownAnswers) {
  using C = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (C{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                       {0xffffffff, 0xffffffff}),
            (C{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                       {0xa4093822, 0x299f31d0}),
            (C{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, NameHashIsFnv1a64) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(Philox, CounterRngIsAPureFunctionOfItsIndex) {
  CounterRng a(7, "wte.weight"), b(7, "wte.weight"), other(7, "wpe.weight");
  EXPECT_EQ(a.bits(12345), b.bits(12345));
  EXPECT_NE(a.bits(12345), other.bits(12345));
  EXPECT_EQ(a.bits(5), a.block(1)[1]);
  for (uint64_t i = 0; i < 1000; ++i)
    EXPECT_LT(a.below(i, 10), 10u);
}

TEST(Init, ParsesSpecs) {
  EXPECT_EQ(parseInit("zeros")->kind, InitSpec::Zeros);
  EXPECT_EQ(parseInit("")->kind, InitSpec::Zeros);
  EXPECT_EQ(parseInit("ones")->kind, InitSpec::Ones);
  Expected<InitSpec> n = parseInit("normal(0.020000)");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->kind, InitSpec::Normal);
  EXPECT_DOUBLE_EQ(n->std, 0.02);
  for (const char *bad : {"uniform", "normal()", "normal(-1)", "normal(0)",
                          "normal(0.02", "normal(x)", "normal(inf)", "Ones"}) {
    Expected<InitSpec> e = parseInit(bad);
    ASSERT_FALSE(e) << bad;
    EXPECT_EQ(e.error().message,
              std::string("unknown parameter init '") + bad +
                  "'; expected zeros, ones or normal(STD) with a positive, "
                  "finite STD");
  }
}

TEST(Init, ZerosOnesAndErrors) {
  PlanTensor ones = param("ln.weight", 5, "ones");
  EXPECT_EQ(whole(ones, 1), std::vector<float>(5, 1.0f));
  PlanTensor zeros = param("ln.bias", 3, "zeros");
  EXPECT_EQ(whole(zeros, 1), std::vector<float>(3, 0.0f));
  std::vector<float> out(8);
  try {
    initParameter(ones, "gaussian", 1, 0, 5, out.data());
    FAIL();
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'ln.weight': unknown "
                                         "parameter init 'gaussian'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(initParameter(ones, "ones", 1, 3, 3, out.data()),
               std::invalid_argument);
}

TEST(Init, AnyRangeMatchesTheWholeTensor) {
  PlanTensor t = param("h.0.attn.c_attn.weight", 1001, "normal(0.02)");
  std::vector<float> all = whole(t, 42);
  for (int64_t begin : {0, 1, 2, 3, 500, 999})
    for (int64_t count : {0, 1, 2, 7}) {
      if (begin + count > t.numel)
        continue;
      std::vector<float> part(static_cast<size_t>(count));
      initParameter(t, t.init, 42, begin, count, part.data());
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(part[size_t(i)], all[size_t(begin + i)]);
    }
  // The seed and the name both matter.
  EXPECT_NE(whole(t, 43), all);
  PlanTensor renamed = t;
  renamed.name = "h.1.attn.c_attn.weight";
  EXPECT_NE(whole(renamed, 42), all);
}

// Stage 3: the shards of ranks 0..n-1, padding dropped, are the tensor.
TEST(Init, Stage3ShardsEqualTheWholeTensor) {
  for (int64_t numel : {1, 7, 10, 64, 1000})
    for (int64_t n : {1, 2, 3, 8}) {
      PlanTensor t = param("p" + std::to_string(numel), numel, "normal(0.5)");
      std::vector<float> all = whole(t, 3);
      ParamShardLayout layout{numel, n};
      std::vector<float> joined;
      for (int64_t r = 0; r < n; ++r) {
        std::vector<float> shard(size_t(layout.shardSize()), -1.0f);
        initShard(t, t.init, 3, layout, r, shard.data());
        ElementRange owned = layout.ownedBy(r);
        joined.insert(joined.end(), shard.begin(),
                      shard.begin() + owned.size());
        for (int64_t i = owned.size(); i < layout.shardSize(); ++i)
          EXPECT_EQ(shard[size_t(i)], 0.0f) << "padding";
      }
      EXPECT_EQ(joined, all) << "numel " << numel << " over " << n;
    }
}

// A padded table (valid_rows): the valid rows hold the unpadded table's
// values, the padding rows zero, in any range, stage-3 shard and flat-group
// partition.
TEST(Init, PaddedTablesZeroTheirPaddingRows) {
  PlanTensor unpadded = param("wte.weight", 7 * 3, "normal(0.02)");
  unpadded.shape = {7, 3};
  PlanTensor padded = param("wte.weight", 10 * 3, "normal(0.02)");
  padded.shape = {10, 3};
  padded.validRows = 7;
  std::vector<float> expected = whole(unpadded, 5);
  expected.resize(30, 0.0f);
  EXPECT_EQ(whole(padded, 5), expected);
  for (int64_t begin : {0, 4, 20, 21, 25})
    for (int64_t count : {0, 1, 5}) {
      std::vector<float> part(size_t(count), -1.0f);
      initParameter(padded, padded.init, 5, begin, count, part.data());
      EXPECT_EQ(part, std::vector<float>(expected.begin() + begin,
                                         expected.begin() + begin + count))
          << "[" << begin << ", " << begin + count << ")";
    }
  for (int64_t n : {2, 3, 4}) {
    ParamShardLayout layout{30, n};
    std::vector<float> joined;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> shard(size_t(layout.shardSize()), -1.0f);
      initShard(padded, padded.init, 5, layout, r, shard.data());
      joined.insert(joined.end(), shard.begin(),
                    shard.begin() + layout.ownedBy(r).size());
    }
    EXPECT_EQ(joined, expected) << "over " << n;
    FlatGroupLayout flat({30}, n);
    std::vector<float> parts;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> part(size_t(flat.partitionSize()), -1.0f);
      initShard({&padded}, flat, 5, r, part.data());
      parts.insert(parts.end(), part.begin(), part.end());
    }
    parts.resize(30);
    EXPECT_EQ(parts, expected) << "flat over " << n;
  }
}

// Stages 1-2: the partitions of ranks 0..n-1, concatenated, are the flat
// buffer: each parameter whole at its offset, then zero padding.
TEST(Init, FlatGroupPartitionsEqualTheWholeParameters) {
  std::vector<PlanTensor> params = {
      param("wte.weight", 37, "normal(0.02)"), param("ln.weight", 5, "ones"),
      param("ln.bias", 5, "zeros"), param("fc.weight", 61, "normal(1.0)")};
  std::vector<const PlanTensor *> ptrs;
  std::vector<int64_t> numels;
  std::vector<float> flat;
  for (const PlanTensor &p : params) {
    ptrs.push_back(&p);
    numels.push_back(p.numel);
    std::vector<float> w = whole(p, 9);
    flat.insert(flat.end(), w.begin(), w.end());
  }
  for (int64_t n : {1, 2, 3, 8}) {
    FlatGroupLayout layout(numels, n);
    std::vector<float> joined;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> part(size_t(layout.partitionSize()), -1.0f);
      initShard(ptrs, layout, 9, r, part.data());
      joined.insert(joined.end(), part.begin(), part.end());
    }
    ASSERT_EQ(int64_t(joined.size()), layout.padded);
    std::vector<float> expected = flat;
    expected.resize(size_t(layout.padded), 0.0f);
    EXPECT_EQ(joined, expected) << "world size " << n;
  }
}

TEST(Init, FlatGroupOfAPlan) {
  Plan plan;
  plan.worldSize = 3;
  plan.tensors = {param("a", 4, "normal(0.1)"), param("b", 6, "ones")};
  PlanFlatGroup group;
  group.name = "group0";
  group.params = {"a", "b"};
  std::vector<float> flat = whole(plan.tensors[0], 5);
  flat.insert(flat.end(), 6, 1.0f);
  flat.resize(12, 0.0f); // 10 padded to a multiple of 2 * 3.
  std::vector<float> joined;
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<float> part(4);
    initShard(plan, group, 5, r, part.data());
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, flat);
  group.params.push_back("missing");
  std::vector<float> part(4);
  EXPECT_THROW(initShard(plan, group, 5, 0, part.data()),
               std::invalid_argument);
}

// Box-Muller on Philox: N(0, STD) over n = 1e5 draws. Each statistic is
// checked to 4 of its standard errors for a normal sample (Kendall and
// Stuart): the mean STD / sqrt(n) (2.5e-4 for STD 0.02), the sample standard
// deviation STD / sqrt(2n) (0.9%), the kurtosis sqrt(24 / n) (0.062 at 4).
// The draws are fixed by the seed; observed: 0.32, 0.21 and 0.016 of the
// tolerances (1.3, 0.8 and 0.06 standard errors).
constexpr double kStandardErrors = 4.0;

TEST(Init, NormalHasMeanZeroAndTheGivenStd) {
  const int64_t n = 100000;
  for (double std : {0.02, 1.0}) {
    PlanTensor t =
        param("h.0.mlp.c_fc.weight", n, "normal(" + std::to_string(std) + ")");
    std::vector<float> v = whole(t, 1234);
    double sum = 0, sumSq = 0, sum4 = 0;
    for (float x : v) {
      sum += x;
      sumSq += double(x) * x;
      sum4 += std::pow(double(x), 4);
    }
    double mean = sum / n;
    double var = sumSq / n - mean * mean;
    EXPECT_NEAR(mean, 0.0, kStandardErrors * std / std::sqrt(double(n)));
    EXPECT_NEAR(std::sqrt(var), std,
                kStandardErrors * std / std::sqrt(2.0 * double(n)));
    // Normal, not just centered: kurtosis 3.
    EXPECT_NEAR(sum4 / n / (var * var), 3.0,
                kStandardErrors * std::sqrt(24.0 / double(n)));
  }
}

// Neighbouring elements (the cosine and sine of one Box-Muller pair, and
// adjacent pairs) are uncorrelated: the mean of n products of independent
// N(0, 1) draws has standard error 1 / sqrt(n), 0.0126 at 4 (observed
// 2.8e-3, 0.9 standard errors).
TEST(Init, NeighboursAreUncorrelated) {
  const int64_t n = 100000;
  PlanTensor t = param("w", n, "normal(1.0)");
  std::vector<float> v = whole(t, 99);
  for (int64_t lag : {1, 2, 3}) {
    double c = 0;
    for (int64_t i = 0; i + lag < n; ++i)
      c += double(v[size_t(i)]) * v[size_t(i + lag)];
    EXPECT_NEAR(c / double(n - lag), 0.0,
                kStandardErrors / std::sqrt(double(n - lag)))
        << "lag " << lag;
  }
}

// Init runs on the OpenMP threads: each element is a function of its index,
// so 1, 2 and 3 threads (and the one-element reference, CounterRng::normal)
// give the same bits, for ranges starting on an odd index and ending on an
// even one too.
TEST(Init, SameBitsForAnyThreadCount) {
  const int64_t n = 100003; // above the parallel threshold, odd
  const double stdev = 0.02;
  CounterRng rng(7, "h.0.attn.c_attn.weight");
  std::vector<float> reference(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    reference[size_t(i)] = float(stdev * rng.normal(uint64_t(5 + i)));
  int before = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> got(static_cast<size_t>(n));
    PlanTensor t = param("h.0.attn.c_attn.weight", n + 5, "normal(0.02)");
    initParameter(t, t.init, 7, 5, n, got.data());
    EXPECT_EQ(std::memcmp(got.data(), reference.data(), size_t(n) * 4), 0)
        << threads << " thread(s)";
  }
  omp_set_num_threads(before);
}
