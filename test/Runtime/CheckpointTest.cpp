//===- CheckpointTest.cpp - Checkpoints, safetensors, consolidation -------===//
//
// Hand-built plans (stage 3 on 3 ranks with padding, stage 2 with a flat
// group whose parameters straddle ranks, stage 1 and stage 0) are saved
// from known data, rank by rank in one process, and reloaded byte for byte.
// Every check a load makes has a file that fails it; crashes injected
// between the steps of each atomic write leave the previous checkpoint
// loadable; consolidation gives back the whole parameters, and
// loadSafetensorsShard undoes it. The safetensors reader has a file for
// each of its errors.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Checkpoint/Checkpoint.h"
#include "zeroc/Checkpoint/Consolidate.h"
#include "zeroc/Checkpoint/Crc32c.h"
#include "zeroc/Checkpoint/HFCheckpoint.h"
#include "zeroc/Checkpoint/Safetensors.h"

#include "zeroc/Support/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>

using namespace zeroc;
using nlohmann::json;
using zeroc::floatToBf16;
namespace fs = std::filesystem;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A fresh directory, removed with everything in it at the end of a test.
class TempDir {
public:
  TempDir() {
    std::string pattern =
        (fs::temp_directory_path() / "zeroc-ckpt-XXXXXX").string();
    char *made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path = pattern;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string &name) const {
    return (fs::path(path) / name).string();
  }
  std::string path;
};

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Flips every bit of the byte at `offset`.
void flipByte(const std::string &path, uint64_t offset) {
  std::string text = readText(path);
  ASSERT_LT(offset, text.size());
  text[offset] = static_cast<char>(~text[offset]);
  writeText(path, text);
}

PlanTensor tensor(std::string name, std::string role, std::string of,
                  DType dtype, std::vector<int64_t> shape, bool sharded,
                  int64_t worldSize) {
  PlanTensor t;
  t.name = std::move(name);
  t.role = *parseRole(role);
  t.of = std::move(of);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape)
    t.numel *= d;
  t.sharded = sharded;
  t.localNumel =
      sharded ? ParamShardLayout{t.numel, worldSize}.shardSize() : t.numel;
  t.placement = Placement::Device;
  return t;
}

Plan basePlan(int64_t worldSize, int64_t stage) {
  Plan plan;
  plan.generator = "CheckpointTest";
  plan.model = {"tiny", 0, DType::BF16, 1, 4};
  plan.worldSize = worldSize;
  plan.stage = stage;
  plan.streams = {"compute"};
  // Empty programs: a plan has both phases; checkpoints need neither.
  for (PhaseKind kind : kAllPhaseKinds) {
    PlanPhase phase;
    phase.kind = kind;
    plan.phases.push_back(std::move(phase));
  }
  return plan;
}

/// The state zero-partition declares for a parameter or a flat group.
void addState(Plan &plan, const std::string &owner, DType dtype,
              std::vector<int64_t> shape, bool sharded, bool gradSharded) {
  int64_t n = plan.worldSize;
  plan.tensors.push_back(
      tensor(owner + ".grad", "grad", owner, dtype, shape, gradSharded, n));
  if (dtype != DType::F32)
    plan.tensors.push_back(tensor(owner + ".master", "master", owner,
                                  DType::F32, shape, sharded, n));
  plan.tensors.push_back(tensor(owner + ".exp_avg", "exp_avg", owner,
                                DType::F32, shape, sharded, n));
  plan.tensors.push_back(tensor(owner + ".exp_avg_sq", "exp_avg_sq", owner,
                                DType::F32, shape, sharded, n));
}

/// Stage 3 on 3 ranks, bf16 with f32 masters. wte.weight has 20 elements
/// (7 per rank, one padding element on rank 2); ln.bias has 2 (rank 2 holds
/// only padding); ln.weight is small enough to stay replicated.
Plan stage3Plan() {
  Plan plan = basePlan(3, 3);
  struct P {
    const char *name;
    std::vector<int64_t> shape;
    bool sharded;
  };
  for (const P &p : {P{"wte.weight", {5, 4}, true}, P{"ln.bias", {2}, true},
                     P{"ln.weight", {2}, false}}) {
    plan.tensors.push_back(
        tensor(p.name, "param", "", DType::BF16, p.shape, p.sharded, 3));
    addState(plan, p.name, DType::BF16, p.shape, true, true);
  }
  return plan;
}

/// A flat group over replicated parameters, partitioned across ranks.
Plan flatPlan(
    int64_t worldSize, int64_t stage, DType dtype,
    const std::vector<std::pair<std::string, std::vector<int64_t>>> &params) {
  Plan plan = basePlan(worldSize, stage);
  PlanFlatGroup group;
  group.name = "zero.flat0";
  std::vector<int64_t> numels;
  for (const auto &[name, shape] : params) {
    plan.tensors.push_back(
        tensor(name, "param", "", dtype, shape, false, worldSize));
    group.params.push_back(name);
    numels.push_back(plan.tensors.back().numel);
  }
  FlatGroupLayout layout(numels, worldSize);
  group.offsets = layout.offsets;
  group.numel = layout.numel;
  group.padded = layout.padded;
  group.partition = layout.partitionSize();
  plan.flatGroups.push_back(group);
  addState(plan, group.name, dtype, {layout.padded}, true, stage == 2);
  return plan;
}

/// Stage 2 on 3 ranks, bf16: 9 + 5 + 3 = 17 elements padded to 18, 6 per
/// rank. "a" spans ranks 0 and 1, "b" ranks 1 and 2, and rank 2 ends with
/// one padding element.
Plan stage2Plan() {
  return flatPlan(3, 2, DType::BF16, {{"a", {3, 3}}, {"b", {5}}, {"c", {3}}});
}

/// Stage 1 on 4 ranks, f32 (no master): 7 + 10 padded to 24.
Plan stage1Plan() {
  return flatPlan(4, 1, DType::F32, {{"x", {7}}, {"y", {2, 5}}});
}

/// Stage 0 on 2 ranks, f32: everything replicated.
Plan stage0Plan() {
  Plan plan = basePlan(2, 0);
  for (auto [name, shape] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"w", {4, 3}},
                                                                 {"b", {3}}}) {
    plan.tensors.push_back(
        tensor(name, "param", "", DType::F32, shape, false, 2));
    addState(plan, name, DType::F32, shape, false, false);
  }
  return plan;
}

/// Whole f32 values for every parameter. Their low mantissa bits are set,
/// so that a bf16 copy differs from the f32 master.
std::map<std::string, std::vector<float>> wholeParams(const Plan &plan,
                                                      uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::map<std::string, std::vector<float>> out;
  for (const PlanTensor &t : plan.tensors)
    if (t.role == TensorRole::Param) {
      std::vector<float> &v = out[t.name];
      for (int64_t i = 0; i < t.numel; ++i)
        v.push_back(dist(rng) + 0x1p-12f);
    }
  return out;
}

std::vector<std::byte> encode(const std::vector<float> &values, DType dtype) {
  std::vector<std::byte> out(values.size() *
                             static_cast<size_t>(bytesPerElement(dtype)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      uint16_t h =
          dtype == DType::BF16 ? floatToBf16(values[i]) : floatToF16(values[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

/// Rank `rank`'s part of a whole tensor (bytes in its dtype), padding zero.
std::vector<std::byte> localPart(const std::vector<std::byte> &whole,
                                 const PlanTensor &t, int64_t rank,
                                 int64_t worldSize) {
  size_t size = static_cast<size_t>(bytesPerElement(t.dtype));
  std::vector<std::byte> out(static_cast<size_t>(t.localNumel) * size);
  ElementRange owned = t.sharded
                           ? ParamShardLayout{t.numel, worldSize}.ownedBy(rank)
                           : ElementRange{0, t.numel};
  if (!owned.empty())
    std::memcpy(out.data(), whole.data() + owned.begin * size,
                static_cast<size_t>(owned.size()) * size);
  return out;
}

/// Every rank's local bytes of every tensor: parameters in their dtype from
/// the whole values, masters those values in f32, flat-group state over
/// the group's flat buffer, everything else random.
std::vector<std::vector<std::vector<std::byte>>>
rankData(const Plan &plan, const std::map<std::string, std::vector<float>> &w,
         uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<std::vector<std::byte>>> out(
      static_cast<size_t>(plan.worldSize));
  for (const PlanTensor &t : plan.tensors) {
    std::vector<float> whole;
    if (t.role == TensorRole::Param) {
      whole = w.at(t.name);
    } else if (t.role == TensorRole::Master && w.count(t.of)) {
      whole = w.at(t.of);
    } else if (t.role == TensorRole::Master) {
      for (const PlanFlatGroup &g : plan.flatGroups)
        if (g.name == t.of) {
          whole.assign(static_cast<size_t>(g.padded), 0.0f);
          for (size_t k = 0; k < g.params.size(); ++k)
            std::copy(w.at(g.params[k]).begin(), w.at(g.params[k]).end(),
                      whole.begin() + g.offsets[k]);
        }
    } else {
      for (int64_t i = 0; i < t.numel; ++i)
        whole.push_back(dist(rng));
    }
    std::vector<std::byte> bytes = encode(whole, t.dtype);
    for (int64_t r = 0; r < plan.worldSize; ++r)
      out[static_cast<size_t>(r)].push_back(
          localPart(bytes, t, r, plan.worldSize));
  }
  return out;
}

std::vector<ConstBytes> views(const std::vector<std::vector<std::byte>> &v) {
  std::vector<ConstBytes> out;
  for (const auto &b : v)
    out.push_back(constBytesOf(b));
  return out;
}

/// Buffers the sizes of `like`, every byte `fill`: a load must either fill
/// them or leave them so.
std::vector<std::vector<std::byte>>
filledLike(const std::vector<std::vector<std::byte>> &like, std::byte fill) {
  std::vector<std::vector<std::byte>> out;
  for (const auto &t : like)
    out.emplace_back(t.size(), fill);
  return out;
}

std::vector<MutableBytes>
mutableViews(std::vector<std::vector<std::byte>> &buffers) {
  std::vector<MutableBytes> out;
  for (auto &b : buffers)
    out.push_back(mutableBytesOf(b));
  return out;
}

TrainingState stateAt(int64_t step) {
  TrainingState s;
  s.step = step;
  s.lossScale = 32768.0;
  s.lossScaleGoodSteps = 17;
  s.hysteresisLeft = 2;
  s.skippedSteps = 3;
  s.dataPosition = (uint64_t(1) << 63) + 12345; // beyond int64
  s.extra = {{"rng", "mt19937:42"}, {"lr_step", step}};
  return s;
}

/// Saves every rank's data and finalizes: the whole protocol in one
/// process.
::testing::AssertionResult
saveAll(const std::string &dir, const std::string &tag, const Plan &plan,
        const std::vector<std::vector<std::vector<std::byte>>> &data,
        const TrainingState &state, const WriteHooks &hooks = {}) {
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    auto saved = saveCheckpoint(
        dir, tag, plan, r, views(data[static_cast<size_t>(r)]), state, hooks);
    if (!saved)
      return ::testing::AssertionFailure() << saved.error().str();
  }
  auto done = finalizeCheckpoint(dir, tag, plan, state, hooks);
  if (!done)
    return ::testing::AssertionFailure() << done.error().str();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult
loadsAs(const std::string &dir, const std::string &tagOrLatest,
        const Plan &plan,
        const std::vector<std::vector<std::vector<std::byte>>> &data,
        int64_t step) {
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    auto loaded = loadCheckpoint(dir, tagOrLatest, plan, r);
    if (!loaded)
      return ::testing::AssertionFailure() << loaded.error().str();
    if (loaded->tensors != data[static_cast<size_t>(r)])
      return ::testing::AssertionFailure() << "rank " << r << " differs";
    if (loaded->state.step != step)
      return ::testing::AssertionFailure()
             << "step " << loaded->state.step << ", expected " << step;
  }
  return ::testing::AssertionSuccess();
}

std::string errorOf(const Diagnostic &d) { return d.str(); }

#define EXPECT_ERROR(expr, substring)                                          \
  do {                                                                         \
    auto result_ = (expr);                                                     \
    ASSERT_FALSE(result_) << "expected an error containing: " << (substring);  \
    EXPECT_NE(errorOf(result_.error()).find(substring), std::string::npos)     \
        << errorOf(result_.error());                                           \
  } while (0)

//===----------------------------------------------------------------------===//
// CRC-32C
//===----------------------------------------------------------------------===//

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32cPortable(0, "123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  EXPECT_EQ(crc32c(0, zeros.data(), 32), 0x8A9136AAu); // RFC 3720 B.4
  EXPECT_EQ(crc32c(0, ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(0, "", 0), 0u);
  EXPECT_EQ(crc32cHex(0xE3069283u), "0xe3069283");
}

TEST(Crc32c, ChainsAndMatchesPortableAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(1100);
  for (auto &b : data)
    b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; ++start)
    for (size_t n = 0; n + start <= data.size(); n += 37) {
      uint32_t whole = crc32c(0, data.data() + start, n);
      EXPECT_EQ(whole, crc32cPortable(0, data.data() + start, n));
      size_t half = n / 3;
      EXPECT_EQ(whole, crc32c(crc32c(0, data.data() + start, half),
                              data.data() + start + half, n - half));
    }
}

//===----------------------------------------------------------------------===//
// Save and load
//===----------------------------------------------------------------------===//

TEST(Checkpoint, HandBuiltPlansAreValid) {
  for (const Plan &plan :
       {stage3Plan(), stage2Plan(), stage1Plan(), stage0Plan()}) {
    auto doc = JsonDocument::parse(toJson(plan).dump(), "plan.json");
    ASSERT_TRUE(doc);
    auto read = readPlan(*doc);
    EXPECT_TRUE(read) << read.error().str();
  }
}

std::string stageName(const ::testing::TestParamInfo<int> &info) {
  return "Stage" + std::to_string(info.param);
}

class RoundTrip : public ::testing::TestWithParam<int> {};

Plan planFor(int which) {
  switch (which) {
  case 3:
    return stage3Plan();
  case 2:
    return stage2Plan();
  case 1:
    return stage1Plan();
  default:
    return stage0Plan();
  }
}

TEST_P(RoundTrip, EveryRankLoadsWhatItSaved) {
  TempDir dir;
  Plan plan = planFor(GetParam());
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  ASSERT_TRUE(saveAll(dir.path, "step10", plan, data, stateAt(10)));
  EXPECT_TRUE(loadsAs(dir.path, "latest", plan, data, 10));
  EXPECT_TRUE(loadsAs(dir.path, "step10", plan, data, 10));
  EXPECT_EQ(readText(dir / "latest"), "step10\n");

  auto loaded = loadCheckpoint(dir.path, "latest", plan, 0);
  ASSERT_TRUE(loaded);
  TrainingState want = stateAt(10);
  EXPECT_EQ(loaded->tag, "step10");
  EXPECT_EQ(loaded->state.lossScale, want.lossScale);
  EXPECT_EQ(loaded->state.lossScaleGoodSteps, want.lossScaleGoodSteps);
  EXPECT_EQ(loaded->state.hysteresisLeft, want.hysteresisLeft);
  EXPECT_EQ(loaded->state.skippedSteps, want.skippedSteps);
  EXPECT_EQ(loaded->state.dataPosition, want.dataPosition);
  EXPECT_EQ(loaded->state.extra, want.extra);
}

INSTANTIATE_TEST_SUITE_P(Stages, RoundTrip, ::testing::Values(3, 2, 1, 0),
                         stageName);

TEST(Checkpoint, ShardFilesAndManifestFollowTheFormat) {
  TempDir dir;
  Plan plan = stage3Plan();
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  ASSERT_TRUE(saveAll(dir.path, "s1", plan, data, stateAt(1)));

  // Every rank's file: a 64-byte header, tensors at 64-byte boundaries.
  uint64_t end = 64;
  for (const PlanTensor &t : plan.tensors)
    end = (end + 63) / 64 * 64 +
          static_cast<uint64_t>(t.localNumel * bytesPerElement(t.dtype));
  for (int r = 0; r < 3; ++r) {
    std::string shard = dir / ("s1/rank" + std::to_string(r) + ".shard");
    EXPECT_EQ(fs::file_size(shard), end);
    EXPECT_EQ(readText(shard).substr(0, 8), "ZEROCSHD");
  }
  EXPECT_FALSE(fs::exists(dir / "s1/rank0.shard.tmp"));

  auto m = readCheckpointManifest(dir.path, "s1");
  ASSERT_TRUE(m) << m.error().str();
  EXPECT_EQ(m->worldSize, 3);
  EXPECT_EQ(m->stage, 3);
  EXPECT_EQ(m->model, "tiny");
  ASSERT_EQ(m->tensors.size(), plan.tensors.size());
  EXPECT_EQ(m->tensors[0].tensor.name, "wte.weight");
  EXPECT_EQ(m->tensors[0].offset, 64u);
  EXPECT_EQ(m->tensors[0].bytes, 14u);
  EXPECT_EQ(m->tensors[1].offset, 128u);
  ASSERT_EQ(m->shards.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    std::string text =
        readText(dir / ("s1/rank" + std::to_string(r) + ".shard"));
    EXPECT_EQ(m->shards[r].bytes, end);
    EXPECT_EQ(m->shards[r].crc32c,
              crc32c(0, text.data() + 64, text.size() - 64));
  }
  json j = json::parse(readText(dir / "s1/manifest.json"));
  EXPECT_EQ(j["format"], "zeroc-checkpoint");
  EXPECT_EQ(j["version"], 2);
  EXPECT_TRUE(j["hf_config"].is_null()); // a hand-built plan
  EXPECT_EQ(j["shards"][1]["file"], "rank1.shard");
  EXPECT_EQ(j["shards"][1]["crc32c"], crc32cHex(m->shards[1].crc32c));
  EXPECT_EQ(j["tensors"][1]["of"], "wte.weight");
  EXPECT_EQ(j["training_state"]["data_position"], (uint64_t(1) << 63) + 12345);
}

TEST(Checkpoint, SaveChecksItsArguments) {
  TempDir dir;
  Plan plan = stage3Plan();
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  EXPECT_ERROR(
      saveCheckpoint(dir.path, "s", plan, 3, views(data[0]), stateAt(1)),
      "rank 3 is out of range for a plan of world size 3");
  EXPECT_ERROR(
      saveCheckpoint(dir.path, "../x", plan, 0, views(data[0]), stateAt(1)),
      "invalid checkpoint tag \"../x\"");
  EXPECT_ERROR(
      saveCheckpoint(dir.path, "latest", plan, 0, views(data[0]), stateAt(1)),
      "invalid checkpoint tag \"latest\"");
  auto short1 = views(data[0]);
  short1.pop_back();
  EXPECT_ERROR(saveCheckpoint(dir.path, "s", plan, 0, short1, stateAt(1)),
               "saveCheckpoint: got 14 buffers, the plan has 15 tensors");
  auto wrong = views(data[0]);
  wrong[0].size = 12;
  EXPECT_ERROR(saveCheckpoint(dir.path, "s", plan, 0, wrong, stateAt(1)),
               "saveCheckpoint: the buffer of 'wte.weight' (tensor 0) has 12 "
               "bytes, expected 14 (local_numel 7 x 2)");
  TrainingState nan = stateAt(1);
  nan.lossScale = NAN;
  EXPECT_ERROR(finalizeCheckpoint(dir.path, "s", plan, nan),
               "loss scale must be a finite number > 0");
}

TEST(Checkpoint, LoadIntoBuffersCommitsOnlyAfterVerifying) {
  TempDir dir;
  Plan plan = stage2Plan();
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  ASSERT_TRUE(saveAll(dir.path, "s", plan, data, stateAt(4)));

  auto buffers = filledLike(data[1], std::byte{0xAB});
  std::vector<MutableBytes> out = mutableViews(buffers);

  // Corrupt the last byte of rank 1's file: every tensor before it would
  // read fine, yet none may be written.
  std::string shard = dir / "s/rank1.shard";
  flipByte(shard, fs::file_size(shard) - 1);
  EXPECT_ERROR(loadCheckpointInto(dir.path, "latest", plan, 1, out),
               "checksum mismatch");
  for (const auto &b : buffers)
    for (std::byte x : b)
      ASSERT_EQ(x, std::byte{0xAB});

  flipByte(shard, fs::file_size(shard) - 1);
  auto state = loadCheckpointInto(dir.path, "latest", plan, 1, out);
  ASSERT_TRUE(state) << state.error().str();
  EXPECT_EQ(state->step, 4);
  EXPECT_EQ(buffers, data[1]);

  out.pop_back();
  EXPECT_ERROR(loadCheckpointInto(dir.path, "latest", plan, 1, out),
               "loadCheckpointInto: got 6 buffers, the plan has 7 tensors");
}

TEST(Checkpoint, FlatPartitionHoldsTheStraddlingParameters) {
  // Rank 1 of stage 2 owns flat elements [6, 12): a[6..9) then b[0..3).
  TempDir dir;
  Plan plan = stage2Plan();
  auto w = wholeParams(plan, 5);
  auto data = rankData(plan, w, 6);
  ASSERT_TRUE(saveAll(dir.path, "s", plan, data, stateAt(1)));
  auto loaded = loadCheckpoint(dir.path, "s", plan, 1);
  ASSERT_TRUE(loaded);
  size_t master = 0;
  while (plan.tensors[master].name != "zero.flat0.master")
    ++master;
  std::vector<float> values(6);
  std::memcpy(values.data(), loaded->tensors[master].data(), 24);
  EXPECT_EQ(values, (std::vector<float>{w["a"][6], w["a"][7], w["a"][8],
                                        w["b"][0], w["b"][1], w["b"][2]}));
}

//===----------------------------------------------------------------------===//
// What loading detects
//===----------------------------------------------------------------------===//

class Corruption : public ::testing::Test {
protected:
  void SetUp() override {
    plan = stage3Plan();
    data = rankData(plan, wholeParams(plan, 1), 2);
    ASSERT_TRUE(saveAll(dir.path, "s", plan, data, stateAt(3)));
  }
  std::string shard(int r) {
    return dir / ("s/rank" + std::to_string(r) + ".shard");
  }
  TempDir dir;
  Plan plan;
  std::vector<std::vector<std::vector<std::byte>>> data;
};

TEST_F(Corruption, ChecksumMismatchNamesTheFileAndBothChecksums) {
  auto m = readCheckpointManifest(dir.path, "s");
  ASSERT_TRUE(m);
  std::string text = readText(shard(1));
  text[200] = static_cast<char>(text[200] ^ 1);
  uint32_t found = crc32c(0, text.data() + 64, text.size() - 64);
  writeText(shard(1), text);
  EXPECT_ERROR(loadCheckpoint(dir.path, "latest", plan, 1),
               shard(1) +
                   ": error: checksum mismatch: the manifest records "
                   "CRC-32C " +
                   crc32cHex(m->shards[1].crc32c) +
                   ", the file's data sums to " + crc32cHex(found) +
                   ": the file is corrupt");
  // The other ranks are intact.
  EXPECT_TRUE(loadCheckpoint(dir.path, "latest", plan, 0));
  EXPECT_TRUE(loadCheckpoint(dir.path, "latest", plan, 2));
}

TEST_F(Corruption, PaddingBetweenTensorsIsChecksummedToo) {
  // Bytes 78..127 of a file lie between wte.weight (14 bytes at 64) and
  // the next tensor at 128.
  flipByte(shard(0), 100);
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 0), "checksum mismatch");
}

TEST_F(Corruption, TruncatedFile) {
  uint64_t size = fs::file_size(shard(2));
  fs::resize_file(shard(2), size - 5);
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 2),
               shard(2) + ": error: truncated: the manifest records " +
                   std::to_string(size) + " bytes, the file has " +
                   std::to_string(size - 5));
  fs::resize_file(shard(2), 10);
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 2), "truncated");
}

TEST_F(Corruption, CorruptHeader) {
  flipByte(shard(0), 20); // in the rank field
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 0),
               "the shard header is corrupt");
  flipByte(shard(0), 20);
  flipByte(shard(0), 2);
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 0),
               "not a zeroc checkpoint shard file");
}

TEST_F(Corruption, SwappedShardFiles) {
  fs::rename(shard(0), dir / "tmp");
  fs::rename(shard(1), shard(0));
  fs::rename(dir / "tmp", shard(1));
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 0),
               "holds rank 1 of 3, expected rank 0 of 3");
}

TEST_F(Corruption, MissingShardFile) {
  fs::remove(shard(2));
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 2),
               shard(2) + ": error: cannot open for reading");
}

TEST_F(Corruption, WorldSizeMismatch) {
  Plan other = stage3Plan();
  other.worldSize = 2;
  for (PlanTensor &t : other.tensors)
    t.localNumel = t.sharded ? (t.numel + 1) / 2 : t.numel;
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", other, 0),
               "checkpoint 's' does not fit the plan: it was saved on 3 "
               "ranks, the plan runs on 2");
}

TEST_F(Corruption, StageMismatch) {
  Plan other = plan;
  other.stage = 2;
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", other, 0),
               "saved by a ZeRO stage 3 plan, the plan is stage 2");
}

TEST_F(Corruption, TensorListMismatchNamesEachDifference) {
  Plan other = plan;
  other.tensors[0].name = "wte.renamed";
  other.tensors[3].dtype = DType::F16;
  other.tensors.pop_back();
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", other, 0),
               "the tensor lists differ: the plan's 'wte.renamed' not in the "
               "checkpoint; the checkpoint's 'wte.weight', "
               "'ln.weight.exp_avg_sq' not in the plan; 'wte.weight.exp_avg' "
               "is exp_avg f32 [5, 4] sharded of 'wte.weight' in the "
               "checkpoint, exp_avg f16 [5, 4] sharded of 'wte.weight' in "
               "the plan");
}

// A table padded otherwise (valid_rows) is another layout of the same
// shape: resuming it would train the padding or drop real rows.
TEST_F(Corruption, PaddedRowsMismatch) {
  Plan other = plan;
  other.tensors[0].validRows = 4;
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", other, 0),
               "'wte.weight' is param bf16 [5, 4] sharded in the checkpoint, "
               "param bf16 [5, 4] sharded with 4 valid rows in the plan");
}

TEST_F(Corruption, ManifestSyntaxErrorHasLineAndColumn) {
  std::string path = dir / "s/manifest.json";
  std::string text = readText(path);
  writeText(path, text.substr(0, text.size() / 2));
  auto loaded = loadCheckpoint(dir.path, "s", plan, 0);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().file, path);
  EXPECT_GT(loaded.error().line, 1);
  EXPECT_GT(loaded.error().column, 0);
  EXPECT_NE(loaded.error().message.find("invalid JSON"), std::string::npos);
}

TEST_F(Corruption, ManifestFieldErrorsPointAtTheField) {
  std::string path = dir / "s/manifest.json";
  json j = json::parse(readText(path));
  auto check = [&](const std::function<void(json &)> &edit,
                   const std::string &message) {
    json copy = j;
    edit(copy);
    writeText(path, copy.dump(1));
    auto loaded = loadCheckpoint(dir.path, "s", plan, 0);
    ASSERT_FALSE(loaded) << message;
    EXPECT_EQ(loaded.error().file, path);
    EXPECT_GT(loaded.error().line, 0) << loaded.error().str();
    EXPECT_NE(loaded.error().message.find(message), std::string::npos)
        << loaded.error().str();
  };
  check([](json &m) { m["format"] = "other"; },
        "not a zeroc checkpoint manifest");
  check([](json &m) { m["version"] = 9; },
        "checkpoint format version 9 is not supported");
  check([](json &m) { m["world_size"] = "3"; },
        "manifest world_size: expected an integer >= 1, found \"3\"");
  check([](json &m) { m.erase("training_state"); },
        "manifest (root): missing required key 'training_state'");
  check([](json &m) { m["hf_config"] = "gpt2"; },
        "manifest hf_config: expected a Hugging Face config object or null");
  check([](json &m) { m.erase("hf_config"); },
        "manifest (root): missing required key 'hf_config'");
  check([](json &m) { m["tensors"][2]["dtype"] = "f64"; },
        "manifest tensors[2].dtype: unknown dtype \"f64\"");
  check([](json &m) { m["tensors"][0]["local_numel"] = 20; },
        "manifest tensors[0].local_numel: expected 7 for a sharded tensor "
        "of 20 elements over 3 ranks, found 20");
  check(
      [](json &m) {
        m["tensors"][0]["shape"] = json::array({3, 5});
        m["tensors"][0]["numel"] = 12;
      },
      "manifest tensors[0].numel: numel 12 is not the product of the shape "
      "[3, 5]");
  // (2^62 + 3) * 4 wraps to 12 in 64 bits: refused, not taken as a match.
  check(
      [](json &m) {
        m["tensors"][0]["shape"] = json::array({4611686018427387907LL, 4});
        m["tensors"][0]["numel"] = 12;
      },
      "manifest tensors[0].numel: numel 12 is not the product of the shape");
  check([](json &m) { m["tensors"][1]["offset"] = 96; },
        "manifest tensors[1].offset: expected 128");
  check([](json &m) { m["shards"][1]["file"] = "../../etc/passwd"; },
        "manifest shards[1].file: expected \"rank1.shard\"");
  check([](json &m) { m["shards"][2]["crc32c"] = "12"; },
        "manifest shards[2].crc32c: expected \"0x\" and 8 hex digits");
  check([](json &m) { m["shards"].erase(2); },
        "manifest shards: expected one shard per rank (3), found 2");
  check([](json &m) { m["training_state"]["loss_scale"] = -1.0; },
        "manifest training_state.loss_scale: expected a finite number > 0");
  check([](json &m) { m["tensors"][1]["of"] = "nobody"; },
        "manifest tensors[1].of: unknown owner \"nobody\"");
  // Expert parallelism: groups that partition the ranks, and expert state
  // only with it.
  check([](json &m) { m["expert_parallel_size"] = 2; },
        "manifest expert_parallel_size: expected a divisor of world_size 3, "
        "found 2");
  check([](json &m) { m["tensors"][0]["expert"] = true; },
        "manifest tensors[0].expert: expert state without expert "
        "parallelism");
}

// Manifests written before expert parallelism have no expert_parallel_size:
// read as 1.
TEST_F(Corruption, ManifestWithoutExpertParallelSizeIsOne) {
  std::string path = dir / "s/manifest.json";
  json j = json::parse(readText(path));
  ASSERT_EQ(j["expert_parallel_size"], 1);
  j.erase("expert_parallel_size");
  writeText(path, j.dump(1));
  EXPECT_TRUE(loadCheckpoint(dir.path, "s", plan, 0));
}

// A checkpoint of expert_parallel_size 1 does not resume a plan of 3: its
// expert tensors would hold other experts (consolidate it, then
// --init-from).
TEST_F(Corruption, ExpertParallelSizeMismatch) {
  Plan other = plan;
  other.expertParallelSize = 3;
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", other, 0),
               "checkpoint 's' does not fit the plan: it was saved with "
               "expert_parallel_size 1, the plan's is 3");
}

TEST_F(Corruption, ManifestCrcThatDisagreesWithTheFile) {
  std::string path = dir / "s/manifest.json";
  json j = json::parse(readText(path));
  j["shards"][0]["crc32c"] = "0x00000000";
  writeText(path, j.dump(1));
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 0),
               "written by a different save than the manifest describes");
}

TEST(Checkpoint, NoCheckpointAndIncompleteCheckpoint) {
  TempDir dir;
  Plan plan = stage0Plan();
  EXPECT_ERROR(loadCheckpoint(dir.path, "latest", plan, 0),
               "latest: error: no checkpoint to load");
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  ASSERT_TRUE(
      saveCheckpoint(dir.path, "s", plan, 0, views(data[0]), stateAt(1)));
  EXPECT_ERROR(loadCheckpoint(dir.path, "s", plan, 0),
               "checkpoint 's' is incomplete or missing: it has no manifest");
  EXPECT_ERROR(finalizeCheckpoint(dir.path, "s", plan, stateAt(1)),
               "rank 1's shard is missing: every rank must finish "
               "saveCheckpoint before rank 0 finalizes");
  writeText(dir / "latest", "../escape\n");
  EXPECT_ERROR(loadCheckpoint(dir.path, "latest", plan, 0),
               "latest: error: invalid checkpoint tag \"../escape\"");
}

//===----------------------------------------------------------------------===//
// Atomicity
//===----------------------------------------------------------------------===//

/// A crash at every step of every file of a second save leaves the first
/// checkpoint the latest, loadable and consolidatable; the second save,
/// retried, then succeeds.
TEST(Atomicity, CrashAtAnyStepLeavesThePreviousCheckpoint) {
  Plan plan = stage3Plan();
  auto old = rankData(plan, wholeParams(plan, 1), 2);
  auto next = rankData(plan, wholeParams(plan, 3), 4);
  for (const std::string file :
       {"step2/rank1.shard", "step2/manifest.json", "latest"})
    for (WriteStep step : {WriteStep::TempPartlyWritten, WriteStep::TempWritten,
                           WriteStep::TempSynced, WriteStep::Renamed}) {
      SCOPED_TRACE(file + " at " + writeStepName(step));
      TempDir dir;
      ASSERT_TRUE(saveAll(dir.path, "step1", plan, old, stateAt(1)));
      WriteHooks crash;
      std::string target = dir / file;
      crash.crashAt = [&](const std::string &path, WriteStep at) {
        return path == target && at == step;
      };
      auto failed = saveAll(dir.path, "step2", plan, next, stateAt(2), crash);
      EXPECT_FALSE(failed);
      EXPECT_NE(std::string(failed.message()).find("injected crash"),
                std::string::npos)
          << failed.message();

      bool latestMoved = file == "latest" && step == WriteStep::Renamed;
      if (latestMoved) {
        // The rename is the commit point: past it, the new checkpoint is
        // the latest and it is complete.
        EXPECT_TRUE(loadsAs(dir.path, "latest", plan, next, 2));
      } else {
        EXPECT_EQ(readText(dir / "latest"), "step1\n");
        EXPECT_TRUE(loadsAs(dir.path, "latest", plan, old, 1));
        auto consolidated = consolidateCheckpoint(dir.path, "latest",
                                                  dir / "model.safetensors");
        EXPECT_TRUE(consolidated) << consolidated.error().str();
        if (consolidated) {
          EXPECT_EQ(consolidated->tag, "step1");
        }
      }
      // The retry overwrites whatever the crash left (unless step2 is
      // already the latest, which is never overwritten).
      EXPECT_EQ(bool(saveAll(dir.path, "step2", plan, next, stateAt(2))),
                !latestMoved);
      EXPECT_TRUE(loadsAs(dir.path, "latest", plan, next, 2));
      EXPECT_TRUE(loadsAs(dir.path, "step1", plan, old, 1));
    }
}

TEST(Atomicity, FinalizeRefusesAStaleShard) {
  // Rank 1 crashed while saving step 2 over an older step-2 attempt that
  // was saved at another step: the file it left is not this save's.
  TempDir dir;
  Plan plan = stage0Plan();
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  for (int64_t r = 0; r < 2; ++r)
    ASSERT_TRUE(saveCheckpoint(dir.path, "s", plan, r, views(data[r]),
                               stateAt(r == 0 ? 2 : 1)));
  EXPECT_ERROR(finalizeCheckpoint(dir.path, "s", plan, stateAt(2)),
               "rank1.shard: error: was saved at step 1, the checkpoint "
               "being finalized is step 2");
  EXPECT_FALSE(fs::exists(dir / "latest"));
}

TEST(Atomicity, TheLatestCheckpointIsNeverOverwritten) {
  TempDir dir;
  Plan plan = stage0Plan();
  auto a = rankData(plan, wholeParams(plan, 1), 2);
  auto b = rankData(plan, wholeParams(plan, 3), 4);
  ASSERT_TRUE(saveAll(dir.path, "one", plan, a, stateAt(1)));
  EXPECT_ERROR(
      saveCheckpoint(dir.path, "one", plan, 0, views(b[0]), stateAt(2)),
      "is the latest complete checkpoint; overwriting it would "
      "leave none if this save failed");
  // An older tag may be replaced: its stale manifest goes first.
  ASSERT_TRUE(saveAll(dir.path, "two", plan, b, stateAt(2)));
  ASSERT_TRUE(
      saveCheckpoint(dir.path, "one", plan, 0, views(b[0]), stateAt(3)));
  EXPECT_FALSE(fs::exists(dir / "one/manifest.json"));
  EXPECT_TRUE(loadsAs(dir.path, "latest", plan, b, 2));
}

//===----------------------------------------------------------------------===//
// Consolidation
//===----------------------------------------------------------------------===//

/// The consolidated file's tensor, as f32 values.
std::vector<float> f32Tensor(const SafetensorsFile &file,
                             const std::string &name) {
  const SafetensorsEntry *e = file.find(name);
  EXPECT_NE(e, nullptr) << name;
  if (!e)
    return {};
  EXPECT_EQ(e->dtype, DType::F32);
  auto bytes = file.read(*e);
  EXPECT_TRUE(bytes);
  std::vector<float> out(static_cast<size_t>(e->numel));
  std::memcpy(out.data(), bytes->data(), bytes->size());
  return out;
}

class Consolidation : public ::testing::TestWithParam<int> {};

TEST_P(Consolidation, GivesBackTheWholeParameters) {
  TempDir dir;
  Plan plan = planFor(GetParam());
  auto w = wholeParams(plan, 11);
  auto data = rankData(plan, w, 12);
  ASSERT_TRUE(saveAll(dir.path, "final", plan, data, stateAt(7)));
  auto result =
      consolidateCheckpoint(dir.path, "latest", dir / "model.safetensors");
  ASSERT_TRUE(result) << result.error().str();
  EXPECT_EQ(result->tag, "final");
  EXPECT_EQ(result->step, 7);

  auto file = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_TRUE(file) << file.error().str();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("zeroc_tag"), "final");
  EXPECT_EQ(file->metadata().at("zeroc_step"), "7");
  size_t params = 0;
  for (const PlanTensor &t : plan.tensors) {
    if (t.role != TensorRole::Param)
      continue;
    ++params;
    SCOPED_TRACE(t.name);
    ASSERT_NE(file->find(t.name), nullptr);
    EXPECT_EQ(file->find(t.name)->shape, t.shape);
    // f32 parameters byte for byte; 16-bit ones from their f32 masters,
    // which differ from the rounded parameter.
    std::vector<float> values = f32Tensor(*file, t.name);
    EXPECT_EQ(values, w[t.name]);
    if (t.dtype == DType::BF16) {
      std::vector<float> widened;
      for (float x : w[t.name])
        widened.push_back(bf16ToFloat(floatToBf16(x)));
      EXPECT_NE(values, widened);
    }
  }
  EXPECT_EQ(file->tensors().size(), params);
  EXPECT_EQ(result->parameters.size(), params);
}

INSTANTIATE_TEST_SUITE_P(Stages, Consolidation, ::testing::Values(3, 2, 1, 0),
                         stageName);

TEST(Consolidation, SixteenBitParametersWithoutMastersAreWidened) {
  // A plan whose bf16 parameter has no master: the parameter, widened.
  TempDir dir;
  Plan plan = basePlan(2, 3);
  plan.tensors.push_back(tensor("p", "param", "", DType::BF16, {3}, true, 2));
  std::vector<float> values = {1.5f, -0.25f, 3.0f}; // exact in bf16
  auto whole = encode(values, DType::BF16);
  std::vector<std::vector<std::vector<std::byte>>> data;
  for (int64_t r = 0; r < 2; ++r)
    data.push_back({localPart(whole, plan.tensors[0], r, 2)});
  ASSERT_TRUE(saveAll(dir.path, "s", plan, data, stateAt(1)));
  ASSERT_TRUE(consolidateCheckpoint(dir.path, "s", dir / "m.safetensors"));
  auto file = SafetensorsFile::open(dir / "m.safetensors");
  ASSERT_TRUE(file);
  EXPECT_EQ(f32Tensor(*file, "p"), values);
}

TEST(Consolidation, RefusesACorruptShard) {
  TempDir dir;
  Plan plan = stage2Plan();
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  ASSERT_TRUE(saveAll(dir.path, "s", plan, data, stateAt(1)));
  flipByte(dir / "s/rank2.shard", 70);
  EXPECT_ERROR(consolidateCheckpoint(dir.path, "s", dir / "m.safetensors"),
               "rank2.shard: error: checksum mismatch");
  EXPECT_FALSE(fs::exists(dir / "m.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "m.safetensors.tmp"));
}

//===----------------------------------------------------------------------===//
// safetensors -> a rank's tensors
//===----------------------------------------------------------------------===//

class InitFrom : public ::testing::TestWithParam<int> {};

TEST_P(InitFrom, UndoesConsolidationOnEveryRank) {
  TempDir dir;
  Plan plan = planFor(GetParam());
  auto data = rankData(plan, wholeParams(plan, 21), 22);
  ASSERT_TRUE(saveAll(dir.path, "s", plan, data, stateAt(1)));
  ASSERT_TRUE(consolidateCheckpoint(dir.path, "s", dir / "m.safetensors"));
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    auto init = loadSafetensorsShard(dir / "m.safetensors", plan, r);
    ASSERT_TRUE(init) << init.error().str();
    ASSERT_EQ(init->tensors.size(), plan.tensors.size());
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      const PlanTensor &t = plan.tensors[i];
      SCOPED_TRACE(t.name);
      if (t.role == TensorRole::Param || t.role == TensorRole::Master)
        EXPECT_EQ(init->tensors[i], data[r][i]);
      else
        EXPECT_TRUE(init->tensors[i].empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, InitFrom, ::testing::Values(3, 2, 1, 0),
                         stageName);

TEST(InitFrom, IntoBuffersWritesOnlyParametersAndMasters) {
  TempDir dir;
  Plan plan = stage3Plan();
  auto data = rankData(plan, wholeParams(plan, 1), 2);
  ASSERT_TRUE(saveAll(dir.path, "s", plan, data, stateAt(1)));
  ASSERT_TRUE(consolidateCheckpoint(dir.path, "s", dir / "m.safetensors"));
  auto buffers = filledLike(data[2], std::byte{0x5A});
  std::vector<MutableBytes> out = mutableViews(buffers);
  auto names = loadSafetensorsInto(dir / "m.safetensors", plan, 2, out);
  ASSERT_TRUE(names) << names.error().str();
  EXPECT_EQ(names->size(), 6u);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    TensorRole role = plan.tensors[i].role;
    if (role == TensorRole::Param || role == TensorRole::Master)
      EXPECT_EQ(buffers[i], data[2][i]) << plan.tensors[i].name;
    else
      EXPECT_EQ(buffers[i],
                std::vector<std::byte>(buffers[i].size(), std::byte{0x5A}));
  }
}

TEST(InitFrom, RoundsF32ToNearestEvenForSixteenBitParameters) {
  TempDir dir;
  Plan plan = basePlan(1, 0);
  plan.tensors.push_back(tensor("h", "param", "", DType::BF16, {4}, false, 1));
  addState(plan, "h", DType::BF16, {4}, false, false);
  plan.tensors.push_back(tensor("g", "param", "", DType::F16, {4}, false, 1));
  std::vector<float> h = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -0.0f,
                          std::numeric_limits<float>::max()};
  std::vector<float> g = {65520.0f, 0x1p-25f, 3 * 0x1p-25f, 65504.0f};
  ASSERT_TRUE(writeSafetensors(dir / "m.safetensors",
                               {{"h", DType::F32, {4}, constBytesOf(h)},
                                {"g", DType::F32, {4}, constBytesOf(g)}}));
  auto init = loadSafetensorsShard(dir / "m.safetensors", plan, 0);
  ASSERT_TRUE(init) << init.error().str();
  auto halves = [](const std::vector<std::byte> &b) {
    std::vector<uint16_t> v(b.size() / 2);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  };
  // Ties go to the even mantissa; past the largest bf16, infinity.
  EXPECT_EQ(halves(init->tensors[0]),
            (std::vector<uint16_t>{0x3F80, 0x3F82, 0x8000, 0x7F80}));
  // The master keeps the file's f32 exactly.
  std::vector<float> master(4);
  std::memcpy(master.data(), init->tensors[2].data(), 16);
  EXPECT_EQ(master[0], h[0]);
  EXPECT_EQ(master[1], h[1]);
  // f16: 65520 rounds up to infinity, the subnormal ties to even.
  EXPECT_EQ(halves(init->tensors[5]),
            (std::vector<uint16_t>{0x7C00, 0x0000, 0x0002, 0x7BFF}));
}

// A padded table (valid_rows 3 of 4) under zeroc's names: its valid rows
// alone (the padding read as zero) or the whole table with zero padding;
// padding that holds values is another model's table, refused.
TEST(InitFrom, PaddedTablesTakeTheirValidRowsOrZeroPadding) {
  TempDir dir;
  Plan plan = basePlan(1, 0);
  plan.tensors.push_back(
      tensor("wte", "param", "", DType::F32, {4, 2}, false, 1));
  plan.tensors.back().validRows = 3;
  std::vector<float> valid = {1, 2, 3, 4, 5, 6};
  std::vector<float> whole = {1, 2, 3, 4, 5, 6, 0, 0};
  std::vector<float> dirty = {1, 2, 3, 4, 5, 6, 0, 0.5f};
  auto values = [](const std::vector<std::byte> &b) {
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  };
  ASSERT_TRUE(
      writeSafetensors(dir / "valid.safetensors",
                       {{"wte", DType::F32, {3, 2}, constBytesOf(valid)}}));
  ASSERT_TRUE(
      writeSafetensors(dir / "whole.safetensors",
                       {{"wte", DType::F32, {4, 2}, constBytesOf(whole)}}));
  ASSERT_TRUE(
      writeSafetensors(dir / "dirty.safetensors",
                       {{"wte", DType::F32, {4, 2}, constBytesOf(dirty)}}));
  for (const char *file : {"valid.safetensors", "whole.safetensors"}) {
    auto init = loadSafetensorsShard(dir / file, plan, 0);
    ASSERT_TRUE(init) << file << ": " << init.error().str();
    EXPECT_EQ(values(init->tensors[0]), whole) << file;
  }
  EXPECT_ERROR(loadSafetensorsShard(dir / "dirty.safetensors", plan, 0),
               "'wte' holds 0.500000 at element 7, in row 3 of its padding "
               "(rows 3 to 3); the plan's padding rows are zero: give the "
               "table's 3 valid rows, or zeros past them");
  std::vector<float> wrong = {1, 2, 3, 4};
  ASSERT_TRUE(
      writeSafetensors(dir / "wrong.safetensors",
                       {{"wte", DType::F32, {2, 2}, constBytesOf(wrong)}}));
  EXPECT_ERROR(loadSafetensorsShard(dir / "wrong.safetensors", plan, 0),
               "'wte' has shape [2, 2] in");
  EXPECT_ERROR(
      loadSafetensorsShard(dir / "wrong.safetensors", plan, 0),
      "[4, 2] in the plan (or its 3 rows without the padding, [3, 2])");
}

TEST(InitFrom, NamesMissingExtraAndMismatchedTensors) {
  TempDir dir;
  Plan plan = stage2Plan();
  std::vector<float> nine(9), five(5), two(2);
  std::vector<int32_t> i32(3);
  ASSERT_TRUE(writeSafetensors(
      dir / "m.safetensors",
      {{"a", DType::F32, {9}, constBytesOf(nine)},
       {"b", DType::F32, {5}, constBytesOf(five)},
       {"lm_head.weight", DType::F32, {2}, constBytesOf(two)}}));
  EXPECT_ERROR(loadSafetensorsShard(dir / "m.safetensors", plan, 0),
               "m.safetensors: error: does not fit the plan: the plan's "
               "parameters 'c' are missing; 'lm_head.weight' are not "
               "parameters of the plan; 'a' has shape [9] in " +
                   dir / "m.safetensors" + ", [3, 3] in the plan");
  ASSERT_TRUE(writeSafetensors(dir / "n.safetensors",
                               {{"a", DType::F32, {3, 3}, constBytesOf(nine)},
                                {"b", DType::F32, {5}, constBytesOf(five)},
                                {"c", DType::I32, {3}, constBytesOf(i32)}}));
  EXPECT_ERROR(loadSafetensorsShard(dir / "n.safetensors", plan, 0),
               "'c' in " + dir / "n.safetensors" +
                   " is I32, the plan's bf16 parameter cannot be read from "
                   "it");
  EXPECT_ERROR(loadSafetensorsShard(dir / "n.safetensors", plan, 3),
               "rank 3 is out of range");
}

TEST(InitFrom, AcceptsTheParametersOwnDtype) {
  TempDir dir;
  Plan plan = stage3Plan();
  auto w = wholeParams(plan, 8);
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::vector<std::byte>> bytes;
  for (const PlanTensor &t : plan.tensors)
    if (t.role == TensorRole::Param) {
      bytes[t.name] = encode(w[t.name], DType::BF16);
      tensors.push_back(
          {t.name, DType::BF16, t.shape, constBytesOf(bytes[t.name])});
    }
  ASSERT_TRUE(writeSafetensors(dir / "m.safetensors", tensors));
  auto init = loadSafetensorsShard(dir / "m.safetensors", plan, 1);
  ASSERT_TRUE(init) << init.error().str();
  // wte.weight on rank 1: elements [7, 14); its master widens them.
  std::vector<uint16_t> param(7);
  std::vector<float> master(7);
  std::memcpy(param.data(), init->tensors[0].data(), 14);
  std::memcpy(master.data(), init->tensors[2].data(), 28);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(param[i], floatToBf16(w["wte.weight"][7 + i]));
    EXPECT_EQ(master[i], bf16ToFloat(param[i]));
  }
}

//===----------------------------------------------------------------------===//
// Hugging Face checkpoints (HFCheckpoint.h)
//===----------------------------------------------------------------------===//

/// A one-layer GPT-2 (d 4, MLP 8, vocabulary 6, 5 positions, tied) as zeroc
/// generates it: stage 3 on `worldSize` ranks, every parameter sharded, in
/// `dtype` with f32 masters when 16-bit.
Plan gpt2Plan(int64_t worldSize, DType dtype = DType::BF16) {
  Plan plan = basePlan(worldSize, 3);
  plan.model.name = "gpt2";
  plan.model.hfConfig = {{"model_type", "gpt2"}, {"n_embd", 4},
                         {"n_layer", 1},         {"n_head", 2},
                         {"vocab_size", 6},      {"n_positions", 5}};
  struct P {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<P> params = {{"wte.weight", {6, 4}},
                           {"wpe.weight", {5, 4}},
                           {"h.0.ln_1.weight", {4}},
                           {"h.0.ln_1.bias", {4}}};
  for (const char *x : {"q", "k", "v"}) {
    params.push_back({std::string("h.0.attn.") + x + "_proj.weight", {4, 4}});
    params.push_back({std::string("h.0.attn.") + x + "_proj.bias", {4}});
  }
  std::vector<P> rest = {{"h.0.attn.c_proj.weight", {4, 4}},
                         {"h.0.attn.c_proj.bias", {4}},
                         {"h.0.ln_2.weight", {4}},
                         {"h.0.ln_2.bias", {4}},
                         {"h.0.mlp.c_fc.weight", {8, 4}},
                         {"h.0.mlp.c_fc.bias", {8}},
                         {"h.0.mlp.c_proj.weight", {4, 8}},
                         {"h.0.mlp.c_proj.bias", {4}},
                         {"ln_f.weight", {4}},
                         {"ln_f.bias", {4}}};
  params.insert(params.end(), rest.begin(), rest.end());
  for (const P &p : params) {
    plan.tensors.push_back(
        tensor(p.name, "param", "", dtype, p.shape, true, worldSize));
    addState(plan, p.name, dtype, p.shape, true, true);
  }
  return plan;
}

using HFTensors =
    std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

/// HF tensors of the given shapes, in name order, with distinct values
/// exact in bf16 (multiples of 1/64 in [-100/64, 99/64]).
HFTensors
hfTensorsOfShapes(const std::map<std::string, std::vector<int64_t>> &shapes) {
  HFTensors out;
  int salt = 0;
  for (const auto &[name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<float> v;
    for (int64_t j = 0; j < n; ++j)
      v.push_back(static_cast<float>((j * 7 + salt * 13) % 200 - 100) / 64);
    ++salt;
    out[name] = {shape, v};
  }
  return out;
}

/// The tensors of a Hugging Face GPT-2 state dict for gpt2Plan, as
/// transformers lays them out (Conv1D weights [in, out], q, k, v fused
/// along the output), with values exact in bf16: name -> (shape, values).
HFTensors hfGPT2Tensors() {
  std::map<std::string, std::vector<int64_t>> shapes = {
      {"wte.weight", {6, 4}},
      {"wpe.weight", {5, 4}},
      {"h.0.ln_1.weight", {4}},
      {"h.0.ln_1.bias", {4}},
      {"h.0.attn.c_attn.weight", {4, 12}},
      {"h.0.attn.c_attn.bias", {12}},
      {"h.0.attn.c_proj.weight", {4, 4}},
      {"h.0.attn.c_proj.bias", {4}},
      {"h.0.ln_2.weight", {4}},
      {"h.0.ln_2.bias", {4}},
      {"h.0.mlp.c_fc.weight", {4, 8}},
      {"h.0.mlp.c_fc.bias", {8}},
      {"h.0.mlp.c_proj.weight", {8, 4}},
      {"h.0.mlp.c_proj.bias", {4}},
      {"ln_f.weight", {4}},
      {"ln_f.bias", {4}}};
  return hfTensorsOfShapes(shapes);
}

/// What each zeroc parameter must hold, from the HF tensors by
/// transformers' semantics: Conv1D computes x W + b with W [in, out], a
/// Linear x w^T + b with w [out, in], so w[o][i] = W[i][o]; c_attn's
/// output splits into q, k, v of n_embd each.
std::map<std::string, std::vector<float>> expectedGPT2Params(
    const std::map<std::string,
                   std::pair<std::vector<int64_t>, std::vector<float>>> &hf) {
  std::map<std::string, std::vector<float>> out;
  auto transposed = [&](const std::string &name, int64_t column, int64_t outs) {
    const auto &[shape, v] = hf.at(name);
    std::vector<float> w;
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t i = 0; i < shape[0]; ++i)
        w.push_back(v[static_cast<size_t>(i * shape[1] + column + o)]);
    return w;
  };
  for (const auto &[name, tensor] : hf)
    out[name] = tensor.second;
  out.erase("h.0.attn.c_attn.weight");
  out.erase("h.0.attn.c_attn.bias");
  const std::vector<float> &bias = hf.at("h.0.attn.c_attn.bias").second;
  int part = 0;
  for (const char *x : {"q", "k", "v"}) {
    std::string p = std::string("h.0.attn.") + x + "_proj.";
    out[p + "weight"] = transposed("h.0.attn.c_attn.weight", 4 * part, 4);
    out[p + "bias"] = std::vector<float>(bias.begin() + 4 * part,
                                         bias.begin() + 4 * part + 4);
    ++part;
  }
  out["h.0.attn.c_proj.weight"] = transposed("h.0.attn.c_proj.weight", 0, 4);
  out["h.0.mlp.c_fc.weight"] = transposed("h.0.mlp.c_fc.weight", 0, 8);
  out["h.0.mlp.c_proj.weight"] = transposed("h.0.mlp.c_proj.weight", 0, 4);
  return out;
}

/// Writes the HF tensors (names with `prefix`) in `dtype`; with `shards`
/// > 1, as that many files and a model.safetensors.index.json.
void writeHF(
    const std::string &dir,
    const std::map<std::string,
                   std::pair<std::vector<int64_t>, std::vector<float>>> &hf,
    const std::string &prefix, DType dtype, int shards = 1) {
  std::vector<std::vector<SafetensorsTensor>> files(shards);
  std::vector<std::vector<std::byte>> keep;
  keep.reserve(hf.size());
  json weightMap = json::object();
  int k = 0;
  for (const auto &[name, tensor] : hf) {
    keep.push_back(encode(tensor.second, dtype));
    int shard = k++ % shards;
    files[shard].push_back(
        {prefix + name, dtype, tensor.first, constBytesOf(keep.back())});
    weightMap[prefix + name] = "part" + std::to_string(shard) + ".safetensors";
  }
  fs::create_directories(dir);
  if (shards == 1) {
    ASSERT_TRUE(writeSafetensors(dir + "/model.safetensors", files[0]));
    return;
  }
  for (int f = 0; f < shards; ++f)
    ASSERT_TRUE(writeSafetensors(
        dir + "/part" + std::to_string(f) + ".safetensors", files[f]));
  writeText(
      dir + "/model.safetensors.index.json",
      json{{"metadata", json::object()}, {"weight_map", weightMap}}.dump());
}

TEST(HFMapping, GPT2FusesQKVAndTransposesConv1D) {
  Plan plan = gpt2Plan(1);
  auto m = hfMapping(plan.model.hfConfig, plan.tensors);
  ASSERT_TRUE(m) << m.error().str();
  EXPECT_EQ(m->tensors.size(), 16u); // tied: no lm_head
  const HFTensor *qkv = m->find("transformer.h.0.attn.c_attn.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(m->find("h.0.attn.c_attn.weight"), qkv); // older files
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{4, 12}));
  ASSERT_EQ(qkv->parts.size(), 3u);
  EXPECT_EQ(qkv->parts[1].param, "h.0.attn.k_proj.weight");
  EXPECT_TRUE(qkv->parts[1].transposed);
  EXPECT_EQ(qkv->parts[2].offset, 8);
  EXPECT_EQ(m->find("transformer.h.0.mlp.c_fc.weight")->shape,
            (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(m->find("transformer.h.0.attn.c_attn.bias")->shape,
            (std::vector<int64_t>{12}));
  EXPECT_TRUE(m->isBuffer("transformer.h.0.attn.masked_bias"));
  EXPECT_TRUE(m->isBuffer("h.0.attn.bias"));
  EXPECT_FALSE(m->isBuffer("h.0.attn.c_attn.bias"));
}

TEST(HFMapping, LlamaFamilyKeepsNamesUnderModelAndLmHeadOutside) {
  Plan plan = basePlan(1, 0);
  for (auto [name, shape] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"embed_tokens.weight", {6, 4}},
           {"layers.0.self_attn.qkv_proj.weight", {12, 4}},
           {"layers.0.mlp.gate_up_proj.weight", {16, 4}},
           {"norm.weight", {4}},
           {"lm_head.weight", {6, 4}}})
    plan.tensors.push_back(
        tensor(name, "param", "", DType::F32, shape, false, 1));
  for (const char *type : {"llama", "mistral", "qwen2", "gemma", "phi3"}) {
    auto m = hfMapping({{"model_type", type}}, plan.tensors);
    ASSERT_TRUE(m) << m.error().str();
    // Phi-3's fused projections are fused in zeroc too: one part each.
    const HFTensor *qkv = m->find("model.layers.0.self_attn.qkv_proj.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->shape, (std::vector<int64_t>{12, 4}));
    EXPECT_FALSE(qkv->parts[0].transposed);
    EXPECT_NE(m->find("lm_head.weight"), nullptr);
    EXPECT_EQ(m->find("model.lm_head.weight"), nullptr);
    EXPECT_TRUE(m->isBuffer("model.layers.3.self_attn.rotary_emb.inv_freq"));
  }
}

TEST(HFMapping, RefusesWhatItCannotMap) {
  Plan plan = gpt2Plan(1);
  EXPECT_ERROR(hfMapping({{"model_type", "falcon"}}, plan.tensors),
               "no Hugging Face checkpoint mapping for model_type "
               "\"falcon\"; zeroc maps gpt2, llama, mistral, qwen2, gemma, "
               "phi3, mixtral");
  EXPECT_ERROR(hfMapping(nullptr, plan.tensors),
               "the plan records no Hugging Face config");
  plan.tensors.push_back(
      tensor("h.0.attn.rotary.weight", "param", "", DType::F32, {4}, true, 1));
  EXPECT_ERROR(hfMapping(plan.model.hfConfig, plan.tensors),
               "parameter 'h.0.attn.rotary.weight' has no Hugging Face name "
               "in the gpt2 mapping");
}

// A padded table (valid_rows) maps to a Hugging Face tensor of its valid
// rows, from element 0; one the architecture stores transposed cannot drop
// its padding and is refused.
TEST(HFMapping, PaddedTablesMapTheirValidRows) {
  Plan plan = basePlan(1, 0);
  plan.tensors.push_back(
      tensor("embed_tokens.weight", "param", "", DType::F32, {8, 4}, false, 1));
  plan.tensors.back().validRows = 6;
  plan.tensors.push_back(
      tensor("lm_head.weight", "param", "", DType::F32, {8, 4}, false, 1));
  plan.tensors.back().validRows = 6;
  auto m = hfMapping({{"model_type", "llama"}}, plan.tensors);
  ASSERT_TRUE(m) << m.error().str();
  for (const char *name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    const HFTensor *t = m->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, (std::vector<int64_t>{6, 4})) << name;
    ASSERT_EQ(t->parts.size(), 1u);
    EXPECT_EQ(t->parts[0].paramBegin, 0);
    EXPECT_EQ(t->parts[0].numel, 24) << name;
  }
  Plan gpt2 = gpt2Plan(1);
  for (PlanTensor &t : gpt2.tensors)
    if (t.name == "h.0.mlp.c_fc.weight")
      t.validRows = t.shape[0] - 1;
  EXPECT_ERROR(hfMapping(gpt2.model.hfConfig, gpt2.tensors),
               "parameter 'h.0.mlp.c_fc.weight' is a padded table "
               "(valid_rows 7 of [8, 4]); the gpt2 mapping stores it "
               "transposed, which cannot drop its padding rows");
}

/// Checks every rank's parameters and masters against the expected whole
/// values (exact in bf16).
void expectGPT2Loaded(const Plan &plan, const std::string &path,
                      const std::string &naming) {
  auto expected = expectedGPT2Params(hfGPT2Tensors());
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    auto init = loadSafetensorsShard(path, plan, r);
    ASSERT_TRUE(init) << init.error().str();
    EXPECT_EQ(init->naming, naming);
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      const PlanTensor &t = plan.tensors[i];
      if (t.role != TensorRole::Param && t.role != TensorRole::Master)
        continue;
      const std::string &param = t.role == TensorRole::Param ? t.name : t.of;
      SCOPED_TRACE(t.name + " on rank " + std::to_string(r));
      EXPECT_EQ(init->tensors[i], localPart(encode(expected.at(param), t.dtype),
                                            t, r, plan.worldSize));
    }
  }
}

TEST(InitFromHF, GPT2WithAndWithoutPrefixAndSharded) {
  TempDir dir;
  auto hf = hfGPT2Tensors();
  Plan plan = gpt2Plan(3);
  writeHF(dir / "new", hf, "transformer.", DType::BF16);
  expectGPT2Loaded(plan, dir / "new", "gpt2");
  writeHF(dir / "old", hf, "", DType::F32);
  expectGPT2Loaded(plan, dir / "old/model.safetensors", "gpt2");
  writeHF(dir / "sharded", hf, "transformer.", DType::F16, 3);
  expectGPT2Loaded(plan, dir / "sharded/model.safetensors.index.json", "gpt2");
  expectGPT2Loaded(gpt2Plan(2, DType::F32), dir / "sharded", "gpt2");
}

TEST(InitFromHF, EachRankReadsOnlyItsShare) {
  // Stage 3 on 4 ranks: each rank reads its elements of each tensor, once
  // for the parameter and its master, and the ranks together read the
  // file's data exactly once.
  TempDir dir;
  writeHF(dir.path, hfGPT2Tensors(), "transformer.", DType::BF16);
  auto file = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_TRUE(file);
  uint64_t data = 0;
  for (const SafetensorsEntry &e : file->tensors())
    data += e.end - e.begin;
  Plan plan = gpt2Plan(4);
  uint64_t sum = 0;
  for (int64_t r = 0; r < 4; ++r) {
    auto init = loadSafetensorsShard(dir.path, plan, r);
    ASSERT_TRUE(init) << init.error().str();
    EXPECT_LE(init->bytesRead, data / 4 + 2 * 16) << "rank " << r;
    sum += init->bytesRead;
  }
  EXPECT_EQ(sum, data);
}

TEST(InitFromHF, NamesMissingExtraAndMisShapedTensors) {
  TempDir dir;
  Plan plan = gpt2Plan(2);
  auto hf = hfGPT2Tensors();
  auto broken = hf;
  broken.erase("h.0.mlp.c_fc.bias");
  broken["h.0.attn.c_attn.weight"].first = {12, 4}; // a Linear's layout
  broken["h.0.attn.rotary.weight"] = {{4}, std::vector<float>(4)};
  broken["lm_head.weight"] = {{6, 4}, std::vector<float>(24)};
  broken["h.0.attn.bias"] = {{1}, {1.0f}}; // an old file's mask: skipped
  writeHF(dir / "a", broken, "transformer.", DType::F32);
  std::string file = dir / "a/model.safetensors";
  auto result = loadSafetensorsShard(dir / "a", plan, 0);
  ASSERT_FALSE(result);
  std::string e = result.error().str();
  for (std::string want :
       {file + ": error: does not fit the plan (Hugging Face gpt2 names): ",
        "'transformer.h.0.attn.c_attn.weight' in " + file +
            " has shape [12, 4], the plan needs [4, 12] (for "
            "h.0.attn.q_proj.weight, h.0.attn.k_proj.weight, "
            "h.0.attn.v_proj.weight, stored as Conv1D [in, out])",
        std::string("'transformer.h.0.mlp.c_fc.bias' [8] (for "
                    "h.0.mlp.c_fc.bias) is missing"),
        "'transformer.h.0.attn.rotary.weight' in " + file +
            " is not a tensor of the plan's gpt2 model",
        "'transformer.lm_head.weight' in " + file +
            " is not a tensor of the plan's gpt2 model"})
    EXPECT_NE(e.find(want), std::string::npos) << want << "\nin: " << e;
  EXPECT_EQ(e.find("attn.bias'"), std::string::npos) << e;

  // The tied output layer named as such.
  auto tied = hf;
  tied["lm_head.weight"] = {{6, 4}, std::vector<float>(24)};
  writeHF(dir / "b", tied, "", DType::F32);
  EXPECT_ERROR(loadSafetensorsShard(dir / "b", plan, 0),
               "'lm_head.weight' in " + dir / "b/model.safetensors" +
                   " is not a tensor of the plan's gpt2 model (the plan ties "
                   "the output layer to the token embedding: "
                   "tie_word_embeddings)");

  // One tensor under both names.
  auto twice = hf;
  twice["transformer.wte.weight"] = hf["wte.weight"];
  writeHF(dir / "c", twice, "", DType::F32);
  EXPECT_ERROR(loadSafetensorsShard(dir / "c", plan, 0),
               "'transformer.wte.weight' is in the file both as "
               "'transformer.wte.weight' and as 'wte.weight'");

  // An integer tensor where a float parameter belongs.
  fs::create_directories(dir / "d");
  std::vector<SafetensorsTensor> ints;
  std::vector<int32_t> zeros(48);
  std::vector<std::vector<std::byte>> keep;
  for (const auto &[name, t] : hf) {
    keep.push_back(encode(t.second, DType::F32));
    if (name == "h.0.attn.c_attn.weight")
      ints.push_back({name, DType::I32, t.first, constBytesOf(zeros)});
    else
      ints.push_back({name, DType::F32, t.first, constBytesOf(keep.back())});
  }
  ASSERT_TRUE(writeSafetensors(dir / "d/model.safetensors", ints));
  EXPECT_ERROR(loadSafetensorsShard(dir / "d", plan, 0),
               "'h.0.attn.c_attn.weight' in " + dir / "d/model.safetensors" +
                   " is I32, the plan's bf16 parameter cannot be read from "
                   "it");

  // A plan without a mapping: the zeroc-name errors, and why HF names
  // cannot be used.
  Plan falcon = gpt2Plan(2);
  falcon.model.hfConfig["model_type"] = "falcon";
  writeHF(dir / "e", hf, "transformer.", DType::F32);
  EXPECT_ERROR(loadSafetensorsShard(dir / "e", falcon, 0),
               "; the names are not zeroc's, and Hugging Face names cannot "
               "be mapped: no Hugging Face checkpoint mapping for "
               "model_type \"falcon\"");
  EXPECT_ERROR(loadSafetensorsShard(dir / "nowhere", plan, 0), "nowhere");
  fs::create_directories(dir / "empty");
  EXPECT_ERROR(loadSafetensorsShard(dir / "empty", plan, 0),
               "is a directory with neither model.safetensors.index.json "
               "nor model.safetensors");
}

TEST(InitFromHF, InconsistentShardIndexIsRefused) {
  TempDir dir;
  Plan plan = gpt2Plan(2);
  writeHF(dir.path, hfGPT2Tensors(), "transformer.", DType::F32, 2);
  std::string index = dir / "model.safetensors.index.json";
  json j = json::parse(readText(index));
  j["weight_map"]["transformer.wte.weight"] =
      j["weight_map"]["transformer.wte.weight"] == "part0.safetensors"
          ? "part1.safetensors"
          : "part0.safetensors";
  writeText(index, j.dump());
  EXPECT_ERROR(loadSafetensorsShard(index, plan, 0),
               "inconsistent shards: 'transformer.wte.weight' is in ");
  EXPECT_ERROR(loadSafetensorsShard(index, plan, 0), "which does not hold it");
  j["weight_map"].erase("transformer.wte.weight");
  writeText(index, j.dump());
  EXPECT_ERROR(loadSafetensorsShard(index, plan, 0),
               " but not in the index's weight_map");
  writeText(index, R"({"weight_map": {"a": "../x.safetensors"}})");
  EXPECT_ERROR(loadSafetensorsShard(index, plan, 0),
               "expected the file name of a shard in the index's directory");
  writeText(index, R"({"metadata": {}})");
  EXPECT_ERROR(loadSafetensorsShard(index, plan, 0),
               "a safetensors index needs an object \"weight_map\"");
}

/// Every rank's tensors loaded from `path`, the rest zero: what
/// `zerorun --init-from --steps 0` checkpoints.
std::vector<std::vector<std::vector<std::byte>>>
initialData(const Plan &plan, const std::string &path) {
  std::vector<std::vector<std::vector<std::byte>>> data;
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    auto init = loadSafetensorsShard(path, plan, r);
    EXPECT_TRUE(init) << init.error().str();
    for (size_t i = 0; i < plan.tensors.size(); ++i)
      if (init->tensors[i].empty())
        init->tensors[i].assign(localBytes(plan.tensors[i]), std::byte{0});
    data.push_back(std::move(init->tensors));
  }
  return data;
}

/// The start of every consolidate --format hf test: `hf` written as a
/// Hugging Face file in dir/in (names with `prefix`, in `dtype`), and the
/// plan's checkpoint of it (tag `tag`, at `state`) in dir/ckpt.
::testing::AssertionResult
checkpointFromHF(const TempDir &dir, const Plan &plan, const HFTensors &hf,
                 const std::string &prefix, DType dtype, const std::string &tag,
                 const TrainingState &state) {
  writeHF(dir / "in", hf, prefix, dtype);
  return saveAll(dir / "ckpt", tag, plan, initialData(plan, dir / "in"), state);
}

/// name -> (dtype, shape, bytes) of a file or of an index's shards.
std::map<std::string,
         std::tuple<DType, std::vector<int64_t>, std::vector<std::byte>>>
contents(const std::string &path) {
  auto set = SafetensorsSet::open(path);
  EXPECT_TRUE(set) << set.error().str();
  std::map<std::string,
           std::tuple<DType, std::vector<int64_t>, std::vector<std::byte>>>
      out;
  for (const auto &[name, at] : set->tensors())
    out[name] = {at.entry->dtype, at.entry->shape, *at.file->read(*at.entry)};
  return out;
}

TEST(ConsolidateHF, RoundTripsTheFileByteForByte) {
  for (DType dtype : {DType::BF16, DType::F32}) {
    TempDir dir;
    Plan plan = gpt2Plan(3, dtype);
    ASSERT_TRUE(checkpointFromHF(dir, plan, hfGPT2Tensors(), "transformer.",
                                 dtype, "step0", stateAt(0)));
    auto out = consolidateToHF(dir / "ckpt", "latest", dir / "out");
    ASSERT_TRUE(out) << out.error().str();
    EXPECT_EQ(out->tensors, 16);
    EXPECT_EQ(out->shards, 1);
    EXPECT_EQ(contents(dir / "out"), contents(dir / "in"));
    json config = json::parse(readText(dir / "out/config.json"));
    EXPECT_EQ(config["torch_dtype"],
              dtype == DType::BF16 ? "bfloat16" : "float32");
    EXPECT_EQ(config["n_embd"], 4);

    // Sharded: every file at most 100 bytes of data but for a bigger
    // tensor alone, and the index names each tensor's file.
    HFExportOptions small;
    small.maxShardBytes = 100;
    auto sharded = consolidateToHF(dir / "ckpt", "latest", dir / "sh", small);
    ASSERT_TRUE(sharded) << sharded.error().str();
    EXPECT_GT(sharded->shards, 3);
    char last[64];
    std::snprintf(last, sizeof last, "sh/model-%05lld-of-%05lld.safetensors",
                  (long long)sharded->shards, (long long)sharded->shards);
    EXPECT_TRUE(fs::exists(dir / last)) << last;
    json index = json::parse(readText(dir / "sh/model.safetensors.index.json"));
    EXPECT_EQ(index["weight_map"].size(), 16u);
    EXPECT_EQ(contents(dir / "sh/model.safetensors.index.json"),
              contents(dir / "in"));
    // A stale single file beside a sharded export would be loaded too.
    fs::copy(dir / "out/model.safetensors", dir / "sh/model.safetensors");
    EXPECT_ERROR(consolidateToHF(dir / "ckpt", "latest", dir / "sh", small),
                 "model.safetensors: error: is in the output directory but "
                 "not part of this export");
  }
}

TEST(ConsolidateHF, F32FromBf16TrainingAndRefusals) {
  TempDir dir;
  Plan plan = gpt2Plan(2);
  auto hf = hfGPT2Tensors();
  ASSERT_TRUE(
      checkpointFromHF(dir, plan, hf, "", DType::BF16, "s", stateAt(3)));
  HFExportOptions f32;
  f32.dtype = DType::F32;
  ASSERT_TRUE(consolidateToHF(dir / "ckpt", "s", dir / "out", f32));
  auto got = contents(dir / "out");
  for (const auto &[name, t] : hf) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count("transformer." + name));
    EXPECT_EQ(std::get<0>(got["transformer." + name]), DType::F32);
    EXPECT_EQ(std::get<2>(got["transformer." + name]),
              encode(t.second, DType::F32));
  }
  EXPECT_EQ(json::parse(readText(dir / "out/config.json"))["torch_dtype"],
            "float32");

  Plan handWritten = gpt2Plan(2);
  handWritten.model.hfConfig = nullptr;
  ASSERT_TRUE(saveAll(dir / "hand", "s", handWritten,
                      initialData(plan, dir / "in"), stateAt(3)));
  EXPECT_ERROR(consolidateToHF(dir / "hand", "s", dir / "x"),
               "checkpoint 's' cannot be written with Hugging Face names: "
               "the plan records no Hugging Face config");
}

/// A one-layer Mixtral (hidden 4, intermediate 6, 3 experts, 2 KV heads of
/// 2, vocabulary 6, untied) as zeroc generates it (docs/model-dialect.md):
/// the experts stacked, `experts.w1` and `w3` [3, 6, 4], `w2` [3, 4, 6].
/// Stage 3 on `worldSize` ranks, every parameter sharded.
Plan mixtralPlan(int64_t worldSize, DType dtype = DType::BF16) {
  Plan plan = basePlan(worldSize, 3);
  plan.model.name = "mixtral";
  plan.model.hfConfig = {{"model_type", "mixtral"}, {"hidden_size", 4},
                         {"num_local_experts", 3},  {"num_hidden_layers", 1},
                         {"intermediate_size", 6},  {"vocab_size", 6}};
  const std::string l = "layers.0.", moe = l + "block_sparse_moe.";
  std::vector<std::pair<std::string, std::vector<int64_t>>> params = {
      {"embed_tokens.weight", {6, 4}},
      {l + "input_layernorm.weight", {4}},
      {l + "self_attn.q_proj.weight", {4, 4}},
      {l + "self_attn.k_proj.weight", {2, 4}},
      {l + "self_attn.v_proj.weight", {2, 4}},
      {l + "self_attn.o_proj.weight", {4, 4}},
      {l + "post_attention_layernorm.weight", {4}},
      {moe + "gate.weight", {3, 4}},
      {moe + "experts.w1", {3, 6, 4}},
      {moe + "experts.w3", {3, 6, 4}},
      {moe + "experts.w2", {3, 4, 6}},
      {"norm.weight", {4}},
      {"lm_head.weight", {6, 4}}};
  for (const auto &[name, shape] : params) {
    plan.tensors.push_back(
        tensor(name, "param", "", dtype, shape, true, worldSize));
    addState(plan, name, dtype, shape, true, true);
  }
  return plan;
}

/// A Hugging Face Mixtral state dict for mixtralPlan, as transformers'
/// save_pretrained and the published Mixtral-8x7B files lay it out: one
/// tensor per expert and projection, `experts.E.w1.weight` [6, 4], `w3`
/// [6, 4], `w2` [4, 6], under `model.` but for lm_head; values exact in
/// bf16.
HFTensors hfMixtralTensors() {
  const std::string l = "model.layers.0.", moe = l + "block_sparse_moe.";
  std::map<std::string, std::vector<int64_t>> shapes = {
      {"model.embed_tokens.weight", {6, 4}},
      {l + "input_layernorm.weight", {4}},
      {l + "self_attn.q_proj.weight", {4, 4}},
      {l + "self_attn.k_proj.weight", {2, 4}},
      {l + "self_attn.v_proj.weight", {2, 4}},
      {l + "self_attn.o_proj.weight", {4, 4}},
      {l + "post_attention_layernorm.weight", {4}},
      {moe + "gate.weight", {3, 4}},
      {"model.norm.weight", {4}},
      {"lm_head.weight", {6, 4}}};
  for (int e = 0; e < 3; ++e) {
    std::string x = moe + "experts." + std::to_string(e) + ".";
    shapes[x + "w1.weight"] = {6, 4};
    shapes[x + "w3.weight"] = {6, 4};
    shapes[x + "w2.weight"] = {4, 6};
  }
  return hfTensorsOfShapes(shapes);
}

/// What each zeroc parameter must hold: the HF tensor of the same name
/// without `model.`, and each stacked expert weight the concatenation of
/// its experts' tensors in expert order (transformers' MixtralExperts
/// indexes expert e's weights as slice e of the stack).
std::map<std::string, std::vector<float>>
expectedMixtralParams(const HFTensors &hf) {
  std::map<std::string, std::vector<float>> out;
  const std::string experts = "layers.0.block_sparse_moe.experts.";
  for (const auto &[name, tensor] : hf) {
    std::string bare = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
    if (bare.rfind(experts, 0) != 0) {
      out[bare] = tensor.second;
      continue;
    }
    // experts.E.wK.weight -> experts.wK, slice E.
    std::string rest = bare.substr(experts.size());
    int e = std::stoi(rest.substr(0, rest.find('.')));
    std::string w = rest.substr(rest.find('.') + 1, 2);
    std::vector<float> &stack = out[experts + w];
    stack.resize(tensor.second.size() * 3);
    std::copy(tensor.second.begin(), tensor.second.end(),
              stack.begin() + e * tensor.second.size());
  }
  return out;
}

TEST(HFMapping, MixtralStacksOneHFTensorPerExpert) {
  Plan plan = mixtralPlan(1);
  auto m = hfMapping(plan.model.hfConfig, plan.tensors);
  ASSERT_TRUE(m) << m.error().str();
  // 10 tensors as is, and 3 experts x 3 projections.
  EXPECT_EQ(m->tensors.size(), 19u);
  const std::string moe = "model.layers.0.block_sparse_moe.";
  for (int e = 0; e < 3; ++e) {
    std::string x = moe + "experts." + std::to_string(e) + ".";
    for (auto [w, shape] :
         std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"w1", {6, 4}}, {"w3", {6, 4}}, {"w2", {4, 6}}}) {
      const HFTensor *t = m->find(x + w + ".weight");
      ASSERT_NE(t, nullptr) << x + w;
      EXPECT_EQ(t->bareName,
                x.substr(6) + w + ".weight"); // without `model.`
      EXPECT_EQ(t->shape, shape);
      ASSERT_EQ(t->parts.size(), 1u);
      EXPECT_EQ(t->parts[0].param, "layers.0.block_sparse_moe.experts." + w);
      EXPECT_EQ(t->parts[0].paramBegin, 24 * e);
      EXPECT_EQ(t->parts[0].numel, 24);
      EXPECT_EQ(t->parts[0].hfBegin, 0);
      EXPECT_FALSE(t->parts[0].transposed);
    }
  }
  const HFTensor *gate = m->find(moe + "gate.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(gate->parts[0].numel, 12);
  EXPECT_NE(m->find("model.layers.0.self_attn.k_proj.weight"), nullptr);
  EXPECT_NE(m->find("lm_head.weight"), nullptr);
  EXPECT_EQ(m->find(moe + "experts.3.w1.weight"), nullptr);
  EXPECT_EQ(m->find(moe + "experts.w1"), nullptr);

  // A stacked parameter needs a dimension to stack along.
  Plan flat = mixtralPlan(1);
  for (PlanTensor &t : flat.tensors)
    if (t.name == "layers.0.block_sparse_moe.experts.w2")
      t.shape = {72};
  EXPECT_ERROR(hfMapping(flat.model.hfConfig, flat.tensors),
               "parameter 'layers.0.block_sparse_moe.experts.w2' has shape "
               "[72]; the mixtral mapping stores one tensor per slice of its "
               "first dimension, which needs two dimensions or more");
}

TEST(InitFromHF, MixtralEachRankReadsItsSlicesOfTheExperts) {
  // Stage 3 on 4 ranks: a rank's quarter of a stacked expert weight [3, 6,
  // 4] spans parts of two experts' HF tensors. Each rank's parameters and
  // masters hold the expected elements, and the ranks together read the
  // file's data exactly once.
  TempDir dir;
  HFTensors hf = hfMixtralTensors();
  auto expected = expectedMixtralParams(hf);
  for (auto [dtype, shards] :
       std::vector<std::pair<DType, int>>{{DType::BF16, 1}, {DType::F32, 3}}) {
    std::string in = dir / ("in" + std::to_string(shards));
    writeHF(in, hf, "", dtype, shards);
    Plan plan = mixtralPlan(4);
    uint64_t sum = 0, data = 0;
    for (const auto &[name, t] : hf)
      data += t.second.size() * bytesPerElement(dtype);
    for (int64_t r = 0; r < plan.worldSize; ++r) {
      auto init = loadSafetensorsShard(in, plan, r);
      ASSERT_TRUE(init) << init.error().str();
      EXPECT_EQ(init->naming, "mixtral");
      for (size_t i = 0; i < plan.tensors.size(); ++i) {
        const PlanTensor &t = plan.tensors[i];
        if (t.role != TensorRole::Param && t.role != TensorRole::Master)
          continue;
        const std::string &param = t.role == TensorRole::Param ? t.name : t.of;
        SCOPED_TRACE(t.name + " on rank " + std::to_string(r));
        EXPECT_EQ(init->tensors[i],
                  localPart(encode(expected.at(param), t.dtype), t, r,
                            plan.worldSize));
      }
      sum += init->bytesRead;
    }
    EXPECT_EQ(sum, data);
  }
}

TEST(InitFromHF, MixtralErrorsNameTheExpertTensor) {
  TempDir dir;
  Plan plan = mixtralPlan(2);
  HFTensors broken = hfMixtralTensors();
  const std::string moe = "model.layers.0.block_sparse_moe.";
  broken.erase(moe + "experts.1.w3.weight");
  broken[moe + "experts.2.w2.weight"].first = {6, 4}; // w1's layout
  broken[moe + "experts.3.w1.weight"] = {{6, 4}, std::vector<float>(24)};
  // transformers 5's in-memory names, as a raw state_dict() would save them.
  broken["model.layers.0.mlp.experts.gate_up_proj"] = {{4, 12, 4},
                                                       std::vector<float>(192)};
  writeHF(dir / "a", broken, "", DType::F32);
  std::string file = dir / "a/model.safetensors";
  auto result = loadSafetensorsShard(dir / "a", plan, 1);
  ASSERT_FALSE(result);
  std::string e = result.error().str();
  for (std::string want :
       {file + ": error: does not fit the plan (Hugging Face mixtral names): ",
        "'" + moe + "experts.2.w2.weight' in " + file +
            " has shape [6, 4], the plan needs [4, 6] (for "
            "layers.0.block_sparse_moe.experts.w2[2])",
        "'" + moe + "experts.3.w1.weight' in " + file +
            " is not a tensor of the plan's mixtral model",
        "'model.layers.0.mlp.experts.gate_up_proj' in " + file +
            " is not a tensor of the plan's mixtral model (transformers 5's "
            "fused in-memory experts, from a state_dict() saved as it is: "
            "save_pretrained writes the files' one tensor per expert, "
            "block_sparse_moe.experts.E.w1.weight)",
        "'" + moe +
            "experts.1.w3.weight' [6, 4] (for "
            "layers.0.block_sparse_moe.experts.w3[1]) is missing"})
    EXPECT_NE(e.find(want), std::string::npos) << want << "\nin: " << e;
}

TEST(ConsolidateHF, MixtralRoundTripsTheExpertsByteForByte) {
  // HF file -> each rank's slices (stage 3, 3 ranks: shards that cut
  // across experts) -> checkpoint -> consolidate --format hf: the same
  // names, shapes, dtypes and bytes; sharded too.
  for (DType dtype : {DType::BF16, DType::F32}) {
    TempDir dir;
    Plan plan = mixtralPlan(3, dtype);
    ASSERT_TRUE(checkpointFromHF(dir, plan, hfMixtralTensors(), "", dtype,
                                 "step0", stateAt(0)));
    auto out = consolidateToHF(dir / "ckpt", "latest", dir / "out");
    ASSERT_TRUE(out) << out.error().str();
    EXPECT_EQ(out->tensors, 19);
    EXPECT_EQ(contents(dir / "out"), contents(dir / "in"));
    EXPECT_EQ(json::parse(readText(dir / "out/config.json"))["model_type"],
              "mixtral");
    HFExportOptions small;
    small.maxShardBytes = 100;
    ASSERT_TRUE(consolidateToHF(dir / "ckpt", "latest", dir / "sh", small));
    EXPECT_EQ(contents(dir / "sh/model.safetensors.index.json"),
              contents(dir / "in"));
  }
}

//===----------------------------------------------------------------------===//
// safetensors
//===----------------------------------------------------------------------===//

TEST(Safetensors, RoundTripsEveryDtypeWithAlignment) {
  TempDir dir;
  std::vector<uint16_t> bf16 = {0x3F80, 0x4000, 0xC040};
  std::vector<uint16_t> f16 = {0x3C00};
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
  std::vector<int32_t> i32 = {7, -8};
  std::vector<float> scalar = {42.0f};
  std::vector<float> empty;
  std::vector<SafetensorsTensor> tensors = {
      {"bf16", DType::BF16, {3}, constBytesOf(bf16)},
      {"f32", DType::F32, {2, 3}, constBytesOf(f32)},
      {"f16", DType::F16, {1, 1}, constBytesOf(f16)},
      {"i32", DType::I32, {2}, constBytesOf(i32)},
      {"scalar", DType::F32, {}, constBytesOf(scalar)},
      {"empty", DType::F32, {0, 3}, constBytesOf(empty)}};
  std::string path = dir / "t.safetensors";
  auto ok = writeSafetensors(path, tensors, {{"format", "pt"}});
  ASSERT_TRUE(ok) << ok.error().str();

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file) << file.error().str();
  EXPECT_EQ(file->dataStart() % 8, 0u);
  EXPECT_EQ(file->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (const SafetensorsTensor &t : tensors) {
    SCOPED_TRACE(t.name);
    const SafetensorsEntry *e = file->find(t.name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->dtype, t.dtype);
    EXPECT_EQ(e->shape, t.shape);
    EXPECT_EQ(e->begin % static_cast<uint64_t>(bytesPerElement(t.dtype)), 0u);
    auto bytes = file->read(*e);
    ASSERT_TRUE(bytes);
    ASSERT_EQ(bytes->size(), t.data.size);
    // memcmp's pointers must not be null, even for no bytes (UBSan).
    if (t.data.size) {
      EXPECT_EQ(std::memcmp(bytes->data(), t.data.data, t.data.size), 0);
    }
  }
  auto part = file->read(*file->find("f32"), {2, 5});
  ASSERT_TRUE(part);
  std::vector<float> values(3);
  std::memcpy(values.data(), part->data(), 12);
  EXPECT_EQ(values, (std::vector<float>{3.25f, 4.0f, 5.0f}));
  EXPECT_ERROR(file->read(*file->find("f32"), {4, 7}),
               "elements [4, 7) of 'f32' are out of range");

  // The header as another reader sees it.
  std::string text = readText(path);
  uint64_t n;
  std::memcpy(&n, text.data(), 8);
  json header = json::parse(text.substr(8, n));
  EXPECT_EQ(header["f32"]["dtype"], "F32");
  EXPECT_EQ(header["f32"]["data_offsets"], json::array({0, 24}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
}

TEST(Safetensors, WriterErrors) {
  TempDir dir;
  std::vector<float> two(2);
  EXPECT_ERROR(writeSafetensors(dir / "x.safetensors",
                                {{"a", DType::F32, {2}, constBytesOf(two)},
                                 {"a", DType::F32, {2}, constBytesOf(two)}}),
               "cannot write a tensor named \"a\"");
  EXPECT_ERROR(writeSafetensors(dir / "x.safetensors",
                                {{"a", DType::F32, {3}, constBytesOf(two)}}),
               "tensor 'a' has 8 bytes, its dtype and shape need 12");
  auto writer = SafetensorsWriter::create(
      dir / "y.safetensors", {{"a", DType::F32, {2}}, {"b", DType::F32, {2}}});
  ASSERT_TRUE(writer);
  EXPECT_ERROR(writer->write("b", constBytesOf(two)),
               "tensor 'b' written out of order: expected 'a'");
  EXPECT_ERROR(writer->commit(), "commit before every tensor was written");
  EXPECT_FALSE(fs::exists(dir / "x.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "x.safetensors.tmp"));
}

/// A file with this header text (unpadded) and `dataBytes` zero bytes.
std::string rawFile(const TempDir &dir, const std::string &header,
                    size_t dataBytes, uint64_t declaredLength = 0) {
  std::string path = dir / "raw.safetensors";
  uint64_t n = declaredLength ? declaredLength : header.size();
  std::string text(8, '\0');
  std::memcpy(text.data(), &n, 8);
  text += header + std::string(dataBytes, '\0');
  writeText(path, text);
  return path;
}

TEST(Safetensors, ReaderErrors) {
  TempDir dir;
  struct Case {
    std::string header;
    size_t data;
    std::string message;
    uint64_t length = 0;
  };
  const std::string a8 = R"("a":{"dtype":"F32","shape":[2],"data_offsets":)";
  std::vector<Case> cases = {
      {"{}", 0, "header length 99 runs past the end of the file (10 bytes)",
       99},
      {"{}", 0, "header length 200000000 exceeds the 100 MB limit", 200000000},
      {" {}", 0, "the header does not start with '{'"},
      {"{\"a\":", 0, "invalid JSON in the header"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, "the header has the key \"a\" twice in one object"},
      {R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8,
       "tensor 'a': unsupported dtype \"F64\"; this reader knows F32, BF16, "
       "F16 and I32"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", 4,
       "tensor 'a': expected an object with \"dtype\", \"shape\" and "
       "\"data_offsets\""},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "tensor 'a': \"shape\" must be an array of integers >= 0"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
       "tensor 'a': \"data_offsets\" must be two integers >= 0"},
      {"{" + a8 + "[0,8]}}", 4,
       "tensor 'a': data_offsets [0, 8] run past the end of the data (4 "
       "bytes)"},
      {"{" + a8 + "[8,0]}}", 8,
       "tensor 'a': data_offsets [8, 0] end before they begin"},
      {"{" + a8 + "[0,12]}}", 12,
       "tensor 'a': data_offsets [0, 12] hold 12 bytes, but F32 [2] needs 8"},
      {"{" + a8 +
           R"([0,8]},"b":{"dtype":"F32","shape":[2],)"
           R"("data_offsets":[4,12]}})",
       12, "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {"{" + a8 + "[4,12]}}", 12,
       "data bytes [0, 4) belong to no tensor (the format allows no holes)"},
      {"{" + a8 + "[0,8]}}", 12,
       "the data has 12 bytes but the tensors end at 8"},
      {R"({"__metadata__":{"n":1}})", 0,
       "\"__metadata__\" value of \"n\" is not a string"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
       R"("data_offsets":[0,0]}})",
       0, "tensor 'a': shape [4294967296, 4294967296] is too large"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.message);
    std::string path = rawFile(dir, c.header, c.data, c.length);
    EXPECT_ERROR(SafetensorsFile::open(path), path + ": error: " + c.message);
  }
  writeText(dir / "tiny.safetensors", "abc");
  EXPECT_ERROR(SafetensorsFile::open(dir / "tiny.safetensors"),
               "not a safetensors file: 3 bytes, too short for the 8-byte "
               "header length");
  EXPECT_ERROR(SafetensorsFile::open(dir / "none.safetensors"),
               "none.safetensors: error: cannot open for reading");
}

TEST(Safetensors, TruncatedFileIsDetected) {
  TempDir dir;
  std::vector<float> v(10, 1.0f);
  std::string path = dir / "t.safetensors";
  ASSERT_TRUE(
      writeSafetensors(path, {{"v", DType::F32, {10}, constBytesOf(v)}}));
  fs::resize_file(path, fs::file_size(path) - 1);
  EXPECT_ERROR(SafetensorsFile::open(path),
               "tensor 'v': data_offsets [0, 40] run past the end of the "
               "data (39 bytes)");
  fs::resize_file(path, 12);
  EXPECT_ERROR(SafetensorsFile::open(path), "runs past the end of the file");
}

} // namespace
