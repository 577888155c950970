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
  X(rotaryForward)                                                             \
  X(rotaryBackward)                                                            \
  X(attentionForward)                                                          \
  X(attentionBackward)                                                         \
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

namespace dispatch {
inline double attrF(const PlanOp &op, const char *name, double dflt) {
  auto it = op.attrs.find(name);
  return it != op.attrs.end() && it->is_number() ? it->get<double>() : dflt;
}
inline int64_t attrI(const PlanOp &op, const char *name, int64_t dflt) {
  auto it = op.attrs.find(name);
  return it != op.attrs.end() && it->is_number() ? it->get<int64_t>() : dflt;
}
} // namespace dispatch

/// State a forward op keeps for backward (normalization statistics,
/// attention probabilities), in the arena.
struct SavedState {
  float *mine = nullptr;    ///< This op's saved_offset, if it has one.
  float *forward = nullptr; ///< For a backward op: what its forward saved.
  int64_t mineBytes = 0;
  bool kept = false; ///< Set when a forward op wrote `mine` for backward.
};

/// Runs the kernel of model op `op` (inputs `in(i)`, outputs `out(i)`:
/// Tensor views) with kernel set `k`. nullopt: not a model op.
template <typename K, typename In, typename Out>
std::optional<Status> runModelOp(K &k, const PlanOp &op, In in, Out out,
                                 SavedState &saved, double lossScale) {
  using dispatch::attrF;
  using dispatch::attrI;
  const std::string &kind = op.kind;
  auto eps = [&]() { return float(attrF(op, "epsilon", 1e-5)); };
  auto probsOf = [&](float *data, DType dtype) {
    const Tensor &q = in(0);
    return Tensor{
        data, dtype, {q.dim(0), attrI(op, "num_heads", 1), q.dim(1), q.dim(1)}};
  };
  if (kind == "embedding")
    return k.embeddingForward(in(0), in(1), out(0));
  if (kind == "position_embedding")
    return k.positionEmbeddingForward(in(0), out(0));
  if (kind == "linear")
    return k.linearForward(in(0), in(1),
                           op.inputs.size() > 2 ? &in(2) : nullptr, out(0));
  if (kind == "layernorm") {
    saved.kept = saved.mine != nullptr;
    return k.layerNormForward(in(0), in(1), in(2), eps(), out(0), saved.mine);
  }
  if (kind == "rmsnorm") {
    saved.kept = saved.mine != nullptr;
    return k.rmsNormForward(in(0), in(1), eps(), out(0), saved.mine);
  }
  if (kind == "gelu")
    return k.geluForward(in(0), out(0));
  if (kind == "silu")
    return k.siluForward(in(0), out(0));
  if (kind == "add")
    return k.add(in(0), in(1), out(0));
  if (kind == "mul")
    return k.mul(in(0), in(1), out(0));
  if (kind == "rotary")
    return k.rotaryForward(in(0), attrI(op, "head_dim", 0),
                           attrF(op, "theta", 10000.0), out(0));
  if (kind == "causal_attention") {
    Tensor probs;
    Tensor *keep = nullptr;
    if (saved.mine) {
      probs = probsOf(saved.mine, out(0).dtype);
      if (probs.bytes() <= saved.mineBytes) {
        keep = &probs;
        saved.kept = true;
      }
    }
    return k.attentionForward(in(0), in(1), in(2), attrI(op, "num_heads", 1),
                              attrI(op, "num_kv_heads", 1), out(0), keep);
  }
  if (kind == "cross_entropy")
    return k.crossEntropyForward(in(0), in(1), out(0));
  if (kind == "backward_seed") {
    bool scaled = op.attrs.contains("loss_scaling") &&
                  op.attrs["loss_scaling"].is_boolean() &&
                  op.attrs["loss_scaling"].template get<bool>();
    return k.backwardSeed(attrI(op, "micro_steps", 1), scaled ? lossScale : 1.0,
                          out(0));
  }
  if (kind == "cross_entropy_backward")
    return k.crossEntropyBackward(in(0), in(1), in(2), out(0));
  if (kind == "linear_grad_input")
    return k.linearGradInput(in(0), in(1), out(0));
  if (kind == "linear_grad_weight")
    return k.linearGradWeight(in(0), in(1), out(0));
  if (kind == "linear_grad_bias")
    return k.linearGradBias(in(0), out(0));
  if (kind == "layernorm_backward")
    return k.layerNormBackward(in(0), in(1), in(2), eps(), saved.forward,
                               out(0), out(1), out(2));
  if (kind == "rmsnorm_backward")
    return k.rmsNormBackward(in(0), in(1), in(2), eps(), saved.forward, out(0),
                             out(1));
  if (kind == "gelu_backward")
    return k.geluBackward(in(0), in(1), out(0));
  if (kind == "silu_backward")
    return k.siluBackward(in(0), in(1), out(0));
  if (kind == "rotary_backward")
    return k.rotaryBackward(in(0), attrI(op, "head_dim", 0),
                            attrF(op, "theta", 10000.0), out(0));
  if (kind == "causal_attention_backward") {
    Tensor probs;
    Tensor *have = nullptr;
    if (saved.forward) {
      probs = probsOf(saved.forward, in(3).dtype);
      have = &probs;
    }
    return k.attentionBackward(
        in(0), in(1), in(2), in(3), in(4), attrI(op, "num_heads", 1),
        attrI(op, "num_kv_heads", 1), have, out(0), out(1), out(2));
  }
  if (kind == "embedding_backward")
    return k.embeddingBackward(in(0), in(1), out(0));
  if (kind == "position_embedding_backward")
    return k.positionEmbeddingBackward(in(0), out(0));
  return std::nullopt;
}

/// runModelOp over the op's input and output tensors in vectors.
template <typename K>
std::optional<Status> runModelOp(K &k, const PlanOp &op,
                                 const std::vector<Tensor> &in,
                                 const std::vector<Tensor> &out,
                                 SavedState &saved, double lossScale) {
  return runModelOp(
      k, op, [&](size_t i) -> const Tensor & { return in.at(i); },
      [&](size_t i) -> const Tensor & { return out.at(i); }, saved, lossScale);
}

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_DISPATCH_H
