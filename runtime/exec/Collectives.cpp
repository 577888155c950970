//===- Collectives.cpp - Gathers, reductions and their epilogues ----------===//
//
// The collectives of a plan (parameter gathers, gradient reduce-scatters
// and all-reduces, the gathers of updated parameters after the optimizer
// step, the scalar all-reduces of norms and overflow flags), each taking
// its turn in the program-order issue of collectives (StreamScheduler's
// tickets), with the epilogue that puts what arrived in place: the padding
// dropped from a gathered parameter, the owned part of a reduced gradient
// accumulated into its shard or partition. Where the device orders
// collectives on its streams (a GPU), an epilogue is issued right after its
// collective; otherwise it runs once the host saw the collective complete.
//
//===----------------------------------------------------------------------===//

#include "exec/ExecutorImpl.h"

#include "zeroc/Support/ShardLayout.h"
#include "zeroc/Support/Workspace.h"

namespace zeroc::runtime {

using namespace exec;

//===----------------------------------------------------------------------===//
// Completion
//===----------------------------------------------------------------------===//

void Executor::Impl::complete(Pending &p, bool hostWait) {
  if (!hostWait && dev->streamOrderedCollectives()) {
    // The epilogue follows the collective on this stream.
    for (auto &f : p.after)
      f();
    std::lock_guard<std::mutex> lock(inflightMutex);
    for (CommHandle &h : p.handles)
      inflight.push_back(std::move(h));
    for (auto &buf : p.scratch)
      inflightScratch.push_back(std::move(buf));
    return;
  }
  Communicator &via = p.via ? *p.via : comm;
  // This rank is about to fail the job and an MPI collective cannot be
  // cancelled: leave the op's collectives, their buffers alive, and run no
  // epilogue at unwinding into buffers released first.
  auto leave = [&p] {
    for (CommHandle &left : p.handles)
      left.abandon();
    for (auto &buf : p.scratch)
      new std::shared_ptr<char>(buf); // Keeps its buffer alive.
  };
  bool completed = false;
  try {
    completed = via.waitAll(p.handles, scheduler.failedFlag());
  } catch (...) {
    leave(); // A collective failed: an MPI error, a timeout handler's.
    throw;
  }
  if (!completed) {
    leave();
    throw ExecError("stopped: another stream failed");
  }
  for (auto &f : p.after)
    f();
}

void Executor::Impl::drainInflight() {
  std::unique_lock<std::mutex> access = scheduler.communicatorAccess();
  std::vector<CommHandle *> pending;
  {
    std::lock_guard<std::mutex> lock(inflightMutex);
    for (CommHandle &h : inflight)
      if (h.pending())
        pending.push_back(&h);
  }
  // Handles are only appended (a deque keeps their addresses).
  for (CommHandle *h : pending)
    if (!comm.wait(*h, scheduler.failedFlag()))
      throw ExecError("stopped: another stream failed");
}

double Executor::Impl::allReduceScalar(const PlanOp &op, double value,
                                       ScalarOp kind) {
  if (ws == 1)
    return value;
  auto t0 = Clock::now();
  Pending p;
  {
    // Held through the wait: the communicator serves one thread at a time.
    StreamScheduler::Ticket t = scheduler.awaitTicket(op);
    dev->useStreamFor(comm);
    CollectiveArrival *arrival = arrive(op);
    p.handles.push_back(comm.allReduceScalars(&value, 1, kind, label(op)));
    complete(p, /*hostWait=*/true);
    arrivals.done(arrival);
  }
  scheduler.noteScalarWait(since(t0));
  return value;
}

void Executor::Impl::allReduceScalars(const PlanOp &op,
                                      std::vector<double> &values,
                                      ScalarOp kind, CommGroupKind group) {
  Communicator &c = groupComm(group);
  if (c.size() == 1) {
    scheduler.awaitTicket(op); // Its turn in the collective order.
    return;
  }
  auto t0 = Clock::now();
  Pending p;
  p.via = &c;
  {
    StreamScheduler::Ticket t = scheduler.awaitTicket(op);
    dev->useStreamFor(c);
    CollectiveArrival *arrival = arrive(op);
    p.handles.push_back(c.allReduceScalars(
        values.data(), int64_t(values.size()), kind, label(op)));
    complete(p, /*hostWait=*/true);
    arrivals.done(arrival);
  }
  scheduler.noteScalarWait(since(t0));
}

void Executor::Impl::scaleExpertGradient(const PlanOp &op,
                                         const Tensor &reduced) {
  if (op.group != CommGroupKind::ExpertDataParallel ||
      plan.expertParallelSize <= 1 || reduced.numel() == 0)
    return;
  check(dev->scaleAll({reduced}, float(1.0 / double(plan.expertParallelSize))),
        op);
}

void Executor::Impl::finishCollectives() {
  // Collectives completed in stream order: waited for with their deadlines
  // first, so a rank that skipped one times out instead of hanging in a
  // device synchronization.
  if (!scheduler.failedFlag()) {
    try {
      drainInflight();
      dev->synchronize();
    } catch (const std::exception &e) {
      scheduler.recordFailure(e.what());
    }
  }
  if (scheduler.failedFlag())
    for (CommHandle &h : inflight)
      h.abandon();
  inflight.clear();
  inflightScratch.clear();
}

//===----------------------------------------------------------------------===//
// Gathers and reductions
//===----------------------------------------------------------------------===//

void Executor::Impl::startAllGather(const PlanOp &op) {
  // Stage 3: each input is this rank's shard of a parameter; the matching
  // wait's outputs are the gathered (unpadded) parameters, whose buffers the
  // plan sizes for the padded gather (sched::bufferBytes).
  auto w = phase->waitOf.find(op.index);
  if (w == phase->waitOf.end())
    fail("op " + std::to_string(op.index) + " has no wait");
  const PlanOp &wait = *w->second;
  if (wait.outputs.size() != op.inputs.size())
    fail("op " + std::to_string(op.index) + ": gathers " +
         std::to_string(op.inputs.size()) + " shards, but its wait yields " +
         std::to_string(wait.outputs.size()) + " values");
  Communicator &c = groupComm(op.group);
  int64_t n = c.size();
  Pending p;
  p.via = &c;
  CollectiveArrival *arrival = nullptr;
  {
    StreamScheduler::Ticket t = scheduler.awaitTicket(op);
    dev->useStreamFor(c);
    arrival = arrive(op);
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      Tensor shard = value(op.inputs[i]);
      Tensor full = value(wait.outputs[i]);
      int64_t s = shard.numel();
      int64_t paddedBytes = s * n * bytesPerElement(full.dtype);
      if (s * n == full.numel() ||
          phase->valueInfo.at(wait.outputs[i])->bytes >= paddedBytes) {
        p.handles.push_back(
            c.allGather(shard.data, s, full.data, full.dtype, label(op)));
        continue;
      }
      // A plan that did not size the buffer for the padding.
      p.scratch.push_back(ex.memory.allocate(paddedBytes, true, 64,
                                             MemoryUse::UnplannedWorkspace));
      Tensor padded{p.scratch.back().get(), full.dtype, {s * n}};
      p.handles.push_back(
          c.allGather(shard.data, s, padded.data, full.dtype, label(op)));
      p.after.push_back([this, &op, padded, full]() {
        check(dev->copyElements(padded, 0, full, 0, full.numel()), op);
      });
    }
  }
  complete(p);
  arrivals.done(arrival);
}

void Executor::Impl::startReduceScatter(const PlanOp &op) {
  const std::vector<std::string> &targets =
      op.attrsAs<ReduceScatterAttrs>().targets;
  const std::vector<int64_t> &offsets =
      op.attrsAs<ReduceScatterAttrs>().offsets;
  if (targets.size() != op.inputs.size() || offsets.size() != op.inputs.size())
    fail("op " + std::to_string(op.index) +
         ": reduce_scatter needs one target and offset per input");
  // Every input moves over the op's group (the plan reader holds expert
  // and other state apart): its ranks and this rank's place among them.
  Communicator &c = groupComm(op.group);
  int64_t gr = c.rank(), gn = c.size();
  // The workspace's parts, laid out as zero-plan-memory sized them: the
  // flat-group inputs' shares first, then the parameters' (packed where
  // there are several).
  std::vector<FlatShare> shares;
  std::vector<size_t> flatInputs, paramInputs;
  std::vector<ParamGradient> paramGrads;
  int64_t flatElementBytes = 0;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    Tensor g = value(op.inputs[i]);
    const PlanTensor &t = *tensor(targets[i]).info;
    if (const PlanFlatGroup *grp = state.groupOf(t)) {
      shares.push_back(
          {&state.layout(*grp), {offsets[i], offsets[i] + g.numel()}});
      flatInputs.push_back(i);
      if (!flatElementBytes)
        flatElementBytes = bytesPerElement(g.dtype);
      else if (flatElementBytes != bytesPerElement(g.dtype))
        fail("op " + std::to_string(op.index) +
             ": reduce_scatter of flat-group gradients of different dtypes");
      continue;
    }
    // Stage 3: the gradient of a whole parameter into its shard.
    if (!t.sharded)
      fail("op " + std::to_string(op.index) + ": reduce_scatter into " +
           t.name + ", which is neither sharded nor in a flat group");
    if (offsets[i] != 0 || g.numel() != t.numel)
      fail("op " + std::to_string(op.index) + ": reduce_scatter of " +
           std::to_string(g.numel()) + " elements at offset " +
           std::to_string(offsets[i]) + " into " + t.name + " of " +
           std::to_string(t.numel));
    paramInputs.push_back(i);
    paramGrads.push_back(
        {ParamShardLayout{t.numel, gn}, bytesPerElement(g.dtype)});
  }
  WorkspaceLayout layout;
  std::vector<FlatUnit> flat =
      reduceScatterFlatParts(layout, shares, flatElementBytes, gr);
  ParamReduceScatterParts params = reduceScatterParamParts(layout, paramGrads);
  Pending p;
  p.via = &c;
  char *scratch = workspace(op, layout.size(), p.scratch);
  StreamScheduler::Ticket ticket = scheduler.awaitTicket(op);
  dev->useStreamFor(c);
  CollectiveArrival *arrival = arrive(op);
  for (const FlatUnit &u : flat) {
    size_t first = flatInputs[u.inputs.front()];
    Tensor g = value(op.inputs[first]);
    Stored &target = tensor(targets[first]);
    const FlatGroupLayout &l = state.layout(*state.groupOf(*target.info));
    Tensor dst = target.view();
    const void *send = g.data;
    if (u.send >= 0) {
      // A run of small gradients tiling u.range: each to its place in the
      // staging range, then one collective (Workspace.h).
      char *staging = scratch + u.send;
      for (size_t k : u.inputs) {
        size_t i = flatInputs[k];
        if (targets[i] != targets[first])
          fail("op " + std::to_string(op.index) + ": reduce_scatter into " +
               targets[i] + " and " + targets[first] +
               ", two targets of one flat group");
        Tensor part = value(op.inputs[i]);
        dev->copy(staging + (offsets[i] - u.range.begin) * flatElementBytes,
                  part.data, part.numel() * flatElementBytes);
      }
      send = staging;
    }
    std::vector<int64_t> counts = l.receiveCounts(u.range);
    ElementRange mine = u.range.intersect(l.partition(gr));
    int64_t recvN = counts[size_t(gr)];
    char *recvBuf;
    if (u.recv < 0) {
      // One rank (the layout's group is the communicator's: readPlan checks
      // each collective's group): the sum (and the average) of one
      // contribution is the contribution, a unit of one input sent as it
      // is; the epilogue reads the gradient itself. (Through the
      // communicator it was a copy and a pass dividing by one: stage 2's
      // reduce-scatter at one rank took 1.27x its priced time,
      // bench/RESULTS.md, run 34.)
      recvBuf = static_cast<char *>(g.data);
    } else {
      recvBuf = scratch + u.recv;
      p.handles.push_back(
          c.reduceScatter(send, counts, recvBuf, g.dtype, true, label(op)));
    }
    Tensor recv{recvBuf, g.dtype, {recvN}};
    if (target.info->sharded) {
      // Stage 2: accumulate the owned part into the gradient partition.
      int64_t at = mine.begin - l.partition(gr).begin;
      p.after.push_back([this, &op, recv, dst, at, recvN]() {
        if (recvN > 0) {
          scaleExpertGradient(op, recv);
          check(dev->accumulate(slice(dst, at, recvN), recv), op);
        }
      });
    } else {
      // Stage 1: in place on the replicated flat buffer; keep the owned
      // partition.
      int64_t at = mine.begin;
      if (recv.data == slice(dst, at, recvN).data) {
        // One rank, reduced in place: already there (an expert gradient
        // still takes its 1 / ep).
        p.after.push_back([this, &op, recv]() {
          if (recv.numel() > 0)
            scaleExpertGradient(op, recv);
        });
        continue;
      }
      p.after.push_back([this, &op, recv, dst, at, recvN]() {
        if (recvN > 0) {
          scaleExpertGradient(op, recv);
          check(dev->copyElements(recv, 0, dst, at, recvN), op);
        }
      });
    }
  }
  if (params.packed()) {
    // The small gradients packed into one collective (Workspace.h).
    std::vector<const void *> grads;
    for (size_t i : paramInputs)
      grads.push_back(value(op.inputs[i]).data);
    packParamGradients(*dev, scratch + params.send, params, paramGrads, grads);
    DType dt = value(op.inputs[paramInputs.front()]).dtype;
    p.handles.push_back(
        c.reduceScatter(scratch + params.send,
                        std::vector<int64_t>(size_t(gn), params.blockElements),
                        scratch + params.recv, dt, true, label(op)));
  }
  for (size_t k = 0; k < paramInputs.size(); ++k) {
    size_t i = paramInputs[k];
    Tensor g = value(op.inputs[i]);
    Tensor dst = tensor(targets[i]).view();
    int64_t s = paramGrads[k].layout.shardSize(), n = g.numel();
    int64_t esize = paramGrads[k].elementBytes;
    // One rank (recv -1): the gradient itself, as for flat units.
    bool oneRank = params.parts[k].recv < 0;
    char *recvBuf =
        oneRank ? static_cast<char *>(g.data) : scratch + params.parts[k].recv;
    if (!oneRank && params.slots[k] < 0) {
      // Alone.
      const void *send = g.data;
      if (params.parts[k].send >= 0) {
        // Padded with zeros to shard x world size.
        char *padded = scratch + params.parts[k].send;
        dev->copy(padded, g.data, n * esize);
        dev->zero(padded + n * esize, (s * gn - n) * esize);
        send = padded;
      }
      p.handles.push_back(c.reduceScatter(send,
                                          std::vector<int64_t>(size_t(gn), s),
                                          recvBuf, g.dtype, true, label(op)));
    }
    Tensor recv{recvBuf, g.dtype, {s}};
    p.after.push_back([this, &op, recv, dst]() {
      scaleExpertGradient(op, recv);
      check(dev->accumulate(dst, recv), op);
    });
  }
  { StreamScheduler::Ticket issuedAll = std::move(ticket); }
  complete(p);
  arrivals.done(arrival);
}

void Executor::Impl::startAllReduce(const PlanOp &op) {
  if (!op.inputs.empty())
    fail("op " + std::to_string(op.index) +
         ": all_reduce of transient values (reduce_scatter: false) is not "
         "supported yet");
  const std::vector<std::string> &names = op.attrsAs<TensorListAttrs>().tensors;
  Communicator &c = groupComm(op.group);
  Pending p;
  p.via = &c;
  CollectiveArrival *arrival = nullptr;
  {
    StreamScheduler::Ticket t = scheduler.awaitTicket(op);
    dev->useStreamFor(c);
    arrival = arrive(op);
    for (const std::string &name : names) {
      Stored &s = tensor(name);
      // The sum and average of one rank's tensor is the tensor.
      if (c.size() > 1)
        p.handles.push_back(c.allReduce(s.data.get(), s.info->localNumel,
                                        s.info->dtype, true, label(op)));
      p.after.push_back(
          [this, &op, &s]() { scaleExpertGradient(op, s.view()); });
    }
  }
  complete(p);
  arrivals.done(arrival);
}

void Executor::Impl::startAllGatherUpdates(const PlanOp &op) {
  const std::vector<std::string> &targets =
      op.attrsAs<TargetListAttrs>().targets;
  // Every rank skips it alike after an fp16 overflow (nothing changed), but
  // still takes its turn in the collective order.
  StreamScheduler::Ticket ticket = scheduler.awaitTicket(op);
  if (overflow)
    return;
  Communicator &c = groupComm(op.group);
  int64_t gr = c.rank(), gn = c.size();
  dev->useStreamFor(c);
  CollectiveArrival *arrival = arrive(op);
  WorkspaceLayout layout;
  std::vector<int64_t> at(targets.size(), -1);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (state.group(targets[i])) {
      at[i] = -2; // In place: no workspace.
    } else if (const PlanTensor &t = *tensor(targets[i]).info; !t.sharded) {
      at[i] = gatherUpdatesParamPart(layout, ParamShardLayout{t.numel, gn},
                                     bytesPerElement(t.dtype));
    }
  }
  Pending p;
  p.via = &c;
  char *scratch = workspace(op, layout.size(), p.scratch);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (at[i] == -1)
      continue; // A sharded parameter is gathered when used.
    if (const PlanFlatGroup *g = state.group(targets[i])) {
      // In place in the flat buffer: every rank sends its partition.
      const FlatGroupLayout &l = state.layout(*g);
      Tensor flat = state.flatView(*g);
      int64_t P = l.partitionSize();
      char *base = static_cast<char *>(flat.data);
      p.handles.push_back(
          c.allGather(base + gr * P * bytesPerElement(flat.dtype), P, base,
                      flat.dtype, label(op)));
    } else {
      char *buf = scratch + at[i];
      Stored &s = tensor(targets[i]);
      const PlanTensor &t = *s.info;
      ParamShardLayout l{t.numel, gn};
      int64_t sz = l.shardSize();
      int64_t es = bytesPerElement(t.dtype);
      ElementRange own = l.ownedBy(gr);
      dev->copy(buf + gr * sz * es, s.data.get() + own.begin * es,
                own.size() * es);
      p.handles.push_back(
          c.allGather(buf + gr * sz * es, sz, buf, t.dtype, label(op)));
      char *dst = s.data.get();
      int64_t bytes = t.numel * es;
      p.after.push_back(
          [this, dst, buf, bytes]() { dev->copy(dst, buf, bytes); });
    }
  }
  { StreamScheduler::Ticket issuedAll = std::move(ticket); }
  complete(p);
  arrivals.done(arrival);
}

} // namespace zeroc::runtime
