//===- CostModelTest.cpp - Cost formulas, the simulator and its pictures --===//
//
// The collective, roofline and offload formulas against values computed by
// hand; the event simulator on small hand-built plans whose timelines are
// known exactly; the Chrome trace parsed back and the SVG checked as XML;
// the inspector's time sections; every preset on the example plan.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Cost/CostModel.h"
#include "zeroc/Cost/ScheduleViews.h"
#include "zeroc/Cost/Simulator.h"
#include "zeroc/Cost/TraceCompare.h"
#include "zeroc/Cost/WhatIf.h"
#include "zeroc/Plan/PlanTrace.h"
#include "zeroc/Support/GemmSlices.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <functional>

using namespace zeroc;
using nlohmann::json;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A cluster with round figures: `gpusPerNode` GPUs per node, the intra-node
/// bus at 200 GB/s with 2 us per ring step, the network at 50 GB/s per node
/// with 10 us per step, 5 us per collective.
Cluster roundCluster(int64_t nodes, int64_t gpusPerNode) {
  Cluster c;
  c.name = "round";
  c.nodes = nodes;
  c.gpusPerNode = gpusPerNode;
  c.gpu.model = "G";
  c.gpu.memoryBytes = 80e9;
  c.gpu.peak = {100e12, 100e12, 50e12, 10e12};
  c.gpu.hbmBandwidth = 1e12;
  c.intraNode = {200e9, 2e-6};
  c.interNode = ClusterLink{50e9, 10e-6};
  c.collectiveLatency = 5e-6;
  c.host = {1e12, 80e9, 20e9, 4e9};
  c.computeEfficiency = 0.5;
  return c;
}

/// A cluster where times come out exact for the simulator tests: 1 TFLOP/s
/// of bf16 at full efficiency, collectives with no latency at 1 GB/s bus
/// bandwidth, so that an all-gather of N bf16 elements on 2 ranks takes
/// N x 2 B x 1/2 / 1 GB/s = N ns.
Cluster exactCluster() {
  Cluster c;
  c.name = "exact";
  c.nodes = 1;
  c.gpusPerNode = 2;
  c.gpu.model = "G";
  c.gpu.memoryBytes = 1e12;
  c.gpu.peak = {1e12, 1e12, 1e12, 1e12};
  c.gpu.hbmBandwidth = 1e15;
  c.intraNode = {1e9, 0};
  c.collectiveLatency = 0;
  c.host = {1e12, 2e9, 1e9, 0.5e9};
  c.computeEfficiency = 1.0;
  return c;
}

/// The epilogue of a bf16 reduce-scatter of `elements` over 2 ranks on
/// exactCluster(): the rank's half read, the shard read and written, at
/// 1e15 B/s of HBM.
double rsEpilogue(double elements) { return 3 * (elements / 2 * 2) / 1e15; }

PlanValue value(int64_t id, DType dtype, int64_t elements) {
  PlanValue v;
  v.id = id;
  v.dtype = dtype;
  v.shape = {elements};
  v.bytes = elements * bytesPerElement(dtype);
  return v;
}

PlanOp op(int64_t index, std::string kind, int64_t stream,
          std::vector<int64_t> deps = {}) {
  PlanOp o;
  o.index = index;
  o.kind = *parseOpKind(kind);
  o.attrs = defaultAttrs(o.kind);
  o.stream = stream;
  o.deps = std::move(deps);
  return o;
}

/// A compute op of `ms` milliseconds on exactCluster().
PlanOp computeOp(int64_t index, double ms, std::vector<int64_t> deps = {}) {
  PlanOp o = op(index, "linear", 0, std::move(deps));
  o.flops = int64_t(std::llround(ms * 1e9));
  return o;
}

/// An all-gather (or other collective) of `ms` milliseconds on
/// exactCluster() with 2 ranks.
PlanOp collectiveOp(int64_t index, const char *kind, const char *collective,
                    int64_t stream, double ms, std::vector<int64_t> deps = {}) {
  PlanOp o = op(index, kind, stream, std::move(deps));
  o.collective = collective;
  // All-gather and reduce-scatter: elements x 2 B x 1/2 / 1e9 B/s.
  o.commElements = int64_t(std::llround(ms * 1e6));
  return o;
}

Plan planWith(std::vector<PlanOp> ops, int64_t runs = 1) {
  Plan plan;
  plan.generator = "CostModelTest";
  plan.model = {"tiny", 1000, DType::BF16, 1, 8};
  plan.worldSize = 2;
  plan.stage = 3;
  plan.gradientAccumulationSteps = runs;
  plan.streams = {"compute", "gather", "reduce", "copy"};
  PlanPhase phase;
  phase.kind = PhaseKind::MicroStep;
  phase.runsPerStep = runs;
  phase.ops = std::move(ops);
  plan.phases.push_back(std::move(phase));
  return plan;
}

/// A plan of one `kind` op (linear, linear_grad_input or
/// linear_grad_weight) of a layer in `dtype`: activations of leading
/// dimensions `lead` (x [lead, in], dy [lead, out]), the weight [out, in],
/// the op's operands as the kernels take them; FLOPs 2 x rows x in x out,
/// bytes its operands' and result's.
Plan linearLayerPlan(const std::string &kind, std::vector<int64_t> lead,
                     int64_t in, int64_t out, DType dtype) {
  std::vector<int64_t> x = lead, dy = lead, w = {out, in};
  x.push_back(in);
  dy.push_back(out);
  const std::vector<int64_t> &a = kind == "linear" ? x : dy,
                             &b = kind == "linear_grad_weight" ? x : w,
                             &r = kind == "linear"              ? dy
                                  : kind == "linear_grad_input" ? x
                                                                : w;
  PlanOp o = op(0, kind, 0);
  o.inputs = {1, 2};
  o.outputs = {3};
  Plan plan = planWith({o});
  plan.model.dtype = dtype;
  int64_t rows = 1;
  for (int64_t d : lead)
    rows *= d;
  const std::vector<int64_t> *shapes[] = {&a, &b, &r};
  for (int64_t id = 1; id <= 3; ++id) {
    const std::vector<int64_t> &shape = *shapes[id - 1];
    PlanValue v = value(id, dtype, shapeElements(shape).value_or(0));
    v.shape = shape;
    plan.phases[0].ops[0].bytes += v.bytes;
    plan.phases[0].values.push_back(v);
  }
  plan.phases[0].ops[0].flops = 2 * rows * in * out;
  return plan;
}

/// The cost model's seconds for the plan's first op.
double firstOpSeconds(const Plan &plan, const Cluster &cluster) {
  CostModel model(plan, cluster);
  return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
}

StepPrediction predict(const Plan &plan, const Cluster &cluster) {
  Expected<StepPrediction> p = predictStep(plan, cluster);
  EXPECT_TRUE(p) << (p ? "" : p.error().str());
  return p ? *p : StepPrediction{};
}

const OpTiming &timingOf(const StepPrediction &p, int64_t op) {
  for (const OpTiming &t : p.phases.front().ops)
    if (t.op == op)
      return t;
  static OpTiming none;
  ADD_FAILURE() << "no op " << op;
  return none;
}
// The timing is a reference into the prediction: a temporary's would dangle.
const OpTiming &timingOf(StepPrediction &&p, int64_t op) = delete;

constexpr double kMs = 1e-3;

// Tolerances. The cost model's arithmetic is exact up to double rounding: a
// figure here takes at most about ten operations in the model and as many in
// the expected expression, each off by at most u = 2^-53 relative (Higham,
// Accuracy and Stability, 2.2). Every time here is at most 2.05 s, so the two
// sides differ by at most about 20 x 2^-53 x 2.05 s = 4.6e-15 s; hence kTol
// (absolute, seconds). The presets' steps (about 0.1 ms, sums of fewer than
// 10^4 op times) err by less than 10^4 x 2^-53 x 0.1 ms = 1.1e-16 s. Ratios
// and rates of such figures (bus bandwidth, TFLOP/s, MFU, tokens/s,
// microseconds) are within 20 u each plus a few more roundings: kRelTol,
// 40 u relative. Observed: every figure equal to the last bit but one,
// 3.5e-18 s (the 31.093 ms all-reduce), and the bus bandwidth one ulp
// (3.1e-5 B/s, 1.5e-16 relative) from 200e9.
constexpr double kTol = 1e-14;
constexpr double kRelTol = 40 * 0x1p-53; // 4.4e-15

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

TEST(CollectiveTime, RingMatchesTheFormula) {
  // 8 ranks, 1 GB at 100 GB/s, 1 us per step.
  double ag = ringTime(CollectiveKind::AllGather, 1e9, 8, 100e9, 1e-6);
  EXPECT_NEAR(ag, 7 * 1e-6 + 1e9 * 7.0 / 8.0 / 100e9, kTol);
  double rs = ringTime(CollectiveKind::ReduceScatter, 1e9, 8, 100e9, 1e-6);
  EXPECT_NEAR(rs, ag, kTol);
  double ar = ringTime(CollectiveKind::AllReduce, 1e9, 8, 100e9, 1e-6);
  EXPECT_NEAR(ar, 14 * 1e-6 + 2 * 1e9 * 7.0 / 8.0 / 100e9, kTol);
}

TEST(CollectiveTime, OneRankTakesNoTime) {
  Cluster c = roundCluster(1, 8);
  for (CollectiveKind kind :
       {CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
        CollectiveKind::AllReduce}) {
    EXPECT_EQ(ringTime(kind, 1e9, 1, 1e9, 1e-6), 0.0);
    CollectiveTime t = collectiveTime(c, kind, 1e9, 1);
    EXPECT_EQ(t.seconds, 0.0);
    EXPECT_EQ(t.latency, 0.0);
  }
}

TEST(CollectiveTime, BusBandwidthAsNcclTestsDefinesIt) {
  // Without latency, algbw = size / t and busbw = algbw x (n-1)/n (AG, RS)
  // or x 2(n-1)/n (AR) give back the link's bus bandwidth.
  Cluster c = roundCluster(1, 8);
  c.intraNode.latency = 0;
  c.collectiveLatency = 0;
  double size = 256e6;
  for (int64_t n : {2, 4, 8}) {
    for (CollectiveKind kind :
         {CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
          CollectiveKind::AllReduce}) {
      double t = collectiveTime(c, kind, size, n).seconds;
      double algbw = size / t;
      double factor = (kind == CollectiveKind::AllReduce ? 2.0 : 1.0) *
                      double(n - 1) / double(n);
      EXPECT_NEAR(algbw * factor, 200e9, 200e9 * kRelTol) << n;
    }
  }
}

TEST(CollectiveTime, FlatInsideOneNode) {
  Cluster c = roundCluster(4, 8);
  // 8 ranks fill node 0: base 5 us + 7 steps x 2 us + 800 MB x 7/8 / 200
  // GB/s.
  CollectiveTime t = collectiveTime(c, CollectiveKind::ReduceScatter, 800e6, 8);
  EXPECT_NEAR(t.latency, 5e-6 + 7 * 2e-6, kTol);
  EXPECT_NEAR(t.intraNode, 3.5e-3, kTol);
  EXPECT_EQ(t.interNode, 0.0);
  EXPECT_NEAR(t.seconds, 19e-6 + 3.5e-3, kTol);
  // 4 ranks on one node: a ring of 4.
  CollectiveTime four = collectiveTime(c, CollectiveKind::AllReduce, 800e6, 4);
  EXPECT_NEAR(four.seconds, 5e-6 + 6 * 2e-6 + 2 * 800e6 * 0.75 / 200e9, kTol);
}

TEST(CollectiveTime, HierarchicalAcrossNodes) {
  // 32 ranks on 4 nodes of 8. The network's 50 GB/s per node is shared by
  // the 8 inter-node rings: 6.25 GB/s each, over 800 MB / 8 = 100 MB.
  Cluster c = roundCluster(4, 8);
  double intraLat = 7 * 2e-6, intraBw = 800e6 * 7.0 / 8.0 / 200e9;   // 3.5 ms
  double interLat = 3 * 10e-6, interBw = 100e6 * 3.0 / 4.0 / 6.25e9; // 12 ms

  CollectiveTime rs =
      collectiveTime(c, CollectiveKind::ReduceScatter, 800e6, 32);
  EXPECT_NEAR(rs.latency, 5e-6 + intraLat + interLat, kTol);
  EXPECT_NEAR(rs.intraNode, intraBw, kTol);
  EXPECT_NEAR(rs.interNode, interBw, kTol);
  EXPECT_NEAR(rs.seconds, 15.549e-3, kTol);

  CollectiveTime ag = collectiveTime(c, CollectiveKind::AllGather, 800e6, 32);
  EXPECT_NEAR(ag.seconds, rs.seconds, kTol);

  // All-reduce = intra RS + inter AR over 1/8 + intra AG.
  CollectiveTime ar = collectiveTime(c, CollectiveKind::AllReduce, 800e6, 32);
  EXPECT_NEAR(ar.latency, 5e-6 + 2 * intraLat + 2 * interLat, kTol);
  EXPECT_NEAR(ar.intraNode, 2 * intraBw, kTol);
  EXPECT_NEAR(ar.interNode, 2 * interBw, kTol);
  EXPECT_NEAR(ar.seconds, 31.093e-3, kTol);
}

// Expert parallelism's all-to-all, by hand: each rank keeps 1/n of its
// buffer and sends (n-1)/n, nccl-tests' alltoall busbw factor.
TEST(CollectiveTime, AllToAllInsideOneNode) {
  Cluster c = roundCluster(4, 8);
  // 8 ranks, 800 MB each: base 5 us + 7 x 2 us + 800 MB x 7/8 / 200 GB/s.
  CollectiveTime t = collectiveTime(c, CollectiveKind::AllToAll, 800e6, 8);
  EXPECT_NEAR(t.latency, 19e-6, kTol);
  EXPECT_NEAR(t.intraNode, 3.5e-3, kTol);
  EXPECT_EQ(t.interNode, 0.0);
  EXPECT_NEAR(t.seconds, 3.519e-3, kTol);
  // Without latency, algbw x (n-1)/n gives back the bus bandwidth.
  c.intraNode.latency = 0;
  c.collectiveLatency = 0;
  for (int64_t n : {2, 4, 8}) {
    double seconds =
        collectiveTime(c, CollectiveKind::AllToAll, 256e6, n).seconds;
    EXPECT_NEAR(256e6 / seconds * double(n - 1) / double(n), 200e9,
                200e9 * kRelTol)
        << n;
  }
  EXPECT_EQ(collectiveTime(c, CollectiveKind::AllToAll, 1e9, 1).seconds, 0.0);
  // The volume formula: (n-1)/n of the buffer.
  EXPECT_DOUBLE_EQ(commElementsPerRank(CollectiveKind::AllToAll, 800, 8), 700);
}

TEST(CollectiveTime, AllToAllAcrossNodesIsBoundByTheNics) {
  // 32 ranks on 4 nodes of 8, 800 MB each: 7/32 of it stays in the node
  // (175 MB at 200 GB/s = 0.875 ms), 24/32 leaves it (600 MB per rank, 4.8
  // GB per node through the node's 50 GB/s = 96 ms).
  Cluster c = roundCluster(4, 8);
  CollectiveTime t = collectiveTime(c, CollectiveKind::AllToAll, 800e6, 32);
  EXPECT_NEAR(t.latency, 5e-6 + 7 * 2e-6 + 3 * 10e-6, kTol);
  EXPECT_NEAR(t.intraNode, 0.875e-3, kTol);
  EXPECT_NEAR(t.interNode, 96e-3, kTol);
  EXPECT_NEAR(t.seconds, 96.924e-3, kTol);
}

TEST(CollectiveTime, OneGpuPerNodeIsAllNetwork) {
  Cluster c = roundCluster(4, 1);
  CollectiveTime t = collectiveTime(c, CollectiveKind::AllGather, 400e6, 4);
  EXPECT_EQ(t.intraNode, 0.0);
  EXPECT_NEAR(t.interNode, 400e6 * 0.75 / 50e9, kTol);
  EXPECT_NEAR(t.latency, 5e-6 + 3 * 10e-6, kTol);
}

TEST(CollectiveTime, RanksFillNodesInOrder) {
  Cluster c = roundCluster(4, 8);
  RankLayout four = rankLayout(c, 4);
  EXPECT_EQ(four.nodes, 1);
  EXPECT_EQ(four.ranksPerNode, 4);
  RankLayout twelve = rankLayout(c, 12);
  EXPECT_EQ(twelve.nodes, 2);
  EXPECT_EQ(twelve.ranksPerNode, 8);
}

// Expert parallelism's groups (DeepSpeed's construction): on 4 nodes of 8,
// 32 ranks, ep 4: an expert-parallel group is 4 consecutive ranks inside a
// node; an expert-data-parallel group is the 8 ranks 4 apart, 2 on each
// node, its inter-node rings sharing each node's network with the other 3
// groups' (8 rings per node in all).
TEST(CollectiveTime, ExpertParallelGroupsWhereTheirRanksSit) {
  Cluster c = roundCluster(4, 8);
  std::optional<RankLayout> ep =
      groupLayout(c, 32, 4, CommGroupKind::ExpertParallel);
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->ranks, 4);
  EXPECT_EQ(ep->nodes, 1);
  EXPECT_EQ(ep->ranksPerNode, 4);
  std::optional<RankLayout> edp =
      groupLayout(c, 32, 4, CommGroupKind::ExpertDataParallel);
  ASSERT_TRUE(edp);
  EXPECT_EQ(edp->ranks, 8);
  EXPECT_EQ(edp->nodes, 4);
  EXPECT_EQ(edp->ranksPerNode, 2);
  EXPECT_EQ(edp->nicSharers, 8);
  // The all-to-all inside the node: 5 us + 3 x 2 us + 800 MB x 3/4 / 200
  // GB/s.
  CollectiveTime a2a = collectiveTime(c, CollectiveKind::AllToAll, 800e6, *ep);
  EXPECT_NEAR(a2a.seconds, 11e-6 + 3e-3, kTol);
  // The expert-data-parallel reduce-scatter: an intra-node ring of 2 (2 us,
  // 800 MB x 1/2 / 200 GB/s = 2 ms), then rings over the 4 nodes on half
  // the data (3 x 10 us, 400 MB x 3/4 / (50 GB/s / 8) = 48 ms).
  CollectiveTime rs =
      collectiveTime(c, CollectiveKind::ReduceScatter, 800e6, *edp);
  EXPECT_NEAR(rs.latency, 5e-6 + 2e-6 + 30e-6, kTol);
  EXPECT_NEAR(rs.intraNode, 2e-3, kTol);
  EXPECT_NEAR(rs.interNode, 48e-3, kTol);
  // ep 16: a group spans 2 whole nodes; its expert-data-parallel groups
  // have one rank per node, 2 nodes.
  std::optional<RankLayout> wide =
      groupLayout(c, 32, 16, CommGroupKind::ExpertParallel);
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->nodes, 2);
  EXPECT_EQ(wide->ranksPerNode, 8);
  std::optional<RankLayout> pairs =
      groupLayout(c, 32, 16, CommGroupKind::ExpertDataParallel);
  ASSERT_TRUE(pairs);
  EXPECT_EQ(pairs->nodes, 2);
  EXPECT_EQ(pairs->ranksPerNode, 1);
  // The world: rankLayout's.
  std::optional<RankLayout> world = groupLayout(c, 32, 4, CommGroupKind::World);
  ASSERT_TRUE(world);
  EXPECT_EQ(world->nodes, 4);
  EXPECT_EQ(world->ranksPerNode, 8);
  // On one node every group is inside it, whatever ep.
  std::optional<RankLayout> inNode =
      groupLayout(c, 6, 3, CommGroupKind::ExpertDataParallel);
  ASSERT_TRUE(inNode);
  EXPECT_EQ(inNode->nodes, 1);
  EXPECT_EQ(inNode->ranksPerNode, 2);
  // Uneven: groups of 3 across nodes of 8; on 12 ranks (a node and a half)
  // the expert-data-parallel groups have 4 ranks on one node and 2 on the
  // other, while the expert-parallel pairs sit inside nodes.
  EXPECT_FALSE(groupLayout(c, 24, 3, CommGroupKind::ExpertParallel));
  EXPECT_FALSE(groupLayout(c, 24, 3, CommGroupKind::ExpertDataParallel));
  EXPECT_FALSE(groupLayout(c, 12, 2, CommGroupKind::ExpertDataParallel));
  EXPECT_TRUE(groupLayout(c, 12, 2, CommGroupKind::ExpertParallel));
}

//===----------------------------------------------------------------------===//
// Compute and offload
//===----------------------------------------------------------------------===//

TEST(ComputeTime, ComputeBound) {
  Cluster c = roundCluster(1, 8); // 100 TFLOP/s bf16 x 0.5, 1 TB/s
  // 1 TFLOP: 1e12 / 50e12 = 20 ms; its 1 MB of traffic is 1 us.
  EXPECT_NEAR(computeTime(c, 1e12, 1e6, DType::BF16), 20e-3, kTol);
  // f32 runs at the FP32 rate: 1e12 / (10e12 x 0.5).
  EXPECT_NEAR(computeTime(c, 1e12, 1e6, DType::F32), 0.2, kTol);
}

TEST(ComputeTime, MemoryBound) {
  Cluster c = roundCluster(1, 8);
  // 1 GB at 1 TB/s = 1 ms; its 1 MFLOP is 20 ns.
  EXPECT_NEAR(computeTime(c, 1e6, 1e9, DType::BF16), 1e-3, kTol);
  EXPECT_EQ(computeTime(c, 0, 0, DType::BF16), 0.0);
}

TEST(OffloadTime, RatesAndPaths) {
  Cluster c = roundCluster(1, 8); // host 80 GB/s, PCIe 20, NVMe 4 per node
  RankRates eight = rankRates(c, 8);
  EXPECT_DOUBLE_EQ(eight.pcie, 20e9); // per GPU
  EXPECT_DOUBLE_EQ(eight.hostMemory, 10e9);
  EXPECT_DOUBLE_EQ(eight.nvme, 0.5e9);
  RankRates one = rankRates(c, 1);
  EXPECT_DOUBLE_EQ(one.hostMemory, 80e9);
  EXPECT_DOUBLE_EQ(one.nvme, 4e9);

  EXPECT_NEAR(transferTime(eight, Placement::Device, Placement::Host, 1e9),
              0.05, kTol);
  EXPECT_NEAR(transferTime(eight, Placement::Host, Placement::Device, 1e9),
              0.05, kTol);
  EXPECT_NEAR(transferTime(eight, Placement::Nvme, Placement::Host, 1e9), 2.0,
              kTol);
  EXPECT_NEAR(transferTime(eight, Placement::Nvme, Placement::Device, 1e9),
              2.05, kTol);
  EXPECT_EQ(transferTime(eight, Placement::Device, Placement::Device, 1e9),
            0.0);
}

//===----------------------------------------------------------------------===//
// Op costs
//===----------------------------------------------------------------------===//

/// A stage-3 style plan with offloaded state on exactCluster() (2 ranks,
/// PCIe 1 GB/s, host memory 2 GB/s shared by 2 ranks, NVMe 0.5 GB/s).
Plan offloadPlan() {
  Plan plan = planWith({});
  auto tensor = [](std::string name, std::string role, DType dtype,
                   int64_t local, std::string placement) {
    PlanTensor t;
    t.name = std::move(name);
    t.role = *parseRole(role);
    t.dtype = dtype;
    t.shape = {local * 2};
    t.numel = local * 2;
    t.sharded = true;
    t.localNumel = local;
    t.placement = *parsePlacement(placement);
    return t;
  };
  plan.tensors = {
      tensor("w", "param", DType::BF16, 1000000, "device"),
      tensor("w.grad", "grad", DType::BF16, 1000000, "host"),
      tensor("w.master", "master", DType::F32, 1000000, "nvme"),
      tensor("w.exp_avg", "exp_avg", DType::F32, 1000000, "host"),
      tensor("w.exp_avg_sq", "exp_avg_sq", DType::F32, 1000000, "host"),
      tensor("v", "param", DType::BF16, 500000, "nvme")};
  PlanPhase &micro = plan.phases.front();
  micro.values = {value(1, DType::BF16, 4000000),
                  value(2, DType::BF16, 500000)};
  PlanOp rs = collectiveOp(0, "reduce_scatter_start", "reduce_scatter", 2, 4.0);
  rs.inputs = {1};
  rs.attrs = ReduceScatterAttrs{{"w.grad"}, {0}, false};
  PlanOp fetch = op(1, "fetch_start", 3);
  fetch.tensors = {"v"};
  PlanOp wait = op(2, "wait", 0, {1});
  wait.outputs = {2};
  micro.ops = {rs, fetch, wait};

  PlanPhase optimizer;
  optimizer.kind = PhaseKind::OptimizerStep;
  PlanOp adam = op(0, "adam_update", 0);
  AdamAttrs adamAttrs;
  adamAttrs.on = Placement::Host;
  adamAttrs.grad = "w.grad";
  adamAttrs.master = "w.master";
  adamAttrs.expAvg = "w.exp_avg";
  adamAttrs.expAvgSq = "w.exp_avg_sq";
  adamAttrs.param = "w";
  adam.attrs = adamAttrs;
  adam.tensors = {"w.exp_avg", "w.exp_avg_sq", "w.grad"};
  PlanOp zero = op(1, "zero_grads", 0);
  zero.tensors = {"w.grad"};
  optimizer.ops = {adam, zero};
  plan.phases.push_back(optimizer);
  return plan;
}

TEST(OpCost, ReduceScatterToHostCrossesPcie) {
  Plan plan = offloadPlan();
  Cluster c = exactCluster();
  CostModel model(plan, c);
  const PlanPhase &micro = plan.phases[0];
  OpCost rs = model.cost(micro, micro.ops[0]);
  EXPECT_EQ(rs.cls, OpClass::Collective);
  // 4 ms of ring, the epilogue, then this rank's half of 4e6 bf16 elements
  // (4 MB) over PCIe at 1 GB/s.
  EXPECT_NEAR(rs.seconds, 4e-3 + rsEpilogue(4e6) + 4e6 / 1e9, kTol);
  // On CPU ranks the epilogue adds into the host partition where it lies.
  c.calibration.device = "cpu";
  EXPECT_NEAR(CostModel(plan, c).cost(micro, micro.ops[0]).seconds,
              4e-3 + rsEpilogue(4e6), kTol);
}

TEST(OpCost, FetchMovesWhatItsWaitYields) {
  Plan plan = offloadPlan();
  Cluster c = exactCluster();
  CostModel model(plan, c);
  const PlanPhase &micro = plan.phases[0];
  OpCost fetch = model.cost(micro, micro.ops[1]);
  EXPECT_EQ(fetch.cls, OpClass::Offload);
  // 1 MB from NVMe (0.5 GB/s per node, 2 ranks: 0.25 GB/s) and over PCIe.
  EXPECT_NEAR(fetch.seconds, 1e6 / 0.25e9 + 1e6 / 1e9, kTol);
  EXPECT_EQ(model.cost(micro, micro.ops[2]).seconds, 0.0);
}

TEST(OpCost, HostAdam) {
  Plan plan = offloadPlan();
  Cluster c = exactCluster();
  CostModel model(plan, c);
  const PlanPhase &opt = plan.phases[1];
  OpCost adam = model.cost(opt, opt.ops[0]);
  EXPECT_EQ(adam.cls, OpClass::Host);
  double e = 1e6;
  // CPU traffic: grad read (2 B), master/m/v read and written (3 x 8 B),
  // param written (2 B), over 1 GB/s of host memory per rank.
  double cpu = e * (2 + 24 + 2) / 1e9;
  // Gradient already on the host; master on NVMe read and written back at
  // 0.25 GB/s; the bf16 parameter to the device over PCIe.
  double nvme = 2 * e * 4 / 0.25e9;
  double pcie = e * 2 / 1e9;
  EXPECT_NEAR(adam.seconds, cpu + nvme + pcie, kTol);
  // A call's fixed time counts where a CPU calibration measured it (the
  // host's Adam is the CPU device's), not for a GPU's device Adam.
  c.calibration.adamCall = 3e-6;
  EXPECT_NEAR(CostModel(plan, c).cost(opt, opt.ops[0]).seconds,
              cpu + nvme + pcie, kTol);
  OpCost zero = model.cost(opt, opt.ops[1]);
  EXPECT_EQ(zero.cls, OpClass::Host);
  EXPECT_NEAR(zero.seconds, e * 2 / 1e9, kTol);
  // On CPU ranks (a CPU calibration) the device's memory is the host's:
  // the parameter is written where it lies, nothing crosses PCIe, and the
  // host gradients are zeroed by the device's kernel at its rate (HBM's
  // 1e15 B/s here).
  c.calibration.device = "cpu";
  EXPECT_NEAR(CostModel(plan, c).cost(opt, opt.ops[0]).seconds,
              cpu + nvme + 3e-6, kTol);
  OpCost cpuZero = CostModel(plan, c).cost(opt, opt.ops[1]);
  EXPECT_EQ(cpuZero.cls, OpClass::Host);
  EXPECT_NEAR(cpuZero.seconds, e * 2 / 1e15, kTol);
}

// What each op moves (OpCost::traffic), by direction, on GPU ranks and on
// CPU ranks (no PCIe).
TEST(OpCost, OffloadTrafficByOp) {
  Plan plan = offloadPlan();
  Cluster c = exactCluster();
  CostModel model(plan, c);
  const PlanPhase &micro = plan.phases[0], &opt = plan.phases[1];
  // The reduce-scatter's epilogue adds this rank's 4 MB into the host
  // partition in place: read and written across PCIe.
  OffloadTraffic rs = model.cost(micro, micro.ops[0]).traffic;
  EXPECT_EQ(rs.toDevice, 4e6);
  EXPECT_EQ(rs.toHost, 4e6);
  EXPECT_EQ(rs.nvmeRead + rs.nvmeWrite, 0.0);
  // The fetch: 1 MB from NVMe (whole 4 KiB blocks: 245 of them) to the GPU.
  OffloadTraffic fetch = model.cost(micro, micro.ops[1]).traffic;
  EXPECT_EQ(fetch.nvmeRead, 245.0 * 4096);
  EXPECT_EQ(fetch.toDevice, 1e6);
  EXPECT_EQ(fetch.toHost + fetch.nvmeWrite, 0.0);
  // The host Adam: the f32 master (4 MB, 977 blocks) read from and written
  // to NVMe, the bf16 parameter (2 MB) to the GPU; the gradient and the
  // moments are on the host already.
  OffloadTraffic adam = model.cost(opt, opt.ops[0]).traffic;
  EXPECT_EQ(adam.nvmeRead, 977.0 * 4096);
  EXPECT_EQ(adam.nvmeWrite, 977.0 * 4096);
  EXPECT_EQ(adam.toDevice, 2e6);
  EXPECT_EQ(adam.toHost, 0.0);
  // Zeroing the host gradients: on the host's cores, nothing crosses.
  EXPECT_FALSE(model.cost(opt, opt.ops[1]).traffic.any());
  // The step: every phase once.
  OffloadTraffic step = offloadTrafficPerStep(plan, true);
  EXPECT_EQ(step.toDevice, 4e6 + 1e6 + 2e6);
  EXPECT_EQ(step.toHost, 4e6);
  EXPECT_EQ(step.nvmeRead, (245.0 + 977) * 4096);
  EXPECT_EQ(step.nvmeWrite, 977.0 * 4096);
  // CPU ranks: the same NVMe traffic, nothing over PCIe.
  OffloadTraffic cpu = offloadTrafficPerStep(plan, false);
  EXPECT_EQ(cpu.toDevice + cpu.toHost, 0.0);
  EXPECT_EQ(cpu.nvmeRead, step.nvmeRead);
  EXPECT_EQ(cpu.nvmeWrite, step.nvmeWrite);
  c.calibration.device = "cpu";
  EXPECT_EQ(CostModel(plan, c).cost(micro, micro.ops[0]).traffic.toHost, 0.0);
}

TEST(OpCost, DeviceAdamIsMemoryBound) {
  Plan plan = offloadPlan();
  for (PlanTensor &t : plan.tensors)
    t.placement = Placement::Device;
  std::get<AdamAttrs>(plan.phases[1].ops[0].attrs).on = Placement::Device;
  Cluster c = exactCluster();
  CostModel model(plan, c);
  OpCost adam = model.cost(plan.phases[1], plan.phases[1].ops[0]);
  EXPECT_EQ(adam.cls, OpClass::Compute);
  EXPECT_NEAR(adam.seconds, 1e6 * 28 / 1e15, kTol);
  // Each call's measured fixed time (calibration.adam_call_us).
  c.calibration.adamCall = 2e-6;
  EXPECT_NEAR(
      CostModel(plan, c).cost(plan.phases[1], plan.phases[1].ops[0]).seconds,
      1e6 * 28 / 1e15 + 2e-6, kTol);
}

// clip_grad_norm over a list of gradients: each further gradient pays the
// calibrated clip_per_tensor_us (stage 0 clips every parameter's own).
TEST(OpCost, ClippingPaysPerGradient) {
  Plan plan = offloadPlan();
  for (PlanTensor &t : plan.tensors)
    t.placement = Placement::Device;
  Cluster c = exactCluster();
  PlanOp clip = op(0, "clip_grad_norm", 0);
  clip.tensors = {plan.tensors[0].name};
  plan.phases[1].ops = {clip};
  double one = CostModel(plan, c).cost(plan.phases[1], clip).seconds;
  c.calibration.clipPerTensor = 1e-6;
  EXPECT_NEAR(CostModel(plan, c).cost(plan.phases[1], clip).seconds, one, kTol);
  plan.phases[1].ops[0].tensors = {plan.tensors[0].name, plan.tensors[0].name,
                                   plan.tensors[0].name};
  // The same gradient three times: three passes, and two further tensors.
  CostModel three(plan, c);
  Cluster plain = exactCluster();
  double passes = CostModel(plan, plain)
                      .cost(plan.phases[1], plan.phases[1].ops[0])
                      .seconds;
  EXPECT_NEAR(three.cost(plan.phases[1], plan.phases[1].ops[0]).seconds,
              passes + 2e-6, kTol);
}

TEST(OpCost, OneBitOptimizersCompressTheGradientAllReduce) {
  // Stage 0: a bf16 gradient all-reduce of 1e6 elements and, for contrast,
  // an all-gather, with 2 ranks on exactCluster() (1 GB/s bus bandwidth,
  // no latency).
  auto stage0 = [](const char *optimizer) {
    PlanOp allReduce = op(0, "all_reduce_start", 2);
    allReduce.collective = "all_reduce";
    allReduce.commElements = 1000000;
    Plan plan = planWith(
        {allReduce, collectiveOp(1, "all_gather_start", "all_gather", 1, 1.0)});
    plan.stage = 0;
    plan.config = {{"optimizer", {{"type", optimizer}}}};
    return plan;
  };
  Cluster c = exactCluster();
  // A ring all-reduce moves 2 (w - 1) / w of its bytes over the bus: 2e6 B
  // of bf16 takes 2 ms with Adam.
  Plan adam = stage0("AdamW");
  CostModel adamModel(adam, c);
  const PlanPhase &adamPhase = adam.phases[0];
  EXPECT_NEAR(adamModel.cost(adamPhase, adamPhase.ops[0]).seconds, 2e-3, kTol);
  for (const char *oneBit : {"OneBitAdam", "ZeroOneAdam", "OneBitLamb"}) {
    SCOPED_TRACE(oneBit);
    Plan plan = stage0(oneBit);
    CostModel model(plan, c);
    const PlanPhase &phase = plan.phases[0];
    // One bit per element: 1e6 / 8 B, 16x less than bf16.
    EXPECT_NEAR(model.cost(phase, phase.ops[0]).seconds, 2e-3 / 16, kTol);
    // Nothing else is compressed.
    EXPECT_NEAR(model.cost(phase, phase.ops[1]).seconds,
                adamModel.cost(adamPhase, adamPhase.ops[1]).seconds, kTol);
  }
}

//===----------------------------------------------------------------------===//
// Simulator
//===----------------------------------------------------------------------===//

TEST(Simulator, OverlappingStreamsTakeTheMaxNotTheSum) {
  // A 10 ms compute op and a 6 ms gather on another stream, then a wait.
  Plan plan =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 6.0),
                computeOp(1, 10.0), op(2, "wait", 0, {0})});
  StepPrediction p = predict(plan, exactCluster());
  EXPECT_NEAR(p.stepSeconds, 10 * kMs, kTol);
  EXPECT_EQ(p.exposedComm, 0.0);
  EXPECT_NEAR(p.streamBusy[0], 10 * kMs, kTol);
  EXPECT_NEAR(p.streamBusy[1], 6 * kMs, kTol);
  EXPECT_TRUE(mostExposed(plan, p).empty());
}

TEST(Simulator, AWaitThatBlocksIsExposedExactly) {
  // Gather 6 ms | compute 4 ms, wait (blocks 2 ms), compute 4 ms.
  Plan plan =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 6.0),
                computeOp(1, 4.0), op(2, "wait", 0, {0}), computeOp(3, 4.0)});
  StepPrediction p = predict(plan, exactCluster());
  EXPECT_NEAR(p.stepSeconds, 10 * kMs, kTol);
  EXPECT_NEAR(p.exposedComm, 2 * kMs, kTol);
  const OpTiming &wait = timingOf(p, 2);
  EXPECT_NEAR(wait.ready, 4 * kMs, kTol);
  EXPECT_NEAR(wait.start, 6 * kMs, kTol);
  EXPECT_EQ(wait.blockedBy, 0);
  EXPECT_NEAR(timingOf(p, 3).start, 6 * kMs, kTol);
  std::vector<StepTimeReport::ExposedCollective> top = mostExposed(plan, p);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].op, 0);
  EXPECT_EQ(top[0].kind, "all_gather_start");
  EXPECT_EQ(top[0].collective, "all_gather");
  EXPECT_EQ(top[0].commElements, 6000000);
  // Named by the tensors it moves.
  plan.phases[0].ops[0].tensors = {"h.0.attn.q_proj.weight",
                                   "h.0.attn.k_proj.weight"};
  EXPECT_EQ(mostExposed(plan, p)[0].subject, "h.0.attn.q_proj.weight +1 more");
  EXPECT_NEAR(top[0].seconds, 2 * kMs, kTol);
}

TEST(Simulator, DependenciesAcrossStreams) {
  // compute 5 ms -> reduce-scatter 3 ms (waits for it); compute 3 ms runs
  // meanwhile; the wait at 8 ms finds the reduction done.
  Plan plan = planWith(
      {computeOp(0, 5.0),
       collectiveOp(1, "reduce_scatter_start", "reduce_scatter", 2, 3.0, {0}),
       computeOp(2, 3.0), op(3, "wait", 0, {1})});
  StepPrediction p = predict(plan, exactCluster());
  const OpTiming &rs = timingOf(p, 1);
  EXPECT_NEAR(rs.ready, 0.0, kTol);
  EXPECT_NEAR(rs.start, 5 * kMs, kTol);
  EXPECT_NEAR(rs.end, 8 * kMs + rsEpilogue(3e6), kTol);
  EXPECT_EQ(rs.blockedBy, 0);
  // The wait finds the reduction done but for its epilogue.
  EXPECT_NEAR(p.stepSeconds, 8 * kMs + rsEpilogue(3e6), kTol);
  EXPECT_NEAR(p.exposedComm, rsEpilogue(3e6), kTol);

  // With a 5 ms reduction the wait blocks 2 ms.
  plan.phases[0].ops[1].commElements = 5000000;
  StepPrediction slower = predict(plan, exactCluster());
  EXPECT_NEAR(slower.stepSeconds, 10 * kMs + rsEpilogue(5e6), kTol);
  EXPECT_NEAR(slower.exposedComm, 2 * kMs + rsEpilogue(5e6), kTol);
}

TEST(Simulator, WaitOnAWaitChargesTheCollective) {
  // A wait on the gather stream waits for the gather; the compute stream
  // waits for that wait: the exposure is the gather's.
  Plan plan = planWith(
      {collectiveOp(0, "all_gather_start", "all_gather", 1, 6.0),
       op(1, "wait", 1, {0}), computeOp(2, 1.0), op(3, "wait", 0, {1})});
  StepPrediction p = predict(plan, exactCluster());
  EXPECT_NEAR(p.exposedComm, 5 * kMs, kTol);
  EXPECT_EQ(timingOf(p, 3).blockedBy, 0);
}

TEST(Simulator, RunsPerStepMultiply) {
  Plan plan = planWith({computeOp(0, 10.0)}, /*runs=*/4);
  PlanPhase optimizer;
  optimizer.kind = PhaseKind::OptimizerStep;
  optimizer.ops = {computeOp(0, 1.0)};
  plan.phases.push_back(optimizer);
  StepPrediction p = predict(plan, exactCluster());
  ASSERT_EQ(p.phases.size(), 2u);
  EXPECT_NEAR(p.phases[0].seconds, 10 * kMs, kTol);
  EXPECT_NEAR(p.stepSeconds, 41 * kMs, kTol);
  EXPECT_NEAR(p.streamBusy[0], 41 * kMs, kTol);
  // A sum of integer FLOP counts below 2^53: exact.
  EXPECT_EQ(p.flops, 41e9);
  EXPECT_NEAR(p.achievedTflopsPerGpu, 1.0, kRelTol);
  EXPECT_NEAR(p.mfu, 1.0, kRelTol);
  EXPECT_NEAR(p.hfu, 1.0, kRelTol);
  // 1 x 8 tokens x 4 micro-steps x 2 ranks per 41 ms.
  EXPECT_NEAR(p.tokensPerSecond, 64 / 0.041, 64 / 0.041 * kRelTol);
}

TEST(Simulator, MfuCountsModelFlopsHfuEveryFlop) {
  // 10 ms of linear, 4 ms of the same linear recomputed, 2 ms of an
  // element-wise op and a 1 ms attention forward (model FLOPs: 3 ms worth,
  // its backward's matrix products) on a 1 TFLOP/s GPU: 17 ms in all.
  PlanOp recomputed = computeOp(1, 4.0, {0});
  recomputed.recompute = "h.0";
  PlanOp gelu = computeOp(2, 2.0, {1});
  gelu.kind = OpKind::Gelu;
  gelu.attrs = defaultAttrs(gelu.kind);
  PlanOp attention = computeOp(3, 1.0, {2});
  attention.kind = OpKind::CausalAttention;
  attention.attrs = defaultAttrs(attention.kind);
  Plan plan = planWith({computeOp(0, 10.0), recomputed, gelu, attention});
  StepPrediction p = predict(plan, exactCluster());
  EXPECT_NEAR(p.stepSeconds, 17 * kMs, kTol);
  EXPECT_EQ(p.flops, 17e9);
  EXPECT_EQ(p.modelFlops, 13e9);
  EXPECT_NEAR(p.hfu, 1.0, kRelTol);
  EXPECT_NEAR(p.mfu, 13.0 / 17.0, kRelTol);
  nlohmann::json j = inspectJson(plan, *inspectOptions(plan, exactCluster()));
  EXPECT_NEAR(j["mfu"].get<double>(), 13.0 / 17.0, kRelTol);
  EXPECT_NEAR(j["hfu"].get<double>(), 1.0, kRelTol);
  EXPECT_EQ(j["model_flops_per_gpu_per_step"].get<double>(), 13e9);
}

// A Mixtral layer's model FLOPs, counted by hand from Mixtral-8x7B's
// shapes (hidden 4096, intermediate 14336, 8 experts, top-2) for 4096
// tokens: the router's logits 2 x 4096 x 8 x 4096 and the two active
// experts' three products 6 x (4096 x 2) x 4096 x 14336 per forward, each
// x3 for forward and backward, as PaLM's MFU counts (6 N per token with N
// the active parameters); nothing for the backward ops (their products
// are counted at the forward), for a recomputed forward, or for the
// load-balancing statistics' second logits product.
TEST(ModelFlops, MixtureOfExpertsCountsTheActiveExpertsProducts) {
  std::vector<std::vector<int64_t>> shapes;
  auto shapeOf = [&](size_t i) -> const std::vector<int64_t> & {
    return shapes.at(i);
  };
  PlanOp router;
  router.kind = OpKind::MoeRouter;
  router.attrs = defaultAttrs(router.kind);
  shapes = {{1, 4096, 4096}, {8, 4096}};
  EXPECT_EQ(modelFlops(router, shapeOf), 3.0 * 2 * 4096 * 8 * 4096);
  PlanOp experts;
  experts.kind = OpKind::MoeExperts;
  experts.attrs = defaultAttrs(experts.kind);
  shapes = {{1, 4096, 4096},  {1, 4096, 2},     {1, 4096, 2},
            {8, 14336, 4096}, {8, 14336, 4096}, {8, 4096, 14336}};
  // Per token that is 6 x the active expert parameters (three 4096 x 14336
  // matrices in each of the 2 experts): 6 N as PaLM counts it.
  EXPECT_EQ(modelFlops(experts, shapeOf) / 4096, 6.0 * 3 * 4096 * 14336 * 2);
  experts.recompute = "layers.0";
  EXPECT_EQ(modelFlops(experts, shapeOf), 0.0);
  for (OpKind kind : {OpKind::MoeExpertsBackward, OpKind::MoeRouterBackward,
                      OpKind::MoeRouterStats, OpKind::MoeRouterStatsBackward}) {
    PlanOp other;
    other.kind = kind;
    other.attrs = defaultAttrs(kind);
    other.flops = 1000;
    EXPECT_EQ(modelFlops(other, shapeOf), 0.0) << opKindName(kind);
  }
}

TEST(Simulator, CollectiveOnTheComputeStreamIsAllExposed) {
  Plan plan = planWith(
      {computeOp(0, 1.0),
       collectiveOp(1, "reduce_scatter_start", "reduce_scatter", 0, 3.0),
       op(2, "wait", 0, {1})});
  StepPrediction p = predict(plan, exactCluster());
  EXPECT_NEAR(p.stepSeconds, 4 * kMs + rsEpilogue(3e6), kTol);
  EXPECT_NEAR(p.exposedComm, 3 * kMs + rsEpilogue(3e6), kTol);
}

TEST(Simulator, ExposedOffloadIsSeparate) {
  Plan plan = offloadPlan();
  StepPrediction p = predict(plan, exactCluster());
  // The compute stream's wait on the fetch blocks for the whole fetch.
  double fetch = 1e6 / 0.25e9 + 1e6 / 1e9;
  EXPECT_NEAR(p.exposedOffload, fetch, kTol);
  EXPECT_EQ(p.exposedComm, 0.0);
}

TEST(Simulator, PlanMustFitTheCluster) {
  Plan plan = planWith({computeOp(0, 1.0)});
  plan.worldSize = 3;
  Expected<StepPrediction> p = predictStep(plan, exactCluster());
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message,
            "the plan runs on 3 ranks but cluster 'exact' has 2 GPUs (1 node "
            "x 2); describe a cluster with 2 nodes");
}

//===----------------------------------------------------------------------===//
// Memory over the schedule
//===----------------------------------------------------------------------===//

TEST(MemoryCurve, PersistentPlusLiveValues) {
  // 1,000 B of persistent device state. A gather (2 ms) fills a 400 B
  // buffer from its start; compute (1 ms) writes a 100 B value used by the
  // next op; the wait yields the buffer, released at 3 ms.
  Plan plan =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 2.0),
                computeOp(1, 1.0), computeOp(2, 1.0), op(3, "wait", 0, {0}),
                op(4, "release", 0)});
  PlanTensor t;
  t.name = "p";
  t.role = TensorRole::Param;
  t.dtype = DType::BF16;
  t.shape = {500};
  t.numel = 500;
  t.localNumel = 500;
  t.placement = Placement::Device;
  plan.tensors = {t};
  PlanPhase &phase = plan.phases[0];
  phase.values = {value(10, DType::BF16, 50), value(11, DType::BF16, 200)};
  phase.ops[1].outputs = {10};
  phase.ops[2].inputs = {10};
  phase.ops[3].outputs = {11};
  phase.ops[4].inputs = {11};
  StepPrediction p = predict(plan, exactCluster());
  MemoryCurve curve = deviceMemoryCurve(plan, p);
  EXPECT_EQ(curve.persistentBytes, 1000);
  // 0: +400 (gather buffer) and +100 (op 1 starts); 2 ms: -100 (op 2 ends)
  // and -400 (the release at 2 ms, after the wait).
  ASSERT_EQ(curve.points.size(), 2u);
  EXPECT_EQ(curve.points[0], (std::pair<double, double>{0.0, 1500.0}));
  EXPECT_NEAR(curve.points[1].first, 2 * kMs, kTol);
  EXPECT_EQ(curve.points[1].second, 1000.0);
  EXPECT_EQ(curve.peakBytes, 1500.0);
}

//===----------------------------------------------------------------------===//
// Chrome trace and SVG
//===----------------------------------------------------------------------===//

TEST(ChromeTrace, ParsesBackWithEveryField) {
  Plan plan =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 6.0),
                computeOp(1, 4.0), op(2, "wait", 0, {0}), computeOp(3, 4.0)});
  plan.phases[0].ops[1].where = "h.0 \"attn\" <&>";
  StepPrediction p = predict(plan, exactCluster());
  json parsed = json::parse(chromeTrace(plan, p).dump());
  ASSERT_TRUE(parsed.contains("traceEvents"));
  const json &events = parsed["traceEvents"];
  ASSERT_TRUE(events.is_array());
  int complete = 0, threadNames = 0;
  for (const json &e : events) {
    SCOPED_TRACE(e.dump());
    for (const char *key : {"ph", "ts", "pid", "tid", "name"})
      ASSERT_TRUE(e.contains(key)) << key;
    ASSERT_TRUE(e["ph"].is_string());
    EXPECT_TRUE(e["ts"].is_number());
    EXPECT_TRUE(e["pid"].is_number_integer());
    EXPECT_TRUE(e["tid"].is_number_integer());
    if (e["ph"] == "X") {
      ++complete;
      ASSERT_TRUE(e.contains("dur"));
      EXPECT_GT(e["dur"].get<double>(), 0);
      EXPECT_GE(e["ts"].get<double>(), 0);
    } else {
      EXPECT_EQ(e["ph"], "M");
      if (e["name"] == "thread_name")
        ++threadNames;
    }
  }
  // The gather, two compute ops and the blocked wait.
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(threadNames, 4);
  // Microseconds: the wait blocks from 4 ms for 2 ms.
  bool sawBlocked = false;
  for (const json &e : events)
    if (e["ph"] == "X" && e["cat"] == "blocked") {
      sawBlocked = true;
      // nlohmann::json writes doubles with 17 digits: they read back exact.
      EXPECT_NEAR(e["ts"].get<double>(), 4000, 4000 * kRelTol);
      EXPECT_NEAR(e["dur"].get<double>(), 2000, 2000 * kRelTol);
      EXPECT_EQ(e["args"]["waiting_for_op"], 0);
    }
  EXPECT_TRUE(sawBlocked);
}

/// A small XML well-formedness check: one root element, every tag closed in
/// order, attributes quoted, no raw '<' or stray '&' in text or attribute
/// values. Returns an empty string when the document is well formed.
std::string xmlProblem(const std::string &doc) {
  size_t i = 0;
  std::vector<std::string> open;
  bool sawRoot = false;
  auto nameChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == ':' || c == '.';
  };
  auto checkEntities = [](const std::string &text) -> std::string {
    for (size_t k = 0; k < text.size(); ++k) {
      if (text[k] == '<')
        return "raw '<'";
      if (text[k] != '&')
        continue;
      size_t semi = text.find(';', k);
      if (semi == std::string::npos)
        return "unterminated entity";
      std::string entity = text.substr(k + 1, semi - k - 1);
      if (entity != "amp" && entity != "lt" && entity != "gt" &&
          entity != "quot" && entity != "apos" &&
          !(entity.size() > 1 && entity[0] == '#'))
        return "unknown entity &" + entity + ";";
    }
    return "";
  };
  if (doc.compare(0, 5, "<?xml") == 0) {
    i = doc.find("?>");
    if (i == std::string::npos)
      return "unterminated XML declaration";
    i += 2;
  }
  while (i < doc.size()) {
    size_t lt = doc.find('<', i);
    std::string text =
        doc.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    if (std::string p = checkEntities(text); !p.empty())
      return p;
    if (open.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos)
      return "text outside the root element";
    if (lt == std::string::npos)
      break;
    if (doc.compare(lt, 4, "<!--") == 0) {
      size_t end = doc.find("-->", lt);
      if (end == std::string::npos)
        return "unterminated comment";
      i = end + 3;
      continue;
    }
    size_t gt = lt + 1;
    char quote = 0;
    for (; gt < doc.size(); ++gt) {
      if (quote) {
        if (doc[gt] == quote)
          quote = 0;
      } else if (doc[gt] == '"' || doc[gt] == '\'') {
        quote = doc[gt];
      } else if (doc[gt] == '>') {
        break;
      }
    }
    if (gt >= doc.size())
      return "unterminated tag";
    std::string tag = doc.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (!tag.empty() && tag[0] == '/') {
      std::string name = tag.substr(1);
      if (open.empty() || open.back() != name)
        return "unbalanced </" + name + ">";
      open.pop_back();
      continue;
    }
    bool selfClosing = !tag.empty() && tag.back() == '/';
    if (selfClosing)
      tag.pop_back();
    size_t k = 0;
    while (k < tag.size() && nameChar(tag[k]))
      ++k;
    std::string name = tag.substr(0, k);
    if (name.empty())
      return "tag without a name";
    // Attributes: name="value" separated by spaces.
    while (k < tag.size()) {
      while (k < tag.size() && std::isspace(static_cast<unsigned char>(tag[k])))
        ++k;
      if (k >= tag.size())
        break;
      size_t start = k;
      while (k < tag.size() && nameChar(tag[k]))
        ++k;
      if (k == start || k >= tag.size() || tag[k] != '=')
        return "bad attribute in <" + name + ">";
      ++k;
      if (k >= tag.size() || (tag[k] != '"' && tag[k] != '\''))
        return "unquoted attribute in <" + name + ">";
      char q = tag[k];
      size_t end = tag.find(q, k + 1);
      if (end == std::string::npos)
        return "unterminated attribute in <" + name + ">";
      if (std::string p = checkEntities(tag.substr(k + 1, end - k - 1));
          !p.empty())
        return p + " in an attribute of <" + name + ">";
      k = end + 1;
    }
    if (open.empty()) {
      if (sawRoot)
        return "a second root element <" + name + ">";
      sawRoot = true;
    }
    if (!selfClosing)
      open.push_back(name);
  }
  if (!open.empty())
    return "<" + open.back() + "> is never closed";
  return sawRoot ? "" : "no root element";
}

TEST(ScheduleSvg, TheCheckerCatchesBrokenXml) {
  EXPECT_EQ(xmlProblem("<svg><rect x=\"1\"/></svg>"), "");
  EXPECT_EQ(xmlProblem("<svg><g></svg>"), "unbalanced </svg>");
  EXPECT_EQ(xmlProblem("<svg><text>a < b</text></svg>"), "tag without a name");
  EXPECT_EQ(xmlProblem("<svg a=\"<\"></svg>"),
            "raw '<' in an attribute of <svg>");
  EXPECT_EQ(xmlProblem("<svg><text>a & b</text></svg>"), "unterminated entity");
  EXPECT_EQ(xmlProblem("<svg><text>&nbsp;</text></svg>"),
            "unknown entity &nbsp;");
  EXPECT_EQ(xmlProblem("<svg x=1></svg>"), "unquoted attribute in <svg>");
  EXPECT_EQ(xmlProblem("<svg></svg><svg></svg>"),
            "a second root element <svg>");
  EXPECT_EQ(xmlProblem("<svg>"), "<svg> is never closed");
}

TEST(ScheduleSvg, WellFormedSelfContainedAndEscaped) {
  Plan plan =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 6.0),
                computeOp(1, 4.0), op(2, "wait", 0, {0}), computeOp(3, 4.0)});
  plan.model.name = "tiny <&> \"model\"";
  plan.phases[0].ops[1].where = "h.0 <attn> & 'mlp'";
  PlanPhase optimizer;
  optimizer.kind = PhaseKind::OptimizerStep;
  optimizer.ops = {computeOp(0, 1.0)};
  plan.phases.push_back(optimizer);
  StepPrediction p = predict(plan, exactCluster());
  std::string svg = scheduleSvg(plan, p);
  EXPECT_EQ(xmlProblem(svg), "");
  EXPECT_EQ(svg.compare(0, 5, "<?xml"), 0);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            std::string::npos);
  // Self-contained: no scripts, links, images or external fonts.
  for (const char *banned : {"<script", "href", "<image", "@import", "url("})
    EXPECT_EQ(svg.find(banned), std::string::npos) << banned;
  EXPECT_EQ(svg.find("http://", svg.find("http://") + 1), std::string::npos);
  EXPECT_NE(svg.find("tiny &lt;&amp;&gt; &quot;model&quot;"),
            std::string::npos);
  EXPECT_NE(svg.find("h.0 &lt;attn&gt; &amp; &apos;mlp&apos;"),
            std::string::npos);
  // Axis labels, the legend and the streams.
  for (const char *text :
       {"time (ms)", "device memory per rank (GiB)", "compute", "gather",
        "collective", "stream blocked in a wait", "optimizer_step"})
    EXPECT_NE(svg.find(text), std::string::npos) << text;
}

//===----------------------------------------------------------------------===//
// Inspect and the presets
//===----------------------------------------------------------------------===//

TEST(InspectTime, SectionsAppearWithACluster) {
  Plan plan =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 6.0),
                computeOp(1, 4.0), op(2, "wait", 0, {0}), computeOp(3, 4.0)});
  Cluster c = exactCluster();
  Expected<InspectOptions> options = inspectOptions(plan, c);
  ASSERT_TRUE(options) << options.error().str();
  json j = inspectJson(plan, *options);
  EXPECT_EQ(j["cluster"], "exact");
  EXPECT_NEAR(j["predicted_step_time_s"].get<double>(), 10 * kMs, kTol);
  EXPECT_NEAR(j["exposed_comm_s"].get<double>(), 2 * kMs, kTol);
  EXPECT_NEAR(j["stream_busy_s"]["compute"].get<double>(), 8 * kMs, kTol);
  EXPECT_NEAR(j["stream_busy_s"]["gather"].get<double>(), 6 * kMs, kTol);
  EXPECT_NEAR(j["achieved_tflops_per_gpu"].get<double>(), 0.8, 0.8 * kRelTol);
  ASSERT_EQ(j["most_exposed_collectives"].size(), 1u);
  EXPECT_EQ(j["most_exposed_collectives"][0]["op"], 0);
  EXPECT_EQ(j["most_exposed_collectives"][0]["comm_elements"], 6000000);

  std::string text = inspectText(plan, *options);
  EXPECT_NE(text.find("predicted time per step on exact"), std::string::npos)
      << text;
  EXPECT_NE(text.find("  step time                      10.00 ms\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("stream busy time per step"), std::string::npos);
  EXPECT_NE(text.find("most exposed collectives"), std::string::npos);

  // Without a cluster, none of it.
  json plain = inspectJson(plan);
  EXPECT_FALSE(plain.contains("predicted_step_time_s"));
  EXPECT_EQ(inspectText(plan).find("predicted"), std::string::npos);
}

TEST(Presets, PredictTheExamplePlan) {
  Expected<Plan> plan = loadPlan(std::string(ZEROC_SOURCE_DIR) +
                                 "/test/zeroc/Inputs/plan-stage3.json");
  ASSERT_TRUE(plan) << plan.error().str();
  for (const std::string &name : clusterPresetNames()) {
    SCOPED_TRACE(name);
    Expected<Cluster> c = clusterPreset(name);
    ASSERT_TRUE(c);
    Expected<StepPrediction> p = predictStep(*plan, *c);
    if (c->gpus() < plan->worldSize) {
      EXPECT_FALSE(p);
      continue;
    }
    ASSERT_TRUE(p) << p.error().str();
    EXPECT_GT(p->stepSeconds, 0);
    EXPECT_LE(p->exposedComm + p->exposedOffload, p->stepSeconds + kTol);
    for (double busy : p->streamBusy)
      EXPECT_LE(busy, p->stepSeconds + kTol);
    EXPECT_EQ(xmlProblem(scheduleSvg(*plan, *p)), "");
    EXPECT_NO_THROW(json::parse(chromeTrace(*plan, *p).dump()));
  }
}

} // namespace

// Every model op kind is costed as a kernel (the roofline of its FLOPs and
// bytes), and no other kind is: CostModel::cost decides each kind in one
// switch, so a new kind is a compile error there and a failure here.
TEST(OpCost, EveryModelOpKindIsAKernel) {
  Plan plan = planWith({});
  Cluster c = exactCluster();
  CostModel model(plan, c);
  for (OpKind kind : kAllOpKinds) {
    if (!isModelOp(kind))
      continue;
    SCOPED_TRACE(opKindName(kind));
    PlanOp o = op(0, opKindName(kind), 0);
    o.flops = 2'000'000'000;
    OpCost cost = model.cost(plan.phases[0], o);
    EXPECT_EQ(cost.cls, OpClass::Compute);
    EXPECT_NEAR(cost.seconds, 2e-3, kTol); // 2 GFLOP at 1 TFLOP/s
    EXPECT_EQ(cost.flops, 2e9);
  }
}

//===----------------------------------------------------------------------===//
// Calibration (zerorun --calibrate's figures)
//===----------------------------------------------------------------------===//

namespace {

constexpr double kC0 = ClusterCalibration::kMatmulClassFlops[0];
constexpr double kC1 = ClusterCalibration::kMatmulClassFlops[1];
constexpr double kC2 = ClusterCalibration::kMatmulClassFlops[2];

} // namespace

TEST(Calibration, MatmulRateInterpolatesInLogFlops) {
  ClusterCalibration cal;
  cal.matmul[0][0] = 10e9;
  cal.matmul[0][1] = 20e9;
  cal.matmul[0][2] = 40e9;
  EXPECT_EQ(calibratedMatmulRate(cal, DType::F32, kC0), 10e9);
  EXPECT_EQ(calibratedMatmulRate(cal, DType::F32, kC0 / 100), 10e9);
  EXPECT_EQ(calibratedMatmulRate(cal, DType::F32, kC2 * 100), 40e9);
  // Half way between two classes in log(FLOPs): half way in rate.
  EXPECT_NEAR(calibratedMatmulRate(cal, DType::F32, std::sqrt(kC1 * kC2)), 30e9,
              1e-3);
  // No bf16 figures: no calibrated rate, the roofline applies.
  EXPECT_EQ(calibratedMatmulRate(cal, DType::BF16, kC1), 0.0);
  Cluster c = exactCluster();
  c.calibration = cal;
  EXPECT_NEAR(kernelTime(c, OpKind::LinearGradWeight, kC1, 0, DType::F32),
              kC1 / 20e9, 1e-15);
  EXPECT_NEAR(kernelTime(c, OpKind::Linear, 1e9, 0, DType::BF16), 1e-3, kTol);
}

// A flash attention op of a calibrated shape is priced at that shape's
// rate, each direction at its own; another shape at the classes'.
TEST(Calibration, AttentionOfACalibratedShapeTakesItsRate) {
  Cluster c = exactCluster();
  c.calibration.attention = 100e12;
  c.calibration.attentionBackward = 80e12;
  AttentionGeometry g{2, 8192, 32, 8, 128, 0};
  int bf16 = ClusterCalibration::matmulIndex(DType::BF16);
  c.calibration.attentionByShape[{bf16, false, g}] = 300e12;
  c.calibration.attentionByShape[{bf16, true, g}] = 200e12;
  const double flops = 1e12, work = 8192.0 * 8192 * 128;
  EXPECT_NEAR(kernelTime(c, OpKind::CausalAttention, flops, 0, DType::BF16,
                         false, 0, work, nullptr, &g),
              flops / 300e12, 1e-15);
  EXPECT_NEAR(kernelTime(c, OpKind::CausalAttentionBackward, flops, 0,
                         DType::BF16, false, 0, work, nullptr, &g),
              flops / 200e12, 1e-15);
  // Another shape, or no shape, or another dtype: the classes' rate.
  AttentionGeometry other = g;
  other.kvHeads = 32;
  const AttentionGeometry *shapes[] = {&other, nullptr};
  for (const AttentionGeometry *at : shapes)
    EXPECT_NEAR(kernelTime(c, OpKind::CausalAttention, flops, 0, DType::BF16,
                           false, 0, work, nullptr, at),
                flops / 100e12, 1e-15);
  EXPECT_NEAR(kernelTime(c, OpKind::CausalAttention, flops, 0, DType::F32,
                         false, 0, work, nullptr, &g),
              flops / 100e12, 1e-15);
}

// Host-bound classes (an H100's bf16 GEMMs of side 64 to 1024 all took 19-22 us
// a call): between them a product takes no less than the smaller class's
// call, where the rate interpolated in log(FLOPs) alone would price 67
// MFLOP at 3.8 us and 34 MFLOP at 19.5.
TEST(Calibration, NoProductFasterThanASmallerClassCall) {
  ClusterCalibration cal;
  cal.matmul[1][0] = kC0 / 19.3e-6;
  cal.matmul[1][1] = kC1 / 19.5e-6;
  cal.matmul[1][2] = kC2 / 22.2e-6;
  double last = 0;
  for (double f = kC0; f <= kC2; f *= 1.25) {
    double t = f / calibratedMatmulRate(cal, DType::BF16, f);
    EXPECT_GE(t, last * (1 - 1e-12)) << f;
    last = t;
  }
  EXPECT_NEAR(2 * kC1 / calibratedMatmulRate(cal, DType::BF16, 2 * kC1),
              19.5e-6, 1e-12);
  // Where the classes' calls grow with their work, the interpolation
  // stands (half way in log(FLOPs), half way in rate).
  cal.matmul[1][1] = 20e9;
  cal.matmul[1][2] = 40e9;
  EXPECT_NEAR(calibratedMatmulRate(cal, DType::BF16, std::sqrt(kC1 * kC2)),
              30e9, 1e-3);
}

// Each linear kind at its own measured rate where the calibration has one
// (the forward's epilogue: 1.39 times the gradients' time at 64^3 on this
// CPU), the three kinds' mean otherwise.
TEST(Calibration, LinearKindsTakeTheirOwnRates) {
  // The table's index names plan op kinds (zerorun --calibrate times them
  // by these names).
  for (std::string_view name : ClusterCalibration::kMatmulKindNames)
    EXPECT_TRUE(parseOpKind(name).has_value()) << name;
  ClusterCalibration cal;
  cal.matmul[0][0] = 30e9;
  cal.matmul[0][1] = 60e9;
  EXPECT_EQ(calibratedMatmulRate(cal, DType::F32, kC0, OpKind::Linear), 30e9);
  cal.matmulKind[0][0][0] = 20e9; // linear
  cal.matmulKind[0][0][1] = 50e9;
  cal.matmulKind[0][2][0] = 40e9; // linear_grad_weight
  EXPECT_EQ(calibratedMatmulRate(cal, DType::F32, kC0, OpKind::Linear), 20e9);
  EXPECT_NEAR(calibratedMatmulRate(cal, DType::F32, std::sqrt(kC0 * kC1),
                                   OpKind::Linear),
              35e9, 1e-3);
  EXPECT_EQ(
      calibratedMatmulRate(cal, DType::F32, kC0, OpKind::LinearGradWeight),
      40e9);
  // linear_grad_input not measured alone: the mean; no kind: the mean.
  EXPECT_EQ(calibratedMatmulRate(cal, DType::F32, kC0, OpKind::LinearGradInput),
            30e9);
  EXPECT_EQ(calibratedMatmulRate(cal, DType::F32, kC0), 30e9);
  Cluster c = exactCluster();
  c.calibration = cal;
  EXPECT_NEAR(kernelTime(c, OpKind::Linear, kC0, 0, DType::F32), kC0 / 20e9,
              1e-15);
  EXPECT_NEAR(kernelTime(c, OpKind::LinearGradInput, kC0, 0, DType::F32),
              kC0 / 30e9, 1e-15);
}

// The three kinds of one layer share its geometry, read off the operands
// as the kernels take them (runtime/kernels/cpu/Linear.h).
TEST(Calibration, LinearGeometryOfEachKind) {
  using G = LinearGeometry;
  EXPECT_EQ(linearGeometry(OpKind::Linear, {8, 1024, 768}, {8, 1024, 50257}),
            (G{8192, 768, 50257}));
  EXPECT_EQ(
      linearGeometry(OpKind::LinearGradInput, {8, 1024, 50257}, {8, 1024, 768}),
      (G{8192, 768, 50257}));
  EXPECT_EQ(
      linearGeometry(OpKind::LinearGradWeight, {8, 1024, 50257}, {50257, 768}),
      (G{8192, 768, 50257}));
  EXPECT_EQ(linearGeometry(OpKind::Linear, {64}, {32}), (G{1, 64, 32}));
  EXPECT_EQ((G{8192, 768, 50257}).flops(), 2.0 * 8192 * 768 * 50257);
  // Not a linear, no shapes, a weight gradient that is not [out, in].
  EXPECT_FALSE(linearGeometry(OpKind::Add, {4, 4}, {4, 4}));
  EXPECT_FALSE(linearGeometry(OpKind::Linear, {}, {4, 4}));
  EXPECT_FALSE(linearGeometry(OpKind::LinearGradWeight, {8, 6}, {5, 4}));
  EXPECT_FALSE(linearGeometry(OpKind::LinearGradWeight, {8, 6}, {6, 4, 1}));
  EXPECT_FALSE(linearGeometry(OpKind::Linear, {0, 4}, {0, 6}));
}

// Where the calibration timed the plan's own GEMM (zerorun --calibrate
// --shapes), the op takes that rate, over the classes' interpolation and
// the misaligned factor; another shape keeps them.
TEST(Calibration, ThePlansOwnGemmTakesItsMeasuredRate) {
  using C = ClusterCalibration;
  using G = LinearGeometry;
  Cluster c = exactCluster();
  c.calibration.matmul[1][2] = 100e12; // bf16, 1024^3
  c.calibration.matmul[1][3] = 600e12; // bf16, 4096^3
  c.calibration.matmulMisaligned[1] = 120e12;
  const G lm{8192, 768, 50257};
  c.calibration.matmulShape[{C::matmulIndex(DType::BF16), 0, lm}] = 150e12;
  c.calibration.matmulShape[{C::matmulIndex(DType::BF16), 2, lm}] = 90e12;
  // f32's entry does not price a bf16 op.
  c.calibration.matmulShape[{C::matmulIndex(DType::F32), 1, lm}] = 1e12;
  // Each kind of lm_head in a plan: dy [8, 1024, vocab], x [8, 1024, 768].
  auto seconds = [&](const char *kind, int64_t vocab) {
    return firstOpSeconds(
        linearLayerPlan(kind, {8, 1024}, 768, vocab, DType::BF16), c);
  };
  const double flops = lm.flops();
  EXPECT_NEAR(seconds("linear", 50257), flops / 150e12, 1e-12);
  EXPECT_NEAR(seconds("linear_grad_weight", 50257), flops / 90e12, 1e-12);
  // linear_grad_input was not timed in bf16: the classes' rate (past the
  // largest class: 600) times the misaligned factor (120 / 600).
  EXPECT_NEAR(seconds("linear_grad_input", 50257), flops / 120e12, 1e-12);
  // A padded vocabulary is another GEMM: aligned, the classes' rate.
  const double padded = 2.0 * 8192 * 768 * 50304;
  EXPECT_NEAR(seconds("linear", 50304), padded / 600e12, 1e-12);
}

// On a CPU rank of several kernel threads, the share of a split GEMM's
// (and an attention's) bytes the other threads compute crosses between
// cores, at the calibrated handoff rate: those kinds were calibrated on
// operands in each thread's own cache (bench/RESULTS.md, runs 37-38). A
// product the kernels do not split (gemmSlices) pays nothing.
TEST(Calibration, CpuThreadsPayTheHandoffOfSplitGemms) {
  Cluster c = exactCluster();
  c.calibration.device = "cpu";
  for (auto &rates : c.calibration.matmul) // Whatever the plan's dtype.
    rates[0] = 50e9;
  c.calibration.kernelBandwidth["default"] = 10e9;
  c.calibration.serialKernelElements = 32768;
  c.calibration.handoffBandwidth = 20e9;
  // `kind` of a layer of `rows` x `in` -> `out`, its flops and bytes as a
  // plan counts them (f32 operands and result, no bias).
  auto seconds = [&](const char *kind, int64_t rows, int64_t in, int64_t out,
                     double threads) {
    c.calibration.threadsPerRank = threads;
    return firstOpSeconds(linearLayerPlan(kind, {rows}, in, out, DType::F32),
                          c);
  };
  // 512 x 256 -> 256: 33.5M multiply-adds, split into 4 slices of 128
  // rows (or columns) whichever kind.
  ASSERT_GT(gemmSlices(512, 256, 256).count, 1);
  const double flops = 2.0 * 512 * 256 * 256,
               bytes = 4.0 * (512 * 256 + 256 * 256 + 512 * 256);
  const double gemm = flops / 50e9;
  // One thread: no handoff. Two: half the bytes at 20 GB/s; four: three
  // quarters.
  EXPECT_NEAR(seconds("linear", 512, 256, 256, 1), gemm, 1e-15);
  EXPECT_NEAR(seconds("linear", 512, 256, 256, 2), gemm + bytes / 2 / 20e9,
              1e-15);
  EXPECT_NEAR(seconds("linear_grad_input", 512, 256, 256, 2),
              gemm + bytes / 2 / 20e9, 1e-15);
  EXPECT_NEAR(seconds("linear_grad_weight", 512, 256, 256, 4),
              gemm + bytes * 0.75 / 20e9, 1e-15);
  // 64^3 (262K multiply-adds, below the slices' threshold) runs on the
  // calling thread: tiny models' products are not split.
  ASSERT_EQ(gemmSlices(64, 64, 64).count, 1);
  EXPECT_NEAR(seconds("linear", 64, 64, 64, 2), 2.0 * 64 * 64 * 64 / 50e9,
              1e-15);
  // Memory-bound kinds were calibrated on operands from memory.
  PlanOp add = op(0, "add", 0);
  add.bytes = 49152;
  c.calibration.threadsPerRank = 2;
  Plan plan = planWith({add});
  EXPECT_NEAR(
      CostModel(plan, c).cost(plan.phases[0], plan.phases[0].ops[0]).seconds,
      49152 / 10e9, 1e-15);
  // Not measured, or measured on a GPU: none.
  c.calibration.handoffBandwidth = 0;
  EXPECT_NEAR(seconds("linear", 512, 256, 256, 2), gemm, 1e-15);
  c.calibration.handoffBandwidth = 20e9;
  c.calibration.device = "cuda";
  EXPECT_NEAR(seconds("linear", 512, 256, 256, 2), gemm, 1e-15);
}

/// exactCluster() (two ranks a node) calibrated on a CPU of one thread a
/// rank with `cacheBytes` of last-level cache: add at 10 GB/s from memory,
/// 40 in cache.
Cluster cacheCluster(double cacheBytes) {
  Cluster c = exactCluster();
  c.calibration.device = "cpu";
  c.calibration.threadsPerRank = 1;
  c.calibration.kernelBandwidth["add"] = 10e9;
  c.calibration.kernelHotBandwidth["add"] = 40e9;
  c.calibration.cacheBytes = cacheBytes;
  return c;
}

/// f32 parameters of `elements` each on every rank, by name.
void addTensors(Plan &plan,
                const std::vector<std::pair<std::string, int64_t>> &tensors) {
  for (const auto &[name, elements] : tensors) {
    PlanTensor t;
    t.name = name;
    t.numel = t.localNumel = elements;
    plan.tensors.push_back(t);
  }
}

/// An optimizer phase after the plan's that streams over `tensor` (a
/// zero_grads of it).
void streamThrough(Plan &plan, const std::string &tensor) {
  PlanPhase opt;
  opt.kind = PhaseKind::OptimizerStep;
  PlanOp zero = op(0, "zero_grads", 0);
  zero.tensors = {tensor};
  opt.ops = {zero};
  plan.phases.push_back(opt);
}

// Residency: an op's operands that the bytes touched since their last use
// and they themselves fit in the rank's share of the last-level cache are
// read from cache, the others from memory. The op's bytes (a GEMM's FLOPs)
// take the in-cache and from-memory rates in that proportion (both
// measured on a CPU: bench/RESULTS.md, run 41).
TEST(Calibration, OperandsStillInCacheTakeTheInCacheRate) {
  Cluster c = cacheCluster(2 << 20);       // 1 MiB a rank.
  const int64_t quarter = (256 << 10) / 4; // f32 elements of 256 KiB.
  auto addOp = [&](int64_t index, std::vector<int64_t> in, int64_t out) {
    PlanOp o = op(index, "add", 0);
    o.inputs = std::move(in);
    o.outputs = {out};
    return o;
  };
  // a = x + w (both first used here); b = a + w (both just used; b new);
  // a 3 MiB product of two 1 MiB values (past the cache); d = x + b
  // (both used before that product); another such product, after which
  // the next step's first op finds nothing of this one's in cache.
  auto product = [&](int64_t index, int64_t a, int64_t b, int64_t out) {
    PlanOp o = op(index, "mul", 0);
    o.inputs = {a, b};
    o.outputs = {out};
    return o;
  };
  Plan plan =
      planWith({addOp(0, {1, 2}, 3), addOp(1, {3, 2}, 4), product(2, 5, 6, 7),
                addOp(3, {1, 4}, 8), product(4, 9, 10, 11)});
  plan.model.dtype = DType::F32;
  PlanPhase &ph = plan.phases[0];
  for (int64_t id : {1, 2, 3, 4, 8})
    ph.values.push_back(value(id, DType::F32, quarter));
  for (int64_t id : {5, 6, 7, 9, 10, 11})
    ph.values.push_back(value(id, DType::F32, 4 * quarter));
  for (PlanOp &o : ph.ops)
    o.bytes = o.kind == OpKind::Add ? 3 * (256 << 10) : 3 * (1 << 20);
  auto seconds = [&](size_t i) {
    return CostModel(plan, c).cost(ph, ph.ops[i]).seconds;
  };
  const double bytes = 3 * (256 << 10);
  EXPECT_NEAR(seconds(0), bytes / 10e9, 1e-15);
  EXPECT_NEAR(seconds(1), bytes * (2.0 / 3 / 40e9 + 1.0 / 3 / 10e9), 1e-15);
  EXPECT_NEAR(seconds(3), bytes / 10e9, 1e-15);
  // One rank on the node: 2 MiB; x and b were touched 3.75 and 3 MiB
  // before: still from memory. Without the cache's size: every op from
  // memory, as before the residency.
  c.gpusPerNode = 1;
  EXPECT_NEAR(seconds(1), bytes * (2.0 / 3 / 40e9 + 1.0 / 3 / 10e9), 1e-15);
  EXPECT_NEAR(seconds(3), bytes / 10e9, 1e-15);
  c.gpusPerNode = 2;
  c.calibration.cacheBytes = 0;
  EXPECT_NEAR(seconds(1), bytes / 10e9, 1e-15);
  // Without an in-cache rate for the kind: its one rate.
  c.calibration.cacheBytes = 2 << 20;
  c.calibration.kernelHotBandwidth.clear();
  EXPECT_NEAR(seconds(1), bytes / 10e9, 1e-15);

  // A linear right after the op that wrote its input: x [64, 128] in cache,
  // the weight [256, 128] and y [64, 256] from memory (a 3 MiB product
  // after it each step); the plan's own GEMM timed both ways.
  using C = ClusterCalibration;
  const LinearGeometry g{64, 128, 256};
  c.calibration.matmulShape[{C::matmulIndex(DType::F32), 0, g}] = 50e9;
  c.calibration.matmulShapeCold[{C::matmulIndex(DType::F32), 0, g}] = 25e9;
  PlanOp lin = op(1, "linear", 0);
  lin.inputs = {3, 2};
  lin.outputs = {4};
  lin.flops = int64_t(g.flops());
  Plan lp = planWith({addOp(0, {1, 1}, 3), lin, product(2, 5, 6, 7)});
  lp.model.dtype = DType::F32;
  auto shaped = [](int64_t id, std::vector<int64_t> shape) {
    PlanValue v = value(id, DType::F32, shape[0] * shape[1]);
    v.shape = std::move(shape);
    return v;
  };
  lp.phases[0].values = {shaped(1, {64, 128}), shaped(3, {64, 128}),
                         shaped(2, {256, 128}), shaped(4, {64, 256})};
  for (int64_t id : {5, 6, 7})
    lp.phases[0].values.push_back(value(id, DType::F32, 4 * quarter));
  const double x = 64 * 128 * 4, w = 256 * 128 * 4, y = 64 * 256 * 4;
  const double hot = x / (x + w + y);
  CostModel model(lp, c);
  EXPECT_NEAR(model.cost(lp.phases[0], lp.phases[0].ops[1]).seconds,
              g.flops() * (hot / 50e9 + (1 - hot) / 25e9), 1e-15);
  // Only timed in cache: that rate, whatever the residency.
  c.calibration.matmulShapeCold.clear();
  EXPECT_NEAR(CostModel(lp, c).cost(lp.phases[0], lp.phases[0].ops[1]).seconds,
              g.flops() / 50e9, 1e-15);
}

// A step follows a step: a weight (a `read` of a parameter) that the last
// step used is still in cache where what ran since fits beside it (a tiny
// model's whole step), and a result written where an arena value lived
// writes cached lines; an optimizer streaming more than the cache over its
// states evicts both (a small model's: its GEMMs ran at their from-memory
// rates, bench/RESULTS.md, run 41).
TEST(Calibration, AWeightTheLastStepLeftInCacheIsFoundThere) {
  Cluster c = cacheCluster(2 << 20);
  const int64_t quarter = (256 << 10) / 4; // f32 elements of 256 KiB.
  PlanOp read = op(0, "read", 0);
  read.tensors = {"w"};
  read.outputs = {1};
  PlanOp add = op(1, "add", 0);
  add.inputs = {1, 1};
  add.outputs = {2};
  add.bytes = 3 * (256 << 10);
  Plan plan = planWith({read, add});
  plan.model.dtype = DType::F32;
  PlanValue w = value(1, DType::F32, quarter),
            y = value(2, DType::F32, quarter);
  y.offset = 0; // In the arena.
  plan.phases[0].values = {w, y};
  addTensors(plan, {{"w", quarter}, {"states", 4 << 20}});
  auto seconds = [&] {
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[1]).seconds;
  };
  EXPECT_NEAR(seconds(), add.bytes / 40e9, 1e-15);
  // An optimizer phase over 16 MiB of states between two steps.
  streamThrough(plan, "states");
  EXPECT_NEAR(seconds(), add.bytes / 10e9, 1e-15);
}

// The residency follows memory, not value ids: a parameter read in two
// phases is one piece of memory, and so is an arena offset two values
// share; what a wait yields (gathered parameters) was touched there; the
// node's ranks share its cache; a phase of R runs a step weighs its first
// run 1 / R.
TEST(Calibration, ResidencyFollowsMemoryAndTheRanksShareTheCache) {
  Cluster c = cacheCluster(3 << 20);       // 1.5 MiB a rank.
  const int64_t quarter = (256 << 10) / 4; // f32 elements of 256 KiB.
  const double bytes = 3 * (256 << 10), cold = bytes / 10e9, hot = bytes / 40e9;
  auto addOp = [&](int64_t index, std::vector<int64_t> in, int64_t out) {
    PlanOp o = op(index, "add", 0);
    o.inputs = std::move(in);
    o.outputs = {out};
    o.bytes = int64_t(bytes);
    return o;
  };
  auto readOp = [&](int64_t index, const char *tensor, int64_t out) {
    PlanOp o = op(index, "read", 0);
    o.tensors = {tensor};
    o.outputs = {out};
    return o;
  };
  auto values = [&](PlanPhase &ph, std::vector<int64_t> ids,
                    std::vector<int64_t> offsets) {
    for (size_t i = 0; i < ids.size(); ++i) {
      PlanValue v = value(ids[i], DType::F32, quarter);
      v.offset = offsets[i];
      ph.values.push_back(v);
    }
  };
  // Phase 0: y (offset 0) = w + w, w a read of "w"; then 12 MiB streamed
  // through the optimizer's "big" (every earlier byte evicted).
  // Phase 1: z (offset 0 again, another id) = w' + w', w' another read of
  // "w": both where phase 0 left them, 768 KiB before.
  Plan plan = planWith({readOp(0, "w", 1), addOp(1, {1, 1}, 2)});
  plan.model.dtype = DType::F32;
  values(plan.phases[0], {1, 2}, {-1, 0});
  PlanPhase second;
  second.kind = PhaseKind::MicroStep;
  second.ops = {readOp(0, "w", 7), addOp(1, {7, 7}, 8)};
  values(second, {7, 8}, {-1, 0});
  plan.phases.push_back(second);
  streamThrough(plan, "big");
  addTensors(plan, {{"w", quarter}, {"big", 3 << 20}});
  auto seconds = [&](size_t phase) {
    CostModel model(plan, c);
    return model.cost(plan.phases[phase], plan.phases[phase].ops[1]).seconds;
  };
  EXPECT_NEAR(seconds(0), cold, 1e-15); // After the optimizer.
  EXPECT_NEAR(seconds(1), hot, 1e-15);  // w and offset 0: just used.
  // Another offset for z: a new result, from memory (a third of the bytes).
  plan.phases[1].values[1].offset = 1 << 20;
  EXPECT_NEAR(seconds(1), bytes * (2.0 / 3 / 40e9 + 1.0 / 3 / 10e9), 1e-15);
  plan.phases[1].values[1].offset = 0;
  // Phase 1's w' from a wait (a gathered parameter) instead of a read: the
  // wait's value is where it was written, right before.
  PlanOp wait = op(0, "wait", 1);
  wait.outputs = {7};
  plan.phases[1].ops[0] = wait;
  EXPECT_NEAR(seconds(1), hot, 1e-15);
  plan.phases[1].ops[0] = readOp(0, "w", 7);
  // 768 KiB between phase 0's use and phase 1's (a product on values of
  // its own): with their own 256 KiB within 1.5 MiB a rank, not within
  // 0.75 (four ranks a node).
  PlanOp mul = op(1, "mul", 0);
  mul.inputs = {9, 9};
  mul.outputs = {10};
  plan.phases[1].ops = {readOp(0, "w", 7), mul, addOp(2, {7, 7}, 8)};
  values(plan.phases[1], {9, 10}, {-1, -1});
  auto third = [&] {
    CostModel model(plan, c);
    return model.cost(plan.phases[1], plan.phases[1].ops[2]).seconds;
  };
  EXPECT_NEAR(third(), hot, 1e-15);
  c.gpusPerNode = 4;
  plan.worldSize = 4;
  EXPECT_NEAR(third(), cold, 1e-15);
  c.gpusPerNode = 2;
  plan.worldSize = 2;
  // Phase 0 run 4 times a step: its first run after the optimizer (from
  // memory), the other three after a run of itself (in cache).
  plan.phases[0].runsPerStep = 4;
  EXPECT_NEAR(seconds(0), bytes * (0.25 / 10e9 + 0.75 / 40e9), 1e-15);
  // A GPU's calibration: no residency, whatever the file says.
  c.calibration.device = "cuda";
  EXPECT_NEAR(seconds(0), cold, 1e-15);
}

// A shaped GEMM with misaligned rows, its operands from memory: what
// inspect reports as the misaligned rows' cost is its in-cache time less
// the aligned classes', not the from-memory share too.
TEST(Calibration, ResidencyIsNotReportedAsMisalignment) {
  using C = ClusterCalibration;
  Cluster c = exactCluster();
  c.calibration.device = "cpu";
  c.calibration.threadsPerRank = 1;
  for (double &rate : c.calibration.matmul[0])
    rate = 100e9;
  const LinearGeometry g{64, 128, 63}; // y's rows: 252 bytes.
  c.calibration.matmulShape[{C::matmulIndex(DType::F32), 0, g}] = 50e9;
  c.calibration.matmulShapeCold[{C::matmulIndex(DType::F32), 0, g}] = 25e9;
  c.calibration.cacheBytes = 16 << 10; // Nothing of it stays.
  Plan plan = linearLayerPlan("linear", {64}, 128, 63, DType::F32);
  CostModel model(plan, c);
  OpCost cost = model.cost(plan.phases[0], plan.phases[0].ops[0]);
  EXPECT_NEAR(cost.seconds - c.calibration.opOverhead, g.flops() / 25e9, 1e-15);
  EXPECT_NEAR(cost.misaligned, g.flops() / 50e9 - g.flops() / 100e9, 1e-15);
}

// Where the calibration measured how the cache holds an operand by the
// bytes touched since (ClusterCalibration::cacheReuse), an operand is in
// cache by the share the curve gives at that distance, not by whether the
// distance fits in the last-level cache (on the 2-core EPYC VM the rate
// fell at 8-16 MiB of a 32 MiB cache: bench/RESULTS.md, run 43).
TEST(Calibration, TheMeasuredCacheCurveSaysHowMuchIsStillThere) {
  Cluster c = cacheCluster(64 << 20); // Everything fits: 32 MiB a rank.
  const int64_t kib = 1 << 10;
  // y = x + x; p = u * v (512 KiB each); z = x + x; q = a * b (2 MiB each,
  // so that nothing of a step is in cache at the next).
  auto binary = [&](int64_t index, const char *kind, int64_t a, int64_t b,
                    int64_t out, int64_t bytes) {
    PlanOp o = op(index, kind, 0);
    o.inputs = {a, b};
    o.outputs = {out};
    o.bytes = 3 * bytes;
    return o;
  };
  Plan plan = planWith({binary(0, "add", 1, 1, 2, 256 * kib),
                        binary(1, "mul", 3, 4, 5, 512 * kib),
                        binary(2, "add", 1, 1, 6, 256 * kib),
                        binary(3, "mul", 7, 8, 9, 2048 * kib)});
  plan.model.dtype = DType::F32;
  PlanPhase &ph = plan.phases[0];
  for (auto [id, bytes] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 256 * kib},
                                                {2, 256 * kib},
                                                {3, 512 * kib},
                                                {4, 512 * kib},
                                                {5, 512 * kib},
                                                {6, 256 * kib},
                                                {7, 2048 * kib},
                                                {8, 2048 * kib},
                                                {9, 2048 * kib}})
    ph.values.push_back(value(id, DType::F32, bytes / 4));
  auto zSeconds = [&] {
    return CostModel(plan, c).cost(ph, ph.ops[2]).seconds;
  };
  const double bytes = 3 * 256 * kib;
  // Without a curve the cache's size decides: x (twice of z's three
  // operands) in cache, z (last touched a step ago, 6 MiB since) too.
  EXPECT_NEAR(zSeconds(), bytes / 40e9, 1e-15);
  // 30 GB/s up to 1 MiB (the first point, slower, is not the cache's
  // best), 10 from 4 MiB. x was touched 1.75 MiB ago (the product's 1.5
  // and itself): its share is where the time per byte, interpolated in
  // log(bytes), falls between 1/30 and 1/10; z's past the last point: 0.
  c.calibration.ranks = 2; // As many as share the plan's node.
  c.calibration.cacheReuse = {
      {0.5 * (1 << 20), 20e9}, {1 << 20, 30e9}, {4 << 20, 10e9}};
  auto shareAt = [](double mib) {
    const double f = std::log(mib) / std::log(4.0);
    const double perByte = (1 - f) / 30 + f / 10;
    return (1.0 / 10 - perByte) / (1.0 / 10 - 1.0 / 30);
  };
  auto priced = [&](double share) {
    const double hot = 2.0 / 3 * share; // x, twice of the three.
    return bytes * (hot / 40e9 + (1 - hot) / 10e9);
  };
  EXPECT_NEAR(c.calibration.cachedShare(1.75 * (1 << 20)), shareAt(1.75),
              1e-12);
  EXPECT_NEAR(zSeconds(), priced(shareAt(1.75)), 1e-15);
  // Measured by one rank alone, the curve is the whole cache's: each of
  // the plan's two ranks on a node reaches its 1.75 MiB as the one rank
  // would reach 3.5.
  c.calibration.ranks = 1;
  EXPECT_NEAR(zSeconds(), priced(shareAt(3.5)), 1e-15);
  // A slow point past a fast one takes the fast one's rate (the envelope):
  // at 2 MiB a point of 5 GB/s under the 4 MiB point's 10 counts as 10.
  {
    ClusterCalibration k = c.calibration;
    k.cacheReuse = {{1 << 20, 30e9}, {2 << 20, 5e9}, {4 << 20, 10e9}};
    EXPECT_EQ(k.cachedShare(2 << 20), 0.0);
    EXPECT_NEAR(k.cachedShare(1.5 * (1 << 20)),
                (0.1 - ((1 - std::log2(1.5)) / 30 + std::log2(1.5) / 10)) /
                    (0.1 - 1.0 / 30),
                1e-12);
  }
  // At or below the first point: all in cache, past the last: none.
  EXPECT_EQ(c.calibration.cachedShare(0.25 * (1 << 20)), 1.0);
  EXPECT_EQ(c.calibration.cachedShare(1 << 20), 1.0);
  EXPECT_EQ(c.calibration.cachedShare(8 << 20), 0.0);
  // A curve that does not fall (one point, or memory no slower than the
  // cache) says nothing: the cache's size decides again.
  c.calibration.cacheReuse = {{1 << 20, 10e9}, {4 << 20, 10e9}};
  EXPECT_EQ(c.calibration.cachedShare(2 << 20), -1.0);
  EXPECT_NEAR(zSeconds(), bytes / 40e9, 1e-15);
  c.calibration.cacheReuse.resize(1);
  EXPECT_EQ(c.calibration.cachedShare(2 << 20), -1.0);
}

// An accumulate too, where the curve was measured (it is an accumulate's
// own rate, in cache at its best and from memory at its last): by the
// share of its value and its target's part still in cache. From memory
// alone, tiny Llama's stage-1 accumulates were priced 0.269 ms a step
// against 0.177 measured (bench/RESULTS.md, run 43).
TEST(Calibration, AnAccumulateInCacheTakesTheCurvesRate) {
  Cluster c = cacheCluster(64 << 20);
  c.calibration.kernelBandwidth["accumulate"] = 5e9;
  const int64_t kib = 1 << 10, quarter = 256 * kib / 4;
  // y = x + x; g += y (g 256 KiB, whole); q = a * b (2 MiB each).
  PlanOp add = op(0, "add", 0);
  add.inputs = {1, 1};
  add.outputs = {2};
  PlanOp acc = op(1, "accumulate", 0);
  acc.attrs = AccumulateAttrs{"g", 0};
  acc.inputs = {2};
  acc.tensors = {"g"};
  PlanOp mul = op(2, "mul", 0);
  mul.inputs = {3, 4};
  mul.outputs = {5};
  Plan plan = planWith({add, acc, mul});
  plan.model.dtype = DType::F32;
  for (int64_t id : {1, 2})
    plan.phases[0].values.push_back(value(id, DType::F32, quarter));
  for (int64_t id : {3, 4, 5})
    plan.phases[0].values.push_back(value(id, DType::F32, 8 * quarter));
  addTensors(plan, {{"g", quarter}});
  auto seconds = [&] {
    return CostModel(plan, c)
        .cost(plan.phases[0], plan.phases[0].ops[1])
        .seconds;
  };
  // y read, g's 256 KiB read and written.
  const double bytes = 3 * 256 * kib;
  EXPECT_NEAR(seconds(), bytes / 5e9, 1e-15); // No curve: from memory.
  c.calibration.ranks = 2;
  // The curve's best rate is the in-cache one, not its first point's.
  c.calibration.cacheReuse = {
      {0.5 * (1 << 20), 20e9}, {1 << 20, 30e9}, {4 << 20, 10e9}};
  // y was just written (in cache), g last touched a step ago, 6.75 MiB
  // since (from memory), and read and written: a third of the bytes in
  // cache.
  EXPECT_NEAR(seconds(), bytes * (1.0 / 3 / 30e9 + 2.0 / 3 / 5e9), 1e-15);
  // Without the product, g was touched 1 MiB ago (the add's 768 KiB and
  // itself): all in cache.
  plan.phases[0].ops.pop_back();
  EXPECT_NEAR(seconds(), bytes / 30e9, 1e-15);
  // A curve that does not fall says nothing: from memory, as without one.
  c.calibration.cacheReuse = {{1 << 20, 10e9}, {4 << 20, 10e9}};
  EXPECT_NEAR(seconds(), bytes / 5e9, 1e-15);
}

// An op other than the model's touches what it moves of its tensors: an
// accumulate only its part of the target (a stage-1 gradient's slice of the
// replicated flat buffer), and a tensor it names several times once (a
// stage-2 reduce-scatter names its flat buffer once per gradient). Counted
// whole, small GPT-2's accumulates had evicted every activation at stage 1
// (its element-wise ops priced 1.3-1.6x those of stage 2, measured alike:
// bench/RESULTS.md, run 42).
TEST(Calibration, AnOpTouchesWhatItMovesOfItsTensors) {
  Cluster c = cacheCluster(2 << 20);       // 1 MiB a rank.
  const int64_t quarter = (256 << 10) / 4; // f32 elements of 256 KiB.
  const double bytes = 3 * (256 << 10);
  auto addOp = [&](int64_t index, int64_t out) {
    PlanOp o = op(index, "add", 0);
    o.inputs = {1, 1};
    o.outputs = {out};
    o.bytes = int64_t(bytes);
    return o;
  };
  // y = x + x; g += y at offset 4096 of an 8 MiB flat buffer; z = x + x.
  PlanOp acc = op(1, "accumulate", 0);
  acc.attrs = AccumulateAttrs{"flat", 4096};
  acc.inputs = {2};
  acc.tensors = {"flat"};
  Plan plan = planWith({addOp(0, 2), acc, addOp(2, 3)});
  plan.model.dtype = DType::F32;
  for (int64_t id : {1, 2, 3})
    plan.phases[0].values.push_back(value(id, DType::F32, quarter));
  addTensors(plan, {{"flat", 2 << 20}, {"g", quarter}});
  auto third = [&] {
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[2]).seconds;
  };
  // x was used 768 KiB before (y, and y's slice of the buffer): in cache;
  // z is new (a third of the bytes from memory).
  const double twoThirds = bytes * (2.0 / 3 / 40e9 + 1.0 / 3 / 10e9);
  EXPECT_NEAR(third(), twoThirds, 1e-15);
  // The accumulate's value as large as its target: the whole of it, one
  // piece of memory with every other op's use of the tensor (a read of it
  // right after finds it in cache; a slice of its own would leave the
  // read's memory last touched a step before, from memory).
  plan.tensors[0].numel = plan.tensors[0].localNumel = quarter;
  {
    PlanOp read = op(2, "read", 0);
    read.tensors = {"flat"};
    read.outputs = {4};
    PlanOp use = addOp(3, 5);
    use.inputs = {4, 4};
    Plan whole = plan;
    whole.phases[0].ops = {plan.phases[0].ops[0], acc, read, use};
    for (int64_t id : {4, 5})
      whole.phases[0].values.push_back(value(id, DType::F32, quarter));
    CostModel model(whole, c);
    EXPECT_NEAR(model.cost(whole.phases[0], whole.phases[0].ops[3]).seconds,
                twoThirds, 1e-15);
  }
  EXPECT_NEAR(third(), twoThirds, 1e-15);
  // A zeroing that names a 256 KiB gradient four times: 256 KiB.
  PlanOp zero = op(1, "zero_grads", 0);
  zero.tensors = {"g", "g", "g", "g"};
  plan.phases[0].ops[1] = zero;
  EXPECT_NEAR(third(), twoThirds, 1e-15);
  // Four gradients of 256 KiB: past the cache (x from memory).
  plan.phases[0].ops[1].tensors = {"g", "flat", "g", "flat"};
  plan.tensors[0].numel = plan.tensors[0].localNumel = 3 * quarter;
  EXPECT_NEAR(third(), bytes / 10e9, 1e-15);
}

// A GEMM with rows of a byte length not a multiple of 16 (GPT-2's logits:
// 50,257 bf16 a row) runs at the calibrated fraction of the aligned rate
// (on an H100, lm_head's three GEMMs ran at 94-145 TFLOP/s against 667 at
// 4096^3: bench/gpu-RESULTS.md).
TEST(Calibration, MisalignedRowsTakeTheMeasuredFraction) {
  EXPECT_TRUE(rowsMisaligned({8, 1024, 50257}, DType::BF16));
  EXPECT_FALSE(rowsMisaligned({8, 1024, 50304}, DType::BF16));
  EXPECT_TRUE(rowsMisaligned({50257}, DType::F32)); // 201,028 bytes.
  EXPECT_FALSE(rowsMisaligned({3, 4}, DType::F32)); // 16 bytes.
  EXPECT_TRUE(rowsMisaligned({4, 6}, DType::BF16)); // 12 bytes.
  EXPECT_FALSE(rowsMisaligned({}, DType::BF16));

  Cluster c = exactCluster();
  c.calibration.matmul[1][2] = 100e12; // bf16, 1024^3
  c.calibration.matmul[1][3] = 600e12; // bf16, 4096^3
  // Not measured: the aligned rate.
  EXPECT_EQ(c.calibration.matmulMisalignedFactor(1), 1.0);
  const double flops = ClusterCalibration::kMatmulClassFlops[3];
  EXPECT_NEAR(kernelTime(c, OpKind::Linear, flops, 0, DType::BF16, true),
              flops / 600e12, 1e-15);
  // 120 TFLOP/s at 4096^3 with odd rows: a fifth of the rate, applied at
  // every size (here the 1024^3 class's 100 TFLOP/s).
  c.calibration.matmulMisaligned[1] = 120e12;
  EXPECT_NEAR(c.calibration.matmulMisalignedFactor(1), 0.2, 1e-12);
  EXPECT_NEAR(
      kernelTime(c, OpKind::LinearGradInput, flops, 0, DType::BF16, true),
      flops / 120e12, 1e-15);
  const double small = ClusterCalibration::kMatmulClassFlops[2];
  EXPECT_NEAR(kernelTime(c, OpKind::Linear, small, 0, DType::BF16, true),
              small / 20e12, 1e-15);
  EXPECT_NEAR(kernelTime(c, OpKind::Linear, small, 0, DType::BF16, false),
              small / 100e12, 1e-15);
  // f32 has no figures of its own: the bf16 factor does not carry over.
  EXPECT_EQ(c.calibration.matmulMisalignedFactor(0), 1.0);

  // In a plan: the op's values decide, a vocabulary of 50,257 (odd rows in
  // the output) against 50,304.
  auto linearSeconds = [&](int64_t vocab) {
    return firstOpSeconds(
        linearLayerPlan("linear", {8192}, 768, vocab, DType::BF16), c);
  };
  double odd = linearSeconds(50257), even = linearSeconds(50304);
  EXPECT_NEAR(odd / even, 5.0 * 50257 / 50304, 1e-6);
  // What the odd rows cost, apart (inspect's "misaligned rows"): the op's
  // time less the aligned rate's for its FLOPs, four fifths of it here.
  auto misaligned = [&](int64_t vocab) {
    Plan plan = linearLayerPlan("linear", {8192}, 768, vocab, DType::BF16);
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).misaligned;
  };
  EXPECT_NEAR(misaligned(50257), 0.8 * odd, 1e-12);
  EXPECT_EQ(misaligned(50304), 0.0);
  Plan plan = linearLayerPlan("linear", {8192}, 768, 50257, DType::BF16);
  StepPrediction step = predict(plan, c);
  EXPECT_NEAR(step.misaligned, 0.8 * odd, 1e-12);
  EXPECT_EQ(step.misalignedOps, 1);
}

// On a CPU rank of several threads, an op below the kernels' parallel
// threshold runs on one thread: its kind's serial rate where calibrated
// (tiny GPT-2's gelu, 16 Ki elements, ran at half the pooled rate at one
// rank on two cores: bench/RESULTS.md, run 9).
TEST(Calibration, OpsBelowTheParallelThresholdTakeTheSerialRate) {
  Cluster c = exactCluster();
  c.calibration.kernelBandwidth["gelu"] = 1e9;
  c.calibration.kernelBandwidth["default"] = 4e9;
  c.calibration.serialKernelBandwidth["gelu"] = 0.5e9;
  c.calibration.serialKernelElements = 32768;
  const double bytes = 131072;
  EXPECT_NEAR(kernelTime(c, OpKind::Gelu, 0, bytes, DType::F32, false, 16384),
              bytes / 0.5e9, 1e-15);
  // At or above the threshold, or of unknown size: the pooled rate.
  EXPECT_NEAR(kernelTime(c, OpKind::Gelu, 0, bytes, DType::F32, false, 32768),
              bytes / 1e9, 1e-15);
  EXPECT_NEAR(kernelTime(c, OpKind::Gelu, 0, bytes, DType::F32), bytes / 1e9,
              1e-15);
  // A kind without a serial rate keeps its own.
  EXPECT_NEAR(kernelTime(c, OpKind::Add, 0, bytes, DType::F32, false, 16384),
              bytes / 4e9, 1e-15);
  // Not calibrated (one thread a rank): no serial pricing at all.
  c.calibration.serialKernelElements = 0;
  EXPECT_NEAR(kernelTime(c, OpKind::Gelu, 0, bytes, DType::F32, false, 16384),
              bytes / 1e9, 1e-15);
}

// In a plan, the threshold applies to the op's largest operand: a
// cross-entropy's result is one loss, its work the logits it reads (the
// CPU kernel's parallelChunks over rows x vocabulary).
TEST(Calibration, TheSerialThresholdCountsTheLargestOperand) {
  Cluster c = exactCluster();
  c.calibration.kernelBandwidth["cross_entropy"] = 2e9;
  c.calibration.serialKernelBandwidth["cross_entropy"] = 1e9;
  c.calibration.serialKernelElements = 32768;
  auto seconds = [&](int64_t rows, int64_t vocab) {
    PlanOp ce = op(0, "cross_entropy", 0);
    ce.bytes = rows * vocab * 4;
    ce.inputs = {1, 2};
    ce.outputs = {3};
    Plan plan = planWith({ce});
    PlanValue logits = value(1, DType::F32, rows * vocab),
              targets = value(2, DType::I32, rows),
              loss = value(3, DType::F32, 1);
    logits.shape = {rows, vocab};
    targets.shape = {rows};
    loss.shape = {};
    plan.phases[0].values = {logits, targets, loss};
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  // Tiny GPT-2's logits, 64 x 256: one thread.
  EXPECT_NEAR(seconds(64, 256), 64 * 256 * 4 / 1e9, 1e-15);
  // 64 x 4096: on the pool, though the loss is one element.
  EXPECT_NEAR(seconds(64, 4096), 64 * 4096 * 4 / 2e9, 1e-15);
}

// zerorun's CPU linear adds its bias in a pass of its own over the output
// (cpu/Linear.cpp), which the calibration's GEMMs do not have: tiny GPT-2's
// forward linears measured 30-45% over the GEMM's price (bench/RESULTS.md,
// run 19). On a GPU cuBLASLt's epilogue fuses it.
TEST(Calibration, ACpuLinearsBiasIsAPassAtAddsRate) {
  Cluster c = exactCluster();
  c.calibration.matmul[0][0] = 10e9;
  c.calibration.matmul[0][1] = 10e9;
  c.calibration.matmul[0][2] = 10e9;
  c.calibration.kernelBandwidth["add"] = 4e9;
  c.calibration.serialKernelBandwidth["add"] = 2e9;
  c.calibration.serialKernelElements = 32768;
  auto seconds = [&](int64_t rows, int64_t in, int64_t out, bool bias) {
    PlanOp lin = op(0, "linear", 0);
    lin.flops = 2 * rows * in * out;
    lin.inputs =
        bias ? std::vector<int64_t>{1, 2, 4} : std::vector<int64_t>{1, 2};
    lin.outputs = {3};
    Plan plan = planWith({lin});
    PlanValue x = value(1, DType::F32, rows * in),
              w = value(2, DType::F32, out * in),
              y = value(3, DType::F32, rows * out),
              b = value(4, DType::F32, out);
    x.shape = {rows, in};
    w.shape = {out, in};
    y.shape = {rows, out};
    b.shape = {out};
    plan.phases[0].values = {x, w, y, b};
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  const double gemm = 2.0 * 64 * 64 * 256 / 10e9;
  // No calibrated device said: no pass.
  EXPECT_NEAR(seconds(64, 64, 256, true), gemm, 1e-15);
  c.calibration.device = "cpu";
  EXPECT_NEAR(seconds(64, 64, 256, false), gemm, 1e-15);
  // 64 x 256 outputs (below the threshold: one thread): y read and written
  // in f32, the bias row once.
  EXPECT_NEAR(seconds(64, 64, 256, true),
              gemm + (2.0 * 64 * 256 + 256) * 4 / 2e9, 1e-15);
  // 256 x 256: on the pool.
  EXPECT_NEAR(seconds(256, 64, 256, true),
              4 * gemm + (2.0 * 256 * 256 + 256) * 4 / 4e9, 1e-15);
  c.calibration.device = "cuda";
  EXPECT_NEAR(seconds(64, 64, 256, true), gemm, 1e-15);
}

// Attention's rate depends on its items' shape: tiny GPT-2's (sequence 32,
// heads of 16) ran at a sixth of the rate of sequence 256 and heads of 64
// on this CPU (bench/RESULTS.md, run 11).
TEST(Calibration, AttentionRateInterpolatesBetweenItsClasses) {
  using C = ClusterCalibration;
  const double small = C::attentionShape(false, true).itemWork(),
               large = C::attentionShape(false, false).itemWork();
  EXPECT_EQ(small, 32.0 * 32 * 16);
  EXPECT_EQ(large, 256.0 * 256 * 64);
  ClusterCalibration cal;
  cal.device = "cpu";
  EXPECT_EQ(calibratedAttentionRate(cal, small), 0.0); // not calibrated
  cal.attention = 100e9;
  // The large class alone: every size at its rate.
  EXPECT_EQ(calibratedAttentionRate(cal, small), 100e9);
  cal.attentionSmall = 20e9;
  EXPECT_EQ(calibratedAttentionRate(cal, small), 20e9);
  EXPECT_EQ(calibratedAttentionRate(cal, large), 100e9);
  EXPECT_EQ(calibratedAttentionRate(cal, small / 8), 20e9);
  EXPECT_EQ(calibratedAttentionRate(cal, large * 8), 100e9);
  EXPECT_NEAR(calibratedAttentionRate(cal, std::sqrt(small * large)), 60e9,
              1e-3);
  EXPECT_EQ(calibratedAttentionRate(cal, 0), 100e9); // shape unknown
  // No backward rates: the backward takes the rate both were timed at.
  EXPECT_EQ(calibratedAttentionRate(cal, small, true), 20e9);
  // Timed apart: the backward at its own classes, the forward unchanged.
  cal.attentionBackward = 300e9;
  cal.attentionBackwardSmall = 30e9;
  EXPECT_EQ(calibratedAttentionRate(cal, small, true), 30e9);
  EXPECT_EQ(calibratedAttentionRate(cal, large, true), 300e9);
  EXPECT_NEAR(calibratedAttentionRate(cal, std::sqrt(small * large), true),
              165e9, 1e-3);
  EXPECT_EQ(calibratedAttentionRate(cal, small), 20e9);
  cal.attentionBackward = cal.attentionBackwardSmall = 0;
  // A GPU's classes are its own shapes.
  cal.device = "cuda";
  EXPECT_EQ(
      calibratedAttentionRate(cal, C::attentionShape(true, true).itemWork()),
      20e9);

  // In a plan: q [batch, seq, heads x head_dim] and the op's num_heads.
  Cluster c = exactCluster();
  c.calibration = cal;
  c.calibration.device = "cpu";
  auto seconds = [&](int64_t seq, int64_t heads, int64_t headDim) {
    PlanOp attn = op(0, "causal_attention", 0);
    AttentionAttrs attrs;
    attrs.numHeads = heads;
    attrs.numKvHeads = heads;
    attn.attrs = attrs;
    attn.flops = 1'000'000;
    attn.inputs = {1, 2, 3};
    attn.outputs = {4};
    Plan plan = planWith({attn});
    std::vector<PlanValue> values;
    for (int64_t id = 1; id <= 4; ++id) {
      PlanValue v = value(id, DType::F32, 2 * seq * heads * headDim);
      v.shape = {2, seq, heads * headDim};
      values.push_back(v);
    }
    plan.phases[0].values = values;
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  EXPECT_NEAR(seconds(32, 4, 16), 1e6 / 20e9, 1e-15);
  EXPECT_NEAR(seconds(256, 12, 64), 1e6 / 100e9, 1e-15);
}

TEST(Calibration, KernelBandwidthsAndOverheads) {
  // gelu at its own 1 GB/s, add at the default 2 GB/s, 1 us per op, 10 us
  // per phase run. On a CPU rank the host runs the ops: on one stream the
  // phase is their sum, with no phase overhead (no thread started).
  Cluster c = exactCluster();
  c.calibration.device = "cpu";
  c.calibration.kernelBandwidth["gelu"] = 1e9;
  c.calibration.kernelBandwidth["default"] = 2e9;
  c.calibration.opOverhead = 1e-6;
  c.calibration.phaseOverhead = 10e-6;
  PlanOp gelu = op(0, "gelu", 0);
  gelu.bytes = 1'000'000;
  PlanOp add = op(1, "add", 0, {0});
  add.bytes = 1'000'000;
  Plan plan = planWith({gelu, add, op(2, "release", 0)});
  StepPrediction p = predict(plan, c);
  EXPECT_NEAR(timingOf(p, 0).end - timingOf(p, 0).start, 1e-3 + 1e-6, kTol);
  EXPECT_NEAR(timingOf(p, 1).end - timingOf(p, 1).start, 0.5e-3 + 1e-6, kTol);
  EXPECT_NEAR(timingOf(p, 2).end - timingOf(p, 2).start, 1e-6, kTol);
  EXPECT_NEAR(p.stepSeconds, 1.5e-3 + 3e-6, kTol);

  // On a GPU the host issues each op (1 us) and the device runs it behind:
  // gelu starts once issued, add was issued while gelu ran, the release
  // costs the device nothing. The phase pays its overhead.
  c.calibration.device = "cuda";
  StepPrediction g = predict(plan, c);
  EXPECT_NEAR(timingOf(g, 0).start, 1e-6, kTol);
  EXPECT_NEAR(timingOf(g, 0).end, 1e-6 + 1e-3, kTol);
  EXPECT_NEAR(timingOf(g, 1).start, timingOf(g, 0).end, kTol);
  EXPECT_NEAR(timingOf(g, 1).end - timingOf(g, 1).start, 0.5e-3, kTol);
  EXPECT_NEAR(timingOf(g, 2).end, timingOf(g, 1).end, kTol);
  EXPECT_NEAR(g.stepSeconds, 1e-6 + 1.5e-3 + 10e-6, kTol);
}

// GPT-2 124M at stage 0 on an H100 (bench/gpu-RESULTS.md, third lease): 1,100
// ops a step at the calibrated 18.6 us each are 20 ms of host time, which
// the device's 50 ms of kernels hide; charged in series they had put the
// prediction 1.36x over the measured step. Where the kernels are shorter
// than their issue the host is the bound; and an op the host waits for
// (clipping reads its norm back) lets the device's queue drain.
TEST(Simulator, ADeviceRunsBehindItsHost) {
  Cluster c = exactCluster();
  c.calibration.device = "cuda";
  c.calibration.opOverhead = 10e-6;
  // Three kernels of 1 us: each waits for its issue, 10 us apart.
  Plan tiny = planWith(
      {computeOp(0, 1e-3), computeOp(1, 1e-3, {0}), computeOp(2, 1e-3, {1})});
  StepPrediction t = predict(tiny, c);
  EXPECT_NEAR(timingOf(t, 2).start, 30e-6, kTol);
  EXPECT_NEAR(t.stepSeconds, 31e-6, kTol);
  // Held up by the host, not by the kernel before it: 10 us before the
  // first, 9 before each of the others.
  EXPECT_EQ(timingOf(t, 2).blockedBy, -1);
  EXPECT_NEAR(t.hostWait, 28e-6, kTol);
  // Three of 1 ms: the device is the bound, the issues are hidden but the
  // first's.
  Plan longer = planWith(
      {computeOp(0, 1.0), computeOp(1, 1.0, {0}), computeOp(2, 1.0, {1})});
  StepPrediction l = predict(longer, c);
  EXPECT_NEAR(l.stepSeconds, 10e-6 + 3 * kMs, kTol);
  EXPECT_NEAR(l.hostWait, 10e-6, kTol);
  // A clip after the first kernel: its thread waits for the kernel and the
  // clip itself before it issues the next, which starts 10 us after.
  PlanOp clip = op(1, "clip_grad_norm", 0, {0});
  Plan clipped = planWith({computeOp(0, 1.0), clip, computeOp(2, 1.0, {1})});
  StepPrediction k = predict(clipped, c);
  const OpTiming &clipAt = timingOf(k, 1);
  EXPECT_NEAR(clipAt.start, 10e-6 + kMs, kTol);
  EXPECT_NEAR(timingOf(k, 2).start, clipAt.end + 10e-6, kTol);
  // A CPU rank runs the same kernels on its own thread: issue and work in
  // series.
  c.calibration.device = "cpu";
  StepPrediction cpu = predict(tiny, c);
  EXPECT_NEAR(cpu.stepSeconds, 3 * 11e-6, kTol);
  EXPECT_EQ(cpu.hostWait, 0);
}

TEST(Calibration, CollectiveFitReplacesTheRingOnOneNode) {
  // 1e6 bf16 elements gathered on 2 ranks: busbw bytes 2e6 x 1/2, at 2 GB/s,
  // plus the fitted 10 us.
  Cluster c = exactCluster();
  c.calibration.collective[size_t(CollectiveKind::AllGather)] = {10e-6, 2e9};
  PlanOp gather = collectiveOp(0, "all_gather_start", "all_gather", 1, 1.0);
  Plan plan = planWith({gather});
  CostModel model(plan, c);
  OpCost cost = model.cost(plan.phases[0], plan.phases[0].ops[0]);
  EXPECT_NEAR(cost.seconds, 10e-6 + 1e6 / 2e9, kTol);
  // Not calibrated for all-reduce: the ring formula (1e6 x 2 B x 1 / 1e9).
  PlanOp reduce = collectiveOp(0, "all_reduce_start", "all_reduce", 2, 1.0);
  Plan other = planWith({reduce});
  CostModel ring(other, c);
  EXPECT_NEAR(ring.cost(other.phases[0], other.phases[0].ops[0]).seconds, 2e-3,
              kTol);
  // Expert parallelism's all-to-all at its own fit (busbw bytes x 1/2 at 1
  // GB/s, plus 5 us): the fits are indexed by CollectiveKind, whose fourth
  // kind once read past the end of a three-entry array.
  c.calibration.collective[size_t(CollectiveKind::AllToAll)] = {5e-6, 1e9};
  PlanOp exchange = collectiveOp(0, "all_to_all_start", "all_to_all", 1, 1.0);
  Plan ep = planWith({exchange});
  CostModel a2a(ep, c);
  EXPECT_NEAR(a2a.cost(ep.phases[0], ep.phases[0].ops[0]).seconds,
              5e-6 + 1e6 / 1e9, kTol);
}

// Where the calibration kept each size's time (a CPU node's collectives
// are no line: bench/RESULTS.md, run 44), a collective takes the time
// measured at its size, in bus bytes: measured at 2 ranks, priced at 4 by
// the bytes each rank's link carries.
/// exactCluster calibrated at two ranks for `kind`: 10 us + 2 GB/s fitted,
/// and sizes 1 MB and 4 MB measured (at 2 ranks bus bytes 0.5e6 and 2e6) at
/// 100 us and 2 ms.
Cluster withMeasuredSizes(CollectiveKind kind) {
  Cluster c = exactCluster();
  c.calibration.ranks = 2;
  auto &fit = c.calibration.collective[size_t(kind)];
  fit = {10e-6, 2e9};
  fit.bySize = {{1e6, 100e-6}, {4e6, 2e-3}};
  return c;
}

TEST(Calibration, ACollectiveTakesTheTimeMeasuredAtItsSize) {
  Cluster c = withMeasuredSizes(CollectiveKind::AllGather);
  auto &fit = c.calibration.collective[size_t(CollectiveKind::AllGather)];
  // 1e6 bf16 elements gathered: 2e6 bytes, 1e6 bus bytes at 2 ranks, a
  // third of the way from the first point to the second (the line: 510
  // us).
  PlanOp gather = collectiveOp(0, "all_gather_start", "all_gather", 1, 1.0);
  Plan plan = planWith({gather});
  CostModel model(plan, c);
  EXPECT_NEAR(model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds,
              100e-6 + 1.9e-3 / 3, kTol);
  // At 4 ranks the same op moves 1.5e6 bus bytes: two thirds of the way.
  c.gpusPerNode = 4;
  plan.worldSize = 4;
  CostModel four(plan, c);
  EXPECT_NEAR(four.cost(plan.phases[0], plan.phases[0].ops[0]).seconds,
              100e-6 + 1.9e-3 * 2 / 3, kTol);
  // Without the calibration's ranks the sizes cannot be placed: the line.
  c.calibration.ranks = 0;
  CostModel unplaced(plan, c);
  EXPECT_NEAR(unplaced.cost(plan.phases[0], plan.phases[0].ops[0]).seconds,
              10e-6 + 1.5e6 / 2e9, kTol);

  // An op of two tensors is two collectives, each read at its own size:
  // 0.75e6 and 0.25e6 elements, bus bytes 0.75e6 (a sixth of the way from
  // 100 us to 2 ms) and 0.25e6 (half way from the 10 us latency to the
  // first point), not one of 1e6 (733 us).
  c.calibration.ranks = 2;
  c.gpusPerNode = 2;
  Plan two = planWith({gather});
  two.phases[0].ops[0].tensors = {"a", "b"};
  for (auto [name, numel] :
       {std::pair<const char *, int64_t>{"a", 750000}, {"b", 250000}}) {
    PlanTensor t;
    t.name = name;
    t.dtype = DType::BF16;
    t.numel = t.localNumel = numel;
    two.tensors.push_back(t);
  }
  CostModel parts(two, c);
  EXPECT_NEAR(parts.cost(two.phases[0], two.phases[0].ops[0]).seconds,
              (100e-6 + 1.9e-3 / 6) + (10e-6 + 90e-6 / 2), kTol);
  // Tensors that are not what the op moves (another size): one collective.
  two.tensors[1].numel = 300000;
  CostModel whole(two, c);
  EXPECT_NEAR(whole.cost(two.phases[0], two.phases[0].ops[0]).seconds,
              100e-6 + 1.9e-3 / 3, kTol);

  // From memory: where the calibration timed the sizes from memory too, the
  // share of what the op moves that the cache no longer holds
  // (computeResidency: by LRU distance, the step walked twice) is read on
  // that curve. On a CPU whose cache holds the 2 MB the op moves from one
  // step to the next: in cache, as above; on one whose ranks' shares hold
  // 128 KiB: from memory, each part on the cold curve (0.75e6 bus bytes a
  // sixth of the way from 300 us to 6 ms; 0.25e6 half way from the 10 us
  // latency to 300 us).
  two.tensors[1].numel = 250000;
  c.calibration.device = "cpu";
  fit.coldBySize = {{1e6, 300e-6}, {4e6, 6e-3}};
  c.calibration.cacheBytes = 64.0 * 1024 * 1024;
  CostModel inCache(two, c);
  EXPECT_NEAR(inCache.cost(two.phases[0], two.phases[0].ops[0]).seconds,
              (100e-6 + 1.9e-3 / 6) + (10e-6 + 90e-6 / 2), kTol);
  c.calibration.cacheBytes = 256.0 * 1024;
  CostModel fromMemory(two, c);
  EXPECT_NEAR(fromMemory.cost(two.phases[0], two.phases[0].ops[0]).seconds,
              (300e-6 + 5.7e-3 / 6) + (10e-6 + 290e-6 / 2), kTol);
  // Without the cold sizes: the in-cache curve, wherever the tensors are.
  fit.coldBySize.clear();
  CostModel noCold(two, c);
  EXPECT_NEAR(noCold.cost(two.phases[0], two.phases[0].ops[0]).seconds,
              (100e-6 + 1.9e-3 / 6) + (10e-6 + 90e-6 / 2), kTol);
}

// zerorun starts one communicator collective per tensor an op moves: a
// bucket of three gradients pays the fixed time three times, its bytes once.
// An all-reduce per tensor it names; the updates' gather per flat group or
// replicated parameter (a sharded one is gathered when used).
TEST(Calibration, EachTensorsCollectivePaysTheFixedTime) {
  Cluster c = exactCluster();
  c.calibration.collective[size_t(CollectiveKind::ReduceScatter)] = {10e-6,
                                                                     2e9};
  c.calibration.collective[size_t(CollectiveKind::AllGather)] = {10e-6, 2e9};
  c.calibration.collective[size_t(CollectiveKind::AllReduce)] = {10e-6, 2e9};
  auto seconds = [&](PlanOp o) {
    Plan plan = planWith({o});
    PlanFlatGroup group;
    group.name = "group0";
    plan.flatGroups = {group};
    PlanTensor sharded, whole;
    sharded.name = "h.0.w";
    sharded.sharded = true;
    whole.name = "lm_head.weight";
    plan.tensors = {sharded, whole};
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  // 1e6 bf16 elements over 2 ranks: 1e6 busbw bytes at 2 GB/s, then the
  // epilogue's accumulate (at exactCluster's HBM), the same either way.
  PlanOp bucket =
      collectiveOp(0, "reduce_scatter_start", "reduce_scatter", 2, 1.0);
  double one = seconds(bucket);
  EXPECT_NEAR(one, 10e-6 + 1e6 / 2e9 + 3e6 / 1e15, kTol);
  bucket.inputs = {1, 2, 3};
  bucket.attrs = ReduceScatterAttrs{{"group0", "group0", "group0"}, {0, 1, 2}};
  EXPECT_NEAR(seconds(bucket), one + 2 * 10e-6, kTol);
  PlanOp gather = collectiveOp(0, "all_gather_start", "all_gather", 1, 1.0);
  gather.inputs = {1, 2};
  EXPECT_NEAR(seconds(gather), 2 * 10e-6 + 1e6 / 2e9, kTol);
  PlanOp reduce = collectiveOp(0, "all_reduce_start", "all_reduce", 0, 1.0);
  reduce.attrs = TensorListAttrs{{"a", "b", "c", "d"}};
  // All-reduce busbw: 2e6 bytes x 2 x 1/2.
  EXPECT_NEAR(seconds(reduce), 4 * 10e-6 + 2e6 / 2e9, kTol);
  PlanOp updates =
      collectiveOp(0, "all_gather_updates_start", "all_gather", 1, 1.0);
  updates.attrs = TargetListAttrs{{"group0", "h.0.w", "lm_head.weight"}};
  EXPECT_NEAR(seconds(updates), 2 * 10e-6 + 1e6 / 2e9, kTol);
  // Measured per further tensor (calibration.KIND.per_tensor_us): that
  // instead of the fitted fixed time; the first still pays the fit's.
  c.calibration.collective[size_t(CollectiveKind::AllGather)].perTensor = 4e-6;
  EXPECT_NEAR(seconds(gather), 10e-6 + 4e-6 + 1e6 / 2e9, kTol);
}

// zerorun packs a stage-3 bucket's small gradients (Workspace.h): one
// collective for all of them; the pack reads each and writes every rank's
// block (slots of 64 bytes), and each further one pays
// calibration.packed_gradient_us. Alone (large, one rank, or gradients of
// two dtypes) a gradient is a collective of its own.
TEST(Calibration, AStageThreeBucketIsOneCollective) {
  Cluster c = exactCluster();
  c.calibration.collective[size_t(CollectiveKind::ReduceScatter)] = {10e-6,
                                                                     2e9};
  c.calibration.packedGradient = 3e-6;
  auto seconds = [&](PlanOp o, DType second = DType::BF16) {
    Plan plan = planWith({o});
    std::vector<int64_t> numels = {1000, 3000, 5, 40000};
    for (size_t i = 0; i < numels.size(); ++i) {
      PlanTensor t;
      t.name = "g" + std::to_string(i);
      t.role = TensorRole::Grad;
      t.dtype = i == 1 ? second : DType::BF16;
      t.numel = numels[i];
      t.sharded = true;
      plan.tensors.push_back(t);
    }
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  PlanOp bucket =
      collectiveOp(0, "reduce_scatter_start", "reduce_scatter", 2, 1.0);
  bucket.inputs = {1};
  bucket.attrs = ReduceScatterAttrs{{"g0"}, {0}};
  double one = seconds(bucket);
  EXPECT_NEAR(one, 10e-6 + 1e6 / 2e9 + 3e6 / 1e15, kTol);
  bucket.inputs = {1, 2, 3};
  bucket.attrs = ReduceScatterAttrs{{"g0", "g1", "g2"}, {0, 0, 0}};
  // Shards of 500, 1500 and 3 bf16 in slots of 512, 1504 and 32: blocks of
  // 2048 elements, two of them written; 4005 elements read.
  double pack = (4005 * 2 + 2 * 2048 * 2) / 1e15;
  EXPECT_NEAR(seconds(bucket), one + pack + 2 * 3e-6, kTol);
  EXPECT_NEAR(seconds(bucket, DType::F32), one + 2 * 10e-6, kTol);
  // 40,000 bf16 (80 KB, over kPackedGradientMaxBytes) go alone: a further
  // collective.
  bucket.inputs = {1, 2, 3, 4};
  bucket.attrs = ReduceScatterAttrs{{"g0", "g1", "g2", "g3"}, {0, 0, 0, 0}};
  EXPECT_NEAR(seconds(bucket), one + pack + 2 * 3e-6 + 10e-6, kTol);
}

/// `plan` with a flat group "g" of `params` (name, elements) and its
/// gradient buffer "g.grad" (`sharded`: stage 2's partition; else stage 1's
/// replicated buffer).
void withFlatGroup(Plan &plan,
                   const std::vector<std::pair<std::string, int64_t>> &params,
                   bool sharded) {
  PlanFlatGroup group;
  group.name = "g";
  plan.tensors.clear();
  for (const auto &[name, numel] : params) {
    group.params.push_back(name);
    PlanTensor t;
    t.name = name;
    t.numel = numel;
    plan.tensors.push_back(t);
  }
  plan.flatGroups = {group};
  PlanTensor grad;
  grad.name = "g.grad";
  grad.role = TensorRole::Grad;
  grad.of = "g";
  grad.sharded = sharded;
  plan.tensors.push_back(grad);
}

// Stages 1 and 2: small gradients whose ranges tile one range of their flat
// group go out as one collective out of a staging copy (Workspace.h,
// FlatUnit): the copy read and written, calibration.packed_gradient_us per
// gradient after the first; with a gap between them, one collective each.
TEST(Calibration, FlatGradientsTilingARangeAreOneCollective) {
  Cluster c = exactCluster();
  c.calibration.collective[size_t(CollectiveKind::ReduceScatter)] = {10e-6,
                                                                     2e9};
  c.calibration.packedGradient = 3e-6;
  auto seconds = [&](int64_t secondOffset, int64_t secondElements) {
    PlanOp bucket =
        collectiveOp(0, "reduce_scatter_start", "reduce_scatter", 2, 1.0);
    bucket.inputs = {1, 2};
    bucket.attrs = ReduceScatterAttrs{{"g.grad", "g.grad"}, {0, secondOffset}};
    Plan plan = planWith({bucket});
    plan.phases[0].values = {value(1, DType::BF16, 8),
                             value(2, DType::BF16, secondElements)};
    withFlatGroup(plan, {{"a", 8}, {"b", 6}}, /*sharded=*/true);
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  double one = 10e-6 + 1e6 / 2e9 + 3e6 / 1e15;
  EXPECT_NEAR(seconds(8, 6), one + 2.0 * 14 * 2 / 1e15 + 3e-6, kTol);
  EXPECT_NEAR(seconds(10, 4), one + 10e-6, kTol);
}

// By measured sizes a flat group's reduce-scatter is read unit by unit
// (Workspace.h, FlatUnit: here each gradient, over its range of the
// group's buffer), not as one collective of the bucket: two gradients of
// 750000 and 250000 bf16 elements at two ranks are 0.75e6 and 0.25e6 bus
// bytes on the curve, where the bucket whole is 1e6.
TEST(Calibration, AFlatGroupsReduceScatterIsReadUnitByUnit) {
  Cluster c = withMeasuredSizes(CollectiveKind::ReduceScatter);
  auto &fit = c.calibration.collective[size_t(CollectiveKind::ReduceScatter)];
  auto seconds = [&](std::vector<int64_t> sizes) {
    PlanOp bucket =
        collectiveOp(0, "reduce_scatter_start", "reduce_scatter", 2, 1.0);
    ReduceScatterAttrs rs;
    int64_t offset = 0;
    Plan plan = planWith({bucket});
    for (size_t i = 0; i < sizes.size(); ++i) {
      plan.phases[0].ops[0].inputs.push_back(int64_t(i + 1));
      plan.phases[0].values.push_back(
          value(int64_t(i + 1), DType::BF16, sizes[i]));
      rs.targets.push_back("g.grad");
      rs.offsets.push_back(offset);
      offset += sizes[i];
    }
    plan.phases[0].ops[0].attrs = rs;
    withFlatGroup(plan, {{"a", 750000}, {"b", 250000}}, /*sharded=*/true);
    CostModel model(plan, c);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  const double whole = 100e-6 + 1.9e-3 / 3;
  const double parts = (100e-6 + 1.9e-3 / 6) + (10e-6 + 90e-6 / 2);
  EXPECT_NEAR(seconds({750000, 250000}) - seconds({1000000}), parts - whole,
              kTol);
  // Without the sizes: the fit, one fixed time per collective.
  fit.bySize.clear();
  EXPECT_NEAR(seconds({750000, 250000}) - seconds({1000000}), 10e-6, kTol);
}

TEST(OpCost, OneRankCopiesButLaunchesNothing) {
  // 1e6 bf16 elements on one rank, HBM at 1e15 B/s: a gather copies 2 MB
  // out of place (read and written); a reduce-scatter adds the gradient
  // itself into its shard (read it, read and write the shard: zerorun
  // copies nothing and launches nothing); an all-reduce is nothing.
  Cluster cluster = exactCluster();
  auto oneRank = [&](const char *kind, const char *collective) {
    Plan plan = planWith({collectiveOp(0, kind, collective, 1, 1.0)});
    plan.worldSize = 1;
    CostModel model(plan, cluster);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  EXPECT_NEAR(oneRank("all_gather_start", "all_gather"), 4e6 / 1e15, kTol);
  EXPECT_NEAR(oneRank("reduce_scatter_start", "reduce_scatter"), 6e6 / 1e15,
              kTol);
  EXPECT_EQ(oneRank("all_reduce_start", "all_reduce"), 0.0);

  // Stage 1 reduces its replicated flat gradient in place: at one rank the
  // buffer already holds the result, nothing to add. Stage 2 adds it into
  // the gradient partition.
  auto flat = [&](bool sharded) {
    PlanOp rs =
        collectiveOp(0, "reduce_scatter_start", "reduce_scatter", 1, 1.0);
    rs.inputs = {1};
    rs.attrs = ReduceScatterAttrs{{"g.grad"}, {0}};
    Plan plan = planWith({rs});
    plan.worldSize = 1;
    plan.phases[0].values = {value(1, DType::BF16, 1000000)};
    withFlatGroup(plan, {{"a", 1000000}}, sharded);
    CostModel model(plan, cluster);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  EXPECT_EQ(flat(false), 0.0);
  EXPECT_NEAR(flat(true), 6e6 / 1e15, kTol);

  // The updates' gather of a flat group is in place (each rank sends its
  // partition of the group's buffer): nothing to copy at one rank; a
  // parameter of its own still goes through the workspace.
  auto updates = [&](std::vector<std::string> targets) {
    PlanOp gather =
        collectiveOp(0, "all_gather_updates_start", "all_gather", 1, 1.0);
    gather.attrs = TargetListAttrs{targets};
    Plan plan = planWith({gather});
    plan.worldSize = 1;
    PlanFlatGroup group;
    group.name = "group0";
    plan.flatGroups = {group};
    CostModel model(plan, cluster);
    return model.cost(plan.phases[0], plan.phases[0].ops[0]).seconds;
  };
  EXPECT_EQ(updates({"group0"}), 0.0);
  EXPECT_NEAR(updates({"group0", "lm_head.weight"}), 4e6 / 1e15, kTol);
}

// The streams zerorun runs on the compute thread at one rank on a CPU: those
// of nothing but collectives and waits.
TEST(Streams, CollectiveOnlyStreamsAreThoseOfCollectivesAndWaits) {
  PlanPhase phase;
  phase.ops = {
      computeOp(0, 1.0),
      collectiveOp(1, "reduce_scatter_start", "reduce_scatter", 2, 1.0),
      op(2, "wait", 2, {1}),
      collectiveOp(3, "all_gather_start", "all_gather", 1, 1.0),
      op(4, "copy_start", 3),
      op(5, "wait", 3, {4}),
      op(6, "wait", 1, {3})};
  EXPECT_EQ(collectiveOnlyStreams(phase, 0), (std::vector<int64_t>{1, 2}));
  // A collective on the compute stream makes no stream of its own.
  phase.ops = {collectiveOp(0, "all_reduce_start", "all_reduce", 0, 1.0)};
  EXPECT_TRUE(collectiveOnlyStreams(phase, 0).empty());
}

// A CPU rank (calibration.device "cpu") at world size 1 runs a stream of
// collectives on the compute stream's thread in program order, and starts no
// thread for a run on one stream: the simulator serialises them and charges
// no phase overhead. On another device the collective overlaps the compute
// on its own stream, and every run pays the overhead.
/// 2 ms of compute, a reduce-scatter on the reduce stream, 3 ms more, then
/// its wait; on `ranks` ranks.
Plan reduceScatterBesideCompute(int64_t ranks) {
  Plan plan = planWith({computeOp(0, 2.0),
                        collectiveOp(1, "reduce_scatter_start",
                                     "reduce_scatter", 2, 1000.0, {0}),
                        computeOp(2, 3.0), op(3, "wait", 0, {1})});
  plan.worldSize = ranks;
  return plan;
}

TEST(Streams, OneCpuRankRunsItsCollectivesOnTheComputeThread) {
  Plan plan = reduceScatterBesideCompute(1);
  Cluster c = exactCluster();
  c.calibration.phaseOverhead = 10e-6;
  CostModel model(plan, c);
  double rs = model.cost(plan.phases[0], plan.phases[0].ops[1]).seconds;
  ASSERT_GT(rs, 0.0);

  StepPrediction gpu = predict(plan, c);
  EXPECT_NEAR(timingOf(gpu, 1).start, 2 * kMs, kTol);
  EXPECT_NEAR(timingOf(gpu, 2).start, 2 * kMs, kTol); // Overlapped.
  EXPECT_NEAR(gpu.stepSeconds, std::max(5 * kMs, 2 * kMs + rs) + 10e-6, kTol);

  c.calibration.device = "cpu";
  StepPrediction cpu = predict(plan, c);
  EXPECT_NEAR(timingOf(cpu, 1).start, 2 * kMs, kTol);
  EXPECT_NEAR(timingOf(cpu, 2).start, 2 * kMs + rs, kTol); // After it.
  EXPECT_NEAR(cpu.stepSeconds, 5 * kMs + rs, kTol);        // No overhead.
  EXPECT_EQ(timingOf(cpu, 1).stream, 2); // Still shown on its own stream.
  EXPECT_NEAR(cpu.streamBusy[2], rs, kTol);

  // At two ranks the collective is a real one, on its thread: overlapped,
  // and the run starts threads.
  plan.worldSize = 2;
  StepPrediction two = predict(plan, c);
  EXPECT_NEAR(timingOf(two, 2).start, 2 * kMs, kTol);
  CostModel model2(plan, c);
  double rs2 = model2.cost(plan.phases[0], plan.phases[0].ops[1]).seconds;
  EXPECT_NEAR(two.stepSeconds, std::max(5 * kMs, 2 * kMs + rs2) + 10e-6, kTol);
}

// A CPU rank of one kernel thread has one core: its streams' threads take
// turns on it. At two ranks the reduce-scatter on its own stream then runs
// between the compute ops, in program order, at the fit measured alone (no
// compute runs beside it); the run still starts a thread per stream.
TEST(Streams, AOneCoreCpuRankTakesItsStreamsInTurn) {
  Plan plan = reduceScatterBesideCompute(2);
  Cluster c = exactCluster();
  c.calibration.phaseOverhead = 10e-6;
  c.calibration.device = "cpu";
  c.calibration.collective[size_t(CollectiveKind::ReduceScatter)] = {10e-6,
                                                                     1e9};
  c.calibration.contended[size_t(CollectiveKind::ReduceScatter)] = {100e-6,
                                                                    0.1e9};
  CostModel model(plan, c);
  double alone = model.cost(plan.phases[0], plan.phases[0].ops[1]).seconds;
  double beside =
      model.cost(plan.phases[0], plan.phases[0].ops[1], true).seconds;
  ASSERT_GT(beside, alone);

  // Two threads a rank: overlapped, at the contended fit.
  c.calibration.threadsPerRank = 2;
  StepPrediction two = predict(plan, c);
  EXPECT_NEAR(timingOf(two, 2).start, 2 * kMs, kTol);
  EXPECT_NEAR(timingOf(two, 1).end - timingOf(two, 1).start, beside, kTol);
  EXPECT_NEAR(two.stepSeconds, std::max(5 * kMs, 2 * kMs + beside) + 10e-6,
              kTol);

  // One: in turn, at the fit alone, on the one thread zerorun runs there
  // (no stream threads started: no phase overhead).
  c.calibration.threadsPerRank = 1;
  StepPrediction one = predict(plan, c);
  EXPECT_NEAR(timingOf(one, 1).start, 2 * kMs, kTol);
  EXPECT_NEAR(timingOf(one, 1).end - timingOf(one, 1).start, alone, kTol);
  EXPECT_NEAR(timingOf(one, 2).start, 2 * kMs + alone, kTol);
  EXPECT_NEAR(one.stepSeconds, 5 * kMs + alone, kTol);
  EXPECT_EQ(timingOf(one, 1).stream, 2); // Still shown on its own stream.
  EXPECT_NEAR(one.streamBusy[2], alone, kTol);

  // Not said (an older file), or not a CPU: every stream its own lane.
  c.calibration.threadsPerRank = 0;
  StepPrediction unsaid = predict(plan, c);
  EXPECT_NEAR(timingOf(unsaid, 2).start, 2 * kMs, kTol);
  c.calibration.threadsPerRank = 1;
  c.calibration.device = "cuda";
  StepPrediction gpu = predict(plan, c);
  EXPECT_NEAR(timingOf(gpu, 2).start, 2 * kMs, kTol);
}

// Ranks do not progress alike: with a calibrated meeting wait a collective
// starts that share of the compute since the previous one later, GEMMs at
// the compute share and other kernels at the memory share; the next
// collective counts from the end of this one. One rank meets nobody.
TEST(Streams, CollectivesWaitForTheLatestRank) {
  PlanOp gelu = op(1, "gelu", 0, {0});
  gelu.bytes = 1'000'000; // 1 ms at 1 GB/s.
  Plan plan = planWith(
      {computeOp(0, 2.0), gelu,
       collectiveOp(2, "all_reduce_start", "all_reduce", 0, 1.0, {1}),
       computeOp(3, 4.0, {2}),
       collectiveOp(4, "all_reduce_start", "all_reduce", 0, 1.0, {3})});
  Cluster c = exactCluster();
  c.calibration.kernelBandwidth["gelu"] = 1e9;
  CostModel model(plan, c);
  double ar = model.cost(plan.phases[0], plan.phases[0].ops[2]).seconds;
  StepPrediction none = predict(plan, c);
  EXPECT_NEAR(timingOf(none, 2).start, 3 * kMs, kTol);

  c.calibration.meetingWait[0] = 0.1;
  c.calibration.meetingWait[1] = 0.5;
  StepPrediction apart = predict(plan, c);
  // 2 ms of GEMM at 0.1 and 1 ms of gelu at 0.5.
  double first = 3 * kMs + 0.2 * kMs + 0.5 * kMs;
  EXPECT_NEAR(timingOf(apart, 2).start, first, kTol);
  EXPECT_NEAR(timingOf(apart, 2).start - timingOf(apart, 2).issue, 0.7 * kMs,
              kTol);
  EXPECT_EQ(timingOf(apart, 2).stragglerWait, 0.0); // No straggler.
  // 4 ms of GEMM since it: 0.4 ms.
  EXPECT_NEAR(timingOf(apart, 4).start, first + ar + 4 * kMs + 0.4 * kMs, kTol);

  plan.worldSize = 1;
  StepPrediction alone = predict(plan, c);
  EXPECT_NEAR(timingOf(alone, 2).start, 3 * kMs, kTol);
}

// On a CPU rank a collective on its own stream shares the cores with the
// compute after it: it runs at the contended fit. On the compute stream, with
// no compute left to run beside it, or on another device: the fit measured
// alone.
TEST(Streams, ACpuRanksCollectiveBesideComputeRunsAtTheContendedFit) {
  // A gather of 1e6 bf16 elements on 2 ranks (busbw bytes 1e6): alone 10 us
  // + 1 ms at 1 GB/s, beside compute 100 us + 4 ms at 0.25 GB/s.
  Cluster c = exactCluster();
  c.calibration.collective[size_t(CollectiveKind::AllGather)] = {10e-6, 1e9};
  c.calibration.contended[size_t(CollectiveKind::AllGather)] = {100e-6, 0.25e9};
  double alone = 10e-6 + 1e-3, busy = 100e-6 + 4e-3;
  auto gatherTime = [&](const Plan &plan, int64_t index) {
    StepPrediction p = predict(plan, c);
    const OpTiming &t = timingOf(p, index);
    return t.end - t.start;
  };
  // Gather on stream 1, compute after it on stream 0.
  Plan beside =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 1.0),
                computeOp(1, 2.0), op(2, "wait", 0, {0})});
  // Gather on stream 1 with nothing to compute after it.
  Plan last =
      planWith({computeOp(0, 2.0),
                collectiveOp(1, "all_gather_start", "all_gather", 1, 1.0),
                op(2, "wait", 0, {1})});
  // On the compute stream itself.
  Plan inline_ =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 0, 1.0),
                computeOp(1, 2.0)});
  EXPECT_NEAR(gatherTime(beside, 0), alone, kTol); // Not a CPU rank.
  c.calibration.device = "cpu";
  EXPECT_NEAR(gatherTime(beside, 0), busy, kTol);
  EXPECT_NEAR(gatherTime(last, 1), alone, kTol);
  EXPECT_NEAR(gatherTime(inline_, 0), alone, kTol);
  // A contended fit faster than the one alone (measured under another
  // process's load) is not taken: compute beside it cannot speed it up.
  c.calibration.contended[size_t(CollectiveKind::AllGather)] = {0, 4e9};
  EXPECT_NEAR(gatherTime(beside, 0), alone, kTol);
  // With the sizes measured beside compute (at 2 ranks: bus bytes 0.5e6
  // and 2e6), the time read between them: 1e6 bus bytes a third of the way
  // from 1 ms to 7 ms.
  c.calibration.ranks = 2;
  c.calibration.contended[size_t(CollectiveKind::AllGather)] = {
      100e-6, 0.25e9, 0, {{1e6, 1e-3}, {4e6, 7e-3}}};
  EXPECT_NEAR(gatherTime(beside, 0), 3e-3, kTol);
  // Without a contended fit: the one measured alone.
  c.calibration.contended[size_t(CollectiveKind::AllGather)] = {};
  EXPECT_NEAR(gatherTime(beside, 0), alone, kTol);
}

//===----------------------------------------------------------------------===//
// --compare: a measured trace against the prediction
//===----------------------------------------------------------------------===//

namespace {

/// Two linear ops around a gather and its wait, two runs per step.
Plan comparePlan() {
  PlanOp first = computeOp(0, 2.0);
  first.where = "h.0.mlp.c_fc";
  PlanOp gather = collectiveOp(1, "all_gather_start", "all_gather", 1, 1.0);
  gather.tensors = {"h.1.mlp.c_fc.weight"};
  PlanOp last = computeOp(3, 1.0);
  last.where = "h.0.mlp.c_proj";
  return planWith({first, gather, op(2, "wait", 0, {1}), last}, /*runs=*/2);
}

/// A trace as zerorun --profile writes it: 2 ranks, 3 steps of 2 runs, ops
/// back to back within a run: op 0 for `first(rank, step)` ms, op 1 for 1
/// ms, the wait for 0, op 3 for 1 ms.
json compareTrace(const Plan &plan,
                  const std::function<double(int, int)> &first) {
  json events = json::array();
  for (int rank = 0; rank < 2; ++rank) {
    double at = 0; // ms
    for (int step = 0; step < 3; ++step)
      for (int run = 0; run < 2; ++run) {
        double durations[4] = {first(rank, step), 1, 0, 1};
        double start = at;
        for (const PlanOp &o : plan.phases[0].ops) {
          json args = traceEventArgs(o);
          args.update({{"rank", rank},
                       {"phase", "micro_step"},
                       {"step", step},
                       {"run", run}});
          events.push_back({{"name", traceEventName(o)},
                            {"cat", "op"},
                            {"ph", "X"},
                            {"pid", tracePid(0, rank)},
                            {"tid", o.stream},
                            {"ts", at * 1e3},
                            {"dur", durations[o.index] * 1e3},
                            {"args", args}});
          at += durations[o.index];
        }
        events.push_back({{"name", "micro_step"},
                          {"cat", "phase_run"},
                          {"ph", "X"},
                          {"pid", tracePid(0, rank)},
                          {"tid", -1},
                          {"ts", start * 1e3},
                          {"dur", (at - start) * 1e3},
                          {"args",
                           {{"rank", rank},
                            {"phase", "micro_step"},
                            {"step", step},
                            {"run", run}}}});
      }
  }
  return {{"traceEvents", events},
          {"otherData", {{"plan_fingerprint", planFingerprint(plan)}}}};
}

Expected<MeasuredTrace> readTrace(const json &trace, const Plan &plan) {
  Expected<JsonDocument> doc = JsonDocument::parse(trace.dump(1), "trace.json");
  EXPECT_TRUE(doc);
  return readMeasuredTrace(*doc, plan);
}

/// Rank 1 is slower; step 0 (warm-up) much slower, and left out.
double firstOp(int rank, int step) {
  if (step == 0)
    return 10;
  return (rank == 1 ? 3 : 2) + (step == 2 && rank == 1 ? 1 : 0);
}

} // namespace

TEST(Compare, PairsOpsAndTakesTheSlowestRanksMedian) {
  Plan plan = comparePlan();
  StepPrediction p = predict(plan, exactCluster());
  Expected<MeasuredTrace> m = readTrace(compareTrace(plan, firstOp), plan);
  ASSERT_TRUE(m) << m.error().str();
  EXPECT_EQ(m->ranks, 2);
  Expected<TraceComparison> c = compareTrace(plan, p, *m);
  ASSERT_TRUE(c) << c.error().str();
  EXPECT_EQ(c->stepsMeasured, 2);
  EXPECT_EQ(c->slowestRank, 1);
  // Rank 1's steps: 2 x (3 + 1 + 1) = 10 ms and 2 x (4 + 1 + 1) = 12 ms.
  EXPECT_NEAR(c->step.measured, 11 * kMs, 1e-9);
  EXPECT_NEAR(c->step.predicted, p.stepSeconds, kTol);
  ASSERT_EQ(c->phases.size(), 1u);
  EXPECT_NEAR(c->phases[0].measured, 5.5 * kMs, 1e-9);
  // Linear: 2 x (3 + 1) and 2 x (4 + 1) ms per step, predicted 2 x 3 ms.
  auto row = [](const std::vector<CompareRow> &rows, const std::string &n) {
    for (const CompareRow &r : rows)
      if (r.name == n)
        return r;
    ADD_FAILURE() << "no row " << n;
    return CompareRow{};
  };
  EXPECT_NEAR(row(c->kinds, "linear").measured, 9 * kMs, 1e-9);
  EXPECT_NEAR(row(c->kinds, "linear").predicted, 6 * kMs, kTol);
  EXPECT_NEAR(row(c->kinds, "all_gather_start").measured, 2 * kMs, 1e-9);
  EXPECT_NEAR(row(c->streams, "compute").measured, 9 * kMs, 1e-9);
  EXPECT_NEAR(row(c->streams, "gather").measured, 2 * kMs, 1e-9);
  // The largest error: op 0, 7 ms measured (median of 6 and 8) against 4.
  ASSERT_FALSE(c->largestErrors.empty());
  EXPECT_EQ(c->largestErrors[0].op, 0);
  EXPECT_EQ(c->largestErrors[0].name, "linear h.0.mlp.c_fc");
  EXPECT_NEAR(c->largestErrors[0].measured, 7 * kMs, 1e-9);
  EXPECT_NEAR(c->largestErrors[0].predicted, 4 * kMs, kTol);
  json j = comparisonJson(*c);
  EXPECT_NEAR(j["step"]["measured_s"].get<double>(), 11 * kMs, 1e-9);
  EXPECT_NEAR(j["step"]["predicted_s"].get<double>(), p.stepSeconds, kTol);
}

TEST(Compare, RefusesATraceOfAnotherPlan) {
  Plan plan = comparePlan();
  json trace = compareTrace(plan, firstOp);
  Plan other = plan;
  other.phases[0].ops[0].where = "h.1.mlp.c_fc";
  Expected<MeasuredTrace> m = readTrace(trace, other);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().str().find("trace.json:"), std::string::npos)
      << m.error().str();
  EXPECT_NE(m.error().str().find("another plan"), std::string::npos);

  // The same fingerprint but an event that names another op.
  trace["traceEvents"][0]["name"] = "linear h.9.mlp.c_fc";
  m = readTrace(trace, plan);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().str().find("'linear h.0.mlp.c_fc' in the plan"),
            std::string::npos)
      << m.error().str();

  // No fingerprint: not a zerorun trace.
  m = readTrace(json{{"traceEvents", json::array()}}, plan);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().str().find("plan_fingerprint"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// What if (zeroc inspect --what-if, WhatIf.h)
//===----------------------------------------------------------------------===//

namespace {

/// compute 5 ms -> reduce-scatter 3 ms on stream 2 (it needs the compute's
/// gradient), compute 3 ms meanwhile, then a wait on the reduction.
Plan stragglerPlan() {
  return planWith(
      {computeOp(0, 5.0),
       collectiveOp(1, "reduce_scatter_start", "reduce_scatter", 2, 3.0, {0}),
       computeOp(2, 3.0), op(3, "wait", 0, {1})});
}

/// One reduce-scatter of 800 MB of bf16 over 32 ranks (4 nodes of 8 on
/// roundCluster): docs/cost-model.md's worked example, 15.549 ms.
Plan bigReduceScatterPlan() {
  PlanOp rs = op(0, "reduce_scatter_start", 2);
  rs.collective = "reduce_scatter";
  rs.commElements = 400000000;
  rs.where = "h.3.mlp";
  Plan plan = planWith({rs, op(1, "wait", 0, {0})});
  plan.worldSize = 32;
  return plan;
}

WhatIfReport whatIfOf(const Plan &plan, const Cluster &cluster,
                      const std::vector<std::string> &specs,
                      double watchdog = kNcclWatchdogSeconds) {
  std::vector<WhatIfScenario> scenarios;
  for (const std::string &spec : specs) {
    Expected<WhatIfScenario> s = parseWhatIf(spec);
    EXPECT_TRUE(s) << (s ? "" : s.error().str());
    if (s)
      scenarios.push_back(*s);
  }
  Expected<WhatIfReport> r =
      whatIf(plan, cluster, scenarios,
             std::vector<std::optional<Cluster>>(scenarios.size()), watchdog);
  EXPECT_TRUE(r) << (r ? "" : r.error().str());
  return r ? *r : WhatIfReport{};
}

} // namespace

TEST(WhatIf, StragglerDelaysTheFirstCollectiveThatWaitsOnIt) {
  // Healthy: the reduction starts at 5 ms and the step ends with it, at
  // 8 ms + its epilogue. With the slow rank's compute 1.2x, that rank
  // reaches the reduction at 6 ms: every rank's reduction starts 0.2 x 5 ms
  // = 1 ms later, the healthy rank's wait blocks 1 ms longer, and the step
  // ends when the slow rank's second compute does: 6 + 1.2 x 3 = 9.6 ms.
  Plan plan = stragglerPlan();
  StepPrediction healthy = predict(plan, exactCluster());
  EXPECT_NEAR(healthy.stepSeconds, 8 * kMs + rsEpilogue(3e6), kTol);
  SimulationOptions slow;
  slow.stragglerFactor = 1.2;
  Expected<StepPrediction> p = predictStep(plan, exactCluster(), slow);
  ASSERT_TRUE(p) << p.error().str();
  const OpTiming &rs = timingOf(*p, 1);
  EXPECT_NEAR(rs.issue, 5 * kMs, kTol);
  EXPECT_NEAR(rs.start, 6 * kMs, kTol);
  EXPECT_NEAR(rs.stragglerWait, 1 * kMs, kTol);
  EXPECT_NEAR(rs.end, 9 * kMs + rsEpilogue(3e6), kTol);
  EXPECT_NEAR(p->stepSeconds, 9.6 * kMs, kTol);
  // The healthy rank's compute stream waits from 8 ms to the reduction's
  // end: 1 ms more than healthy, charged to the reduction.
  EXPECT_NEAR(p->exposedComm, 1 * kMs + rsEpilogue(3e6), kTol);

  WhatIfReport r = whatIfOf(plan, exactCluster(), {"straggler=1.2"});
  ASSERT_EQ(r.scenarios.size(), 1u);
  ASSERT_EQ(r.scenarios[0].collectives.size(), 1u);
  EXPECT_NEAR(r.scenarios[0].collectives[0].stragglerWait, 1 * kMs, kTol);
  EXPECT_NEAR(r.scenarios[0].exposedComm - r.healthy.exposedComm, 1 * kMs,
              kTol);
  // Launch to end: the 1 ms wait for the slow rank, then the reduction.
  EXPECT_NEAR(r.scenarios[0].collectives[0].duration, 4 * kMs + rsEpilogue(3e6),
              kTol);
  EXPECT_NEAR(r.healthy.collectives[0].duration, 3 * kMs + rsEpilogue(3e6),
              kTol);
  // bf16: 3e6 elements x 2 B.
  EXPECT_EQ(r.scenarios[0].collectives[0].bytes, 6e6);
  // Straggler factor 1 is the healthy step, to the last bit.
  WhatIfReport same = whatIfOf(plan, exactCluster(), {"straggler=1"});
  EXPECT_EQ(same.scenarios[0].stepSeconds, r.healthy.stepSeconds);
}

TEST(WhatIf, StragglerIsNotAUniformSlowdown) {
  // Compute that overlaps nothing the other ranks wait for: a slow rank's
  // 10 ms op after the last collective delays the step by its own 2 ms, but
  // the healthy rank's exposed communication does not change.
  Plan plan =
      planWith({collectiveOp(0, "all_gather_start", "all_gather", 1, 6.0),
                op(1, "wait", 0, {0}), computeOp(2, 10.0)});
  WhatIfReport r = whatIfOf(plan, exactCluster(), {"straggler=1.2"});
  EXPECT_NEAR(r.healthy.stepSeconds, 16 * kMs, kTol);
  EXPECT_NEAR(r.scenarios[0].stepSeconds, 18 * kMs, kTol);
  EXPECT_NEAR(r.scenarios[0].exposedComm, r.healthy.exposedComm, kTol);
  EXPECT_EQ(r.scenarios[0].collectives.at(0).stragglerWait, 0.0);
}

TEST(WhatIf, StragglerNeedsTwoRanks) {
  Plan plan = stragglerPlan();
  plan.worldSize = 1;
  SimulationOptions slow;
  slow.stragglerFactor = 2;
  Expected<StepPrediction> p = predictStep(plan, exactCluster(), slow);
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("2 or more ranks"), std::string::npos);
}

TEST(WhatIf, HalvedInterNodeBandwidthDoublesTheInterNodeTerm) {
  Cluster c = roundCluster(4, 8);
  CollectiveTime base =
      collectiveTime(c, CollectiveKind::ReduceScatter, 800e6, 32);
  CollectiveTime half = collectiveTime(
      scaledLinks(c, WhatIfScenario::Kind::InterNodeBandwidth, 0.5),
      CollectiveKind::ReduceScatter, 800e6, 32);
  EXPECT_NEAR(base.interNode, 12e-3, kTol);
  EXPECT_NEAR(half.interNode, 24e-3, kTol);
  EXPECT_EQ(half.intraNode, base.intraNode);
  EXPECT_EQ(half.latency, base.latency);

  // Through the simulator: the reduction's duration grows by exactly the
  // 12 ms of the inter-node term; halving the intra-node bus adds its
  // 3.5 ms instead.
  WhatIfReport r = whatIfOf(bigReduceScatterPlan(), c,
                            {"inter-node-bw=0.5", "intra-node-bw=0.5"});
  ASSERT_EQ(r.scenarios.size(), 2u);
  double healthy = r.healthy.collectives.at(0).duration;
  EXPECT_NEAR(r.scenarios[0].collectives.at(0).duration - healthy, 12e-3, kTol);
  EXPECT_NEAR(r.scenarios[1].collectives.at(0).duration - healthy, 3.5e-3,
              kTol);
  EXPECT_NEAR(r.scenarios[0].stepSeconds - r.healthy.stepSeconds, 12e-3, kTol);
  EXPECT_NEAR(r.scenarios[0].exposedComm - r.healthy.exposedComm, 12e-3, kTol);
  EXPECT_EQ(r.healthy.collectives.at(0).bytes, 800e6);
}

TEST(WhatIf, IntraNodeBandwidthScalesTheCalibratedFit) {
  Cluster c = exactCluster();
  c.calibration.collective[size_t(CollectiveKind::AllGather)] = {1e-6, 2e9};
  Cluster half = scaledLinks(c, WhatIfScenario::Kind::IntraNodeBandwidth, 0.5);
  EXPECT_EQ(half.calibration.collective[size_t(CollectiveKind::AllGather)]
                .busBandwidth,
            1e9);
  EXPECT_EQ(half.intraNode.busBandwidth, 0.5e9);
  // The measured sizes past the latency, and the fit beside compute, alike.
  c.calibration.collective[size_t(CollectiveKind::AllGather)].bySize = {
      {1e3, 3e-6}, {1e6, 501e-6}};
  c.calibration.contended[size_t(CollectiveKind::AllGather)] = {1e-6, 1e9};
  half = scaledLinks(c, WhatIfScenario::Kind::IntraNodeBandwidth, 0.5);
  const auto &slow =
      half.calibration.collective[size_t(CollectiveKind::AllGather)];
  EXPECT_NEAR(slow.bySize[0].second, 5e-6, 1e-15);
  EXPECT_NEAR(slow.bySize[1].second, 1001e-6, 1e-15);
  EXPECT_EQ(half.calibration.contended[size_t(CollectiveKind::AllGather)]
                .busBandwidth,
            0.5e9);
}

TEST(WhatIf, AnotherClusterIsSimulatedOnItsOwnFigures) {
  Cluster c = roundCluster(4, 8);
  Cluster fast = c;
  fast.name = "fast";
  fast.interNode->busBandwidth = 100e9; // Twice the network: 6 ms less.
  Expected<WhatIfScenario> s = parseWhatIf("cluster=fast.json");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->clusterSpec, "fast.json");
  Expected<WhatIfReport> r = whatIf(bigReduceScatterPlan(), c, {*s}, {fast});
  ASSERT_TRUE(r) << r.error().str();
  EXPECT_EQ(r->scenarios[0].cluster, "fast");
  EXPECT_NEAR(r->healthy.collectives[0].duration -
                  r->scenarios[0].collectives[0].duration,
              6e-3, kTol);
}

TEST(WhatIf, FewerNodesSimulateTheRecompiledPlan) {
  // docs/cost-model.md's 800 MB reduce-scatter on 4 nodes of 8 (15.549 ms),
  // and the plan recompiled for one node fewer, 24 ranks on 3 nodes: the
  // same base, intra-node latency and bandwidth (5 us + 14 us + 3.5 ms),
  // inter-node latency 2 x 10 us and bandwidth 800 MB x 2/3 / 50 GB/s =
  // 10.667 ms: 14.206 ms.
  Cluster c = roundCluster(4, 8);
  Plan healthy = bigReduceScatterPlan();
  Plan smaller = healthy;
  smaller.worldSize = 24;
  smaller.gradientAccumulationSteps = 3;
  Expected<WhatIfScenario> s = parseWhatIf("nodes=-1");
  ASSERT_TRUE(s) << s.error().str();
  EXPECT_EQ(s->kind, WhatIfScenario::Kind::Nodes);
  EXPECT_EQ(s->nodes, -1);
  s->notes = {"the batch, as the driver chose it"};
  Expected<WhatIfReport> r = whatIf(healthy, c, {*s}, {std::nullopt},
                                    kNcclWatchdogSeconds, {&smaller});
  ASSERT_TRUE(r) << r.error().str();
  const ScenarioResult &n = r->scenarios[0];
  EXPECT_EQ(n.worldSize, 24);
  EXPECT_EQ(r->healthy.worldSize, 32);
  EXPECT_EQ(n.trainBatchSize, smaller.model.microBatch * 3 * 24);
  EXPECT_EQ(r->healthy.trainBatchSize,
            healthy.model.microBatch * healthy.gradientAccumulationSteps * 32);
  // Each plus its epilogue: the rank's share of S read, its shard read and
  // written, 3 x S / ranks at roundCluster's 1 TB/s of HBM.
  EXPECT_NEAR(r->healthy.collectives[0].seconds,
              15.549e-3 + 3 * 800e6 / 32 / 1e12, 1e-9);
  EXPECT_NEAR(n.collectives[0].seconds,
              5e-6 + 14e-6 + 3.5e-3 + 20e-6 + 800e6 * 2 / 3 / 50e9 +
                  3 * 800e6 / 24 / 1e12,
              1e-9);
  ASSERT_EQ(r->recompiled.size(), 1u);
  EXPECT_TRUE(r->recompiled[0]);
  // Its collectives are its own plan's: not folded into the healthy
  // plan's op 0 for the timeout margin.
  EXPECT_EQ(r->worst.size(), 2u);
  std::string text = whatIfText(*r);
  EXPECT_NE(text.find("nodes=-1: the batch, as the driver chose it"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(the plan recompiled for 24 ranks)"), std::string::npos);
  json j = whatIfJson(*r);
  EXPECT_EQ(j["scenarios"][1]["world_size"], 24);
  EXPECT_EQ(j["scenarios"][1]["gradient_accumulation_steps"], 3);
  EXPECT_EQ(j["scenarios"][1]["batch_notes"][0],
            "the batch, as the driver chose it");

  // Without the recompiled plan (zeroc inspect): refused, naming the way.
  Expected<WhatIfReport> refused = whatIf(healthy, c, {*s}, {std::nullopt});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find(
                "a plan cannot change its world size; compile it for the "
                "smaller world with `zeroc MODEL.mlir"),
            std::string::npos)
      << refused.error().message;
}

TEST(WhatIf, WatchdogFlagsTheWorstScenarioNamingTheCollective) {
  // Healthy, the reduction takes 15.549 ms + its epilogue; halving the
  // network makes it 27.549 ms + epilogue: a 20 ms watchdog flags that.
  Plan plan = bigReduceScatterPlan();
  Cluster c = roundCluster(4, 8);
  WhatIfReport ok = whatIfOf(plan, c, {}, 20e-3);
  EXPECT_FALSE(ok.exceedsWatchdog());
  WhatIfReport r = whatIfOf(plan, c, {"inter-node-bw=0.5"}, 20e-3);
  ASSERT_TRUE(r.exceedsWatchdog());
  const auto &[worst, scenario] = r.worst.front();
  EXPECT_EQ(scenario, "inter-node-bw=0.5");
  EXPECT_EQ(worst.collective, "reduce_scatter");
  EXPECT_EQ(worst.module, "h.3.mlp");
  EXPECT_EQ(worst.bytes, 800e6);
  EXPECT_GE(worst.duration, 27.549e-3);
  std::string text = whatIfText(r);
  EXPECT_NE(text.find("TIMEOUT: micro_step op 0 reduce_scatter of"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(h.3.mlp)"), std::string::npos);
  json j = whatIfJson(r);
  EXPECT_EQ(j["watchdog"]["seconds"], 20e-3);
  EXPECT_EQ(j["watchdog"]["nccl_default"], false);
  ASSERT_EQ(j["watchdog"]["exceeds"].size(), 1u);
  EXPECT_EQ(j["watchdog"]["exceeds"][0]["module"], "h.3.mlp");
  EXPECT_EQ(j["scenarios"].size(), 2u);
  EXPECT_EQ(j["scenarios"][1]["scenario"], "inter-node-bw=0.5");
  EXPECT_FALSE(j["assumptions"].empty());
}

TEST(WhatIf, AdvisesSensitivityIsATenPercentStragglerAndHalfTheNetwork) {
  // zeroc advise's two scenarios are --what-if's, spelled as it takes them.
  const std::vector<WhatIfScenario> &s = sensitivityScenarios();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].spec, "straggler=1.1");
  EXPECT_EQ(s[0].kind, WhatIfScenario::Kind::Straggler);
  EXPECT_EQ(s[0].factor, 1.1);
  EXPECT_EQ(s[1].spec, "inter-node-bw=0.5");
  EXPECT_EQ(s[1].kind, WhatIfScenario::Kind::InterNodeBandwidth);
  EXPECT_EQ(s[1].factor, 0.5);

  // One rank 10% slower: it reaches the reduction at 5.5 ms, which then
  // runs to 8.5 ms; the step ends with the slow rank's second compute,
  // 5.5 + 1.1 x 3 = 8.8 ms. The healthy rank waits from 8 ms to the
  // reduction's end: 0.5 ms more than healthy.
  Expected<StepPrediction> slow =
      predictScenario(stragglerPlan(), exactCluster(), s[0]);
  ASSERT_TRUE(slow) << slow.error().str();
  EXPECT_NEAR(slow->stepSeconds, 8.8 * kMs, kTol);
  EXPECT_NEAR(slow->exposedComm, 0.5 * kMs + rsEpilogue(3e6), kTol);
  EXPECT_NEAR(timingOf(*slow, 1).stragglerWait, 0.5 * kMs, kTol);

  // The network halved: docs/cost-model.md's 800 MB reduce-scatter over 4
  // nodes, 15.549 ms healthy, pays its 12 ms inter-node term twice.
  Cluster c = roundCluster(4, 8);
  StepPrediction healthy = predict(bigReduceScatterPlan(), c);
  Expected<StepPrediction> network =
      predictScenario(bigReduceScatterPlan(), c, s[1]);
  ASSERT_TRUE(network) << network.error().str();
  EXPECT_NEAR(network->stepSeconds - healthy.stepSeconds, 12e-3, kTol);
  // On one node the network is not used: the healthy step, to the bit.
  Expected<StepPrediction> oneNode =
      predictScenario(stragglerPlan(), exactCluster(), s[1]);
  ASSERT_TRUE(oneNode);
  EXPECT_EQ(oneNode->stepSeconds,
            predict(stragglerPlan(), exactCluster()).stepSeconds);
  // Another cluster's scenario needs that cluster.
  Expected<WhatIfScenario> other = parseWhatIf("cluster=x.json");
  ASSERT_TRUE(other);
  Expected<StepPrediction> missing =
      predictScenario(stragglerPlan(), exactCluster(), *other);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("was not loaded"), std::string::npos);
}

TEST(WhatIf, BadScenariosAreRefused) {
  struct Case {
    const char *spec;
    const char *message;
  } cases[] = {
      {"stragler=1.2", "unknown scenario 'stragler'"},
      {"straggler", "has no '='"},
      {"straggler=0", "finite number > 0, got '0'"},
      {"straggler=-2", "finite number > 0, got '-2'"},
      {"inter-node-bw=abc", "finite number > 0, got 'abc'"},
      {"intra-node-bw=", "finite number > 0, got ''"},
      {"straggler=inf", "finite number > 0, got 'inf'"},
      {"straggler=1.2x", "finite number > 0, got '1.2x'"},
      {"cluster=", "cluster= needs a cluster file or preset"},
      {"nodes=1", "negative whole number (nodes=-1: one node fewer), got '1'"},
      {"nodes=0", "negative whole number"},
      {"nodes=-", "negative whole number"},
      {"nodes=-1.5", "negative whole number"},
      {"nodes=-x", "negative whole number"},
      {"nodes=-99999999999", "negative whole number"},
  };
  for (const Case &c : cases) {
    Expected<WhatIfScenario> s = parseWhatIf(c.spec);
    ASSERT_FALSE(s) << c.spec;
    EXPECT_NE(s.error().message.find(c.message), std::string::npos)
        << s.error().message;
    EXPECT_EQ(s.error().message.rfind("--what-if: ", 0), 0u);
  }
  Expected<WhatIfReport> r = whatIf(stragglerPlan(), exactCluster(), {}, {}, 0);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("--watchdog"), std::string::npos);
}
