//===- Profiler.h - Every op's start and end, per stream and rank -*- C++
//-*-===//
//
// zerorun --profile: the executor records, for every run of every phase,
// when each op started (its dependencies done) and ended, on the thread of
// its stream. Each op of a run is written by the one thread that runs it,
// into a slot sized before the run starts, so recording takes no lock; the
// scheduler's join at the end of the phase orders those writes before they
// are read. The records become a Chrome trace with the names, processes and
// threads of `zeroc inspect --trace` (zeroc/Plan/PlanTrace.h), gathered to
// rank 0. Host-side times: right for the CPU device, whose kernels run on
// the calling thread; on a GPU they would be issue times (zerorun refuses
// --profile there). docs/zerorun.md.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_PROFILER_H
#define ZEROC_RUNTIME_EXEC_PROFILER_H

#include "zeroc/Plan/Plan.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zeroc::runtime {

class Communicator;
class Device;

class Profiler {
public:
  using Clock = std::chrono::steady_clock;

  /// Times count from `origin` (every rank should take it right after a
  /// barrier, so that their timelines line up).
  explicit Profiler(Clock::time_point origin = Clock::now()) : origin(origin) {}

  /// Times count from `t` from now on (after a barrier, before the first
  /// step); with a device clock (useDeviceClock), the device's origin is
  /// taken too.
  void setOrigin(Clock::time_point t);

  /// Spans from `dev`'s own clock (Device::timesOps: the CUDA device's
  /// events), where the device can: the scheduler brackets each op with
  /// the device's marks (slotFor), and resolveDeviceTimes reads them. A
  /// GPU's copies beside its kernels then show as they overlap. Call
  /// before setOrigin. Only where one thread issues every op
  /// (StreamScheduling::OneIssuingThread); elsewhere host times stay.
  void useDeviceClock(Device &dev);
  bool deviceClock() const { return timer != nullptr; }
  /// The device mark slot of op `index` of the current run (-1 when
  /// outside a run). Called by the thread that issues the op.
  int64_t slotFor(int64_t index);
  /// Waits for the device and reads every marked op's span, in seconds
  /// since the origin; a phase run spans its ops. After each step (the
  /// device's marks are then reused) and before events() or gatherTrace.
  void resolveDeviceTimes();

  /// On a device whose kernels run asynchronously (CUDA), the scheduler
  /// waits for each op's stream before taking its end time, so that a span
  /// is the op's issue and execution rather than its issue alone. This
  /// serialises host and device per stream: spans are exact, overlap
  /// across ops of one stream is lost (zerorun prints so).
  bool synchronizeOps = false;

  /// A run of a phase starts: op slots for `opCount` op indices. Called by
  /// the executor's thread, before any stream runs.
  void beginRun(const PlanPhase &phase, int64_t step, int64_t run,
                int64_t opCount);
  /// Op `index` of the current run ran from `start` to `end`; called by
  /// the thread of its stream.
  void record(int64_t index, Clock::time_point start, Clock::time_point end);
  /// The current run ended (after its streams joined).
  void endRun();
  /// The index in runs() of the current run; -1 between runs.
  int64_t currentRun() const {
    return current ? int64_t(current - recorded.data()) : -1;
  }
  /// Adds `args` to the event of op `index` of run `run` (zerorun's arrival
  /// skew: exec/ArrivalSkew.h).
  void annotate(int64_t run, int64_t index, const nlohmann::json &args);
  /// A global instant event at the end of optimizer step `step` (0-based),
  /// written with rank 0's events: what zerorun found about the step.
  void markStep(int64_t step, std::string name, nlohmann::json args);

  struct OpSpan {
    double start = -1, end = -1; ///< Seconds since the origin; -1: not run.
  };
  struct Run {
    PhaseKind phase = PhaseKind::MicroStep;
    int64_t step = 0; ///< 0-based optimizer step.
    int64_t run = 0;  ///< The phase's run within the step.
    double start = 0, end = 0;
    std::vector<OpSpan> ops; ///< By op index.
    /// Extra args of some ops' events (annotate), by op index.
    std::map<int64_t, nlohmann::json> extra;
    /// With a device clock: each op's mark slot (-1: not marked), until
    /// resolved.
    std::vector<int64_t> slots;
  };
  const std::vector<Run> &runs() const { return recorded; }

  /// This rank's trace events: an "M" event naming each of its phase
  /// processes and stream threads, an "X" event per op run (args: the op's
  /// traceEventArgs, plus "rank", "phase", "step", "run") and per phase run
  /// (thread -1, "phase_run").
  nlohmann::json events(const Plan &plan, int64_t rank) const;

  /// Every rank's events gathered to rank 0, as one Chrome trace with the
  /// plan's fingerprint in "otherData"; null on the other ranks. Collective
  /// over `comm`.
  nlohmann::json gatherTrace(const Plan &plan, Communicator &comm,
                             const std::string &device) const;

private:
  double seconds(Clock::time_point t) const {
    return std::chrono::duration<double>(t - origin).count();
  }
  struct StepMark {
    int64_t step = 0;
    double at = 0;
    std::string name;
    nlohmann::json args;
  };
  Clock::time_point origin;
  Device *timer = nullptr;
  /// The device clock's origin, in seconds since `origin`.
  double deviceOrigin = 0;
  int64_t nextSlot = 0;
  std::vector<Run> recorded;
  std::vector<StepMark> marks;
  Run *current = nullptr;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_PROFILER_H
