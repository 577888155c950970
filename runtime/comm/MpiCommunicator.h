//===- MpiCommunicator.h - Collectives over MPI -----------------*- C++ -*-===//
//
// The CPU backend's communicator: MPI non-blocking collectives
// (MPI_Iallgather, MPI_Ireduce_scatter with per-rank counts, MPI_Iallreduce,
// MPI_Ibcast, MPI_Ibarrier) completed by polling MPI_Testall, so that `wait`
// can give up at a deadline and abort the job (Communicator.h).
//
// 16-bit reductions: MPI has no bf16 or f16 type, and a user-defined MPI_Op
// on MPI_UINT16_T would round every partial sum to 16 bits (as many times as
// the algorithm has hops, in an order that depends on the algorithm and the
// world size). Instead the input is widened into f32 scratch, reduced with
// MPI_FLOAT / MPI_SUM, divided by the world size when averaging, and rounded
// to 16 bits once. That is DeepSpeed's f32 accumulation, at twice the wire
// bytes of a 16-bit reduction. Gathers and broadcasts move 16-bit bits as
// MPI_UINT16_T (nothing is computed).
//
// MPI counts are ints: all-reduce and broadcast split longer buffers into
// several collectives; all-gather and reduce-scatter refuse a per-rank count
// above INT_MAX (an 8 GiB f32 partition per rank).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_COMM_MPICOMMUNICATOR_H
#define ZEROC_RUNTIME_COMM_MPICOMMUNICATOR_H

#include "comm/Communicator.h"

#include <mpi.h>

namespace zeroc::runtime {

/// glibc's malloc set, before MPI starts, to keep blocks up to
/// kMallocKeepBlocks in its heap and up to kMallocKeepTop of a freed heap
/// top (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD): MPI's per-collective scratch
/// is then reused, not faulted in afresh on every call. MpiSession calls it.
constexpr int64_t kMallocKeepBlocks = int64_t(32) << 20; // glibc's maximum
constexpr int64_t kMallocKeepTop = int64_t(128) << 20;
void keepMallocScratch();

/// MPI_Init_thread / MPI_Finalize for a process's lifetime. Asks for
/// MPI_THREAD_MULTIPLE, so that an executor may drive each stream (and its
/// communicator) from its own thread; with a lower threadLevel() all MPI
/// calls must come from one thread. Does nothing if MPI was already
/// initialized (and then does not finalize it either).
class MpiSession {
public:
  MpiSession(int *argc, char ***argv);
  ~MpiSession();
  MpiSession(const MpiSession &) = delete;
  MpiSession &operator=(const MpiSession &) = delete;

  /// The thread level MPI provides (MPI_THREAD_SINGLE ... MULTIPLE).
  int threadLevel() const { return provided; }

private:
  bool owns = false;
  int provided = MPI_THREAD_SINGLE;
};

/// This process's place among the ranks of `comm` on its node
/// (MPI_COMM_TYPE_SHARED); rank 0 of 1 for MPI_COMM_NULL. Collective over
/// `comm`. Throws std::runtime_error if MPI cannot split `comm`.
struct NodeRank {
  int rank = 0;
  int size = 1;
};
NodeRank nodeRank(MPI_Comm comm);

/// The one choice of a rank's GPU among its node's `deviceCount`: a node's
/// ranks share out its GPUs by node rank.
inline int localDeviceIndex(const NodeRank &node, int deviceCount) {
  return deviceCount > 0 ? node.rank % deviceCount : 0;
}

/// MPI_COMM_WORLD while MPI is initialized and not finalized, else
/// MPI_COMM_NULL (a process without MPI).
MPI_Comm worldIfRunning();

class MpiCommunicator final : public Communicator {
public:
  /// A duplicate of MPI_COMM_WORLD (MPI must be initialized).
  static std::unique_ptr<MpiCommunicator> world();
  /// Takes ownership of `comm`: freed by the destructor.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator &) = delete;
  MpiCommunicator &operator=(const MpiCommunicator &) = delete;

  int rank() const override { return myRank; }
  int size() const override { return worldSize; }
  std::string_view backend() const override { return "mpi"; }
  MPI_Comm comm() const { return mpiComm; }

  /// The largest element count of one MPI call (INT_MAX); smaller in tests
  /// of the splitting.
  void setMaxMessageElements(int64_t n) { maxMessage = n; }

  std::unique_ptr<Communicator> duplicate() const override;
  std::unique_ptr<Communicator> split(int color, int key) const override;

  /// Over the job's failure channel (FailureChannel), which the first
  /// world() opens. Ranks are MPI_COMM_WORLD's.
  void announceFailure(const std::string &message,
                       CommDuration grace = kFailureAnnounceGrace) override;
  std::optional<std::string> peerFailure() override;

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
  void acknowledgePeerFailure() override;

private:
  void check(int rc, const char *call) const;
  int intCount(int64_t count, std::string_view what) const;

  MPI_Comm mpiComm = MPI_COMM_NULL;
  int myRank = 0;
  int worldSize = 1;
  int64_t maxMessage;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_COMM_MPICOMMUNICATOR_H
