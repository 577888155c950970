//===- DeepSpeedConfig.h - DeepSpeed ZeRO config reader ---------*- C++ -*-===//
//
// Reads a DeepSpeed JSON config (as written for DeepSpeed or for the Hugging
// Face Trainer, "auto" values included) into plain structs with every value
// resolved, and writes such a config back as JSON that DeepSpeed accepts.
// Defaults follow DeepSpeed's code (v0.19.5); docs/ds-config.md says what is
// read, what is ignored and which errors are reported. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CONFIG_DEEPSPEEDCONFIG_H
#define ZEROC_CONFIG_DEEPSPEEDCONFIG_H

#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"
#include "zeroc/Support/Recompute.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroc {

enum class OffloadDevice { None, CPU, NVMe };

/// "none", "cpu", "nvme": DeepSpeed's spelling.
std::string_view offloadDeviceName(OffloadDevice device);

/// `zero_optimization.offload_param` or `.offload_optimizer`. Both blocks
/// share this struct; each has its own defaults and its own keys (see
/// forParameters / forOptimizer), and fields of the other kind keep their
/// defaults. Sizes count elements.
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvmePath;  ///< Empty when not given.
  bool pinMemory = true; ///< DeepSpeed's default since v0.19.5 (was false).
  int64_t bufferCount = 5;

  // offload_param only.
  int64_t bufferSize = 100000000; ///< Elements per NVMe swap buffer.
  int64_t maxInCpu = 1000000000;  ///< Elements kept in CPU memory with NVMe.

  // offload_optimizer only.
  double ratio = 1.0; ///< Share of optimizer states updated on the CPU.
  bool pipelineRead = false;
  bool pipelineWrite = false;
  bool fastInit = false;
  bool superOffload = false;
  double cpuadamCoresPerc = 0.8;

  bool enabled() const { return device != OffloadDevice::None; }

  /// DeepSpeedZeroOffloadParamConfig's defaults.
  static OffloadConfig forParameters();
  /// DeepSpeedZeroOffloadOptimizerConfig's defaults.
  static OffloadConfig forOptimizer();
};

/// `zero_optimization.leaf_module`: modules ZeRO-3 fetches as a whole.
struct LeafModuleConfig {
  std::vector<std::string> classes = {
      "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
      "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
      "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
  };
  std::vector<std::string> names;
  std::vector<std::string> nameSuffixes;
};

/// The whole `zero_optimization` block with DeepSpeed's code defaults. Sizes
/// and thresholds count elements, as in DeepSpeed. Member comments give the
/// JSON key where it is not the obvious one; keys DeepSpeed also accepts
/// without their `stage3_` prefix are read under both names.
struct ZeroConfig {
  int stage = 0;
  bool contiguousGradients = true;
  bool reduceScatter = true;
  int64_t reduceBucketSize = 500000000;
  bool useMultiRankBucketAllreduce = true;
  bool allgatherPartitions = true;
  int64_t allgatherBucketSize = 500000000;
  /// Resolved: DeepSpeed's default is true for stage 3 only.
  bool overlapComm = false;
  bool loadFromFp32Weights = true;
  bool elasticCheckpoint = false;
  OffloadConfig offloadParam = OffloadConfig::forParameters();
  OffloadConfig offloadOptimizer = OffloadConfig::forOptimizer();
  int64_t subGroupSize = 1000000000;
  int64_t prefetchBucketSize = 50000000;      ///< stage3_prefetch_bucket_size
  int64_t paramPersistenceThreshold = 100000; ///< stage3_param_...
  int64_t modelPersistenceThreshold =         ///< stage3_model_...
      std::numeric_limits<int64_t>::max();    ///< (Python's sys.maxsize)
  int64_t maxLiveParameters = 1000000000;     ///< stage3_max_live_parameters
  int64_t maxReuseDistance = 1000000000;      ///< stage3_max_reuse_distance
  bool gather16bitWeightsOnModelSave = false; ///< stage3_gather_16bit_...
  int64_t moduleGranularityThreshold = 0;     ///< stage3_module_...
  bool useAllReduceForFetchParams = false;    ///< stage3_use_all_reduce_...
  bool allgatherSequential = false;           ///< stage3_allgather_sequential
  bool ignoreUnusedParameters = true;
  bool legacyStage1 = false;
  bool roundRobinGradients = false;
  int64_t zeroHpzPartitionSize = 1;
  bool zeroQuantizedWeights = false;
  bool zeroQuantizedNontrainableWeights = false;
  bool zeroQuantizedGradients = false;
  int64_t micsShardSize = -1;
  bool micsHierarchicalParamsGather = false;
  bool memoryEfficientLinear = true;
  bool pipelineLoadingCheckpoint = false;
  bool overrideModuleApply = true;
  bool logTraceCacheWarnings = false;
  bool enableSanityChecks = false;
  bool saveMuonMomentumBufferInMemory = false;
  LeafModuleConfig leafModule;
  /// Carried through unchanged, not modelled by zeroc; null when absent.
  nlohmann::json zenflow;
  nlohmann::json zeroppLocoParam;

  /// DeepSpeed's defaults for `{"stage": stage}` alone.
  static ZeroConfig defaultsForStage(int stage);
};

enum class Precision { FP32, FP16, BF16 };

/// "fp32", "fp16", "bf16": DeepSpeed's spelling (communication_data_type).
std::string_view precisionName(Precision precision);

/// The `fp16` block other than `enabled` (which is `precision`): dynamic or
/// static loss scaling. Read even when fp16 is off, so that it round-trips.
struct LossScaleConfig {
  double lossScale = 0; ///< 0 selects dynamic loss scaling.
  int64_t initialScalePower = 16;
  int64_t lossScaleWindow = 1000;
  int64_t hysteresis = 2;
  bool consecutiveHysteresis = false;
  int64_t minLossScale = 1;
  bool autoCast = false;
  bool fp16MasterWeightsAndGrads = false;

  bool dynamic() const { return lossScale == 0; }
  /// The first loss scale: 2^initial_scale_power, or the static scale.
  double initialScale() const;
};

/// The `bf16` block (old name `bfloat16`) other than `enabled`.
struct Bf16Config {
  bool immediateGradUpdate = false;
  bool checkGradOverflow = true;
  bool bf16MasterWeightsAndGrads = false;
  bool bf16OptimizerStates = false;
};

/// `optimizer`: DeepSpeed's Adam, AdamW and Lamb (FusedLamb), and its 1-bit
/// family, which DeepSpeed runs only without ZeRO (docs/ds-config.md).
struct OptimizerConfig {
  /// "Adam", "AdamW", "Lamb", "OneBitAdam", "ZeroOneAdam" or "OneBitLamb".
  std::string type = "AdamW";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
  /// Decoupled weight decay. DeepSpeed uses it for "Adam" too unless
  /// `adam_w_mode` is false, and always for "AdamW".
  bool adamWMode = true;
  /// `torch_adam`: torch.optim.Adam(W) instead of DeepSpeed's fused/CPU Adam.
  bool torchAdam = false;
  /// `bias_correction`: Adam, AdamW and Lamb divide the moments by
  /// 1 - beta^t (FusedAdam, DeepSpeedCPUAdam and FusedLamb's default);
  /// false uses the raw moments. Always false for the 1-bit family, whose
  /// steps never correct whatever the key says.
  bool biasCorrection = true;
  /// Lamb and 1-bit Lamb: the trust ratio ||w|| / ||update|| is clamped to
  /// [minCoeff, maxCoeff] (FusedLamb's defaults).
  double maxCoeff = 10.0;
  double minCoeff = 0.01;
  /// The 1-bit family: steps of uncompressed communication before the
  /// compressed phase (`freeze_step`; 0/1 Adam's `var_freeze_step`).
  int64_t freezeStep = 100000;

  /// Lamb or 1-bit Lamb: the update is scaled by the trust ratio.
  bool lamb() const { return type == "Lamb" || type == "OneBitLamb"; }
  /// 1-bit Adam, 0/1 Adam or 1-bit Lamb: compressed gradient communication.
  bool oneBit() const { return oneBitType(type); }
  /// oneBit() of a `type` as zeroc spells it (a plan's config, for one).
  static bool oneBitType(std::string_view type) {
    return type == "OneBitAdam" || type == "ZeroOneAdam" ||
           type == "OneBitLamb";
  }
};

/// `activation_checkpointing`.
struct ActivationCheckpointingConfig {
  /// The block is in the config. zeroc then checkpoints every transformer
  /// layer (docs/ds-config.md); the keys below do not change the schedule.
  bool present = false;
  bool partitionActivations = false;
  std::optional<int64_t> numberCheckpoints;
  bool contiguousMemoryOptimization = false;
  bool synchronizeCheckpointBoundary = false;
  bool profile = false;
  bool cpuCheckpointing = false;
};

/// `aio`: asynchronous I/O for NVMe offload.
struct AioConfig {
  int64_t blockSize = 1048576; ///< Bytes.
  int64_t queueDepth = 8;
  int64_t intraOpParallelism = 1;
  bool singleSubmit = false;
  bool overlapEvents = true;
  bool useGds = false;
};

/// Expert parallelism (DeepSpeed-MoE): each mixture-of-experts layer's
/// experts are split over `size` ranks (the expert-parallel group), each
/// holding num_experts / size of them; expert parameters are then
/// data-parallel over world / size ranks (the expert-data-parallel group),
/// the other parameters over the whole world, as DeepSpeed's ZeRO treats its
/// MoE parameter groups. docs/ds-config.md, "Expert parallelism".
struct ExpertParallelConfig {
  int64_t size = 1;
  /// Where `size` came from, quoted for messages: "'expert_parallel.
  /// autoep_size'", "--ep-size", "--moe-expert-parallel-size"; empty for
  /// the default.
  std::string source;
};

struct DeepSpeedConfig {
  /// The batch triple, resolved: trainBatchSize = microBatchPerGpu x
  /// gradientAccumulationSteps x worldSize.
  int64_t trainBatchSize = 0;
  int64_t microBatchPerGpu = 0;
  int64_t gradientAccumulationSteps = 0;
  int64_t worldSize = 0; ///< ConfigContext::worldSize.

  ZeroConfig zero;
  Precision precision = Precision::FP32;
  LossScaleConfig lossScale;
  Bf16Config bf16;
  /// `communication_data_type`; unset lets DeepSpeed pick from precision.
  std::optional<Precision> communicationDataType;
  OptimizerConfig optimizer;
  /// 0 disables clipping. DeepSpeed's default since v0.19.3 (was 0).
  double gradientClipping = 1.0;
  ActivationCheckpointingConfig activationCheckpointing;
  /// What the step recomputes: zeroc's --recompute when given, else full
  /// recomputation of every layer when `activation_checkpointing` is
  /// present, else none (docs/ds-config.md).
  RecomputePolicy recompute;
  AioConfig aio;
  ExpertParallelConfig expertParallel;

  /// Dotted JSON paths ("scheduler", "aio.thread_count") that were accepted
  /// but have no effect on the schedule, in document order.
  std::vector<std::string> ignoredKeys;
  /// One line per "auto" resolution, deprecated-key rewrite, derived batch
  /// value and unknown top-level key.
  std::vector<std::string> notes;
};

/// Same settings. `ignoredKeys` and `notes`, which describe how a file was
/// read rather than what it says, are not compared.
bool operator==(const DeepSpeedConfig &a, const DeepSpeedConfig &b);
inline bool operator!=(const DeepSpeedConfig &a, const DeepSpeedConfig &b) {
  return !(a == b);
}
bool operator==(const ZeroConfig &a, const ZeroConfig &b);
bool operator==(const OffloadConfig &a, const OffloadConfig &b);

/// Facts the config cannot know by itself: from the model graph and the
/// command line.
struct ConfigContext {
  int64_t worldSize = 0;  ///< From --world-size; must be at least 1.
  int64_t hiddenSize = 0; ///< The model's hidden size, for "auto" buckets.
  /// From the command line (--micro-batch, the launcher's per-device batch),
  /// for an "auto" or absent micro batch.
  std::optional<int64_t> microBatch;
  /// The model file's batch dimension: an "auto" micro batch that nothing
  /// else decides takes it (with a note).
  std::optional<int64_t> modelBatch;
  /// From the command line, for an "auto" or absent accumulation count.
  std::optional<int64_t> gradientAccumulation;
  /// The model's dtype, for "auto" in fp16.enabled / bf16.enabled.
  std::optional<Precision> modelPrecision;
  /// From the command line (--recompute); decides over the config's
  /// `activation_checkpointing` block.
  std::optional<RecomputePolicy> recompute;
  /// From the command line (zeroc --ep-size, or Megatron-DeepSpeed's
  /// spelling --moe-expert-parallel-size): the expert-parallel size, and the
  /// flag as given, for messages. Decides over `expert_parallel.autoep_size`
  /// only when the two agree; a disagreement is an error.
  std::optional<int64_t> expertParallelSize;
  std::string expertParallelFlag = "--ep-size";
  /// Experts per mixture-of-experts layer (0 for a dense model), which the
  /// expert-parallel size must divide.
  int64_t numExperts = 0;
};

/// Reads and resolves a parsed config. Every error names the file, the
/// line:col of the offending key and its dotted JSON path.
Expected<DeepSpeedConfig> readDeepSpeedConfig(const JsonDocument &doc,
                                              const ConfigContext &ctx);
/// Loads, parses (syntax errors report file:line:col) and reads a config.
Expected<DeepSpeedConfig> loadDeepSpeedConfig(const std::string &path,
                                              const ConfigContext &ctx);

/// The resolved config as DeepSpeed JSON that DeepSpeed itself accepts, with
/// no "auto" left. The keys that define the schedule are always written, so
/// that defaults that changed between DeepSpeed versions cannot change its
/// meaning; other keys only when they differ from the default, so that an
/// older DeepSpeed that lacks them still accepts the file. Reading it back
/// with the same world size gives an equal config. Used in plan files and by
/// `zeroc advise -o`.
nlohmann::json toDeepSpeedJson(const DeepSpeedConfig &cfg);

} // namespace zeroc

#endif // ZEROC_CONFIG_DEEPSPEEDCONFIG_H
