//===- StreamScheduler.cpp - Runs a phase's ops on the plan's streams -----===//

#include "exec/StreamScheduler.h"

#include "exec/Device.h"
#include "exec/ExecError.h"
#include "exec/Profiler.h"

namespace zeroc::runtime::exec {

void StreamScheduler::run(const PreparedPhase &ph, const OpRunner &runOp) {
  phase = &ph;
  {
    std::lock_guard<std::mutex> lock(mutex);
    done.assign(size_t(ph.opCount), 0);
    issued = 0;
    firstFailure.clear();
    failed = false;
  }
  dev.beginPhase(ph.opCount);
  computeThread = std::this_thread::get_id();
  if (ph.streams.empty())
    return;
  if (dev.scheduling() == StreamScheduling::OneIssuingThread) {
    issueInProgramOrder(runOp);
    return;
  }
  // The lowest stream (compute) runs here; every other on its own worker.
  std::vector<std::thread> workers;
  for (auto it = std::next(ph.streams.begin()); it != ph.streams.end(); ++it)
    workers.emplace_back([this, id = it->first, &ops = it->second, &runOp]() {
      runStream(id, ops, false, runOp);
    });
  runStream(ph.streams.front().first, ph.streams.front().second, true, runOp);
  for (std::thread &w : workers)
    w.join();
}

void StreamScheduler::runStream(int64_t stream,
                                const std::vector<const PlanOp *> &ops,
                                bool computeStream, const OpRunner &runOp) {
  try {
    dev.bindStream(stream);
    for (const PlanOp *op : ops)
      runOne(*op, computeStream, /*mayBlock=*/true, runOp);
  } catch (const std::exception &e) {
    recordFailure(e.what());
  }
}

void StreamScheduler::issueInProgramOrder(const OpRunner &runOp) {
  int64_t compute = phase->streams.front().first;
  try {
    for (const PlanOp &op : phase->phase->ops) {
      int64_t stream = phase->streamOf.at(op.index);
      if (beforeIssue)
        beforeIssue(&op, stream);
      dev.bindStream(stream);
      runOne(op, stream == compute, /*mayBlock=*/false, runOp);
    }
    if (beforeIssue)
      beforeIssue(nullptr, -1);
  } catch (const std::exception &e) {
    recordFailure(e.what());
  }
}

void StreamScheduler::runOne(const PlanOp &op, bool computeStream,
                             bool mayBlock, const OpRunner &runOp) {
  auto t0 = Clock::now();
  awaitDeps(op, mayBlock);
  int64_t stream = phase->streamOf.at(op.index);
  for (int64_t d : op.deps)
    if (auto it = phase->streamOf.find(d);
        it != phase->streamOf.end() && it->second != stream)
      dev.waitForOp(d);
  auto t1 = Clock::now();
  double scalarWait = times.scalarWait;
  // On a device clock the op's span is its stream's, between two marks
  // (issued after the waits on the other streams' ops above).
  int64_t slot =
      profiler && profiler->deviceClock() ? profiler->slotFor(op.index) : -1;
  if (slot >= 0)
    dev.markOpStart(slot);
  runOp(op);
  if (slot >= 0) {
    dev.bindStream(stream); // runOp may have bound another.
    dev.markOpEnd(slot);
  }
  dev.opDone(op.index);
  if (profiler && slot < 0) {
    if (profiler->synchronizeOps)
      dev.streamSynchronize();
    profiler->record(op.index, t1, Clock::now());
  }
  markDone(op);
  if (computeStream) {
    double blocked = times.scalarWait - scalarWait;
    times.wait += std::chrono::duration<double>(t1 - t0).count() + blocked;
    times.compute += since(t1) - blocked;
  }
}

void StreamScheduler::awaitDeps(const PlanOp &op, bool mayBlock) {
  std::unique_lock<std::mutex> lock(mutex);
  auto pending = [&]() -> int64_t {
    for (int64_t d : op.deps)
      if (d >= 0 && d < int64_t(done.size()) && !done[size_t(d)])
        return d;
    return -1;
  };
  if (!mayBlock) {
    // Issued in program order: what an op depends on was issued before.
    if (int64_t d = pending(); d >= 0)
      fail("op " + std::to_string(op.index) + " depends on op " +
           std::to_string(d) + ", which comes after it in program order");
    return;
  }
  progress.wait(lock, [&]() { return failed || pending() < 0; });
  if (failed)
    throw ExecError("stopped: another stream failed");
}

void StreamScheduler::markDone(const PlanOp &op) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    done[size_t(op.index)] = 1;
  }
  progress.notify_all();
}

void StreamScheduler::recordFailure(const std::string &message) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failed)
      firstFailure = message;
    failed = true;
  }
  progress.notify_all();
}

std::string StreamScheduler::failure() const {
  std::lock_guard<std::mutex> lock(mutex);
  return firstFailure;
}

StreamScheduler::Ticket StreamScheduler::awaitTicket(const PlanOp &op) {
  auto it = phase->ticketOf.find(op.index);
  if (it == phase->ticketOf.end())
    return Ticket{};
  std::unique_lock<std::mutex> lock(mutex);
  progress.wait(lock, [&]() { return failed || issued == it->second; });
  if (failed)
    throw ExecError("stopped: another stream failed");
  // The communicator next (the previous holder may still be releasing it),
  // without blocking the other streams' progress meanwhile.
  lock.unlock();
  return Ticket(this);
}

StreamScheduler::Ticket::~Ticket() {
  if (!owner)
    return;
  {
    std::lock_guard<std::mutex> lock(owner->mutex);
    ++owner->issued;
  }
  owner->progress.notify_all();
}

void StreamScheduler::noteScalarWait(double seconds) {
  if (std::this_thread::get_id() == computeThread)
    times.scalarWait += seconds;
}

} // namespace zeroc::runtime::exec
