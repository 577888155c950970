//===- DataLoader.h - Token files and which rank reads what -----*- C++ -*-===//
//
// The training data of zerorun: a flat file of little-endian token ids (or a
// deterministic synthetic stream), cut into sequences of seq_len + 1 tokens
// (inputs and next-token targets) in an order that depends only on the
// global batch, so that one rank with accumulation 4 sees exactly the
// sequences that four ranks with accumulation 1 see. docs/data-format.md
// is the reference for the file format and the order.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_DATA_DATALOADER_H
#define ZEROC_RUNTIME_DATA_DATALOADER_H

#include "zeroc/Support/Diagnostic.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zeroc::runtime {

/// "ZTOK": the magic of a token file with a header.
inline constexpr char kTokenFileMagic[4] = {'Z', 'T', 'O', 'K'};
inline constexpr int kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 8;

/// Token ids, by position.
class TokenSource {
public:
  virtual ~TokenSource() = default;
  /// The file's path, or "synthetic": for messages.
  virtual const std::string &name() const = 0;
  /// Number of tokens, or -1 for an endless source.
  virtual int64_t size() const = 0;
  /// Tokens [begin, begin + count), inside the source.
  virtual void read(int64_t begin, int64_t count, uint32_t *out) const = 0;
};

/// A token file, memory-mapped read-only. Either `ZTOK` + version + width
/// header then tokens, or headerless tokens in a file named *.u16 / *.u32.
class TokenFile final : public TokenSource {
public:
  /// Errors: a missing or unreadable file, a bad header (magic, version,
  /// width), a size that is not a whole number of tokens.
  static Expected<std::unique_ptr<TokenFile>> open(const std::string &path);
  ~TokenFile() override;

  const std::string &name() const override { return path; }
  int64_t size() const override { return count; }
  void read(int64_t begin, int64_t count, uint32_t *out) const override;
  /// Bytes per token: 2 or 4.
  int width() const { return tokenWidth; }

private:
  TokenFile() = default;
  std::string path;
  void *map = nullptr;
  size_t mapBytes = 0;
  const unsigned char *tokens = nullptr;
  int64_t count = 0;
  int tokenWidth = 2;
};

/// Endless pseudo-random tokens uniform in [0, vocabSize): token i is a pure
/// function of (seed, i), from the Philox generator of init/Random.h.
class SyntheticTokens final : public TokenSource {
public:
  SyntheticTokens(uint64_t seed, int64_t vocabSize);
  const std::string &name() const override { return label; }
  int64_t size() const override { return -1; }
  void read(int64_t begin, int64_t count, uint32_t *out) const override;

private:
  std::string label = "synthetic";
  uint64_t seed;
  int64_t vocabSize;
};

/// Writes a token file: with the ZTOK header, or headerless when `path` ends
/// in .u16 or .u32 (whose width must then match `width`). `width` is 2 or 4.
std::optional<Diagnostic> writeTokenFile(const std::string &path,
                                         const std::vector<uint32_t> &tokens,
                                         int width);

/// The batch geometry of a run.
struct BatchShape {
  int64_t worldSize = 1;
  int64_t rank = 0;
  int64_t gradientAccumulation = 1;
  int64_t microBatch = 1;
  int64_t seqLen = 1;

  /// G: sequences per optimizer step over all ranks and micro-steps.
  int64_t globalBatch() const {
    return worldSize * gradientAccumulation * microBatch;
  }
  /// Which of the step's G sequences row `row` of micro-step `micro` of this
  /// rank is: (micro * world_size + rank) * micro_batch + row.
  int64_t sequenceInStep(int64_t micro, int64_t row) const {
    return (micro * worldSize + rank) * microBatch + row;
  }
  /// Tokens one step reads: G * seq_len, plus the last sequence's target.
  int64_t tokensPerStep() const { return globalBatch() * seqLen + 1; }
};

/// Serves each micro-step its [micro_batch, seq_len] inputs and targets.
class DataLoader {
public:
  /// Checks the shape and that the source holds at least one step.
  static Expected<DataLoader> create(std::shared_ptr<const TokenSource> source,
                                     const BatchShape &shape,
                                     int64_t vocabSize);
  /// A token file (TokenFile::open, then create).
  static Expected<DataLoader> open(const std::string &path,
                                   const BatchShape &shape, int64_t vocabSize);
  /// The synthetic stream (--synthetic).
  static Expected<DataLoader> synthetic(uint64_t seed, const BatchShape &shape,
                                        int64_t vocabSize);

  /// Fills `inputs` and `targets`, each [micro_batch, seq_len] int32, for
  /// micro-step `micro` of optimizer step `step` on this rank. Errors: a
  /// token id >= the vocabulary size (naming the file and position).
  [[nodiscard]] std::optional<Diagnostic>
  load(int64_t step, int64_t micro, int32_t *inputs, int32_t *targets) const;

  /// Where sequence k (0 <= k < G) of step `step` starts in the source:
  /// (s * G + k) * seq_len, with s = step modulo stepsPerEpoch().
  int64_t sequenceStart(int64_t step, int64_t k) const;
  /// Whole steps in the source (its tail is skipped); -1 when endless.
  int64_t stepsPerEpoch() const { return epochSteps; }
  const BatchShape &shape() const { return batch; }
  const TokenSource &source() const { return *tokens; }

private:
  std::shared_ptr<const TokenSource> tokens;
  BatchShape batch;
  int64_t vocabSize = 0;
  int64_t epochSteps = -1;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_DATA_DATALOADER_H
