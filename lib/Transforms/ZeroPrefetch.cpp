//===- ZeroPrefetch.cpp - Gather parameters early, within a budget --------===//
//
// Stage 3's performance hinges on gathering the next parameters while the
// current ones compute, without holding so many gathered at once that the
// device runs out of memory. DeepSpeed bounds this with
// stage3_prefetch_bucket_size (elements in flight), stage3_max_live_parameters
// (elements gathered and not released, a bound on prefetching only: a gather
// at its use always runs) and stage3_max_reuse_distance (keep a parameter
// that is needed again soon, whatever the live budget). This pass places the
// gathers of a static schedule under the same three bounds.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Transforms/Passes.h"

#include "sched/SchedOps.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace zeroc {
#define GEN_PASS_DEF_ZEROPREFETCH
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;

namespace {

struct Gather {
  sched::AllGatherStartOp start;
  sched::WaitOp wait;
  int64_t elements;
};

/// The gather started by `start`, unless it lacks its one wait (hand-written
/// input not yet verified), which this pass leaves alone.
std::optional<Gather> gatherOf(sched::AllGatherStartOp start,
                               SymbolTableCollection &symbols) {
  Value token = start.getToken();
  if (!token.hasOneUse())
    return std::nullopt;
  auto wait = dyn_cast<sched::WaitOp>(*token.getUsers().begin());
  if (!wait)
    return std::nullopt;
  return Gather{start, wait,
                cast<sched::CollectiveOpInterface>(start.getOperation())
                    .getLogicalElements(symbols)};
}

/// The release of a gathered buffer.
sched::ReleaseOp releaseOf(Value buffer) {
  for (Operation *user : buffer.getUsers())
    if (auto release = dyn_cast<sched::ReleaseOp>(user))
      return release;
  return nullptr;
}

class Prefetcher {
public:
  Prefetcher(func::FuncOp func, int64_t bucket, int64_t maxLive,
             int64_t maxReuse)
      : func(func), bucket(bucket), maxLive(maxLive), maxReuse(maxReuse) {}

  void run(bool keepReused, bool hoist) {
    if (keepReused)
      keepReusedParameters();
    if (hoist)
      hoistGathers();
  }

private:
  SmallVector<Gather> gathers() {
    SmallVector<Gather> all;
    for (auto start : func.getOps<sched::AllGatherStartOp>())
      if (std::optional<Gather> g = gatherOf(start, symbols))
        all.push_back(*g);
    return all;
  }

  /// A single parameter gathered again after its release, with at most
  /// `maxReuse` elements of other parameters gathered in between, stays
  /// gathered: the release and the second gather go, whatever the live
  /// budget (DeepSpeed keeps it too, and prefetches less).
  void keepReusedParameters() {
    SmallVector<Gather> all = gathers();
    llvm::StringMap<size_t> lastGather;
    for (size_t i = 0; i < all.size(); ++i) {
      Gather &g = all[i];
      if (g.start.getParams().size() != 1)
        continue;
      StringRef param =
          cast<FlatSymbolRefAttr>(g.start.getParams()[0]).getValue();
      auto it = lastGather.find(param);
      if (it == lastGather.end()) {
        lastGather[param] = i;
        continue;
      }
      size_t prevIndex = it->second;
      it->second = i;
      Gather &prev = all[prevIndex];
      if (!prev.start || prev.start.getParams().size() != 1)
        continue;
      sched::ReleaseOp release = releaseOf(prev.wait.getResult(0));
      if (!release || release.getValues().size() != 1 ||
          !release->isBeforeInBlock(g.start))
        continue;
      int64_t distance = 0;
      for (size_t j = prevIndex + 1; j < i; ++j)
        if (all[j].start && release->isBeforeInBlock(all[j].start))
          distance += all[j].elements;
      // A reuse distance of 0 turns reuse off, as in DeepSpeed. The live
      // budget does not bound reuse: DeepSpeed's release rule
      // (PartitionedParameterCoordinator.__params_to_release) reads only the
      // reuse distance; max_live_parameters limits what is prefetched beside
      // the parameters kept, which hoistGathers counts.
      if (maxReuse == 0 || distance > maxReuse)
        continue;
      // Keep the first buffer: the second gather's uses read it, and its
      // release becomes the one that frees it.
      Value kept = prev.wait.getResult(0);
      Value second = g.wait.getResult(0);
      second.replaceAllUsesWith(kept);
      release.erase();
      Operation *shard = g.start.getShards()[0].getDefiningOp();
      g.wait.erase();
      g.start.erase();
      eraseUnusedShard(shard);
      g.start = nullptr;
      lastGather[param] = prevIndex;
    }
  }

  /// The shard of a gather that was removed: an in-place read, or a fetched
  /// copy (offloaded parameters) whose fetch and release go with it.
  static void eraseUnusedShard(Operation *shard) {
    if (!shard)
      return;
    if (isa<sched::ReadOp>(shard) && shard->use_empty()) {
      shard->erase();
      return;
    }
    auto wait = dyn_cast<sched::WaitOp>(shard);
    if (!wait || !isa<sched::FetchStartOp>(wait.getToken().getDefiningOp()))
      return;
    Value fetched = wait.getResult(0);
    if (!llvm::all_of(fetched.getUsers(),
                      [](Operation *u) { return isa<sched::ReleaseOp>(u); }))
      return;
    for (Operation *user : llvm::make_early_inc_range(fetched.getUsers()))
      user->erase();
    Operation *fetch = wait.getToken().getDefiningOp();
    wait.erase();
    fetch->erase();
  }

  /// Moves each gather start as early as the budgets allow, never above the
  /// previous gather start and never above the definition of its shards
  /// (other than in-place reads, which move with it).
  void hoistGathers() {
    SmallVector<Operation *> ops;
    for (Operation &op : func.getBody().getOps())
      ops.push_back(&op);
    llvm::DenseMap<Operation *, size_t> index;
    for (auto [i, op] : llvm::enumerate(ops))
      index[op] = i;

    // Elements in flight (started, not waited) and live (started, not
    // released) during each op, as placed so far. A gather is still in
    // flight during its wait and still live during its release: a gather
    // started just before either overlaps it.
    std::vector<int64_t> inFlight(ops.size() + 1, 0), live(ops.size() + 1, 0);
    SmallVector<Gather> all = gathers();
    auto releaseIndex = [&](Gather g) {
      size_t last = index[g.wait];
      for (Value v : g.wait.getResults())
        if (auto r = releaseOf(v))
          last = std::max(last, index[r]);
      return last;
    };
    for (Gather g : all) {
      for (size_t t = index[g.start]; t <= index[g.wait]; ++t)
        inFlight[t] += g.elements;
      for (size_t t = index[g.start]; t <= releaseIndex(g); ++t)
        live[t] += g.elements;
    }

    size_t floor = 0;
    llvm::SmallPtrSet<Operation *, 16> moved;
    for (Gather g : all) {
      size_t from = index[g.start];
      size_t lowest = floor;
      for (Value shard : g.start.getShards())
        if (Operation *def = shard.getDefiningOp();
            def && !isa<sched::ReadOp>(def))
          lowest = std::max(lowest, index[def] + 1);
      // Walk up while the budgets hold at the op being overlapped.
      size_t to = from;
      while (to > lowest) {
        size_t t = to - 1;
        bool flightOk = inFlight[t] + g.elements <= bucket;
        if (!flightOk || live[t] + g.elements > maxLive)
          break;
        to = t;
      }
      if (to < from) {
        for (size_t t = to; t < from; ++t) {
          inFlight[t] += g.elements;
          live[t] += g.elements;
        }
        // Anchor on the first op at or after `to` that has not moved: its
        // place relative to the unmoved ops is still its original one.
        size_t anchor = to;
        while (moved.contains(ops[anchor]))
          ++anchor;
        g.start->moveBefore(ops[anchor]);
        moved.insert(g.start);
        for (Value shard : g.start.getShards())
          if (auto read = shard.getDefiningOp<sched::ReadOp>()) {
            read->moveBefore(g.start);
            moved.insert(read);
          }
      }
      floor = to + 1;
    }
  }

  func::FuncOp func;
  int64_t bucket, maxLive, maxReuse;
  SymbolTableCollection symbols;
};

struct ZeroPrefetch : zeroc::impl::ZeroPrefetchBase<ZeroPrefetch> {
  using ZeroPrefetchBase::ZeroPrefetchBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (prefetchBucketSize < 0 || maxLiveParameters < 0 ||
        maxReuseDistance < 0) {
      module.emitError() << "zero-prefetch budgets must not be negative, found "
                            "prefetch-bucket-size "
                         << prefetchBucketSize.getValue()
                         << ", max-live-parameters "
                         << maxLiveParameters.getValue()
                         << " and max-reuse-distance "
                         << maxReuseDistance.getValue();
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>())
      Prefetcher(func, prefetchBucketSize, maxLiveParameters, maxReuseDistance)
          .run(keepReused, hoist);
  }
};

} // namespace
