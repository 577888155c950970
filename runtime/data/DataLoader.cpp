//===- DataLoader.cpp - Token files and which rank reads what -------------===//

#include "data/DataLoader.h"

#include "init/Random.h"
#include "zeroc/Support/Limits.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zeroc::runtime {

static Diagnostic fileError(const std::string &path, const std::string &msg) {
  return Diagnostic{path, 0, 0, msg};
}

static bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/// 2 or 4 for a headerless *.u16 / *.u32 path, 0 otherwise.
static int rawWidth(const std::string &path) {
  if (endsWith(path, ".u16"))
    return 2;
  if (endsWith(path, ".u32"))
    return 4;
  return 0;
}

//===----------------------------------------------------------------------===//
// TokenFile
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<TokenFile>> TokenFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fileError(path, std::string("cannot open token file: ") +
                               std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fileError(path, "cannot open token file: not a regular file");
  }
  std::unique_ptr<TokenFile> file(new TokenFile());
  file->path = path;
  file->mapBytes = size_t(st.st_size);
  if (file->mapBytes > 0) {
    void *map = ::mmap(nullptr, file->mapBytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return fileError(path, std::string("cannot map token file: ") +
                                 std::strerror(err));
    }
    file->map = map;
    ::madvise(map, file->mapBytes, MADV_RANDOM);
  }
  ::close(fd); // The mapping keeps the file.

  const auto *bytes = static_cast<const unsigned char *>(file->map);
  int64_t payload = int64_t(file->mapBytes);
  if (int raw = rawWidth(path)) {
    file->tokenWidth = raw;
    file->tokens = bytes;
  } else {
    if (payload < kTokenFileHeaderBytes ||
        std::memcmp(bytes, kTokenFileMagic, 4) != 0)
      return fileError(path, "bad token file header: expected the magic "
                             "'ZTOK' (a headerless file must be named *.u16 "
                             "or *.u32); see docs/data-format.md");
    int version = bytes[4] | bytes[5] << 8;
    int width = bytes[6] | bytes[7] << 8;
    if (version != kTokenFileVersion)
      return fileError(path, "bad token file header: version " +
                                 std::to_string(version) +
                                 " is not supported by this build, which "
                                 "reads version " +
                                 std::to_string(kTokenFileVersion));
    if (width != 2 && width != 4)
      return fileError(path, "bad token file header: token width " +
                                 std::to_string(width) +
                                 " bytes; expected 2 (uint16) or 4 (uint32)");
    file->tokenWidth = width;
    file->tokens = bytes + kTokenFileHeaderBytes;
    payload -= kTokenFileHeaderBytes;
  }
  if (payload % file->tokenWidth != 0)
    return fileError(path, std::to_string(payload) +
                               " bytes of tokens is not a whole number of " +
                               std::to_string(file->tokenWidth) +
                               "-byte tokens (truncated file?)");
  file->count = payload / file->tokenWidth;
  return std::move(file);
}

TokenFile::~TokenFile() {
  if (map)
    ::munmap(map, mapBytes);
}

// Little-endian by definition, decoded byte by byte so big-endian hosts
// read the same ids.
void TokenFile::read(int64_t begin, int64_t n, uint32_t *out) const {
  const unsigned char *p = tokens + size_t(begin) * size_t(tokenWidth);
  if (tokenWidth == 2) {
    for (int64_t i = 0; i < n; ++i, p += 2)
      out[i] = uint32_t(p[0]) | uint32_t(p[1]) << 8;
    return;
  }
  for (int64_t i = 0; i < n; ++i, p += 4)
    out[i] = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
             uint32_t(p[3]) << 24;
}

std::optional<Diagnostic> writeTokenFile(const std::string &path,
                                         const std::vector<uint32_t> &tokens,
                                         int width) {
  if (width != 2 && width != 4)
    return fileError(path, "token width " + std::to_string(width) +
                               " bytes; expected 2 or 4");
  int raw = rawWidth(path);
  if (raw && raw != width)
    return fileError(path, "a " + std::to_string(raw) +
                               "-byte token file name for " +
                               std::to_string(width) + "-byte tokens");
  std::vector<unsigned char> bytes;
  bytes.reserve(size_t(kTokenFileHeaderBytes) + tokens.size() * size_t(width));
  if (!raw) {
    bytes.insert(bytes.end(), kTokenFileMagic, kTokenFileMagic + 4);
    bytes.insert(bytes.end(),
                 {uint8_t(kTokenFileVersion), 0, uint8_t(width), 0});
  }
  for (uint32_t t : tokens) {
    if (width == 2 && t > 0xffffu)
      return fileError(path, "token id " + std::to_string(t) +
                                 " does not fit in 2 bytes");
    for (int b = 0; b < width; ++b)
      bytes.push_back(uint8_t(t >> (8 * b)));
  }
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return fileError(path, std::string("cannot create token file: ") +
                               std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    return fileError(path, "cannot write token file");
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// SyntheticTokens
//===----------------------------------------------------------------------===//

SyntheticTokens::SyntheticTokens(uint64_t seed, int64_t vocabSize)
    : seed(seed), vocabSize(vocabSize) {}

// A stream a model can learn, so that `--synthetic` shows a falling loss:
// a fixed random sequence of kSyntheticPeriod tokens repeated, with one token
// in kSyntheticNoise replaced by a uniform draw. Both are functions of the
// position alone (counter-based), so any window can be read directly.
constexpr uint64_t kSyntheticPeriod = 61;
constexpr uint32_t kSyntheticNoise = 10;

void SyntheticTokens::read(int64_t begin, int64_t n, uint32_t *out) const {
  CounterRng pattern(seed, std::string_view("zeroc.synthetic-pattern"));
  CounterRng noise(seed, std::string_view("zeroc.synthetic-tokens"));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t position = uint64_t(begin + i);
    bool replaced = noise.below(2 * position + 1, kSyntheticNoise) == 0;
    out[i] = replaced ? noise.below(2 * position, uint32_t(vocabSize))
                      : pattern.below(position % kSyntheticPeriod,
                                      uint32_t(vocabSize));
  }
}

//===----------------------------------------------------------------------===//
// DataLoader
//===----------------------------------------------------------------------===//

Expected<DataLoader>
DataLoader::create(std::shared_ptr<const TokenSource> source,
                   const BatchShape &shape, int64_t vocabSize) {
  const std::string &name = source->name();
  auto positive = [](int64_t v) { return v >= 1; };
  if (!positive(shape.worldSize) || !positive(shape.gradientAccumulation) ||
      !positive(shape.microBatch) || !positive(shape.seqLen))
    return fileError(name, "data loader: world size, gradient accumulation, "
                           "micro batch and sequence length must be >= 1");
  if (shape.rank < 0 || shape.rank >= shape.worldSize)
    return fileError(name, "data loader: rank " + std::to_string(shape.rank) +
                               " is not in a world of " +
                               std::to_string(shape.worldSize));
  if (vocabSize < 1 || vocabSize > (int64_t(1) << 31))
    return fileError(name, "data loader: vocabulary size " +
                               std::to_string(vocabSize) +
                               " is not in [1, 2^31]");
  // Every position the loader computes is below one step's tokens x steps;
  // a step that does not fit 64 bits is refused (docs/data-format.md).
  std::optional<int64_t> stepTokens =
      checkedMul(shape.worldSize, shape.gradientAccumulation);
  for (int64_t factor : {shape.microBatch, shape.seqLen})
    stepTokens = stepTokens ? checkedMul(*stepTokens, factor) : std::nullopt;
  if (!stepTokens || *stepTokens > limits::kMaxCount)
    return fileError(
        name, "data loader: a step of " + std::to_string(shape.worldSize) +
                  " ranks x " + std::to_string(shape.gradientAccumulation) +
                  " micro-steps x " + std::to_string(shape.microBatch) +
                  " sequences x " + std::to_string(shape.seqLen) +
                  " tokens is more than 2^62 tokens");
  DataLoader loader;
  loader.batch = shape;
  loader.vocabSize = vocabSize;
  int64_t size = source->size();
  if (size >= 0) {
    int64_t need = shape.tokensPerStep();
    if (size < need)
      return fileError(
          name, std::to_string(size) +
                    " tokens are too few for one step, which "
                    "needs " +
                    std::to_string(need) + " (" +
                    std::to_string(shape.worldSize) + " ranks x " +
                    std::to_string(shape.gradientAccumulation) +
                    " micro-steps x " + std::to_string(shape.microBatch) +
                    " sequences x " + std::to_string(shape.seqLen) +
                    " tokens, + 1 for the last target)");
    loader.epochSteps = (size - 1) / (shape.globalBatch() * shape.seqLen);
  }
  loader.tokens = std::move(source);
  return loader;
}

Expected<DataLoader> DataLoader::open(const std::string &path,
                                      const BatchShape &shape,
                                      int64_t vocabSize) {
  Expected<std::unique_ptr<TokenFile>> file = TokenFile::open(path);
  if (!file)
    return file.error();
  return create(std::shared_ptr<const TokenSource>(std::move(*file)), shape,
                vocabSize);
}

Expected<DataLoader> DataLoader::synthetic(uint64_t seed,
                                           const BatchShape &shape,
                                           int64_t vocabSize) {
  // create() checks the vocabulary size before anything is read.
  return create(std::make_shared<SyntheticTokens>(seed, vocabSize), shape,
                vocabSize);
}

int64_t DataLoader::sequenceStart(int64_t step, int64_t k) const {
  int64_t s = epochSteps > 0 ? step % epochSteps : step;
  return (s * batch.globalBatch() + k) * batch.seqLen;
}

std::optional<Diagnostic> DataLoader::load(int64_t step, int64_t micro,
                                           int32_t *inputs,
                                           int32_t *targets) const {
  int64_t seq = batch.seqLen;
  std::vector<uint32_t> window(size_t(seq + 1));
  for (int64_t row = 0; row < batch.microBatch; ++row) {
    int64_t start = sequenceStart(step, batch.sequenceInStep(micro, row));
    tokens->read(start, seq + 1, window.data());
    for (int64_t i = 0; i <= seq; ++i)
      if (window[size_t(i)] >= uint64_t(vocabSize))
        return fileError(tokens->name(),
                         "token id " + std::to_string(window[size_t(i)]) +
                             " at position " + std::to_string(start + i) +
                             " is not below the vocabulary size " +
                             std::to_string(vocabSize));
    for (int64_t i = 0; i < seq; ++i) {
      inputs[row * seq + i] = int32_t(window[size_t(i)]);
      targets[row * seq + i] = int32_t(window[size_t(i + 1)]);
    }
  }
  return std::nullopt;
}

} // namespace zeroc::runtime
