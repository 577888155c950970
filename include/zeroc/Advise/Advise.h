//===- Advise.h - Which ZeRO setup suits this model on this cluster -*- C++
//-*-===//
//
// `zeroc advise`: searches the levers that decide whether a model fits a
// cluster and how fast it trains: ZeRO stage, offload, activation
// recomputation, micro-batch and gradient accumulation (the global batch
// kept where the base config fixes it), reduce and prefetch bucket sizes.
// It recommends the fastest setup that fits with a margin, and, where the
// base config does not fit, the fewest changes to it that do. Each setup is
// compiled at two micro-batches and the others are derived from those two
// plans (Estimate.h); what is recommended or shown as a way out is
// compiled. docs/advise.md describes the search.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_ADVISE_ADVISE_H
#define ZEROC_ADVISE_ADVISE_H

#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Config/Cluster.h"
#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"
#include "zeroc/Support/Recompute.h"

#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>
#include <vector>

namespace zeroc {

//===----------------------------------------------------------------------===//
// The lever space
//===----------------------------------------------------------------------===//

/// One point of the lever space: a setup to compile.
struct AdviseSetup {
  int stage = 0;
  std::string offloadOptimizer = "none"; ///< none, cpu
  std::string offloadParam = "none";     ///< none, cpu (stage 3)
  RecomputePolicy recompute;
  int64_t microBatch = 1;
  int64_t gradientAccumulation = 1;
  int64_t reduceBucketSize = 0;
  int64_t prefetchBucketSize = 0; ///< Stage 3 only; 0 otherwise.

  /// "stage 3, optimizer on cpu, full recompute, micro-batch 2 x 4
  /// accumulation steps, reduce bucket 500.00 M, prefetch 50.00 M".
  std::string label() const;
  /// The same setup but for the micro-batch and accumulation.
  bool sameButBatch(const AdviseSetup &o) const;
  bool operator==(const AdviseSetup &o) const {
    return sameButBatch(o) && microBatch == o.microBatch &&
           gradientAccumulation == o.gradientAccumulation;
  }
};

/// The setup the base config and the launcher's arguments describe, and the
/// global batch the search keeps.
struct AdviseBase {
  AdviseSetup setup;
  /// The base's stage3_prefetch_bucket_size, resolved, whatever its stage:
  /// what stage 3 candidates start from.
  int64_t prefetchBucketSize = 0;
  /// Whether the base fixes the global batch: train_batch_size is a number,
  /// or the micro-batch and the accumulation both are (in the config or on
  /// the command line). Then every setup keeps micro x accumulation x
  /// ranks; otherwise every setup keeps the base's accumulation.
  bool globalBatchFixed = false;
  std::string globalBatchReason; ///< Why it is or is not fixed.
  int64_t worldSize = 1;
  std::string trainingDType; ///< "bf16", "f16", "f32" (trainingDType).
  /// The keys the base leaves "auto" (the launcher's to fill), kept "auto"
  /// in the written config.
  bool microBatchAuto = false, accumulationAuto = false;
  int64_t globalBatch() const {
    return setup.microBatch * setup.gradientAccumulation * worldSize;
  }
};

/// What bounds the search.
struct AdviseBounds {
  int64_t maxMicroBatch = 16; ///< --max-micro-batch
  int64_t numLayers = 0;      ///< every-k recomputation needs k < layers.
};

/// The (micro-batch, accumulation) pairs the search tries: powers of two up
/// to bounds.maxMicroBatch and the base's own micro-batch; with the global
/// batch fixed, only those that divide the base's sequences per rank, each
/// with the accumulation that keeps the global batch.
std::vector<std::pair<int64_t, int64_t>>
batchLevels(const AdviseBase &base, const AdviseBounds &bounds);

/// The recomputation policies the search tries: none, selective, full, and
/// full every 2nd and 4th layer where the model has more layers than that.
std::vector<RecomputePolicy> recomputeLevels(const AdviseBounds &bounds);

/// The (offload_optimizer, offload_param) devices of a stage: none; the
/// optimizer on the CPU from stage 1; parameters too at stage 3.
std::vector<std::pair<std::string, std::string>> offloadLevels(int stage);

/// The whole lever space at the base's bucket sizes, in table order (stage,
/// offload, recomputation, micro-batch).
std::vector<AdviseSetup> leverSpace(const AdviseBase &base,
                                    const AdviseBounds &bounds);

enum class AdviseLever : uint8_t { Stage, Offload, Recompute, Batch, Buckets };

/// One lever a setup sets differently from another: "stage 3", "optimizer
/// on cpu", "full recompute", "micro-batch 2 x 4 accumulation steps",
/// "reduce bucket 50.00 M, prefetch 5.00 M".
struct AdviseChange {
  AdviseLever lever;
  std::string text;
};

/// The levers in which `setup` differs from `base`, in table order.
std::vector<AdviseChange> changedLevers(const AdviseSetup &setup,
                                        const AdviseSetup &base);

//===----------------------------------------------------------------------===//
// The margin
//===----------------------------------------------------------------------===//

/// --margin: a share of the GPU budget ("5%", "0.05") or a size ("2GiB",
/// "512 MiB"); a plan fits when its peak is at most the budget less this.
struct AdviseMargin {
  double fraction = 0.05; ///< Of the budget, when bytes is not set.
  std::optional<double> bytes;
  double bytesOf(double budget) const {
    return bytes ? *bytes : fraction * budget;
  }
  std::string describe() const; ///< "5%", "2.00 GiB".
};
/// Reads --margin's value; the error names the flag and what it takes.
Expected<AdviseMargin> parseAdviseMargin(const std::string &text);

//===----------------------------------------------------------------------===//
// Candidates and the search
//===----------------------------------------------------------------------===//

/// One setup evaluated.
struct AdviseCandidate : AdviseSetup {
  /// Compiled and simulated (exact), or derived from two compiled plans of
  /// the same setup at other micro-batches (Estimate.h).
  bool exact = false;
  std::string error; ///< Why it could not be planned, if it could not.
  bool fits = false; ///< Peak within the budget less the margin, host, NVMe.
  /// Why it does not fit beyond the GPU (host memory, NVMe), if so.
  std::string nodeRefusal;
  int64_t peakDeviceBytes = 0;
  int64_t hostBytes = 0;
  double stepSeconds = 0;
  double exposedCommSeconds = 0;
  /// The compute stream's wait for offload copies (Simulator.h).
  double exposedOffloadSeconds = 0;
  double commBytesPerStep = 0; ///< Per rank.
  double tflopsPerGpu = 0;
  double tokensPerSecond = 0; ///< Over all ranks.
  /// Sensitivity (docs/advise.md): the step time with one rank
  /// kSensitivityStraggler times slower, and with the inter-node bandwidth
  /// times kSensitivityInterNodeBandwidth (WhatIf.h's scenarios; the
  /// healthy step on one node). No straggler figure on one rank: no rank
  /// waits for another.
  std::optional<double> stragglerStepSeconds;
  double slowNetworkStepSeconds = 0;
  /// The longest of the healthy step and the two above.
  double worstStepSeconds() const;
  /// Tokens per second at worstStepSeconds(): what --robust ranks by.
  double robustTokensPerSecond() const;
  nlohmann::json deepSpeedConfig; ///< The resolved config, as DeepSpeed JSON.
  /// What DeepSpeed allocates for gradient buckets beyond the plan
  /// (PlanMemory.h): said where the config is written for DeepSpeed.
  DeepSpeedBucketBuffers deepSpeedBuckets;
  /// The config to launch with: the base config with only what advise
  /// decides changed (zero_optimization's stage, offload, bucket and
  /// prefetch sizes, overlap_comm; the micro-batch and accumulation unless
  /// the base leaves them "auto"; activation_checkpointing for full
  /// recomputation of every layer), every other block and every "auto"
  /// kept, and no key of another stage.
  nlohmann::json launchConfig;
};

/// A group of the lever space not compiled: it cannot fit because a setup
/// that needs less memory does not (docs/advise.md).
struct AdvisePruned {
  int stage = 0;
  std::string what;   ///< "stage 0", "stage 3, no offload, none recompute".
  std::string reason; ///< Why it cannot fit, or cannot be the fastest.
  /// Ruled out as too slow: the most tokens per second its compute and
  /// optimizer step alone allow (0: ruled out as not fitting).
  double tokensAtMost = 0;
};

/// A way out of a base config that does not fit: the fewest levers changed.
struct AdviseWayOut {
  size_t candidate = 0;              ///< Into AdviseResult::candidates.
  std::vector<AdviseChange> changes; ///< changedLevers against the base.
};

/// How to launch a setup: what a DeepSpeed config cannot say.
struct AdviseLaunch {
  std::vector<std::string> lines; ///< For people, one instruction each.
  nlohmann::json json;            ///< The same, for tools.
};

struct AdviseResult {
  std::string cluster;
  int64_t worldSize = 0;
  int64_t gpuMemoryBytes = 0; ///< The plan's budget per GPU (FitCheck.h).
  AdviseMargin margin;
  int64_t marginBytes = 0;
  int64_t fitBytes = 0; ///< gpuMemoryBytes - marginBytes: what fits.
  AdviseBase base;
  std::string baseName; ///< The base config's file; empty without one.
  int64_t seqLen = 0;
  int64_t numLayers = 0;
  std::vector<AdviseCandidate> candidates; ///< In table order.
  std::vector<AdvisePruned> pruned;
  std::optional<size_t> best;        ///< The fastest candidate that fits.
  std::optional<size_t> baseAt;      ///< The base's own candidate.
  std::vector<AdviseWayOut> waysOut; ///< When the base does not fit.
  std::vector<std::string> reasons;  ///< One line per stage.
  // What the search did.
  int64_t setupsInSpace = 0;
  int64_t compiled = 0;       ///< Compiles run, recompiles included.
  int64_t estimated = 0;      ///< Candidates left as estimates.
  int64_t prunedSetups = 0;   ///< Setups of the space never evaluated.
  int64_t bucketVariants = 0; ///< Bucket and prefetch variants compiled.
  double searchSeconds = 0;
  bool robust = false; ///< Ranked by the worst case (--robust).
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
  AdviseMargin margin;
  int64_t maxMicroBatch = 16;
  /// --robust: rank by the worst of the healthy step and the sensitivity
  /// scenarios instead of the healthy step.
  bool robust = false;
};

/// Tokens per second within this fraction of the fastest's count as a tie:
/// the cost model is not that precise (docs/cost-model.md).
inline constexpr double kAdviseTieFraction = 0.001;

/// The search varies the reduce and prefetch buckets of the fastest
/// candidate and of each other stage's fastest whose buckets could still
/// make it the fastest: buckets move what a step leaves exposed of its
/// communication and offload copies, not its compute, so no variant's step
/// is shorter than the candidate's less those waits. A bucket size can
/// decide which stage is faster (GPT-2, sequence 512, bf16, `zeroc advise
/// --cluster a100-100gbe --micro-batch 4 --grad-accum 1`: stage 2 at 65.7
/// ms with a 500 MB reduce bucket and 60.3 ms with 50 MB, stage 3's best
/// 60.3 ms; Llama-2-7B, sequence 4096, on 4 nodes of `a100-100gbe` at 24
/// GB/s: stage 3 at 2.59 s with DeepSpeed's 500 M reduce and 50 M prefetch
/// buckets and 2.14 s with 200 M each, stage 2's best 2.55 s).

/// The recommendation: the candidate with the most tokens per second that
/// was planned and fits; among those within kAdviseTieFraction of it, the
/// first in table order (lower stage, less offload, recomputation none,
/// full, selective, every 2nd, every 4th layer, smaller micro-batch, smaller
/// buckets: the simpler setup, less to go wrong). None when nothing fits.
/// `robust` (--robust) ranks by robustTokensPerSecond instead: the worst of
/// the healthy step and the sensitivity scenarios.
std::optional<size_t> recommend(const std::vector<AdviseCandidate> &candidates,
                                bool robust = false);

/// What the recommendation ranks a candidate by: its tokens per second,
/// healthy or (`robust`) at its worst step.
double rankingTokensPerSecond(const AdviseCandidate &c, bool robust);

/// Reads the base config at the request's world size: its setup and the
/// global batch the search keeps.
Expected<AdviseBase> readAdviseBase(const AdviseRequest &request);

/// Searches the lever space. Fails only on a base config that cannot be
/// read; a candidate that cannot be planned is reported in the table.
Expected<AdviseResult> advise(const AdviseRequest &request);

/// How to launch candidate `c`: its micro-batch and accumulation where the
/// base leaves them "auto", and its recomputation (the config's
/// activation_checkpointing block says only full recomputation of every
/// layer).
AdviseLaunch launchInstructions(const AdviseResult &result,
                                const AdviseCandidate &c);

/// The table: the recommendation, the ways out, the fastest setup of each
/// stage and the fastest others (every candidate with `all`).
std::string adviseText(const AdviseResult &result, bool all = false);

/// What `launch` changes in `base`, one line per key, as a unified diff's
/// body: "- key: old" and "+ key: new", dotted paths, in key order.
std::string configDiff(const nlohmann::json &base,
                       const nlohmann::json &launch);
/// Everything, every candidate included.
nlohmann::json adviseJson(const AdviseResult &result);

} // namespace zeroc

#endif // ZEROC_ADVISE_ADVISE_H
