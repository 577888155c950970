//===- Executor.cpp - Runs a plan's training steps ------------------------===//
//
// The step: micro-steps then the optimizer step, each phase prepared once
// and run by the stream scheduler, each op dispatched by kind to its part
// (ExecutorImpl.h); the Executor's API.
//
//===----------------------------------------------------------------------===//

#include "exec/ExecutorImpl.h"
#include "zeroc/Config/DeepSpeedConfig.h" // OptimizerConfig::oneBitType
#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Support/Format.h"
#include "zeroc/Support/Limits.h"

#include <algorithm>
#include <chrono>

namespace zeroc::runtime {

using namespace exec;

Executor::Impl::Impl(Executor &ex, Communicator &comm,
                     const ExecutorOptions &options)
    : ex(ex), plan(ex.thePlan), comm(comm),
      ownDevice(options.device ? nullptr : makeCpuDevice()),
      dev(options.device ? options.device : ownDevice.get()), rank(comm.rank()),
      ws(comm.size()), streamThreads(options.streamThreads),
      joinLocalCollectiveStreams(options.joinLocalCollectiveStreams),
      state(ex.thePlan, ex.memory, *dev, rank, ws, options.nvmePath),
      scheduler(*dev), profiler(options.profiler) {
  scheduler.profiler = profiler;
  scheduler.beforeIssue = [this](const PlanOp *next, int64_t stream) {
    beforeIssue(next, stream);
  };
  // Expert parallelism's groups: every rank splits the world in the same
  // order (collective), each group's ranks ordered by world rank, so a
  // rank's place in its group is ExpertParallel.h's indexOf.
  if (plan.expertParallelSize > 1) {
    auto split = [&](CommGroupKind kind) {
      CommGroupShape shape =
          commGroupShape(kind, plan.worldSize, plan.expertParallelSize);
      std::unique_ptr<Communicator> c =
          comm.split(int(shape.firstRank(rank)), int(rank));
      if (!c || c->size() != shape.size || c->rank() != shape.indexOf(rank))
        fail(std::string("the ") + commGroupName(kind) +
             " communicator does not have the plan's shape");
      return c;
    };
    expertParallelComm = split(CommGroupKind::ExpertParallel);
    expertDataParallelComm = split(CommGroupKind::ExpertDataParallel);
  }
  // The host sees a collective start and end only where it waits for it.
  arrivals.enabled =
      options.measureArrivalSkew && ws > 1 && !dev->streamOrderedCollectives();
  skewMethod = options.skewMethod;
}

Communicator &Executor::Impl::groupComm(CommGroupKind g) {
  Communicator *c =
      g == CommGroupKind::ExpertParallel       ? expertParallelComm.get()
      : g == CommGroupKind::ExpertDataParallel ? expertDataParallelComm.get()
                                               : &comm;
  if (!c)
    fail(std::string("a collective over the ") + commGroupName(g) +
         " group, but the plan has no expert parallelism");
  return *c;
}

Tensor &Executor::Impl::value(int64_t id) {
  auto it = phase->values.find(id);
  if (it == phase->values.end() || !it->second.data)
    fail("value " + std::to_string(id) + " of phase " +
         phaseName(phase->phase->kind) + " is used before it is defined");
  return it->second;
}

char *Executor::Impl::arenaAt(int64_t offset, int64_t bytes) {
  ex.memory.useArena(offset + bytes);
  return arena.get() + offset;
}

char *Executor::Impl::workspace(const PlanOp &op, int64_t bytes,
                                std::vector<std::shared_ptr<char>> &keep) {
  if (bytes <= 0)
    return nullptr;
  if (op.workspaceOffset >= 0 && op.workspaceBytes >= bytes) {
    if (op.workspaceOffset + bytes > ex.arenaSize)
      fail("op " + std::to_string(op.index) +
           ": its workspace lies outside the arena");
    return arenaAt(op.workspaceOffset, bytes);
  }
  keep.push_back(
      ex.memory.allocate(bytes, true, 64, MemoryUse::UnplannedWorkspace));
  return keep.back().get();
}

OpLabel Executor::Impl::label(const PlanOp &op) const {
  return OpLabel{op.index, std::string(phaseName(phase->phase->kind)) + ", " +
                               std::string(op.kindName()) +
                               (op.where.empty() ? "" : ": " + op.where)};
}

Executor::Impl::Resident::~Resident() {
  if (!held.empty()) {
    try {
      impl->dev->streamSynchronize();
    } catch (const std::exception &e) {
      impl->scheduler.recordFailure(e.what());
    }
  }
  for (Stored *s : held) {
    try {
      impl->state.swapOut(*s, writeBack && s != unread);
    } catch (const std::exception &e) {
      impl->scheduler.recordFailure(e.what());
    }
  }
}

//===----------------------------------------------------------------------===//
// The step
//===----------------------------------------------------------------------===//

void Executor::Impl::runPhase(const PlanPhase &ph, const DataLoader *data,
                              int64_t step, int64_t micro) {
  auto it = prepared.find(&ph);
  if (it == prepared.end())
    it =
        prepared
            .emplace(&ph, PreparedPhase::prepare(
                              ph, arena.get(), ex.arenaSize, ws, !streamThreads,
                              joinLocalCollectiveStreams &&
                                  dev->scheduling() ==
                                      StreamScheduling::ThreadPerStream,
                              computeStream(plan)))
            .first;
  phase = &it->second;
  phase->bind(ex.memory, unplanned);
  exchanges.clear();
  pendingAdam = {}; // Nothing deferred outlives a (failed) run.
  runningPhase = ph.kind;
  runningRun = micro;
  if (profiler)
    profiler->beginRun(ph, step, micro, phase->opCount);

  if (data && ph.args.size() >= 2) {
    auto t0 = Clock::now();
    Tensor inputs = value(ph.args[0]), targets = value(ph.args[1]);
    std::vector<int32_t> hostIn(size_t(inputs.numel())),
        hostTgt(size_t(targets.numel()));
    int32_t *starts = nullptr;
    documentAttention = data->masksCrossDocumentAttention();
    documentPositions = data->resetsPositionIds();
    if (documentAttention || documentPositions) {
      documentStarts.resize(size_t(targets.numel()));
      documents = {documentStarts.data(), DType::I32, targets.shape};
      starts = documentStarts.data();
    }
    if (auto err =
            data->load(step, micro, hostIn.data(), hostTgt.data(), starts))
      fail(err->str());
    dev->fromHost(inputs.data, hostIn.data(), inputs.bytes());
    dev->fromHost(targets.data, hostTgt.data(), targets.bytes());
    scheduler.times.compute += since(t0);
  }

  scheduler.run(*phase, [this](const PlanOp &op) { runOp(op); });
  finishCollectives();
  if (profiler)
    profiler->endRun();
  if (scheduler.failedFlag())
    fail(scheduler.failure());
}

void Executor::Impl::runOp(const PlanOp &op) {
  const OpKind k = op.kind;
  // NVMe tensors the op reads or writes are resident while it runs; written
  // back unless it only reads them. Gathers and reductions name tensors
  // whose data they do not touch here.
  Resident resident{this, {}, k != OpKind::FetchStart};
  // Adam with a master copy writes the 16-bit parameter whole, without
  // reading it: not read from NVMe (what the plan's NVMe traffic counts).
  const std::string *writeOnly = nullptr;
  if (k == OpKind::AdamUpdate) {
    const AdamAttrs &a = op.attrsAs<AdamAttrs>();
    // (A whole stage-3 parameter with sharded states is written in part.
    // The buffer goes back to the file only once adam_update wrote it
    // (Resident::unread): not after a failure, nor a step skipped for an
    // fp16 overflow.)
    if (a.master && *a.master != a.param && state.has(a.param) &&
        state.has(a.expAvg) &&
        state.tensor(a.param).info->localNumel ==
            state.tensor(a.expAvg).info->localNumel)
      writeOnly = &a.param;
  }
  if (k != OpKind::AllGatherStart && k != OpKind::ReduceScatterStart &&
      k != OpKind::Wait)
    for (const std::string &name : op.tensors) {
      if (!state.has(name))
        continue;
      Stored &s = state.tensor(name);
      if (!s.file || s.data)
        continue;
      if (k == OpKind::Read)
        fail("op " + std::to_string(op.index) + " reads " + name +
             ", which is on nvme, as a value: fetch it first");
      bool unread = writeOnly && name == *writeOnly;
      state.swapIn(s, !unread);
      resident.held.push_back(&s);
      if (unread)
        resident.unread = &s;
    }
  if (k == OpKind::Wait) {
    // Its dependencies (the start) completed: nothing left to do.
  } else if (k == OpKind::Read) {
    read(op);
  } else if (k == OpKind::Release || k == OpKind::Return) {
    // Arena values need no freeing.
  } else if (k == OpKind::Accumulate) {
    accumulate(op);
  } else if (k == OpKind::ZeroGrads) {
    zeroGrads(op);
  } else if (k == OpKind::AllGatherStart) {
    startAllGather(op);
  } else if (k == OpKind::ReduceScatterStart) {
    startReduceScatter(op);
  } else if (k == OpKind::AllReduceStart) {
    startAllReduce(op);
  } else if (k == OpKind::AllGatherUpdatesStart) {
    startAllGatherUpdates(op);
  } else if (k == OpKind::AllToAllStart) {
    startAllToAll(op);
  } else if (k == OpKind::FetchStart || k == OpKind::CopyStart) {
    startCopy(op);
  } else if (k == OpKind::AdamUpdate) {
    adamUpdate(op);
  } else if (k == OpKind::ClipGradNorm) {
    clipGradNorm(op);
  } else if (k == OpKind::UnscaleGrads) {
    unscale(op);
  } else {
    compute(op);
  }
}

double Executor::Impl::runMicroSteps(const DataLoader &data, int64_t step) {
  const PlanPhase &micro = *plan.findPhase(PhaseKind::MicroStep);
  int64_t lossId = -1;
  for (const PlanOp &op : micro.ops)
    if (op.kind == OpKind::Return && !op.inputs.empty())
      lossId = op.inputs[0];
  // Each micro-step's loss is its counted targets' sum over the global
  // batch's mean count per micro-step; the seed's 1/A and the ranks' mean
  // then make the step's loss and gradient the mean over every counted
  // target of the global batch (docs/data-format.md, "The loss").
  Expected<int64_t> countedOr = data.countedTargets(step);
  if (!countedOr)
    fail(countedOr.error().str());
  int64_t counted = *countedOr;
  if (counted <= 0)
    fail("step " + std::to_string(step + 1) +
         ": every target of the global batch is masked out of the loss "
         "(--loss-mask / --no-cross-doc-loss): nothing to train on");
  lossTokens =
      double(counted) / double(plan.worldSize * plan.gradientAccumulationSteps);
  double lossSum = 0;
  for (int64_t m = 0; m < plan.gradientAccumulationSteps; ++m) {
    runPhase(micro, &data, step, m);
    if (lossId >= 0)
      lossSum += dev->loadElement(value(lossId), 0);
  }
  return lossSum / double(plan.gradientAccumulationSteps);
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

Executor::Executor(Plan plan, Communicator &comm)
    : thePlan(std::move(plan)), comm(comm) {}
Executor::~Executor() = default;

CommTraffic Executor::commTraffic() const {
  CommTraffic t = comm.traffic();
  for (const auto *c :
       {impl->expertParallelComm.get(), impl->expertDataParallelComm.get()})
    if (c)
      t = t.plus(c->traffic());
  return t;
}

int64_t Executor::persistentDeviceBytes() const {
  return persistentBytesPerRank(thePlan).placement(Placement::Device);
}

namespace {
/// The arena both phases share: the larger phase's.
int64_t largestArena(const Plan &plan) {
  int64_t bytes = 0;
  for (const PlanPhase &ph : plan.phases)
    if (ph.memory)
      bytes = std::max(bytes, ph.memory->arenaBytes);
  return bytes;
}

/// The larger phase's transient bytes at its peak (Memory.h).
int64_t largestPhaseTransient(const Plan &plan) {
  int64_t bytes = 0;
  for (const PlanPhase &ph : plan.phases)
    if (ph.memory)
      bytes = std::max(bytes, phaseTransientBytes(ph.memory->arenaBytes,
                                                  ph.memory->peakLiveBytes));
  return bytes;
}
} // namespace

int64_t Executor::predictedPeakBytes() const {
  return zeroc::predictedPeakBytes(persistentDeviceBytes(),
                                   largestPhaseTransient(thePlan));
}

Expected<std::unique_ptr<Executor>>
Executor::create(Plan plan, Communicator &comm,
                 const ExecutorOptions &options) {
  if (plan.worldSize != comm.size())
    return Diagnostic{
        "", 0, 0,
        "PLAN is for " + std::to_string(plan.worldSize) +
            " ranks, but mpirun started " + std::to_string(comm.size()) +
            " (recompile it with --world-size " + std::to_string(comm.size()) +
            " or run mpirun -np " + std::to_string(plan.worldSize) + ")"};
  if (!plan.findPhase(PhaseKind::MicroStep) ||
      !plan.findPhase(PhaseKind::OptimizerStep))
    return Diagnostic{"", 0, 0,
                      "the plan lacks a micro_step or optimizer_step phase"};
  // zeroc plans the 1-bit optimizers for their cost (the communication
  // compressed after freeze_step); zerorun runs neither their compression
  // nor their error feedback.
  if (std::string type = planOptimizerType(plan);
      OptimizerConfig::oneBitType(type))
    return Diagnostic{"", 0, 0,
                      "the plan's optimizer is " + type +
                          "; zerorun does not implement 1-bit compressed "
                          "communication (zeroc plans it for its cost only)"};
  // A plan that needs more host memory than the machine has (a mistaken or
  // hostile one: readPlan lets sizes up to 2^62 bytes through) is refused
  // with its figures before any of it is allocated, instead of failing in
  // the allocator or being killed by the kernel half-way.
  if (uint64_t physical = physicalMemoryBytes()) {
    PersistentBytes bytes = persistentBytesPerRank(plan);
    int64_t host = bytes.placement(Placement::Host);
    int64_t onDevice = bytes.placement(Placement::Device);
    int64_t arena = largestArena(plan);
    int64_t need = options.device ? host : host + onDevice + arena;
    if (uint64_t(need) > physical)
      return Diagnostic{
          "", 0, 0,
          "PLAN needs " + humanBytes(double(need)) +
              " of host memory per rank (" +
              (options.device
                   ? "its host-placed tensors"
                   : "persistent tensors " +
                         humanBytes(double(host + onDevice)) + " + the arena " +
                         humanBytes(double(arena))) +
              "), more than this machine's " + humanBytes(double(physical)) +
              " of physical memory"};
  }
  std::unique_ptr<Executor> ex(new Executor(std::move(plan), comm));
  ex->impl = std::make_unique<Impl>(*ex, comm, options);
  // The loss scale is needed by the first micro-step's backward seed.
  ex->impl->initLossScale();
  // The vocabulary: the cross-entropy's classes (the logits' last
  // dimension unless padded; readPlan checks they agree).
  const PlanPhase &micro = *ex->thePlan.findPhase(PhaseKind::MicroStep);
  for (const PlanOp &op : micro.ops)
    if (op.kind == OpKind::CrossEntropy && !op.inputs.empty())
      if (const PlanValue *logits = micro.findValue(op.inputs[0]);
          logits && !logits->shape.empty())
        ex->vocab =
            op.attrsAs<CrossEntropyAttrs>().classesOf(logits->shape.back());
  if (ex->vocab <= 0)
    return Diagnostic{"", 0, 0,
                      "the plan's micro_step has no cross_entropy op to take "
                      "the vocabulary size from"};
  try {
    Impl &s = *ex->impl;
    using Clock = std::chrono::steady_clock;
    auto seconds = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    auto t0 = Clock::now();
    ex->memory.setDevice(s.dev);
    s.state.allocate();
    ex->arenaSize = largestArena(ex->thePlan);
    s.arena = ex->memory.allocateArena(ex->arenaSize);
    auto t1 = Clock::now();
    if (options.randomInit)
      s.state.initialize(options.seed);
    ex->startup = {seconds(t0, t1), seconds(t1, Clock::now())};
  } catch (const std::exception &e) {
    return Diagnostic{"", 0, 0, e.what()};
  }
  return ex;
}

std::vector<ConstBytes> Executor::tensorData() {
  std::vector<ConstBytes> out;
  for (const MutableBytes &b : impl->state.hostViews(/*changes=*/false))
    out.push_back({b.data, b.size});
  return out;
}

std::vector<MutableBytes> Executor::mutableTensorData() {
  return impl->state.hostViews(/*changes=*/true);
}

NvmeStats Executor::nvmeStats() const {
  NvmeCounters c = impl->state.nvmeCounters();
  return NvmeStats{c.residentBytes, c.bytesRead, c.bytesWritten};
}
std::string Executor::nvmeDirectory() const {
  return impl->state.nvmeDirectory();
}

int64_t Executor::samplesPerStep() const {
  return thePlan.model.microBatch * thePlan.gradientAccumulationSteps *
         comm.size();
}

TrainingState Executor::trainingState(int64_t stepsDone) const {
  const Impl &s = *impl;
  TrainingState st;
  st.step = stepsDone;
  st.lossScale = s.haveLossState ? s.lossState.scale : 1.0;
  st.lossScaleGoodSteps =
      s.haveLossState ? s.lossState.iteration - s.lossState.lastOverflow - 1
                      : 0;
  st.hysteresisLeft = s.haveLossState ? s.lossState.hysteresisLeft : 0;
  st.skippedSteps = stepsDone - s.adamSteps;
  st.dataPosition = uint64_t(stepsDone * samplesPerStep());
  st.extra = nlohmann::json::object(
      {{"adam_steps", s.adamSteps},
       {"loss_scale_iteration", s.lossState.iteration},
       {"loss_scale_last_overflow", s.lossState.lastOverflow}});
  return st;
}

Expected<Done> Executor::restoreTrainingState(const TrainingState &st) {
  Impl &s = *impl;
  auto bad = [](const std::string &m) { return Diagnostic{"", 0, 0, m}; };
  if (st.step < 0 || st.skippedSteps < 0 || st.skippedSteps > st.step)
    return bad("the checkpoint's training state is inconsistent: step " +
               std::to_string(st.step) + ", skipped steps " +
               std::to_string(st.skippedSteps));
  if (st.dataPosition != uint64_t(st.step * samplesPerStep()))
    return bad("the checkpoint's data position " +
               std::to_string(st.dataPosition) + " is not step " +
               std::to_string(st.step) + " x " +
               std::to_string(samplesPerStep()) +
               " samples per step: the global batch differs from this plan's");
  auto counter = [&](const char *key, int64_t dflt) {
    auto it = st.extra.find(key);
    return it != st.extra.end() && it->is_number_integer() ? it->get<int64_t>()
                                                           : dflt;
  };
  int64_t adamSteps = counter("adam_steps", st.step - st.skippedSteps);
  cpu::LossScaleState ls = s.lossState;
  if (s.haveLossState) {
    if (!(st.lossScale > 0))
      return bad("the checkpoint's loss scale " + std::to_string(st.lossScale) +
                 " is not positive");
    ls.scale = st.lossScale;
    ls.iteration = counter("loss_scale_iteration", st.step);
    ls.lastOverflow = counter("loss_scale_last_overflow",
                              ls.iteration - st.lossScaleGoodSteps - 1);
    ls.hysteresisLeft = st.hysteresisLeft;
  }
  s.adamSteps = adamSteps;
  s.lossState = ls;
  return Done{};
}

Expected<double> Executor::runMicroSteps(const DataLoader &data, int64_t step) {
  try {
    impl->state.prepareForStep();
    return impl->runMicroSteps(data, step);
  } catch (const std::exception &e) {
    return Diagnostic{"", 0, 0, e.what()};
  }
}

Expected<StepResult> Executor::runStep(const DataLoader &data, int64_t step) {
  Impl &s = *impl;
  StepResult r;
  r.step = step + 1;
  auto t0 = Clock::now();
  s.scheduler.resetTimes();
  s.overflow = false;
  s.arrivals.beginStep();
  try {
    // Host copies and NVMe tensors left by checkpointing go back.
    s.state.prepareForStep();
    double localMean = s.runMicroSteps(data, step);
    const PlanPhase &opt = *thePlan.findPhase(PhaseKind::OptimizerStep);
    r.lossScale = s.lossState.scale;
    s.runPhase(opt, nullptr, step, 0);
    r.skipped = s.overflow;
    s.finishOptimizerStep();
    auto tw = Clock::now();
    r.loss = comm.size() > 1 ? comm.allReduceScalar(localMean, ScalarOp::Sum,
                                                    OpLabel{-1, "step loss"}) /
                                   double(comm.size())
                             : localMean;
    if (s.arrivals.enabled) {
      r.skew = gatherStepSkew(comm, s.arrivals, s.skewMethod);
      if (s.profiler) {
        const std::deque<CollectiveArrival> &notes = s.arrivals.collectives();
        for (size_t k = 0; k < notes.size(); ++k)
          s.profiler->annotate(notes[k].traceRun, notes[k].op,
                               {{"arrival_wait_s", r.skew->myWait[k]},
                                {"last_rank", r.skew->lastRank[k]}});
      }
    }
    s.scheduler.times.wait += since(tw);
  } catch (const std::exception &e) {
    return Diagnostic{"", 0, 0, e.what()};
  }
  r.computeSeconds = s.scheduler.times.compute;
  r.waitSeconds = s.scheduler.times.wait;
  r.seconds = since(t0);
  r.tokens = thePlan.model.microBatch * thePlan.model.seqLen *
             thePlan.gradientAccumulationSteps * comm.size();
  return r;
}

} // namespace zeroc::runtime
