//===- Profiler.cpp - Every op's start and end, per stream and rank -------===//

#include "exec/Profiler.h"

#include "comm/Communicator.h"
#include "exec/Device.h"
#include "zeroc/Plan/PlanTrace.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

using nlohmann::json;

namespace zeroc::runtime {

void Profiler::setOrigin(Clock::time_point t) {
  origin = t;
  if (timer) {
    timer->startOpTiming();
    // The device's origin event completed before startOpTiming returned.
    deviceOrigin = seconds(Clock::now());
    nextSlot = 0;
  }
}

void Profiler::useDeviceClock(Device &dev) {
  // Slots are handed out by the one thread that issues every op.
  timer =
      dev.timesOps() && dev.scheduling() == StreamScheduling::OneIssuingThread
          ? &dev
          : nullptr;
}

int64_t Profiler::slotFor(int64_t index) {
  if (!current || index < 0 || size_t(index) >= current->ops.size())
    return -1;
  if (current->slots.size() != current->ops.size())
    current->slots.assign(current->ops.size(), -1);
  current->slots[size_t(index)] = nextSlot;
  return nextSlot++;
}

void Profiler::resolveDeviceTimes() {
  if (!timer)
    return;
  std::vector<std::pair<double, double>> times = timer->opTimes();
  for (Run &r : recorded) {
    if (r.slots.empty())
      continue;
    double first = -1, last = -1;
    for (size_t i = 0; i < r.slots.size(); ++i) {
      int64_t slot = r.slots[i];
      if (slot < 0 || size_t(slot) >= times.size() ||
          times[size_t(slot)].first < 0 || times[size_t(slot)].second < 0)
        continue;
      OpSpan span{deviceOrigin + times[size_t(slot)].first,
                  deviceOrigin + times[size_t(slot)].second};
      r.ops[i] = span;
      first = first < 0 ? span.start : std::min(first, span.start);
      last = std::max(last, span.end);
    }
    if (first >= 0) {
      r.start = first;
      r.end = last;
    }
    r.slots.clear();
  }
  nextSlot = 0; // The device reuses its marks (Device::opTimes).
}

void Profiler::beginRun(const PlanPhase &phase, int64_t step, int64_t run,
                        int64_t opCount) {
  Run r;
  r.phase = phase.kind;
  r.step = step;
  r.run = run;
  r.ops.assign(size_t(std::max<int64_t>(opCount, 0)), OpSpan{});
  r.start = seconds(Clock::now());
  recorded.push_back(std::move(r));
  current = &recorded.back();
}

void Profiler::record(int64_t index, Clock::time_point start,
                      Clock::time_point end) {
  if (!current || index < 0 || size_t(index) >= current->ops.size())
    return;
  current->ops[size_t(index)] = {seconds(start), seconds(end)};
}

void Profiler::endRun() {
  if (current)
    current->end = seconds(Clock::now());
  current = nullptr;
}

void Profiler::annotate(int64_t run, int64_t index, const json &args) {
  if (run < 0 || size_t(run) >= recorded.size())
    return;
  json &extra = recorded[size_t(run)].extra[index];
  for (const auto &[key, value] : args.items())
    extra[key] = value;
}

void Profiler::markStep(int64_t step, std::string name, json args) {
  marks.push_back(
      {step, seconds(Clock::now()), std::move(name), std::move(args)});
}

json Profiler::events(const Plan &plan, int64_t rank) const {
  json out = json::array();
  std::unordered_map<int, size_t> position; // PhaseKind -> plan position
  for (size_t p = 0; p < plan.phases.size(); ++p) {
    const PlanPhase &phase = plan.phases[p];
    position[int(phase.kind)] = p;
    int64_t pid = tracePid(p, rank);
    out.push_back({{"name", "process_name"},
                   {"ph", "M"},
                   {"pid", pid},
                   {"tid", 0},
                   {"ts", 0},
                   {"args", {{"name", traceProcessName(phase, rank)}}}});
    out.push_back({{"name", "process_sort_index"},
                   {"ph", "M"},
                   {"pid", pid},
                   {"tid", 0},
                   {"ts", 0},
                   {"args", {{"sort_index", pid}}}});
    size_t streams = std::max<size_t>(plan.streams.size(), 1);
    for (const PlanOp &op : phase.ops)
      streams = std::max(streams, size_t(std::max<int64_t>(op.stream, 0)) + 1);
    for (size_t s = 0; s < streams; ++s)
      out.push_back({{"name", "thread_name"},
                     {"ph", "M"},
                     {"pid", pid},
                     {"tid", int(s)},
                     {"ts", 0},
                     {"args", {{"name", traceThreadName(plan, int64_t(s))}}}});
    out.push_back({{"name", "thread_name"},
                   {"ph", "M"},
                   {"pid", pid},
                   {"tid", -1},
                   {"ts", 0},
                   {"args", {{"name", "phase runs"}}}});
  }
  for (const Run &r : recorded) {
    auto pos = position.find(int(r.phase));
    if (pos == position.end())
      continue;
    const PlanPhase &phase = plan.phases[pos->second];
    int64_t pid = tracePid(pos->second, rank);
    std::string name(phaseName(r.phase));
    out.push_back({{"name", name},
                   {"cat", "phase_run"},
                   {"ph", "X"},
                   {"pid", pid},
                   {"tid", -1},
                   {"ts", r.start * 1e6},
                   {"dur", (r.end - r.start) * 1e6},
                   {"args",
                    {{"rank", rank},
                     {"phase", name},
                     {"step", r.step},
                     {"run", r.run}}}});
    for (const PlanOp &op : phase.ops) {
      if (size_t(op.index) >= r.ops.size())
        continue;
      const OpSpan &span = r.ops[size_t(op.index)];
      if (span.start < 0)
        continue;
      json args = traceEventArgs(op);
      args["rank"] = rank;
      args["phase"] = name;
      args["step"] = r.step;
      args["run"] = r.run;
      if (auto extra = r.extra.find(op.index); extra != r.extra.end())
        for (const auto &[key, value] : extra->second.items())
          args[key] = value;
      out.push_back({{"name", traceEventName(op)},
                     {"cat", "op"},
                     {"ph", "X"},
                     {"pid", pid},
                     {"tid", op.stream},
                     {"ts", span.start * 1e6},
                     {"dur", (span.end - span.start) * 1e6},
                     {"args", std::move(args)}});
    }
  }
  if (rank == 0)
    for (const StepMark &m : marks) {
      json args = m.args;
      args["step"] = m.step;
      out.push_back({{"name", m.name},
                     {"cat", "step"},
                     {"ph", "i"},
                     {"s", "g"},
                     {"pid", tracePid(0, rank)},
                     {"tid", -1},
                     {"ts", m.at * 1e6},
                     {"args", std::move(args)}});
    }
  return out;
}

json Profiler::gatherTrace(const Plan &plan, Communicator &comm,
                           const std::string &device) const {
  std::vector<std::string> all =
      allGatherText(comm, events(plan, comm.rank()).dump(), "profile gather");
  if (comm.rank() != 0)
    return nullptr;
  json events = json::array();
  for (const std::string &text : all)
    for (json &e : json::parse(text))
      events.push_back(std::move(e));
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"generator", "zerorun --profile"},
            {"model", plan.model.name},
            {"plan_fingerprint", planFingerprint(plan)},
            {"world_size", comm.size()},
            {"device", device},
            {"clock", timer ? "the device's clock (an event before and after "
                              "each op on its stream), seconds since a "
                              "barrier before the first step"
                            : "host steady clock, seconds since a barrier "
                              "before the first step"}}}};
}

} // namespace zeroc::runtime
