//===- PlanMemory.cpp - A plan's memory per rank, and whether it fits -----===//

#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Plan/PlanTrace.h"

#include "zeroc/Config/DeepSpeedConfig.h" // OptimizerConfig::oneBitType, inline

#include "zeroc/Support/DType.h"
#include "zeroc/Support/Format.h"
#include "zeroc/Support/Limits.h"
#include "zeroc/Support/Memory.h"

#include <algorithm>
#include <cstdio>

using nlohmann::json;

namespace zeroc {

namespace {

/// DeepSpeed's pin_memory for the offload block `block` of the plan's
/// resolved config (true, its default, when the key is absent).
bool pinned(const Plan &plan, const char *block) {
  const json &zero = plan.config.value("zero_optimization", json::object());
  const json &offload = zero.value(block, json::object());
  const json &pin = offload.value("pin_memory", json(true));
  return !pin.is_boolean() || pin.get<bool>();
}

int64_t configInt(const Plan &plan, const char *block, const char *key,
                  int64_t fallback) {
  const json &zero = plan.config.value("zero_optimization", json::object());
  const json &b = zero.value(block, json::object());
  const json &v = b.value(key, json(fallback));
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    return fallback;
  return v.get<int64_t>();
}

} // namespace

MemorySummary summarizeMemory(const Plan &plan) {
  MemorySummary m;
  int64_t largestNvmeTensor = 0;
  bool paramsOnNvme = false;
  for (const PlanTensor &t : plan.tensors) {
    int64_t bytes = localBytes(t.localNumel, t.dtype);
    bool isParam = t.role == TensorRole::Param;
    switch (t.placement) {
    case Placement::Device:
      if (isParam)
        m.params += bytes;
      else if (t.role == TensorRole::Grad)
        m.grads += bytes;
      else
        m.optimizerStates += bytes;
      break;
    case Placement::Host:
      if (pinned(plan, isParam ? "offload_param" : "offload_optimizer"))
        m.hostPinnedBytes += bytes;
      else
        m.hostPageableBytes += bytes;
      break;
    case Placement::Nvme:
      m.nvmeBytes += bytes;
      largestNvmeTensor = std::max(largestNvmeTensor, bytes);
      paramsOnNvme |= isParam;
      break;
    }
  }
  // NVMe traffic goes through pinned host buffers: buffer_count x
  // buffer_size elements for parameters, buffer_count tensors' worth for
  // optimizer state.
  // The resolved config was checked when compiled; a hand-edited plan may
  // say anything: a product that overflows counts as 2^62 bytes, more than
  // any host has.
  auto product = [](int64_t a, int64_t b) {
    std::optional<int64_t> p = checkedMul(a, b);
    return p ? std::min(*p, limits::kMaxCount) : limits::kMaxCount;
  };
  if (paramsOnNvme)
    m.hostPinnedBytes += product(
        product(configInt(plan, "offload_param", "buffer_count", 5),
                configInt(plan, "offload_param", "buffer_size", 100000000)),
        bytesPerElement(plan.model.dtype));
  if (m.nvmeBytes && largestNvmeTensor)
    m.hostPinnedBytes +=
        product(configInt(plan, "offload_optimizer", "buffer_count", 4),
                largestNvmeTensor);

  // The 1-bit optimizers' buffers, allocated when compression starts and
  // kept from then on.
  m.optimizerStates += oneBitStateBytes(plan);
  int64_t persistent = m.modelStateBytes();
  m.peakDeviceBytes = persistent;
  for (const PlanPhase &phase : plan.phases) {
    if (!phase.memory)
      continue;
    m.planned = true;
    const PlanPhaseMemory &pm = *phase.memory;
    int64_t transient = phaseTransientBytes(pm.arenaBytes, pm.peakLiveBytes);
    int64_t peak = predictedPeakBytes(persistent, transient);
    if (peak < m.peakDeviceBytes && !m.peakPhase.empty())
      continue;
    m.peakDeviceBytes = peak;
    m.fragmentation = transient - pm.peakLiveBytes;
    m.peakPhase = phaseName(phase.kind);
    m.peakOp = pm.peakOp;
    if (pm.peakOp < int64_t(phase.ops.size())) {
      m.peakOpKind = phase.ops[pm.peakOp].kindName();
      m.peakOpWhere = opSubject(phase.ops[pm.peakOp]);
    }
    m.activations = pm.activations;
    m.gatherBuffers = pm.gatherBuffers;
    m.reduceBuckets = pm.reduceBuckets;
    m.workspace = pm.workspace;
  }
  return m;
}

json memoryJson(const MemorySummary &m) {
  json out = {
      {"model_state_bytes", m.modelStateBytes()},
      {"host_bytes", m.hostPinnedBytes + m.hostPageableBytes},
      {"host_pinned_bytes", m.hostPinnedBytes},
      {"host_pageable_bytes", m.hostPageableBytes},
      {"nvme_bytes", m.nvmeBytes},
  };
  if (!m.planned)
    return out;
  out["peak_device_bytes"] = m.peakDeviceBytes;
  out["memory_breakdown_bytes"] = {{"params", m.params},
                                   {"grads", m.grads},
                                   {"optimizer_states", m.optimizerStates},
                                   {"activations", m.activations},
                                   {"buffers", m.buffers()}};
  out["memory_peak"] = {{"phase", m.peakPhase},
                        {"op", m.peakOp},
                        {"kind", m.peakOpKind},
                        {"where", m.peakOpWhere},
                        {"gather_buffers", m.gatherBuffers},
                        {"reduce_buckets", m.reduceBuckets},
                        {"workspace", m.workspace},
                        {"arena_fragmentation", m.fragmentation}};
  return out;
}

static std::string row(const char *label, int64_t bytes, int64_t total) {
  char line[160];
  std::snprintf(line, sizeof line, "  %-28s %12s %6.1f%%\n", label,
                humanBytes(double(bytes)).c_str(),
                total ? 100.0 * double(bytes) / double(total) : 0.0);
  return line;
}

static std::string peakName(const MemorySummary &m) {
  std::string s = "op " + std::to_string(m.peakOp) + " (" + m.peakOpKind;
  if (!m.peakOpWhere.empty())
    s += " in " + m.peakOpWhere;
  return s + ") of @" + m.peakPhase;
}

std::string memoryText(const MemorySummary &m) {
  std::string out;
  if (!m.planned) {
    out += "device memory per rank: not planned (run zero-plan-memory)\n";
    return out;
  }
  out += "device memory per rank at the peak, " + peakName(m) + "\n";
  int64_t total = m.peakDeviceBytes;
  out += row("parameters", m.params, total);
  out += row("gradients", m.grads, total);
  out += row("optimizer states", m.optimizerStates, total);
  out += row("activations", m.activations, total);
  out += row("gathered parameters", m.gatherBuffers, total);
  out += row("reduce buckets", m.reduceBuckets, total);
  out += row("workspace", m.workspace, total);
  out += row("arena fragmentation", m.fragmentation, total);
  out += row("peak", total, total);
  out += "  model states (ZeRO paper)    " +
         humanBytes(double(m.modelStateBytes())) + " = " +
         groupDigits(m.modelStateBytes()) + " bytes\n";
  if (m.hostPinnedBytes || m.hostPageableBytes || m.nvmeBytes)
    out += "  host " + humanBytes(double(m.hostPinnedBytes)) + " pinned, " +
           humanBytes(double(m.hostPageableBytes)) + " pageable; NVMe " +
           humanBytes(double(m.nvmeBytes)) + "\n";
  return out;
}

std::optional<std::string> checkFit(const Plan &plan, int64_t gpuMemoryBytes,
                                    const std::string &gpuName) {
  MemorySummary m = summarizeMemory(plan);
  if (!m.planned || m.peakDeviceBytes <= gpuMemoryBytes)
    return std::nullopt;
  std::string msg = "the plan needs " + humanBytes(double(m.peakDeviceBytes)) +
                    " per GPU at its peak, " + peakName(m) + ", but " +
                    gpuName + " has " + humanBytes(double(gpuMemoryBytes)) +
                    "\n";
  msg += memoryText(m);
  msg += "ways out:\n";
  double psi = double(plan.model.params), n = double(plan.worldSize);
  bool mixed = plan.model.dtype != DType::F32;
  double w = double(bytesPerElement(plan.model.dtype));
  double k = mixed ? 12.0 : 8.0;
  auto stateAt = [&](int stage) {
    switch (stage) {
    case 0:
      return (2 * w + k) * psi;
    case 1:
      return 2 * w * psi + k * psi / n;
    case 2:
      return w * psi + (w + k) * psi / n;
    default:
      return (2 * w + k) * psi / n;
    }
  };
  auto saving = [&](double bytes) {
    return " (saves about " + humanBytes(bytes) + ")";
  };
  // DeepSpeed runs the 1-bit optimizers only at stage 0: a higher stage is
  // no way out for them.
  if (std::string type = planOptimizerType(plan);
      OptimizerConfig::oneBitType(type))
    msg += "  - " + type +
           " runs only without ZeRO (stage 0); Adam, AdamW or Lamb with a "
           "ZeRO stage partitions the model state\n";
  else
    for (int stage = int(plan.stage) + 1; stage <= 3; ++stage) {
      double saved = double(m.modelStateBytes()) - stateAt(stage);
      if (saved > 0)
        msg += "  - ZeRO stage " + std::to_string(stage) +
               " partitions more model state" + saving(saved) + "\n";
    }
  const json &zero = plan.config.value("zero_optimization", json::object());
  auto offloaded = [&](const char *block) {
    const json &b = zero.value(block, json::object());
    return b.value("device", std::string("none")) != "none";
  };
  if (plan.stage >= 1 && !offloaded("offload_optimizer") && m.optimizerStates)
    msg += "  - offload_optimizer {\"device\": \"cpu\"} moves the optimizer "
           "states to the host" +
           saving(double(m.optimizerStates + (plan.stage >= 2 ? m.grads : 0))) +
           "\n";
  if (plan.stage == 3 && !offloaded("offload_param") && m.params)
    msg += "  - offload_param {\"device\": \"cpu\"} keeps parameter shards on "
           "the host" +
           saving(double(m.params)) + "\n";
  if (m.gatherBuffers + m.reduceBuckets > 0)
    msg += "  - smaller reduce_bucket_size, stage3_prefetch_bucket_size or "
           "stage3_max_live_parameters shrink the " +
           humanBytes(double(m.gatherBuffers + m.reduceBuckets)) +
           " of gathered parameters and reduce buckets live at the peak\n";
  if (m.activations) {
    if (plan.model.microBatch > 1)
      msg += "  - train_micro_batch_size_per_gpu " +
             std::to_string(plan.model.microBatch / 2) +
             " (with more gradient accumulation) halves the activations" +
             saving(double(m.activations) / 2) + "\n";
    if (plan.recompute.mode == RecomputeMode::None)
      msg += "  - activation_checkpointing keeps only each layer's input for "
             "backward and recomputes the rest (zeroc --recompute full); "
             "--recompute selective also keeps its matrix products' outputs "
             "and recomputes only norms and activations\n";
    else if (plan.recompute.every > 1)
      msg += "  - --recompute-every 1 recomputes every layer instead of " +
             plan.recompute.describe().substr(
                 plan.recompute.describe().find("every")) +
             "\n";
    else if (plan.recompute.mode == RecomputeMode::Selective)
      msg += "  - --recompute full (activation_checkpointing) keeps only each "
             "layer's input, not its matrix products' outputs\n";
  }
  msg += "  - where none of these is enough alone, several together: zeroc "
         "advise searches the combinations and names those that fit "
         "(docs/advise.md)\n";
  msg += "(zeroc --allow-oom writes the plan anyway)";
  return msg;
}

DeepSpeedBucketBuffers deepSpeedBucketBuffers(const Plan &plan) {
  DeepSpeedBucketBuffers out;
  const json &zero = plan.config.value("zero_optimization", json::object());
  // A compiled plan's config always states these (toDeepSpeedJson); a plan
  // that does not is not read as having buffers it may not have.
  if (plan.stage < 1 || !zero.value("contiguous_gradients", false))
    return out;
  out.elements = zero.value("reduce_bucket_size", int64_t(0));
  out.wholeRun = plan.stage == 3;
  out.buffers = out.elements <= 0                   ? 0
                : out.wholeRun                      ? 1
                : zero.value("overlap_comm", false) ? 2
                                                    : 1;
  out.dtype = plan.model.dtype;
  return out;
}

std::string deepSpeedBucketNote(const DeepSpeedBucketBuffers &b,
                                int64_t peakDeviceBytes, int64_t fitBytes) {
  if (!b.buffers)
    return "";
  std::string what = b.buffers == 1 ? "a gradient bucket buffer"
                                    : "two gradient bucket buffers";
  std::string when = b.wholeRun ? "for the whole run"
                                : (b.buffers == 2 ? "at every backward "
                                                    "(contiguous_gradients, "
                                                    "overlap_comm)"
                                                  : "at every backward "
                                                    "(contiguous_gradients)");
  int64_t with = peakDeviceBytes + b.bytes();
  std::string out =
      "DeepSpeed itself allocates " + what + " of reduce_bucket_size (" +
      humanCount(double(b.elements)) + " elements, " +
      std::string(dtypeName(b.dtype)) + ") " + when + ", " +
      humanBytes(double(b.bytes())) +
      ", which zerorun's plan does not hold: the peak plus " +
      (b.buffers == 1 ? "it" : "them") + " is " + humanBytes(double(with));
  if (with <= fitBytes)
    out += ", within the " + humanBytes(double(fitBytes)) + " that fits";
  else {
    out += ", more than the " + humanBytes(double(fitBytes)) +
           " that fits: under DeepSpeed, lower reduce_bucket_size";
    int64_t room = fitBytes - peakDeviceBytes;
    int64_t most = room / (b.buffers * bytesPerElement(b.dtype));
    if (most > 0)
      out += " to at most " + groupDigits(most);
  }
  return out + "\n";
}

} // namespace zeroc
