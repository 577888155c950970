//===- Advise.cpp - Which ZeRO setup suits this model on this cluster -----===//
//
// The search (docs/advise.md), compiling as little as it can:
//
// 1. A stage below 3 keeps every parameter on every GPU: where those alone
//    exceed what fits, the stage is ruled out without compiling.
// 2. Probes: each (stage, offload) is compiled with full recomputation at
//    the smallest micro-batch, most offloaded first. What does not fit
//    there rules out that offload and every lesser one of the stage, with
//    every policy and micro-batch: they keep more on the GPU.
// 3. Groups: each (stage, offload, recomputation), the policies that keep
//    most first, the pairs with the fastest optimizer step first. A group
//    is ruled out without compiling when a group that keeps less did not
//    fit at the smallest micro-batch, when what `zeroc stats` says its
//    policy keeps for backward does not fit beside the model states, or
//    when its compute and optimizer step alone cannot beat the fastest so
//    far (SpeedBounds). Otherwise it is compiled at the two smallest
//    micro-batches, side by side, and the larger ones are derived from the
//    two plans (Estimate.h) up to the first that does not fit.
// 4. The fastest candidate is compiled if it was an estimate, until the
//    fastest is exact; then its bucket and prefetch sizes are varied
//    (compiled).
// 5. Where the base config does not fit, the ways out are the fitting
//    candidates whose changed levers include no other fitting candidate's,
//    each compiled.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Advise/Advise.h"

#include "zeroc/Advise/Estimate.h"
#include "zeroc/Config/DeepSpeedConfig.h"
#include "zeroc/Cost/FitCheck.h"
#include "zeroc/Cost/Simulator.h"
#include "zeroc/Cost/WhatIf.h"
#include "zeroc/Pipeline/Pipeline.h"
#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Support/Format.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Threading.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

using nlohmann::json;

namespace zeroc {

//===----------------------------------------------------------------------===//
// Setups and levers
//===----------------------------------------------------------------------===//

namespace {

std::string offloadText(const AdviseSetup &s) {
  if (s.offloadParam != "none")
    return s.offloadOptimizer == s.offloadParam
               ? "optimizer and parameters on " + s.offloadOptimizer
               : "optimizer on " + s.offloadOptimizer + ", parameters on " +
                     s.offloadParam;
  if (s.offloadOptimizer != "none")
    return "optimizer on " + s.offloadOptimizer;
  return "no offload";
}

std::string recomputeText(const RecomputePolicy &r) {
  if (r.mode == RecomputeMode::None)
    return "no recompute";
  return r.describe().insert(std::string(recomputeModeName(r.mode)).size(),
                             " recompute");
}

std::string batchText(const AdviseSetup &s) {
  return "micro-batch " + std::to_string(s.microBatch) + " x " +
         std::to_string(s.gradientAccumulation) + " accumulation step" +
         (s.gradientAccumulation == 1 ? "" : "s");
}

std::string bucketText(const AdviseSetup &s) {
  std::string t = "reduce bucket " + humanCount(double(s.reduceBucketSize));
  if (s.stage == 3)
    t += ", prefetch " + humanCount(double(s.prefetchBucketSize));
  return t;
}

/// Whether recomputing with `a` keeps at least what `b` keeps for
/// backward: none keeps everything; every k-th layer keeps more than every
/// j-th when j divides k; full recomputation of every layer keeps least.
bool keepsAtLeast(const RecomputePolicy &a, const RecomputePolicy &b) {
  if (a == b || a.mode == RecomputeMode::None)
    return true;
  if (b.mode == RecomputeMode::None)
    return false;
  if (b.mode == RecomputeMode::Full && b.every == 1)
    return true;
  return a.mode == b.mode && a.every % b.every == 0;
}

} // namespace

std::string AdviseSetup::label() const {
  std::string s = "stage " + std::to_string(stage);
  if (offloadOptimizer != "none" || offloadParam != "none")
    s += ", " + offloadText(*this);
  s += ", " + recomputeText(recompute) + ", " + batchText(*this) + ", " +
       bucketText(*this);
  return s;
}

bool AdviseSetup::sameButBatch(const AdviseSetup &o) const {
  return stage == o.stage && offloadOptimizer == o.offloadOptimizer &&
         offloadParam == o.offloadParam && recompute == o.recompute &&
         reduceBucketSize == o.reduceBucketSize &&
         prefetchBucketSize == o.prefetchBucketSize;
}

std::vector<std::pair<int64_t, int64_t>>
batchLevels(const AdviseBase &base, const AdviseBounds &bounds) {
  std::set<int64_t> micros;
  for (int64_t m = 1; m <= bounds.maxMicroBatch; m *= 2)
    micros.insert(m);
  micros.insert(base.setup.microBatch);
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t perRank =
      base.setup.microBatch * base.setup.gradientAccumulation; // sequences
  for (int64_t m : micros) {
    if (!base.globalBatchFixed)
      out.push_back({m, base.setup.gradientAccumulation});
    else if (m <= perRank && perRank % m == 0)
      out.push_back({m, perRank / m});
  }
  return out;
}

std::vector<RecomputePolicy> recomputeLevels(const AdviseBounds &bounds) {
  std::vector<RecomputePolicy> out = {{RecomputeMode::None, 1},
                                      {RecomputeMode::Full, 1},
                                      {RecomputeMode::Selective, 1}};
  for (int64_t every : {2, 4})
    if (every < bounds.numLayers)
      out.push_back({RecomputeMode::Full, every});
  return out;
}

std::vector<std::pair<std::string, std::string>> offloadLevels(int stage) {
  std::vector<std::pair<std::string, std::string>> out = {{"none", "none"}};
  if (stage >= 1)
    out.push_back({"cpu", "none"});
  if (stage == 3)
    out.push_back({"cpu", "cpu"});
  return out;
}

std::vector<AdviseSetup> leverSpace(const AdviseBase &base,
                                    const AdviseBounds &bounds) {
  std::vector<AdviseSetup> out;
  for (int stage = 0; stage <= 3; ++stage)
    for (const auto &[optimizer, param] : offloadLevels(stage))
      for (const RecomputePolicy &recompute : recomputeLevels(bounds))
        for (auto [micro, accumulation] : batchLevels(base, bounds)) {
          AdviseSetup s;
          s.stage = stage;
          s.offloadOptimizer = optimizer;
          s.offloadParam = param;
          s.recompute = recompute;
          s.microBatch = micro;
          s.gradientAccumulation = accumulation;
          s.reduceBucketSize = base.setup.reduceBucketSize;
          s.prefetchBucketSize = stage == 3 ? base.prefetchBucketSize : 0;
          out.push_back(s);
        }
  return out;
}

std::vector<AdviseChange> changedLevers(const AdviseSetup &s,
                                        const AdviseSetup &base) {
  std::vector<AdviseChange> out;
  if (s.stage != base.stage)
    out.push_back({AdviseLever::Stage, "stage " + std::to_string(s.stage)});
  if (s.offloadOptimizer != base.offloadOptimizer ||
      s.offloadParam != base.offloadParam)
    out.push_back({AdviseLever::Offload, offloadText(s)});
  if (s.recompute != base.recompute)
    out.push_back({AdviseLever::Recompute, recomputeText(s.recompute)});
  if (s.microBatch != base.microBatch ||
      s.gradientAccumulation != base.gradientAccumulation)
    out.push_back({AdviseLever::Batch, batchText(s)});
  // Prefetch sizes are stage 3's; a change of stage alone is no change of
  // prefetch.
  bool prefetchChanged = s.stage == 3 && base.stage == 3 &&
                         s.prefetchBucketSize != base.prefetchBucketSize;
  if (s.reduceBucketSize != base.reduceBucketSize || prefetchChanged)
    out.push_back({AdviseLever::Buckets, bucketText(s)});
  return out;
}

//===----------------------------------------------------------------------===//
// The margin
//===----------------------------------------------------------------------===//

std::string AdviseMargin::describe() const {
  if (bytes)
    return humanBytes(*bytes);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", fraction * 100);
  return buf;
}

Expected<AdviseMargin> parseAdviseMargin(const std::string &text) {
  auto fail = [&](const std::string &why) -> Expected<AdviseMargin> {
    return Diagnostic{"", 0, 0,
                      "--margin " + why + ", found '" + text +
                          "'; give a share of the GPU budget (5%, 0.05) or "
                          "a size (2GiB, 512MiB)"};
  };
  llvm::StringRef s = llvm::StringRef(text).trim();
  if (s.empty())
    return fail("is empty");
  // The number, then its unit.
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(s.str(), &end);
  } catch (...) {
    return fail("is not a number");
  }
  if (!std::isfinite(value))
    return fail("is not a finite number");
  if (value < 0)
    return fail("must not be negative");
  llvm::StringRef unit = s.drop_front(end).trim();
  AdviseMargin margin;
  if (unit == "%") {
    margin.fraction = value / 100;
  } else if (unit.empty()) {
    if (value >= 1)
      return fail("without a unit is a share of the budget, below 1");
    margin.fraction = value;
  } else {
    static const std::pair<const char *, double> units[] = {
        {"B", 1.0},
        {"KiB", 1024.0},
        {"MiB", 1024.0 * 1024},
        {"GiB", 1024.0 * 1024 * 1024},
        {"TiB", 1024.0 * 1024 * 1024 * 1024},
        {"KB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12}};
    const double *scale = nullptr;
    for (const auto &[name, factor] : units)
      if (unit.equals_insensitive(name))
        scale = &factor;
    if (!scale)
      return fail("has an unknown unit '" + unit.str() + "'");
    margin.bytes = value * *scale;
  }
  if (!margin.bytes && margin.fraction >= 1)
    return fail("leaves nothing of the budget");
  return margin;
}

//===----------------------------------------------------------------------===//
// Configs
//===----------------------------------------------------------------------===//

namespace {

bool isAutoValue(const json &v) { return v.is_string() && v == "auto"; }

/// What advise assumes where the base config says nothing: the precision
/// is the model file's (fp16/bf16 "enabled": "auto").
void addPrecisionDefaults(json &cfg) {
  for (const char *precision : {"bf16", "fp16"})
    if (!cfg.contains(precision))
      cfg[precision] = {{"enabled", "auto"}};
}

/// The base config with the setup's levers written over it. With `launch`,
/// the config to launch with: only what changed is written, and a
/// micro-batch or accumulation the base leaves "auto" stays "auto" (the
/// launcher fills it: launchInstructions). Without, the config to compile
/// the setup with: the batch triple explicit.
json configFor(const json &baseRoot, const AdviseBase &base,
               const AdviseSetup &c, bool launch) {
  json cfg = baseRoot.is_object() ? baseRoot : json::object();
  json &zero = cfg["zero_optimization"];
  if (!zero.is_object())
    zero = json::object();
  const AdviseSetup &b = base.setup;
  // Keys the candidate decides, and their deprecated spellings, go; so do
  // the keys of stage 3 (stage3_*, and their prefix-less aliases) below
  // stage 3, where DeepSpeed reads none of them.
  for (const char *key : {"stage", "offload_optimizer", "offload_param",
                          "cpu_offload", "cpu_offload_param"})
    zero.erase(key);
  bool reduceChanged = c.reduceBucketSize != b.reduceBucketSize;
  bool prefetchChanged =
      c.stage == 3 && c.prefetchBucketSize != base.prefetchBucketSize;
  if (!launch || reduceChanged)
    zero.erase("reduce_bucket_size");
  if (!launch || prefetchChanged || c.stage < 3) {
    zero.erase("stage3_prefetch_bucket_size");
    zero.erase("prefetch_bucket_size");
  }
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
  if (!launch || reduceChanged)
    zero["reduce_bucket_size"] = c.reduceBucketSize;
  if (c.offloadOptimizer != "none") {
    json block = baseRoot.value("zero_optimization", json::object())
                     .value("offload_optimizer", json::object());
    if (!block.is_object())
      block = json::object();
    block["device"] = c.offloadOptimizer;
    zero["offload_optimizer"] = block;
  }
  if (c.offloadParam != "none") {
    json block = baseRoot.value("zero_optimization", json::object())
                     .value("offload_param", json::object());
    if (!block.is_object())
      block = json::object();
    block["device"] = c.offloadParam;
    zero["offload_param"] = block;
  }
  if (c.stage == 3 && (!launch || prefetchChanged))
    zero["stage3_prefetch_bucket_size"] = c.prefetchBucketSize;

  // The batch.
  if (!launch) {
    cfg["train_micro_batch_size_per_gpu"] = c.microBatch;
    cfg["gradient_accumulation_steps"] = c.gradientAccumulation;
    cfg["train_batch_size"] =
        c.microBatch * c.gradientAccumulation * base.worldSize;
  } else {
    bool microChanged = c.microBatch != b.microBatch;
    bool accChanged = c.gradientAccumulation != b.gradientAccumulation;
    bool anyBatchKey = cfg.contains("train_batch_size") ||
                       cfg.contains("train_micro_batch_size_per_gpu") ||
                       cfg.contains("gradient_accumulation_steps");
    auto write = [&](const char *key, int64_t value, bool changed) {
      const json *v = cfg.contains(key) ? &cfg[key] : nullptr;
      if (v && isAutoValue(*v))
        return; // The launcher's: launchInstructions says what to pass.
      if (changed || v || !anyBatchKey)
        cfg[key] = value;
    };
    write("train_micro_batch_size_per_gpu", c.microBatch, microChanged);
    write("gradient_accumulation_steps", c.gradientAccumulation, accChanged);
    // A train_batch_size that is a number stays: it fixes the global batch,
    // which every candidate keeps.
  }

  // Recomputation: the config says only full recomputation of every layer
  // (its activation_checkpointing block); the compile takes the policy
  // from the launcher's arguments (LauncherArgs::recompute).
  if (c.recompute == RecomputePolicy{RecomputeMode::Full, 1}) {
    if (!cfg.contains("activation_checkpointing"))
      cfg["activation_checkpointing"] = {
          {"partition_activations", false},
          {"contiguous_memory_optimization", false},
          {"cpu_checkpointing", false}};
  } else {
    cfg.erase("activation_checkpointing");
  }
  addPrecisionDefaults(cfg);
  return cfg;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 1 ? "%.1f ms" : "%.2f s",
                s < 1 ? s * 1e3 : s);
  return buf;
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100.0 * x);
  return buf;
}

std::string tokens(double perSecond) {
  return groupDigits(int64_t(std::llround(perSecond)));
}

/// "one rank 10% slower 1.23 s (+4.0%), inter-node bandwidth x0.5 1.50 s
/// (+27.1%)": the sensitivity of a candidate's step.
std::string sensitivityText(const AdviseCandidate &c) {
  auto change = [&](double step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%+.1f%%)",
                  100 * (step / c.stepSeconds - 1));
    return seconds(step) + buf;
  };
  char text[96];
  std::snprintf(text, sizeof text, "one rank %g%% slower ",
                100 * (kSensitivityStraggler - 1));
  std::string out = text;
  out +=
      c.stragglerStepSeconds ? change(*c.stragglerStepSeconds) : "- (one rank)";
  std::snprintf(text, sizeof text, ", inter-node bandwidth x%g ",
                kSensitivityInterNodeBandwidth);
  return out + text + change(c.slowNetworkStepSeconds);
}

} // namespace

Expected<AdviseBase> readAdviseBase(const AdviseRequest &req) {
  AdviseBase base;
  base.worldSize = req.worldSize ? req.worldSize : req.cluster->gpus();
  const json original = req.baseConfig && req.baseConfig->root().is_object()
                            ? req.baseConfig->root()
                            : json::object();
  LauncherArgs launcher{req.microBatch, req.gradientAccumulation, {}};
  bool noBatch = !original.contains("train_batch_size") &&
                 !original.contains("train_micro_batch_size_per_gpu");
  if (req.baseConfig) {
    // The base's own errors, at its own lines (a missing batch is the
    // launcher's, below).
    LauncherArgs own = launcher;
    if (noBatch && !own.microBatch)
      own.microBatch = req.stats->batch;
    auto cfg =
        readConfigForModel(*req.baseConfig, *req.stats, base.worldSize, own);
    if (!cfg)
      return cfg.error();
  }
  // No batch at all: the launcher's micro-batch ("auto"); no precision:
  // the model file's (as every candidate's config has it).
  json root = original;
  if (noBatch)
    root["train_micro_batch_size_per_gpu"] = "auto";
  addPrecisionDefaults(root);
  auto doc = JsonDocument::parse(
      root.dump(2), req.baseConfig ? req.baseConfig->name() : "(advise)");
  if (!doc)
    return doc.error();
  auto cfg = readConfigForModel(*doc, *req.stats, base.worldSize, launcher);
  if (!cfg)
    return cfg.error();
  base.trainingDType = trainingDType(*cfg);
  AdviseSetup &s = base.setup;
  s.stage = cfg->zero.stage;
  s.offloadOptimizer =
      std::string(offloadDeviceName(cfg->zero.offloadOptimizer.device));
  s.offloadParam =
      cfg->zero.stage == 3
          ? std::string(offloadDeviceName(cfg->zero.offloadParam.device))
          : "none";
  s.recompute = cfg->recompute;
  s.microBatch = cfg->microBatchPerGpu;
  s.gradientAccumulation = cfg->gradientAccumulationSteps;
  s.reduceBucketSize = cfg->zero.reduceBucketSize;
  s.prefetchBucketSize = s.stage == 3 ? cfg->zero.prefetchBucketSize : 0;
  base.prefetchBucketSize = cfg->zero.prefetchBucketSize;

  // What the base itself says, before the defaults above.
  auto given = [&](const char *key, const std::optional<int64_t> &flag,
                   bool &isAuto) {
    const json *v = original.contains(key) ? &original[key] : nullptr;
    isAuto = v && isAutoValue(*v);
    return (v && v->is_number()) || ((!v || isAuto || v->is_null()) && flag);
  };
  bool microGiven = given("train_micro_batch_size_per_gpu", req.microBatch,
                          base.microBatchAuto);
  bool accGiven = given("gradient_accumulation_steps", req.gradientAccumulation,
                        base.accumulationAuto);
  std::string configName = req.baseConfig ? req.baseConfig->name() : "";
  if (original.contains("train_batch_size") &&
      original["train_batch_size"].is_number()) {
    base.globalBatchFixed = true;
    base.globalBatchReason = "train_batch_size in " + configName;
  } else if (microGiven && accGiven) {
    base.globalBatchFixed = true;
    base.globalBatchReason =
        "the micro-batch and the accumulation steps of " +
        (configName.empty() ? std::string("the command line")
                            : configName + " and the command line");
  } else {
    base.globalBatchReason =
        "no train_batch_size, nor both a micro-batch and accumulation "
        "steps, in " +
        (configName.empty() ? std::string("a config") : configName) +
        " or on the command line (--micro-batch, --grad-accum)";
  }
  return base;
}

//===----------------------------------------------------------------------===//
// The search
//===----------------------------------------------------------------------===//

double AdviseCandidate::worstStepSeconds() const {
  return std::max(
      {stepSeconds, stragglerStepSeconds.value_or(0), slowNetworkStepSeconds});
}

double AdviseCandidate::robustTokensPerSecond() const {
  double worst = worstStepSeconds();
  return worst > 0 ? tokensPerSecond * stepSeconds / worst : 0;
}

double rankingTokensPerSecond(const AdviseCandidate &c, bool robust) {
  return robust ? c.robustTokensPerSecond() : c.tokensPerSecond;
}

std::optional<size_t> recommend(const std::vector<AdviseCandidate> &candidates,
                                bool robust) {
  auto usable = [](const AdviseCandidate &c) {
    return c.error.empty() && c.fits;
  };
  std::optional<double> fastest;
  for (const AdviseCandidate &c : candidates)
    if (usable(c) && (!fastest || rankingTokensPerSecond(c, robust) > *fastest))
      fastest = rankingTokensPerSecond(c, robust);
  if (!fastest)
    return std::nullopt;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (usable(candidates[i]) &&
        rankingTokensPerSecond(candidates[i], robust) >=
            *fastest / (1 + kAdviseTieFraction))
      return i;
  return std::nullopt;
}

namespace {

/// The order of the table: stage, offload, recomputation, micro-batch,
/// buckets, as the lever space enumerates them.
struct TableOrder {
  const AdviseBounds &bounds;
  std::tuple<int, size_t, size_t, int64_t, int64_t, int64_t>
  key(const AdviseSetup &s) const {
    auto offloads = offloadLevels(s.stage);
    size_t offload = llvm::find(offloads, std::make_pair(s.offloadOptimizer,
                                                         s.offloadParam)) -
                     offloads.begin();
    auto policies = recomputeLevels(bounds);
    size_t recompute = llvm::find(policies, s.recompute) - policies.begin();
    return {s.stage,
            offload,
            recompute,
            s.microBatch,
            s.reduceBucketSize,
            s.prefetchBucketSize};
  }
  bool operator()(const AdviseCandidate &a, const AdviseCandidate &b) const {
    return key(a) < key(b);
  }
};

/// What bounds a group's speed before it is compiled: the micro-step's
/// compute ops (the same for every stage and offload with one
/// recomputation policy) and the optimizer step (the same for every
/// recomputation policy and micro-batch with one stage and offload).
/// A group is ruled out as too slow when its bound falls below this share
/// of the fastest so far, which may be an estimate.
constexpr double kBoundSlack = 0.98;

struct SpeedBounds {
  /// Per recomputation policy (its describe()): micro-batch -> seconds of
  /// compute ops on the compute stream in one micro-step.
  std::map<std::string, std::map<int64_t, double>> compute;
  /// Per (stage, offload): seconds of the optimizer step.
  std::map<std::pair<int, std::string>, double> optimizer;

  /// Whether each compute op's time is convex in the micro-batch: on the
  /// datasheet roofline (each op the larger of two affine terms) it is; at
  /// calibrated rates it need not be (bf16 GEMMs of side 64 to 1024 took 19-22
  /// us a call on an H100, bound by the host's issue; a CPU's one-thread
  /// rates below the parallel threshold), and the line through two
  /// micro-batches overestimates a larger one's time: GPT-2 124M on one
  /// H100, stage 1 at micro-batch 8 was bounded at 158K tokens/s and
  /// compiles at 168K.
  bool convex = true;

  /// A lower bound of the compute seconds of a micro-step at `micro`, from
  /// the compiled points. Each op's time grows with the micro-batch (no
  /// calibrated product is priced faster than a smaller class's call,
  /// calibratedMatmulRate) and at most in proportion to it (its FLOPs and
  /// bytes are a part proportional to the micro-batch plus a part that is
  /// not, and no rate falls as the work grows): from each point (m, t), t
  /// at a larger micro-batch and t x micro / m at a smaller one. Convex
  /// times also lie above the line through the two nearest points outside
  /// them (not between them, where the chord is above).
  std::optional<double> computeAt(const RecomputePolicy &policy,
                                  int64_t micro) const {
    auto it = compute.find(policy.describe());
    if (it == compute.end() || it->second.empty())
      return std::nullopt;
    const std::map<int64_t, double> &points = it->second;
    if (auto exact = points.find(micro); exact != points.end())
      return exact->second;
    double bound = 0;
    for (auto [m, t] : points)
      bound = std::max(bound, micro > m ? t : t * double(micro) / double(m));
    if (convex && points.size() >= 2) {
      auto line = [&](auto lo, auto hi) {
        double slope =
            (hi->second - lo->second) / double(hi->first - lo->first);
        return lo->second + slope * double(micro - lo->first);
      };
      if (micro > points.rbegin()->first)
        bound = std::max(
            bound, line(std::prev(points.end(), 2), std::prev(points.end())));
      else if (micro < points.begin()->first)
        bound =
            std::max(bound, line(points.begin(), std::next(points.begin())));
    }
    return bound;
  }
};

/// The more offloaded, the higher: what does not fit at some level does
/// not fit at a lower one.
size_t offloadRank(const AdviseSetup &s) {
  return (s.offloadOptimizer != "none") + (s.offloadParam != "none");
}

class Search {
public:
  Search(const AdviseRequest &req, AdviseResult &result)
      : req(req), result(result),
        baseRoot(req.baseConfig ? req.baseConfig->root() : json::object()) {
    bounds.maxMicroBatch = req.maxMicroBatch;
    bounds.numLayers = req.stats->numLayers;
    speed.convex = !req.cluster->calibration.any();
  }

  void run();

private:
  struct Compiled {
    std::optional<Plan> plan;
    std::string error;
  };

  Compiled compileOne(const AdviseSetup &s) const;
  /// Compiles side by side.
  std::vector<Compiled> compileAll(const std::vector<AdviseSetup> &setups);
  AdviseCandidate candidateOf(const AdviseSetup &s, const Plan &plan,
                              bool exact);
  std::vector<AdviseCandidate>
  compileCandidates(const std::vector<AdviseSetup> &setups,
                    std::vector<std::optional<Plan>> *keep = nullptr);
  AdviseCandidate compileCandidate(const AdviseSetup &s,
                                   std::optional<Plan> *keep = nullptr);
  bool fitsGpu(const AdviseCandidate &c) const {
    return c.error.empty() && c.peakDeviceBytes <= result.fitBytes;
  }
  AdviseSetup groupSetup(int stage,
                         const std::pair<std::string, std::string> &offload,
                         const RecomputePolicy &policy, size_t batch) const;
  /// Evaluates one (stage, offload, recomputation) over the micro-batches,
  /// from its plan at the smallest when `first` has it.
  void evaluateGroup(const AdviseSetup &group, std::optional<Plan> first);
  /// A stage below 3 whose parameters alone do not fit.
  bool ruleOutStage(int stage);
  /// Why `group` cannot fit, from what did not; nothing if it may.
  std::optional<std::string> cannotFit(const AdviseSetup &group) const;
  /// Why `group` cannot be faster than the fastest so far; nothing if it
  /// may.
  /// Why `group` cannot beat the fastest so far, with the bound in `most`.
  std::optional<std::string> cannotWin(const AdviseSetup &group,
                                       double &most) const;
  void confirmBest();
  /// Evaluates the groups ruled out as too slow whose bound reaches the
  /// recommendation after all: they were compared with the fastest found
  /// then, which may have been an estimate since compiled slower.
  void revisitTooSlow();
  void varyBuckets();
  void findWaysOut();
  void explainStages();
  std::optional<size_t> find(const AdviseSetup &s) const {
    for (size_t i = 0; i < result.candidates.size(); ++i)
      if (static_cast<const AdviseSetup &>(result.candidates[i]) == s)
        return i;
    return std::nullopt;
  }
  void add(AdviseCandidate c) {
    if (auto i = find(c)) {
      if (c.exact || !result.candidates[*i].exact)
        result.candidates[*i] = std::move(c);
      return;
    }
    result.candidates.push_back(std::move(c));
  }
  /// Replaces an estimated candidate by its compiled figures.
  void makeExact(size_t i) {
    if (result.candidates[i].exact)
      return;
    AdviseSetup s = result.candidates[i];
    result.candidates[i] = compileCandidate(s);
  }
  void sortTable() {
    std::stable_sort(result.candidates.begin(), result.candidates.end(),
                     TableOrder{bounds});
  }

  const AdviseRequest &req;
  AdviseResult &result;
  json baseRoot;
  AdviseBounds bounds;
  std::vector<std::pair<int64_t, int64_t>> batches;
  std::vector<AdviseSetup> waysOut; ///< Found before the table is sorted.
  SpeedBounds speed;
  /// The groups ruled out as too slow (their entries in result.pruned
  /// carry the bound and name them by `what`).
  struct TooSlow {
    AdviseSetup group;
    std::string what;
    double most;
  };
  std::vector<TooSlow> tooSlow;
  /// Groups that do not fit at the smallest micro-batch.
  struct NoFit {
    AdviseSetup group;
    int64_t peak;
  };
  std::vector<NoFit> noFit;
  /// Model-state bytes on the GPU per (stage, offload): the same for every
  /// policy and micro-batch.
  std::map<std::pair<int, std::string>, int64_t> modelStates;
  /// What `policy` keeps for backward at least at `micro`, if known.
  std::optional<int64_t> keptAtLeast(const RecomputePolicy &policy,
                                     int64_t micro) const;
};

Search::Compiled Search::compileOne(const AdviseSetup &s) const {
  Compiled out;
  json cfgJson = configFor(baseRoot, result.base, s, /*launch=*/false);
  auto doc = JsonDocument::parse(cfgJson.dump(2),
                                 req.baseConfig ? req.baseConfig->name()
                                                : std::string("(advise)"));
  if (!doc) {
    out.error = doc.error().message;
    return out;
  }
  LauncherArgs launcher;
  launcher.recompute = s.recompute;
  auto cfg = readConfigForModel(*doc, *req.stats, result.worldSize, launcher);
  if (!cfg) {
    out.error = cfg.error().message;
    return out;
  }
  mlir::ModuleOp model = req.model;
  mlir::OwningOpRef<mlir::ModuleOp> module = model.clone();
  // Compiles run side by side: each takes the errors of its own thread.
  std::string diagnostics;
  std::thread::id self = std::this_thread::get_id();
  mlir::ScopedDiagnosticHandler handler(
      module->getContext(), [&](mlir::Diagnostic &d) {
        if (std::this_thread::get_id() != self)
          return mlir::failure();
        if (d.getSeverity() == mlir::DiagnosticSeverity::Error &&
            diagnostics.empty())
          diagnostics = d.str();
        return mlir::success();
      });
  mlir::FailureOr<Plan> plan = compilePlan(*module, *req.stats, *cfg);
  if (mlir::failed(plan)) {
    out.error =
        diagnostics.empty() ? "the pipeline or the plan failed" : diagnostics;
    return out;
  }
  out.plan = std::move(*plan);
  return out;
}

std::vector<Search::Compiled>
Search::compileAll(const std::vector<AdviseSetup> &setups) {
  std::vector<Compiled> out(setups.size());
  mlir::ModuleOp model = req.model;
  // On the context's threads (one per core; none with
  // --mlir-disable-threading).
  mlir::parallelFor(model.getContext(), 0, setups.size(),
                    [&](size_t i) { out[i] = compileOne(setups[i]); });
  result.compiled += int64_t(setups.size());
  return out;
}

AdviseCandidate Search::candidateOf(const AdviseSetup &s, const Plan &plan,
                                    bool exact) {
  AdviseCandidate c;
  static_cast<AdviseSetup &>(c) = s;
  c.exact = exact;
  MemorySummary memory = summarizeMemory(plan);
  c.peakDeviceBytes = memory.peakDeviceBytes;
  c.hostBytes = memory.hostPinnedBytes + memory.hostPageableBytes;
  // Every memory: the GPU's budget less the margin, the node's host memory
  // over its ranks, its NVMe (FitCheck.h).
  if (auto refusal = checkNodeFit(plan, *req.cluster))
    c.nodeRefusal = refusal->substr(0, refusal->find('\n'));
  c.fits = c.peakDeviceBytes <= result.fitBytes && c.nodeRefusal.empty();
  auto prediction = predictStep(plan, *req.cluster);
  if (!prediction) {
    c.error = prediction.error().message;
    c.fits = false;
    return c;
  }
  c.stepSeconds = prediction->stepSeconds;
  c.exposedCommSeconds = prediction->exposedComm;
  c.exposedOffloadSeconds = prediction->exposedOffload;
  c.tflopsPerGpu = prediction->achievedTflopsPerGpu;
  c.tokensPerSecond = prediction->tokensPerSecond;
  c.commBytesPerStep =
      plan.comm.total() * double(bytesPerElement(plan.model.dtype));
  // Sensitivity: the same plan under WhatIf.h's scenarios.
  for (const WhatIfScenario &scenario : sensitivityScenarios()) {
    bool straggler = scenario.kind == WhatIfScenario::Kind::Straggler;
    if (straggler && plan.worldSize < 2)
      continue;
    auto perturbed = predictScenario(plan, *req.cluster, scenario);
    if (!perturbed) {
      c.error = scenario.spec + ": " + perturbed.error().message;
      c.fits = false;
      return c;
    }
    if (straggler)
      c.stragglerStepSeconds = perturbed->stepSeconds;
    else
      c.slowNetworkStepSeconds = perturbed->stepSeconds;
  }
  c.deepSpeedConfig = plan.config;
  c.deepSpeedBuckets = deepSpeedBucketBuffers(plan);
  c.launchConfig = configFor(baseRoot, result.base, s, /*launch=*/true);
  if (!exact)
    return c;
  modelStates[{s.stage, offloadText(s)}] = memory.modelStateBytes();
  // What bounds other groups' speed (SpeedBounds).
  for (const PhaseTimeline &phase : prediction->phases) {
    const PlanPhase *planned = plan.findPhase(phase.kind);
    if (phase.kind == PhaseKind::OptimizerStep) {
      speed.optimizer[{s.stage, offloadText(s)}] =
          phase.seconds * double(phase.runsPerStep);
      continue;
    }
    if (!planned || planned->ops.size() != phase.ops.size())
      continue;
    double compute = 0;
    for (size_t i = 0; i < phase.ops.size(); ++i) {
      const OpTiming &t = phase.ops[i];
      if (t.cls == OpClass::Compute && t.stream == prediction->computeStream &&
          t.flops > 0 && planned->ops[i].kind != OpKind::Accumulate)
        compute += t.end - t.start;
    }
    speed.compute[s.recompute.describe()][s.microBatch] = compute;
  }
  return c;
}

std::vector<AdviseCandidate>
Search::compileCandidates(const std::vector<AdviseSetup> &setups,
                          std::vector<std::optional<Plan>> *keep) {
  std::vector<Compiled> compiled = compileAll(setups);
  std::vector<AdviseCandidate> out;
  if (keep)
    keep->assign(setups.size(), std::nullopt);
  for (size_t i = 0; i < setups.size(); ++i) {
    if (!compiled[i].plan) {
      AdviseCandidate c;
      static_cast<AdviseSetup &>(c) = setups[i];
      c.exact = true;
      c.error = compiled[i].error;
      out.push_back(std::move(c));
      continue;
    }
    out.push_back(candidateOf(setups[i], *compiled[i].plan, /*exact=*/true));
    if (keep)
      (*keep)[i] = std::move(compiled[i].plan);
  }
  return out;
}

AdviseCandidate Search::compileCandidate(const AdviseSetup &s,
                                         std::optional<Plan> *keep) {
  std::vector<std::optional<Plan>> plans;
  AdviseCandidate c = std::move(compileCandidates({s}, &plans).front());
  if (keep)
    *keep = std::move(plans.front());
  return c;
}

AdviseSetup
Search::groupSetup(int stage,
                   const std::pair<std::string, std::string> &offload,
                   const RecomputePolicy &policy, size_t batch) const {
  AdviseSetup s;
  s.stage = stage;
  s.offloadOptimizer = offload.first;
  s.offloadParam = offload.second;
  s.recompute = policy;
  s.microBatch = batches[batch].first;
  s.gradientAccumulation = batches[batch].second;
  s.reduceBucketSize = result.base.setup.reduceBucketSize;
  s.prefetchBucketSize = stage == 3 ? result.base.prefetchBucketSize : 0;
  return s;
}

void Search::evaluateGroup(const AdviseSetup &group, std::optional<Plan> a) {
  auto at = [&](size_t i) {
    AdviseSetup s = group;
    s.microBatch = batches[i].first;
    s.gradientAccumulation = batches[i].second;
    return s;
  };
  // The smallest two micro-batches, side by side (the second is wasted
  // when the first does not fit).
  std::optional<Plan> b;
  std::optional<size_t> first = find(at(0));
  if (!a || !first) {
    std::vector<AdviseSetup> setups = {at(0)};
    if (batches.size() > 1)
      setups.push_back(at(1));
    std::vector<std::optional<Plan>> plans;
    std::vector<AdviseCandidate> compiled = compileCandidates(setups, &plans);
    a = std::move(plans[0]);
    if (plans.size() > 1)
      b = std::move(plans[1]);
    for (AdviseCandidate &c : compiled)
      add(std::move(c));
    first = find(at(0));
  } else if (batches.size() > 1 && fitsGpu(result.candidates[*first])) {
    add(compileCandidate(at(1), &b));
  }
  if (!fitsGpu(result.candidates[*first])) {
    if (result.candidates[*first].error.empty())
      noFit.push_back({group, result.candidates[*first].peakDeviceBytes});
    return;
  }
  if (batches.size() == 1)
    return;
  std::optional<size_t> second = find(at(1));
  if (!second || !fitsGpu(result.candidates[*second]))
    return;
  bool derive = a && b && !sameScheduleAtTwoMicroBatches(*a, *b);
  // Larger micro-batches need more memory: the first that does not fit
  // ends the group.
  for (size_t i = 2; i < batches.size(); ++i) {
    AdviseSetup s = at(i);
    AdviseCandidate c =
        derive ? candidateOf(s,
                             interpolatePlan(*a, *b, s.microBatch,
                                             s.gradientAccumulation),
                             /*exact=*/false)
               : compileCandidate(s);
    bool fits = fitsGpu(c);
    add(std::move(c));
    if (!fits)
      break;
  }
}

bool Search::ruleOutStage(int stage) {
  // Below stage 3 every GPU holds every parameter in the training dtype.
  if (stage == 3)
    return false;
  double bytes = 2;
  if (auto dtype = parseDType(result.base.trainingDType))
    bytes = double(bytesPerElement(*dtype));
  double replica = double(req.stats->params) * bytes;
  if (replica <= double(result.fitBytes))
    return false;
  result.pruned.push_back(
      {stage, "stage " + std::to_string(stage),
       "every GPU holds all " + humanCount(double(req.stats->params)) +
           " parameters below stage 3: " + humanBytes(replica) + " in " +
           result.base.trainingDType + ", more than the " +
           humanBytes(double(result.fitBytes)) + " that fits"});
  return true;
}

std::optional<int64_t> Search::keptAtLeast(const RecomputePolicy &policy,
                                           int64_t micro) const {
  // Every value a backward op reads is live when the backward begins; with
  // no recomputation that is all `zeroc stats` counts as saved, with full
  // recomputation of every k-th layer at least what the other layers save.
  if (policy.mode == RecomputeMode::Selective ||
      (policy.mode == RecomputeMode::Full && policy.every == 1) ||
      req.stats->batch <= 0)
    return std::nullopt;
  int64_t bytes = 0;
  for (const LayerStats &layer : req.stats->layers) {
    std::optional<int64_t> index = layerNumber(layer.name);
    if (!index || !policy.checkpoints(*index))
      bytes += layer.savedBytes;
  }
  return bytes / req.stats->batch * micro;
}

std::optional<std::string> Search::cannotFit(const AdviseSetup &group) const {
  // Less offload keeps more on the GPU, and so does a policy that
  // recomputes less.
  for (const NoFit &n : noFit)
    if (n.group.stage == group.stage &&
        offloadRank(group) <= offloadRank(n.group) &&
        keepsAtLeast(group.recompute, n.group.recompute))
      return "keeps at least what " + n.group.label() + " keeps, which needs " +
             humanBytes(double(n.peak)) + " per GPU";
  auto states = modelStates.find({group.stage, offloadText(group)});
  std::optional<int64_t> kept =
      keptAtLeast(group.recompute, batches.front().first);
  if (states != modelStates.end() && kept &&
      states->second + *kept > result.fitBytes)
    return "keeps at least " + humanBytes(double(*kept)) +
           " for backward at micro-batch " +
           std::to_string(batches.front().first) +
           " (zeroc stats' saved bytes of the layers it does not recompute) "
           "beside " +
           humanBytes(double(states->second)) + " of model states";
  return std::nullopt;
}

std::optional<std::string> Search::cannotWin(const AdviseSetup &group,
                                             double &most) const {
  // A group's tokens per second at its worst step are at most its healthy
  // ones, so the bound below holds for --robust too.
  std::optional<size_t> best = recommend(result.candidates, req.robust);
  if (!best)
    return std::nullopt;
  double fastest = rankingTokensPerSecond(result.candidates[*best], req.robust);
  double optimizer = 0;
  if (auto it = speed.optimizer.find({group.stage, offloadText(group)});
      it != speed.optimizer.end())
    optimizer = it->second;
  // At most: every micro-step's compute ops and the optimizer step back to
  // back, nothing else, at the micro-batch that gives the most.
  most = 0;
  for (auto [micro, accumulation] : batches) {
    std::optional<double> compute = speed.computeAt(group.recompute, micro);
    if (!compute)
      return std::nullopt;
    double step = double(accumulation) * *compute + optimizer;
    if (step <= 0)
      return std::nullopt;
    most = std::max(
        most,
        double(micro * accumulation * result.worldSize * result.seqLen) / step);
  }
  // A little slack: the fastest so far may be an estimate.
  if (most >= fastest * kBoundSlack)
    return std::nullopt;
  return "at most " + tokens(most) +
         " tokens/s (its compute and optimizer step alone), below the " +
         tokens(fastest) + " of " + result.candidates[*best].label();
}

void Search::confirmBest() {
  // Compile the fastest until the fastest is exact: an estimate may be
  // off (docs/advise.md).
  for (int round = 0; round < 16; ++round) {
    std::optional<size_t> best = recommend(result.candidates, req.robust);
    if (!best || result.candidates[*best].exact)
      return;
    makeExact(*best);
  }
}

void Search::revisitTooSlow() {
  for (int round = 0; round < 4; ++round) {
    std::optional<size_t> best = recommend(result.candidates, req.robust);
    if (!best)
      return;
    // A group's tokens per second at its worst step are at most its
    // healthy ones: the bound holds for --robust's ranking too.
    double lead = rankingTokensPerSecond(result.candidates[*best], req.robust);
    auto reaches = [&](const TooSlow &t) {
      return t.most >= lead * kBoundSlack;
    };
    std::set<std::string> revisited;
    for (const TooSlow &t : tooSlow)
      if (reaches(t)) {
        evaluateGroup(t.group, std::nullopt);
        revisited.insert(t.what);
      }
    if (revisited.empty())
      return;
    llvm::erase_if(tooSlow, reaches);
    llvm::erase_if(result.pruned, [&](const AdvisePruned &p) {
      return revisited.count(p.what) > 0;
    });
    confirmBest();
  }
}

void Search::varyBuckets() {
  std::optional<size_t> best = recommend(result.candidates, req.robust);
  if (!best)
    return;
  // Around the fastest, and around each other stage's fastest whose
  // buckets could still put it ahead: at best they hide all it leaves
  // exposed (Advise.h; the --robust ranking is at most the healthy one).
  double lead = rankingTokensPerSecond(result.candidates[*best], req.robust);
  std::vector<AdviseSetup> arounds = {result.candidates[*best]};
  std::map<int, size_t> fastestOfStage;
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const AdviseCandidate &c = result.candidates[i];
    if (!c.fits || !c.error.empty() || c.stage == arounds.front().stage)
      continue;
    auto [at, inserted] = fastestOfStage.try_emplace(c.stage, i);
    if (!inserted &&
        rankingTokensPerSecond(c, req.robust) >
            rankingTokensPerSecond(result.candidates[at->second], req.robust))
      at->second = i;
  }
  for (const auto &[stage, i] : fastestOfStage) {
    const AdviseCandidate &c = result.candidates[i];
    double unhidden =
        c.stepSeconds - c.exposedCommSeconds - c.exposedOffloadSeconds;
    if (unhidden <= 0 ||
        c.tokensPerSecond * c.stepSeconds / unhidden >= lead * kBoundSlack)
      arounds.push_back(c);
  }
  std::vector<AdviseSetup> variants;
  for (const AdviseSetup &around : arounds) {
    // The step is not monotone in the reduce bucket where the last bucket's
    // reduction is exposed, so the grid has a middle point (docs/advise.md,
    // "Compiling as little as possible", step 4, has the figures).
    std::set<int64_t> reduces = {50000000, 200000000, 500000000,
                                 result.base.setup.reduceBucketSize};
    std::set<int64_t> prefetches = {0};
    if (around.stage == 3)
      prefetches = {5000000, 50000000, 200000000,
                    result.base.prefetchBucketSize};
    for (int64_t reduce : reduces)
      for (int64_t prefetch : prefetches) {
        AdviseSetup s = around;
        s.reduceBucketSize = reduce;
        s.prefetchBucketSize = prefetch;
        if (!find(s) && llvm::find(variants, s) == variants.end())
          variants.push_back(s);
      }
  }
  for (AdviseCandidate &c : compileCandidates(variants))
    add(std::move(c));
  result.bucketVariants += int64_t(variants.size());
}

void Search::findWaysOut() {
  std::optional<size_t> at = find(result.base.setup);
  if (!at) {
    // Outside the space (a micro-batch or bucket of its own) or ruled out
    // without compiling: the base is compiled, to say how far it is off.
    add(compileCandidate(result.base.setup));
    at = find(result.base.setup);
  }
  makeExact(*at);
  if (result.candidates[*at].fits)
    return;
  // The fitting candidates whose set of changed levers includes no other
  // fitting candidate's; per set, the fastest of each distinct change (the
  // same levers set to other values); fewest levers first, then the
  // fastest; five at most.
  auto maskOf = [&](const AdviseCandidate &c) {
    unsigned mask = 0;
    for (const AdviseChange &ch : changedLevers(c, result.base.setup))
      mask |= 1u << unsigned(ch.lever);
    return mask;
  };
  auto changeText = [&](const AdviseCandidate &c) {
    std::string text;
    for (const AdviseChange &ch : changedLevers(c, result.base.setup))
      text += ch.text + "\n";
    return text;
  };
  for (int round = 0; round < 8; ++round) {
    std::set<unsigned> masks;
    for (const AdviseCandidate &c : result.candidates)
      if (c.fits && c.error.empty())
        masks.insert(maskOf(c));
    std::map<std::string, size_t> fastestPerChange;
    for (size_t i = 0; i < result.candidates.size(); ++i) {
      const AdviseCandidate &c = result.candidates[i];
      if (!c.fits || !c.error.empty())
        continue;
      unsigned mask = maskOf(c);
      bool minimal = llvm::none_of(masks, [&](unsigned other) {
        return other != mask && (other & mask) == other;
      });
      if (!minimal)
        continue;
      auto [it, inserted] = fastestPerChange.insert({changeText(c), i});
      if (!inserted && rankingTokensPerSecond(c, req.robust) >
                           rankingTokensPerSecond(result.candidates[it->second],
                                                  req.robust) *
                               (1 + kAdviseTieFraction))
        it->second = i;
    }
    std::vector<size_t> ways;
    for (const auto &[text, i] : fastestPerChange)
      ways.push_back(i);
    std::stable_sort(ways.begin(), ways.end(), [&](size_t x, size_t y) {
      int nx = llvm::popcount(maskOf(result.candidates[x]));
      int ny = llvm::popcount(maskOf(result.candidates[y]));
      if (nx != ny)
        return nx < ny;
      return rankingTokensPerSecond(result.candidates[x], req.robust) >
             rankingTokensPerSecond(result.candidates[y], req.robust);
    });
    if (ways.size() > 5)
      ways.resize(5);
    std::vector<AdviseSetup> estimates;
    for (size_t i : ways)
      if (!result.candidates[i].exact)
        estimates.push_back(result.candidates[i]);
    if (!estimates.empty()) {
      for (AdviseCandidate &c : compileCandidates(estimates))
        add(std::move(c));
      continue;
    }
    for (size_t i : ways)
      waysOut.push_back(result.candidates[i]);
    return;
  }
}

void Search::explainStages() {
  for (int stage = 0; stage <= 3; ++stage) {
    const AdviseCandidate *fastest = nullptr, *smallest = nullptr;
    for (const AdviseCandidate &c : result.candidates) {
      if (c.stage != stage || !c.error.empty())
        continue;
      if (!smallest || c.peakDeviceBytes < smallest->peakDeviceBytes)
        smallest = &c;
      if (c.fits &&
          (!fastest || rankingTokensPerSecond(c, req.robust) >
                           rankingTokensPerSecond(*fastest, req.robust)))
        fastest = &c;
    }
    std::string s = "stage " + std::to_string(stage) + ": ";
    const AdvisePruned *pruned = nullptr;
    for (const AdvisePruned &p : result.pruned)
      if (p.stage == stage && p.what == "stage " + std::to_string(stage))
        pruned = &p;
    if (pruned && !smallest) {
      s += "does not fit: " + pruned->reason;
    } else if (!smallest) {
      s += "could not be planned";
    } else if (!fastest) {
      s += "does not fit: even " + smallest->label() + " needs " +
           humanBytes(double(smallest->peakDeviceBytes)) + " per GPU, " +
           humanBytes(double(result.fitBytes)) + " fits";
      if (!smallest->nodeRefusal.empty() &&
          smallest->peakDeviceBytes <= result.fitBytes)
        s += "; " + smallest->nodeRefusal;
    } else {
      // Setups of this stage ruled out as too slow may be faster than
      // those compiled: the line says so, and how fast they could be.
      double unseen = 0;
      int unseenGroups = 0;
      for (const AdvisePruned &p : result.pruned)
        if (p.stage == stage && p.tokensAtMost > fastest->tokensPerSecond) {
          unseen = std::max(unseen, p.tokensAtMost);
          ++unseenGroups;
        }
      s += std::string("fits; fastest ") + (unseenGroups ? "compiled " : "") +
           fastest->label() + ": " + tokens(fastest->tokensPerSecond) +
           " tokens/s, " + seconds(fastest->stepSeconds) + " per step, " +
           seconds(fastest->exposedCommSeconds) +
           " of it communication not hidden behind compute, " +
           humanBytes(fastest->commBytesPerStep) + " sent per rank; " +
           sensitivityText(*fastest);
      if (result.best) {
        const AdviseCandidate &best = result.candidates[*result.best];
        if (&best != fastest)
          s += " (" +
               percent(rankingTokensPerSecond(*fastest, req.robust) /
                           rankingTokensPerSecond(best, req.robust) -
                       1) +
               (req.robust ? " tokens/s at the worst step" : " tokens/s") +
               " against the recommendation)";
      }
      if (unseenGroups)
        s += "; not compiled: " + std::to_string(unseenGroups) +
             " setup group" + (unseenGroups == 1 ? "" : "s") +
             " of this stage, at most " + tokens(unseen) + " tokens/s by " +
             (unseenGroups == 1 ? "its" : "their") +
             " compute and optimizer step alone, too few to be recommended";
    }
    result.reasons.push_back(s);
  }
}

void Search::run() {
  batches = batchLevels(result.base, bounds);
  result.setupsInSpace = int64_t(leverSpace(result.base, bounds).size());
  // Probes: full recomputation at the smallest micro-batch, most offloaded
  // first. What does not fit there rules out its offload and less, with
  // every policy; each probe times its optimizer step (SpeedBounds).
  RecomputePolicy full{RecomputeMode::Full, 1};
  std::vector<int> stages;
  std::map<std::pair<int, std::string>, Plan> probes;
  for (int stage = 0; stage <= 3; ++stage) {
    if (ruleOutStage(stage))
      continue;
    stages.push_back(stage);
    auto offloads = offloadLevels(stage);
    for (auto it = offloads.rbegin(); it != offloads.rend(); ++it) {
      AdviseSetup group = groupSetup(stage, *it, full, 0);
      if (cannotFit(group))
        continue;
      std::optional<Plan> plan;
      AdviseCandidate probe = compileCandidate(group, &plan);
      bool fits = fitsGpu(probe);
      if (!fits && probe.error.empty())
        noFit.push_back({group, probe.peakDeviceBytes});
      add(std::move(probe));
      if (fits && plan)
        probes[{stage, offloadText(group)}] = std::move(*plan);
    }
  }
  // Groups: the policies that keep most first (the fastest, where they
  // fit), each over the (stage, offload) pairs with the fastest optimizer
  // step first, so that a fast candidate is found early and slower groups
  // can be ruled out by SpeedBounds.
  std::vector<RecomputePolicy> policies = recomputeLevels(bounds);
  auto keeps = [](const RecomputePolicy &p) -> int64_t {
    if (p.mode == RecomputeMode::None)
      return 1000;
    if (p.mode == RecomputeMode::Selective)
      return 100 + p.every;
    return p.every;
  };
  std::stable_sort(policies.begin(), policies.end(),
                   [&](const RecomputePolicy &x, const RecomputePolicy &y) {
                     return keeps(x) > keeps(y);
                   });
  std::vector<std::pair<int, std::pair<std::string, std::string>>> pairs;
  for (int stage : stages)
    for (const auto &offload : offloadLevels(stage))
      pairs.push_back({stage, offload});
  auto optimizerTime = [&](const auto &p) {
    AdviseSetup s = groupSetup(p.first, p.second, full, 0);
    auto it = speed.optimizer.find({p.first, offloadText(s)});
    return it == speed.optimizer.end() ? 1e300 : it->second;
  };
  std::stable_sort(pairs.begin(), pairs.end(), [&](auto x, auto y) {
    return optimizerTime(x) < optimizerTime(y);
  });
  for (const RecomputePolicy &policy : policies)
    for (const auto &[stage, offload] : pairs) {
      AdviseSetup group = groupSetup(stage, offload, policy, 0);
      // A probe that did not fit is its group's answer.
      if (std::optional<size_t> probe = find(group);
          probe && !fitsGpu(result.candidates[*probe]))
        continue;
      std::string what = "stage " + std::to_string(stage) + ", " +
                         offloadText(group) + ", " + recomputeText(policy);
      std::optional<std::string> why = cannotFit(group);
      double most = 0;
      if (!why)
        why = cannotWin(group, most);
      if (why) {
        if (most > 0)
          tooSlow.push_back({group, what, most});
        result.pruned.push_back({stage, what, *why, most});
        continue;
      }
      std::optional<Plan> probe;
      if (policy == full)
        if (auto it = probes.find({stage, offloadText(group)});
            it != probes.end()) {
          probe = std::move(it->second);
          probes.erase(it);
        }
      evaluateGroup(group, std::move(probe));
    }
  confirmBest();
  revisitTooSlow();
  varyBuckets();
  confirmBest();
  findWaysOut();
  sortTable();
  result.best = recommend(result.candidates, req.robust);
  result.baseAt = find(result.base.setup);
  for (const AdviseSetup &s : waysOut)
    if (auto i = find(s))
      result.waysOut.push_back({*i, changedLevers(s, result.base.setup)});
  explainStages();
  // What the search did: the space's setups it never evaluated, and the
  // candidates left as estimates.
  std::vector<AdviseSetup> space = leverSpace(result.base, bounds);
  int64_t evaluated = 0;
  for (const AdviseSetup &s : space)
    evaluated += find(s).has_value();
  result.prunedSetups = int64_t(space.size()) - evaluated;
  result.estimated = llvm::count_if(
      result.candidates, [](const AdviseCandidate &c) { return !c.exact; });
}

} // namespace

Expected<AdviseResult> advise(const AdviseRequest &req) {
  auto start = std::chrono::steady_clock::now();
  AdviseResult result;
  result.cluster = req.cluster->name;
  result.worldSize = req.worldSize ? req.worldSize : req.cluster->gpus();
  // What a plan's peak may use: usable memory less the runtime reserve,
  // less the margin.
  result.gpuMemoryBytes = int64_t(req.cluster->gpu.planBudgetBytes());
  result.margin = req.margin;
  result.marginBytes =
      int64_t(std::llround(req.margin.bytesOf(double(result.gpuMemoryBytes))));
  result.fitBytes = result.gpuMemoryBytes - result.marginBytes;
  result.seqLen = req.stats->seqLen;
  result.numLayers = req.stats->numLayers;
  if (req.baseConfig)
    result.baseName = req.baseConfig->name();
  if (auto problem = checkFits(*req.cluster, result.worldSize))
    return *problem;
  auto base = readAdviseBase(req);
  if (!base)
    return base.error();
  result.base = *base;
  result.robust = req.robust;
  Search(req, result).run();
  result.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

//===----------------------------------------------------------------------===//
// How to launch
//===----------------------------------------------------------------------===//

AdviseLaunch launchInstructions(const AdviseResult &r,
                                const AdviseCandidate &c) {
  AdviseLaunch out;
  const AdviseBase &base = r.base;
  std::string micro = std::to_string(c.microBatch);
  std::string acc = std::to_string(c.gradientAccumulation);
  std::string zerocArgs = "--micro-batch " + micro + " --grad-accum " + acc;
  json recompute = {{"mode", recomputeModeName(c.recompute.mode)},
                    {"every", c.recompute.every},
                    {"description", c.recompute.describe()}};
  std::string hfArgs = "--per_device_train_batch_size " + micro +
                       " --gradient_accumulation_steps " + acc;
  std::optional<std::string> megatron;
  if (base.microBatchAuto || base.accumulationAuto)
    out.lines.push_back(
        "the config leaves the micro-batch or the accumulation \"auto\": "
        "launch with " +
        hfArgs + " (Hugging Face Trainer; zeroc: " + zerocArgs + ")");
  int64_t layers = 0;
  if (c.recompute.mode == RecomputeMode::None) {
    recompute["in_deepspeed_config"] = true;
    if (base.setup.recompute.mode != RecomputeMode::None)
      out.lines.push_back(
          "no recomputation: the activation_checkpointing block is removed; "
          "with the Hugging Face Trainer leave gradient_checkpointing off");
  } else if (c.recompute == RecomputePolicy{RecomputeMode::Full, 1}) {
    recompute["in_deepspeed_config"] = true;
    zerocArgs += " --recompute full";
    hfArgs += " --gradient_checkpointing";
    megatron = "--recompute-granularity full --recompute-method uniform "
               "--recompute-num-layers 1";
    out.lines.push_back(
        "full recomputation of every layer: the config's "
        "activation_checkpointing block; the model must checkpoint its "
        "layers: with the Hugging Face Trainer pass --gradient_checkpointing "
        "(gradient_checkpointing=True), with Megatron-LM " +
        *megatron);
  } else {
    recompute["in_deepspeed_config"] = false;
    zerocArgs +=
        std::string(" --recompute ") + recomputeModeName(c.recompute.mode);
    if (c.recompute.every > 1)
      zerocArgs += " --recompute-every " + std::to_string(c.recompute.every);
    std::string how;
    if (c.recompute.mode == RecomputeMode::Selective) {
      megatron = "--recompute-granularity selective";
      how = "Megatron-LM: " + *megatron +
            "; the Hugging Face Trainer has none (its gradient_checkpointing "
            "is full recomputation of every layer)";
    } else {
      layers = r.numLayers > 0
                   ? (r.numLayers + c.recompute.every - 1) / c.recompute.every
                   : 0;
      std::string n = layers ? std::to_string(layers) : "L/k";
      recompute["layers"] = layers;
      megatron = "--recompute-granularity full --recompute-method block "
                 "--recompute-num-layers " +
                 n;
      how = "Megatron-LM: " + *megatron + " (recomputes the first " + n +
            " layers, as many as zeroc's every " +
            std::to_string(c.recompute.every) +
            "th: the same memory); the Hugging Face Trainer recomputes every "
            "layer or none";
    }
    std::string policy = std::string(recomputeModeName(c.recompute.mode)) +
                         " recomputation of every " +
                         (c.recompute.every == 1
                              ? std::string("layer")
                              : c.recompute.describe().substr(
                                    c.recompute.describe().find("every ") + 6));
    out.lines.push_back(
        policy +
        " cannot be said in a DeepSpeed config (its "
        "activation_checkpointing block means full recomputation of every "
        "layer, so the written config has none): plan it with zeroc " +
        zerocArgs + "; " + how);
  }
  out.json = {
      {"micro_batch", c.microBatch},
      {"gradient_accumulation", c.gradientAccumulation},
      {"global_batch", c.microBatch * c.gradientAccumulation * r.worldSize},
      {"recompute", recompute},
      {"zeroc_args", zerocArgs},
      {"hf_trainer_args", hfArgs}};
  if (megatron)
    out.json["megatron_args"] = *megatron;
  return out;
}

//===----------------------------------------------------------------------===//
// Output
//===----------------------------------------------------------------------===//

namespace {

void flatten(const json &j, const std::string &at,
             std::map<std::string, std::string> &out) {
  if (at.empty() && j.is_object() && j.empty())
    return; // No config at all: no keys.
  if (j.is_object() && !j.empty()) {
    for (const auto &[key, value] : j.items())
      flatten(value, at.empty() ? key : at + "." + key, out);
    return;
  }
  out[at] = j.dump();
}

std::string offloadColumn(const AdviseSetup &s) {
  if (s.offloadOptimizer == "none" && s.offloadParam == "none")
    return "none";
  if (s.offloadParam == "none")
    return "optimizer " + s.offloadOptimizer;
  if (s.offloadOptimizer == s.offloadParam)
    return "opt+params " + s.offloadOptimizer;
  return "opt " + s.offloadOptimizer + ", params " + s.offloadParam;
}

std::string recomputeColumn(const RecomputePolicy &p) {
  if (p.mode == RecomputeMode::None || p.every == 1)
    return recomputeModeName(p.mode);
  return std::string(recomputeModeName(p.mode)) + " every " +
         std::to_string(p.every);
}

std::string row(const AdviseResult &r, size_t i) {
  const AdviseCandidate &c = r.candidates[i];
  const char *mark = r.best && *r.best == i ? "*" : " ";
  std::string batch = std::to_string(c.microBatch) + " x " +
                      std::to_string(c.gradientAccumulation);
  std::string buckets = humanCount(double(c.reduceBucketSize));
  if (c.stage == 3)
    buckets += " / " + humanCount(double(c.prefetchBucketSize));
  char line[512];
  if (!c.error.empty()) {
    std::snprintf(line, sizeof line, "%s %-5d %-18s %-15s %-8s error: %s\n",
                  mark, c.stage, offloadColumn(c).c_str(),
                  recomputeColumn(c.recompute).c_str(), batch.c_str(),
                  c.error.substr(0, c.error.find('\n')).substr(0, 120).c_str());
    return line;
  }
  std::snprintf(
      line, sizeof line,
      "%s %-5d %-18s %-15s %-8s %-19s %11s %-4s %10s %10s %10s %12s  %s\n",
      mark, c.stage, offloadColumn(c).c_str(),
      recomputeColumn(c.recompute).c_str(), batch.c_str(), buckets.c_str(),
      humanBytes(double(c.peakDeviceBytes)).c_str(), c.fits ? "yes" : "no",
      seconds(c.stepSeconds).c_str(),
      c.stragglerStepSeconds ? seconds(*c.stragglerStepSeconds).c_str() : "-",
      seconds(c.slowNetworkStepSeconds).c_str(),
      tokens(c.tokensPerSecond).c_str(), c.exact ? "exact" : "estimate");
  return line;
}

/// The rows the table shows without --all: the recommendation, the base,
/// the ways out, the fastest (or, where nothing fits, the smallest) of each
/// stage, and the fastest others, one per setup whatever its bucket sizes,
/// at most a dozen in all.
std::vector<size_t> shownRows(const AdviseResult &r) {
  std::set<size_t> shown;
  if (r.best)
    shown.insert(*r.best);
  if (r.baseAt)
    shown.insert(*r.baseAt);
  for (const AdviseWayOut &w : r.waysOut)
    shown.insert(w.candidate);
  for (int stage = 0; stage <= 3; ++stage) {
    std::optional<size_t> fastest, smallest;
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      const AdviseCandidate &c = r.candidates[i];
      if (c.stage != stage || !c.error.empty())
        continue;
      if (!smallest ||
          c.peakDeviceBytes < r.candidates[*smallest].peakDeviceBytes)
        smallest = i;
      if (c.fits && (!fastest || rankingTokensPerSecond(c, r.robust) >
                                     rankingTokensPerSecond(
                                         r.candidates[*fastest], r.robust)))
        fastest = i;
    }
    if (fastest)
      shown.insert(*fastest);
    else if (smallest)
      shown.insert(*smallest);
  }
  std::vector<size_t> byTokens;
  for (size_t i = 0; i < r.candidates.size(); ++i)
    if (r.candidates[i].fits && r.candidates[i].error.empty())
      byTokens.push_back(i);
  std::stable_sort(byTokens.begin(), byTokens.end(), [&](size_t a, size_t b) {
    return rankingTokensPerSecond(r.candidates[a], r.robust) >
           rankingTokensPerSecond(r.candidates[b], r.robust);
  });
  // The fastest others, one per setup whatever its bucket sizes.
  auto sameButBuckets = [&](size_t a, size_t b) {
    AdviseSetup x = r.candidates[a], y = r.candidates[b];
    x.reduceBucketSize = y.reduceBucketSize;
    x.prefetchBucketSize = y.prefetchBucketSize;
    return x == y;
  };
  for (size_t i : byTokens)
    if (shown.size() < 12 &&
        llvm::none_of(shown, [&](size_t j) { return sameButBuckets(i, j); }))
      shown.insert(i);
  return std::vector<size_t>(shown.begin(), shown.end());
}

std::string changesText(const std::vector<AdviseChange> &changes) {
  std::vector<std::string> parts;
  for (const AdviseChange &c : changes)
    parts.push_back(c.text);
  return llvm::join(parts, " + ");
}

json candidateJson(const AdviseResult &r, const AdviseCandidate &c) {
  json j = {
      {"setup", c.label()},
      {"stage", c.stage},
      {"offload_optimizer", c.offloadOptimizer},
      {"offload_param", c.offloadParam},
      {"recompute",
       {{"mode", recomputeModeName(c.recompute.mode)},
        {"every", c.recompute.every}}},
      {"micro_batch", c.microBatch},
      {"gradient_accumulation", c.gradientAccumulation},
      {"global_batch", c.microBatch * c.gradientAccumulation * r.worldSize},
      {"reduce_bucket_size", c.reduceBucketSize},
      {"figures", c.exact ? "exact" : "estimate"}};
  if (c.stage == 3)
    j["stage3_prefetch_bucket_size"] = c.prefetchBucketSize;
  if (!c.error.empty()) {
    j["error"] = c.error;
    return j;
  }
  j["fits"] = c.fits;
  if (!c.nodeRefusal.empty())
    j["node_refusal"] = c.nodeRefusal;
  j["peak_device_bytes"] = c.peakDeviceBytes;
  j["host_bytes"] = c.hostBytes;
  j["predicted_step_time_s"] = c.stepSeconds;
  j["tokens_per_s"] = c.tokensPerSecond;
  j["exposed_comm_s"] = c.exposedCommSeconds;
  j["comm_bytes_per_rank_per_step"] = c.commBytesPerStep;
  j["straggler_step_time_s"] =
      c.stragglerStepSeconds ? json(*c.stragglerStepSeconds) : json(nullptr);
  j["slow_network_step_time_s"] = c.slowNetworkStepSeconds;
  j["worst_step_time_s"] = c.worstStepSeconds();
  j["worst_tokens_per_s"] = c.robustTokensPerSecond();
  j["achieved_tflops_per_gpu"] = c.tflopsPerGpu;
  return j;
}

std::string sensitivityNote() {
  char text[320];
  std::snprintf(text, sizeof text,
                "rank x%g: one rank's compute %g%% slower; inter x%g: the "
                "inter-node bandwidth times %g (the healthy step on one "
                "node); each the plan re-simulated as zeroc inspect "
                "--what-if does (docs/advise.md, \"Sensitivity\")",
                kSensitivityStraggler, 100 * (kSensitivityStraggler - 1),
                kSensitivityInterNodeBandwidth, kSensitivityInterNodeBandwidth);
  return text;
}

const char *kFiguresNote =
    "exact: compiled and simulated; estimate: derived from two compiles of "
    "the same setup at other micro-batches (docs/advise.md)";

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

std::string adviseText(const AdviseResult &r, bool all) {
  std::string out = "zeroc advise: " + r.cluster + ", " +
                    std::to_string(r.worldSize) + " ranks, " +
                    humanBytes(double(r.gpuMemoryBytes)) + " per GPU; " +
                    "a plan fits in " + humanBytes(double(r.fitBytes)) +
                    " (margin " + r.margin.describe();
  if (!r.margin.bytes)
    out += ", " + humanBytes(double(r.marginBytes));
  out += ")\n";
  const AdviseBase &b = r.base;
  out += "global batch: " + std::to_string(b.globalBatch()) + " sequences of " +
         std::to_string(r.seqLen) + " tokens, ";
  if (b.globalBatchFixed)
    out += "kept (fixed by " + b.globalBatchReason +
           "): micro-batch x accumulation = " +
           std::to_string(b.setup.microBatch * b.setup.gradientAccumulation) +
           " per rank\n";
  else
    out += "not fixed (" + b.globalBatchReason +
           "): " + std::to_string(b.setup.gradientAccumulation) +
           " accumulation step" +
           (b.setup.gradientAccumulation == 1 ? "" : "s") +
           " kept, the micro-batch searched\n";
  out += "searched " + std::to_string(r.setupsInSpace) +
         " setups: " + std::to_string(r.compiled) + " compiles, " +
         std::to_string(r.estimated) + " estimated, " +
         std::to_string(r.prunedSetups) + " ruled out without compiling; " +
         std::to_string(r.bucketVariants) + " bucket variants compiled";
  char took[32];
  std::snprintf(took, sizeof took, " (%.1f s)\n\n", r.searchSeconds);
  out += took;

  char line[256], straggler[32], network[32];
  std::snprintf(straggler, sizeof straggler, "rank x%g", kSensitivityStraggler);
  std::snprintf(network, sizeof network, "inter x%g",
                kSensitivityInterNodeBandwidth);
  std::snprintf(
      line, sizeof line,
      "  %-5s %-18s %-15s %-8s %-19s %11s %-4s %10s %10s %10s %12s  %s\n",
      "stage", "offload", "recompute", "micro x", "reduce/prefetch", "peak/GPU",
      "fits", "step", straggler, network, "tokens/s", "figures");
  out += line;
  std::vector<size_t> rows;
  if (all)
    for (size_t i = 0; i < r.candidates.size(); ++i)
      rows.push_back(i);
  else
    rows = shownRows(r);
  for (size_t i : rows)
    out += row(r, i);
  if (rows.size() < r.candidates.size())
    out += "  (" + std::to_string(r.candidates.size() - rows.size()) +
           " more: --all shows every candidate, --json everything)\n";
  out += "  " + sensitivityNote() + "\n";
  out += r.robust ? "  ranked by the worst of the three step times "
                    "(--robust)\n"
                  : "  ranked by the healthy step; --robust ranks by the "
                    "worst of the three\n";
  out += "\n";
  for (const std::string &reason : r.reasons)
    out += "  " + reason + "\n";
  out += "\n";

  if (r.baseAt) {
    const AdviseCandidate &base = r.candidates[*r.baseAt];
    out += (r.baseName.empty() ? std::string("DeepSpeed's defaults")
                               : "your config " + r.baseName) +
           ": " + base.label() + ": ";
    if (!base.error.empty())
      out += "could not be planned: " +
             base.error.substr(0, base.error.find('\n')) + "\n";
    else if (base.fits)
      out += humanBytes(double(base.peakDeviceBytes)) + " per GPU, " +
             tokens(base.tokensPerSecond) + " tokens/s; it fits\n";
    else
      out += "needs " + humanBytes(double(base.peakDeviceBytes)) + " per GPU" +
             (base.nodeRefusal.empty() ? "" : "; " + base.nodeRefusal) +
             "; it does not fit\n";
    if (!r.waysOut.empty()) {
      out += "ways out (the fewest changes to it that fit, each compiled):\n";
      for (const AdviseWayOut &w : r.waysOut) {
        const AdviseCandidate &c = r.candidates[w.candidate];
        out += "  - " + changesText(w.changes) + ": " +
               humanBytes(double(c.peakDeviceBytes)) + " per GPU, " +
               tokens(c.tokensPerSecond) + " tokens/s\n";
      }
    }
    out += "\n";
  }

  if (r.best) {
    const AdviseCandidate &best = r.candidates[*r.best];
    out += "recommended: " + best.label() + "\n";
    out += "  " + humanBytes(double(best.peakDeviceBytes)) + " per GPU (" +
           humanBytes(double(r.fitBytes)) + " fits), " +
           seconds(best.stepSeconds) + " per step, " +
           tokens(best.tokensPerSecond) + " tokens/s, global batch " +
           std::to_string(best.microBatch * best.gradientAccumulation *
                          r.worldSize) +
           " (" + (best.exact ? "exact: compiled and simulated" : "estimate") +
           ")\n";
    out += "  " + sensitivityText(best) + "; at the worst, " +
           seconds(best.worstStepSeconds()) + " per step, " +
           tokens(best.robustTokensPerSecond()) + " tokens/s\n";
    if (r.robust) {
      std::optional<size_t> healthy = recommend(r.candidates);
      if (healthy && *healthy != *r.best)
        out += "  ranked by the healthy step instead: " +
               r.candidates[*healthy].label() + ", " +
               seconds(r.candidates[*healthy].stepSeconds) + " healthy, " +
               seconds(r.candidates[*healthy].worstStepSeconds()) +
               " at the worst\n";
    }
    for (const std::string &l : launchInstructions(r, best).lines)
      out += "  " + l + "\n";
  } else {
    out += "nothing fits: see the stages above for how far each is from "
           "fitting; beyond these levers, more GPUs (--nodes, --world-size) "
           "spread the model states, and a shorter sequence shrinks the "
           "activations\n";
  }
  out += std::string("\n") + kFiguresNote + "\n";
  return out;
}

json adviseJson(const AdviseResult &r) {
  json candidates = json::array();
  for (const AdviseCandidate &c : r.candidates)
    candidates.push_back(candidateJson(r, c));
  json pruned = json::array();
  for (const AdvisePruned &p : r.pruned)
    pruned.push_back(
        {{"stage", p.stage},
         {"what", p.what},
         {"reason", p.reason},
         {"tokens_per_s_at_most",
          p.tokensAtMost > 0 ? json(p.tokensAtMost) : json(nullptr)}});
  const AdviseBase &b = r.base;
  json out = {{"cluster", r.cluster},
              {"world_size", r.worldSize},
              {"gpu_memory_bytes", r.gpuMemoryBytes},
              {"margin", r.margin.describe()},
              {"margin_bytes", r.marginBytes},
              {"fit_bytes", r.fitBytes},
              {"global_batch",
               {{"sequences", b.globalBatch()},
                {"fixed", b.globalBatchFixed},
                {"why", b.globalBatchReason}}},
              {"search",
               {{"setups", r.setupsInSpace},
                {"compiles", r.compiled},
                {"estimated", r.estimated},
                {"ruled_out_without_compiling", r.prunedSetups},
                {"bucket_variants", r.bucketVariants},
                {"seconds", r.searchSeconds}}},
              {"figures", kFiguresNote},
              {"sensitivity",
               {{"straggler", kSensitivityStraggler},
                {"inter_node_bw", kSensitivityInterNodeBandwidth},
                {"note", sensitivityNote()}}},
              {"ranked_by", r.robust ? "worst" : "healthy"},
              {"candidates", std::move(candidates)},
              {"pruned", std::move(pruned)},
              {"reasons", r.reasons}};
  if (r.baseAt)
    out["base"] = candidateJson(r, r.candidates[*r.baseAt]);
  json ways = json::array();
  for (const AdviseWayOut &w : r.waysOut) {
    json changes = json::array();
    for (const AdviseChange &c : w.changes)
      changes.push_back(c.text);
    ways.push_back(
        {{"changes", changes},
         {"candidate", candidateJson(r, r.candidates[w.candidate])}});
  }
  out["ways_out"] = std::move(ways);
  if (r.best) {
    const AdviseCandidate &best = r.candidates[*r.best];
    out["recommended"] = best.label();
    out["recommended_candidate"] = candidateJson(r, best);
    out["recommended_config"] = best.launchConfig;
    out["recommended_resolved_config"] = best.deepSpeedConfig;
    out["recommended_deepspeed_bucket_bytes"] = best.deepSpeedBuckets.bytes();
    out["recommended_launch"] = launchInstructions(r, best).json;
  }
  return out;
}

} // namespace zeroc
