//===- Dispatch.h - A model op's kernel, for any kernel backend -*- C++ -*-===//
//
// The one mapping from a plan's model ops (forward and backward) to kernel
// calls and their attributes, shared by the CPU and CUDA executors. `K` is a
// kernel set: an object with a member per kernel taking the CPU kernel's
// arguments (runtime/kernels/cpu). CpuKernels below forwards to zeroc::cpu;
// the CUDA backend's forwards to zeroc::cuda with its stream (and cuBLAS
// context where the kernel takes one).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_DISPATCH_H
#define ZEROC_RUNTIME_EXEC_DISPATCH_H

#include "Kernels.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Workspace.h"

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zeroc::runtime {

/// Every kernel the model ops use, for kernel-set wrappers: X(name).
#define ZEROC_MODEL_KERNELS(X)                                                 \
  X(embeddingForward)                                                          \
  X(embeddingBackward)                                                         \
  X(positionEmbeddingForward)                                                  \
  X(positionEmbeddingBackward)                                                 \
  X(linearForward)                                                             \
  X(linearGradInput)                                                           \
  X(linearGradWeight)                                                          \
  X(linearGradBias)                                                            \
  X(layerNormForward)                                                          \
  X(layerNormBackward)                                                         \
  X(rmsNormForward)                                                            \
  X(rmsNormBackward)                                                           \
  X(geluForward)                                                               \
  X(geluBackward)                                                              \
  X(siluForward)                                                               \
  X(siluBackward)                                                              \
  X(add)                                                                       \
  X(mul)                                                                       \
  X(scale)                                                                     \
  X(split)                                                                     \
  X(splitBackward)                                                             \
  X(rotaryForward)                                                             \
  X(rotaryBackward)                                                            \
  X(attentionForward)                                                          \
  X(attentionBackward)                                                         \
  X(flashAttentionForward)                                                     \
  X(flashAttentionBackward)                                                    \
  X(crossEntropyForward)                                                       \
  X(crossEntropyBackward)                                                      \
  X(moeRouterForward)                                                          \
  X(moeRouterBackward)                                                         \
  X(moeDispatchPlan)                                                           \
  X(moeExpertsForward)                                                         \
  X(moeCombineForward)                                                         \
  X(moeCombineBackward)                                                        \
  X(moeExpertsBackward)                                                        \
  X(moeRouterStats)                                                            \
  X(moeRouterStatsBackward)                                                    \
  X(moeLoadBalancingLoss)                                                      \
  X(moeLoadBalancingLossBackward)                                              \
  X(moeGatherRows)                                                             \
  X(moeScatterAddRows)                                                         \
  X(moeReceivedPlan)                                                           \
  X(backwardSeed)

/// The CPU kernel set.
struct CpuKernels {
#define ZEROC_CPU_KERNEL(name)                                                 \
  template <typename... Args> Status name(Args &&...args) {                    \
    return cpu::name(std::forward<Args>(args)...);                             \
  }
  ZEROC_MODEL_KERNELS(ZEROC_CPU_KERNEL)
#undef ZEROC_CPU_KERNEL
};

/// What the model ops take from the executor rather than from the plan: the
/// values of the current step and micro-step.
struct StepContext {
  /// The backward seed's loss scale (1 without loss scaling).
  double lossScale = 1.0;
  /// The cross-entropy's divisor: the counted targets of the global batch
  /// per micro-step (DataLoader::countedTargets / (world size x
  /// micro-steps)); 0 counts the op's own (docs/data-format.md, "The loss").
  double lossTokens = 0.0;
  /// With --no-cross-doc-attention: i32 [micro_batch, seq], the position in
  /// its sequence where each token's document starts (DataLoader::load);
  /// attention sees no key before it. Null: one document per sequence.
  const Tensor *documents = nullptr;
  /// With --reset-position-ids: the same document starts, for the position
  /// embedding and rotary kernels, which count each document's positions
  /// from 0. Null: positions 0 .. seq - 1 in every sequence.
  const Tensor *positions = nullptr;
  /// moe_local_experts and its backward (expert parallelism): the rows this
  /// rank's experts received this micro-step, `[s * local + l]` from rank s
  /// of the expert-parallel group for local expert l, in arrival order (the
  /// dispatch exchange's counts). The first sum of them rows of the op's
  /// rows hold them; the plan sizes the rows for the planning assumption.
  const std::vector<int64_t> *expertRows = nullptr;
};
/// The workspace of a mixture-of-experts op (Workspace.h), from its
/// tensors; nullopt for every other op. The executor sizes the op's
/// workspace with it, and runModelOp finds the parts with it.
template <typename In, typename Out>
std::optional<std::pair<MoeScratchKind, MoeShape>>
moeScratchOf(const PlanOp &op, In in, Out out) {
  MoeShape s;
  auto tokens = [&](const Tensor &x) {
    s.tokens = x.rows();
    s.hidden = x.dim(-1);
    s.elementBytes = bytesPerElement(x.dtype);
  };
  switch (op.kind) {
  case OpKind::MoeRouter:
    tokens(in(0));
    s.experts = in(1).dim(0);
    s.topK = out(0).dim(-1);
    s.savedOutput = op.outputs.size() > 2;
    return std::make_pair(MoeScratchKind::RouterForward, s);
  case OpKind::MoeExperts:
  case OpKind::MoeExpertsBackward:
    tokens(in(0));
    s.topK = in(1).dim(-1);
    s.experts = in(3).dim(0);
    s.intermediate = in(3).dim(1);
    s.savedOutput = op.outputs.size() > 1;
    return std::make_pair(op.kind == OpKind::MoeExperts
                              ? MoeScratchKind::ExpertsForward
                              : MoeScratchKind::ExpertsBackward,
                          s);
  case OpKind::MoeRouterBackward:
    tokens(in(0));
    s.experts = in(1).dim(0);
    s.topK = in(2).dim(-1);
    return std::make_pair(MoeScratchKind::RouterBackward, s);
  case OpKind::MoeRouterStats:
  case OpKind::MoeRouterStatsBackward:
    tokens(in(0));
    s.experts = in(1).dim(0);
    return std::make_pair(op.kind == OpKind::MoeRouterStats
                              ? MoeScratchKind::RouterStats
                              : MoeScratchKind::RouterStatsBackward,
                          s);
  // Expert parallelism's split ops, as zero-plan-memory sizes them: the
  // dispatch plan of the tokens' routed rows (the [batch, seq, hidden]
  // side and the indices), or the received rows grouped by local expert.
  case OpKind::MoeDispatch:
    tokens(in(0));
    s.experts = op.attrsAs<MoeExpertCountAttrs>().numExperts;
    s.topK = in(1).dim(-1);
    return std::make_pair(MoeScratchKind::Dispatch, s);
  case OpKind::MoeCombine:
    tokens(out(0));
    s.experts = op.attrsAs<MoeExpertCountAttrs>().numExperts;
    s.topK = in(1).dim(-1);
    return std::make_pair(MoeScratchKind::Dispatch, s);
  case OpKind::MoeCombineBackward:
    tokens(in(0));
    s.experts = op.attrsAs<MoeExpertCountAttrs>().numExperts;
    s.topK = in(3).dim(-1);
    return std::make_pair(MoeScratchKind::Dispatch, s);
  case OpKind::MoeLocalExperts:
  case OpKind::MoeLocalExpertsBackward:
    tokens(in(0));
    s.topK = 1;
    s.experts = in(1).dim(0);
    s.intermediate = in(1).dim(1);
    s.savedOutput = true;
    return std::make_pair(op.kind == OpKind::MoeLocalExperts
                              ? MoeScratchKind::LocalExpertsForward
                              : MoeScratchKind::LocalExpertsBackward,
                          s);
  default:
    return std::nullopt;
  }
}

/// The bytes of `op`'s workspace that runModelOp needs (0 for most ops).
template <typename In, typename Out>
int64_t modelOpScratchBytes(const PlanOp &op, In in, Out out) {
  auto moe = moeScratchOf(op, in, out);
  if (!moe)
    return 0;
  WorkspaceLayout ws;
  moeScratchParts(ws, moe->first, moe->second);
  return ws.size();
}

/// Runs the kernel of model op `op` (inputs `in(i)`, outputs `out(i)`:
/// Tensor views) with kernel set `k`. nullopt: not a model op.
///
/// State a forward op keeps for its backward (normalization statistics,
/// attention's row log-sum-exp or probabilities, by its `kernel`) is a value of
/// the plan like any other: the forward's second output, read by the backward
/// as its last input. Attributes come typed and checked from the plan reader
/// (PlanOps.h).
template <typename K, typename In, typename Out>
std::optional<Status> runModelOp(K &k, const PlanOp &op, In in, Out out,
                                 const StepContext &step,
                                 char *scratch = nullptr) {
  // The state output of a forward op, null in a forward-only plan.
  auto savedOut = [&]() -> const Tensor * {
    return op.outputs.size() > 1 ? &out(1) : nullptr;
  };
  auto savedIn = [&]() -> const Tensor & { return in(op.inputs.size() - 1); };
  auto eps = [&] { return float(op.attrsAs<NormAttrs>().epsilon); };
  auto rms = [&] { return op.attrsAs<RMSNormAttrs>(); };
  auto heads = [&] { return op.attrsAs<AttentionAttrs>(); };
  auto rotary = [&] { return op.attrsAs<RotaryAttrs>(); };
  // A mixture-of-experts op's intermediates, views of its workspace or of
  // its saved state (h1, h3, ysorted in that order: ModelOps.td).
  auto moe = moeScratchOf(op, in, out);
  MoeScratchParts parts;
  if (moe) {
    WorkspaceLayout ws;
    parts = moeScratchParts(ws, moe->first, moe->second);
    if (ws.size() > 0 && !scratch)
      return Status{std::string(opKindName(op.kind)) +
                    ": no workspace for its intermediates"};
  }
  auto part = [&](int64_t offset, DType dtype,
                  std::vector<int64_t> shape) -> Tensor {
    return Tensor{scratch + offset, dtype, std::move(shape)};
  };
  auto dispatch = [&]() {
    const MoeShape &m = moe->second;
    int64_t rows = m.tokens * m.topK;
    return std::array<Tensor, 3>{
        part(parts.offsets, DType::I32, {m.experts + 1}),
        part(parts.rowToken, DType::I32, {rows}),
        part(parts.rowSlot, DType::I32, {rows})};
  };
  // h1, h3, ysorted: the saved state `state` (flat, in the model dtype) or
  // the workspace.
  auto expertsState = [&](const Tensor *state) {
    const MoeShape &m = moe->second;
    int64_t rows = m.tokens * m.topK, n = rows * m.intermediate;
    DType dt = in(0).dtype;
    if (state) {
      char *base = static_cast<char *>(state->data);
      int64_t b = bytesPerElement(dt);
      return std::array<Tensor, 3>{
          Tensor{base, dt, {rows, m.intermediate}},
          Tensor{base + n * b, dt, {rows, m.intermediate}},
          Tensor{base + 2 * n * b, dt, {rows, m.hidden}}};
    }
    return std::array<Tensor, 3>{part(parts.h1, dt, {rows, m.intermediate}),
                                 part(parts.h3, dt, {rows, m.intermediate}),
                                 part(parts.ysorted, dt, {rows, m.hidden})};
  };
  // Every model kind has its kernel here: a new one is a compile error.
  switch (op.kind) {
  case OpKind::Embedding:
    return k.embeddingForward(in(0), in(1), out(0));
  case OpKind::PositionEmbedding:
    return k.positionEmbeddingForward(in(0), out(0), step.positions);
  case OpKind::Linear:
    return k.linearForward(in(0), in(1),
                           op.inputs.size() > 2 ? &in(2) : nullptr, out(0));
  case OpKind::LayerNorm:
    return k.layerNormForward(in(0), in(1), in(2), eps(), out(0),
                              savedOut() ? savedOut()->f32() : nullptr);
  case OpKind::RMSNorm:
    return k.rmsNormForward(in(0), in(1), float(rms().epsilon),
                            rms().unitOffset, out(0),
                            savedOut() ? savedOut()->f32() : nullptr);
  case OpKind::Gelu:
    return k.geluForward(in(0), out(0));
  case OpKind::Silu:
    return k.siluForward(in(0), out(0));
  case OpKind::Add:
    return k.add(in(0), in(1), out(0));
  case OpKind::Mul:
    return k.mul(in(0), in(1), out(0));
  case OpKind::Rotary:
    return k.rotaryForward(in(0), rotary().headDim, rotary().theta, out(0),
                           step.positions);
  case OpKind::Scale:
    return k.scale(in(0), op.attrsAs<ScaleAttrs>().factor, out(0));
  case OpKind::Split: {
    std::vector<Tensor> pieces;
    for (size_t i = 0; i < op.outputs.size(); ++i)
      pieces.push_back(out(i));
    return k.split(in(0), pieces);
  }
  case OpKind::SplitBackward: {
    std::vector<Tensor> dpieces;
    for (size_t i = 0; i < op.inputs.size(); ++i)
      dpieces.push_back(in(i));
    return k.splitBackward(dpieces, out(0));
  }
  case OpKind::CausalAttention:
    if (heads().kernel == AttentionKernel::Flash)
      return k.flashAttentionForward(in(0), in(1), in(2), heads().numHeads,
                                     heads().numKvHeads, heads().window, out(0),
                                     savedOut(), step.documents);
    return k.attentionForward(in(0), in(1), in(2), heads().numHeads,
                              heads().numKvHeads, heads().window, out(0),
                              savedOut(), step.documents);
  case OpKind::CrossEntropy:
    return k.crossEntropyForward(
        in(0), in(1), out(0), step.lossTokens,
        op.attrsAs<CrossEntropyAttrs>().classes.value_or(0));
  case OpKind::BackwardSeed: {
    const BackwardSeedAttrs &seed = op.attrsAs<BackwardSeedAttrs>();
    return k.backwardSeed(seed.microSteps,
                          seed.lossScaling ? step.lossScale : 1.0, out(0));
  }
  case OpKind::CrossEntropyBackward:
    return k.crossEntropyBackward(
        in(0), in(1), in(2), out(0), step.lossTokens,
        op.attrsAs<CrossEntropyAttrs>().classes.value_or(0));
  case OpKind::LinearGradInput:
    return k.linearGradInput(in(0), in(1), out(0));
  case OpKind::LinearGradWeight:
    return k.linearGradWeight(in(0), in(1), out(0));
  case OpKind::LinearGradBias:
    return k.linearGradBias(in(0), out(0));
  case OpKind::LayerNormBackward:
    return k.layerNormBackward(in(0), in(1), in(2), eps(), savedIn().f32(),
                               out(0), out(1), out(2));
  case OpKind::RMSNormBackward:
    return k.rmsNormBackward(in(0), in(1), in(2), float(rms().epsilon),
                             rms().unitOffset, savedIn().f32(), out(0), out(1));
  case OpKind::GeluBackward:
    return k.geluBackward(in(0), in(1), out(0));
  case OpKind::SiluBackward:
    return k.siluBackward(in(0), in(1), out(0));
  case OpKind::RotaryBackward:
    return k.rotaryBackward(in(0), rotary().headDim, rotary().theta, out(0),
                            step.positions);
  case OpKind::CausalAttentionBackward:
    if (heads().kernel == AttentionKernel::Flash)
      return k.flashAttentionBackward(in(0), in(1), in(2), in(3), in(4),
                                      heads().numHeads, heads().numKvHeads,
                                      heads().window, &savedIn(), out(0),
                                      out(1), out(2), step.documents);
    return k.attentionBackward(
        in(0), in(1), in(2), in(3), in(4), heads().numHeads, heads().numKvHeads,
        heads().window, &savedIn(), out(0), out(1), out(2), step.documents);
  case OpKind::EmbeddingBackward:
    return k.embeddingBackward(in(0), in(1), out(0));
  case OpKind::PositionEmbeddingBackward:
    return k.positionEmbeddingBackward(in(0), out(0), step.positions);
  case OpKind::MoeRouter: {
    const MoeRouterAttrs &a = op.attrsAs<MoeRouterAttrs>();
    const MoeShape &m = moe->second;
    Tensor logits = savedOut() && op.outputs.size() > 2
                        ? out(2)
                        : part(parts.logits, DType::F32, {m.tokens, m.experts});
    return k.moeRouterForward(in(0), in(1), a.topK, a.normalize, logits, out(0),
                              out(1));
  }
  case OpKind::MoeExperts: {
    // Dispatch plan, the experts' products, the weighted combine.
    auto [offsets, rowToken, rowSlot] = dispatch();
    auto [h1, h3, ysorted] = expertsState(savedOut());
    ZEROC_RETURN_IF_ERROR(
        k.moeDispatchPlan(in(2), in(3).dim(0), offsets, rowToken, rowSlot));
    ZEROC_RETURN_IF_ERROR(k.moeExpertsForward(
        in(0), in(3), in(4), in(5), offsets, rowToken, h1, h3, ysorted));
    return k.moeCombineForward(ysorted, in(1), rowToken, rowSlot, out(0));
  }
  case OpKind::MoeExpertsBackward: {
    auto [offsets, rowToken, rowSlot] = dispatch();
    auto [h1, h3, ysorted] = expertsState(&savedIn());
    const MoeShape &m = moe->second;
    Tensor dysorted =
        part(parts.dysorted, in(0).dtype, {m.tokens * m.topK, m.hidden});
    ZEROC_RETURN_IF_ERROR(
        k.moeDispatchPlan(in(2), in(3).dim(0), offsets, rowToken, rowSlot));
    ZEROC_RETURN_IF_ERROR(k.moeCombineBackward(in(6), ysorted, in(1), rowToken,
                                               rowSlot, dysorted, out(1)));
    return k.moeExpertsBackward(dysorted, in(0), in(3), in(4), in(5), offsets,
                                rowToken, h1, h3, out(0), out(2), out(3),
                                out(4));
  }
  case OpKind::MoeRouterBackward: {
    // dlogits in the model dtype, then the logits' linear backward.
    const MoeShape &m = moe->second;
    std::vector<int64_t> shape(in(0).shape);
    shape.back() = m.experts;
    Tensor dlogits = part(parts.dlogits, in(0).dtype, shape);
    ZEROC_RETURN_IF_ERROR(k.moeRouterBackward(
        in(2), in(3), in(4), op.attrsAs<MoeNormalizeAttrs>().normalize,
        dlogits));
    ZEROC_RETURN_IF_ERROR(k.linearGradInput(dlogits, in(1), out(0)));
    return k.linearGradWeight(dlogits, in(0), out(1));
  }
  // Expert parallelism's split of moe_experts (ModelOps.td): the
  // all-to-alls between them are the executor's.
  case OpKind::MoeDispatch: {
    auto [offsets, rowToken, rowSlot] = dispatch();
    ZEROC_RETURN_IF_ERROR(
        k.moeDispatchPlan(in(1), op.attrsAs<MoeExpertCountAttrs>().numExperts,
                          offsets, rowToken, rowSlot));
    return k.moeGatherRows(in(0), rowToken, out(0));
  }
  case OpKind::MoeCombine: {
    auto [offsets, rowToken, rowSlot] = dispatch();
    ZEROC_RETURN_IF_ERROR(
        k.moeDispatchPlan(in(1), op.attrsAs<MoeExpertCountAttrs>().numExperts,
                          offsets, rowToken, rowSlot));
    if (op.inputs.size() > 2)
      return k.moeCombineForward(in(0), in(2), rowToken, rowSlot, out(0));
    return k.moeScatterAddRows(in(0), rowToken, out(0)); // The dispatch's grad.
  }
  case OpKind::MoeCombineBackward: {
    auto [offsets, rowToken, rowSlot] = dispatch();
    ZEROC_RETURN_IF_ERROR(
        k.moeDispatchPlan(in(3), op.attrsAs<MoeExpertCountAttrs>().numExperts,
                          offsets, rowToken, rowSlot));
    return k.moeCombineBackward(in(0), in(1), in(2), rowToken, rowSlot, out(0),
                                out(1));
  }
  case OpKind::MoeLocalExperts:
  case OpKind::MoeLocalExpertsBackward: {
    // The received rows (the first `n` of the planned R), regrouped by local
    // expert; the saved state holds h1 then h3, R rows each.
    if (!step.expertRows)
      return Status{std::string(opKindName(op.kind)) +
                    ": no row counts of the dispatch exchange"};
    const MoeShape &m = moe->second;
    int64_t n = 0;
    for (int64_t c : *step.expertRows)
      n += c;
    if (n > m.tokens)
      return Status{std::string(opKindName(op.kind)) + ": " +
                    std::to_string(n) + " rows received, more than the " +
                    std::to_string(m.tokens) + " its buffers hold"};
    std::array<Tensor, 3> plan = dispatch();
    const Tensor &offsets = plan[0];
    Tensor rowToken{plan[1].data, DType::I32, {n}};
    auto first = [&](const Tensor &t) {
      return Tensor{t.data, t.dtype, {n, t.dim(-1)}};
    };
    bool forward = op.kind == OpKind::MoeLocalExperts;
    const Tensor &saved = forward ? out(1) : in(5);
    char *base = static_cast<char *>(saved.data);
    int64_t hBytes = m.tokens * m.intermediate * bytesPerElement(saved.dtype);
    Tensor h1{base, saved.dtype, {n, m.intermediate}};
    Tensor h3{base + hBytes, saved.dtype, {n, m.intermediate}};
    Tensor x = first(in(0));
    ZEROC_RETURN_IF_ERROR(
        k.moeReceivedPlan(*step.expertRows, in(1).dim(0), offsets, rowToken));
    if (forward) {
      Tensor ysorted = part(parts.ysorted, in(0).dtype, {n, m.hidden});
      ZEROC_RETURN_IF_ERROR(k.moeExpertsForward(x, in(1), in(2), in(3), offsets,
                                                rowToken, h1, h3, ysorted));
      return k.moeScatterAddRows(ysorted, rowToken, first(out(0)));
    }
    Tensor dysorted = part(parts.dysorted, in(0).dtype, {n, m.hidden});
    ZEROC_RETURN_IF_ERROR(k.moeGatherRows(first(in(4)), rowToken, dysorted));
    return k.moeExpertsBackward(dysorted, x, in(1), in(2), in(3), offsets,
                                rowToken, h1, h3, first(out(0)), out(1), out(2),
                                out(3));
  }
  case OpKind::MoeRouterStats: {
    // The logits again (f32, as the router's), then the statistics.
    std::vector<int64_t> shape(in(0).shape);
    shape.back() = moe->second.experts;
    Tensor logits = part(parts.logits, DType::F32, shape);
    ZEROC_RETURN_IF_ERROR(k.linearForward(in(0), in(1), nullptr, logits));
    return k.moeRouterStats(logits, in(2), out(0));
  }
  case OpKind::MoeRouterStatsBackward: {
    // The logits again, dlogits in the model dtype, the logits' backward.
    std::vector<int64_t> shape(in(0).shape);
    shape.back() = moe->second.experts;
    Tensor logits = part(parts.logits, DType::F32, shape);
    Tensor dlogits = part(parts.dlogits, in(0).dtype, shape);
    ZEROC_RETURN_IF_ERROR(k.linearForward(in(0), in(1), nullptr, logits));
    ZEROC_RETURN_IF_ERROR(k.moeRouterStatsBackward(in(2), logits, dlogits));
    ZEROC_RETURN_IF_ERROR(k.linearGradInput(dlogits, in(1), out(0)));
    return k.linearGradWeight(dlogits, in(0), out(1));
  }
  case OpKind::MoeLoadBalancingLoss:
  case OpKind::MoeLoadBalancingLossBackward: {
    const LoadBalancingAttrs &a = op.attrsAs<LoadBalancingAttrs>();
    std::vector<Tensor> stats;
    for (size_t i = 1; i < op.inputs.size(); ++i)
      stats.push_back(in(i));
    if (op.kind == OpKind::MoeLoadBalancingLoss)
      return k.moeLoadBalancingLoss(in(0), stats, a.topK, a.coefficient,
                                    out(0));
    return k.moeLoadBalancingLossBackward(in(0), stats, a.topK, a.coefficient,
                                          out(0));
  }
#define ZEROC_NOT_A_KERNEL(e, name, attrs) case OpKind::e:
    ZEROC_PLAN_SCHED_OPS(ZEROC_NOT_A_KERNEL)
#undef ZEROC_NOT_A_KERNEL
  case OpKind::Return:
    return std::nullopt;
  }
  return std::nullopt;
}

/// runModelOp over the op's input and output tensors in vectors.
template <typename K>
std::optional<Status>
runModelOp(K &k, const PlanOp &op, const std::vector<Tensor> &in,
           const std::vector<Tensor> &out, const StepContext &step,
           char *scratch = nullptr) {
  return runModelOp(
      k, op, [&](size_t i) -> const Tensor & { return in.at(i); },
      [&](size_t i) -> const Tensor & { return out.at(i); }, step, scratch);
}

/// modelOpScratchBytes over tensors in vectors.
inline int64_t modelOpScratchBytes(const PlanOp &op,
                                   const std::vector<Tensor> &in,
                                   const std::vector<Tensor> &out) {
  return modelOpScratchBytes(
      op, [&](size_t i) -> const Tensor & { return in.at(i); },
      [&](size_t i) -> const Tensor & { return out.at(i); });
}

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_DISPATCH_H
