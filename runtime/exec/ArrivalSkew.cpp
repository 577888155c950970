//===- ArrivalSkew.cpp - How long each rank waited for the last to arrive -===//
//
// ArrivalSkew.h. The notes travel in one allReduceScalars per step: a sum
// over a buffer in which each rank fills only its own slots is an
// all-gather, exact (x + 0 is x), and counted as control traffic, not as
// the plan's.
//
//===----------------------------------------------------------------------===//

#include "exec/ArrivalSkew.h"

#include "comm/Communicator.h"

#include <algorithm>
#include <stdexcept>

namespace zeroc::runtime {

namespace {

double steadySeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

CollectiveArrival *ArrivalLog::arrive(PhaseKind phase, int64_t run, int64_t op,
                                      int64_t traceRun) {
  if (!enabled)
    return nullptr;
  entries.push_back({phase, run, op, traceRun, steadySeconds(), -1});
  return &entries.back();
}

void ArrivalLog::done(CollectiveArrival *entry) {
  if (entry)
    entry->completed = steadySeconds();
}

const char *skewMethodName(SkewMethod method) {
  return method == SkewMethod::Arrival ? "arrival" : "wait";
}

StepSkew skewFromLateness(const std::vector<std::vector<double>> &lateness,
                          SkewMethod method, int rank) {
  StepSkew s;
  s.method = method;
  size_t ranks = lateness.size();
  size_t n = ranks ? lateness[0].size() : 0;
  s.collectives = int64_t(n);
  s.waitForLast.assign(ranks, 0);
  s.cost.assign(ranks, 0);
  s.lastAt.assign(ranks, 0);
  s.lastRank.assign(n, 0);
  s.myWait.assign(n, 0);
  for (size_t k = 0; k < n; ++k) {
    // The last to arrive, and the one before it.
    size_t last = 0;
    for (size_t r = 1; r < ranks; ++r)
      if (lateness[r][k] > lateness[last][k])
        last = r;
    double secondLast = -1e300;
    for (size_t r = 0; r < ranks; ++r)
      if (r != last)
        secondLast = std::max(secondLast, lateness[r][k]);
    double end = lateness[last][k];
    for (size_t r = 0; r < ranks; ++r)
      s.waitForLast[r] += end - lateness[r][k];
    if (ranks > 1)
      s.cost[last] += end - secondLast;
    ++s.lastAt[last];
    s.lastRank[k] = int(last);
    if (rank >= 0 && size_t(rank) < ranks)
      s.myWait[k] = end - lateness[size_t(rank)][k];
  }
  for (size_t r = 1; r < ranks; ++r)
    if (s.cost[r] > s.cost[size_t(s.slowestRank)])
      s.slowestRank = int(r);
  return s;
}

StepSkew gatherStepSkew(Communicator &comm, const ArrivalLog &log,
                        SkewMethod method) {
  const std::deque<CollectiveArrival> &mine = log.collectives();
  size_t ranks = size_t(comm.size()), n = mine.size();
  // Per rank, its arrival then its wait for each collective.
  std::vector<double> notes(ranks * n * 2, 0.0);
  double *slot = notes.data() + size_t(comm.rank()) * n * 2;
  for (size_t k = 0; k < n; ++k) {
    slot[k] = mine[k].arrived;
    slot[n + k] = mine[k].completed - mine[k].arrived;
  }
  if (ranks > 1 && !notes.empty()) {
    CommHandle h =
        comm.allReduceScalars(notes.data(), int64_t(notes.size()),
                              ScalarOp::Sum, OpLabel{-1, "arrival skew"});
    comm.wait(h);
  }
  std::vector<std::vector<double>> lateness(ranks, std::vector<double>(n));
  for (size_t r = 0; r < ranks; ++r)
    for (size_t k = 0; k < n; ++k) {
      const double *at = notes.data() + r * n * 2;
      lateness[r][k] = method == SkewMethod::Arrival ? at[k] : -at[n + k];
    }
  return skewFromLateness(lateness, method, comm.rank());
}

void StragglerTally::add(const StepSkew &skew, double stepSeconds) {
  size_t ranks = skew.cost.size();
  if (slowestIn.size() < ranks) {
    slowestIn.resize(ranks, 0);
    costSum.resize(ranks, 0);
  }
  ++counted;
  seconds += stepSeconds;
  ++slowestIn[size_t(skew.slowestRank)];
  for (size_t r = 0; r < ranks; ++r)
    costSum[r] += skew.cost[r];
}

StragglerVerdict StragglerTally::slowest() const {
  StragglerVerdict v;
  if (!counted || slowestIn.empty())
    return v;
  size_t best = 0;
  for (size_t r = 1; r < slowestIn.size(); ++r)
    if (slowestIn[r] > slowestIn[best] ||
        (slowestIn[r] == slowestIn[best] && costSum[r] > costSum[best]))
      best = r;
  v.rank = int(best);
  v.slowestSteps = slowestIn[best];
  v.steps = counted;
  v.costPerStep = costSum[best] / double(counted);
  v.stepSeconds = seconds / double(counted);
  return v;
}

bool StragglerTally::isStraggler(const StragglerVerdict &v) const {
  return v.rank >= 0 && v.steps > 0 &&
         double(v.slowestSteps) > kStragglerStepShare * double(v.steps) &&
         v.costPerStep > kStragglerCostShare * v.stepSeconds;
}

} // namespace zeroc::runtime
