//===- PipelineTest.cpp - The ZeRO pipeline end to end, in process --------===//
//
// Compiles generated GPT-2 and Llama models for every stage, offload choice
// and world size the issue names, checks that each plan passes the schedule
// verifier, and that its communication equals the ZeRO paper's analysis:
// 2 psi (n-1)/n per rank per step for stages 0-2, 3 psi (n-1)/n for stage 3,
// with gradient accumulation changing only what it should.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Pipeline/Pipeline.h"
#include "model/ModelOps.h"
#include "sched/SchedOps.h"
#include "zeroc/Cost/CostModel.h"
#include "zeroc/Export/PlanWriter.h"
#include "zeroc/Models/ModelBuilder.h"
#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Plan/PlanMemory.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

using namespace zeroc;

namespace {

struct Compiled {
  Plan plan;
  ModelStats stats;
};

class PipelineTest : public ::testing::Test {
protected:
  PipelineTest() {
    context.loadDialect<model::ModelDialect, sched::SchedDialect,
                        mlir::func::FuncDialect>();
  }

  /// Generates `preset` (sequence 8, micro-batch 2, `dtype`) and compiles it
  /// with the DeepSpeed config `json` for `worldSize` ranks.
  std::optional<Compiled> compile(const std::string &preset,
                                  const std::string &json, int64_t worldSize,
                                  DType dtype = DType::BF16) {
    auto spec = withBatchShape(*presetSpec(preset), 8, 2, dtype);
    mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, *spec);
    mlir::FailureOr<ModelStats> stats = computeModelStats(*module);
    if (mlir::failed(stats))
      return std::nullopt;
    auto doc = JsonDocument::parse(json, "ds.json");
    EXPECT_TRUE(bool(doc));
    auto cfg = readDeepSpeedConfig(*doc, configContextFor(*stats, worldSize));
    if (!cfg) {
      ADD_FAILURE() << cfg.error().str();
      return std::nullopt;
    }
    mlir::PassManager pm(&context);
    buildZeroPipeline(pm, *cfg);
    if (mlir::failed(pm.run(*module))) {
      ADD_FAILURE() << preset << " did not compile with " << json;
      return std::nullopt;
    }
    PlanSource source;
    source.gradientAccumulationSteps = cfg->gradientAccumulationSteps;
    source.config = toDeepSpeedJson(*cfg); // As the pipeline writes it.
    mlir::FailureOr<Plan> plan = buildPlan(*module, source);
    if (mlir::failed(plan))
      return std::nullopt;
    return Compiled{*plan, *stats};
  }

  /// Every stage-3 parameter sharded and, unless `zeroExtra` says
  /// otherwise, released after each use (reuse distance 0): the ZeRO
  /// paper's accounting.
  static std::string config(int stage, int64_t gradAccum,
                            const std::string &zeroExtra = "",
                            const std::string &precision = "bf16") {
    // "fp32": fp16 and bf16 both off.
    std::string block = precision == "fp32" ? "fp16" : precision;
    std::string enabled = precision == "fp32" ? "false" : "true";
    return R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": )" +
           std::to_string(gradAccum) + R"(, ")" + block + R"(": {"enabled": )" +
           enabled + R"(}, "zero_optimization": {"stage": )" +
           std::to_string(stage) +
           R"(, "stage3_param_persistence_threshold": 0)" +
           (zeroExtra.find("stage3_max_reuse_distance") == std::string::npos
                ? R"(, "stage3_max_reuse_distance": 0)"
                : "") +
           zeroExtra + "}}";
  }

  mlir::MLIRContext context;
};

double fraction(int64_t n) { return double(n - 1) / double(n); }

void expectNear(double actual, double expected, const std::string &what) {
  EXPECT_NEAR(actual, expected, 1e-9 * std::max(1.0, expected)) << what;
}

// Tiny Mixtral too: psi counts every expert (each rank holds, gathers and
// reduces all of them without expert parallelism), not the active ones.
TEST_F(PipelineTest, CommunicationMatchesTheZeroPaper) {
  for (const char *preset : {"tiny-gpt2", "tiny-llama", "tiny-mixtral"})
    for (int64_t n : {1, 2, 8, 1024})
      for (int stage = 0; stage <= 3; ++stage) {
        std::optional<Compiled> c = compile(preset, config(stage, 1), n);
        ASSERT_TRUE(c.has_value());
        double psi = double(c->stats.params);
        double expected = (stage == 3 ? 3 : 2) * psi * fraction(n);
        std::string what = std::string(preset) + " stage " +
                           std::to_string(stage) + " n " + std::to_string(n);
        expectNear(c->plan.comm.total(), expected, what);
        switch (stage) {
        case 0:
          expectNear(c->plan.comm.allReduce, 2 * psi * fraction(n), what);
          break;
        case 3:
          expectNear(c->plan.comm.allGather, 2 * psi * fraction(n), what);
          [[fallthrough]];
        default:
          expectNear(c->plan.comm.reduceScatter, psi * fraction(n), what);
        }
      }
}

// DeepSpeed's stage3_max_reuse_distance (partitioned_param_coordinator.py,
// __params_to_release) keeps a parameter gathered when the modules its
// trace visits before the next use hold fewer parameters than the distance.
// Its default, 1e9, keeps every parameter of a tiny model from its forward
// use to its backward one: one gather a step. A distance of 0 keeps none
// (DeepSpeed stops before the first module); in between, the parameters
// used again soonest are kept: the head's, whose backward follows its
// forward, and the last layers'.
TEST_F(PipelineTest, ReuseDistanceKeepsParametersGatheredAsDeepSpeedDoes) {
  for (const char *preset : {"tiny-gpt2", "tiny-llama"})
    for (int64_t n : {2, 8}) {
      std::string what = std::string(preset) + " n " + std::to_string(n);
      std::optional<Compiled> all = compile(
          preset, config(3, 1, R"(, "stage3_max_reuse_distance": 1000000000)"),
          n);
      std::optional<Compiled> none = compile(
          preset, config(3, 1, R"(, "stage3_max_reuse_distance": 0)"), n);
      std::optional<Compiled> some = compile(
          preset, config(3, 1, R"(, "stage3_max_reuse_distance": 20000)"), n);
      // DeepSpeed's release rule reads only the reuse distance: a live
      // budget smaller than one layer stops prefetching, not reuse.
      std::optional<Compiled> tight =
          compile(preset,
                  config(3, 1,
                         R"(, "stage3_max_reuse_distance": 1000000000,
                     "stage3_max_live_parameters": 1000)"),
                  n);
      ASSERT_TRUE(all && none && some && tight);
      double psi = double(all->stats.params), f = fraction(n);
      expectNear(all->plan.comm.allGather, psi * f, what + " reuse 1e9");
      expectNear(tight->plan.comm.allGather, psi * f,
                 what + " reuse 1e9, max live 1000");
      expectNear(none->plan.comm.allGather, 2 * psi * f, what + " reuse 0");
      EXPECT_GT(some->plan.comm.allGather, psi * f * 1.01) << what;
      EXPECT_LT(some->plan.comm.allGather, 2 * psi * f * 0.99) << what;
      // Reuse saves gathers, never reductions.
      expectNear(all->plan.comm.reduceScatter, psi * f, what);
      expectNear(none->plan.comm.reduceScatter, psi * f, what);
    }
}

// Stages 0 and 1 reduce once at the boundary; stage 2 reduce-scatters every
// micro-step; stage 3 gathers (forward and backward) and reduces every
// micro-step.
TEST_F(PipelineTest, GradientAccumulationChangesOnlyWhatItShould) {
  const int64_t n = 8, ga = 4;
  for (int stage = 0; stage <= 3; ++stage) {
    std::optional<Compiled> c = compile("tiny-gpt2", config(stage, ga), n);
    ASSERT_TRUE(c.has_value());
    double psi = double(c->stats.params), f = fraction(n);
    CommVolume expected;
    switch (stage) {
    case 0:
      expected.allReduce = 2 * psi * f;
      break;
    case 1:
      expected.reduceScatter = psi * f;
      expected.allGather = psi * f;
      break;
    case 2:
      expected.reduceScatter = ga * psi * f;
      expected.allGather = psi * f;
      break;
    case 3:
      expected.reduceScatter = ga * psi * f;
      expected.allGather = 2 * ga * psi * f;
      break;
    }
    std::string what = "stage " + std::to_string(stage);
    expectNear(c->plan.comm.allGather, expected.allGather, what);
    expectNear(c->plan.comm.reduceScatter, expected.reduceScatter, what);
    expectNear(c->plan.comm.allReduce, expected.allReduce, what);
  }
}

// Parameters under the persistence threshold stay whole in stage 3: their
// gradients are reduce-scattered and the updated values all-gathered once per
// step, like stage 2, instead of being gathered for every use.
TEST_F(PipelineTest, PersistentParametersCommunicateLikeStage2) {
  std::optional<Compiled> c = compile(
      "tiny-gpt2",
      R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
          "zero_optimization": {"stage": 3,
                                "stage3_param_persistence_threshold": 100,
                                "stage3_max_reuse_distance": 0}})",
      4);
  ASSERT_TRUE(c.has_value());
  double persistent = 0;
  for (const PlanTensor &t : c->plan.tensors)
    if (t.role == TensorRole::Param && !t.sharded)
      persistent += double(t.numel);
  ASSERT_GT(persistent, 0);
  double psi = double(c->stats.params), f = fraction(4);
  expectNear(c->plan.comm.total(),
             (3 * (psi - persistent) + 2 * persistent) * f, "persistent");
}

TEST_F(PipelineTest, ReduceScatterFalseUsesAllReduce) {
  std::optional<Compiled> c =
      compile("tiny-gpt2", config(2, 1, R"(, "reduce_scatter": false)"), 8);
  ASSERT_TRUE(c.has_value());
  double psi = double(c->stats.params), f = fraction(8);
  expectNear(c->plan.comm.allReduce, 2 * psi * f, "all-reduce");
  expectNear(c->plan.comm.reduceScatter, 0, "no reduce-scatter");
  expectNear(c->plan.comm.allGather, psi * f, "updated parameters");
}

// The issue's matrix: a GPT-2 and a Llama example, stages 0-3, with and
// without each offload, at world sizes 1, 2, 8 and 1024. Every plan passes
// the schedule verifier (the pipeline's last pass) and keeps its shards
// consistent.
TEST_F(PipelineTest, EveryStageOffloadAndWorldSizeCompiles) {
  struct Offload {
    const char *json;
    int minStage;
  } offloads[] = {
      {"", 0},
      {R"(, "offload_optimizer": {"device": "cpu"})", 1},
      {R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"})",
       1},
      {R"(, "offload_param": {"device": "cpu"})", 3},
      {R"(, "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"},
            "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"})",
       3},
  };
  for (const char *preset : {"gpt2", "llama-2-7b"})
    for (int64_t n : {1, 2, 8, 1024})
      for (int stage = 0; stage <= 3; ++stage)
        for (const Offload &o : offloads) {
          if (stage < o.minStage)
            continue;
          std::optional<Compiled> c =
              compile(preset, config(stage, 2, o.json), n);
          ASSERT_TRUE(c.has_value())
              << preset << " stage " << stage << " n " << n << o.json;
          EXPECT_EQ(c->plan.worldSize, n);
          EXPECT_EQ(c->plan.stage, stage);
          for (const PlanTensor &t : c->plan.tensors)
            EXPECT_EQ(t.localNumel,
                      t.sharded ? (t.numel + n - 1) / n : t.numel);
        }
}

// ZeRO-Offload (Ren et al. 2021, Sec. 4.1): per step each rank sends its
// 16-bit gradient partition to the host (2 psi / n bytes) and gets its
// updated 16-bit parameters back (2 psi / n). zerorun's epilogue adds into
// the host partition in place, so it also reads it (another 2 psi / n to
// the GPU), and the batch's token ids and targets cross too. With
// gradient accumulation the gradients cross every micro-step. Nothing
// crosses PCIe on CPU ranks, nor without offload.
TEST_F(PipelineTest, OffloadTrafficIsZeroOffloads) {
  for (int64_t n : {1, 2, 8})
    for (int64_t ga : {1, 4}) {
      std::optional<Compiled> c = compile(
          "tiny-gpt2",
          config(2, ga, R"(, "offload_optimizer": {"device": "cpu"})"), n);
      ASSERT_TRUE(c.has_value());
      double partition = double((c->stats.params + n - 1) / n);
      // Micro-batch 2 x sequence 8, int32 ids and targets.
      double batch = 2.0 * 2 * 8 * 4;
      std::string what = "n " + std::to_string(n) + " ga " + std::to_string(ga);
      OffloadTraffic gpu = offloadTrafficPerStep(c->plan, true);
      expectNear(gpu.toHost, double(ga) * 2 * partition, what);
      expectNear(gpu.toDevice,
                 2 * partition + double(ga) * (2 * partition + batch), what);
      EXPECT_EQ(gpu.nvmeRead + gpu.nvmeWrite, 0.0) << what;
      OffloadTraffic cpu = offloadTrafficPerStep(c->plan, false);
      EXPECT_FALSE(cpu.any()) << what;
    }
  std::optional<Compiled> plain = compile("tiny-gpt2", config(2, 1), 2);
  ASSERT_TRUE(plain.has_value());
  OffloadTraffic none = offloadTrafficPerStep(plain->plan, true);
  EXPECT_EQ(none.toHost + none.nvmeRead + none.nvmeWrite, 0.0);
  EXPECT_EQ(none.toDevice, 2.0 * 2 * 8 * 4); // The batch alone.
}

// ZeRO-Infinity with the optimizer states on NVMe (stage 2): each step
// reads and writes the rank's f32 master, momentum and variance partitions
// once, each file in whole 4 KiB blocks.
TEST_F(PipelineTest, NvmeTrafficIsTheStatesOncePerStep) {
  for (int64_t n : {1, 2, 8}) {
    std::optional<Compiled> c = compile(
        "tiny-gpt2",
        config(
            2, 2,
            R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"})"),
        n);
    ASSERT_TRUE(c.has_value());
    int64_t partition = (c->stats.params + n - 1) / n;
    double states = 3.0 * double((partition * 4 + 4095) / 4096 * 4096);
    OffloadTraffic t = offloadTrafficPerStep(c->plan, true);
    expectNear(t.nvmeRead, states, "n " + std::to_string(n));
    expectNear(t.nvmeWrite, states, "n " + std::to_string(n));
  }
}

TEST_F(PipelineTest, OffloadPlacesStatesOnTheHost) {
  std::optional<Compiled> c = compile(
      "tiny-llama",
      config(
          3, 1,
          R"(, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})"),
      4);
  ASSERT_TRUE(c.has_value());
  for (const PlanTensor &t : c->plan.tensors) {
    if (t.role == TensorRole::Master || t.role == TensorRole::ExpAvg ||
        t.role == TensorRole::ExpAvgSq) {
      EXPECT_EQ(t.placement, Placement::Host) << t.name;
    }
    if (t.role == TensorRole::Param) {
      EXPECT_EQ(t.placement, t.sharded ? Placement::Host : Placement::Device)
          << t.name;
    }
  }
  int fetches = 0;
  for (const PlanPhase &p : c->plan.phases)
    for (const PlanOp &op : p.ops)
      fetches += op.kind == OpKind::FetchStart;
  EXPECT_GT(fetches, 0);
}

} // namespace

namespace {

/// The elements of each parameter (the model's, not the plan's layout).
std::vector<int64_t> parameterNumels(const Plan &plan) {
  std::vector<int64_t> out;
  for (const PlanTensor &t : plan.tensors)
    if (t.role == TensorRole::Param)
      out.push_back(t.numel);
  return out;
}

/// DeepSpeed's padding, written out here rather than taken from
/// ShardLayout.h: stage 3 partitions each parameter into ceil(n / N)
/// elements per rank (partition_parameters.py, `_partition_param`); stages
/// 1-2 pad the flat buffer to a multiple of 2 N (stage_1_and_2.py,
/// `nccl_start_alignment_factor = 2`) and give each rank 1/N of it.
int64_t stage3ShardElements(const std::vector<int64_t> &numels, int64_t n) {
  int64_t sum = 0;
  for (int64_t e : numels)
    sum += (e + n - 1) / n;
  return sum;
}
int64_t flatPartitionElements(const std::vector<int64_t> &numels, int64_t n) {
  int64_t total = 0;
  for (int64_t e : numels)
    total += e;
  return (total + 2 * n - 1) / (2 * n) * (2 * n) / n;
}

class MemoryTest : public PipelineTest {};

// The ZeRO paper's model-state formulas, mixed precision (K = 12):
// stage 0 (2+2+K) psi, stage 1 4 psi + K psi/N, stage 2 2 psi + (2+K) psi/N,
// stage 3 (2+2+K) psi/N; and zeroc's fp32 analogues (no separate master
// copy, docs/zero-pipeline.md): 16 psi, 8 psi + 8 psi/N, 4 psi + 12 psi/N,
// 16 psi/N.
TEST_F(MemoryTest, ModelStatesFollowTheZeroPaper) {
  for (bool mixed : {true, false})
    for (int64_t n : {1, 2, 8, 64})
      for (int stage = 0; stage <= 3; ++stage) {
        std::optional<Compiled> c =
            compile("tiny-llama", config(stage, 1, "", mixed ? "bf16" : "fp32"),
                    n, mixed ? DType::BF16 : DType::F32);
        ASSERT_TRUE(c.has_value());
        std::vector<int64_t> numels = parameterNumels(c->plan);
        int64_t psi = c->stats.params;
        ASSERT_EQ(std::accumulate(numels.begin(), numels.end(), int64_t(0)),
                  psi);
        // psi / N, padded as DeepSpeed pads it.
        int64_t flat = flatPartitionElements(numels, n);
        int64_t shard = stage3ShardElements(numels, n);
        int64_t w = mixed ? 2 : 4, k = mixed ? 12 : 8;
        // Stage 1 keeps the gradient as the whole padded flat buffer (the
        // all-reduce's operand, `zero.flat0.grad`), DeepSpeed as
        // per-parameter .grad tensors: 2N - 1 elements at most more.
        int64_t expected[] = {(2 * w + k) * psi,
                              w * psi + w * flat * n + k * flat,
                              w * psi + (w + k) * flat, (2 * w + k) * shard};
        MemorySummary m = summarizeMemory(c->plan);
        EXPECT_EQ(m.modelStateBytes(), expected[stage])
            << "stage " << stage << " n " << n << " mixed " << mixed;
      }
}

// Korthikanti et al. (2022), section 4.1: without recomputation a GPT
// layer in 16-bit (with the materialized attention, whose probabilities
// their count assumes) keeps s b h (34 + 5 a s / h) bytes; without dropout (its
// masks: 2 s b h + a s^2 b) that is 32 s b h + 2 a s^2 b, plus the two
// layernorms' f32 mean and rstd per row, 16 s b. At the end of the forward
// (the cross-entropy) the plan holds exactly that per layer, the final
// layernorm's input and statistics (2 s b h + 8 s b), the head's input
// (2 s b h), the logits (2 s b v), the token ids and targets (i32, 2 x 4 s b)
// and the f32 loss. Where the tied embedding's two gradient contributions
// (head and lookup, v h each in bf16) are summed, the sum takes the first
// one's memory (PyTorch accumulates .grad in place): two v h live there,
// not three, and the step's peak is elsewhere.
TEST_F(MemoryTest, ActivationsFollowKorthikanti) {
  auto spec = withBatchShape(*presetSpec("gpt2"), 256, 2, DType::BF16);
  spec->numLayers = 4;
  spec->attentionKernel = AttentionKernel::Materialized;
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, *spec);
  mlir::FailureOr<ModelStats> stats = computeModelStats(*module);
  ASSERT_TRUE(mlir::succeeded(stats));
  auto doc = JsonDocument::parse(config(0, 1, "", "bf16"), "ds.json");
  auto cfg = readDeepSpeedConfig(*doc, configContextFor(*stats, 1));
  ASSERT_TRUE(bool(cfg));
  mlir::PassManager pm(&context);
  buildZeroPipeline(pm, *cfg);
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  mlir::FailureOr<Plan> plan = buildPlan(*module, PlanSource{});
  ASSERT_TRUE(mlir::succeeded(plan));
  MemorySummary m = summarizeMemory(*plan);
  int64_t s = 256, b = 2, h = 768, a = 12, v = 50257, layers = 4;
  int64_t perLayer = 32 * s * b * h + 2 * a * s * s * b + 16 * s * b;
  int64_t tokens = 2 * 4 * s * b, loss = 4;
  const PlanPhase &micro = *plan->findPhase(PhaseKind::MicroStep);
  ASSERT_TRUE(micro.memory && !micro.memory->liveBytes.empty());
  auto crossEntropy =
      std::find_if(micro.ops.begin(), micro.ops.end(), [](const PlanOp &op) {
        return op.kind == OpKind::CrossEntropy;
      });
  ASSERT_NE(crossEntropy, micro.ops.end());
  EXPECT_EQ(micro.memory->liveBytes[size_t(crossEntropy - micro.ops.begin())],
            layers * perLayer + (2 * s * b * h + 8 * s * b) + 2 * s * b * h +
                2 * s * b * v + tokens + loss);
  auto tiedSum =
      std::find_if(micro.ops.begin(), micro.ops.end(), [&](const PlanOp &op) {
        const auto *add = std::get_if<AddAttrs>(&op.attrs);
        return add && add->inPlace && op.outputs.size() == 1 &&
               op.inputs.size() == 2 &&
               micro.values[op.outputs[0]].bytes == v * h * 2;
      });
  ASSERT_NE(tiedSum, micro.ops.end());
  EXPECT_EQ(micro.values[tiedSum->outputs[0]].offset,
            micro.values[tiedSum->inputs[0]].offset);
  EXPECT_EQ(micro.memory->liveBytes[size_t(tiedSum - micro.ops.begin())],
            2 * (v * h * 2) + tokens + loss);
  EXPECT_LT(m.activations, 3 * (v * h * 2) + tokens + loss);
  EXPECT_NE(m.peakOpKind, "add");
  EXPECT_EQ(m.peakPhase, "micro_step");
}

TEST_F(MemoryTest, FitCheckRefusesAndExplains) {
  std::optional<Compiled> c = compile("tiny-llama", config(0, 1), 4);
  ASSERT_TRUE(c.has_value());
  MemorySummary m = summarizeMemory(c->plan);
  EXPECT_EQ(checkFit(c->plan, m.peakDeviceBytes, "GPU"), std::nullopt);
  std::optional<std::string> refusal =
      checkFit(c->plan, m.peakDeviceBytes - 1, "A GPU");
  ASSERT_TRUE(refusal.has_value());
  EXPECT_NE(refusal->find("at its peak, op "), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("ZeRO stage 3"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("activation_checkpointing"), std::string::npos);
  EXPECT_NE(refusal->find("--allow-oom"), std::string::npos);
}

TEST_F(MemoryTest, OneBitStateCountsAndNoZeroStageIsSuggested) {
  std::string adamConfig = config(0, 1);
  std::string oneBitConfig = adamConfig.substr(0, adamConfig.size() - 1) +
                             R"(, "optimizer": {"type": "OneBitAdam"}})";
  std::optional<Compiled> adam = compile("tiny-llama", adamConfig, 4);
  std::optional<Compiled> oneBit = compile("tiny-llama", oneBitConfig, 4);
  ASSERT_TRUE(adam.has_value() && oneBit.has_value());
  MemorySummary a = summarizeMemory(adam->plan);
  MemorySummary m = summarizeMemory(oneBit->plan);
  EXPECT_GT(oneBitStateBytes(oneBit->plan), 0);
  EXPECT_EQ(m.optimizerStates,
            a.optimizerStates + oneBitStateBytes(oneBit->plan));
  EXPECT_EQ(m.peakDeviceBytes,
            a.peakDeviceBytes + oneBitStateBytes(oneBit->plan));
  std::optional<std::string> refusal =
      checkFit(oneBit->plan, m.peakDeviceBytes - 1, "A GPU");
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->find("ZeRO stage 1"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("OneBitAdam runs only without ZeRO (stage 0)"),
            std::string::npos)
      << *refusal;
}

} // namespace

// An expert-parallel plan carries its groups and each collective's, reads
// back as written, and accounts communication per group as DeepSpeed-MoE's
// analysis says (tiny Mixtral, 2 layers of 4 experts, top-2, hidden 64,
// intermediate 96; 2 x 8 tokens; world 4, ep 2, stage 3, one micro-batch):
// 8 all-to-alls of 32 x 64 rows, half of each leaving the rank, over the
// expert-parallel group; this rank's experts, 2 x 3 x 2 x 96 x 64 = 73728
// elements, gathered twice and reduce-scattered once among the 2
// expert-data-parallel ranks.
TEST_F(PipelineTest, ExpertParallelPlansCarryTheirGroups) {
  std::string json =
      config(3, 1, "", "fp32")
          .insert(
              1, R"("expert_parallel": {"enabled": true, "autoep_size": 2}, )");
  std::optional<Compiled> c = compile("tiny-mixtral", json, 4, DType::F32);
  ASSERT_TRUE(c);
  const Plan &plan = c->plan;
  EXPECT_EQ(plan.expertParallelSize, 2);
  EXPECT_EQ(plan.groupSize(CommGroupKind::ExpertDataParallel), 2);
  const CommVolume &tokens = plan.commByGroup.at(CommGroupKind::ExpertParallel);
  EXPECT_DOUBLE_EQ(tokens.allToAll, 8 * (32 * 64) * 0.5);
  EXPECT_DOUBLE_EQ(tokens.total(), tokens.allToAll);
  const CommVolume &experts =
      plan.commByGroup.at(CommGroupKind::ExpertDataParallel);
  EXPECT_DOUBLE_EQ(experts.allGather, 2 * 73728 * 0.5);
  EXPECT_DOUBLE_EQ(experts.reduceScatter, 73728 * 0.5);
  int64_t expertTensors = 0;
  for (const PlanTensor &t : plan.tensors)
    if (t.expert) {
      ++expertTensors;
      EXPECT_EQ(t.shape[0], 2) << t.name; // 4 experts / ep 2.
    }
  EXPECT_EQ(expertTensors, 2 * 3 * 4); // param, grad, exp_avg, exp_avg_sq.
  // The compile helper leaves the model's record empty; fill what the
  // reader requires.
  Plan written = plan;
  written.model.name = "tiny-mixtral";
  written.model.microBatch = 2;
  written.model.seqLen = 8;
  auto doc = JsonDocument::parse(toJson(written).dump(), "ep.json");
  ASSERT_TRUE(bool(doc));
  Expected<Plan> back = readPlan(*doc);
  ASSERT_TRUE(back) << back.error().str();
  EXPECT_EQ(toJson(*back), toJson(written));
}

// Expert parallelism moves the experts' work, it does not change it: under
// uniform routing each rank's local experts see tokens x top_k rows, so a
// rank's FLOPs per micro-step are those of ep 1, and the split ops' FLOPs
// add up to the hand count of Mixtral's sparse block (forward: three
// products of 2 h I per routed row, SiLU and product 5 per intermediate
// element, the weighted combine 2 per row element; backward twice the
// products, 10 per intermediate element, 4 per row element).
TEST_F(PipelineTest, ExpertParallelismKeepsEachRanksFlopsUnderUniformRouting) {
  auto microStepFlops = [&](int64_t ep, int64_t &moeFlops) -> int64_t {
    auto spec = withBatchShape(*presetSpec("tiny-mixtral"), 8, 2, DType::F32);
    mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, *spec);
    mlir::FailureOr<ModelStats> stats = computeModelStats(*module);
    EXPECT_TRUE(mlir::succeeded(stats));
    std::string json = R"({"train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 2})";
    if (ep > 1)
      json += R"(, "expert_parallel": {"enabled": true, "autoep_size": )" +
              std::to_string(ep) + "}";
    json += "}";
    auto doc = JsonDocument::parse(json, "ds.json");
    EXPECT_TRUE(bool(doc));
    auto cfg = readDeepSpeedConfig(*doc, configContextFor(*stats, 4));
    if (!cfg) {
      ADD_FAILURE() << cfg.error().str();
      return -1;
    }
    EXPECT_EQ(cfg->expertParallel.size, ep);
    mlir::PassManager pm(&context);
    buildZeroPipeline(pm, *cfg);
    if (mlir::failed(pm.run(*module))) {
      ADD_FAILURE() << "tiny-mixtral did not compile at ep " << ep;
      return -1;
    }
    int64_t total = 0;
    moeFlops = 0;
    module->walk([&](model::CostOpInterface op) {
      total += op.getForwardFlops();
      if (mlir::isa<model::MoeExpertsOp, model::MoeExpertsBackwardOp,
                    model::MoeDispatchOp, model::MoeLocalExpertsOp,
                    model::MoeCombineOp, model::MoeCombineBackwardOp,
                    model::MoeLocalExpertsBackwardOp>(op.getOperation()))
        moeFlops += op.getForwardFlops();
    });
    return total;
  };
  int64_t moe1 = 0, moe2 = 0, moe4 = 0;
  int64_t dense = microStepFlops(1, moe1);
  EXPECT_EQ(microStepFlops(2, moe2), dense);
  EXPECT_EQ(microStepFlops(4, moe4), dense);
  // tiny-mixtral: 2 layers, hidden 64, intermediate 96, top-2; 2 x 8 tokens.
  int64_t rows = 2 * 8 * 2, h = 64, inter = 96;
  int64_t perLayer = (6 * rows * h * inter + 5 * rows * inter + 2 * rows * h) +
                     (12 * rows * h * inter + 10 * rows * inter + 4 * rows * h);
  EXPECT_EQ(moe1, 2 * perLayer);
  EXPECT_EQ(moe2, 2 * perLayer);
  EXPECT_EQ(moe4, 2 * perLayer);
}

// Every op of the model and sched dialects either has a plan op kind
// (zeroc/Plan/PlanOps.h: a kernel or a runtime action, and a cost) or is
// lowered before the plan is written; the plan's model kinds are exactly the
// model dialect's compute ops. A new op fails here until it is decided.
TEST_F(PipelineTest, EveryDialectOpHasAPlanKindOrIsLowered) {
  const std::set<std::string> lowered = {
      "model.param",       "model.param_ref",     "model.accumulate_grad",
      "model.adam_update", "model.unscale_grads", "model.clip_grad_norm",
      "sched.tensor",      "sched.flat_group"};
  std::set<OpKind> seen;
  for (mlir::RegisteredOperationName name : context.getRegisteredOperations()) {
    llvm::StringRef dialect = name.getDialectNamespace();
    if (dialect != "model" && dialect != "sched")
      continue;
    std::string full = name.getStringRef().str();
    SCOPED_TRACE(full);
    std::optional<OpKind> kind = parseOpKind(name.stripDialect());
    if (lowered.count(full))
      continue; // Its name may be the kind of the sched op it becomes.
    ASSERT_TRUE(kind) << "no plan op kind: add it to PlanOps.h";
    EXPECT_EQ(isModelOp(*kind), dialect == "model");
    seen.insert(*kind);
  }
  for (OpKind kind : kAllOpKinds) {
    if (kind == OpKind::Return)
      continue; // func.return
    EXPECT_TRUE(seen.count(kind))
        << opKindName(kind) << " is no op of the dialects";
  }
}

// The plan spells roles, placements and phases as the sched dialect does:
// the plan writer converts each enum value, and the names agree.
TEST(SchedEnums, AreThePlanEnums) {
  for (uint32_t i = 0; i <= sched::getMaxEnumValForRole(); ++i) {
    auto role = sched::symbolizeRole(i);
    ASSERT_TRUE(role);
    EXPECT_EQ(roleName(planRole(*role)), sched::stringifyRole(*role).str());
  }
  EXPECT_EQ(sched::getMaxEnumValForRole() + 1, std::size(kAllTensorRoles));
  for (uint32_t i = 0; i <= sched::getMaxEnumValForPlacement(); ++i) {
    auto placement = sched::symbolizePlacement(i);
    ASSERT_TRUE(placement);
    EXPECT_EQ(placementName(planPlacement(*placement)),
              sched::stringifyPlacement(*placement).str());
  }
  EXPECT_EQ(sched::getMaxEnumValForPlacement() + 1, std::size(kAllPlacements));
  for (uint32_t i = 0; i <= sched::getMaxEnumValForPhase(); ++i) {
    auto phase = sched::symbolizePhase(i);
    ASSERT_TRUE(phase);
    EXPECT_EQ(phaseName(planPhaseKind(*phase)),
              sched::stringifyPhase(*phase).str());
  }
  EXPECT_EQ(sched::getMaxEnumValForPhase() + 1, std::size(kAllPhaseKinds));
}
