//===- ModelsTest.cpp - Generator, presets and model statistics -----------===//

#include "model/ModelOps.h"
#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Models/ModelBuilder.h"
#include "zeroc/Models/ModelSpec.h"
#include "zeroc/Pipeline/Pipeline.h"
#include "zeroc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace zeroc;

namespace {

class ModelsTest : public ::testing::Test {
protected:
  ModelsTest() {
    context.loadDialect<model::ModelDialect, mlir::func::FuncDialect>();
  }

  ModelStats statsOf(const ModelSpec &spec) {
    mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, spec);
    EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
    mlir::FailureOr<ModelStats> stats = computeModelStats(*module);
    EXPECT_TRUE(mlir::succeeded(stats));
    return *stats;
  }

  /// The statistics with the saved bytes of the training step under
  /// `policy` (applyRecomputation).
  ModelStats statsOf(const ModelSpec &spec, RecomputePolicy policy) {
    mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, spec);
    mlir::FailureOr<ModelStats> stats = computeModelStats(*module);
    EXPECT_TRUE(mlir::succeeded(stats));
    EXPECT_TRUE(mlir::succeeded(applyRecomputation(*module, policy, *stats)));
    return *stats;
  }

  /// Per layer, the bytes the expanded step's backward reads from forward
  /// without recomputation (savedBytesOfTrainingStep), or an empty map.
  std::map<std::string, int64_t> stepSavedBytes(const ModelSpec &spec) {
    mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, spec);
    mlir::PassManager pm(&context);
    pm.addPass(createExpandTrainingStep());
    EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
    auto saved = savedBytesOfTrainingStep(*module);
    EXPECT_TRUE(mlir::succeeded(saved));
    return mlir::succeeded(saved) ? *saved : std::map<std::string, int64_t>();
  }

  static ModelSpec preset(const std::string &name, int64_t seq, int64_t batch,
                          DType dtype) {
    std::optional<ModelSpec> spec = presetSpec(name);
    EXPECT_TRUE(spec.has_value()) << name;
    auto shaped = withBatchShape(*spec, seq, batch, dtype);
    EXPECT_TRUE(bool(shaped));
    return *shaped;
  }

  static const LayerStats &layer(const ModelStats &stats,
                                 const std::string &name) {
    for (const LayerStats &l : stats.layers)
      if (l.name == name)
        return l;
    ADD_FAILURE() << "no layer " << name;
    return stats.layers.front();
  }

  mlir::MLIRContext context;
};

TEST_F(ModelsTest, ExactParameterCountsOfPublicModels) {
  struct Case {
    const char *name;
    int64_t params;
  } cases[] = {{"gpt2", 124439808},
               {"gpt2-medium", 354823168},
               {"gpt2-large", 774030080},
               {"gpt2-xl", 1557611200},
               {"llama-2-7b", 6738415616},
               {"llama-2-13b", 13015864320},
               {"llama-3-8b", 8030261248},
               {"llama-3-70b", 70553706496},
               // The Hugging Face model pages' safetensors totals.
               {"mistral-7b", 7241732096},
               {"qwen2-7b", 7615616512},
               {"gemma-7b", 8537680896},
               {"phi-3-mini", 3821079552},
               // Mixtral's paper and model card: 46.7 B total.
               {"mixtral-8x7b", 46702792704}};
  for (const Case &c : cases) {
    ModelSpec spec = preset(c.name, 8, 1, DType::BF16);
    EXPECT_EQ(spec.parameterCount(), c.params) << c.name;
    EXPECT_EQ(statsOf(spec).params, c.params) << c.name;
  }
}

TEST_F(ModelsTest, SpecCountAgreesWithGraphForEveryPreset) {
  for (const std::string &name : presetNames()) {
    ModelSpec spec = preset(name, 4, 1, DType::F32);
    ModelStats stats = statsOf(spec);
    EXPECT_EQ(stats.params, spec.parameterCount()) << name;
    EXPECT_EQ(stats.paramBytes, 4 * spec.parameterCount()) << name;
    EXPECT_EQ(stats.numLayers, spec.numLayers) << name;
  }
}

TEST_F(ModelsTest, ShippedConfigsMatchPresets) {
  for (const char *name :
       {"gpt2", "gpt2-medium", "llama-2-7b", "llama-3-8b", "mistral-7b",
        "qwen2-7b", "gemma-7b", "phi-3-mini", "tiny-gpt2", "tiny-llama",
        "tiny-mistral", "tiny-qwen2", "tiny-gemma", "tiny-phi3", "mixtral-8x7b",
        "tiny-mixtral"}) {
    std::string path = std::string(ZEROC_SOURCE_DIR) + "/examples/configs/" +
                       name + "/config.json";
    auto doc = JsonDocument::load(path);
    ASSERT_TRUE(bool(doc)) << doc.error().str();
    auto fromFile = readHFConfig(*doc);
    ASSERT_TRUE(bool(fromFile)) << fromFile.error().str();
    ModelSpec fromPreset = *presetSpec(name);
    EXPECT_EQ(fromFile->parameterCount(), fromPreset.parameterCount()) << name;
    EXPECT_EQ(fromFile->numKVHeads, fromPreset.numKVHeads) << name;
    EXPECT_EQ(fromFile->dtype, fromPreset.dtype) << name;
    EXPECT_EQ(fromFile->ropeTheta, fromPreset.ropeTheta) << name;
    EXPECT_EQ(fromFile->headDim, fromPreset.headDim) << name;
    EXPECT_EQ(fromFile->slidingWindow, fromPreset.slidingWindow) << name;
    EXPECT_EQ(fromFile->tieWordEmbeddings, fromPreset.tieWordEmbeddings)
        << name;
    EXPECT_EQ(fromFile->normEpsilon, fromPreset.normEpsilon) << name;
    EXPECT_EQ(fromFile->numExperts, fromPreset.numExperts) << name;
    EXPECT_EQ(fromFile->expertsPerToken, fromPreset.expertsPerToken) << name;
  }
}

// Mixtral-8x7B: 46,702,792,704 parameters, 12,879,925,248 of them active
// per token with two of eight experts (the Mixtral paper's 46.7 B and
// 12.9 B); computed by hand: per layer attention 4096 x (4096 + 2 x 1024) +
// 4096 x 4096, router 8 x 4096, experts 8 x 3 x 4096 x 14336, two norms;
// two untied 32000 x 4096 embeddings and the final norm.
TEST_F(ModelsTest, MixtralTotalAndActiveParameters) {
  ModelSpec spec = preset("mixtral-8x7b", 8, 1, DType::BF16);
  int64_t h = 4096, i = 14336, layers = 32;
  int64_t attention = h * (h + 2 * 1024) + h * h;
  int64_t expert = 3 * h * i;
  int64_t total =
      layers * (attention + 8 * h + 8 * expert + 2 * h) + 2 * 32000 * h + h;
  ASSERT_EQ(total, 46702792704);
  EXPECT_EQ(spec.parameterCount(), total);
  EXPECT_EQ(spec.activeParameterCount(), total - layers * 6 * expert);
  EXPECT_EQ(spec.activeParameterCount(), 12879925248);
  ModelStats stats = statsOf(spec);
  EXPECT_EQ(stats.params, 46702792704);
  EXPECT_EQ(stats.activeParams, 12879925248);
  EXPECT_EQ(stats.formulaFlopsPerToken,
            6 * int64_t(12879925248) + 12 * 32 * 4096 * 8);
  EXPECT_EQ(stats.moe.layers, 32);
  EXPECT_EQ(stats.moe.experts, 8);
  EXPECT_EQ(stats.moe.topK, 2);
  EXPECT_EQ(stats.moe.routedRows, 16);
  EXPECT_EQ(stats.moe.assumedMaxRows(), 2);   // uniform: 16 / 8
  EXPECT_EQ(stats.moe.worstCaseMaxRows(), 8); // every token to one expert
  // Graph FLOPs follow the active parameters: within 2% of 6N + 12LHS at a
  // full sequence (the untied embedding, 1% of N, is a lookup in the
  // graph); with all 46.7 B parameters in N the formula would be 3.6x.
  ModelStats full = statsOf(preset("mixtral-8x7b", 4096, 1, DType::BF16));
  double ratio = double(full.trainFlopsPerToken) / full.formulaFlopsPerToken;
  EXPECT_GT(ratio, 0.98);
  EXPECT_LT(ratio, 1.02);
}

// The experts' FLOPs count the routed rows only: tokens x top_k rows
// through three hidden x intermediate products, whatever num_experts is.
TEST_F(ModelsTest, ExpertFlopsCountTheActiveExperts) {
  ModelSpec spec = preset("tiny-mixtral", 16, 2, DType::F32);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, spec);
  int found = 0;
  module->walk([&](model::MoeExpertsOp op) {
    ++found;
    int64_t rows = 32 * 2, h = 64, i = 96;
    EXPECT_EQ(op.getForwardFlops(),
              6 * rows * h * i + 5 * rows * i + 2 * rows * h);
  });
  module->walk([&](model::MoeRouterOp op) {
    EXPECT_EQ(op.getForwardFlops(), 2 * 32 * 4 * 64 + 4 * 32 * 4 + 2 * 32 * 2);
  });
  EXPECT_EQ(found, 2);
}

// Two more published sizes, with the features the presets lack: Gemma-2B's
// single key/value head (2,506,172,416) and Qwen2-0.5B's tied head
// (494,032,768), the Hugging Face model pages' totals.
TEST(HFConfig, MoreSizesOfTheFamilies) {
  auto gemma2b = JsonDocument::parse(
      R"({"model_type": "gemma", "vocab_size": 256000, "hidden_size": 2048,
      "intermediate_size": 16384, "num_hidden_layers": 18,
      "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
      "max_position_embeddings": 8192, "hidden_act": "gelu"})",
      "gemma-2b");
  ASSERT_TRUE(bool(gemma2b));
  auto gemma = readHFConfig(*gemma2b);
  ASSERT_TRUE(bool(gemma)) << gemma.error().str();
  EXPECT_EQ(gemma->parameterCount(), 2506172416);
  auto qwen05b = JsonDocument::parse(
      R"({"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
      "intermediate_size": 4864, "num_hidden_layers": 24,
      "num_attention_heads": 14, "num_key_value_heads": 2,
      "max_position_embeddings": 32768, "tie_word_embeddings": true,
      "use_sliding_window": false, "sliding_window": 32768,
      "max_window_layers": 21})",
      "qwen2-0.5b");
  ASSERT_TRUE(bool(qwen05b));
  auto qwen = readHFConfig(*qwen05b);
  ASSERT_TRUE(bool(qwen)) << qwen.error().str();
  EXPECT_EQ(qwen->parameterCount(), 494032768);
}

// What sets each family apart, as its published config gives it.
TEST_F(ModelsTest, FamilyFeaturesOfThePublicConfigs) {
  ModelSpec mistral = *presetSpec("mistral-7b");
  EXPECT_EQ(mistral.family, ModelFamily::Mistral);
  EXPECT_EQ(mistral.slidingWindow, 4096);
  EXPECT_FALSE(mistral.qkvBias || mistral.outputBias);

  ModelSpec qwen = *presetSpec("qwen2-7b");
  EXPECT_TRUE(qwen.qkvBias);
  EXPECT_FALSE(qwen.outputBias);
  EXPECT_EQ(qwen.slidingWindow, 0);

  ModelSpec gemma = *presetSpec("gemma-7b");
  EXPECT_EQ(gemma.headDim, 256); // not 3072 / 16
  EXPECT_TRUE(gemma.tieWordEmbeddings && gemma.gegluMlp &&
              gemma.scaleEmbeddings && gemma.normUnitOffset);

  ModelSpec phi = *presetSpec("phi-3-mini");
  EXPECT_TRUE(phi.fusedProjections);
  EXPECT_EQ(phi.slidingWindow, 2047);
}

// Phi-3's parameters are the checkpoint's: fused qkv_proj [q + 2 kv, h] and
// gate_up_proj [2 I, h]; Qwen2's biases are on q, k and v only.
TEST_F(ModelsTest, CheckpointNamesAndLayouts) {
  auto shapes = [&](const std::string &name) {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        buildModel(context, preset(name, 8, 1, DType::F32));
    std::map<std::string, std::vector<int64_t>> out;
    for (auto param : module->getOps<model::ParamOp>())
      out[param.getSymName().str()] = param.getTensorType().getShape().vec();
    return out;
  };
  auto phi = shapes("tiny-phi3");
  EXPECT_EQ(phi["layers.0.self_attn.qkv_proj.weight"],
            (std::vector<int64_t>{64 + 2 * 32, 64}));
  EXPECT_EQ(phi["layers.1.mlp.gate_up_proj.weight"],
            (std::vector<int64_t>{2 * 96, 64}));
  EXPECT_EQ(phi.count("layers.0.self_attn.q_proj.weight"), 0u);
  auto qwen = shapes("tiny-qwen2");
  EXPECT_EQ(qwen["layers.0.self_attn.k_proj.bias"], (std::vector<int64_t>{32}));
  EXPECT_EQ(qwen.count("layers.0.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(qwen.count("lm_head.weight"), 0u); // tied
  auto gemma = shapes("tiny-gemma");
  EXPECT_EQ(gemma["layers.0.self_attn.q_proj.weight"],
            (std::vector<int64_t>{4 * 32, 64}));
  EXPECT_EQ(gemma["layers.0.self_attn.o_proj.weight"],
            (std::vector<int64_t>{64, 4 * 32}));
}

// The windowed attention's FLOPs: per (batch, head), the band of
// w (w + 1) / 2 + (s - w) w query-key pairs counted as the full square
// counts the causal triangle (twice, less the diagonal); s^2 from w = s on.
TEST_F(ModelsTest, SlidingWindowFlops) {
  auto attentionFlops = [&](int64_t window, int64_t seq) {
    ModelSpec spec = preset("tiny-mistral", seq, 2, DType::F32);
    spec.slidingWindow = window;
    mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, spec);
    int64_t flops = -1;
    module->walk([&](model::CausalAttentionOp op) {
      flops = mlir::cast<model::CostOpInterface>(op.getOperation())
                  .getForwardFlops();
    });
    return flops;
  };
  const int64_t b = 2, heads = 4, d = 16, s = 32;
  auto expected = [&](int64_t perHead) {
    int64_t scores = b * heads * perHead;
    return 4 * scores * d + 5 * scores;
  };
  EXPECT_EQ(attentionFlops(0, s), expected(s * s));
  EXPECT_EQ(attentionFlops(s, s), expected(s * s));
  EXPECT_EQ(attentionFlops(s + 7, s), expected(s * s));
  // w = 6: 21 + 26 * 6 = 177 pairs; 2 * 177 - 32 = 322 = 11 * 32 - 30.
  EXPECT_EQ(attentionFlops(6, s), expected(322));
  EXPECT_EQ(attentionFlops(1, s), expected(s));
  // The window shrinks the whole step's FLOPs accordingly.
  ModelSpec windowed = preset("mistral-7b", 8192, 1, DType::BF16);
  ModelSpec full = windowed;
  full.slidingWindow = 0;
  EXPECT_LT(statsOf(windowed).forwardFlops, statsOf(full).forwardFlops);
}

// Korthikanti et al. (2022): a GPT layer in 16-bit keeps s b h (34 + 5 a s / h)
// bytes without recomputation. Without dropout (two masks of s b h bytes, the
// a s^2 b mask and the 2 a s^2 b dropout output) that is 32 s b h + 2 a s^2 b,
// plus the two layernorms' f32 statistics (16 s b), with the materialized
// attention. The flash attention keeps an f32 log-sum-exp per row and head
// (4 a s b) instead of the probabilities.
TEST_F(ModelsTest, GPT2LayerActivationsFollowKorthikanti) {
  ModelSpec spec = preset("gpt2", 512, 4, DType::BF16);
  spec.attentionKernel = AttentionKernel::Materialized;
  int64_t s = 512, b = 4, h = 768, a = 12;
  ModelStats stats = statsOf(spec);
  int64_t expected = 32 * s * b * h + 2 * a * s * s * b + 16 * s * b;
  EXPECT_EQ(layer(stats, "h.0").savedBytes, expected);
  EXPECT_EQ(layer(stats, "h.11").savedBytes, expected);
  EXPECT_EQ(layer(stats, "h.0").attentionKernel, "materialized");

  spec.attentionKernel = AttentionKernel::Flash;
  ModelStats flash = statsOf(spec);
  int64_t expectedFlash = 32 * s * b * h + 4 * a * s * b + 16 * s * b;
  EXPECT_EQ(layer(flash, "h.0").savedBytes, expectedFlash);
  EXPECT_EQ(layer(flash, "h.11").savedBytes, expectedFlash);
  EXPECT_EQ(layer(flash, "h.0").attentionKernel, "flash");
  EXPECT_EQ(layer(flash, "wte").attentionKernel, "");
}

// A Llama layer keeps: norm inputs and outputs (4 s b h), the rotated q and
// k and v (2 s b (q + 2 kv)), the attention output (2 s b q), the residual
// (2 s b h -- the second norm's input), four s b I tensors of the gated MLP,
// two f32 RMS statistics (8 s b), and attention's state: the f32 row
// log-sum-exp (4 a s b, flash, the default) or the probabilities
// (2 a s^2 b, materialized).
TEST_F(ModelsTest, LlamaLayerActivations) {
  ModelSpec spec = preset("tiny-llama", 32, 3, DType::BF16);
  int64_t s = 32, b = 3, h = 64, a = 4, I = 176;
  int64_t q = 64, kv = 32;
  int64_t values = 2 * s * b * (h + h + q + 2 * kv + q + h + h) +
                   4 * 2 * s * b * I + 8 * s * b;
  ModelStats stats = statsOf(spec);
  EXPECT_EQ(layer(stats, "layers.0").savedBytes, values + 4 * a * s * b);
  spec.attentionKernel = AttentionKernel::Materialized;
  ModelStats materialized = statsOf(spec);
  EXPECT_EQ(layer(materialized, "layers.0").savedBytes,
            values + 2 * a * s * s * b);
}

// A Mixtral layer keeps Llama's attention half (as above) and, for its
// mixture of experts: the router's input (the second norm's output, 2 s b
// h), its i32 indices (4 s b k) and f32 logits (4 s b E), the f32 routing
// weights (4 s b k), and the experts' state, W1 v, W3 v and each expert's
// output for the s b k routed rows (2 s b k (2 I + h)): whatever the
// routing, and however many experts (tiny Mixtral: 4, top-2).
TEST_F(ModelsTest, MixtralLayerActivations) {
  ModelSpec spec = preset("tiny-mixtral", 32, 3, DType::BF16);
  int64_t s = 32, b = 3, h = 64, a = 4, I = 96, E = 4, k = 2;
  int64_t q = 64, kv = 32;
  int64_t attention =
      2 * s * b * (h + h + q + 2 * kv + q + h) + 8 * s * b + 4 * a * s * b;
  int64_t moe = 2 * s * b * h + 4 * s * b * k + 4 * s * b * E + 4 * s * b * k +
                2 * s * b * k * (2 * I + h);
  EXPECT_EQ(layer(statsOf(spec), "layers.0").savedBytes, attention + moe);
  spec.maxExpertShare = 0.5; // The worst case changes nothing saved.
  EXPECT_EQ(layer(statsOf(spec), "layers.0").savedBytes, attention + moe);
}

// Two readings of "saved for backward" agree: the ops' interfaces
// (getSavedValues, getSavedStateType) as `zeroc stats` sums them, and the
// dataflow of the expanded training step (the forward values its backward
// reads), layer by layer, for each model family and attention kernel.
TEST_F(ModelsTest, SavedBytesOfTheStepAreTheInterfaces) {
  for (const char *name :
       {"tiny-gpt2", "tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-gemma",
        "tiny-phi3", "tiny-mixtral"})
    for (AttentionKernel kernel : kAllAttentionKernels) {
      ModelSpec spec = preset(name, 16, 2, DType::BF16);
      spec.attentionKernel = kernel;
      ModelStats stats = statsOf(spec);
      std::map<std::string, int64_t> step = stepSavedBytes(spec);
      int64_t total = 0;
      for (const LayerStats &l : stats.layers) {
        EXPECT_EQ(step[l.name], l.savedBytes)
            << name << " " << attentionKernelName(kernel) << " " << l.name;
        total += step[l.name];
      }
      EXPECT_EQ(total, stats.savedBytes) << name;
    }
}

// Under recomputation a Llama layer keeps (bf16, flash attention):
// - full: only its input, the residual stream (2 s b h);
// - selective: its input, the outputs of its matrix products -- q, k, v
//   (2 s b (q + 2 kv)), o_proj (2 s b h), gate and up (2 x 2 s b I) -- and
//   the attention's output (2 s b q) and row log-sum-exp (4 a s b); the
//   norms, RoPE, SiLU and the gate product are recomputed.
// Every k-th layer: the others keep what they keep without recomputation.
TEST_F(ModelsTest, LlamaLayerActivationsUnderRecomputation) {
  ModelSpec spec = preset("tiny-llama", 32, 3, DType::BF16);
  int64_t s = 32, b = 3, h = 64, a = 4, I = 176;
  int64_t q = 64, kv = 32;
  ModelStats none = statsOf(spec);

  ModelStats full = statsOf(spec, {RecomputeMode::Full, 1});
  EXPECT_EQ(layer(full, "layers.0").savedBytes, 2 * s * b * h);
  EXPECT_EQ(layer(full, "layers.1").savedBytes, 2 * s * b * h);
  EXPECT_EQ(full.recompute.mode, RecomputeMode::Full);

  ModelStats selective = statsOf(spec, {RecomputeMode::Selective, 1});
  int64_t kept =
      2 * s * b * (h + q + 2 * kv + q + h) + 2 * 2 * s * b * I + 4 * a * s * b;
  EXPECT_EQ(layer(selective, "layers.0").savedBytes, kept);
  EXPECT_EQ(layer(selective, "layers.1").savedBytes, kept);

  ModelStats every2 = statsOf(spec, {RecomputeMode::Full, 2});
  EXPECT_EQ(layer(every2, "layers.0").savedBytes, 2 * s * b * h);
  EXPECT_EQ(layer(every2, "layers.1").savedBytes,
            layer(none, "layers.1").savedBytes);
  // The embedding, the final norm and the head are never recomputed.
  for (const char *other : {"embed_tokens", "norm", "lm_head"})
    EXPECT_EQ(layer(full, other).savedBytes, layer(none, other).savedBytes)
        << other;
}

// A GPT-2 layer under selective recomputation keeps its input (2 s b h),
// q, k, v (6 s b h), the attention output and log-sum-exp (2 s b h +
// 4 a s b), the attention projection's output (2 s b h: the second residual
// sum is recomputed from it) and the MLP's first projection (8 s b h, GELU's
// input); the layernorms, their statistics and GELU are recomputed.
TEST_F(ModelsTest, GPT2LayerActivationsUnderSelectiveRecomputation) {
  ModelSpec spec = preset("gpt2", 512, 4, DType::BF16);
  int64_t s = 512, b = 4, h = 768, a = 12;
  ModelStats selective = statsOf(spec, {RecomputeMode::Selective, 1});
  EXPECT_EQ(layer(selective, "h.0").savedBytes, 20 * s * b * h + 4 * a * s * b);
  EXPECT_EQ(layer(selective, "h.11").savedBytes,
            20 * s * b * h + 4 * a * s * b);
}

TEST(LayerNumber, NumberedLayersOnly) {
  EXPECT_EQ(layerNumber("h.3"), 3);
  EXPECT_EQ(layerNumber("model.layers.17"), 17);
  EXPECT_FALSE(layerNumber("wte"));
  EXPECT_FALSE(layerNumber("ln_f"));
  EXPECT_FALSE(layerNumber("h."));
  EXPECT_FALSE(layerNumber("layers.3a"));
}

TEST_F(ModelsTest, TrainingFlopsMatchTheUsualEstimate) {
  // Graph FLOPs differ from 6N + 12LHS only by the non-matmul work and the
  // embedding lookups, about 0.1% for GPT-2.
  ModelStats stats = statsOf(preset("gpt2", 1024, 1, DType::F32));
  EXPECT_EQ(stats.formulaFlopsPerToken,
            6 * int64_t(124439808) + 12 * 12 * 768 * 1024);
  double ratio = double(stats.trainFlopsPerToken) / stats.formulaFlopsPerToken;
  EXPECT_GT(ratio, 0.99);
  EXPECT_LT(ratio, 1.01);
}

TEST_F(ModelsTest, LinearFlopsAreExact) {
  ModelSpec spec = preset("tiny-gpt2", 16, 2, DType::F32);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, spec);
  bool found = false;
  module->walk([&](model::LinearOp op) {
    auto loc = mlir::dyn_cast<mlir::NameLoc>(op.getLoc());
    if (!loc || loc.getName() != "h.0.mlp.c_fc")
      return;
    found = true;
    // 32 rows x 64 in x 256 out, multiply-add = 2, plus the bias.
    EXPECT_EQ(
        mlir::cast<model::CostOpInterface>(op.getOperation()).getForwardFlops(),
        2 * 32 * 64 * 256 + 32 * 256);
  });
  EXPECT_TRUE(found);
}

TEST(LayerNames, GroupByFirstNumericComponent) {
  EXPECT_EQ(layerOfParameter("h.3.attn.q_proj.weight"), "h.3");
  EXPECT_EQ(layerOfParameter("layers.17.mlp.up_proj.weight"), "layers.17");
  EXPECT_EQ(layerOfParameter("model.layers.2.norm.weight"), "model.layers.2");
  EXPECT_EQ(layerOfParameter("ln_f.weight"), "ln_f");
  EXPECT_EQ(layerOfParameter("lm_head"), "lm_head");
}

//===----------------------------------------------------------------------===//
// Hugging Face config reading
//===----------------------------------------------------------------------===//

Expected<ModelSpec> read(const std::string &text,
                         std::vector<std::string> *notes = nullptr) {
  auto doc = JsonDocument::parse(text, "config.json");
  if (!doc)
    return doc.error();
  return readHFConfig(*doc, notes);
}

TEST(HFConfig, FillsHuggingFaceDefaults) {
  std::vector<std::string> notes;
  auto spec = read(R"({"model_type": "llama", "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 8, "max_position_embeddings": 32})",
                   &notes);
  ASSERT_TRUE(bool(spec)) << spec.error().str();
  EXPECT_EQ(spec->numKVHeads, 8);
  EXPECT_EQ(spec->headDim, 8);
  EXPECT_DOUBLE_EQ(spec->normEpsilon, 1e-6);
  EXPECT_DOUBLE_EQ(spec->ropeTheta, 10000.0);
  EXPECT_FALSE(spec->tieWordEmbeddings);
  EXPECT_EQ(spec->dtype, DType::F32);
  EXPECT_EQ(spec->seqLen, 32);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "num_key_value_heads not given: using "
                      "num_attention_heads = 8");

  auto gpt = read(R"({"model_type": "gpt2", "vocab_size": 10, "n_ctx": 16,
      "n_embd": 32, "n_layer": 1, "n_head": 2})");
  ASSERT_TRUE(bool(gpt)) << gpt.error().str();
  EXPECT_EQ(gpt->intermediateSize, 128);
  EXPECT_EQ(gpt->maxPositions, 16);
  EXPECT_TRUE(gpt->tieWordEmbeddings);
}

// transformers' config classes default num_key_value_heads per family when
// the key is absent (MistralConfig and MixtralConfig 8, Qwen2Config 32,
// GemmaConfig 16, LlamaConfig and Phi3Config num_attention_heads), and read
// null as num_attention_heads: checked against transformers 5.24.
TEST(HFConfig, KeyValueHeadsDefaultAsTheConfigClass) {
  auto withType = [](const std::string &type, const std::string &kv) {
    return R"({"model_type": ")" + type + R"(", "vocab_size": 100,
      "hidden_size": 512, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 32, "max_position_embeddings": 32)" +
           kv + "}";
  };
  struct Case {
    const char *type;
    int64_t kvHeads;
  };
  for (Case c : {Case{"llama", 32}, Case{"phi3", 32}, Case{"mistral", 8},
                 Case{"qwen2", 32}, Case{"gemma", 16}, Case{"mixtral", 8}}) {
    std::vector<std::string> notes;
    auto spec = read(withType(c.type, ""), &notes);
    ASSERT_TRUE(bool(spec)) << c.type << ": " << spec.error().str();
    EXPECT_EQ(spec->numKVHeads, c.kvHeads) << c.type;
    auto null = read(withType(c.type, R"(, "num_key_value_heads": null)"));
    ASSERT_TRUE(bool(null)) << c.type << ": " << null.error().str();
    EXPECT_EQ(null->numKVHeads, 32) << c.type;
  }
  std::vector<std::string> notes;
  auto mistral = read(withType("mistral", ""), &notes);
  ASSERT_TRUE(bool(mistral));
  EXPECT_NE(std::find(notes.begin(), notes.end(),
                      "num_key_value_heads not given: using Hugging Face's "
                      "MistralConfig default = 8"),
            notes.end());
}

TEST(HFConfig, ErrorsPointAtTheKey) {
  auto spec = read("{\n  \"model_type\": \"llama\",\n  \"vocab_size\": 0\n}");
  ASSERT_FALSE(bool(spec));
  EXPECT_EQ(spec.error().str(),
            "config.json:3:3: error: 'vocab_size' must be a positive "
            "integer, found 0");
}

TEST(HFConfig, BatchShapeIsChecked) {
  ModelSpec spec = *presetSpec("gpt2");
  EXPECT_FALSE(bool(withBatchShape(spec, 1025, std::nullopt, std::nullopt)));
  EXPECT_FALSE(bool(withBatchShape(spec, 0, std::nullopt, std::nullopt)));
  EXPECT_FALSE(bool(withBatchShape(spec, std::nullopt, -1, std::nullopt)));
  EXPECT_FALSE(bool(withBatchShape(spec, std::nullopt, 1, DType::I32)));
  auto ok = withBatchShape(spec, 256, 8, DType::F16);
  ASSERT_TRUE(bool(ok));
  EXPECT_EQ(ok->seqLen, 256);
  EXPECT_EQ(ok->microBatch, 8);
  EXPECT_EQ(ok->dtype, DType::F16);
}

// A Mixtral config relabelled llama is refused, naming the expert count,
// rather than planned as a 7.24 B dense model (the real one has 46.7 B).
TEST(HFConfig, MixtureOfExpertsIsRefused) {
  auto spec = read("{\"model_type\": \"llama\", \"vocab_size\": 32000,\n"
                   "\"hidden_size\": 4096, \"intermediate_size\": 14336,\n"
                   "\"num_hidden_layers\": 32, \"num_attention_heads\": 32,\n"
                   "\"num_key_value_heads\": 8, \"num_experts_per_tok\": 2,\n"
                   "\"max_position_embeddings\": 32768,\n"
                   "\"num_local_experts\": 8}");
  ASSERT_FALSE(bool(spec));
  EXPECT_EQ(spec.error().str(),
            "config.json:6:1: error: 'num_local_experts' is 8, 2 active per "
            "token: a mixture-of-experts model, which model_type \"llama\" "
            "does not describe; planning it as a dense model would count the "
            "wrong parameters, FLOPs and memory");
}

// Every key is modelled, noted or refused: an unknown key is an error, a
// key without effect a note, a null value Hugging Face's "unset".
TEST(HFConfig, EveryKeyIsAccountedFor) {
  const char *base = R"({"model_type": "mistral", "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 8, "max_position_embeddings": 32)";
  auto with = [&](const std::string &extra,
                  std::vector<std::string> *notes = nullptr) {
    return read(std::string(base) + extra + "}", notes);
  };
  std::vector<std::string> notes;
  auto ok = with(R"(, "bos_token_id": 1, "use_cache": true,
      "quantization_config": null, "attention_dropout": 0.0)",
                 &notes);
  ASSERT_TRUE(bool(ok)) << ok.error().str();
  EXPECT_EQ(ok->slidingWindow, 4096); // MistralConfig's default
  EXPECT_NE(std::find(notes.begin(), notes.end(),
                      "keys without effect on training, ignored: "
                      "bos_token_id, quantization_config, use_cache"),
            notes.end());
  auto unknown = with(R"(, "gate_temperature": 0.5)");
  ASSERT_FALSE(bool(unknown));
  EXPECT_NE(unknown.error().message.find(
                "unknown key 'gate_temperature' for model_type \"mistral\""),
            std::string::npos);
  auto dropout = with(R"(, "attention_dropout": 0.1)");
  ASSERT_FALSE(bool(dropout));
  EXPECT_NE(dropout.error().message.find("'attention_dropout' is 0.1"),
            std::string::npos);
  auto none = with(R"(, "sliding_window": null)");
  ASSERT_TRUE(bool(none)) << none.error().str();
  EXPECT_EQ(none->slidingWindow, 0);
}

// MixtralConfig's defaults fill the keys a config leaves out (8 experts, 2
// per token, 8 key/value heads, rms_norm_eps 1e-5, rope_theta 1e6, no
// window); its MoE keys are checked against each other.
TEST(HFConfig, MixtralDefaultsAndChecks) {
  const char *base = R"({"model_type": "mixtral", "vocab_size": 100,
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 8, "max_position_embeddings": 32)";
  auto with = [&](const std::string &extra,
                  std::vector<std::string> *notes = nullptr) {
    return read(std::string(base) + extra + "}", notes);
  };
  std::vector<std::string> notes;
  auto spec = with("", &notes);
  ASSERT_TRUE(bool(spec)) << spec.error().str();
  EXPECT_EQ(spec->numExperts, 8);
  EXPECT_EQ(spec->expertsPerToken, 2);
  EXPECT_EQ(spec->numKVHeads, 8);
  EXPECT_EQ(spec->normEpsilon, 1e-5);
  EXPECT_EQ(spec->ropeTheta, 1e6);
  EXPECT_EQ(spec->slidingWindow, 0);
  EXPECT_NE(std::find(notes.begin(), notes.end(),
                      "num_local_experts not given: using Hugging Face's "
                      "Mixtral default num_local_experts = 8"),
            notes.end());
  auto zeroJitter = with(R"(, "router_jitter_noise": 0.0,
      "output_router_logits": false, "router_aux_loss_coef": 0.001)");
  ASSERT_TRUE(bool(zeroJitter)) << zeroJitter.error().str();
  auto other = with(R"(, "num_experts": 8)");
  ASSERT_FALSE(bool(other));
  EXPECT_NE(other.error().message.find(
                "unknown key 'num_experts' for model_type \"mixtral\""),
            std::string::npos)
      << other.error().message;
  auto negative = with(R"(, "router_jitter_noise": -1)");
  ASSERT_FALSE(bool(negative));
  EXPECT_NE(negative.error().message.find(
                "'router_jitter_noise' must be a number >= 0, found -1"),
            std::string::npos);
}

TEST(HFConfig, UnknownPresetIsNullopt) {
  EXPECT_FALSE(presetSpec("gpt-5").has_value());
}

} // namespace
