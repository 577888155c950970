//===- Pipeline.h - The compile driver --------------------------*- C++ -*-===//
//
// What `zeroc MODEL.mlir --config DS.json --world-size N` and every candidate
// of `zeroc advise` run, in one place: the config read for the model and the
// model checked against it, every pass of Passes.td with the options the
// config implies, and the plan of the resulting schedule.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PIPELINE_PIPELINE_H
#define ZEROC_PIPELINE_PIPELINE_H

#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Config/DeepSpeedConfig.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"

#include "mlir/Pass/PassManager.h"

namespace zeroc {

/// What the launcher decides where a config says "auto": the Hugging Face
/// Trainer's --per_device_train_batch_size and --gradient_accumulation_steps,
/// zeroc's --micro-batch and --grad-accum.
struct LauncherArgs {
  std::optional<int64_t> microBatch;
  std::optional<int64_t> gradientAccumulation;
  /// --recompute / --recompute-every; none: the config decides.
  std::optional<RecomputePolicy> recompute;
  /// --ep-size / --moe-expert-parallel-size, and which of the two was given.
  std::optional<int64_t> expertParallelSize;
  std::string expertParallelFlag = "--ep-size";
};

/// The facts a DeepSpeed config needs from the model and the launcher:
/// hidden size for "auto" buckets, the launcher's batch arguments, and the
/// model file's batch and dtype as the defaults of an "auto" micro batch and
/// fp16/bf16 `enabled`.
ConfigContext configContextFor(const ModelStats &stats, int64_t worldSize,
                               const LauncherArgs &launcher = {});

/// The saved bytes of `stats` (per layer and in total) under `policy`: the
/// forward values the backward of the training step reads once
/// zero-expand-training-step has applied the policy to a copy of `model`
/// (savedBytesOfTrainingStep). Transient memory of a recomputation (one
/// layer's recomputed values while its backward runs) is the plan's, not
/// counted here. No change for RecomputeMode::None.
mlir::LogicalResult applyRecomputation(mlir::ModuleOp model,
                                       RecomputePolicy policy,
                                       ModelStats &stats);

/// Adds the ZeRO pipeline, from training-step expansion to the schedule
/// verifier, with the options `cfg` implies.
void buildZeroPipeline(mlir::OpPassManager &pm, const DeepSpeedConfig &cfg);

//===----------------------------------------------------------------------===//
// The compile driver: config -> model check -> pipeline -> plan
//===----------------------------------------------------------------------===//

/// Config: reads `config` for the model `stats` describes, at `worldSize`
/// ranks. The config decides the micro batch and the precision; the
/// pipeline specialises the model for them (model-specialize). Errors carry
/// the config's file and line.
Expected<DeepSpeedConfig> readConfigForModel(const JsonDocument &config,
                                             const ModelStats &stats,
                                             int64_t worldSize,
                                             const LauncherArgs &launcher = {});

/// The config and launcher arguments of the same run on `worldSize` ranks
/// instead of `healthy.worldSize` (`--what-if nodes=-K`), by DeepSpeed's
/// batch rule train_batch_size = micro x gradient_accumulation_steps x
/// world (runtime/config.py, _batch_assertion): the micro-batch is kept;
/// a train_batch_size the config fixes is kept by changing the
/// accumulation steps (refused, naming the values, when that is not a whole
/// number: DeepSpeed refuses such a config); else the accumulation steps
/// are kept and the global batch shrinks. `notes` says which.
struct WorldChange {
  JsonDocument config;
  LauncherArgs launcher;
  std::vector<std::string> notes;
};
Expected<WorldChange> changeWorld(const JsonDocument &config,
                                  const DeepSpeedConfig &healthy,
                                  int64_t worldSize,
                                  const LauncherArgs &launcher);

/// The model's dtype as the config trains it: "bf16", "f16" or "f32".
std::string trainingDType(const DeepSpeedConfig &cfg);

/// Pipeline: rewrites the model `module` into the final schedule in `pm`,
/// which the caller may have set up (timing, IR printing). Errors are
/// reported as MLIR diagnostics.
mlir::LogicalResult runZeroPipeline(mlir::PassManager &pm,
                                    mlir::ModuleOp module,
                                    const DeepSpeedConfig &cfg);

/// Plan: the plan of the final schedule `module`, compiled from the model
/// `stats` describes (its name, parameters and sequence length; the micro
/// batch and dtype are the config's) with `cfg`; `generator` names the
/// compiler.
mlir::FailureOr<Plan> planOfSchedule(mlir::ModuleOp module,
                                     const ModelStats &stats,
                                     const DeepSpeedConfig &cfg,
                                     const std::string &generator = "");

/// Pipeline and plan, for a caller that wants only the plan: rewrites
/// `module` in place.
mlir::FailureOr<Plan> compilePlan(mlir::ModuleOp module,
                                  const ModelStats &stats,
                                  const DeepSpeedConfig &cfg,
                                  const std::string &generator = "");

} // namespace zeroc

#endif // ZEROC_PIPELINE_PIPELINE_H
