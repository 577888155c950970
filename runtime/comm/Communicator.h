//===- Communicator.h - The runtime's collectives ---------------*- C++ -*-===//
//
// What the executor calls to run a plan's collectives: asynchronous
// all-gather, reduce-scatter (variable counts), all-reduce, broadcast and
// barrier on f32 / bf16 / f16 buffers, each returning a handle that `wait`
// completes before a deadline, plus a scalar all-reduce for gradient norms
// and overflow flags. Three backends: LocalCommunicator (one rank, no MPI),
// MpiCommunicator (MpiCommunicator.h) and, on GPUs, NcclCommunicator
// (NcclCommunicator.h).
//
// Semantics every backend keeps:
//  * Averaging is DeepSpeed's: the sum over ranks divided by the world size,
//    computed in f32 even for 16-bit buffers (one rounding, at the end).
//  * All ranks start the collectives of one communicator in the same order.
//    The plan guarantees that per stream, not across streams: a gather on
//    stream 1 and a reduce-scatter on stream 2 may be started in either order
//    on different ranks. On one shared communicator such a pair would match
//    the wrong partner or deadlock (NCCL has the same rule), and MPI forbids
//    two threads posting collectives on one communicator at once. So the
//    executor posts every collective of a phase in program order, whichever
//    stream's thread runs it, one at a time (exec/StreamScheduler.h):
//    the same order on every rank. (`duplicate()` gives a communicator per
//    stream instead, for an executor whose streams order themselves.)
//  * A communicator is used by one thread at a time, except that with MPI
//    (MPI_THREAD_MULTIPLE) different threads may wait for different
//    handles while another posts.
//  * A collective that does not complete by its deadline (by default its
//    start plus `timeout()`, from --comm-timeout, 30 minutes like NCCL's)
//    prints one line naming the rank, the plan op and the collective, and
//    aborts every rank: a rank that skipped or reordered a collective would
//    otherwise hang the job silently.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_COMM_COMMUNICATOR_H
#define ZEROC_RUNTIME_COMM_COMMUNICATOR_H

#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/DType.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/ShardLayout.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace zeroc::runtime {

using CommClock = std::chrono::steady_clock;
using CommDeadline = CommClock::time_point;
using CommDuration = std::chrono::duration<double>; ///< Seconds.

/// NCCL's default (TORCH_NCCL_TIMEOUT / DeepSpeed's dist timeout).
inline const CommDuration kDefaultCommTimeout{30.0 * 60.0};
/// Exit status of every rank after a collective timed out (as timeout(1)).
inline constexpr int kCommTimeoutExitCode = 124;
/// Exit status of a rank that stopped because another rank failed.
inline constexpr int kPeerFailedExitCode = 1;
/// How long a failing rank waits for the other ranks to receive its
/// announced failure before it ends the job (announceFailure).
inline const CommDuration kFailureAnnounceGrace{10.0};

/// Parses --comm-timeout: seconds ("1800", "0.5"), or a number with a unit
/// ("500ms", "90s", "30m", "30min", "2h"). Must be positive.
Expected<CommDuration> parseCommTimeout(std::string_view text);
/// "0.25 s", "90 s", "30 min", "2 h": for messages.
std::string formatDuration(CommDuration d);

/// Which plan op started a collective, for the timeout message.
struct OpLabel {
  int64_t opIndex = -1;    ///< The op's `index` in its phase; -1 if none.
  std::string description; ///< E.g. "micro_step, stream gather: h.3.attn".
};

enum class ScalarOp { Sum, Max };

/// Thrown by `wait` when a custom timeout handler returns (the default one
/// aborts every rank instead). The collective is still pending: the handle
/// may be waited for again.
class CommTimeoutError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Thrown by `wait` when another rank announced its failure
/// (Communicator::announceFailure) and a custom timeout handler returned.
class CommPeerFailedError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class Communicator;

/// What a communicator's collectives moved: per kind, the collectives
/// started, their elements (the whole buffer: an all-gather's output, a
/// reduce-scatter's input, an all-reduce's buffer) and the elements and
/// bytes each rank sends by the plan's accounting,
/// commElementsPerRank(kind, elements, size()) (zeroc/Support/Collectives.h:
/// (n-1)/n of the elements for all-gather and reduce-scatter, twice that
/// for all-reduce). The scalar all-reduces of norms, overflow flags and
/// logs, broadcasts and barriers are control traffic, which the plan does
/// not count: kept apart (docs/zerorun.md, "Traffic").
struct CommTraffic {
  struct Volume {
    int64_t collectives = 0;
    int64_t elements = 0;
    double elementsPerRank = 0;
    double bytesPerRank = 0;
  };
  /// By CollectiveKind (all-to-all: `elements` is what this rank sent in
  /// all, `elementsPerRank` what left it for other ranks).
  std::array<Volume, 4> byKind{};
  /// allReduceScalars: `elements` doubles; broadcast: `elements` of the
  /// root's buffer; barrier: collectives only.
  Volume scalarAllReduce, broadcast, barrier;

  const Volume &operator[](CollectiveKind kind) const {
    return byKind[size_t(kind)];
  }
  /// The sum over the kinds.
  Volume total() const;
  /// `this` minus `earlier` (what was moved in between).
  CommTraffic since(const CommTraffic &earlier) const;
  /// `this` and `other` together (several communicators' traffic).
  CommTraffic plus(const CommTraffic &other) const;
};

/// A started collective, backend-specific. Internal to the backends.
class PendingCollective {
public:
  virtual ~PendingCollective() = default;
  /// Makes progress; true once complete, after the result is in place
  /// (16-bit conversion and averaging included). Called until true.
  virtual bool test() = 0;
  /// Makes progress; true once the collective's data is in, though the
  /// epilogue test() runs (widening, averaging, copying out) may be left.
  /// Called until true, then test() finishes. By default test() itself,
  /// its answer kept (a backend with no epilogue of its own).
  virtual bool arrived() { return finished || (finished = test()); }
  /// test() returned true (through arrived()): nothing is left.
  bool finished = false;

  Communicator *owner = nullptr;
  std::string collective; ///< "all_gather", "reduce_scatter", ...
  OpLabel label;
  CommDeadline started;
};

/// The result of starting a collective. Move-only. Wait for it with the
/// communicator that started it, which must outlive it. A handle destroyed
/// before completion is waited for (an MPI collective cannot be abandoned);
/// its buffers must stay valid until then.
class CommHandle {
public:
  CommHandle() = default;
  explicit CommHandle(std::unique_ptr<PendingCollective> state)
      : state(std::move(state)) {}
  CommHandle(CommHandle &&) = default;
  CommHandle &operator=(CommHandle &&other);
  CommHandle(const CommHandle &) = delete;
  CommHandle &operator=(const CommHandle &) = delete;
  ~CommHandle();

  /// True until the collective has been waited for (or tested) to completion.
  bool pending() const { return state != nullptr; }
  /// When the collective was started.
  CommDeadline started() const;
  /// Forgets a pending collective without waiting (its state is leaked, its
  /// buffers must stay valid): only for a process that is about to abort
  /// every rank after another of its threads failed.
  void abandon() { (void)state.release(); }

private:
  friend class Communicator;
  std::unique_ptr<PendingCollective> state;
};

class Communicator {
public:
  /// Called with the one-line message when a collective times out. The
  /// default prints it to stderr and aborts every rank; a handler that
  /// returns makes `wait` throw CommTimeoutError (for tests).
  using TimeoutHandler = std::function<void(const std::string &message)>;

  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "local".
  virtual std::string_view backend() const = 0;

  /// Rank r's `sendCount` elements land at recv[r * sendCount]. `send` may
  /// alias that slot of `recv` (in place). Any dtype (bits are copied).
  CommHandle allGather(const void *send, int64_t sendCount, void *recv,
                       DType dtype, OpLabel label);

  /// Expert parallelism's token exchange (MPI_Alltoallv): rank r receives
  /// the sendCounts[r] elements that follow sendCounts[0..r) in `send`, and
  /// this rank's `recv` holds, in rank order, the recvCounts[s] elements
  /// rank s sent it. One count per rank each, none negative, and
  /// recvCounts[s] here must equal rank s's sendCounts[rank()] (the router
  /// decides them: each rank learns its counts before the exchange). `send`
  /// and `recv` must not overlap. Any dtype (bits are copied).
  CommHandle allToAllV(const void *send, const std::vector<int64_t> &sendCounts,
                       void *recv, const std::vector<int64_t> &recvCounts,
                       DType dtype, OpLabel label);

  /// An all-to-all of HOST i32s on every backend: `perRank` to each rank
  /// (rank r's block at send[r * perRank]) and from each (rank s's at
  /// recv[s * perRank]). For the small exchanges whose result the host
  /// reads next (exchangeExpertCounts); a backend whose collectives move
  /// device memory stages them, and writes `recv` when the handle
  /// completes. Counted as allToAllV counts its traffic.
  CommHandle allToAllHost(const int32_t *send, int32_t *recv, int64_t perRank,
                          OpLabel label);

  /// `send` holds sum(recvCounts) elements: the block of rank r (its
  /// recvCounts[r] elements, in rank order) is reduced over all ranks into
  /// this rank's `recv`. Counts may differ and be zero (a bucket of a flat
  /// group: `FlatGroupLayout::receiveCounts`). Sum, or sum / size() when
  /// `average`. f32, bf16 or f16; 16-bit inputs are summed in f32 and rounded
  /// once.
  CommHandle reduceScatter(const void *send,
                           const std::vector<int64_t> &recvCounts, void *recv,
                           DType dtype, bool average, OpLabel label);

  /// In place over `count` elements; same arithmetic as reduceScatter.
  CommHandle allReduce(void *buf, int64_t count, DType dtype, bool average,
                       OpLabel label);

  /// `root`'s `count` elements to every rank. Any dtype.
  CommHandle broadcast(void *buf, int64_t count, DType dtype, int root,
                       OpLabel label);

  CommHandle barrier(OpLabel label);

  /// In place over `count` doubles: global gradient-norm sums, overflow
  /// flags (Max). Doubles, so a norm's square sum does not lose digits.
  CommHandle allReduceScalars(double *values, int64_t count, ScalarOp op,
                              OpLabel label);

  /// What this communicator's collectives moved so far (started ones).
  CommTraffic traffic() const;

  /// Collectives started from now on are ordered on `stream`, a device
  /// stream of this backend (a cudaStream_t for NCCL): they start after the
  /// work already on it, and work enqueued on it later runs after them.
  /// Backends that run collectives on the host ignore it.
  virtual void useStream(void *stream) { (void)stream; }

  /// Blocking convenience for one scalar; waits with the default deadline.
  double allReduceScalar(double value, ScalarOp op, OpLabel label);

  /// A new communicator over the same ranks with its own matching space:
  /// one per stream.
  virtual std::unique_ptr<Communicator> duplicate() const = 0;
  /// The ranks with the same `color` form a new communicator, ordered by
  /// `key` (then by rank). A negative color joins none: returns null.
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;

  /// True when complete (the result is in place); never blocks.
  bool test(CommHandle &handle);
  /// Polls until complete. Past `deadline`, reports the timeout (above).
  void wait(CommHandle &handle, CommDeadline deadline);
  /// Deadline = the collective's start + timeout().
  void wait(CommHandle &handle);
  /// As wait(handle), but gives up and returns false once `cancel` is set
  /// (another stream of this rank failed; the caller then abandons the
  /// handle and aborts). True when the collective completed.
  bool wait(CommHandle &handle, const std::atomic<bool> &cancel);
  /// Waits for every handle of `handles` (those of one op), each up to its
  /// start + timeout(): first until each one's data is in, then each one's
  /// epilogue. An epilogue run as soon as its own collective completes
  /// (MPI: averaging a gradient) holds up the others, whose progress is
  /// this thread's polls (tiny GPT-2's 36 averaged all-reduces in a plain
  /// MPI program: 30-100 us; bench/RESULTS.md, runs 44 and 45). False, as
  /// wait(), once `cancel` is set.
  bool waitAll(std::vector<CommHandle> &handles,
               const std::atomic<bool> &cancel);

  /// A rank that fails on its own (an error no other rank sees, such as
  /// a truncated NVMe swap file of its own) calls this before it aborts the
  /// job: every other rank receives `message` in the wait of its next
  /// collective (which the failing rank will never start), prints one line
  /// naming the failing rank and the message, and ends (the timeout handler
  /// is called with the line, as for a timeout). Returns once each other
  /// rank received it or after `grace`. Ranks that fail at the same time
  /// receive each other's. The one-rank backend has nobody to tell.
  virtual void announceFailure(const std::string &message,
                               CommDuration grace = kFailureAnnounceGrace) {
    (void)message;
    (void)grace;
  }
  /// "rank R failed: MESSAGE" once another rank announced a failure, else
  /// empty. Never blocks.
  virtual std::optional<std::string> peerFailure() { return std::nullopt; }

  CommDuration timeout() const { return commTimeout; }
  void setTimeout(CommDuration timeout) { commTimeout = timeout; }
  /// Null restores the default (print and abort every rank). Also called
  /// when another rank announced its failure (then `wait` throws
  /// CommPeerFailedError).
  void setTimeoutHandler(TimeoutHandler handler) {
    timeoutHandler = std::move(handler);
  }

protected:
  // The backend's collectives, behind the public ones above (which count
  // their traffic once, here, for every backend).
  virtual CommHandle startAllGather(const void *send, int64_t sendCount,
                                    void *recv, DType dtype, OpLabel label) = 0;
  virtual CommHandle startReduceScatter(const void *send,
                                        const std::vector<int64_t> &recvCounts,
                                        void *recv, DType dtype, bool average,
                                        OpLabel label) = 0;
  virtual CommHandle startAllReduce(void *buf, int64_t count, DType dtype,
                                    bool average, OpLabel label) = 0;
  virtual CommHandle startAllToAllV(const void *send,
                                    const std::vector<int64_t> &sendCounts,
                                    void *recv,
                                    const std::vector<int64_t> &recvCounts,
                                    DType dtype, OpLabel label) = 0;
  /// allToAllHost's half. This default hands the host buffers to
  /// startAllToAllV: right where collectives move host memory (MPI, one
  /// rank); a device backend overrides it.
  virtual CommHandle startAllToAllHost(const int32_t *send, int32_t *recv,
                                       int64_t perRank, OpLabel label);
  virtual CommHandle startBroadcast(void *buf, int64_t count, DType dtype,
                                    int root, OpLabel label) = 0;
  virtual CommHandle startBarrier(OpLabel label) = 0;
  virtual CommHandle startAllReduceScalars(double *values, int64_t count,
                                           ScalarOp op, OpLabel label) = 0;

  /// Ends every rank's process with `exitCode`. Does not return.
  [[noreturn]] virtual void abortAll(int exitCode) const = 0;
  /// Tells the ranks whose failure peerFailure() returned that this rank
  /// has reported it (announceFailure waits for that).
  virtual void acknowledgePeerFailure() {}
  /// A pending collective of this communicator, started now.
  template <typename T>
  std::unique_ptr<T> makePending(std::string collective, OpLabel label) {
    auto p = std::make_unique<T>();
    p->owner = this;
    p->collective = std::move(collective);
    p->label = std::move(label);
    p->started = CommClock::now();
    return p;
  }
  /// Settings a duplicate or split inherits.
  void inheritSettings(Communicator &child) const {
    child.commTimeout = commTimeout;
    child.timeoutHandler = timeoutHandler;
  }
  /// Argument checks shared by the backends; throw std::invalid_argument.
  void checkReducible(DType dtype, std::string_view collective) const;
  void checkCount(int64_t count, std::string_view what) const;
  /// A reduce-scatter's counts: one per rank, none negative.
  void checkRecvCounts(const std::vector<int64_t> &recvCounts) const;
  /// An all-to-all's counts (one per rank, none negative) and buffers (not
  /// overlapping); returns the send and receive totals.
  std::pair<int64_t, int64_t>
  checkAllToAll(const void *send, const std::vector<int64_t> &sendCounts,
                const void *recv, const std::vector<int64_t> &recvCounts,
                DType dtype) const;
  /// A broadcast's root: a rank of this communicator.
  void checkRoot(int root) const;
  /// The backend state of a pending handle (null once complete), for
  /// backends with more to offer than test and wait (NcclCommunicator's
  /// stream waits).
  static PendingCollective *pendingState(const CommHandle &handle) {
    return handle.state.get();
  }

private:
  [[noreturn]] void timedOut(const PendingCollective &p, CommDeadline deadline);
  [[noreturn]] void peerFailed(const PendingCollective &p,
                               const std::string &failure);
  bool waitUntil(CommHandle &handle, CommDeadline deadline,
                 const std::atomic<bool> &cancel);
  /// One poll of a wait that found `p` not done after `polls` polls: false
  /// once `cancel` is set; reports a timeout past `deadline` or a peer's
  /// failure; spins briefly, then backs off.
  bool pollAgain(PendingCollective &p, int64_t polls, CommDeadline deadline,
                 const std::atomic<bool> &cancel);

  /// Adds a started collective's traffic.
  void count(CollectiveKind kind, int64_t elements, DType dtype);
  /// An all-to-all's: `sent` elements in all, by `sendCounts`.
  void countAllToAll(const std::vector<int64_t> &sendCounts, int64_t sent,
                     DType dtype);

  CommDuration commTimeout = kDefaultCommTimeout;
  TimeoutHandler timeoutHandler;
  mutable std::mutex trafficMutex;
  CommTraffic counted;
};

/// World size 1: every collective is a copy (or nothing) and completes when
/// started. Needs no MPI.
class LocalCommunicator final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "local"; }

  std::unique_ptr<Communicator> duplicate() const override;
  std::unique_ptr<Communicator> split(int color, int key) const override;

protected:
  CommHandle startAllGather(const void *send, int64_t sendCount, void *recv,
                            DType dtype, OpLabel label) override;
  CommHandle startReduceScatter(const void *send,
                                const std::vector<int64_t> &recvCounts,
                                void *recv, DType dtype, bool average,
                                OpLabel label) override;
  CommHandle startAllReduce(void *buf, int64_t count, DType dtype, bool average,
                            OpLabel label) override;
  CommHandle startAllToAllV(const void *send,
                            const std::vector<int64_t> &sendCounts, void *recv,
                            const std::vector<int64_t> &recvCounts, DType dtype,
                            OpLabel label) override;
  CommHandle startBroadcast(void *buf, int64_t count, DType dtype, int root,
                            OpLabel label) override;
  CommHandle startBarrier(OpLabel label) override;
  CommHandle startAllReduceScalars(double *values, int64_t count, ScalarOp op,
                                   OpLabel label) override;
  [[noreturn]] void abortAll(int exitCode) const override;
};

/// "all_reduce of plan op 17 (micro_step, stream reduce: h.0.mlp)": how
/// messages name a collective.
std::string describeCollective(const PendingCollective &p);

/// Whether every rank read the same `what` (a file each rank reads for
/// itself, such as the plan): each passes the CRC-32C of the bytes it read.
/// Collective. Empty when the digests agree; otherwise, on every rank, a
/// message naming `what` with this rank's digest and the range over ranks
/// (the file changed on disk while the ranks read it, or the ranks see
/// different files at the same path).
std::optional<std::string> checkSameOnEveryRank(Communicator &comm,
                                                uint32_t digest,
                                                const std::string &what);

/// Every rank's `mine`, in rank order, on every rank: one all-gather of
/// the texts padded to the longest (after a scalar all-reduce of their
/// lengths). Collective; `what` names it in a timeout.
std::vector<std::string> allGatherText(Communicator &comm,
                                       const std::string &mine,
                                       const std::string &what);

/// Expert parallelism's count exchange, the first half of a dispatch
/// all-to-all: `sent[e]` is the rows this rank sends to expert e of the
/// group's size() x local experts (rank q of `comm` holds experts
/// [q local, (q + 1) local)); returns `received[s * local + l]`, the rows
/// rank s sends to this rank's local expert l. Collective: an all-to-all of
/// `local` i32 counts per rank (so the variable all-to-all of the rows can
/// follow) of host memory (allToAllHost, which a device backend stages),
/// waited for; nullopt when `cancel` is set first (as wait(handle,
/// cancel)). Throws std::invalid_argument for experts that do
/// not split over the ranks and for counts outside i32.
std::optional<std::vector<int64_t>>
exchangeExpertCounts(Communicator &comm, const std::vector<int64_t> &sent,
                     OpLabel label, const std::atomic<bool> &cancel);

/// True when the byte ranges [a, a + aBytes) and [b, b + bBytes) share a
/// byte: aliasing checks of the backends.
bool bytesOverlap(const void *a, size_t aBytes, const void *b, size_t bBytes);

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_COMM_COMMUNICATOR_H
