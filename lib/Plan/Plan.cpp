//===- Plan.cpp - Writing and checking plan files -------------------------===//

#include "zeroc/Plan/Plan.h"

#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/JsonReader.h"
#include "zeroc/Support/Limits.h"

#include "zeroc/Support/ShardLayout.h"

#include <map>
#include <set>

using nlohmann::json;

namespace zeroc {

const PlanTensor *Plan::findTensor(const std::string &name) const {
  for (const PlanTensor &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

const PlanPhase *Plan::findPhase(PhaseKind kind) const {
  for (const PlanPhase &p : phases)
    if (p.kind == kind)
      return &p;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

static json commVolumeJson(const CommVolume &c) {
  return {{"all_gather", c.allGather},
          {"reduce_scatter", c.reduceScatter},
          {"all_reduce", c.allReduce},
          {"all_to_all", c.allToAll},
          {"total", c.total()}};
}

static json commJson(const Plan &plan) {
  json j = commVolumeJson(plan.comm);
  json byGroup = json::object();
  for (const auto &[group, volume] : plan.commByGroup)
    byGroup[commGroupName(group)] = commVolumeJson(volume);
  j["by_group"] = std::move(byGroup);
  return j;
}

static std::optional<CommGroupKind> parseCommGroup(std::string_view name) {
  for (CommGroupKind kind : kAllCommGroupKinds)
    if (name == commGroupName(kind))
      return kind;
  return std::nullopt;
}

void accountComm(Plan &plan) {
  plan.comm = CommVolume{};
  plan.commByGroup.clear();
  for (const PlanPhase &phase : plan.phases)
    for (const PlanOp &op : phase.ops) {
      std::optional<CollectiveKind> kind;
      for (CollectiveKind k :
           {CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce, CollectiveKind::AllToAll})
        if (op.collective == collectiveName(k))
          kind = k;
      if (!kind)
        continue;
      double volume = double(phase.runsPerStep) *
                      commElementsPerRank(*kind, double(op.commElements),
                                          plan.groupSize(op.group));
      for (CommVolume *v : {&plan.comm, &plan.commByGroup[op.group]}) {
        switch (*kind) {
        case CollectiveKind::AllGather:
          v->allGather += volume;
          break;
        case CollectiveKind::ReduceScatter:
          v->reduceScatter += volume;
          break;
        case CollectiveKind::AllReduce:
          v->allReduce += volume;
          break;
        case CollectiveKind::AllToAll:
          v->allToAll += volume;
          break;
        }
      }
    }
}

json tensorFieldsJson(const PlanTensor &t, bool planFields) {
  json j = {{"name", t.name},
            {"role", roleName(t.role)},
            {"dtype", std::string(dtypeName(t.dtype))},
            {"shape", t.shape},
            {"numel", t.numel},
            {"sharded", t.sharded},
            {"local_numel", t.localNumel}};
  if (!t.of.empty())
    j["of"] = t.of;
  if (t.expert)
    j["expert"] = true;
  if (planFields) {
    j["placement"] = placementName(t.placement);
    if (!t.init.empty())
      j["init"] = t.init;
  }
  // A checkpoint's manifest too: its Hugging Face export drops the padding.
  if (t.validRows)
    j["valid_rows"] = t.validRows;
  return j;
}

json flatGroupFieldsJson(const PlanFlatGroup &g) {
  return {{"name", g.name},   {"params", g.params}, {"offsets", g.offsets},
          {"numel", g.numel}, {"padded", g.padded}, {"partition", g.partition}};
}

json toJson(const Plan &plan) {
  json tensors = json::array();
  for (const PlanTensor &t : plan.tensors)
    tensors.push_back(tensorFieldsJson(t, /*planFields=*/true));
  json groups = json::array();
  for (const PlanFlatGroup &g : plan.flatGroups)
    groups.push_back(flatGroupFieldsJson(g));
  json phases = json::array();
  for (const PlanPhase &p : plan.phases) {
    json values = json::array();
    for (const PlanValue &v : p.values)
      values.push_back({{"id", v.id},
                        {"dtype", std::string(dtypeName(v.dtype))},
                        {"shape", v.shape},
                        {"bytes", v.bytes},
                        {"offset", v.offset}});
    json ops = json::array();
    for (const PlanOp &op : p.ops) {
      json j = {{"index", op.index},     {"kind", op.kindName()},
                {"stream", op.stream},   {"inputs", op.inputs},
                {"outputs", op.outputs}, {"deps", op.deps}};
      if (!op.where.empty())
        j["where"] = op.where;
      if (!op.tensors.empty())
        j["tensors"] = op.tensors;
      if (json attrs = attrsToJson(op.attrs); !attrs.empty())
        j["attrs"] = std::move(attrs);
      if (!op.recompute.empty())
        j["recompute"] = op.recompute;
      if (!op.collective.empty()) {
        j["collective"] = op.collective;
        j["group"] = commGroupName(op.group);
        j["comm_elements"] = op.commElements;
      }
      if (op.flops)
        j["flops"] = op.flops;
      if (op.bytes)
        j["bytes"] = op.bytes;
      if (op.workspaceBytes) {
        j["workspace_bytes"] = op.workspaceBytes;
        j["workspace_offset"] = op.workspaceOffset;
      }
      ops.push_back(std::move(j));
    }
    json phase = {{"name", phaseName(p.kind)},
                  {"runs_per_step", p.runsPerStep},
                  {"args", p.args},
                  {"values", std::move(values)},
                  {"ops", std::move(ops)}};
    if (p.memory)
      phase["memory"] = {{"arena_bytes", p.memory->arenaBytes},
                         {"peak_live_bytes", p.memory->peakLiveBytes},
                         {"peak_op", p.memory->peakOp},
                         {"activations", p.memory->activations},
                         {"gather_buffers", p.memory->gatherBuffers},
                         {"reduce_buckets", p.memory->reduceBuckets},
                         {"workspace", p.memory->workspace},
                         {"live_bytes", p.memory->liveBytes}};
    phases.push_back(std::move(phase));
  }
  // Each group with the rule that builds rank r's: size ranks stride apart
  // (zeroc/Support/ExpertParallel.h).
  json commGroups = json::array();
  for (CommGroupKind kind : kAllCommGroupKinds) {
    CommGroupShape shape =
        commGroupShape(kind, plan.worldSize, plan.expertParallelSize);
    commGroups.push_back({{"name", commGroupName(kind)},
                          {"size", shape.size},
                          {"stride", shape.stride}});
  }
  json streams = json::array();
  for (size_t i = 0; i < plan.streams.size(); ++i)
    streams.push_back({{"id", i}, {"name", plan.streams[i]}});
  return {{"format", kPlanFormat},
          {"version", kPlanVersion},
          {"generator", plan.generator},
          {"model",
           {{"name", plan.model.name},
            {"params", plan.model.params},
            {"dtype", std::string(dtypeName(plan.model.dtype))},
            {"micro_batch", plan.model.microBatch},
            {"seq_len", plan.model.seqLen},
            {"hf_config", plan.model.hfConfig}}},
          {"world_size", plan.worldSize},
          {"expert_parallel_size", plan.expertParallelSize},
          {"groups", std::move(commGroups)},
          {"stage", plan.stage},
          {"gradient_accumulation_steps", plan.gradientAccumulationSteps},
          {"recompute",
           {{"mode", recomputeModeName(plan.recompute.mode)},
            {"every", plan.recompute.every}}},
          {"config", plan.config},
          {"streams", std::move(streams)},
          {"tensors", std::move(tensors)},
          {"flat_groups", std::move(groups)},
          {"phases", std::move(phases)},
          {"comm_elements_per_rank_per_step", commJson(plan)}};
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

/// Reads typed fields at JSON pointers, keeping the first error.

} // namespace

void readTensorFields(JsonFieldReader &r, const json &j, const JsonPath &at,
                      int64_t worldSize, bool planFields, PlanTensor &t,
                      int64_t expertParallelSize) {
  t.name = r.string(j, at, "name");
  t.role = r.enumOf(j, at, "role", kAllTensorRoles, roleName);
  t.of = r.string(j, at, "of", /*optional=*/true);
  t.dtype = r.dtype(j, at);
  t.shape = r.integers(j, at, "shape");
  t.numel = r.integer(j, at, "numel", 1);
  t.sharded = r.boolean(j, at, "sharded");
  t.localNumel = r.integer(j, at, "local_numel", 1);
  if (j.is_object() && j.contains("expert"))
    t.expert = r.boolean(j, at, "expert");
  if (planFields) {
    t.placement = r.enumOf(j, at, "placement", kAllPlacements, placementName);
    t.init = r.string(j, at, "init", /*optional=*/true);
  }
  if (j.is_object() && j.contains("valid_rows"))
    t.validRows = r.integer(j, at, "valid_rows", 1);
  if (r.error)
    return;
  if (t.validRows && (t.role != TensorRole::Param || t.shape.empty() ||
                      t.validRows > t.shape[0])) {
    r.fail(at / "valid_rows",
           t.role != TensorRole::Param
               ? std::string("only a param tensor has valid_rows")
               : "valid_rows " + std::to_string(t.validRows) +
                     " is more than the first dimension of the shape " +
                     shapeString(t.shape));
    return;
  }
  if (shapeElements(t.shape) != t.numel)
    r.fail(at / "numel", "numel " + std::to_string(t.numel) +
                             " is not the product of the shape " +
                             shapeString(t.shape));
  else if (!checkedBytes(t.numel, bytesPerElement(t.dtype)))
    r.fail(at / "numel", "numel " + std::to_string(t.numel) +
                             " is too large: its bytes overflow 64 bits");
  if (!r.error && t.expert && expertParallelSize < 2)
    r.fail(at / "expert",
           "expert state without expert parallelism (expert_parallel_size "
           "is " +
               std::to_string(expertParallelSize) + ")");
  int64_t ranks = commGroupShape(t.expert ? CommGroupKind::ExpertDataParallel
                                          : CommGroupKind::World,
                                 worldSize, expertParallelSize)
                      .size;
  int64_t expectedLocal =
      t.sharded ? ParamShardLayout{t.numel, ranks}.shardSize() : t.numel;
  if (!r.error && t.localNumel != expectedLocal)
    r.fail(at / "local_numel",
           "expected " + std::to_string(expectedLocal) + " for a " +
               (t.sharded ? "sharded" : "replicated") +
               (t.expert ? " expert" : "") + " tensor of " +
               std::to_string(t.numel) + " elements over " +
               std::to_string(ranks) +
               (t.expert ? " expert-data-parallel" : "") + " ranks, found " +
               std::to_string(t.localNumel));
}

void readFlatGroupFields(JsonFieldReader &r, const json &j, const JsonPath &at,
                         PlanFlatGroup &g) {
  g.name = r.string(j, at, "name");
  g.params = r.strings(j, at, "params");
  g.offsets = r.integers(j, at, "offsets");
  g.numel = r.integer(j, at, "numel", 1);
  g.padded = r.integer(j, at, "padded", 1);
  g.partition = r.integer(j, at, "partition", 1);
}

/// A collective's group follows from what it moves, as zero-verify-schedule
/// proves of the schedule: tokens over the expert-parallel group, expert
/// state over the expert-data-parallel group, other state over the world.
static void checkCollectiveGroup(JsonFieldReader &r, const Plan &plan,
                                 const PlanOp &op, const JsonPath &at) {
  if (op.group != CommGroupKind::World && plan.expertParallelSize < 2) {
    r.fail(at / "group", std::string("op ") + std::to_string(op.index) + " (" +
                             op.kindName() + ") runs over the " +
                             commGroupName(op.group) +
                             " group, but the plan has no expert parallelism "
                             "(expert_parallel_size is 1)");
    return;
  }
  CommGroupKind expected = CommGroupKind::World;
  std::string why = "it moves non-expert state";
  if (op.kind == OpKind::AllToAllStart) {
    expected = CommGroupKind::ExpertParallel;
    why = "it exchanges tokens";
  } else {
    auto isExpert = [&](const std::string &name) {
      if (const PlanTensor *t = plan.findTensor(name))
        return t->expert;
      for (const PlanFlatGroup &g : plan.flatGroups)
        if (g.name == name && !g.params.empty())
          if (const PlanTensor *first = plan.findTensor(g.params.front()))
            return first->expert;
      return false;
    };
    for (size_t k = 0; k < op.tensors.size(); ++k) {
      bool expert = isExpert(op.tensors[k]);
      if (k && expert != isExpert(op.tensors[0])) {
        r.fail(at / "tensors", std::string("op ") + std::to_string(op.index) +
                                   " (" + op.kindName() +
                                   ") mixes expert state with other state: "
                                   "one collective runs over one group");
        return;
      }
      if (expert) {
        expected = CommGroupKind::ExpertDataParallel;
        why = "it moves expert state (\"" + op.tensors[k] + "\")";
      }
    }
  }
  if (op.group != expected)
    r.fail(at / "group", std::string("op ") + std::to_string(op.index) + " (" +
                             op.kindName() + ") runs over the " +
                             commGroupName(op.group) + " group, but " + why +
                             ": expected " + commGroupName(expected));
}

Expected<Plan> readPlan(const JsonDocument &doc) {
  const json &root = doc.root();
  JsonFieldReader r(doc, "plan");
  Plan plan;
  std::string format = r.string(root, JsonPath(), "format");
  if (r.error)
    return *r.error;
  if (format != kPlanFormat)
    return doc.error("/format", "not a zeroc plan: format is \"" + format +
                                    "\", expected \"" + kPlanFormat + "\"");
  int64_t version = r.integer(root, JsonPath(), "version");
  if (r.error)
    return *r.error;
  if (version != kPlanVersion)
    return doc.error("/version",
                     "plan format version " + std::to_string(version) +
                         " is not supported by this build, which reads "
                         "version " +
                         std::to_string(kPlanVersion) +
                         "; recompile the plan with this zeroc");

  plan.generator = r.string(root, JsonPath(), "generator");
  if (const json *model = r.member(root, JsonPath(), "model")) {
    plan.model.name = r.string(*model, JsonPath() / "model", "name");
    plan.model.params = r.integer(*model, JsonPath() / "model", "params");
    plan.model.dtype = r.dtype(*model, JsonPath() / "model");
    plan.model.microBatch =
        r.integer(*model, JsonPath() / "model", "micro_batch", 1);
    plan.model.seqLen = r.integer(*model, JsonPath() / "model", "seq_len", 1);
    if (const json *hf = r.member(*model, JsonPath() / "model", "hf_config")) {
      if (!hf->is_null() && !hf->is_object())
        r.fail(JsonPath() / "model" / "hf_config",
               "expected a Hugging Face config object or null");
      else
        plan.model.hfConfig = *hf;
    }
  }
  plan.worldSize = r.integer(root, JsonPath(), "world_size", 1);
  if (!r.error && plan.worldSize > limits::kMaxWorldSize)
    r.fail(JsonPath() / "world_size",
           "expected at most 2147483647 ranks (MPI and NCCL number ranks "
           "with 32-bit ints), found " +
               std::to_string(plan.worldSize));
  plan.expertParallelSize =
      r.integer(root, JsonPath(), "expert_parallel_size", 1);
  if (!r.error && plan.worldSize % plan.expertParallelSize != 0)
    r.fail(JsonPath() / "expert_parallel_size",
           "expert_parallel_size " + std::to_string(plan.expertParallelSize) +
               " does not divide world_size " + std::to_string(plan.worldSize) +
               ": the expert-parallel groups partition the ranks");
  // The groups as written must be the ones the sizes build: a reader of
  // the plan may take them as they are.
  const json &commGroups = r.array(root, JsonPath(), "groups");
  std::set<CommGroupKind> seenGroups;
  for (size_t i = 0; i < commGroups.size() && !r.error; ++i) {
    JsonPath at = JsonPath() / "groups" / std::to_string(i);
    std::string name = r.string(commGroups[i], at, "name");
    int64_t size = r.integer(commGroups[i], at, "size", 1);
    int64_t stride = r.integer(commGroups[i], at, "stride", 1);
    if (r.error)
      break;
    std::optional<CommGroupKind> kind = parseCommGroup(name);
    if (!kind) {
      r.fail(at / "name", "unknown communicator group \"" + name +
                              "\" (expected world, expert_parallel or "
                              "expert_data_parallel)");
      break;
    }
    if (!seenGroups.insert(*kind).second) {
      r.fail(at / "name", "duplicate group \"" + name + "\"");
      break;
    }
    CommGroupShape shape =
        commGroupShape(*kind, plan.worldSize, plan.expertParallelSize);
    if (size != shape.size || stride != shape.stride)
      r.fail(at, "group \"" + name + "\" has size " + std::to_string(size) +
                     " and stride " + std::to_string(stride) +
                     ", but world_size " + std::to_string(plan.worldSize) +
                     " and expert_parallel_size " +
                     std::to_string(plan.expertParallelSize) +
                     " build it with size " + std::to_string(shape.size) +
                     " and stride " + std::to_string(shape.stride));
  }
  for (CommGroupKind kind : kAllCommGroupKinds)
    if (!r.error && !seenGroups.count(kind))
      r.fail(JsonPath() / "groups",
             std::string("no group named \"") + commGroupName(kind) + "\"");
  plan.stage = r.integer(root, JsonPath(), "stage");
  if (!r.error && plan.stage > 3)
    r.fail(JsonPath() / "stage",
           "expected 0, 1, 2 or 3, found " + std::to_string(plan.stage));
  plan.gradientAccumulationSteps =
      r.integer(root, JsonPath(), "gradient_accumulation_steps", 1);
  if (const json *config = r.member(root, JsonPath(), "config")) {
    if (!config->is_object())
      r.fail(JsonPath() / "config",
             "expected an object, found " + describeJsonType(*config));
    else
      plan.config = *config;
  }
  if (const json *recompute = r.member(root, JsonPath(), "recompute")) {
    JsonPath at = JsonPath() / "recompute";
    plan.recompute.mode =
        r.enumOf(*recompute, at, "mode", kAllRecomputeModes, recomputeModeName);
    plan.recompute.every = r.integer(*recompute, at, "every", 1);
  }

  const json &streams = r.array(root, JsonPath(), "streams");
  for (size_t i = 0; i < streams.size() && !r.error; ++i) {
    JsonPath at = JsonPath() / "streams" / std::to_string(i);
    if (r.integer(streams[i], at, "id") != int64_t(i) && !r.error)
      r.fail(at / "id", "stream ids must be 0, 1, 2, ... in order");
    plan.streams.push_back(r.string(streams[i], at, "name"));
  }

  std::set<std::string> names;
  const json &tensors = r.array(root, JsonPath(), "tensors");
  for (size_t i = 0; i < tensors.size() && !r.error; ++i) {
    const json &j = tensors[i];
    JsonPath at = JsonPath() / "tensors" / std::to_string(i);
    PlanTensor t;
    readTensorFields(r, j, at, plan.worldSize, /*planFields=*/true, t,
                     plan.expertParallelSize);
    if (!r.error && !names.insert(t.name).second)
      r.fail(at / "name", "duplicate tensor name \"" + t.name + "\"");
    plan.tensors.push_back(std::move(t));
  }
  // What a rank holds must be countable: sums of these are taken everywhere.
  int64_t rankBytes = 0;
  for (size_t i = 0; i < plan.tensors.size() && !r.error; ++i) {
    const PlanTensor &t = plan.tensors[i];
    std::optional<int64_t> bytes =
        checkedBytes(t.localNumel, bytesPerElement(t.dtype));
    std::optional<int64_t> sum =
        bytes ? checkedAdd(rankBytes, *bytes) : std::nullopt;
    if (!sum || *sum > limits::kMaxCount)
      r.fail(JsonPath() / "tensors" / std::to_string(i) / "local_numel",
             "the tensors of a rank come to more than 2^62 bytes here");
    else
      rankBytes = *sum;
  }

  std::map<std::string, const PlanTensor *> byName;
  for (const PlanTensor &t : plan.tensors)
    byName[t.name] = &t;
  const json &groups = r.array(root, JsonPath(), "flat_groups");
  for (size_t i = 0; i < groups.size() && !r.error; ++i) {
    const json &j = groups[i];
    JsonPath at = JsonPath() / "flat_groups" / std::to_string(i);
    PlanFlatGroup g;
    readFlatGroupFields(r, j, at, g);
    if (!r.error && !names.insert(g.name).second)
      r.fail(at / "name", "duplicate name \"" + g.name +
                              "\": a tensor or flat group has it already");
    std::vector<int64_t> numels;
    std::optional<bool> expert; // The members' marking, all alike.
    for (size_t k = 0; k < g.params.size() && !r.error; ++k) {
      auto it = byName.find(g.params[k]);
      if (it == byName.end())
        r.fail(at / "params" / std::to_string(k),
               "unknown parameter \"" + g.params[k] + "\"");
      else if (it->second->role != TensorRole::Param)
        r.fail(at / "params" / std::to_string(k),
               "\"" + g.params[k] + "\" is a " + roleName(it->second->role) +
                   " tensor, not a parameter");
      else if (expert && *expert != it->second->expert)
        r.fail(at / "params" / std::to_string(k),
               "\"" + g.params[k] +
                   "\" flattens expert parameters with others: they are "
                   "data-parallel over different groups");
      else {
        expert = it->second->expert;
        numels.push_back(it->second->numel);
      }
    }
    PlanTensor marking;
    marking.expert = expert.value_or(false);
    int64_t groupRanks = plan.shardRanks(marking);
    if (!r.error && g.offsets.size() != g.params.size())
      r.fail(at / "offsets", "expected one offset per parameter");
    if (!r.error && !checkedSum(numels))
      r.fail(at / "params", "the parameters' numels overflow 64 bits");
    // The layout is ShardLayout.h's; the runtime finds parameters by it.
    if (!r.error) {
      FlatGroupLayout layout(numels, groupRanks);
      for (size_t k = 0; k < g.offsets.size() && !r.error; ++k)
        if (g.offsets[k] != layout.offsets[k])
          r.fail(at / "offsets" / std::to_string(k),
                 "offset of \"" + g.params[k] + "\" is " +
                     std::to_string(g.offsets[k]) + ", expected " +
                     std::to_string(layout.offsets[k]) +
                     " (the parameters before it, back to back)");
      if (!r.error && g.numel != layout.numel)
        r.fail(at / "numel", "expected " + std::to_string(layout.numel) +
                                 ", the sum of the parameters' numels, "
                                 "found " +
                                 std::to_string(g.numel));
      if (!r.error && g.padded != layout.padded)
        r.fail(at / "padded",
               "expected " + std::to_string(layout.padded) +
                   ", numel rounded up to a multiple of 2 x " +
                   (marking.expert ? "the expert-data-parallel size"
                                   : "world_size") +
                   ", found " + std::to_string(g.padded));
    }
    if (!r.error && checkedMul(g.partition, groupRanks) != g.padded)
      r.fail(at / "partition",
             marking.expert
                 ? "partition x the expert-data-parallel size must equal "
                   "padded"
                 : "partition x world_size must equal padded");
    plan.flatGroups.push_back(std::move(g));
  }
  for (size_t i = 0; i < plan.tensors.size() && !r.error; ++i)
    if (!plan.tensors[i].of.empty() && !names.count(plan.tensors[i].of))
      r.fail(JsonPath() / "tensors" / std::to_string(i) / "of",
             "unknown owner \"" + plan.tensors[i].of + "\"");

  const json &phases = r.array(root, JsonPath(), "phases");
  std::set<PhaseKind> phaseKinds;
  for (size_t p = 0; p < phases.size() && !r.error; ++p) {
    const json &j = phases[p];
    JsonPath at = JsonPath() / "phases" / std::to_string(p);
    PlanPhase phase;
    phase.kind = r.enumOf(j, at, "name", kAllPhaseKinds, phaseName);
    if (!r.error && !phaseKinds.insert(phase.kind).second)
      r.fail(at / "name", "duplicate phase name \"" +
                              std::string(phaseName(phase.kind)) + "\"");
    phase.runsPerStep = r.integer(j, at, "runs_per_step", 1);
    phase.args = r.integers(j, at, "args");
    std::set<int64_t> ids;
    const json &values = r.array(j, at, "values");
    for (size_t i = 0; i < values.size() && !r.error; ++i) {
      JsonPath vat = at / "values" / std::to_string(i);
      PlanValue v;
      v.id = r.integer(values[i], vat, "id");
      v.dtype = r.dtype(values[i], vat);
      v.shape = r.integers(values[i], vat, "shape");
      v.bytes = r.integer(values[i], vat, "bytes");
      if (values[i].is_object() && values[i].contains("offset"))
        v.offset = r.integer(values[i], vat, "offset", -1);
      if (!r.error && !ids.insert(v.id).second)
        r.fail(vat / "id", "duplicate value id " + std::to_string(v.id));
      phase.values.push_back(std::move(v));
    }
    for (int64_t a : phase.args)
      if (!r.error && !ids.count(a))
        r.fail(at / "args", "unknown value id " + std::to_string(a));
    const json &ops = r.array(j, at, "ops");
    for (size_t i = 0; i < ops.size() && !r.error; ++i) {
      const json &o = ops[i];
      JsonPath oat = at / "ops" / std::to_string(i);
      PlanOp op;
      op.index = r.integer(o, oat, "index");
      if (!r.error && op.index != int64_t(i))
        r.fail(oat / "index", "ops must be numbered 0, 1, 2, ... in order");
      std::string kind = r.string(o, oat, "kind");
      if (std::optional<OpKind> k = parseOpKind(kind))
        op.kind = *k;
      else if (!r.error)
        r.fail(oat / "kind", "unknown op kind '" + kind + "'");
      op.where = r.string(o, oat, "where", /*optional=*/true);
      op.stream = r.integer(o, oat, "stream");
      if (!r.error && op.stream >= int64_t(plan.streams.size()))
        r.fail(oat / "stream", "stream " + std::to_string(op.stream) +
                                   " is not declared in 'streams'");
      op.inputs = r.integers(o, oat, "inputs");
      op.outputs = r.integers(o, oat, "outputs");
      op.deps = r.integers(o, oat, "deps");
      op.tensors = r.strings(o, oat, "tensors", /*optional=*/true);
      if (!r.error)
        op.attrs = readOpAttrs(r, o.value("attrs", json::object()),
                               oat / "attrs", op.index, op.kind);
      op.recompute = r.string(o, oat, "recompute", /*optional=*/true);
      if (o.is_object() && o.contains("flops"))
        op.flops = r.integer(o, oat, "flops");
      if (o.is_object() && o.contains("bytes"))
        op.bytes = r.integer(o, oat, "bytes");
      if (o.is_object() && o.contains("workspace_bytes")) {
        op.workspaceBytes = r.integer(o, oat, "workspace_bytes");
        op.workspaceOffset = r.integer(o, oat, "workspace_offset", -1);
      }
      if (o.is_object() && o.contains("collective")) {
        op.collective = r.oneOf(
            o, oat, "collective",
            {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"});
        op.commElements = r.integer(o, oat, "comm_elements");
        if (!r.error && (op.collective == "all_to_all") !=
                            (op.kind == OpKind::AllToAllStart))
          r.fail(oat / "collective",
                 std::string("op ") + std::to_string(op.index) + " (" +
                     op.kindName() + ") is " +
                     (op.kind == OpKind::AllToAllStart ? "" : "not ") +
                     "an all-to-all, but its collective is " + op.collective);
        std::string group = r.string(o, oat, "group");
        if (std::optional<CommGroupKind> g = parseCommGroup(group))
          op.group = *g;
        else if (!r.error)
          r.fail(oat / "group", "unknown communicator group \"" + group +
                                    "\" (expected world, expert_parallel or "
                                    "expert_data_parallel)");
      }
      for (int64_t v : op.inputs)
        if (!r.error && !ids.count(v))
          r.fail(oat / "inputs", "unknown value id " + std::to_string(v));
      for (int64_t v : op.outputs)
        if (!r.error && !ids.count(v))
          r.fail(oat / "outputs", "unknown value id " + std::to_string(v));
      for (int64_t d : op.deps)
        if (!r.error && (d < 0 || d >= op.index))
          r.fail(oat / "deps",
                 "dependency " + std::to_string(d) + " is not an earlier op");
      for (const std::string &t : op.tensors)
        if (!r.error && !names.count(t))
          r.fail(oat / "tensors", "unknown tensor \"" + t + "\"");
      if (!r.error && !op.collective.empty())
        checkCollectiveGroup(r, plan, op, oat);
      phase.ops.push_back(std::move(op));
    }
    if (!r.error && j.is_object() && j.contains("memory")) {
      const json &m = j["memory"];
      JsonPath mat = at / "memory";
      PlanPhaseMemory mem;
      mem.arenaBytes = r.integer(m, mat, "arena_bytes");
      if (!r.error && mem.arenaBytes > limits::kMaxCount)
        r.fail(mat / "arena_bytes", "expected at most 2^62 bytes, found " +
                                        std::to_string(mem.arenaBytes));
      mem.peakLiveBytes = r.integer(m, mat, "peak_live_bytes");
      mem.peakOp = r.integer(m, mat, "peak_op");
      mem.activations = r.integer(m, mat, "activations");
      mem.gatherBuffers = r.integer(m, mat, "gather_buffers");
      mem.reduceBuckets = r.integer(m, mat, "reduce_buckets");
      mem.workspace = r.integer(m, mat, "workspace");
      mem.liveBytes = r.integers(m, mat, "live_bytes", /*optional=*/true);
      if (!r.error && !mem.liveBytes.empty() &&
          mem.liveBytes.size() != phase.ops.size())
        r.fail(mat / "live_bytes", "expected one entry per op (" +
                                       std::to_string(phase.ops.size()) +
                                       "), found " +
                                       std::to_string(mem.liveBytes.size()));
      if (!r.error && !phase.ops.empty() &&
          mem.peakOp >= int64_t(phase.ops.size()))
        r.fail(mat / "peak_op", "op " + std::to_string(mem.peakOp) +
                                    " does not exist in the phase");
      for (const PlanValue &v : phase.values)
        if (!r.error && v.offset >= 0 &&
            !regionFits(v.offset, v.bytes, mem.arenaBytes))
          r.fail(mat / "arena_bytes",
                 "value " + std::to_string(v.id) + " at offset " +
                     std::to_string(v.offset) + " does not fit in the arena");
      for (size_t k = 0; k < phase.ops.size() && !r.error; ++k) {
        const PlanOp &op = phase.ops[k];
        if (op.workspaceOffset >= 0 &&
            !regionFits(op.workspaceOffset, op.workspaceBytes, mem.arenaBytes))
          r.fail(at / "ops" / std::to_string(k) / "workspace_offset",
                 "the workspace of op " + std::to_string(op.index) +
                     " at offset " + std::to_string(op.workspaceOffset) +
                     " does not fit in the arena");
      }
      phase.memory = mem;
    }
    plan.phases.push_back(std::move(phase));
  }
  for (PhaseKind kind : kAllPhaseKinds)
    if (!r.error && !phaseKinds.count(kind))
      r.fail(JsonPath() / "phases", "the plan has no phase named \"" +
                                        std::string(phaseName(kind)) + "\"");

  if (const json *comm =
          r.member(root, JsonPath(), "comm_elements_per_rank_per_step")) {
    JsonPath at = JsonPath() / "comm_elements_per_rank_per_step";
    plan.comm.allGather = r.number(*comm, at, "all_gather");
    plan.comm.reduceScatter = r.number(*comm, at, "reduce_scatter");
    plan.comm.allReduce = r.number(*comm, at, "all_reduce");
    plan.comm.allToAll = r.number(*comm, at, "all_to_all");
    if (const json *byGroup = r.member(*comm, at, "by_group")) {
      if (!byGroup->is_object())
        r.fail(at / "by_group", "expected an object of groups");
      else
        for (auto it = byGroup->begin(); it != byGroup->end() && !r.error;
             ++it) {
          JsonPath gat = at / "by_group" / it.key();
          std::optional<CommGroupKind> g = parseCommGroup(it.key());
          if (!g) {
            r.fail(gat, "unknown communicator group \"" + it.key() + "\"");
            break;
          }
          CommVolume &v = plan.commByGroup[*g];
          v.allGather = r.number(*it, gat, "all_gather");
          v.reduceScatter = r.number(*it, gat, "reduce_scatter");
          v.allReduce = r.number(*it, gat, "all_reduce");
          v.allToAll = r.number(*it, gat, "all_to_all");
        }
    }
  }
  if (!r.error)
    if (auto problem = vocabPaddingProblem(plan))
      r.fail(problem->first, problem->second);
  if (r.error)
    return *r.error;
  return plan;
}

const PlanValue *PlanPhase::findValue(int64_t id) const {
  for (const PlanValue &v : values)
    if (v.id == id)
      return &v;
  return nullptr;
}

std::optional<std::pair<JsonPath, std::string>>
vocabPaddingProblem(const Plan &plan) {
  // The padded tables' valid rows: one count for all of them.
  const PlanTensor *table = nullptr;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlanTensor &t = plan.tensors[i];
    if (!t.validRows)
      continue;
    JsonPath at = JsonPath() / "tensors" / std::to_string(i) / "valid_rows";
    if (t.expert)
      return std::make_pair(at, "expert tensor '" + t.name +
                                    "' has valid_rows: only a vocabulary's "
                                    "tables are padded");
    if (table && t.validRows != table->validRows)
      return std::make_pair(at, "'" + t.name + "' has valid_rows " +
                                    std::to_string(t.validRows) + " and '" +
                                    table->name + "' " +
                                    std::to_string(table->validRows) +
                                    ": a padded vocabulary has one size");
    if (!table)
      table = &t;
  }
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    const PlanPhase &phase = plan.phases[p];
    for (size_t i = 0; i < phase.ops.size(); ++i) {
      const PlanOp &op = phase.ops[i];
      if (op.kind != OpKind::CrossEntropy &&
          op.kind != OpKind::CrossEntropyBackward)
        continue;
      JsonPath at = JsonPath() / "phases" / std::to_string(p) / "ops" /
                    std::to_string(i) / "attrs";
      std::string name =
          "op " + std::to_string(op.index) + " (" + op.kindName() + ")";
      std::optional<int64_t> classes = op.attrsAs<CrossEntropyAttrs>().classes;
      const PlanValue *logits =
          op.inputs.empty() ? nullptr : phase.findValue(op.inputs[0]);
      int64_t width =
          logits && !logits->shape.empty() ? logits->shape.back() : 0;
      if (classes && width && *classes > width)
        return std::make_pair(
            at, name + ": classes " + std::to_string(*classes) +
                    " is more than the logits' width " + std::to_string(width));
      if (table && classes != table->validRows)
        return std::make_pair(
            at, name + ": " +
                    (classes ? "classes " + std::to_string(*classes)
                             : std::string("no classes")) +
                    ", but the vocabulary's tables are padded to " +
                    std::to_string(table->shape[0]) + " rows of which " +
                    std::to_string(table->validRows) + " are valid ('" +
                    table->name + "'): the loss must ignore the padding");
      if (!table && classes && width && *classes != width)
        return std::make_pair(at, name + ": classes " +
                                      std::to_string(*classes) + " of logits " +
                                      std::to_string(width) +
                                      " wide, but no table has valid_rows "
                                      "(padding rows)");
    }
  }
  return std::nullopt;
}

Expected<Plan> loadPlan(const std::string &path) {
  auto doc = JsonDocument::load(path);
  if (!doc)
    return doc.error();
  return readPlan(*doc);
}

int64_t computeStream(const Plan &plan) {
  for (size_t i = 0; i < plan.streams.size(); ++i)
    if (plan.streams[i] == "compute")
      return int64_t(i);
  return 0;
}

std::optional<LinearGeometry>
linearGeometry(OpKind kind, const std::vector<int64_t> &firstInput,
               const std::vector<int64_t> &firstOutput) {
  if (firstInput.empty() || firstOutput.empty())
    return std::nullopt;
  std::optional<int64_t> elements = shapeElements(firstInput);
  LinearGeometry g;
  switch (kind) {
  case OpKind::Linear: // x [..., in] -> y [..., out]
    g.in = firstInput.back();
    g.out = firstOutput.back();
    break;
  case OpKind::LinearGradInput: // dy [..., out] -> dx [..., in]
    g.out = firstInput.back();
    g.in = firstOutput.back();
    break;
  case OpKind::LinearGradWeight: // dy [..., out] -> dw [out, in]
    if (firstOutput.size() != 2 || firstOutput[0] != firstInput.back())
      return std::nullopt;
    g.out = firstInput.back();
    g.in = firstOutput[1];
    break;
  default:
    return std::nullopt;
  }
  if (!elements || g.in <= 0 || g.out <= 0 || *elements <= 0 ||
      *elements % firstInput.back() != 0)
    return std::nullopt;
  g.rows = *elements / firstInput.back();
  return g;
}

std::vector<int64_t> collectiveOnlyStreams(const PlanPhase &phase,
                                           int64_t computeStream) {
  // Per stream: whether it holds a collective, and whether anything else.
  std::map<int64_t, std::pair<bool, bool>> seen;
  for (const PlanOp &op : phase.ops) {
    if (op.stream == computeStream)
      continue;
    auto &[collective, other] = seen[op.stream];
    if (!op.collective.empty())
      collective = true;
    else if (op.kind != OpKind::Wait)
      other = true;
  }
  std::vector<int64_t> out;
  for (const auto &[stream, what] : seen)
    if (what.first && !what.second)
      out.push_back(stream);
  return out;
}

} // namespace zeroc
