//===- PersistentState.h - A rank's persistent tensors ----------*- C++ -*-===//
//
// What lives across phases and steps: this rank's part of every persistent
// tensor of the plan (parameters, gradients, optimizer states) in its
// placement (device, host or nvme), the padded flat buffers whose views are
// the parameters of a stage 1-2 flat group, their initialization, the NVMe
// residency of `nvme` tensors (a swap file each, read in only while an op or
// a checkpoint uses them) and the host copies of device memory the host
// cannot address (for checkpoints).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_PERSISTENTSTATE_H
#define ZEROC_RUNTIME_EXEC_PERSISTENTSTATE_H

#include "KernelTypes.h"
#include "exec/MemoryTracker.h"
#include "offload/NvmeFile.h"
#include "zeroc/Checkpoint/Checkpoint.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Memory.h"
#include "zeroc/Support/ShardLayout.h"

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace zeroc::runtime {

class Device;

namespace exec {

/// A persistent tensor: this rank's part. An `nvme` tensor lives in `file`;
/// `data` holds it only while resident (an op or checkpointing uses it).
struct Stored {
  const PlanTensor *info = nullptr;
  std::shared_ptr<char> data;
  std::unique_ptr<NvmeFile> file;
  bool dirty = false; ///< Resident and changed: to be written back.
  /// A host copy of device memory the host cannot address (a GPU's), for
  /// checkpoints; written back before the next step if `mirrorDirty`.
  std::shared_ptr<char> mirror;
  bool mirrorDirty = false;
  int64_t bytes() const { return localBytes(info->localNumel, info->dtype); }
  Tensor view() const {
    return Tensor{data.get(), info->dtype, {info->localNumel}};
  }
};

/// The ranks a tensor's shards or a flat group's partitions are spread
/// over and this rank's place among them (ExpertParallel.h): for expert
/// state the expert-data-parallel group, otherwise the world.
struct ShardGroup {
  int64_t rank = 0, size = 1;
};

struct NvmeCounters {
  int64_t residentBytes = 0, bytesRead = 0, bytesWritten = 0;
};

class PersistentState {
public:
  /// `nvmeOverride`: where `nvme` tensors' files go (empty: the config's
  /// nvme_path).
  PersistentState(const Plan &plan, MemoryTracker &memory, Device &device,
                  int64_t rank, int64_t worldSize, std::string nvmeOverride);
  /// Closes and removes the swap files and this rank's swap directories.
  ~PersistentState();

  /// Allocates every tensor (and creates the swap files), then initializes
  /// the parameters and master copies from `seed` (runtime/init).
  void allocate();
  void initialize(uint64_t seed);

  Stored &tensor(const std::string &name);
  bool has(const std::string &name) const { return byName.count(name) != 0; }
  /// The flat group `name`, or null.
  const PlanFlatGroup *group(const std::string &name) const;
  /// The flat group whose parameter `t` is (or whose gradient or state), or
  /// null.
  const PlanFlatGroup *groupOf(const PlanTensor &t) const {
    return group(t.of);
  }
  const FlatGroupLayout &layout(const PlanFlatGroup &g) const {
    return layouts.at(g.name);
  }
  /// The group `t` (a tensor of the plan) is sharded over.
  ShardGroup shardGroup(const PlanTensor &t) const;
  /// The group a flat group is partitioned over (its members').
  ShardGroup shardGroup(const PlanFlatGroup &g) const;
  /// This rank's partition of flat group `g`, in the group's elements.
  ElementRange partition(const PlanFlatGroup &g) const {
    return layout(g).partition(shardGroup(g).rank);
  }
  /// A flat group's parameter buffer as one 1-d tensor.
  Tensor flatView(const PlanFlatGroup &g);

  /// Reads an `nvme` tensor's file into a host buffer (no-op otherwise);
  /// without `read`, a zeroed buffer the op overwrites whole, written back
  /// only if the op marks it dirty.
  void swapIn(Stored &s, bool read = true);
  /// Writes it back if `writeBack` or it changed, then frees the buffer.
  void swapOut(Stored &s, bool writeBack);

  /// This rank's local part of every tensor, in plan order, for
  /// checkpoints: NVMe tensors are read in and stay resident, device
  /// memory the host cannot address is copied to a host mirror. `mutable_`
  /// marks both as changed, to be written back by prepareForStep.
  std::vector<MutableBytes> hostViews(bool changes);
  /// Before a step: mirrors written back to the device, NVMe tensors left
  /// resident by hostViews swapped out.
  void prepareForStep();

  NvmeCounters nvmeCounters() const;
  std::string nvmeDirectory() const {
    return nvmeDirs.empty() ? std::string() : nvmeDirs.front();
  }

private:
  std::string nvmeDirFor(const PlanTensor &t);
  /// For a tensor in device memory the host cannot address: a host copy of
  /// it, made now; null where the host addresses it directly.
  char *hostMirror(Stored &s);

  const Plan &plan;
  MemoryTracker &memory;
  Device &dev;
  int64_t rank, ws;
  std::string nvmeOverride;
  std::vector<std::string> nvmeDirs;
  std::map<std::string, Stored> tensors;
  /// The same tensors by name, hashed: the executor looks tensors up on
  /// every optimizer and collective op (an `adam_update` makes a dozen
  /// lookups), and the ordered map's string comparisons cost about as much
  /// as a small tensor's update (bench/RESULTS.md, run 27). `tensors`
  /// keeps plan-independent name order for whatever iterates.
  std::unordered_map<std::string, Stored *> byName;
  std::map<std::string, const PlanFlatGroup *> groups;
  std::map<std::string, FlatGroupLayout> layouts;
  /// Each flat group's padded parameter buffer; its members are views.
  std::map<std::string, std::shared_ptr<char>> flatParams;
};

} // namespace exec
} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_PERSISTENTSTATE_H
