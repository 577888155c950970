//===- Limits.h - Caps on sizes from files and flags, checked arithmetic -*- C++
//-*-===//
//
// Every count and size zeroc and zerorun read from a file or a flag is
// checked against a cap here before it is used, and the element and byte
// counts derived from them are computed with overflow-checked arithmetic
// (checkedMul, checkedAdd, checkedBytes). The caps are far above any
// published model and low enough that what zeroc derives from them (FLOPs,
// bytes, op counts) fits 64 bits and the IR fits in memory; they are
// documented with the formats (docs/model-dialect.md "Limits",
// docs/ds-config.md, docs/plan-format.md, docs/checkpoint-format.md,
// docs/data-format.md). MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_LIMITS_H
#define ZEROC_SUPPORT_LIMITS_H

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroc {
namespace limits {

/// Ranks: MPI numbers ranks with `int` and NCCL takes `int nranks`, so a
/// world of more than 2^31 - 1 ranks cannot be launched.
inline constexpr int64_t kMaxWorldSize = std::numeric_limits<int32_t>::max();

/// Model shape caps for a Hugging Face config (and zeroc gen's flags). The
/// largest published decoders have 126 layers, widths of 53248, 128 heads
/// and vocabularies of 256000.
inline constexpr int64_t kMaxLayers = 10000;
/// hidden_size, intermediate_size, head_dim, and heads x head_dim.
inline constexpr int64_t kMaxWidth = int64_t(1) << 18; // 262144
inline constexpr int64_t kMaxVocab = int64_t(1) << 24; // 16777216
inline constexpr int64_t kMaxHeads = int64_t(1) << 12; // 4096
/// max_position_embeddings, n_positions, sliding_window, --seq-len.
inline constexpr int64_t kMaxPositions = int64_t(1) << 24; // 16777216
/// Tokens in one micro-batch (micro_batch x seq_len).
inline constexpr int64_t kMaxMicroBatchTokens = int64_t(1) << 24;
/// What zeroc's FLOP and byte counts may reach: 2^62, so that sums of a few
/// of them still fit a signed 64-bit integer.
inline constexpr int64_t kMaxCount = int64_t(1) << 62;
/// Brackets ( [ { < open at once in a model file. MLIR's parser recurses
/// once per level (a function type in a function type...) and overflows
/// the stack a few thousand deep; zeroc's models nest a handful.
inline constexpr int kMaxModelNesting = 256;

} // namespace limits

/// a * b, or nullopt when it overflows int64 or either is negative.
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// a + b, or nullopt when it overflows int64 or either is negative.
inline std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// offset + size <= limit, for a region read from a file: false when any is
/// negative or the sum overflows.
inline bool regionFits(int64_t offset, int64_t size, int64_t limit) {
  std::optional<int64_t> end = checkedAdd(offset, size);
  return end && *end <= limit;
}

/// The sum of non-negative counts, or nullopt on overflow or a negative one.
inline std::optional<int64_t> checkedSum(const std::vector<int64_t> &counts) {
  int64_t total = 0;
  for (int64_t n : counts) {
    std::optional<int64_t> t = checkedAdd(total, n);
    if (!t)
      return std::nullopt;
    total = *t;
  }
  return total;
}

/// `elements` x `elementBytes`, or nullopt on overflow.
inline std::optional<int64_t> checkedBytes(int64_t elements,
                                           int64_t elementBytes) {
  return checkedMul(elements, elementBytes);
}

/// This machine's physical memory in bytes (0 when unknown).
uint64_t physicalMemoryBytes();

/// The line, column and message of the first bracket of a model file's
/// `text` that opens more than limits::kMaxModelNesting at once (string
/// literals and `//` comments skipped), if one does: checked before MLIR's
/// parser, which would overflow the stack. Linear, no recursion.
struct NestingError {
  unsigned line = 0, column = 0;
  std::string message;
};
std::optional<NestingError> checkModelNesting(std::string_view text);

} // namespace zeroc

#endif // ZEROC_SUPPORT_LIMITS_H
