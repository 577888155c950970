//===- OptimizerOps.cpp - Adam, gradient clipping, loss scaling -----------===//
//
// The optimizer step's own ops: adam_update (Adam, AdamW or LAMB) on this
// rank's part of a parameter (a whole tensor, a stage-3 shard, or a flat
// group's owned partition in place), clip_grad_norm over the global gradient
// norm, and unscale_grads with the dynamic loss scale that moves between steps.
//
//===----------------------------------------------------------------------===//

#include "exec/ExecutorImpl.h"
#include "exec/Profiler.h"

#include "zeroc/Support/ShardLayout.h"
#include "zeroc/Support/Workspace.h"

namespace zeroc::runtime {

using namespace exec;
void Executor::Impl::initLossScale() {
  // The first unscale_grads of the plan carries the settings.
  for (const PlanPhase &ph : plan.phases)
    for (const PlanOp &op : ph.ops)
      if (op.kind == OpKind::UnscaleGrads && !haveLossState) {
        cpu::LossScaleSettings &ls = lossSettings;
        ls.staticLossScale = op.attrsAs<UnscaleGradsAttrs>().staticLossScale;
        ls.initialScalePower =
            op.attrsAs<UnscaleGradsAttrs>().initialScalePower;
        ls.lossScaleWindow = op.attrsAs<UnscaleGradsAttrs>().lossScaleWindow;
        ls.hysteresis = op.attrsAs<UnscaleGradsAttrs>().hysteresis;
        ls.minLossScale = op.attrsAs<UnscaleGradsAttrs>().minLossScale;
        lossState = cpu::initialLossScale(ls);
        haveLossState = true;
      }
}

void Executor::Impl::finishOptimizerStep() {
  if (haveLossState)
    cpu::updateLossScale(lossSettings, overflow.load(), lossState);
  if (!overflow)
    ++adamSteps;
  overflow = false;
}

void Executor::Impl::adamUpdate(const PlanOp &op) {
  if (overflow) { // Every rank skips the update alike; keep the order.
    scheduler.awaitTicket(op);
    return;
  }
  cpu::AdamSettings set;
  set.lr = op.attrsAs<AdamAttrs>().lr;
  set.beta1 = op.attrsAs<AdamAttrs>().beta1;
  set.beta2 = op.attrsAs<AdamAttrs>().beta2;
  set.eps = op.attrsAs<AdamAttrs>().eps;
  set.weightDecay = op.attrsAs<AdamAttrs>().weightDecay;
  set.adamw = op.attrsAs<AdamAttrs>().adamw;
  set.biasCorrection = !op.attrsAs<AdamAttrs>().noBiasCorrection;
  std::string paramName = op.attrsAs<AdamAttrs>().param;
  Stored &m = tensor(op.attrsAs<AdamAttrs>().expAvg);
  Stored &v = tensor(op.attrsAs<AdamAttrs>().expAvgSq);
  Stored &gs = tensor(op.attrsAs<AdamAttrs>().grad);
  std::string masterName = op.attrsAs<AdamAttrs>().master.value_or("");
  int64_t n = m.info->localNumel;

  // The gradient: the whole local tensor, or (stage 1) the owned partition
  // of the replicated flat buffer.
  Tensor grad = gs.view();
  const PlanFlatGroup *grp = state.group(paramName);
  if (grad.numel() != n) {
    if (!grp)
      fail("op " + std::to_string(op.index) + ": gradient " + gs.info->name +
           " does not match its optimizer state");
    grad = slice(grad, state.partition(*grp).begin, n);
  }

  // This rank's part of the parameter, in its own dtype.
  Tensor param;
  std::vector<std::shared_ptr<char>> keep;
  std::function<void()> writeBack;
  WorkspaceLayout layout; // One part at most (Workspace.h).
  if (grp) {
    // The owned partition of the flat parameter buffer, in place.
    param = slice(state.flatView(*grp), state.partition(*grp).begin, n);
  } else {
    Stored &ps = tensor(paramName);
    if (ps.info->localNumel == n) {
      param = ps.view();
    } else {
      // A persistent (whole) stage-3 parameter with sharded states.
      ShardGroup g = state.shardGroup(*ps.info);
      ParamShardLayout l{ps.info->numel, g.size};
      ElementRange own = l.ownedBy(g.rank);
      DType dt = ps.info->dtype;
      int64_t at = adamPartitionPart(layout, n, bytesPerElement(dt));
      param = Tensor{workspace(op, layout.size(), keep) + at, dt, {n}};
      Tensor full = ps.view();
      if (own.size() > 0)
        check(dev->copyElements(full, own.begin, param, 0, own.size()), op);
      writeBack = [this, &op, param, full, own]() {
        if (own.size() > 0)
          check(dev->copyElements(param, 0, full, own.begin, own.size()), op);
      };
    }
  }
  Tensor master = param;
  const Tensor *param16 = nullptr;
  Tensor masterView;
  if (!masterName.empty()) {
    masterView = tensor(masterName).view();
    master = masterView;
    param16 = &param;
  } else if (param.dtype != DType::F32) {
    fail("op " + std::to_string(op.index) + ": a 16-bit parameter " +
         paramName + " without a master copy");
  }
  Tensor mv = m.view(), vv = v.view();
  // NVMe tensors are resident only while the op runs (runOp): not deferred.
  // Only one issuing thread calls beforeIssue, which flushes.
  bool nvme = false;
  for (const std::string &name : op.tensors)
    nvme = nvme || (state.has(name) && state.tensor(name).file);
  if (!op.attrsAs<AdamAttrs>().lamb && !writeBack && !nvme &&
      dev->scheduling() == StreamScheduling::OneIssuingThread &&
      dev->fusesAdam(mv)) {
    // Deferred: issued with the adam_update ops that follow on this stream
    // (beforeIssue), checked now so that an error names this op.
    check(cpu::checkAdamUpdate(adamSteps + 1, grad, master, mv, vv, param16),
          op);
    int64_t stream = phase->streamOf.at(op.index);
    const cpu::AdamSettings &s = pendingAdam.settings;
    if (!pendingAdam.parts.empty() &&
        (pendingAdam.stream != stream || s.lr != set.lr ||
         s.beta1 != set.beta1 || s.beta2 != set.beta2 || s.eps != set.eps ||
         s.weightDecay != set.weightDecay || s.adamw != set.adamw ||
         s.biasCorrection != set.biasCorrection)) {
      flushAdam();
      dev->bindStream(stream); // This op's completion records on its own.
    }
    pendingAdam.settings = set;
    pendingAdam.step = adamSteps + 1;
    pendingAdam.stream = stream;
    pendingAdam.ops.push_back(&op);
    pendingAdam.parts.push_back(
        {grad, master, mv, vv,
         param16 ? std::optional<Tensor>(*param16) : std::nullopt});
    return;
  }
  if (!pendingAdam.parts.empty()) {
    flushAdam();
    dev->bindStream(phase->streamOf.at(op.index));
  }
  if (op.attrsAs<AdamAttrs>().lamb)
    lambUpdate(op, set, grad, master, mv, vv, param16);
  else
    check(dev->adamUpdate(set, adamSteps + 1, grad, master, mv, vv, param16),
          op);
  if (writeBack)
    writeBack();
  // An NVMe parameter held without being read (runOp) goes back to its
  // file now that it was written.
  if (!grp)
    if (Stored &ps = tensor(paramName); ps.file)
      ps.dirty = true;
}

void Executor::Impl::flushAdam(bool ownSpan) {
  if (pendingAdam.parts.empty())
    return;
  // Binds the deferred ops' stream: the caller binds its own again.
  PendingAdam batch = std::move(pendingAdam);
  pendingAdam = {};
  dev->bindStream(batch.stream);
  int64_t slot = ownSpan && profiler && profiler->deviceClock()
                     ? profiler->slotFor(batch.ops.front()->index)
                     : -1;
  if (slot >= 0)
    dev->markOpStart(slot);
  check(dev->adamUpdates(batch.settings, batch.step, batch.parts),
        *batch.ops.front());
  if (slot >= 0)
    dev->markOpEnd(slot);
  // Each deferred op recorded its completion when it returned, before the
  // fused kernel: again now, for the ops of other streams that wait on it
  // (all issued later, in program order).
  for (const PlanOp *op : batch.ops)
    dev->opDone(op->index);
}

void Executor::Impl::beforeIssue(const PlanOp *next, int64_t stream) {
  if (pendingAdam.parts.empty())
    return;
  if (next && next->kind == OpKind::AdamUpdate && stream == pendingAdam.stream)
    return; // It may join them (adamUpdate flushes if it cannot).
  flushAdam(/*ownSpan=*/true);
}

void Executor::Impl::lambUpdate(const PlanOp &op,
                                const cpu::AdamSettings &settings,
                                const Tensor &grad, const Tensor &master,
                                const Tensor &m, const Tensor &v,
                                const Tensor *param16) {
  const AdamAttrs &attrs = op.attrsAs<AdamAttrs>();
  if (!attrs.maxCoeff || !attrs.minCoeff)
    fail("op " + std::to_string(op.index) +
         ": lamb without max_coeff and min_coeff");
  // The parts of whole parameters this rank updates, as [begin, end) of its
  // state: one whole parameter or shard, or each member's piece of the
  // owned flat-group partition.
  struct Piece {
    int64_t begin, end;
  };
  drainInflight(); // The host blocks on the device below.
  std::vector<Piece> pieces;
  bool sharded = tensor(attrs.expAvg).info->sharded;
  if (const PlanFlatGroup *grp = state.group(attrs.param)) {
    const FlatGroupLayout &l = state.layout(*grp);
    int64_t r = state.shardGroup(*grp).rank;
    int64_t base = l.partition(r).begin;
    for (size_t k = 0; k < grp->params.size(); ++k) {
      ElementRange own = l.ownedBy(k, r);
      pieces.push_back(own.size() > 0 ? Piece{own.begin - base, own.end - base}
                                      : Piece{0, 0});
    }
  } else {
    pieces.push_back({0, m.numel()});
  }

  // Part 1 on each piece; the norms' squares all-reduced when sharded.
  std::vector<double> sums(2 * pieces.size(), 0.0);
  for (size_t k = 0; k < pieces.size(); ++k) {
    int64_t n = pieces[k].end - pieces[k].begin;
    if (n == 0)
      continue;
    cpu::LambSums part;
    check(dev->lambMoments(settings, slice(grad, pieces[k].begin, n),
                           slice(master, pieces[k].begin, n),
                           slice(m, pieces[k].begin, n),
                           slice(v, pieces[k].begin, n), part),
          op);
    sums[2 * k] = part.weight;
    sums[2 * k + 1] = part.update;
  }
  if (sharded)
    allReduceScalars(op, sums, ScalarOp::Sum,
                     tensor(attrs.expAvg).info->expert
                         ? CommGroupKind::ExpertDataParallel
                         : CommGroupKind::World);
  else
    scheduler.awaitTicket(op); // Replicated: every rank has the whole norms.

  // Part 3 with each parameter's trust ratio.
  for (size_t k = 0; k < pieces.size(); ++k) {
    int64_t n = pieces[k].end - pieces[k].begin;
    if (n == 0)
      continue;
    float ratio = cpu::lambTrustRatio({sums[2 * k], sums[2 * k + 1]},
                                      *attrs.maxCoeff, *attrs.minCoeff);
    Tensor p16;
    if (param16)
      p16 = slice(*param16, pieces[k].begin, n);
    check(dev->lambApply(
              settings, adamSteps + 1, ratio, slice(master, pieces[k].begin, n),
              slice(m, pieces[k].begin, n), slice(v, pieces[k].begin, n),
              param16 ? &p16 : nullptr),
          op);
  }
}

void Executor::Impl::clipGradNorm(const PlanOp &op) {
  if (overflow) { // Every rank skips the update alike; keep the order.
    scheduler.awaitTicket(op);
    return;
  }
  std::vector<std::string> names = op.attrsAs<ClipGradNormAttrs>().grads;
  drainInflight();
  // Sharded and flat-group gradients: each rank sums what it owns, then the
  // sums are all-reduced. Replicated gradients are the same on every rank.
  // Each list's sums are added in list order (Device::sumOfSquaresOf).
  // With expert parallelism every element counts once (DeepSpeed's global
  // norm over both parameter groups): owned expert shards are owned within
  // their expert-data-parallel group, so the world's sum holds each once;
  // replicated expert gradients are alike over that group and differ over
  // the expert-parallel group, so only the first expert-data-parallel
  // group's ranks (world ranks below ep) add theirs to the shared sum.
  bool firstExpertCopy = rank < plan.expertParallelSize;
  std::vector<Tensor> shared, local, all;
  for (const std::string &name : names) {
    Stored &s = tensor(name);
    Tensor g = s.view();
    all.push_back(g);
    if (const PlanFlatGroup *grp = state.groupOf(*s.info)) {
      const FlatGroupLayout &l = state.layout(*grp);
      if (!s.info->sharded)
        g = slice(g, state.partition(*grp).begin, l.partitionSize());
      shared.push_back(g);
    } else if (s.info->sharded) {
      shared.push_back(g);
    } else if (s.info->expert) {
      if (firstExpertCopy)
        shared.push_back(g);
    } else {
      local.push_back(g);
    }
  }
  double sharedSum = shared.empty() ? 0.0 : dev->sumOfSquaresOf(shared);
  double localSum = local.empty() ? 0.0 : dev->sumOfSquaresOf(local);
  double total = allReduceScalar(op, sharedSum, ScalarOp::Sum) + localSum;
  float coef =
      cpu::clipCoefficient(total, op.attrsAs<ClipGradNormAttrs>().maxNorm);
  if (coef != 1.0f)
    check(dev->scaleAll(all, coef), op);
}

void Executor::Impl::unscale(const PlanOp &op) {
  std::vector<std::string> names = op.attrsAs<UnscaleGradsAttrs>().grads;
  drainInflight();
  bool over = false;
  for (const std::string &name : names)
    check(dev->unscaleGrads(tensor(name).view(), lossState.scale, over), op);
  overflow = allReduceScalar(op, over ? 1.0 : 0.0, ScalarOp::Max) > 0;
}

} // namespace zeroc::runtime
