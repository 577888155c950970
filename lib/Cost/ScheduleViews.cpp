//===- ScheduleViews.cpp - Chrome trace and SVG of a simulated step -------===//

#include "zeroc/Cost/ScheduleViews.h"

#include "zeroc/Plan/PlanTrace.h"
#include "zeroc/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

using nlohmann::json;

namespace zeroc {

std::vector<double> phaseOffsets(const StepPrediction &prediction) {
  std::vector<double> offsets;
  double at = 0;
  for (const PhaseTimeline &t : prediction.phases) {
    offsets.push_back(at);
    at += t.seconds;
  }
  return offsets;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

MemoryCurve deviceMemoryCurve(const Plan &plan,
                              const StepPrediction &prediction) {
  MemoryCurve curve;
  curve.persistentBytes =
      double(persistentBytesPerRank(plan).placement(Placement::Device));
  // (time, change); frees sort before allocations at the same time, so a
  // buffer released by a zero-time op is not counted twice.
  std::vector<std::pair<double, double>> changes;
  std::vector<double> offsets = phaseOffsets(prediction);
  for (size_t p = 0; p < prediction.phases.size(); ++p) {
    const PhaseTimeline &timeline = prediction.phases[p];
    const PlanPhase *phase = plan.findPhase(timeline.kind);
    if (!phase || phase->ops.size() != timeline.ops.size())
      continue;
    // The memory planner's own profile, when the plan has one: the live
    // transient bytes during each op, so the picture agrees with the plan.
    if (phase->memory && phase->memory->liveBytes.size() == phase->ops.size()) {
      double previous = 0;
      for (size_t i = 0; i < phase->ops.size(); ++i) {
        double live = double(phase->memory->liveBytes[i]);
        if (live != previous)
          changes.emplace_back(offsets[p] + timeline.ops[i].start,
                               live - previous);
        previous = live;
      }
      if (previous != 0 && !timeline.ops.empty())
        changes.emplace_back(offsets[p] + timeline.ops.back().end, -previous);
      continue;
    }
    std::unordered_map<int64_t, size_t> position;
    for (size_t i = 0; i < phase->ops.size(); ++i)
      position[phase->ops[i].index] = i;
    std::unordered_map<int64_t, double> alloc, free;
    std::unordered_map<int64_t, bool> isView;
    for (int64_t id : phase->args)
      alloc[id] = 0;
    for (size_t i = 0; i < phase->ops.size(); ++i) {
      const PlanOp &op = phase->ops[i];
      const OpTiming &t = timeline.ops[i];
      double defined = t.start;
      if (op.kind == OpKind::Wait)
        for (int64_t dep : op.deps)
          if (auto d = position.find(dep); d != position.end())
            if (isAsyncStart(phase->ops[d->second].kind))
              defined = std::min(defined, timeline.ops[d->second].start);
      for (int64_t id : op.outputs) {
        alloc[id] = defined;
        free[id] = t.end; // dead unless used later
        isView[id] = op.kind == OpKind::Read;
      }
      for (int64_t id : op.inputs)
        free[id] = std::max(free[id], t.end);
    }
    for (const PlanValue &v : phase->values) {
      auto a = alloc.find(v.id);
      if (a == alloc.end() || isView[v.id] || v.bytes <= 0)
        continue;
      double end = std::max(a->second, free[v.id]);
      changes.emplace_back(offsets[p] + a->second, double(v.bytes));
      changes.emplace_back(offsets[p] + end, -double(v.bytes));
    }
  }
  std::sort(changes.begin(), changes.end());
  double bytes = curve.persistentBytes;
  curve.points.emplace_back(0.0, bytes);
  curve.peakBytes = bytes;
  for (size_t i = 0; i < changes.size();) {
    double time = changes[i].first;
    for (; i < changes.size() && changes[i].first == time; ++i)
      bytes += changes[i].second;
    if (curve.points.back().first == time)
      curve.points.back().second = bytes;
    else
      curve.points.emplace_back(time, bytes);
    if (bytes > curve.peakBytes) {
      curve.peakBytes = bytes;
      curve.peakSeconds = time;
    }
  }
  return curve;
}

//===----------------------------------------------------------------------===//
// Chrome trace
//===----------------------------------------------------------------------===//

namespace {

std::string phaseTitle(const PhaseTimeline &t) {
  return std::string(phaseName(t.kind)) + " (" + std::to_string(t.runsPerStep) +
         " run" + (t.runsPerStep == 1 ? "" : "s") + " per step; one shown)";
}

} // namespace

json chromeTrace(const Plan &plan, const StepPrediction &prediction) {
  json events = json::array();
  int64_t computeStream = prediction.computeStream;
  std::vector<double> offsets = phaseOffsets(prediction);
  for (size_t p = 0; p < prediction.phases.size(); ++p) {
    const PhaseTimeline &timeline = prediction.phases[p];
    const PlanPhase *phase = plan.findPhase(timeline.kind);
    if (!phase)
      continue;
    int64_t pid = tracePid(p);
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 0},
                      {"ts", 0},
                      {"args", {{"name", traceProcessName(*phase)}}}});
    events.push_back({{"name", "process_sort_index"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 0},
                      {"ts", 0},
                      {"args", {{"sort_index", pid}}}});
    for (size_t s = 0; s < prediction.streams.size(); ++s)
      events.push_back(
          {{"name", "thread_name"},
           {"ph", "M"},
           {"pid", pid},
           {"tid", int(s)},
           {"ts", 0},
           {"args", {{"name", traceThreadName(plan, int64_t(s))}}}});
    if (phase->ops.size() != timeline.ops.size())
      continue;
    double offset = offsets[p];
    for (size_t i = 0; i < timeline.ops.size(); ++i) {
      const OpTiming &t = timeline.ops[i];
      const PlanOp &op = phase->ops[i];
      if (t.start > t.ready &&
          (op.kind == OpKind::Wait || t.stream == computeStream)) {
        // The stream sat idle: show what it waited for.
        json args = {{"op", t.op}};
        if (t.blockedBy >= 0)
          args["waiting_for_op"] = t.blockedBy;
        events.push_back({{"name", "blocked"},
                          {"cat", "blocked"},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", t.stream},
                          {"ts", (offset + t.ready) * 1e6},
                          {"dur", (t.start - t.ready) * 1e6},
                          {"args", std::move(args)}});
      }
      if (t.end <= t.start)
        continue;
      events.push_back({{"name", traceEventName(op)},
                        {"cat", std::string(opClassName(t.cls))},
                        {"ph", "X"},
                        {"pid", pid},
                        {"tid", t.stream},
                        {"ts", (offset + t.start) * 1e6},
                        {"dur", (t.end - t.start) * 1e6},
                        {"args", traceEventArgs(op)}});
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"generator", "zeroc"},
            {"model", plan.model.name},
            {"plan_fingerprint", planFingerprint(plan)},
            {"cluster", prediction.cluster},
            {"predicted_step_time_s", prediction.stepSeconds},
            {"exposed_comm_s", prediction.exposedComm},
            {"achieved_tflops_per_gpu", prediction.achievedTflopsPerGpu}}}};
}

//===----------------------------------------------------------------------===//
// SVG
//===----------------------------------------------------------------------===//

namespace {

std::string escapeXml(const std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      // Control characters are not allowed in XML 1.0.
      if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n')
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}

/// 1, 2 or 5 x 10^k, the first at least `raw`.
double niceStep(double raw) {
  if (!(raw > 0))
    return 1;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw)
      return m * power;
  return 10 * power;
}

std::string tickText(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

const char *fillOf(OpClass cls) {
  switch (cls) {
  case OpClass::Compute:
    return "#4e79a7";
  case OpClass::Collective:
    return "#f28e2b";
  case OpClass::Offload:
    return "#59a14f";
  case OpClass::Host:
    return "#b07aa1";
  case OpClass::Free:
    return "#bab0ac";
  }
  return "#bab0ac";
}
constexpr const char *kBlockedFill = "#e15759";

class Svg {
public:
  void open(const std::string &tag, const std::string &attrs) {
    out += "<" + tag + (attrs.empty() ? "" : " " + attrs) + ">\n";
  }
  void close(const std::string &tag) { out += "</" + tag + ">\n"; }
  void empty(const std::string &tag, const std::string &attrs) {
    out += "<" + tag + " " + attrs + "/>\n";
  }
  void text(double x, double y, const std::string &content,
            const std::string &attrs = "") {
    out += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" +
           (attrs.empty() ? "" : " " + attrs) + ">" + escapeXml(content) +
           "</text>\n";
  }
  void rect(double x, double y, double w, double h, const std::string &fill,
            const std::string &title = "") {
    std::string attrs = "x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" +
                        num(w) + "\" height=\"" + num(h) + "\" fill=\"" + fill +
                        "\"";
    if (title.empty()) {
      empty("rect", attrs);
      return;
    }
    out +=
        "<rect " + attrs + "><title>" + escapeXml(title) + "</title></rect>\n";
  }
  void line(double x1, double y1, double x2, double y2,
            const std::string &style) {
    empty("line", "x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" +
                      num(x2) + "\" y2=\"" + num(y2) + "\" " + style);
  }

  std::string out;
};

std::string durationText(double seconds) {
  char text[32];
  if (seconds >= 1e-3)
    std::snprintf(text, sizeof text, "%.3f ms", seconds * 1e3);
  else
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  return text;
}

} // namespace

std::string scheduleSvg(const Plan &plan, const StepPrediction &prediction) {
  const double width = 1200, left = 110, right = 30;
  const double plotWidth = width - left - right;
  const double memTop = 70, memHeight = 200;
  const double laneTop = memTop + memHeight + 60, laneHeight = 22, laneGap = 8;
  size_t streams = prediction.streams.size();
  const double lanesBottom =
      laneTop + double(streams) * (laneHeight + laneGap) - laneGap;
  const double axisY = lanesBottom + 12;
  const double legendY = axisY + 50;
  const double height = legendY + 30;

  std::vector<double> offsets = phaseOffsets(prediction);
  double total = 0;
  for (const PhaseTimeline &t : prediction.phases)
    total += t.seconds;
  if (!(total > 0))
    total = 1e-6;
  double ms = total * 1e3;
  auto xOf = [&](double seconds) { return left + plotWidth * seconds / total; };

  MemoryCurve memory = deviceMemoryCurve(plan, prediction);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  double maxGiB = std::max(memory.peakBytes / kGiB, 1e-9);
  double memStep = niceStep(maxGiB / 4);
  double memMax = std::ceil(maxGiB / memStep) * memStep;
  auto yOf = [&](double bytes) {
    return memTop + memHeight * (1 - bytes / kGiB / memMax);
  };

  Svg svg;
  svg.out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg.open("svg", "xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) +
                      "\" height=\"" + num(height) + "\" viewBox=\"0 0 " +
                      num(width) + " " + num(height) +
                      "\" font-family=\"sans-serif\" font-size=\"11\"");
  svg.rect(0, 0, width, height, "#ffffff");
  char title[256];
  std::snprintf(title, sizeof title,
                "%s, ZeRO stage %lld, %lld ranks on %s: step %s, "
                "%.1f TFLOP/s per GPU",
                plan.model.name.c_str(), (long long)plan.stage,
                (long long)plan.worldSize, prediction.cluster.c_str(),
                durationText(prediction.stepSeconds).c_str(),
                prediction.achievedTflopsPerGpu);
  svg.text(left, 24, title, "font-size=\"14\" font-weight=\"bold\"");
  svg.text(left, 42,
           "one run of each phase; a step runs the micro-step " +
               std::to_string(prediction.phases.empty()
                                  ? 1
                                  : prediction.phases.front().runsPerStep) +
               " times");

  // Memory panel.
  svg.text(left, memTop - 10, "device memory per rank (GiB)",
           "font-weight=\"bold\"");
  for (double v = 0; v <= memMax + memStep / 2; v += memStep) {
    double y = yOf(v * kGiB);
    svg.line(left, y, left + plotWidth, y, "stroke=\"#e0e0e0\"");
    svg.text(left - 6, y + 4, tickText(v), "text-anchor=\"end\"");
  }
  std::string path;
  for (size_t i = 0; i < memory.points.size(); ++i) {
    double x = xOf(memory.points[i].first);
    double y = yOf(memory.points[i].second);
    if (i == 0)
      path += "M" + num(x) + " " + num(y);
    else
      path += " H" + num(x) + " V" + num(y);
  }
  path += " H" + num(left + plotWidth);
  svg.empty("path", "d=\"" + path +
                        "\" fill=\"none\" stroke=\"#4e79a7\" "
                        "stroke-width=\"1.5\"");
  double persistentY = yOf(memory.persistentBytes);
  svg.line(left, persistentY, left + plotWidth, persistentY,
           "stroke=\"#76b7b2\" stroke-dasharray=\"4 3\"");
  // Below its line, unless that is the axis.
  double labelY = persistentY + 14 < memTop + memHeight - 2 ? persistentY + 14
                                                            : persistentY - 5;
  svg.text(left + 4, labelY,
           "persistent state " + humanBytes(memory.persistentBytes),
           "fill=\"#3b7a75\"");
  svg.text(xOf(memory.peakSeconds) + 4, yOf(memory.peakBytes) - 4,
           "peak " + humanBytes(memory.peakBytes), "fill=\"#2a4d73\"");
  svg.line(left, memTop, left, memTop + memHeight, "stroke=\"#333333\"");
  svg.line(left, memTop + memHeight, left + plotWidth, memTop + memHeight,
           "stroke=\"#333333\"");

  // Phase boundaries and names, across both panels.
  double labelEnd[2] = {0, 0};
  for (size_t p = 0; p < prediction.phases.size(); ++p) {
    double x = xOf(offsets[p]);
    if (p > 0)
      svg.line(x, memTop, x, lanesBottom,
               "stroke=\"#555555\" stroke-dasharray=\"6 4\"");
    // Names start at their phase, kept inside the plot, and move up a row
    // rather than run into the name before them.
    std::string name = phaseTitle(prediction.phases[p]);
    double textWidth = 6.2 * double(name.size());
    double at = std::min(x + 4, left + plotWidth - textWidth);
    int row = at < labelEnd[0] + 8 ? 1 : 0;
    svg.text(at, laneTop - 12 - 14 * row, name, "fill=\"#555555\"");
    labelEnd[row] = at + textWidth;
  }

  // Stream lanes.
  int64_t computeStream = prediction.computeStream;
  for (size_t s = 0; s < streams; ++s) {
    double y = laneTop + double(s) * (laneHeight + laneGap);
    svg.rect(left, y, plotWidth, laneHeight, "#f4f4f4");
    svg.text(left - 6, y + laneHeight / 2 + 4, prediction.streams[s],
             "text-anchor=\"end\"");
  }
  for (size_t p = 0; p < prediction.phases.size(); ++p) {
    const PhaseTimeline &timeline = prediction.phases[p];
    const PlanPhase *phase = plan.findPhase(timeline.kind);
    if (!phase || phase->ops.size() != timeline.ops.size())
      continue;
    for (size_t i = 0; i < timeline.ops.size(); ++i) {
      const OpTiming &t = timeline.ops[i];
      const PlanOp &op = phase->ops[i];
      if (t.stream < 0 || size_t(t.stream) >= streams)
        continue;
      double y = laneTop + double(t.stream) * (laneHeight + laneGap);
      // Other streams idle until their inputs exist; only the compute
      // stream and waits are "blocked".
      bool blocked = t.start > t.ready &&
                     (op.kind == OpKind::Wait || t.stream == computeStream);
      if (blocked) {
        double x0 = xOf(offsets[p] + t.ready), x1 = xOf(offsets[p] + t.start);
        svg.rect(x0, y + laneHeight * 0.35, std::max(x1 - x0, 0.3),
                 laneHeight * 0.3, kBlockedFill,
                 "op " + std::to_string(t.op) + " " + op.kindName() +
                     " blocked " + durationText(t.start - t.ready) +
                     (t.blockedBy >= 0
                          ? " waiting for op " + std::to_string(t.blockedBy)
                          : ""));
      }
      if (t.end <= t.start)
        continue;
      double x0 = xOf(offsets[p] + t.start), x1 = xOf(offsets[p] + t.end);
      svg.rect(x0, y, std::max(x1 - x0, 0.3), laneHeight, fillOf(t.cls),
               "op " + std::to_string(t.op) + " " + traceEventName(op) + ": " +
                   durationText(t.end - t.start));
    }
  }

  // Time axis.
  svg.line(left, axisY, left + plotWidth, axisY, "stroke=\"#333333\"");
  double step = niceStep(ms / 10);
  for (double v = 0; v <= ms * (1 + 1e-9); v += step) {
    double x = left + plotWidth * v / ms;
    svg.line(x, axisY, x, axisY + 5, "stroke=\"#333333\"");
    svg.line(x, memTop + memHeight, x, memTop + memHeight + 5,
             "stroke=\"#333333\"");
    svg.text(x, axisY + 18, tickText(v), "text-anchor=\"middle\"");
  }
  svg.text(left + plotWidth / 2, axisY + 36, "time (ms)",
           "text-anchor=\"middle\" font-weight=\"bold\"");

  // Legend.
  struct Entry {
    const char *fill;
    const char *label;
  };
  const Entry legend[] = {
      {fillOf(OpClass::Compute), "compute"},
      {fillOf(OpClass::Collective), "collective"},
      {fillOf(OpClass::Offload), "offload copy"},
      {fillOf(OpClass::Host), "host optimizer"},
      {kBlockedFill, "stream blocked in a wait"},
  };
  double x = left;
  for (const Entry &e : legend) {
    svg.rect(x, legendY - 10, 12, 12, e.fill);
    svg.text(x + 18, legendY, e.label);
    x += 40 + 7 * double(std::string(e.label).size());
  }
  svg.close("svg");
  return svg.out;
}

} // namespace zeroc
