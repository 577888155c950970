//===- HFCheckpoint.h - Hugging Face checkpoint names and layouts -*- C++
//-*-===//
//
// The one mapping between zeroc's parameters and a Hugging Face state dict,
// per architecture zeroc generates (the plan's `model.hf_config`
// `model_type`), used in both directions: `zerorun --init-from` reads HF
// safetensors through it, `zeroc consolidate --format hf` writes them.
// docs/checkpoint-format.md, "Hugging Face checkpoints", has the table.
//
// Also the reader of a safetensors checkpoint as Hugging Face stores one:
// a single file, or shards listed by `model.safetensors.index.json`.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CHECKPOINT_HFCHECKPOINT_H
#define ZEROC_CHECKPOINT_HFCHECKPOINT_H

#include "zeroc/Checkpoint/Safetensors.h"
#include "zeroc/Plan/Plan.h"

#include <memory>

namespace zeroc {

/// A part of one zeroc parameter and its place in one Hugging Face tensor.
/// The two directions are one correspondence: an HF tensor is one or more
/// parts (GPT-2's fused c_attn: q, k and v), and a parameter is one or more
/// parts (Mixtral's stacked experts: `experts.w1` [E, I, h] is the E HF
/// tensors `experts.e.w1.weight` [I, h]). The parameter's first dimension
/// is its output dimension (a Linear's [out, in]), or the stacking one.
struct HFPart {
  std::string param; ///< The zeroc parameter.
  /// The part is the parameter's elements [paramBegin, paramBegin + numel):
  /// all of it, or, stacked, the slice `paramBegin / numel` of its first
  /// dimension.
  int64_t paramBegin = 0;
  int64_t numel = 0;
  /// GPT-2's Conv1D: the HF tensor is [in, outs], the parameter [out, in]
  /// (always a whole parameter).
  bool transposed = false;
  /// The part's first output row (transposed: column) in the HF tensor's
  /// output dimension: q, k and v of GPT-2's fused c_attn at 0, d and 2d.
  int64_t offset = 0;
  /// Not transposed: the HF tensor's element where the part's elements
  /// start, contiguous from there.
  int64_t hfBegin = 0;
};

struct HFTensor {
  std::string name; ///< As today's save_pretrained writes it (prefixed).
  /// The name without the model prefix (`transformer.`, `model.`), which
  /// older files use; the reader accepts both.
  std::string bareName;
  std::vector<int64_t> shape;
  std::vector<HFPart> parts; ///< In output order.
};

/// The mapping of one plan's parameters: every parameter is in exactly one
/// part of one HF tensor.
struct HFMapping {
  std::string modelType;
  std::vector<HFTensor> tensors; ///< In the parameters' declaration order.

  /// The HF tensor a file's name denotes (with or without the prefix).
  const HFTensor *find(const std::string &fileName) const;
  /// Buffers that HF files of this architecture may carry and that are no
  /// parameters (GPT-2's `attn.bias` and `attn.masked_bias` causal masks,
  /// Llama's `rotary_emb.inv_freq`): skipped on reading.
  bool isBuffer(const std::string &fileName) const;
};

/// The model_types with a mapping: gpt2, llama, mistral, qwen2, gemma,
/// phi3, mixtral.
std::vector<std::string> hfMappedModelTypes();

/// The mapping for `hfConfig` (a plan's or manifest's `hf_config`) and
/// `tensors` (the parameters among them are mapped). Errors: no config (a
/// hand-written model), a model_type without a mapping, a parameter the
/// architecture does not name.
Expected<HFMapping> hfMapping(const nlohmann::json &hfConfig,
                              const std::vector<PlanTensor> &tensors);

/// A safetensors checkpoint: one file, or the shards an index names.
class SafetensorsSet {
public:
  /// `path` is a .safetensors file, a `*.safetensors.index.json`, or a
  /// directory holding `model.safetensors.index.json` or
  /// `model.safetensors`. Every file's header is read and checked; no data.
  /// The index's weight_map must name each tensor of each shard exactly
  /// once, in the shard it is in.
  static Expected<SafetensorsSet> open(const std::string &path);

  struct Located {
    const SafetensorsFile *file = nullptr;
    const SafetensorsEntry *entry = nullptr;
  };
  const Located *find(const std::string &name) const;
  /// Every tensor, shard by shard, in data order.
  const std::vector<std::pair<std::string, Located>> &tensors() const {
    return all;
  }
  /// The path named on the command line (the file, or the index).
  const std::string &path() const { return origin; }
  /// Bytes of tensor data read so far, over every file.
  uint64_t bytesRead() const;

private:
  std::string origin;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<std::pair<std::string, Located>> all;
  std::map<std::string, size_t> byName;
};

/// `zeroc consolidate --format hf`.
struct HFExportOptions {
  /// The dtype of the tensors written; none: each parameter's own dtype
  /// (the training dtype).
  std::optional<DType> dtype;
  /// A new shard starts before a tensor that would take the current one past
  /// this many bytes of data (a bigger tensor gets a shard of its own).
  uint64_t maxShardBytes = 5'000'000'000;
};

struct HFExportResult {
  std::string tag;
  int64_t step = 0;
  std::vector<std::string> files; ///< Written, config.json last.
  int64_t shards = 0;             ///< Safetensors files among them.
  int64_t tensors = 0;
};

/// Writes the checkpoint's weights under Hugging Face names into `outDir`
/// (created): `model.safetensors`, or `model-0000K-of-0000N.safetensors` and
/// `model.safetensors.index.json`, then the manifest's hf_config as
/// `config.json` with its `torch_dtype` (or `dtype`) set to the dtype
/// written. Values come from the f32 master copy where there is one.
Expected<HFExportResult> consolidateToHF(const std::string &dir,
                                         const std::string &tagOrLatest,
                                         const std::string &outDir,
                                         const HFExportOptions &options = {});

} // namespace zeroc

#endif // ZEROC_CHECKPOINT_HFCHECKPOINT_H
