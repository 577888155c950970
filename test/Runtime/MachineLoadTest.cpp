//===- MachineLoadTest.cpp - What else used the machine's CPUs -----------===//

#include "exec/MachineLoad.h"

#include <gtest/gtest.h>

#include <chrono>

using namespace zeroc::runtime;

namespace {

// /proc/stat of a 2-core machine: user nice system idle iowait irq softirq
// steal guest guest_nice.
constexpr const char *kStat = "cpu  4705 150 1120 16250 530 0 45 30 0 0\n"
                              "cpu0 2400 70 560 8100 260 0 20 15 0 0\n"
                              "intr 114930548 113199788 3 0 5 263 0 4 [...]\n";

TEST(MachineLoad, ParsesTheCpuLine) {
  std::optional<CpuTimes> t = parseProcStat(kStat, 100);
  ASSERT_TRUE(t);
  // user + nice + system + irq + softirq, not idle or iowait; steal apart.
  EXPECT_DOUBLE_EQ(t->busy, (4705 + 150 + 1120 + 0 + 45) / 100.0);
  EXPECT_DOUBLE_EQ(t->steal, 0.30);
}

TEST(MachineLoad, RefusesWhatIsNotACpuLine) {
  EXPECT_FALSE(parseProcStat("", 100));
  EXPECT_FALSE(parseProcStat("cpu0 1 2 3 4 5 6 7 8\n", 100)); // Not the total.
  EXPECT_FALSE(parseProcStat("cpu  1 2 3 4 5\n", 100));       // Too short.
  EXPECT_FALSE(parseProcStat("cpu  1 2 x 4 5 6 7 8\n", 100));
  EXPECT_FALSE(parseProcStat("cpu  1 2 -3 4 5 6 7 8\n", 100));
  EXPECT_FALSE(parseProcStat(kStat, 0));
}

TEST(MachineLoad, OthersAreTheBusyTimeLessOurOwn) {
  // 10 s on 2 cores: 20 core-seconds. The machine was busy 14 more
  // seconds, 9 of them ours; the hypervisor took 1.
  CpuTimes before{100, 2}, after{114, 3};
  ForeignLoad load = foreignLoad(before, after, 9, 10, 2);
  EXPECT_DOUBLE_EQ(load.others, 5.0 / 20);
  EXPECT_DOUBLE_EQ(load.steal, 1.0 / 20);
  EXPECT_TRUE(disturbs(load));
  EXPECT_EQ(describeForeignLoad(load, 2),
            "other processes used 25% of the 2 cores, the hypervisor took 5%");
}

TEST(MachineLoad, SharesStayBetweenZeroAndOne) {
  // Our own time counted a tick more than the machine's (the counters'
  // granularity differ): no negative share. A wall time of zero: none.
  ForeignLoad idle = foreignLoad({100, 0}, {109, 0}, 9.01, 10, 1);
  EXPECT_DOUBLE_EQ(idle.others, 0);
  EXPECT_FALSE(disturbs(idle));
  ForeignLoad none = foreignLoad({100, 0}, {200, 50}, 0, 0, 4);
  EXPECT_DOUBLE_EQ(none.others, 0);
  EXPECT_DOUBLE_EQ(none.steal, 0);
  ForeignLoad full = foreignLoad({0, 0}, {50, 0}, 0, 10, 2);
  EXPECT_DOUBLE_EQ(full.others, 1);
  EXPECT_EQ(describeForeignLoad(full, 1),
            "other processes used 100% of the 1 core, the hypervisor took 0%");
}

TEST(MachineLoad, ThresholdsOfADisturbedMeasurement) {
  EXPECT_FALSE(disturbs({0.09, 0.04}));
  EXPECT_TRUE(disturbs({0.10, 0}));
  EXPECT_TRUE(disturbs({0, 0.05}));
}

TEST(MachineLoad, ThisMachinesCountersMoveWithOurWork) {
  std::optional<CpuTimes> before = machineCpuTimes();
  if (!before)
    GTEST_SKIP() << "no /proc/stat here";
  double own = processCpuSeconds();
  // Half a second of CPU in this process: the machine's busy time counts it.
  auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  volatile double x = 0;
  while (std::chrono::steady_clock::now() < until)
    x = x + 1;
  std::optional<CpuTimes> after = machineCpuTimes();
  ASSERT_TRUE(after);
  double ours = processCpuSeconds() - own;
  EXPECT_GT(ours, 0);
  // Both counters advance in clock ticks (1/100 s): a few of slack.
  EXPECT_GE(after->busy - before->busy + 0.05, ours);
}

} // namespace
