//===- ArrivalSkew.h - How long each rank waited for the last to arrive --*- C++
//-*-===//
//
// zerorun's straggler measurement (docs/zerorun.md, "Stragglers"): every
// rank notes when it posts each collective of a step (its arrival) and when
// the collective completed on its host; once per step one scalar all-reduce
// (a sum, each rank filling only its own slots: an all-gather) gives every
// rank everyone's notes, and each rank computes the same figures from them:
// per collective which rank arrived last and how long each rank waited for
// it; per step which rank cost the others most. On one host the arrival
// times are comparable (one monotonic clock); across hosts each rank's own
// wait (post to completion) stands in for them. CPU device only: on a GPU
// the host's post time is not when the device reaches the collective.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_ARRIVALSKEW_H
#define ZEROC_RUNTIME_EXEC_ARRIVALSKEW_H

#include "zeroc/Plan/Plan.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace zeroc::runtime {

class Communicator;

/// One collective of a step as this rank saw it.
struct CollectiveArrival {
  PhaseKind phase = PhaseKind::MicroStep;
  int64_t run = 0;       ///< The phase's run within the step.
  int64_t op = -1;       ///< The plan op's index.
  int64_t traceRun = -1; ///< The profiler's run index; -1 without one.
  double arrived = 0;    ///< Steady clock seconds: posted.
  double completed = -1; ///< Steady clock seconds: seen complete.
};

/// A step's collectives on this rank, in the order every rank posts them
/// (the scheduler's program-order tickets). `arrive` is called holding the
/// collective's ticket, so calls are serialized and in that order; `done`
/// from any stream's thread (the entry's address is stable).
class ArrivalLog {
public:
  bool enabled = false;
  void beginStep() { entries.clear(); }
  CollectiveArrival *arrive(PhaseKind phase, int64_t run, int64_t op,
                            int64_t traceRun);
  void done(CollectiveArrival *entry);
  const std::deque<CollectiveArrival> &collectives() const { return entries; }

private:
  std::deque<CollectiveArrival> entries;
};

/// How the ranks' notes are compared.
enum class SkewMethod {
  /// The ranks share one host: their arrival times, on one monotonic clock.
  Arrival,
  /// Across hosts: each rank's wait from post to completion; a rank that
  /// waited less arrived later (the collective completes at about the same
  /// time everywhere).
  Wait
};
const char *skewMethodName(SkewMethod method);

/// A step's arrival skew, the same on every rank.
struct StepSkew {
  SkewMethod method = SkewMethod::Arrival;
  int64_t collectives = 0;
  /// Per rank: the seconds it waited for the last rank to arrive, summed
  /// over the step's collectives.
  std::vector<double> waitForLast;
  /// Per rank: what it cost the others, summed over the collectives it
  /// arrived last at: how much later it arrived than the second-to-last
  /// (the wait no other rank caused).
  std::vector<double> cost;
  /// Per rank: the collectives it arrived last at.
  std::vector<int64_t> lastAt;
  int slowestRank = 0; ///< The largest cost (the lowest rank on a tie).
  /// Per collective of this rank (as ArrivalLog::collectives()): the rank
  /// that arrived last and this rank's wait for it.
  std::vector<int> lastRank;
  std::vector<double> myWait;
};

/// The figures from `lateness[r][k]`: when rank r reached collective k, on
/// any scale where later is larger (arrival seconds, or minus the wait).
/// Every row as long; at least one rank. For `rank`'s lastRank / myWait.
StepSkew skewFromLateness(const std::vector<std::vector<double>> &lateness,
                          SkewMethod method, int rank);

/// Every rank's notes through one scalar all-reduce, and the figures.
/// Collective: every rank calls it with as many collectives.
StepSkew gatherStepSkew(Communicator &comm, const ArrivalLog &log,
                        SkewMethod method);

/// Over a run: a rank persistently slower than the others.
struct StragglerVerdict {
  int rank = -1;            ///< -1: none.
  int64_t slowestSteps = 0; ///< Steps it was the slowest rank of.
  int64_t steps = 0;        ///< Steps considered.
  double costPerStep = 0;   ///< Its mean cost over those steps, seconds.
  double stepSeconds = 0;   ///< The mean step time over them.
};

/// The thresholds: slowest in more than half the steps, costing on average
/// more than 5% of the step.
inline constexpr double kStragglerStepShare = 0.5;
inline constexpr double kStragglerCostShare = 0.05;

/// Accumulates the steps' skew (the warm-up step left out by the caller).
class StragglerTally {
public:
  void add(const StepSkew &skew, double stepSeconds);
  int64_t steps() const { return counted; }
  /// The rank slowest in the most steps, with its figures; `rank` -1 when
  /// there were no steps.
  StragglerVerdict slowest() const;
  /// slowest(), if it passes the thresholds.
  bool isStraggler(const StragglerVerdict &v) const;

private:
  int64_t counted = 0;
  double seconds = 0;
  std::vector<int64_t> slowestIn;
  std::vector<double> costSum;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_ARRIVALSKEW_H
