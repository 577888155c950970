//===- DataLoader.cpp - Token files and which rank reads what -------------===//

#include "data/DataLoader.h"

#include "init/Random.h"
#include "kernels/KernelTypes.h"
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

void SyntheticTokens::read(int64_t begin, int64_t n, int64_t *out) const {
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

Expected<DataLoader> DataLoader::open(const std::vector<std::string> &specs,
                                      const BatchShape &shape,
                                      int64_t vocabSize, DataOptions options) {
  auto source = openTokenFiles(specs, options.lossMask);
  if (!source)
    return source.error();
  Expected<DataLoader> l = create(std::move(*source), shape, vocabSize);
  if (l) {
    l->noCrossDocLoss = options.noCrossDocLoss;
    l->noCrossDocAttention = options.noCrossDocAttention;
    l->resetPositionIds = options.resetPositionIds;
  }
  return l;
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
                                           int32_t *inputs, int32_t *targets,
                                           int32_t *documentStarts) const {
  int64_t seq = batch.seqLen;
  std::vector<int64_t> window(size_t(seq + 1));
  std::vector<uint8_t> counted(static_cast<size_t>(seq));
  for (int64_t row = 0; row < batch.microBatch; ++row) {
    int64_t start = sequenceStart(step, batch.sequenceInStep(micro, row));
    tokens->read(start, seq + 1, window.data());
    for (int64_t i = 0; i <= seq; ++i) {
      int64_t id = window[size_t(i)];
      if (id >= 0 && id < vocabSize)
        continue;
      TokenLocation at = tokens->locate(start + i);
      std::string hint = tokens->badTokenHint(start + i);
      return fileError(at.file, "token id " + std::to_string(id) +
                                    " at position " +
                                    std::to_string(at.position) +
                                    (id < 0 ? " is negative"
                                            : " is not below the vocabulary "
                                              "size " +
                                                  std::to_string(vocabSize)) +
                                    (hint.empty() ? "" : " (" + hint + ")"));
    }
    if (auto err = countedRow(start, counted.data()))
      return err;
    if (documentStarts) {
      int32_t *starts = documentStarts + row * seq;
      starts[0] = 0;
      for (int64_t i = 1; i < seq; ++i)
        starts[i] =
            tokens->startsDocument(start + i) ? int32_t(i) : starts[i - 1];
    }
    for (int64_t i = 0; i < seq; ++i) {
      inputs[row * seq + i] = int32_t(window[size_t(i)]);
      targets[row * seq + i] =
          counted[size_t(i)] ? int32_t(window[size_t(i + 1)]) : kIgnoredTarget;
    }
  }
  return std::nullopt;
}

std::optional<Diagnostic> DataLoader::countedRow(int64_t start,
                                                 uint8_t *counted) const {
  int64_t seq = batch.seqLen;
  // Target i is token start + i + 1.
  if (tokens->hasLossMask()) {
    if (auto err = tokens->readLossMask(start + 1, seq, counted))
      return err;
  } else {
    std::fill(counted, counted + seq, uint8_t(1));
  }
  if (noCrossDocLoss)
    for (int64_t i = 0; i < seq; ++i)
      if (tokens->startsDocument(start + 1 + i))
        counted[i] = 0;
  return std::nullopt;
}

Expected<int64_t> DataLoader::countedTargets(int64_t step) const {
  int64_t G = batch.globalBatch(), seq = batch.seqLen;
  if (!tokens->hasLossMask() && !noCrossDocLoss)
    return G * seq;
  std::vector<uint8_t> counted(static_cast<size_t>(seq));
  int64_t total = 0;
  for (int64_t k = 0; k < G; ++k) {
    if (auto err = countedRow(sequenceStart(step, k), counted.data()))
      return *err;
    for (uint8_t c : counted)
      total += c;
  }
  return total;
}

} // namespace zeroc::runtime
