//===- CommMpiTest.cpp - MpiCommunicator tests, run under mpirun ----------===//
//
// Every rank runs every test, so the collectives match; each test checks
// its own rank's result against a hand computation. Run as
//   mpirun -np N ZerocCommMpiTests
// Only rank 0 prints gtest's report; other ranks print their failures.
// `--timeout-scenario` instead runs the abort path: rank 1 skips a
// collective and rank 0's wait aborts the job (registered with ctest to
// expect the one-line message); `--peer-failure-scenario`, rank 1 fails on
// its own and rank 0 prints its error; `--channel-scenario`, the same over
// the failure channel alone (as the NCCL backend uses it).
//
//===----------------------------------------------------------------------===//

#include "comm/FailureChannel.h"
#include "comm/MpiCommunicator.h"
#include "zeroc/Support/Float16.h"

#include "MpiTestMain.h"

#include <gtest/gtest.h>

#include <cstring>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <numeric>
#include <thread>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

std::unique_ptr<MpiCommunicator> world() {
  std::unique_ptr<MpiCommunicator> comm = MpiCommunicator::world();
  // A bug that desynchronizes the ranks ends the run instead of hanging it.
  comm->setTimeout(CommDuration(60));
  return comm;
}

void waitAll(Communicator &comm, CommHandle &h) {
  comm.wait(h);
  ASSERT_FALSE(h.pending());
}

} // namespace

TEST(MpiComm, RankAndSizeMatchTheWorld) {
  auto comm = world();
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->size(), size);
  EXPECT_EQ(comm->backend(), "mpi");
}

// zerorun compares the plan each rank read (its CRC-32C): a file changed on
// disk between the ranks' reads is reported on every rank, naming it.
TEST(MpiComm, CheckSameOnEveryRankNamesTheFileOnEveryRank) {
  auto comm = world();
  EXPECT_EQ(checkSameOnEveryRank(*comm, 0xdeadbeef, "plan.json"), std::nullopt);
  std::optional<std::string> differs = checkSameOnEveryRank(
      *comm, 0x1000u + unsigned(comm->rank()), "plan.json");
  if (comm->size() == 1) {
    EXPECT_EQ(differs, std::nullopt);
    return;
  }
  ASSERT_TRUE(differs.has_value());
  char expected[96];
  std::snprintf(expected, sizeof expected,
                "plan.json differs between ranks: CRC-32C 0x%08x on rank %d, "
                "from 0x00001000 to 0x%08x",
                0x1000u + unsigned(comm->rank()), comm->rank(),
                0x1000u + unsigned(comm->size() - 1));
  EXPECT_NE(differs->find(expected), std::string::npos) << *differs;
}

TEST(MpiComm, AllGatherF32) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<float> send = {10.0f * r, 10.0f * r + 1, 10.0f * r + 2};
  std::vector<float> recv(size_t(3 * n), -1);
  CommHandle h =
      comm->allGather(send.data(), 3, recv.data(), DType::F32, {0, "gather"});
  waitAll(*comm, h);
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(recv[size_t(3 * p + i)], 10.0f * p + i);
}

TEST(MpiComm, AllGatherBf16InPlace) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  // Stage 3's gather: each rank's shard already sits in its slot.
  std::vector<uint16_t> full(size_t(2 * n), 0);
  full[size_t(2 * r)] = floatToBf16(float(r) + 0.5f);
  full[size_t(2 * r + 1)] = floatToBf16(-float(r));
  CommHandle h = comm->allGather(full.data() + 2 * r, 2, full.data(),
                                 DType::BF16, {1, "in place"});
  waitAll(*comm, h);
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(bf16ToFloat(full[size_t(2 * p)]), float(p) + 0.5f);
    EXPECT_EQ(bf16ToFloat(full[size_t(2 * p + 1)]), -float(p));
  }
}

// Rank p sends value (p + 1) + j at index j; rank r receives counts[r] = r
// elements (rank 0 none), the block starting at r(r-1)/2. The sum over
// ranks is n(n+1)/2 + n j.
TEST(MpiComm, ReduceScatterVariableCountsF32) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<int64_t> counts;
  for (int p = 0; p < n; ++p)
    counts.push_back(p);
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  std::vector<float> send(static_cast<size_t>(total));
  for (int64_t j = 0; j < total; ++j)
    send[size_t(j)] = float(r + 1) + float(j);
  int64_t begin = int64_t(r) * (r - 1) / 2;
  for (bool average : {false, true}) {
    std::vector<float> recv(size_t(r), -1);
    CommHandle h = comm->reduceScatter(send.data(), counts, recv.data(),
                                       DType::F32, average, {2, ""});
    waitAll(*comm, h);
    for (int i = 0; i < r; ++i) {
      float sum = float(n * (n + 1) / 2) + float(n) * float(begin + i);
      EXPECT_EQ(recv[size_t(i)], average ? sum / float(n) : sum)
          << "average=" << average << " i=" << i;
    }
  }
}

// recv inside send (the executor reducing a bucket in place): the backend
// receives into scratch, since MPI forbids aliased buffers.
TEST(MpiComm, ReduceScatterIntoItsOwnInput) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<float> buf(size_t(2 * n));
  for (int j = 0; j < 2 * n; ++j)
    buf[size_t(j)] = float(j);
  std::vector<int64_t> counts(size_t(n), 2);
  CommHandle h = comm->reduceScatter(buf.data(), counts, buf.data() + 2 * r,
                                     DType::F32, true, {3, "aliased"});
  waitAll(*comm, h);
  EXPECT_EQ(buf[size_t(2 * r)], float(2 * r));
  EXPECT_EQ(buf[size_t(2 * r + 1)], float(2 * r + 1));
}

// 16-bit inputs are summed in f32 and rounded once. Rank 0 sends 256, the
// others 0.75 (all exact in bf16); f32 sums are exact in any order, so the
// results are fixed: sum 256 + 0.75 (n - 1) and its average, each rounded
// to bf16 (spacing 0.5 in [64, 128), 1 in [128, 256), 2 in [256, 512)).
TEST(MpiComm, ReduceScatterBf16AccumulatesInF32) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<uint16_t> send(size_t(n), floatToBf16(r == 0 ? 256.0f : 0.75f));
  std::vector<int64_t> counts(size_t(n), 1);
  uint16_t sum = 0, avg = 0;
  CommHandle h1 = comm->reduceScatter(send.data(), counts, &sum, DType::BF16,
                                      false, {4, "sum"});
  CommHandle h2 = comm->reduceScatter(send.data(), counts, &avg, DType::BF16,
                                      true, {5, "average"});
  waitAll(*comm, h1);
  waitAll(*comm, h2);
  float exact = 256.0f + 0.75f * float(n - 1);
  EXPECT_EQ(sum, floatToBf16(exact));
  EXPECT_EQ(avg, floatToBf16(exact / float(n)));
  if (n == 2) { // 256.75 -> 256; 128.375 -> 128
    EXPECT_EQ(bf16ToFloat(sum), 256.0f);
    EXPECT_EQ(bf16ToFloat(avg), 128.0f);
  } else if (n == 3) { // 257.5 -> 258; 85.83 -> 86
    EXPECT_EQ(bf16ToFloat(sum), 258.0f);
    EXPECT_EQ(bf16ToFloat(avg), 86.0f);
  } else if (n == 4) { // 258.25 -> 258; 64.5625 -> 64.5
    EXPECT_EQ(bf16ToFloat(sum), 258.0f);
    EXPECT_EQ(bf16ToFloat(avg), 64.5f);
  }
}

// A flat group's bucket: rank r keeps bucket ∩ partition(r), with counts
// from the layout (ShardLayout.h). Rank p sends flat index i as i + p.
TEST(MpiComm, ReduceScatterOfAFlatGroupBucket) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  FlatGroupLayout layout({5, 7, 3}, n);
  ElementRange bucket{2, layout.padded - 1};
  std::vector<int64_t> counts = layout.receiveCounts(bucket);
  std::vector<float> send;
  for (int64_t i = bucket.begin; i < bucket.end; ++i)
    send.push_back(float(i + r));
  ElementRange mine = bucket.intersect(layout.partition(r));
  std::vector<float> recv(size_t(mine.size()), -1);
  CommHandle h = comm->reduceScatter(send.data(), counts, recv.data(),
                                     DType::F32, true, {6, "bucket"});
  waitAll(*comm, h);
  // Average of i + p over p: i + (n - 1) / 2.
  for (int64_t i = 0; i < mine.size(); ++i)
    EXPECT_EQ(recv[size_t(i)], float(mine.begin + i) + float(n - 1) / 2.0f);
}

TEST(MpiComm, AllReduceF32SplitIntoSeveralMessages) {
  auto comm = world();
  comm->setMaxMessageElements(7); // 50 elements: 8 MPI calls.
  int n = comm->size(), r = comm->rank();
  std::vector<float> sum(50), avg(50);
  for (int i = 0; i < 50; ++i)
    sum[size_t(i)] = avg[size_t(i)] = float(i * (r + 1));
  CommHandle h1 = comm->allReduce(sum.data(), 50, DType::F32, false, {7, ""});
  CommHandle h2 = comm->allReduce(avg.data(), 50, DType::F32, true, {8, ""});
  waitAll(*comm, h1);
  waitAll(*comm, h2);
  float ranks = float(n * (n + 1) / 2); // sum of (p + 1)
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(sum[size_t(i)], float(i) * ranks);
    EXPECT_EQ(avg[size_t(i)], float(i) * ranks / float(n));
  }
}

// MpiSession sets malloc to keep MPI's per-collective scratch
// (keepMallocScratch): a block of a collective's size comes from the heap,
// not a fresh mapping, and stays there once freed, so the next collective
// reuses its pages. (Counting the page faults of rounds of concurrent
// all-reduces did not separate the two: about 514 in three rounds without
// the setting, 2-513 with it after the binary's earlier tests at 4 ranks;
// small Llama's 39-gradient all-reduce in zerorun did, 19-25 ms against
// 13-17: bench/RESULTS.md, run 46.) The rounds check the results.
TEST(MpiSession, CollectivesReuseTheirScratch) {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)
  auto comm = world();
  const int64_t n = int64_t(1) << 19; // 2 MiB of f32 a tensor
  std::vector<std::vector<float>> grads(6, std::vector<float>(size_t(n), 1));
  auto round = [&] {
    std::vector<CommHandle> hs;
    for (std::vector<float> &g : grads)
      hs.push_back(comm->allReduce(g.data(), n, DType::F32, true, {}));
    for (CommHandle &h : hs)
      waitAll(*comm, h);
  };
  for (int i = 0; i < 3; ++i)
    round();
  EXPECT_EQ(grads[5][0], 1.0f);

  const size_t bytes = size_t(20) << 20;
  struct mallinfo2 held = mallinfo2();
  char *p = static_cast<char *>(std::malloc(bytes));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, bytes);
  EXPECT_EQ(mallinfo2().hblkhd, held.hblkhd) << "a fresh mapping";
  std::free(p);
  EXPECT_GE(mallinfo2().fordblks, bytes) << "the heap was trimmed";
#else
  GTEST_SKIP() << "glibc 2.33's malloc settings and mallinfo2 only";
#endif
}

TEST(MpiComm, AllReduceBf16AndF16) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<uint16_t> bf = {floatToBf16(float(r)), floatToBf16(1.0f)};
  std::vector<uint16_t> hf = {floatToF16(float(r)), floatToF16(0.5f)};
  CommHandle h1 = comm->allReduce(bf.data(), 2, DType::BF16, true, {9, ""});
  CommHandle h2 = comm->allReduce(hf.data(), 2, DType::F16, false, {10, ""});
  waitAll(*comm, h1);
  waitAll(*comm, h2);
  float rankSum = float(n * (n - 1) / 2);
  EXPECT_EQ(bf16ToFloat(bf[0]), bf16ToFloat(floatToBf16(rankSum / float(n))));
  EXPECT_EQ(bf16ToFloat(bf[1]), 1.0f);
  EXPECT_EQ(f16ToFloat(hf[0]), rankSum);
  EXPECT_EQ(f16ToFloat(hf[1]), 0.5f * float(n));
}

TEST(MpiComm, BroadcastFromTheLastRank) {
  auto comm = world();
  comm->setMaxMessageElements(3);
  int n = comm->size(), r = comm->rank();
  std::vector<int32_t> buf(10, r == n - 1 ? 0 : -1);
  if (r == n - 1)
    std::iota(buf.begin(), buf.end(), 100);
  CommHandle h = comm->broadcast(buf.data(), 10, DType::I32, n - 1, {11, ""});
  waitAll(*comm, h);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(buf[size_t(i)], 100 + i);
}

TEST(MpiComm, ScalarSumAndMax) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  // A gradient norm's squares, and an overflow flag only the last rank set.
  EXPECT_EQ(comm->allReduceScalar(double(r + 1), ScalarOp::Sum, {12, "norm"}),
            double(n * (n + 1) / 2));
  EXPECT_EQ(comm->allReduceScalar(r == n - 1 ? 1.0 : 0.0, ScalarOp::Max,
                                  {13, "overflow"}),
            1.0);
  double both[2] = {0.5, double(r)};
  CommHandle h = comm->allReduceScalars(both, 2, ScalarOp::Max, {14, ""});
  waitAll(*comm, h);
  EXPECT_EQ(both[0], 0.5);
  EXPECT_EQ(both[1], double(n - 1));
  CommHandle b = comm->barrier({15, "barrier"});
  waitAll(*comm, b);
}

// Why one communicator per stream: the plan orders collectives per stream,
// so ranks may start a gather-stream and a reduce-stream collective in
// opposite orders. On two communicators each pair still matches.
TEST(MpiComm, StreamsOnSeparateCommunicatorsMayInterleave) {
  auto base = world();
  std::unique_ptr<Communicator> gather = base->duplicate();
  std::unique_ptr<Communicator> reduce = base->duplicate();
  EXPECT_EQ(gather->timeout().count(), 60.0);
  int n = base->size(), r = base->rank();
  float shard = float(r), grad = 1.0f;
  std::vector<float> full(static_cast<size_t>(n));
  CommHandle g, red;
  if (r % 2 == 0) {
    g = gather->allGather(&shard, 1, full.data(), DType::F32, {20, ""});
    red = reduce->allReduce(&grad, 1, DType::F32, false, {21, ""});
  } else {
    red = reduce->allReduce(&grad, 1, DType::F32, false, {21, ""});
    g = gather->allGather(&shard, 1, full.data(), DType::F32, {20, ""});
  }
  reduce->wait(red);
  gather->wait(g);
  EXPECT_EQ(grad, float(n));
  for (int p = 0; p < n; ++p)
    EXPECT_EQ(full[size_t(p)], float(p));
}

TEST(MpiComm, SplitByParity) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::unique_ptr<Communicator> half = comm->split(r % 2, r);
  ASSERT_TRUE(half);
  EXPECT_EQ(half->size(), (n + 1 - r % 2) / 2);
  EXPECT_EQ(half->rank(), r / 2);
  // The sum of the world ranks of my parity.
  double expected = 0;
  for (int p = r % 2; p < n; p += 2)
    expected += p;
  EXPECT_EQ(half->allReduceScalar(double(r), ScalarOp::Sum, {}), expected);
  std::unique_ptr<Communicator> none = comm->split(r == 0 ? -1 : 0, 0);
  EXPECT_EQ(none == nullptr, r == 0);
}

// Expert parallelism's exchange with variable counts, as a router makes
// them: rank p sends (p + q) % 3 rows of 2 to rank q, row k of them
// {100 p + 10 q + k, -(100 p + 10 q + k)}; rank r then holds, in rank order,
// the (s + r) % 3 rows of each rank s. Counts of zero included.
TEST(MpiComm, AllToAllVariableCountsF32) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  auto rows = [](int from, int to) { return (from + to) % 3; };
  std::vector<int64_t> sendCounts, recvCounts;
  std::vector<float> send;
  for (int q = 0; q < n; ++q) {
    sendCounts.push_back(2 * rows(r, q));
    recvCounts.push_back(2 * rows(q, r));
    for (int k = 0; k < rows(r, q); ++k) {
      float v = float(100 * r + 10 * q + k);
      send.insert(send.end(), {v, -v});
    }
  }
  std::vector<float> recv(
      size_t(std::accumulate(recvCounts.begin(), recvCounts.end(), int64_t(0))),
      0.5f);
  CommTraffic before = comm->traffic();
  CommHandle h = comm->allToAllV(send.data(), sendCounts, recv.data(),
                                 recvCounts, DType::F32, {3, "dispatch"});
  waitAll(*comm, h);
  size_t at = 0;
  for (int s = 0; s < n; ++s)
    for (int k = 0; k < rows(s, r); ++k) {
      float v = float(100 * s + 10 * r + k);
      EXPECT_EQ(recv[at++], v) << "from rank " << s << " row " << k;
      EXPECT_EQ(recv[at++], -v);
    }
  EXPECT_EQ(at, recv.size());
  // Traffic: the whole send buffer, of which all but this rank's own block
  // left it.
  CommTraffic::Volume v =
      comm->traffic().since(before)[CollectiveKind::AllToAll];
  EXPECT_EQ(v.collectives, 1);
  EXPECT_EQ(v.elements, int64_t(send.size()));
  EXPECT_EQ(v.elementsPerRank, double(send.size()) - 2.0 * rows(r, r));
}

// The dispatch's count exchange, then its rows, as zerorun runs them: 2
// experts per rank; rank r routes (3 r + e) % 4 rows to expert e (counts of
// 0 included), and no rank routes any row to rank 0's experts, whose rank
// then receives nothing. Each rank learns, per source and local expert, the
// counts the sources decided; the rows then arrive grouped by source, then
// expert, and the reverse exchange (the combine) returns each rank's rows.
TEST(MpiComm, ExpertCountExchangeThenRows) {
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
  if (r == 0) {
    for (int64_t c : *received)
      EXPECT_EQ(c, 0);
  }

  // The rows: dispatch order (by expert), row k of expert e from rank r
  // holding {r, e, k}.
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
  std::vector<float> got(size_t(
      std::accumulate(recvCounts.begin(), recvCounts.end(), int64_t(0))));
  CommHandle d = comm->allToAllV(rows.data(), sendCounts, got.data(),
                                 recvCounts, DType::F32, {6, "dispatch"});
  waitAll(*comm, d);
  size_t at = 0;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t l = 0; l < local; ++l)
      for (int64_t k = 0; k < routed(s, r * local + l); ++k) {
        EXPECT_EQ(got[at], float(s));
        EXPECT_EQ(got[at + 1], float(r * local + l));
        EXPECT_EQ(got[at + 2], float(k));
        at += 3;
      }
  EXPECT_EQ(at, got.size());
  std::vector<float> back(rows.size(), -1.0f);
  CommHandle c = comm->allToAllV(got.data(), recvCounts, back.data(),
                                 sendCounts, DType::F32, {7, "combine"});
  waitAll(*comm, c);
  EXPECT_EQ(back, rows);
}

TEST(MpiComm, ExpertCountExchangeRefusesBadCounts) {
  auto comm = world();
  std::atomic<bool> cancel{false};
  // Experts that do not split over the ranks (3 over 2 or 4; 2 over 3).
  std::vector<int64_t> uneven(size_t(comm->size() == 3 ? 2 : 3), 1);
  EXPECT_THROW(exchangeExpertCounts(*comm, uneven, {}, cancel),
               std::invalid_argument);
  std::vector<int64_t> negative(size_t(comm->size()), 1);
  negative[0] = -1;
  EXPECT_THROW(exchangeExpertCounts(*comm, negative, {}, cancel),
               std::invalid_argument);
}

// 16-bit rows travel as bits; the combine brings them back: dispatch then
// the reverse exchange returns every rank's rows unchanged.
TEST(MpiComm, AllToAllBf16RoundTrip) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::vector<int64_t> counts;
  std::vector<uint16_t> send;
  for (int q = 0; q < n; ++q) {
    counts.push_back(q + 1); // Rank r sends q + 1 elements to rank q.
    for (int k = 0; k <= q; ++k)
      send.push_back(floatToBf16(float(r) + 0.25f * float(k)));
  }
  std::vector<int64_t> recvCounts(size_t(n), r + 1);
  std::vector<uint16_t> recv(size_t(n * (r + 1)), 0);
  CommHandle h = comm->allToAllV(send.data(), counts, recv.data(), recvCounts,
                                 DType::BF16, {4, "dispatch"});
  waitAll(*comm, h);
  for (int s = 0; s < n; ++s)
    for (int k = 0; k <= r; ++k)
      EXPECT_EQ(bf16ToFloat(recv[size_t(s * (r + 1) + k)]),
                float(s) + 0.25f * float(k));
  std::vector<uint16_t> back(send.size(), 0);
  h = comm->allToAllV(recv.data(), recvCounts, back.data(), counts, DType::BF16,
                      {5, "combine"});
  waitAll(*comm, h);
  EXPECT_EQ(back, send);
}

TEST(MpiComm, AllToAllRefusesBadCounts) {
  auto comm = world();
  std::vector<float> buf(8, 0), out(8, 0);
  std::vector<int64_t> few(size_t(comm->size() + 1), 0),
      ok(size_t(comm->size()), 0), negative(size_t(comm->size()), 0);
  negative[0] = -1;
  EXPECT_THROW(comm->allToAllV(buf.data(), few, out.data(), ok, DType::F32, {}),
               std::invalid_argument);
  EXPECT_THROW(
      comm->allToAllV(buf.data(), ok, out.data(), negative, DType::F32, {}),
      std::invalid_argument);
  std::vector<int64_t> one(size_t(comm->size()), 1);
  EXPECT_THROW(
      comm->allToAllV(buf.data(), one, buf.data() + 1, one, DType::F32, {}),
      std::invalid_argument);
}

// DeepSpeed's expert-parallel groups (groups._create_expert_and_data_
// parallel): with ep_size 2, ranks {0, 1}, {2, 3}, ... split the experts;
// the expert-data-parallel groups {0, 2, ...} and {1, 3, ...} hold the
// same experts. Split by color rank / ep and rank % ep, each group's sum of
// world ranks is the hand-computed one.
TEST(MpiComm, ExpertParallelAndExpertDataParallelGroups) {
  auto comm = world();
  int n = comm->size(), r = comm->rank(), ep = 2;
  if (n % ep != 0)
    GTEST_SKIP() << "ep_size 2 needs an even world size";
  std::unique_ptr<Communicator> expert = comm->split(r / ep, r);
  std::unique_ptr<Communicator> expertData = comm->split(r % ep, r);
  ASSERT_TRUE(expert && expertData);
  EXPECT_EQ(expert->size(), ep);
  EXPECT_EQ(expert->rank(), r % ep);
  EXPECT_EQ(expertData->size(), n / ep);
  EXPECT_EQ(expertData->rank(), r / ep);
  double epSum = 0, edpSum = 0;
  for (int p = (r / ep) * ep; p < (r / ep + 1) * ep; ++p)
    epSum += p;
  for (int p = r % ep; p < n; p += ep)
    edpSum += p;
  EXPECT_EQ(expert->allReduceScalar(double(r), ScalarOp::Sum, {}), epSum);
  EXPECT_EQ(expertData->allReduceScalar(double(r), ScalarOp::Sum, {}), edpSum);
  // A token exchange inside the expert-parallel group: one value each way.
  std::vector<float> send = {float(r), float(r) + 0.5f}, recv(2, -1);
  std::vector<int64_t> ones(size_t(ep), 1);
  CommHandle h = expert->allToAllV(send.data(), ones, recv.data(), ones,
                                   DType::F32, {6, "dispatch"});
  expert->wait(h);
  int base = (r / ep) * ep;
  EXPECT_EQ(recv[0], float(base) + 0.5f * float(r % ep));
  EXPECT_EQ(recv[1], float(base + 1) + 0.5f * float(r % ep));
}

// Rank 0's wait gives up while the other ranks are late; with a handler
// that returns, the collective stays pending and completes once they
// arrive. (The default handler aborts: see --timeout-scenario.)
TEST(MpiComm, TimeoutNamesRankOpAndCollectiveAndStaysPending) {
  auto comm = world();
  int n = comm->size(), r = comm->rank();
  std::string message;
  comm->setTimeoutHandler([&](const std::string &m) { message = m; });
  float x = 1.0f;
  if (r != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  CommHandle h = comm->allReduce(&x, 1, DType::F32, false,
                                 {42, "micro_step, stream reduce: lm_head"});
  if (r == 0) {
    EXPECT_THROW(
        comm->wait(h, CommClock::now() + std::chrono::milliseconds(200)),
        CommTimeoutError);
    EXPECT_EQ(message.rfind("zerorun: rank 0 of " + std::to_string(n) +
                                ": all_reduce of plan op 42 (micro_step, "
                                "stream reduce: lm_head) did not complete "
                                "within ",
                            0),
              0u)
        << message;
    EXPECT_TRUE(h.pending());
  }
  comm->wait(h);
  EXPECT_EQ(x, float(n));
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

namespace {

/// Rank 1 never starts the all-reduce that rank 0 waits for: rank 0 must
/// print the timeout line and abort the job (ctest checks the output).
int timeoutScenario() {
  std::unique_ptr<MpiCommunicator> comm = MpiCommunicator::world();
  comm->setTimeout(CommDuration(0.5));
  if (comm->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::printf("timeout scenario: rank %d was not aborted\n", comm->rank());
    return 1;
  }
  float x = 1.0f;
  CommHandle h =
      comm->allReduce(&x, 1, DType::F32, false, {42, "skipped by rank 1"});
  comm->wait(h);
  std::printf("timeout scenario: wait returned\n");
  return 1;
}

/// Rank 1 fails on its own (as zerorun's rank whose NVMe swap file was
/// truncated): it announces its error and aborts the job. Rank 0, waiting
/// for an all-reduce rank 1 never starts, must print rank 1's error before
/// the abort (ctest checks the output).
int peerFailureScenario() {
  std::unique_ptr<MpiCommunicator> comm = MpiCommunicator::world();
  if (comm->rank() == 1) {
    comm->announceFailure("/nvme/zerorun-7-rank1/exp_avg.swp: the NVMe swap "
                          "file ends after 0 of 4096 bytes");
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (comm->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    std::printf("peer failure scenario: rank %d was not aborted\n",
                comm->rank());
    return 1;
  }
  float x = 1.0f;
  CommHandle h =
      comm->allReduce(&x, 1, DType::F32, false, {7, "never started by rank 1"});
  comm->wait(h);
  std::printf("peer failure scenario: wait returned\n");
  return 1;
}

/// The failure channel without an MpiCommunicator, as NcclCommunicator
/// uses it (its world() opens the channel; its waits poll received()):
/// rank 1 announces, rank 0 receives the message and acknowledges, and
/// rank 1's announce returns on the acknowledgement, well before its grace.
int channelScenario() {
  FailureChannel::open();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!FailureChannel::isOpen() || FailureChannel::received()) {
    std::printf("channel scenario: rank %d: channel not open or not empty\n",
                rank);
    return 1;
  }
  if (rank == 1) {
    auto start = CommClock::now();
    FailureChannel::announce("a kernel error on rank 1", CommDuration(30));
    double took =
        std::chrono::duration<double>(CommClock::now() - start).count();
    std::printf("channel scenario: rank 1 acknowledged: %s\n",
                took < 20 ? "yes" : "no (grace ran out)");
    return took < 20 ? 0 : 1;
  }
  if (rank == 0) {
    auto until = CommClock::now() + std::chrono::seconds(20);
    std::optional<std::string> failure;
    while (!(failure = FailureChannel::received()) && CommClock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!failure) {
      std::printf("channel scenario: rank 0 received nothing\n");
      return 1;
    }
    FailureChannel::acknowledge();
    std::printf("channel scenario: rank 0 received: %s\n", failure->c_str());
    return *failure == "rank 1 failed: a kernel error on rank 1" ? 0 : 1;
  }
  return 0;
}

/// On ranks other than 0: only failures, prefixed with the rank.

} // namespace

int main(int argc, char **argv) {
  MpiSession mpi(&argc, &argv);
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--timeout-scenario") == 0)
      return timeoutScenario();
    else if (std::strcmp(argv[i], "--peer-failure-scenario") == 0)
      return peerFailureScenario();
    else if (std::strcmp(argv[i], "--channel-scenario") == 0)
      return channelScenario();

  return zeroc::testing::runTestsOnEveryRank(argc, argv);
}
