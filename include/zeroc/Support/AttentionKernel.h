//===- AttentionKernel.h - Which kernel family an attention uses -*- C++
//-*-===//
//
// The kernel family of `model.causal_attention` and its backward, as the
// generators, the plan and the runtime name it. It decides what the forward
// keeps for the backward: the row log-sum-exp (flash) or the softmax
// probabilities (materialized). MLIR-free; the model dialect's
// `AttentionKernel` enum has the same cases and spellings.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_ATTENTIONKERNEL_H
#define ZEROC_SUPPORT_ATTENTIONKERNEL_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace zeroc {

enum class AttentionKernel : uint8_t { Flash, Materialized };
inline constexpr AttentionKernel kAllAttentionKernels[] = {
    AttentionKernel::Flash, AttentionKernel::Materialized};

/// "flash", "materialized".
inline const char *attentionKernelName(AttentionKernel kernel) {
  return kernel == AttentionKernel::Flash ? "flash" : "materialized";
}

inline std::optional<AttentionKernel>
parseAttentionKernel(std::string_view name) {
  for (AttentionKernel k : kAllAttentionKernels)
    if (name == attentionKernelName(k))
      return k;
  return std::nullopt;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_ATTENTIONKERNEL_H
