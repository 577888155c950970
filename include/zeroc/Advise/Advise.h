//===- Advise.h - Which ZeRO setup suits this model on this cluster -*- C++
//-*-===//
//
// `zeroc advise`: compiles a model for every ZeRO stage, offload choice and a
// few bucket and prefetch sizes, keeps the plans that fit the cluster's GPU
// memory, and recommends the fastest. The decision frame of ZeRO practice:
// the stage is a capacity decision, then the network sets the price.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_ADVISE_ADVISE_H
#define ZEROC_ADVISE_ADVISE_H

#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Config/Cluster.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"

#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>
#include <vector>

namespace zeroc {

/// One setup tried, and what it would cost.
struct AdviseCandidate {
  int stage = 0;
  std::string offloadOptimizer = "none"; ///< none, cpu
  std::string offloadParam = "none";     ///< none, cpu
  int64_t reduceBucketSize = 0;
  int64_t prefetchBucketSize = 0; ///< Stage 3 only; 0 otherwise.

  std::string error; ///< Why it could not be planned, if it could not.
  bool fits = false;
  int64_t peakDeviceBytes = 0;
  int64_t hostBytes = 0;
  double stepSeconds = 0;
  double exposedCommSeconds = 0;
  double commBytesPerStep = 0; ///< Per rank.
  double tflopsPerGpu = 0;
  nlohmann::json deepSpeedConfig; ///< The resolved config, as DeepSpeed JSON.
  /// The config to launch with: the base config with only what advise
  /// decides changed (zero_optimization's stage, offload, bucket and
  /// prefetch sizes, overlap_comm), every other block and every "auto"
  /// kept, and no key of another stage (stage3_* and offload_param below
  /// stage 3).
  nlohmann::json launchConfig;

  std::string label() const;
};

struct AdviseResult {
  std::string cluster;
  int64_t worldSize = 0;
  int64_t gpuMemoryBytes = 0; ///< The plan's budget per GPU (FitCheck.h).
  std::vector<AdviseCandidate> candidates;
  std::optional<size_t> best; ///< The fastest candidate that fits.
  std::vector<std::string> reasons;
};

struct AdviseRequest {
  mlir::ModuleOp model; ///< A model-dialect module; left unchanged.
  const ModelStats *stats = nullptr;
  const JsonDocument *baseConfig =
      nullptr; ///< Settings kept in every candidate.
  const Cluster *cluster = nullptr;
  int64_t worldSize = 0; ///< 0: every GPU of the cluster.
  std::optional<int64_t> gradientAccumulation;
  std::optional<int64_t> microBatch; ///< --micro-batch, for "auto".
};

/// Step times within this fraction of the fastest's count as a tie: the
/// cost model is not that precise (docs/cost-model.md).
inline constexpr double kAdviseTieFraction = 0.001;

/// The recommendation: the fastest candidate that was planned and fits;
/// among those within kAdviseTieFraction of the fastest, the first in table
/// order (lower stage, then no offload before offload, then smaller buckets:
/// the simpler setup, less to go wrong). None when nothing fits.
std::optional<size_t> recommend(const std::vector<AdviseCandidate> &candidates);

/// Plans every candidate. Fails only on a base config that cannot be read;
/// a candidate that cannot be planned is reported in the table.
Expected<AdviseResult> advise(const AdviseRequest &request);

std::string adviseText(const AdviseResult &result);

/// What `launch` changes in `base`, one line per key, as a unified diff's
/// body: "- key: old" and "+ key: new", dotted paths, in key order.
std::string configDiff(const nlohmann::json &base,
                       const nlohmann::json &launch);
nlohmann::json adviseJson(const AdviseResult &result);

} // namespace zeroc

#endif // ZEROC_ADVISE_ADVISE_H
