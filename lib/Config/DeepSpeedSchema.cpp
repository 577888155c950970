//===- DeepSpeedSchema.cpp - The keys of each DeepSpeed config block ------===//
//
// Keys, defaults and bounds as DeepSpeed v0.19.5's code has them; where its
// docs disagree, the code wins.
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedSchema.h"

#include <cmath>
#include <limits>

namespace zeroc {

namespace detail {

const BlockSchema<ZeroConfig> &zeroSchema() {
  using Z = ZeroConfig;
  static const BlockSchema<Z> schema = {
      {
          {"contiguous_gradients", nullptr, &Z::contiguousGradients, true},
          {"reduce_scatter", nullptr, &Z::reduceScatter, true},
          {"use_multi_rank_bucket_allreduce", nullptr,
           &Z::useMultiRankBucketAllreduce},
          {"allgather_partitions", nullptr, &Z::allgatherPartitions, true},
          {"load_from_fp32_weights", nullptr, &Z::loadFromFp32Weights},
          {"elastic_checkpoint", nullptr, &Z::elasticCheckpoint},
          {"stage3_gather_16bit_weights_on_model_save",
           "gather_16bit_weights_on_model_save",
           &Z::gather16bitWeightsOnModelSave},
          {"stage3_use_all_reduce_for_fetch_params",
           "use_all_reduce_for_fetch_params", &Z::useAllReduceForFetchParams},
          {"stage3_allgather_sequential", "allgather_sequential",
           &Z::allgatherSequential},
          {"ignore_unused_parameters", nullptr, &Z::ignoreUnusedParameters},
          {"legacy_stage1", nullptr, &Z::legacyStage1},
          {"round_robin_gradients", nullptr, &Z::roundRobinGradients},
          {"zero_quantized_weights", nullptr, &Z::zeroQuantizedWeights},
          {"zero_quantized_nontrainable_weights", nullptr,
           &Z::zeroQuantizedNontrainableWeights},
          {"zero_quantized_gradients", nullptr, &Z::zeroQuantizedGradients},
          {"mics_hierarchical_params_gather", nullptr,
           &Z::micsHierarchicalParamsGather},
          {"memory_efficient_linear", nullptr, &Z::memoryEfficientLinear},
          {"pipeline_loading_checkpoint", nullptr,
           &Z::pipelineLoadingCheckpoint},
          {"override_module_apply", nullptr, &Z::overrideModuleApply},
          {"log_trace_cache_warnings", nullptr, &Z::logTraceCacheWarnings},
          {"enable_sanity_checks", nullptr, &Z::enableSanityChecks},
          {"save_muon_momentum_buffer_in_memory", nullptr,
           &Z::saveMuonMomentumBufferInMemory},
      },
      {
          {"reduce_bucket_size", nullptr, &Z::reduceBucketSize, 0, true},
          {"allgather_bucket_size", nullptr, &Z::allgatherBucketSize, 0, true},
          {"sub_group_size", nullptr, &Z::subGroupSize, 0, true},
          {"stage3_prefetch_bucket_size", "prefetch_bucket_size",
           &Z::prefetchBucketSize, 0, true},
          {"stage3_param_persistence_threshold", "param_persistence_threshold",
           &Z::paramPersistenceThreshold, 0, true},
          {"stage3_model_persistence_threshold", "model_persistence_threshold",
           &Z::modelPersistenceThreshold, 0},
          {"stage3_max_live_parameters", "max_live_parameters",
           &Z::maxLiveParameters, 0, true},
          {"stage3_max_reuse_distance", "max_reuse_distance",
           &Z::maxReuseDistance, 0, true},
          {"stage3_module_granularity_threshold",
           "module_granularity_threshold", &Z::moduleGranularityThreshold,
           kNoMinimum},
          {"zero_hpz_partition_size", nullptr, &Z::zeroHpzPartitionSize, 0},
          {"mics_shard_size", nullptr, &Z::micsShardSize, kNoMinimum},
      },
      {},
      {"stage", "overlap_comm", "offload_param", "offload_optimizer", "zenflow",
       "zeropp_loco_param", "leaf_module",
       // Deprecated; rewritten to their replacements.
       "cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
       "stage3_gather_fp16_weights_on_model_save"},
  };
  return schema;
}

const BlockSchema<OffloadConfig> &offloadParamSchema() {
  using O = OffloadConfig;
  static const BlockSchema<O> schema = {
      {{"pin_memory", nullptr, &O::pinMemory, true}},
      {
          {"buffer_count", nullptr, &O::bufferCount, 0},
          {"buffer_size", nullptr, &O::bufferSize, 0},
          {"max_in_cpu", nullptr, &O::maxInCpu, 0},
      },
      {},
      {"device", "nvme_path"},
  };
  return schema;
}

const BlockSchema<OffloadConfig> &offloadOptimizerSchema() {
  using O = OffloadConfig;
  static const BlockSchema<O> schema = {
      {
          {"pin_memory", nullptr, &O::pinMemory, true},
          {"pipeline_read", nullptr, &O::pipelineRead},
          {"pipeline_write", nullptr, &O::pipelineWrite},
          {"fast_init", nullptr, &O::fastInit},
          {"super_offload", nullptr, &O::superOffload},
      },
      {{"buffer_count", nullptr, &O::bufferCount, 0}},
      {
          {"ratio", nullptr, &O::ratio, 0.0, 1.0},
          {"cpuadam_cores_perc", nullptr, &O::cpuadamCoresPerc, 0.0, 1.0},
      },
      {"device", "nvme_path"},
  };
  return schema;
}

const BlockSchema<LossScaleConfig> &fp16Schema() {
  using L = LossScaleConfig;
  static const BlockSchema<L> schema = {
      {
          {"auto_cast", nullptr, &L::autoCast},
          {"consecutive_hysteresis", nullptr, &L::consecutiveHysteresis},
          {"fp16_master_weights_and_grads", nullptr,
           &L::fp16MasterWeightsAndGrads},
      },
      {
          {"initial_scale_power", nullptr, &L::initialScalePower, kNoMinimum,
           true},
          {"loss_scale_window", nullptr, &L::lossScaleWindow, kNoMinimum, true},
          {"hysteresis", nullptr, &L::hysteresis, kNoMinimum, true},
          {"min_loss_scale", nullptr, &L::minLossScale, kNoMinimum, true},
      },
      {{"loss_scale", nullptr, &L::lossScale, 0.0,
        std::numeric_limits<double>::infinity(), true}},
      {"enabled"},
  };
  return schema;
}

const BlockSchema<Bf16Config> &bf16Schema() {
  using B = Bf16Config;
  static const BlockSchema<B> schema = {
      {
          {"immediate_grad_update", nullptr, &B::immediateGradUpdate},
          {"check_grad_overflow", nullptr, &B::checkGradOverflow},
          {"bf16_master_weights_and_grads", nullptr,
           &B::bf16MasterWeightsAndGrads},
          {"bf16_optimizer_states", nullptr, &B::bf16OptimizerStates},
      },
      {},
      {},
      {"enabled"},
  };
  return schema;
}

const BlockSchema<ActivationCheckpointingConfig> &
activationCheckpointingSchema() {
  using A = ActivationCheckpointingConfig;
  static const BlockSchema<A> schema = {
      {
          {"partition_activations", nullptr, &A::partitionActivations},
          {"contiguous_memory_optimization", nullptr,
           &A::contiguousMemoryOptimization},
          {"synchronize_checkpoint_boundary", nullptr,
           &A::synchronizeCheckpointBoundary},
          {"profile", nullptr, &A::profile},
          {"cpu_checkpointing", nullptr, &A::cpuCheckpointing},
      },
      {},
      {},
      {"number_checkpoints"},
  };
  return schema;
}

const BlockSchema<AioConfig> &aioSchema() {
  using A = AioConfig;
  // DeepSpeed does not check these; zeroc wants positive counts because an
  // I/O queue of depth 0 cannot move anything.
  static const BlockSchema<A> schema = {
      {
          {"single_submit", nullptr, &A::singleSubmit, true},
          {"overlap_events", nullptr, &A::overlapEvents, true},
          {"use_gds", nullptr, &A::useGds, true},
      },
      {
          {"block_size", nullptr, &A::blockSize, 1, true},
          {"queue_depth", nullptr, &A::queueDepth, 1, true},
          {"intra_op_parallelism", nullptr, &A::intraOpParallelism, 1, true},
      },
      {},
      {},
  };
  return schema;
}

const std::vector<std::string> &zenflowKeys() {
  static const std::vector<std::string> keys = {
      "topk_ratio",      "select_strategy",     "select_interval",
      "update_interval", "overlap_step",        "offload",
      "auto_ratio",      "full_warm_up_rounds", "pt_reserved_cores_perc",
      "steps_per_epoch"};
  return keys;
}

const std::vector<std::string> &leafModuleKeys() {
  static const std::vector<std::string> keys = {"classes", "names",
                                                "name_suffixes"};
  return keys;
}

const std::vector<std::string> &modelledTopLevelKeys() {
  static const std::vector<std::string> keys = {
      "train_batch_size",
      "train_micro_batch_size_per_gpu",
      "gradient_accumulation_steps",
      "zero_optimization",
      "allgather_size", // only with the old `"zero_optimization": true`
      "fp16",
      "bf16",
      "bfloat16",
      "amp",
      "communication_data_type",
      "optimizer",
      "zero_allow_untested_optimizer", // read with the optimizer
      "gradient_clipping",
      "activation_checkpointing",
      "aio",
      "expert_parallel",
  };
  return keys;
}

const std::vector<std::string> &ignoredTopLevelKeys() {
  // Everything else DeepSpeedConfig._initialize_params and deepspeed.initialize
  // read (runtime/config.py, constants.py and the per-feature configs).
  static const std::vector<std::string> keys = {
      "scheduler",
      "steps_per_print",
      "wall_clock_breakdown",
      "memory_breakdown",
      "dump_state",
      "tensorboard",
      "wandb",
      "csv_monitor",
      "comet",
      "comms_logger",
      "flops_profiler",
      "autotuning",
      "managed_gradient_accumulation",
      "disable_allgather",
      "seq_parallel_communication_data_type",
      "prescale_gradients",
      "gradient_predivide_factor",
      "gradient_allreduce_op",
      "sparse_gradients",
      "torch_autocast",
      "compression_training",
      "graph_harvesting",
      "zero_force_ds_cpu_optimizer",
      "quantize_training",
      "use_data_before_expert_parallelism",
      "hybrid_engine",
      "sparse_attention",
      "pipeline",
      "progressive_layer_drop",
      "curriculum_learning",
      "data_efficiency",
      "checkpoint",
      "data_types",
      "dataloader_drop_last",
      "log_level",
      "nebula",
      "datastates_ckpt",
      "weight_quantization",
      "compile",
      "timers",
      "tensor_parallel",
      "elasticity",
      "vocabulary_size",
      "sequence_parallel_size",
      "data_parallel_size",
  };
  return keys;
}

const std::vector<std::string> &adamParamKeys() {
  static const std::vector<std::string> keys = {
      "lr",      "betas",       "eps",       "weight_decay", "bias_correction",
      "amsgrad", "adam_w_mode", "torch_adam"};
  return keys;
}

const std::vector<std::string> &optimizerParamKeys(const std::string &type) {
  // The keyword arguments of FusedLamb (deepspeed/ops/lamb/fused_lamb.py)
  // and of the 1-bit optimizers (deepspeed/runtime/fp16/onebit/*.py) other
  // than max_grad_norm, which the engine refuses first.
  static const std::vector<std::string> lamb = {
      "lr",        "bias_correction", "betas",
      "eps",       "eps_inside_sqrt", "weight_decay",
      "max_coeff", "min_coeff",       "amsgrad"};
  static const std::vector<std::string> oneBitAdam = {
      "lr",         "freeze_step",      "bias_correction", "betas",
      "eps",        "eps_inside_sqrt",  "weight_decay",    "amsgrad",
      "cuda_aware", "comm_backend_name"};
  static const std::vector<std::string> zeroOneAdam = {"lr",
                                                       "bias_correction",
                                                       "betas",
                                                       "eps",
                                                       "eps_inside_sqrt",
                                                       "weight_decay",
                                                       "var_freeze_step",
                                                       "var_update_scaler",
                                                       "local_step_scaler",
                                                       "local_step_clipper",
                                                       "amsgrad",
                                                       "cuda_aware",
                                                       "comm_backend_name"};
  static const std::vector<std::string> oneBitLamb = {
      "lr",         "freeze_step",     "bias_correction", "betas",
      "eps",        "eps_inside_sqrt", "weight_decay",    "max_coeff",
      "min_coeff",  "amsgrad",         "cuda_aware",      "comm_backend_name",
      "coeff_beta", "factor_max",      "factor_min",      "factor_threshold"};
  if (type == "Lamb")
    return lamb;
  if (type == "OneBitAdam")
    return oneBitAdam;
  if (type == "ZeroOneAdam")
    return zeroOneAdam;
  if (type == "OneBitLamb")
    return oneBitLamb;
  return adamParamKeys();
}

const std::vector<std::string> &ignoredAdamParamKeys() {
  static const std::vector<std::string> keys = {
      "set_grad_none", "fp32_optimizer_states", "foreach", "maximize",
      "capturable",    "differentiable",        "fused"};
  return keys;
}

} // namespace detail

using namespace detail;

std::string_view offloadDeviceName(OffloadDevice device) {
  switch (device) {
  case OffloadDevice::None:
    return "none";
  case OffloadDevice::CPU:
    return "cpu";
  case OffloadDevice::NVMe:
    return "nvme";
  }
  return "none";
}

std::string_view precisionName(Precision precision) {
  switch (precision) {
  case Precision::FP32:
    return "fp32";
  case Precision::FP16:
    return "fp16";
  case Precision::BF16:
    return "bf16";
  }
  return "fp32";
}

OffloadConfig OffloadConfig::forParameters() { return OffloadConfig(); }

OffloadConfig OffloadConfig::forOptimizer() {
  OffloadConfig config;
  config.bufferCount = 4;
  return config;
}

ZeroConfig ZeroConfig::defaultsForStage(int stage) {
  ZeroConfig config;
  config.stage = stage;
  config.overlapComm = stage == 3;
  return config;
}

double LossScaleConfig::initialScale() const {
  return dynamic() ? std::ldexp(1.0, static_cast<int>(initialScalePower))
                   : lossScale;
}

bool operator==(const OffloadConfig &a, const OffloadConfig &b) {
  return a.device == b.device && a.nvmePath == b.nvmePath &&
         offloadParamSchema().sameScalars(a, b) &&
         offloadOptimizerSchema().sameScalars(a, b);
}

bool operator==(const ZeroConfig &a, const ZeroConfig &b) {
  return a.stage == b.stage && a.overlapComm == b.overlapComm &&
         zeroSchema().sameScalars(a, b) && a.offloadParam == b.offloadParam &&
         a.offloadOptimizer == b.offloadOptimizer &&
         a.leafModule.classes == b.leafModule.classes &&
         a.leafModule.names == b.leafModule.names &&
         a.leafModule.nameSuffixes == b.leafModule.nameSuffixes &&
         a.zenflow == b.zenflow && a.zeroppLocoParam == b.zeroppLocoParam;
}

static bool operator==(const OptimizerConfig &a, const OptimizerConfig &b) {
  return a.type == b.type && a.lr == b.lr && a.beta1 == b.beta1 &&
         a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weightDecay == b.weightDecay && a.adamWMode == b.adamWMode &&
         a.torchAdam == b.torchAdam && a.biasCorrection == b.biasCorrection &&
         a.maxCoeff == b.maxCoeff && a.minCoeff == b.minCoeff &&
         a.freezeStep == b.freezeStep;
}

bool operator==(const DeepSpeedConfig &a, const DeepSpeedConfig &b) {
  return a.trainBatchSize == b.trainBatchSize &&
         a.microBatchPerGpu == b.microBatchPerGpu &&
         a.gradientAccumulationSteps == b.gradientAccumulationSteps &&
         a.worldSize == b.worldSize && a.zero == b.zero &&
         a.precision == b.precision &&
         fp16Schema().sameScalars(a.lossScale, b.lossScale) &&
         bf16Schema().sameScalars(a.bf16, b.bf16) &&
         a.communicationDataType == b.communicationDataType &&
         a.optimizer == b.optimizer &&
         a.gradientClipping == b.gradientClipping &&
         a.activationCheckpointing.present ==
             b.activationCheckpointing.present &&
         activationCheckpointingSchema().sameScalars(
             a.activationCheckpointing, b.activationCheckpointing) &&
         a.activationCheckpointing.numberCheckpoints ==
             b.activationCheckpointing.numberCheckpoints &&
         aioSchema().sameScalars(a.aio, b.aio) &&
         a.expertParallel.size == b.expertParallel.size;
}

} // namespace zeroc
