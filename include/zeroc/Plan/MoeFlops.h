//===- MoeFlops.h - The mixture of experts' matrix products, counted once -===//
//
// The matrix products of the mixture-of-experts ops as the model dialect
// counts them (MoeRouterOp, MoeExpertsOp and their backwards'
// getForwardFlops, the plans' `flops`), in a header without MLIR so that
// the cost model's model FLOPs (MFU: matrix products, no recomputation)
// count a Mixtral's experts by the same formula.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PLAN_MOEFLOPS_H
#define ZEROC_PLAN_MOEFLOPS_H

#include <cstdint>

namespace zeroc {

/// The router's logits: x [tokens, hidden] times gate^T [hidden, experts].
inline int64_t moeRouterProductFlops(int64_t tokens, int64_t experts,
                                     int64_t hidden) {
  return 2 * tokens * experts * hidden;
}

/// The experts' three products (W1 v, W3 v, W2 of their SwiGLU) over
/// `rows` routed rows (tokens x top_k: the active experts only).
inline int64_t moeExpertProductFlops(int64_t rows, int64_t hidden,
                                     int64_t intermediate) {
  return 6 * rows * hidden * intermediate;
}

} // namespace zeroc

#endif // ZEROC_PLAN_MOEFLOPS_H
