//===- ZeroPlanMemory.cpp - Liveness, arena offsets, the memory peak ------===//
//
// Where is the memory peak, and what is live there? The question DeepSpeed
// users answer with an OOM. Every transient buffer of a phase gets a live
// range from MLIR's Liveness (extended for asynchronous collectives, which
// read and write buffers after their start op returns) and an offset in one
// arena per phase.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Transforms/Passes.h"

#include "model/ModelOps.h"
#include "sched/SchedOps.h"
#include "zeroc/Support/Memory.h"
#include "zeroc/Support/Workspace.h"

#include "mlir/Analysis/Liveness.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <set>

namespace zeroc {
#define GEN_PASS_DEF_ZEROPLANMEMORY
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;

namespace {

enum class Category { Activations, GatherBuffers, ReduceBuckets, Workspace };

struct Buffer {
  int64_t bytes = 0;
  size_t start = 0, end = 0; ///< Op indices, inclusive.
  Category category = Category::Activations;
  int64_t offset = -1;
  // Where the offset is recorded.
  Value value;                ///< A result or argument, or
  Operation *owner = nullptr; ///< the op whose workspace this is.
  /// Every op that writes or reads it (for ordering reuse across streams).
  std::vector<size_t> touches;
  /// Results that took over this buffer when it died (in-place sums).
  std::vector<Value> aliases;
};

int64_t aligned(int64_t bytes) { return arenaAligned(bytes); }

/// The largest value written over any part of a range of `width` segments:
/// update(lo, hi, v) writes v over [lo, hi), query(lo, hi) is the largest
/// value written over any segment of [lo, hi), -1 if none. A segment tree
/// whose nodes keep the largest value written over all of their range and
/// over any part of it.
class RangeMax {
public:
  explicit RangeMax(size_t width)
      : width(std::max<size_t>(width, 1)), whole(4 * this->width, -1),
        part(4 * this->width, -1) {}
  void update(size_t lo, size_t hi, int64_t v) {
    if (lo < hi)
      update(1, 0, width, lo, hi, v);
  }
  int64_t query(size_t lo, size_t hi) const {
    return lo < hi ? query(1, 0, width, lo, hi) : -1;
  }

private:
  void update(size_t node, size_t l, size_t r, size_t lo, size_t hi,
              int64_t v) {
    if (hi <= l || r <= lo)
      return;
    part[node] = std::max(part[node], v);
    if (lo <= l && r <= hi) {
      whole[node] = std::max(whole[node], v);
      return;
    }
    size_t mid = (l + r) / 2;
    update(2 * node, l, mid, lo, hi, v);
    update(2 * node + 1, mid, r, lo, hi, v);
  }
  int64_t query(size_t node, size_t l, size_t r, size_t lo, size_t hi) const {
    if (hi <= l || r <= lo)
      return -1;
    if (lo <= l && r <= hi)
      return part[node];
    size_t mid = (l + r) / 2;
    return std::max({whole[node], query(2 * node, l, mid, lo, hi),
                     query(2 * node + 1, mid, r, lo, hi)});
  }

  size_t width;
  std::vector<int64_t> whole, part;
};

class MemoryPlanner {
public:
  explicit MemoryPlanner(func::FuncOp func) : func(func) {}

  void run() {
    Block &block = func.getBody().front();
    for (Operation &op : block)
      index[&op] = ops.size(), ops.push_back(&op);
    collectBuffers(block);
    assignOffsets();
    orderReuseAcrossStreams();
    record();
  }

private:
  /// The op that completes an asynchronous start.
  static sched::WaitOp waitOf(Operation *start) {
    auto async = cast<sched::AsyncStartOpInterface>(start);
    return cast<sched::WaitOp>(*async.getToken().getUsers().begin());
  }

  /// The ops of `block` that use `value`, and the waits of asynchronous
  /// ones (which read it until then).
  void addUsers(Block &block, Value value, Buffer &buffer) {
    for (Operation *user : value.getUsers()) {
      Operation *op = block.findAncestorOpInBlock(*user);
      if (!op)
        continue;
      buffer.touches.push_back(index[op]);
      if (isa<sched::AsyncStartOpInterface>(op))
        buffer.touches.push_back(index[waitOf(op)]);
    }
  }

  void collectBuffers(Block &block) {
    Liveness liveness(func);
    const LivenessBlockInfo *info = liveness.getLiveness(&block);
    size_t last = ops.empty() ? 0 : ops.size() - 1;
    for (BlockArgument arg : block.getArguments())
      if (int64_t bytes = model::tensorBytes(arg.getType())) {
        buffers.push_back({bytes, 0, last, Category::Activations, -1, arg});
        addUsers(block, arg, buffers.back());
      }

    llvm::DenseMap<Value, size_t> bufferOf;
    for (Operation *op : ops) {
      for (Value result : op->getResults()) {
        int64_t bytes = sched::bufferBytes(result);
        if (!bytes || isa<sched::ReadOp>(op))
          continue;
        if (std::optional<size_t> into = inPlaceTarget(op, bytes, bufferOf)) {
          Buffer &taken = buffers[*into];
          taken.aliases.push_back(result);
          if (Operation *end = info->getEndOperation(result, op))
            taken.end =
                std::max(taken.end, index[block.findAncestorOpInBlock(*end)]);
          addUsers(block, result, taken);
          bufferOf[result] = *into;
          continue;
        }
        Buffer buffer{bytes, index[op], index[op], Category::Activations,
                      -1,    result};
        // A collective writes its result from the moment it starts.
        if (auto wait = dyn_cast<sched::WaitOp>(op)) {
          Operation *start = wait.getToken().getDefiningOp();
          buffer.start = index[start];
          buffer.category = Category::GatherBuffers;
        }
        if (Operation *end = info->getEndOperation(result, op))
          buffer.end =
              std::max(buffer.end, index[block.findAncestorOpInBlock(*end)]);
        // An asynchronous op reads its inputs until its wait.
        for (Operation *user : result.getUsers()) {
          if (!isa<sched::AsyncStartOpInterface>(user))
            continue;
          buffer.end = std::max(buffer.end, index[waitOf(user)]);
          if (isa<sched::ReduceScatterStartOp>(user))
            buffer.category = Category::ReduceBuckets;
        }
        buffer.touches.push_back(buffer.start);
        addUsers(block, result, buffer);
        bufferOf[result] = buffers.size();
        buffers.push_back(buffer);
      }
      // Scratch an op needs while it runs (Workspace.h): from the op to its
      // wait, or at the op alone.
      int64_t bytes = 0;
      if (auto scratch = dyn_cast<sched::WorkspaceOpInterface>(op))
        bytes = scratch.getWorkspaceBytes(symbols);
      else
        bytes = modelOpWorkspaceBytes(op);
      if (bytes) {
        size_t end = index[op];
        if (isa<sched::AsyncStartOpInterface>(op))
          end = index[waitOf(op)];
        Buffer buffer{bytes, index[op], end, Category::Workspace,
                      -1,    Value(),   op};
        buffer.touches = {index[op], end};
        buffers.push_back(buffer);
      }
    }
  }

  /// The workspace of a mixture-of-experts op (Workspace.h): the runtime
  /// sizes it from the op's tensors with the same function (Dispatch.h).
  static int64_t modelOpWorkspaceBytes(Operation *op) {
    auto tensor = [](Value v) { return cast<RankedTensorType>(v.getType()); };
    MoeShape s;
    auto tokens = [&](Value x) {
      RankedTensorType t = tensor(x);
      s.hidden = t.getShape().back();
      s.tokens = t.getNumElements() / s.hidden;
      s.elementBytes = model::tensorBytes(t) / t.getNumElements();
    };
    MoeScratchKind kind = MoeScratchKind::RouterForward;
    if (auto router = dyn_cast<model::MoeRouterOp>(op)) {
      kind = MoeScratchKind::RouterForward;
      tokens(router.getInput());
      s.experts = router.getNumExperts();
      s.topK = int64_t(router.getTopK());
      s.savedOutput = bool(router.getSaved());
    } else if (auto experts = dyn_cast<model::MoeExpertsOp>(op)) {
      kind = MoeScratchKind::ExpertsForward;
      tokens(experts.getInput());
      s.experts = experts.getNumExperts();
      s.topK = experts.getTopK();
      s.intermediate = experts.getIntermediateSize();
      s.savedOutput = bool(experts.getSaved());
    } else if (auto back = dyn_cast<model::MoeExpertsBackwardOp>(op)) {
      kind = MoeScratchKind::ExpertsBackward;
      tokens(back.getInput());
      s.experts = tensor(back.getW1()).getDimSize(0);
      s.intermediate = tensor(back.getW1()).getDimSize(1);
      s.topK = tensor(back.getWeights()).getShape().back();
    } else if (auto back = dyn_cast<model::MoeRouterBackwardOp>(op)) {
      kind = MoeScratchKind::RouterBackward;
      tokens(back.getInput());
      s.experts = tensor(back.getGate()).getDimSize(0);
      s.topK = tensor(back.getDweights()).getShape().back();
    } else if (isa<model::MoeDispatchOp, model::MoeCombineOp,
                   model::MoeCombineBackwardOp>(op)) {
      // The dispatch plan of the tokens' routed rows: the tokens are the
      // [batch, seq, hidden] side, the routing the indices.
      kind = MoeScratchKind::Dispatch;
      Value indices, tokensSide;
      if (auto d = dyn_cast<model::MoeDispatchOp>(op)) {
        tokensSide = d.getInput(), indices = d.getIndices();
        s.experts = d.getNumExperts();
      } else if (auto c = dyn_cast<model::MoeCombineOp>(op)) {
        tokensSide = c.getResult(), indices = c.getIndices();
        s.experts = c.getNumExperts();
      } else {
        auto cb = cast<model::MoeCombineBackwardOp>(op);
        tokensSide = cb.getDy(), indices = cb.getIndices();
        s.experts = cb.getNumExperts();
      }
      tokens(tokensSide);
      s.topK = tensor(indices).getShape().back();
    } else if (isa<model::MoeLocalExpertsOp, model::MoeLocalExpertsBackwardOp>(
                   op)) {
      // The received rows grouped by the rank's experts.
      bool forward = isa<model::MoeLocalExpertsOp>(op);
      kind = forward ? MoeScratchKind::LocalExpertsForward
                     : MoeScratchKind::LocalExpertsBackward;
      Value rows = op->getOperand(0), w1 = op->getOperand(1);
      tokens(rows);
      s.topK = 1;
      s.experts = tensor(w1).getDimSize(0);
      s.intermediate = tensor(w1).getDimSize(1);
      s.savedOutput = true;
    } else if (auto stats = dyn_cast<model::MoeRouterStatsOp>(op)) {
      kind = MoeScratchKind::RouterStats;
      tokens(stats.getInput());
      s.experts = stats.getNumExperts();
    } else if (auto back = dyn_cast<model::MoeRouterStatsBackwardOp>(op)) {
      kind = MoeScratchKind::RouterStatsBackward;
      tokens(back.getInput());
      s.experts = tensor(back.getGate()).getDimSize(0);
    } else {
      return 0;
    }
    WorkspaceLayout ws;
    moeScratchParts(ws, kind, s);
    return ws.size();
  }

  /// The buffer an `in_place` sum's result takes over: its lhs's, when the
  /// lhs dies at the sum (read by nothing later, no asynchronous reader)
  /// and is a transient buffer of the same size; none otherwise.
  std::optional<size_t>
  inPlaceTarget(Operation *op, int64_t bytes,
                const llvm::DenseMap<Value, size_t> &bufferOf) const {
    auto add = dyn_cast<model::AddOp>(op);
    if (!add || !add.getInPlace())
      return std::nullopt;
    auto it = bufferOf.find(add.getLhs());
    if (it == bufferOf.end())
      return std::nullopt;
    const Buffer &lhs = buffers[it->second];
    if (lhs.end != index.lookup(op) || lhs.bytes != bytes || lhs.owner ||
        lhs.category != Category::Activations || isa<BlockArgument>(lhs.value))
      return std::nullopt;
    return it->second;
  }

  /// A first-fit allocator run over the schedule: at each op, the buffers
  /// whose life ended are freed (neighbouring holes merge) and those born
  /// there, largest first, take the smallest hole that holds them, or the
  /// end of the arena. Linear in the number of buffers times the holes,
  /// where greedy-by-size is quadratic in the buffers; the arena it leaves
  /// is within a few percent of the live peak on transformer schedules
  /// (zeroc inspect shows the difference as arena fragmentation).
  void assignOffsets() {
    std::vector<std::vector<size_t>> born(ops.size() + 1), dies(ops.size() + 1);
    for (size_t i = 0; i < buffers.size(); ++i) {
      born[buffers[i].start].push_back(i);
      dies[buffers[i].end].push_back(i);
    }
    std::map<int64_t, int64_t> holes; // offset -> size, below arenaBytes
    auto release = [&](int64_t offset, int64_t size) {
      auto next = holes.lower_bound(offset);
      if (next != holes.end() && offset + size == next->first) {
        size += next->second;
        next = holes.erase(next);
      }
      if (next != holes.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == offset) {
          prev->second += size;
          offset = prev->first;
          size = prev->second;
          holes.erase(prev);
        }
      }
      if (offset + size == arenaBytes)
        arenaBytes = offset; // The top of the arena shrinks back.
      else
        holes[offset] = size;
    };
    for (size_t t = 0; t <= ops.size(); ++t) {
      std::vector<size_t> &now = born[t];
      std::stable_sort(now.begin(), now.end(), [&](size_t a, size_t b) {
        return buffers[a].bytes > buffers[b].bytes;
      });
      for (size_t i : now) {
        int64_t size = aligned(buffers[i].bytes);
        auto best = holes.end();
        for (auto it = holes.begin(); it != holes.end(); ++it)
          if (it->second >= size &&
              (best == holes.end() || it->second < best->second))
            best = it;
        if (best != holes.end()) {
          buffers[i].offset = best->first;
          int64_t rest = best->second - size;
          int64_t restOffset = best->first + size;
          holes.erase(best);
          if (rest)
            holes[restOffset] = rest;
        } else {
          buffers[i].offset = arenaBytes;
          arenaBytes += size;
        }
        arenaHigh = std::max(arenaHigh, arenaBytes);
      }
      for (size_t i : dies[t])
        release(buffers[i].offset, aligned(buffers[i].bytes));
    }
    arenaBytes = arenaHigh;
  }

  /// Arena memory is reused in program order, but streams run concurrently:
  /// an op on one stream that starts using memory a previous occupant used
  /// on another stream must wait for the last such use on each other stream
  /// (the runtime turns these into dependencies, CUDA events on a GPU).
  /// Recorded as `sched.after`, the indices of the ops to follow.
  ///
  /// A previous occupant of buffer b is a buffer whose life ended before b
  /// starts and whose arena bytes overlap b's; its uses that count are those
  /// before b starts. Buffers are visited in the order they start; a use
  /// becomes visible once both its buffer's life and the use itself are
  /// over, and is recorded, per stream, as a maximum over the arena range
  /// of its buffer (RangeMax), so that each buffer asks each other stream
  /// for the last use over its own range: O(n log n) where comparing every
  /// pair of buffers is quadratic.
  void orderReuseAcrossStreams() {
    std::vector<int64_t> streamIds(ops.size(), 0);
    std::map<int64_t, size_t> streamIndex;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (auto s = dyn_cast<sched::StreamOpInterface>(ops[i]))
        streamIds[i] = s.getStreamId();
      streamIndex.emplace(streamIds[i], 0);
    }
    std::vector<int64_t> streamOfIndex;
    for (auto &[id, index] : streamIndex) {
      index = streamOfIndex.size();
      streamOfIndex.push_back(id);
    }

    // Arena coordinates, compressed: a half-open byte range maps to the
    // elementary segments between consecutive buffer boundaries.
    std::vector<int64_t> bounds;
    for (const Buffer &b : buffers) {
      bounds.push_back(b.offset);
      bounds.push_back(b.offset + aligned(b.bytes));
    }
    llvm::sort(bounds);
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    auto segments = [&](const Buffer &b) {
      auto at = [&](int64_t x) {
        return size_t(llvm::lower_bound(bounds, x) - bounds.begin());
      };
      return std::make_pair(at(b.offset), at(b.offset + aligned(b.bytes)));
    };
    size_t width = bounds.empty() ? 1 : bounds.size() - 1;
    std::vector<RangeMax> lastUse(streamOfIndex.size(), RangeMax(width));

    // A use (op t of buffer a) counts for buffers starting after both.
    struct Use {
      size_t visible, buffer, op;
    };
    std::vector<Use> uses;
    for (size_t i = 0; i < buffers.size(); ++i)
      for (size_t t : buffers[i].touches)
        uses.push_back({std::max(buffers[i].end, t) + 1, i, t});
    llvm::stable_sort(
        uses, [](const Use &x, const Use &y) { return x.visible < y.visible; });
    std::vector<size_t> byStart(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i)
      byStart[i] = i;
    llvm::stable_sort(byStart, [&](size_t x, size_t y) {
      return buffers[x].start < buffers[y].start;
    });

    std::map<size_t, std::set<size_t>> after;
    size_t next = 0;
    for (size_t i : byStart) {
      const Buffer &b = buffers[i];
      if (b.start >= ops.size())
        continue;
      for (; next < uses.size() && uses[next].visible <= b.start; ++next) {
        const Use &u = uses[next];
        auto [lo, hi] = segments(buffers[u.buffer]);
        lastUse[streamIndex[streamIds[u.op]]].update(lo, hi, int64_t(u.op));
      }
      auto [lo, hi] = segments(b);
      int64_t stream = streamIds[b.start];
      for (size_t s = 0; s < streamOfIndex.size(); ++s) {
        if (streamOfIndex[s] == stream)
          continue;
        int64_t last = lastUse[s].query(lo, hi);
        if (last >= 0)
          after[b.start].insert(size_t(last));
      }
    }
    Builder builder(func.getContext());
    for (auto &[i, list] : after)
      ops[i]->setAttr("sched.after",
                      builder.getDenseI64ArrayAttr(
                          SmallVector<int64_t>(list.begin(), list.end())));
  }

  void record() {
    // Live bytes at each op, and what is live at the peak.
    std::vector<int64_t> delta(ops.size() + 1, 0);
    for (const Buffer &b : buffers) {
      delta[b.start] += b.bytes;
      delta[b.end + 1] -= b.bytes;
    }
    int64_t live = 0, peak = 0;
    size_t peakOp = 0;
    SmallVector<int64_t> liveAt(ops.size());
    for (size_t t = 0; t < ops.size(); ++t) {
      live += delta[t];
      liveAt[t] = live;
      if (live > peak)
        peak = live, peakOp = t;
    }
    int64_t byCategory[4] = {0, 0, 0, 0};
    for (const Buffer &b : buffers)
      if (b.start <= peakOp && peakOp <= b.end)
        byCategory[int(b.category)] += b.bytes;

    Builder builder(func.getContext());
    llvm::DenseMap<Operation *, SmallVector<int64_t>> offsets;
    SmallVector<int64_t> argOffsets(func.getNumArguments(), -1);
    for (const Buffer &b : buffers) {
      if (b.owner) {
        b.owner->setAttr("sched.workspace_offset",
                         builder.getI64IntegerAttr(b.offset));
        b.owner->setAttr("sched.workspace_bytes",
                         builder.getI64IntegerAttr(b.bytes));
      } else if (auto arg = dyn_cast<BlockArgument>(b.value)) {
        argOffsets[arg.getArgNumber()] = b.offset;
      } else {
        for (Value v : llvm::concat<const Value>(ArrayRef(b.value),
                                                 ArrayRef(b.aliases))) {
          Operation *def = v.getDefiningOp();
          auto &list = offsets[def];
          if (list.empty())
            list.assign(def->getNumResults(), -1);
          list[cast<OpResult>(v).getResultNumber()] = b.offset;
        }
      }
    }
    for (auto &[op, list] : offsets)
      op->setAttr("sched.offsets", builder.getDenseI64ArrayAttr(list));
    func->setAttr("sched.arg_offsets",
                  builder.getDenseI64ArrayAttr(argOffsets));
    func->setAttr("sched.live_bytes", builder.getDenseI64ArrayAttr(liveAt));
    func->setAttr(
        "sched.memory",
        builder.getDictionaryAttr({
            builder.getNamedAttr("arena_bytes",
                                 builder.getI64IntegerAttr(arenaBytes)),
            builder.getNamedAttr("peak_live_bytes",
                                 builder.getI64IntegerAttr(peak)),
            builder.getNamedAttr("peak_op", builder.getI64IntegerAttr(peakOp)),
            builder.getNamedAttr("activations",
                                 builder.getI64IntegerAttr(byCategory[0])),
            builder.getNamedAttr("gather_buffers",
                                 builder.getI64IntegerAttr(byCategory[1])),
            builder.getNamedAttr("reduce_buckets",
                                 builder.getI64IntegerAttr(byCategory[2])),
            builder.getNamedAttr("workspace",
                                 builder.getI64IntegerAttr(byCategory[3])),
        }));
  }

  func::FuncOp func;
  SymbolTableCollection symbols;
  std::vector<Operation *> ops;
  llvm::DenseMap<Operation *, size_t> index;
  std::vector<Buffer> buffers;
  int64_t arenaBytes = 0; ///< The arena's size: its high-water mark.
  int64_t arenaHigh = 0;
};

struct ZeroPlanMemory : zeroc::impl::ZeroPlanMemoryBase<ZeroPlanMemory> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (!func.getBody().hasOneBlock()) {
        func.emitError() << "zero-plan-memory needs single-block phases; run "
                            "zero-verify-schedule first";
        return signalPassFailure();
      }
      MemoryPlanner(func).run();
    }
  }
};

} // namespace
