//===- TrainingCheckpoint.h - Save and resume a training run ----*- C++ -*-===//
//
// The checkpoint protocol of a run over every rank (docs/checkpoint-format.md),
// on top of the per-rank shard files of zeroc/Checkpoint: saving an
// executor's tensors and training state, resuming from the latest
// checkpoint, and initializing from a whole-model safetensors file. Every
// function is collective over `comm`: all ranks call it and all succeed or
// all fail, each knowing whether its own part or another rank's failed.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_CHECKPOINT_TRAININGCHECKPOINT_H
#define ZEROC_RUNTIME_CHECKPOINT_TRAININGCHECKPOINT_H

#include "comm/Communicator.h"
#include "exec/Executor.h"
#include "zeroc/Support/Diagnostic.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zeroc::runtime {

/// The tag of the checkpoint saved after `stepsDone` steps: "step<N>".
std::string stepTag(int64_t stepsDone);

/// Saves checkpoint stepTag(stepsDone) of `executor` under `dir`: every rank
/// writes its shard, a barrier, an all-reduce of success, then rank 0
/// finalizes (manifest, then `latest`). On any failure every rank returns
/// an error and `dir/latest` is untouched.
Expected<Done> saveTrainingCheckpoint(Executor &executor, Communicator &comm,
                                      const std::string &dir,
                                      int64_t stepsDone);

/// Where resumeTraining continues.
struct Resumed {
  int64_t step = 0;       ///< Optimizer steps done.
  std::string checkpoint; ///< The directory of the checkpoint loaded.
};

/// Loads `dir/latest` into `executor`: this rank's tensors, then the loss
/// scale, the step counters and the data position. The loaders read and
/// verify everything in scratch memory before writing a byte.
Expected<Resumed> resumeTraining(Executor &executor, Communicator &comm,
                                 const std::string &dir);

/// Initializes the parameters and master copies of `executor` from a
/// whole-model safetensors checkpoint (`zeroc consolidate`'s, or a Hugging
/// Face one: loadSafetensorsShard); returns the names of the tensors
/// written, and in `naming` whose names the file has ("zeroc" or the
/// model_type).
Expected<std::vector<std::string>>
initFromSafetensors(Executor &executor, Communicator &comm,
                    const std::string &path, std::string *naming = nullptr);

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_CHECKPOINT_TRAININGCHECKPOINT_H
