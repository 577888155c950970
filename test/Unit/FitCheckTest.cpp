//===- FitCheckTest.cpp - Every memory of a cluster, checked
//---------------===//
//
// checkClusterFit on hand-built plans whose bytes are known: the GPU budget
// is usable memory less the runtime reserve, host memory is the node's over
// its ranks plus its reserve, NVMe the node's drives; each refusal names the
// memory and by how much it is over. withNodes sizes a preset.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Cost/FitCheck.h"

#include <gtest/gtest.h>

using namespace zeroc;

namespace {

constexpr double kGiB = double(1ull << 30);

/// One f32 tensor of `elements` on `placement`, on each of `worldSize` ranks.
Plan planWith(Placement placement, int64_t elements, int64_t worldSize) {
  Plan plan;
  plan.worldSize = worldSize;
  PlanTensor t;
  t.name = "w.master";
  t.role = TensorRole::Master;
  t.of = "w";
  t.dtype = DType::F32;
  t.shape = {elements};
  t.numel = elements;
  t.localNumel = elements;
  t.placement = placement;
  plan.tensors.push_back(t);
  // A memory plan with an empty arena: the peak is the persistent state.
  for (PhaseKind kind : kAllPhaseKinds) {
    PlanPhase phase;
    phase.kind = kind;
    phase.memory = PlanPhaseMemory{};
    plan.phases.push_back(phase);
  }
  return plan;
}

Cluster node(double gpuGiB, double hostGiB, int64_t gpus = 8) {
  Cluster c;
  c.name = "test";
  c.gpusPerNode = gpus;
  c.gpu.model = "GPU";
  c.gpu.memoryBytes = gpuGiB * kGiB;
  c.host.memoryBytes = hostGiB * kGiB;
  return c;
}

bool contains(const std::optional<std::string> &s, const std::string &part) {
  return s && s->find(part) != std::string::npos;
}

TEST(FitCheck, TheGpuBudgetIsUsableMemoryLessTheReserve) {
  // 1 GiB of device state on a GPU with 4 GiB, 3.5 usable, 2.5 reserved.
  Plan plan = planWith(Placement::Device, int64_t(kGiB / 4), 1);
  Cluster c = node(4, 1024);
  c.gpu.usableMemoryBytes = 3.5 * kGiB;
  c.gpu.runtimeReserveBytes = 2.5 * kGiB;
  EXPECT_DOUBLE_EQ(c.gpu.planBudgetBytes(), 1.0 * kGiB);
  EXPECT_EQ(checkClusterFit(plan, c), std::nullopt);
  c.gpu.runtimeReserveBytes = 2.5 * kGiB + 1;
  auto refusal = checkClusterFit(plan, c);
  EXPECT_TRUE(contains(refusal, "the plan needs 1.00 GiB per GPU")) << *refusal;
  EXPECT_TRUE(contains(refusal, "(3.50 GiB usable less a runtime reserve"))
      << *refusal;
}

TEST(FitCheck, HostMemoryIsEveryRankOfTheNodePlusItsReserve) {
  // 4 GiB of pinned host state per rank, 8 ranks per node: 32 GiB, plus a
  // 32 GiB reserve, on 64 GiB nodes: fits exactly; one byte less does not.
  Plan plan = planWith(Placement::Host, int64_t(kGiB), 16);
  Cluster c = node(80, 64);
  EXPECT_DOUBLE_EQ(nodeMemory(plan, c).hostBytes, 32 * kGiB);
  EXPECT_EQ(checkClusterFit(plan, c), std::nullopt);
  c.host.memoryBytes -= 1;
  auto refusal = checkClusterFit(plan, c);
  EXPECT_TRUE(contains(refusal, "host memory: the plan needs 64.00 GiB per "
                                "node"))
      << *refusal;
  EXPECT_TRUE(contains(refusal, "8 ranks x (4.00 GiB pinned")) << *refusal;
  EXPECT_TRUE(contains(refusal, "offload to NVMe")) << *refusal;
  // A world smaller than a node puts fewer ranks on it.
  Plan two = planWith(Placement::Host, int64_t(kGiB), 2);
  EXPECT_EQ(nodeMemory(two, c).ranksPerNode, 2);
  EXPECT_EQ(checkClusterFit(two, c), std::nullopt);
}

TEST(FitCheck, NvmeCapacityWhenGiven) {
  Plan plan = planWith(Placement::Nvme, int64_t(kGiB), 8);
  Cluster c = node(80, 2048);
  EXPECT_EQ(checkClusterFit(plan, c), std::nullopt); // No capacity given.
  c.host.nvmeCapacityBytes = 31 * kGiB;
  auto refusal = checkClusterFit(plan, c);
  EXPECT_TRUE(contains(refusal, "NVMe: the plan keeps 32.00 GiB per node"))
      << *refusal;
}

TEST(FitCheck, NodesSizeAPreset) {
  auto preset = clusterPreset("h100-sxm-8");
  ASSERT_TRUE(bool(preset)) << preset.error().str();
  auto big = withNodes(*preset, 16);
  ASSERT_TRUE(bool(big)) << big.error().str();
  EXPECT_EQ(big->gpus(), 128);
  EXPECT_FALSE(bool(withNodes(*preset, 0)));
  auto workstation = clusterPreset("h100-pcie-1");
  ASSERT_TRUE(bool(workstation));
  auto two = withNodes(*workstation, 2);
  ASSERT_FALSE(bool(two));
  EXPECT_NE(two.error().message.find("no inter_node link"), std::string::npos)
      << two.error().message;
  // The presets state usable memory and a reserve, each with a source.
  EXPECT_NEAR(preset->gpu.usableMemoryBytes / kGiB, 79.11, 1e-9);
  EXPECT_NEAR(preset->gpu.runtimeReserveBytes / kGiB, 1.9,
              1e-9); // Measured on an H100.
  EXPECT_TRUE(preset->sources.count("gpu.usable_memory_gib"));
}

} // namespace
