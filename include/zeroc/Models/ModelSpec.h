//===- ModelSpec.h - A decoder's shape, from a Hugging Face config -*- C++
//-*-===//
//
// The handful of numbers that define a GPT-2 or Llama-family decoder (Llama,
// Mistral, Qwen2, Gemma, Phi-3), read from a Hugging Face `config.json` or a
// named preset. MLIR-free; the MLIR generator (ModelBuilder.h) turns a spec
// into a `model` dialect module.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_MODELS_MODELSPEC_H
#define ZEROC_MODELS_MODELSPEC_H

#include "zeroc/Support/AttentionKernel.h"
#include "zeroc/Support/DType.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroc {

/// The Hugging Face `model_type`s zeroc generates. Every family but GPT-2 is
/// a Llama-style decoder (RMSNorm, rotary embeddings, gated MLP) that
/// differs in the ModelSpec flags below; Mixtral replaces the MLP by a
/// mixture of SwiGLU experts.
enum class ModelFamily { GPT2, Llama, Mistral, Qwen2, Gemma, Phi3, Mixtral };

/// The `model_type` of a family ("gpt2", "llama", "mistral", ...).
const char *familyName(ModelFamily family);

/// The module attribute holding ModelSpec::hfConfig (a JSON string).
inline constexpr const char *kHFConfigAttr = "model.hf_config";

struct ModelSpec {
  std::string name; ///< Module name in the generated IR, e.g. "gpt2".
  ModelFamily family = ModelFamily::GPT2;
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKVHeads = 0;       ///< Equal to numHeads for multi-head attention.
  int64_t headDim = 0;          ///< hiddenSize / numHeads unless given.
  int64_t intermediateSize = 0; ///< MLP width.
  int64_t maxPositions = 0;
  bool tieWordEmbeddings = false;
  bool qkvBias = false;    ///< Biases on q, k, v (Llama attention_bias, Qwen2).
  bool outputBias = false; ///< Bias on o_proj (Llama, Gemma attention_bias).
  bool mlpBias = false;    ///< Llama: biases on gate, up, down projections.
  /// Sliding-window attention (Mistral, Phi-3): each query sees itself and
  /// the slidingWindow - 1 positions before it; 0 for none.
  int64_t slidingWindow = 0;
  /// The gated MLP's activation: SiLU (SwiGLU) or, for Gemma, the tanh GELU
  /// (GeGLU).
  bool gegluMlp = false;
  /// Gemma: the embeddings are multiplied by sqrt(hiddenSize), rounded to
  /// the activation dtype.
  bool scaleEmbeddings = false;
  /// Gemma: RMSNorm scales by 1 + weight (weights start at zero).
  bool normUnitOffset = false;
  /// Phi-3: q, k, v come from one `qkv_proj` and gate, up from one
  /// `gate_up_proj`, as in the checkpoint.
  bool fusedProjections = false;
  /// Mixtral: the experts of each layer's mixture (num_local_experts), 0
  /// for a dense MLP, and how many each token is routed to
  /// (num_experts_per_tok), with the top-k weights renormalised.
  int64_t numExperts = 0;
  int64_t expertsPerToken = 0;
  /// The planning assumption on the token distribution (not in the config,
  /// `zeroc gen --expert-load`): the largest share of the routed rows one
  /// expert receives; 0 for uniform (1 / numExperts).
  double maxExpertShare = 0;
  /// Mixtral with `output_router_logits`: the loss adds
  /// routerAuxLossCoef times the load-balancing loss of every layer's
  /// router (Hugging Face's load_balancing_loss_func).
  bool routerAuxLoss = false;
  double routerAuxLossCoef = 0;
  double normEpsilon = 1e-5;
  double ropeTheta = 10000.0;
  double initializerRange = 0.02;
  DType dtype = DType::F32; ///< From `torch_dtype` when present.
  /// The Hugging Face config.json the spec was read from, verbatim (a
  /// preset's too). The generator records it on the module
  /// (`model.hf_config`), the compiler in the plan (`model.hf_config`): it
  /// names the architecture whose checkpoints `--init-from` reads and
  /// `zeroc consolidate --format hf` writes (HFCheckpoint.h).
  nlohmann::json hfConfig;
  /// The attention kernel family (not in the Hugging Face config): flash
  /// unless asked otherwise (`zeroc gen --attention-kernel`).
  AttentionKernel attentionKernel = AttentionKernel::Flash;
  /// The vocabulary rounded up to a multiple of this in the model's tables
  /// and logits (not in the Hugging Face config; `zeroc gen
  /// --pad-vocab-to-multiple-of`, Megatron's make-vocab-size-divisible-by):
  /// 0 or 1 for none. The padding rows are zero and the loss ignores their
  /// logits, so training is the unpadded model's; the logits' rows become
  /// 16-byte aligned for the GPU's matrix products.
  int64_t padVocabMultiple = 0;
  /// vocabSize rounded up to padVocabMultiple.
  int64_t paddedVocabSize() const {
    if (padVocabMultiple <= 1)
      return vocabSize;
    return (vocabSize + padVocabMultiple - 1) / padVocabMultiple *
           padVocabMultiple;
  }

  // Shape of one micro-batch (not in the Hugging Face config).
  int64_t seqLen = 0; ///< Defaults to maxPositions.
  int64_t microBatch = 1;

  /// Exact trainable parameter count implied by the spec.
  int64_t parameterCount() const;
  /// The parameters one token's forward uses: all but the experts it is
  /// not routed to (numExperts - expertsPerToken per layer).
  int64_t activeParameterCount() const;
};

/// Reads a Hugging Face `config.json` (`model_type` "gpt2", "llama",
/// "mistral", "qwen2", "gemma", "phi3" or "mixtral"). Every key is accounted
/// for (docs/model-dialect.md, "Config keys"): modelled; known to have no
/// effect on training (a note); or an error that names the key: one that
/// changes the parameters, the FLOPs or the numerics in a way zeroc does not
/// model, and any key zeroc does not know. Errors name the file, the line and
/// column of the offending key, and what was expected. `notes` receives one
/// line per default that was filled in or key that was ignored.
Expected<ModelSpec> readHFConfig(const JsonDocument &doc,
                                 std::vector<std::string> *notes = nullptr);

/// The names accepted by `presetSpec`.
std::vector<std::string> presetNames();

/// A public model shape by name ("gpt2", "llama-2-7b", "tiny-llama", ...).
std::optional<ModelSpec> presetSpec(const std::string &name);

/// Applies the command line's --seq-len, --micro-batch and --dtype, checking
/// them against the spec (the sequence may not exceed maxPositions).
Expected<ModelSpec> withBatchShape(ModelSpec spec,
                                   std::optional<int64_t> seqLen,
                                   std::optional<int64_t> microBatch,
                                   std::optional<DType> dtype);

/// Refuses a spec whose micro-batch (micro_batch x seq_len tokens), FLOPs or
/// activation bytes per micro-batch exceed zeroc's limits (Limits.h,
/// docs/model-dialect.md "Limits"): what zeroc derives from the shape must
/// fit 64 bits. withBatchShape applies it.
std::optional<Diagnostic> checkModelScale(const ModelSpec &spec);

} // namespace zeroc

#endif // ZEROC_MODELS_MODELSPEC_H
