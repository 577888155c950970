//===- PreparedPhase.cpp - A plan phase, ready to run ---------------------===//

#include "exec/PreparedPhase.h"

#include "exec/ExecError.h"
#include "exec/MemoryTracker.h"

#include <algorithm>
#include <set>

namespace zeroc::runtime::exec {

namespace {
bool issuesCollective(const PlanOp &op, int64_t worldSize) {
  const OpKind k = op.kind;
  return k == OpKind::AllGatherStart || k == OpKind::ReduceScatterStart ||
         k == OpKind::AllReduceStart || k == OpKind::AllGatherUpdatesStart ||
         k == OpKind::AllToAllStart ||
         // Scalar all-reduces, at more than one rank.
         ((k == OpKind::ClipGradNorm || k == OpKind::UnscaleGrads) &&
          worldSize > 1) ||
         // LAMB's per-parameter norms over sharded states.
         (k == OpKind::AdamUpdate && op.attrsAs<AdamAttrs>().lamb &&
          worldSize > 1);
}
} // namespace

PreparedPhase PreparedPhase::prepare(const PlanPhase &ph, char *arena,
                                     int64_t arenaBytes, int64_t worldSize,
                                     bool oneStream, bool threadPerStream,
                                     int64_t compute) {
  PreparedPhase p;
  p.phase = &ph;
  int64_t maxIndex = -1;
  for (const PlanOp &op : ph.ops)
    maxIndex = std::max(maxIndex, op.index);
  p.opCount = maxIndex + 1;

  // Every value exists from the phase's start: arena views, or for values
  // `read` from persistent tensors, views set when the read runs.
  for (const PlanValue &v : ph.values)
    p.valueInfo[v.id] = &v;
  std::set<int64_t> views;
  for (const PlanOp &op : ph.ops)
    if (op.kind == OpKind::Read)
      views.insert(op.outputs.begin(), op.outputs.end());
  for (const PlanValue &v : ph.values) {
    Tensor t{nullptr, v.dtype, v.shape};
    if (views.count(v.id)) {
      p.readViews.push_back(v.id);
    } else if (v.offset >= 0) {
      int64_t bytes = std::max<int64_t>(t.bytes(), v.bytes);
      if (v.offset + bytes > arenaBytes)
        fail("value " + std::to_string(v.id) + " at arena offset " +
             std::to_string(v.offset) + " does not fit the arena of " +
             std::to_string(arenaBytes) + " bytes");
      t.data = arena + v.offset;
      p.arenaEnd = std::max(p.arenaEnd, v.offset + bytes);
    } else {
      p.unplanned.push_back(v.id);
    }
    p.values[v.id] = t;
  }

  // At one rank on stream threads, the collective-only streams join the
  // compute stream (a thread each per phase run cost more than their
  // copies: bench/RESULTS.md, run 6).
  std::set<int64_t> joined;
  if (threadPerStream && worldSize == 1)
    for (int64_t s : collectiveOnlyStreams(ph, compute))
      joined.insert(s);
  int64_t tickets = 0;
  std::map<int64_t, std::vector<const PlanOp *>> streams;
  for (const PlanOp &op : ph.ops) {
    if (op.kind == OpKind::Wait)
      for (int64_t d : op.deps)
        p.waitOf[d] = &op;
    if (issuesCollective(op, worldSize))
      p.ticketOf[op.index] = tickets++;
    int64_t stream = oneStream                 ? 0
                     : joined.count(op.stream) ? compute
                                               : op.stream;
    streams[stream].push_back(&op);
    p.streamOf[op.index] = stream;
  }
  p.streams.assign(streams.begin(), streams.end());
  return p;
}

void PreparedPhase::bind(MemoryTracker &memory,
                         std::vector<std::shared_ptr<char>> &keep) {
  keep.clear();
  for (int64_t id : readViews)
    values.at(id).data = nullptr;
  memory.useArena(arenaEnd);
  for (int64_t id : unplanned) {
    Tensor &t = values.at(id);
    keep.push_back(
        memory.allocate(std::max<int64_t>(t.bytes(), valueInfo.at(id)->bytes),
                        true, 64, MemoryUse::UnplannedWorkspace));
    t.data = keep.back().get();
  }
}

} // namespace zeroc::runtime::exec
