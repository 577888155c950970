//===- PlanTrace.cpp - Names shared by predicted and measured traces ------===//

#include "zeroc/Plan/PlanTrace.h"

#include <cstdio>

using nlohmann::json;

namespace zeroc {

std::string opSubject(const PlanOp &op) {
  // A model op belongs to a module; a scheduling op (a collective, a copy,
  // the optimizer's) is better told by the tensors it moves: its location
  // is often just the function's ("forward").
  if (!op.where.empty() && (isModelOp(op.kind) || op.tensors.empty()))
    return op.where;
  if (op.tensors.empty())
    return "";
  std::string s = op.tensors.front();
  if (op.tensors.size() > 1)
    s += " +" + std::to_string(op.tensors.size() - 1) + " more";
  return s;
}

std::string traceEventName(const PlanOp &op) {
  std::string kind = op.kindName();
  std::string subject = opSubject(op);
  return subject.empty() ? kind : kind + " " + subject;
}

json traceEventArgs(const PlanOp &op) {
  json args = {{"op", op.index}};
  if (!op.where.empty())
    args["where"] = op.where;
  if (!op.tensors.empty())
    args["tensors"] = op.tensors;
  if (!op.recompute.empty())
    args["recompute"] = op.recompute;
  if (op.flops)
    args["flops"] = op.flops;
  if (op.bytes)
    args["bytes"] = op.bytes;
  if (!op.collective.empty()) {
    args["collective"] = op.collective;
    args["comm_elements"] = op.commElements;
  }
  return args;
}

std::string traceProcessName(const PlanPhase &phase, int64_t rank) {
  std::string name = std::string(phaseName(phase.kind)) + " (" +
                     std::to_string(phase.runsPerStep) + " run" +
                     (phase.runsPerStep == 1 ? "" : "s") + " per step)";
  return rank >= 0 ? "rank " + std::to_string(rank) + ": " + name : name;
}

std::string traceThreadName(const Plan &plan, int64_t stream) {
  if (stream >= 0 && size_t(stream) < plan.streams.size())
    return plan.streams[size_t(stream)];
  return "stream " + std::to_string(stream);
}

int64_t tracePid(size_t phasePosition, int64_t rank) {
  int64_t base = rank < 0 ? 0 : 1000 * (rank + 1);
  return base + int64_t(phasePosition) + 1;
}

namespace {
/// FNV-1a, 64 bits: stable across platforms and runs.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const std::string &s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff; // A separator, so that "ab","c" differs from "a","bc".
    h *= 1099511628211ull;
  }
  void add(int64_t v) { add(std::to_string(v)); }
};
} // namespace

std::string planFingerprint(const Plan &plan) {
  Fnv f;
  f.add(plan.worldSize);
  f.add(plan.stage);
  for (const std::string &s : plan.streams)
    f.add(s);
  for (const PlanPhase &phase : plan.phases) {
    f.add(std::string(phaseName(phase.kind)));
    f.add(phase.runsPerStep);
    for (const PlanOp &op : phase.ops) {
      f.add(op.index);
      f.add(std::string(op.kindName()));
      f.add(op.stream);
      for (int64_t d : op.deps)
        f.add(d);
      f.add(op.where);
      for (const std::string &t : op.tensors)
        f.add(t);
      f.add(op.collective);
      f.add(op.commElements);
      f.add(op.flops);
      f.add(op.bytes);
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", (unsigned long long)f.h);
  return text;
}

} // namespace zeroc
