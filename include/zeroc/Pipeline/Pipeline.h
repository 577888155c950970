//===- Pipeline.h - The ZeRO pipeline, configured from DeepSpeed --*- C++
//-*-===//
//
// What `zeroc MODEL.mlir --config DS.json --world-size N` runs: the model
// checked against the config, then every pass of Passes.td with the options
// the config implies.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_PIPELINE_PIPELINE_H
#define ZEROC_PIPELINE_PIPELINE_H

#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Config/DeepSpeedConfig.h"

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

} // namespace zeroc

#endif // ZEROC_PIPELINE_PIPELINE_H
