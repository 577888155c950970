//===- ClusterTest.cpp - Cluster descriptions: presets, reader errors -----===//
//
// Every preset loads, equals its file in examples/clusters and cites a
// source for every figure; units are converted once; each check of the
// reader has a document that fails it with the exact message and position.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Config/Cluster.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>

using namespace zeroc;
using nlohmann::json;

namespace {

std::string presetPath(const std::string &name) {
  return std::string(ZEROC_SOURCE_DIR) + "/examples/clusters/" + name + ".json";
}

/// `doc` read as the cluster file "bad.json": its error, or "" where it
/// reads.
std::string readError(const json &doc) {
  Expected<JsonDocument> text = JsonDocument::parse(doc.dump(2), "bad.json");
  if (!text)
    return text.error().str();
  Expected<Cluster> read = readCluster(*text);
  return read ? std::string() : read.error().str();
}

/// Every figure of the format, as dotted keys (inter_node only when present).
std::vector<std::string> figureKeys(const Cluster &c) {
  std::vector<std::string> keys = {"nodes",
                                   "gpus_per_node",
                                   "gpu.memory_gib",
                                   "gpu.peak_tflops.bf16",
                                   "gpu.peak_tflops.f16",
                                   "gpu.peak_tflops.tf32",
                                   "gpu.peak_tflops.f32",
                                   "gpu.hbm_gb_per_s",
                                   "intra_node.bus_gb_per_s",
                                   "intra_node.latency_us",
                                   "collective_latency_us",
                                   "host.memory_gib",
                                   "host.memory_gb_per_s",
                                   "host.pcie_gb_per_s",
                                   "host.nvme_gb_per_s",
                                   "compute_efficiency"};
  if (c.interNode) {
    keys.push_back("inter_node.bus_gb_per_s");
    keys.push_back("inter_node.latency_us");
  }
  return keys;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

TEST(ClusterPresets, TheFourSystemsOfTheIssue) {
  EXPECT_EQ(clusterPresetNames(),
            (std::vector<std::string>{"h100-sxm-8", "a100-80gb-8",
                                      "a100-100gbe", "h100-pcie-1"}));
}

TEST(ClusterPresets, EachLoadsAndEqualsItsFile) {
  for (const std::string &name : clusterPresetNames()) {
    SCOPED_TRACE(name);
    Expected<Cluster> preset = clusterPreset(name);
    ASSERT_TRUE(preset) << preset.error().str();
    Expected<Cluster> file = loadClusterFile(presetPath(name));
    ASSERT_TRUE(file) << file.error().str();
    EXPECT_EQ(preset->name, name);
    EXPECT_EQ(toJson(*preset), toJson(*file));
    // The file is already in the canonical form the writer produces.
    std::ifstream in(presetPath(name));
    json text = json::parse(in);
    EXPECT_EQ(toJson(*file), text);
  }
}

TEST(ClusterPresets, EveryFigureCitesASource) {
  for (const std::string &name : clusterPresetNames()) {
    SCOPED_TRACE(name);
    Expected<Cluster> c = clusterPreset(name);
    ASSERT_TRUE(c) << c.error().str();
    for (const std::string &key : figureKeys(*c)) {
      auto it = c->sources.find(key);
      ASSERT_NE(it, c->sources.end()) << key;
      EXPECT_GE(it->second.size(), 10u) << key;
    }
  }
}

TEST(ClusterPresets, RoundTripThroughJson) {
  for (const std::string &name : clusterPresetNames()) {
    SCOPED_TRACE(name);
    Expected<Cluster> c = clusterPreset(name);
    ASSERT_TRUE(c);
    Expected<JsonDocument> doc =
        JsonDocument::parse(toJson(*c).dump(2), "roundtrip.json");
    ASSERT_TRUE(doc);
    Expected<Cluster> back = readCluster(*doc);
    ASSERT_TRUE(back) << back.error().str();
    EXPECT_EQ(back->gpu.hbmBandwidth, c->gpu.hbmBandwidth);
    EXPECT_EQ(back->intraNode.latency, c->intraNode.latency);
    EXPECT_EQ(back->collectiveLatency, c->collectiveLatency);
    EXPECT_EQ(toJson(*back), toJson(*c));
  }
}

TEST(ClusterPresets, FiguresInSIUnits) {
  Expected<Cluster> h100 = clusterPreset("h100-sxm-8");
  ASSERT_TRUE(h100);
  EXPECT_EQ(h100->nodes, 1);
  EXPECT_EQ(h100->gpusPerNode, 8);
  EXPECT_EQ(h100->gpus(), 8);
  EXPECT_DOUBLE_EQ(h100->gpu.memoryBytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(h100->gpu.peak.bf16, 989.5e12);
  EXPECT_DOUBLE_EQ(h100->gpu.peak.tf32, 494.5e12);
  EXPECT_DOUBLE_EQ(h100->gpu.peak.f32, 67e12);
  EXPECT_DOUBLE_EQ(h100->gpu.hbmBandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(h100->intraNode.busBandwidth, 370.8e9);
  EXPECT_DOUBLE_EQ(h100->intraNode.latency, 3.4e-6);
  ASSERT_TRUE(h100->interNode);
  EXPECT_DOUBLE_EQ(h100->interNode->busBandwidth, 384e9);
  EXPECT_DOUBLE_EQ(h100->collectiveLatency, 8.4e-6);
  EXPECT_DOUBLE_EQ(h100->host.pcieBandwidth, 48e9);
  EXPECT_DOUBLE_EQ(h100->computeEfficiency, 0.7);
  // f32 math runs at the plain FP32 rate, not TF32.
  EXPECT_DOUBLE_EQ(h100->peakFlops(DType::F32), 67e12);
  EXPECT_DOUBLE_EQ(h100->peakFlops(DType::F16), 989.5e12);

  Expected<Cluster> ethernet = clusterPreset("a100-100gbe");
  ASSERT_TRUE(ethernet);
  EXPECT_EQ(ethernet->nodes, 4);
  ASSERT_TRUE(ethernet->interNode);
  EXPECT_DOUBLE_EQ(ethernet->interNode->busBandwidth, 12e9);
  EXPECT_DOUBLE_EQ(ethernet->gpu.peak.bf16, 312e12);

  Expected<Cluster> workstation = clusterPreset("h100-pcie-1");
  ASSERT_TRUE(workstation);
  EXPECT_EQ(workstation->gpus(), 1);
  EXPECT_FALSE(workstation->interNode);
  EXPECT_DOUBLE_EQ(workstation->gpu.hbmBandwidth, 2e12);
}

TEST(ClusterPresets, LoadClusterTakesAFileOrAName) {
  Expected<Cluster> byName = loadCluster("a100-80gb-8");
  ASSERT_TRUE(byName) << byName.error().str();
  EXPECT_EQ(byName->name, "a100-80gb-8");
  Expected<Cluster> byPath = loadCluster(presetPath("h100-pcie-1"));
  ASSERT_TRUE(byPath) << byPath.error().str();
  EXPECT_EQ(byPath->name, "h100-pcie-1");

  Expected<Cluster> typo = loadCluster("h100-sxm8");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().str(),
            "error: unknown cluster preset 'h100-sxm8'; did you mean "
            "'h100-sxm-8'? (presets: h100-sxm-8 a100-80gb-8 a100-100gbe "
            "h100-pcie-1)");
  Expected<Cluster> missing = loadCluster("no/such/cluster.json");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().str(),
            "no/such/cluster.json: error: cannot open file");
}

TEST(ClusterPresets, CheckFits) {
  Expected<Cluster> c = clusterPreset("a100-100gbe");
  ASSERT_TRUE(c);
  EXPECT_FALSE(checkFits(*c, 1));
  EXPECT_FALSE(checkFits(*c, 32));
  std::optional<Diagnostic> tooMany = checkFits(*c, 33);
  ASSERT_TRUE(tooMany);
  EXPECT_EQ(tooMany->str(),
            "error: the plan runs on 33 ranks but cluster 'a100-100gbe' has "
            "32 GPUs (4 nodes x 8); describe a cluster with 5 nodes");
}

//===----------------------------------------------------------------------===//
// Reader errors
//===----------------------------------------------------------------------===//

const char *const kValid = R"({
  "name": "test",
  "nodes": 2,
  "gpus_per_node": 4,
  "gpu": {
    "model": "G",
    "memory_gib": 16,
    "peak_tflops": {"bf16": 100, "f16": 100, "tf32": 50, "f32": 10},
    "hbm_gb_per_s": 1000
  },
  "intra_node": {"bus_gb_per_s": 100, "latency_us": 2},
  "inter_node": {"bus_gb_per_s": 10, "latency_us": 10},
  "collective_latency_us": 5,
  "host": {"memory_gib": 64, "memory_gb_per_s": 100, "pcie_gb_per_s": 20,
           "nvme_gb_per_s": 5}
})";

/// Reads `kValid` with `from` replaced by `to` (which must occur).
Expected<Cluster> readEdited(const std::string &from, const std::string &to) {
  std::string text = kValid;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  Expected<JsonDocument> doc = JsonDocument::parse(text, "c.json");
  if (!doc)
    return doc.error();
  return readCluster(*doc);
}

std::string errorOf(const std::string &from, const std::string &to) {
  Expected<Cluster> c = readEdited(from, to);
  return c ? std::string("(no error)") : c.error().str();
}

TEST(ClusterReader, ValidDocument) {
  Expected<Cluster> c = readEdited("\"test\"", "\"test\"");
  ASSERT_TRUE(c) << c.error().str();
  EXPECT_EQ(c->name, "test");
  EXPECT_EQ(c->gpus(), 8);
  EXPECT_DOUBLE_EQ(c->gpu.memoryBytes, 16.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(c->intraNode.busBandwidth, 100e9);
  EXPECT_DOUBLE_EQ(c->interNode->latency, 10e-6);
  EXPECT_DOUBLE_EQ(c->host.nvmeBandwidth, 5e9);
  // compute_efficiency is optional.
  EXPECT_DOUBLE_EQ(c->computeEfficiency, kDefaultComputeEfficiency);
  EXPECT_TRUE(c->sources.empty());
}

TEST(ClusterReader, FigureWithSource) {
  Expected<Cluster> c = readEdited(
      "\"hbm_gb_per_s\": 1000",
      "\"hbm_gb_per_s\": {\"value\": 2039, \"source\": \"datasheet\"}");
  ASSERT_TRUE(c) << c.error().str();
  EXPECT_DOUBLE_EQ(c->gpu.hbmBandwidth, 2039e9);
  EXPECT_EQ(c->sources.at("gpu.hbm_gb_per_s"), "datasheet");
}

TEST(ClusterReader, MissingKey) {
  EXPECT_EQ(errorOf("\"hbm_gb_per_s\": 1000", "\"hbm\": 1000"),
            "c.json:9:5: error: cluster gpu: unknown key 'hbm'; expected "
            "one of 'model', 'memory_gib', 'usable_memory_gib', "
            "'runtime_reserve_gib', 'hbm_gb_per_s', 'peak_tflops'");
  EXPECT_EQ(errorOf(",\n    \"hbm_gb_per_s\": 1000", ""),
            "c.json:5:3: error: cluster gpu: missing required key "
            "'hbm_gb_per_s'");
  EXPECT_EQ(errorOf("  \"collective_latency_us\": 5,\n", ""),
            "c.json:1:1: error: cluster: missing required key "
            "'collective_latency_us'");
}

TEST(ClusterReader, WrongType) {
  EXPECT_EQ(errorOf("\"nodes\": 2", "\"nodes\": \"two\""),
            "c.json:3:3: error: cluster nodes: expected an integer from 1 "
            "to 1000000 or {\"value\": NUMBER, \"source\": TEXT}, found "
            "\"two\"");
  EXPECT_EQ(errorOf("\"nodes\": 2", "\"nodes\": 2.5"),
            "c.json:3:3: error: cluster nodes: expected an integer from 1 "
            "to 1000000, found 2.5");
  EXPECT_EQ(errorOf("\"model\": \"G\"", "\"model\": 7"),
            "c.json:6:5: error: cluster gpu.model: expected a string, found 7");
  EXPECT_EQ(
      errorOf("\"intra_node\": {\"bus_gb_per_s\": 100, \"latency_us\": 2}",
              "\"intra_node\": [100, 2]"),
      "c.json:11:3: error: cluster intra_node: expected an object, "
      "found an array");
  EXPECT_EQ(errorOf("\"memory_gib\": 64",
                    "\"memory_gib\": {\"value\": \"64\", \"source\": \"x\"}"),
            "c.json:14:27: error: cluster host.memory_gib.value: expected a "
            "number > 0, found \"64\"");
}

TEST(ClusterReader, OutOfRange) {
  EXPECT_EQ(errorOf("\"pcie_gb_per_s\": 20", "\"pcie_gb_per_s\": -20"),
            "c.json:14:54: error: cluster host.pcie_gb_per_s: expected a "
            "number > 0, found -20");
  EXPECT_EQ(errorOf("\"latency_us\": 2", "\"latency_us\": -1"),
            "c.json:11:39: error: cluster intra_node.latency_us: expected a "
            "number >= 0, found -1");
  EXPECT_EQ(
      errorOf("\"collective_latency_us\": 5",
              "\"collective_latency_us\": 5, \"compute_efficiency\": 1.5"),
      "c.json:13:31: error: cluster compute_efficiency: expected a "
      "number in (0, 1], found 1.5");
  EXPECT_EQ(errorOf("\"gpus_per_node\": 4", "\"gpus_per_node\": 0"),
            "c.json:4:3: error: cluster gpus_per_node: expected an integer "
            "from 1 to 1000000, found 0");
}

// MPI and NCCL number ranks with 32-bit ints: 1000000 x 1000000 is each
// count within its range but no job can run on it.
TEST(ClusterReader, RanksBeyondInt32) {
  std::string text = kValid;
  text.replace(text.find("\"nodes\": 2,"), 11, "\"nodes\": 1000000,");
  Expected<JsonDocument> doc = JsonDocument::parse(text, "c.json");
  ASSERT_TRUE(doc);
  Expected<Cluster> c = readCluster(*doc); // 4 x 10^6 ranks: fine.
  ASSERT_TRUE(c) << c.error().str();
  text.replace(text.find("\"gpus_per_node\": 4"), 18,
               "\"gpus_per_node\": 1000000");
  doc = JsonDocument::parse(text, "c.json");
  ASSERT_TRUE(doc);
  Expected<Cluster> huge = readCluster(*doc);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().str(),
            "c.json:4:3: error: cluster gpus_per_node: 1000000 nodes x "
            "1000000 GPUs = 1000000000000 ranks, more than MPI and NCCL "
            "address (2147483647, their ranks are 32-bit ints)");
  Expected<Cluster> more = withNodes(*c, 1000000000);
  ASSERT_FALSE(more);
  EXPECT_NE(more.error().message.find("32-bit ints"), std::string::npos)
      << more.error().message;
}

TEST(ClusterReader, UnknownKeyWithDidYouMean) {
  EXPECT_EQ(errorOf("\"hbm_gb_per_s\"", "\"hbm_gb_per_sec\""),
            "c.json:9:5: error: cluster gpu: unknown key 'hbm_gb_per_sec'; "
            "did you mean 'hbm_gb_per_s'?");
  EXPECT_EQ(errorOf("\"gpus_per_node\"", "\"gpu_per_node\""),
            "c.json:4:3: error: cluster: unknown key 'gpu_per_node'; did you "
            "mean 'gpus_per_node'?");
  EXPECT_EQ(errorOf("\"bf16\": 100", "\"bf61\": 100"),
            "c.json:8:21: error: cluster gpu.peak_tflops: unknown key "
            "'bf61'; did you mean 'bf16'?");
  EXPECT_EQ(errorOf("\"memory_gib\": 64",
                    "\"memory_gib\": {\"value\": 64, \"sorce\": \"x\"}"),
            "c.json:14:40: error: cluster host.memory_gib: unknown key "
            "'sorce'; did you mean 'source'?");
}

TEST(ClusterReader, FigureObjectNeedsValueAndSource) {
  EXPECT_EQ(errorOf("\"memory_gib\": 64", "\"memory_gib\": {\"value\": 64}"),
            "c.json:14:12: error: cluster host.memory_gib: missing required "
            "key 'source'");
  EXPECT_EQ(
      errorOf("\"memory_gib\": 64", "\"memory_gib\": {\"source\": \"x\"}"),
      "c.json:14:12: error: cluster host.memory_gib: missing required "
      "key 'value'");
}

TEST(ClusterReader, SeveralNodesNeedANetwork) {
  EXPECT_EQ(errorOf("  \"inter_node\": {\"bus_gb_per_s\": 10, \"latency_us\": "
                    "10},\n",
                    ""),
            "c.json:1:1: error: cluster: missing required key 'inter_node': "
            "the cluster has 2 nodes, so collectives cross a network");
  Expected<Cluster> oneNode = readEdited("\"nodes\": 2,\n", "\"nodes\": 1,\n");
  ASSERT_TRUE(oneNode);
}

TEST(ClusterReader, SyntaxErrorLineColumn) {
  Expected<Cluster> c = readEdited("\"nodes\": 2,", "\"nodes\": 2,,");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().file, "c.json");
  EXPECT_EQ(c.error().line, 3);
  EXPECT_EQ(c.error().column, 14);
  EXPECT_NE(c.error().message.find("invalid JSON"), std::string::npos)
      << c.error().message;
}

TEST(ClusterReader, NotAnObject) {
  Expected<JsonDocument> doc = JsonDocument::parse("[1, 2]", "c.json");
  ASSERT_TRUE(doc);
  Expected<Cluster> c = readCluster(*doc);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().str(),
            "c.json:1:1: error: cluster: expected an object, found an array");
}

} // namespace

// The GPU presets carry zerorun's rates measured on an H100 SXM5
// (scripts/preset-calibration.py): as measured on that GPU's preset; on
// another GPU the device-bound ones times the datasheets' ratio, those
// bound by the host's issue of each call as measured.
TEST(ClusterPresets, CarryZerorunsMeasuredRatesMovedToTheirGpu) {
  Expected<Cluster> h100 = clusterPreset("h100-sxm-8");
  Expected<Cluster> pcie = clusterPreset("h100-pcie-1");
  Expected<Cluster> a100 = clusterPreset("a100-80gb-8");
  ASSERT_TRUE(h100 && pcie && a100);
  const ClusterCalibration &m = h100->calibration;
  EXPECT_EQ(m.device, "cuda");
  // A few figures of bench/gpu-cluster-h100.json, to four digits.
  EXPECT_NEAR(m.attention, 106.783e12, 0.001e12);
  EXPECT_NEAR(m.matmul[1][3], 642.090e12, 0.001e12);
  EXPECT_NEAR(m.opOverhead, 18.591e-6, 0.001e-6);
  EXPECT_NEAR(m.kernelBandwidth.at("add"), 2310.56e9, 0.01e9);
  for (const Cluster *other : {&*pcie, &*a100}) {
    const ClusterCalibration &k = other->calibration;
    double compute = other->gpu.peak.bf16 / h100->gpu.peak.bf16;
    double memory = other->gpu.hbmBandwidth / h100->gpu.hbmBandwidth;
    EXPECT_LT(compute, 1) << other->name;
    EXPECT_LT(memory, 1) << other->name;
    // Device-bound: the large attention class, the 4096^3 and misaligned
    // GEMM classes, the streaming kernels and Adam.
    EXPECT_NEAR(k.attention / m.attention, compute, 1e-6) << other->name;
    EXPECT_NEAR(k.matmul[1][3] / m.matmul[1][3], compute, 1e-6);
    EXPECT_NEAR(k.matmulMisaligned[1] / m.matmulMisaligned[1], compute, 1e-6);
    EXPECT_NEAR(k.kernelBandwidth.at("layernorm") /
                    m.kernelBandwidth.at("layernorm"),
                memory, 1e-6);
    EXPECT_NEAR(k.adamBandwidth / m.adamBandwidth, memory, 1e-6);
    // f32's side-1024 class took 72 us a call on the H100: the GPU's.
    EXPECT_NEAR(k.matmul[0][2] / m.matmul[0][2],
                other->gpu.peak.f32 / h100->gpu.peak.f32, 1e-6);
    // No derived rate above the GPU's datasheet peak.
    for (int d = 0; d < 3; ++d) {
      double peak = d == 0   ? other->gpu.peak.f32
                    : d == 1 ? other->gpu.peak.bf16
                             : other->gpu.peak.f16;
      for (int c = 0; c < ClusterCalibration::kMatmulClasses; ++c)
        EXPECT_LE(k.matmul[d][c], peak) << other->name << " " << d << c;
    }
    // Bound by the host's issue (calls of 19-22 us, the overhead 18.6): the
    // bf16 GEMMs of side 64 to 1024, the small attention forward, the
    // per-op and per-call times.
    EXPECT_EQ(k.matmul[1][2], m.matmul[1][2]) << other->name;
    EXPECT_EQ(k.attentionSmall, m.attentionSmall);
    EXPECT_EQ(k.opOverhead, m.opOverhead);
    EXPECT_EQ(k.adamCall, m.adamCall);
  }
}

// The calibration section zerorun --calibrate writes: read in SI units,
// written back the same, and checked like every other key.
TEST(ClusterCalibration, ReadsWritesAndChecksTheSection) {
  Expected<Cluster> base = clusterPreset("h100-pcie-1");
  ASSERT_TRUE(base);
  json j = toJson(*base);
  j["calibration"] = {
      {"ranks", 2},
      {"threads_per_rank", 1},
      {"meeting_wait", {{"compute", 0.002}, {"memory", 0.05}}},
      {"device", "cpu"},
      {"op_overhead_us", {{"value", 4}, {"source", "measured"}}},
      {"phase_overhead_us", 80},
      {"matmul_tflops",
       {{"f32", {{"small", 0.02}, {"large", 0.05}}},
        {"bf16", {{"xlarge", 600}, {"misaligned", 120}}}}},
      {"kernel_gb_per_s", {{"gelu", 0.5}, {"default", 8}}},
      {"kernel_hot_gb_per_s", {{"gelu", 0.75}, {"default", 24}}},
      {"cache_mib", 32},
      {"cache_reuse",
       {{"source", "measured"},
        {"points",
         {{{"mib", 2}, {"gb_per_s", 30}}, {{"mib", 64}, {"gb_per_s", 10}}}}}},
      {"steadiness",
       {{"source", "probed"},
        {"points",
         {{{"s", 0.5}, {"ms", 2}},
          {{"s", 1.25}, {"ms", 3}},
          {{"s", 9}, {"ms", 2.5}}}}}},
      {"serial_kernel_elements", 32768},
      {"serial_kernel_gb_per_s", {{"gelu", 0.25}}},
      {"adam_gb_per_s", 10},
      {"clip_gb_per_s", 2},
      {"attention_tflops", 0.04},
      {"adam_call_us", 0.5},
      {"clip_per_tensor_us", 0.9},
      {"packed_gradient_us", 1.25},
      {"handoff_gb_per_s", 15},
      {"attention_backward_small_tflops", 0.03},
      {"all_gather",
       {{"latency_us", 30},
        {"bus_gb_per_s", 3},
        {"per_tensor_us", 6},
        {"contended_latency_us", 90},
        {"contended_bus_gb_per_s", 0.5},
        {"by_size",
         {{"source", "measured"},
          {"points",
           {{{"bytes", 4096}, {"us", 35}},
            {{"bytes", 1048576}, {"us", 400}}}}}},
        {"contended_by_size",
         {{"source", "measured beside"},
          {"points",
           {{{"bytes", 4096}, {"us", 95}},
            {{"bytes", 1048576}, {"us", 2100}}}}}},
        {"cold_by_size",
         {{"source", "measured from memory"},
          {"points",
           {{{"bytes", 4096}, {"us", 40}},
            {{"bytes", 1048576}, {"us", 900}}}}}}}}};
  Expected<JsonDocument> doc = JsonDocument::parse(j.dump(2), "cal.json");
  ASSERT_TRUE(doc);
  Expected<Cluster> c = readCluster(*doc);
  ASSERT_TRUE(c) << c.error().str();
  const ClusterCalibration &k = c->calibration;
  EXPECT_TRUE(k.any());
  EXPECT_EQ(k.ranks, 2);
  EXPECT_EQ(k.threadsPerRank, 1);
  EXPECT_EQ(k.meetingWait[0], 0.002);
  EXPECT_EQ(k.meetingWait[1], 0.05);
  EXPECT_EQ(k.device, "cpu");
  EXPECT_NEAR(k.opOverhead, 4e-6, 1e-18);
  EXPECT_NEAR(k.phaseOverhead, 80e-6, 1e-18);
  EXPECT_NEAR(k.matmul[0][0], 0.02e12, 1);
  EXPECT_EQ(k.matmul[0][1], 0); // Not given.
  EXPECT_NEAR(k.matmul[0][2], 0.05e12, 1);
  EXPECT_NEAR(k.matmul[1][3], 600e12, 1); // The GPU-only 4096 class.
  EXPECT_EQ(k.matmul[1][2], 0);
  // Odd rows at the largest bf16 class: a fifth of its rate; none for f32.
  EXPECT_NEAR(k.matmulMisaligned[1], 120e12, 1);
  EXPECT_NEAR(k.matmulMisalignedFactor(1), 0.2, 1e-12);
  EXPECT_EQ(k.matmulMisalignedFactor(0), 1.0);
  EXPECT_NEAR(k.kernelBandwidth.at("gelu"), 0.5e9, 1e-3);
  EXPECT_NEAR(k.kernelBandwidth.at("default"), 8e9, 1e-3);
  EXPECT_NEAR(k.kernelHotBandwidth.at("gelu"), 0.75e9, 1e-3);
  EXPECT_NEAR(k.kernelHotBandwidth.at("default"), 24e9, 1e-3);
  EXPECT_EQ(k.kernelHotBandwidth.count("add"), 0u); // Not given.
  EXPECT_EQ(k.cacheBytes, 32.0 * 1024 * 1024);
  ASSERT_EQ(k.cacheReuse.size(), 2u);
  EXPECT_EQ(k.cacheReuse[0], std::make_pair(2.0 * 1024 * 1024, 30e9));
  EXPECT_EQ(k.cacheReuse[1], std::make_pair(64.0 * 1024 * 1024, 10e9));
  EXPECT_EQ(c->sources.at("calibration.cache_reuse"), "measured");
  ASSERT_EQ(k.steadiness.size(), 3u);
  EXPECT_EQ(k.steadiness[0], std::make_pair(0.5, 2e-3));
  EXPECT_EQ(k.steadiness[1], std::make_pair(1.25, 3e-3));
  EXPECT_EQ(k.steadiness[2], std::make_pair(9.0, 2.5e-3));
  EXPECT_EQ(c->sources.at("calibration.steadiness"), "probed");
  EXPECT_EQ(k.serialKernelElements, 32768);
  EXPECT_NEAR(k.serialKernelBandwidth.at("gelu"), 0.25e9, 1e-3);
  EXPECT_NEAR(k.adamBandwidth, 10e9, 1e-3);
  EXPECT_NEAR(k.clipBandwidth, 2e9, 1e-3);
  EXPECT_NEAR(k.attention, 0.04e12, 1);
  EXPECT_NEAR(k.adamCall, 0.5e-6, 1e-18);
  EXPECT_NEAR(k.clipPerTensor, 0.9e-6, 1e-18);
  EXPECT_NEAR(k.packedGradient, 1.25e-6, 1e-18);
  EXPECT_NEAR(k.handoffBandwidth, 15e9, 1e-3);
  EXPECT_EQ(k.attentionBackward, 0); // Not given.
  EXPECT_NEAR(k.attentionBackwardSmall, 0.03e12, 1);
  EXPECT_NEAR(k.collective[0].latency, 30e-6, 1e-18);
  EXPECT_NEAR(k.collective[0].busBandwidth, 3e9, 1e-3);
  EXPECT_NEAR(k.collective[0].perTensor, 6e-6, 1e-18);
  EXPECT_EQ(k.collective[1].perTensor, 0); // Not given.
  EXPECT_NEAR(k.contended[0].latency, 90e-6, 1e-18);
  EXPECT_NEAR(k.contended[0].busBandwidth, 0.5e9, 1e-3);
  EXPECT_EQ(k.contended[1].busBandwidth, 0); // Not given.
  ASSERT_EQ(k.collective[0].bySize.size(), 2u);
  EXPECT_EQ(k.collective[0].bySize[0].first, 4096);
  EXPECT_NEAR(k.collective[0].bySize[0].second, 35e-6, 1e-18);
  EXPECT_EQ(k.collective[0].bySize[1].first, 1048576);
  EXPECT_NEAR(k.collective[0].bySize[1].second, 400e-6, 1e-18);
  EXPECT_TRUE(k.collective[1].bySize.empty()); // Not given.
  EXPECT_EQ(c->sources.at("calibration.all_gather.by_size"), "measured");
  ASSERT_EQ(k.contended[0].bySize.size(), 2u);
  EXPECT_NEAR(k.contended[0].bySize[1].second, 2100e-6, 1e-18);
  EXPECT_EQ(c->sources.at("calibration.all_gather.contended_by_size"),
            "measured beside");
  ASSERT_EQ(k.collective[0].coldBySize.size(), 2u);
  EXPECT_EQ(k.collective[0].coldBySize[1].first, 1048576);
  EXPECT_NEAR(k.collective[0].coldBySize[1].second, 900e-6, 1e-18);
  EXPECT_TRUE(k.contended[0].coldBySize.empty()); // The fit alone's.
  EXPECT_EQ(c->sources.at("calibration.all_gather.cold_by_size"),
            "measured from memory");
  EXPECT_EQ(c->sources.at("calibration.op_overhead_us"), "measured");

  // Written back, read again: the same figures.
  Expected<JsonDocument> again =
      JsonDocument::parse(toJson(*c).dump(2), "again.json");
  ASSERT_TRUE(again);
  Expected<Cluster> d = readCluster(*again);
  ASSERT_TRUE(d) << d.error().str();
  EXPECT_EQ(toJson(*d), toJson(*c));
  EXPECT_EQ(d->calibration.collective[0].bySize, k.collective[0].bySize);
  EXPECT_EQ(d->calibration.contended[0].bySize, k.contended[0].bySize);
  EXPECT_EQ(d->calibration.collective[0].coldBySize,
            k.collective[0].coldBySize);
  EXPECT_EQ(d->sources.at("calibration.all_gather.cold_by_size"),
            "measured from memory");
  EXPECT_EQ(d->sources.at("calibration.all_gather.by_size"), "measured");
  // Sizes the reader would refuse back (one point) are not written, nor
  // their source.
  Cluster onePoint = *c;
  onePoint.calibration.collective[0].bySize.resize(1);
  EXPECT_FALSE(
      toJson(onePoint)["calibration"]["all_gather"].contains("by_size"));
  EXPECT_TRUE(toJson(onePoint)["calibration"]["all_gather"].contains(
      "contended_by_size"));
  Cluster oneCold = *c;
  oneCold.calibration.collective[0].coldBySize.resize(1);
  EXPECT_FALSE(
      toJson(oneCold)["calibration"]["all_gather"].contains("cold_by_size"));
  EXPECT_TRUE(toJson(oneCold)["calibration"]["all_gather"].contains("by_size"));

  auto errorOf = readError;
  // The calibration section with `edit` applied.
  auto edited = [&](const std::function<void(json &)> &edit) {
    json wrong = j;
    edit(wrong["calibration"]);
    return wrong;
  };
  auto expectError = [&](const std::function<void(json &)> &edit,
                         const std::string &message) {
    std::string error = errorOf(edited(edit));
    EXPECT_NE(error.find(message), std::string::npos)
        << "wanted: " << message << "\ngot: " << error;
  };
  // A misspelt kernel and a negative figure are errors that name the key.
  expectError([](json &c) { c["kernel_gb_per_s"]["gelu_backwards"] = 1; },
              "cluster calibration.kernel_gb_per_s: unknown key "
              "'gelu_backwards'; did you mean 'gelu_backward'?");
  expectError([](json &c) { c["kernel_hot_gb_per_s"]["cross_entropy"] = 1; },
              "cluster calibration.kernel_hot_gb_per_s: unknown key "
              "'cross_entropy'");
  expectError([](json &c) { c["cache_mib"] = 0; },
              "cluster calibration.cache_mib: expected a number > 0, found 0");
  // The cache curve: points that ascend, at least two, each a pool's MiB
  // and a rate.
  expectError([](json &c) { c["cache_reuse"]["points"][1]["mib"] = 2; },
              "cluster calibration.cache_reuse.points.1.mib: expected more "
              "than the point before's 2 (points ascend in mib), found 2");
  expectError([](json &c) { c["cache_reuse"]["points"].erase(1); },
              "cluster calibration.cache_reuse.points: expected at least 2 "
              "points (in cache and from memory), found 1");
  expectError([](json &c) { c["cache_reuse"]["points"][0]["gb_per_s"] = 0; },
              "cluster calibration.cache_reuse.points.0.gb_per_s: expected "
              "a number > 0, found 0");
  expectError([](json &c) { c["cache_reuse"]["points"][1].erase("gb_per_s"); },
              "cluster calibration.cache_reuse.points.1: missing required key "
              "'gb_per_s'");
  expectError([](json &c) { c["cache_reuse"]["points"][0]["mib"] = "two"; },
              "cluster calibration.cache_reuse.points.0.mib: expected a "
              "number > 0, found");
  expectError([](json &c) { c["cache_reuse"]["points"][0]["rate"] = 1; },
              "unknown key 'rate'");
  expectError([](json &c) { c["cache_reuse"]["points"] = 3; },
              "cluster calibration.cache_reuse.points: expected an array of "
              "{\"mib\", \"gb_per_s\"}, found");
  expectError([](json &c) { c["cache_reuse"]["curve"] = 3; },
              "cluster calibration.cache_reuse: unknown key 'curve'");
  expectError([](json &c) { c.erase("cache_mib"); },
              "cluster calibration.cache_reuse: expected calibration.cache_mib "
              "beside it");
  // The steadiness probes: ascending in time, at least two, each a time
  // and a probe's milliseconds.
  expectError([](json &c) { c["steadiness"]["points"][2]["s"] = 1; },
              "cluster calibration.steadiness.points.2.s: expected more than "
              "the point before's 1.25 (points ascend in s), found 1");
  expectError([](json &c) { c["steadiness"]["points"] = json::array(); },
              "cluster calibration.steadiness.points: expected at least 2 "
              "points (a probe timed again and again), found 0");
  expectError([](json &c) { c["steadiness"]["points"][0]["ms"] = -1; },
              "cluster calibration.steadiness.points.0.ms: expected a number "
              "> 0, found -1");
  expectError([](json &c) { c["steadiness"]["points"][1].erase("ms"); },
              "cluster calibration.steadiness.points.1: missing required key "
              "'ms'");
  expectError([](json &c) { c["steadiness"]["probes"] = 3; },
              "cluster calibration.steadiness: unknown key 'probes'");
  // A collective's sizes: ascending, at least two, each a size in bytes and
  // its time; beside the fit, at the ranks that measured them.
  auto bySize = [](json &c) -> json & { return c["all_gather"]["by_size"]; };
  expectError([&](json &c) { bySize(c)["points"][1]["bytes"] = 4096; },
              "cluster calibration.all_gather.by_size.points.1.bytes: "
              "expected more than the point before's 4096 (points ascend in "
              "bytes), found 4096");
  expectError([&](json &c) { bySize(c)["points"].erase(0); },
              "cluster calibration.all_gather.by_size.points: expected at "
              "least 2 points (sizes between which the cost model "
              "interpolates), found 1");
  expectError([&](json &c) { bySize(c)["points"][0]["us"] = 0; },
              "cluster calibration.all_gather.by_size.points.0.us: expected a "
              "number > 0, found 0");
  expectError([&](json &c) { bySize(c)["points"][1].erase("us"); },
              "cluster calibration.all_gather.by_size.points.1: missing "
              "required key 'us'");
  expectError([&](json &c) { bySize(c)["points"][0]["bytes"] = "4K"; },
              "cluster calibration.all_gather.by_size.points.0.bytes: "
              "expected a number > 0, found");
  expectError([&](json &c) { bySize(c)["points"][0]["gb_per_s"] = 1; },
              "cluster calibration.all_gather.by_size.points.0: unknown key "
              "'gb_per_s'");
  expectError([&](json &c) { bySize(c)["points"] = json::object(); },
              "cluster calibration.all_gather.by_size.points: expected an "
              "array of {\"bytes\", \"us\"}, found");
  expectError([&](json &c) { bySize(c)["sizes"] = 1; },
              "cluster calibration.all_gather.by_size: unknown key 'sizes'");
  expectError([](json &c) { c["all_gather"].erase("bus_gb_per_s"); },
              "cluster calibration.all_gather.by_size: expected "
              "calibration.all_gather.bus_gb_per_s beside it");
  expectError([](json &c) { c.erase("ranks"); },
              "cluster calibration.all_gather.by_size: expected "
              "calibration.ranks of at least 2 beside it");
  expectError([](json &c) { c["all_gather"].erase("contended_bus_gb_per_s"); },
              "cluster calibration.all_gather.contended_by_size: expected "
              "calibration.all_gather.contended_bus_gb_per_s beside it");
  expectError(
      [](json &c) {
        c["all_gather"]["contended_by_size"]["points"][0]["us"] = -1;
      },
      "cluster calibration.all_gather.contended_by_size.points.0.us: "
      "expected a number > 0, found -1");
  expectError(
      [](json &c) { c["all_gather"]["cold_by_size"]["points"].erase(1); },
      "cluster calibration.all_gather.cold_by_size.points: expected at least "
      "2 points");
  expectError(
      [](json &c) {
        c["all_gather"]["cold_by_size"]["points"][1]["bytes"] = 1024;
      },
      "cluster calibration.all_gather.cold_by_size.points.1.bytes: expected "
      "more than the point before's 4096");
  expectError([](json &c) { c["all_gather"]["cold_by_size"]["at"] = 1; },
              "cluster calibration.all_gather.cold_by_size: unknown key 'at'");
  expectError([](json &c) { c["all_gather"]["cold_points"] = 1; },
              "cluster calibration.all_gather: unknown key 'cold_points'");
  expectError(
      [](json &c) {
        c["all_gather"].erase("by_size");
        c["all_gather"].erase("contended_by_size");
        c.erase("ranks");
      },
      "cluster calibration.all_gather.cold_by_size: expected "
      "calibration.ranks of at least 2 beside it");
  expectError([](json &c) { c["all_gather"]["bus_gb_per_s"] = -3; },
              "cluster calibration.all_gather.bus_gb_per_s: expected a "
              "number > 0, found -3");
  expectError([](json &c) { c["all_gather"]["contended_bus_gb_per_s"] = 0; },
              "cluster calibration.all_gather.contended_bus_gb_per_s: "
              "expected a number > 0");
  // The section's key `key` set to each of `values` is an error that names
  // it.
  auto refused = [&](const char *key, std::initializer_list<json> values) {
    for (const json &v : values)
      expectError([&](json &c) { c[key] = v; },
                  std::string("cluster calibration.") + key + ": expected");
  };
  // A rank's threads are a whole number, at least 1.
  refused("threads_per_rank", {json(0), json(1.5), json("one")});
  // The device is one zerorun calibrates on, and a string.
  refused("device", {json("tpu"), json(""), json(1)});
  // Fixed times are not negative; rates are positive.
  refused("adam_call_us", {json(-1), json("fast")});
  refused("clip_per_tensor_us", {json(-0.5)});
  refused("packed_gradient_us", {json(-1), json("slow")});
  refused("attention_backward_tflops", {json(0), json(-2)});
  refused("handoff_gb_per_s", {json(0), json(-1), json("slow")});
  expectError([](json &c) { c["reduce_scatter"]["per_tensor_us"] = -4; },
              "cluster calibration.reduce_scatter.per_tensor_us: expected a "
              "number >= 0, found -4");
  // A meeting wait is a share, not negative; the object has its two kinds.
  expectError([](json &c) { c["meeting_wait"]["memory"] = -0.1; },
              "cluster calibration.meeting_wait.memory: expected a number "
              ">= 0, found -0.1");
  expectError([](json &c) { c["meeting_wait"]["io"] = 0.1; },
              "cluster calibration.meeting_wait: unknown key 'io'");
  // Without one (a hand-written file), none is written back.
  json none = j;
  none["calibration"].erase("device");
  doc = JsonDocument::parse(none.dump(2), "none.json");
  ASSERT_TRUE(doc);
  Expected<Cluster> e = readCluster(*doc);
  ASSERT_TRUE(e) << e.error().str();
  EXPECT_EQ(e->calibration.device, "");
  EXPECT_FALSE(toJson(*e)["calibration"].contains("device"));
}

// A collective by its measured sizes: the points placed in bus bytes,
// their times made non-decreasing, interpolated between neighbours, from
// the fitted latency below the first, on past the last at no less than the
// fit's rate; the fit alone without two points.
TEST(ClusterCalibration, ACollectiveTakesItsMeasuredTimeBySize) {
  ClusterCalibration::CollectiveFit fit;
  fit.latency = 10e-6;
  fit.busBandwidth = 1e9;
  // Sizes in bytes; at a bus factor of 1/2 (two ranks' all-gather), bus
  // bytes 500, 0.5e6, 2e6 and 4e6. The third came out faster than the
  // second (noise): it takes the second's time.
  fit.bySize = {{1e3, 20e-6}, {1e6, 500e-6}, {4e6, 400e-6}, {8e6, 1500e-6}};
  const double half = 0.5;
  EXPECT_NEAR(fit.seconds(0, half), 10e-6, 1e-15);
  EXPECT_NEAR(fit.seconds(250, half), 15e-6, 1e-15);
  EXPECT_NEAR(fit.seconds(500, half), 20e-6, 1e-15);
  EXPECT_NEAR(fit.seconds(0.5e6, half), 500e-6, 1e-15);
  EXPECT_NEAR(fit.seconds(1e6, half), 500e-6, 1e-15);
  EXPECT_NEAR(fit.seconds(3e6, half), 1000e-6, 1e-15);
  EXPECT_NEAR(fit.seconds(4e6, half), 1500e-6, 1e-15);
  // Past the last: the last two's 0.5 ns a byte is less than the fit's 1.
  EXPECT_NEAR(fit.seconds(6e6, half), 1500e-6 + 2e6 * 1e-9, 1e-15);
  // At four ranks' factor (3/4) the same sizes are more bus bytes: the
  // last two points sit at 3e6 and 6e6 (at 1/2, 4.5e6 is past the last).
  EXPECT_NEAR(fit.seconds(4.5e6, 0.75), 1000e-6, 1e-15);
  // No factor (no ranks said), or under two points: the line.
  EXPECT_NEAR(fit.seconds(1e6, 0), 10e-6 + 1e6 / 1e9, 1e-15);
  ClusterCalibration::CollectiveFit one = fit;
  one.bySize.resize(1);
  EXPECT_NEAR(one.seconds(1e6, half), 10e-6 + 1e6 / 1e9, 1e-15);
  // A first point faster than the fitted latency starts the line at it.
  ClusterCalibration::CollectiveFit quick = fit;
  quick.bySize[0].second = 4e-6;
  EXPECT_NEAR(quick.seconds(250, half), 4e-6, 1e-15);
  // Twice as fast a link (what-if): the bandwidth, and each point's time
  // past the latency halved.
  ClusterCalibration::CollectiveFit fast = fit;
  fast.scaleBandwidth(2);
  EXPECT_EQ(fast.busBandwidth, 2e9);
  EXPECT_NEAR(fast.bySize[0].second, 15e-6, 1e-15);
  EXPECT_NEAR(fast.bySize[1].second, 255e-6, 1e-15);
  EXPECT_NEAR(fast.seconds(3e6, half), 10e-6 + 990e-6 / 2, 1e-15);

  // From memory: the cold curve in the share the cache does not hold.
  // Unknown residency (-1), or no cold curve: the in-cache curve alone.
  ClusterCalibration::CollectiveFit both = fit;
  EXPECT_FALSE(both.readsColdSizes(half));
  EXPECT_NEAR(both.seconds(3e6, half, 0.25), 1000e-6, 1e-15);
  both.coldBySize = {{1e3, 30e-6}, {1e6, 1500e-6}, {8e6, 4500e-6}};
  EXPECT_TRUE(both.readsColdSizes(half));
  EXPECT_FALSE(both.readsColdSizes(0));
  EXPECT_NEAR(both.seconds(3e6, half, -1), 1000e-6, 1e-15);
  // At 3e6 bus bytes the cold curve is between 0.5e6 (1500 us) and 4e6
  // (4500 us): 1500 + 3000 x 2.5 / 3.5.
  const double cold3 = 1500e-6 + 3000e-6 * 2.5 / 3.5;
  EXPECT_NEAR(both.seconds(3e6, half, 0), cold3, 1e-12);
  EXPECT_NEAR(both.seconds(3e6, half, 1), 1000e-6, 1e-15);
  EXPECT_NEAR(both.seconds(3e6, half, 0.25), 0.25 * 1000e-6 + 0.75 * cold3,
              1e-12);
  // Past the cold curve's last point: its own last slope (0.75 ns a byte,
  // under the fit's 1 ns: the fit's).
  EXPECT_NEAR(both.seconds(6e6, half, 0), 4500e-6 + 2e6 * 1e-9, 1e-12);
  // A cold point below the in-cache time (noise) prices no faster.
  ClusterCalibration::CollectiveFit noisy = both;
  noisy.coldBySize[1].second = 50e-6;
  EXPECT_NEAR(noisy.seconds(0.5e6, half, 0), 500e-6, 1e-15);
  // One cold point: not read.
  ClusterCalibration::CollectiveFit lone = both;
  lone.coldBySize.resize(1);
  EXPECT_NEAR(lone.seconds(3e6, half, 0), 1000e-6, 1e-15);
  // The what-if scales both curves.
  both.scaleBandwidth(2);
  EXPECT_NEAR(both.coldBySize[1].second, 10e-6 + 1490e-6 / 2, 1e-15);
}

TEST(ClusterCalibration, GemmsByThePlansShapes) {
  Expected<Cluster> base = clusterPreset("h100-pcie-1");
  ASSERT_TRUE(base);
  json j = toJson(*base);
  j["calibration"] = {
      {"device", "cuda"},
      {"matmul_shapes",
       {{"source", "measured by zerorun --calibrate --shapes p.json"},
        {"gemms",
         {{{"kind", "linear"},
           {"dtype", "bf16"},
           {"rows", 8192},
           {"in", 768},
           {"out", 50257},
           {"tflops", 129.5}},
          {{"kind", "linear_grad_weight"},
           {"dtype", "f32"},
           {"rows", 64},
           {"in", 256},
           {"out", 1024},
           {"tflops", 0.05},
           {"cold_tflops", 0.04}}}}}}};
  Expected<JsonDocument> doc = JsonDocument::parse(j.dump(2), "cal.json");
  ASSERT_TRUE(doc);
  Expected<Cluster> c = readCluster(*doc);
  ASSERT_TRUE(c) << c.error().str();
  using C = ClusterCalibration;
  const auto &shapes = c->calibration.matmulShape;
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_TRUE(c->calibration.any());
  EXPECT_NEAR(shapes.at({C::matmulIndex(DType::BF16), 0, {8192, 768, 50257}}),
              129.5e12, 1);
  EXPECT_NEAR(shapes.at({C::matmulIndex(DType::F32), 2, {64, 256, 1024}}),
              0.05e12, 1e-3);
  EXPECT_EQ(shapes.count({C::matmulIndex(DType::F32), 0, {64, 256, 1024}}),
            0u); // Another kind: not measured.
  // From memory: only where the entry says.
  const auto &cold = c->calibration.matmulShapeCold;
  ASSERT_EQ(cold.size(), 1u);
  EXPECT_NEAR(cold.at({C::matmulIndex(DType::F32), 2, {64, 256, 1024}}),
              0.04e12, 1e-3);
  EXPECT_EQ(c->sources.at("calibration.matmul_shapes"),
            "measured by zerorun --calibrate --shapes p.json");
  // Written back, read again: the same.
  Expected<JsonDocument> again =
      JsonDocument::parse(toJson(*c).dump(2), "again.json");
  ASSERT_TRUE(again);
  Expected<Cluster> d = readCluster(*again);
  ASSERT_TRUE(d) << d.error().str();
  EXPECT_EQ(d->calibration.matmulShape, shapes);
  EXPECT_EQ(d->calibration.matmulShapeCold, cold);
  EXPECT_EQ(toJson(*d), toJson(*c));

  // Each malformed entry is refused with its position and what was wanted.
  auto errorOf = [&](const std::function<void(json &)> &edit) {
    json wrong = j;
    edit(wrong["calibration"]["matmul_shapes"]);
    return readError(wrong);
  };
  auto expectError = [&](const std::function<void(json &)> &edit,
                         const std::string &message) {
    std::string error = errorOf(edit);
    EXPECT_NE(error.find(message), std::string::npos)
        << "wanted: " << message << "\ngot: " << error;
    EXPECT_EQ(error.rfind("bad.json:", 0), 0u) << error;
  };
  const std::string first = "cluster calibration.matmul_shapes.gemms.0.";
  expectError([](json &m) { m["gemms"][0]["kind"] = "matmul"; },
              first + "kind: expected one of 'linear', 'linear_grad_input', "
                      "'linear_grad_weight', found 'matmul'");
  expectError([](json &m) { m["gemms"][0]["dtype"] = "fp8"; },
              first + "dtype: expected one of 'f32', 'bf16', 'f16', found "
                      "'fp8'");
  expectError([](json &m) { m["gemms"][0]["rows"] = 0; },
              first + "rows: expected a positive integer, found 0");
  expectError([](json &m) { m["gemms"][0]["in"] = 7.5; },
              first + "in: expected a positive integer, found 7.5");
  expectError([](json &m) { m["gemms"][0]["tflops"] = -1; },
              first + "tflops: expected a number > 0, found -1");
  expectError([](json &m) { m["gemms"][0]["cold_tflops"] = 0; },
              first + "cold_tflops: expected a number > 0, found 0");
  expectError([](json &m) { m["gemms"][0]["cold_tflops"] = "fast"; },
              first + "cold_tflops: expected a number > 0, found \"fast\"");
  expectError([](json &m) { m["gemms"][0].erase("out"); },
              "cluster calibration.matmul_shapes.gemms.0: missing required "
              "key 'out'");
  expectError([](json &m) { m["gemms"][0]["cols"] = 3; }, "unknown key 'cols'");
  expectError([](json &m) { m["gemms"][1] = m["gemms"][0]; },
              "cluster calibration.matmul_shapes.gemms.1: a second linear "
              "bf16 GEMM of rows 8192, in 768, out 50257 (each shape once)");
  expectError([](json &m) { m["gemms"] = 3; },
              "cluster calibration.matmul_shapes.gemms: expected an array");
  expectError([](json &m) { m.erase("gemms"); },
              "cluster calibration.matmul_shapes: missing required key "
              "'gemms'");
  expectError([](json &m) { m["gemm"] = json::array(); },
              "cluster calibration.matmul_shapes: unknown key 'gemm'; did "
              "you mean 'gemms'?");
  EXPECT_EQ(errorOf([](json &m) { m.erase("source"); }), "");
  // None timed, with a source: written back with its empty list.
  json none = j;
  none["calibration"]["matmul_shapes"]["gemms"] = json::array();
  Expected<JsonDocument> noneDoc = JsonDocument::parse(none.dump(), "n.json");
  ASSERT_TRUE(noneDoc);
  Expected<Cluster> e = readCluster(*noneDoc);
  ASSERT_TRUE(e) << e.error().str();
  EXPECT_TRUE(e->calibration.matmulShape.empty());
  EXPECT_EQ(readError(toJson(*e)), "");
}

// The plans' flash attention by shape (zerorun --calibrate --shapes): read,
// written back the same, and each malformed entry refused at its position.
TEST(ClusterCalibration, AttentionByThePlansShapes) {
  Expected<Cluster> base = clusterPreset("h100-pcie-1");
  ASSERT_TRUE(base);
  json j = toJson(*base);
  json entry = {{"direction", "forward"},
                {"dtype", "bf16"},
                {"batch", 2},
                {"seq", 8192},
                {"heads", 32},
                {"kv_heads", 8},
                {"head_dim", 128},
                {"window", 0},
                {"tflops", 310.5}};
  json backward = entry;
  backward["direction"] = "backward";
  backward["tflops"] = 240;
  j["calibration"] = {
      {"device", "cuda"},
      {"attention_shapes",
       {{"source", "measured by zerorun --calibrate --shapes p.json"},
        {"kernels", {entry, backward}}}}};
  Expected<JsonDocument> doc = JsonDocument::parse(j.dump(2), "cal.json");
  ASSERT_TRUE(doc);
  Expected<Cluster> c = readCluster(*doc);
  ASSERT_TRUE(c) << c.error().str();
  using C = ClusterCalibration;
  AttentionGeometry g{2, 8192, 32, 8, 128, 0};
  const auto &shapes = c->calibration.attentionByShape;
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_TRUE(c->calibration.any());
  EXPECT_NEAR(shapes.at({C::matmulIndex(DType::BF16), false, g}), 310.5e12, 1);
  EXPECT_NEAR(shapes.at({C::matmulIndex(DType::BF16), true, g}), 240e12, 1);
  Expected<JsonDocument> again =
      JsonDocument::parse(toJson(*c).dump(2), "again.json");
  ASSERT_TRUE(again);
  Expected<Cluster> d = readCluster(*again);
  ASSERT_TRUE(d) << d.error().str();
  EXPECT_EQ(d->calibration.attentionByShape, shapes);
  EXPECT_EQ(toJson(*d), toJson(*c));

  auto expectError = [&](const std::function<void(json &)> &edit,
                         const std::string &message) {
    json wrong = j;
    edit(wrong["calibration"]["attention_shapes"]);
    std::string error = readError(wrong);
    EXPECT_NE(error.find(message), std::string::npos)
        << "wanted: " << message << "\ngot: " << error;
  };
  const std::string first = "cluster calibration.attention_shapes.kernels.0.";
  expectError([](json &m) { m["kernels"][0]["direction"] = "both"; },
              first + "direction: expected one of 'forward', 'backward', "
                      "found 'both'");
  expectError([](json &m) { m["kernels"][0]["kv_heads"] = 5; },
              first + "kv_heads: expected a divisor of heads 32, found 5");
  expectError([](json &m) { m["kernels"][0]["window"] = -1; },
              first + "window: expected a non-negative integer, found -1");
  expectError([](json &m) { m["kernels"][0]["window"] = 8192; },
              first + "window: expected 0 (none) or a window below seq 8192, "
                      "found 8192");
  expectError([](json &m) { m["kernels"][0]["seq"] = 0; },
              first + "seq: expected a positive integer, found 0");
  expectError([](json &m) { m["kernels"][1]["direction"] = "forward"; },
              "cluster calibration.attention_shapes.kernels.1: a second "
              "forward bf16 attention of this shape (each shape once)");
  expectError([](json &m) { m["kernels"] = 3; },
              "cluster calibration.attention_shapes.kernels: expected an "
              "array");
}
