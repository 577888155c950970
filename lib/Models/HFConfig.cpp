//===- HFConfig.cpp - Hugging Face config.json to ModelSpec ---------------===//
//
// Reads a GPT-2 or Llama-family config (Llama, Mistral, Qwen2, Gemma, Phi-3)
// with Hugging Face's defaults for the keys that may be absent, and accounts
// for every key: modelled, noted as having no effect on training, or an
// error naming it (a key that changes the model in a way zeroc does not
// model, or one zeroc does not know). Also the presets, written as
// config.json text and read through the same code.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Models/ModelSpec.h"
#include "zeroc/Support/Limits.h"

#include <cmath>
#include <map>
#include <set>

using nlohmann::json;

namespace zeroc {

const char *familyName(ModelFamily family) {
  switch (family) {
  case ModelFamily::GPT2:
    return "gpt2";
  case ModelFamily::Llama:
    return "llama";
  case ModelFamily::Mistral:
    return "mistral";
  case ModelFamily::Qwen2:
    return "qwen2";
  case ModelFamily::Gemma:
    return "gemma";
  case ModelFamily::Phi3:
    return "phi3";
  case ModelFamily::Mixtral:
    return "mixtral";
  }
  return "?";
}

int64_t ModelSpec::parameterCount() const {
  int64_t h = hiddenSize, v = vocabSize, i = intermediateSize;
  int64_t q = numHeads * headDim, kv = numKVHeads * headDim;
  int64_t perLayer = 0, outside = v * h; // token embedding
  if (family == ModelFamily::GPT2) {
    perLayer = 2 * h                     // ln_1
               + 3 * (h * h + h)         // q, k, v with bias
               + (h * h + h)             // attention output projection
               + 2 * h                   // ln_2
               + (i * h + i)             // c_fc
               + (h * i + h);            // mlp c_proj
    outside += maxPositions * h + 2 * h; // wpe, ln_f
  } else {
    // Phi-3's fused qkv_proj and gate_up_proj hold the same weights.
    perLayer = 2 * h                                        // two RMSNorms
               + h * q + 2 * h * kv + q * h                 // q, k, v, o
               + (qkvBias ? q + 2 * kv : 0)                 //
               + (outputBias ? h : 0)                       //
               + (numExperts ? numExperts * (3 * h * i + h) // experts, router
                             : 3 * h * i)                   // gate, up, down
               + (mlpBias ? 2 * i + h : 0);
    outside += h; // final norm
  }
  if (!tieWordEmbeddings)
    outside += v * h;
  return outside + numLayers * perLayer;
}

int64_t ModelSpec::activeParameterCount() const {
  return parameterCount() - numLayers * (numExperts - expertsPerToken) * 3 *
                                hiddenSize * intermediateSize;
}

namespace {

/// `key` as a JSON pointer (RFC 6901).
std::string pointerTo(const std::string &key) {
  std::string out = "/";
  for (char c : key)
    out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

/// Keys any Hugging Face config may carry that do not change the model
/// trained: bookkeeping, token ids, and inference and generation settings.
const std::set<std::string> &keysWithoutEffect() {
  static const std::set<std::string> keys = {"_attn_implementation",
                                             "_attn_implementation_autoset",
                                             "_commit_hash",
                                             "_name_or_path",
                                             "architectures",
                                             "auto_map",
                                             "bad_words_ids",
                                             "begin_suppress_tokens",
                                             "bos_token_id",
                                             "chunk_size_feed_forward",
                                             "decoder_start_token_id",
                                             "diversity_penalty",
                                             "do_sample",
                                             "early_stopping",
                                             "encoder_no_repeat_ngram_size",
                                             "eos_token_id",
                                             "exponential_decay_length_penalty",
                                             "finetuning_task",
                                             "forced_bos_token_id",
                                             "forced_eos_token_id",
                                             "id2label",
                                             "is_decoder",
                                             "label2id",
                                             "length_penalty",
                                             "max_length",
                                             "min_length",
                                             "no_repeat_ngram_size",
                                             "num_beam_groups",
                                             "num_beams",
                                             "num_return_sequences",
                                             "output_attentions",
                                             "output_hidden_states",
                                             "output_scores",
                                             "pad_token_id",
                                             "prefix",
                                             "problem_type",
                                             "remove_invalid_values",
                                             "repetition_penalty",
                                             "return_dict",
                                             "return_dict_in_generate",
                                             "sep_token_id",
                                             "suppress_tokens",
                                             "task_specific_params",
                                             "temperature",
                                             "tf_legacy_loss",
                                             "tie_encoder_decoder",
                                             "tokenizer_class",
                                             "top_k",
                                             "top_p",
                                             "torchscript",
                                             "transformers_version",
                                             "typical_p",
                                             "use_bfloat16",
                                             "use_cache"};
  return keys;
}

/// Keys of other architectures that change the model in a way no family
/// here models: why, for the error.
const std::map<std::string, std::string> &unmodelledKeys() {
  static const std::map<std::string, std::string> keys = {
      {"attn_logit_softcapping",
       "caps the attention scores with tanh (Gemma 2), which zeroc does not "
       "model"},
      {"final_logit_softcapping",
       "caps the logits with tanh (Gemma 2), which zeroc does not model"},
      {"query_pre_attn_scalar",
       "changes the attention scale (Gemma 2), which zeroc does not model"},
      {"qk_layernorm", "normalizes queries and keys, which zeroc does not "
                       "model"},
      {"qk_norm", "normalizes queries and keys, which zeroc does not model"},
      {"use_qk_norm", "normalizes queries and keys, which zeroc does not "
                      "model"},
      {"quantization_config",
       "quantizes the weights, which changes their bytes and numerics; zeroc "
       "trains the unquantized model"},
      {"is_encoder_decoder", "makes an encoder-decoder model; zeroc generates "
                             "decoders only"},
      {"add_cross_attention", "adds cross-attention, which zeroc does not "
                              "model"},
      {"pruned_heads", "removes attention heads, which zeroc does not model"},
      {"layer_types", "gives layers different attention kinds, which zeroc "
                      "does not model for this model_type"},
      {"use_sliding_window",
       "enables a sliding attention window, which zeroc does not model for "
       "this model_type"},
      {"sliding_window",
       "is a sliding attention window, which this model_type does not have "
       "(Hugging Face ignores the key for it): a checkpoint trained with a "
       "window would be planned without it; use its own model_type (mistral, "
       "phi3) or remove the key"},
  };
  return keys;
}

/// Keys that count the experts of a mixture of experts (Mixtral, Qwen2-MoE,
/// DeepSeek, ...), which none of the dense families describes.
const std::vector<std::string> &expertCountKeys() {
  static const std::vector<std::string> keys = {
      "num_local_experts", "num_experts", "n_routed_experts"};
  return keys;
}

/// Reads the keys of one config, turning every problem into a Diagnostic
/// that points at the key, and remembers which keys it read.
class ConfigReader {
public:
  ConfigReader(const JsonDocument &doc, std::vector<std::string> *notes)
      : doc(doc), root(doc.root()), notes(notes) {}

  std::optional<Diagnostic> error;

  bool has(const std::string &key) const {
    return root.contains(key) && !root[key].is_null();
  }

  /// Whether the key is there, even as null.
  bool present(const std::string &key) const { return root.contains(key); }

  /// The value of a key that `has` found.
  const json &at(const std::string &key) const { return root[key]; }

  /// Marks a key as accounted for (read, or decided about).
  void known(const std::string &key) { consumed.insert(key); }

  void fail(const std::string &key, const std::string &message) {
    if (!error)
      error = doc.error(pointerTo(key), message);
  }

  void note(const std::string &line) {
    if (notes)
      notes->push_back(line);
  }

  /// A required positive integer.
  int64_t positive(const std::string &key) {
    known(key);
    if (!root.contains(key)) {
      fail(key, "missing required key '" + key + "' (a positive integer)");
      return 0;
    }
    return positiveValue(key);
  }

  /// An optional positive integer, `fallback` when absent or null.
  int64_t positive(const std::string &key, int64_t fallback,
                   const std::string &why = "") {
    known(key);
    if (!has(key)) {
      if (!why.empty())
        note(key + " not given: using " + why + " = " +
             std::to_string(fallback));
      return fallback;
    }
    return positiveValue(key);
  }

  double number(const std::string &key, double fallback) {
    known(key);
    if (!has(key))
      return fallback;
    const json &v = root[key];
    if (!v.is_number()) {
      fail(key, "'" + key + "' must be a number, found " + describeJsonType(v) +
                    " " + v.dump());
      return fallback;
    }
    double d = v.get<double>();
    if (!(d > 0.0) || !std::isfinite(d)) {
      fail(key, "'" + key + "' must be positive, found " + v.dump());
      return fallback;
    }
    return d;
  }

  bool boolean(const std::string &key, bool fallback) {
    known(key);
    if (!has(key))
      return fallback;
    const json &v = root[key];
    if (!v.is_boolean()) {
      fail(key, "'" + key + "' must be true or false, found " +
                    describeJsonType(v) + " " + v.dump());
      return fallback;
    }
    return v.get<bool>();
  }

  std::string string(const std::string &key, const std::string &fallback) {
    known(key);
    if (!has(key))
      return fallback;
    const json &v = root[key];
    if (!v.is_string()) {
      fail(key, "'" + key + "' must be a string, found " + describeJsonType(v) +
                    " " + v.dump());
      return fallback;
    }
    return v.get<std::string>();
  }

  /// A dropout probability: zeroc trains without dropout, so only 0 (or
  /// absent) describes the model it plans.
  void noDropout(const std::string &key) {
    known(key);
    if (!has(key))
      return;
    const json &v = root[key];
    if (!v.is_number() || v.get<double>() < 0.0 || v.get<double>() >= 1.0)
      return fail(key,
                  "'" + key + "' must be a probability, found " + v.dump());
    if (v.get<double>() != 0.0)
      fail(key, "'" + key + "' is " + v.dump() +
                    ": dropout changes the numerics of training and zeroc "
                    "does not model it; set it to 0.0 to plan the model "
                    "without dropout");
  }

  /// A flag whose `true` this family does not model: false has no effect.
  void onlyFalse(const std::string &key, const std::string &trueMeans) {
    if (boolean(key, false))
      fail(key, "'" + key + "' true " + trueMeans);
  }

  /// A key known to have no effect for this family: noted with `why`.
  void noEffect(const std::string &key, const std::string &why) {
    known(key);
    if (root.contains(key))
      note(key + " ignored: " + why);
  }

  /// Accounts for the keys no family reader consumed: a mixture of experts
  /// is refused first (its keys name what the model is), then the keys in
  /// name order; keys without effect (and null values, Hugging Face's
  /// "unset") are noted in one line.
  void checkRemainingKeys(ModelFamily family) {
    std::string type = familyName(family);
    // Mixtral counts its experts in num_local_experts; another spelling on
    // it is an unknown key, below.
    for (const std::string &key : expertCountKeys()) {
      if (error || consumed.count(key) || !has(key) ||
          family == ModelFamily::Mixtral)
        continue;
      std::string active =
          has("num_experts_per_tok")
              ? ", " + root["num_experts_per_tok"].dump() + " active per token"
              : "";
      fail(key, "'" + key + "' is " + root[key].dump() + active +
                    ": a mixture-of-experts model, which model_type \"" + type +
                    "\" does not describe; planning it as a dense model would "
                    "count the wrong parameters, FLOPs and memory");
    }
    std::vector<std::string> ignored;
    for (auto it = root.begin(); it != root.end() && !error; ++it) {
      const std::string &key = it.key();
      if (consumed.count(key))
        continue;
      if (it->is_null() || keysWithoutEffect().count(key)) {
        ignored.push_back(key);
        continue;
      }
      // Empty settings of the unmodelled features.
      bool empty = (it->is_object() || it->is_array()) && it->empty();
      auto unmodelled = unmodelledKeys().find(key);
      if (unmodelled != unmodelledKeys().end()) {
        if (empty || (it->is_boolean() && !it->get<bool>())) {
          ignored.push_back(key);
          continue;
        }
        std::string why = unmodelled->second;
        std::string::size_type at = why.find("this model_type");
        if (at != std::string::npos)
          why.replace(at, 15, "model_type \"" + type + "\"");
        else
          why += " (model_type \"" + type + "\")";
        fail(key, "'" + key + "' " + why);
        continue;
      }
      fail(key, "unknown key '" + key + "' for model_type \"" + type +
                    "\": zeroc cannot tell whether it changes the parameters, "
                    "FLOPs or numerics, so it refuses the config rather than "
                    "plan a different model; remove the key if it has no "
                    "effect (docs/model-dialect.md, \"Config keys\")");
    }
    if (!error && !ignored.empty()) {
      std::string line;
      for (const std::string &key : ignored)
        line += (line.empty() ? "" : ", ") + key;
      note("keys without effect on training, ignored: " + line);
    }
  }

private:
  int64_t positiveValue(const std::string &key) {
    const json &v = root[key];
    if (!v.is_number_integer()) {
      fail(key, "'" + key + "' must be a positive integer, found " +
                    describeJsonType(v) + " " + v.dump());
      return 0;
    }
    // nlohmann stores large unsigned values separately; both fit int64 here
    // or are absurd for a model dimension.
    if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t(1) << 40)) {
      fail(key, "'" + key + "' is too large: " + v.dump());
      return 0;
    }
    int64_t n = v.get<int64_t>();
    if (n <= 0) {
      fail(key, "'" + key + "' must be a positive integer, found " + v.dump());
      return 0;
    }
    if (std::optional<int64_t> cap = capOf(key); cap && n > *cap) {
      fail(key, "'" + key + "' is " + std::to_string(n) +
                    ", above zeroc's limit of " + std::to_string(*cap) +
                    " (docs/model-dialect.md, \"Limits\")");
      return 0;
    }
    return n;
  }

  /// The cap on a shape key (Limits.h); nullopt for other keys.
  static std::optional<int64_t> capOf(const std::string &key) {
    static const std::map<std::string, int64_t> caps = {
        {"n_layer", limits::kMaxLayers},
        {"num_hidden_layers", limits::kMaxLayers},
        {"vocab_size", limits::kMaxVocab},
        {"n_embd", limits::kMaxWidth},
        {"hidden_size", limits::kMaxWidth},
        {"n_inner", limits::kMaxWidth},
        {"intermediate_size", limits::kMaxWidth},
        {"head_dim", limits::kMaxWidth},
        {"n_head", limits::kMaxHeads},
        {"num_attention_heads", limits::kMaxHeads},
        {"num_key_value_heads", limits::kMaxHeads},
        {"n_positions", limits::kMaxPositions},
        {"n_ctx", limits::kMaxPositions},
        {"max_position_embeddings", limits::kMaxPositions},
        {"sliding_window", limits::kMaxPositions}};
    auto it = caps.find(key);
    if (it == caps.end())
      return std::nullopt;
    return it->second;
  }

  const JsonDocument &doc;
  const json &root;
  std::vector<std::string> *notes;
  std::set<std::string> consumed;
};

void readGPT2(ConfigReader &r, ModelSpec &spec) {
  spec.family = ModelFamily::GPT2;
  spec.vocabSize = r.positive("vocab_size");
  spec.hiddenSize = r.positive("n_embd");
  spec.numLayers = r.positive("n_layer");
  spec.numHeads = r.positive("n_head");
  r.known("n_ctx");
  spec.maxPositions = r.has("n_positions") ? r.positive("n_positions")
                                           : r.positive("n_ctx", 1024, "n_ctx");
  spec.numKVHeads = spec.numHeads;
  spec.intermediateSize =
      r.positive("n_inner", 4 * spec.hiddenSize, "4 * n_embd");
  spec.normEpsilon = r.number("layer_norm_epsilon", 1e-5);
  spec.initializerRange = r.number("initializer_range", 0.02);
  spec.tieWordEmbeddings = r.boolean("tie_word_embeddings", true);
  std::string act = r.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
    r.fail("activation_function",
           "unsupported activation_function \"" + act +
               "\": model.gelu is the tanh approximation, expected "
               "\"gelu_new\" or \"gelu_pytorch_tanh\"");
  // GPT-2's published configs train with dropout 0.1; zeroc plans GPT-2
  // without dropout, as modern pretraining runs do (docs/model-dialect.md).
  for (const char *key : {"attn_pdrop", "embd_pdrop", "resid_pdrop"})
    r.noEffect(key, "zeroc plans GPT-2 without dropout");
  // The double-heads model's classification head, not part of the LM.
  for (const char *key :
       {"summary_activation", "summary_first_dropout", "summary_proj_to_labels",
        "summary_type", "summary_use_proj", "n_special",
        "predict_special_tokens"})
    r.noEffect(key,
               "GPT2DoubleHeadsModel's classifier, not the language model");
  if (!r.boolean("scale_attn_weights", true))
    r.fail("scale_attn_weights", "'scale_attn_weights' false (attention "
                                 "without the 1/sqrt(head_dim) scale) is not "
                                 "modelled");
  r.onlyFalse("scale_attn_by_inverse_layer_idx",
              "(scores scaled by 1/(layer + 1)) is not modelled");
  r.onlyFalse("reorder_and_upcast_attn",
              "(attention scores upcast to f32 in a different order) is not "
              "modelled");
  if (!r.error && spec.hiddenSize % spec.numHeads != 0)
    r.fail("n_head", "n_head " + std::to_string(spec.numHeads) +
                         " does not divide n_embd " +
                         std::to_string(spec.hiddenSize));
  spec.headDim = spec.numHeads ? spec.hiddenSize / spec.numHeads : 0;
}

/// The rotary embedding: rope_theta, and the scalings Hugging Face applies
/// through `rope_scaling` (or `rope_parameters`, its v5 spelling). zeroc's
/// rotary op has a base only: a scaling that changes the angles is refused;
/// "dynamic" changes them only beyond max_position_embeddings, which
/// --seq-len never exceeds.
void readRope(ConfigReader &r, ModelSpec &spec, double defaultTheta) {
  spec.ropeTheta = r.number("rope_theta", defaultTheta);
  for (const char *key : {"rope_scaling", "rope_parameters"}) {
    r.known(key);
    if (!r.has(key))
      continue;
    const json &v = r.at(key);
    if (!v.is_object()) {
      r.fail(key, "'" + std::string(key) +
                      "' must be an object or null, found " +
                      describeJsonType(v) + " " + v.dump());
      return;
    }
    std::string type = "default";
    for (const char *field : {"rope_type", "type"})
      if (v.contains(field) && v[field].is_string())
        type = v[field].get<std::string>();
    if (type != "default" && type != "dynamic") {
      r.fail(key, "'" + std::string(key) + "' of type \"" + type +
                      "\" changes the rotary angles, which zeroc does not "
                      "model (its rotary op has rope_theta only)");
      return;
    }
    if (v.contains("rope_theta") && v["rope_theta"].is_number())
      spec.ropeTheta = v["rope_theta"].get<double>();
    if (v.contains("partial_rotary_factor") &&
        (!v["partial_rotary_factor"].is_number() ||
         v["partial_rotary_factor"].get<double>() != 1.0)) {
      r.fail(key, "'" + std::string(key) +
                      "' has a partial_rotary_factor other than 1, which zeroc "
                      "does not model");
      return;
    }
    if (type == "dynamic")
      r.note(std::string(key) +
             " \"dynamic\" ignored: it changes the rotary angles only beyond "
             "max_position_embeddings, which --seq-len does not exceed");
  }
  r.known("partial_rotary_factor");
  if (r.has("partial_rotary_factor")) {
    const json &v = r.at("partial_rotary_factor");
    if (!v.is_number() || v.get<double>() != 1.0)
      r.fail("partial_rotary_factor",
             "'partial_rotary_factor' " + v.dump() +
                 ": rotating part of each head is not modelled (zeroc "
                 "rotates every dimension)");
  }
}

/// Mixtral's sparse MoE block (MixtralSparseMoeBlock): num_local_experts
/// SwiGLU experts, each token routed to the num_experts_per_tok largest
/// softmax probabilities of a linear router, renormalised; with
/// output_router_logits, the auxiliary load-balancing loss times
/// router_aux_loss_coef is added to the loss. The router's jitter noise is
/// not modelled: it is refused when it would change training.
void readMixtureOfExperts(ConfigReader &r, ModelSpec &spec) {
  spec.numExperts = r.positive("num_local_experts", 8,
                               "Hugging Face's Mixtral default "
                               "num_local_experts");
  spec.expertsPerToken = r.positive("num_experts_per_tok", 2,
                                    "Hugging Face's Mixtral default "
                                    "num_experts_per_tok");
  if (!r.error && spec.expertsPerToken > spec.numExperts)
    r.fail("num_experts_per_tok",
           "'num_experts_per_tok' " + std::to_string(spec.expertsPerToken) +
               " exceeds num_local_experts " + std::to_string(spec.numExperts) +
               ": a token is routed to distinct experts");
  r.known("router_jitter_noise");
  if (r.has("router_jitter_noise")) {
    const json &v = r.at("router_jitter_noise");
    if (!v.is_number() || v.get<double>() < 0.0)
      r.fail("router_jitter_noise",
             "'router_jitter_noise' must be a number >= 0, found " + v.dump());
    else if (v.get<double>() != 0.0)
      r.fail("router_jitter_noise",
             "'router_jitter_noise' is " + v.dump() +
                 ": multiplicative noise on the router's input in training "
                 "changes the routing and the numerics, and zeroc does not "
                 "model it; set it to 0.0 to plan the model without it");
  }
  spec.routerAuxLoss = r.boolean("output_router_logits", false);
  r.known("router_aux_loss_coef");
  if (r.has("router_aux_loss_coef") &&
      !r.at("router_aux_loss_coef").is_number())
    r.fail("router_aux_loss_coef",
           "'router_aux_loss_coef' must be a number, found " +
               r.at("router_aux_loss_coef").dump());
  else if (spec.routerAuxLoss)
    spec.routerAuxLossCoef =
        r.number("router_aux_loss_coef", 0.001); // MixtralConfig's default
  else
    r.noEffect("router_aux_loss_coef",
               "output_router_logits is false, so the auxiliary loss is not "
               "added to the loss");
}

/// The Llama-style families: Llama, Mistral, Qwen2, Gemma, Phi-3 and
/// Mixtral, each as its Hugging Face modeling_*.py builds it from its
/// config.
void readLlamaFamily(ConfigReader &r, ModelSpec &spec, ModelFamily family) {
  spec.family = family;
  bool gemma = family == ModelFamily::Gemma;
  spec.vocabSize = r.positive("vocab_size");
  spec.hiddenSize = r.positive("hidden_size");
  spec.numLayers = r.positive("num_hidden_layers");
  spec.numHeads = r.positive("num_attention_heads");
  spec.intermediateSize = r.positive("intermediate_size");
  spec.maxPositions = r.positive("max_position_embeddings");
  bool mixtral = family == ModelFamily::Mixtral;
  // An absent key takes the config class's default, which is not always
  // num_attention_heads (transformers' MistralConfig and MixtralConfig: 8,
  // Qwen2Config: 32, GemmaConfig: 16); null means num_attention_heads.
  int64_t kvDefault = spec.numHeads;
  std::string kvWhy = "num_attention_heads";
  if (!r.present("num_key_value_heads")) {
    const char *cls = nullptr;
    switch (family) {
    case ModelFamily::Mistral:
      kvDefault = 8, cls = "MistralConfig";
      break;
    case ModelFamily::Mixtral:
      kvDefault = 8, cls = "MixtralConfig";
      break;
    case ModelFamily::Qwen2:
      kvDefault = 32, cls = "Qwen2Config";
      break;
    case ModelFamily::Gemma:
      kvDefault = 16, cls = "GemmaConfig";
      break;
    default:
      break;
    }
    if (cls)
      kvWhy = std::string("Hugging Face's ") + cls + " default";
  }
  spec.numKVHeads = r.positive("num_key_value_heads", kvDefault, kvWhy);
  spec.normEpsilon = r.number(
      "rms_norm_eps", family == ModelFamily::Phi3 || mixtral ? 1e-5 : 1e-6);
  spec.initializerRange = r.number("initializer_range", 0.02);
  spec.tieWordEmbeddings = r.boolean("tie_word_embeddings", gemma);
  readRope(r, spec, mixtral ? 1e6 : 10000.0);
  r.noDropout("attention_dropout");

  // The MLP's activation.
  if (gemma) {
    // Hugging Face treats Gemma's legacy "gelu" as the tanh approximation
    // (GemmaConfig); transformers 4.x read `hidden_activation` instead,
    // where "gelu" would be the exact GELU.
    auto tanhGelu = [](const std::string &a) {
      return a == "gelu_pytorch_tanh" || a == "gelu_new" || a == "gelu_fast";
    };
    std::string act = r.string("hidden_act", "gelu_pytorch_tanh");
    std::string activation = r.string("hidden_activation", "");
    if (!activation.empty() && !tanhGelu(activation))
      r.fail("hidden_activation",
             "unsupported hidden_activation \"" + activation +
                 "\": Gemma's MLP is GeGLU with the tanh GELU, expected "
                 "\"gelu_pytorch_tanh\"");
    else if (activation.empty() && !tanhGelu(act) && act != "gelu")
      r.fail("hidden_act", "unsupported hidden_act \"" + act +
                               "\": Gemma's MLP is GeGLU with the tanh GELU, "
                               "expected \"gelu_pytorch_tanh\"");
    else if (activation.empty() && act == "gelu")
      r.note("hidden_act \"gelu\" read as \"gelu_pytorch_tanh\", as Hugging "
             "Face's Gemma does");
    spec.gegluMlp = true;
  } else {
    std::string act = r.string("hidden_act", "silu");
    if (act != "silu" && act != "swish")
      r.fail("hidden_act", "unsupported hidden_act \"" + act +
                               "\": " + familyName(family) +
                               "'s MLP is SwiGLU, expected \"silu\"");
  }

  // Biases and the family's own features.
  switch (family) {
  case ModelFamily::Llama: {
    bool bias = r.boolean("attention_bias", false);
    spec.qkvBias = spec.outputBias = bias;
    spec.mlpBias = r.boolean("mlp_bias", false);
    r.noEffect("pretraining_tp", "it splits the same matrix products into "
                                 "slices; the model is the same");
    break;
  }
  case ModelFamily::Gemma: {
    bool bias = r.boolean("attention_bias", false);
    spec.qkvBias = spec.outputBias = bias;
    spec.scaleEmbeddings = true;
    spec.normUnitOffset = true;
    r.onlyFalse("use_bidirectional_attention",
                "(attention without the causal mask) is not modelled");
    break;
  }
  case ModelFamily::Qwen2: {
    spec.qkvBias = true; // Qwen2Attention: q, k, v with bias, o without.
    r.onlyFalse("use_sliding_window",
                "(a sliding window on the layers from max_window_layers on) "
                "is not modelled for qwen2");
    if (!r.error) {
      r.noEffect("sliding_window", "use_sliding_window is false");
      r.noEffect("max_window_layers", "use_sliding_window is false");
    }
    r.known("layer_types");
    if (r.has("layer_types")) {
      const json &v = r.at("layer_types");
      bool full = v.is_array() && int64_t(v.size()) == spec.numLayers;
      for (size_t i = 0; full && i < v.size(); ++i)
        full = v[i] == "full_attention";
      if (!full)
        r.fail("layer_types", "'layer_types' must list \"full_attention\" "
                              "for each of the num_hidden_layers layers: "
                              "sliding-window layers are not modelled for "
                              "qwen2");
    }
    break;
  }
  case ModelFamily::Mistral:
    r.known("sliding_window");
    if (!r.present("sliding_window")) {
      spec.slidingWindow = 4096;
      r.note("sliding_window not given: using Hugging Face's Mistral default "
             "4096");
    } else if (r.has("sliding_window")) {
      spec.slidingWindow = r.positive("sliding_window");
    }
    break;
  case ModelFamily::Phi3:
    r.known("sliding_window");
    if (r.has("sliding_window"))
      spec.slidingWindow = r.positive("sliding_window");
    spec.fusedProjections = true;
    r.noDropout("resid_pdrop");
    r.noDropout("embd_pdrop");
    r.noEffect("original_max_position_embeddings",
               "only a rope_scaling uses it, and zeroc plans none");
    break;
  case ModelFamily::Mixtral:
    // Hugging Face's Mixtral attends with a window only when sliding_window
    // is set (null in the published config).
    r.known("sliding_window");
    if (r.has("sliding_window"))
      spec.slidingWindow = r.positive("sliding_window");
    readMixtureOfExperts(r, spec);
    break;
  case ModelFamily::GPT2:
    break;
  }
  // Mistral, Phi-3 and Mixtral have no biases: only false describes them.
  if (family == ModelFamily::Mistral || family == ModelFamily::Phi3 ||
      family == ModelFamily::Mixtral) {
    r.onlyFalse("attention_bias", std::string("is not modelled: ") +
                                      familyName(family) +
                                      " has no attention biases");
    r.onlyFalse("mlp_bias", std::string("is not modelled: ") +
                                familyName(family) + " has no MLP biases");
  }
  if (r.error)
    return;
  if (r.has("head_dim")) {
    spec.headDim = r.positive("head_dim");
  } else if (spec.hiddenSize % spec.numHeads != 0) {
    r.fail("num_attention_heads", "num_attention_heads " +
                                      std::to_string(spec.numHeads) +
                                      " does not divide hidden_size " +
                                      std::to_string(spec.hiddenSize));
  } else {
    r.known("head_dim");
    spec.headDim = spec.hiddenSize / spec.numHeads;
  }
  if (!r.error && spec.numHeads * spec.headDim > limits::kMaxWidth)
    r.fail(r.has("head_dim") ? "head_dim" : "num_attention_heads",
           "the attention width num_attention_heads x head_dim = " +
               std::to_string(spec.numHeads * spec.headDim) +
               " is above zeroc's limit of " +
               std::to_string(limits::kMaxWidth) +
               " (docs/model-dialect.md, \"Limits\")");
  if (!r.error && spec.headDim % 2 != 0)
    r.fail("head_dim", "head dimension " + std::to_string(spec.headDim) +
                           " must be even for rotary embeddings");
  if (!r.error && spec.numHeads % spec.numKVHeads != 0)
    r.fail("num_key_value_heads", "num_key_value_heads " +
                                      std::to_string(spec.numKVHeads) +
                                      " does not divide num_attention_heads " +
                                      std::to_string(spec.numHeads));
}

} // namespace

Expected<ModelSpec> readHFConfig(const JsonDocument &doc,
                                 std::vector<std::string> *notes) {
  const json &root = doc.root();
  if (!root.is_object())
    return doc.error("", "a config.json must be a JSON object, found " +
                             describeJsonType(root));
  ConfigReader r(doc, notes);
  ModelSpec spec;
  std::string type = r.string("model_type", "");
  if (r.error)
    return *r.error;
  const char *expected =
      "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"gemma\", \"phi3\" or "
      "\"mixtral\"";
  if (type.empty())
    return doc.error("",
                     std::string("missing 'model_type' (") + expected + ")");
  std::optional<ModelFamily> family;
  for (ModelFamily f :
       {ModelFamily::GPT2, ModelFamily::Llama, ModelFamily::Mistral,
        ModelFamily::Qwen2, ModelFamily::Gemma, ModelFamily::Phi3,
        ModelFamily::Mixtral})
    if (type == familyName(f))
      family = f;
  if (!family)
    return doc.error("/model_type", "unsupported model_type \"" + type +
                                        "\", expected " + expected);
  if (*family == ModelFamily::GPT2)
    readGPT2(r, spec);
  else
    readLlamaFamily(r, spec, *family);
  // transformers 5 writes `dtype` where 4.x wrote `torch_dtype`.
  for (const char *key : {"torch_dtype", "dtype"}) {
    r.known(key);
    if (!r.has(key))
      continue;
    std::string name = r.string(key, "float32");
    std::optional<DType> dtype = parseDType(name);
    if (!dtype || *dtype == DType::I32)
      r.fail(key, "unsupported " + std::string(key) + " \"" + name +
                      "\", expected float32, bfloat16 or float16");
    else
      spec.dtype = *dtype;
  }
  if (!r.error)
    r.checkRemainingKeys(*family);
  if (r.error)
    return *r.error;
  spec.name = type;
  spec.seqLen = spec.maxPositions;
  spec.hfConfig = doc.root();
  return spec;
}

Expected<ModelSpec> withBatchShape(ModelSpec spec,
                                   std::optional<int64_t> seqLen,
                                   std::optional<int64_t> microBatch,
                                   std::optional<DType> dtype) {
  if (seqLen) {
    if (*seqLen <= 0 || *seqLen > spec.maxPositions)
      return Diagnostic{"", 0, 0,
                        "--seq-len " + std::to_string(*seqLen) +
                            " is out of range: expected 1 to " +
                            std::to_string(spec.maxPositions) +
                            " (the model's maximum positions)"};
    spec.seqLen = *seqLen;
  }
  if (microBatch) {
    if (*microBatch <= 0)
      return Diagnostic{"", 0, 0,
                        "--micro-batch must be a positive integer, found " +
                            std::to_string(*microBatch)};
    spec.microBatch = *microBatch;
  }
  if (dtype) {
    if (*dtype == DType::I32)
      return Diagnostic{"", 0, 0, "--dtype must be f32, bf16 or f16"};
    spec.dtype = *dtype;
  }
  if (std::optional<Diagnostic> tooLarge = checkModelScale(spec))
    return *tooLarge;
  return spec;
}

//===----------------------------------------------------------------------===//
// Presets: public shapes, as the config.json their authors published (only
// the keys zeroc reads). examples/configs/ holds the same files.
//===----------------------------------------------------------------------===//

static const std::map<std::string, const char *> &presetTexts() {
  static const std::map<std::string, const char *> presets = {
      {"tiny-gpt2", R"({"model_type": "gpt2", "vocab_size": 256,
        "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4})"},
      {"tiny-llama", R"({"model_type": "llama", "vocab_size": 256,
        "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-05})"},
      {"tiny-mistral", R"({"model_type": "mistral", "vocab_size": 256,
        "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-05,
        "sliding_window": 6})"},
      {"tiny-qwen2", R"({"model_type": "qwen2", "vocab_size": 256,
        "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "tie_word_embeddings": true,
        "use_sliding_window": false})"},
      {"tiny-gemma", R"({"model_type": "gemma", "vocab_size": 256,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-06,
        "hidden_act": "gelu_pytorch_tanh"})"},
      {"tiny-phi3", R"({"model_type": "phi3", "vocab_size": 256,
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-05,
        "sliding_window": 5})"},
      {"tiny-mixtral", R"({"model_type": "mixtral", "vocab_size": 256,
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0, "num_local_experts": 4,
        "num_experts_per_tok": 2, "output_router_logits": false,
        "router_aux_loss_coef": 0.02, "sliding_window": null})"},
      {"mixtral-8x7b", R"({"model_type": "mixtral", "vocab_size": 32000,
        "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
        "num_local_experts": 8, "num_experts_per_tok": 2,
        "output_router_logits": false, "router_aux_loss_coef": 0.02,
        "sliding_window": null, "tie_word_embeddings": false,
        "torch_dtype": "bfloat16"})"},
      {"gpt2", R"({"model_type": "gpt2", "vocab_size": 50257,
        "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05})"},
      {"gpt2-medium", R"({"model_type": "gpt2", "vocab_size": 50257,
        "n_positions": 1024, "n_embd": 1024, "n_layer": 24, "n_head": 16})"},
      {"gpt2-large", R"({"model_type": "gpt2", "vocab_size": 50257,
        "n_positions": 1024, "n_embd": 1280, "n_layer": 36, "n_head": 20})"},
      {"gpt2-xl", R"({"model_type": "gpt2", "vocab_size": 50257,
        "n_positions": 1024, "n_embd": 1600, "n_layer": 48, "n_head": 25})"},
      {"llama-2-7b", R"({"model_type": "llama", "vocab_size": 32000,
        "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 32, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05, "torch_dtype": "float16"})"},
      {"llama-2-13b", R"({"model_type": "llama", "vocab_size": 32000,
        "hidden_size": 5120, "intermediate_size": 13824,
        "num_hidden_layers": 40, "num_attention_heads": 40,
        "num_key_value_heads": 40, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05, "torch_dtype": "float16"})"},
      {"llama-3-8b", R"({"model_type": "llama", "vocab_size": 128256,
        "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "torch_dtype": "bfloat16"})"},
      {"llama-3-70b", R"({"model_type": "llama", "vocab_size": 128256,
        "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64,
        "num_key_value_heads": 8, "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "torch_dtype": "bfloat16"})"},
      {"mistral-7b", R"({"model_type": "mistral", "vocab_size": 32000,
        "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
        "torch_dtype": "bfloat16"})"},
      {"qwen2-7b", R"({"model_type": "qwen2", "vocab_size": 152064,
        "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28,
        "num_key_value_heads": 4, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "tie_word_embeddings": false, "use_sliding_window": false,
        "torch_dtype": "bfloat16"})"},
      {"gemma-7b", R"({"model_type": "gemma", "vocab_size": 256000,
        "hidden_size": 3072, "intermediate_size": 24576,
        "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 16, "head_dim": 256,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0, "hidden_act": "gelu_pytorch_tanh",
        "torch_dtype": "bfloat16"})"},
      {"phi-3-mini", R"({"model_type": "phi3", "vocab_size": 32064,
        "hidden_size": 3072, "intermediate_size": 8192,
        "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 32, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 2047,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16"})"},
      {"llama-3.1-405b", R"({"model_type": "llama", "vocab_size": 128256,
        "hidden_size": 16384, "intermediate_size": 53248,
        "num_hidden_layers": 126, "num_attention_heads": 128,
        "num_key_value_heads": 8, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "torch_dtype": "bfloat16"})"},
  };
  return presets;
}

std::vector<std::string> presetNames() {
  std::vector<std::string> names;
  for (const auto &entry : presetTexts())
    names.push_back(entry.first);
  return names;
}

std::optional<ModelSpec> presetSpec(const std::string &name) {
  auto it = presetTexts().find(name);
  if (it == presetTexts().end())
    return std::nullopt;
  auto doc = JsonDocument::parse(it->second, "preset " + name);
  if (!doc)
    return std::nullopt;
  auto spec = readHFConfig(*doc);
  if (!spec)
    return std::nullopt;
  spec->name = name;
  return *spec;
}

} // namespace zeroc
