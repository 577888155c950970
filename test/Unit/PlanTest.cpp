//===- PlanTest.cpp - The plan file: writer, checking reader, inspector ---===//
//
// A hand-built plan survives toJson and readPlan field by field; every check
// of readPlan has a document that fails it, with the exact message and the
// line and column it points at; the inspector's totals are recomputed from
// the ops by the ZeRO paper's accounting.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Plan/Plan.h"
#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Support/JsonReader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

using namespace zeroc;
using nlohmann::json;

namespace {

//===----------------------------------------------------------------------===//
// Round trip
//===----------------------------------------------------------------------===//

PlanTensor tensor(std::string name, std::string role, std::string of,
                  DType dtype, std::vector<int64_t> shape, bool sharded,
                  int64_t worldSize, std::string placement,
                  std::string init = "") {
  PlanTensor t;
  t.name = std::move(name);
  t.role = *parseRole(role);
  t.of = std::move(of);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape)
    t.numel *= d;
  t.sharded = sharded;
  t.localNumel = sharded ? (t.numel + worldSize - 1) / worldSize : t.numel;
  t.placement = *parsePlacement(placement);
  t.init = std::move(init);
  return t;
}

PlanValue value(int64_t id, DType dtype, std::vector<int64_t> shape) {
  PlanValue v;
  v.id = id;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.bytes = bytesPerElement(dtype);
  for (int64_t d : v.shape)
    v.bytes *= d;
  return v;
}

PlanOp op(int64_t index, std::string kind, int64_t stream,
          std::vector<int64_t> inputs, std::vector<int64_t> outputs,
          std::vector<std::string> tensors = {},
          std::vector<int64_t> deps = {}) {
  PlanOp o;
  o.index = index;
  o.kind = *parseOpKind(kind);
  o.attrs = defaultAttrs(o.kind);
  o.stream = stream;
  o.inputs = std::move(inputs);
  o.outputs = std::move(outputs);
  o.tensors = std::move(tensors);
  o.deps = std::move(deps);
  return o;
}

/// Stage 2 on two ranks: two bf16 parameters flattened into one group,
/// whose f32 gradient partition is a third tensor; a micro-step phase that
/// runs twice per step and an optimizer phase.
Plan stage2Plan() {
  Plan plan;
  plan.generator = "PlanTest";
  plan.model = {"tiny", 18, DType::BF16, 2, 3};
  plan.worldSize = 2;
  plan.stage = 2;
  plan.gradientAccumulationSteps = 2;
  plan.config = {{"zero_optimization", {{"stage", 2}}},
                 {"gradient_accumulation_steps", 2}};
  plan.streams = {"compute", "reduce"};
  plan.tensors = {
      tensor("a.weight", "param", "", DType::BF16, {3, 4}, false, 2, "device",
             "normal(0.02)"),
      tensor("b.bias", "param", "", DType::BF16, {6}, false, 2, "device",
             "zeros"),
      tensor("g.grad", "grad", "g", DType::F32, {20}, true, 2, "host")};
  PlanFlatGroup group;
  group.name = "g";
  group.params = {"a.weight", "b.bias"};
  group.offsets = {0, 12};
  group.numel = 18;
  group.padded = 20;
  group.partition = 10;
  plan.flatGroups = {group};

  PlanPhase micro;
  micro.kind = PhaseKind::MicroStep;
  micro.runsPerStep = 2;
  micro.args = {0};
  micro.values = {value(0, DType::I32, {2, 3}), value(1, DType::BF16, {3, 4}),
                  value(2, DType::BF16, {2, 3, 4}),
                  value(3, DType::BF16, {3, 4})};
  micro.ops = {op(0, "read", 0, {}, {1}, {"a.weight"}),
               op(1, "linear", 0, {0, 1}, {2}),
               op(2, "linear_grad_input", 0, {0, 2}, {3}),
               op(3, "reduce_scatter_start", 1, {3}, {}, {"g.grad"}, {2}),
               op(4, "wait", 0, {}, {}, {}, {3})};
  micro.ops[1].where = "a";
  micro.ops[0].attrs = ReadAttrs{"a.weight"};
  micro.ops[3].collective = "reduce_scatter";
  micro.ops[3].commElements = 12;
  micro.ops[3].attrs = ReduceScatterAttrs{{"g.grad"}, {0}, false};

  PlanPhase optimizer;
  optimizer.kind = PhaseKind::OptimizerStep;
  optimizer.ops = {op(0, "adam_update", 0, {}, {}, {"g", "g.grad"}),
                   op(1, "all_gather_updates_start", 1, {}, {}, {"g"}, {0}),
                   op(2, "wait", 0, {}, {}, {}, {1})};
  AdamAttrs adam;
  adam.param = "g";
  adam.grad = "g.grad";
  adam.expAvg = "g.grad";
  adam.expAvgSq = "g.grad";
  adam.lr = 1e-3;
  adam.adamw = true;
  adam.on = Placement::Host;
  optimizer.ops[0].attrs = adam;
  optimizer.ops[1].attrs = TargetListAttrs{{"g"}};
  optimizer.ops[1].collective = "all_gather";
  optimizer.ops[1].commElements = 18;
  plan.phases = {micro, optimizer};
  plan.comm.reduceScatter = 12;
  plan.comm.allGather = 9;
  return plan;
}

void expectSameTensor(const PlanTensor &a, const PlanTensor &b) {
  SCOPED_TRACE("tensor " + a.name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.of, b.of);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.numel, b.numel);
  EXPECT_EQ(a.sharded, b.sharded);
  EXPECT_EQ(a.localNumel, b.localNumel);
  EXPECT_EQ(a.placement, b.placement);
  EXPECT_EQ(a.init, b.init);
}

void expectSameOp(const PlanOp &a, const PlanOp &b) {
  SCOPED_TRACE("op " + std::to_string(a.index) + " " + a.kindName());
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.where, b.where);
  EXPECT_EQ(a.stream, b.stream);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.tensors, b.tensors);
  EXPECT_EQ(a.deps, b.deps);
  EXPECT_EQ(attrsToJson(a.attrs), attrsToJson(b.attrs));
  EXPECT_EQ(a.recompute, b.recompute);
  EXPECT_EQ(a.collective, b.collective);
  EXPECT_EQ(a.commElements, b.commElements);
}

void expectSamePlan(const Plan &a, const Plan &b) {
  EXPECT_EQ(a.generator, b.generator);
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(a.model.params, b.model.params);
  EXPECT_EQ(a.model.dtype, b.model.dtype);
  EXPECT_EQ(a.model.microBatch, b.model.microBatch);
  EXPECT_EQ(a.model.seqLen, b.model.seqLen);
  EXPECT_EQ(a.worldSize, b.worldSize);
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.gradientAccumulationSteps, b.gradientAccumulationSteps);
  EXPECT_EQ(a.recompute.mode, b.recompute.mode);
  EXPECT_EQ(a.recompute.every, b.recompute.every);
  EXPECT_EQ(a.config, b.config);
  EXPECT_EQ(a.streams, b.streams);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    expectSameTensor(a.tensors[i], b.tensors[i]);
  ASSERT_EQ(a.flatGroups.size(), b.flatGroups.size());
  for (size_t i = 0; i < a.flatGroups.size(); ++i) {
    const PlanFlatGroup &x = a.flatGroups[i], &y = b.flatGroups[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.params, y.params);
    EXPECT_EQ(x.offsets, y.offsets);
    EXPECT_EQ(x.numel, y.numel);
    EXPECT_EQ(x.padded, y.padded);
    EXPECT_EQ(x.partition, y.partition);
  }
  ASSERT_EQ(a.phases.size(), b.phases.size());
  for (size_t p = 0; p < a.phases.size(); ++p) {
    const PlanPhase &x = a.phases[p], &y = b.phases[p];
    SCOPED_TRACE("phase " + std::string(phaseName(x.kind)));
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.runsPerStep, y.runsPerStep);
    EXPECT_EQ(x.args, y.args);
    ASSERT_EQ(x.values.size(), y.values.size());
    for (size_t i = 0; i < x.values.size(); ++i) {
      EXPECT_EQ(x.values[i].id, y.values[i].id);
      EXPECT_EQ(x.values[i].dtype, y.values[i].dtype);
      EXPECT_EQ(x.values[i].shape, y.values[i].shape);
      EXPECT_EQ(x.values[i].bytes, y.values[i].bytes);
    }
    ASSERT_EQ(x.ops.size(), y.ops.size());
    for (size_t i = 0; i < x.ops.size(); ++i)
      expectSameOp(x.ops[i], y.ops[i]);
  }
  EXPECT_EQ(a.comm.allGather, b.comm.allGather);
  EXPECT_EQ(a.comm.reduceScatter, b.comm.reduceScatter);
  EXPECT_EQ(a.comm.allReduce, b.comm.allReduce);
}

Expected<Plan> readText(const std::string &text) {
  Expected<JsonDocument> doc = JsonDocument::parse(text, "plan.json");
  if (!doc)
    return doc.error();
  return readPlan(*doc);
}

TEST(Plan, RoundTripsFieldByField) {
  Plan plan = stage2Plan();
  std::string text = toJson(plan).dump(2);
  Expected<Plan> read = readText(text);
  ASSERT_TRUE(read) << read.error().str();
  expectSamePlan(plan, *read);
  // And writing it again gives the same document.
  EXPECT_EQ(toJson(*read), toJson(plan));
}

TEST(Plan, RoundTripsTheRecomputationPolicy) {
  Plan plan = stage2Plan();
  plan.recompute = {RecomputeMode::Selective, 3};
  Expected<Plan> read = readText(toJson(plan).dump(2));
  ASSERT_TRUE(read) << read.error().str();
  EXPECT_EQ(read->recompute.mode, RecomputeMode::Selective);
  EXPECT_EQ(read->recompute.every, 3);
}

TEST(Plan, RejectsABadRecomputationPolicy) {
  json missing = toJson(stage2Plan());
  missing.erase("recompute");
  Expected<Plan> noPolicy = readText(missing.dump(2));
  ASSERT_FALSE(noPolicy);
  EXPECT_NE(noPolicy.error().message.find("missing required key 'recompute'"),
            std::string::npos)
      << noPolicy.error().str();
  json j = toJson(stage2Plan());
  j["recompute"]["every"] = 0;
  Expected<Plan> read = readText(j.dump(2));
  ASSERT_FALSE(read);
  EXPECT_NE(read.error().message.find("recompute.every"), std::string::npos)
      << read.error().str();
}

TEST(Plan, WriterOmitsEmptyOptionalFields) {
  json j = toJson(stage2Plan());
  EXPECT_EQ(j["format"], "zeroc-plan");
  EXPECT_EQ(j["version"], kPlanVersion);
  EXPECT_FALSE(j["tensors"][0].contains("of"));
  EXPECT_EQ(j["tensors"][2]["of"], "g");
  const json &ops = j["phases"][0]["ops"];
  EXPECT_FALSE(ops[0].contains("where"));
  EXPECT_FALSE(ops[1].contains("attrs")); // linear has none
  EXPECT_EQ(ops[0]["attrs"], json({{"tensor", "a.weight"}}));
  // A unit attribute is written only when set.
  EXPECT_FALSE(ops[3]["attrs"].contains("all_reduce"));
  EXPECT_EQ(j["phases"][1]["ops"][0]["attrs"]["adamw"], true);
  EXPECT_EQ(j["phases"][1]["ops"][0]["attrs"]["on"], "host");
  EXPECT_FALSE(ops[0].contains("collective"));
  EXPECT_FALSE(ops[1].contains("tensors"));
  EXPECT_EQ(ops[3]["comm_elements"], 12);
  EXPECT_EQ(j["streams"][1], json({{"id", 1}, {"name", "reduce"}}));
  EXPECT_EQ(j["comm_elements_per_rank_per_step"]["total"], 21.0);
}

TEST(Plan, FindsTensorsAndPhases) {
  Plan plan = stage2Plan();
  ASSERT_NE(plan.findTensor("g.grad"), nullptr);
  EXPECT_EQ(plan.findTensor("g.grad")->localNumel, 10);
  EXPECT_EQ(plan.findTensor("g"), nullptr);
  ASSERT_NE(plan.findPhase(PhaseKind::OptimizerStep), nullptr);
  EXPECT_EQ(plan.findPhase(PhaseKind::OptimizerStep)->ops.size(), 3u);
}

TEST(Plan, LoadsTheExamplePlanOfTheLitTests) {
  Expected<Plan> plan =
      loadPlan(ZEROC_SOURCE_DIR "/test/zeroc/Inputs/plan-stage3.json");
  ASSERT_TRUE(plan) << plan.error().str();
  EXPECT_EQ(plan->worldSize, 4);
  EXPECT_EQ(plan->stage, 3);
  EXPECT_EQ(plan->tensors.size(), 10u);
  EXPECT_EQ(plan->phases.size(), 2u);
  // The summary the file carries agrees with the inspector's recount.
  CommPerStep comm = commPerRankPerStep(*plan);
  EXPECT_EQ(comm[CollectiveKind::AllGather].elements, plan->comm.allGather);
  EXPECT_EQ(comm[CollectiveKind::ReduceScatter].elements,
            plan->comm.reduceScatter);
  EXPECT_EQ(comm[CollectiveKind::AllReduce].elements, plan->comm.allReduce);
}

TEST(Plan, MissingFileIsAnError) {
  Expected<Plan> plan = loadPlan("/nonexistent/plan.json");
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().str(), "/nonexistent/plan.json: error: cannot open "
                                "file");
}

//===----------------------------------------------------------------------===//
// Every check of readPlan
//===----------------------------------------------------------------------===//

/// A valid plan, one item per line so that an edit moves nothing else.
const char *const kValidPlan = R"({
  "format": "zeroc-plan",
  "version": 9,
  "generator": "test",
  "model": {"name": "m", "params": 18, "dtype": "bf16", "micro_batch": 2, "seq_len": 3, "hf_config": null},
  "world_size": 2, "expert_parallel_size": 1, "groups": [{"name": "world", "size": 2, "stride": 1}, {"name": "expert_parallel", "size": 1, "stride": 1}, {"name": "expert_data_parallel", "size": 2, "stride": 1}],
  "stage": 2,
  "gradient_accumulation_steps": 1, "recompute": {"mode": "none", "every": 1},
  "config": {},
  "streams": [{"id": 0, "name": "compute"}, {"id": 1, "name": "comm"}],
  "tensors": [
    {"name": "a", "role": "param", "dtype": "bf16", "shape": [3, 4], "numel": 12, "sharded": false, "local_numel": 12, "placement": "device"},
    {"name": "b", "role": "param", "dtype": "bf16", "shape": [6], "numel": 6, "sharded": false, "local_numel": 6, "placement": "device"},
    {"name": "g.grad", "role": "grad", "of": "g", "dtype": "f32", "shape": [20], "numel": 20, "sharded": true, "local_numel": 10, "placement": "device"}
  ],
  "flat_groups": [
    {"name": "g", "params": ["a", "b"], "offsets": [0, 12], "numel": 18, "padded": 20, "partition": 10}
  ],
  "phases": [
    {"name": "micro_step", "runs_per_step": 1, "args": [0],
     "values": [
       {"id": 0, "dtype": "i32", "shape": [2, 3], "bytes": 24},
       {"id": 1, "dtype": "bf16", "shape": [3, 4], "bytes": 24}
     ],
     "ops": [
       {"index": 0, "kind": "read", "stream": 0, "inputs": [], "outputs": [1], "tensors": ["a"], "deps": [], "attrs": {"tensor": "a"}},
       {"index": 1, "kind": "reduce_scatter_start", "stream": 1, "inputs": [1], "outputs": [], "tensors": ["g.grad"], "deps": [0], "collective": "reduce_scatter", "group": "world", "comm_elements": 12, "attrs": {"targets": ["g.grad"], "offsets": [0]}}
     ]},
    {"name": "optimizer_step", "runs_per_step": 1, "args": [], "values": [],
     "ops": [
       {"index": 0, "kind": "adam_update", "stream": 0, "inputs": [], "outputs": [], "tensors": ["g", "g.grad"], "deps": [], "attrs": {"param": "g", "grad": "g.grad", "exp_avg": "g.grad", "exp_avg_sq": "g.grad", "lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "on": "device"}}
     ]}
  ],
  "comm_elements_per_rank_per_step": {"all_gather": 0, "reduce_scatter": 6, "all_reduce": 0, "all_to_all": 0, "total": 6, "by_group": {"world": {"all_gather": 0, "reduce_scatter": 6.0, "all_reduce": 0, "all_to_all": 0}}}
})";

/// kValidPlan with the one occurrence of `from` replaced by `to`.
std::string edited(const std::string &from, const std::string &to) {
  std::string text = kValidPlan;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in the plan";
  EXPECT_EQ(text.find(from, at + 1), std::string::npos)
      << "'" << from << "' is in the plan twice";
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

/// 1-based line and column where `marker` starts in `text`.
std::string positionOf(const std::string &text, const std::string &marker) {
  size_t at = text.find(marker);
  if (at == std::string::npos)
    return "(not found)";
  size_t lineStart = text.rfind('\n', at);
  lineStart = lineStart == std::string::npos ? 0 : lineStart + 1;
  int line = 1 + int(std::count(text.begin(), text.begin() + at, '\n'));
  return std::to_string(line) + ":" + std::to_string(at - lineStart + 1);
}

/// Reading `text` fails with `expected` ("LINE:COL: error: MESSAGE" after
/// the file name), and LINE:COL is where `marker` starts: the key, element
/// or object the message is about.
void expectError(const std::string &text, const std::string &expected,
                 const std::string &marker) {
  std::optional<Expected<Plan>> plan;
  ASSERT_NO_THROW(plan.emplace(readText(text)));
  ASSERT_FALSE(*plan) << "expected: " << expected;
  const Diagnostic &error = plan->error();
  EXPECT_EQ(error.str(), "plan.json:" + expected);
  EXPECT_EQ(std::to_string(error.line) + ":" + std::to_string(error.column),
            positionOf(text, marker))
      << "the diagnostic does not point at '" << marker << "'";
}

TEST(PlanReader, AcceptsTheValidPlan) {
  Expected<Plan> plan = readText(kValidPlan);
  ASSERT_TRUE(plan) << plan.error().str();
  EXPECT_EQ(plan->flatGroups[0].partition, 10);
  EXPECT_EQ(plan->phases[0].ops[1].collective, "reduce_scatter");
  EXPECT_EQ(plan->phases[1].ops[0].kind, OpKind::AdamUpdate);
  EXPECT_EQ(plan->phases[1].ops[0].attrsAs<AdamAttrs>().lr, 0.001);
  EXPECT_FALSE(plan->phases[1].ops[0].attrsAs<AdamAttrs>().adamw);
  EXPECT_EQ(plan->comm.reduceScatter, 6);
}

TEST(PlanReader, HFConfigIsAnObjectOrNull) {
  expectError(edited(R"("hf_config": null)", R"("hf_config": [1])"),
              "5:89: error: plan model.hf_config: expected a Hugging Face "
              "config object or null",
              R"("hf_config")");
  Expected<Plan> plan = readText(
      edited(R"("hf_config": null)", R"("hf_config": {"model_type": "gpt2"})"));
  ASSERT_TRUE(plan) << plan.error().str();
  EXPECT_EQ(plan->model.hfConfig["model_type"], "gpt2");
  EXPECT_EQ(toJson(*plan)["model"]["hf_config"], plan->model.hfConfig);
}

// Expert parallelism's facts: the groups as the two sizes build them, a
// known group on every collective, the group that what it moves belongs on.
TEST(PlanReader, CommunicatorGroups) {
  Expected<Plan> plan = readText(kValidPlan);
  ASSERT_TRUE(plan) << plan.error().str();
  EXPECT_EQ(plan->phases[0].ops[1].group, CommGroupKind::World);
  EXPECT_EQ(plan->commByGroup.at(CommGroupKind::World).reduceScatter, 6);
  expectError(
      edited(R"("expert_parallel_size": 1)", R"("expert_parallel_size": 3)"),
      "6:20: error: plan expert_parallel_size: expert_parallel_size "
      "3 does not divide world_size 2: the expert-parallel groups "
      "partition the ranks",
      R"("expert_parallel_size")");
  expectError(
      edited(R"({"name": "expert_data_parallel", "size": 2, "stride": 1})",
             R"({"name": "expert_data_parallel", "size": 1, "stride": 1})"),
      R"(6:154: error: plan groups[2]: group "expert_data_parallel" has size 1 and stride 1, but world_size 2 and expert_parallel_size 1 build it with size 2 and stride 1)",
      R"({"name": "expert_data_parallel", "size": 1)");
  expectError(
      edited(R"({"name": "world", "size": 2, "stride": 1})",
             R"({"name": "tensor_parallel", "size": 2, "stride": 1})"),
      R"(6:59: error: plan groups[0].name: unknown communicator group "tensor_parallel" (expected world, expert_parallel or expert_data_parallel))",
      R"("name": "tensor_parallel")");
  expectError(
      edited(R"("group": "world")", R"("group": "pipeline")"),
      R"(27:164: error: plan phases[0].ops[1].group: unknown communicator group "pipeline" (expected world, expert_parallel or expert_data_parallel))",
      R"("group": "pipeline")");
  expectError(
      edited(R"("group": "world")", R"("group": "expert_data_parallel")"),
      "27:164: error: plan phases[0].ops[1].group: op 1 "
      "(reduce_scatter_start) runs over the expert_data_parallel group, but "
      "the plan has no expert parallelism (expert_parallel_size is 1)",
      R"("group": "expert_data_parallel")");
  expectError(
      edited(
          R"("name": "b", "role": "param", "dtype": "bf16")",
          R"("name": "b", "expert": true, "role": "param", "dtype": "bf16")"),
      "13:19: error: plan tensors[1].expert: expert state without "
      "expert parallelism (expert_parallel_size is 1)",
      R"("expert")");
}

TEST(PlanReader, WrongFormatName) {
  expectError(
      edited(R"("format": "zeroc-plan")", R"("format": "onnx")"),
      R"(2:3: error: not a zeroc plan: format is "onnx", expected "zeroc-plan")",
      R"("format")");
}

TEST(PlanReader, UnsupportedVersion) {
  expectError(edited(R"("version": 9)", R"("version": 2)"),
              "3:3: error: plan format version 2 is not supported by this "
              "build, which reads version 9; recompile the plan with this "
              "zeroc",
              R"("version")");
}

TEST(PlanReader, MissingKeys) {
  expectError(edited(R"("generator": "test",)", ""),
              "1:1: error: plan (root): missing required key 'generator'", "{");
  expectError(edited(R"("micro_batch": 2, )", ""),
              "5:3: error: plan model: missing required key 'micro_batch'",
              R"("model")");
  expectError(edited(R"("numel": 12, )", ""),
              "12:5: error: plan tensors[0]: missing required key 'numel'",
              R"({"name": "a")");
  expectError(edited(R"("index": 1, )", ""),
              "27:8: error: plan phases[0].ops[1]: missing required key "
              "'index'",
              R"({"kind": "reduce_scatter_start")");
  expectError(edited(R"(, "comm_elements": 12)", ""),
              "27:8: error: plan phases[0].ops[1]: missing required key "
              "'comm_elements'",
              R"({"index": 1)");
  expectError(edited(R"(,
  "comm_elements_per_rank_per_step": {"all_gather": 0, "reduce_scatter": 6, "all_reduce": 0, "all_to_all": 0, "total": 6, "by_group": {"world": {"all_gather": 0, "reduce_scatter": 6.0, "all_reduce": 0, "all_to_all": 0}}})",
                     ""),
              "1:1: error: plan (root): missing required key "
              "'comm_elements_per_rank_per_step'",
              "{");
}

TEST(PlanReader, WrongTypes) {
  expectError("[1, 2]",
              "1:1: error: plan (root): expected an object, found an array",
              "[");
  expectError(
      edited(R"("world_size": 2)", R"("world_size": "2")"),
      R"(6:3: error: plan world_size: expected an integer >= 1, found "2")",
      R"("world_size")");
  expectError(edited(R"("world_size": 2)", R"("world_size": 0)"),
              "6:3: error: plan world_size: expected an integer >= 1, found 0",
              R"("world_size")");
  expectError(edited(R"("stage": 2)", R"("stage": 4)"),
              "7:3: error: plan stage: expected 0, 1, 2 or 3, found 4",
              R"("stage")");
  expectError(edited(R"("config": {})", R"("config": [])"),
              "9:3: error: plan config: expected an object, found an array",
              R"("config")");
  expectError(edited(R"("sharded": false, "local_numel": 6)",
                     R"("sharded": 0, "local_numel": 6)"),
              "13:79: error: plan tensors[1].sharded: expected true or false, "
              "found 0",
              R"("sharded": 0)");
  expectError(edited(R"("shape": [6])", R"("shape": 6)"),
              "13:53: error: plan tensors[1].shape: expected an array of "
              "integers, found an integer",
              R"("shape": 6)");
  expectError(edited(R"("shape": [6])", R"("shape": [6.5])"),
              "13:63: error: plan tensors[1].shape[0]: expected an integer >= "
              "0, found 6.5",
              "6.5");
  expectError(edited(R"("shape": [3, 4], "numel": 12)",
                     R"("shape": [-3, -4], "numel": 12)"),
              "12:63: error: plan tensors[0].shape[0]: expected an integer >= "
              "0, found -3",
              "-3");
  expectError(edited(R"("shape": [3, 4], "numel": 12)",
                     R"("shape": [3, 5], "numel": 12)"),
              "12:70: error: plan tensors[0].numel: numel 12 is not the "
              "product of the shape [3, 5]",
              R"("numel": 12)");
  // (2^62 + 3) * 4 wraps to 12 in 64 bits: refused, not taken as a match.
  expectError(edited(R"("shape": [3, 4], "numel": 12)",
                     R"("shape": [4611686018427387907, 4], "numel": 12)"),
              "12:88: error: plan tensors[0].numel: numel 12 is not the "
              "product of the shape [4611686018427387907, 4]",
              R"("numel": 12)");
  expectError(edited(R"("params": ["a", "b"])", R"("params": ["a", 2])"),
              "17:35: error: plan flat_groups[0].params[1]: expected a "
              "string, found 2",
              "2]");
  expectError(edited(R"("values": [],)", R"("values": {},)"),
              "29:64: error: plan phases[1].values: expected an array, found "
              "an object",
              R"("values": {})");
  expectError(
      edited(R"("stream": 1, "inputs": [1])", R"("stream": 1, "inputs": 1)"),
      "27:66: error: plan phases[0].ops[1].inputs: expected an array "
      "of integers, found an integer",
      R"("inputs": 1)");
  expectError(edited(R"("attrs": {"tensor": "a"})", R"("attrs": ["a"])"),
              "26:110: error: plan phases[0].ops[0].attrs: expected an "
              "object, found an array",
              R"("attrs": ["a"])");
  expectError(
      edited(R"("reduce_scatter": 6,)", R"("reduce_scatter": "6",)"),
      R"(34:56: error: plan comm_elements_per_rank_per_step.reduce_scatter: expected a number, found "6")",
      R"("reduce_scatter": "6")");
}

TEST(PlanReader, BadDType) {
  expectError(
      edited(R"("dtype": "f32")", R"("dtype": "f64")"),
      R"(14:51: error: plan tensors[2].dtype: unknown dtype "f64", expected f32, bf16, f16 or i32)",
      R"("dtype": "f64")");
  expectError(
      edited(R"("dtype": "i32")", R"("dtype": "int64")"),
      R"(22:18: error: plan phases[0].values[0].dtype: unknown dtype "int64", expected f32, bf16, f16 or i32)",
      R"("dtype": "int64")");
}

TEST(PlanReader, BadRoleAndPlacement) {
  expectError(
      edited(R"("role": "grad")", R"("role": "gradient")"),
      R"(14:24: error: plan tensors[2].role: unknown value "gradient", expected one of param, grad, master, exp_avg, exp_avg_sq)",
      R"("role": "gradient")");
  expectError(
      edited(R"("local_numel": 10, "placement": "device")",
             R"("local_numel": 10, "placement": "cpu")"),
      R"(14:131: error: plan tensors[2].placement: unknown value "cpu", expected one of device, host, nvme)",
      R"("placement": "cpu")");
}

TEST(PlanReader, NumelMustBeTheProductOfTheShape) {
  expectError(
      edited(R"("shape": [6], "numel": 6)", R"("shape": [6], "numel": 7)"),
      "13:67: error: plan tensors[1].numel: numel 7 is not the "
      "product of the shape [6]",
      R"("numel": 7)");
  // A product that overflows 64 bits is no product at all.
  expectError(edited(R"("shape": [6], "numel": 6)",
                     R"("shape": [4294967296, 4294967296], "numel": 6)"),
              "13:88: error: plan tensors[1].numel: numel 6 is not the "
              "product of the shape [4294967296, 4294967296]",
              R"("numel": 6)");
}

TEST(PlanReader, LocalNumelFollowsTheShardLayout) {
  expectError(edited(R"("sharded": true, "local_numel": 10)",
                     R"("sharded": true, "local_numel": 20)"),
              "14:112: error: plan tensors[2].local_numel: expected 10 for a "
              "sharded tensor of 20 elements over 2 ranks, found 20",
              R"("local_numel": 20)");
  expectError(edited(R"("sharded": false, "local_numel": 12)",
                     R"("sharded": false, "local_numel": 6)"),
              "12:101: error: plan tensors[0].local_numel: expected 12 for a "
              "replicated tensor of 12 elements over 2 ranks, found 6",
              R"("local_numel": 6, "placement": "device"},
    {"name": "b")");
}

TEST(PlanReader, DuplicateTensorName) {
  expectError(edited(R"({"name": "b", "role")", R"({"name": "a", "role")"),
              R"(13:6: error: plan tensors[1].name: duplicate tensor name "a")",
              R"("name": "a", "role": "param", "dtype": "bf16", "shape": [6])");
}

TEST(PlanReader, FlatGroups) {
  expectError(edited(R"("offsets": [0, 12])", R"("offsets": [0])"),
              "17:41: error: plan flat_groups[0].offsets: expected one offset "
              "per parameter",
              R"("offsets")");
  expectError(
      edited(R"("offsets": [0, 12])", R"("offsets": [0, 11])"),
      R"(17:56: error: plan flat_groups[0].offsets[1]: offset of "b" is 11, expected 12 (the parameters before it, back to back))",
      "11]");
  expectError(edited(R"("numel": 18)", R"("numel": 19)"),
              "17:61: error: plan flat_groups[0].numel: expected 18, the sum "
              "of the parameters' numels, found 19",
              R"("numel": 19)");
  expectError(
      edited(R"("padded": 20, "partition": 10)",
             R"("padded": 24, "partition": 12)"),
      "17:74: error: plan flat_groups[0].padded: expected 20, numel rounded "
      "up to a multiple of 2 x world_size, found 24",
      R"("padded")");
  expectError(edited(R"("partition": 10)", R"("partition": 9)"),
              "17:88: error: plan flat_groups[0].partition: partition x "
              "world_size must equal padded",
              R"("partition")");
  expectError(
      edited(R"("params": ["a", "b"])", R"("params": ["a", "c"])"),
      R"(17:35: error: plan flat_groups[0].params[1]: unknown parameter "c")",
      R"("c")");
  expectError(
      edited(R"("params": ["a", "b"])", R"("params": ["a", "g.grad"])"),
      R"(17:35: error: plan flat_groups[0].params[1]: "g.grad" is a grad tensor, not a parameter)",
      R"("g.grad"])");
  expectError(
      edited(R"({"name": "g", "params")", R"({"name": "a", "params")"),
      R"(17:6: error: plan flat_groups[0].name: duplicate name "a": a tensor or flat group has it already)",
      R"("name": "a", "params")");
}

TEST(PlanReader, UnknownOwner) {
  expectError(edited(R"("of": "g")", R"("of": "h")"),
              R"(14:40: error: plan tensors[2].of: unknown owner "h")",
              R"("of")");
}

TEST(PlanReader, Streams) {
  expectError(
      edited(R"({"id": 1, "name": "comm"})", R"({"id": 2, "name": "comm"})"),
      "10:46: error: plan streams[1].id: stream ids must be 0, 1, 2, "
      "... in order",
      R"("id": 2)");
  expectError(
      edited(R"("stream": 1, "inputs": [1])", R"("stream": 2, "inputs": [1])"),
      "27:53: error: plan phases[0].ops[1].stream: stream 2 is not "
      "declared in 'streams'",
      R"("stream": 2)");
}

TEST(PlanReader, UnknownValueIds) {
  expectError(edited(R"("args": [0])", R"("args": [5])"),
              "20:48: error: plan phases[0].args: unknown value id 5",
              R"("args")");
  expectError(
      edited(R"("stream": 1, "inputs": [1])", R"("stream": 1, "inputs": [7])"),
      "27:66: error: plan phases[0].ops[1].inputs: unknown value id 7",
      R"("inputs": [7])");
  expectError(edited(R"("outputs": [1])", R"("outputs": [8])"),
              "26:64: error: plan phases[0].ops[0].outputs: unknown value id 8",
              R"("outputs")");
  expectError(
      edited(R"({"id": 1, "dtype": "bf16")", R"({"id": 0, "dtype": "bf16")"),
      "23:9: error: plan phases[0].values[1].id: duplicate value id 0",
      R"("id": 0, "dtype": "bf16")");
}

TEST(PlanReader, Dependencies) {
  expectError(
      edited(R"("deps": [0], "collective")", R"("deps": [1], "collective")"),
      "27:119: error: plan phases[0].ops[1].deps: dependency 1 is not "
      "an earlier op",
      R"("deps": [1])");
  expectError(
      edited(R"("deps": [0], "collective")", R"("deps": [-1], "collective")"),
      "27:128: error: plan phases[0].ops[1].deps[0]: expected an "
      "integer >= 0, found -1",
      "-1]");
}

TEST(PlanReader, OpIndexOutOfOrder) {
  expectError(edited(R"("index": 1,)", R"("index": 2,)"),
              "27:9: error: plan phases[0].ops[1].index: ops must be numbered "
              "0, 1, 2, ... in order",
              R"("index": 2)");
}

TEST(PlanReader, UnknownTensorInAnOp) {
  expectError(
      edited(R"("tensors": ["a"])", R"("tensors": ["z"])"),
      R"(26:80: error: plan phases[0].ops[0].tensors: unknown tensor "z")",
      R"("tensors": ["z"])");
}

TEST(PlanReader, Collectives) {
  expectError(
      edited(R"("collective": "reduce_scatter")",
             R"("collective": "all_to_all")"),
      R"(27:132: error: plan phases[0].ops[1].collective: op 1 (reduce_scatter_start) is not an all-to-all, but its collective is all_to_all)",
      R"("collective")");
  expectError(
      edited(R"("collective": "reduce_scatter")",
             R"("collective": "all_to_one")"),
      R"(27:132: error: plan phases[0].ops[1].collective: unknown value "all_to_one", expected one of all_gather, reduce_scatter, all_reduce, all_to_all)",
      R"("collective")");
  expectError(edited(R"("comm_elements": 12)", R"("comm_elements": -12)"),
              "27:182: error: plan phases[0].ops[1].comm_elements: expected an "
              "integer >= 0, found -12",
              R"("comm_elements")");
}

// Op kinds and attributes are typed (zeroc/Plan/PlanOps.h): a missing,
// extra or ill-typed attribute is refused, naming the op, its kind and the
// field; nothing falls back to a default the plan did not state.
TEST(PlanReader, UnknownOpKind) {
  expectError(edited(R"("kind": "read")", R"("kind": "reed")"),
              "26:21: error: plan phases[0].ops[0].kind: unknown op kind "
              "'reed'",
              R"("kind": "reed")");
}

TEST(PlanReader, MissingAttribute) {
  expectError(edited(R"("lr": 0.001, )", ""),
              "31:126: error: plan phases[1].ops[0].attrs: op 0 "
              "(adam_update): missing attribute 'lr'",
              R"("attrs": {"param": "g")");
  // An op whose kind has attributes needs its `attrs`.
  expectError(edited(R"(, "attrs": {"tensor": "a"})", ""),
              "26:8: error: plan phases[0].ops[0].attrs: op 0 (read): "
              "missing attribute 'tensor'",
              R"({"index": 0, "kind": "read")");
}

TEST(PlanReader, UnknownAttribute) {
  expectError(
      edited(R"("attrs": {"tensor": "a"})",
             R"("attrs": {"tensor": "a", "num_heads": 4})"),
      "26:135: error: plan phases[0].ops[0].attrs.num_heads: op 0 (read): "
      "unknown attribute 'num_heads' (expected tensor)",
      R"("num_heads": 4)");
}

TEST(PlanReader, IllTypedAttribute) {
  expectError(edited(R"("lr": 0.001)", R"("lr": "0.001")"),
              R"(31:213: error: plan phases[1].ops[0].attrs.lr: op 0 )"
              R"((adam_update): attribute 'lr' must be a number, found )"
              R"("0.001")",
              R"("lr": "0.001")");
  expectError(edited(R"("offsets": [0])", R"("offsets": [0.5])"),
              "27:236: error: plan phases[0].ops[1].attrs.offsets: op 1 "
              "(reduce_scatter_start): attribute 'offsets' must be an array "
              "of integers, found [0.5]",
              R"("offsets": [0.5])");
  expectError(edited(R"("on": "device")", R"("on": "gpu")"),
              R"(31:290: error: plan phases[1].ops[0].attrs.on: op 0 )"
              R"((adam_update): attribute 'on' must be device, host or nvme, )"
              R"(found "gpu")",
              R"("on": "gpu")");
  // A unit attribute is true when present.
  expectError(
      edited(R"("on": "device")", R"("on": "device", "adamw": false)"),
      R"(31:306: error: plan phases[1].ops[0].attrs.adamw: op 0 )"
      R"((adam_update): attribute 'adamw' must be true (a unit attribute, )"
      R"(absent when unset), found false)",
      R"("adamw": false)");
}

// DeepSpeed's bias_correction: false, a unit attribute of adam_update. A plan
// without it (every plan written before it existed) corrects the moments.
TEST(PlanReader, NoBiasCorrection) {
  Expected<Plan> old = readText(kValidPlan);
  ASSERT_TRUE(old) << old.error().str();
  EXPECT_FALSE(old->phases[1].ops[0].attrsAs<AdamAttrs>().noBiasCorrection);
  Expected<Plan> set = readText(edited(
      R"("on": "device")", R"("on": "device", "no_bias_correction": true)"));
  ASSERT_TRUE(set) << set.error().str();
  EXPECT_TRUE(set->phases[1].ops[0].attrsAs<AdamAttrs>().noBiasCorrection);
  // Written only when set, and read back.
  json j = toJson(*set);
  EXPECT_EQ(j["phases"][1]["ops"][0]["attrs"]["no_bias_correction"], true);
  EXPECT_FALSE(toJson(*old)["phases"][1]["ops"][0]["attrs"].contains(
      "no_bias_correction"));

  for (const char *bad : {"false", "\"yes\"", "1"})
    expectError(
        edited(R"("on": "device")",
               std::string(R"("on": "device", "no_bias_correction": )") + bad),
        std::string(R"(31:306: error: plan phases[1].ops[0].attrs.)"
                    R"(no_bias_correction: op 0 (adam_update): attribute )"
                    R"('no_bias_correction' must be true (a unit attribute, )"
                    R"(absent when unset), found )") +
            bad,
        std::string(R"("no_bias_correction": )") + bad);
}

TEST(PlanReader, DuplicatePhaseName) {
  expectError(
      edited(R"("name": "optimizer_step")", R"("name": "micro_step")"),
      R"(29:6: error: plan phases[1].name: duplicate phase name "micro_step")",
      R"("name": "micro_step", "runs_per_step": 1, "args": [],)");
}

TEST(PlanReader, UnknownPhaseName) {
  expectError(edited(R"("name": "optimizer_step")", R"("name": "backward")"),
              R"(29:6: error: plan phases[1].name: unknown value "backward", )"
              R"(expected one of micro_step, optimizer_step)",
              R"("name": "backward")");
}

TEST(PlanReader, MissingPhase) {
  std::string text = kValidPlan;
  size_t from = text.find(R"(,
    {"name": "optimizer_step")");
  size_t to = text.find("\n  ],\n  \"comm_elements", from);
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  text.erase(from, to - from);
  expectError(text,
              R"(19:3: error: plan phases: the plan has no phase named )"
              R"("optimizer_step")",
              R"("phases": [)");
}

TEST(PlanReader, NeverThrows) {
  for (const char *text :
       {"null", "3", "\"plan\"", "{}", R"({"format": 3})",
        R"({"format": "zeroc-plan", "version": 1.5})",
        R"({"format": "zeroc-plan", "version": 18446744073709551615})",
        R"({"format": "zeroc-plan", "version": 1, "generator": "g",
            "model": [], "world_size": 1, "stage": 0})"}) {
    SCOPED_TRACE(text);
    std::optional<Expected<Plan>> plan;
    ASSERT_NO_THROW(plan.emplace(readText(text)));
    ASSERT_FALSE(*plan);
    EXPECT_GT(plan->error().line, 0);
  }
}

//===----------------------------------------------------------------------===//
// Inspector
//===----------------------------------------------------------------------===//

/// Stage 3 on four ranks, 100 parameters: one all-gather in a phase that
/// runs four times per step, one reduce-scatter there too, and an all-reduce
/// in a phase that runs once.
Plan commPlan() {
  Plan plan;
  plan.model = {"comm", 100, DType::BF16, 1, 4};
  plan.worldSize = 4;
  plan.stage = 3;
  plan.gradientAccumulationSteps = 4;
  plan.streams = {"compute"};
  plan.tensors = {
      tensor("w", "param", "", DType::BF16, {100}, true, 4, "device"),
      tensor("w.grad", "grad", "w", DType::F32, {100}, true, 4, "device"),
      tensor("w.master", "master", "w", DType::F32, {100}, true, 4, "host"),
      tensor("w.exp_avg", "exp_avg", "w", DType::F32, {100}, true, 4, "nvme")};
  PlanPhase micro;
  micro.kind = PhaseKind::MicroStep;
  micro.runsPerStep = 4;
  micro.values = {value(0, DType::BF16, {25}), value(1, DType::BF16, {100})};
  micro.ops = {op(0, "all_gather_start", 0, {0}, {}, {"w"}),
               op(1, "reduce_scatter_start", 0, {1}, {}, {"w.grad"})};
  micro.ops[0].collective = "all_gather";
  micro.ops[0].commElements = 100;
  micro.ops[1].collective = "reduce_scatter";
  micro.ops[1].commElements = 100;
  PlanPhase optimizer;
  optimizer.kind = PhaseKind::OptimizerStep;
  optimizer.ops = {op(0, "all_reduce_start", 0, {}, {}, {"w.grad"})};
  optimizer.ops[0].collective = "all_reduce";
  optimizer.ops[0].commElements = 10;
  plan.phases = {micro, optimizer};
  return plan;
}

TEST(PlanInspect, CountsEachCollectiveOncePerRunOfItsPhase) {
  json j = inspectJson(commPlan());
  // all_gather: 100 x 3/4 x 4 runs; reduce_scatter the same; all_reduce:
  // 2 x 10 x 3/4, once.
  EXPECT_EQ(j["comm_elements_per_rank_per_step"], json({{"all_gather", 300},
                                                        {"reduce_scatter", 300},
                                                        {"all_reduce", 15},
                                                        {"all_to_all", 0},
                                                        {"total", 615}}));
  EXPECT_EQ(j["collectives_per_step"], json({{"all_gather", 4},
                                             {"reduce_scatter", 4},
                                             {"all_reduce", 1},
                                             {"all_to_all", 0},
                                             {"total", 9}}));
  // bf16 inputs, bf16 inputs, an f32 tensor.
  EXPECT_EQ(j["comm_bytes_per_rank_per_step"], json({{"all_gather", 600},
                                                     {"reduce_scatter", 600},
                                                     {"all_reduce", 60},
                                                     {"all_to_all", 0},
                                                     {"total", 1260}}));
  // 3 psi (n-1)/n = 225; the plan's gathers and reductions repeat for each
  // of its four micro-batches.
  EXPECT_EQ(j["zero_paper"]["formula"], "3 psi (n-1)/n");
  EXPECT_EQ(j["zero_paper"]["comm_elements_per_rank_per_step"], 225);
  EXPECT_DOUBLE_EQ(j["zero_paper"]["ratio"].get<double>(), 615.0 / 225.0);
  EXPECT_EQ(j["ops_per_phase"],
            json({{"micro_step", 2}, {"optimizer_step", 1}}));
}

TEST(PlanInspect, FractionalElementsStayFractional) {
  Plan plan = commPlan();
  plan.worldSize = 3;
  plan.phases[0].runsPerStep = 1;
  CommPerStep comm = commPerRankPerStep(plan);
  EXPECT_DOUBLE_EQ(comm[CollectiveKind::AllGather].elements, 200.0 / 3.0);
  EXPECT_DOUBLE_EQ(comm[CollectiveKind::AllReduce].elements, 40.0 / 3.0);
  json j = inspectJson(plan);
  EXPECT_TRUE(
      j["comm_elements_per_rank_per_step"]["all_gather"].is_number_float());
  EXPECT_DOUBLE_EQ(j["comm_elements_per_rank_per_step"]["total"].get<double>(),
                   440.0 / 3.0);
}

TEST(PlanInspect, OneRankCommunicatesNothing) {
  Plan plan = commPlan();
  plan.worldSize = 1;
  json j = inspectJson(plan);
  EXPECT_EQ(j["comm_elements_per_rank_per_step"]["total"], 0);
  EXPECT_EQ(j["collectives_per_step"]["total"], 9);
  EXPECT_EQ(j["zero_paper"]["comm_elements_per_rank_per_step"], 0);
  EXPECT_TRUE(j["zero_paper"]["ratio"].is_null());
}

TEST(PlanInspect, BytesNeedOneDTypePerCollective) {
  Plan plan = commPlan();
  // The all-gather now sends a bf16 and an f32 value: its bytes are unknown,
  // and so is the total; the other kinds keep theirs.
  plan.phases[0].values.push_back(value(2, DType::F32, {25}));
  plan.phases[0].ops[0].inputs = {0, 2};
  json j = inspectJson(plan);
  EXPECT_EQ(
      j["comm_bytes_per_rank_per_step"],
      json({{"reduce_scatter", 600}, {"all_reduce", 60}, {"all_to_all", 0}}));
  CommPerStep comm = commPerRankPerStep(plan);
  EXPECT_FALSE(comm[CollectiveKind::AllGather].bytes);
  EXPECT_FALSE(comm.total().bytes);
}

TEST(PlanInspect, FlatGroupsStandForTheirParameters) {
  // all_gather_updates on a stage-2 group of bf16 parameters.
  Plan plan = stage2Plan();
  json j = inspectJson(plan);
  // reduce_scatter: 12 x 1/2 x 2 runs (bf16 inputs); all_gather: 18 x 1/2.
  EXPECT_EQ(j["comm_elements_per_rank_per_step"]["reduce_scatter"], 12);
  EXPECT_EQ(j["comm_elements_per_rank_per_step"]["all_gather"], 9);
  EXPECT_EQ(j["comm_bytes_per_rank_per_step"]["all_gather"], 18);
  EXPECT_EQ(j["comm_bytes_per_rank_per_step"]["total"], 42);
  EXPECT_EQ(j["zero_paper"]["formula"], "2 psi (n-1)/n");
  EXPECT_EQ(j["zero_paper"]["comm_elements_per_rank_per_step"], 18);
}

TEST(PlanInspect, PersistentBytesByRoleAndPlacement) {
  PersistentBytes bytes = persistentBytesPerRank(commPlan());
  // 25 elements per rank each: bf16 parameter, f32 states.
  EXPECT_EQ(bytes.at(TensorRole::Param, Placement::Device), 50);
  EXPECT_EQ(bytes.at(TensorRole::Grad, Placement::Device), 100);
  EXPECT_EQ(bytes.at(TensorRole::Master, Placement::Host), 100);
  EXPECT_EQ(bytes.role(TensorRole::ExpAvg), 100);
  EXPECT_EQ(bytes.role(TensorRole::ExpAvgSq), 0);
  EXPECT_EQ(bytes.placement(Placement::Device), 150);
  EXPECT_EQ(bytes.placement(Placement::Nvme), 100);
  EXPECT_EQ(bytes.total(), 350);
  json j = inspectJson(commPlan())["persistent_bytes_per_rank"];
  EXPECT_EQ(j["by_role"]["master"],
            json({{"device", 0}, {"host", 100}, {"nvme", 0}, {"total", 100}}));
  EXPECT_EQ(j["by_placement"],
            json({{"device", 150}, {"host", 100}, {"nvme", 100}}));
  EXPECT_EQ(j["total"], 350);
}

TEST(PlanInspect, OneBitOptimizersStateIsCounted) {
  // Stage 0 on 3 ranks: each parameter padded to a multiple of
  // 3 x lcm(3, 8) = 72 elements, as DeepSpeed's 1-bit optimizers pad it.
  Plan plan;
  plan.model = {"onebit", 124, DType::F32, 1, 4};
  plan.worldSize = 3;
  plan.stage = 0;
  plan.tensors = {
      tensor("a", "param", "", DType::F32, {100}, false, 3, "device"),
      tensor("b", "param", "", DType::F32, {24}, false, 3, "device"),
      tensor("a.grad", "grad", "a", DType::F32, {100}, false, 3, "device")};
  auto withOptimizer = [&](const char *type) {
    Plan p = plan;
    p.config = {{"optimizer", {{"type", type}}}};
    return p;
  };
  // worker_error 144 + 72, server_error 48 + 24 f32.
  const int64_t errorFeedback = 4 * (144 + 48 + 72 + 24);
  EXPECT_EQ(oneBitStateBytes(withOptimizer("AdamW")), 0);
  EXPECT_EQ(oneBitStateBytes(plan), 0);
  EXPECT_EQ(oneBitStateBytes(withOptimizer("OneBitAdam")), errorFeedback);
  // Plus one f32 per element: momentum_accumulator, exp_avg_sq_fresh.
  EXPECT_EQ(oneBitStateBytes(withOptimizer("ZeroOneAdam")),
            errorFeedback + 4 * 124);
  EXPECT_EQ(oneBitStateBytes(withOptimizer("OneBitLamb")),
            errorFeedback + 4 * 124);

  Plan oneBit = withOptimizer("OneBitAdam");
  PersistentBytes bytes = persistentBytesPerRank(oneBit);
  EXPECT_EQ(bytes.placement(Placement::Device), 4 * 124 + 400 + errorFeedback);
  EXPECT_EQ(bytes.total(), 4 * 124 + 400 + errorFeedback);
  EXPECT_EQ(summarizeMemory(oneBit).optimizerStates, errorFeedback);
  EXPECT_EQ(inspectJson(oneBit)["persistent_bytes_per_rank"]["by_role"]
                               ["one_bit_state"]["device"],
            errorFeedback);
}

TEST(PlanInspect, JsonSummary) {
  json j = inspectJson(stage2Plan());
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["stage"], 2);
  EXPECT_EQ(j["params"], 18);
  EXPECT_EQ(j["gradient_accumulation_steps"], 2);
  EXPECT_EQ(j["model"], json({{"name", "tiny"},
                              {"dtype", "bf16"},
                              {"micro_batch", 2},
                              {"seq_len", 3}}));
  EXPECT_EQ(j["ops_per_phase"],
            json({{"micro_step", 5}, {"optimizer_step", 3}}));
  EXPECT_EQ(j["runs_per_step"],
            json({{"micro_step", 2}, {"optimizer_step", 1}}));
}

TEST(PlanInspect, TextReport) {
  std::string text = inspectText(commPlan());
  EXPECT_NE(text.find("plan comm\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  parameters                     100 (100)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  phase optimizer_step           1 op, 1 run per "
                      "step\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  role      device    host    nvme   total   bytes\n"
                      "  param       50 B     0 B     0 B    50 B      50\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  total                 615   1.23 KiB             9\n"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("  ZeRO paper, 3 psi (n-1)/n: 225 elements; plan / paper = "
                "2.73\n"
                "  (the paper assumes one micro-batch per step; this plan "
                "runs 4)\n"),
      std::string::npos)
      << text;
}

} // namespace

// A padded vocabulary (zeroc gen --pad-vocab-to-multiple-of): a param's
// valid_rows round-trip and are checked against its shape and role; the
// cross-entropy's classes are a positive count.
TEST(PlanReader, PaddedTables) {
  const std::string a = R"("local_numel": 12, "placement": "device"})";
  Expected<Plan> plan = readText(edited(
      a, R"("local_numel": 12, "placement": "device", "valid_rows": 2})"));
  ASSERT_TRUE(plan) << plan.error().str();
  EXPECT_EQ(plan->tensors[0].validRows, 2);
  EXPECT_EQ(plan->tensors[1].validRows, 0);
  EXPECT_EQ(toJson(*plan)["tensors"][0]["valid_rows"], 2);
  EXPECT_FALSE(toJson(*plan)["tensors"][1].contains("valid_rows"));
  expectError(
      edited(a,
             R"("local_numel": 12, "placement": "device", "valid_rows": 4})"),
      "12:143: error: plan tensors[0].valid_rows: valid_rows 4 is more than "
      "the first dimension of the shape [3, 4]",
      R"("valid_rows")");
  expectError(
      edited(a,
             R"("local_numel": 12, "placement": "device", "valid_rows": 0})"),
      "12:143: error: plan tensors[0].valid_rows: expected an integer >= 1, "
      "found 0",
      R"("valid_rows")");
  expectError(edited(R"("local_numel": 10, "placement": "device"})",
                     R"("local_numel": 10, "placement": "device", )"
                     R"("valid_rows": 2})"),
              "14:154: error: plan tensors[2].valid_rows: only a param "
              "tensor has valid_rows",
              R"("valid_rows")");

  auto attrs = [](const std::string &text, OpKind kind,
                  std::string *error) -> PlanOpAttrs {
    Expected<JsonDocument> doc = JsonDocument::parse(text, "attrs");
    JsonFieldReader r(*doc, "plan");
    PlanOpAttrs out = readOpAttrs(r, doc->root(), JsonPath(), 3, kind);
    *error = r.error ? r.error->message : "";
    return out;
  };
  std::string error;
  PlanOpAttrs ce = attrs(R"({"classes": 7})", OpKind::CrossEntropy, &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(std::get<CrossEntropyAttrs>(ce).classesOf(9), 7);
  EXPECT_EQ(attrsToJson(ce), json({{"classes", 7}}));
  PlanOpAttrs none = attrs("{}", OpKind::CrossEntropyBackward, &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(std::get<CrossEntropyAttrs>(none).classesOf(9), 9);
  EXPECT_EQ(attrsToJson(none), json::object());
  for (const char *bad : {R"({"classes": 0})", R"({"classes": 2.5})"}) {
    attrs(bad, OpKind::CrossEntropy, &error);
    EXPECT_NE(error.find("op 3 (cross_entropy): attribute 'classes' must be a "
                         "positive integer, found "),
              std::string::npos)
        << bad << ": " << error;
  }
}

// The padded tables and the loss agree (vocabPaddingProblem), or the plan
// is refused naming both.
TEST(PlanReader, PaddedTablesAndTheLossAgree) {
  auto make = [](std::optional<int64_t> classes, int64_t validRows) {
    Plan plan;
    PlanTensor wte;
    wte.name = "wte.weight";
    wte.shape = {8, 4};
    wte.numel = wte.localNumel = 32;
    wte.validRows = validRows;
    plan.tensors.push_back(wte);
    PlanPhase phase;
    phase.values = {{0, DType::F32, {1, 2, 8}, 64}, {1, DType::I32, {1, 2}, 8}};
    PlanOp ce;
    ce.kind = OpKind::CrossEntropy;
    ce.inputs = {0, 1};
    ce.attrs = CrossEntropyAttrs{classes};
    phase.ops.push_back(ce);
    plan.phases.push_back(phase);
    return plan;
  };
  auto problem = [](const Plan &plan) {
    auto p = vocabPaddingProblem(plan);
    return p ? p->first.pointer() + ": " + p->second : std::string();
  };
  EXPECT_EQ(problem(make(6, 6)), "");
  EXPECT_EQ(problem(make(std::nullopt, 0)), "");
  EXPECT_EQ(problem(make(8, 0)), "");
  EXPECT_EQ(problem(make(std::nullopt, 6)),
            "/phases/0/ops/0/attrs: op 0 (cross_entropy): no classes, but the "
            "vocabulary's tables are padded to 8 rows of which 6 are valid "
            "('wte.weight'): the loss must ignore the padding");
  EXPECT_EQ(problem(make(5, 6)),
            "/phases/0/ops/0/attrs: op 0 (cross_entropy): classes 5, but the "
            "vocabulary's tables are padded to 8 rows of which 6 are valid "
            "('wte.weight'): the loss must ignore the padding");
  EXPECT_EQ(problem(make(6, 0)),
            "/phases/0/ops/0/attrs: op 0 (cross_entropy): classes 6 of logits "
            "8 wide, but no table has valid_rows (padding rows)");
  EXPECT_EQ(problem(make(9, 0)),
            "/phases/0/ops/0/attrs: op 0 (cross_entropy): classes 9 is more "
            "than the logits' width 8");
  Plan two = make(6, 6);
  two.tensors.push_back(two.tensors[0]);
  two.tensors[1].name = "lm_head.weight";
  two.tensors[1].validRows = 7;
  EXPECT_EQ(problem(two), "/tensors/1/valid_rows: 'lm_head.weight' has "
                          "valid_rows 7 and 'wte.weight' 6: a padded "
                          "vocabulary has one size");
  Plan expert = make(6, 6);
  expert.tensors[0].expert = true;
  EXPECT_EQ(problem(expert), "/tensors/0/valid_rows: expert tensor "
                             "'wte.weight' has valid_rows: only a "
                             "vocabulary's tables are padded");
  // readPlan refuses them where they are.
  std::string both =
      edited(R"("local_numel": 12, "placement": "device"})",
             R"("local_numel": 12, "placement": "device", "valid_rows": 2})");
  both.replace(
      both.find(R"("local_numel": 6, "placement": "device"})"),
      std::string(R"("local_numel": 6, "placement": "device"})").size(),
      R"("local_numel": 6, "placement": "device", "valid_rows": 5})");
  expectError(
      both,
      "13:138: error: plan tensors[1].valid_rows: 'b' has valid_rows 5 and "
      "'a' 2: a padded vocabulary has one size",
      R"("valid_rows": 5)");
}

// DeepSpeed's gradient bucket buffers (stage_1_and_2.py's backward,
// stage3.py's __init__), from the plan's resolved config: none at stage 0
// or without contiguous_gradients; at stages 1-2 one buffer, two with
// overlap_comm; at stage 3 one for the whole run; reduce_bucket_size
// elements each, in the model dtype.
TEST(PlanMemory, DeepSpeedBucketBuffersFollowDeepSpeedsRule) {
  auto buffersOf = [](int64_t stage, bool contiguous, bool overlap,
                      DType dtype) {
    Plan plan;
    plan.stage = stage;
    plan.model.dtype = dtype;
    plan.config = {{"zero_optimization",
                    {{"stage", stage},
                     {"contiguous_gradients", contiguous},
                     {"overlap_comm", overlap},
                     {"reduce_bucket_size", 1000}}}};
    return deepSpeedBucketBuffers(plan);
  };
  EXPECT_EQ(buffersOf(0, true, true, DType::BF16).bytes(), 0);
  EXPECT_EQ(buffersOf(2, false, true, DType::BF16).bytes(), 0);
  EXPECT_EQ(buffersOf(1, true, false, DType::BF16).bytes(), 2000);
  EXPECT_EQ(buffersOf(2, true, true, DType::BF16).bytes(), 4000);
  EXPECT_EQ(buffersOf(2, true, true, DType::F32).bytes(), 8000);
  DeepSpeedBucketBuffers s3 = buffersOf(3, true, true, DType::BF16);
  EXPECT_EQ(s3.buffers, 1);
  EXPECT_TRUE(s3.wholeRun);
  EXPECT_EQ(s3.bytes(), 2000);
  // Said only where there are some; with room, the bucket that fits.
  EXPECT_EQ(deepSpeedBucketNote(buffersOf(0, true, true, DType::BF16), 0, 100),
            "");
  std::string tight =
      deepSpeedBucketNote(buffersOf(2, true, true, DType::BF16), 1000, 2600);
  EXPECT_NE(tight.find("the peak plus them is 4.88 KiB, more than the 2.54 "
                       "KiB that fits: under DeepSpeed, lower "
                       "reduce_bucket_size to at most 400"),
            std::string::npos)
      << tight;
  EXPECT_NE(deepSpeedBucketNote(s3, 1000, 3000).find("within"),
            std::string::npos);
}
