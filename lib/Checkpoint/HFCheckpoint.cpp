//===- HFCheckpoint.cpp - Hugging Face checkpoint names and layouts -------===//
//
// The name mapping (one table per architecture, both directions) and the
// reader of single-file and sharded safetensors checkpoints.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Checkpoint/HFCheckpoint.h"

#include "zeroc/Checkpoint/FileIO.h"

#include "Messages.h"

#include <algorithm>
#include <regex>
#include <sys/stat.h>

namespace zeroc {

namespace {

using nlohmann::json;

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

/// One rule of an architecture's table: zeroc names matching `pattern`
/// have the HF name `hf` (with `$1`... from the pattern), `transposed` as
/// GPT-2's Conv1D, and `part` their index in a fused tensor (-1: alone).
/// `stacked`: the parameter is one HF tensor per slice of its first
/// dimension, `hf` naming slice e with `*` replaced by e (Mixtral's
/// experts).
struct Rule {
  std::regex pattern;
  std::string hf;
  bool transposed = false;
  int part = -1;
  bool stacked = false;
};

struct Architecture {
  std::string prefix; ///< Of every name but lm_head.weight.
  std::vector<Rule> rules;
  std::vector<std::regex> buffers; ///< Bare names of non-parameters.
};

const Architecture *architecture(const std::string &modelType) {
  static const Architecture gpt2 = [] {
    Architecture a;
    a.prefix = "transformer.";
    const std::string h = R"(h\.(\d+)\.)";
    a.rules = {
        {std::regex("wte\\.weight|wpe\\.weight|ln_f\\.(weight|bias)"), "$&"},
        {std::regex(h + R"(ln_[12]\.(weight|bias))"), "$&"},
        {std::regex(h + R"(attn\.q_proj\.weight)"), "h.$1.attn.c_attn.weight",
         true, 0},
        {std::regex(h + R"(attn\.k_proj\.weight)"), "h.$1.attn.c_attn.weight",
         true, 1},
        {std::regex(h + R"(attn\.v_proj\.weight)"), "h.$1.attn.c_attn.weight",
         true, 2},
        {std::regex(h + R"(attn\.q_proj\.bias)"), "h.$1.attn.c_attn.bias",
         false, 0},
        {std::regex(h + R"(attn\.k_proj\.bias)"), "h.$1.attn.c_attn.bias",
         false, 1},
        {std::regex(h + R"(attn\.v_proj\.bias)"), "h.$1.attn.c_attn.bias",
         false, 2},
        {std::regex(h + R"((attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight)"),
         "$&", true},
        {std::regex(h + R"((attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.bias)"), "$&"},
        {std::regex("lm_head\\.weight"), "$&"},
    };
    a.buffers = {std::regex(h + R"(attn\.(bias|masked_bias))")};
    return a;
  }();
  static const Architecture llama = [] {
    Architecture a;
    a.prefix = "model.";
    const std::string l = R"(layers\.(\d+)\.)";
    a.rules = {
        {std::regex("embed_tokens\\.weight|norm\\.weight"), "$&"},
        {std::regex(l +
                    R"((input_layernorm|post_attention_layernorm)\.weight)"),
         "$&"},
        {std::regex(l + R"(self_attn\.(q|k|v|o|qkv)_proj\.(weight|bias))"),
         "$&"},
        {std::regex(l + R"(mlp\.(gate|up|down|gate_up)_proj\.(weight|bias))"),
         "$&"},
        {std::regex("lm_head\\.weight"), "$&"},
    };
    a.buffers = {std::regex(l + R"(self_attn\.rotary_emb\.inv_freq)")};
    return a;
  }();
  static const Architecture mixtral = [] {
    Architecture a = llama;
    const std::string moe = R"(layers\.(\d+)\.block_sparse_moe\.)";
    a.rules.push_back({std::regex(moe + R"(gate\.weight)"), "$&"});
    a.rules.push_back({std::regex(moe + R"(experts\.(w[123]))"),
                       "layers.$1.block_sparse_moe.experts.*.$2.weight", false,
                       -1, true});
    return a;
  }();
  if (modelType == "gpt2")
    return &gpt2;
  if (modelType == "mixtral")
    return &mixtral;
  for (const std::string &t : {"llama", "mistral", "qwen2", "gemma", "phi3"})
    if (modelType == t)
      return &llama;
  return nullptr;
}

std::string bareOf(const Architecture &a, const std::string &name) {
  if (name.rfind(a.prefix, 0) == 0)
    return name.substr(a.prefix.size());
  return name;
}

} // namespace

std::vector<std::string> hfMappedModelTypes() {
  return {"gpt2", "llama", "mistral", "qwen2", "gemma", "phi3", "mixtral"};
}

const HFTensor *HFMapping::find(const std::string &fileName) const {
  for (const HFTensor &t : tensors)
    if (t.name == fileName || t.bareName == fileName)
      return &t;
  return nullptr;
}

bool HFMapping::isBuffer(const std::string &fileName) const {
  const Architecture *a = architecture(modelType);
  std::string bare = bareOf(*a, fileName);
  for (const std::regex &b : a->buffers)
    if (std::regex_match(bare, b))
      return true;
  return false;
}

Expected<HFMapping> hfMapping(const nlohmann::json &hfConfig,
                              const std::vector<PlanTensor> &tensors) {
  std::string mapped;
  for (const std::string &t : hfMappedModelTypes())
    mapped += (mapped.empty() ? "" : ", ") + t;
  if (!hfConfig.is_object())
    return Diagnostic{"", 0, 0,
                      "the plan records no Hugging Face config (model "
                      "hf_config is null: its model was not generated from "
                      "a config.json), so it has no Hugging Face names; "
                      "compile the plan from the model's config.json or "
                      "`zeroc gen` output"};
  auto type = hfConfig.find("model_type");
  std::string modelType = type != hfConfig.end() && type->is_string()
                              ? type->get<std::string>()
                              : "";
  const Architecture *arch = architecture(modelType);
  if (!arch)
    return Diagnostic{"", 0, 0,
                      "no Hugging Face checkpoint mapping for model_type \"" +
                          modelType + "\"; zeroc maps " + mapped};
  HFMapping m;
  m.modelType = modelType;
  std::map<std::string, size_t> index;
  // Each HF tensor's parts, by part number (-1: the whole tensor): the
  // parameter, and its slice along the first dimension (-1: all of it).
  struct Source {
    const PlanTensor *param;
    int64_t slice;
  };
  std::vector<std::map<int, Source>> partsOf;
  std::vector<bool> transposedOf;
  for (const PlanTensor &p : tensors) {
    if (p.role != TensorRole::Param)
      continue;
    const Rule *rule = nullptr;
    std::smatch match;
    for (const Rule &r : arch->rules)
      if (std::regex_match(p.name, match, r.pattern)) {
        rule = &r;
        break;
      }
    if (!rule)
      return Diagnostic{"", 0, 0,
                        "parameter '" + p.name +
                            "' has no Hugging Face name in the " + modelType +
                            " mapping"};
    if ((rule->transposed || rule->part >= 0) && p.shape.empty())
      return Diagnostic{"", 0, 0,
                        "parameter '" + p.name + "' is a scalar; the " +
                            modelType + " mapping expects a matrix or vector"};
    if (rule->transposed && p.shape.size() != 2)
      return Diagnostic{"", 0, 0,
                        "parameter '" + p.name + "' has shape " +
                            shapeString(p.shape) + "; the " + modelType +
                            " mapping stores it transposed, as a matrix"};
    if (rule->stacked && p.shape.size() < 2)
      return Diagnostic{"", 0, 0,
                        "parameter '" + p.name + "' has shape " +
                            shapeString(p.shape) + "; the " + modelType +
                            " mapping stores one tensor per slice of its "
                            "first dimension, which needs two dimensions or "
                            "more"};
    if (p.validRows && (rule->transposed || rule->stacked))
      return Diagnostic{"", 0, 0,
                        "parameter '" + p.name +
                            "' is a padded table (valid_rows " +
                            std::to_string(p.validRows) + " of " +
                            shapeString(p.shape) + "); the " + modelType +
                            " mapping stores it " +
                            (rule->transposed ? "transposed" : "per slice") +
                            ", which cannot drop its padding rows"};
    std::string pattern = match.format(rule->hf);
    int64_t slices = rule->stacked ? p.shape[0] : 1;
    for (int64_t e = 0; e < slices; ++e) {
      std::string bare = pattern;
      if (rule->stacked)
        bare.replace(bare.find('*'), 1, std::to_string(e));
      std::string name = bare == "lm_head.weight" ? bare : arch->prefix + bare;
      auto [it, added] = index.emplace(name, m.tensors.size());
      if (added) {
        m.tensors.push_back({name, bare, {}, {}});
        partsOf.emplace_back();
        transposedOf.push_back(rule->transposed);
      }
      if (!partsOf[it->second]
               .emplace(rule->part, Source{&p, rule->stacked ? e : -1})
               .second)
        return Diagnostic{"", 0, 0,
                          "parameters map to the same part of '" + name + "'"};
    }
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    HFTensor &t = m.tensors[i];
    const auto &parts = partsOf[i];
    if (parts.count(-1) && parts.size() > 1)
      return Diagnostic{"", 0, 0, "'" + t.name + "' is both whole and fused"};
    int expected = parts.count(-1) ? -1 : 0;
    int64_t outs = 0;
    // The shape of a part: the parameter's (a padded table's valid rows),
    // or its slice's.
    auto shapeOf = [](const Source &s) {
      std::vector<int64_t> shape = s.param->shape;
      if (s.slice >= 0)
        return std::vector<int64_t>(shape.begin() + 1, shape.end());
      if (s.param->validRows)
        shape[0] = s.param->validRows;
      return shape;
    };
    const Source &first = parts.begin()->second;
    std::vector<int64_t> firstShape = shapeOf(first);
    for (const auto &[k, source] : parts) {
      const PlanTensor *p = source.param;
      if (k != expected++)
        return Diagnostic{"", 0, 0,
                          "'" + t.name + "' misses part " +
                              std::to_string(expected - 1) + " (of " +
                              std::to_string(parts.size()) + ")"};
      std::vector<int64_t> shape = shapeOf(source);
      std::vector<int64_t> rest(shape.begin() + (shape.empty() ? 0 : 1),
                                shape.end());
      std::vector<int64_t> firstRest(
          firstShape.begin() + (firstShape.empty() ? 0 : 1), firstShape.end());
      if (rest != firstRest || p->dtype != first.param->dtype)
        return Diagnostic{"", 0, 0,
                          "'" + p->name + "' " + shapeString(p->shape) +
                              " and '" + first.param->name + "' " +
                              shapeString(first.param->shape) +
                              " cannot be fused into '" + t.name + "'"};
      int64_t numel = 1;
      for (int64_t d : shape)
        numel *= d;
      int64_t inner =
          shape.empty() ? 1 : numel / std::max<int64_t>(shape[0], 1);
      HFPart part;
      part.param = p->name;
      part.paramBegin = source.slice < 0 ? 0 : source.slice * numel;
      part.numel = numel;
      part.transposed = transposedOf[i];
      part.offset = outs;
      part.hfBegin = transposedOf[i] ? 0 : outs * inner;
      t.parts.push_back(part);
      outs += shape.empty() ? 1 : shape[0];
    }
    if (firstShape.empty())
      t.shape = {};
    else if (transposedOf[i])
      t.shape = {firstShape[1], outs};
    else {
      t.shape = firstShape;
      t.shape[0] = outs;
    }
  }
  return m;
}

//===----------------------------------------------------------------------===//
// SafetensorsSet
//===----------------------------------------------------------------------===//

Expected<SafetensorsSet> SafetensorsSet::open(const std::string &path) {
  std::string file = path;
  if (isDirectory(path)) {
    std::string index = joinPath(path, "model.safetensors.index.json");
    std::string single = joinPath(path, "model.safetensors");
    if (pathExists(index))
      file = index;
    else if (pathExists(single))
      file = single;
    else
      return Diagnostic{path, 0, 0,
                        "is a directory with neither "
                        "model.safetensors.index.json nor model.safetensors"};
  }
  SafetensorsSet set;
  set.origin = file;
  bool isIndex = file.size() >= 5 && file.substr(file.size() - 5) == ".json";
  std::map<std::string, std::string> weightMap;
  if (isIndex) {
    auto doc = JsonDocument::load(file);
    if (!doc)
      return doc.error();
    const json &root = doc->root();
    auto wm = root.is_object() ? root.find("weight_map") : root.end();
    if (!root.is_object() || wm == root.end() || !wm->is_object())
      return doc->error("", "a safetensors index needs an object "
                            "\"weight_map\" (tensor name -> shard file)");
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string() || it->get<std::string>().empty() ||
          it->get<std::string>().find('/') != std::string::npos)
        return doc->error("/weight_map/" + it.key(),
                          "expected the file name of a shard in the "
                          "index's directory");
      weightMap[it.key()] = it->get<std::string>();
    }
    std::map<std::string, size_t> opened;
    for (const auto &[tensor, shard] : weightMap) {
      if (opened.count(shard))
        continue;
      auto f = SafetensorsFile::open(joinPath(directoryOf(file), shard));
      if (!f)
        return f.error();
      opened[shard] = set.files.size();
      set.files.push_back(std::make_unique<SafetensorsFile>(std::move(*f)));
    }
  } else {
    auto f = SafetensorsFile::open(file);
    if (!f)
      return f.error();
    set.files.push_back(std::make_unique<SafetensorsFile>(std::move(*f)));
  }
  Differences problems;
  for (const auto &f : set.files)
    for (const SafetensorsEntry &e : f->tensors()) {
      if (isIndex) {
        auto w = weightMap.find(e.name);
        std::string shard = f->path().substr(f->path().rfind('/') + 1);
        if (w == weightMap.end()) {
          problems.add("'" + e.name + "' is in " + f->path() +
                       " but not in the index's weight_map");
          continue;
        }
        if (w->second != shard) {
          problems.add("'" + e.name + "' is in " + f->path() +
                       ", the index puts it in " + w->second);
          continue;
        }
      }
      if (!set.byName.emplace(e.name, set.all.size()).second) {
        problems.add("'" + e.name + "' is in two files");
        continue;
      }
      set.all.push_back({e.name, {f.get(), &e}});
    }
  for (const auto &[tensor, shard] : weightMap)
    if (!set.byName.count(tensor))
      problems.add("the index puts '" + tensor + "' in " + shard +
                   ", which does not hold it");
  if (!problems.empty())
    return Diagnostic{file, 0, 0, "inconsistent shards: " + problems.str()};
  return set;
}

const SafetensorsSet::Located *
SafetensorsSet::find(const std::string &name) const {
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : &all[it->second].second;
}

uint64_t SafetensorsSet::bytesRead() const {
  uint64_t n = 0;
  for (const auto &f : files)
    n += f->bytesRead();
  return n;
}

} // namespace zeroc
