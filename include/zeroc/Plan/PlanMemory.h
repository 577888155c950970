//===- PlanMemory.h - A plan's memory per rank, and whether it fits -*- C++
//-*-===//
//
// Reads off a plan what every rank holds: persistent state by role and
// placement, the transient peak the memory planner found and what is live
// there, host and NVMe bytes; and refuses a plan that does not fit a GPU with
// a message that says where the peak is and what would make it fit.
// MLIR-free: `zeroc inspect`, `zeroc advise` and the compiler's fit check
// share it.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PLAN_PLANMEMORY_H
#define ZEROC_PLAN_PLANMEMORY_H

#include "zeroc/Plan/Plan.h"

#include <optional>
#include <string>

namespace zeroc {

struct MemorySummary {
  // Persistent device bytes per rank, held across the whole step.
  int64_t params = 0; ///< This rank's parameters (shards or whole).
  int64_t grads = 0;
  /// Master copies, Adam moments, and the 1-bit optimizers' error feedback
  /// and extra state (oneBitStateBytes).
  int64_t optimizerStates = 0;
  /// params + grads + optimizerStates: the ZeRO paper's model states.
  int64_t modelStateBytes() const { return params + grads + optimizerStates; }

  int64_t hostPinnedBytes = 0;   ///< Offloaded state and swap buffers.
  int64_t hostPageableBytes = 0; ///< Offloaded state without pin_memory.
  int64_t nvmeBytes = 0;         ///< State kept in NVMe files.

  // The peak: persistent device state plus the largest transient arena (the
  // runtime allocates each phase's arena once, so that is what it holds).
  bool planned = false; ///< False when the plan has no memory plan.
  int64_t peakDeviceBytes = 0;
  std::string peakPhase;
  int64_t peakOp = 0;
  std::string peakOpKind;
  /// The peak op's module path, else the tensors it names (opSubject).
  std::string peakOpWhere;
  // Transient bytes live at the peak.
  int64_t activations = 0;
  int64_t gatherBuffers = 0; ///< Gathered (and fetched) parameters.
  int64_t reduceBuckets = 0; ///< Gradients waiting in reduction buckets.
  int64_t workspace = 0;
  /// The arena the runtime allocates beyond the live peak (holes).
  int64_t fragmentation = 0;
  int64_t buffers() const {
    return gatherBuffers + reduceBuckets + workspace + fragmentation;
  }
};

MemorySummary summarizeMemory(const Plan &plan);

/// `peak_device_bytes`, `memory_breakdown_bytes` (at the peak: params,
/// grads, optimizer_states, activations, buffers), `model_state_bytes`,
/// `host_bytes`, `nvme_bytes`, and `memory_peak` (phase, op, kind, where,
/// the transient categories).
nlohmann::json memoryJson(const MemorySummary &memory);

/// The report's memory tables.
std::string memoryText(const MemorySummary &memory);

/// Nothing if the plan's peak fits `gpuMemoryBytes`; otherwise the message
/// that refuses it: where the peak occurs, what is live there, and concrete
/// ways out (a higher stage, offload, smaller buckets, a smaller micro-batch,
/// activation checkpointing), each with the bytes it would save, and `zeroc
/// advise` for the combinations where none is enough alone.
std::optional<std::string> checkFit(const Plan &plan, int64_t gpuMemoryBytes,
                                    const std::string &gpuName);

/// The gradient bucket buffers DeepSpeed's ZeRO optimizer allocates on the
/// device and zerorun does not (a plan's reduce buckets hold only the
/// gradients being reduced): with `contiguous_gradients`, stages 1 and 2
/// allocate `reduce_bucket_size` elements in the model dtype at every
/// backward, a second such buffer with `overlap_comm`
/// (DeepSpeedZeroOptimizer.backward, `ipg_buffer`); stage 3 one for the
/// whole run (DeepSpeedZeroOptimizer_Stage3.__init__,
/// `__ipg_bucket_flat_buffer`). None at stage 0 or without
/// `contiguous_gradients`. Read from the plan's resolved config.
struct DeepSpeedBucketBuffers {
  int64_t buffers = 0;  ///< 0: none.
  int64_t elements = 0; ///< Each: reduce_bucket_size.
  bool wholeRun = false;
  DType dtype = DType::F32;
  /// All of them.
  int64_t bytes() const { return buffers * elements * bytesPerElement(dtype); }
};
DeepSpeedBucketBuffers deepSpeedBucketBuffers(const Plan &plan);

/// One line for a DeepSpeed config written from a plan (zeroc advise -o):
/// the buffers above, and whether the plan's peak plus them stays within
/// `fitBytes`. Empty where there are none.
std::string deepSpeedBucketNote(const DeepSpeedBucketBuffers &buffers,
                                int64_t peakDeviceBytes, int64_t fitBytes);

} // namespace zeroc

#endif // ZEROC_PLAN_PLANMEMORY_H
