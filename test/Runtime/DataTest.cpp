//===- DataTest.cpp - Token files, errors and the data order --------------===//

#include "data/DataLoader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
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
    std::vector<int64_t> back(c.tokens.size());
    (*f)->read(0, int64_t(back.size()), back.data());
    EXPECT_EQ(back, std::vector<int64_t>(c.tokens.begin(), c.tokens.end()))
        << c.name;
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
  writeBytes(bad, "ZTOK\x01");
  EXPECT_NE(openError(bad).find("bad token file header: the ZTOK header needs "
                                "8 bytes, the file has 5"),
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

//===----------------------------------------------------------------------===//
// Other projects' token files: Inputs/data, written by make_token_files.py
// in the layouts of llm.c's write_datafile, nanoGPT's prepare.py and
// Megatron-LM's IndexedDatasetBuilder.
//===----------------------------------------------------------------------===//

namespace {

std::string input(const std::string &name) {
  return std::string(ZEROC_DATA_INPUTS) + name;
}

/// make_token_files.py's token(i, modulus, mult, add), for i in [0, n).
std::vector<int64_t> formula(int64_t n, int64_t modulus, int64_t mult,
                             int64_t add) {
  std::vector<int64_t> v(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = (i * mult + add) % modulus;
  return v;
}

std::vector<int64_t> readAll(const TokenSource &s) {
  std::vector<int64_t> v(size_t(s.size()), -1);
  s.read(0, s.size(), v.data());
  return v;
}

std::unique_ptr<TokenFile> openOrDie(const std::string &path) {
  Expected<std::unique_ptr<TokenFile>> f = TokenFile::open(path);
  EXPECT_TRUE(f) << f.error().str();
  return f ? std::move(*f) : nullptr;
}

std::string openError(const std::string &path) {
  Expected<std::unique_ptr<TokenFile>> f = TokenFile::open(path);
  EXPECT_FALSE(f) << path << " opened";
  return f ? std::string() : f.error().str();
}

} // namespace

TEST(TokenFormats, LlmcGpt2AndLlama3Headers) {
  auto gpt2 = openOrDie(input("llmc-gpt2.bin"));
  ASSERT_TRUE(gpt2);
  EXPECT_EQ(gpt2->format(), TokenFile::Format::Llmc);
  EXPECT_EQ(gpt2->width(), 2);
  EXPECT_EQ(readAll(*gpt2), formula(300, 50257, 7919, 11));
  auto llama = openOrDie(input("llmc-llama3.bin"));
  ASSERT_TRUE(llama);
  EXPECT_EQ(llama->format(), TokenFile::Format::Llmc);
  EXPECT_EQ(llama->width(), 4);
  EXPECT_EQ(readAll(*llama), formula(200, 128256, 104729, 5));
}

TEST(TokenFormats, NanoGptBinIsHeaderlessUint16) {
  auto f = openOrDie(input("nanogpt-train.bin"));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->format(), TokenFile::Format::NanoGpt);
  EXPECT_EQ(readAll(*f), formula(300, 50257, 7919, 11));
  EXPECT_EQ(f->documentStarts(), std::vector<int64_t>{0});
}

// Four documents of sequences [5, 7], [10, 3], [], [20, 4, 11]: documents
// start at tokens 0, 12 and 25 (the empty one adds no boundary).
TEST(TokenFormats, MegatronIndexedDatasetFromBinIdxOrPrefix) {
  for (const char *prefix : {"megatron-uint16", "megatron-int32"}) {
    std::string p = input(prefix);
    for (const std::string &path : {p + ".bin", p + ".idx", p}) {
      auto f = openOrDie(path);
      ASSERT_TRUE(f) << path;
      EXPECT_EQ(f->format(), TokenFile::Format::Megatron);
      EXPECT_EQ(f->name(), p + ".bin");
      EXPECT_EQ(f->width(), std::string(prefix) == "megatron-int32" ? 4 : 2);
      EXPECT_EQ(readAll(*f), formula(60, 1000, 31, 7)) << path;
      EXPECT_EQ(f->documentStarts(), (std::vector<int64_t>{0, 12, 25}));
    }
  }
}

TEST(TokenFormats, CorruptFilesSayWhatIsWrong) {
  struct Case {
    const char *file, *message;
  } cases[] = {
      {"llmc-bad-version.bin",
       "bad llm.c header: version 2 with magic 20240520; this build reads "
       "magic 20240520 version 1 (uint16, GPT-2) and magic 20240801 version "
       "7 (uint32, Llama 3)"},
      {"llmc-count-too-large.bin",
       "bad llm.c header: it counts 400 tokens (800 bytes), the file holds "
       "600 bytes after the header (truncated file?)"},
      {"llmc-truncated.bin", "bad llm.c header: the header is 1024 bytes, the "
                             "file has 512 (truncated file?)"},
      {"llmc-renamed.u16",
       "this file is named like headerless uint16 tokens but starts with a "
       "complete llm.c header (magic 20240520, version 1, 300 tokens, which "
       "matches the file size): it is an llm.c file; name it *.bin"},
      {"megatron-bad-magic.bin",
       "megatron-bad-magic.idx: error: bad Megatron index: expected the magic "
       "'MMIDIDX\\x00\\x00' at byte 0, found bytes 4d 4d 49 44"},
      {"megatron-bad-version.idx",
       "bad Megatron index: version 2 is not supported by this build, which "
       "reads version 1"},
      {"megatron-truncated.bin",
       "bad Megatron index: 7 sequences and 5 document indices need 158 "
       "bytes, the file has 60 (truncated file?)"},
      {"megatron-short-bin",
       "megatron-short-bin.bin: error: the Megatron index " ZEROC_DATA_INPUTS
       "megatron-short-bin.idx and its data file disagree: the index "
       "describes 7 sequences of 120 bytes, the .bin holds 116 bytes"},
      {"megatron-float.bin",
       "bad Megatron index: dtype code 7 (float32) is not an integer token "
       "type"},
      {"megatron-bad-docs.bin",
       "bad Megatron index: the last document index is 5; expected the "
       "sequence count 7"},
      {"megatron-bad-pointer.bin",
       "bad Megatron index: sequence 3 starts at byte 46 of the .bin, "
       "expected 44"},
      {"nanogpt-odd.bin", "301 bytes of headerless uint16 tokens (nanoGPT "
                          ".bin) is not a whole number of 2-byte tokens"},
      {"uint32-named.bin",
       "read as nanoGPT's headerless uint16 tokens, every second token of the "
       "first 200 is 0: the file looks like uint32 tokens; name it *.u32"},
      {"unknown.tok",
       "cannot tell the format of this token file (docs/data-format.md); "
       "tried: ZTOK: no magic 'ZTOK' at byte 0 (found bytes 47 50 54 32); "
       "llm.c: the int32 at byte 0 is not the magic 20240520 or 20240801; "
       "Megatron indexed dataset: no .idx beside it (PREFIX.bin with "
       "PREFIX.idx); headerless tokens: the name does not end in .bin "
       "(nanoGPT, uint16), .u16 or .u32"},
  };
  for (const Case &c : cases) {
    std::string err = openError(input(c.file));
    EXPECT_NE(err.find(c.message), std::string::npos) << c.file << ": " << err;
    EXPECT_NE(err.find(ZEROC_DATA_INPUTS), std::string::npos) << err;
  }
  // A ZTOK file named *.u16: its header would be read as tokens.
  std::string renamed = tempPath("ztok.u16"), ztok = tempPath("ztok.bin");
  ASSERT_FALSE(writeTokenFile(ztok, {1, 2, 3}, 2));
  std::ifstream in(ztok, std::ios::binary);
  writeBytes(renamed, std::string((std::istreambuf_iterator<char>(in)), {}));
  EXPECT_EQ(openError(renamed),
            renamed + ": error: this file is named like headerless uint16 "
                      "tokens but starts with a complete ZTOK header: name it "
                      "*.bin so that its header is read (docs/data-format.md)");
  std::remove(renamed.c_str());
  std::remove(ztok.c_str());
  // A Megatron dataset missing its .bin names it.
  std::string idx = tempPath("lonely.idx");
  writeBytes(idx, "MMIDIDX");
  EXPECT_EQ(openError(idx), tempPath("lonely.bin") +
                                ": error: cannot open token file: No such "
                                "file or directory");
  std::remove(idx.c_str());
}

// A headerless file that starts with llm.c's magic but not a whole header
// reads as tokens (the name decides), and a bad id there gets a hint.
TEST(TokenFormats, HeaderlessFileStartingWithLlmcMagicGetsAHint) {
  std::string path = tempPath("partial.u16");
  std::string bytes("\x88\xd8\x34\x01", 4); // 20240520 as int32.
  for (int i = 0; i < 40; ++i)
    bytes += std::string("\x05\x00", 2);
  writeBytes(path, bytes);
  DataLoader l =
      loaderOrDie(DataLoader::open(path, shape(1, 0, 1, 2, 8), 50257));
  std::vector<int32_t> in(16), tg(16);
  std::optional<Diagnostic> err = l.load(0, 0, in.data(), tg.data());
  ASSERT_TRUE(err);
  EXPECT_EQ(err->str(),
            path + ": error: token id 55432 at position 0 is not below the "
                   "vocabulary size 50257 (the file starts with llm.c's magic "
                   "20240520: is it an llm.c file renamed? Name it *.bin)");
  std::remove(path.c_str());
}

TEST(TokenFormats, MegatronNegativeIdIsReported) {
  // int32 dataset with a -3 token: one document, one sequence of 20.
  std::string prefix = tempPath("neg");
  std::string bin, idx("MMIDIDX\0\0", 9);
  for (int i = 0; i < 20; ++i) {
    int32_t v = i == 4 ? -3 : i;
    bin.append(reinterpret_cast<const char *>(&v), 4);
  }
  auto u64 = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b)
      idx += char(v >> (8 * b));
  };
  u64(1);
  idx += char(4);
  u64(1);
  u64(2);
  idx += std::string("\x14\x00\x00\x00", 4); // Length 20.
  u64(0);                                    // Pointer.
  u64(0);                                    // Document indices 0, 1.
  u64(1);
  writeBytes(prefix + ".bin", bin);
  writeBytes(prefix + ".idx", idx);
  DataLoader l =
      loaderOrDie(DataLoader::open(prefix, shape(1, 0, 1, 1, 8), 50));
  std::vector<int32_t> in(8), tg(8);
  std::optional<Diagnostic> err = l.load(0, 0, in.data(), tg.data());
  ASSERT_TRUE(err);
  EXPECT_EQ(err->str(),
            prefix + ".bin: error: token id -3 at position 4 is negative");
  std::remove((prefix + ".bin").c_str());
  std::remove((prefix + ".idx").c_str());
}

// The index errors make_token_files.py does not write: an index written
// here field by field (uint16 tokens, sequences of `lengths`).
TEST(TokenFormats, MegatronIndexErrors) {
  std::string prefix = tempPath("idx-errors");
  auto write = [&](std::vector<int32_t> lengths, std::vector<int64_t> docs,
                   std::string trailer = "", int64_t binTokens = -1) {
    std::string idx("MMIDIDX\0\0", 9);
    auto u64 = [&](uint64_t v) {
      for (int b = 0; b < 8; ++b)
        idx += char(v >> (8 * b));
    };
    u64(1);
    idx += char(8);
    u64(lengths.size());
    u64(docs.size());
    int64_t total = 0;
    for (int32_t n : lengths)
      for (int b = 0; b < 4; ++b)
        idx += char(uint32_t(n) >> (8 * b));
    for (int32_t n : lengths) {
      u64(uint64_t(total * 2));
      total += std::max(n, 0);
    }
    for (int64_t d : docs)
      u64(uint64_t(d));
    writeBytes(prefix + ".idx", idx + trailer);
    writeBytes(
        prefix + ".bin",
        std::string(size_t(2 * (binTokens < 0 ? total : binTokens)), '\1'));
    Expected<std::unique_ptr<TokenFile>> f = TokenFile::open(prefix);
    return f ? std::string() : f.error().str();
  };
  EXPECT_EQ(write({3, 4}, {0, 2}), ""); // Well formed: it opens.
  EXPECT_NE(write({3, -4}, {0, 2})
                .find("bad Megatron index: sequence 1 has "
                      "length -4"),
            std::string::npos);
  EXPECT_NE(write({3, 4}, {})
                .find("bad Megatron index: no document indices "
                      "(expected at least the leading 0)"),
            std::string::npos);
  EXPECT_NE(write({3, 4}, {1, 2})
                .find("bad Megatron index: document index 0 "
                      "is 1; expected 0"),
            std::string::npos);
  EXPECT_NE(write({3, 4}, {0, 2, 1, 2})
                .find("bad Megatron index: document index 2 is 1; expected "
                      "a sequence index in [2, 2]"),
            std::string::npos);
  // A multimodal index: one mode byte per sequence, only text (0) read.
  EXPECT_EQ(write({3, 4}, {0, 2}, std::string(2, '\0')), "");
  EXPECT_NE(write({3, 4}, {0, 2}, std::string("\0\1", 2))
                .find("bad Megatron index: sequence 1 has mode 1 (a "
                      "multimodal dataset); only text (mode 0) is read"),
            std::string::npos);
  EXPECT_NE(write({3, 4}, {0, 2}, "xyz")
                .find("bad Megatron index: 2 sequences and 2 document indices "
                      "fill 74 bytes, the file has 77"),
            std::string::npos);
  EXPECT_NE(write({3, 4}, {0, 2}, "", 9)
                .find("disagree: the index describes 2 sequences of 14 "
                      "bytes, the .bin holds 18 bytes"),
            std::string::npos);
  std::remove((prefix + ".idx").c_str());
  std::remove((prefix + ".bin").c_str());
}

//===----------------------------------------------------------------------===//
// Several files as one stream
//===----------------------------------------------------------------------===//

TEST(TokenFormats, SeveralFilesAreReadBackToBackInOrder) {
  // Files of 10, 0 and 25 tokens in mixed formats: 1000 + i, 2000 + i, ...
  std::string dir = tempPath("multi-");
  auto tokensOf = [](uint32_t base, int n) {
    std::vector<uint32_t> v;
    for (int i = 0; i < n; ++i)
      v.push_back(base + uint32_t(i));
    return v;
  };
  ASSERT_FALSE(writeTokenFile(dir + "b.u16", tokensOf(2000, 0), 2));
  ASSERT_FALSE(writeTokenFile(dir + "a.bin", tokensOf(1000, 10), 4));
  ASSERT_FALSE(writeTokenFile(dir + "c.u32", tokensOf(3000, 25), 4));
  // A glob takes its matches in byte order: a.bin, b.u16, c.u32; the
  // explicit list keeps the order given.
  for (bool glob : {true, false}) {
    std::vector<std::string> specs =
        glob ? std::vector<std::string>{dir + "*"}
             : std::vector<std::string>{dir + "c.u32", dir + "a.bin"};
    auto s = openTokenFiles(specs);
    ASSERT_TRUE(s) << s.error().str();
    std::vector<int64_t> all = readAll(**s);
    std::vector<int64_t> expected;
    auto add = [&](uint32_t base, int n) {
      for (int i = 0; i < n; ++i)
        expected.push_back(base + i);
    };
    if (glob) {
      add(1000, 10);
      add(3000, 25);
    } else {
      add(3000, 25);
      add(1000, 10);
    }
    EXPECT_EQ(all, expected);
    // A window across the boundary, and where a token lies.
    std::vector<int64_t> w(4);
    (*s)->read(8, 4, w.data());
    EXPECT_EQ(
        w, std::vector<int64_t>(expected.begin() + 8, expected.begin() + 12));
    TokenLocation at = (*s)->locate(glob ? 12 : 27);
    EXPECT_EQ(at.file, glob ? dir + "c.u32" : dir + "a.bin");
    EXPECT_EQ(at.position, 2);
  }
  auto none = openTokenFiles({dir + "*.nothing"});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().str(),
            dir + "*.nothing: error: no file matches this pattern");
  for (const char *f : {"a.bin", "b.u16", "c.u32"})
    std::remove((dir + f).c_str());
}

// A glob matching a Megatron dataset's .bin and .idx reads it once.
TEST(TokenFormats, GlobReadsAMegatronDatasetOnce) {
  auto s = openTokenFiles({input("megatron-uint1*")});
  ASSERT_TRUE(s) << s.error().str();
  EXPECT_EQ((*s)->size(), 60);
  EXPECT_EQ((*s)->name(), input("megatron-uint16.bin"));
}

// A bad id in the second file names that file and its own position.
TEST(DataLoader, BadTokenInASecondFileNamesIt) {
  std::string a = tempPath("first.u16"), b = tempPath("second.u16");
  ASSERT_FALSE(writeTokenFile(a, iota(20), 2));
  std::vector<uint32_t> t(20, 1);
  t[3] = 99;
  ASSERT_FALSE(writeTokenFile(b, t, 2));
  DataLoader l = loaderOrDie(DataLoader::open(std::vector<std::string>{a, b},
                                              shape(1, 0, 1, 1, 30), 50));
  std::vector<int32_t> in(30), tg(30);
  std::optional<Diagnostic> err = l.load(0, 0, in.data(), tg.data());
  ASSERT_TRUE(err);
  EXPECT_EQ(err->str(), b + ": error: token id 99 at position 3 is not below "
                            "the vocabulary size 50");
  std::remove(a.c_str());
  std::remove(b.c_str());
}

//===----------------------------------------------------------------------===//
// Fine-tuning data: the loss mask and document boundaries
//===----------------------------------------------------------------------===//

// FILE.mask holds one byte per token; target token i counts when byte i is
// 1, and is -100 (ignored) otherwise. The count over the global batch is the
// same on every rank and for every split of it.
TEST(LossMask, CompanionFileMasksTargets) {
  const int64_t B = 2, S = 5, G = 8;
  std::string path = tempPath("masked.u16");
  ASSERT_FALSE(writeTokenFile(path, iota(3 * G * S + 1), 2));
  std::string mask;
  for (int64_t i = 0; i < 3 * G * S + 1; ++i)
    mask += char(i % 3 == 0 || i > 60 ? 1 : 0);
  writeBytes(path + ".mask", mask);
  DataOptions masked;
  masked.lossMask = true;
  auto open = [&](int64_t world, int64_t rank, int64_t accum) {
    return loaderOrDie(DataLoader::open(std::vector<std::string>{path},
                                        shape(world, rank, accum, B, S), 1000,
                                        masked));
  };
  for (int64_t step : {0, 1, 2}) {
    // Independently: the targets of sequences k < G of the step.
    int64_t expected = 0;
    for (int64_t k = 0; k < G; ++k)
      for (int64_t j = 0; j < S; ++j)
        expected += mask[size_t((step * G + k) * S + j + 1)];
    for (auto [world, accum] :
         {std::pair<int64_t, int64_t>{1, 4}, {2, 2}, {4, 1}})
      for (int64_t r = 0; r < world; ++r) {
        DataLoader l = open(world, r, accum);
        Expected<int64_t> counted = l.countedTargets(step);
        ASSERT_TRUE(counted);
        EXPECT_EQ(*counted, expected) << world << " ranks, step " << step;
        for (int64_t m = 0; m < accum; ++m) {
          MicroBatch b = load(l, step, m);
          for (int64_t row = 0; row < B; ++row)
            for (int64_t j = 0; j < S; ++j) {
              int64_t token =
                  l.sequenceStart(step, l.shape().sequenceInStep(m, row)) + j +
                  1;
              EXPECT_EQ(b.targets[size_t(row * S + j)],
                        mask[size_t(token)] ? token : -100);
              EXPECT_EQ(b.inputs[size_t(row * S + j)], token - 1);
            }
        }
      }
  }
  // Without --loss-mask the file beside is not read.
  DataLoader plain =
      loaderOrDie(DataLoader::open(path, shape(1, 0, 1, B, S), 1000));
  EXPECT_EQ(*plain.countedTargets(0), B * S);
  std::remove((path + ".mask").c_str());
  std::remove(path.c_str());
}

TEST(LossMask, Errors) {
  std::string path = tempPath("maskerr.u16");
  ASSERT_FALSE(writeTokenFile(path, iota(41), 2));
  DataOptions masked;
  masked.lossMask = true;
  auto openError = [&] {
    auto l = DataLoader::open(std::vector<std::string>{path},
                              shape(1, 0, 1, 2, 5), 1000, masked);
    EXPECT_FALSE(l);
    return l ? std::string() : l.error().str();
  };
  EXPECT_EQ(openError(), path + ".mask: error: cannot open the loss mask of " +
                             path +
                             " (--loss-mask reads FILE.mask or FILE.labels "
                             "beside each token file): No such file or "
                             "directory");
  writeBytes(path + ".mask", std::string(40, '\1'));
  EXPECT_EQ(openError(), path + ".mask: error: the loss mask has 40 bytes; its "
                                "token file has 41 tokens (one byte per "
                                "token)");
  std::string bytes(41, '\1');
  bytes[7] = 2;
  writeBytes(path + ".mask", bytes);
  DataLoader l = loaderOrDie(DataLoader::open(
      std::vector<std::string>{path}, shape(1, 0, 1, 2, 5), 1000, masked));
  std::vector<int32_t> in(10), tg(10);
  std::optional<Diagnostic> err = l.load(0, 0, in.data(), tg.data());
  ASSERT_TRUE(err);
  EXPECT_EQ(err->str(), path + ".mask: error: loss mask byte 7 is 2; expected "
                               "0 (not in the loss) or 1");
  EXPECT_FALSE(l.countedTargets(0));

  // Hugging Face labels beside the mask: ambiguous.
  writeBytes(path + ".labels", std::string(41 * 4, '\0'));
  EXPECT_EQ(openError(), path + ": error: both " + path + ".mask and " + path +
                             ".labels exist: keep the one loss mask "
                             "--loss-mask should read");
  std::remove((path + ".mask").c_str());
  writeBytes(path + ".labels", std::string(40 * 4, '\0'));
  EXPECT_EQ(openError(), path + ".labels: error: the loss mask has 160 bytes; "
                                "its token file has 41 tokens (one int32 label "
                                "per token)");
  std::remove((path + ".labels").c_str());
  std::remove(path.c_str());
}

// FILE.labels: Hugging Face's labels, one int32 per token, -100 (not in the
// loss) or the token itself; the same targets as the equivalent FILE.mask.
TEST(LossMask, HuggingFaceLabelsFile) {
  std::string path = tempPath("labelled.u16");
  ASSERT_FALSE(writeTokenFile(path, iota(41), 2));
  std::string labels, mask;
  for (int32_t i = 0; i < 41; ++i) {
    int32_t label = i % 4 == 1 ? -100 : i;
    labels.append(reinterpret_cast<const char *>(&label), 4);
    mask += char(label != -100);
  }
  DataOptions masked;
  masked.lossMask = true;
  auto targets = [&] {
    DataLoader l = loaderOrDie(DataLoader::open(
        std::vector<std::string>{path}, shape(1, 0, 2, 2, 5), 1000, masked));
    std::vector<int32_t> all;
    for (int64_t m = 0; m < 2; ++m) {
      MicroBatch b = load(l, 0, m);
      all.insert(all.end(), b.targets.begin(), b.targets.end());
    }
    all.push_back(int32_t(*l.countedTargets(0)));
    return all;
  };
  writeBytes(path + ".labels", labels);
  std::vector<int32_t> fromLabels = targets();
  std::remove((path + ".labels").c_str());
  writeBytes(path + ".mask", mask);
  EXPECT_EQ(fromLabels, targets());
  EXPECT_EQ(fromLabels[0], -100); // Token 1: label -100.
  EXPECT_EQ(fromLabels[1], 2);
  EXPECT_EQ(fromLabels.back(), 15); // Targets 1-20, five of them -100.
  std::remove((path + ".mask").c_str());

  // A label that is neither -100 nor its token.
  int32_t wrong = 99;
  std::memcpy(&labels[4 * 6], &wrong, 4);
  writeBytes(path + ".labels", labels);
  DataLoader l = loaderOrDie(DataLoader::open(
      std::vector<std::string>{path}, shape(1, 0, 1, 2, 5), 1000, masked));
  std::vector<int32_t> in(10), tg(10);
  std::optional<Diagnostic> err = l.load(0, 0, in.data(), tg.data());
  ASSERT_TRUE(err);
  EXPECT_EQ(err->str(), path + ".labels: error: label 6 is 99 but token 6 is "
                               "6; a label is its token (in the loss) or -100 "
                               "(not in the loss)");
  std::remove((path + ".labels").c_str());
  std::remove(path.c_str());
}

// --no-cross-doc-loss: a target that starts a document (Megatron's document
// index: tokens 12 and 25; the start of every further file) is ignored.
TEST(LossMask, NoCrossDocumentTargets) {
  std::string second = tempPath("second-doc.u16");
  ASSERT_FALSE(writeTokenFile(second, iota(20), 2));
  DataOptions docs;
  docs.noCrossDocLoss = true;
  // 60 Megatron tokens, then 20: one sequence of 79 tokens + its target.
  DataLoader l = loaderOrDie(DataLoader::open(
      std::vector<std::string>{input("megatron-uint16"), second},
      shape(1, 0, 1, 1, 79), 1000, docs));
  MicroBatch b = load(l, 0, 0);
  std::vector<int64_t> ignored;
  for (int64_t j = 0; j < 79; ++j)
    if (b.targets[size_t(j)] == -100)
      ignored.push_back(j + 1);
  EXPECT_EQ(ignored, (std::vector<int64_t>{12, 25, 60}));
  EXPECT_EQ(*l.countedTargets(0), 79 - 3);
  std::remove(second.c_str());
}

// scripts/sft_to_tokens.py's output for Inputs/data/sft-pairs.jsonl
// (sft_to_tokens_test.py checks it is what the script writes): the answers'
// targets count, the prompts' do not; the Megatron form also knows where
// each example starts.
TEST(LossMask, SftConverterOutputReadsBack) {
  DataOptions masked;
  masked.lossMask = true;
  DataLoader z = loaderOrDie(
      DataLoader::open(std::vector<std::string>{input("sft-ztok.bin")},
                       shape(1, 0, 1, 1, 9), 100, masked));
  MicroBatch a = load(z, 0, 0);
  EXPECT_EQ(a.inputs,
            (std::vector<int32_t>{10, 11, 12, 20, 21, 13, 22, 23, 24}));
  EXPECT_EQ(a.targets,
            (std::vector<int32_t>{-100, -100, 20, 21, -100, 22, 23, 24, 25}));
  DataOptions both = masked;
  both.noCrossDocLoss = true;
  DataLoader m = loaderOrDie(
      DataLoader::open(std::vector<std::string>{input("sft-megatron")},
                       shape(1, 0, 1, 1, 12), 100, both));
  MicroBatch b = load(m, 0, 0);
  EXPECT_EQ(b.targets, (std::vector<int32_t>{-100, -100, 20, 21, 3, -100, 22,
                                             23, 24, 3, -100, 3}));
  EXPECT_EQ(*m.countedTargets(0), 8);
  // Without the boundaries the answer of the last example starts counting
  // at its first token, whose mask byte is 1.
  DataLoader n = loaderOrDie(
      DataLoader::open(std::vector<std::string>{input("sft-megatron")},
                       shape(1, 0, 1, 1, 12), 100, masked));
  EXPECT_EQ(load(n, 0, 0).targets[10], 25);
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
// batch is split. Checked on a file (with an epoch wrap), on the same tokens
// split over three files, and on the synthetic stream.
TEST(DataLoader, OneRankAccumulatingFourEqualsFourRanks) {
  const int64_t B = 2, S = 7, G = 4 * B;
  std::string path = tempPath("identity.u16");
  // 3 whole steps and a tail of 20 tokens that is never read.
  std::vector<uint32_t> all = iota(3 * G * S + 1 + 20);
  ASSERT_FALSE(writeTokenFile(path, all, 2));
  // The same tokens in three files, cut inside sequences: 50, 1 and the rest.
  std::vector<std::string> parts = {tempPath("identity-0.u16"),
                                    tempPath("identity-1.bin"),
                                    tempPath("identity-2.u32")};
  ASSERT_FALSE(writeTokenFile(
      parts[0], std::vector<uint32_t>(all.begin(), all.begin() + 50), 2));
  ASSERT_FALSE(writeTokenFile(
      parts[1], std::vector<uint32_t>(all.begin() + 50, all.begin() + 51), 2));
  ASSERT_FALSE(writeTokenFile(
      parts[2], std::vector<uint32_t>(all.begin() + 51, all.end()), 4));
  DataLoader whole =
      loaderOrDie(DataLoader::open(path, shape(1, 0, 4, B, S), 1 << 16));
  for (const char *source : {"file", "files", "synthetic"}) {
    std::string kind = source;
    auto make = [&](int64_t world, int64_t rank, int64_t accum) {
      BatchShape sh = shape(world, rank, accum, B, S);
      if (kind == "synthetic")
        return loaderOrDie(DataLoader::synthetic(17, sh, 1000));
      if (kind == "files")
        return loaderOrDie(DataLoader::open(parts, sh, 1 << 16));
      return loaderOrDie(DataLoader::open(path, sh, 1 << 16));
    };
    DataLoader one = make(1, 0, 4);
    std::vector<DataLoader> four, two;
    for (int64_t r = 0; r < 4; ++r)
      four.push_back(make(4, r, 1));
    for (int64_t r = 0; r < 2; ++r)
      two.push_back(make(2, r, 2));
    if (kind != "synthetic") {
      EXPECT_EQ(one.stepsPerEpoch(), 3);
    }
    for (int64_t step : {0, 1, 2, 3, 7}) {
      for (int64_t m = 0; m < 4; ++m) {
        MicroBatch a = load(one, step, m);
        EXPECT_EQ(a, load(four[size_t(m)], step, 0)) << "micro-step " << m;
        // Two ranks x 2: micro-step m2 of rank r is sequence block
        // m2 * 2 + r, i.e. micro-step m of the one-rank run.
        EXPECT_EQ(a, load(two[size_t(m % 2)], step, m / 2));
        // Several files: the same batches as the one file they were cut from.
        if (kind == "files") {
          EXPECT_EQ(a, load(whole, step, m)) << kind;
        }
      }
    }
    if (kind != "synthetic") { // Epoch wrap: step 3 is step 0 again.
      EXPECT_EQ(load(one, 3, 1), load(one, 0, 1));
    }
  }
  std::remove(path.c_str());
  for (const std::string &p : parts)
    std::remove(p.c_str());
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
  std::vector<int64_t> t(61 * 200);
  tokens.read(0, int64_t(t.size()), t.data());
  int same = 0, total = 0;
  for (size_t i = 0; i + 61 < t.size(); ++i, ++total)
    same += t[i] == t[i + 61];
  double rate = double(same) / total;
  EXPECT_GT(rate, 0.78);
  EXPECT_LT(rate, 0.84);
}
