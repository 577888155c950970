//===- Plan.h - The plan file: what the runtime takes from the compiler -*- C++
//-*-===//
//
// The plan is the only thing zerorun reads from zeroc: the resolved config,
// the persistent tensors with their roles and shard layouts, the flat
// groups, the streams, and per phase (micro-step, optimizer step) the ordered
// op list over transient values, plus the predicted communication. This
// header is the format, in one place: the compiler fills a Plan and writes
// it; `zeroc inspect` and the runtime read it back through readPlan, which
// checks every field. MLIR-free. docs/plan-format.md documents the JSON.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PLAN_PLAN_H
#define ZEROC_PLAN_PLAN_H

#include "zeroc/Plan/PlanOps.h"
#include "zeroc/Support/DType.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/ExpertParallel.h"
#include "zeroc/Support/Json.h"
#include "zeroc/Support/LinearGeometry.h"
#include "zeroc/Support/Recompute.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zeroc {

/// The format name and the version this build reads and writes. A reader
/// refuses other versions.
inline constexpr const char *kPlanFormat = "zeroc-plan";
inline constexpr int kPlanVersion = 9;

/// A persistent per-rank tensor (`sched.tensor`).
struct PlanTensor {
  std::string name;
  TensorRole role = TensorRole::Param;
  std::string of; ///< Owning parameter or flat group; empty for params.
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel = 0;      ///< Of the full tensor.
  bool sharded = false;   ///< Split across ranks (ShardLayout.h).
  int64_t localNumel = 0; ///< Elements each rank stores, padding included.
  Placement placement = Placement::Device;
  std::string init; ///< Parameters: "zeros", "ones", "normal(STD)".
  /// A padded table (model.param's valid_rows): the rows of the first
  /// dimension that are not padding; 0 when every row is. Padding rows
  /// start at zero, and Hugging Face checkpoints hold only the valid rows.
  int64_t validRows = 0;
  /// An expert parameter or its state under expert parallelism: this
  /// rank's experts, sharded over the expert-data-parallel group.
  bool expert = false;

  /// The elements before a padded table's padding rows (all of them when
  /// it is not padded).
  int64_t validNumel() const {
    if (!validRows || shape.empty() || shape[0] <= 0)
      return numel;
    return validRows * (numel / shape[0]);
  }
};

/// Stages 1 and 2: parameters flattened into one partitioned buffer.
struct PlanFlatGroup {
  std::string name;
  std::vector<std::string> params;
  std::vector<int64_t> offsets; ///< Where each parameter starts.
  int64_t numel = 0;
  int64_t padded = 0;
  int64_t partition = 0; ///< padded / world_size.
};

/// A transient tensor: an SSA value of a phase.
struct PlanValue {
  int64_t id = 0;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  int64_t offset = -1; ///< In the phase's arena; -1 for views and unplanned.
};

/// One op of a phase, in program order.
struct PlanOp {
  int64_t index = 0;
  OpKind kind = OpKind::Return;
  /// The module it belongs to (its NameLoc), if any: for diagnostics only.
  std::string where;
  int64_t stream = 0;
  std::vector<int64_t> inputs;      ///< Value ids.
  std::vector<int64_t> outputs;     ///< Value ids.
  std::vector<std::string> tensors; ///< Persistent tensors it names, in order.
  std::vector<int64_t> deps;        ///< Indices of ops it must follow.
  PlanOpAttrs attrs;                ///< The struct `kind` takes (PlanOps.h).
  /// The checkpointed layer a recomputed forward op belongs to, or empty.
  std::string recompute;
  /// all_gather, reduce_scatter, all_reduce, all_to_all, or empty.
  std::string collective;
  /// The communicator group a collective runs over (ExpertParallel.h).
  CommGroupKind group = CommGroupKind::World;
  int64_t commElements = 0; ///< Logical elements the collective covers.
  int64_t flops = 0;        ///< Compute ops: floating-point operations.
  int64_t bytes = 0;        ///< Compute ops: device memory read and written.
  /// Scratch the op needs while it runs (zeroc/Support/Workspace.h: receive
  /// and padded send buffers, gathered flat buffers, update partitions), and
  /// where zero-plan-memory placed it in the arena.
  int64_t workspaceBytes = 0;
  int64_t workspaceOffset = -1;

  const char *kindName() const { return opKindName(kind); }
  /// The typed attributes; `T` must be the struct of `kind`.
  template <typename T> const T &attrsAs() const { return std::get<T>(attrs); }
};

/// What zero-plan-memory found for a phase: its arena, and the peak of
/// live transient bytes with what is live there.
struct PlanPhaseMemory {
  int64_t arenaBytes = 0;
  int64_t peakLiveBytes = 0;
  int64_t peakOp = 0;
  int64_t activations = 0;
  int64_t gatherBuffers = 0;
  int64_t reduceBuckets = 0;
  int64_t workspace = 0;
  /// Live transient bytes during each op, by op index (optional).
  std::vector<int64_t> liveBytes;
};

struct PlanPhase {
  PhaseKind kind = PhaseKind::MicroStep;
  int64_t runsPerStep = 1;
  std::vector<int64_t> args; ///< Value ids of the function arguments.
  std::vector<PlanValue> values;
  std::vector<PlanOp> ops;
  std::optional<PlanPhaseMemory> memory; ///< Absent if memory was not planned.

  /// The value `id` (a scan of `values`); null when there is none.
  const PlanValue *findValue(int64_t id) const;
};

/// The streams of `phase` (other than `computeStream`) that hold nothing
/// but collectives (ops with a `collective`) and `wait`s. At world size 1
/// a collective is a local copy, so a CPU rank runs such a stream's ops on
/// the compute stream's thread, in program order, instead of starting a
/// thread for it each phase run (docs/zerorun.md, "Streams and threads");
/// the simulator schedules them so (docs/cost-model.md).
std::vector<int64_t> collectiveOnlyStreams(const PlanPhase &phase,
                                           int64_t computeStream);

/// `kind`'s geometry from its first input and first output, as the kernels
/// take them (runtime/kernels/cpu/Linear.h): linear x [..., in] ->
/// y [..., out]; linear_grad_input dy [..., out] -> dx [..., in];
/// linear_grad_weight dy [..., out] -> dw [out, in]. nullopt for another
/// kind or shapes that are not such a GEMM.
std::optional<LinearGeometry>
linearGeometry(OpKind kind, const std::vector<int64_t> &firstInput,
               const std::vector<int64_t> &firstOutput);

/// Elements each rank sends per step, by collective kind, before bucket
/// padding: the ZeRO paper's accounting (Collectives.h).
struct CommVolume {
  double allGather = 0, reduceScatter = 0, allReduce = 0, allToAll = 0;
  double total() const {
    return allGather + reduceScatter + allReduce + allToAll;
  }
};

struct PlanModel {
  std::string name;
  int64_t params = 0;
  DType dtype = DType::F32;
  int64_t microBatch = 0;
  int64_t seqLen = 0;
  /// The Hugging Face config.json the model was generated from (null for a
  /// hand-written model): its `model_type` picks the checkpoint name
  /// mapping (zeroc/Checkpoint/HFCheckpoint.h).
  nlohmann::json hfConfig;
};

struct Plan {
  std::string generator;
  PlanModel model;
  int64_t worldSize = 1;
  /// DeepSpeed-MoE's ep_size: the ranks each MoE layer's experts are split
  /// over (1: none). With the world size it fixes the communicator groups.
  int64_t expertParallelSize = 1;
  int64_t stage = 0;
  int64_t gradientAccumulationSteps = 1;
  /// What the micro-step recomputes (Recompute.h); the ops it recomputes
  /// carry PlanOp::recompute.
  RecomputePolicy recompute;
  nlohmann::json config =
      nlohmann::json::object();     ///< Resolved DeepSpeed JSON.
  std::vector<std::string> streams; ///< Name of each stream id.
  std::vector<PlanTensor> tensors;
  std::vector<PlanFlatGroup> flatGroups;
  std::vector<PlanPhase> phases;
  CommVolume comm;
  /// The same per communicator group (only groups that carry traffic).
  std::map<CommGroupKind, CommVolume> commByGroup;

  const PlanTensor *findTensor(const std::string &name) const;
  /// Every plan read by readPlan has each phase once.
  const PlanPhase *findPhase(PhaseKind kind) const;
  /// The ranks of `kind`'s group (ExpertParallel.h).
  int64_t groupSize(CommGroupKind kind) const {
    return commGroupShape(kind, worldSize, expertParallelSize).size;
  }
  /// The ranks a sharded tensor is split over: the expert-data-parallel
  /// group for expert state, the world otherwise.
  int64_t shardRanks(const PlanTensor &t) const {
    return groupSize(t.expert ? CommGroupKind::ExpertDataParallel
                              : CommGroupKind::World);
  }
};

/// The compute stream's id: the stream named "compute", else 0. The one
/// definition the simulator and zerorun's stream scheduling use.
int64_t computeStream(const Plan &plan);

/// What each rank sends per step, by collective kind, in total and per
/// group: every collective's commElementsPerRank over its group's ranks,
/// as often as its phase runs. The plan writer records it; the estimator
/// of `zeroc advise` recomputes it the same way.
void accountComm(Plan &plan);

nlohmann::json toJson(const Plan &plan);

/// Reads and checks a plan: the format name and version, every required
/// field and its type, value ids, op dependencies and tensor names. Errors
/// name the file, the line and column, the JSON path and what was expected.
Expected<Plan> readPlan(const JsonDocument &doc);

/// A padded vocabulary's facts agree (docs/plan-format.md, `valid_rows`):
/// every parameter with `valid_rows` has the same count, none is an expert
/// tensor, and every cross_entropy and its backward has `classes` equal to
/// it; without padded tables, `classes` (if given) is the logits' width; and
/// no `classes` exceeds the width. The first problem, and where it is in
/// the plan's JSON (a tensor's `valid_rows`, an op's `attrs`); none when
/// they agree. readPlan checks it; so does the compiler before it writes.
std::optional<std::pair<JsonPath, std::string>>
vocabPaddingProblem(const Plan &plan);

class JsonFieldReader;
/// The fields of a persistent tensor as the plan writes them (a checkpoint
/// manifest repeats them), checked: a known role and dtype, `numel` the
/// shape's product, `local_numel` the shard layout's at `worldSize`. With
/// `planFields`, also `placement` and `init` (a manifest records neither).
/// An `expert` tensor is sharded over the `worldSize / expertParallelSize`
/// ranks of its expert-data-parallel group.
void readTensorFields(JsonFieldReader &r, const nlohmann::json &j,
                      const JsonPath &at, int64_t worldSize, bool planFields,
                      PlanTensor &t, int64_t expertParallelSize = 1);
/// The same fields written back (readTensorFields reads them).
nlohmann::json tensorFieldsJson(const PlanTensor &t, bool planFields);
nlohmann::json flatGroupFieldsJson(const PlanFlatGroup &g);
/// The fields of a flat group (its parameters are checked by the caller,
/// against its own tensors).
void readFlatGroupFields(JsonFieldReader &r, const nlohmann::json &j,
                         const JsonPath &at, PlanFlatGroup &g);
Expected<Plan> loadPlan(const std::string &path);

/// The `attrs` object of an op, and back, checked against its kind's
/// attribute struct: errors name the op's index, kind and the field.
nlohmann::json attrsToJson(const PlanOpAttrs &attrs);
PlanOpAttrs readOpAttrs(JsonFieldReader &r, const nlohmann::json &attrs,
                        const JsonPath &at, int64_t index, OpKind kind);

} // namespace zeroc

#endif // ZEROC_PLAN_PLAN_H
