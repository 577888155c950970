//===- PlanOps.h - The op kinds of a plan and their typed attributes -*- C++
//-*-===//
//
// Every op a plan may hold, as an enum, and the attributes of each kind as a
// struct whose fields are listed once (`fields`): the plan reader checks
// them by that list (a missing, extra or ill-typed attribute is an error
// naming the op), the writer writes them by it, and the runtime and the cost
// model switch over the enum, so a new kind is a compile error (-Wswitch)
// wherever it is not handled. MLIR-free; the names are the MLIR op names
// without their dialect.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PLAN_PLANOPS_H
#define ZEROC_PLAN_PLANOPS_H

#include "zeroc/Support/AttentionKernel.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace zeroc {

/// Op kinds: X(Enum, "name", Attrs). Model ops first (forward, then
/// backward and the backward seed), then the sched ops, then func.return.
#define ZEROC_PLAN_MODEL_OPS(X)                                                \
  X(Embedding, "embedding", NoAttrs)                                           \
  X(PositionEmbedding, "position_embedding", NoAttrs)                          \
  X(Linear, "linear", NoAttrs)                                                 \
  X(LayerNorm, "layernorm", NormAttrs)                                         \
  X(RMSNorm, "rmsnorm", RMSNormAttrs)                                          \
  X(Gelu, "gelu", NoAttrs)                                                     \
  X(Silu, "silu", NoAttrs)                                                     \
  X(Add, "add", AddAttrs)                                                      \
  X(Mul, "mul", NoAttrs)                                                       \
  X(Rotary, "rotary", RotaryAttrs)                                             \
  X(Scale, "scale", ScaleAttrs)                                                \
  X(Split, "split", NoAttrs)                                                   \
  X(CausalAttention, "causal_attention", AttentionAttrs)                       \
  X(CrossEntropy, "cross_entropy", CrossEntropyAttrs)                          \
  X(MoeRouter, "moe_router", MoeRouterAttrs)                                   \
  X(MoeExperts, "moe_experts", MoeExpertsAttrs)                                \
  X(MoeDispatch, "moe_dispatch", MoeExpertCountAttrs)                          \
  X(MoeLocalExperts, "moe_local_experts", MoeLocalExpertsAttrs)                \
  X(MoeCombine, "moe_combine", MoeExpertCountAttrs)                            \
  X(MoeRouterStats, "moe_router_stats", NoAttrs)                               \
  X(MoeLoadBalancingLoss, "moe_load_balancing_loss", LoadBalancingAttrs)       \
  X(EmbeddingBackward, "embedding_backward", NoAttrs)                          \
  X(PositionEmbeddingBackward, "position_embedding_backward", NoAttrs)         \
  X(LinearGradInput, "linear_grad_input", NoAttrs)                             \
  X(LinearGradWeight, "linear_grad_weight", NoAttrs)                           \
  X(LinearGradBias, "linear_grad_bias", NoAttrs)                               \
  X(LayerNormBackward, "layernorm_backward", NormAttrs)                        \
  X(RMSNormBackward, "rmsnorm_backward", RMSNormAttrs)                         \
  X(GeluBackward, "gelu_backward", NoAttrs)                                    \
  X(SiluBackward, "silu_backward", NoAttrs)                                    \
  X(RotaryBackward, "rotary_backward", RotaryAttrs)                            \
  X(SplitBackward, "split_backward", NoAttrs)                                  \
  X(CausalAttentionBackward, "causal_attention_backward", AttentionAttrs)      \
  X(CrossEntropyBackward, "cross_entropy_backward", CrossEntropyAttrs)         \
  X(MoeRouterBackward, "moe_router_backward", MoeNormalizeAttrs)               \
  X(MoeExpertsBackward, "moe_experts_backward", NoAttrs)                       \
  X(MoeCombineBackward, "moe_combine_backward", MoeExpertCountAttrs)           \
  X(MoeLocalExpertsBackward, "moe_local_experts_backward", NoAttrs)            \
  X(MoeRouterStatsBackward, "moe_router_stats_backward", NoAttrs)              \
  X(MoeLoadBalancingLossBackward, "moe_load_balancing_loss_backward",          \
    LoadBalancingAttrs)                                                        \
  X(BackwardSeed, "backward_seed", BackwardSeedAttrs)

#define ZEROC_PLAN_SCHED_OPS(X)                                                \
  X(Read, "read", ReadAttrs)                                                   \
  X(Accumulate, "accumulate", AccumulateAttrs)                                 \
  X(Release, "release", NoAttrs)                                               \
  X(ZeroGrads, "zero_grads", TensorListAttrs)                                  \
  X(AllGatherStart, "all_gather_start", AllGatherAttrs)                        \
  X(ReduceScatterStart, "reduce_scatter_start", ReduceScatterAttrs)            \
  X(AllReduceStart, "all_reduce_start", TensorListAttrs)                       \
  X(AllGatherUpdatesStart, "all_gather_updates_start", TargetListAttrs)        \
  X(AllToAllStart, "all_to_all_start", AllToAllAttrs)                          \
  X(FetchStart, "fetch_start", TensorListAttrs)                                \
  X(CopyStart, "copy_start", CopyAttrs)                                        \
  X(Wait, "wait", NoAttrs)                                                     \
  X(UnscaleGrads, "unscale_grads", UnscaleGradsAttrs)                          \
  X(ClipGradNorm, "clip_grad_norm", ClipGradNormAttrs)                         \
  X(AdamUpdate, "adam_update", AdamAttrs)

#define ZEROC_PLAN_OPS(X)                                                      \
  ZEROC_PLAN_MODEL_OPS(X)                                                      \
  ZEROC_PLAN_SCHED_OPS(X)                                                      \
  X(Return, "return", NoAttrs)

enum class OpKind : uint8_t {
#define ZEROC_PLAN_OP_ENUM(e, name, attrs) e,
  ZEROC_PLAN_OPS(ZEROC_PLAN_OP_ENUM)
#undef ZEROC_PLAN_OP_ENUM
};

inline constexpr OpKind kAllOpKinds[] = {
#define ZEROC_PLAN_OP_ENUM(e, name, attrs) OpKind::e,
    ZEROC_PLAN_OPS(ZEROC_PLAN_OP_ENUM)
#undef ZEROC_PLAN_OP_ENUM
};

/// Where a persistent tensor lives, spelled as the sched dialect's
/// placement: device, host (pinned CPU memory) or nvme.
enum class Placement : uint8_t { Device, Host, Nvme };
inline constexpr Placement kAllPlacements[] = {
    Placement::Device, Placement::Host, Placement::Nvme};
const char *placementName(Placement placement);
std::optional<Placement> parsePlacement(std::string_view name);

/// A tensor placed on nvme is a file read and written whole, in blocks of
/// this many bytes (direct I/O's alignment of buffers, offsets and sizes:
/// runtime/offload/NvmeFile.h).
inline constexpr int64_t kNvmeBlockBytes = 4096;
/// `bytes` rounded up to whole NVMe blocks: what moves for a tensor of
/// `bytes` (its file's size).
inline constexpr int64_t nvmeBlockBytes(int64_t bytes) {
  return (bytes + kNvmeBlockBytes - 1) / kNvmeBlockBytes * kNvmeBlockBytes;
}

/// What a persistent tensor holds, spelled as the sched dialect's role:
/// param, grad, master (fp32 weights), exp_avg, exp_avg_sq (Adam moments).
enum class TensorRole : uint8_t { Param, Grad, Master, ExpAvg, ExpAvgSq };
inline constexpr TensorRole kAllTensorRoles[] = {
    TensorRole::Param, TensorRole::Grad, TensorRole::Master, TensorRole::ExpAvg,
    TensorRole::ExpAvgSq};
const char *roleName(TensorRole role);
std::optional<TensorRole> parseRole(std::string_view name);

/// A phase of the training step, named as the sched dialect's phase
/// functions: micro_step (forward and backward of one micro-batch, run
/// gradient_accumulation_steps times) and optimizer_step.
enum class PhaseKind : uint8_t { MicroStep, OptimizerStep };
inline constexpr PhaseKind kAllPhaseKinds[] = {PhaseKind::MicroStep,
                                               PhaseKind::OptimizerStep};
const char *phaseName(PhaseKind phase);
std::optional<PhaseKind> parsePhase(std::string_view name);

/// The kind's name in the plan ("causal_attention").
const char *opKindName(OpKind kind);
std::optional<OpKind> parseOpKind(std::string_view name);
/// A `model` dialect op: a kernel of the runtime, FLOPs in the cost model.
bool isModelOp(OpKind kind);
/// An asynchronous start (`*_start`), completed by a later `wait`.
bool isAsyncStart(OpKind kind);

// Typed attributes. `fields(v)` lists each attribute once, as v(name, member);
// a bool is a unit attribute (written only when set, false when absent), a
// std::optional one that may be absent; every other field is required.

struct NoAttrs {
  template <typename V> void fields(V &&) {}
};

/// add: `in_place`, a gradient sum that may take its lhs's memory
/// (zero-plan-memory decides; the op's offsets say).
struct AddAttrs {
  bool inPlace = false;
  template <typename V> void fields(V &&v) { v("in_place", inPlace); }
};

/// layernorm and its backward.
struct NormAttrs {
  double epsilon = 0;
  template <typename V> void fields(V &&v) { v("epsilon", epsilon); }
};

/// rmsnorm and its backward: `unit_offset` scales by 1 + weight (Gemma).
struct RMSNormAttrs {
  double epsilon = 0;
  bool unitOffset = false;
  template <typename V> void fields(V &&v) {
    v("epsilon", epsilon);
    v("unit_offset", unitOffset);
  }
};

/// cross_entropy and its backward: the softmax runs over the first
/// `classes` logits of a row (a padded vocabulary's real size); absent,
/// over all of them.
struct CrossEntropyAttrs {
  std::optional<int64_t> classes;
  template <typename V> void fields(V &&v) { v("classes", classes); }
  /// The classes of logits whose last dimension is `vocab`.
  int64_t classesOf(int64_t vocab) const { return classes.value_or(vocab); }
};

/// scale: the factor, rounded to the tensor's dtype by the kernel.
struct ScaleAttrs {
  double factor = 0;
  template <typename V> void fields(V &&v) { v("factor", factor); }
};

struct RotaryAttrs {
  int64_t headDim = 0;
  double theta = 0;
  template <typename V> void fields(V &&v) {
    v("head_dim", headDim);
    v("theta", theta);
  }
};

/// causal_attention and its backward; `window` 0 is no sliding window.
struct AttentionAttrs {
  int64_t numHeads = 0, numKvHeads = 0;
  AttentionKernel kernel = AttentionKernel::Flash;
  int64_t window = 0;
  template <typename V> void fields(V &&v) {
    v("num_heads", numHeads);
    v("num_kv_heads", numKvHeads);
    v("kernel", kernel);
    v("window", window);
  }
};

/// moe_router: the experts per token and whether their weights are
/// renormalised (Mixtral's norm_topk_prob).
struct MoeRouterAttrs {
  int64_t topK = 0;
  bool normalize = false;
  template <typename V> void fields(V &&v) {
    v("top_k", topK);
    v("normalize", normalize);
  }
};

/// moe_router_backward: its forward's `normalize`.
struct MoeNormalizeAttrs {
  bool normalize = false;
  template <typename V> void fields(V &&v) { v("normalize", normalize); }
};

/// moe_dispatch, moe_combine, moe_combine_backward (expert parallelism's
/// split of moe_experts): the layer's experts.
struct MoeExpertCountAttrs {
  int64_t numExperts = 0;
  template <typename V> void fields(V &&v) { v("num_experts", numExperts); }
};

/// moe_local_experts: the layer's experts, the experts per token, and the
/// planning assumption its rows were planned for.
struct MoeLocalExpertsAttrs {
  int64_t numExperts = 0, topK = 0;
  std::optional<double> maxExpertShare;
  template <typename V> void fields(V &&v) {
    v("num_experts", numExperts);
    v("top_k", topK);
    v("max_expert_share", maxExpertShare);
  }
};

/// What an expert-parallel all-to-all carries, spelled as the sched
/// dialect's AllToAllPurpose.
enum class AllToAllPurpose : uint8_t {
  Dispatch,
  Combine,
  CombineGrad,
  DispatchGrad
};
inline constexpr AllToAllPurpose kAllAllToAllPurposes[] = {
    AllToAllPurpose::Dispatch, AllToAllPurpose::Combine,
    AllToAllPurpose::CombineGrad, AllToAllPurpose::DispatchGrad};
const char *allToAllPurposeName(AllToAllPurpose purpose);
std::optional<AllToAllPurpose> parseAllToAllPurpose(std::string_view name);

/// all_to_all_start: what it carries, and the busiest rank's bytes under
/// the planning assumption and in the worst case.
struct AllToAllAttrs {
  AllToAllPurpose purpose = AllToAllPurpose::Dispatch;
  int64_t bytes = 0, worstBytes = 0;
  template <typename V> void fields(V &&v) {
    v("purpose", purpose);
    v("bytes", bytes);
    v("worst_bytes", worstBytes);
  }
};

/// moe_load_balancing_loss and its backward: Mixtral's
/// router_aux_loss_coef and the experts per token.
struct LoadBalancingAttrs {
  double coefficient = 0;
  int64_t topK = 0;
  template <typename V> void fields(V &&v) {
    v("coefficient", coefficient);
    v("top_k", topK);
  }
};

/// moe_experts: the planning assumption on the busiest expert's share of
/// the routed rows (absent: uniform); no effect on what the kernel computes.
struct MoeExpertsAttrs {
  std::optional<double> maxExpertShare;
  template <typename V> void fields(V &&v) {
    v("max_expert_share", maxExpertShare);
  }
};

struct BackwardSeedAttrs {
  int64_t microSteps = 0;
  bool lossScaling = false;
  template <typename V> void fields(V &&v) {
    v("micro_steps", microSteps);
    v("loss_scaling", lossScaling);
  }
};

struct ReadAttrs {
  std::string tensor;
  template <typename V> void fields(V &&v) { v("tensor", tensor); }
};

struct AccumulateAttrs {
  std::string tensor;
  int64_t offset = 0;
  template <typename V> void fields(V &&v) {
    v("tensor", tensor);
    v("offset", offset);
  }
};

/// zero_grads, all_reduce_start, fetch_start.
struct TensorListAttrs {
  std::vector<std::string> tensors;
  template <typename V> void fields(V &&v) { v("tensors", tensors); }
};

struct AllGatherAttrs {
  std::vector<std::string> params;
  template <typename V> void fields(V &&v) { v("params", params); }
};

struct ReduceScatterAttrs {
  std::vector<std::string> targets;
  std::vector<int64_t> offsets;
  bool allReduce = false;
  template <typename V> void fields(V &&v) {
    v("targets", targets);
    v("offsets", offsets);
    v("all_reduce", allReduce);
  }
};

struct TargetListAttrs {
  std::vector<std::string> targets;
  template <typename V> void fields(V &&v) { v("targets", targets); }
};

struct CopyAttrs {
  std::vector<std::string> sources, destinations;
  template <typename V> void fields(V &&v) {
    v("sources", sources);
    v("destinations", destinations);
  }
};

struct UnscaleGradsAttrs {
  std::vector<std::string> grads;
  double staticLossScale = 0;
  int64_t initialScalePower = 0, lossScaleWindow = 0, hysteresis = 0;
  double minLossScale = 0;
  template <typename V> void fields(V &&v) {
    v("grads", grads);
    v("static_loss_scale", staticLossScale);
    v("initial_scale_power", initialScalePower);
    v("loss_scale_window", lossScaleWindow);
    v("hysteresis", hysteresis);
    v("min_loss_scale", minLossScale);
  }
};

struct ClipGradNormAttrs {
  std::vector<std::string> grads;
  double maxNorm = 0;
  template <typename V> void fields(V &&v) {
    v("grads", grads);
    v("max_norm", maxNorm);
  }
};

struct AdamAttrs {
  std::string param, grad;
  std::optional<std::string> master;
  std::string expAvg, expAvgSq;
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0;
  bool adamw = false;
  /// LAMB (model.adam_update's description) with its trust-ratio bounds.
  bool lamb = false;
  std::optional<double> maxCoeff, minCoeff;
  /// The step on the raw moments (DeepSpeed's `bias_correction: false`);
  /// absent, as in plans written before it existed, the moments are
  /// corrected.
  bool noBiasCorrection = false;
  Placement on = Placement::Device; ///< Where the update runs.
  template <typename V> void fields(V &&v) {
    v("param", param);
    v("grad", grad);
    v("master", master);
    v("exp_avg", expAvg);
    v("exp_avg_sq", expAvgSq);
    v("lr", lr);
    v("beta1", beta1);
    v("beta2", beta2);
    v("eps", eps);
    v("weight_decay", weightDecay);
    v("adamw", adamw);
    v("lamb", lamb);
    v("max_coeff", maxCoeff);
    v("min_coeff", minCoeff);
    v("no_bias_correction", noBiasCorrection);
    v("on", on);
  }
};

using PlanOpAttrs =
    std::variant<NoAttrs, AddAttrs, NormAttrs, RMSNormAttrs, CrossEntropyAttrs,
                 ScaleAttrs, RotaryAttrs, AttentionAttrs, MoeRouterAttrs,
                 MoeNormalizeAttrs, MoeExpertsAttrs, MoeExpertCountAttrs,
                 MoeLocalExpertsAttrs, AllToAllAttrs, LoadBalancingAttrs,
                 BackwardSeedAttrs, ReadAttrs, AccumulateAttrs, TensorListAttrs,
                 AllGatherAttrs, ReduceScatterAttrs, TargetListAttrs, CopyAttrs,
                 UnscaleGradsAttrs, ClipGradNormAttrs, AdamAttrs>;

/// The attributes of `kind`, default-initialized (the struct its kind takes).
PlanOpAttrs defaultAttrs(OpKind kind);

} // namespace zeroc

#endif // ZEROC_PLAN_PLANOPS_H
