//===- Moe.h - Mixture-of-experts on the GPU --------------------*- C++ -*-===//
//
// cpu/Moe.h on device data: the same functions, arguments, layouts and shape
// checks (cpu::checkMoe...), plus the stream (and a KernelContext for the
// ones with GEMMs). Every output is overwritten; outputs must not alias
// inputs.
//
// - Router: the logits through cuda::linearForward, then one thread per
//   token: softmax (max subtracted, f32), top-k by repeated selection in the
//   order (probability descending, index ascending), renormalisation.
// - Dispatch plan: a stable CUB radix sort of the (token, slot) pairs keyed
//   by expert, offsets by binary search: the CPU's rows exactly.
// - Experts: x's rows gathered once into sorted order, then one cuBLASLt
//   GEMM per expert and weight (cuda/Gemm.h's linearGemm, f32 accumulation)
//   on that expert's block of rows, and the dense silu and mul kernels over
//   all rows. The GEMM sizes are the experts' row counts, device data: the
//   experts' kernels copy `offsets` (E + 1 ints) to the host and synchronize
//   the stream, the only kernels of this backend that do but
//   moeReceivedPlan.
// - Combine, and the experts' dx: each token's rows found by a stable sort
//   keyed by token, summed in ascending row order with f32 multiplies and
//   adds rounded separately (no fused multiply-add), as the CPU sums them.
//   combine's dweights are block reductions (a fixed order, not the CPU's).
// - Expert parallelism's row moves: moeGatherRows copies rows as bits;
//   moeScatterAddRows finds each token's rows by the combine's stable sort
//   and sums them in ascending row order in f32, rounded once (the CPU's
//   sums exactly); moeReceivedPlan is a function of the host counts, made
//   on the host by the CPU's code (cpu::moeReceivedPlanOnHost) and copied
//   to the device tensors, after which it synchronizes the stream (the
//   staging is pageable; the experts' kernels that follow synchronize
//   anyway).
// No atomics: every kernel is deterministic run to run.
//
// The indices, offsets and row maps are device data, which these kernels do
// not check (the CPU kernels do): they are moeRouterForward's and
// moeDispatchPlan's outputs. An index out of range is sorted after every
// expert, so that offsets[E] < T * k shows it, and reads nothing out of
// bounds. Likewise for the row moves' rowToken (the CPU kernels return an
// error): moeGatherRows writes NaNs for a row whose token is out of range,
// and moeScatterAddRows sorts such a row after every token and leaves it out
// of every sum, reading nothing out of bounds. moeReceivedPlan's counts are
// host data: it makes every check the CPU kernel makes, with its messages.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_MOE_H
#define ZEROC_RUNTIME_KERNELS_CUDA_MOE_H

#include "cuda/Context.h"
#include "cuda/Types.h"

#include <vector>

namespace zeroc::cuda {

Status moeRouterForward(const Tensor &x, const Tensor &gate, int64_t k,
                        bool normalize, const Tensor &logits,
                        const Tensor &weights, const Tensor &indices,
                        KernelContext &ctx, cudaStream_t stream);

Status moeRouterBackward(const Tensor &dweights, const Tensor &logits,
                         const Tensor &indices, bool normalize,
                         const Tensor &dlogits, cudaStream_t stream);

Status moeRouterStats(const Tensor &logits, const Tensor &indices,
                      const Tensor &stats, cudaStream_t stream);

Status moeRouterStatsBackward(const Tensor &dstats, const Tensor &logits,
                              const Tensor &dlogits, cudaStream_t stream);

/// At most kMaxLoadBalancingLayers routers (a kernel argument each).
Status moeLoadBalancingLoss(const Tensor &loss,
                            const std::vector<Tensor> &stats, int64_t k,
                            double coefficient, const Tensor &result,
                            cudaStream_t stream);
Status moeLoadBalancingLossBackward(const Tensor &dloss,
                                    const std::vector<Tensor> &stats, int64_t k,
                                    double coefficient, const Tensor &dstats,
                                    cudaStream_t stream);
constexpr int64_t kMaxLoadBalancingLayers = 256;

Status moeDispatchPlan(const Tensor &indices, int64_t numExperts,
                       const Tensor &offsets, const Tensor &rowToken,
                       const Tensor &rowSlot, cudaStream_t stream);

/// Synchronizes `stream` once (the experts' row counts).
Status moeExpertsForward(const Tensor &x, const Tensor &w1, const Tensor &w3,
                         const Tensor &w2, const Tensor &offsets,
                         const Tensor &rowToken, const Tensor &h1,
                         const Tensor &h3, const Tensor &ysorted,
                         KernelContext &ctx, cudaStream_t stream);

Status moeCombineForward(const Tensor &ysorted, const Tensor &weights,
                         const Tensor &rowToken, const Tensor &rowSlot,
                         const Tensor &y, cudaStream_t stream);

Status moeCombineBackward(const Tensor &dy, const Tensor &ysorted,
                          const Tensor &weights, const Tensor &rowToken,
                          const Tensor &rowSlot, const Tensor &dysorted,
                          const Tensor &dweights, cudaStream_t stream);

/// Synchronizes `stream` once (the experts' row counts).
Status moeExpertsBackward(const Tensor &dysorted, const Tensor &x,
                          const Tensor &w1, const Tensor &w3, const Tensor &w2,
                          const Tensor &offsets, const Tensor &rowToken,
                          const Tensor &h1, const Tensor &h3, const Tensor &dx,
                          const Tensor &dw1, const Tensor &dw3,
                          const Tensor &dw2, KernelContext &ctx,
                          cudaStream_t stream);

Status moeGatherRows(const Tensor &x, const Tensor &rowToken,
                     const Tensor &rows, cudaStream_t stream);

Status moeScatterAddRows(const Tensor &rows, const Tensor &rowToken,
                         const Tensor &y, cudaStream_t stream);

/// `counts` are host data, as for the CPU kernel. Synchronizes `stream`.
Status moeReceivedPlan(const std::vector<int64_t> &counts, int64_t local,
                       const Tensor &offsets, const Tensor &rowToken,
                       cudaStream_t stream);

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_MOE_H
