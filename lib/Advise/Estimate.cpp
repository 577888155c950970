//===- Estimate.cpp - A plan at another micro-batch, without compiling ----===//

#include "zeroc/Advise/Estimate.h"

#include "zeroc/Support/Collectives.h"

#include <algorithm>
#include <cmath>

using nlohmann::json;

namespace zeroc {

namespace {

std::string at(const PlanPhase &phase, const PlanOp &op) {
  return std::string(phaseName(phase.kind)) + " op " +
         std::to_string(op.index) + " (" + op.kindName() + ")";
}

/// A figure of `a` and `b` at `t` (0 at a's micro-batch, 1 at b's); never
/// below zero.
int64_t lerp(int64_t a, int64_t b, double t) {
  return std::max<int64_t>(
      0, std::llround(double(a) + (double(b) - double(a)) * t));
}

} // namespace

std::optional<std::string> sameScheduleAtTwoMicroBatches(const Plan &a,
                                                         const Plan &b) {
  if (a.model.microBatch == b.model.microBatch)
    return "both plans are at micro-batch " +
           std::to_string(a.model.microBatch);
  if (a.worldSize != b.worldSize || a.stage != b.stage ||
      a.recompute != b.recompute)
    return std::string("the world size, stage or recomputation differ");
  if (a.tensors.size() != b.tensors.size())
    return std::string("the persistent tensors differ");
  for (size_t i = 0; i < a.tensors.size(); ++i)
    if (a.tensors[i].name != b.tensors[i].name ||
        a.tensors[i].localNumel != b.tensors[i].localNumel ||
        a.tensors[i].placement != b.tensors[i].placement)
      return "persistent tensor " + a.tensors[i].name + " differs";
  if (a.phases.size() != b.phases.size())
    return std::string("the phases differ");
  for (size_t p = 0; p < a.phases.size(); ++p) {
    const PlanPhase &pa = a.phases[p], &pb = b.phases[p];
    if (pa.kind != pb.kind || pa.ops.size() != pb.ops.size() ||
        pa.values.size() != pb.values.size() ||
        pa.memory.has_value() != pb.memory.has_value())
      return std::string(phaseName(pa.kind)) +
             ": the number of ops or values differs";
    for (size_t i = 0; i < pa.ops.size(); ++i) {
      const PlanOp &x = pa.ops[i], &y = pb.ops[i];
      // Dependencies may differ: the memory planner orders reuse of arena
      // memory across streams (sched.after), and the arena's layout
      // depends on the sizes.
      if (x.index != y.index || x.kind != y.kind || x.stream != y.stream ||
          x.collective != y.collective || x.commElements != y.commElements ||
          x.tensors != y.tensors || x.inputs != y.inputs ||
          x.outputs != y.outputs)
        return at(pa, x) + " differs";
    }
    for (size_t i = 0; i < pa.values.size(); ++i)
      if (pa.values[i].id != pb.values[i].id ||
          pa.values[i].dtype != pb.values[i].dtype)
        return std::string(phaseName(pa.kind)) + " value " +
               std::to_string(pa.values[i].id) + " differs";
    if (pa.memory && pa.memory->liveBytes.size() != pb.memory->liveBytes.size())
      return std::string(phaseName(pa.kind)) + ": the live bytes differ";
  }
  return std::nullopt;
}

Plan interpolatePlan(const Plan &a, const Plan &b, int64_t microBatch,
                     int64_t accumulation) {
  double t = double(microBatch - a.model.microBatch) /
             double(b.model.microBatch - a.model.microBatch);
  Plan out = a;
  out.model.microBatch = microBatch;
  out.gradientAccumulationSteps = accumulation;
  for (size_t p = 0; p < out.phases.size(); ++p) {
    PlanPhase &phase = out.phases[p];
    const PlanPhase &pa = a.phases[p], &pb = b.phases[p];
    if (phase.kind == PhaseKind::MicroStep)
      phase.runsPerStep = accumulation;
    for (size_t i = 0; i < phase.ops.size(); ++i) {
      PlanOp &op = phase.ops[i];
      const PlanOp &x = pa.ops[i], &y = pb.ops[i];
      op.flops = lerp(x.flops, y.flops, t);
      op.bytes = lerp(x.bytes, y.bytes, t);
      op.workspaceBytes = lerp(x.workspaceBytes, y.workspaceBytes, t);
      // The arena-reuse orderings of the nearer plan (an estimate).
      op.deps = t < 0.5 ? x.deps : y.deps;
    }
    for (size_t i = 0; i < phase.values.size(); ++i)
      phase.values[i].bytes = lerp(pa.values[i].bytes, pb.values[i].bytes, t);
    if (!phase.memory)
      continue;
    PlanPhaseMemory &m = *phase.memory;
    const PlanPhaseMemory &ma = *pa.memory, &mb = *pb.memory;
    for (size_t i = 0; i < m.liveBytes.size(); ++i)
      m.liveBytes[i] = lerp(ma.liveBytes[i], mb.liveBytes[i], t);
    if (!m.liveBytes.empty()) {
      auto peak = std::max_element(m.liveBytes.begin(), m.liveBytes.end());
      m.peakLiveBytes = *peak;
      m.peakOp = int64_t(peak - m.liveBytes.begin());
    } else {
      m.peakLiveBytes = lerp(ma.peakLiveBytes, mb.peakLiveBytes, t);
    }
    // The arena the first-fit allocator lays out over these buffers: its
    // holes, as a share of the live peak, as in the nearer compiled plan
    // (an estimate, docs/advise.md; interpolating the arena itself is worse,
    // because a buffer that moves into another hole between the two
    // compiles makes it far from affine).
    const PlanPhaseMemory &near = t < 0.5 ? ma : mb;
    double holes = near.peakLiveBytes > 0
                       ? double(near.arenaBytes) / double(near.peakLiveBytes)
                       : 1.0;
    m.arenaBytes = std::max(
        m.peakLiveBytes,
        int64_t(std::llround(double(m.peakLiveBytes) * std::max(1.0, holes))));
    // What is live at the peak, by category: as at the compiled peaks.
    m.activations = lerp(ma.activations, mb.activations, t);
    m.gatherBuffers = lerp(ma.gatherBuffers, mb.gatherBuffers, t);
    m.reduceBuckets = lerp(ma.reduceBuckets, mb.reduceBuckets, t);
    m.workspace = lerp(ma.workspace, mb.workspace, t);
  }

  // The step's communication: the ZeRO paper's accounting of the plan
  // writer, run over the ops as often as their phase runs.
  accountComm(out);

  // The resolved config says the batch it was planned for.
  if (out.config.is_object()) {
    out.config["train_micro_batch_size_per_gpu"] = microBatch;
    out.config["gradient_accumulation_steps"] = accumulation;
    out.config["train_batch_size"] = microBatch * accumulation * out.worldSize;
  }
  return out;
}

} // namespace zeroc
