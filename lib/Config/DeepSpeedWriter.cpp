//===- DeepSpeedWriter.cpp - A resolved config as DeepSpeed JSON ----------===//
//
// Writes the keys that define the schedule always, under the names DeepSpeed
// documents (the `stage3_` forms), so that the file means the same to
// DeepSpeed versions whose defaults differ; writes any other key only when
// it differs from the default, so that a version that predates the key still
// accepts the file.
//
//===----------------------------------------------------------------------===//

#include "DeepSpeedSchema.h"

using nlohmann::json;

namespace zeroc {

using namespace detail;

namespace {

/// Writes the core fields (when `withCore`) and those that differ from
/// `defaults`.
template <typename S>
void writeScalars(const S &from, const S &defaults,
                  const BlockSchema<S> &schema, bool withCore, json &to) {
  schema.forEachField([&](const auto &f) {
    if ((withCore && f.core) || from.*f.member != defaults.*f.member)
      to[f.key] = from.*f.member;
  });
}

/// An offload block, or null when it offloads nothing and holds only
/// defaults (DeepSpeed's "no block").
json writeOffload(const OffloadConfig &offload, const OffloadConfig &defaults,
                  const BlockSchema<OffloadConfig> &schema) {
  if (offload == defaults)
    return nullptr;
  json out = {{"device", std::string(offloadDeviceName(offload.device))}};
  if (!offload.nvmePath.empty())
    out["nvme_path"] = offload.nvmePath;
  writeScalars(offload, defaults, schema, offload.enabled(), out);
  return out;
}

json writeZero(const ZeroConfig &zero) {
  const ZeroConfig defaults = ZeroConfig::defaultsForStage(zero.stage);
  json out = {{"stage", zero.stage}, {"overlap_comm", zero.overlapComm}};
  writeScalars(zero, defaults, zeroSchema(), true, out);
  json param = writeOffload(zero.offloadParam, defaults.offloadParam,
                            offloadParamSchema());
  if (!param.is_null())
    out["offload_param"] = param;
  json optimizer =
      writeOffload(zero.offloadOptimizer, defaults.offloadOptimizer,
                   offloadOptimizerSchema());
  if (!optimizer.is_null())
    out["offload_optimizer"] = optimizer;

  const LeafModuleConfig &leaf = zero.leafModule;
  const LeafModuleConfig &leafDefaults = defaults.leafModule;
  if (leaf.classes != leafDefaults.classes ||
      leaf.names != leafDefaults.names ||
      leaf.nameSuffixes != leafDefaults.nameSuffixes)
    out["leaf_module"] = {{"classes", leaf.classes},
                          {"names", leaf.names},
                          {"name_suffixes", leaf.nameSuffixes}};
  if (!zero.zenflow.is_null())
    out["zenflow"] = zero.zenflow;
  if (!zero.zeroppLocoParam.is_null())
    out["zeropp_loco_param"] = zero.zeroppLocoParam;
  return out;
}

json writeOptimizer(const OptimizerConfig &optimizer) {
  const OptimizerConfig defaults;
  json params = {{"lr", optimizer.lr},
                 {"betas", {optimizer.beta1, optimizer.beta2}},
                 {"eps", optimizer.eps},
                 {"weight_decay", optimizer.weightDecay}};
  // DeepSpeed's adam_w_mode defaults to true; only "Adam" can turn it off.
  if (!optimizer.adamWMode && optimizer.type == "Adam")
    params["adam_w_mode"] = false;
  if (optimizer.torchAdam != defaults.torchAdam)
    params["torch_adam"] = optimizer.torchAdam;
  // The 1-bit family never corrects: their type says it.
  if (!optimizer.biasCorrection && !optimizer.oneBit())
    params["bias_correction"] = false;
  if (optimizer.lamb()) {
    params["max_coeff"] = optimizer.maxCoeff;
    params["min_coeff"] = optimizer.minCoeff;
  }
  if (optimizer.oneBit())
    params[optimizer.type == "ZeroOneAdam" ? "var_freeze_step"
                                           : "freeze_step"] =
        optimizer.freezeStep;
  return {{"type", optimizer.type}, {"params", params}};
}

} // namespace

json toDeepSpeedJson(const DeepSpeedConfig &cfg) {
  json out = {{"train_batch_size", cfg.trainBatchSize},
              {"train_micro_batch_size_per_gpu", cfg.microBatchPerGpu},
              {"gradient_accumulation_steps", cfg.gradientAccumulationSteps},
              {"gradient_clipping", cfg.gradientClipping},
              {"zero_optimization", writeZero(cfg.zero)},
              {"optimizer", writeOptimizer(cfg.optimizer)}};
  // DeepSpeed runs Lamb under ZeRO only when told to (zero/utils.py).
  if (cfg.optimizer.type == "Lamb" && cfg.zero.stage > 0)
    out["zero_allow_untested_optimizer"] = true;

  bool fp16 = cfg.precision == Precision::FP16;
  json fp16Block = {{"enabled", fp16}};
  writeScalars(cfg.lossScale, LossScaleConfig(), fp16Schema(), fp16, fp16Block);
  out["fp16"] = fp16Block;
  json bf16Block = {{"enabled", cfg.precision == Precision::BF16}};
  writeScalars(cfg.bf16, Bf16Config(), bf16Schema(), false, bf16Block);
  out["bf16"] = bf16Block;
  if (cfg.communicationDataType)
    out["communication_data_type"] =
        std::string(precisionName(*cfg.communicationDataType));

  json checkpointing = json::object();
  writeScalars(cfg.activationCheckpointing, ActivationCheckpointingConfig(),
               activationCheckpointingSchema(), false, checkpointing);
  if (cfg.activationCheckpointing.numberCheckpoints)
    checkpointing["number_checkpoints"] =
        *cfg.activationCheckpointing.numberCheckpoints;
  // The block's presence turns checkpointing on, even when it is empty.
  if (cfg.activationCheckpointing.present || !checkpointing.empty())
    out["activation_checkpointing"] = checkpointing;

  // With NVMe offload the whole aio block matters; otherwise only changes.
  bool nvme = cfg.zero.offloadParam.device == OffloadDevice::NVMe ||
              cfg.zero.offloadOptimizer.device == OffloadDevice::NVMe;
  json aio = json::object();
  writeScalars(cfg.aio, AioConfig(), aioSchema(), nvme, aio);
  if (!aio.empty())
    out["aio"] = aio;
  // DeepSpeed's AutoEP spelling; a plan that came from --ep-size reads back
  // the same.
  if (cfg.expertParallel.size > 1)
    out["expert_parallel"] = {{"enabled", true},
                              {"autoep_size", cfg.expertParallel.size}};
  return out;
}

} // namespace zeroc
