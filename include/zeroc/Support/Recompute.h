//===- Recompute.h - Which activations a step recomputes --------*- C++ -*-===//
//
// The activation-recomputation policy of a training step, as the config
// reader, the training-step expansion, the plan, `inspect` and `advise`
// name it (docs/model-dialect.md, "Recomputation"):
//
// - none: every activation a backward op reads is kept from forward.
// - full: a checkpointed transformer layer keeps only its inputs and
//   recomputes all its forward ops before its backward (DeepSpeed's
//   `activation_checkpointing`, the Hugging Face Trainer's
//   `gradient_checkpointing`, Megatron's `--recompute-granularity full`).
// - selective: a checkpointed layer keeps its inputs and the outputs of its
//   matrix products (linear projections, flash attention) and recomputes
//   the rest, the element-wise ops, norms and a materialised attention core
//   (Megatron's `--recompute-granularity selective`, Korthikanti et al.
//   2022).
//
// `every` = k checkpoints the numbered layers whose index is a multiple of k
// (layers 0, k, 2k, ...); the others keep everything. k = 1 is every layer.
// MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_RECOMPUTE_H
#define ZEROC_SUPPORT_RECOMPUTE_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zeroc {

enum class RecomputeMode : uint8_t { None, Full, Selective };
inline constexpr RecomputeMode kAllRecomputeModes[] = {
    RecomputeMode::None, RecomputeMode::Full, RecomputeMode::Selective};

/// "none", "full", "selective".
inline const char *recomputeModeName(RecomputeMode mode) {
  switch (mode) {
  case RecomputeMode::None:
    return "none";
  case RecomputeMode::Full:
    return "full";
  case RecomputeMode::Selective:
    return "selective";
  }
  return "none";
}

inline std::optional<RecomputeMode> parseRecomputeMode(std::string_view name) {
  for (RecomputeMode m : kAllRecomputeModes)
    if (name == recomputeModeName(m))
      return m;
  return std::nullopt;
}

struct RecomputePolicy {
  RecomputeMode mode = RecomputeMode::None;
  /// Checkpoint numbered layers whose index is a multiple of this; >= 1.
  int64_t every = 1;

  bool operator==(const RecomputePolicy &o) const {
    return mode == o.mode && (mode == RecomputeMode::None || every == o.every);
  }
  bool operator!=(const RecomputePolicy &o) const { return !(*this == o); }

  /// Whether the numbered layer `index` is checkpointed.
  bool checkpoints(int64_t index) const {
    return mode != RecomputeMode::None && index % every == 0;
  }

  /// "none", "full", "selective", "full every 2nd layer".
  std::string describe() const {
    std::string s = recomputeModeName(mode);
    if (mode == RecomputeMode::None || every == 1)
      return s;
    int64_t tens = every % 100;
    const char *suffix = "th";
    if (tens < 11 || tens > 13)
      suffix = every % 10 == 1   ? "st"
               : every % 10 == 2 ? "nd"
               : every % 10 == 3 ? "rd"
                                 : "th";
    return s + " every " + std::to_string(every) + suffix + " layer";
  }
};

} // namespace zeroc

#endif // ZEROC_SUPPORT_RECOMPUTE_H
