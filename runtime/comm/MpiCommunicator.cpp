//===- MpiCommunicator.cpp - Collectives over MPI -------------------------===//

#include "comm/MpiCommunicator.h"

#include "comm/FailureChannel.h"

#include "memory/MemoryCounter.h"
#include "zeroc/Support/Float16.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

namespace zeroc::runtime {

//===----------------------------------------------------------------------===//
// MpiSession
//===----------------------------------------------------------------------===//

void keepMallocScratch() {
  // Open MPI's reductions take a scratch buffer of the message's size from
  // malloc on every call. glibc serves blocks past its mmap threshold (128
  // KiB, raised only as large blocks are freed) from fresh mappings, and
  // returns a freed heap top past its trim threshold to the kernel: every
  // collective's scratch was then faulted in page by page. Small Llama's
  // stage-0 all-reduce (39 gradients, 20 MB) at two ranks on the
  // development VM: 19-23 ms, 11-16 with blocks up to 32 MiB kept in the
  // heap (a plain MPI program: 103K page faults in 20 all-reduces against
  // 12K; bench/RESULTS.md, run 46). The plan's own memory is mapped by the
  // device from 1 MiB up (CpuDevice), not by malloc. A heap gives back
  // the free space at its top past the trim threshold (per malloc arena).
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, int(kMallocKeepBlocks));
  mallopt(M_TRIM_THRESHOLD, int(kMallocKeepTop));
#endif
}

MpiSession::MpiSession(int *argc, char ***argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&provided);
    return;
  }
  keepMallocScratch();
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) !=
      MPI_SUCCESS) {
    std::fprintf(stderr, "zerorun: MPI_Init_thread failed\n");
    std::exit(1);
  }
  owns = true;
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns && !finalized)
    MPI_Finalize();
}

MPI_Comm worldIfRunning() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  if (up)
    MPI_Finalized(&down);
  return up && !down ? MPI_COMM_WORLD : MPI_COMM_NULL;
}

NodeRank nodeRank(MPI_Comm comm) {
  NodeRank r;
  if (comm == MPI_COMM_NULL)
    return r;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                          &node) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) "
                             "failed while choosing a CUDA device");
  MPI_Comm_rank(node, &r.rank);
  MPI_Comm_size(node, &r.size);
  MPI_Comm_free(&node);
  return r;
}

//===----------------------------------------------------------------------===//
// A pending MPI collective
//===----------------------------------------------------------------------===//

namespace {

struct MpiPending : PendingCollective {
  const MpiCommunicator *comm = nullptr;
  std::vector<MPI_Request> requests;
  std::vector<int> counts;        // MPI reads count arrays until completion.
  StagingVector<float> wideSend;  // f32 copies of 16-bit inputs.
  StagingVector<float> wideRecv;  // f32 results before rounding or copying.
  std::function<void()> complete; // Averaging, rounding, copying out.

  /// The requests complete (their results in `wideRecv` or in place):
  /// the epilogue `complete` still to run.
  bool arrived() override {
    if (transferred)
      return true;
    int flag = 0;
    int rc = MPI_Testall(int(requests.size()), requests.data(), &flag,
                         MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      throw std::runtime_error("MPI_Testall failed for " + collective +
                               " on rank " + std::to_string(comm->rank()) +
                               ": " + std::string(text, size_t(len)));
    }
    return transferred = flag != 0;
  }
  bool test() override {
    if (!arrived())
      return false;
    if (complete)
      std::exchange(complete, nullptr)();
    return true;
  }
  bool transferred = false;
};

MPI_Datatype bitsType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::BF16:
  case DType::F16:
    return MPI_UINT16_T;
  case DType::I32:
    return MPI_INT32_T;
  }
  return MPI_DATATYPE_NULL;
}

void widen(const void *src, DType dtype, int64_t count, float *dst) {
  const uint16_t *bits = static_cast<const uint16_t *>(src);
  if (dtype == DType::BF16)
    for (int64_t i = 0; i < count; ++i)
      dst[i] = bf16ToFloat(bits[i]);
  else
    for (int64_t i = 0; i < count; ++i)
      dst[i] = f16ToFloat(bits[i]);
}

/// Writes sum (or sum / worldSize) of the f32 `src` to `dst` in `dtype`.
void narrow(const float *src, int64_t count, bool average, int worldSize,
            DType dtype, void *dst) {
  float n = float(worldSize);
  if (dtype == DType::F32) {
    float *out = static_cast<float *>(dst);
    for (int64_t i = 0; i < count; ++i)
      out[i] = average ? src[i] / n : src[i];
    return;
  }
  uint16_t *out = static_cast<uint16_t *>(dst);
  bool bf16 = dtype == DType::BF16;
  for (int64_t i = 0; i < count; ++i) {
    float v = average ? src[i] / n : src[i];
    out[i] = bf16 ? floatToBf16(v) : floatToF16(v);
  }
}

} // namespace

void MpiCommunicator::announceFailure(const std::string &message,
                                      CommDuration grace) {
  FailureChannel::announce(message, grace);
}

std::optional<std::string> MpiCommunicator::peerFailure() {
  return FailureChannel::received();
}

void MpiCommunicator::acknowledgePeerFailure() {
  FailureChannel::acknowledge();
}

//===----------------------------------------------------------------------===//
// MpiCommunicator
//===----------------------------------------------------------------------===//

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  FailureChannel::open();
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Comm_dup(MPI_COMM_WORLD) failed");
  return std::make_unique<MpiCommunicator>(dup);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm)
    : mpiComm(comm), maxMessage(INT_MAX) {
  // Errors come back as codes and become exceptions naming the call.
  MPI_Comm_set_errhandler(mpiComm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(mpiComm, &myRank);
  MPI_Comm_size(mpiComm, &worldSize);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mpiComm != MPI_COMM_NULL)
    MPI_Comm_free(&mpiComm);
}

void MpiCommunicator::check(int rc, const char *call) const {
  if (rc == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string(call) + " failed on rank " +
                           std::to_string(myRank) + ": " +
                           std::string(text, size_t(len)));
}

int MpiCommunicator::intCount(int64_t count, std::string_view what) const {
  checkCount(count, what);
  if (count > INT_MAX)
    throw std::invalid_argument(
        std::string(what) + ": " + std::to_string(count) +
        " elements per rank exceed MPI's count limit of " +
        std::to_string(INT_MAX) + "; use smaller buckets or more ranks");
  return int(count);
}

CommHandle MpiCommunicator::startAllGather(const void *send, int64_t sendCount,
                                           void *recv, DType dtype,
                                           OpLabel label) {
  int count = intCount(sendCount, "allGather");
  auto p = makePending<MpiPending>("all_gather", std::move(label));
  p->comm = this;
  p->requests.resize(1);
  size_t slot = size_t(sendCount) * size_t(bytesPerElement(dtype));
  const void *in = send;
  if (send == static_cast<char *>(recv) + size_t(myRank) * slot)
    in = MPI_IN_PLACE;
  check(MPI_Iallgather(in, count, bitsType(dtype), recv, count, bitsType(dtype),
                       mpiComm, &p->requests[0]),
        "MPI_Iallgather");
  return CommHandle(std::move(p));
}

CommHandle MpiCommunicator::startReduceScatter(
    const void *send, const std::vector<int64_t> &recvCounts, void *recv,
    DType dtype, bool average, OpLabel label) {
  checkReducible(dtype, "reduceScatter");
  checkRecvCounts(recvCounts);
  auto p = makePending<MpiPending>("reduce_scatter", std::move(label));
  p->comm = this;
  int64_t total = 0;
  for (int64_t c : recvCounts) {
    p->counts.push_back(intCount(c, "reduceScatter"));
    total += c;
  }
  int64_t mine = recvCounts[size_t(myRank)];
  size_t elt = size_t(bytesPerElement(dtype));
  const void *in = send;
  if (dtype != DType::F32) {
    p->wideSend.resize(size_t(total));
    widen(send, dtype, total, p->wideSend.data());
    in = p->wideSend.data();
  }
  // Receive into f32 scratch when rounding to 16 bits, and when `recv`
  // overlaps `send` (MPI forbids aliased buffers).
  float *out = static_cast<float *>(recv);
  if (dtype != DType::F32 ||
      bytesOverlap(send, size_t(total) * elt, recv, size_t(mine) * elt)) {
    p->wideRecv.resize(size_t(mine));
    out = p->wideRecv.data();
  }
  if (out != recv || average) {
    int n = worldSize;
    p->complete = [out, mine, average, n, dtype, recv] {
      narrow(out, mine, average, n, dtype, recv);
    };
  }
  p->requests.resize(1);
  check(MPI_Ireduce_scatter(in, out, p->counts.data(), MPI_FLOAT, MPI_SUM,
                            mpiComm, &p->requests[0]),
        "MPI_Ireduce_scatter");
  return CommHandle(std::move(p));
}

// MPI_Ialltoallv: counts and displacements in elements of the dtype's bit
// pattern, kept in the pending state until completion (MPI reads them).
CommHandle MpiCommunicator::startAllToAllV(
    const void *send, const std::vector<int64_t> &sendCounts, void *recv,
    const std::vector<int64_t> &recvCounts, DType dtype, OpLabel label) {
  auto p = makePending<MpiPending>("all_to_all", std::move(label));
  p->comm = this;
  // counts = [send counts, send displacements, receive counts, receive
  // displacements], one block of size() each.
  size_t n = size_t(worldSize);
  p->counts.assign(4 * n, 0);
  int64_t at[2] = {0, 0};
  for (size_t r = 0; r < n; ++r) {
    p->counts[r] = intCount(sendCounts[r], "allToAllV");
    p->counts[n + r] = intCount(at[0], "allToAllV");
    p->counts[2 * n + r] = intCount(recvCounts[r], "allToAllV");
    p->counts[3 * n + r] = intCount(at[1], "allToAllV");
    at[0] += sendCounts[r];
    at[1] += recvCounts[r];
  }
  p->requests.resize(1);
  int *c = p->counts.data();
  check(MPI_Ialltoallv(send, c, c + n, bitsType(dtype), recv, c + 2 * n,
                       c + 3 * n, bitsType(dtype), mpiComm, &p->requests[0]),
        "MPI_Ialltoallv");
  return CommHandle(std::move(p));
}

CommHandle MpiCommunicator::startAllReduce(void *buf, int64_t count,
                                           DType dtype, bool average,
                                           OpLabel label) {
  checkReducible(dtype, "allReduce");
  checkCount(count, "allReduce");
  auto p = makePending<MpiPending>("all_reduce", std::move(label));
  p->comm = this;
  float *data = static_cast<float *>(buf);
  if (dtype != DType::F32) {
    p->wideSend.resize(size_t(count));
    widen(buf, dtype, count, p->wideSend.data());
    data = p->wideSend.data();
  }
  for (int64_t begin = 0; begin < count; begin += maxMessage) {
    int64_t n = std::min(maxMessage, count - begin);
    p->requests.emplace_back();
    check(MPI_Iallreduce(MPI_IN_PLACE, data + begin, int(n), MPI_FLOAT, MPI_SUM,
                         mpiComm, &p->requests.back()),
          "MPI_Iallreduce");
  }
  if (dtype != DType::F32 || average) {
    int n = worldSize;
    p->complete = [data, count, average, n, dtype, buf] {
      narrow(data, count, average, n, dtype, buf);
    };
  }
  return CommHandle(std::move(p));
}

CommHandle MpiCommunicator::startBroadcast(void *buf, int64_t count,
                                           DType dtype, int root,
                                           OpLabel label) {
  checkCount(count, "broadcast");
  checkRoot(root);
  auto p = makePending<MpiPending>("broadcast", std::move(label));
  p->comm = this;
  char *bytes = static_cast<char *>(buf);
  size_t elt = size_t(bytesPerElement(dtype));
  for (int64_t begin = 0; begin < count; begin += maxMessage) {
    int64_t n = std::min(maxMessage, count - begin);
    p->requests.emplace_back();
    check(MPI_Ibcast(bytes + size_t(begin) * elt, int(n), bitsType(dtype), root,
                     mpiComm, &p->requests.back()),
          "MPI_Ibcast");
  }
  return CommHandle(std::move(p));
}

CommHandle MpiCommunicator::startBarrier(OpLabel label) {
  auto p = makePending<MpiPending>("barrier", std::move(label));
  p->comm = this;
  p->requests.resize(1);
  check(MPI_Ibarrier(mpiComm, &p->requests[0]), "MPI_Ibarrier");
  return CommHandle(std::move(p));
}

CommHandle MpiCommunicator::startAllReduceScalars(double *values, int64_t count,
                                                  ScalarOp op, OpLabel label) {
  int n = intCount(count, "allReduceScalars");
  auto p = makePending<MpiPending>(op == ScalarOp::Sum ? "all_reduce(sum)"
                                                       : "all_reduce(max)",
                                   std::move(label));
  p->comm = this;
  p->requests.resize(1);
  check(MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE,
                       op == ScalarOp::Sum ? MPI_SUM : MPI_MAX, mpiComm,
                       &p->requests[0]),
        "MPI_Iallreduce");
  return CommHandle(std::move(p));
}

std::unique_ptr<Communicator> MpiCommunicator::duplicate() const {
  MPI_Comm dup = MPI_COMM_NULL;
  check(MPI_Comm_dup(mpiComm, &dup), "MPI_Comm_dup");
  auto copy = std::make_unique<MpiCommunicator>(dup);
  copy->maxMessage = maxMessage;
  inheritSettings(*copy);
  return copy;
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm part = MPI_COMM_NULL;
  check(MPI_Comm_split(mpiComm, color < 0 ? MPI_UNDEFINED : color, key, &part),
        "MPI_Comm_split");
  if (part == MPI_COMM_NULL)
    return nullptr;
  auto child = std::make_unique<MpiCommunicator>(part);
  child->maxMessage = maxMessage;
  inheritSettings(*child);
  return child;
}

void MpiCommunicator::abortAll(int exitCode) const {
  MPI_Abort(MPI_COMM_WORLD, exitCode);
  std::_Exit(exitCode); // MPI_Abort should not return.
}

} // namespace zeroc::runtime
