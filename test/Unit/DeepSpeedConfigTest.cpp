//===- DeepSpeedConfigTest.cpp - The DeepSpeed config reader --------------===//
//
// Expected values are DeepSpeed v0.19.5's code defaults and the Hugging Face
// Trainer's "auto" rules, written out as literals so that a wrong default in
// the library fails here.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Config/DeepSpeedConfig.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>

using namespace zeroc;

namespace {

ConfigContext worldOf(int64_t world) {
  ConfigContext ctx;
  ctx.worldSize = world;
  return ctx;
}

/// What the Hugging Face examples below run with: a 4096-wide bf16 model,
/// micro batch 4, on 8 GPUs.
ConfigContext hfContext() {
  ConfigContext ctx = worldOf(8);
  ctx.hiddenSize = 4096;
  ctx.microBatch = 4;
  ctx.modelPrecision = Precision::BF16;
  return ctx;
}

Expected<DeepSpeedConfig> readText(const std::string &text,
                                   const ConfigContext &ctx = worldOf(1)) {
  Expected<JsonDocument> doc = JsonDocument::parse(text, "ds.json");
  if (!doc)
    return doc.error();
  return readDeepSpeedConfig(*doc, ctx);
}

std::string testConfig(const std::string &name) {
  return std::string(ZEROC_SOURCE_DIR) + "/test/Unit/ds_configs/" + name;
}

std::string exampleConfig(const std::string &name) {
  return std::string(ZEROC_SOURCE_DIR) + "/examples/ds_configs/" + name;
}

/// hfContext(), less the model's batch for configs that give their own.
ConfigContext contextFor(const std::string &path) {
  ConfigContext ctx = hfContext();
  if (path.find("/hf_") == std::string::npos)
    ctx.microBatch.reset();
  return ctx;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// Whether some note contains every one of `parts`.
bool hasNote(const DeepSpeedConfig &cfg,
             std::initializer_list<std::string> parts) {
  return std::any_of(cfg.notes.begin(), cfg.notes.end(),
                     [&](const std::string &note) {
                       return std::all_of(parts.begin(), parts.end(),
                                          [&](const std::string &part) {
                                            return contains(note, part);
                                          });
                     });
}

std::string joined(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &line : lines)
    out += "  " + line + "\n";
  return out;
}

/// The read failed, and its message contains every one of `parts`.
::testing::AssertionResult failsWith(const Expected<DeepSpeedConfig> &result,
                                     const std::vector<std::string> &parts) {
  if (result)
    return ::testing::AssertionFailure() << "the config was accepted";
  const std::string &message = result.error().message;
  for (const std::string &part : parts)
    if (!contains(message, part))
      return ::testing::AssertionFailure()
             << "message lacks \"" << part << "\": " << result.error().str();
  return ::testing::AssertionSuccess();
}

/// The read failed at this line and column of ds.json.
::testing::AssertionResult failsAt(const Expected<DeepSpeedConfig> &result,
                                   int line, int column) {
  if (result)
    return ::testing::AssertionFailure() << "the config was accepted";
  const Diagnostic &d = result.error();
  if (d.file != "ds.json" || d.line != line || d.column != column)
    return ::testing::AssertionFailure() << "expected ds.json:" << line << ":"
                                         << column << ", got " << d.str();
  return ::testing::AssertionSuccess();
}

#define ASSERT_READ(result) ASSERT_TRUE(result) << (result).error().str()

} // namespace

//===----------------------------------------------------------------------===//
// Defaults
//===----------------------------------------------------------------------===//

TEST(DeepSpeedConfigDefaults, ZeroDefaultsPerStageMatchDeepSpeedCode) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    auto cfg =
        readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": )" +
                 std::to_string(stage) + "}}");
    ASSERT_READ(cfg);
    const ZeroConfig &z = cfg->zero;
    EXPECT_EQ(z.stage, stage);
    EXPECT_EQ(z.reduceBucketSize, 500000000);
    EXPECT_EQ(z.allgatherBucketSize, 500000000);
    EXPECT_EQ(z.prefetchBucketSize, 50000000);
    EXPECT_EQ(z.paramPersistenceThreshold, 100000);
    EXPECT_EQ(z.modelPersistenceThreshold, std::numeric_limits<int64_t>::max());
    EXPECT_EQ(z.maxLiveParameters, 1000000000);
    EXPECT_EQ(z.maxReuseDistance, 1000000000);
    EXPECT_EQ(z.subGroupSize, 1000000000);
    EXPECT_EQ(z.moduleGranularityThreshold, 0);
    EXPECT_EQ(z.overlapComm, stage == 3);
    EXPECT_TRUE(z.contiguousGradients);
    EXPECT_TRUE(z.reduceScatter);
    EXPECT_TRUE(z.allgatherPartitions);
    EXPECT_TRUE(z.useMultiRankBucketAllreduce);
    EXPECT_TRUE(z.loadFromFp32Weights);
    EXPECT_TRUE(z.ignoreUnusedParameters);
    EXPECT_TRUE(z.memoryEfficientLinear);
    EXPECT_TRUE(z.overrideModuleApply);
    EXPECT_FALSE(z.gather16bitWeightsOnModelSave);
    EXPECT_FALSE(z.roundRobinGradients);
    EXPECT_FALSE(z.zeroQuantizedWeights);
    EXPECT_FALSE(z.zeroQuantizedGradients);
    EXPECT_FALSE(z.allgatherSequential);
    EXPECT_FALSE(z.useAllReduceForFetchParams);
    EXPECT_EQ(z.zeroHpzPartitionSize, 1);
    EXPECT_EQ(z.micsShardSize, -1);
    EXPECT_EQ(z.leafModule.classes.size(), 3u);
    EXPECT_TRUE(z.zenflow.is_null());

    EXPECT_EQ(z.offloadParam.device, OffloadDevice::None);
    EXPECT_TRUE(z.offloadParam.pinMemory);
    EXPECT_EQ(z.offloadParam.bufferCount, 5);
    EXPECT_EQ(z.offloadParam.bufferSize, 100000000);
    EXPECT_EQ(z.offloadParam.maxInCpu, 1000000000);
    EXPECT_EQ(z.offloadOptimizer.device, OffloadDevice::None);
    EXPECT_TRUE(z.offloadOptimizer.pinMemory);
    EXPECT_EQ(z.offloadOptimizer.bufferCount, 4);
    EXPECT_EQ(z.offloadOptimizer.ratio, 1.0);
    EXPECT_FALSE(z.offloadOptimizer.pipelineRead);
    EXPECT_EQ(z.offloadOptimizer.cpuadamCoresPerc, 0.8);

    EXPECT_EQ(z, ZeroConfig::defaultsForStage(stage));
  }
}

TEST(DeepSpeedConfigDefaults, EverythingElseMatchesDeepSpeedCode) {
  auto cfg = readText(R"({"train_batch_size": 8})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero, ZeroConfig::defaultsForStage(0));
  EXPECT_EQ(cfg->precision, Precision::FP32);
  EXPECT_EQ(cfg->lossScale.lossScale, 0.0);
  EXPECT_TRUE(cfg->lossScale.dynamic());
  EXPECT_EQ(cfg->lossScale.initialScalePower, 16);
  EXPECT_EQ(cfg->lossScale.initialScale(), 65536.0);
  EXPECT_EQ(cfg->lossScale.lossScaleWindow, 1000);
  EXPECT_EQ(cfg->lossScale.hysteresis, 2);
  EXPECT_EQ(cfg->lossScale.minLossScale, 1);
  EXPECT_FALSE(cfg->lossScale.consecutiveHysteresis);
  EXPECT_TRUE(cfg->bf16.checkGradOverflow);
  EXPECT_FALSE(cfg->bf16.immediateGradUpdate);
  EXPECT_FALSE(cfg->communicationDataType);
  // GRADIENT_CLIPPING_DEFAULT has been 1.0 since DeepSpeed v0.19.3.
  EXPECT_EQ(cfg->gradientClipping, 1.0);
  EXPECT_EQ(cfg->optimizer.type, "AdamW");
  EXPECT_EQ(cfg->optimizer.lr, 1e-3);
  EXPECT_EQ(cfg->optimizer.beta1, 0.9);
  EXPECT_EQ(cfg->optimizer.beta2, 0.999);
  EXPECT_EQ(cfg->optimizer.eps, 1e-8);
  EXPECT_EQ(cfg->optimizer.weightDecay, 0.0);
  EXPECT_TRUE(cfg->optimizer.adamWMode);
  EXPECT_TRUE(hasNote(*cfg, {"no 'optimizer'", "AdamW"}));
  EXPECT_EQ(cfg->aio.blockSize, 1048576);
  EXPECT_EQ(cfg->aio.queueDepth, 8);
  EXPECT_EQ(cfg->aio.intraOpParallelism, 1);
  EXPECT_FALSE(cfg->aio.singleSubmit);
  EXPECT_TRUE(cfg->aio.overlapEvents);
  EXPECT_FALSE(cfg->aio.useGds);
  EXPECT_FALSE(cfg->activationCheckpointing.present);
  EXPECT_FALSE(cfg->activationCheckpointing.partitionActivations);
  EXPECT_FALSE(cfg->activationCheckpointing.numberCheckpoints);
  EXPECT_TRUE(cfg->ignoredKeys.empty());
}

TEST(DeepSpeedConfigDefaults, SizesWrittenAsFloatsAreAcceptedWhenWhole) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 2, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2.5e8,
      "sub_group_size": 1e12}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.reduceBucketSize, 500000000);
  EXPECT_EQ(cfg->zero.allgatherBucketSize, 250000000);
  EXPECT_EQ(cfg->zero.subGroupSize, 1000000000000);

  EXPECT_TRUE(
      failsWith(readText(R"({"train_batch_size": 8,
                   "zero_optimization": {"reduce_bucket_size": 5.5}})"),
                {"'zero_optimization.reduce_bucket_size'", "5.5", "fraction"}));
}

TEST(DeepSpeedConfigDefaults, OverlapCommGivenOverridesTheStageDefault) {
  auto on = readText(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 2, "overlap_comm": true}})");
  ASSERT_READ(on);
  EXPECT_TRUE(on->zero.overlapComm);
  auto off = readText(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "overlap_comm": false}})");
  ASSERT_READ(off);
  EXPECT_FALSE(off->zero.overlapComm);
}

// The block's presence, even empty, turns on layer checkpointing.
TEST(DeepSpeedConfigDefaults, ActivationCheckpointingPresenceIsDetected) {
  auto empty = readText(R"({"train_batch_size": 8,
      "activation_checkpointing": {}})");
  ASSERT_READ(empty);
  EXPECT_TRUE(empty->activationCheckpointing.present);
  EXPECT_FALSE(empty->activationCheckpointing.partitionActivations);
  auto cpu = readText(R"({"train_batch_size": 8,
      "activation_checkpointing": {"cpu_checkpointing": true}})");
  ASSERT_READ(cpu);
  EXPECT_TRUE(cpu->activationCheckpointing.present);
  EXPECT_TRUE(cpu->activationCheckpointing.cpuCheckpointing);
  auto absent = readText(R"({"train_batch_size": 8})");
  ASSERT_READ(absent);
  EXPECT_FALSE(absent->activationCheckpointing.present);
  EXPECT_NE(*absent, *empty);
  // The block means full recomputation of every layer; no block, none.
  EXPECT_EQ(empty->recompute, (RecomputePolicy{RecomputeMode::Full, 1}));
  EXPECT_EQ(absent->recompute.mode, RecomputeMode::None);
}

// --recompute decides over the block, either way.
TEST(DeepSpeedConfigDefaults, LauncherRecomputationDecidesOverTheBlock) {
  ConfigContext ctx = worldOf(1);
  ctx.recompute = RecomputePolicy{RecomputeMode::Selective, 2};
  auto selective = readText(R"({"train_batch_size": 8})", ctx);
  ASSERT_READ(selective);
  EXPECT_EQ(selective->recompute,
            (RecomputePolicy{RecomputeMode::Selective, 2}));
  ctx.recompute = RecomputePolicy{RecomputeMode::None, 1};
  auto none = readText(R"({"train_batch_size": 8,
      "activation_checkpointing": {}})",
                       ctx);
  ASSERT_READ(none);
  EXPECT_EQ(none->recompute.mode, RecomputeMode::None);
  EXPECT_TRUE(none->activationCheckpointing.present);
}

TEST(RecomputePolicy, NamesAndLayers) {
  RecomputePolicy every3{RecomputeMode::Full, 3};
  EXPECT_TRUE(every3.checkpoints(0));
  EXPECT_FALSE(every3.checkpoints(1));
  EXPECT_TRUE(every3.checkpoints(6));
  EXPECT_FALSE(RecomputePolicy{}.checkpoints(0));
  EXPECT_EQ(every3.describe(), "full every 3rd layer");
  EXPECT_EQ((RecomputePolicy{RecomputeMode::Selective, 11}).describe(),
            "selective every 11th layer");
  EXPECT_EQ((RecomputePolicy{RecomputeMode::Full, 22}).describe(),
            "full every 22nd layer");
  EXPECT_EQ((RecomputePolicy{RecomputeMode::Selective, 1}).describe(),
            "selective");
  for (RecomputeMode m : kAllRecomputeModes)
    EXPECT_EQ(parseRecomputeMode(recomputeModeName(m)), m);
  EXPECT_FALSE(parseRecomputeMode("partial"));
}

//===----------------------------------------------------------------------===//
// Aliases and deprecated keys
//===----------------------------------------------------------------------===//

TEST(DeepSpeedConfigAliases, Stage3KeysAreAlsoReadWithoutThePrefix) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3,
      "prefetch_bucket_size": 123,
      "param_persistence_threshold": 456,
      "model_persistence_threshold": 789,
      "max_live_parameters": 1000,
      "max_reuse_distance": 2000,
      "gather_16bit_weights_on_model_save": true,
      "module_granularity_threshold": 7,
      "use_all_reduce_for_fetch_params": true,
      "allgather_sequential": true}})");
  ASSERT_READ(cfg);
  const ZeroConfig &z = cfg->zero;
  EXPECT_EQ(z.prefetchBucketSize, 123);
  EXPECT_EQ(z.paramPersistenceThreshold, 456);
  EXPECT_EQ(z.modelPersistenceThreshold, 789);
  EXPECT_EQ(z.maxLiveParameters, 1000);
  EXPECT_EQ(z.maxReuseDistance, 2000);
  EXPECT_TRUE(z.gather16bitWeightsOnModelSave);
  EXPECT_EQ(z.moduleGranularityThreshold, 7);
  EXPECT_TRUE(z.useAllReduceForFetchParams);
  EXPECT_TRUE(z.allgatherSequential);
  // An alias is as valid as the prefixed name: no note, nothing ignored.
  EXPECT_TRUE(cfg->ignoredKeys.empty());

  auto prefixed = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3, "stage3_prefetch_bucket_size": 123,
      "stage3_max_live_parameters": 1000}})");
  ASSERT_READ(prefixed);
  EXPECT_EQ(prefixed->zero.prefetchBucketSize, 123);
  EXPECT_EQ(prefixed->zero.maxLiveParameters, 1000);
}

TEST(DeepSpeedConfigAliases, NameAndAliasTogetherAreRejected) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "zero_optimization": {
    "stage3_max_live_parameters": 1e9,
    "max_live_parameters": 1e8
  }
})");
  EXPECT_TRUE(failsAt(cfg, 5, 5));
  EXPECT_TRUE(failsWith(cfg, {"'zero_optimization.max_live_parameters'",
                              "'zero_optimization.stage3_max_live_parameters'",
                              "same setting"}));
}

TEST(DeepSpeedConfigDeprecated, CpuOffloadBecomesOffloadOptimizer) {
  auto on = readText(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 2, "cpu_offload": true}})");
  ASSERT_READ(on);
  EXPECT_EQ(on->zero.offloadOptimizer.device, OffloadDevice::CPU);
  EXPECT_EQ(on->zero.offloadOptimizer.bufferCount, 4);
  EXPECT_TRUE(hasNote(*on, {"zero_optimization.cpu_offload (deprecated)",
                            "zero_optimization.offload_optimizer", "\"cpu\""}));

  auto off = readText(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 2, "cpu_offload": false}})");
  ASSERT_READ(off);
  EXPECT_EQ(off->zero.offloadOptimizer.device, OffloadDevice::None);
  EXPECT_TRUE(hasNote(*off, {"cpu_offload (deprecated)", "= none"}));
}

TEST(DeepSpeedConfigDeprecated, CpuOffloadParamBecomesOffloadParam) {
  auto cfg = readText(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "cpu_offload_param": true}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.offloadParam.device, OffloadDevice::CPU);
  EXPECT_EQ(cfg->zero.offloadParam.bufferCount, 5);
  EXPECT_TRUE(hasNote(*cfg, {"zero_optimization.cpu_offload_param (deprecated)",
                             "zero_optimization.offload_param"}));
}

TEST(DeepSpeedConfigDeprecated, GatherFp16WeightsBecomesGather16bitWeights) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3, "stage3_gather_fp16_weights_on_model_save": true}})");
  ASSERT_READ(cfg);
  EXPECT_TRUE(cfg->zero.gather16bitWeightsOnModelSave);
  EXPECT_TRUE(
      hasNote(*cfg, {"stage3_gather_fp16_weights_on_model_save (deprecated)",
                     "stage3_gather_16bit_weights_on_model_save = true"}));
}

TEST(DeepSpeedConfigDeprecated, OldAndNewTogetherAreRejected) {
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
          "cpu_offload": true, "offload_optimizer": {"device": "cpu"}}})"),
      {"'zero_optimization.cpu_offload' is deprecated",
       "'zero_optimization.offload_optimizer'", "both together"}));
  // Even a false flag conflicts: DeepSpeed checks that the key is set.
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "cpu_offload_param": false, "offload_param": {"device": "cpu"}}})"),
      {"'zero_optimization.cpu_offload_param' is deprecated",
       "'zero_optimization.offload_param'"}));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "stage3_gather_fp16_weights_on_model_save": true,
          "stage3_gather_16bit_weights_on_model_save": true}})"),
      {"'zero_optimization.stage3_gather_fp16_weights_on_model_save'",
       "'zero_optimization.stage3_gather_16bit_weights_on_model_save'"}));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "stage3_gather_fp16_weights_on_model_save": true,
          "gather_16bit_weights_on_model_save": false}})"),
      {"'zero_optimization.gather_16bit_weights_on_model_save'"}));
}

TEST(DeepSpeedConfigDeprecated, PinMemoryFlagIsAcceptedWithoutEffect) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 2, "cpu_offload": true, "cpu_offload_use_pin_memory": false}})");
  ASSERT_READ(cfg);
  EXPECT_TRUE(cfg->zero.offloadOptimizer.pinMemory);
  EXPECT_EQ(
      cfg->ignoredKeys,
      std::vector<std::string>{"zero_optimization.cpu_offload_use_pin_memory"});
  EXPECT_TRUE(
      hasNote(*cfg, {"cpu_offload_use_pin_memory is deprecated", "no effect"}));
}

TEST(DeepSpeedConfigDeprecated, BooleanZeroOptimizationMeansStageOne) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": true,
                          "allgather_size": 2e8})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.stage, 1);
  EXPECT_EQ(cfg->zero.allgatherBucketSize, 200000000);
  EXPECT_TRUE(hasNote(*cfg, {"boolean form is deprecated", "stage 1"}));
  EXPECT_TRUE(hasNote(*cfg, {"allgather_size (deprecated)",
                             "allgather_bucket_size = 200000000"}));
}

TEST(DeepSpeedConfigDeprecated, Bfloat16IsTheOldNameOfBf16) {
  auto cfg = readText(R"({"train_batch_size": 8,
                          "bfloat16": {"enabled": true}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->precision, Precision::BF16);
  EXPECT_TRUE(hasNote(*cfg, {"bfloat16 (old name) read as bf16"}));

  // With both, DeepSpeed reads bf16 only.
  auto both = readText(R"({"train_batch_size": 8, "bf16": {"enabled": false},
                           "bfloat16": {"enabled": true}})");
  ASSERT_READ(both);
  EXPECT_EQ(both->precision, Precision::FP32);
  EXPECT_EQ(both->ignoredKeys, std::vector<std::string>{"bfloat16"});
}

//===----------------------------------------------------------------------===//
// The batch triple
//===----------------------------------------------------------------------===//

namespace {

struct TripleCase {
  const char *name;
  std::string keys; ///< The batch keys of the config, without braces.
  int64_t world;
  int64_t train, micro, accumulation; ///< Expected; 0 when an error is.
  const char *error;                  ///< Part of the error, or nullptr.
};

} // namespace

TEST(DeepSpeedConfigBatch, AnyTwoDetermineTheThird) {
  const TripleCase cases[] = {
      {"train+micro", R"("train_batch_size": 64,
                         "train_micro_batch_size_per_gpu": 8)",
       2, 64, 8, 4, nullptr},
      {"train+accumulation", R"("train_batch_size": 64,
                                "gradient_accumulation_steps": 4)",
       2, 64, 8, 4, nullptr},
      {"micro+accumulation", R"("train_micro_batch_size_per_gpu": 8,
                                "gradient_accumulation_steps": 4)",
       2, 64, 8, 4, nullptr},
      {"all three consistent", R"("train_batch_size": 64,
                                  "train_micro_batch_size_per_gpu": 8,
                                  "gradient_accumulation_steps": 4)",
       2, 64, 8, 4, nullptr},
      // DeepSpeed's rules for a single value: one accumulation step.
      {"train alone", R"("train_batch_size": 32)", 4, 32, 8, 1, nullptr},
      {"micro alone", R"("train_micro_batch_size_per_gpu": 8)", 4, 32, 8, 1,
       nullptr},
      {"inconsistent", R"("train_batch_size": 64,
                          "train_micro_batch_size_per_gpu": 8,
                          "gradient_accumulation_steps": 2)",
       2, 0, 0, 0,
       "inconsistent batch sizes: 'train_batch_size' 64 != "
       "train_micro_batch_size_per_gpu 8 x "
       "gradient_accumulation_steps 2 x world size 2"},
      {"world size does not match", R"("train_batch_size": 64,
                                       "train_micro_batch_size_per_gpu": 8,
                                       "gradient_accumulation_steps": 4)",
       4, 0, 0, 0, "x world size 4"},
      {"train not divisible by micro", R"("train_batch_size": 10,
                                          "train_micro_batch_size_per_gpu": 3)",
       1, 0, 0, 0, "'train_batch_size' 10 is not a multiple of"},
      {"train not divisible by accumulation",
       R"("train_batch_size": 64, "gradient_accumulation_steps": 3)", 2, 0, 0,
       0, "no whole train_micro_batch_size_per_gpu"},
      {"train alone not divisible by world", R"("train_batch_size": 10)", 4, 0,
       0, 0, "not a multiple of world size 4"},
      {"accumulation alone", R"("gradient_accumulation_steps": 4)", 1, 0, 0, 0,
       "either 'train_batch_size' or 'train_micro_batch_size_per_gpu'"},
      {"none", R"("steps_per_print": 10)", 1, 0, 0, 0, "must be given"},
      {"zero micro", R"("train_micro_batch_size_per_gpu": 0)", 1, 0, 0, 0,
       "must be a positive integer; found 0"},
      {"negative train", R"("train_batch_size": -8)", 1, 0, 0, 0,
       "must be a positive integer; found -8"},
      {"string train", R"("train_batch_size": "32")", 1, 0, 0, 0,
       "write numbers without quotes"},
      // DeepSpeed takes null for "not given".
      {"null accumulation", R"("train_batch_size": 16,
                               "gradient_accumulation_steps": null)",
       2, 16, 8, 1, nullptr},
  };
  for (const TripleCase &c : cases) {
    SCOPED_TRACE(c.name);
    auto cfg = readText("{" + c.keys + "}", worldOf(c.world));
    if (c.error) {
      EXPECT_TRUE(failsWith(cfg, {c.error}));
      continue;
    }
    ASSERT_READ(cfg);
    EXPECT_EQ(cfg->trainBatchSize, c.train);
    EXPECT_EQ(cfg->microBatchPerGpu, c.micro);
    EXPECT_EQ(cfg->gradientAccumulationSteps, c.accumulation);
    EXPECT_EQ(cfg->worldSize, c.world);
  }
}

TEST(DeepSpeedConfigBatch, DerivedValuesAreReported) {
  auto cfg = readText(R"({"train_batch_size": 64,
                          "train_micro_batch_size_per_gpu": 8})",
                      worldOf(2));
  ASSERT_READ(cfg);
  EXPECT_TRUE(hasNote(*cfg, {"gradient_accumulation_steps = 4, derived",
                             "64 / (train_micro_batch_size_per_gpu 8 x "
                             "world size 2)"}))
      << joined(cfg->notes);
}

TEST(DeepSpeedConfigBatch, WorldSizeZeroIsAnError) {
  auto cfg = readText(R"({"train_batch_size": 8})", worldOf(0));
  EXPECT_TRUE(
      failsWith(cfg, {"world size", "must be 1 to 2147483647", "found 0"}));
  EXPECT_EQ(cfg.error().file, "ds.json");
}

// MPI and NCCL number ranks with 32-bit ints: 2^32 + 1 ranks cannot run.
TEST(DeepSpeedConfigBatch, WorldSizeBeyondInt32IsAnError) {
  auto cfg = readText(R"({"train_batch_size": 8})", worldOf(4294967297));
  EXPECT_TRUE(failsWith(cfg, {"world size", "must be 1 to 2147483647",
                              "32-bit ints", "found 4294967297"}));
  auto most =
      readText(R"({"train_micro_batch_size_per_gpu": 1})", worldOf(2147483647));
  EXPECT_TRUE(bool(most)) << (most ? "" : most.error().message);
}

TEST(DeepSpeedConfigBatch, CommandLineFillsAnAbsentMicroBatch) {
  ConfigContext ctx = worldOf(4);
  ctx.microBatch = 2;
  auto cfg = readText(R"({"train_batch_size": 32})", ctx);
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->microBatchPerGpu, 2);
  EXPECT_EQ(cfg->gradientAccumulationSteps, 4);
  EXPECT_TRUE(hasNote(*cfg, {"train_micro_batch_size_per_gpu (absent) = 2",
                             "--micro-batch on the command line"}));
}

// The model file's batch never decides what DeepSpeed's rules decide: with
// train_batch_size 32 and 4 accumulation steps on one rank the micro batch
// is 8, whatever batch the model was generated with ("auto" or absent).
TEST(DeepSpeedConfigBatch, DeepSpeedsRulesBeforeTheModelFile) {
  for (const char *micro :
       {"", R"("train_micro_batch_size_per_gpu": "auto",)"}) {
    SCOPED_TRACE(micro);
    ConfigContext ctx = worldOf(1);
    ctx.modelBatch = 1;
    auto cfg = readText(std::string("{") + micro +
                            R"("train_batch_size": 32,
                                "gradient_accumulation_steps": 4})",
                        ctx);
    ASSERT_READ(cfg);
    EXPECT_EQ(cfg->microBatchPerGpu, 8);
    EXPECT_EQ(cfg->gradientAccumulationSteps, 4);
  }
  // Only train_batch_size: DeepSpeed's accumulation 1 and micro 32.
  ConfigContext ctx = worldOf(1);
  ctx.modelBatch = 1;
  auto cfg = readText(R"({"train_batch_size": 32})", ctx);
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->microBatchPerGpu, 32);
  // Nothing at all: DeepSpeed's error, not the model's batch.
  EXPECT_TRUE(failsWith(readText(R"({"zero_optimization": {"stage": 1}})", ctx),
                        {"either 'train_batch_size' or "
                         "'train_micro_batch_size_per_gpu' must be given",
                         "_batch_assertion"}));
  // "auto" that nothing else decides: the model file's batch, with a note.
  auto fallback =
      readText(R"({"train_micro_batch_size_per_gpu": "auto"})", ctx);
  ASSERT_READ(fallback);
  EXPECT_EQ(fallback->microBatchPerGpu, 1);
  EXPECT_TRUE(
      hasNote(*fallback, {"train_micro_batch_size_per_gpu: \"auto\" -> 1",
                          "the model file's batch dimension"}));
}

TEST(DeepSpeedConfigBatch, GivenValuesMustAgreeWithTheCommandLine) {
  ConfigContext ctx = worldOf(1);
  ctx.microBatch = 4;
  EXPECT_TRUE(
      failsWith(readText(R"({"train_micro_batch_size_per_gpu": 8})", ctx),
                {"'train_micro_batch_size_per_gpu' is 8",
                 "--micro-batch on the command line is 4"}));
  // The model file's batch is no such fact: the config wins.
  ctx = worldOf(1);
  ctx.modelBatch = 4;
  auto cfg = readText(R"({"train_micro_batch_size_per_gpu": 8})", ctx);
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->microBatchPerGpu, 8);
  ctx = worldOf(1);
  ctx.gradientAccumulation = 2;
  EXPECT_TRUE(failsWith(readText(R"({"train_micro_batch_size_per_gpu": 8,
                   "gradient_accumulation_steps": 4})",
                                 ctx),
                        {"'gradient_accumulation_steps' is 4", "is 2"}));
}

//===----------------------------------------------------------------------===//
// "auto"
//===----------------------------------------------------------------------===//

TEST(DeepSpeedConfigAuto, BucketSizesFollowTheHiddenSize) {
  ConfigContext ctx = hfContext();
  auto cfg = readText(R"({"train_micro_batch_size_per_gpu": "auto",
      "zero_optimization": {"stage": 3,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto"}})",
                      ctx);
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.reduceBucketSize, 16777216);
  EXPECT_EQ(cfg->zero.prefetchBucketSize, 15099494);
  EXPECT_EQ(cfg->zero.paramPersistenceThreshold, 40960);
  EXPECT_TRUE(hasNote(*cfg, {"zero_optimization.reduce_bucket_size: \"auto\" "
                             "-> 16777216 (hidden_size^2, hidden_size 4096)"}))
      << joined(cfg->notes);
  EXPECT_TRUE(hasNote(*cfg, {"zero_optimization.stage3_prefetch_bucket_size: "
                             "\"auto\" -> 15099494 (0.9 x hidden_size^2"}));
  EXPECT_TRUE(hasNote(*cfg, {"stage3_param_persistence_threshold: \"auto\" -> "
                             "40960 (10 x hidden_size"}));
}

TEST(DeepSpeedConfigAuto, Stage3BucketsKeepDefaultsBelowStage3) {
  // The Trainer fills the stage3_ keys only for ZeRO-3; DeepSpeed then
  // drops the "auto" that is left.
  auto cfg = readText(R"({"train_micro_batch_size_per_gpu": "auto",
      "zero_optimization": {"stage": 2,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto"}})",
                      hfContext());
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.reduceBucketSize, 16777216);
  EXPECT_EQ(cfg->zero.prefetchBucketSize, 50000000);
  EXPECT_EQ(cfg->zero.paramPersistenceThreshold, 100000);
  EXPECT_TRUE(hasNote(*cfg, {"stage3_prefetch_bucket_size: \"auto\" -> "
                             "50000000 (DeepSpeed drops \"auto\""}));
}

TEST(DeepSpeedConfigAuto, OtherZeroKeysKeepTheirDefaults) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3, "stage3_max_live_parameters": "auto",
      "allgather_bucket_size": "auto", "overlap_comm": "auto",
      "stage3_gather_16bit_weights_on_model_save": "auto"}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.maxLiveParameters, 1000000000);
  EXPECT_EQ(cfg->zero.allgatherBucketSize, 500000000);
  EXPECT_TRUE(cfg->zero.overlapComm);
  EXPECT_FALSE(cfg->zero.gather16bitWeightsOnModelSave);
  EXPECT_TRUE(hasNote(*cfg, {"zero_optimization.stage3_max_live_parameters: "
                             "\"auto\" -> 1000000000"}));
  EXPECT_TRUE(hasNote(*cfg, {"overlap_comm: \"auto\" -> true"}));
}

TEST(DeepSpeedConfigAuto, HiddenSizeIsNeededForAutoBuckets) {
  ConfigContext ctx = worldOf(1);
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
          "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})",
                                 ctx),
                        {"'zero_optimization.reduce_bucket_size' is \"auto\"",
                         "hidden size is unknown"}));
}

TEST(DeepSpeedConfigAuto, BatchValuesComeFromTheCommandLine) {
  ConfigContext ctx = hfContext();
  ctx.gradientAccumulation = 2;
  auto cfg = readText(R"({"train_batch_size": "auto",
                          "train_micro_batch_size_per_gpu": "auto",
                          "gradient_accumulation_steps": "auto"})",
                      ctx);
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->microBatchPerGpu, 4);
  EXPECT_EQ(cfg->gradientAccumulationSteps, 2);
  EXPECT_EQ(cfg->trainBatchSize, 64);
  EXPECT_TRUE(hasNote(*cfg, {"train_micro_batch_size_per_gpu: \"auto\" -> 4",
                             "--micro-batch on the command line"}));
  EXPECT_TRUE(hasNote(
      *cfg, {"gradient_accumulation_steps: \"auto\" -> 2", "command line"}));
  EXPECT_TRUE(hasNote(*cfg, {"train_batch_size: \"auto\" -> 64, derived"}));
}

TEST(DeepSpeedConfigAuto, AccumulationDefaultsToOneOrFollowsTheTriple) {
  // No --gradient-accumulation: the Trainer's default of 1.
  auto one = readText(R"({"train_batch_size": "auto",
                          "train_micro_batch_size_per_gpu": "auto",
                          "gradient_accumulation_steps": "auto"})",
                      hfContext());
  ASSERT_READ(one);
  EXPECT_EQ(one->gradientAccumulationSteps, 1);
  EXPECT_EQ(one->trainBatchSize, 32);
  // A given train batch size decides it.
  auto derived = readText(R"({"train_batch_size": 128,
                              "train_micro_batch_size_per_gpu": "auto",
                              "gradient_accumulation_steps": "auto"})",
                          hfContext());
  ASSERT_READ(derived);
  EXPECT_EQ(derived->gradientAccumulationSteps, 4);
  // Without the model's batch, "auto" micro batch cannot be known.
  EXPECT_TRUE(failsWith(
      readText(R"({"train_micro_batch_size_per_gpu": "auto"})", worldOf(2)),
      {"must be given"}));
}

TEST(DeepSpeedConfigAuto, PrecisionFollowsTheModelDtype) {
  const char *text = R"({"train_batch_size": 8,
      "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})";
  ConfigContext ctx = worldOf(1);
  ctx.modelPrecision = Precision::BF16;
  auto bf16 = readText(text, ctx);
  ASSERT_READ(bf16);
  EXPECT_EQ(bf16->precision, Precision::BF16);
  EXPECT_TRUE(hasNote(
      *bf16, {"bf16.enabled: \"auto\" -> true", "the model's dtype is bf16"}));
  EXPECT_TRUE(hasNote(*bf16, {"fp16.enabled: \"auto\" -> false"}));

  ctx.modelPrecision = Precision::FP16;
  auto fp16 = readText(text, ctx);
  ASSERT_READ(fp16);
  EXPECT_EQ(fp16->precision, Precision::FP16);

  ctx.modelPrecision = Precision::FP32;
  auto fp32 = readText(text, ctx);
  ASSERT_READ(fp32);
  EXPECT_EQ(fp32->precision, Precision::FP32);

  ctx.modelPrecision.reset();
  EXPECT_TRUE(failsWith(readText(text, ctx),
                        {"'fp16.enabled' is \"auto\"", "dtype is unknown"}));
}

TEST(DeepSpeedConfigAuto, OptimizerAndClippingTakeTrainerDefaults) {
  auto cfg = readText(R"({"train_batch_size": 8, "gradient_clipping": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": "auto",
        "betas": "auto", "eps": "auto", "weight_decay": "auto"}}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->gradientClipping, 1.0);
  EXPECT_EQ(cfg->optimizer.lr, 5e-5);
  EXPECT_EQ(cfg->optimizer.beta1, 0.9);
  EXPECT_EQ(cfg->optimizer.beta2, 0.999);
  EXPECT_EQ(cfg->optimizer.eps, 1e-8);
  EXPECT_EQ(cfg->optimizer.weightDecay, 0.0);
  EXPECT_TRUE(hasNote(*cfg, {"optimizer.params.lr: \"auto\" -> 5e-05"}));
  EXPECT_TRUE(hasNote(*cfg, {"optimizer.params.betas: \"auto\" -> [0.9, "
                             "0.999]"}));
  EXPECT_TRUE(hasNote(*cfg, {"gradient_clipping: \"auto\" -> 1.0"}));
}

TEST(DeepSpeedConfigAuto, PlainDictBlocksDoNotTakeAuto) {
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "aio": {"queue_depth": "auto"}})"),
      {"'aio.queue_depth' does not take \"auto\""}));
}

//===----------------------------------------------------------------------===//
// Unknown and ignored keys
//===----------------------------------------------------------------------===//

TEST(DeepSpeedConfigKeys, KeysWithoutEffectAreListedAsIgnored) {
  auto cfg = readText(R"({
  "wall_clock_breakdown": false,
  "train_batch_size": 8,
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}},
  "my_experiment_comment": "not a DeepSpeed key",
  "steps_per_print": 10,
  "tensorboard": {"enabled": true, "output_path": "runs/"},
  "aio": {"thread_count": 1}
})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->ignoredKeys,
            (std::vector<std::string>{
                "wall_clock_breakdown", "scheduler", "my_experiment_comment",
                "steps_per_print", "tensorboard", "aio.thread_count"}));
  EXPECT_TRUE(hasNote(*cfg, {"'my_experiment_comment' is not a key DeepSpeed "
                             "reads"}));
  EXPECT_TRUE(hasNote(*cfg, {"aio.thread_count is the old name"}));
}

TEST(DeepSpeedConfigKeys, UnknownZeroKeyIsRejectedWithDidYouMean) {
  auto cfg =
      loadDeepSpeedConfig(testConfig("unknown_zero_key.json"), worldOf(1));
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().file, testConfig("unknown_zero_key.json"));
  EXPECT_EQ(cfg.error().line, 5);
  EXPECT_EQ(cfg.error().column, 5);
  EXPECT_TRUE(failsWith(cfg, {"unknown key "
                              "'zero_optimization.reduce_bucket_sise'",
                              "did you mean 'reduce_bucket_size'?"}));
}

TEST(DeepSpeedConfigKeys, MissingPrefixSuggestsTheStage3Key) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "gather_fp16_weights_on_model_save": true}})");
  EXPECT_TRUE(failsWith(
      cfg, {"did you mean 'stage3_gather_fp16_weights_on_model_save'?"}));
}

TEST(DeepSpeedConfigKeys, UnknownKeysInStrictBlocksAreRejected) {
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "offload_param": {"device": "cpu", "pin_memroy": true}}})"),
      {"'zero_optimization.offload_param.pin_memroy'",
       "did you mean 'pin_memory'?"}));
  // ratio belongs to offload_optimizer only.
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "offload_param": {"device": "cpu", "ratio": 0.5}}})"),
      {"unknown key 'zero_optimization.offload_param.ratio'"}));
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
                   "fp16": {"enabled": true, "loss_scal": 128}})"),
                        {"'fp16.loss_scal'", "did you mean 'loss_scale'?"}));
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
          "optimizer": {"type": "Adam", "params": {"learning_rate": 1e-3}}})"),
                        {"unknown key 'optimizer.params.learning_rate'"}));
}

TEST(DeepSpeedConfigKeys, TopLevelTypoIsAnErrorButOwnKeysAreNot) {
  auto typo = readText(R"({
  "train_batch_size": 8,
  "gradient_clip": 1.0
})");
  EXPECT_TRUE(failsAt(typo, 3, 3));
  EXPECT_TRUE(failsWith(typo, {"unknown key 'gradient_clip'",
                               "did you mean 'gradient_clipping'?"}));
  EXPECT_TRUE(
      failsWith(readText(R"({"train_batch_size": 8, "zero_optimisation": {}})"),
                {"did you mean 'zero_optimization'?"}));
  // Ends like "train_batch_size" but is no misspelling of it.
  auto own = readText(R"({"train_batch_size": 8, "size": 3})");
  ASSERT_READ(own);
  EXPECT_EQ(own->ignoredKeys, std::vector<std::string>{"size"});
}

TEST(DeepSpeedConfigKeys, TypoInLenientBlockIsAnError) {
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
          "activation_checkpointing": {"partition_activation": true}})"),
                        {"'activation_checkpointing.partition_activation'",
                         "did you mean 'partition_activations'?"}));
}

//===----------------------------------------------------------------------===//
// Bad inputs
//===----------------------------------------------------------------------===//

// DeepSpeedZeroConfig has no rule tying offload_param to the stage; only
// stage 3's optimizer is given the block.
TEST(DeepSpeedConfigErrors, OffloadParamBelowStage3HasNoEffect) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "zero_optimization": {
    "stage": 2,
    "offload_param": {"device": "cpu"}
  }
})");
  ASSERT_READ(cfg);
  EXPECT_FALSE(cfg->zero.offloadParam.enabled());
  EXPECT_TRUE(hasNote(*cfg, {"zero_optimization.offload_param has no effect "
                             "with ZeRO stage 2"}))
      << joined(cfg->notes);
  // Through the deprecated flag, the note names the flag.
  auto flag = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 1, "cpu_offload_param": true}})");
  ASSERT_READ(flag);
  EXPECT_FALSE(flag->zero.offloadParam.enabled());
  EXPECT_TRUE(hasNote(*flag, {"zero_optimization.cpu_offload_param has no "
                              "effect with ZeRO stage 1"}))
      << joined(flag->notes);
}

TEST(DeepSpeedConfigErrors, NvmeNeedsNvmePath) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {
      "device": "nvme",
      "pin_memory": true
    }
  }
})");
  EXPECT_TRUE(failsAt(cfg, 6, 7));
  EXPECT_TRUE(failsWith(cfg, {"'zero_optimization.offload_optimizer.device' "
                              "is \"nvme\" but no 'nvme_path' is given"}));
}

TEST(DeepSpeedConfigErrors, StageMustBeZeroToThree) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "zero_optimization": {"stage": 4}
})");
  EXPECT_TRUE(failsAt(cfg, 3, 25));
  EXPECT_TRUE(failsWith(cfg, {"'zero_optimization.stage' must be 0, 1, 2 or "
                              "3; found 4"}));
  EXPECT_TRUE(failsWith(
      readText(
          R"({"train_batch_size": 8, "zero_optimization": {"stage": "3"}})"),
      {"'zero_optimization.stage' must be a non-negative integer; found "
       "\"3\""}));
}

TEST(DeepSpeedConfigErrors, NegativeSizesAreRejectedZeroIsNot) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "zero_optimization": {
    "stage": 2,
    "reduce_bucket_size": -1
  }
})");
  EXPECT_TRUE(failsAt(cfg, 5, 5));
  EXPECT_TRUE(failsWith(cfg, {"'zero_optimization.reduce_bucket_size' must "
                              "be a non-negative integer; found -1"}));
  for (const char *key :
       {"allgather_bucket_size", "stage3_prefetch_bucket_size",
        "prefetch_bucket_size", "stage3_max_live_parameters", "sub_group_size",
        "stage3_param_persistence_threshold"}) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(failsWith(readText(std::string(R"({"train_batch_size": 8,
            "zero_optimization": {"stage": 3, ")") +
                                   key + R"(": -5e7}})"),
                          {key, "non-negative", "found -5e7"}));
  }
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "offload_param": {"device": "nvme", "nvme_path": "/nvme",
                            "buffer_size": -1}}})"),
      {"'zero_optimization.offload_param.buffer_size'", "non-negative"}));
  // DeepSpeed's ge=0 lets 0 through (every tensor its own bucket); so does
  // zeroc, as real configs use it (sub_group_size 0, max_live_parameters 0).
  auto zero = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3, "reduce_bucket_size": 0, "stage3_prefetch_bucket_size": 0,
      "sub_group_size": 0, "stage3_max_live_parameters": 0}})");
  ASSERT_READ(zero);
  EXPECT_EQ(zero->zero.reduceBucketSize, 0);
  EXPECT_EQ(zero->zero.prefetchBucketSize, 0);
}

TEST(DeepSpeedConfigErrors, Fp16AndBf16CannotBothBeEnabled) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "fp16": {"enabled": true},
  "bf16": {"enabled": true}
})");
  EXPECT_TRUE(failsAt(cfg, 4, 12));
  EXPECT_TRUE(failsWith(cfg, {"fp16 and bf16 cannot both be enabled"}));
}

TEST(DeepSpeedConfigErrors, TypeErrorsNameWhatWasFoundAndExpected) {
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8,
          "zero_optimization": {"reduce_bucket_size": "5e8"}})"),
      {"'zero_optimization.reduce_bucket_size' must be a non-negative "
       "integer; found \"5e8\" (write numbers without quotes)"}));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8,
                   "zero_optimization": {"overlap_comm": "yes"}})"),
      {"'zero_optimization.overlap_comm' must be true or false; found "
       "\"yes\""}));
  EXPECT_TRUE(
      failsWith(readText(R"({"train_batch_size": 8, "zero_optimization": []})"),
                {"'zero_optimization' must be an object; found an array"}));
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
                                     "gradient_clipping": "1.0"})"),
                        {"'gradient_clipping' must be a non-negative number"}));
  EXPECT_TRUE(failsWith(readText(R"([1, 2])"),
                        {"must be a JSON object; found an array"}));
}

TEST(DeepSpeedConfigErrors, UnknownDeviceIsRejected) {
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
                   "offload_param": {"device": "gpu"}}})"),
      {"'zero_optimization.offload_param.device' must be \"none\", \"cpu\" "
       "or \"nvme\"; found \"gpu\""}));
  // DeepSpeed's enum is case-sensitive.
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
                   "offload_optimizer": {"device": "CPU"}}})"),
      {"found \"CPU\"", "did you mean \"cpu\"?"}));
}

TEST(DeepSpeedConfigErrors, UnsupportedOptimizerTypes) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "optimizer": {"type": "Lion", "params": {"lr": 1e-3}}
})");
  EXPECT_TRUE(failsAt(cfg, 3, 17));
  EXPECT_TRUE(failsWith(cfg, {"zeroc supports the optimizers \"Adam\", "
                              "\"AdamW\", \"Lamb\"",
                              "'optimizer.type' is \"Lion\""}));
}

TEST(DeepSpeedConfigOptimizer, LambWithoutZeroAndItsDefaults) {
  auto cfg = readText(R"({"train_batch_size": 8,
      "optimizer": {"type": "LAMB", "params": {"lr": 2e-3}}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->optimizer.type, "Lamb");
  EXPECT_TRUE(cfg->optimizer.lamb());
  EXPECT_EQ(cfg->optimizer.lr, 2e-3);
  EXPECT_EQ(cfg->optimizer.maxCoeff, 10.0);
  EXPECT_EQ(cfg->optimizer.minCoeff, 0.01);
  // Adam's keys are FusedLamb TypeErrors.
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb",
          "params": {"adam_w_mode": false}}})"),
      {"adam_w_mode"}));
}

TEST(DeepSpeedConfigOptimizer, LambUnderZeroNeedsZeroAllowUntestedOptimizer) {
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2},
          "optimizer": {"type": "Lamb"}})"),
      {"'optimizer.type' is \"Lamb\" with ZeRO stage 2",
       "You are using an untested ZeRO Optimizer. Please add "
       "<\"zero_allow_untested_optimizer\": true> in the configuration "
       "file to use it."}));
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3}, "zero_allow_untested_optimizer": true,
      "optimizer": {"type": "Lamb", "params": {"max_coeff": 5,
      "min_coeff": 0.1}}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->optimizer.maxCoeff, 5.0);
  EXPECT_EQ(cfg->optimizer.minCoeff, 0.1);
  EXPECT_TRUE(hasNote(*cfg, {"trust ratio", "per parameter"}));
}

TEST(DeepSpeedConfigOptimizer, LambNeedsDynamicLossScaling) {
  EXPECT_TRUE(
      failsWith(readText(R"({"train_batch_size": 8, "fp16": {"enabled": true,
          "loss_scale": 128}, "optimizer": {"type": "Lamb"}})"),
                {"DeepSpeed lamb optimizer requires dynamic loss scaling"}));
}

TEST(DeepSpeedConfigOptimizer, OneBitFamilyOnlyWithoutZero) {
  struct Case {
    const char *type, *reason;
  };
  for (Case c : {Case{"OneBitAdam", "1bit-Adam is not compatible with ZeRO"},
                 Case{"ZeroOneAdam", "0/1 Adam is not compatible with ZeRO"},
                 Case{"OneBitLamb", "1bit-Lamb is not compatible with ZeRO"}}) {
    std::string type = c.type;
    EXPECT_TRUE(failsWith(
        readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1},
            "optimizer": {"type": ")" +
                 type + R"("}})"),
        {c.reason}))
        << type;
    auto cfg = readText(R"({"train_batch_size": 8, "optimizer": {"type": ")" +
                        type + R"(", "params": {"cuda_aware": false}}})");
    ASSERT_READ(cfg);
    EXPECT_TRUE(cfg->optimizer.oneBit());
    EXPECT_EQ(cfg->optimizer.freezeStep, 100000);
  }
}

// FusedAdam, DeepSpeedCPUAdam and FusedLamb take bias_correction (default
// true); false steps on the raw moments.
TEST(DeepSpeedConfigOptimizer, BiasCorrectionIsRead) {
  for (const char *type : {"Adam", "AdamW", "Lamb"}) {
    SCOPED_TRACE(type);
    std::string head = std::string(R"({"train_batch_size": 8,
  "optimizer": {"type": ")") +
                       type + R"(", "params": {)";
    auto off = readText(head + R"("bias_correction": false}}})");
    ASSERT_READ(off);
    EXPECT_FALSE(off->optimizer.biasCorrection);
    EXPECT_TRUE(off->ignoredKeys.empty());
    auto on = readText(head + R"("bias_correction": true}}})");
    ASSERT_READ(on);
    EXPECT_TRUE(on->optimizer.biasCorrection);
    auto absent = readText(head + R"("lr": 0.01}}})");
    ASSERT_READ(absent);
    EXPECT_TRUE(absent->optimizer.biasCorrection);
    // Not a boolean: an error at the key.
    auto bad = readText(head + R"("bias_correction": "no"}}})");
    EXPECT_TRUE(failsAt(bad, 2, 40 + int(std::strlen(type))));
    EXPECT_TRUE(failsWith(bad, {"'optimizer.params.bias_correction' must be "
                                "true or false; found \"no\""}));
  }
  // No optimizer block, or no params: DeepSpeed's default.
  auto none = readText(R"({"train_batch_size": 8})");
  ASSERT_READ(none);
  EXPECT_TRUE(none->optimizer.biasCorrection);
  auto noParams =
      readText(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb"}})");
  ASSERT_READ(noParams);
  EXPECT_TRUE(noParams->optimizer.biasCorrection);
}

// The 1-bit optimizers take the key and never correct, warm-up included
// (deepspeed/runtime/fp16/onebit): their step is planned uncorrected.
TEST(DeepSpeedConfigOptimizer, OneBitFamilyNeverCorrects) {
  for (const char *type : {"OneBitAdam", "ZeroOneAdam", "OneBitLamb"}) {
    SCOPED_TRACE(type);
    std::string head =
        std::string(R"({"train_batch_size": 8, "optimizer": {"type": ")") +
        type + "\"";
    auto absent = readText(head + "}}");
    ASSERT_READ(absent);
    EXPECT_FALSE(absent->optimizer.biasCorrection);
    for (const char *value : {"true", "false"}) {
      auto cfg = readText(head + R"(, "params": {"bias_correction": )" + value +
                          "}}}");
      ASSERT_READ(cfg);
      EXPECT_FALSE(cfg->optimizer.biasCorrection);
      EXPECT_EQ(cfg->ignoredKeys,
                std::vector<std::string>{"optimizer.params.bias_correction"});
      EXPECT_TRUE(hasNote(*cfg, {"optimizer.params.bias_correction",
                                 "never corrects the moments' bias"}))
          << joined(cfg->notes);
    }
    EXPECT_TRUE(failsWith(
        readText(head + R"(, "params": {"bias_correction": 2}}})"),
        {"'optimizer.params.bias_correction' must be true or false"}));
  }
}

// torch_adam hands the params to torch.optim.Adam(W), which has no
// bias_correction (a TypeError in DeepSpeed) and always corrects.
TEST(DeepSpeedConfigOptimizer, BiasCorrectionFalseWithTorchAdamIsRefused) {
  auto cfg = readText(R"({"train_batch_size": 8,
  "optimizer": {"type": "Adam", "params": {"torch_adam": true, "bias_correction": false}}})");
  EXPECT_TRUE(failsAt(cfg, 2, 64));
  EXPECT_TRUE(failsWith(cfg, {"'optimizer.params.bias_correction' is false "
                              "with 'torch_adam'",
                              "torch.optim.AdamW", "TypeError"}));
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
      "optimizer": {"type": "Adam", "params": {"torch_adam": true,
      "adam_w_mode": false, "bias_correction": false}}})"),
                        {"torch.optim.Adam,"}));
}

TEST(DeepSpeedConfigErrors, OtherDeepSpeedChecks) {
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
          "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})"),
      {"'zero_optimization.offload_optimizer.ratio' is 0.3",
       "partial optimizer offload needs ZeRO stage 3"}));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
          "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})"),
      {"'zero_optimization.offload_optimizer.ratio' must be a number from 0.0 "
       "to 1.0; found 1.5"}));
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
          "zero_optimization": {"offload_optimizer": {"device": "cpu"}}})"),
                        {"needs ZeRO stage 1, 2 or 3"}));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                   "params": {"lr": 1e-4, "max_grad_norm": 1.0}}})"),
      {"'optimizer.params.max_grad_norm'", "use the top-level "
                                           "'gradient_clipping'"}));
  EXPECT_TRUE(
      failsWith(readText(R"({"train_batch_size": 8,
                   "fp16": {"enabled": true, "loss_scale_window": 0}})"),
                {"'fp16.loss_scale_window' must be positive with dynamic loss "
                 "scaling"}));
  // Static loss scaling does not use the window.
  ASSERT_READ(readText(R"({"train_batch_size": 8, "fp16": {"enabled": true,
      "loss_scale": 128, "loss_scale_window": 0}})"));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2},
          "bf16": {"enabled": true, "bf16_optimizer_states": true}})"),
      {"needs 'bf16_master_weights_and_grads'"}));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "amp": {"enabled": true}})"),
      {"zeroc does not model apex AMP"}));
  EXPECT_TRUE(failsWith(
      readText(R"({"train_batch_size": 8, "communication_data_type": "fp8"})"),
      {"'communication_data_type' must be \"fp32\", \"fp16\" or \"bf16\""}));
}

TEST(DeepSpeedConfigErrors, SyntaxErrorReportsFileLineAndColumn) {
  auto cfg = loadDeepSpeedConfig(testConfig("syntax_error.json"), worldOf(1));
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().file, testConfig("syntax_error.json"));
  // At the trailing comma, not at the '}' where the parser gave up.
  EXPECT_EQ(cfg.error().line, 5);
  EXPECT_EQ(cfg.error().column, 25);
  EXPECT_EQ(cfg.error().message, "invalid JSON: trailing ',' before '}'");
  EXPECT_TRUE(contains(cfg.error().str(),
                       testConfig("syntax_error.json") + ":5:25: error:"));
}

TEST(DeepSpeedConfigErrors, MissingFileIsAnError) {
  auto cfg = loadDeepSpeedConfig(testConfig("no_such_config.json"), worldOf(1));
  EXPECT_TRUE(failsWith(cfg, {"cannot open file"}));
}

//===----------------------------------------------------------------------===//
// Optimizer semantics
//===----------------------------------------------------------------------===//

TEST(DeepSpeedConfigOptimizer, AdamUsesDecoupledWeightDecayUnlessTurnedOff) {
  auto adam = readText(R"({"train_batch_size": 8,
      "optimizer": {"type": "Adam", "params": {"lr": 3e-4,
        "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1}}})");
  ASSERT_READ(adam);
  EXPECT_EQ(adam->optimizer.type, "Adam");
  EXPECT_TRUE(adam->optimizer.adamWMode);
  EXPECT_EQ(adam->optimizer.lr, 3e-4);
  EXPECT_EQ(adam->optimizer.beta1, 0.8);
  EXPECT_EQ(adam->optimizer.beta2, 0.95);
  EXPECT_EQ(adam->optimizer.eps, 1e-6);
  EXPECT_EQ(adam->optimizer.weightDecay, 0.1);

  auto classic = readText(R"({"train_batch_size": 8,
      "optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})");
  ASSERT_READ(classic);
  EXPECT_EQ(classic->optimizer.type, "Adam");
  EXPECT_FALSE(classic->optimizer.adamWMode);

  // "AdamW" decouples regardless of adam_w_mode.
  auto adamw = readText(R"({"train_batch_size": 8,
      "optimizer": {"type": "ADAMW", "params": {"adam_w_mode": false}}})");
  ASSERT_READ(adamw);
  EXPECT_EQ(adamw->optimizer.type, "AdamW");
  EXPECT_TRUE(adamw->optimizer.adamWMode);

  // torch.optim.AdamW brings its own default weight decay.
  auto torch = readText(R"({"train_batch_size": 8,
      "optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})");
  ASSERT_READ(torch);
  EXPECT_EQ(torch->optimizer.weightDecay, 0.01);
}

//===----------------------------------------------------------------------===//
// Real-world configs, accepted unchanged
//===----------------------------------------------------------------------===//

TEST(DeepSpeedConfigRealWorld, HuggingFaceZero3WithAutoEverywhere) {
  auto cfg =
      loadDeepSpeedConfig(testConfig("hf_ds_config_zero3.json"), hfContext());
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.stage, 3);
  EXPECT_EQ(cfg->zero.offloadOptimizer.device, OffloadDevice::CPU);
  EXPECT_EQ(cfg->zero.offloadParam.device, OffloadDevice::CPU);
  EXPECT_TRUE(cfg->zero.overlapComm);
  EXPECT_EQ(cfg->zero.reduceBucketSize, 16777216);
  EXPECT_EQ(cfg->zero.prefetchBucketSize, 15099494);
  EXPECT_EQ(cfg->zero.paramPersistenceThreshold, 40960);
  EXPECT_EQ(cfg->zero.maxLiveParameters, 1000000000);
  EXPECT_EQ(cfg->zero.subGroupSize, 1000000000);
  EXPECT_TRUE(cfg->zero.gather16bitWeightsOnModelSave);
  // fp16.enabled "auto" with a bf16 model, and no bf16 block: fp32.
  EXPECT_EQ(cfg->precision, Precision::FP32);
  EXPECT_TRUE(hasNote(*cfg, {"the model's dtype is bf16 but neither fp16 nor "
                             "bf16 is enabled"}));
  EXPECT_EQ(cfg->trainBatchSize, 32);
  EXPECT_EQ(cfg->microBatchPerGpu, 4);
  EXPECT_EQ(cfg->gradientAccumulationSteps, 1);
  EXPECT_EQ(cfg->optimizer.lr, 5e-5);
  EXPECT_EQ(cfg->ignoredKeys,
            (std::vector<std::string>{"scheduler", "steps_per_print",
                                      "wall_clock_breakdown"}));
  // reduce, prefetch, persistence, fp16, fp32 training, 4 optimizer params,
  // clipping, 3 batch values.
  EXPECT_EQ(cfg->notes.size(), 13u) << joined(cfg->notes);
}

TEST(DeepSpeedConfigRealWorld, HuggingFaceZero2WithCpuOffload) {
  ConfigContext ctx = hfContext();
  ctx.modelPrecision = Precision::FP16;
  auto cfg = loadDeepSpeedConfig(testConfig("hf_ds_config_zero2.json"), ctx);
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.stage, 2);
  EXPECT_EQ(cfg->zero.offloadOptimizer.device, OffloadDevice::CPU);
  EXPECT_EQ(cfg->zero.allgatherBucketSize, 200000000);
  EXPECT_EQ(cfg->zero.reduceBucketSize, 16777216);
  EXPECT_EQ(cfg->precision, Precision::FP16);
  EXPECT_TRUE(cfg->lossScale.dynamic());
}

TEST(DeepSpeedConfigRealWorld, HuggingFaceZero3NvmeWithOldAioKeys) {
  auto cfg = loadDeepSpeedConfig(testConfig("hf_zero3_nvme.json"), hfContext());
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->precision, Precision::BF16);
  EXPECT_EQ(cfg->zero.offloadParam.device, OffloadDevice::NVMe);
  EXPECT_EQ(cfg->zero.offloadParam.nvmePath, "/local_nvme");
  EXPECT_EQ(cfg->zero.offloadParam.bufferSize, 100000000);
  EXPECT_EQ(cfg->zero.offloadParam.maxInCpu, 1000000000);
  EXPECT_EQ(cfg->zero.offloadOptimizer.device, OffloadDevice::NVMe);
  EXPECT_EQ(cfg->zero.offloadOptimizer.bufferCount, 4);
  EXPECT_EQ(cfg->aio.blockSize, 262144);
  EXPECT_EQ(cfg->aio.queueDepth, 32);
  EXPECT_EQ(cfg->aio.intraOpParallelism, 1);
  EXPECT_NE(std::find(cfg->ignoredKeys.begin(), cfg->ignoredKeys.end(),
                      "aio.thread_count"),
            cfg->ignoredKeys.end());
}

TEST(DeepSpeedConfigRealWorld, DeepSpeedTutorialWithLegacyCpuOffload) {
  auto cfg =
      loadDeepSpeedConfig(testConfig("legacy_zero_offload.json"), worldOf(4));
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->zero.stage, 2);
  EXPECT_EQ(cfg->zero.offloadOptimizer.device, OffloadDevice::CPU);
  EXPECT_EQ(cfg->zero.reduceBucketSize, 50000000);
  EXPECT_EQ(cfg->precision, Precision::FP16);
  EXPECT_EQ(cfg->microBatchPerGpu, 4);
  EXPECT_EQ(cfg->optimizer.type, "Adam");
  EXPECT_TRUE(cfg->optimizer.adamWMode);
  EXPECT_EQ(cfg->ignoredKeys,
            (std::vector<std::string>{"steps_per_print", "wall_clock_breakdown",
                                      "zero_allow_untested_optimizer"}));
}

TEST(DeepSpeedConfigRealWorld, ShippedExamplesAreAccepted) {
  const char *examples[] = {"zero1.json", "zero2_cpu_offload.json",
                            "zero3.json", "zero3_nvme.json",
                            "hf_zero3_auto.json"};
  for (const char *name : examples) {
    SCOPED_TRACE(name);
    ASSERT_READ(loadDeepSpeedConfig(exampleConfig(name),
                                    contextFor(exampleConfig(name))));
  }
  auto nvme = loadDeepSpeedConfig(exampleConfig("zero3_nvme.json"),
                                  contextFor(exampleConfig("zero3_nvme.json")));
  ASSERT_READ(nvme);
  EXPECT_EQ(nvme->zero.offloadParam.device, OffloadDevice::NVMe);
  EXPECT_EQ(nvme->trainBatchSize, 128);
}

//===----------------------------------------------------------------------===//
// Round trip
//===----------------------------------------------------------------------===//

namespace {

/// Writes `cfg` as DeepSpeed JSON and reads it back with `ctx`.
Expected<DeepSpeedConfig> roundTrip(const DeepSpeedConfig &cfg,
                                    const ConfigContext &ctx) {
  Expected<JsonDocument> doc =
      JsonDocument::parse(toDeepSpeedJson(cfg).dump(2), "resolved.json");
  if (!doc)
    return doc.error();
  return readDeepSpeedConfig(*doc, ctx);
}

bool hasAuto(const nlohmann::json &v) {
  if (v.is_string())
    return v == "auto";
  if (v.is_structured())
    for (const auto &item : v)
      if (hasAuto(item))
        return true;
  return false;
}

} // namespace

TEST(DeepSpeedConfigRoundTrip, ResolvedConfigsReadBackEqual) {
  std::vector<std::string> files = {testConfig("hf_ds_config_zero3.json"),
                                    testConfig("hf_ds_config_zero2.json"),
                                    testConfig("hf_zero3_nvme.json"),
                                    testConfig("legacy_zero_offload.json"),
                                    exampleConfig("zero1.json"),
                                    exampleConfig("zero2_cpu_offload.json"),
                                    exampleConfig("zero3.json"),
                                    exampleConfig("zero3_nvme.json"),
                                    exampleConfig("hf_zero3_auto.json")};
  for (const std::string &file : files) {
    SCOPED_TRACE(file);
    auto cfg = loadDeepSpeedConfig(file, contextFor(file));
    ASSERT_READ(cfg);
    nlohmann::json written = toDeepSpeedJson(*cfg);
    EXPECT_FALSE(hasAuto(written));
    auto again = roundTrip(*cfg, contextFor(file));
    ASSERT_READ(again);
    EXPECT_EQ(*again, *cfg) << written.dump(2);
    // Nothing left to resolve, rewrite or derive.
    for (const char *resolved : {"\"auto\"", "deprecated", "derived", "absent"})
      EXPECT_FALSE(hasNote(*again, {resolved})) << joined(again->notes);
    EXPECT_TRUE(again->ignoredKeys.empty());
    EXPECT_EQ(toDeepSpeedJson(*again), written);
  }
}

TEST(DeepSpeedConfigRoundTrip, NonDefaultValuesSurvive) {
  auto cfg = readText(R"({
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 3,
  "gradient_clipping": 0.5,
  "communication_data_type": "BF16",
  "fp16": {"enabled": true, "loss_scale": 1024, "initial_scale_power": 8,
           "hysteresis": 4, "consecutive_hysteresis": true},
  "optimizer": {"type": "Adam", "params": {"adam_w_mode": false,
                "torch_adam": true, "lr": 0.01}},
  "zero_optimization": {
    "stage": 3, "overlap_comm": false, "reduce_scatter": false,
    "offload_optimizer": {"device": "cpu", "ratio": 0.25, "pin_memory": false},
    "offload_param": {"device": "nvme", "nvme_path": "/mnt/nvme",
                      "buffer_count": 7},
    "mics_shard_size": 8, "zero_hpz_partition_size": 4,
    "leaf_module": {"classes": "my.Block", "names": ["a", "a", "b"]},
    "zenflow": {"topk_ratio": 0.05},
    "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}
  },
  "activation_checkpointing": {"partition_activations": true,
                               "number_checkpoints": 4},
  "aio": {"block_size": 262144, "use_gds": true}
})",
                      worldOf(4));
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->trainBatchSize, 24);
  EXPECT_EQ(cfg->communicationDataType, Precision::BF16);
  EXPECT_EQ(cfg->lossScale.initialScale(), 1024.0);
  EXPECT_EQ(cfg->zero.leafModule.classes, std::vector<std::string>{"my.Block"});
  EXPECT_EQ(cfg->zero.leafModule.names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cfg->zero.zenflow["topk_ratio"], 0.05);

  auto again = roundTrip(*cfg, worldOf(4));
  ASSERT_READ(again);
  EXPECT_EQ(*again, *cfg);

  // The comparison itself sees a change.
  DeepSpeedConfig changed = *cfg;
  changed.zero.offloadParam.bufferCount = 8;
  EXPECT_NE(changed, *cfg);
  changed = *cfg;
  changed.lossScale.hysteresis = 1;
  EXPECT_NE(changed, *cfg);
}

TEST(DeepSpeedConfigRoundTrip, BiasCorrectionFalseSurvives) {
  auto cfg = readText(R"({"train_batch_size": 8, "fp16": {"enabled": true},
      "optimizer": {"type": "Lamb", "params": {"bias_correction": false}}})");
  ASSERT_READ(cfg);
  nlohmann::json out = toDeepSpeedJson(*cfg);
  EXPECT_EQ(out["optimizer"]["params"]["bias_correction"], false);
  auto again = roundTrip(*cfg, worldOf(1));
  ASSERT_READ(again);
  EXPECT_FALSE(again->optimizer.biasCorrection);
  EXPECT_EQ(*again, *cfg);
  // The comparison sees it.
  DeepSpeedConfig changed = *cfg;
  changed.optimizer.biasCorrection = true;
  EXPECT_NE(changed, *cfg);

  // The default is not written; nor is the 1-bit family's, which their type
  // implies.
  for (const char *type : {"AdamW", "OneBitAdam"}) {
    SCOPED_TRACE(type);
    auto plain = readText(std::string(R"({"train_batch_size": 8,
        "optimizer": {"type": ")") +
                          type + R"("}})");
    ASSERT_READ(plain);
    EXPECT_FALSE(toDeepSpeedJson(*plain)["optimizer"]["params"].contains(
        "bias_correction"));
    auto back = roundTrip(*plain, worldOf(1));
    ASSERT_READ(back);
    EXPECT_EQ(*back, *plain);
    EXPECT_TRUE(back->ignoredKeys.empty());
  }
}

TEST(DeepSpeedConfigRoundTrip, EmptyActivationCheckpointingSurvives) {
  auto cfg = readText(R"({"train_batch_size": 8,
      "activation_checkpointing": {}})");
  ASSERT_READ(cfg);
  nlohmann::json out = toDeepSpeedJson(*cfg);
  EXPECT_EQ(out["activation_checkpointing"], nlohmann::json::object());
  auto again = roundTrip(*cfg, worldOf(1));
  ASSERT_READ(again);
  EXPECT_TRUE(again->activationCheckpointing.present);
  EXPECT_EQ(*again, *cfg);
}

TEST(DeepSpeedConfigRoundTrip, WrittenKeysUseDocumentedNames) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3, "prefetch_bucket_size": 1000}})");
  ASSERT_READ(cfg);
  nlohmann::json out = toDeepSpeedJson(*cfg);
  const nlohmann::json &zero = out["zero_optimization"];
  EXPECT_EQ(zero["stage3_prefetch_bucket_size"], 1000);
  EXPECT_FALSE(zero.contains("prefetch_bucket_size"));
  EXPECT_EQ(zero["overlap_comm"], true);
  EXPECT_EQ(out["gradient_clipping"], 1.0);
  EXPECT_EQ(out["bf16"]["enabled"], false);
}

TEST(DeepSpeedConfigRoundTrip, WritesScheduleKeysAlwaysOthersWhenChanged) {
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "stage": 3, "offload_param": {"device": "cpu"},
      "stage3_model_persistence_threshold": 1000}})");
  ASSERT_READ(cfg);
  nlohmann::json out = toDeepSpeedJson(*cfg);
  const nlohmann::json &zero = out["zero_optimization"];
  // Defaults that differ between DeepSpeed versions are pinned down.
  EXPECT_EQ(out["gradient_clipping"], 1.0);
  EXPECT_EQ(zero["offload_param"]["pin_memory"], true);
  for (const char *key :
       {"reduce_bucket_size", "allgather_bucket_size", "sub_group_size",
        "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
        "stage3_max_live_parameters", "stage3_max_reuse_distance",
        "contiguous_gradients", "reduce_scatter", "overlap_comm"})
    EXPECT_TRUE(zero.contains(key)) << key;
  EXPECT_EQ(zero["stage3_model_persistence_threshold"], 1000);
  // Newer keys at their defaults stay out, so older DeepSpeed accepts it.
  for (const char *key :
       {"super_offload", "save_muon_momentum_buffer_in_memory", "leaf_module",
        "offload_optimizer", "stage3_allgather_sequential", "zenflow"})
    EXPECT_FALSE(zero.contains(key)) << key;
  EXPECT_FALSE(zero["offload_param"].contains("buffer_size"));
  EXPECT_FALSE(out.contains("aio"));
  EXPECT_FALSE(out.contains("activation_checkpointing"));
  EXPECT_EQ(out["fp16"], nlohmann::json({{"enabled", false}}));
}

//===----------------------------------------------------------------------===//
// Every error of a config in one run
//===----------------------------------------------------------------------===//

namespace {

/// Every error of a failed read, the first and the others, as str() lines.
std::vector<std::string> errorLines(const Expected<DeepSpeedConfig> &result) {
  std::vector<std::string> lines;
  if (result)
    return lines;
  lines.push_back(Diagnostic(result.error())
                      .str()
                      .substr(0, result.error().str().find('\n')));
  for (const Diagnostic &more : result.error().moreErrors)
    lines.push_back(more.str());
  return lines;
}

} // namespace

TEST(DeepSpeedConfigAllErrors, IndependentErrorsAreAllReportedInFileOrder) {
  auto cfg = readText(R"({
  "train_batch_size": 8,
  "optimizer": {"type": "AdamW", "params": {"lr": -1, "betas": [0.9, 2]}},
  "zero_optimization": {
    "stage": 2,
    "reduce_bucket_sise": 5,
    "allgather_bucket_size": "big",
    "offload_optimizer": {"device": "gpu"}
  },
  "fp16": {"enabled": "yes"},
  "aio": {"queue_depth": 0}
})");
  std::vector<std::string> expected = {
      "ds.json:3:45: error: 'optimizer.params.lr' must be a non-negative "
      "number; found -1",
      "ds.json:3:70: error: 'optimizer.params.betas.1' must be a number "
      "from 0.0 to 1.0; found 2",
      "ds.json:6:5: error: unknown key 'zero_optimization.reduce_bucket_sise'",
      "ds.json:7:5: error: 'zero_optimization.allgather_bucket_size' must be "
      "a non-negative integer; found \"big\"",
      "ds.json:8:27: error: 'zero_optimization.offload_optimizer.device' "
      "must be",
      "ds.json:10:12: error: 'fp16.enabled' must be true or false",
      "ds.json:11:11: error: 'aio.queue_depth' must be a positive integer",
  };
  std::vector<std::string> lines = errorLines(cfg);
  ASSERT_EQ(lines.size(), expected.size()) << cfg.error().str();
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(lines[i].rfind(expected[i], 0), 0u)
        << "expected a line starting with\n  " << expected[i] << "\ngot\n  "
        << lines[i];
  // str() prints them all, one per line, as zeroc does.
  std::string all = cfg.error().str();
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'),
            static_cast<long>(expected.size() - 1));
}

// The batch keys' values and their agreement with the command line are
// independent checks: all of their errors come out of one run.
TEST(DeepSpeedConfigAllErrors, EveryBatchErrorIsReported) {
  auto bad = readText(R"({
  "train_batch_size": 0,
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": "many"
})");
  std::vector<std::string> lines = errorLines(bad);
  ASSERT_EQ(lines.size(), 2u) << bad.error().str();
  EXPECT_EQ(lines[0].rfind("ds.json:2:3: error: 'train_batch_size' must be a "
                           "positive integer; found 0",
                           0),
            0u)
      << lines[0];
  EXPECT_EQ(lines[1].rfind("ds.json:4:3: error: 'gradient_accumulation_steps' "
                           "must be a positive integer; found \"many\"",
                           0),
            0u)
      << lines[1];

  ConfigContext ctx = worldOf(1);
  ctx.microBatch = 4;
  ctx.gradientAccumulation = 2;
  auto mismatched = readText(R"({
  "train_micro_batch_size_per_gpu": 8,
  "gradient_accumulation_steps": 3
})",
                             ctx);
  lines = errorLines(mismatched);
  ASSERT_EQ(lines.size(), 2u) << mismatched.error().str();
  EXPECT_TRUE(contains(lines[0], "'train_micro_batch_size_per_gpu' is 8 but "
                                 "--micro-batch on the command line is 4"))
      << lines[0];
  EXPECT_TRUE(contains(lines[1], "'gradient_accumulation_steps' is 3 but "
                                 "--grad-accum on the command line is 2"))
      << lines[1];

  // A bad value and a disagreement of another key, both reported; the
  // triple's arithmetic, which needs every value, is not checked.
  auto both = readText(R"({
  "train_batch_size": 7,
  "train_micro_batch_size_per_gpu": -1,
  "gradient_accumulation_steps": 3
})",
                       ctx);
  lines = errorLines(both);
  ASSERT_EQ(lines.size(), 2u) << both.error().str();
  EXPECT_TRUE(contains(lines[0], "ds.json:3:3: error: "
                                 "'train_micro_batch_size_per_gpu' must be a "
                                 "positive integer; found -1"))
      << lines[0];
  EXPECT_TRUE(contains(lines[1], "ds.json:4:3: error: "
                                 "'gradient_accumulation_steps' is 3 but "
                                 "--grad-accum on the command line is 2"))
      << lines[1];
}

TEST(DeepSpeedConfigAllErrors, ConsequencesOfAnErrorAreNotReported) {
  struct Case {
    const char *config;
    const char *onlyError;
  };
  const Case cases[] = {
      // A misspelt stage leaves stage 0, where optimizer offload and
      // bf16_master_weights_and_grads are errors; they are not reported.
      {R"({"train_batch_size": 8, "bf16": {"enabled": true,
          "bf16_master_weights_and_grads": true}, "zero_optimization": {
          "stgae": 2, "offload_optimizer": {"device": "cpu"}}})",
       "did you mean 'stage'?"},
      // A stage out of range: the partial-offload rule needs a stage.
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 7,
          "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})",
       "must be 0, 1, 2 or 3; found 7"},
      // A misspelt batch key: the batch triple is not checked.
      {R"({"train_batch_sise": 8})", "did you mean 'train_batch_size'?"},
      // A misspelt block at the top level: its rules are not checked.
      {R"({"train_batch_size": 8, "zero_optimisation": {"stage": 2},
          "bf16": {"enabled": true, "bf16_master_weights_and_grads": true}})",
       "did you mean 'zero_optimization'?"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.config);
    auto cfg = readText(c.config);
    ASSERT_FALSE(cfg);
    EXPECT_EQ(cfg.error().count(), 1u) << cfg.error().str();
    EXPECT_TRUE(failsWith(cfg, {c.onlyError}));
  }
}

TEST(DeepSpeedConfigAllErrors, NumbersAreQuotedAsWritten) {
  // nlohmann reads 2^64-1 as unsigned; as int64_t it would be -1.
  auto cfg = readText(R"({"train_batch_size": 8, "zero_optimization": {
      "reduce_bucket_size": 18446744073709551615,
      "sub_group_size": 1e30, "stage": 1.5}})");
  ASSERT_FALSE(cfg);
  std::string all = cfg.error().str();
  EXPECT_TRUE(contains(all, "'zero_optimization.reduce_bucket_size' must be "
                            "a non-negative integer no larger than 2^63-1; "
                            "found 18446744073709551615"))
      << all;
  EXPECT_TRUE(contains(all, "found 1e30")) << all;
  EXPECT_TRUE(contains(all, "found 1.5, which has a fraction")) << all;
  EXPECT_FALSE(contains(all, "found -1")) << all;
}

TEST(DeepSpeedConfigKeys, EigenvalueIsReadInsideQuantizeTraining) {
  auto cfg = readText(R"({"train_batch_size": 8,
      "eigenvalue": {"enabled": false}})");
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->ignoredKeys, std::vector<std::string>{"eigenvalue"});
  EXPECT_TRUE(hasNote(*cfg, {"inside 'quantize_training'"}))
      << joined(cfg->notes);
  EXPECT_FALSE(hasNote(*cfg, {"not a key DeepSpeed reads"}))
      << joined(cfg->notes);
}

// DeepSpeedBF16Config forbids extra keys, loss-scale keys included; but
// DeepSpeedConfigModel drops "auto" values before it checks.
TEST(DeepSpeedConfigKeys, UnknownAutoKeysInPydanticBlocksAreDropped) {
  auto cfg = readText(R"({"train_batch_size": 8,
      "bf16": {"enabled": true, "loss_scale": "auto"}})");
  ASSERT_READ(cfg);
  EXPECT_TRUE(
      hasNote(*cfg, {"'bf16.loss_scale' is not a key of 'bf16'", "\"auto\""}))
      << joined(cfg->notes);
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
      "bf16": {"enabled": true, "loss_scale": 0}})"),
                        {"unknown key 'bf16.loss_scale'"}));
  // A misspelling is an error even with "auto".
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 8,
      "zero_optimization": {"reduce_bucket_sise": "auto"}})"),
                        {"did you mean 'reduce_bucket_size'?"}));
}

// DeepSpeed's json.load(..., object_pairs_hook=
// dict_raise_error_on_duplicate_keys) refuses a repeated key; each one is
// reported where it repeats, with the config's other errors.
TEST(DeepSpeedConfigAllErrors, DuplicateKeysAreErrors) {
  auto cfg = readText(R"({
  "train_micro_batch_size_per_gpu": 2,
  "zero_optimization": {"stage": 2, "stage": 3},
  "train_micro_batch_size_per_gpu": 4
})");
  ASSERT_FALSE(cfg);
  std::string all = cfg.error().str();
  EXPECT_TRUE(contains(all, "ds.json:3:37: error: duplicate key \"stage\""))
      << all;
  EXPECT_TRUE(contains(all, "ds.json:4:3: error: duplicate key "
                            "\"train_micro_batch_size_per_gpu\""))
      << all;
  EXPECT_TRUE(contains(all, "dict_raise_error_on_duplicate_keys")) << all;
  // The same key in two different objects is no duplicate.
  ASSERT_READ(readText(R"({"train_micro_batch_size_per_gpu": 2,
      "fp16": {"enabled": false}, "bf16": {"enabled": false}})"));
}

// Features that change what each rank holds, computes or sends, and that
// zeroc does not model, are refused by name when they are on (found in
// public configs: DeepSpeedExamples' tensor_parallel and autosp configs,
// Megatron-DeepSpeed's grad_accum_dtype); off or trivial, they are not.
TEST(DeepSpeedConfigUnmodelled, ParallelismAndPrecisionFeaturesAreRefused) {
  struct Case {
    const char *json;
    std::vector<std::string> parts;
  } cases[] = {
      {R"("tensor_parallel": {"autotp_size": 4})",
       {"'tensor_parallel.autotp_size'", "world size / 4", "refuses the key"}},
      {R"("sequence_parallel_size": 2)",
       {"'sequence_parallel_size'", "splits each sequence"}},
      {R"("data_parallel_size": 4)",
       {"'data_parallel_size' is 4, not the world size 8"}},
      {R"("data_types": {"grad_accum_dtype": "fp32"})",
       {"'data_types.grad_accum_dtype' \"fp32\"", "does not model"}},
      {R"("torch_autocast": {"enabled": true})",
       {"'torch_autocast.enabled' is true", "autocast"}},
      {R"("elasticity": {"enabled": true})",
       {"'elasticity.enabled' is true", "chosen at launch"}},
      {R"("hybrid_engine": {"enabled": true})",
       {"'hybrid_engine.enabled' is true"}},
      {R"("compile": {"deepcompile": true})",
       {"'compile.deepcompile' is true", "DeepCompile"}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.json);
    EXPECT_TRUE(failsWith(
        readText(std::string(R"({"train_micro_batch_size_per_gpu": 1, )") +
                     c.json + "}",
                 worldOf(8)),
        c.parts));
  }
  for (const char *inert :
       {R"("tensor_parallel": {"autotp_size": 1})",
        R"("sequence_parallel_size": 1)", R"("data_parallel_size": 8)",
        R"("data_types": {"grad_accum_dtype": "bf16"})",
        R"("torch_autocast": {"enabled": false})",
        R"("elasticity": {"enabled": false})",
        R"("compile": {"deepcompile": false})"}) {
    SCOPED_TRACE(inert);
    ASSERT_READ(readText(
        std::string(R"({"train_micro_batch_size_per_gpu": 1, )") + inert + "}",
        worldOf(8)));
  }
  auto sparse = readText(R"({"train_micro_batch_size_per_gpu": 1,
                             "sparse_attention": {"mode": "fixed"}})");
  ASSERT_READ(sparse);
  EXPECT_TRUE(hasNote(*sparse, {"'sparse_attention' acts only through model "
                                "code built for it"}));
}

TEST(DeepSpeedConfigBatch, OneFactorNeedsNoProduct) {
  EXPECT_TRUE(failsWith(readText(R"({"train_batch_size": 1})", worldOf(8)),
                        {"'train_batch_size' 1 is not a multiple of world "
                         "size 8, so there is no whole"}));
}

//===----------------------------------------------------------------------===//
// Expert parallelism
//===----------------------------------------------------------------------===//

namespace {

/// A mixture of experts with 8 experts per layer (Mixtral-8x7B's), at
/// `world` ranks.
ConfigContext moeWorldOf(int64_t world, int64_t experts = 8) {
  ConfigContext ctx = worldOf(world);
  ctx.numExperts = experts;
  return ctx;
}

std::string autoEp(const std::string &block) {
  return R"({"train_micro_batch_size_per_gpu": 1, "expert_parallel": )" +
         block + "}";
}

} // namespace

// DeepSpeed's AutoEP block (deepspeed/module_inject/auto_ep_config.py):
// `enabled` true with `autoep_size` N; off, or without the block, 1.
TEST(DeepSpeedConfigExpertParallel, AutoEpBlockSetsTheSize) {
  auto cfg = readText(autoEp(R"({"enabled": true, "autoep_size": 4,
                                 "preset_model": "mixtral"})"),
                      moeWorldOf(8));
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->expertParallel.size, 4);
  EXPECT_EQ(cfg->expertParallel.source, "'expert_parallel.autoep_size'");
  EXPECT_TRUE(hasNote(*cfg, {"load_balance_coeff", "does not model"}));
  // preset_model locates the layers in a PyTorch module: no effect here.
  EXPECT_NE(std::find(cfg->ignoredKeys.begin(), cfg->ignoredKeys.end(),
                      "expert_parallel.preset_model"),
            cfg->ignoredKeys.end());

  auto off = readText(autoEp(R"({"enabled": false, "autoep_size": 4})"),
                      moeWorldOf(8));
  ASSERT_READ(off);
  EXPECT_EQ(off->expertParallel.size, 1);
  EXPECT_TRUE(hasNote(*off, {"'expert_parallel.autoep_size' has no effect"}));
  // AutoEP's default autoep_size is 1.
  auto one = readText(autoEp(R"({"enabled": true})"), moeWorldOf(8));
  ASSERT_READ(one);
  EXPECT_EQ(one->expertParallel.size, 1);
  // A dense model with expert parallelism of 1 is fine.
  ASSERT_READ(
      readText(autoEp(R"({"enabled": true, "autoep_size": 1})"), worldOf(8)));
}

// The launcher's flag (zeroc --ep-size, or --moe-expert-parallel-size as
// Megatron-DeepSpeed spells it) sets the size; with the config's, the two
// must agree.
TEST(DeepSpeedConfigExpertParallel, CommandLineSizeAndAgreement) {
  ConfigContext ctx = moeWorldOf(8);
  ctx.expertParallelSize = 2;
  ctx.expertParallelFlag = "--moe-expert-parallel-size";
  auto cfg = readText(R"({"train_micro_batch_size_per_gpu": 1})", ctx);
  ASSERT_READ(cfg);
  EXPECT_EQ(cfg->expertParallel.size, 2);
  EXPECT_EQ(cfg->expertParallel.source, "--moe-expert-parallel-size");
  ASSERT_READ(readText(autoEp(R"({"enabled": true, "autoep_size": 2})"), ctx));
  EXPECT_TRUE(
      failsWith(readText(autoEp(R"({"enabled": true, "autoep_size": 4})"), ctx),
                {"'expert_parallel.autoep_size' is 4 but "
                 "--moe-expert-parallel-size is 2"}));
}

// ep_size must divide the world size and the experts per layer, and a dense
// model has no experts to split: each an error naming where the size came
// from.
TEST(DeepSpeedConfigExpertParallel, SizeIsValidated) {
  EXPECT_TRUE(
      failsWith(readText(autoEp(R"({"enabled": true, "autoep_size": 3})"),
                         moeWorldOf(6, 8)),
                {"'expert_parallel.autoep_size' 3",
                 "does not divide the model's 8 experts per layer"}));
  EXPECT_TRUE(failsWith(
      readText(autoEp(R"({"enabled": true, "autoep_size": 4})"),
               moeWorldOf(6, 8)),
      {"'expert_parallel.autoep_size' 4", "does not divide the world size 6"}));
  EXPECT_TRUE(failsWith(
      readText(autoEp(R"({"enabled": true, "autoep_size": 2})"), worldOf(8)),
      {"'expert_parallel.autoep_size' 2", "the model is dense"}));
  ConfigContext flag = worldOf(8);
  flag.expertParallelSize = 2;
  EXPECT_TRUE(
      failsWith(readText(R"({"train_micro_batch_size_per_gpu": 1})", flag),
                {"--ep-size 2", "the model is dense"}));
  EXPECT_TRUE(failsWith(
      readText(autoEp(R"({"enabled": true, "autoep_size": 0})"), moeWorldOf(8)),
      {"'expert_parallel.autoep_size' must be a positive integer"}));
  EXPECT_TRUE(failsWith(readText(autoEp("[4]"), moeWorldOf(8)),
                        {"'expert_parallel' must be an object"}));
}

// AutoEP keys that override the model's routing are refused by name; the
// spellings DeepSpeed does not read from its config (the MoE layer's ep_size,
// Megatron-DeepSpeed's flag) are errors that say where to give the size.
TEST(DeepSpeedConfigExpertParallel, RoutingOverridesAndForeignSpellings) {
  EXPECT_TRUE(failsWith(
      readText(autoEp(R"({"enabled": true, "autoep_size": 2,
                          "score_func": "sigmoid"})"),
               moeWorldOf(8)),
      {"'expert_parallel.score_func' is \"sigmoid\"", "model's routing"}));
  ASSERT_READ(readText(autoEp(R"({"enabled": true, "autoep_size": 2,
                                  "score_func": "auto", "top_k": "auto",
                                  "route_norm": null})"),
                       moeWorldOf(8)));
  for (const char *key :
       {"ep_size", "moe_expert_parallel_size", "expert_parallel_size"}) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(failsWith(
        readText(std::string(R"({"train_micro_batch_size_per_gpu": 1, ")") +
                     key + R"(": 2})",
                 moeWorldOf(8)),
        {"'" + std::string(key) + "' is not read from a DeepSpeed config",
         "--ep-size", "autoep_size"}));
  }
}

// The resolved config keeps the size in DeepSpeed's spelling, and reads
// back equal.
TEST(DeepSpeedConfigExpertParallel, RoundTrips) {
  ConfigContext ctx = moeWorldOf(8);
  ctx.expertParallelSize = 4;
  auto cfg = readText(R"({"train_micro_batch_size_per_gpu": 1})", ctx);
  ASSERT_READ(cfg);
  nlohmann::json out = toDeepSpeedJson(*cfg);
  EXPECT_EQ(out["expert_parallel"],
            (nlohmann::json{{"enabled", true}, {"autoep_size", 4}}));
  auto back = roundTrip(*cfg, moeWorldOf(8));
  ASSERT_READ(back);
  EXPECT_EQ(*back, *cfg);
  EXPECT_EQ(back->expertParallel.size, 4);
}
