//===- NcclCommTest.cpp - NcclCommunicator at world size 1 ----------------===//
//
// One rank, no MPI: every collective is an identity, so these tests check
// the plumbing: device buffers and dtypes, in-place and aliased forms, the
// per-root reduce path (forced), groups, caller streams, stream waits,
// scalars through pinned scratch, and the timeout path (a collective held
// behind a host function on its stream never completes until released).
// Each GPU test skips where no CUDA device is usable. Several ranks:
// NcclCommMpiTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "comm/NcclCommunicator.h"
#include "zeroc/Support/Float16.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

/// Why no CUDA GPU can be used here; empty when one can.
std::string noGpuReason() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess)
    return std::string("no usable CUDA GPU (cudaGetDeviceCount: ") +
           cudaGetErrorString(rc) + ")";
  if (count == 0)
    return "no CUDA GPU (cudaGetDeviceCount found none)";
  return "";
}

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    std::string why = noGpuReason();                                           \
    if (!why.empty())                                                          \
      GTEST_SKIP() << why << "; the NCCL communicator needs one";              \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

/// `count` elements of T in device memory.
template <typename T> class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t count) : count(count) {
    if (cudaMalloc(reinterpret_cast<void **>(&ptr), bytes()) != cudaSuccess)
      throw std::runtime_error("cudaMalloc failed");
  }
  explicit DeviceBuffer(const std::vector<T> &values)
      : DeviceBuffer(values.size()) {
    upload(values);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  T *get() const { return ptr; }
  size_t bytes() const { return count * sizeof(T); }
  void upload(const std::vector<T> &values) {
    if (cudaMemcpy(ptr, values.data(), values.size() * sizeof(T),
                   cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the device failed");
  }
  std::vector<T> download() const {
    std::vector<T> values(count);
    if (cudaMemcpy(values.data(), ptr, bytes(), cudaMemcpyDeviceToHost) !=
        cudaSuccess)
      throw std::runtime_error("cudaMemcpy from the device failed");
    return values;
  }

private:
  T *ptr = nullptr;
  size_t count;
};

/// A non-blocking stream of the test's own.
class Stream {
public:
  Stream() { cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
  ~Stream() { cudaStreamDestroy(stream); }
  operator cudaStream_t() const { return stream; }

private:
  cudaStream_t stream = nullptr;
};

/// Holds a stream at a host function until opened, so that what is
/// enqueued behind it cannot run: a collective that "another rank skipped".
/// Gives up after a minute so that a failing test cannot hang.
class StreamGate {
public:
  explicit StreamGate(cudaStream_t stream) : stream(stream) {
    giveUp = CommClock::now() + std::chrono::seconds(60);
    if (cudaLaunchHostFunc(stream, &StreamGate::hold, this) != cudaSuccess)
      throw std::runtime_error("cudaLaunchHostFunc failed");
  }
  ~StreamGate() {
    open();
    cudaStreamSynchronize(stream); // hold() reads this object.
  }
  void open() { opened.store(true); }

private:
  static void CUDART_CB hold(void *self) {
    auto *gate = static_cast<StreamGate *>(self);
    while (!gate->opened.load() && CommClock::now() < gate->giveUp)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  cudaStream_t stream;
  std::atomic<bool> opened{false};
  CommDeadline giveUp;
};

std::unique_ptr<NcclCommunicator> world() {
  std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::world();
  comm->setTimeout(CommDuration(60)); // A bug ends the test, not hangs it.
  return comm;
}

/// Bits of five values exact in every dtype, as that dtype stores them.
std::vector<uint16_t> halfBits(DType dtype) {
  std::vector<uint16_t> bits;
  for (float v : {1.5f, -2.0f, 0.25f, 3.0f, 1024.0f})
    bits.push_back(dtype == DType::BF16 ? floatToBf16(v) : floatToF16(v));
  return bits;
}

} // namespace

//===----------------------------------------------------------------------===//
// Without a GPU
//===----------------------------------------------------------------------===//

TEST(NcclTypes, MapEveryDType) {
  EXPECT_EQ(ncclTypeOf(DType::F32), ncclFloat32);
  EXPECT_EQ(ncclTypeOf(DType::BF16), ncclBfloat16);
  EXPECT_EQ(ncclTypeOf(DType::F16), ncclFloat16);
  EXPECT_EQ(ncclTypeOf(DType::I32), ncclInt32);
}

TEST(NcclBootstrap, NoGpuIsAClearError) {
  if (noGpuReason().empty())
    GTEST_SKIP() << "a CUDA GPU is usable here: this tests its absence";
  try {
    NcclCommunicator::world();
    FAIL() << "a communicator was created without a GPU";
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "zerorun: rank 0 of 1: cannot create the NCCL "
                  "communicator: no usable CUDA device",
                  0),
              0u)
        << e.what();
  }
}

TEST(NcclBootstrap, MpirunWithoutMpiInitIsRefused) {
  const char *before = std::getenv("OMPI_COMM_WORLD_SIZE");
  std::string saved = before ? before : "";
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  try {
    NcclCommunicator::world();
    ADD_FAILURE() << "world() ignored a 2-rank mpirun launch";
  } catch (const std::logic_error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "mpirun started 2 ranks but MPI is not initialized"),
              std::string::npos)
        << e.what();
  }
  if (before)
    setenv("OMPI_COMM_WORLD_SIZE", saved.c_str(), 1);
  else
    unsetenv("OMPI_COMM_WORLD_SIZE");
}

//===----------------------------------------------------------------------===//
// One rank
//===----------------------------------------------------------------------===//

TEST(NcclComm, WorldOfOneWithoutMpi) {
  REQUIRE_GPU();
  std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::world();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "nccl");
  int devices = 0;
  cudaGetDeviceCount(&devices);
  EXPECT_GE(comm->device(), 0);
  EXPECT_LT(comm->device(), devices);
  EXPECT_NE(comm->comm(), nullptr);
  EXPECT_EQ(comm->stream(), comm->internalStream());
  EXPECT_EQ(comm->timeout().count(), kDefaultCommTimeout.count());
}

TEST(NcclComm, AllGatherCopiesEveryDType) {
  REQUIRE_GPU();
  auto comm = world();
  std::vector<float> f32 = {1.5f, -2.0f, 1e-30f, 3.0f};
  std::vector<int32_t> i32 = {7, -1, 1 << 30, 0};
  DeviceBuffer<float> f32In(f32), f32Out(4);
  DeviceBuffer<int32_t> i32In(i32), i32Out(4);
  CommHandle h1 = comm->allGather(f32In.get(), 4, f32Out.get(), DType::F32,
                                  {0, "gather f32"});
  CommHandle h2 = comm->allGather(i32In.get(), 4, i32Out.get(), DType::I32,
                                  {1, "gather i32"});
  comm->wait(h1);
  comm->wait(h2);
  EXPECT_EQ(f32Out.download(), f32);
  EXPECT_EQ(i32Out.download(), i32);
  for (DType dtype : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> bits = halfBits(dtype);
    DeviceBuffer<uint16_t> buf(bits);
    // In place: this rank's slot of the output is the input.
    CommHandle h = comm->allGather(buf.get(), 5, buf.get(), dtype, {2, ""});
    comm->wait(h);
    EXPECT_FALSE(h.pending());
    EXPECT_EQ(buf.download(), bits) << dtypeName(dtype);
  }
}

// With one rank the sum is the input, and the average multiplies by 1/1:
// identities for every dtype and both NCCL paths (one ncclReduceScatter,
// or ncclReduce per root).
TEST(NcclComm, ReduceScatterIsTheIdentityOnBothPaths) {
  REQUIRE_GPU();
  auto comm = world();
  for (bool perRoot : {false, true}) {
    comm->setReducePerRoot(perRoot);
    for (bool average : {false, true}) {
      std::vector<float> f32 = {1.5f, -2.0f, 0.25f, 3.0f, 1024.0f};
      DeviceBuffer<float> in(f32), out(5);
      CommHandle h = comm->reduceScatter(in.get(), {5}, out.get(), DType::F32,
                                         average, {3, "f32"});
      comm->wait(h);
      EXPECT_EQ(out.download(), f32) << perRoot << average;
      for (DType dtype : {DType::BF16, DType::F16}) {
        std::vector<uint16_t> bits = halfBits(dtype);
        DeviceBuffer<uint16_t> buf(bits);
        // In place: the receive buffer is this rank's block of the input.
        h = comm->reduceScatter(buf.get(), {5}, buf.get(), dtype, average,
                                {4, "in place"});
        comm->wait(h);
        EXPECT_EQ(buf.download(), bits)
            << dtypeName(dtype) << perRoot << average;
      }
    }
  }
}

// recv overlapping send other than at this rank's block goes through
// scratch: reducing in place there would overwrite inputs still in use.
TEST(NcclComm, ReduceScatterIntoAnOverlappingBufferUsesScratch) {
  REQUIRE_GPU();
  auto comm = world();
  for (bool perRoot : {false, true}) {
    comm->setReducePerRoot(perRoot);
    std::vector<float> values = {1, 2, 3, 4, 5, 6};
    DeviceBuffer<float> buf(values);
    CommHandle h = comm->reduceScatter(buf.get(), {5}, buf.get() + 1,
                                       DType::F32, false, {5, "shifted"});
    comm->wait(h);
    EXPECT_EQ(buf.download(), (std::vector<float>{1, 1, 2, 3, 4, 5}))
        << perRoot;
  }
  CommHandle none =
      comm->reduceScatter(nullptr, {0}, nullptr, DType::F32, true, {6, ""});
  comm->wait(none);
  EXPECT_FALSE(none.pending());
}

TEST(NcclComm, AllReduceAndBroadcastAreIdentities) {
  REQUIRE_GPU();
  auto comm = world();
  std::vector<float> f32 = {0.1f, -3.0f, 7.25f};
  DeviceBuffer<float> buf(f32);
  CommHandle h = comm->allReduce(buf.get(), 3, DType::F32, true, {7, ""});
  comm->wait(h);
  EXPECT_EQ(buf.download(), f32);
  for (DType dtype : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> bits = halfBits(dtype);
    DeviceBuffer<uint16_t> half(bits);
    h = comm->allReduce(half.get(), 5, dtype, false, {8, ""});
    comm->wait(h);
    EXPECT_EQ(half.download(), bits) << dtypeName(dtype);
  }
  std::vector<int32_t> i32 = {100, 101, 102};
  DeviceBuffer<int32_t> ints(i32);
  h = comm->broadcast(ints.get(), 3, DType::I32, 0, {9, ""});
  comm->wait(h);
  EXPECT_EQ(ints.download(), i32);
  h = comm->barrier({10, "barrier"});
  comm->wait(h);
  EXPECT_FALSE(h.pending());
}

// The scalars go to the device when the collective starts and come back
// when it completes: changing them in between shows both copies.
TEST(NcclComm, ScalarsRoundTripThroughTheDevice) {
  REQUIRE_GPU();
  auto comm = world();
  EXPECT_EQ(comm->allReduceScalar(2.5, ScalarOp::Sum, {11, "norm"}), 2.5);
  EXPECT_EQ(comm->allReduceScalar(1.0, ScalarOp::Max, {12, "overflow"}), 1.0);
  std::vector<double> values(20);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = 0.5 * double(i) - 3.0;
  std::vector<double> expected = values;
  CommHandle h =
      comm->allReduceScalars(values.data(), 20, ScalarOp::Sum, {13, ""});
  std::fill(values.begin(), values.end(), -1.0);
  comm->wait(h);
  EXPECT_EQ(values, expected);
  double none = 4.0;
  h = comm->allReduceScalars(&none, 0, ScalarOp::Max, {14, ""});
  comm->wait(h);
  EXPECT_EQ(none, 4.0);
}

// Device rows: one rank's all-to-all sends its one block to itself.
TEST(NcclComm, AllToAllOfDeviceRowsIsACopy) {
  REQUIRE_GPU();
  auto comm = world();
  std::vector<float> rows = {1.5f, -2.0f, 1e-30f, 3.0f, 7.0f, -0.0f};
  DeviceBuffer<float> in(rows), out(6);
  CommHandle h = comm->allToAllV(in.get(), {6}, out.get(), {6}, DType::F32,
                                 {15, "dispatch"});
  comm->wait(h);
  EXPECT_EQ(out.download(), rows);
  // Nothing to send: no NCCL call, and the handle still completes.
  h = comm->allToAllV(in.get(), {0}, out.get(), {0}, DType::F32, {16, ""});
  comm->wait(h);
  EXPECT_FALSE(h.pending());
}

// Host i32s through pinned and device staging: the input is copied when
// the exchange starts (changing it afterwards changes nothing), `recv` is
// written when it completes (not before), and staging that a collective of
// another size left behind is reused with the right offsets: a larger host
// exchange, scalars in the same staging, a smaller host exchange.
TEST(NcclComm, HostAllToAllStagesThroughTheDevice) {
  REQUIRE_GPU();
  auto comm = world();
  for (int64_t perRank : {40, 5, 0}) {
    SCOPED_TRACE(std::to_string(perRank) + " per rank");
    std::vector<int32_t> send(static_cast<size_t>(perRank)),
        recv(static_cast<size_t>(perRank), -7);
    for (int64_t i = 0; i < perRank; ++i)
      send[size_t(i)] = int32_t(3 * i - 50);
    std::vector<int32_t> expected = send;
    CommHandle h =
        comm->allToAllHost(send.data(), recv.data(), perRank, {17, "counts"});
    std::fill(send.begin(), send.end(), 99);
    EXPECT_EQ(recv, std::vector<int32_t>(size_t(perRank), -7));
    comm->wait(h);
    EXPECT_EQ(recv, expected);
    EXPECT_EQ(comm->allReduceScalar(double(perRank) + 0.5, ScalarOp::Sum,
                                    {18, "between"}),
              double(perRank) + 0.5);
  }
}

// Expert parallelism's count exchange on NCCL (which takes device buffers
// only): one rank receives its own counts, zeros included, and the
// all-to-all traffic counts the exchange.
TEST(NcclComm, ExpertCountExchange) {
  REQUIRE_GPU();
  auto comm = world();
  CommTraffic before = comm->traffic();
  std::atomic<bool> cancel{false};
  std::vector<int64_t> sent = {3, 0, 5, 1 << 20};
  std::optional<std::vector<int64_t>> received =
      exchangeExpertCounts(*comm, sent, {19, "dispatch counts"}, cancel);
  ASSERT_TRUE(received);
  EXPECT_EQ(*received, sent);
  CommTraffic::Volume v =
      comm->traffic().since(before)[CollectiveKind::AllToAll];
  EXPECT_EQ(v.collectives, 1);
  EXPECT_EQ(v.elements, 4);
}

TEST(NcclComm, RejectsBadArguments) {
  REQUIRE_GPU();
  auto comm = world();
  DeviceBuffer<float> buf(4);
  EXPECT_THROW(
      comm->reduceScatter(buf.get(), {2, 2}, buf.get(), DType::F32, false, {}),
      std::invalid_argument);
  try {
    comm->allReduce(buf.get(), 4, DType::I32, false, {});
    FAIL() << "an i32 all-reduce was accepted";
  } catch (const std::invalid_argument &e) {
    EXPECT_STREQ(e.what(),
                 "allReduce: cannot reduce i32 buffers; expected f32, bf16 "
                 "or f16");
  }
  EXPECT_THROW(comm->allGather(buf.get(), -1, buf.get(), DType::F32, {}),
               std::invalid_argument);
  EXPECT_THROW(comm->broadcast(buf.get(), 4, DType::F32, 1, {}),
               std::invalid_argument);
  // Still usable after rejected calls (nothing reached NCCL).
  CommHandle h = comm->allReduce(buf.get(), 4, DType::F32, false, {});
  comm->wait(h);
}

TEST(NcclComm, GroupedCollectivesCompleteTogether) {
  REQUIRE_GPU();
  auto comm = world();
  comm->setReducePerRoot(true); // A group inside the group.
  std::vector<float> values = {1, 2, 3, 4};
  DeviceBuffer<float> gatherIn(values), gathered(4), reduceIn(values),
      reduced(4), summed(values);
  double scalars[2] = {3.0, -1.0};
  comm->beginGroup();
  CommHandle g = comm->allGather(gatherIn.get(), 4, gathered.get(), DType::F32,
                                 {20, "bucket"});
  comm->beginGroup(); // Groups nest; the outermost end launches.
  CommHandle r = comm->reduceScatter(reduceIn.get(), {4}, reduced.get(),
                                     DType::F32, true, {21, "bucket"});
  comm->endGroup();
  CommHandle a =
      comm->allReduce(summed.get(), 4, DType::F32, false, {22, "bucket"});
  CommHandle s = comm->allReduceScalars(scalars, 2, ScalarOp::Max, {23, ""});
  EXPECT_THROW(comm->test(g), std::logic_error); // Not launched yet.
  EXPECT_THROW(comm->streamWait(comm->internalStream(), r), std::logic_error);
  comm->endGroup();
  comm->wait(g);
  comm->wait(r);
  comm->wait(a);
  comm->wait(s);
  EXPECT_EQ(gathered.download(), values);
  EXPECT_EQ(reduced.download(), values);
  EXPECT_EQ(summed.download(), values);
  EXPECT_EQ(scalars[0], 3.0);
  EXPECT_EQ(scalars[1], -1.0);
  EXPECT_THROW(comm->endGroup(), std::logic_error);
}

// NCCL's group state is per thread: another communicator's collective would
// silently join the open group, so it is refused.
TEST(NcclComm, AnOpenGroupExcludesOtherCommunicatorsOnTheThread) {
  REQUIRE_GPU();
  auto comm = world();
  std::unique_ptr<Communicator> other = comm->duplicate();
  DeviceBuffer<float> buf(std::vector<float>{1, 2});
  comm->beginGroup();
  EXPECT_THROW(other->allReduce(buf.get(), 2, DType::F32, false, {}),
               std::logic_error);
  EXPECT_THROW(comm->duplicate(), std::logic_error);
  CommHandle h = comm->allReduce(buf.get(), 2, DType::F32, false, {});
  comm->endGroup();
  comm->wait(h);
  CommHandle after = other->allReduce(buf.get(), 2, DType::F32, false, {});
  other->wait(after);
}

// A collective on the caller's stream runs after the work before it there;
// another stream can wait for it on the device while the host goes on.
TEST(NcclComm, CallerStreamAndStreamWait) {
  REQUIRE_GPU();
  auto comm = world();
  std::vector<float> values = {5, 6, 7};
  DeviceBuffer<float> src(values), buf(3), copy(std::vector<float>(3, -1));
  Stream work, consumer;
  comm->setStream(work);
  EXPECT_EQ(comm->stream(), static_cast<cudaStream_t>(work));
  StreamGate gate(work);
  CUDA_OK(cudaMemcpyAsync(buf.get(), src.get(), buf.bytes(),
                          cudaMemcpyDeviceToDevice, work));
  CommHandle h = comm->allReduce(buf.get(), 3, DType::F32, true, {30, ""});
  auto before = CommClock::now();
  comm->streamWait(consumer, h);
  CUDA_OK(cudaMemcpyAsync(copy.get(), buf.get(), copy.bytes(),
                          cudaMemcpyDeviceToDevice, consumer));
  // A blocking streamWait would hold until the gate opens, that is forever
  // (or the communicator's timeout); a non-blocking one takes microseconds.
  // 5 s tells them apart on any machine.
  EXPECT_LT(CommClock::now() - before, std::chrono::seconds(5));
  EXPECT_FALSE(comm->test(h)); // Held behind the gate.
  EXPECT_EQ(cudaStreamQuery(consumer), cudaErrorNotReady);
  gate.open();
  CUDA_OK(cudaStreamSynchronize(consumer));
  EXPECT_EQ(copy.download(), values);
  comm->wait(h);
  comm->streamWait(consumer, h); // Complete: nothing to do.
  comm->setStream(comm->internalStream());
}

TEST(NcclComm, TimeoutReportsRankOpAndCollectiveAndStaysPending) {
  REQUIRE_GPU();
  auto comm = world();
  Stream held;
  comm->setStream(held);
  comm->setTimeout(CommDuration(0.2));
  std::vector<std::string> messages;
  comm->setTimeoutHandler([&](const std::string &m) { messages.push_back(m); });
  DeviceBuffer<float> buf(std::vector<float>{2, 4});
  StreamGate gate(held);
  CommHandle h = comm->allReduce(buf.get(), 2, DType::F32, true,
                                 {7, "micro_step, stream reduce: h.0.mlp"});
  EXPECT_THROW(comm->wait(h), CommTimeoutError);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0],
            "zerorun: rank 0 of 1: all_reduce of plan op 7 (micro_step, "
            "stream reduce: h.0.mlp) did not complete within 0.2 s "
            "(--comm-timeout); another rank skipped, reordered or is stuck "
            "before it; aborting every rank");
  EXPECT_TRUE(h.pending());
  gate.open();
  comm->wait(h, CommClock::now() + std::chrono::seconds(30));
  EXPECT_FALSE(h.pending());
  EXPECT_EQ(buf.download(), (std::vector<float>{2, 4}));
}

TEST(NcclCommDeathTest, DefaultTimeoutHandlerAbortsWithOneLine) {
  REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe"); // Fresh CUDA in the child.
  EXPECT_EXIT(
      {
        auto comm = world();
        Stream held;
        comm->setStream(held);
        comm->setTimeout(CommDuration(0.05));
        StreamGate gate(held);
        CommHandle h = comm->barrier({3, "optimizer_step"});
        comm->wait(h);
      },
      ::testing::ExitedWithCode(kCommTimeoutExitCode),
      "zerorun: rank 0 of 1: barrier of plan op 3 \\(optimizer_step\\) did "
      "not complete within 0.05 s");
}

TEST(NcclComm, DuplicateAndSplitKeepSettings) {
  REQUIRE_GPU();
  auto comm = world();
  comm->setTimeout(CommDuration(5));
  std::unique_ptr<Communicator> dup = comm->duplicate();
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->size(), 1);
  EXPECT_EQ(dup->backend(), "nccl");
  EXPECT_EQ(dup->timeout().count(), 5.0);
  auto *nccl = dynamic_cast<NcclCommunicator *>(dup.get());
  ASSERT_TRUE(nccl);
  EXPECT_EQ(nccl->device(), comm->device());
  EXPECT_NE(nccl->internalStream(), comm->internalStream());
  EXPECT_EQ(dup->allReduceScalar(1.5, ScalarOp::Sum, {}), 1.5);
  std::unique_ptr<Communicator> part = comm->split(3, 0);
  ASSERT_TRUE(part);
  EXPECT_EQ(part->timeout().count(), 5.0);
  EXPECT_EQ(comm->split(-1, 0), nullptr);
}
