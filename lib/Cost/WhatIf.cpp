//===- WhatIf.cpp - The step re-simulated under perturbations -------------===//
//
// Each scenario is a fresh simulation (Simulator.cpp) of the same plan: a
// straggler through SimulationOptions, a slower link class or another
// interconnect through the cluster the cost model prices with. Nothing is
// scaled after the fact, so a scenario's figures follow from the cost
// model's formulas exactly as the healthy ones do.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Cost/WhatIf.h"

#include "zeroc/Cost/FitCheck.h"
#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Plan/PlanTrace.h"
#include "zeroc/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace zeroc {

namespace {

Diagnostic whatIfError(const std::string &message) {
  return Diagnostic{"", 0, 0, "--what-if: " + message};
}

std::string relative(double value, double base) {
  char text[32];
  if (base <= 0)
    return "-";
  std::snprintf(text, sizeof text, "%+.1f%%", 100 * (value / base - 1));
  return text;
}

std::string pad(std::string text, size_t width) {
  if (text.size() < width)
    text.append(width - text.size(), ' ');
  return text;
}

ScenarioResult collect(const Plan &plan, const Cluster &cluster,
                       const StepPrediction &step, std::string name) {
  ScenarioResult out;
  out.name = std::move(name);
  out.cluster = cluster.name;
  out.worldSize = plan.worldSize;
  out.microBatch = plan.model.microBatch;
  out.gradientAccumulationSteps = plan.gradientAccumulationSteps;
  out.trainBatchSize =
      plan.model.microBatch * plan.gradientAccumulationSteps * plan.worldSize;
  out.tokensPerSecond = step.tokensPerSecond;
  out.peakDeviceBytes = summarizeMemory(plan).peakDeviceBytes;
  out.gpuBudgetBytes = double(cluster.gpu.planBudgetBytes());
  out.refusal = checkClusterFit(plan, cluster);
  out.stepSeconds = step.stepSeconds;
  out.exposedComm = step.exposedComm;
  CostModel model(plan, cluster);
  for (const PhaseTimeline &timeline : step.phases) {
    const PlanPhase *phase = plan.findPhase(timeline.kind);
    if (!phase)
      continue;
    for (size_t i = 0; i < timeline.ops.size() && i < phase->ops.size(); ++i) {
      const PlanOp &op = phase->ops[i];
      const OpTiming &t = timeline.ops[i];
      if (op.collective.empty() || t.cls != OpClass::Collective)
        continue;
      CollectiveTiming c;
      c.phase = phaseName(timeline.kind);
      c.op = op.index;
      c.collective = op.collective;
      c.bytes = model.collectiveBytes(*phase, op);
      c.module = op.where.empty() ? opSubject(op) : op.where;
      c.seconds = t.end - t.start;
      c.waited = t.start - t.issue;
      c.stragglerWait = t.stragglerWait;
      c.duration = t.end - t.issue;
      out.collectives.push_back(std::move(c));
    }
  }
  std::stable_sort(out.collectives.begin(), out.collectives.end(),
                   [](const CollectiveTiming &a, const CollectiveTiming &b) {
                     return a.duration > b.duration;
                   });
  return out;
}

nlohmann::json collectiveJson(const CollectiveTiming &c) {
  return {{"phase", c.phase},           {"op", c.op},
          {"collective", c.collective}, {"bytes", c.bytes},
          {"module", c.module},         {"seconds", c.seconds},
          {"waited_s", c.waited},       {"straggler_wait_s", c.stragglerWait},
          {"duration_s", c.duration}};
}

nlohmann::json scenarioJson(const ScenarioResult &s,
                            const ScenarioResult &healthy) {
  nlohmann::json slowest = nlohmann::json::array();
  for (size_t i = 0; i < s.collectives.size() && i < 10; ++i)
    slowest.push_back(collectiveJson(s.collectives[i]));
  nlohmann::json notes = nlohmann::json::array();
  for (const std::string &n : s.notes)
    notes.push_back(n);
  return {{"scenario", s.name},
          {"cluster", s.cluster},
          {"world_size", s.worldSize},
          {"train_micro_batch_size_per_gpu", s.microBatch},
          {"gradient_accumulation_steps", s.gradientAccumulationSteps},
          {"train_batch_size", s.trainBatchSize},
          {"batch_notes", notes},
          {"tokens_per_s", s.tokensPerSecond},
          {"peak_device_bytes", s.peakDeviceBytes},
          {"gpu_budget_bytes", s.gpuBudgetBytes},
          {"fits", !s.refusal},
          {"refusal", s.refusal ? nlohmann::json(*s.refusal) : nullptr},
          {"predicted_step_time_s", s.stepSeconds},
          {"step_time_ratio",
           healthy.stepSeconds > 0 ? s.stepSeconds / healthy.stepSeconds : 0},
          {"exposed_comm_s", s.exposedComm},
          {"slowest_collectives", slowest}};
}

const char *const kAssumptions[] = {
    "the calibrated cost model of docs/cost-model.md: ring collectives "
    "(hierarchical across nodes), roofline or calibrated compute, no "
    "contention between streams",
    "straggler: one rank's compute kernels take F times as long; its "
    "collectives, copies and host work do not; every collective starts when "
    "the last rank reaches it; figures are a healthy rank's; every phase "
    "run starts with the ranks together and lasts until the slow rank is "
    "done",
    "bandwidth: the link class's bus bandwidth (and the calibrated "
    "collective fits, intra-node) times F; latencies unchanged",
    "nodes=-K: the model and config recompiled for K nodes' ranks fewer, "
    "the micro-batch kept; a train_batch_size the config fixes is kept by "
    "more gradient accumulation, else the global batch shrinks",
    "watchdog: a collective's duration runs from when a healthy rank "
    "launches it (its stream free, its inputs ready) to its end, waits for "
    "other ranks and the network included"};

} // namespace

Expected<WhatIfScenario> parseWhatIf(const std::string &spec) {
  static const char *const kExpected =
      "expected straggler=F, inter-node-bw=F, intra-node-bw=F, "
      "cluster=FILE|PRESET or nodes=-K";
  size_t eq = spec.find('=');
  if (eq == std::string::npos)
    return whatIfError("'" + spec + "' has no '=': " + kExpected);
  std::string key = spec.substr(0, eq), value = spec.substr(eq + 1);
  WhatIfScenario s;
  s.spec = spec;
  if (key == "cluster") {
    if (value.empty())
      return whatIfError("'" + spec +
                         "': cluster= needs a cluster file or "
                         "preset");
    s.kind = WhatIfScenario::Kind::Cluster;
    s.clusterSpec = value;
    return s;
  }
  if (key == "nodes") {
    // "-K": K whole nodes fewer. More nodes is not a failure scenario.
    size_t digits = value.size() > 1 && value[0] == '-'
                        ? value.find_first_not_of("0123456789", 1)
                        : 0;
    if (digits != std::string::npos || value.size() > 10 ||
        std::strtoll(value.c_str(), nullptr, 10) >= 0)
      return whatIfError("'" + spec +
                         "': nodes= takes the nodes lost as a negative "
                         "whole number (nodes=-1: one node fewer), got '" +
                         value + "'");
    s.kind = WhatIfScenario::Kind::Nodes;
    s.nodes = std::strtoll(value.c_str(), nullptr, 10);
    return s;
  }
  if (key == "straggler")
    s.kind = WhatIfScenario::Kind::Straggler;
  else if (key == "inter-node-bw")
    s.kind = WhatIfScenario::Kind::InterNodeBandwidth;
  else if (key == "intra-node-bw")
    s.kind = WhatIfScenario::Kind::IntraNodeBandwidth;
  else
    return whatIfError("unknown scenario '" + key + "' in '" + spec +
                       "': " + kExpected);
  char *end = nullptr;
  double factor = value.empty() ? 0 : std::strtod(value.c_str(), &end);
  if (value.empty() || !end || *end != '\0' || !std::isfinite(factor) ||
      factor <= 0)
    return whatIfError("'" + spec +
                       "': the factor must be a finite number > "
                       "0, got '" +
                       value + "'");
  s.factor = factor;
  return s;
}

Cluster scaledLinks(const Cluster &cluster, WhatIfScenario::Kind kind,
                    double factor) {
  Cluster out = cluster;
  if (kind == WhatIfScenario::Kind::InterNodeBandwidth) {
    if (out.interNode)
      out.interNode->busBandwidth *= factor;
  } else if (kind == WhatIfScenario::Kind::IntraNodeBandwidth) {
    out.intraNode.busBandwidth *= factor;
    for (ClusterCalibration::CollectiveFit &fit : out.calibration.collective)
      fit.scaleBandwidth(factor);
    for (ClusterCalibration::CollectiveFit &fit : out.calibration.contended)
      fit.scaleBandwidth(factor);
  }
  return out;
}

Expected<StepPrediction> predictScenario(const Plan &plan,
                                         const Cluster &healthy,
                                         const WhatIfScenario &scenario,
                                         const Cluster *other,
                                         const Plan *otherPlan) {
  SimulationOptions options;
  switch (scenario.kind) {
  case WhatIfScenario::Kind::Straggler:
    options.stragglerFactor = scenario.factor;
    return predictStep(plan, healthy, options);
  case WhatIfScenario::Kind::InterNodeBandwidth:
  case WhatIfScenario::Kind::IntraNodeBandwidth:
    return predictStep(plan,
                       scaledLinks(healthy, scenario.kind, scenario.factor));
  case WhatIfScenario::Kind::Cluster:
    if (!other)
      return whatIfError("'" + scenario.spec + "': the cluster was not loaded");
    return predictStep(plan, *other);
  case WhatIfScenario::Kind::Nodes:
    if (!otherPlan)
      return whatIfError(
          "'" + scenario.spec +
          "': a plan cannot change its world size; compile it for the "
          "smaller world with `zeroc MODEL.mlir --config DS.json "
          "--world-size N --cluster C --what-if " +
          scenario.spec + "`");
    return predictStep(*otherPlan, healthy);
  }
  return whatIfError("'" + scenario.spec + "': unknown scenario kind");
}

const std::vector<WhatIfScenario> &sensitivityScenarios() {
  static const std::vector<WhatIfScenario> scenarios = [] {
    char straggler[32], network[32];
    std::snprintf(straggler, sizeof straggler, "straggler=%g",
                  kSensitivityStraggler);
    std::snprintf(network, sizeof network, "inter-node-bw=%g",
                  kSensitivityInterNodeBandwidth);
    std::vector<WhatIfScenario> out;
    for (const char *spec : {straggler, network}) {
      Expected<WhatIfScenario> s = parseWhatIf(spec);
      out.push_back(*s);
    }
    return out;
  }();
  return scenarios;
}

Expected<WhatIfReport>
whatIf(const Plan &plan, const Cluster &healthy,
       const std::vector<WhatIfScenario> &scenarios,
       const std::vector<std::optional<Cluster>> &clusters,
       double watchdogSeconds, const std::vector<const Plan *> &plans) {
  if (!(watchdogSeconds > 0) || !std::isfinite(watchdogSeconds)) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", watchdogSeconds);
    return Diagnostic{"", 0, 0,
                      "--watchdog: expected a number of seconds > 0, got " +
                          std::string(text)};
  }
  WhatIfReport report;
  report.watchdogSeconds = watchdogSeconds;
  Expected<StepPrediction> base = predictStep(plan, healthy);
  if (!base)
    return base.error();
  report.healthy = collect(plan, healthy, *base, "healthy");

  for (size_t i = 0; i < scenarios.size(); ++i) {
    const WhatIfScenario &s = scenarios[i];
    const Cluster *other = s.kind == WhatIfScenario::Kind::Cluster &&
                                   i < clusters.size() && clusters[i]
                               ? &*clusters[i]
                               : nullptr;
    const Plan *otherPlan =
        s.kind == WhatIfScenario::Kind::Nodes && i < plans.size() && plans[i]
            ? plans[i]
            : nullptr;
    if (s.kind == WhatIfScenario::Kind::Nodes && !otherPlan) {
      Expected<StepPrediction> refused = predictScenario(plan, healthy, s);
      return refused.error();
    }
    Expected<StepPrediction> step =
        predictScenario(plan, healthy, s, other, otherPlan);
    if (!step)
      return whatIfError("'" + s.spec + "': " +
                         (step.error().file.empty() ? step.error().message
                                                    : step.error().str()));
    // The scaled clusters keep the healthy one's name; the bytes moved do
    // not depend on the links.
    report.scenarios.push_back(collect(otherPlan ? *otherPlan : plan,
                                       other ? *other : healthy, *step,
                                       s.spec));
    report.scenarios.back().notes = s.notes;
    report.recompiled.push_back(otherPlan != nullptr);
  }

  // Every collective at its worst over all cases.
  // A recompiled plan's collectives are its own, not the healthy plan's
  // ops of the same index.
  std::map<std::tuple<std::string, std::string, int64_t>, size_t> at;
  auto consider = [&](const ScenarioResult &r, const std::string &plan) {
    for (const CollectiveTiming &c : r.collectives) {
      auto [it, fresh] =
          at.try_emplace({plan, c.phase, c.op}, report.worst.size());
      if (fresh)
        report.worst.push_back({c, r.name});
      else if (c.duration > report.worst[it->second].first.duration)
        report.worst[it->second] = {c, r.name};
    }
  };
  consider(report.healthy, "");
  for (size_t i = 0; i < report.scenarios.size(); ++i)
    consider(report.scenarios[i],
             report.recompiled[i] ? report.scenarios[i].name : "");
  std::stable_sort(report.worst.begin(), report.worst.end(),
                   [](const auto &a, const auto &b) {
                     return a.first.duration > b.first.duration;
                   });
  return report;
}

std::string whatIfText(const WhatIfReport &report) {
  const ScenarioResult &h = report.healthy;
  std::string out = "what-if on " + h.cluster + "\n";
  out += "  " + pad("scenario", 24) + pad("step", 14) + pad("vs healthy", 12) +
         pad("exposed comm", 14) + pad("tokens/s", 12) + pad("ranks", 7) +
         pad("batch", 8) + pad("peak/rank", 12) + "fits\n";
  auto row = [&](const ScenarioResult &s) {
    out +=
        "  " + pad(s.name, 24) + pad(humanSeconds(s.stepSeconds), 14) +
        pad(s.name == "healthy" ? "" : relative(s.stepSeconds, h.stepSeconds),
            12) +
        pad(humanSeconds(s.exposedComm), 14) +
        pad(groupDigits(int64_t(std::llround(s.tokensPerSecond))), 12) +
        pad(std::to_string(s.worldSize), 7) +
        pad(std::to_string(s.trainBatchSize), 8) +
        pad(humanBytes(double(s.peakDeviceBytes)), 12) +
        (s.refusal ? "no" : "yes") + "\n";
  };
  row(h);
  for (const ScenarioResult &s : report.scenarios)
    row(s);
  // What the table cannot say: how a recompiled plan's batch was chosen,
  // and why a case does not fit.
  std::string below;
  auto explain = [&](const ScenarioResult &s) {
    for (const std::string &n : s.notes)
      below += "  " + s.name + ": " + n + "\n";
    if (s.refusal)
      below += "  " + s.name + " does not fit " + s.cluster + ": " +
               s.refusal->substr(0, s.refusal->find('\n')) + "\n";
  };
  explain(h);
  for (const ScenarioResult &s : report.scenarios)
    explain(s);
  out += below;

  std::map<std::pair<std::string, int64_t>, double> healthyDuration;
  for (const CollectiveTiming &c : h.collectives)
    healthyDuration[{c.phase, c.op}] = c.duration;
  auto table = [&](const ScenarioResult &s, bool recompiled) {
    out += "\n" + s.name + " on " + s.cluster + ": step " +
           humanSeconds(s.stepSeconds) + ", exposed communication " +
           humanSeconds(s.exposedComm) +
           (recompiled ? " (the plan recompiled for " +
                             std::to_string(s.worldSize) + " ranks)"
                       : std::string()) +
           "\n";
    if (s.collectives.empty()) {
      out += "  no collectives\n";
      return;
    }
    out += "  slowest collectives (launch to end, per run)\n";
    out += "    " + pad("phase", 12) + pad("op", 6) + pad("collective", 16) +
           pad("bytes", 12) + pad("duration", 12) + pad("healthy", 12) +
           pad("waited", 12) + "module\n";
    for (size_t i = 0; i < s.collectives.size() && i < 5; ++i) {
      const CollectiveTiming &c = s.collectives[i];
      // A recompiled plan's op N is not the healthy plan's op N.
      std::string healthy =
          recompiled ? "-" : humanSeconds(healthyDuration[{c.phase, c.op}]);
      out += "    " + pad(c.phase, 12) + pad(std::to_string(c.op), 6) +
             pad(c.collective, 16) + pad(humanBytes(c.bytes), 12) +
             pad(humanSeconds(c.duration), 12) + pad(healthy, 12) +
             pad(humanSeconds(c.waited), 12) + c.module + "\n";
    }
  };
  table(h, false);
  for (size_t i = 0; i < report.scenarios.size(); ++i)
    table(report.scenarios[i],
          i < report.recompiled.size() && report.recompiled[i]);

  char watchdog[64];
  std::snprintf(watchdog, sizeof watchdog, "%g s", report.watchdogSeconds);
  out += "\ntimeout margin (watchdog " + std::string(watchdog) +
         (report.watchdogSeconds == kNcclWatchdogSeconds ? ", NCCL's default"
                                                         : "") +
         ")\n";
  if (report.worst.empty()) {
    out += "  no collectives\n";
  } else {
    const auto &[c, scenario] = report.worst.front();
    char share[32];
    std::snprintf(share, sizeof share, "%.3g%%",
                  100 * c.duration / report.watchdogSeconds);
    out += "  longest collective: " + c.phase + " op " + std::to_string(c.op) +
           " " + c.collective + " of " + humanBytes(c.bytes) + " (" + c.module +
           "): " + humanSeconds(c.duration) + " under " + scenario + ", " +
           share + " of the watchdog\n";
    size_t over = 0;
    for (const auto &[w, name] : report.worst)
      if (w.duration >= report.watchdogSeconds) {
        if (++over <= 10)
          out += "  TIMEOUT: " + w.phase + " op " + std::to_string(w.op) + " " +
                 w.collective + " of " + humanBytes(w.bytes) + " (" + w.module +
                 ") would take " + humanSeconds(w.duration) + " under " + name +
                 "\n";
      }
    out += over ? "  " + std::to_string(over) +
                      " collective(s) would exceed the watchdog\n"
                : "  no collective reaches the watchdog\n";
  }
  out += "\nassumptions\n";
  for (const char *a : kAssumptions)
    out += "  - " + std::string(a) + "\n";
  return out;
}

nlohmann::json whatIfJson(const WhatIfReport &report) {
  nlohmann::json scenarios = nlohmann::json::array();
  scenarios.push_back(scenarioJson(report.healthy, report.healthy));
  for (const ScenarioResult &s : report.scenarios)
    scenarios.push_back(scenarioJson(s, report.healthy));
  nlohmann::json over = nlohmann::json::array();
  for (const auto &[c, name] : report.worst)
    if (c.duration >= report.watchdogSeconds) {
      nlohmann::json j = collectiveJson(c);
      j["scenario"] = name;
      over.push_back(std::move(j));
    }
  nlohmann::json longest = nullptr;
  if (!report.worst.empty()) {
    longest = collectiveJson(report.worst.front().first);
    longest["scenario"] = report.worst.front().second;
  }
  nlohmann::json assumptions = nlohmann::json::array();
  for (const char *a : kAssumptions)
    assumptions.push_back(a);
  return {{"scenarios", scenarios},
          {"watchdog",
           {{"seconds", report.watchdogSeconds},
            {"nccl_default", report.watchdogSeconds == kNcclWatchdogSeconds},
            {"longest_collective", longest},
            {"exceeds", over}}},
          {"assumptions", assumptions}};
}

} // namespace zeroc
