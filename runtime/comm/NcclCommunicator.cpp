//===- NcclCommunicator.cpp - Collectives over NCCL -----------------------===//

#include "comm/NcclCommunicator.h"

#include "comm/FailureChannel.h"
#include "memory/MemoryCounter.h"

#include "comm/MpiCommunicator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

namespace zeroc::runtime {

namespace {

/// How long abortAll lets ncclCommAbort run before ending the process
/// anyway (ncclCommAbort can wait on a stuck peer or kernel).
constexpr std::chrono::seconds kAbortGrace{10};

/// NCCL state polls back off as Communicator::wait does: spin, then yield,
/// then sleep.
void pause(int64_t polls) {
  if (polls < 1000)
    return;
  if (polls < 2000)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

std::string rankText(int rank, int size) {
  return "zerorun: rank " + std::to_string(rank) + " of " +
         std::to_string(size) + ": ";
}

std::string ncclErrorText(ncclResult_t rc, ncclComm_t comm) {
  std::string text = ncclGetErrorString(rc);
  const char *last = ncclGetLastError(comm);
  if (last && *last)
    text += " (" + std::string(last) + ")";
  return text;
}

ncclConfig_t nonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

/// Polls a communicator that NCCL is still creating (non-blocking init or
/// split) until it is ready, fails, or `deadline` passes. Returns the
/// final state; ncclInProgress means the deadline passed.
ncclResult_t settleNewComm(ncclComm_t comm, ncclResult_t rc,
                           CommDeadline deadline) {
  for (int64_t polls = 0; rc == ncclInProgress; ++polls) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    rc = query != ncclSuccess ? query : state;
    if (rc == ncclInProgress && CommClock::now() >= deadline)
      break;
    pause(polls);
  }
  return rc;
}

/// One value of an environment variable as a positive integer, or 0.
int envCount(const char *name) {
  const char *value = std::getenv(name);
  return value ? std::atoi(value) : 0;
}

} // namespace

ncclDataType_t ncclTypeOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ncclFloat32;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I32:
    return ncclInt32;
  }
  throw std::invalid_argument("ncclTypeOf: unknown dtype");
}

//===----------------------------------------------------------------------===//
// Pending collectives
//===----------------------------------------------------------------------===//

/// One collective's place on the device: its stream and the event recorded
/// after its NCCL kernels (and epilogue). Shared by its handle and, until
/// NCCL has enqueued it, its batch.
struct NcclCommunicator::Op {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  std::function<cudaError_t(cudaStream_t)> epilogue;

  Op() = default;
  Op(const Op &) = delete;
  Op &operator=(const Op &) = delete;
  ~Op() {
    if (done)
      cudaEventDestroy(done);
  }
};

/// The collectives of one ncclGroupStart / ncclGroupEnd. Open until the
/// group ends; then Enqueuing until NCCL (non-blocking) has put the kernels
/// on the streams; then each op's event is recorded: Enqueued.
struct NcclCommunicator::Batch {
  enum State { Open, Enqueuing, Enqueued };
  State state = Open;
  std::vector<std::shared_ptr<Op>> ops;
  CommDeadline deadline;
  std::string what; ///< For messages: its first collective, or "a group".
};

/// Pinned host and device bytes of the same size, through which the
/// collectives of host data go (allReduceScalars, allToAllHost; barrier's
/// one double), reused once the collective that had them is complete.
struct NcclCommunicator::HostStaging {
  char *host = nullptr;
  char *device = nullptr;
  size_t capacity = 0;

  HostStaging() = default;
  HostStaging(const HostStaging &) = delete;
  HostStaging &operator=(const HostStaging &) = delete;
  ~HostStaging() {
    if (host)
      cudaFreeHost(host);
    if (device) {
      cudaFree(device);
      deviceMemory().released(MemoryUse::CollectiveStaging, int64_t(capacity));
    }
  }
};

struct NcclCommunicator::Pending : PendingCollective {
  NcclCommunicator *comm = nullptr;
  std::shared_ptr<Batch> batch;
  std::shared_ptr<Op> op;
  std::unique_ptr<HostStaging> staging;
  /// On completion, `resultBytes` of staging->host from `resultAt` are
  /// copied to `result` (host memory of the caller's).
  void *result = nullptr;
  size_t resultAt = 0, resultBytes = 0;

  bool test() override { return comm->poll(*this); }
  ~Pending() override {
    // Not complete (abandoned after a timeout): the device may still write
    // the staging, so it is leaked rather than freed or reused.
    if (staging)
      (void)staging.release();
  }
};

/// The NcclCommunicator whose group is open on this thread, if any: NCCL's
/// group state is per thread, so no other communicator may launch then.
static thread_local const NcclCommunicator *threadGroupOwner = nullptr;

//===----------------------------------------------------------------------===//
// Creation and destruction
//===----------------------------------------------------------------------===//

std::unique_ptr<NcclCommunicator>
NcclCommunicator::world(CommDuration timeout) {
  if (MPI_Comm world = worldIfRunning(); world != MPI_COMM_NULL) {
    // Its ranks are the world's: a rank's own failure is announced to the
    // others over the job's failure channel (announceFailure).
    FailureChannel::open();
    return create(world, timeout);
  }
  int launched =
      std::max(envCount("OMPI_COMM_WORLD_SIZE"), envCount("PMI_SIZE"));
  if (launched > 1)
    throw std::logic_error(
        "NcclCommunicator::world: mpirun started " + std::to_string(launched) +
        " ranks but MPI is not initialized; initialize it first (MpiSession)");
  return create(MPI_COMM_NULL, timeout);
}

std::unique_ptr<NcclCommunicator>
NcclCommunicator::create(MPI_Comm bootstrap, CommDuration timeout) {
  int rank = 0, size = 1;
  NodeRank node;
  if (bootstrap != MPI_COMM_NULL) {
    MPI_Comm_rank(bootstrap, &rank);
    MPI_Comm_size(bootstrap, &size);
    try {
      node = nodeRank(bootstrap);
    } catch (const std::runtime_error &e) {
      throw std::runtime_error(rankText(rank, size) + e.what());
    }
  }

  // This rank's device and (on rank 0) the NCCL id. A failure is agreed on
  // by all ranks before NCCL starts, so that none waits for a rank that
  // gave up.
  std::string problem;
  int devices = 0, device = -1;
  cudaError_t cuda = cudaGetDeviceCount(&devices);
  if (cuda != cudaSuccess)
    problem = "no usable CUDA device: cudaGetDeviceCount: " +
              std::string(cudaGetErrorString(cuda));
  else if (devices == 0)
    problem = "no usable CUDA device: cudaGetDeviceCount found none";
  else {
    device = localDeviceIndex(node, devices);
    cuda = cudaSetDevice(device);
    if (cuda != cudaSuccess)
      problem = "cudaSetDevice(" + std::to_string(device) +
                ") failed: " + cudaGetErrorString(cuda);
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (problem.empty() && rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess)
      problem = "ncclGetUniqueId failed: " + ncclErrorText(rc, nullptr);
  }
  if (bootstrap != MPI_COMM_NULL) {
    int ok = problem.empty(), allOk = 0;
    MPI_Allreduce(&ok, &allOk, 1, MPI_INT, MPI_MIN, bootstrap);
    if (ok && !allOk)
      problem = "another rank could not set up its CUDA device or the NCCL "
                "id (see its message)";
    if (allOk)
      MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, bootstrap);
  }
  if (!problem.empty())
    throw std::runtime_error(rankText(rank, size) +
                             "cannot create the NCCL communicator: " + problem);

  ncclConfig_t config = nonBlockingConfig();
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  CommDeadline deadline =
      CommClock::now() +
      std::chrono::duration_cast<CommClock::duration>(timeout);
  if (comm)
    rc = settleNewComm(comm, rc, deadline);
  if (rc != ncclSuccess) {
    std::string message =
        rankText(rank, size) + "ncclCommInitRankConfig on CUDA device " +
        std::to_string(device) + " of " + std::to_string(devices) + " ";
    if (rc == ncclInProgress)
      message += "did not complete within " + formatDuration(timeout) +
                 "; another rank did not join";
    else
      message += "failed: " + ncclErrorText(rc, comm);
    if (node.size > devices)
      message += "; " + std::to_string(node.size) +
                 " ranks share this node and see " + std::to_string(devices) +
                 " CUDA devices, but NCCL needs a GPU of its own per rank";
    message += " (NCCL_DEBUG=INFO shows NCCL's view)";
    if (comm)
      ncclCommAbort(comm);
    throw std::runtime_error(message);
  }
  std::unique_ptr<NcclCommunicator> result(new NcclCommunicator(comm, device));
  result->setTimeout(timeout);
  return result;
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device)
    : nccl(comm), cudaDevice(device) {
  ncclCommUserRank(nccl, &myRank);
  ncclCommCount(nccl, &worldSize);
  cudaError_t rc = cudaStreamCreateWithFlags(&ownStream, cudaStreamNonBlocking);
  if (rc != cudaSuccess) {
    ncclCommAbort(nccl);
    nccl = nullptr;
    throw std::runtime_error(
        rankText(myRank, worldSize) +
        "cudaStreamCreateWithFlags failed: " + cudaGetErrorString(rc));
  }
  current = ownStream;
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(cudaDevice);
  if (threadGroupOwner == this)
    threadGroupOwner = nullptr;
  for (; groupDepth > 0; --groupDepth)
    ncclGroupEnd();
  if (nccl && !aborted) {
    // Finalize flushes what was issued and needs the peers; a peer that
    // never comes must not hang the exit, so it is bounded like a wait.
    // While an exception unwinds, the peers are unlikely to finalize in
    // step: abort at once.
    bool settled = !openGroup && std::uncaught_exceptions() == 0 &&
                   !(enqueuing && enqueuing->state == Batch::Enqueuing);
    ncclResult_t rc = settled ? ncclCommFinalize(nccl) : ncclInternalError;
    if (rc == ncclSuccess || rc == ncclInProgress)
      rc = settleNewComm(
          nccl, rc,
          CommClock::now() +
              std::chrono::duration_cast<CommClock::duration>(timeout()));
    if (rc == ncclSuccess)
      ncclCommDestroy(nccl);
    else
      ncclCommAbort(nccl);
  }
  freeStaging.clear();
  if (ownStream)
    cudaStreamDestroy(ownStream);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::splitComm(int color,
                                                              int key) const {
  if (groupDepth > 0)
    throw std::logic_error("NcclCommunicator: cannot duplicate or split "
                           "inside a group");
  auto *self = const_cast<NcclCommunicator *>(this);
  self->prepare("a communicator split");
  ncclConfig_t config = nonBlockingConfig();
  ncclComm_t child = nullptr;
  ncclResult_t rc = ncclCommSplit(nccl, color < 0 ? NCCL_SPLIT_NOCOLOR : color,
                                  key, &child, &config);
  CommDeadline deadline =
      CommClock::now() +
      std::chrono::duration_cast<CommClock::duration>(timeout());
  // The split is a collective of the parent; the child is created after it.
  if (rc == ncclSuccess || rc == ncclInProgress)
    rc = settleNewComm(nccl, ncclInProgress, deadline);
  if (child && (rc == ncclSuccess || rc == ncclInProgress))
    rc = settleNewComm(child, ncclInProgress, deadline);
  if (rc != ncclSuccess) {
    if (child)
      ncclCommAbort(child);
    if (rc == ncclInProgress) {
      // The parent is still inside the split: unusable from now on.
      ncclCommAbort(nccl);
      self->nccl = nullptr;
      self->aborted = true;
      throw std::runtime_error(
          rankPrefix() + "ncclCommSplit did not complete within " +
          formatDuration(timeout()) + "; another rank did not join");
    }
    self->fail(rc, "ncclCommSplit", "a communicator split");
  }
  if (!child)
    return nullptr;
  std::unique_ptr<NcclCommunicator> result(
      new NcclCommunicator(child, cudaDevice));
  result->reducePerRoot = reducePerRoot;
  inheritSettings(*result);
  return result;
}

std::unique_ptr<Communicator> NcclCommunicator::duplicate() const {
  return splitComm(0, myRank);
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color,
                                                      int key) const {
  return splitComm(color, key);
}

void NcclCommunicator::announceFailure(const std::string &message,
                                       CommDuration grace) {
  FailureChannel::announce(message, grace);
}

std::optional<std::string> NcclCommunicator::peerFailure() {
  return FailureChannel::received();
}

void NcclCommunicator::acknowledgePeerFailure() {
  FailureChannel::acknowledge();
}

void NcclCommunicator::abortAll(int exitCode) const {
  if (nccl && !aborted) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    ncclComm_t comm = nccl;
    int device = cudaDevice;
    std::thread([comm, device, done] {
      cudaSetDevice(device);
      ncclCommAbort(comm);
      done->store(true);
    }).detach();
    CommDeadline until = CommClock::now() + kAbortGrace;
    while (!done->load() && CommClock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int up = 0, down = 0;
  MPI_Initialized(&up);
  if (up)
    MPI_Finalized(&down);
  std::fflush(nullptr);
  if (up && !down)
    MPI_Abort(MPI_COMM_WORLD, exitCode);
  std::_Exit(exitCode);
}

//===----------------------------------------------------------------------===//
// Errors, devices, enqueueing
//===----------------------------------------------------------------------===//

std::string NcclCommunicator::rankPrefix() const {
  return rankText(myRank, worldSize);
}

void NcclCommunicator::useDevice() const {
  cudaError_t rc = cudaSetDevice(cudaDevice);
  if (rc != cudaSuccess)
    throw std::runtime_error(rankPrefix() + "cudaSetDevice(" +
                             std::to_string(cudaDevice) +
                             ") failed: " + cudaGetErrorString(rc));
}

void NcclCommunicator::fail(ncclResult_t rc, const char *call,
                            const std::string &what) {
  std::string message = rankPrefix() + what + " failed: " + call + ": " +
                        ncclErrorText(rc, nccl) +
                        "; the NCCL communicator is aborted (NCCL_DEBUG=WARN "
                        "says more)";
  if (nccl && !aborted)
    ncclCommAbort(nccl);
  nccl = nullptr;
  aborted = true;
  throw std::runtime_error(message);
}

void NcclCommunicator::checkCuda(cudaError_t rc, const char *call,
                                 const std::string &what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(rankPrefix() + what + ": " + call +
                             " failed: " + cudaGetErrorString(rc));
}

void NcclCommunicator::prepare(std::string_view what) {
  if (aborted)
    throw std::runtime_error(rankPrefix() + "cannot start " +
                             std::string(what) +
                             ": the NCCL communicator was aborted after an "
                             "earlier error");
  if (threadGroupOwner && threadGroupOwner != this)
    throw std::logic_error(
        "NcclCommunicator: cannot start " + std::string(what) +
        " while another communicator has a group open on this thread");
  useDevice();
  // NCCL forbids any call, and work on its streams, until an earlier
  // non-blocking enqueue has finished.
  if (enqueuing && enqueuing->state == Batch::Enqueuing &&
      !finishEnqueue(*enqueuing, enqueuing->deadline))
    throw std::runtime_error(rankPrefix() + "cannot start " +
                             std::string(what) +
                             ": NCCL has not finished enqueueing " +
                             enqueuing->what + " within --comm-timeout");
}

std::unique_ptr<NcclCommunicator::Pending>
NcclCommunicator::newPending(std::string collective, OpLabel label) {
  prepare(collective);
  auto p = makePending<Pending>(std::move(collective), std::move(label));
  p->comm = this;
  return p;
}

CommHandle
NcclCommunicator::launch(std::unique_ptr<Pending> p, const char *call,
                         const std::function<ncclResult_t()> &calls,
                         std::function<cudaError_t(cudaStream_t)> epilogue) {
  std::string what = describeCollective(*p);
  auto op = std::make_shared<Op>();
  op->stream = current;
  op->epilogue = std::move(epilogue);
  checkCuda(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming),
            "cudaEventCreateWithFlags", what);
  p->op = op;
  if (openGroup) {
    p->batch = openGroup;
    openGroup->ops.push_back(op);
    ncclResult_t rc = calls();
    if (rc != ncclSuccess && rc != ncclInProgress)
      fail(rc, call, what);
    return CommHandle(std::move(p));
  }
  auto batch = std::make_shared<Batch>();
  batch->ops.push_back(op);
  batch->deadline =
      p->started + std::chrono::duration_cast<CommClock::duration>(timeout());
  batch->what = what;
  p->batch = batch;
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess)
    fail(rc, "ncclGroupStart", what);
  rc = calls();
  ncclResult_t end = ncclGroupEnd();
  if (rc != ncclSuccess && rc != ncclInProgress)
    fail(rc, call, what);
  if (end != ncclSuccess && end != ncclInProgress)
    fail(end, "ncclGroupEnd", what);
  batch->state = Batch::Enqueuing;
  enqueuing = batch;
  // Normally immediate. If NCCL still waits for a peer at the deadline,
  // the handle stays unenqueued and its wait reports the timeout.
  finishEnqueue(*batch, batch->deadline);
  return CommHandle(std::move(p));
}

bool NcclCommunicator::finishEnqueue(Batch &batch, CommDeadline deadline) {
  for (int64_t polls = 0;; ++polls) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t rc = ncclCommGetAsyncError(nccl, &state);
    if (rc != ncclSuccess)
      fail(rc, "ncclCommGetAsyncError", batch.what);
    if (state == ncclSuccess)
      break;
    if (state != ncclInProgress)
      fail(state, "ncclGroupEnd", batch.what);
    if (CommClock::now() >= deadline)
      return false;
    pause(polls);
  }
  for (const std::shared_ptr<Op> &op : batch.ops) {
    if (op->epilogue)
      checkCuda(op->epilogue(op->stream), "the copy out of scratch",
                batch.what);
    checkCuda(cudaEventRecord(op->done, op->stream), "cudaEventRecord",
              batch.what);
  }
  batch.state = Batch::Enqueued;
  if (enqueuing.get() == &batch)
    enqueuing.reset();
  return true;
}

bool NcclCommunicator::poll(Pending &p) {
  if (aborted)
    throw std::runtime_error(rankPrefix() + describeCollective(p) +
                             " cannot complete: the NCCL communicator was "
                             "aborted after an earlier error");
  Batch &batch = *p.batch;
  if (batch.state == Batch::Open)
    throw std::logic_error(describeCollective(p) +
                           " was tested or waited for before endGroup()");
  if (batch.state == Batch::Enqueuing &&
      !finishEnqueue(batch, CommClock::now()))
    return false;
  // Called in a tight loop: messages are built only on failure.
  ncclResult_t state = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError(nccl, &state);
  if (rc != ncclSuccess)
    fail(rc, "ncclCommGetAsyncError", describeCollective(p));
  if (state != ncclSuccess && state != ncclInProgress)
    fail(state, "NCCL (asynchronous error)", describeCollective(p));
  cudaError_t event = cudaEventQuery(p.op->done);
  if (event == cudaErrorNotReady)
    return false;
  if (event != cudaSuccess)
    checkCuda(event, "cudaEventQuery", describeCollective(p));
  if (p.result && p.resultBytes > 0)
    std::memcpy(p.result, p.staging->host + p.resultAt, p.resultBytes);
  if (p.staging)
    freeStaging.push_back(std::move(p.staging));
  return true;
}

std::unique_ptr<NcclCommunicator::HostStaging>
NcclCommunicator::takeStaging(size_t bytes) {
  for (auto it = freeStaging.begin(); it != freeStaging.end(); ++it)
    if ((*it)->capacity >= bytes) {
      std::unique_ptr<HostStaging> s = std::move(*it);
      freeStaging.erase(it);
      return s;
    }
  auto s = std::make_unique<HostStaging>();
  s->capacity = std::max<size_t>(bytes, 16 * sizeof(double));
  checkCuda(cudaMallocHost(reinterpret_cast<void **>(&s->host), s->capacity),
            "cudaMallocHost", "host staging");
  checkCuda(cudaMalloc(reinterpret_cast<void **>(&s->device), s->capacity),
            "cudaMalloc", "host staging");
  deviceMemory().allocated(MemoryUse::CollectiveStaging, int64_t(s->capacity));
  checkCuda(cudaMemsetAsync(s->device, 0, s->capacity, current),
            "cudaMemsetAsync", "host staging");
  return s;
}

void NcclCommunicator::stageIn(Pending &p, const void *values, size_t bytes) {
  if (bytes == 0)
    return;
  // Through pinned memory, so that the copy does not block the host.
  std::memcpy(p.staging->host, values, bytes);
  checkCuda(cudaMemcpyAsync(p.staging->device, p.staging->host, bytes,
                            cudaMemcpyHostToDevice, current),
            "cudaMemcpyAsync", describeCollective(p));
}

//===----------------------------------------------------------------------===//
// Groups and stream waits
//===----------------------------------------------------------------------===//

void NcclCommunicator::beginGroup() {
  if (groupDepth == 0) {
    prepare("a group");
    auto batch = std::make_shared<Batch>();
    batch->deadline =
        CommClock::now() +
        std::chrono::duration_cast<CommClock::duration>(timeout());
    openGroup = batch;
    threadGroupOwner = this;
  }
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess)
    fail(rc, "ncclGroupStart", "a group");
  ++groupDepth;
}

void NcclCommunicator::endGroup() {
  if (groupDepth == 0)
    throw std::logic_error("NcclCommunicator::endGroup without beginGroup");
  --groupDepth;
  ncclResult_t rc = ncclGroupEnd();
  if (groupDepth > 0) {
    if (rc != ncclSuccess && rc != ncclInProgress)
      fail(rc, "ncclGroupEnd", "a nested group");
    return;
  }
  std::shared_ptr<Batch> batch = std::move(openGroup);
  openGroup.reset();
  threadGroupOwner = nullptr;
  batch->what =
      "a group of " + std::to_string(batch->ops.size()) + " collective(s)";
  if (rc != ncclSuccess && rc != ncclInProgress)
    fail(rc, "ncclGroupEnd", batch->what);
  batch->state = Batch::Enqueuing;
  enqueuing = batch;
  finishEnqueue(*batch, batch->deadline);
}

void NcclCommunicator::streamWait(cudaStream_t stream,
                                  const CommHandle &handle) {
  PendingCollective *state = pendingState(handle);
  if (!state)
    return;
  if (state->owner != this)
    throw std::logic_error("streamWait: the handle belongs to another "
                           "communicator");
  auto &p = static_cast<Pending &>(*state);
  std::string what = describeCollective(p);
  if (p.batch->state == Batch::Open)
    throw std::logic_error("streamWait on " + what + " before endGroup()");
  if (aborted)
    throw std::runtime_error(rankPrefix() + "streamWait on " + what +
                             ": the NCCL communicator was aborted after an "
                             "earlier error");
  useDevice();
  if (p.batch->state == Batch::Enqueuing &&
      !finishEnqueue(*p.batch, p.batch->deadline))
    throw std::runtime_error(rankPrefix() +
                             "streamWait: NCCL has not "
                             "finished enqueueing " +
                             what + " within --comm-timeout");
  checkCuda(cudaStreamWaitEvent(stream, p.op->done, 0), "cudaStreamWaitEvent",
            what);
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

CommHandle NcclCommunicator::startAllGather(const void *send, int64_t sendCount,
                                            void *recv, DType dtype,
                                            OpLabel label) {
  checkCount(sendCount, "allGather");
  auto p = newPending("all_gather", std::move(label));
  ncclComm_t comm = nccl;
  cudaStream_t stream = current;
  return launch(
      std::move(p), "ncclAllGather",
      [=] {
        return sendCount == 0 ? ncclSuccess
                              : ncclAllGather(send, recv, size_t(sendCount),
                                              ncclTypeOf(dtype), comm, stream);
      },
      nullptr);
}

CommHandle NcclCommunicator::startReduceScatter(
    const void *send, const std::vector<int64_t> &recvCounts, void *recv,
    DType dtype, bool average, OpLabel label) {
  checkReducible(dtype, "reduceScatter");
  checkRecvCounts(recvCounts);
  std::vector<size_t> offsets; // Of each rank's block in `send`.
  size_t total = 0;
  for (int64_t c : recvCounts) {
    offsets.push_back(total);
    total += size_t(c);
  }
  bool equal = !reducePerRoot &&
               std::all_of(recvCounts.begin(), recvCounts.end(),
                           [&](int64_t c) { return c == recvCounts[0]; });
  auto p = newPending("reduce_scatter", std::move(label));
  size_t elt = size_t(bytesPerElement(dtype));
  size_t mine = size_t(recvCounts[size_t(myRank)]);
  const char *in = static_cast<const char *>(send);
  // NCCL's in-place form receives into this rank's own block of `send`;
  // any other overlap would let one rank's result overwrite inputs that
  // are still being reduced, so it goes through scratch.
  void *out = recv;
  std::function<cudaError_t(cudaStream_t)> epilogue;
  const void *myBlock = in + offsets[size_t(myRank)] * elt;
  if (recv != myBlock && bytesOverlap(send, total * elt, recv, mine * elt)) {
    checkCuda(cudaMallocAsync(&out, mine * elt, current), "cudaMallocAsync",
              describeCollective(*p));
    deviceMemory().allocated(MemoryUse::CollectiveStaging, int64_t(mine * elt));
    epilogue = [out, recv, bytes = mine * elt](cudaStream_t s) {
      cudaError_t rc =
          cudaMemcpyAsync(recv, out, bytes, cudaMemcpyDeviceToDevice, s);
      cudaError_t freed = cudaFreeAsync(out, s);
      deviceMemory().released(MemoryUse::CollectiveStaging, int64_t(bytes));
      return rc != cudaSuccess ? rc : freed;
    };
  }
  ncclDataType_t type = ncclTypeOf(dtype);
  ncclRedOp_t op = average ? ncclAvg : ncclSum;
  ncclComm_t comm = nccl;
  cudaStream_t stream = current;
  int me = myRank;
  if (equal)
    return launch(
        std::move(p), "ncclReduceScatter",
        [=] {
          return mine == 0 ? ncclSuccess
                           : ncclReduceScatter(send, out, mine, type, op, comm,
                                               stream);
        },
        std::move(epilogue));
  // One reduce per root. A non-root's receive buffer is unused by NCCL; it
  // gets the root's own block (valid, large enough, in-place form).
  return launch(
      std::move(p), "ncclReduce",
      [&, out, type, op, comm, stream, me] {
        for (int root = 0; root < worldSize; ++root) {
          size_t n = size_t(recvCounts[size_t(root)]);
          if (n == 0)
            continue;
          const char *block = in + offsets[size_t(root)] * elt;
          void *dst = root == me ? out : const_cast<char *>(block);
          ncclResult_t rc =
              ncclReduce(block, dst, n, type, op, root, comm, stream);
          if (rc != ncclSuccess && rc != ncclInProgress)
            return rc;
        }
        return ncclSuccess;
      },
      std::move(epilogue));
}

// NCCL has no all-to-all collective: one send and one receive per peer,
// inside the group launch() opens, which NCCL runs as one exchange (the
// pattern of nccl-tests' alltoall.cu and PyTorch's all_to_all_single).
// Rank r's block of `send` follows sendCounts[0..r); blocks arrive in
// `recv` in rank order.
ncclResult_t NcclCommunicator::sendAndReceive(
    const void *send, const std::vector<int64_t> &sendCounts, void *recv,
    const std::vector<int64_t> &recvCounts, DType dtype) const {
  ncclDataType_t type = ncclTypeOf(dtype);
  size_t elt = size_t(bytesPerElement(dtype));
  const char *in = static_cast<const char *>(send);
  char *out = static_cast<char *>(recv);
  size_t sendAt = 0, recvAt = 0;
  for (int peer = 0; peer < worldSize; ++peer) {
    size_t ns = size_t(sendCounts[size_t(peer)]);
    size_t nr = size_t(recvCounts[size_t(peer)]);
    if (ns > 0) {
      ncclResult_t rc =
          ncclSend(in + sendAt * elt, ns, type, peer, nccl, current);
      if (rc != ncclSuccess && rc != ncclInProgress)
        return rc;
    }
    if (nr > 0) {
      ncclResult_t rc =
          ncclRecv(out + recvAt * elt, nr, type, peer, nccl, current);
      if (rc != ncclSuccess && rc != ncclInProgress)
        return rc;
    }
    sendAt += ns;
    recvAt += nr;
  }
  return ncclSuccess;
}

CommHandle NcclCommunicator::startAllToAllV(
    const void *send, const std::vector<int64_t> &sendCounts, void *recv,
    const std::vector<int64_t> &recvCounts, DType dtype, OpLabel label) {
  auto p = newPending("all_to_all", std::move(label));
  return launch(
      std::move(p), "ncclSend/ncclRecv",
      [&] { return sendAndReceive(send, sendCounts, recv, recvCounts, dtype); },
      nullptr);
}

// Host i32s: this rank's blocks go to the first half of the staging, the
// peers' arrive in the second half, which comes back to the host after the
// exchange and reaches `recv` when the handle completes.
CommHandle NcclCommunicator::startAllToAllHost(const int32_t *send,
                                               int32_t *recv, int64_t perRank,
                                               OpLabel label) {
  auto p = newPending("all_to_all", std::move(label));
  size_t bytes = size_t(perRank) * size_t(worldSize) * sizeof(int32_t);
  p->staging = takeStaging(2 * bytes);
  p->result = recv;
  p->resultAt = bytes;
  p->resultBytes = bytes;
  stageIn(*p, send, bytes);
  char *host = p->staging->host, *device = p->staging->device;
  std::vector<int64_t> counts(size_t(worldSize), perRank);
  return launch(
      std::move(p), "ncclSend/ncclRecv",
      [&] {
        return sendAndReceive(device, counts, device + bytes, counts,
                              DType::I32);
      },
      [=](cudaStream_t s) {
        return bytes == 0 ? cudaSuccess
                          : cudaMemcpyAsync(host + bytes, device + bytes, bytes,
                                            cudaMemcpyDeviceToHost, s);
      });
}

CommHandle NcclCommunicator::startAllReduce(void *buf, int64_t count,
                                            DType dtype, bool average,
                                            OpLabel label) {
  checkReducible(dtype, "allReduce");
  checkCount(count, "allReduce");
  auto p = newPending("all_reduce", std::move(label));
  ncclComm_t comm = nccl;
  cudaStream_t stream = current;
  // In place over one rank, a sum or an average is the identity: NCCL
  // would still run a kernel over the buffer (2.1 ms a step for GPT-2
  // 124M's 249 MB of bf16 gradients in one bucket on an H100).
  bool identity = count == 0 || worldSize == 1;
  return launch(
      std::move(p), "ncclAllReduce",
      [=] {
        return identity
                   ? ncclSuccess
                   : ncclAllReduce(buf, buf, size_t(count), ncclTypeOf(dtype),
                                   average ? ncclAvg : ncclSum, comm, stream);
      },
      nullptr);
}

CommHandle NcclCommunicator::startBroadcast(void *buf, int64_t count,
                                            DType dtype, int root,
                                            OpLabel label) {
  checkCount(count, "broadcast");
  checkRoot(root);
  auto p = newPending("broadcast", std::move(label));
  ncclComm_t comm = nccl;
  cudaStream_t stream = current;
  return launch(
      std::move(p), "ncclBroadcast",
      [=] {
        return count == 0
                   ? ncclSuccess
                   : ncclBroadcast(buf, buf, size_t(count), ncclTypeOf(dtype),
                                   root, comm, stream);
      },
      nullptr);
}

CommHandle NcclCommunicator::startBarrier(OpLabel label) {
  auto p = newPending("barrier", std::move(label));
  p->staging = takeStaging(sizeof(double));
  auto *scratch = reinterpret_cast<double *>(p->staging->device);
  ncclComm_t comm = nccl;
  cudaStream_t stream = current;
  return launch(
      std::move(p), "ncclAllReduce",
      [=] {
        return ncclAllReduce(scratch, scratch, 1, ncclFloat64, ncclSum, comm,
                             stream);
      },
      nullptr);
}

CommHandle NcclCommunicator::startAllReduceScalars(double *values,
                                                   int64_t count, ScalarOp op,
                                                   OpLabel label) {
  checkCount(count, "allReduceScalars");
  auto p =
      newPending(op == ScalarOp::Sum ? "all_reduce(sum)" : "all_reduce(max)",
                 std::move(label));
  size_t bytes = size_t(count) * sizeof(double);
  p->staging = takeStaging(bytes);
  p->result = values;
  p->resultBytes = bytes;
  stageIn(*p, values, bytes);
  char *host = p->staging->host;
  auto *device = reinterpret_cast<double *>(p->staging->device);
  ncclComm_t comm = nccl;
  cudaStream_t stream = current;
  ncclRedOp_t redOp = op == ScalarOp::Sum ? ncclSum : ncclMax;
  return launch(
      std::move(p), "ncclAllReduce",
      [=] {
        return count == 0 ? ncclSuccess
                          : ncclAllReduce(device, device, size_t(count),
                                          ncclFloat64, redOp, comm, stream);
      },
      [=](cudaStream_t s) {
        return count == 0 ? cudaSuccess
                          : cudaMemcpyAsync(host, device, bytes,
                                            cudaMemcpyDeviceToHost, s);
      });
}

} // namespace zeroc::runtime
