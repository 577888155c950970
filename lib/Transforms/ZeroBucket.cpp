//===- ZeroBucket.cpp - Fuse collectives of a kind into buckets -----------===//
//
// Fewer, larger collectives: latency is paid once per bucket. Reductions
// are issued when the last gradient of their bucket is ready, gathers when
// the first parameter of theirs is needed; collectives of one kind keep
// their order.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Transforms/Passes.h"

#include "sched/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace zeroc {
#define GEN_PASS_DEF_ZEROBUCKET
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;

namespace {

/// A start and its wait.
struct Collective {
  Operation *start;
  sched::WaitOp wait;
  int64_t elements;
  Type dtype;
};

Type dtypeOf(Operation *start, SymbolTableCollection &symbols) {
  if (start->getNumOperands())
    return cast<RankedTensorType>(start->getOperand(0).getType())
        .getElementType();
  // In-place collectives name their tensors.
  for (NamedAttribute attr : start->getAttrs())
    if (auto array = dyn_cast<ArrayAttr>(attr.getValue()))
      for (Attribute a : array)
        if (auto ref = dyn_cast<FlatSymbolRefAttr>(a)) {
          Operation *sym = symbols.lookupNearestSymbolFrom(start, ref);
          if (auto t = dyn_cast_or_null<sched::TensorOp>(sym))
            return t.getTensorType().getElementType();
          if (auto g = dyn_cast_or_null<sched::FlatGroupOp>(sym))
            if (auto first = symbols.lookupNearestSymbolFrom<sched::TensorOp>(
                    start, cast<FlatSymbolRefAttr>(g.getParams()[0])))
              return first.getTensorType().getElementType();
        }
  return Type();
}

ArrayAttr concat(Builder &b, ArrayAttr x, ArrayAttr y) {
  SmallVector<Attribute> all(x.begin(), x.end());
  all.append(y.begin(), y.end());
  return b.getArrayAttr(all);
}

class Bucketer {
public:
  Bucketer(func::FuncOp func, int64_t reduceSize, int64_t gatherSize)
      : func(func), reduceSize(reduceSize), gatherSize(gatherSize),
        b(func.getContext()) {}

  void run() {
    // A collective without its one wait (hand-written, not yet verified)
    // is left alone and ends every bucket open before it.
    SmallVector<std::optional<Collective>> units;
    for (Operation &op : func.getBody().getOps()) {
      auto coll = dyn_cast<sched::CollectiveOpInterface>(op);
      if (!coll)
        continue;
      Value token = cast<sched::AsyncStartOpInterface>(op).getToken();
      auto wait = token.hasOneUse()
                      ? dyn_cast<sched::WaitOp>(*token.getUsers().begin())
                      : sched::WaitOp();
      if (!wait) {
        units.push_back(std::nullopt);
        continue;
      }
      units.push_back(Collective{&op, wait, coll.getLogicalElements(symbols),
                                 dtypeOf(&op, symbols)});
    }
    // Each kind of collective (sameKind) fills its own bucket: a collective of
    // another kind between two of a kind does not end it. The backward pass of
    // stage 3 interleaves them, a gather and a reduction for every weight, and
    // fused only when adjacent they never fused at all. Kinds run on their own
    // streams and meet on the communicator in program order, the same on every
    // rank.
    SmallVector<Collective> open;
    for (std::optional<Collective> &next : units) {
      if (!next) {
        open.clear();
        continue;
      }
      auto same = llvm::find_if(
          open, [&](const Collective &c) { return sameKind(c, *next); });
      if (same == open.end()) {
        open.push_back(*next);
        continue;
      }
      std::optional<Collective> merged = tryMerge(*same, *next);
      *same = merged ? *merged : *next;
    }
  }

private:
  int64_t limitFor(Operation *start) const {
    return isa<sched::AllGatherStartOp, sched::AllGatherUpdatesStartOp>(start)
               ? gatherSize
               : reduceSize;
  }

  /// Collectives fuse only with their kind: one op, one dtype, and for a
  /// reduce-scatter the same all_reduce flag. One collective runs over one
  /// communicator group: expert state (over the expert-data-parallel group)
  /// never shares a bucket with the rest.
  static bool sameKind(const Collective &a, const Collective &c) {
    if (a.start->getName() != c.start->getName() || a.dtype != c.dtype ||
        cast<sched::CollectiveOpInterface>(a.start).getGroup() !=
            cast<sched::CollectiveOpInterface>(c.start).getGroup())
      return false;
    auto x = dyn_cast<sched::ReduceScatterStartOp>(a.start);
    return !x || x.getAllReduce() ==
                     cast<sched::ReduceScatterStartOp>(c.start).getAllReduce();
  }

  std::optional<Collective> tryMerge(const Collective &a, const Collective &c) {
    if (a.elements + c.elements > limitFor(a.start))
      return std::nullopt;
    if (auto x = dyn_cast<sched::ReduceScatterStartOp>(a.start))
      return mergeReduceScatter(a, x, c,
                                cast<sched::ReduceScatterStartOp>(c.start));
    if (auto x = dyn_cast<sched::AllReduceStartOp>(a.start))
      return mergeInPlace(
          a, c, x.getTensorsAttr(),
          cast<sched::AllReduceStartOp>(c.start).getTensorsAttr());
    if (auto x = dyn_cast<sched::AllGatherUpdatesStartOp>(a.start))
      return mergeInPlace(
          a, c, x.getTargetsAttr(),
          cast<sched::AllGatherUpdatesStartOp>(c.start).getTargetsAttr());
    if (auto x = dyn_cast<sched::AllGatherStartOp>(a.start))
      return mergeGather(a, x, c, cast<sched::AllGatherStartOp>(c.start));
    return std::nullopt;
  }

  /// The earlier gradients wait in the bucket: the fused reduction starts
  /// where the later one did.
  std::optional<Collective> mergeReduceScatter(const Collective &a,
                                               sched::ReduceScatterStartOp x,
                                               const Collective &c,
                                               sched::ReduceScatterStartOp y) {
    if (touchesBetween(a.wait, y, x.getTargetsAttr()))
      return std::nullopt;
    SmallVector<Value> grads(x.getGrads());
    grads.append(y.getGrads().begin(), y.getGrads().end());
    SmallVector<int64_t> offsets(x.getOffsets());
    offsets.append(y.getOffsets().begin(), y.getOffsets().end());
    b.setInsertionPoint(y);
    auto fused = b.create<sched::ReduceScatterStartOp>(
        y.getLoc(), y.getToken().getType(), grads,
        concat(b, x.getTargetsAttr(), y.getTargetsAttr()),
        b.getDenseI64ArrayAttr(offsets), y.getAllReduceAttr(),
        y.getStreamAttr(), y.getGroupAttr());
    return replace(a, c, fused, /*waitAt=*/c.wait);
  }

  /// An in-place collective on persistent tensors moves to the later
  /// position if nothing between reads the earlier one's tensors.
  std::optional<Collective> mergeInPlace(const Collective &a,
                                         const Collective &c, ArrayAttr first,
                                         ArrayAttr second) {
    if (touchesBetween(a.wait, c.start, first))
      return std::nullopt;
    b.setInsertionPoint(c.start);
    OperationState state(c.start->getLoc(), c.start->getName());
    state.addTypes(c.start->getResultTypes());
    state.addAttributes(c.start->getAttrs());
    StringRef key =
        isa<sched::AllReduceStartOp>(c.start) ? "tensors" : "targets";
    state.addAttribute(key, concat(b, first, second));
    Operation *fused = b.create(state);
    return replace(a, c, fused, /*waitAt=*/c.wait);
  }

  /// The later parameters are gathered with the earlier ones, where the
  /// earlier ones were: their shard reads move up.
  std::optional<Collective> mergeGather(const Collective &a,
                                        sched::AllGatherStartOp x,
                                        const Collective &c,
                                        sched::AllGatherStartOp y) {
    // A shard read moves up only past ops that do not name its tensor.
    for (Value shard : y.getShards()) {
      auto read = shard.getDefiningOp<sched::ReadOp>();
      if (!read ||
          touchesBetween(x, read, b.getArrayAttr({read.getTensorAttr()})))
        return std::nullopt;
    }
    // A parameter gathered again (for backward) is not fused with its
    // earlier gather: that would hold two copies at once.
    for (Attribute p : y.getParams())
      if (llvm::is_contained(x.getParams().getValue(), p))
        return std::nullopt;
    for (Value shard : y.getShards())
      shard.getDefiningOp()->moveBefore(x);
    SmallVector<Value> shards(x.getShards());
    shards.append(y.getShards().begin(), y.getShards().end());
    b.setInsertionPoint(x);
    auto fused = b.create<sched::AllGatherStartOp>(
        x.getLoc(), x.getToken().getType(), shards,
        concat(b, x.getParamsAttr(), y.getParamsAttr()), x.getStreamAttr(),
        x.getGroupAttr());
    return replace(a, c, fused, /*waitAt=*/a.wait);
  }

  /// Does any op strictly between `from` and `to` name one of `tensors`?
  static bool touchesBetween(Operation *from, Operation *to,
                             ArrayAttr tensors) {
    for (Operation *op = from->getNextNode(); op && op != to;
         op = op->getNextNode())
      for (NamedAttribute attr : op->getAttrs()) {
        auto check = [&](Attribute a) {
          return llvm::is_contained(tensors.getValue(), a);
        };
        if (check(attr.getValue()))
          return true;
        if (auto array = dyn_cast<ArrayAttr>(attr.getValue()))
          if (llvm::any_of(array, check))
            return true;
      }
    return false;
  }

  /// Replaces two collectives by `fused`, whose wait goes where `waitAt` is.
  Collective replace(Collective a, Collective c, Operation *fused,
                     sched::WaitOp waitAt) {
    SmallVector<Type> types(a.wait.getResultTypes());
    types.append(c.wait.getResultTypes().begin(),
                 c.wait.getResultTypes().end());
    b.setInsertionPoint(waitAt);
    auto wait = b.create<sched::WaitOp>(
        waitAt.getLoc(), types, fused->getResult(0), waitAt.getStreamAttr());
    unsigned n = a.wait.getNumResults();
    a.wait.replaceAllUsesWith(wait.getResults().take_front(n));
    c.wait.replaceAllUsesWith(wait.getResults().drop_front(n));
    a.wait.erase();
    c.wait.erase();
    a.start->erase();
    c.start->erase();
    return {fused, wait, a.elements + c.elements, a.dtype};
  }

  func::FuncOp func;
  int64_t reduceSize, gatherSize;
  OpBuilder b;
  SymbolTableCollection symbols;
};

struct ZeroBucket : zeroc::impl::ZeroBucketBase<ZeroBucket> {
  using ZeroBucketBase::ZeroBucketBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (reduceBucketSize < 0 || allgatherBucketSize < 0) {
      module.emitError() << "bucket sizes must not be negative, found "
                            "reduce-bucket-size "
                         << reduceBucketSize.getValue()
                         << " and allgather-bucket-size "
                         << allgatherBucketSize.getValue();
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>())
      Bucketer(func, reduceBucketSize, allgatherBucketSize).run();
  }
};

} // namespace
