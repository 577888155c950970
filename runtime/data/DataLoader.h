//===- DataLoader.h - Token files and which rank reads what -----*- C++ -*-===//
//
// The training data of zerorun: a stream of token ids from token files
// (TokenFile.h) or a deterministic synthetic stream, cut into sequences of
// seq_len + 1 tokens (inputs and next-token targets) in an order that
// depends only on the global batch, so that one rank with accumulation 4
// sees exactly the sequences that four ranks with accumulation 1 see; with
// the targets a loss mask or document boundaries leave out of the loss, and
// where each packed document starts. docs/data-format.md is the reference
// for the formats, the order and the loss.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_DATA_DATALOADER_H
#define ZEROC_RUNTIME_DATA_DATALOADER_H

#include "data/TokenFile.h"
#include "zeroc/Support/Diagnostic.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zeroc::runtime {

/// Endless pseudo-random tokens uniform in [0, vocabSize): token i is a pure
/// function of (seed, i), from the Philox generator of init/Random.h.
class SyntheticTokens final : public TokenSource {
public:
  SyntheticTokens(uint64_t seed, int64_t vocabSize);
  const std::string &name() const override { return label; }
  int64_t size() const override { return -1; }
  void read(int64_t begin, int64_t count, int64_t *out) const override;

private:
  std::string label = "synthetic";
  uint64_t seed;
  int64_t vocabSize;
};

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

/// What counts in the loss, and what attention sees (docs/data-format.md,
/// "Fine-tuning data").
struct DataOptions {
  /// Read FILE.mask beside every token file (--loss-mask).
  bool lossMask = false;
  /// A target that starts a document is not predicted from the document
  /// before it (--no-cross-doc-loss).
  bool noCrossDocLoss = false;
  /// No token attends to a token of another document (load's
  /// `documentStarts`; --no-cross-doc-attention).
  bool noCrossDocAttention = false;
  /// Each document's positions count from 0 (load's `documentStarts`;
  /// --reset-position-ids, Megatron's reset_position_ids).
  bool resetPositionIds = false;
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
  /// Token files read as one stream, in order (openTokenFiles, then create).
  static Expected<DataLoader> open(const std::vector<std::string> &specs,
                                   const BatchShape &shape, int64_t vocabSize,
                                   DataOptions options = {});
  /// The synthetic stream (--synthetic).
  static Expected<DataLoader> synthetic(uint64_t seed, const BatchShape &shape,
                                        int64_t vocabSize);

  /// Fills `inputs` and `targets`, each [micro_batch, seq_len] int32, for
  /// micro-step `micro` of optimizer step `step` on this rank. Errors: a
  /// token id outside [0, vocabulary size) (naming the file and position),
  /// a loss-mask byte other than 0 or 1. A target not counted in the loss
  /// is kIgnoredTarget (-100, Hugging Face's label convention).
  /// With `documentStarts` ([micro_batch, seq] int32), also where each
  /// token's document starts in its sequence (0 for the tokens before the
  /// sequence's first boundary).
  [[nodiscard]] std::optional<Diagnostic>
  load(int64_t step, int64_t micro, int32_t *inputs, int32_t *targets,
       int32_t *documentStarts = nullptr) const;
  /// Whether attention is limited to each token's document
  /// (DataOptions::noCrossDocAttention).
  bool masksCrossDocumentAttention() const { return noCrossDocAttention; }
  /// Whether positions restart at each document (resetPositionIds).
  bool resetsPositionIds() const { return resetPositionIds; }

  /// The targets of step `step`'s whole global batch (every rank and
  /// micro-step) that count in the loss: G x seq_len without a mask. Every
  /// rank computes the same number from the data alone. Errors: as load().
  Expected<int64_t> countedTargets(int64_t step) const;

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
  bool noCrossDocLoss = false, noCrossDocAttention = false,
       resetPositionIds = false;
  /// Which of the seq_len targets of the sequence starting at `start`
  /// count (1) or not (0).
  std::optional<Diagnostic> countedRow(int64_t start, uint8_t *counted) const;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_DATA_DATALOADER_H
