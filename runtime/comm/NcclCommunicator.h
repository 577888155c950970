//===- NcclCommunicator.h - Collectives over NCCL on the device -*- C++ -*-===//
//-*-===//
//
// The CUDA backend's communicator: the Communicator interface over NCCL, on
// DEVICE buffers, enqueued on a CUDA stream the caller picks (`setStream`).
// A collective's handle is complete once a CUDA event recorded after it has
// fired; `test` queries that event and NCCL's asynchronous error state, so
// `wait` gives up at the --comm-timeout deadline and aborts every rank as
// the MPI backend does. docs/gpu-comm.md has the whole story.
//
// Bootstrap: rank 0 of an MPI communicator makes the ncclUniqueId and MPI
// broadcasts it; without MPI (MPI_COMM_NULL, or `world()` before MPI_Init)
// the communicator is one rank and calls no MPI. Each rank uses CUDA device
// (node-local rank) mod (visible devices): one GPU per rank.
//
// NCCL runs in non-blocking mode (ncclConfig_t::blocking = 0): no NCCL call
// blocks the host, so a peer that never arrives (at initialization, at the
// first connection between two ranks, at a collective) shows as a timeout
// instead of a hang inside NCCL. Any NCCL error aborts the NCCL
// communicator (ncclCommAbort) and throws; later calls throw too.
//
// Arithmetic differs from the MPI backend in two ways:
//  * 16-bit reductions accumulate in the 16-bit type: each hop of NCCL's
//    ring or tree adds in bf16 / f16 and rounds (up to size() - 1 roundings
//    of partial sums), where the MPI backend sums in f32 and rounds once.
//    For a sum of n terms expect an error up to about (n - 1) * u * sum|x_i|
//    (u = 2^-8 for bf16, 2^-11 for f16) instead of u * |sum|; partial sums
//    of f16 overflow to infinity above 65504.
//  * `average` is ncclAvg: every input is multiplied by 1/n (rounded to the
//    buffer's type) and then summed, instead of sum / n. For n a power of
//    two that is exact up to the summation; otherwise 1/n itself rounds.
// Comparing against the CPU backend therefore needs a tolerance that grows
// with the world size for bf16 / f16; f32 results agree to a few ulps of
// sum|x_i| (the order of summation differs).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_COMM_NCCLCOMMUNICATOR_H
#define ZEROC_RUNTIME_COMM_NCCLCOMMUNICATOR_H

#include "comm/Communicator.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

namespace zeroc::runtime {

/// The NCCL element type of `dtype`: f32, bf16, f16 and i32 map to
/// ncclFloat32, ncclBfloat16, ncclFloat16 and ncclInt32.
ncclDataType_t ncclTypeOf(DType dtype);

class NcclCommunicator final : public Communicator {
public:
  /// Over MPI_COMM_WORLD when MPI is initialized (and not finalized), else
  /// one rank without MPI. Refuses a launch by mpirun of several ranks
  /// before MPI_Init (initialize MPI first: MpiSession). `timeout` bounds
  /// NCCL's initialization and becomes timeout().
  static std::unique_ptr<NcclCommunicator>
  world(CommDuration timeout = kDefaultCommTimeout);
  /// Over the ranks of `bootstrap` (collective over it); MPI_COMM_NULL:
  /// one rank, no MPI calls. Throws std::runtime_error naming the rank and
  /// the CUDA or NCCL error if the device or NCCL cannot be set up; every
  /// rank of `bootstrap` throws when one rank's device setup fails.
  static std::unique_ptr<NcclCommunicator>
  create(MPI_Comm bootstrap, CommDuration timeout = kDefaultCommTimeout);
  /// Finalizes the NCCL communicator (aborts it if that does not finish
  /// within timeout()). Every handle must be complete.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int rank() const override { return myRank; }
  int size() const override { return worldSize; }
  std::string_view backend() const override { return "nccl"; }
  /// The CUDA device of this rank. Every call of this communicator makes
  /// it the calling thread's current device.
  int device() const { return cudaDevice; }
  ncclComm_t comm() const { return nccl; }

  /// Collectives started from now on are enqueued on `stream` (a stream of
  /// device(); 0 is the legacy default stream). They start after the work
  /// already on it, and work enqueued on it later runs after them.
  void setStream(cudaStream_t stream) { current = stream; }
  /// setStream, for callers that know only the Communicator interface.
  void useStream(void *stream) override {
    setStream(static_cast<cudaStream_t>(stream));
  }
  cudaStream_t stream() const { return current; }
  /// The non-blocking stream this communicator owns: the default of
  /// setStream.
  cudaStream_t internalStream() const { return ownStream; }

  /// Collectives started between beginGroup() and endGroup() are issued as
  /// one NCCL group (ncclGroupStart / ncclGroupEnd): one launch for a
  /// bucket's collectives. Each still returns its own handle, which may be
  /// tested, waited for or passed to streamWait only after endGroup().
  /// Groups nest; the outermost endGroup() launches. NCCL's group state is
  /// per thread: while a group is open, this thread may not start
  /// collectives of another NcclCommunicator (std::logic_error).
  void beginGroup();
  void endGroup();

  /// Makes `stream` wait, on the device, for the collective of `handle`
  /// (cudaStreamWaitEvent); the host does not block. Nothing to do for a
  /// complete handle. The handle stays pending: test or wait for it later
  /// to see errors and timeouts (destroying it waits on the host).
  void streamWait(cudaStream_t stream, const CommHandle &handle);

  /// Reduce-scatters use the group of ncclReduce calls that unequal counts
  /// need even when the counts are equal: tests reach that path at world
  /// size 1 with it.
  void setReducePerRoot(bool always) { reducePerRoot = always; }

  /// ncclCommSplit with the same color for all: a new NCCL communicator on
  /// the same device, with its own internal stream (collective).
  std::unique_ptr<Communicator> duplicate() const override;
  /// ncclCommSplit; a negative color is NCCL_SPLIT_NOCOLOR (null result).
  std::unique_ptr<Communicator> split(int color, int key) const override;

  /// Over the job's failure channel (FailureChannel), which world() opens
  /// when MPI bootstrapped it; a no-op for one rank without MPI. Ranks are
  /// MPI_COMM_WORLD's.
  void announceFailure(const std::string &message,
                       CommDuration grace = kFailureAnnounceGrace) override;
  std::optional<std::string> peerFailure() override;

protected:
  /// Device pointers; `send` may be this rank's slot of `recv` (NCCL's
  /// in-place all-gather).
  CommHandle startAllGather(const void *send, int64_t sendCount, void *recv,
                            DType dtype, OpLabel label) override;
  /// Equal counts: one ncclReduceScatter. Unequal counts: one ncclReduce
  /// per rank with a nonzero count, that rank as root, in one group
  /// (zero-count ranks are skipped; every rank skips the same ones). `recv`
  /// may be this rank's block of `send` (in place); a `recv` that
  /// overlaps `send` elsewhere is received into stream-ordered scratch.
  CommHandle startReduceScatter(const void *send,
                                const std::vector<int64_t> &recvCounts,
                                void *recv, DType dtype, bool average,
                                OpLabel label) override;
  CommHandle startAllToAllV(const void *send,
                            const std::vector<int64_t> &sendCounts, void *recv,
                            const std::vector<int64_t> &recvCounts, DType dtype,
                            OpLabel label) override;
  /// Host i32s, staged through pinned host and device memory (as
  /// allReduceScalars' doubles): copied in when started, exchanged as
  /// device buffers, copied back; `recv` is written when the handle
  /// completes (test / wait), not before.
  CommHandle startAllToAllHost(const int32_t *send, int32_t *recv,
                               int64_t perRank, OpLabel label) override;
  CommHandle startAllReduce(void *buf, int64_t count, DType dtype, bool average,
                            OpLabel label) override;
  CommHandle startBroadcast(void *buf, int64_t count, DType dtype, int root,
                            OpLabel label) override;
  /// An all-reduce of one element of device scratch.
  CommHandle startBarrier(OpLabel label) override;
  /// `values` are HOST doubles (as for the other backends): copied to
  /// device scratch, all-reduced as ncclFloat64, copied back; `values` is
  /// written when the handle completes (test / wait), not before.
  CommHandle startAllReduceScalars(double *values, int64_t count, ScalarOp op,
                                   OpLabel label) override;
  /// ncclCommAbort (given up after a grace period, as it may itself hang
  /// behind a stuck peer), then MPI_Abort if MPI is running, else _Exit.
  [[noreturn]] void abortAll(int exitCode) const override;
  void acknowledgePeerFailure() override;

private:
  struct Op;
  struct Batch;
  struct Pending;
  struct HostStaging;

  NcclCommunicator(ncclComm_t comm, int device);

  std::string rankPrefix() const;
  void useDevice() const;
  /// Throws if the communicator was aborted or an earlier collective is
  /// still being enqueued past its deadline.
  void prepare(std::string_view what);
  std::unique_ptr<Pending> newPending(std::string collective, OpLabel label);
  /// Issues `calls` (the NCCL calls of one collective) in the open group or
  /// a group of its own; `epilogue` is stream work that must follow the
  /// NCCL kernels.
  CommHandle launch(std::unique_ptr<Pending> p, const char *call,
                    const std::function<ncclResult_t()> &calls,
                    std::function<cudaError_t(cudaStream_t)> epilogue);
  /// After ncclGroupEnd: polls until NCCL has enqueued the batch or
  /// `deadline` passes (false), then records each op's event.
  bool finishEnqueue(Batch &batch, CommDeadline deadline);
  bool poll(Pending &p);
  void checkCuda(cudaError_t rc, const char *call, const std::string &what);
  [[noreturn]] void fail(ncclResult_t rc, const char *call,
                         const std::string &what);
  /// Staging of at least `bytes` (a free one, or a new one).
  std::unique_ptr<HostStaging> takeStaging(size_t bytes);
  /// `bytes` of host `values` into p's staging, then to its device half on
  /// the current stream.
  void stageIn(Pending &p, const void *values, size_t bytes);
  /// One ncclSend and one ncclRecv per peer with a nonzero count, on the
  /// current stream: an all-to-all, inside the group launch() opens.
  ncclResult_t sendAndReceive(const void *send,
                              const std::vector<int64_t> &sendCounts,
                              void *recv,
                              const std::vector<int64_t> &recvCounts,
                              DType dtype) const;
  std::unique_ptr<NcclCommunicator> splitComm(int color, int key) const;

  ncclComm_t nccl = nullptr;
  bool aborted = false;
  int myRank = 0;
  int worldSize = 1;
  int cudaDevice = 0;
  cudaStream_t ownStream = nullptr;
  cudaStream_t current = nullptr;
  bool reducePerRoot = false;
  int groupDepth = 0;
  std::shared_ptr<Batch> openGroup; ///< Between beginGroup and endGroup.
  std::shared_ptr<Batch> enqueuing; ///< Closed, not yet enqueued by NCCL.
  std::vector<std::unique_ptr<HostStaging>> freeStaging;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_COMM_NCCLCOMMUNICATOR_H
