//===- Advise.cpp - Which ZeRO setup suits this model on this cluster -----===//

#include "zeroc/Advise/Advise.h"

#include "zeroc/Config/DeepSpeedConfig.h"
#include "zeroc/Cost/FitCheck.h"
#include "zeroc/Cost/Simulator.h"
#include "zeroc/Pipeline/Pipeline.h"
#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Support/Format.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstdio>
#include <map>
#include <set>

using nlohmann::json;

namespace zeroc {

std::string AdviseCandidate::label() const {
  std::string s = "stage " + std::to_string(stage);
  if (offloadOptimizer != "none")
    s += ", optimizer on " + offloadOptimizer;
  if (offloadParam != "none")
    s += ", params on " + offloadParam;
  s += ", reduce bucket " + humanCount(double(reduceBucketSize));
  if (prefetchBucketSize)
    s += ", prefetch " + humanCount(double(prefetchBucketSize));
  return s;
}

namespace {

std::vector<AdviseCandidate> candidateSetups() {
  std::vector<AdviseCandidate> out;
  for (int stage = 0; stage <= 3; ++stage) {
    std::vector<std::pair<const char *, const char *>> offloads = {
        {"none", "none"}};
    if (stage >= 1)
      offloads.push_back({"cpu", "none"});
    if (stage == 3)
      offloads.push_back({"cpu", "cpu"});
    std::vector<int64_t> prefetches =
        stage == 3 ? std::vector<int64_t>{5000000, 50000000, 200000000}
                   : std::vector<int64_t>{0};
    for (auto [opt, param] : offloads)
      for (int64_t bucket : {50000000LL, 500000000LL})
        for (int64_t prefetch : prefetches) {
          AdviseCandidate c;
          c.stage = stage;
          c.offloadOptimizer = opt;
          c.offloadParam = param;
          c.reduceBucketSize = bucket;
          c.prefetchBucketSize = prefetch;
          out.push_back(c);
        }
  }
  return out;
}

/// The base config with the candidate's ZeRO settings written over it.
json configFor(const json &base, const AdviseCandidate &c) {
  json cfg = base.is_object() ? base : json::object();
  json &zero = cfg["zero_optimization"];
  if (!zero.is_object())
    zero = json::object();
  // Keys the candidate decides, and their deprecated spellings, go; so do
  // the keys of stage 3 (stage3_*, and their prefix-less aliases) below
  // stage 3, where DeepSpeed reads none of them.
  for (const char *key :
       {"stage", "offload_optimizer", "offload_param", "cpu_offload",
        "cpu_offload_param", "reduce_bucket_size",
        "stage3_prefetch_bucket_size", "prefetch_bucket_size"})
    zero.erase(key);
  if (c.stage < 3) {
    std::vector<std::string> stage3;
    for (const auto &[key, value] : zero.items())
      if (llvm::StringRef(key).starts_with("stage3_") ||
          llvm::is_contained(
              {"param_persistence_threshold", "max_live_parameters",
               "max_reuse_distance", "model_persistence_threshold",
               "gather_16bit_weights_on_model_save", "sub_group_size"},
              key))
        stage3.push_back(key);
    for (const std::string &key : stage3)
      zero.erase(key);
  }
  zero["stage"] = c.stage;
  // Overlapping communication with compute is what every stage wants on a
  // GPU (DeepSpeed defaults it on only for stage 3); a base config that
  // says otherwise is kept.
  if (!zero.contains("overlap_comm"))
    zero["overlap_comm"] = true;
  zero["reduce_bucket_size"] = c.reduceBucketSize;
  if (c.offloadOptimizer != "none")
    zero["offload_optimizer"] = {{"device", c.offloadOptimizer}};
  if (c.offloadParam != "none")
    zero["offload_param"] = {{"device", c.offloadParam}};
  if (c.stage == 3)
    zero["stage3_prefetch_bucket_size"] = c.prefetchBucketSize;
  // No batch at all: the micro batch is the launcher's ("auto").
  if (!cfg.contains("train_batch_size") &&
      !cfg.contains("train_micro_batch_size_per_gpu"))
    cfg["train_micro_batch_size_per_gpu"] = "auto";
  for (const char *precision : {"bf16", "fp16"})
    if (!cfg.contains(precision))
      cfg[precision] = {{"enabled", "auto"}};
  return cfg;
}

void evaluate(const AdviseRequest &req, int64_t worldSize, AdviseCandidate &c) {
  json base = req.baseConfig ? req.baseConfig->root() : json::object();
  auto doc =
      JsonDocument::parse(configFor(base, c).dump(2),
                          req.baseConfig ? req.baseConfig->name() : "(advise)");
  if (!doc) {
    c.error = doc.error().message;
    return;
  }
  auto cfg = readConfigForModel(*doc, *req.stats, worldSize,
                                {req.microBatch, req.gradientAccumulation});
  if (!cfg) {
    c.error = cfg.error().message;
    return;
  }
  mlir::ModuleOp model = req.model;
  mlir::OwningOpRef<mlir::ModuleOp> module = model.clone();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(
      module->getContext(), [&](mlir::Diagnostic &d) {
        if (d.getSeverity() == mlir::DiagnosticSeverity::Error &&
            diagnostics.empty())
          diagnostics = d.str();
        return mlir::success();
      });
  mlir::FailureOr<Plan> plan = compilePlan(*module, *req.stats, *cfg);
  if (mlir::failed(plan)) {
    c.error =
        diagnostics.empty() ? "the pipeline or the plan failed" : diagnostics;
    return;
  }
  MemorySummary memory = summarizeMemory(*plan);
  c.peakDeviceBytes = memory.peakDeviceBytes;
  c.hostBytes = memory.hostPinnedBytes + memory.hostPageableBytes;
  // Every memory: the GPU's budget (usable less the runtime reserve), the
  // node's host memory over its ranks, its NVMe (FitCheck.h).
  c.fits = !checkClusterFit(*plan, *req.cluster);
  auto prediction = predictStep(*plan, *req.cluster);
  if (!prediction) {
    c.error = prediction.error().message;
    return;
  }
  c.stepSeconds = prediction->stepSeconds;
  c.exposedCommSeconds = prediction->exposedComm;
  c.tflopsPerGpu = prediction->achievedTflopsPerGpu;
  c.commBytesPerStep =
      plan->comm.total() * double(bytesPerElement(plan->model.dtype));
  c.deepSpeedConfig = plan->config;
  c.launchConfig = configFor(base, c);
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100.0 * x);
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 1 ? "%.1f ms" : "%.2f s",
                s < 1 ? s * 1e3 : s);
  return buf;
}

} // namespace

std::optional<size_t>
recommend(const std::vector<AdviseCandidate> &candidates) {
  auto usable = [](const AdviseCandidate &c) {
    return c.error.empty() && c.fits;
  };
  std::optional<double> fastest;
  for (const AdviseCandidate &c : candidates)
    if (usable(c) && (!fastest || c.stepSeconds < *fastest))
      fastest = c.stepSeconds;
  if (!fastest)
    return std::nullopt;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (usable(candidates[i]) &&
        candidates[i].stepSeconds <= *fastest * (1 + kAdviseTieFraction))
      return i;
  return std::nullopt;
}

Expected<AdviseResult> advise(const AdviseRequest &req) {
  AdviseResult result;
  result.cluster = req.cluster->name;
  result.worldSize = req.worldSize ? req.worldSize : req.cluster->gpus();
  // What a plan's peak may use: usable memory less the runtime reserve.
  result.gpuMemoryBytes = int64_t(req.cluster->gpu.planBudgetBytes());
  if (auto problem = checkFits(*req.cluster, result.worldSize))
    return *problem;
  result.candidates = candidateSetups();
  for (AdviseCandidate &c : result.candidates)
    evaluate(req, result.worldSize, c);

  result.best = recommend(result.candidates);

  // Reasons: the capacity decision first, then the price of each stage.
  for (int stage = 0; stage <= 3; ++stage) {
    const AdviseCandidate *fastest = nullptr, *smallest = nullptr;
    for (const AdviseCandidate &c : result.candidates) {
      if (c.stage != stage || !c.error.empty())
        continue;
      if (!smallest || c.peakDeviceBytes < smallest->peakDeviceBytes)
        smallest = &c;
      if (c.fits && (!fastest || c.stepSeconds < fastest->stepSeconds))
        fastest = &c;
    }
    std::string s = "stage " + std::to_string(stage) + ": ";
    if (!smallest) {
      s += "could not be planned";
    } else if (!fastest) {
      s += "does not fit: even " + smallest->label() + " needs " +
           humanBytes(double(smallest->peakDeviceBytes)) + " per GPU, " +
           humanBytes(double(result.gpuMemoryBytes)) + " available";
    } else {
      s += "fits; fastest " + fastest->label() + ", " +
           seconds(fastest->stepSeconds) + " per step, " +
           seconds(fastest->exposedCommSeconds) +
           " of it communication not "
           "hidden behind compute, " +
           humanBytes(fastest->commBytesPerStep) + " sent per rank";
      if (result.best) {
        const AdviseCandidate &best = result.candidates[*result.best];
        if (&best != fastest)
          s += " (" + percent(fastest->stepSeconds / best.stepSeconds - 1) +
               " against the recommendation)";
      }
    }
    result.reasons.push_back(s);
  }
  return result;
}

namespace {

void flatten(const json &j, const std::string &at,
             std::map<std::string, std::string> &out) {
  if (j.is_object() && !j.empty()) {
    for (const auto &[key, value] : j.items())
      flatten(value, at.empty() ? key : at + "." + key, out);
    return;
  }
  out[at] = j.dump();
}

} // namespace

std::string configDiff(const json &base, const json &launch) {
  std::map<std::string, std::string> before, after;
  flatten(base.is_object() ? base : json::object(), "", before);
  flatten(launch, "", after);
  std::set<std::string> keys;
  for (const auto &[k, v] : before)
    keys.insert(k);
  for (const auto &[k, v] : after)
    keys.insert(k);
  std::string out;
  for (const std::string &k : keys) {
    auto b = before.find(k), a = after.find(k);
    if (b != before.end() && a != after.end() && b->second == a->second)
      continue;
    if (b != before.end())
      out += "- " + k + ": " + b->second + "\n";
    if (a != after.end())
      out += "+ " + k + ": " + a->second + "\n";
  }
  return out;
}

std::string adviseText(const AdviseResult &r) {
  std::string out = "zeroc advise: " + r.cluster + ", " +
                    std::to_string(r.worldSize) + " ranks, " +
                    humanBytes(double(r.gpuMemoryBytes)) + " per GPU\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-62s %-5s %12s %12s %12s %10s\n",
                "setup", "fits", "peak/GPU", "step", "exposed comm",
                "sent/rank");
  out += line;
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const AdviseCandidate &c = r.candidates[i];
    std::string name = (r.best && *r.best == i ? "* " : "  ") + c.label();
    if (!c.error.empty()) {
      std::snprintf(line, sizeof line, "  %-62s error: %s\n", name.c_str(),
                    c.error.substr(0, 120).c_str());
    } else {
      std::snprintf(
          line, sizeof line, "  %-62s %-5s %12s %12s %12s %10s\n", name.c_str(),
          c.fits ? "yes" : "no", humanBytes(double(c.peakDeviceBytes)).c_str(),
          seconds(c.stepSeconds).c_str(), seconds(c.exposedCommSeconds).c_str(),
          humanBytes(c.commBytesPerStep).c_str());
    }
    out += line;
  }
  out += "\n";
  for (const std::string &reason : r.reasons)
    out += "  " + reason + "\n";
  out += "\n";
  if (r.best)
    out += "recommended: " + r.candidates[*r.best].label() + " (" +
           seconds(r.candidates[*r.best].stepSeconds) + " per step)\n";
  else
    out += "nothing fits: see the stages above for how far each is from "
           "fitting\n";
  return out;
}

json adviseJson(const AdviseResult &r) {
  json candidates = json::array();
  for (const AdviseCandidate &c : r.candidates) {
    json j = {{"setup", c.label()},
              {"stage", c.stage},
              {"offload_optimizer", c.offloadOptimizer},
              {"offload_param", c.offloadParam},
              {"reduce_bucket_size", c.reduceBucketSize}};
    if (c.prefetchBucketSize)
      j["stage3_prefetch_bucket_size"] = c.prefetchBucketSize;
    if (!c.error.empty()) {
      j["error"] = c.error;
    } else {
      j["fits"] = c.fits;
      j["peak_device_bytes"] = c.peakDeviceBytes;
      j["host_bytes"] = c.hostBytes;
      j["predicted_step_time_s"] = c.stepSeconds;
      j["exposed_comm_s"] = c.exposedCommSeconds;
      j["comm_bytes_per_rank_per_step"] = c.commBytesPerStep;
      j["achieved_tflops_per_gpu"] = c.tflopsPerGpu;
    }
    candidates.push_back(std::move(j));
  }
  json out = {{"cluster", r.cluster},
              {"world_size", r.worldSize},
              {"gpu_memory_bytes", r.gpuMemoryBytes},
              {"candidates", std::move(candidates)},
              {"reasons", r.reasons}};
  if (r.best) {
    out["recommended"] = r.candidates[*r.best].label();
    out["recommended_config"] = r.candidates[*r.best].launchConfig;
    out["recommended_resolved_config"] = r.candidates[*r.best].deepSpeedConfig;
  }
  return out;
}

} // namespace zeroc
