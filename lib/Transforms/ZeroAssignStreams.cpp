//===- ZeroAssignStreams.cpp - Collectives and copies on their own streams ===//

#include "zeroc/Transforms/Passes.h"

#include "sched/SchedOps.h"

namespace zeroc {
#define GEN_PASS_DEF_ZEROASSIGNSTREAMS
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;
using sched::Stream;

namespace {

bool isReduction(Operation *op) {
  return isa<sched::ReduceScatterStartOp, sched::AllReduceStartOp>(op);
}

/// Moves the wait of a gradient reduction down to just before the next
/// reduction starts, the next op that touches the tensors it writes, or the
/// end of the function, whichever comes first.
void deferReductionWait(sched::WaitOp wait) {
  Operation *start = wait.getToken().getDefiningOp();
  SmallVector<StringRef> written;
  sched::getNamedSymbols(start, written);
  Operation *stop = wait->getBlock()->getTerminator();
  for (Operation *op = wait->getNextNode(); op != stop;
       op = op->getNextNode()) {
    if (isReduction(op)) {
      stop = op;
      break;
    }
    SmallVector<StringRef> touched;
    sched::getNamedSymbols(op, touched);
    if (llvm::any_of(touched, [&](StringRef n) {
          return llvm::is_contained(written, n);
        })) {
      stop = op;
      break;
    }
  }
  wait->moveBefore(stop);
}

struct ZeroAssignStreams
    : zeroc::impl::ZeroAssignStreamsBase<ZeroAssignStreams> {
  using ZeroAssignStreamsBase::ZeroAssignStreamsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto func : module.getOps<func::FuncOp>()) {
      SmallVector<sched::WaitOp> reductionWaits;
      for (Operation &op : func.getBody().getOps()) {
        auto onStream = dyn_cast<sched::StreamOpInterface>(op);
        if (!onStream)
          continue;
        Stream stream = Stream::Compute;
        if (overlapComm) {
          if (isa<sched::AllGatherStartOp, sched::AllGatherUpdatesStartOp>(op))
            stream = Stream::Gather;
          else if (isReduction(&op))
            stream = Stream::Reduce;
          else if (isa<sched::FetchStartOp, sched::CopyStartOp>(op))
            stream = Stream::Copy;
        }
        onStream.setStream(stream);
        if (auto wait = dyn_cast<sched::WaitOp>(op))
          if (overlapComm && isReduction(wait.getToken().getDefiningOp()))
            reductionWaits.push_back(wait);
      }
      for (sched::WaitOp wait : reductionWaits)
        deferReductionWait(wait);
    }
  }
};

} // namespace
