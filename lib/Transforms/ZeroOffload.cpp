//===- ZeroOffload.cpp - Optimizer states and parameters off the device ---===//

#include "zeroc/Transforms/Passes.h"

#include "sched/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

namespace zeroc {
#define GEN_PASS_DEF_ZEROOFFLOAD
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;
using sched::Placement;
using sched::Role;

namespace {

struct ZeroOffload : zeroc::impl::ZeroOffloadBase<ZeroOffload> {
  using ZeroOffloadBase::ZeroOffloadBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<int64_t> stage = sched::getStage(module);
    if (!stage) {
      module.emitError() << "module has no " << sched::kStageAttr
                         << ": run zero-partition first";
      return signalPassFailure();
    }
    Placement states = optimizer, params = param;
    if (params != Placement::Device && *stage != 3) {
      module.emitError() << "parameter offload needs ZeRO stage 3, found stage "
                         << *stage
                         << " (offload_param applies to partitioned "
                            "parameters only)";
      return signalPassFailure();
    }
    if (states != Placement::Device && *stage == 0) {
      module.emitError() << "optimizer offload needs ZeRO stage 1, 2 or 3, "
                            "found stage 0";
      return signalPassFailure();
    }
    if (states != Placement::Device)
      offloadOptimizer(module, states);
    if (params != Placement::Device)
      offloadParams(module, params);
  }

  /// Master copies and moments go to the host (or NVMe); sharded gradient
  /// partitions go to the host, where the optimizer runs.
  void offloadOptimizer(ModuleOp module, Placement where) {
    for (auto t : module.getOps<sched::TensorOp>()) {
      switch (t.getRole()) {
      case Role::Master:
      case Role::ExpAvg:
      case Role::ExpAvgSq:
        t.setPlacement(where);
        break;
      case Role::Grad:
        if (t.getSharded())
          t.setPlacement(Placement::Host);
        break;
      case Role::Param:
        break;
      }
    }
    module.walk(
        [&](sched::AdamUpdateOp update) { update.setOn(Placement::Host); });
  }

  /// Sharded parameters move off the device; each gather first fetches the
  /// shard, which is released with the gathered buffer.
  void offloadParams(ModuleOp module, Placement where) {
    llvm::StringSet<> moved;
    for (auto t : module.getOps<sched::TensorOp>())
      if (t.getRole() == Role::Param && t.getSharded()) {
        t.setPlacement(where);
        moved.insert(t.getSymName());
      }
    SmallVector<sched::ReadOp> reads;
    module.walk([&](sched::ReadOp read) {
      if (moved.contains(read.getTensor()))
        reads.push_back(read);
    });
    OpBuilder b(module.getContext());
    auto compute =
        sched::StreamAttr::get(b.getContext(), sched::Stream::Compute);
    for (sched::ReadOp read : reads) {
      b.setInsertionPoint(read);
      Location loc = read.getLoc();
      auto fetch = b.create<sched::FetchStartOp>(
          loc, sched::TokenType::get(b.getContext()),
          b.getArrayAttr({read.getTensorAttr()}), compute);
      auto shard = b.create<sched::WaitOp>(loc, TypeRange{read.getType()},
                                           fetch.getToken(), compute);
      read.replaceAllUsesWith(shard.getResult(0));
      read.erase();
      // The fetched shard is freed once the gathers reading it completed.
      Operation *last = nullptr;
      for (Operation *user : shard.getResult(0).getUsers()) {
        Operation *done = user;
        if (auto start = dyn_cast<sched::AsyncStartOpInterface>(user))
          if (!start.getToken().use_empty())
            done = *start.getToken().getUsers().begin();
        if (!last || last->isBeforeInBlock(done))
          last = done;
      }
      b.setInsertionPointAfter(last ? last : shard.getOperation());
      b.create<sched::ReleaseOp>(loc, shard.getResults(), compute);
    }
  }
};

} // namespace
