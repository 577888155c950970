//===- Workspace.h - Scratch buffers of collectives and updates -*- C++ -*-===//
//
// Some sched ops need device memory beside their operands while they run:
// the receive buffer of a reduce-scatter (the reduced part is accumulated
// into the gradient shard once it arrives), the padded send buffer of a
// stage-3 reduce-scatter, the buffers small gradients are packed into to go
// out as one collective (stages 1-2: a staging range; stage 3: the ranks'
// blocks), the padded copy of a replicated parameter that
// `all_gather_updates` gathers into, and the 16-bit part of it an optimizer
// update writes before it is copied back. zero-plan-memory gives each such
// op one workspace in the phase's arena, live from the op to its wait; the
// runtime carves it into parts with the same functions, in the same order,
// so the plan's memory prediction covers what the runtime uses.
//
// MLIR-free: the compiler's sched ops and the runtime's executor both call
// these. Every part starts at a multiple of kArenaAlignment bytes
// (Memory.h), as every buffer of the arena does.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_WORKSPACE_H
#define ZEROC_SUPPORT_WORKSPACE_H

#include "zeroc/Support/Memory.h"
#include "zeroc/Support/ShardLayout.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace zeroc {

/// A bump allocator over one op's workspace: take() returns a part's byte
/// offset from the workspace's start; size() is what the op needs in all.
class WorkspaceLayout {
public:
  int64_t take(int64_t bytes) {
    int64_t at = arenaAligned(used);
    used = at + std::max<int64_t>(bytes, 0);
    return at;
  }
  int64_t size() const { return used; }

private:
  int64_t used = 0;
};

/// A reduce-scatter input that lands in a flat group (stages 1 and 2): the
/// elements `range` of the group's buffer.
struct FlatShare {
  const FlatGroupLayout *layout = nullptr;
  ElementRange range;
};

/// Where a reduce-scatter's parts lie in its workspace. `send` is -1 where
/// the input is sent as it is.
struct ReduceScatterParts {
  int64_t recv = 0;
  int64_t send = -1;
};

/// Stages 1 and 2: how a reduce-scatter's flat-group inputs go out, and
/// where they land in its workspace.
///
/// Each input is a collective of its own (a unit of one), sent as it is,
/// except, over more than one rank, runs of small inputs
/// (kPackedGradientMaxBytes at most each) of one group whose ranges tile one
/// range of the group's buffer (a bucket's gradients in backward order usually
/// do): a unit of two or more, whose inputs are copied to their places in a
/// staging range (`send`) and go out as one reduce-scatter of the whole range,
/// as DeepSpeed's stages 1 and 2 reduce a bucket out of its contiguous IPG
/// buffer. Rank `rank` receives what it owns of a unit's range at the unit's
/// `recv`; the units' receive parts are packed in the order of their first
/// inputs, in one part as large as the largest rank's total (the plan is the
/// same for every rank), the byte offsets `rank`'s. The staging ranges follow
/// it. A group of one rank reduces nothing (the sum and average of its one
/// contribution is the input): every unit's `recv` is -1, the input itself,
/// and the op takes no workspace.
struct FlatUnit {
  ElementRange range;
  std::vector<size_t> inputs; ///< Indices into the shares, by offset.
  int64_t recv = 0;           ///< -1: the input itself (one rank).
  int64_t send = -1;          ///< -1: one input, sent as it is.
};

inline constexpr int64_t kPackedGradientMaxBytes = 64 * 1024;

inline std::vector<FlatUnit>
reduceScatterFlatParts(WorkspaceLayout &ws,
                       const std::vector<FlatShare> &shares,
                       int64_t elementBytes, int64_t rank) {
  std::vector<FlatUnit> units;
  if (shares.empty())
    return units;
  // The runs: small inputs of one group by offset, each starting where the
  // one before ends.
  // (At one rank a collective is a local copy: staging would add one.)
  std::vector<size_t> order;
  for (size_t i = 0; i < shares.size(); ++i)
    if (shares[i].range.size() * elementBytes <= kPackedGradientMaxBytes &&
        shares[i].layout->worldSize > 1)
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (shares[a].layout != shares[b].layout)
      return std::less<const FlatGroupLayout *>()(shares[a].layout,
                                                  shares[b].layout);
    return shares[a].range.begin < shares[b].range.begin;
  });
  std::vector<int64_t> unitOf(shares.size(), -1);
  std::vector<std::vector<size_t>> runs;
  for (size_t k = 0; k < order.size(); ++k) {
    const FlatShare &s = shares[order[k]];
    bool joins = k > 0 && s.range.size() > 0 &&
                 shares[order[k - 1]].layout == s.layout &&
                 shares[order[k - 1]].range.end == s.range.begin &&
                 shares[order[k - 1]].range.size() > 0;
    if (!joins)
      runs.emplace_back();
    runs.back().push_back(order[k]);
  }
  for (std::vector<size_t> &run : runs)
    if (run.size() >= 2)
      for (size_t i : run)
        unitOf[i] = int64_t(&run - runs.data());
  // The units in the order of their first inputs.
  std::vector<int64_t> unitAt(runs.size(), -1);
  for (size_t i = 0; i < shares.size(); ++i) {
    if (unitOf[i] < 0) {
      units.push_back({shares[i].range, {i}, 0, -1});
      continue;
    }
    int64_t &u = unitAt[size_t(unitOf[i])];
    if (u >= 0)
      continue;
    const std::vector<size_t> &run = runs[size_t(unitOf[i])];
    u = int64_t(units.size());
    units.push_back(
        {{shares[run.front()].range.begin, shares[run.back()].range.end},
         run,
         0,
         -1});
  }
  int64_t worldSize = shares.front().layout->worldSize, most = 0;
  if (worldSize == 1) {
    for (FlatUnit &u : units)
      u.recv = -1;
    return units;
  }
  auto layoutOf = [&](const FlatUnit &u) {
    return shares[u.inputs.front()].layout;
  };
  auto visit = [&](int64_t r) {
    int64_t total = 0;
    for (FlatUnit &u : units) {
      if (r == rank)
        u.recv = total * elementBytes;
      total += layoutOf(u)->receiveCount(u.range, r);
    }
    most = std::max(most, total);
  };
  // Only the ranks whose partitions the ranges touch receive anything: visit
  // those and `rank`, not every one of world_size ranks (up to 2^31 - 1; the
  // compiler asks this for each reduce-scatter).
  std::vector<std::pair<int64_t, int64_t>> touched;
  for (const FlatUnit &u : units) {
    int64_t p = layoutOf(u)->partitionSize();
    if (u.range.size() > 0 && p > 0)
      touched.push_back(
          {u.range.begin / p, std::min(worldSize - 1, (u.range.end - 1) / p)});
  }
  touched.push_back({rank, rank});
  std::sort(touched.begin(), touched.end());
  int64_t next = 0; // the ranks below it are visited
  for (auto [lo, hi] : touched)
    for (int64_t r = std::max(lo, next); r <= hi; ++r, next = r)
      visit(r);
  int64_t base = ws.take(std::max<int64_t>(most, 1) * elementBytes);
  for (FlatUnit &u : units) {
    u.recv += base;
    if (u.inputs.size() > 1)
      u.send = ws.take(u.range.size() * elementBytes);
  }
  return units;
}

/// Stage 3: whole parameters' gradients into their shards, one input each.
struct ParamGradient {
  ParamShardLayout layout;
  int64_t elementBytes = 0;
};

/// Where a stage-3 reduce-scatter's parameter inputs lie in its workspace.
/// `parts[i].recv` is input i's reduced shard (shardSize() elements).
///
/// Small gradients (kPackedGradientMaxBytes at most) are packed where there
/// are two or more of one dtype over more than one rank, as DeepSpeed's
/// reduce_scatter_coalesced packs a stage-3 bucket: one send buffer of
/// world_size blocks of `blockElements`, rank r's block holding rank r's
/// chunk of every packed gradient in input order, input i's at element
/// `slots[i]` of the block, in a slot of `slotElements[i]` (a multiple of
/// kPackedSlotAlignment bytes; zeros after the chunk); one reduce-scatter of
/// blockElements per rank into the receive block (at byte `recv`), where
/// input i's shard lies at slots[i] too.
///
/// The others go alone, one collective each, through a copy padded to
/// shard_size x world_size (`parts[i].send`) where they do not divide; their
/// slots are -1. Over one rank nothing is reduced: every `parts[i].recv` is
/// -1 (the gradient itself is the shard's addend) and there is no workspace.
///
/// A collective's fixed cost is what packing saves, a copy of the gradient
/// what it costs: a bucket of 36 gradients of tiny Llama at two ranks took
/// 113-140 us packed against 179-230 us as 36 MPI reduce-scatters
/// (bench/RESULTS.md, session 13), while small GPT-2's and small Llama's
/// stage-3 steps, whose gradients are mostly 0.25-1 MB, took 1-3% longer
/// with every gradient packed (session 14). On this machine a further
/// collective costs 4.8 us and a further packed gradient 0.4 us, and the
/// copy runs at 30 GB/s: the two meet near 64 KiB.
struct ParamReduceScatterParts {
  std::vector<ReduceScatterParts> parts;
  std::vector<int64_t> slots, slotElements;
  int64_t recv = -1, send = -1; ///< The packed blocks' byte offsets.
  int64_t blockElements = 0;    ///< Elements of each rank's block.
  int64_t packedCount = 0;
  bool packed() const { return packedCount > 0; }
};

inline constexpr int64_t kPackedSlotAlignment = 64;

/// Which of `params` a reduce-scatter over their group packs.
inline std::vector<bool>
packedParamGradients(const std::vector<ParamGradient> &params) {
  std::vector<bool> packed(params.size(), false);
  if (params.empty() || params.front().layout.worldSize <= 1)
    return packed;
  int64_t e = params.front().elementBytes, count = 0;
  for (const ParamGradient &p : params)
    if (p.elementBytes != e ||
        p.layout.worldSize != params.front().layout.worldSize || e <= 0 ||
        kPackedSlotAlignment % e != 0)
      return packed;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].layout.numel * e <= kPackedGradientMaxBytes) {
      packed[i] = true;
      ++count;
    }
  if (count < 2)
    packed.assign(params.size(), false);
  return packed;
}

inline ParamReduceScatterParts
reduceScatterParamParts(WorkspaceLayout &ws,
                        const std::vector<ParamGradient> &params) {
  ParamReduceScatterParts r;
  r.parts.resize(params.size());
  r.slots.assign(params.size(), -1);
  r.slotElements.assign(params.size(), 0);
  if (!params.empty() && params.front().layout.worldSize == 1) {
    for (ReduceScatterParts &part : r.parts)
      part.recv = -1;
    return r;
  }
  std::vector<bool> packed = packedParamGradients(params);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!packed[i])
      continue;
    int64_t align = kPackedSlotAlignment / params[i].elementBytes;
    r.slots[i] = r.blockElements;
    r.slotElements[i] =
        (params[i].layout.shardSize() + align - 1) / align * align;
    r.blockElements += r.slotElements[i];
    ++r.packedCount;
  }
  if (r.packed()) {
    int64_t e = params.front().elementBytes;
    r.recv = ws.take(r.blockElements * e);
    r.send = ws.take(r.blockElements * params.front().layout.worldSize * e);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamShardLayout &l = params[i].layout;
    int64_t e = params[i].elementBytes;
    if (packed[i]) {
      r.parts[i].recv = r.recv + r.slots[i] * e;
      continue;
    }
    r.parts[i].recv = ws.take(l.shardSize() * e);
    if (l.paddedNumel() != l.numel)
      r.parts[i].send = ws.take(l.paddedNumel() * e);
  }
  return r;
}

/// `all_gather_updates` of a replicated parameter whose optimizer state is
/// sharded: the padded parameter.
inline int64_t gatherUpdatesParamPart(WorkspaceLayout &ws,
                                      const ParamShardLayout &layout,
                                      int64_t elementBytes) {
  return ws.take(layout.paddedNumel() * elementBytes);
}

/// `adam_update` of the owned part of a replicated parameter whose states
/// are sharded: the part in the parameter's dtype. (A flat group's
/// parameters are views of one flat buffer, so its gather runs in place and
/// its update works on the owned partition where it lies: no workspace.)
inline int64_t adamPartitionPart(WorkspaceLayout &ws, int64_t elements,
                                 int64_t elementBytes) {
  return ws.take(elements * elementBytes);
}

/// The mixture-of-experts model ops (docs/model-dialect.md, "Mixture of
/// experts") run several kernels with intermediates between them that are
/// not values of the plan; they are a workspace of the op, live at the op
/// alone.
enum class MoeScratchKind {
  RouterForward,   ///< moe_router
  ExpertsForward,  ///< moe_experts
  RouterBackward,  ///< moe_router_backward
  ExpertsBackward, ///< moe_experts_backward
  /// Expert parallelism's split (ModelOps.td): moe_dispatch, moe_combine
  /// and moe_combine_backward find each routed row by the dispatch plan;
  /// the local experts group their R received rows by local expert with
  /// one too (`tokens` R, `topK` 1, `experts` the rank's) and run the
  /// experts' kernels on them, the outputs (forward) or the output
  /// gradients (backward) in expert order between the kernels.
  Dispatch,             ///< moe_dispatch, moe_combine, moe_combine_backward
  LocalExpertsForward,  ///< moe_local_experts
  LocalExpertsBackward, ///< moe_local_experts_backward
  /// moe_router_stats: the recomputed f32 logits.
  RouterStats,
  /// moe_router_stats_backward: the recomputed f32 logits and dlogits.
  RouterStatsBackward,
};

/// The sizes a mixture-of-experts op's workspace depends on.
struct MoeShape {
  int64_t tokens = 0, experts = 0, topK = 0, hidden = 0, intermediate = 0;
  int64_t elementBytes = 0; ///< The model dtype's.
  /// Whether the forward op yields its saved state (a training plan): then
  /// the logits (router) or h1, h3, ysorted (experts) are its output.
  bool savedOutput = false;
};

/// Byte offsets of the parts in the workspace, -1 where the op has none:
/// the dispatch plan (i32 offsets [E + 1], rowToken and rowSlot [T k]);
/// the router's f32 logits and the experts' h1, h3 [T k, I] and ysorted
/// [T k, h] without a saved output (the router statistics' logits, always); the
/// backward's dysorted [T k, h] and dlogits [T, E] (both in the model dtype:
/// the dense kernels' gradients are, and Hugging Face's bf16 router rounds its
/// logits' gradient so).
struct MoeScratchParts {
  int64_t offsets = -1, rowToken = -1, rowSlot = -1;
  int64_t logits = -1, h1 = -1, h3 = -1, ysorted = -1;
  int64_t dysorted = -1, dlogits = -1;
};

inline MoeScratchParts moeScratchParts(WorkspaceLayout &ws, MoeScratchKind kind,
                                       const MoeShape &s) {
  MoeScratchParts p;
  int64_t rows = s.tokens * s.topK;
  auto dispatch = [&] {
    p.offsets = ws.take((s.experts + 1) * 4);
    p.rowToken = ws.take(rows * 4);
    p.rowSlot = ws.take(rows * 4);
  };
  switch (kind) {
  case MoeScratchKind::RouterForward:
    if (!s.savedOutput)
      p.logits = ws.take(s.tokens * s.experts * 4);
    break;
  case MoeScratchKind::ExpertsForward:
    dispatch();
    if (!s.savedOutput) {
      p.h1 = ws.take(rows * s.intermediate * s.elementBytes);
      p.h3 = ws.take(rows * s.intermediate * s.elementBytes);
      p.ysorted = ws.take(rows * s.hidden * s.elementBytes);
    }
    break;
  case MoeScratchKind::RouterBackward:
    p.dlogits = ws.take(s.tokens * s.experts * s.elementBytes);
    break;
  case MoeScratchKind::ExpertsBackward:
    dispatch();
    p.dysorted = ws.take(rows * s.hidden * s.elementBytes);
    break;
  case MoeScratchKind::Dispatch:
    dispatch();
    break;
  case MoeScratchKind::LocalExpertsForward:
    dispatch();
    p.ysorted = ws.take(rows * s.hidden * s.elementBytes);
    break;
  case MoeScratchKind::LocalExpertsBackward:
    dispatch();
    p.dysorted = ws.take(rows * s.hidden * s.elementBytes);
    break;
  case MoeScratchKind::RouterStats:
    p.logits = ws.take(s.tokens * s.experts * 4);
    break;
  case MoeScratchKind::RouterStatsBackward:
    p.logits = ws.take(s.tokens * s.experts * 4);
    p.dlogits = ws.take(s.tokens * s.experts * s.elementBytes);
    break;
  }
  return p;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_WORKSPACE_H
