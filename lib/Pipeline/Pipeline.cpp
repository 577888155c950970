//===- Pipeline.cpp - The compile driver ----------------------------------===//

#include "zeroc/Pipeline/Pipeline.h"

#include "zeroc/Export/PlanWriter.h"
#include "zeroc/Models/ModelSpec.h"
#include "zeroc/Transforms/Passes.h"

namespace zeroc {

static std::optional<Precision> precisionOf(const std::string &dtype) {
  if (dtype == "bf16")
    return Precision::BF16;
  if (dtype == "f16")
    return Precision::FP16;
  if (dtype == "f32")
    return Precision::FP32;
  return std::nullopt;
}

/// Where DeepSpeed's offload device puts state.
static sched::Placement placementOf(OffloadDevice device) {
  switch (device) {
  case OffloadDevice::None:
    return sched::Placement::Device;
  case OffloadDevice::CPU:
    return sched::Placement::Host;
  case OffloadDevice::NVMe:
    return sched::Placement::NVMe;
  }
  llvm_unreachable("unknown offload device");
}

ConfigContext configContextFor(const ModelStats &stats, int64_t worldSize,
                               const LauncherArgs &launcher) {
  ConfigContext ctx;
  ctx.worldSize = worldSize;
  ctx.hiddenSize = stats.hiddenSize;
  ctx.microBatch = launcher.microBatch;
  ctx.modelBatch = stats.batch;
  ctx.gradientAccumulation = launcher.gradientAccumulation;
  ctx.modelPrecision = precisionOf(stats.dtype);
  ctx.recompute = launcher.recompute;
  ctx.expertParallelSize = launcher.expertParallelSize;
  ctx.expertParallelFlag = launcher.expertParallelFlag;
  ctx.numExperts = stats.moe.experts;
  return ctx;
}

std::string trainingDType(const DeepSpeedConfig &cfg) {
  switch (cfg.precision) {
  case Precision::BF16:
    return "bf16";
  case Precision::FP16:
    return "f16";
  case Precision::FP32:
    return "f32";
  }
  return "f32";
}

static TrainingDType specializedDType(Precision precision) {
  switch (precision) {
  case Precision::BF16:
    return TrainingDType::BF16;
  case Precision::FP16:
    return TrainingDType::F16;
  case Precision::FP32:
    return TrainingDType::F32;
  }
  return TrainingDType::F32;
}

mlir::LogicalResult applyRecomputation(mlir::ModuleOp model,
                                       RecomputePolicy policy,
                                       ModelStats &stats) {
  if (policy.mode == RecomputeMode::None)
    return mlir::success();
  mlir::OwningOpRef<mlir::ModuleOp> step = model.clone();
  mlir::PassManager pm(model.getContext());
  ExpandTrainingStepOptions expand;
  expand.recompute = policy.mode;
  expand.recomputeEvery = policy.every;
  pm.addPass(createExpandTrainingStep(expand));
  if (mlir::failed(pm.run(*step)))
    return mlir::failure();
  mlir::FailureOr<std::map<std::string, int64_t>> saved =
      savedBytesOfTrainingStep(*step);
  if (mlir::failed(saved))
    return mlir::failure();
  stats.savedBytes = 0;
  for (LayerStats &layer : stats.layers) {
    auto it = saved->find(layer.name);
    layer.savedBytes = it == saved->end() ? 0 : it->second;
    stats.savedBytes += layer.savedBytes;
  }
  stats.recompute = policy;
  return mlir::success();
}

void buildZeroPipeline(mlir::OpPassManager &pm, const DeepSpeedConfig &cfg) {
  const ZeroConfig &zero = cfg.zero;
  ModelSpecializeOptions specialize;
  specialize.microBatch = cfg.microBatchPerGpu;
  specialize.dtype = specializedDType(cfg.precision);
  pm.addPass(createModelSpecialize(specialize));

  ExpandTrainingStepOptions expand;
  expand.gradAccum = cfg.gradientAccumulationSteps;
  expand.lossScaling = cfg.precision == Precision::FP16;
  expand.staticLossScale = cfg.lossScale.lossScale;
  expand.initialScalePower = cfg.lossScale.initialScalePower;
  expand.lossScaleWindow = cfg.lossScale.lossScaleWindow;
  expand.hysteresis = cfg.lossScale.hysteresis;
  expand.minLossScale = double(cfg.lossScale.minLossScale);
  expand.gradientClipping = cfg.gradientClipping;
  // The 1-bit optimizers plan as the optimizer of their warm-up (uncompressed)
  // phase, which never corrects the moments' bias (biasCorrection is false
  // for them); the cost model prices their compressed communication from the
  // plan's config.
  expand.optimizer = cfg.optimizer.lamb()      ? AdamMode::Lamb
                     : cfg.optimizer.adamWMode ? AdamMode::AdamW
                                               : AdamMode::Adam;
  expand.maxCoeff = cfg.optimizer.maxCoeff;
  expand.minCoeff = cfg.optimizer.minCoeff;
  expand.lr = cfg.optimizer.lr;
  expand.beta1 = cfg.optimizer.beta1;
  expand.beta2 = cfg.optimizer.beta2;
  expand.eps = cfg.optimizer.eps;
  expand.weightDecay = cfg.optimizer.weightDecay;
  expand.biasCorrection = cfg.optimizer.biasCorrection;
  // --recompute, or the activation_checkpointing block's presence (every
  // transformer layer, fully; docs/ds-config.md).
  expand.recompute = cfg.recompute.mode;
  expand.recomputeEvery = cfg.recompute.every;
  pm.addPass(createExpandTrainingStep(expand));

  ZeroPartitionOptions partition;
  partition.worldSize = cfg.worldSize;
  partition.stage = zero.stage;
  partition.persistenceThreshold = zero.paramPersistenceThreshold;
  partition.expertParallelSize = cfg.expertParallel.size;
  pm.addPass(createZeroPartition(partition));

  ZeroInsertCollectivesOptions collectives;
  collectives.reduceScatter = zero.reduceScatter;
  pm.addPass(createZeroInsertCollectives(collectives));

  ZeroOffloadOptions offload;
  offload.optimizer = placementOf(zero.offloadOptimizer.device);
  offload.param = placementOf(zero.offloadParam.device);
  pm.addPass(createZeroOffload(offload));

  // Reuse is decided per parameter, before buckets fuse them (ZeroPrefetch
  // in Passes.td); the hoisting after.
  ZeroPrefetchOptions prefetch;
  prefetch.prefetchBucketSize = zero.prefetchBucketSize;
  prefetch.maxLiveParameters = zero.maxLiveParameters;
  prefetch.maxReuseDistance = zero.maxReuseDistance;
  prefetch.hoist = false;
  pm.addPass(createZeroPrefetch(prefetch));

  ZeroBucketOptions bucket;
  bucket.reduceBucketSize = zero.reduceBucketSize;
  // Stage 3 fetches parameters in prefetch buckets (DeepSpeed's
  // stage3_prefetch_bucket_size); allgather_bucket_size is stages 1-2's.
  bucket.allgatherBucketSize =
      zero.stage == 3 ? zero.prefetchBucketSize : zero.allgatherBucketSize;
  pm.addPass(createZeroBucket(bucket));

  prefetch.keepReused = false;
  prefetch.hoist = true;
  pm.addPass(createZeroPrefetch(prefetch));

  ZeroAssignStreamsOptions streams;
  streams.overlapComm = zero.overlapComm;
  pm.addPass(createZeroAssignStreams(streams));

  pm.addPass(createZeroVerifySchedule());
  pm.addPass(createZeroPlanMemory());
}

Expected<DeepSpeedConfig> readConfigForModel(const JsonDocument &config,
                                             const ModelStats &stats,
                                             int64_t worldSize,
                                             const LauncherArgs &launcher) {
  return readDeepSpeedConfig(config,
                             configContextFor(stats, worldSize, launcher));
}

Expected<WorldChange> changeWorld(const JsonDocument &config,
                                  const DeepSpeedConfig &healthy,
                                  int64_t worldSize,
                                  const LauncherArgs &launcher) {
  const int64_t micro = healthy.microBatchPerGpu;
  const int64_t accumulation = healthy.gradientAccumulationSteps;
  const int64_t train = healthy.trainBatchSize;
  const std::string before = std::to_string(healthy.worldSize);
  const std::string after = std::to_string(worldSize);
  // Fixed: a number in the file. "auto" (the Trainer's micro x accumulation
  // x world), null or absent: it follows the world.
  const nlohmann::json *given = nullptr;
  if (config.root().is_object()) {
    auto it = config.root().find("train_batch_size");
    if (it != config.root().end() && it->is_number())
      given = &*it;
  }
  WorldChange out{config, launcher, {}};
  out.launcher.microBatch = micro;
  out.launcher.gradientAccumulation.reset();
  if (!given) {
    out.launcher.gradientAccumulation = accumulation;
    out.notes.push_back(
        "train_batch_size is not fixed by " + config.name() +
        ": the global batch shrinks from " + std::to_string(train) + " to " +
        std::to_string(micro * accumulation * worldSize) +
        " sequences (train_micro_batch_size_per_gpu " + std::to_string(micro) +
        " x gradient_accumulation_steps " + std::to_string(accumulation) +
        " x " + after + " ranks)");
    return out;
  }
  if (train % (micro * worldSize) != 0)
    return Diagnostic{
        config.name(), 0, 0,
        "train_batch_size " + std::to_string(train) +
            " (fixed by the config) is not a multiple of "
            "train_micro_batch_size_per_gpu " +
            std::to_string(micro) + " x world size " + after + " = " +
            std::to_string(micro * worldSize) +
            ": no whole gradient_accumulation_steps keeps it on " + after +
            " ranks, and DeepSpeed refuses such a config (_batch_assertion: "
            "train_batch_size == micro x gradient_accumulation_steps x world "
            "size)"};
  int64_t steps = train / (micro * worldSize);
  // The accumulation steps the file gives (if any) are the healthy
  // world's: DeepSpeed derives them from the other two once they are gone.
  nlohmann::json root = config.root();
  root.erase("gradient_accumulation_steps");
  Expected<JsonDocument> edited = JsonDocument::parse(
      root.dump(1), config.name() + " (for " + after + " ranks)");
  if (!edited)
    return edited.error();
  out.config = std::move(*edited);
  out.notes.push_back(
      "train_batch_size " + std::to_string(train) + " kept (fixed by " +
      config.name() + "): gradient_accumulation_steps " +
      std::to_string(accumulation) + " -> " + std::to_string(steps) +
      " at train_micro_batch_size_per_gpu " + std::to_string(micro) + " on " +
      after + " ranks (was " + before + ")");
  return out;
}

mlir::LogicalResult runZeroPipeline(mlir::PassManager &pm,
                                    mlir::ModuleOp module,
                                    const DeepSpeedConfig &cfg) {
  buildZeroPipeline(pm, cfg);
  return pm.run(module);
}

mlir::FailureOr<Plan> planOfSchedule(mlir::ModuleOp module,
                                     const ModelStats &stats,
                                     const DeepSpeedConfig &cfg,
                                     const std::string &generator) {
  PlanSource source;
  source.generator = generator;
  source.model.name = stats.name;
  source.model.params = stats.params;
  source.model.dtype = parseDType(trainingDType(cfg)).value_or(DType::F32);
  source.model.microBatch = cfg.microBatchPerGpu;
  source.model.seqLen = stats.seqLen;
  // The generator's record of the Hugging Face config (ModelBuilder.cpp).
  if (auto hf = module->getAttrOfType<mlir::StringAttr>(kHFConfigAttr)) {
    nlohmann::json config =
        nlohmann::json::parse(hf.getValue().str(), nullptr, false);
    if (!config.is_object()) {
      module.emitError() << kHFConfigAttr
                         << ": expected the JSON text of a Hugging Face "
                            "config object";
      return mlir::failure();
    }
    source.model.hfConfig = std::move(config);
  }
  source.gradientAccumulationSteps = cfg.gradientAccumulationSteps;
  source.recompute = cfg.recompute;
  source.config = toDeepSpeedJson(cfg);
  return buildPlan(module, source);
}

mlir::FailureOr<Plan> compilePlan(mlir::ModuleOp module,
                                  const ModelStats &stats,
                                  const DeepSpeedConfig &cfg,
                                  const std::string &generator) {
  mlir::PassManager pm(module.getContext());
  if (mlir::failed(runZeroPipeline(pm, module, cfg)))
    return mlir::failure();
  return planOfSchedule(module, stats, cfg, generator);
}

} // namespace zeroc
