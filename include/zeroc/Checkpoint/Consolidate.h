//===- Consolidate.h - Sharded checkpoint <-> whole safetensors -*- C++ -*-===//
//
// consolidateCheckpoint is DeepSpeed's zero_to_fp32: from the shard files
// and manifest alone (no plan), one safetensors file with every parameter
// whole, in f32, taken from the f32 master copy where there is one (16-bit
// parameters under mixed precision), else from the parameter itself.
// Stage-3 shards are reassembled and their padding dropped
// (ParamShardLayout); stage-1/2 flat partitions are cut back into
// parameters (FlatGroupLayout).
//
// loadSafetensorsShard is the inverse, for `zerorun --init-from`: for a plan
// and a rank, this rank's local part of every parameter and master copy
// from a whole-model safetensors file.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CHECKPOINT_CONSOLIDATE_H
#define ZEROC_CHECKPOINT_CONSOLIDATE_H

#include "zeroc/Checkpoint/Checkpoint.h"

namespace zeroc {

struct ConsolidateResult {
  std::string tag;                     ///< The checkpoint consolidated.
  int64_t step = 0;                    ///< Its training step.
  std::vector<std::string> parameters; ///< Written, in manifest order.
};

/// Verifies every shard file (size, header, CRC-32C), then writes
/// `outputPath` atomically: one tensor per parameter, under the parameter's
/// name, F32 (I32 parameters stay I32), with metadata {"format": "pt",
/// "zeroc_tag", "zeroc_step"}.
Expected<ConsolidateResult>
consolidateCheckpoint(const std::string &dir, const std::string &tagOrLatest,
                      const std::string &outputPath,
                      const WriteHooks &hooks = {});

/// This rank's local part of every plan tensor, in plan order
/// (local_numel elements, padding zero). Parameters and master copies are
/// filled; other tensors (gradients, Adam moments) are left empty.
struct InitialTensors {
  std::vector<std::vector<std::byte>> tensors;
  std::vector<std::string> initialized; ///< Names of the tensors filled.
  /// "zeroc" or the Hugging Face model_type whose names the file has.
  std::string naming;
  /// Bytes of tensor data this rank read from the file(s).
  uint64_t bytesRead = 0;
};

/// Reads `path` for rank `rank` of `plan`: a safetensors file, an
/// `*.index.json` of shards, or a directory with either
/// (SafetensorsSet::open). Its names are zeroc's, or Hugging Face's for the
/// plan's architecture (HFCheckpoint.h), whichever matches more of the
/// file's tensors. Every parameter must be in the file with its shape, in
/// F32, BF16 or F16 (converted to the parameter's dtype, rounding to
/// nearest even); a file tensor that is no parameter is an error too.
/// Errors name every missing, extra and mis-shaped tensor, with the file
/// and both shapes. The rank reads only the elements it keeps.
Expected<InitialTensors> loadSafetensorsShard(const std::string &path,
                                              const Plan &plan, int64_t rank);

/// loadSafetensorsShard into the caller's buffers (one per plan tensor,
/// local_numel elements each): only parameters and master copies are
/// written, and only once the whole file has been read and checked.
/// Returns the names of the tensors written.
/// `naming`, when given, receives InitialTensors::naming.
Expected<std::vector<std::string>>
loadSafetensorsInto(const std::string &path, const Plan &plan, int64_t rank,
                    const std::vector<MutableBytes> &out,
                    std::string *naming = nullptr);

} // namespace zeroc

#endif // ZEROC_CHECKPOINT_CONSOLIDATE_H
