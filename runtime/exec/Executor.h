//===- Executor.h - Runs a plan's training steps ----------------*- C++ -*-===//
//
// zerorun's executor, the same for every backend: it loads a plan
// (zeroc::loadPlan), allocates this rank's persistent tensors and the
// phases' transient arena on a Device (exec/Device.h: the CPU, or a GPU),
// initializes the parameters (runtime/init), and runs training steps:
// `micro_step` gradient_accumulation_steps times, fed by the data loader,
// then `optimizer_step`. Each op runs once its dependencies have completed,
// on its plan stream, as the device schedules streams
// (exec/StreamScheduler.h); collectives are issued in program order across
// streams, as on every rank. docs/zerorun.md.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_EXECUTOR_H
#define ZEROC_RUNTIME_EXEC_EXECUTOR_H

#include "comm/Communicator.h"
#include "data/DataLoader.h"
#include "exec/ArrivalSkew.h"
#include "exec/MemoryTracker.h"
#include "memory/MemoryCounter.h"
#include "zeroc/Checkpoint/Checkpoint.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Diagnostic.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zeroc::runtime {

class Device;
class Profiler;

struct ExecutorOptions {
  uint64_t seed = 0;
  /// The plan's streams (true), or every op on one stream in program order
  /// (for debugging and comparisons).
  bool streamThreads = true;
  /// At world size 1 on a device with a thread per stream (the CPU), the
  /// streams of nothing but collectives (local copies) run on the compute
  /// stream's thread (PreparedPhase::prepare). False: a thread each, as at
  /// more ranks (for tests of the stream workers).
  bool joinLocalCollectiveStreams = true;
  /// Where `nvme` tensors' files go; empty: the config's `nvme_path`s.
  std::string nvmePath;
  /// Where data lives and kernels run (exec/Device.h); it must outlive the
  /// executor. Null: the CPU.
  Device *device = nullptr;
  /// Records every op's start and end (exec/Profiler.h); it must outlive
  /// the executor. Null: nothing recorded.
  Profiler *profiler = nullptr;
  /// Whether create() writes the parameters' and master copies' random
  /// init. False where the caller overwrites every one of them before the
  /// first step (zerorun --resume, --init-from): they then hold zeros.
  bool randomInit = true;
  /// Measure each step's arrival skew (exec/ArrivalSkew.h) on more than one
  /// rank, on a device whose collectives the host waits for (the CPU), by
  /// this method: Arrival where every rank shares one host's clock.
  bool measureArrivalSkew = true;
  SkewMethod skewMethod = SkewMethod::Arrival;
};

/// Where Executor::create spent its time (zerorun's start-up report,
/// bench/startup_bench.py).
struct StartupSeconds {
  double allocate = 0; ///< Persistent tensors, swap files and the arena.
  double init = 0;     ///< The random init (0 without randomInit).
};

struct NvmeStats {
  int64_t residentBytes = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
};

/// What one optimizer step did.
struct StepResult {
  int64_t step = 0;          ///< 1-based.
  double loss = 0;           ///< Mean over the global batch.
  double seconds = 0;        ///< Wall time of the step.
  double computeSeconds = 0; ///< The compute stream's ops.
  double waitSeconds = 0;    ///< The compute stream blocked on other streams
                             ///< (exposed communication) and in scalar
                             ///< all-reduces.
  int64_t tokens = 0;        ///< Global tokens of the step.
  bool skipped = false;      ///< fp16 overflow: the update was skipped.
  double lossScale = 1.0;
  /// Who waited for whom at the step's collectives; none on one rank or
  /// where not measured (ExecutorOptions::measureArrivalSkew).
  std::optional<StepSkew> skew;
};

class Executor {
public:
  /// Checks the world size against `comm`, allocates and initializes.
  static Expected<std::unique_ptr<Executor>>
  create(Plan plan, Communicator &comm, const ExecutorOptions &options);
  ~Executor();

  /// Runs one training step: micro-steps (inputs from `data`) then the
  /// optimizer step. `step` is 0-based (the data loader's step).
  Expected<StepResult> runStep(const DataLoader &data, int64_t step);
  /// Runs only the micro-steps of step `step` (forward and backward, no
  /// optimizer step): the `grad` tensors then hold the gradient of the
  /// step's loss as the plan's backward computes it, before reduction
  /// epilogues, unscaling and clipping. Returns this rank's mean loss over
  /// its micro-steps. A later runStep would add to those gradients: this is
  /// for inspecting them (exec/GradientDump.h), not for training.
  Expected<double> runMicroSteps(const DataLoader &data, int64_t step);

  const Plan &plan() const { return thePlan; }

  /// This rank's local part of every persistent tensor, in plan order
  /// (what saveCheckpoint, loadCheckpointInto and loadSafetensorsInto take).
  /// NVMe tensors are read into host memory for it and stay there (written
  /// back if changed) until the next step.
  std::vector<ConstBytes> tensorData();
  std::vector<MutableBytes> mutableTensorData();
  /// NVMe swap files: host bytes their tensors hold now, and the bytes
  /// moved to and from the files so far.
  NvmeStats nvmeStats() const;
  /// The directory holding this rank's NVMe swap files (empty: none).
  std::string nvmeDirectory() const;
  /// Samples of the global batch one optimizer step consumes.
  int64_t samplesPerStep() const;
  /// The state a resumed run needs after `stepsDone` optimizer steps: the
  /// loss-scale state, the data position, and in `extra` the exact
  /// counters (Adam steps, loss-scale iteration and last overflow).
  TrainingState trainingState(int64_t stepsDone) const;
  /// Restores what trainingState() recorded. Checks the data position
  /// against the step (same global batch); on error nothing changes.
  Expected<Done> restoreTrainingState(const TrainingState &state);
  /// The vocabulary size: the cross-entropy's classes (the logits' last
  /// dimension, less a padded vocabulary's padding).
  int64_t vocabSize() const { return vocab; }
  /// The tracker's device high-water mark (MemoryTracker.h): persistent
  /// device tensors, the arena as far as its buffers reached, and buffers
  /// the plan did not size.
  int64_t measuredPeakBytes() const { return memory.devicePeak(); }
  /// What the counting allocator saw (memory/MemoryCounter.h): every
  /// device allocation of this process, kernel scratch and communicator
  /// staging included, by use. Its tensorPeak is the measured peak zerorun
  /// compares with predictedPeakBytes().
  MemoryCounts allocatedMemory() const { return deviceMemory().counts(); }
  /// The plan's: persistent device bytes plus the larger phase arena.
  int64_t predictedPeakBytes() const;
  /// The plan's persistent device bytes (local_numel x dtype size).
  int64_t persistentDeviceBytes() const;
  int64_t arenaBytes() const { return arenaSize; }
  /// What create() spent allocating and initializing.
  const StartupSeconds &startupSeconds() const { return startup; }
  /// What the collectives moved so far: the world communicator's traffic
  /// and, with expert parallelism, its groups' communicators' (each counted
  /// over its own ranks, as the plan accounts them).
  CommTraffic commTraffic() const;

  struct Impl;

private:
  Executor(Plan plan, Communicator &comm);
  Plan thePlan;
  Communicator &comm;
  MemoryTracker memory;
  int64_t vocab = 0;
  int64_t arenaSize = 0;
  StartupSeconds startup;
  std::unique_ptr<Impl> impl;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_EXECUTOR_H
