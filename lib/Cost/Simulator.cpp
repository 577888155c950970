//===- Simulator.cpp - Event simulation of a plan's streams ---------------===//
//
// Ops are visited in program order. Because a dependency always points to
// an earlier op and a stream runs its ops in program order, every op's
// earliest start is known when it is reached:
//
//   ready = when its stream finished the previous op on it
//   start = max(ready, end of every op in deps)
//   end   = start + cost
//
// A wait costs nothing, so it ends when the op it waits for ends, and the
// stream behind it cannot go on before. A *_start runs its collective or
// copy on its own stream. Collectives share the network (one NCCL
// communicator per data-parallel group): on whatever stream, a collective
// starts only once the previous one has finished, so gathers and
// reductions on two streams overlap compute but not each other. Every rank
// must have launched it, and ranks do not progress alike: with a
// calibrated meeting wait it starts that share of the compute since the
// previous collective later (GEMMs and attention at one share, the
// memory-bound kernels at another). The compute stream's idle time before
// an op is charged to the op that held it up, seen through waits. On a CPU rank
// at world size 1 the streams of nothing but collectives run on the compute
// stream's lane (zerorun runs them on its thread: docs/cost-model.md, "Streams
// on a CPU rank").
//
// A GPU rank's host threads issue work that the device runs behind them: a
// stream's thread issues its ops in program order, each once the ops it
// depends on were issued, and spends the op's host share (OpCost::host) on
// it; the device runs the op once issued, its stream free and its
// dependencies done. The host's time is hidden while the device's queue is
// longer. An op the host runs or waits for (host-class work, clipping's
// and unscaling's scalar readback) holds its thread until the device has
// done what it depends on and the op itself.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Cost/Simulator.h"

#include "zeroc/Plan/PlanTrace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

namespace zeroc {

namespace {

size_t streamCount(const Plan &plan) {
  size_t count = std::max<size_t>(1, plan.streams.size());
  for (const PlanPhase &phase : plan.phases)
    for (const PlanOp &op : phase.ops)
      if (op.stream >= 0)
        count = std::max(count, size_t(op.stream) + 1);
  return count;
}

/// Whether the cluster's device runs behind its host's queue (a GPU; not a
/// CPU rank, whose host runs the kernels itself).
bool hostRunsAhead(const ClusterCalibration &cal) {
  return cal.device != "cpu";
}

/// Whether a device rank's host thread runs the op or waits for its result
/// (zerorun's CUDA executor): host-class work (an offloaded optimizer's
/// Adam, clipping or accumulate over host memory, with the synchronized
/// copies around it), and the scalar that clipping and unscaling read back.
bool hostBound(const PlanOp &op, const OpCost &cost) {
  return cost.cls == OpClass::Host || op.kind == OpKind::ClipGradNorm ||
         op.kind == OpKind::UnscaleGrads;
}

PhaseTimeline simulatePhase(const PlanPhase &phase, const CostModel &model,
                            size_t streams, int64_t compute, int64_t worldSize,
                            double stragglerFactor) {
  PhaseTimeline out;
  out.kind = phase.kind;
  out.runsPerStep = phase.runsPerStep;
  out.streamBusy.assign(streams, 0.0);
  out.ops.reserve(phase.ops.size());

  // Rank 0 is a healthy rank, the one reported; with a straggler, rank 1 is
  // the slow one, simulated alongside it. Both run the same ops; they meet
  // at every collective, which starts when the later of them reaches it.
  size_t ranks = stragglerFactor != 1 ? 2 : 1;
  std::unordered_map<int64_t, size_t> position;
  std::vector<std::vector<double>> streamFree(
      ranks, std::vector<double>(streams, 0.0));
  std::vector<std::vector<double>> ends(ranks); // By op position.
  double networkFree = 0; // When the last collective left the network.
  // The mean wait for the latest rank at the next collective: the compute
  // since the last one times the calibrated meeting wait of its kind.
  double apart = 0;
  double slowEnd = 0; // The slow rank's last end.
  // The dependency that finished last, per op position; -1 when none.
  std::vector<int64_t> critical;
  critical.reserve(phase.ops.size());
  std::map<int64_t, double> exposedBy;

  // A CPU rank runs each stream on a thread; at one rank, a stream of
  // nothing but collectives (local copies) runs on the compute stream's
  // thread instead (zerorun: PreparedPhase). Such an op keeps its stream in
  // the timeline and its busy time but takes its turn on the compute lane.
  // A rank of one kernel thread has one core: zerorun runs every op on one
  // thread in program order there (--stream-threads: its streams' threads
  // take turns on it), so every op takes its turn on the compute lane.
  const ClusterCalibration &cal = model.cluster().calibration;
  bool cpu = cal.device == "cpu";
  bool oneCore = cpu && cal.threadsPerRank == 1;
  std::vector<int64_t> joined;
  if (cpu && worldSize == 1)
    joined = collectiveOnlyStreams(phase, compute);
  std::vector<char> threadUsed(streams, 0);
  // The thread that runs `op` (zerorun's). A rank of one core runs every op
  // on one thread in program order (zerorun's default there).
  auto threadOf = [&](const PlanOp &op) {
    if (oneCore)
      return size_t(compute);
    size_t stream = op.stream >= 0 ? size_t(op.stream) : 0;
    return std::find(joined.begin(), joined.end(), int64_t(stream)) !=
                   joined.end()
               ? size_t(compute)
               : stream;
  };
  // The lane it waits its turn on.
  auto laneOf = [&](const PlanOp &op) {
    return oneCore ? size_t(compute) : threadOf(op);
  };
  // A CPU rank's collective on a stream of its own shares the rank's cores
  // with the compute still to run on the compute stream: it runs at the
  // contended fit (the calibration's, where measured) while compute work
  // (an op with flops or bytes) follows it there in program order. (On one
  // core it takes its turn instead: no op runs beside it.)
  std::vector<char> computeAfter(phase.ops.size() + 1, 0);
  // A device rank (not "cpu"): per lane, when its host thread is free; per
  // op position, when its issue ended.
  bool queued = hostRunsAhead(cal);
  std::vector<double> hostFree(streams, 0.0);
  std::vector<double> issued;
  issued.reserve(phase.ops.size());
  if (cpu)
    for (size_t i = phase.ops.size(); i-- > 0;) {
      const PlanOp &later = phase.ops[i];
      computeAfter[i] =
          computeAfter[i + 1] || (int64_t(laneOf(later)) == compute &&
                                  (later.flops > 0 || later.bytes > 0));
    }

  for (size_t at = 0; at < phase.ops.size(); ++at) {
    const PlanOp &op = phase.ops[at];
    size_t stream = op.stream >= 0 ? size_t(op.stream) : 0;
    size_t lane = laneOf(op);
    bool contended = cpu && !op.collective.empty() &&
                     int64_t(lane) != compute && computeAfter[at + 1];
    OpCost cost = model.cost(phase, op, contended);
    threadUsed[threadOf(op)] = 1;
    bool networked = cost.cls == OpClass::Collective && !op.collective.empty();

    // Each rank's earliest start on its own: its stream free, its
    // dependencies done.
    double local[2] = {0, 0};
    int64_t last = -1;
    for (size_t r = 0; r < ranks; ++r) {
      double depsDone = 0;
      int64_t lastDep = -1;
      for (int64_t dep : op.deps) {
        auto it = position.find(dep);
        if (it == position.end())
          continue;
        double end = ends[r][it->second];
        if (lastDep < 0 || end > depsDone) {
          depsDone = end;
          lastDep = int64_t(it->second);
        }
      }
      local[r] = std::max(streamFree[r][lane], depsDone);
      if (r == 0)
        last = lastDep;
    }

    // On a device rank: the host's issue, after the issues of what the op
    // depends on; work the host runs or reads back also waits for the
    // device.
    double work = cost.seconds;
    const bool onHost = queued && hostBound(op, cost);
    if (queued) {
      double deviceReady = local[0];
      double issue = hostFree[lane];
      for (int64_t dep : op.deps)
        if (auto it = position.find(dep); it != position.end())
          issue = std::max(issue, issued[it->second]);
      if (!onHost) {
        issue += cost.host;
        work = std::max(0.0, cost.seconds - cost.host);
      }
      for (size_t r = 0; r < ranks; ++r)
        local[r] = std::max(local[r], issue);
      issued.push_back(issue);
      // Held up by its issue, not by a dependency: no op to blame.
      if (local[0] > deviceReady) {
        last = -1;
        if (int64_t(lane) == compute)
          out.hostWait += local[0] - deviceReady;
      }
    }

    OpTiming t;
    t.op = op.index;
    t.stream = int64_t(stream);
    t.cls = cost.cls;
    t.flops = cost.flops;
    t.ready = streamFree[0][lane];
    t.issue = local[0];
    t.start = local[0];
    double slowStart = ranks > 1 ? local[1] : 0;
    if (networked) {
      // Every rank launches it; it runs once the last has, and once the
      // collective before it has left the network.
      double met = ranks > 1 ? std::max(local[0], local[1]) : local[0];
      t.stragglerWait = met - local[0];
      // The ranks' progress since they last met differs (calibrated):
      // the latest arrives that much later on average.
      met += apart;
      apart = 0;
      t.start = std::max(met, networkFree);
      slowStart = t.start;
    }
    t.end = t.start + work;
    if (networked)
      networkFree = t.end;
    if (queued) {
      if (onHost)
        issued.back() = t.end;
      hostFree[lane] = issued.back();
    }
    streamFree[0][lane] = t.end;
    ends[0].push_back(t.end);
    if (ranks > 1) {
      double seconds = cost.cls == OpClass::Compute && !networked
                           ? work * stragglerFactor
                           : work;
      double slowEndOp = slowStart + seconds;
      streamFree[1][lane] = slowEndOp;
      ends[1].push_back(slowEndOp);
      slowEnd = std::max(slowEnd, slowEndOp);
    }
    out.streamBusy[stream] += work;
    // How far apart the ranks drift on this op's work.
    if (worldSize > 1 && cost.cls == OpClass::Compute)
      apart += work * cal.meetingWait[pricedByFlopRate(op.kind) ? 0 : 1];
    out.flops += cost.flops;
    out.modelFlops += cost.modelFlops;
    out.misaligned += cost.misaligned;
    out.misalignedOps += cost.misaligned > 0;

    if (t.start > t.ready && last >= 0) {
      // Look through waits to the op whose work was not done.
      int64_t culprit = last;
      while (phase.ops[size_t(culprit)].kind == OpKind::Wait &&
             critical[size_t(culprit)] >= 0)
        culprit = critical[size_t(culprit)];
      t.blockedBy = phase.ops[size_t(culprit)].index;
      if (int64_t(lane) == compute) {
        double idle = t.start - t.ready;
        OpClass why = out.ops[size_t(culprit)].cls;
        if (why == OpClass::Collective)
          out.exposedComm += idle;
        else if (why == OpClass::Offload)
          out.exposedOffload += idle;
        if (why == OpClass::Collective || why == OpClass::Offload)
          exposedBy[t.blockedBy] += idle;
      }
    }
    // Communication issued on the compute stream itself is all exposed,
    // and so is the wait for a slower rank before it.
    if (int64_t(lane) == compute && work > 0) {
      if (cost.cls == OpClass::Collective)
        out.exposedComm += work;
      else if (cost.cls == OpClass::Offload)
        out.exposedOffload += work;
      if (cost.cls == OpClass::Collective || cost.cls == OpClass::Offload)
        exposedBy[op.index] += work;
    }

    position[op.index] = out.ops.size();
    critical.push_back(last);
    out.seconds = std::max(out.seconds, t.end);
    out.ops.push_back(t);
  }
  // A phase lasts until its slowest rank is done, and its host threads.
  out.seconds = std::max(out.seconds, slowEnd);
  for (double h : hostFree)
    out.seconds = std::max(out.seconds, h);
  out.exposedBy.assign(exposedBy.begin(), exposedBy.end());
  // Starting the run's streams and joining them (calibrated; 0 otherwise).
  // A CPU rank starts threads only for a run on more than one stream; a
  // run on one is the calling thread's loop (bench/RESULTS.md, run 6).
  size_t threads = size_t(std::count(threadUsed.begin(), threadUsed.end(), 1));
  if (!phase.ops.empty() && (!cpu || threads > 1))
    out.seconds += model.cluster().calibration.phaseOverhead;
  return out;
}

} // namespace

Expected<StepPrediction> predictStep(const Plan &plan, const Cluster &cluster,
                                     const SimulationOptions &options) {
  if (std::optional<Diagnostic> error = checkFits(cluster, plan.worldSize))
    return *error;
  // A sub-group's time depends on where its ranks sit (the expert-data-
  // parallel group strides across nodes): priced where every group sits
  // alike (groupLayout).
  if (plan.expertParallelSize > 1)
    for (CommGroupKind kind :
         {CommGroupKind::ExpertParallel, CommGroupKind::ExpertDataParallel})
      if (!groupLayout(cluster, plan.worldSize, plan.expertParallelSize, kind))
        return Diagnostic{
            "", 0, 0,
            "the plan uses expert parallelism (expert_parallel_size " +
                std::to_string(plan.expertParallelSize) + ") on " +
                std::to_string(plan.worldSize) + " ranks of " +
                std::to_string(cluster.gpusPerNode) + " per node: its " +
                commGroupName(kind) +
                " groups span nodes unevenly, which the cost model does not "
                "price (it needs whole nodes, and expert_parallel_size "
                "dividing the GPUs per node or a multiple of them)"};
  if (!(options.stragglerFactor > 0) || !std::isfinite(options.stragglerFactor))
    return Diagnostic{"", 0, 0,
                      "straggler factor must be a finite number > 0, "
                      "got " +
                          std::to_string(options.stragglerFactor)};
  if (options.stragglerFactor != 1 && plan.worldSize < 2)
    return Diagnostic{
        "", 0, 0,
        "a straggler needs a plan of 2 or more ranks: this plan has " +
            std::to_string(plan.worldSize) + ", so no rank waits for another"};
  CostModel model(plan, cluster);
  size_t streams = streamCount(plan);
  int64_t compute = computeStream(plan);

  StepPrediction step;
  step.cluster = cluster.name;
  step.streams = plan.streams;
  step.computeStream = compute;
  for (size_t s = step.streams.size(); s < streams; ++s)
    step.streams.push_back("stream " + std::to_string(s));
  step.streamBusy.assign(streams, 0.0);
  for (const PlanPhase &phase : plan.phases) {
    PhaseTimeline timeline =
        simulatePhase(phase, model, streams, compute, plan.worldSize,
                      options.stragglerFactor);
    double runs = double(phase.runsPerStep);
    step.stepSeconds += runs * timeline.seconds;
    step.exposedComm += runs * timeline.exposedComm;
    step.exposedOffload += runs * timeline.exposedOffload;
    step.hostWait += runs * timeline.hostWait;
    step.flops += runs * timeline.flops;
    step.modelFlops += runs * timeline.modelFlops;
    step.misaligned += runs * timeline.misaligned;
    step.misalignedOps += phase.runsPerStep * timeline.misalignedOps;
    for (size_t s = 0; s < streams; ++s)
      step.streamBusy[s] += runs * timeline.streamBusy[s];
    step.phases.push_back(std::move(timeline));
  }
  if (step.stepSeconds > 0) {
    step.achievedTflopsPerGpu = step.flops / step.stepSeconds / 1e12;
    double peak = cluster.peakFlops(plan.model.dtype);
    step.mfu = peak > 0 ? step.modelFlops / step.stepSeconds / peak : 0;
    step.hfu = peak > 0 ? step.flops / step.stepSeconds / peak : 0;
    step.tokensPerSecond = double(plan.model.microBatch) *
                           double(plan.model.seqLen) *
                           double(plan.gradientAccumulationSteps) *
                           double(plan.worldSize) / step.stepSeconds;
  }
  return step;
}

std::vector<StepTimeReport::ExposedCollective>
mostExposed(const Plan &plan, const StepPrediction &prediction, size_t limit) {
  std::vector<StepTimeReport::ExposedCollective> out;
  for (const PhaseTimeline &timeline : prediction.phases) {
    const PlanPhase *phase = plan.findPhase(timeline.kind);
    if (!phase)
      continue;
    std::unordered_map<int64_t, const PlanOp *> byIndex;
    for (const PlanOp &op : phase->ops)
      byIndex[op.index] = &op;
    for (const auto &[index, seconds] : timeline.exposedBy) {
      StepTimeReport::ExposedCollective e;
      e.phase = phaseName(timeline.kind);
      e.op = index;
      if (auto it = byIndex.find(index); it != byIndex.end()) {
        e.kind = it->second->kindName();
        e.collective = it->second->collective;
        e.subject = opSubject(*it->second);
        e.commElements = it->second->commElements;
      }
      e.seconds = seconds * double(timeline.runsPerStep);
      out.push_back(std::move(e));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto &a, const auto &b) {
    return a.seconds > b.seconds;
  });
  if (out.size() > limit)
    out.resize(limit);
  return out;
}

StepTimeReport stepTimeReport(const Plan &plan, const Cluster &cluster,
                              const StepPrediction &prediction) {
  StepTimeReport report;
  report.cluster = cluster.name;
  RankLayout layout = rankLayout(cluster, plan.worldSize);
  report.clusterGpus =
      std::to_string(layout.ranks) + " rank" + (layout.ranks == 1 ? "" : "s") +
      " on " + std::to_string(layout.nodes) + " node" +
      (layout.nodes == 1 ? "" : "s") + " of " +
      std::to_string(cluster.gpusPerNode) + " x " + cluster.gpu.model;
  report.stepSeconds = prediction.stepSeconds;
  report.exposedCommSeconds = prediction.exposedComm;
  report.exposedOffloadSeconds = prediction.exposedOffload;
  report.hostWaitSeconds = prediction.hostWait;
  report.hostAhead = hostRunsAhead(cluster.calibration);
  OffloadTraffic traffic = offloadTrafficPerStep(plan, report.hostAhead);
  report.offload = {traffic.toDevice, traffic.toHost, traffic.nvmeRead,
                    traffic.nvmeWrite};
  for (size_t s = 0; s < prediction.streamBusy.size(); ++s)
    report.streamBusySeconds.emplace_back(prediction.streams[s],
                                          prediction.streamBusy[s]);
  for (const PhaseTimeline &t : prediction.phases)
    report.phases.push_back({phaseName(t.kind), t.runsPerStep, t.seconds});
  report.flopsPerStep = prediction.flops;
  report.achievedTflopsPerGpu = prediction.achievedTflopsPerGpu;
  report.modelFlopsPerStep = prediction.modelFlops;
  report.mfu = prediction.mfu;
  report.hfu = prediction.hfu;
  report.tokensPerSecond = prediction.tokensPerSecond;
  report.mostExposed = mostExposed(plan, prediction);
  report.steadiness = Steadiness::of(cluster.calibration.steadiness);
  report.misalignedSeconds = prediction.misaligned;
  report.misalignedOps = prediction.misalignedOps;
  // The logits' rows misaligned: a vocabulary that padding would align.
  for (const PlanPhase &phase : plan.phases)
    for (const PlanOp &op : phase.ops)
      if (op.kind == OpKind::CrossEntropy && !op.inputs.empty())
        if (const PlanValue *logits = phase.findValue(op.inputs[0]);
            logits && rowsMisaligned(logits->shape, logits->dtype))
          report.misalignedVocab = logits->shape.back();
  return report;
}

Expected<InspectOptions> inspectOptions(const Plan &plan,
                                        const Cluster &cluster) {
  Expected<StepPrediction> prediction = predictStep(plan, cluster);
  if (!prediction)
    return prediction.error();
  InspectOptions options;
  options.time = stepTimeReport(plan, cluster, *prediction);
  return options;
}

} // namespace zeroc
