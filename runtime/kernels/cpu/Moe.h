//===- Moe.h - Mixture-of-experts: router, dispatch, experts ----*- C++ -*-===//
//
// Hugging Face's MixtralSparseMoeBlock, dropless, with token-sorted dispatch:
//   logits[t, e] = sum_i x[t, i] gate[e, i]                gate [E, h]
//   p[t, :]      = softmax(logits[t, :])                   (f32)
//   w[t, j], idx[t, j] = top-k of p[t, :], by decreasing p, ties to the lower
//                  expert index (torch.topk on CPU); if normalize:
//                  w[t, j] /= sum_j w[t, j]                (Mixtral)
//   expert_e(v)  = W2_e (silu(W1_e v) * (W3_e v))          w1, w3 [E, I, h],
//                                                          w2 [E, h, I]
//   y[t, :]      = sum_j w[t, j] expert_{idx[t, j]}(x[t, :])
//
// The T * k (token, slot) pairs are ordered by expert, and within an expert by
// token then slot (a stable counting sort, moeDispatchPlan): row r of the
// sorted layout is pair (rowToken[r], rowSlot[r]), and expert e owns rows
// [offsets[e], offsets[e + 1]). h1 = x W1^T, h3 = x W3^T [N, I] and ysorted
// [N, h] are kept in that order (N = T * k), so each expert's rows are one
// block and its products are plain GEMMs on it.
//
// Numerics: f32 compute whatever the storage dtype, one rounding per stored
// result. The experts' GEMMs and the SwiGLU between them are the dense
// kernels (linear, silu, mul, add of Linear.h and Activations.h) applied to
// each expert's block of rows, so silu(h1), the product and their gradients
// are rounded to h1's dtype as the dense chain stores them, and one expert
// with top-1 is the dense MLP bit for bit. Sums over a token's k slots (y,
// dx) are f32, taken in sorted-row order (expert ascending: the order of
// Hugging Face's index_add_), and rounded once. Every kernel is serial but
// for OpenBLAS inside the GEMMs: results are bit-identical run to run.
//
// Tokens may have any leading dimensions: x, y, dx [..., h], logits,
// dlogits [..., E], weights, dweights, indices [..., k] with x's (or the
// weights') leading dimensions, T their product; the dispatched tensors are
// flat. logits, weights, dlogits and dweights may be of any float dtype (f32
// in the planned case; the model dtype rounds them as Hugging Face's bf16
// gate does); indices, offsets, rowToken and rowSlot are i32. Every output
// is overwritten (accumulation is the caller's accumulate op, as for
// linear); outputs must not alias inputs. The shape checks are public
// (check...), shared with the CUDA backend; the checks that read indices
// and row maps are the CPU kernels' alone (the CUDA kernels check only the
// offsets, which they copy to the host).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_MOE_H
#define ZEROC_RUNTIME_KERNELS_CPU_MOE_H

#include "cpu/Tensor.h"

#include <vector>

namespace zeroc::cpu {

/// x [..., h], gate [E, h], 1 <= k <= E -> logits [..., E], weights
/// [..., k], indices [..., k] i32 (slot j holds the j-th largest
/// probability).
Status moeRouterForward(const Tensor &x, const Tensor &gate, int64_t k,
                        bool normalize, const Tensor &logits,
                        const Tensor &weights, const Tensor &indices);

/// dweights [T, k], logits [T, E] and indices [T, k] of the forward ->
/// dlogits [T, E]. The selection is constant; the gradient flows through the
/// renormalisation and the softmax. The logits' own backward (dx += dlogits
/// gate, dgate = dlogits^T x) is linearGradInput / linearGradWeight.
Status moeRouterBackward(const Tensor &dweights, const Tensor &logits,
                         const Tensor &indices, bool normalize,
                         const Tensor &dlogits);

/// indices [T, k] in [0, numExperts) -> offsets [E + 1], rowToken [T * k],
/// rowSlot [T * k] (all i32): the stable counting sort described above.
Status moeDispatchPlan(const Tensor &indices, int64_t numExperts,
                       const Tensor &offsets, const Tensor &rowToken,
                       const Tensor &rowSlot);

/// x [T, h], w1, w3 [E, I, h], w2 [E, h, I], offsets [E + 1], rowToken [N]
/// -> h1, h3 [N, I] (kept for the backward) and ysorted [N, h]: row r is
/// expert e's output for x[rowToken[r]], offsets[e] <= r < offsets[e + 1].
Status moeExpertsForward(const Tensor &x, const Tensor &w1, const Tensor &w3,
                         const Tensor &w2, const Tensor &offsets,
                         const Tensor &rowToken, const Tensor &h1,
                         const Tensor &h3, const Tensor &ysorted);

/// ysorted [T * k, h], weights [T, k], rowToken, rowSlot [T * k] -> y [T, h],
/// y[t] = sum over t's rows r (ascending) of weights[t, rowSlot[r]]
/// ysorted[r].
Status moeCombineForward(const Tensor &ysorted, const Tensor &weights,
                         const Tensor &rowToken, const Tensor &rowSlot,
                         const Tensor &y);

/// dy [T, h] -> dysorted [T * k, h] (weights[t, j] dy[t]) and dweights
/// [T, k] (dy[t] . ysorted[r], an f32 sum in column order).
Status moeCombineBackward(const Tensor &dy, const Tensor &ysorted,
                          const Tensor &weights, const Tensor &rowToken,
                          const Tensor &rowSlot, const Tensor &dysorted,
                          const Tensor &dweights);

/// dysorted [N, h] and the forward's inputs and h1, h3 -> dx [T, h] (the sum
/// over each token's rows, ascending, in f32, rounded once; tokens with no
/// row get 0), dw1, dw3 [E, I, h], dw2 [E, h, I] (an expert with no rows
/// gets zeros). silu(h1) * h3 is recomputed from h1 and h3.
Status moeExpertsBackward(const Tensor &dysorted, const Tensor &x,
                          const Tensor &w1, const Tensor &w3, const Tensor &w2,
                          const Tensor &offsets, const Tensor &rowToken,
                          const Tensor &h1, const Tensor &h3, const Tensor &dx,
                          const Tensor &dw1, const Tensor &dw3,
                          const Tensor &dw2);

/// Expert parallelism's local halves of the token exchanges
/// (docs/model-dialect.md, "Expert parallelism"): moe_dispatch sorts the
/// routed rows by expert so that each rank of the expert-parallel group gets
/// a contiguous block; the rank holding experts receives them grouped by
/// source rank, then expert, and regroups them by expert for its kernels.

/// x [T, h], rowToken [N] -> rows [N, h], rows[r] = x[rowToken[r]] (a copy).
Status moeGatherRows(const Tensor &x, const Tensor &rowToken,
                     const Tensor &rows);

/// rows [N, h], rowToken [N] -> y [T, h], y[t] = the sum over the rows r
/// with rowToken[r] = t, ascending, f32 and rounded once (0 for a token
/// without a row): the dispatch's gradient (the unweighted moe_combine),
/// and, where rowToken is a permutation, its inverse.
Status moeScatterAddRows(const Tensor &rows, const Tensor &rowToken,
                         const Tensor &y);

/// The rows a rank's `local` experts received, `counts[s * local + l]` from
/// source rank s for local expert l, in arrival order (source, then
/// expert) -> offsets [local + 1] and rowToken [sum of counts] (i32): row r
/// of the expert order is received row rowToken[r], expert l owning rows
/// [offsets[l], offsets[l + 1]), its sources ascending. A count of 0, or all
/// of them, is allowed: an expert without rows gets none.
Status moeReceivedPlan(const std::vector<int64_t> &counts, int64_t local,
                       const Tensor &offsets, const Tensor &rowToken);

/// Mixtral's auxiliary load-balancing loss (Hugging Face's
/// load_balancing_loss_func, output_router_logits), over L layers:
///   stats_l [2, E] f32: row 0 C_le = the (token, slot) pairs of layer l
///                  routed to e; row 1 Q_le = sum_t p_l[t, e]
///   N = sum_le C_le / k (the rows of all layers), C_e = sum_l C_le,
///   Q_e = sum_l Q_le, aux = E sum_e (C_e / N) (Q_e / N)
///   result = loss + coefficient * aux
/// The counts are constants; d result / d Q_le = coefficient E C_e / N^2
/// for every l. Every sum is f32 in a fixed order (tokens ascending, layers
/// ascending): bit-identical run to run.

/// logits [T, E] (the router's, recomputed), indices [T, k] -> stats [2, E]
/// f32 (counts, probability sums).
Status moeRouterStats(const Tensor &logits, const Tensor &indices,
                      const Tensor &stats);

/// dstats [2, E] (row 1 read), logits [T, E] -> dlogits [T, E],
/// p * (g - sum_e p_e g_e) with g = dstats[1]. The logits' own backward is
/// linearGradInput / linearGradWeight, as for the router.
Status moeRouterStatsBackward(const Tensor &dstats, const Tensor &logits,
                              const Tensor &dlogits);

/// loss (0-d f32), stats_l [2, E] f32 -> result (0-d f32).
Status moeLoadBalancingLoss(const Tensor &loss,
                            const std::vector<Tensor> &stats, int64_t k,
                            double coefficient, const Tensor &result);

/// dloss (0-d f32), stats_l -> dstats [2, E] f32, every layer's gradient:
/// row 0 zero, row 1 dloss coefficient E C_e / N^2.
Status moeLoadBalancingLossBackward(const Tensor &dloss,
                                    const std::vector<Tensor> &stats, int64_t k,
                                    double coefficient, const Tensor &dstats);

/// The argument checks of the kernels above: dtypes, shapes, k against E,
/// the 32-bit limits (BLAS dimensions, i32 row numbers). They read no data,
/// and the CUDA backend calls them too.
Status checkMoeRouterForward(const Tensor &x, const Tensor &gate, int64_t k,
                             const Tensor &logits, const Tensor &weights,
                             const Tensor &indices);
Status checkMoeRouterBackward(const Tensor &dweights, const Tensor &logits,
                              const Tensor &indices, const Tensor &dlogits);
Status checkMoeRouterStats(const Tensor &logits, const Tensor &indices,
                           const Tensor &stats);
Status checkMoeRouterStatsBackward(const Tensor &dstats, const Tensor &logits,
                                   const Tensor &dlogits);
Status checkMoeLoadBalancing(bool backward, const Tensor &loss,
                             const std::vector<Tensor> &stats, int64_t k,
                             double coefficient, const Tensor &result);
Status checkMoeDispatchPlan(const Tensor &indices, int64_t numExperts,
                            const Tensor &offsets, const Tensor &rowToken,
                            const Tensor &rowSlot);
Status checkMoeExpertsForward(const Tensor &x, const Tensor &w1,
                              const Tensor &w3, const Tensor &w2,
                              const Tensor &offsets, const Tensor &rowToken,
                              const Tensor &h1, const Tensor &h3,
                              const Tensor &ysorted);
Status checkMoeCombineForward(const Tensor &ysorted, const Tensor &weights,
                              const Tensor &rowToken, const Tensor &rowSlot,
                              const Tensor &y);
Status checkMoeCombineBackward(const Tensor &dy, const Tensor &ysorted,
                               const Tensor &weights, const Tensor &rowToken,
                               const Tensor &rowSlot, const Tensor &dysorted,
                               const Tensor &dweights);
Status checkMoeExpertsBackward(const Tensor &dysorted, const Tensor &x,
                               const Tensor &w1, const Tensor &w3,
                               const Tensor &w2, const Tensor &offsets,
                               const Tensor &rowToken, const Tensor &h1,
                               const Tensor &h3, const Tensor &dx,
                               const Tensor &dw1, const Tensor &dw3,
                               const Tensor &dw2);

Status checkMoeGatherRows(const Tensor &x, const Tensor &rowToken,
                          const Tensor &rows);
Status checkMoeScatterAddRows(const Tensor &rows, const Tensor &rowToken,
                              const Tensor &y);

/// moeReceivedPlan's checks and arithmetic, for both backends: the plan is
/// a function of the host counts alone. Checks `counts` and the tensors'
/// dtypes and shapes (not their data), then writes the plan to host memory:
/// `off` [local + 1] and `tok` [sum of counts], which the CPU kernel points
/// at the tensors and the CUDA kernel at staging that it copies to them.
Status moeReceivedPlanOnHost(const std::vector<int64_t> &counts, int64_t local,
                             const Tensor &offsets, const Tensor &rowToken,
                             int32_t *off, int32_t *tok);

/// `offsets` (host memory, numExperts + 1 entries) run from 0 to `rows`
/// without decreasing: the one check of the experts' kernels that the CUDA
/// backend makes on data too (it copies the offsets to the host anyway).
Status checkMoeOffsets(const char *op, const int32_t *offsets,
                       int64_t numExperts, int64_t rows);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_MOE_H
