//===- ExecutorTest.cpp - The plan executor's checks and memory accounting ===//
//
// End-to-end training runs (losses across stages and world sizes) are the
// zerorun_* ctest entries (zerorun_e2e.py); these test the executor's own
// pieces with the one-rank communicator.
//
//===----------------------------------------------------------------------===//

#include "exec/Executor.h"

#include <gtest/gtest.h>

using namespace zeroc;
using namespace zeroc::runtime;

TEST(MemoryTracker, CountsDeviceBytesAndTheirPeak) {
  MemoryTracker m;
  {
    auto a = m.allocate(1000, true);
    auto b = m.allocate(24, true);
    auto h = m.allocate(4096, false);
    EXPECT_EQ(m.deviceBytes(), 1024);
    EXPECT_EQ(m.hostBytes(), 4096);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
    EXPECT_EQ(a.get()[999], 0); // Zero-filled.
  }
  EXPECT_EQ(m.deviceBytes(), 0);
  EXPECT_EQ(m.hostBytes(), 0);
  EXPECT_EQ(m.devicePeak(), 1024);
  auto c = m.allocate(512, true);
  EXPECT_EQ(m.devicePeak(), 1024);
}

TEST(Executor, RejectsAPlanForAnotherWorldSize) {
  auto plan = loadPlan(std::string(ZEROC_SOURCE_DIR) +
                       "/test/zeroc/Inputs/plan-stage3.json");
  ASSERT_TRUE(bool(plan)) << plan.error().str();
  LocalCommunicator comm;
  auto ex = Executor::create(std::move(*plan), comm, {});
  ASSERT_FALSE(bool(ex));
  EXPECT_NE(
      ex.error().message.find("PLAN is for 4 ranks, but mpirun started 1"),
      std::string::npos)
      << ex.error().message;
}
