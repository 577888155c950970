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
                                 double lossScale) {
  // The state output of a forward op, null in a forward-only plan.
  auto savedOut = [&]() -> const Tensor * {
    return op.outputs.size() > 1 ? &out(1) : nullptr;
  };
  auto savedIn = [&]() -> const Tensor & { return in(op.inputs.size() - 1); };
  auto eps = [&] { return float(op.attrsAs<NormAttrs>().epsilon); };
  auto rms = [&] { return op.attrsAs<RMSNormAttrs>(); };
  auto heads = [&] { return op.attrsAs<AttentionAttrs>(); };
  auto rotary = [&] { return op.attrsAs<RotaryAttrs>(); };
  // Every model kind has its kernel here: a new one is a compile error.
  switch (op.kind) {
  case OpKind::Embedding:
    return k.embeddingForward(in(0), in(1), out(0));
  case OpKind::PositionEmbedding:
    return k.positionEmbeddingForward(in(0), out(0));
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
    return k.rotaryForward(in(0), rotary().headDim, rotary().theta, out(0));
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
                                     savedOut());
    return k.attentionForward(in(0), in(1), in(2), heads().numHeads,
                              heads().numKvHeads, heads().window, out(0),
                              savedOut());
  case OpKind::CrossEntropy:
    return k.crossEntropyForward(in(0), in(1), out(0));
  case OpKind::BackwardSeed: {
    const BackwardSeedAttrs &seed = op.attrsAs<BackwardSeedAttrs>();
    return k.backwardSeed(seed.microSteps, seed.lossScaling ? lossScale : 1.0,
                          out(0));
  }
  case OpKind::CrossEntropyBackward:
    return k.crossEntropyBackward(in(0), in(1), in(2), out(0));
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
    return k.rotaryBackward(in(0), rotary().headDim, rotary().theta, out(0));
  case OpKind::CausalAttentionBackward:
    if (heads().kernel == AttentionKernel::Flash)
      return k.flashAttentionBackward(in(0), in(1), in(2), in(3), in(4),
                                      heads().numHeads, heads().numKvHeads,
                                      heads().window, &savedIn(), out(0),
                                      out(1), out(2));
    return k.attentionBackward(
        in(0), in(1), in(2), in(3), in(4), heads().numHeads, heads().numKvHeads,
        heads().window, &savedIn(), out(0), out(1), out(2));
  case OpKind::EmbeddingBackward:
    return k.embeddingBackward(in(0), in(1), out(0));
  case OpKind::PositionEmbeddingBackward:
    return k.positionEmbeddingBackward(in(0), out(0));
  // The mixture-of-experts kernels are not in this build yet (branch
  // moe-kernels): a plan holding these ops is refused when run.
  case OpKind::MoeRouter:
  case OpKind::MoeExperts:
  case OpKind::MoeRouterBackward:
  case OpKind::MoeExpertsBackward:
    return Status{std::string(opKindName(op.kind)) +
                  ": the mixture-of-experts kernels are not in this build of "
                  "zerorun"};
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
           const std::vector<Tensor> &out, double lossScale) {
  return runModelOp(
      k, op, [&](size_t i) -> const Tensor & { return in.at(i); },
      [&](size_t i) -> const Tensor & { return out.at(i); }, lossScale);
}

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_DISPATCH_H
