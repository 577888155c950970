//===- StreamScheduler.h - Runs a phase's ops on the streams ----*- C++ -*-===//
//
// How a phase's ops are issued, each once the ops it depends on have
// completed; the device chooses the strategy (Device::scheduling):
//
//  * A thread per stream (the CPU, whose kernels run on the calling
//    thread): each plan stream's worker runs its ops in program order, so a
//    `*_start` on the gather stream runs its collective while the compute
//    stream computes, and a `wait` blocks its worker until the start is
//    done.
//  * One issuing thread (a GPU): ops are issued in program order from one
//    host thread, each on its plan stream's device stream; a dependency on
//    an op of another stream becomes a device-side wait (an event), so the
//    host never blocks on a stream's progress.
//
// Either way collectives are issued in program order across streams
// (tickets), the same order on every rank, one thread at a time on the
// communicator; the first error of any stream stops every stream.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_STREAMSCHEDULER_H
#define ZEROC_RUNTIME_EXEC_STREAMSCHEDULER_H

#include "exec/PreparedPhase.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace zeroc::runtime {

class Device;
class Profiler;

namespace exec {

/// Where the compute stream's time went in the phase runs since reset.
struct StreamTimes {
  double compute = 0;    ///< Running its ops.
  double wait = 0;       ///< Blocked on other streams and scalar all-reduces.
  double scalarWait = 0; ///< The part of `wait` in scalar all-reduces.
};

class StreamScheduler {
public:
  explicit StreamScheduler(Device &device) : dev(device) {}

  using OpRunner = std::function<void(const PlanOp &)>;
  /// Runs every op of `phase` with `runOp`. Returns once every op has run
  /// or a stream failed (failed(), failure()); the device's work may still
  /// be in flight.
  void run(const PreparedPhase &phase, const OpRunner &runOp);

  /// Records the first error of any stream and wakes every worker.
  void recordFailure(const std::string &message);
  /// Set once a stream failed: what a communicator's wait gives up on.
  const std::atomic<bool> &failedFlag() const { return failed; }
  std::string failure() const;

  /// The right to issue a collective: exclusive use of the communicator
  /// while held; the next collective may go when it is destroyed.
  class Ticket {
  public:
    Ticket() = default;
    Ticket(Ticket &&other)
        : owner(other.owner), access(std::move(other.access)) {
      other.owner = nullptr;
    }
    Ticket &operator=(Ticket &&) = delete;
    ~Ticket();

  private:
    friend class StreamScheduler;
    explicit Ticket(StreamScheduler *owner)
        : owner(owner), access(owner->commAccess) {}
    StreamScheduler *owner = nullptr;
    std::unique_lock<std::mutex> access;
  };
  /// Blocks until every collective before `op`'s has been issued (an empty
  /// ticket for an op that issues none).
  Ticket awaitTicket(const PlanOp &op);
  /// Exclusive use of the communicator outside a ticket (waiting for
  /// collectives completed in stream order).
  std::unique_lock<std::mutex> communicatorAccess() {
    return std::unique_lock<std::mutex>(commAccess);
  }

  StreamTimes times;
  /// Where each op's start (its dependencies done) and end go (zerorun
  /// --profile); null: not recorded.
  Profiler *profiler = nullptr;
  /// With one issuing thread: called before each op is issued, with the op
  /// and its stream, and once after the last with null and -1, before the
  /// stream is bound and the op's dependencies are waited for. What it
  /// issues precedes the op on every stream. May throw (a failure).
  std::function<void(const PlanOp *, int64_t)> beforeIssue;
  void resetTimes() { times = StreamTimes{}; }
  /// Counts `seconds` the calling thread spent in a scalar all-reduce, if
  /// it runs the compute stream.
  void noteScalarWait(double seconds);

private:
  void runStream(int64_t stream, const std::vector<const PlanOp *> &ops,
                 bool computeStream, const OpRunner &runOp);
  void issueInProgramOrder(const OpRunner &runOp);
  void runOne(const PlanOp &op, bool computeStream, bool mayBlock,
              const OpRunner &runOp);
  void awaitDeps(const PlanOp &op, bool mayBlock);
  void markDone(const PlanOp &op);

  Device &dev;
  const PreparedPhase *phase = nullptr;
  mutable std::mutex mutex;
  std::condition_variable progress;
  std::vector<char> done; ///< By op index.
  int64_t issued = 0;     ///< Collectives issued so far.
  /// Held by the thread posting a collective (its ticket) and by one
  /// draining stream-ordered handles: a communicator serves one thread at a
  /// time (MPI's waits on separate handles are the exception).
  std::mutex commAccess;
  std::atomic<bool> failed{false};
  std::string firstFailure;
  std::thread::id computeThread;
};

} // namespace exec
} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_STREAMSCHEDULER_H
