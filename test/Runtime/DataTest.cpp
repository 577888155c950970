//===- DataTest.cpp - Token files, errors and the data order --------------===//

#include "data/DataLoader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <unistd.h>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

/// A path in the test's temporary directory, unique per process.
std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "zeroc-data-" + std::to_string(::getpid()) +
         "-" + name;
}

std::vector<uint32_t> iota(int64_t n) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

BatchShape shape(int64_t world, int64_t rank, int64_t accum, int64_t micro,
                 int64_t seq) {
  BatchShape s;
  s.worldSize = world;
  s.rank = rank;
  s.gradientAccumulation = accum;
  s.microBatch = micro;
  s.seqLen = seq;
  return s;
}

struct MicroBatch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const MicroBatch &o) const {
    return inputs == o.inputs && targets == o.targets;
  }
};

MicroBatch load(const DataLoader &loader, int64_t step, int64_t micro) {
  const BatchShape &s = loader.shape();
  MicroBatch b;
  b.inputs.resize(size_t(s.microBatch * s.seqLen));
  b.targets.resize(b.inputs.size());
  std::optional<Diagnostic> err =
      loader.load(step, micro, b.inputs.data(), b.targets.data());
  EXPECT_FALSE(err) << err->str();
  return b;
}

DataLoader loaderOrDie(Expected<DataLoader> l) {
  EXPECT_TRUE(l) << l.error().str();
  return std::move(*l);
}

} // namespace

//===----------------------------------------------------------------------===//
// The file format
//===----------------------------------------------------------------------===//

TEST(TokenFile, HeaderAndRawFilesRoundTrip) {
  std::vector<uint32_t> small = {0, 1, 255, 256, 65535, 7};
  std::vector<uint32_t> large = {0, 65536, 4000000000u, 123};
  struct Case {
    std::string name;
    const std::vector<uint32_t> &tokens;
    int width;
    int64_t bytes;
  } cases[] = {{"a.bin", small, 2, 8 + 12},
               {"b.tok", large, 4, 8 + 16},
               {"c.u16", small, 2, 12},
               {"d.u32", large, 4, 16}};
  for (const Case &c : cases) {
    std::string path = tempPath(c.name);
    ASSERT_FALSE(writeTokenFile(path, c.tokens, c.width));
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    EXPECT_EQ(int64_t(in.tellg()), c.bytes) << c.name;
    Expected<std::unique_ptr<TokenFile>> f = TokenFile::open(path);
    ASSERT_TRUE(f) << f.error().str();
    EXPECT_EQ((*f)->width(), c.width);
    EXPECT_EQ((*f)->size(), int64_t(c.tokens.size()));
    std::vector<uint32_t> back(c.tokens.size());
    (*f)->read(0, int64_t(back.size()), back.data());
    EXPECT_EQ(back, c.tokens) << c.name;
    std::remove(path.c_str());
  }
}

TEST(TokenFile, HeaderIsMagicVersionWidthLittleEndian) {
  std::string path = tempPath("le.bin");
  ASSERT_FALSE(writeTokenFile(path, {0x0102, 0xa0b0}, 2));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes, std::string("ZTOK\x01\x00\x02\x00\x02\x01\xb0\xa0", 12));
  std::remove(path.c_str());
}

TEST(TokenFile, Errors) {
  auto openError = [](const std::string &path) {
    Expected<std::unique_ptr<TokenFile>> f = TokenFile::open(path);
    EXPECT_FALSE(f) << path;
    return f ? std::string() : f.error().str();
  };
  std::string missing = tempPath("missing.bin");
  EXPECT_EQ(openError(missing), missing + ": error: cannot open token file: "
                                          "No such file or directory");

  std::string bad = tempPath("bad.bin");
  writeBytes(bad, "GPT2\x01\x00\x02\x00");
  EXPECT_NE(openError(bad).find("bad token file header: expected the magic "
                                "'ZTOK'"),
            std::string::npos);
  writeBytes(bad, "ZT");
  EXPECT_NE(openError(bad).find("expected the magic 'ZTOK'"),
            std::string::npos);
  writeBytes(bad, std::string("ZTOK\x02\x00\x02\x00", 8));
  EXPECT_NE(openError(bad).find("version 2 is not supported by this build, "
                                "which reads version 1"),
            std::string::npos);
  writeBytes(bad, std::string("ZTOK\x01\x00\x03\x00", 8));
  EXPECT_NE(openError(bad).find("token width 3 bytes; expected 2 (uint16) "
                                "or 4 (uint32)"),
            std::string::npos);
  writeBytes(bad, std::string("ZTOK\x01\x00\x04\x00\x01\x02\x03", 11));
  EXPECT_NE(openError(bad).find("3 bytes of tokens is not a whole number of "
                                "4-byte tokens"),
            std::string::npos);
  std::remove(bad.c_str());

  std::string odd = tempPath("odd.u16");
  writeBytes(odd, "abc");
  EXPECT_NE(openError(odd).find("not a whole number of 2-byte tokens"),
            std::string::npos);
  std::remove(odd.c_str());

  EXPECT_TRUE(writeTokenFile(tempPath("x.u16"), {1}, 4));
  EXPECT_TRUE(writeTokenFile(tempPath("x.bin"), {70000}, 2));
}

TEST(DataLoader, FileTooShortForOneStepSaysWhatItNeeds) {
  std::string path = tempPath("short.u16");
  ASSERT_FALSE(writeTokenFile(path, iota(128), 2));
  // 2 ranks x 2 micro-steps x 2 sequences x 16 tokens + 1 = 129.
  Expected<DataLoader> l = DataLoader::open(path, shape(2, 0, 2, 2, 16), 1000);
  ASSERT_FALSE(l);
  EXPECT_EQ(l.error().str(),
            path + ": error: 128 tokens are too few for one step, which "
                   "needs 129 (2 ranks x 2 micro-steps x 2 sequences x 16 "
                   "tokens, + 1 for the last target)");
  ASSERT_FALSE(writeTokenFile(path, iota(129), 2));
  EXPECT_TRUE(DataLoader::open(path, shape(2, 0, 2, 2, 16), 1000));
  std::remove(path.c_str());
}

TEST(DataLoader, TokenIdsMustBeBelowTheVocabulary) {
  std::string path = tempPath("vocab.u16");
  std::vector<uint32_t> tokens(100, 3);
  tokens[20] = 50;
  ASSERT_FALSE(writeTokenFile(path, tokens, 2));
  DataLoader l = loaderOrDie(DataLoader::open(path, shape(1, 0, 1, 2, 16), 50));
  std::vector<int32_t> in(32), tg(32);
  // Step 0 reads tokens [0, 17) and [16, 33).
  std::optional<Diagnostic> err = l.load(0, 0, in.data(), tg.data());
  ASSERT_TRUE(err);
  EXPECT_EQ(err->str(), path + ": error: token id 50 at position 20 is not "
                               "below the vocabulary size 50");
  // Step 2 reads [64, 97); with vocabulary 51 step 0 is fine too.
  EXPECT_FALSE(l.load(2, 0, in.data(), tg.data()));
  DataLoader ok =
      loaderOrDie(DataLoader::open(path, shape(1, 0, 1, 2, 16), 51));
  EXPECT_FALSE(ok.load(0, 0, in.data(), tg.data()));
  std::remove(path.c_str());
}

TEST(DataLoader, RejectsBadShapes) {
  auto l = DataLoader::synthetic(1, shape(2, 2, 1, 1, 8), 100);
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().message.find("rank 2 is not in a world of 2"),
            std::string::npos);
  EXPECT_FALSE(DataLoader::synthetic(1, shape(1, 0, 0, 1, 8), 100));
  EXPECT_FALSE(DataLoader::synthetic(1, shape(1, 0, 1, 1, 8), 0));
}

// A step's token count is computed once, checked: one that does not fit 64
// bits (world x accumulation x micro-batch x seq_len) is refused, not wrapped.
TEST(DataLoader, RejectsAStepBeyond64Bits) {
  auto l = DataLoader::synthetic(
      1, shape(int64_t(1) << 31, 0, int64_t(1) << 20, int64_t(1) << 20, 8),
      100);
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().message.find("is more than 2^62 tokens"),
            std::string::npos)
      << l.error().message;
}

//===----------------------------------------------------------------------===//
// The data order
//===----------------------------------------------------------------------===//

// Sequence k of step s is tokens [(s G + k) S, ... + S + 1): with token i
// = i, row `row` of micro-step m of rank r starts at
// (s G + (m W + r) B + row) S.
TEST(DataLoader, SequencesFollowTheDocumentedFormula) {
  const int64_t W = 2, A = 3, B = 2, S = 5, G = W * A * B;
  std::string path = tempPath("order.u32");
  ASSERT_FALSE(writeTokenFile(path, iota(10 * G * S + 1), 4));
  for (int64_t r = 0; r < W; ++r) {
    DataLoader l =
        loaderOrDie(DataLoader::open(path, shape(W, r, A, B, S), 1 << 20));
    EXPECT_EQ(l.stepsPerEpoch(), 10);
    for (int64_t s : {0, 1, 9})
      for (int64_t m = 0; m < A; ++m) {
        MicroBatch b = load(l, s, m);
        for (int64_t row = 0; row < B; ++row) {
          int64_t start = (s * G + (m * W + r) * B + row) * S;
          for (int64_t i = 0; i < S; ++i) {
            EXPECT_EQ(b.inputs[size_t(row * S + i)], start + i);
            EXPECT_EQ(b.targets[size_t(row * S + i)], start + i + 1);
          }
        }
      }
  }
  std::remove(path.c_str());
}

// The identity: one rank with accumulation 4 reads, micro-step by
// micro-step, what four ranks with accumulation 1 read rank by rank; two
// ranks with accumulation 2 read the same global batch too. So the mean
// loss and the averaged gradient of a step do not depend on how the global
// batch is split. Checked on a file (with an epoch wrap) and on the
// synthetic stream.
TEST(DataLoader, OneRankAccumulatingFourEqualsFourRanks) {
  const int64_t B = 2, S = 7, G = 4 * B;
  std::string path = tempPath("identity.u16");
  // 3 whole steps and a tail of 20 tokens that is never read.
  ASSERT_FALSE(writeTokenFile(path, iota(3 * G * S + 1 + 20), 2));
  for (bool synthetic : {false, true}) {
    auto make = [&](int64_t world, int64_t rank, int64_t accum) {
      BatchShape sh = shape(world, rank, accum, B, S);
      return loaderOrDie(synthetic ? DataLoader::synthetic(17, sh, 1000)
                                   : DataLoader::open(path, sh, 1 << 16));
    };
    DataLoader one = make(1, 0, 4);
    std::vector<DataLoader> four, two;
    for (int64_t r = 0; r < 4; ++r)
      four.push_back(make(4, r, 1));
    for (int64_t r = 0; r < 2; ++r)
      two.push_back(make(2, r, 2));
    if (!synthetic)
      EXPECT_EQ(one.stepsPerEpoch(), 3);
    for (int64_t step : {0, 1, 2, 3, 7}) {
      for (int64_t m = 0; m < 4; ++m) {
        MicroBatch a = load(one, step, m);
        EXPECT_EQ(a, load(four[size_t(m)], step, 0)) << "micro-step " << m;
        // Two ranks x 2: micro-step m2 of rank r is sequence block
        // m2 * 2 + r, i.e. micro-step m of the one-rank run.
        EXPECT_EQ(a, load(two[size_t(m % 2)], step, m / 2));
      }
    }
    if (!synthetic) // Epoch wrap: step 3 is step 0 again.
      EXPECT_EQ(load(one, 3, 1), load(one, 0, 1));
  }
  std::remove(path.c_str());
}

TEST(DataLoader, SyntheticStreamIsDeterministic) {
  BatchShape sh = shape(1, 0, 1, 4, 64);
  DataLoader a = loaderOrDie(DataLoader::synthetic(5, sh, 50257));
  DataLoader b = loaderOrDie(DataLoader::synthetic(5, sh, 50257));
  DataLoader c = loaderOrDie(DataLoader::synthetic(6, sh, 50257));
  EXPECT_EQ(a.stepsPerEpoch(), -1);
  MicroBatch x = load(a, 1000000, 0);
  EXPECT_EQ(x, load(b, 1000000, 0));
  EXPECT_NE(x.inputs, load(c, 1000000, 0).inputs);
  std::map<int32_t, int> seen;
  for (int32_t t : x.inputs) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 50257);
    ++seen[t];
  }
  // 256 tokens: the 61-token pattern, plus about one in ten noise draws.
  EXPECT_GE(seen.size(), 61u);
  EXPECT_LT(seen.size(), 61u + 60u);
  // Targets are the next tokens.
  for (int64_t i = 0; i + 1 < 64; ++i)
    EXPECT_EQ(x.targets[size_t(i)], x.inputs[size_t(i + 1)]);
}

// The stream is learnable: the token 61 positions later is the same one
// about 9 times in 10 (0.9 x 0.9 when either may be noise, plus chance).
TEST(DataLoader, SyntheticStreamRepeatsItsPattern) {
  zeroc::runtime::SyntheticTokens tokens(7, 256);
  std::vector<uint32_t> t(61 * 200);
  tokens.read(0, int64_t(t.size()), t.data());
  int same = 0, total = 0;
  for (size_t i = 0; i + 61 < t.size(); ++i, ++total)
    same += t[i] == t[i + 61];
  double rate = double(same) / total;
  EXPECT_GT(rate, 0.78);
  EXPECT_LT(rate, 0.84);
}
