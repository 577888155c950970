//===- NcclCommMpiTest.cpp - NcclCommunicator over several ranks ----------===//
//
// Run as `mpirun -np N ZerocNcclCommMpiTests`: one GPU per rank, so it
// needs N GPUs on a node (ranks per node <= visible devices). With fewer,
// every rank prints "SKIPPED: ..." and exits with 77, which ctest reports as
// skipped. Each test checks its own rank's result against a hand
// computation, as CommMpiTest.cpp does for the MPI backend, with device
// buffers and NCCL's arithmetic (16-bit sums accumulate in 16 bits;
// averages multiply by 1/n first). `--timeout-scenario` runs the abort
// path: rank 1 skips a collective, rank 0's wait aborts the job.
//
//===----------------------------------------------------------------------===//

#include "comm/MpiCommunicator.h"
#include "comm/NcclCommunicator.h"
#include "zeroc/Support/Float16.h"

#include "../MpiTestMain.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

constexpr int kSkipExitCode = 77;

std::unique_ptr<NcclCommunicator> world() {
  std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::world();
  comm->setTimeout(CommDuration(60)); // A desynchronizing bug ends the run.
  return comm;
}

/// `values` copied to a new device buffer, and back.
template <typename T> class DeviceBuffer {
public:
  explicit DeviceBuffer(const std::vector<T> &values) : count(values.size()) {
    if (cudaMalloc(reinterpret_cast<void **>(&ptr), bytes()) != cudaSuccess ||
        cudaMemcpy(ptr, values.data(), bytes(), cudaMemcpyHostToDevice) !=
            cudaSuccess)
      throw std::runtime_error("cannot fill a device buffer");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  T *get() const { return ptr; }
  std::vector<T> download() const {
    std::vector<T> values(count);
    if (cudaMemcpy(values.data(), ptr, bytes(), cudaMemcpyDeviceToHost) !=
        cudaSuccess)
      throw std::runtime_error("cannot read a device buffer");
    return values;
  }

private:
  size_t bytes() const { return count * sizeof(T); }
  T *ptr = nullptr;
  size_t count;
};

} // namespace

TEST(NcclMpiComm, RankAndSizeMatchTheWorld) {
  auto comm = world();
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->size(), size);
}

TEST(NcclMpiComm, AllGatherF32AndInPlaceBf16) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  DeviceBuffer<float> send({10.0f * r, 10.0f * r + 1, 10.0f * r + 2});
  DeviceBuffer<float> recv(std::vector<float>(size_t(3 * n), -1));
  CommHandle h =
      comm->allGather(send.get(), 3, recv.get(), DType::F32, {0, ""});
  comm->wait(h);
  std::vector<float> all = recv.download();
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(all[size_t(3 * p + i)], 10.0f * p + i);

  std::vector<uint16_t> full(size_t(2 * n), 0);
  full[size_t(2 * r)] = floatToBf16(float(r) + 0.5f);
  full[size_t(2 * r + 1)] = floatToBf16(-float(r));
  DeviceBuffer<uint16_t> buf(full);
  h = comm->allGather(buf.get() + 2 * r, 2, buf.get(), DType::BF16, {1, ""});
  comm->wait(h);
  full = buf.download();
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(bf16ToFloat(full[size_t(2 * p)]), float(p) + 0.5f);
    EXPECT_EQ(bf16ToFloat(full[size_t(2 * p + 1)]), -float(p));
  }
}

// Rank p sends (p + 1) + j at index j; rank r receives r elements (rank 0
// none): unequal counts, so one ncclReduce per root. The sum over ranks is
// n(n+1)/2 + n j (exact); the average multiplies by fl(1/n) first
// (ncclAvg is NCCL's PreMulSum for floats). So each term is off by 2 u
// relative (u = 2^-24), the n - 1 additions by u each and the test's
// sum / n by u: at most (n + 2) u sum / n, 1.2e-7 sum at n = 2. The
// tolerance, 1e-6 sum, is 8 to 13 times that for n = 2 to 8; not measured
// (written without a GPU), so left as it was.
TEST(NcclMpiComm, ReduceScatterVariableCounts) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<int64_t> counts;
  for (int p = 0; p < n; ++p)
    counts.push_back(p);
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  std::vector<float> values(static_cast<size_t>(total));
  for (int64_t j = 0; j < total; ++j)
    values[size_t(j)] = float(r + 1) + float(j);
  DeviceBuffer<float> send(values);
  int64_t begin = int64_t(r) * (r - 1) / 2;
  for (bool average : {false, true}) {
    DeviceBuffer<float> recv(std::vector<float>(size_t(std::max(r, 1)), -1));
    CommHandle h = comm->reduceScatter(send.get(), counts, recv.get(),
                                       DType::F32, average, {2, ""});
    comm->wait(h);
    std::vector<float> got = recv.download();
    for (int i = 0; i < r; ++i) {
      float sum = float(n * (n + 1) / 2) + float(n) * float(begin + i);
      if (average)
        EXPECT_NEAR(got[size_t(i)], sum / float(n), 1e-6f * sum) << i;
      else
        EXPECT_EQ(got[size_t(i)], sum) << i;
    }
  }
}

// Stage 1's form: each rank's block of the flat buffer receives its part.
TEST(NcclMpiComm, ReduceScatterEqualCountsInPlace) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<float> values(size_t(2 * n));
  for (int j = 0; j < 2 * n; ++j)
    values[size_t(j)] = float(j + r);
  DeviceBuffer<float> buf(values);
  CommHandle h =
      comm->reduceScatter(buf.get(), std::vector<int64_t>(size_t(n), 2),
                          buf.get() + 2 * r, DType::F32, false, {3, ""});
  comm->wait(h);
  std::vector<float> got = buf.download();
  float rankSum = float(n * (n - 1) / 2);
  EXPECT_EQ(got[size_t(2 * r)], float(n * 2 * r) + rankSum);
  EXPECT_EQ(got[size_t(2 * r + 1)], float(n * (2 * r + 1)) + rankSum);
}

// A flat group's bucket (ShardLayout.h): counts from
// FlatGroupLayout::receiveCounts, which are unequal for a bucket that does not
// start at a partition boundary.
TEST(NcclMpiComm, ReduceScatterOfAFlatGroupBucket) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  FlatGroupLayout layout({5, 7, 3}, n);
  ElementRange bucket{2, layout.padded - 1};
  std::vector<int64_t> counts = layout.receiveCounts(bucket);
  std::vector<float> values;
  for (int64_t i = bucket.begin; i < bucket.end; ++i)
    values.push_back(float(i + r));
  DeviceBuffer<float> send(values);
  ElementRange mine = bucket.intersect(layout.partition(r));
  DeviceBuffer<float> recv(std::vector<float>(size_t(mine.size()) + 1, -1));
  CommHandle h = comm->reduceScatter(send.get(), counts, recv.get(), DType::F32,
                                     false, {4, "bucket"});
  comm->wait(h);
  std::vector<float> got = recv.download();
  float rankSum = float(n * (n - 1) / 2);
  for (int64_t i = 0; i < mine.size(); ++i)
    EXPECT_EQ(got[size_t(i)], float(n) * float(mine.begin + i) + rankSum);
}

// bf16 sums accumulate in bf16 in NCCL: rank 0 sends 256, the others 0.75.
// The exact sum is 256 + 0.75 (n - 1); each partial sum rounds to bf16
// (spacing 2 in [256, 512)), so the result may differ from the MPI
// backend's single rounding by up to about (n - 1) roundings: (n - 1) u
// exact with u = 2^-8; the tolerance is n u exact. A chain that starts at
// 256 rounds every 256.75 back to 256, an error of 0.75 (n - 1), that is
// 0.75 (n - 1) / n of the tolerance; one that starts elsewhere errs less
// (0.75 + 0.75 + 256 = 257.5 rounds to 258). Not run here (no GPU).
TEST(NcclMpiComm, Bf16SumsRoundAtEachHop) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  DeviceBuffer<uint16_t> buf(
      std::vector<uint16_t>(4, floatToBf16(r == 0 ? 256.0f : 0.75f)));
  CommHandle h = comm->allReduce(buf.get(), 4, DType::BF16, false, {5, ""});
  comm->wait(h);
  float exact = 256.0f + 0.75f * float(n - 1);
  float tolerance = float(n) * std::ldexp(1.0f, -8) * exact;
  for (uint16_t bits : buf.download())
    EXPECT_NEAR(bf16ToFloat(bits), exact, tolerance);
}

TEST(NcclMpiComm, AllReduceF32AndF16) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<float> values(50);
  for (int i = 0; i < 50; ++i)
    values[size_t(i)] = float(i * (r + 1));
  DeviceBuffer<float> sum(values);
  DeviceBuffer<uint16_t> half({floatToF16(float(r)), floatToF16(0.5f)});
  CommHandle h1 = comm->allReduce(sum.get(), 50, DType::F32, false, {6, ""});
  CommHandle h2 = comm->allReduce(half.get(), 2, DType::F16, false, {7, ""});
  comm->wait(h1);
  comm->wait(h2);
  float ranks = float(n * (n + 1) / 2);
  std::vector<float> got = sum.download();
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(got[size_t(i)], float(i) * ranks);
  std::vector<uint16_t> halves = half.download();
  EXPECT_EQ(f16ToFloat(halves[0]), float(n * (n - 1) / 2)); // Exact in f16.
  EXPECT_EQ(f16ToFloat(halves[1]), 0.5f * float(n));
}

TEST(NcclMpiComm, BroadcastFromTheLastRank) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<int32_t> values(10, -1);
  if (r == n - 1)
    std::iota(values.begin(), values.end(), 100);
  DeviceBuffer<int32_t> buf(values);
  CommHandle h = comm->broadcast(buf.get(), 10, DType::I32, n - 1, {8, ""});
  comm->wait(h);
  std::vector<int32_t> got = buf.download();
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(got[size_t(i)], 100 + i);
}

TEST(NcclMpiComm, ScalarSumAndMaxAndBarrier) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  EXPECT_EQ(comm->allReduceScalar(double(r + 1), ScalarOp::Sum, {9, ""}),
            double(n * (n + 1) / 2));
  EXPECT_EQ(
      comm->allReduceScalar(r == n - 1 ? 1.0 : 0.0, ScalarOp::Max, {10, ""}),
      1.0);
  CommHandle b = comm->barrier({11, "barrier"});
  comm->wait(b);
}

// A bucket's collectives in one group: an uneven reduce-scatter (itself a
// group of reduces) beside a gather.
TEST(NcclMpiComm, GroupOfABucket) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<int64_t> counts(size_t(n), 1);
  counts[0] = 2; // Unequal.
  std::vector<float> values(size_t(n + 1), float(r));
  DeviceBuffer<float> send(values), recv(std::vector<float>(2, -1));
  DeviceBuffer<float> shard({float(r)}),
      full(std::vector<float>(size_t(n), -1.0f));
  comm->beginGroup();
  CommHandle red = comm->reduceScatter(send.get(), counts, recv.get(),
                                       DType::F32, false, {12, ""});
  CommHandle gat =
      comm->allGather(shard.get(), 1, full.get(), DType::F32, {13, ""});
  comm->endGroup();
  comm->wait(red);
  comm->wait(gat);
  std::vector<float> got = recv.download();
  for (int64_t i = 0; i < counts[size_t(r)]; ++i)
    EXPECT_EQ(got[size_t(i)], float(n * (n - 1) / 2));
  std::vector<float> gathered = full.download();
  for (int p = 0; p < n; ++p)
    EXPECT_EQ(gathered[size_t(p)], float(p));
}

// One communicator per plan stream: ranks may start a gather-stream and a
// reduce-stream collective in opposite orders; each pair still matches.
TEST(NcclMpiComm, StreamsOnSeparateCommunicatorsMayInterleave) {
  auto base = world();
  std::unique_ptr<Communicator> gather = base->duplicate();
  std::unique_ptr<Communicator> reduce = base->duplicate();
  EXPECT_EQ(gather->timeout().count(), 60.0);
  int n = base->size(), r = base->rank();
  DeviceBuffer<float> shard({float(r)}),
      full(std::vector<float>(size_t(n), -1.0f));
  DeviceBuffer<float> grad({1.0f});
  CommHandle g, red;
  if (r % 2 == 0) {
    g = gather->allGather(shard.get(), 1, full.get(), DType::F32, {20, ""});
    red = reduce->allReduce(grad.get(), 1, DType::F32, false, {21, ""});
  } else {
    red = reduce->allReduce(grad.get(), 1, DType::F32, false, {21, ""});
    g = gather->allGather(shard.get(), 1, full.get(), DType::F32, {20, ""});
  }
  reduce->wait(red);
  gather->wait(g);
  EXPECT_EQ(grad.download()[0], float(n));
  std::vector<float> gathered = full.download();
  for (int p = 0; p < n; ++p)
    EXPECT_EQ(gathered[size_t(p)], float(p));
}

// Expert parallelism's exchanges as zerorun runs them on NCCL: the counts
// through host staging, then the rows as device buffers, there and back.
// As CommMpiTest's ExpertCountExchangeThenRows: 2 experts per rank; rank r
// routes (3 r + e) % 4 rows to expert e, none to rank 0's experts.
TEST(NcclMpiComm, ExpertCountExchangeThenRows) {
  auto comm = world();
  int64_t n = comm->size(), r = comm->rank(), local = 2, h = 3;
  auto routed = [&](int64_t from, int64_t expert) -> int64_t {
    return expert < local ? 0 : (3 * from + expert) % 4;
  };
  std::vector<int64_t> sent;
  for (int64_t e = 0; e < n * local; ++e)
    sent.push_back(routed(r, e));
  std::atomic<bool> cancel{false};
  std::optional<std::vector<int64_t>> received =
      exchangeExpertCounts(*comm, sent, {5, "dispatch counts"}, cancel);
  ASSERT_TRUE(received);
  ASSERT_EQ(received->size(), size_t(n * local));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t l = 0; l < local; ++l)
      EXPECT_EQ((*received)[size_t(s * local + l)], routed(s, r * local + l))
          << "from rank " << s << " for local expert " << l;

  // Row k of expert e from rank r holds {r, e, k}.
  std::vector<float> rows;
  std::vector<int64_t> sendCounts(size_t(n), 0), recvCounts(size_t(n), 0);
  for (int64_t e = 0; e < n * local; ++e)
    for (int64_t k = 0; k < sent[size_t(e)]; ++k) {
      rows.insert(rows.end(), {float(r), float(e), float(k)});
      sendCounts[size_t(e / local)] += h;
    }
  for (int64_t s = 0; s < n; ++s)
    for (int64_t l = 0; l < local; ++l)
      recvCounts[size_t(s)] += h * (*received)[size_t(s * local + l)];
  int64_t total =
      std::accumulate(recvCounts.begin(), recvCounts.end(), int64_t(0));
  // One spare element each, so that no buffer is empty.
  rows.push_back(-1.0f);
  DeviceBuffer<float> rowsD(rows), gotD(std::vector<float>(size_t(total) + 1)),
      backD(std::vector<float>(rows.size(), -1.0f));
  CommHandle d = comm->allToAllV(rowsD.get(), sendCounts, gotD.get(),
                                 recvCounts, DType::F32, {6, "dispatch"});
  comm->wait(d);
  std::vector<float> got = gotD.download();
  size_t at = 0;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t l = 0; l < local; ++l)
      for (int64_t k = 0; k < routed(s, r * local + l); ++k) {
        EXPECT_EQ(got[at], float(s));
        EXPECT_EQ(got[at + 1], float(r * local + l));
        EXPECT_EQ(got[at + 2], float(k));
        at += 3;
      }
  EXPECT_EQ(int64_t(at), total);
  CommHandle c = comm->allToAllV(gotD.get(), recvCounts, backD.get(),
                                 sendCounts, DType::F32, {7, "combine"});
  comm->wait(c);
  EXPECT_EQ(backD.download(), rows);
}

TEST(NcclMpiComm, SplitByParity) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::unique_ptr<Communicator> half = comm->split(r % 2, r);
  ASSERT_TRUE(half);
  EXPECT_EQ(half->size(), (n + 1 - r % 2) / 2);
  EXPECT_EQ(half->rank(), r / 2);
  double expected = 0;
  for (int p = r % 2; p < n; p += 2)
    expected += p;
  EXPECT_EQ(half->allReduceScalar(double(r), ScalarOp::Sum, {}), expected);
  std::unique_ptr<Communicator> none = comm->split(r == 0 ? -1 : 0, 0);
  EXPECT_EQ(none == nullptr, r == 0);
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

namespace {

/// Rank 1 never starts the all-reduce that rank 0 waits for: rank 0 must
/// print the timeout line, abort NCCL and the MPI job (ctest checks the
/// output).
int timeoutScenario() {
  std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::world();
  comm->setTimeout(CommDuration(0.5));
  if (comm->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::printf("timeout scenario: rank %d was not aborted\n", comm->rank());
    return 1;
  }
  DeviceBuffer<float> x({1.0f});
  CommHandle h =
      comm->allReduce(x.get(), 1, DType::F32, false, {42, "skipped by rank 1"});
  comm->wait(h);
  std::printf("timeout scenario: wait returned\n");
  return 1;
}

/// Empty when every rank has a GPU of its own; else why not (the same
/// answer on every rank).
std::string whyNot() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                      &node);
  int local = 1;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess)
    devices = 0;
  int enough = devices >= local, all = 0;
  MPI_Allreduce(&enough, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all)
    return "";
  return "a node has fewer visible CUDA GPUs than ranks (this one: " +
         std::to_string(devices) + " for " + std::to_string(local) +
         "); NCCL needs one per rank";
}

} // namespace

int main(int argc, char **argv) {
  MpiSession mpi(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string skip = whyNot();
  if (!skip.empty()) {
    if (rank == 0)
      std::printf("SKIPPED: %s\n", skip.c_str());
    return kSkipExitCode;
  }
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--timeout-scenario") == 0)
      return timeoutScenario();

  return zeroc::testing::runTestsOnEveryRank(argc, argv);
}
