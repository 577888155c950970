//===- TraceCompare.cpp - Predicted against measured step time ------------===//

#include "zeroc/Cost/TraceCompare.h"

#include "zeroc/Cost/ScheduleViews.h"
#include "zeroc/Plan/PlanTrace.h"
#include "zeroc/Support/Median.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

using nlohmann::json;

namespace zeroc {

namespace {

/// Position of each op index in its phase's op list.
std::unordered_map<int64_t, size_t> opPositions(const PlanPhase &phase) {
  std::unordered_map<int64_t, size_t> out;
  for (size_t i = 0; i < phase.ops.size(); ++i)
    out[phase.ops[i].index] = i;
  return out;
}

} // namespace

Expected<MeasuredTrace> readMeasuredTrace(const JsonDocument &doc,
                                          const Plan &plan) {
  const json &root = doc.root();
  auto error = [&](const std::string &pointer, const std::string &message) {
    return doc.error(pointer, "trace: " + message);
  };
  if (!root.is_object() || !root.contains("traceEvents") ||
      !root["traceEvents"].is_array())
    return error("", "expected a Chrome trace object with a 'traceEvents' "
                     "array (written by zerorun --profile)");
  auto other = root.find("otherData");
  if (other == root.end() || !other->is_object() ||
      !other->contains("plan_fingerprint") ||
      !(*other)["plan_fingerprint"].is_string())
    return error(other == root.end() ? "" : "/otherData",
                 "no 'otherData.plan_fingerprint': not a trace of zerorun "
                 "--profile");
  MeasuredTrace out;
  out.fingerprint = (*other)["plan_fingerprint"].get<std::string>();
  std::string expected = planFingerprint(plan);
  if (out.fingerprint != expected)
    return error("/otherData/plan_fingerprint",
                 "the trace is of another plan (fingerprint " +
                     out.fingerprint + "; this plan's is " + expected +
                     "): profile this plan with zerorun --profile");

  std::map<std::string, size_t> phaseAt;
  std::vector<std::unordered_map<int64_t, size_t>> positions;
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    phaseAt[std::string(phaseName(plan.phases[p].kind))] = p;
    positions.push_back(opPositions(plan.phases[p]));
  }
  const json &events = root["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const json &e = events[i];
    std::string at = "/traceEvents/" + std::to_string(i);
    if (!e.is_object() || e.value("ph", "") != "X")
      continue;
    std::string cat = e.value("cat", "");
    if (cat != "op" && cat != "phase_run")
      continue;
    auto args = e.find("args");
    if (args == e.end() || !args->is_object())
      return error(at, "an event of category '" + cat + "' without 'args'");
    auto integer = [&](const char *key, int64_t &v) {
      auto it = args->find(key);
      if (it == args->end() || !it->is_number_integer())
        return false;
      v = it->get<int64_t>();
      return true;
    };
    int64_t rank = 0, step = 0, run = 0;
    if (!integer("rank", rank) || !integer("step", step) ||
        !integer("run", run) || rank < 0)
      return error(at + "/args", "expected integers 'rank', 'step' and 'run'");
    std::string phase = args->contains("phase") && (*args)["phase"].is_string()
                            ? (*args)["phase"].get<std::string>()
                            : "";
    auto p = phaseAt.find(phase);
    if (p == phaseAt.end())
      return error(at + "/args/phase",
                   "phase '" + phase + "' is not a phase of the plan");
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") ||
        !e["dur"].is_number())
      return error(at, "expected numbers 'ts' and 'dur'");
    double start = e["ts"].get<double>() * 1e-6;
    double end = start + e["dur"].get<double>() * 1e-6;
    out.ranks = std::max(out.ranks, rank + 1);
    if (cat == "phase_run") {
      out.runs.push_back({rank, p->second, step, run, start, end});
      continue;
    }
    int64_t index = -1;
    if (!integer("op", index))
      return error(at + "/args", "expected an integer 'op'");
    const PlanPhase &ph = plan.phases[p->second];
    auto pos = positions[p->second].find(index);
    if (pos == positions[p->second].end())
      return error(at + "/args/op",
                   "op " + std::to_string(index) + " is not an op of " + phase);
    std::string name = traceEventName(ph.ops[pos->second]);
    if (e.value("name", "") != name)
      return error(at + "/name", "op " + std::to_string(index) + " of " +
                                     phase + " is '" + name +
                                     "' in the plan, '" + e.value("name", "") +
                                     "' in the trace");
    out.ops.push_back({rank, p->second, index, step, run, start, end});
  }
  if (out.runs.empty())
    return error("/traceEvents", "no phase runs (events of category "
                                 "'phase_run'): the run recorded no step");
  return out;
}

namespace {

/// The steps the medians are over: all but the first, unless there is one.
std::set<int64_t> stepsUsed(const MeasuredTrace &m) {
  std::set<int64_t> steps;
  for (const MeasuredRun &r : m.runs)
    steps.insert(r.step);
  if (steps.size() > 1)
    steps.erase(steps.begin());
  return steps;
}

/// (rank, step) -> seconds from its first phase run's start to its last's
/// end.
std::map<std::pair<int64_t, int64_t>, std::pair<double, double>>
stepSpans(const MeasuredTrace &m) {
  std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> spans;
  for (const MeasuredRun &r : m.runs) {
    auto key = std::make_pair(r.rank, r.step);
    auto it = spans.find(key);
    if (it == spans.end())
      spans[key] = {r.start, r.end};
    else
      it->second = {std::min(it->second.first, r.start),
                    std::max(it->second.second, r.end)};
  }
  return spans;
}

} // namespace

Expected<TraceComparison> compareTrace(const Plan &plan,
                                       const StepPrediction &prediction,
                                       const MeasuredTrace &m) {
  if (prediction.phases.size() != plan.phases.size())
    return Diagnostic{"", 0, 0, "the prediction is not of this plan"};
  TraceComparison c;
  std::set<int64_t> used = stepsUsed(m);
  c.stepsMeasured = int64_t(used.size());
  auto spans = stepSpans(m);

  // The step: the slowest rank of each step, the median over steps; the
  // slowest rank overall is the one with the largest median.
  std::vector<double> stepTimes;
  for (int64_t step : used) {
    double slowest = 0;
    for (int64_t r = 0; r < m.ranks; ++r)
      if (auto it = spans.find({r, step}); it != spans.end())
        slowest = std::max(slowest, it->second.second - it->second.first);
    stepTimes.push_back(slowest);
  }
  double slowestMedian = -1;
  for (int64_t r = 0; r < m.ranks; ++r) {
    std::vector<double> mine;
    for (int64_t step : used)
      if (auto it = spans.find({r, step}); it != spans.end())
        mine.push_back(it->second.second - it->second.first);
    if (double med = median(mine); med > slowestMedian) {
      slowestMedian = med;
      c.slowestRank = r;
    }
  }
  c.step = {"step", prediction.stepSeconds, median(stepTimes)};

  // Phases: seconds per run, the slowest rank of each run.
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    std::map<std::pair<int64_t, int64_t>, double> slowest;
    for (const MeasuredRun &r : m.runs)
      if (r.phase == p && used.count(r.step)) {
        double &s = slowest[{r.step, r.run}];
        s = std::max(s, r.end - r.start);
      }
    std::vector<double> runs;
    for (const auto &[key, seconds] : slowest)
      runs.push_back(seconds);
    c.phases.push_back({std::string(phaseName(plan.phases[p].kind)),
                        prediction.phases[p].seconds, median(runs)});
  }

  // Ops on the slowest rank: each op's seconds per step (all its runs in
  // the step), and the sums by kind and stream, medians over steps.
  std::map<std::pair<size_t, int64_t>, std::map<int64_t, double>> opSteps;
  std::map<std::string, std::map<int64_t, double>> kindSteps, streamSteps;
  std::vector<std::unordered_map<int64_t, size_t>> positions;
  for (const PlanPhase &phase : plan.phases)
    positions.push_back(opPositions(phase));
  for (const MeasuredOp &o : m.ops) {
    if (o.rank != c.slowestRank || !used.count(o.step))
      continue;
    const PlanOp &op = plan.phases[o.phase].ops[positions[o.phase].at(o.op)];
    double seconds = o.end - o.start;
    opSteps[{o.phase, o.op}][o.step] += seconds;
    kindSteps[op.kindName()][o.step] += seconds;
    streamSteps[traceThreadName(plan, op.stream)][o.step] += seconds;
  }
  auto medianOverSteps = [&](const std::map<int64_t, double> &bySteps) {
    std::vector<double> v;
    for (int64_t step : used) {
      auto it = bySteps.find(step);
      v.push_back(it == bySteps.end() ? 0.0 : it->second);
    }
    return median(v);
  };
  std::map<std::string, double> kindPredicted, streamPredicted;
  std::vector<OpError> errors;
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    const PlanPhase &phase = plan.phases[p];
    const PhaseTimeline &t = prediction.phases[p];
    if (t.ops.size() != phase.ops.size())
      continue;
    for (size_t i = 0; i < phase.ops.size(); ++i) {
      const PlanOp &op = phase.ops[i];
      double predicted =
          (t.ops[i].end - t.ops[i].start) * double(phase.runsPerStep);
      std::string stream = traceThreadName(plan, op.stream);
      kindPredicted[op.kindName()] += predicted;
      streamPredicted[stream] += predicted;
      double measured = 0;
      if (auto it = opSteps.find({p, op.index}); it != opSteps.end())
        measured = medianOverSteps(it->second);
      errors.push_back({std::string(phaseName(phase.kind)), op.index,
                        traceEventName(op), stream, predicted, measured});
    }
  }
  for (const auto &[kind, predicted] : kindPredicted) {
    double measured = 0;
    if (auto it = kindSteps.find(kind); it != kindSteps.end())
      measured = medianOverSteps(it->second);
    if (predicted > 0 || measured > 0)
      c.kinds.push_back({kind, predicted, measured});
  }
  std::stable_sort(c.kinds.begin(), c.kinds.end(),
                   [](const CompareRow &a, const CompareRow &b) {
                     return std::max(a.predicted, a.measured) >
                            std::max(b.predicted, b.measured);
                   });
  for (size_t s = 0; s < prediction.streams.size(); ++s) {
    std::string stream = traceThreadName(plan, int64_t(s));
    double measured = 0;
    if (auto it = streamSteps.find(stream); it != streamSteps.end())
      measured = medianOverSteps(it->second);
    c.streams.push_back({stream, streamPredicted[stream], measured});
  }
  std::stable_sort(errors.begin(), errors.end(),
                   [](const OpError &a, const OpError &b) {
                     return std::fabs(a.predicted - a.measured) >
                            std::fabs(b.predicted - b.measured);
                   });
  if (errors.size() > 10)
    errors.resize(10);
  c.largestErrors = std::move(errors);
  return c;
}

namespace {

json rowJson(const CompareRow &r) {
  return {{"name", r.name},
          {"predicted_s", r.predicted},
          {"measured_s", r.measured},
          {"ratio", r.ratio()}};
}

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", seconds * 1e3);
  return text;
}

std::string ratioText(const CompareRow &r) {
  if (!(r.measured > 0))
    return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", r.ratio());
  return text;
}

void table(std::string &out, const char *title, const char *first,
           const std::vector<CompareRow> &rows) {
  out += std::string("\n") + title + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-28s %14s %14s %7s\n", first,
                "predicted", "measured", "ratio");
  out += line;
  for (const CompareRow &r : rows) {
    std::snprintf(line, sizeof line, "  %-28s %14s %14s %7s\n", r.name.c_str(),
                  ms(r.predicted).c_str(), ms(r.measured).c_str(),
                  ratioText(r).c_str());
    out += line;
  }
}

} // namespace

json comparisonJson(const TraceComparison &c) {
  json out = {{"step",
               {{"predicted_s", c.step.predicted},
                {"measured_s", c.step.measured},
                {"ratio", c.step.ratio()}}},
              {"steps_measured", c.stepsMeasured},
              {"slowest_rank", c.slowestRank}};
  for (const auto &[key, rows] :
       {std::pair{"phases", &c.phases}, std::pair{"op_kinds", &c.kinds},
        std::pair{"streams", &c.streams}}) {
    json list = json::array();
    for (const CompareRow &r : *rows)
      list.push_back(rowJson(r));
    out[key] = std::move(list);
  }
  json errors = json::array();
  for (const OpError &e : c.largestErrors)
    errors.push_back({{"phase", e.phase},
                      {"op", e.op},
                      {"name", e.name},
                      {"stream", e.stream},
                      {"predicted_s", e.predicted},
                      {"measured_s", e.measured}});
  out["largest_errors"] = std::move(errors);
  return out;
}

std::string comparisonText(const TraceComparison &c) {
  std::string out = "\npredicted against measured (median of " +
                    std::to_string(c.stepsMeasured) + " step" +
                    (c.stepsMeasured == 1 ? "" : "s") + ", slowest rank " +
                    std::to_string(c.slowestRank) + ")\n";
  char line[256];
  std::snprintf(line, sizeof line,
                "  step time: predicted %s, measured %s, ratio %s\n",
                ms(c.step.predicted).c_str(), ms(c.step.measured).c_str(),
                ratioText(c.step).c_str());
  out += line;
  table(out, "per phase (one run)", "phase", c.phases);
  table(out, "per op kind (busy time per step)", "kind", c.kinds);
  table(out, "per stream (busy time per step)", "stream", c.streams);
  out += "\nlargest errors (per step)\n";
  for (const OpError &e : c.largestErrors) {
    std::snprintf(line, sizeof line, "  %-14s op %-5lld %-10s %12s %12s  %s\n",
                  e.phase.c_str(), (long long)e.op, e.stream.c_str(),
                  ms(e.predicted).c_str(), ms(e.measured).c_str(),
                  e.name.c_str());
    out += line;
  }
  return out;
}

json combinedTrace(const Plan &plan, const StepPrediction &prediction,
                   const json &measuredTrace, const MeasuredTrace &m) {
  json out = chromeTrace(plan, prediction);
  json &events = out["traceEvents"];
  for (json &e : events)
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name")
      e["args"]["name"] = "predicted " + e["args"]["name"].get<std::string>();
  // The measured step nearest the median, moved to time 0.
  std::set<int64_t> used = stepsUsed(m);
  auto spans = stepSpans(m);
  std::vector<std::pair<double, int64_t>> steps; // (slowest rank's, step)
  for (int64_t step : used) {
    double slowest = 0;
    for (int64_t r = 0; r < m.ranks; ++r)
      if (auto it = spans.find({r, step}); it != spans.end())
        slowest = std::max(slowest, it->second.second - it->second.first);
    steps.push_back({slowest, step});
  }
  std::sort(steps.begin(), steps.end());
  int64_t chosen = steps.empty() ? 0 : steps[steps.size() / 2].second;
  double origin = 1e300;
  for (const MeasuredRun &r : m.runs)
    if (r.step == chosen)
      origin = std::min(origin, r.start);
  for (const json &e : measuredTrace["traceEvents"]) {
    if (!e.is_object())
      continue;
    if (e.value("ph", "") == "M") {
      json copy = e;
      if (copy.value("name", "") == "process_name")
        copy["args"]["name"] =
            "measured " + copy["args"]["name"].get<std::string>();
      events.push_back(std::move(copy));
      continue;
    }
    auto args = e.find("args");
    if (args == e.end() || !args->is_object() || !args->contains("step") ||
        (*args)["step"] != chosen || !e.contains("ts"))
      continue;
    json copy = e;
    copy["ts"] = e["ts"].get<double>() - origin * 1e6;
    events.push_back(std::move(copy));
  }
  out["otherData"]["measured_step"] = chosen;
  out["otherData"]["generator"] = "zeroc inspect --combined-trace";
  return out;
}

} // namespace zeroc
