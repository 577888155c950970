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

/// The facts a DeepSpeed config needs from the model: hidden size for
/// "auto" buckets, batch dimension, precision.
ConfigContext configContextFor(const ModelStats &stats, int64_t worldSize,
                               std::optional<int64_t> gradientAccumulation);

/// Checks that the model graph can be trained as the config says: its
/// micro-batch and dtype match the config's. Returns a message naming what
/// to change, or nothing.
std::optional<std::string> checkModelAgainstConfig(const ModelStats &stats,
                                                   const DeepSpeedConfig &cfg);

/// Adds the ZeRO pipeline, from training-step expansion to the schedule
/// verifier, with the options `cfg` implies.
void buildZeroPipeline(mlir::OpPassManager &pm, const DeepSpeedConfig &cfg);

//===----------------------------------------------------------------------===//
// The compile driver: config -> model check -> pipeline -> plan
//===----------------------------------------------------------------------===//

/// Config and model check: reads `config` for the model `stats` describes,
/// at `worldSize` ranks, and checks the model against it. The config's
/// errors carry its file and line; a model that does not match the config
/// fails with checkModelAgainstConfig's message, after `modelName` and ": "
/// when one is given.
Expected<DeepSpeedConfig>
readConfigForModel(const JsonDocument &config, const ModelStats &stats,
                   const std::string &modelName, int64_t worldSize,
                   std::optional<int64_t> gradientAccumulation);

/// Pipeline: rewrites the model `module` into the final schedule in `pm`,
/// which the caller may have set up (timing, IR printing). Errors are
/// reported as MLIR diagnostics.
mlir::LogicalResult runZeroPipeline(mlir::PassManager &pm,
                                    mlir::ModuleOp module,
                                    const DeepSpeedConfig &cfg);

/// Plan: the plan of the final schedule `module`, compiled from the model
/// `stats` describes with `cfg`; `generator` names the compiler.
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
