//===- HFConfig.cpp - Hugging Face config.json to ModelSpec ---------------===//
//
// Reads the keys of GPT-2 and Llama configs that fix the model's shape, with
// Hugging Face's defaults for the ones that may be absent, and the presets
// (written as config.json text, read through the same code).
//
//===----------------------------------------------------------------------===//

#include "zeroc/Models/ModelSpec.h"

#include <cmath>
#include <map>

using nlohmann::json;

namespace zeroc {

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
    perLayer = 2 * h                                  // two RMSNorms
               + h * q + 2 * h * kv + q * h           // q, k, v, o
               + (attentionBias ? q + 2 * kv + h : 0) //
               + 3 * h * i                            // gate, up, down
               + (mlpBias ? 2 * i + h : 0);
    outside += h; // final norm
  }
  if (!tieWordEmbeddings)
    outside += v * h;
  return outside + numLayers * perLayer;
}

namespace {

/// Reads the keys of one config, turning every problem into a Diagnostic
/// that points at the key.
class ConfigReader {
public:
  ConfigReader(const JsonDocument &doc, std::vector<std::string> *notes)
      : doc(doc), root(doc.root()), notes(notes) {}

  std::optional<Diagnostic> error;

  bool has(const std::string &key) const {
    return root.contains(key) && !root[key].is_null();
  }

  void fail(const std::string &key, const std::string &message) {
    if (!error)
      error = doc.error("/" + key, message);
  }

  void note(const std::string &line) {
    if (notes)
      notes->push_back(line);
  }

  /// A required positive integer.
  int64_t positive(const std::string &key) {
    if (!root.contains(key)) {
      fail(key, "missing required key '" + key + "' (a positive integer)");
      return 0;
    }
    return positiveValue(key);
  }

  /// An optional positive integer, `fallback` when absent or null.
  int64_t positive(const std::string &key, int64_t fallback,
                   const std::string &why = "") {
    if (!has(key)) {
      if (!why.empty())
        note(key + " not given: using " + why + " = " +
             std::to_string(fallback));
      return fallback;
    }
    return positiveValue(key);
  }

  double number(const std::string &key, double fallback) {
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
    return n;
  }

  const JsonDocument &doc;
  const json &root;
  std::vector<std::string> *notes;
};

void readGPT2(ConfigReader &r, ModelSpec &spec) {
  spec.family = ModelFamily::GPT2;
  spec.vocabSize = r.positive("vocab_size");
  spec.hiddenSize = r.positive("n_embd");
  spec.numLayers = r.positive("n_layer");
  spec.numHeads = r.positive("n_head");
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
  if (!r.error && spec.hiddenSize % spec.numHeads != 0)
    r.fail("n_head", "n_head " + std::to_string(spec.numHeads) +
                         " does not divide n_embd " +
                         std::to_string(spec.hiddenSize));
  spec.headDim = spec.numHeads ? spec.hiddenSize / spec.numHeads : 0;
}

void readLlama(ConfigReader &r, ModelSpec &spec) {
  spec.family = ModelFamily::Llama;
  spec.vocabSize = r.positive("vocab_size");
  spec.hiddenSize = r.positive("hidden_size");
  spec.numLayers = r.positive("num_hidden_layers");
  spec.numHeads = r.positive("num_attention_heads");
  spec.intermediateSize = r.positive("intermediate_size");
  spec.maxPositions = r.positive("max_position_embeddings");
  spec.numKVHeads =
      r.positive("num_key_value_heads", spec.numHeads, "num_attention_heads");
  spec.normEpsilon = r.number("rms_norm_eps", 1e-6);
  spec.ropeTheta = r.number("rope_theta", 10000.0);
  spec.initializerRange = r.number("initializer_range", 0.02);
  spec.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);
  spec.attentionBias = r.boolean("attention_bias", false);
  spec.mlpBias = r.boolean("mlp_bias", false);
  std::string act = r.string("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    r.fail("hidden_act", "unsupported hidden_act \"" + act +
                             "\": Llama's MLP is SwiGLU, expected \"silu\"");
  if (r.has("rope_scaling"))
    r.note("rope_scaling ignored: it changes rotary angles, not shapes, "
           "memory or cost");
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
    spec.headDim = spec.hiddenSize / spec.numHeads;
  }
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
  if (type.empty())
    return doc.error("", "missing 'model_type' (\"gpt2\" or \"llama\")");
  if (type == "gpt2")
    readGPT2(r, spec);
  else if (type == "llama")
    readLlama(r, spec);
  else
    return doc.error("/model_type", "unsupported model_type \"" + type +
                                        "\", expected \"gpt2\" or \"llama\"");
  if (r.has("torch_dtype")) {
    std::string name = r.string("torch_dtype", "float32");
    std::optional<DType> dtype = parseDType(name);
    if (!dtype || *dtype == DType::I32)
      r.fail("torch_dtype", "unsupported torch_dtype \"" + name +
                                "\", expected float32, bfloat16 or float16");
    else
      spec.dtype = *dtype;
  }
  if (r.error)
    return *r.error;
  spec.name = type;
  spec.seqLen = spec.maxPositions;
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
