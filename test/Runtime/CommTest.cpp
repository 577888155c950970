//===- CommTest.cpp - Communicator tests that need no MPI launch ----------===//
//
// 16-bit conversions, --comm-timeout parsing, the one-rank backend, flat
// bucket counts, and the timeout path of `wait` (with a collective that
// never completes). The MPI backend is tested under mpirun in
// CommMpiTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "comm/Communicator.h"
#include "zeroc/Support/Float16.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>

using namespace zeroc;
using namespace zeroc::runtime;

//===----------------------------------------------------------------------===//
// bf16 / f16
//===----------------------------------------------------------------------===//

TEST(HalfFloat, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  // 257 lies halfway between 256 and 258: even mantissa (256) wins.
  EXPECT_EQ(bf16ToFloat(floatToBf16(257.0f)), 256.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(259.0f)), 260.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(258.25f)), 258.0f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::nanf("")))));
  EXPECT_TRUE(
      std::isinf(bf16ToFloat(floatToBf16(std::numeric_limits<float>::max()))));
}

TEST(HalfFloat, F16NormalsSubnormalsAndOverflow) {
  EXPECT_EQ(floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(floatToF16(-2.5f), 0xc100);
  EXPECT_EQ(floatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(floatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(floatToF16(65520.0f), 0x7c00);         // Rounds to infinity.
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -24)), 1); // Smallest subnormal.
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -25)), 0); // Tie to even: zero.
  EXPECT_EQ(floatToF16(std::ldexp(1.5f, -25)), 1);
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -14)), 0x0400); // Smallest normal.
  EXPECT_EQ(floatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00); // Tie: even.
  EXPECT_EQ(floatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(std::nanf("")))));
  // Every finite f16 survives a round trip through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00)
      continue;
    ASSERT_EQ(floatToF16(f16ToFloat(uint16_t(h))), h) << std::hex << h;
  }
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16ToFloat(0xfc00), -std::numeric_limits<float>::infinity());
}

//===----------------------------------------------------------------------===//
// --comm-timeout
//===----------------------------------------------------------------------===//

TEST(CommTimeout, ParsesSecondsAndUnits) {
  EXPECT_DOUBLE_EQ(parseCommTimeout("1800")->count(), 1800.0);
  EXPECT_DOUBLE_EQ(parseCommTimeout("0.5")->count(), 0.5);
  EXPECT_DOUBLE_EQ(parseCommTimeout("90s")->count(), 90.0);
  EXPECT_DOUBLE_EQ(parseCommTimeout("500ms")->count(), 0.5);
  EXPECT_DOUBLE_EQ(parseCommTimeout("30m")->count(), 1800.0);
  EXPECT_DOUBLE_EQ(parseCommTimeout("30min")->count(), 1800.0);
  EXPECT_DOUBLE_EQ(parseCommTimeout("2h")->count(), 7200.0);
  EXPECT_DOUBLE_EQ(kDefaultCommTimeout.count(), 1800.0);
}

TEST(CommTimeout, RejectsBadDurations) {
  for (const char *bad : {"", "abc", "-5", "0", "10 parsecs", "5d", "nan"}) {
    Expected<CommDuration> d = parseCommTimeout(bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_NE(d.error().message.find("--comm-timeout"), std::string::npos);
    EXPECT_NE(d.error().message.find(std::string("'") + bad + "'"),
              std::string::npos)
        << d.error().message;
  }
}

TEST(CommTimeout, FormatsDurations) {
  EXPECT_EQ(formatDuration(CommDuration(0.25)), "0.25 s");
  EXPECT_EQ(formatDuration(CommDuration(90)), "90 s");
  EXPECT_EQ(formatDuration(kDefaultCommTimeout), "30 min");
  EXPECT_EQ(formatDuration(CommDuration(7200)), "2 h");
}

//===----------------------------------------------------------------------===//
// LocalCommunicator
//===----------------------------------------------------------------------===//

TEST(LocalCommunicator, IsOneRank) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.backend(), "local");
  EXPECT_EQ(comm.timeout().count(), kDefaultCommTimeout.count());
}

TEST(LocalCommunicator, CollectivesAreCopiesOrNothing) {
  LocalCommunicator comm;
  std::vector<float> send = {1, 2, 3}, recv(3, 0);
  CommHandle h =
      comm.allGather(send.data(), 3, recv.data(), DType::F32, {0, "gather"});
  comm.wait(h);
  EXPECT_FALSE(h.pending());
  EXPECT_EQ(recv, send);

  std::vector<float> out(3, 0);
  h = comm.reduceScatter(send.data(), {3}, out.data(), DType::F32,
                         /*average=*/true, {1, "reduce"});
  comm.wait(h);
  EXPECT_EQ(out, send); // sum / 1

  std::vector<uint16_t> bf(2);
  bf[0] = floatToBf16(0.1f);
  bf[1] = floatToBf16(-3.0f);
  std::vector<uint16_t> before = bf;
  h = comm.allReduce(bf.data(), 2, DType::BF16, /*average=*/true, {2, ""});
  EXPECT_TRUE(comm.test(h));
  EXPECT_EQ(bf, before);

  h = comm.broadcast(bf.data(), 2, DType::BF16, 0, {3, ""});
  comm.wait(h);
  h = comm.barrier({});
  comm.wait(h);

  EXPECT_EQ(comm.allReduceScalar(2.5, ScalarOp::Sum, {4, "norm"}), 2.5);
  EXPECT_EQ(comm.allReduceScalar(1.0, ScalarOp::Max, {5, "overflow"}), 1.0);
}

TEST(LocalCommunicator, RejectsBadArguments) {
  LocalCommunicator comm;
  std::vector<float> buf(4);
  EXPECT_THROW(
      comm.reduceScatter(buf.data(), {2, 2}, buf.data(), DType::F32, false, {}),
      std::invalid_argument);
  try {
    comm.allReduce(buf.data(), 4, DType::I32, false, {});
    FAIL() << "an i32 all-reduce was accepted";
  } catch (const std::invalid_argument &e) {
    EXPECT_STREQ(e.what(),
                 "allReduce: cannot reduce i32 buffers; expected f32, bf16 "
                 "or f16");
  }
  EXPECT_THROW(comm.allGather(buf.data(), -1, buf.data(), DType::F32, {}),
               std::invalid_argument);
  EXPECT_THROW(comm.broadcast(buf.data(), 4, DType::F32, 1, {}),
               std::invalid_argument);
}

// One rank's all-to-all sends its one block to itself; its counts must
// agree.
TEST(LocalCommunicator, AllToAllIsACopy) {
  LocalCommunicator comm;
  std::vector<float> send = {1, 2, 3}, recv(3, 0);
  CommHandle h =
      comm.allToAllV(send.data(), {3}, recv.data(), {3}, DType::F32, {});
  comm.wait(h);
  EXPECT_EQ(recv, send);
  EXPECT_EQ(comm.traffic()[CollectiveKind::AllToAll].elementsPerRank, 0.0);
  EXPECT_THROW(
      comm.allToAllV(send.data(), {3}, recv.data(), {2}, DType::F32, {}),
      std::invalid_argument);
  EXPECT_THROW(
      comm.allToAllV(send.data(), {3, 0}, recv.data(), {3}, DType::F32, {}),
      std::invalid_argument);
}

TEST(LocalCommunicator, DuplicateAndSplitKeepSettings) {
  LocalCommunicator comm;
  comm.setTimeout(CommDuration(5));
  std::unique_ptr<Communicator> dup = comm.duplicate();
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->size(), 1);
  EXPECT_EQ(dup->timeout().count(), 5.0);
  std::unique_ptr<Communicator> part = comm.split(3, 0);
  ASSERT_TRUE(part);
  EXPECT_EQ(part->timeout().count(), 5.0);
  EXPECT_EQ(comm.split(-1, 0), nullptr);
}

//===----------------------------------------------------------------------===//
// Flat-group buckets
//===----------------------------------------------------------------------===//

TEST(BucketCounts, SplitABucketAtPartitionBoundaries) {
  // 5 + 7 + 3 = 15 elements, padded to 16 over 2 ranks (P = 8) and to 18
  // over 3 (P = 6).
  FlatGroupLayout two({5, 7, 3}, 2), three({5, 7, 3}, 3);
  EXPECT_EQ(two.receiveCounts({0, 16}), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(two.receiveCounts({2, 10}), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(two.receiveCounts({12, 15}), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(three.receiveCounts({5, 12}), (std::vector<int64_t>{1, 6, 0}));
}

//===----------------------------------------------------------------------===//
// Timeouts, with a collective that never completes
//===----------------------------------------------------------------------===//

namespace {

struct NeverCompletes : PendingCollective {
  bool test() override { return false; }
};

/// Two ranks in name only: every collective stays pending forever, as if
/// the other rank skipped it; `scripted` hands out collectives that
/// complete as told.
class StuckCommunicator final : public Communicator {
public:
  /// A collective whose data arrives at its `arriveAfter`-th poll, each
  /// event written to `log` ("NAME arrived", "NAME epilogue"); with `split`
  /// its epilogue is apart (as MPI's averaging), else it completes in one
  /// test() (the default arrived()).
  struct Scripted : PendingCollective {
    std::vector<std::string> *log = nullptr;
    int arriveAfter = 1, polls = 0;
    bool split = true;
    bool poll() {
      if (polls >= arriveAfter)
        return true;
      if (++polls < arriveAfter)
        return false;
      log->push_back(collective + " arrived");
      return true;
    }
    bool arrived() override {
      return split ? poll() : PendingCollective::arrived();
    }
    bool test() override {
      if (!poll())
        return false;
      log->push_back(collective + " epilogue");
      return true;
    }
  };
  CommHandle scripted(const char *name, int arriveAfter, bool split,
                      std::vector<std::string> &log) {
    auto p = makePending<Scripted>(name, OpLabel{});
    p->log = &log;
    p->arriveAfter = arriveAfter;
    p->split = split;
    return CommHandle(std::move(p));
  }

  int rank() const override { return 1; }
  int size() const override { return 2; }
  std::string_view backend() const override { return "stuck"; }
  std::unique_ptr<Communicator> duplicate() const override { return nullptr; }
  std::unique_ptr<Communicator> split(int, int) const override {
    return nullptr;
  }

protected:
  CommHandle startAllGather(const void *, int64_t, void *, DType,
                            OpLabel label) override {
    return stuck("all_gather", std::move(label));
  }
  CommHandle startReduceScatter(const void *, const std::vector<int64_t> &,
                                void *, DType, bool, OpLabel label) override {
    return stuck("reduce_scatter", std::move(label));
  }
  CommHandle startAllReduce(void *, int64_t, DType, bool,
                            OpLabel label) override {
    return stuck("all_reduce", std::move(label));
  }
  CommHandle startAllToAllV(const void *, const std::vector<int64_t> &, void *,
                            const std::vector<int64_t> &, DType,
                            OpLabel label) override {
    return stuck("all_to_all", std::move(label));
  }
  CommHandle startBroadcast(void *, int64_t, DType, int,
                            OpLabel label) override {
    return stuck("broadcast", std::move(label));
  }
  CommHandle startBarrier(OpLabel label) override {
    return stuck("barrier", std::move(label));
  }
  CommHandle startAllReduceScalars(double *, int64_t, ScalarOp,
                                   OpLabel label) override {
    return stuck("all_reduce(sum)", std::move(label));
  }
  [[noreturn]] void abortAll(int exitCode) const override {
    std::fflush(nullptr);
    std::_Exit(exitCode);
  }

private:
  CommHandle stuck(const char *name, OpLabel label) {
    return CommHandle(makePending<NeverCompletes>(name, std::move(label)));
  }
};

} // namespace

TEST(CommTimeout, WaitReportsRankOpAndCollective) {
  StuckCommunicator comm;
  comm.setTimeout(CommDuration(0.05));
  std::vector<std::string> messages;
  comm.setTimeoutHandler([&](const std::string &m) { messages.push_back(m); });
  float x = 0;
  CommHandle h = comm.allReduce(&x, 1, DType::F32, true,
                                {17, "micro_step, stream reduce: h.0.mlp"});
  EXPECT_FALSE(comm.test(h));
  auto begin = CommClock::now();
  EXPECT_THROW(comm.wait(h), CommTimeoutError);
  // The 0.05 s run from the collective's start, a little before `begin`:
  // 10 ms allows for that gap on a loaded machine.
  EXPECT_GE(CommClock::now() - begin, std::chrono::milliseconds(40));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0],
            "zerorun: rank 1 of 2: all_reduce of plan op 17 (micro_step, "
            "stream reduce: h.0.mlp) did not complete within 0.05 s "
            "(--comm-timeout); another rank skipped, reordered or is stuck "
            "before it; aborting every rank");
  // Still pending: an explicit deadline in the past reports again.
  EXPECT_TRUE(h.pending());
  EXPECT_THROW(comm.wait(h, CommClock::now()), CommTimeoutError);
  EXPECT_EQ(messages.size(), 2u);
}

// An op's collectives are waited for together: every one's data first,
// then their epilogues, so that one's averaging does not hold up the
// others' progress; a collective without an epilogue apart completes once.
TEST(CommWaitAll, EveryCollectiveArrivesBeforeAnyEpilogue) {
  StuckCommunicator comm;
  const std::atomic<bool> never{false};
  std::vector<std::string> log;
  std::vector<CommHandle> op;
  op.push_back(comm.scripted("a", 3, true, log));
  op.push_back(comm.scripted("b", 1, true, log));
  op.push_back(comm.scripted("c", 2, false, log));
  ASSERT_TRUE(comm.waitAll(op, never));
  EXPECT_EQ(log, (std::vector<std::string>{"a arrived", "b arrived",
                                           "c arrived", "c epilogue",
                                           "a epilogue", "b epilogue"}));
  for (const CommHandle &h : op)
    EXPECT_FALSE(h.pending());
  // Waited for one by one, each epilogue follows its own collective.
  log.clear();
  CommHandle one = comm.scripted("a", 3, true, log);
  CommHandle two = comm.scripted("b", 1, true, log);
  comm.wait(one);
  comm.wait(two);
  EXPECT_EQ(log, (std::vector<std::string>{"a arrived", "a epilogue",
                                           "b arrived", "b epilogue"}));
  // Another stream failed: false, the handles left pending.
  const std::atomic<bool> failed{true};
  std::vector<CommHandle> stuck;
  stuck.push_back(comm.scripted("d", 1000000, true, log));
  EXPECT_FALSE(comm.waitAll(stuck, failed));
  EXPECT_TRUE(stuck[0].pending());
  stuck[0].abandon();
  // A collective that never arrives times out, named.
  comm.setTimeout(CommDuration(0.02));
  std::vector<std::string> messages;
  comm.setTimeoutHandler([&](const std::string &m) { messages.push_back(m); });
  float x = 0;
  std::vector<CommHandle> late;
  late.push_back(comm.scripted("e", 1, true, log));
  late.push_back(comm.allReduce(&x, 1, DType::F32, true, {9, "reduce"}));
  EXPECT_THROW(comm.waitAll(late, never), CommTimeoutError);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("all_reduce of plan op 9 (reduce) did not "
                             "complete within 0.02 s"),
            std::string::npos)
      << messages[0];
  for (CommHandle &h : late)
    h.abandon();
}

TEST(CommTimeoutDeathTest, DefaultHandlerPrintsOneLineAndAborts) {
  EXPECT_EXIT(
      {
        StuckCommunicator comm;
        comm.setTimeout(CommDuration(0.01));
        CommHandle h = comm.barrier({3, "optimizer_step"});
        comm.wait(h);
      },
      ::testing::ExitedWithCode(kCommTimeoutExitCode),
      "zerorun: rank 1 of 2: barrier of plan op 3 \\(optimizer_step\\) did "
      "not complete within 0.01 s");
}

// Traffic is counted once, in Communicator, by the plan's accounting
// (zeroc/Support/Collectives.h): (n-1)/n of the whole buffer for
// all-gather and reduce-scatter, 2 (n-1)/n for all-reduce; scalar
// all-reduces, broadcasts and barriers apart, outside the total.
TEST(CommTraffic, CountsEachKindByThePlansAccounting) {
  StuckCommunicator comm; // Two ranks.
  // The collectives never complete: each handle's destructor gives up at
  // once (a handler that returns) and frees its state.
  comm.setTimeout(CommDuration(0.001));
  comm.setTimeoutHandler([](const std::string &) {});
  std::vector<float> buf(64);
  std::vector<uint16_t> half(64);
  double scalar = 0;
  std::vector<CommHandle> handles;
  handles.push_back(
      comm.allGather(buf.data(), 3, buf.data() + 8, DType::F32, {}));
  handles.push_back(comm.reduceScatter(buf.data(), {5, 3}, buf.data() + 32,
                                       DType::F32, true, {}));
  handles.push_back(comm.allReduce(half.data(), 10, DType::BF16, true, {}));
  handles.push_back(comm.allReduceScalars(&scalar, 1, ScalarOp::Sum, {}));
  handles.push_back(comm.broadcast(buf.data(), 7, DType::F32, 0, {}));
  handles.push_back(comm.barrier({}));
  CommTraffic t = comm.traffic();

  // All-gather: 3 per rank, 6 in all; each rank sends 6 x 1/2.
  EXPECT_EQ(t[CollectiveKind::AllGather].collectives, 1);
  EXPECT_EQ(t[CollectiveKind::AllGather].elements, 6);
  EXPECT_DOUBLE_EQ(t[CollectiveKind::AllGather].elementsPerRank, 3.0);
  EXPECT_DOUBLE_EQ(t[CollectiveKind::AllGather].bytesPerRank, 12.0);
  // Reduce-scatter: the input, 5 + 3 (unequal counts), x 1/2.
  EXPECT_EQ(t[CollectiveKind::ReduceScatter].elements, 8);
  EXPECT_DOUBLE_EQ(t[CollectiveKind::ReduceScatter].elementsPerRank, 4.0);
  // All-reduce: 2 x 10 x 1/2, bf16 bytes.
  EXPECT_EQ(t[CollectiveKind::AllReduce].elements, 10);
  EXPECT_DOUBLE_EQ(t[CollectiveKind::AllReduce].elementsPerRank, 10.0);
  EXPECT_DOUBLE_EQ(t[CollectiveKind::AllReduce].bytesPerRank, 20.0);
  EXPECT_DOUBLE_EQ(t.total().elementsPerRank, 17.0);
  EXPECT_EQ(t.total().collectives, 3);
  // Control traffic: apart.
  EXPECT_EQ(t.scalarAllReduce.collectives, 1);
  EXPECT_EQ(t.scalarAllReduce.elements, 1);
  EXPECT_EQ(t.broadcast.elements, 7);
  EXPECT_EQ(t.barrier.collectives, 1);

  CommTraffic later = comm.traffic();
  EXPECT_EQ(later.since(t).total().collectives, 0);
}

TEST(CommTraffic, OneRankSendsNothing) {
  LocalCommunicator comm;
  std::vector<float> a(4), b(4);
  comm.allGather(a.data(), 4, b.data(), DType::F32, {});
  CommTraffic t = comm.traffic();
  EXPECT_EQ(t[CollectiveKind::AllGather].collectives, 1);
  EXPECT_EQ(t[CollectiveKind::AllGather].elements, 4);
  EXPECT_DOUBLE_EQ(t[CollectiveKind::AllGather].elementsPerRank, 0.0);
}

// A collective whose arguments are refused moves nothing.
TEST(CommTraffic, RefusedCollectivesAreNotCounted) {
  LocalCommunicator comm;
  std::vector<int32_t> buf(4);
  EXPECT_THROW(comm.allReduce(buf.data(), 4, DType::I32, false, {}),
               std::invalid_argument);
  EXPECT_EQ(comm.traffic().total().collectives, 0);
}

//===----------------------------------------------------------------------===//
// Host all-to-alls (exchangeExpertCounts), which a device backend stages
//===----------------------------------------------------------------------===//

namespace {

/// Rank 1 of 2 of a backend whose collectives take device memory only (as
/// NCCL's): an all-to-all of host buffers must come through
/// startAllToAllHost, which delivers rank 0's blocks as {100 + i} and this
/// rank's own block unchanged; startAllToAllV refuses host buffers.
class DeviceOnlyCommunicator final : public Communicator {
public:
  int rank() const override { return 1; }
  int size() const override { return 2; }
  std::string_view backend() const override { return "device"; }
  std::unique_ptr<Communicator> duplicate() const override { return nullptr; }
  std::unique_ptr<Communicator> split(int, int) const override {
    return nullptr;
  }
  int hostExchanges = 0;

protected:
  CommHandle startAllToAllHost(const int32_t *send, int32_t *recv,
                               int64_t perRank, OpLabel) override {
    ++hostExchanges;
    for (int64_t i = 0; i < perRank; ++i) {
      recv[i] = int32_t(100 + i);
      recv[perRank + i] = send[perRank + i];
    }
    return {};
  }
  CommHandle startAllToAllV(const void *, const std::vector<int64_t> &, void *,
                            const std::vector<int64_t> &, DType,
                            OpLabel) override {
    throw std::logic_error("host buffers passed as device buffers");
  }
  CommHandle startAllGather(const void *, int64_t, void *, DType,
                            OpLabel) override {
    throw std::logic_error("unused");
  }
  CommHandle startReduceScatter(const void *, const std::vector<int64_t> &,
                                void *, DType, bool, OpLabel) override {
    throw std::logic_error("unused");
  }
  CommHandle startAllReduce(void *, int64_t, DType, bool, OpLabel) override {
    throw std::logic_error("unused");
  }
  CommHandle startBroadcast(void *, int64_t, DType, int, OpLabel) override {
    throw std::logic_error("unused");
  }
  CommHandle startBarrier(OpLabel) override {
    throw std::logic_error("unused");
  }
  CommHandle startAllReduceScalars(double *, int64_t, ScalarOp,
                                   OpLabel) override {
    throw std::logic_error("unused");
  }
  [[noreturn]] void abortAll(int exitCode) const override {
    std::_Exit(exitCode);
  }
};

} // namespace

// The count exchange goes through the host all-to-all, never through
// allToAllV with host pointers, and counts its traffic as an all-to-all of
// i32s: this rank's 3 counts for rank 0 leave it.
TEST(HostAllToAll, ExpertCountsTakeTheHostPath) {
  DeviceOnlyCommunicator comm;
  std::atomic<bool> cancel{false};
  std::optional<std::vector<int64_t>> received = exchangeExpertCounts(
      comm, {4, 0, 2, 7, 1, 5}, {3, "dispatch counts"}, cancel);
  ASSERT_TRUE(received);
  EXPECT_EQ(*received, (std::vector<int64_t>{100, 101, 102, 7, 1, 5}));
  EXPECT_EQ(comm.hostExchanges, 1);
  CommTraffic::Volume v = comm.traffic()[CollectiveKind::AllToAll];
  EXPECT_EQ(v.collectives, 1);
  EXPECT_EQ(v.elements, 6);
  EXPECT_DOUBLE_EQ(v.elementsPerRank, 3.0);
  EXPECT_DOUBLE_EQ(v.bytesPerRank, 12.0);
}

// The host backends' default: startAllToAllV on the host buffers.
TEST(HostAllToAll, OneRankCopiesAndChecks) {
  LocalCommunicator comm;
  std::vector<int32_t> send = {3, -1, 8}, recv(3, 0);
  CommHandle h = comm.allToAllHost(send.data(), recv.data(), 3, {});
  comm.wait(h);
  EXPECT_EQ(recv, send);
  EXPECT_EQ(comm.traffic()[CollectiveKind::AllToAll].elements, 3);
  EXPECT_THROW(comm.allToAllHost(send.data(), recv.data(), -1, {}),
               std::invalid_argument);
  EXPECT_THROW(comm.allToAllHost(send.data(), send.data(), 3, {}),
               std::invalid_argument);
}
