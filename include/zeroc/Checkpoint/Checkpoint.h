//===- Checkpoint.h - Per-rank checkpoints: save, finalize, load -*- C++
//-*-===//
//
// A checkpoint is a directory `<dir>/<tag>/` with one shard file per rank
// (every persistent tensor's local part, raw, in plan order) and a manifest
// (the tensor list and layouts, the training state, each file's size and
// CRC-32C); `<dir>/latest` names the newest complete one. Every file is
// written atomically (FileIO.h) and `latest` moves only once a checkpoint
// is complete, so a crash at any point leaves the previous one loadable.
//
// The protocol (docs/checkpoint-format.md):
//   1. every rank: saveCheckpoint(dir, tag, plan, rank, data, state);
//   2. the caller: a barrier (every rank's save returned successfully);
//   3. rank 0: finalizeCheckpoint(dir, tag, plan, state) writes the manifest
//      and then `latest`.
// Loading checks the manifest against the plan and the shard against its
// size and checksum before handing out a byte. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CHECKPOINT_CHECKPOINT_H
#define ZEROC_CHECKPOINT_CHECKPOINT_H

#include "zeroc/Checkpoint/FileIO.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/ShardLayout.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zeroc {

/// The manifest's format name and the version this build reads and writes.
inline constexpr const char *kCheckpointFormat = "zeroc-checkpoint";
inline constexpr int kCheckpointVersion = 2;
/// Pass as `tagOrLatest` to load what `<dir>/latest` names.
inline constexpr const char *kLatestTag = "latest";

/// What a resumed run needs besides the tensors. Identical on every rank.
struct TrainingState {
  int64_t step = 0;               ///< Optimizer steps completed.
  double lossScale = 1.0;         ///< fp16 dynamic loss scale (1 otherwise).
  int64_t lossScaleGoodSteps = 0; ///< Overflow-free steps since it changed.
  int64_t hysteresisLeft = 0;     ///< Overflows tolerated before it drops.
  int64_t skippedSteps = 0;       ///< Steps skipped on overflow so far.
  uint64_t dataPosition = 0;      ///< Samples the data loader has consumed.
  /// Anything else (RNG state, LR schedule), round-tripped verbatim.
  nlohmann::json extra = nlohmann::json::object();
};

/// A tensor of the manifest: the plan's description (name, role, of, dtype,
/// shape, numel, sharded, local_numel; placement and init are not
/// recorded: a resumed run may offload differently) and where its local
/// part lies in every rank's shard file.
struct CheckpointTensor {
  PlanTensor tensor;
  uint64_t offset = 0; ///< Byte offset in each shard file.
  uint64_t bytes = 0;  ///< local_numel x bytes per element.
};

/// One rank's shard file as the manifest records it.
struct ShardRecord {
  int64_t rank = 0;
  std::string file;    ///< "rank<R>.shard", relative to the tag directory.
  uint64_t bytes = 0;  ///< The file's size.
  uint32_t crc32c = 0; ///< CRC-32C of the file after its 64-byte header.
};

struct CheckpointManifest {
  std::string tag;
  std::string model; ///< The plan's model name (informational).
  /// The plan's Hugging Face config (null when it has none): what
  /// `zeroc consolidate --format hf` maps names by and writes as config.json.
  nlohmann::json hfConfig;
  int64_t worldSize = 1;
  /// The plan's expert_parallel_size: an `expert` tensor holds one
  /// expert-parallel rank's experts (zeroc/Support/ExpertParallel.h).
  int64_t expertParallelSize = 1;
  int64_t stage = 0;
  TrainingState state;
  std::vector<CheckpointTensor> tensors; ///< In plan order.
  std::vector<PlanFlatGroup> flatGroups; ///< Stages 1 and 2.
  std::vector<ShardRecord> shards;       ///< One per rank, in rank order.

  const CheckpointTensor *findTensor(const std::string &name) const;
  /// The tensors as the plan described them.
  std::vector<PlanTensor> planTensors() const;
};

/// A rank's bytes of a plan tensor: local_numel x bytes per element.
uint64_t localBytes(const PlanTensor &tensor);

/// Checks that there is one buffer per plan tensor, each localBytes()
/// long; `caller` begins the message.
Expected<Done> checkLocalBuffers(const Plan &plan,
                                 const std::vector<ConstBytes> &buffers,
                                 const std::string &caller);
Expected<Done> checkLocalBuffers(const Plan &plan,
                                 const std::vector<MutableBytes> &buffers,
                                 const std::string &caller);

/// The checkpoint directory `<dir>/<tag>` and the files in it.
std::string checkpointTagDir(const std::string &dir, const std::string &tag);
std::string shardFileName(int64_t rank); ///< "rank<R>.shard"

/// Every rank, step 1: writes `<dir>/<tag>/rank<R>.shard` atomically.
/// `tensorData[i]` is this rank's local part of `plan.tensors[i]`:
/// local_numel elements in its dtype, padding included. Refuses the tag
/// `<dir>/latest` names (overwriting it would leave no complete checkpoint
/// if this save failed). Returns what the manifest will record.
Expected<ShardRecord>
saveCheckpoint(const std::string &dir, const std::string &tag, const Plan &plan,
               int64_t rank, const std::vector<ConstBytes> &tensorData,
               const TrainingState &state, const WriteHooks &hooks = {});

/// Rank 0, step 3, after the barrier: checks every rank's shard file (its
/// header: rank, world size, step; its size), then writes manifest.json
/// and, last, `<dir>/latest`, both atomically.
Expected<CheckpointManifest> finalizeCheckpoint(const std::string &dir,
                                                const std::string &tag,
                                                const Plan &plan,
                                                const TrainingState &state,
                                                const WriteHooks &hooks = {});

/// `tagOrLatest`, or the tag `<dir>/latest` names when it is "latest".
Expected<std::string> resolveCheckpointTag(const std::string &dir,
                                           const std::string &tagOrLatest);

/// Reads and checks `<dir>/<tag>/manifest.json`: every field, and the
/// layouts (local_numel, file offsets, flat groups) against ShardLayout.h.
/// Errors point at the file, line and column.
Expected<CheckpointManifest> readCheckpointManifest(const std::string &dir,
                                                    const std::string &tag);

/// Whether a checkpoint fits a plan: world size, stage, the tensor list
/// (names, roles, owners, dtypes, shapes, sharding) and the flat groups.
/// The error names what differs.
Expected<Done> checkManifestMatchesPlan(const CheckpointManifest &manifest,
                                        const Plan &plan,
                                        const std::string &manifestPath);

struct LoadedShard {
  std::string tag;
  TrainingState state;
  /// This rank's local part of every plan tensor, in plan order.
  std::vector<std::vector<std::byte>> tensors;
};

/// Loads rank `rank`'s part of a checkpoint for `plan`, after checking the
/// manifest against the plan and the shard file's size and checksum.
Expected<LoadedShard> loadCheckpoint(const std::string &dir,
                                     const std::string &tagOrLatest,
                                     const Plan &plan, int64_t rank);

/// loadCheckpoint into the caller's buffers (one per plan tensor, each
/// local_numel elements). Everything is read and verified in scratch
/// memory first: on any error not one byte of `out` has changed.
Expected<TrainingState>
loadCheckpointInto(const std::string &dir, const std::string &tagOrLatest,
                   const Plan &plan, int64_t rank,
                   const std::vector<MutableBytes> &out);

/// Checks one rank's shard file against the manifest: header, size, and
/// the CRC-32C of its contents (read once, in pieces).
Expected<Done> verifyShardFile(const std::string &dir,
                               const CheckpointManifest &manifest,
                               int64_t rank);

/// Elements [range.begin, range.end) of `tensor`'s local part in rank
/// `rank`'s shard file, in the tensor's dtype.
Expected<std::vector<std::byte>>
readShardElements(const std::string &dir, const CheckpointManifest &manifest,
                  int64_t rank, const CheckpointTensor &tensor,
                  ElementRange range);

} // namespace zeroc

#endif // ZEROC_CHECKPOINT_CHECKPOINT_H
