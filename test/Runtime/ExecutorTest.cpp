//===- ExecutorTest.cpp - The plan executor's checks and memory accounting ===//
//
// End-to-end training runs (losses across stages and world sizes) are the
// zerorun_* ctest entries (zerorun_e2e.py); these test the executor's own
// pieces with the one-rank communicator.
//
//===----------------------------------------------------------------------===//

#include "exec/Executor.h"
#include "exec/Device.h"
#include "exec/Dispatch.h"
#include "exec/PreparedPhase.h"
#include "exec/Profiler.h"

#include "comm/Communicator.h"
#include "data/DataLoader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

using namespace zeroc;
using namespace zeroc::runtime;
using zeroc::runtime::exec::PreparedPhase;

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

//===----------------------------------------------------------------------===//
// Training a small plan in process: tiny-gpt2 (seq 8, micro-batch 2,
// accumulation 2), stage 3 on one rank with overlap_comm and small buckets,
// so the micro-step has ops on the compute, gather and reduce streams and
// reduce-scatter workspaces. Regenerate test/Runtime/Inputs/ with
//   zeroc gen --preset tiny-gpt2 --seq-len 8 --micro-batch 2 -o t.mlir
//   zeroc t.mlir --config C --world-size 1 -o tiny-gpt2-stage3-ws1.json
// where C is {"train_micro_batch_size_per_gpu": 2,
//   "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 3,
//   "stage3_param_persistence_threshold": 0, "overlap_comm": true,
//   "reduce_bucket_size": 3000, "stage3_prefetch_bucket_size": 3000}}.
//===----------------------------------------------------------------------===//

namespace {

Plan tinyPlan() {
  auto plan = loadPlan(std::string(ZEROC_SOURCE_DIR) +
                       "/test/Runtime/Inputs/tiny-gpt2-stage3-ws1.json");
  EXPECT_TRUE(bool(plan)) << plan.error().str();
  return plan ? std::move(*plan) : Plan{};
}

struct TrainRun {
  std::vector<double> losses;
  std::string error;
  int64_t measured = 0, predicted = 0;
  MemoryCounts allocated; ///< The counting allocator's, over the run.
};

/// `device`: the executor's device (null: the default CPU device). `join`:
/// ExecutorOptions::joinLocalCollectiveStreams (false keeps a thread per
/// stream at this one rank, as at more ranks).
/// `profiler`: records the steps (its origin set before the first, device
/// times resolved after each, as zerorun does).
TrainRun train(Plan plan, bool threads, int steps, Device *device = nullptr,
               bool join = true, Profiler *profiler = nullptr) {
  TrainRun r;
  // One counter per process: this run's high-water marks from here.
  deviceMemory().resetPeaks();
  LocalCommunicator comm;
  ExecutorOptions options;
  options.streamThreads = threads;
  options.device = device;
  options.joinLocalCollectiveStreams = join;
  options.profiler = profiler;
  auto ex = Executor::create(std::move(plan), comm, options);
  if (!ex) {
    r.error = ex.error().message;
    return r;
  }
  const Plan &p = (*ex)->plan();
  BatchShape shape;
  shape.gradientAccumulation = p.gradientAccumulationSteps;
  shape.microBatch = p.model.microBatch;
  shape.seqLen = p.model.seqLen;
  auto data = DataLoader::synthetic(0, shape, (*ex)->vocabSize());
  EXPECT_TRUE(bool(data));
  if (profiler)
    profiler->setOrigin(Profiler::Clock::now());
  for (int s = 0; s < steps; ++s) {
    auto step = (*ex)->runStep(*data, s);
    if (!step) {
      r.error = step.error().message;
      break;
    }
    r.losses.push_back(step->loss);
    if (profiler)
      profiler->resolveDeviceTimes();
  }
  r.measured = (*ex)->measuredPeakBytes();
  r.predicted = (*ex)->predictedPeakBytes();
  r.allocated = (*ex)->allocatedMemory();
  return r;
}

} // namespace

TEST(Executor, RefusesOneBitOptimizers) {
  // zeroc plans them for their cost; zerorun has no compressed collectives.
  for (const char *type : {"OneBitAdam", "ZeroOneAdam", "OneBitLamb"}) {
    Plan plan = tinyPlan();
    plan.config["optimizer"] = {{"type", type}};
    TrainRun r = train(std::move(plan), false, 1);
    EXPECT_NE(r.error.find(std::string("the plan's optimizer is ") + type +
                           "; zerorun does not implement 1-bit compressed "
                           "communication"),
              std::string::npos)
        << r.error;
  }
}

// A plan whose arena no machine has is refused with the figures, before
// anything is allocated (docs/plan-format.md, "Checks").
TEST(Executor, RefusesAPlanLargerThanTheMachine) {
  Plan plan = tinyPlan();
  for (PlanPhase &ph : plan.phases)
    if (ph.memory)
      ph.memory->arenaBytes = int64_t(1) << 60; // 1 EiB
  TrainRun r = train(std::move(plan), false, 1);
  EXPECT_NE(r.error.find("of host memory per rank"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("more than this machine's"), std::string::npos)
      << r.error;
}

TEST(Executor, StreamWorkersGiveTheSingleThreadLossesBitForBit) {
  Plan plan = tinyPlan();
  std::set<int64_t> streams;
  for (const PlanOp &op : plan.findPhase(PhaseKind::MicroStep)->ops)
    streams.insert(op.stream);
  ASSERT_GE(streams.size(), 3u) << "the plan should use three streams";
  TrainRun single = train(plan, false, 4);
  TrainRun threads = train(plan, true, 4, nullptr, /*join=*/false);
  // The default at one rank: the collective streams on the compute thread.
  TrainRun joined = train(plan, true, 4);
  ASSERT_EQ(single.error, "");
  ASSERT_EQ(threads.error, "");
  ASSERT_EQ(joined.error, "");
  ASSERT_EQ(single.losses.size(), 4u);
  EXPECT_EQ(single.losses, threads.losses);
  EXPECT_EQ(single.losses, joined.losses);
  EXPECT_LT(threads.losses.back(), threads.losses.front());
}

// The executor's deferral of adam_update ops for a fusing device (the CUDA
// device's ZEROC_CUDA_ADAM=fused), on the CPU device issuing in program
// order as the CUDA device does: the deferred ops run as fused calls before
// the next op of another kind or stream and at the phase's end, so the
// losses are the per-op run's to the bit. A flush that comes too late runs
// the update after the zero_grads that follow it (checked: skipping the
// flush before other ops changes the second step's loss). Both checked-in
// plans: f32 stage 3 (36 adam_update ops) and bf16 stage 2 with offload
// (one flat group's adam_update, then its all_gather_updates_start on
// another stream, which moves nothing at one rank); every op fuses, one
// call per step.
TEST(Executor, FusedAdamGivesThePerOpLossesBitForBit) {
  for (const char *input : {"tiny-gpt2-stage3-ws1.json",
                            "tiny-llama-bf16-stage2-offload-ws1.json"}) {
    SCOPED_TRACE(input);
    auto loaded = loadPlan(std::string(ZEROC_SOURCE_DIR) +
                           "/test/Runtime/Inputs/" + input);
    ASSERT_TRUE(bool(loaded)) << loaded.error().str();
    const Plan &plan = *loaded;
    size_t adamOps = 0;
    for (const PlanPhase &ph : plan.phases)
      for (const PlanOp &op : ph.ops)
        adamOps += op.kind == OpKind::AdamUpdate;
    ASSERT_GT(adamOps, 0u);
    auto issuing = makeCpuDevice({true, false, nullptr});
    TrainRun perOp = train(plan, true, 4, issuing.get());
    std::vector<size_t> calls;
    auto fusing = makeCpuDevice({true, true, &calls});
    TrainRun fused = train(plan, true, 4, fusing.get());
    TrainRun threads = train(plan, true, 4);
    ASSERT_EQ(perOp.error, "");
    ASSERT_EQ(fused.error, "");
    ASSERT_EQ(fused.losses.size(), 4u);
    EXPECT_EQ(fused.losses, perOp.losses);
    EXPECT_EQ(fused.losses, threads.losses);
    EXPECT_EQ(calls, std::vector<size_t>(4, adamOps));
  }
}

// zerorun --profile on a device with its own clock (the CUDA device's
// events): the scheduler brackets every op with the device's marks and the
// profiler reads them back after the steps. Run here with the CPU device
// issuing from one thread and marking with the host's clock: every op of
// every phase run has its span, in program order, each run spans its ops;
// a device whose streams have threads of their own keeps host times.
TEST(Profiler, ADeviceClockTimesEveryOp) {
  auto loaded = loadPlan(std::string(ZEROC_SOURCE_DIR) +
                         "/test/Runtime/Inputs/tiny-gpt2-stage3-ws1.json");
  ASSERT_TRUE(bool(loaded)) << loaded.error().str();
  const Plan plan = *loaded;
  CpuDeviceOptions timed;
  timed.oneIssuingThread = true;
  timed.timesOps = true;
  auto dev = makeCpuDevice(timed);
  Profiler profiler;
  profiler.useDeviceClock(*dev);
  ASSERT_TRUE(profiler.deviceClock());
  TrainRun r = train(plan, true, 2, dev.get(), true, &profiler);
  ASSERT_EQ(r.error, "");
  int64_t runs = 0;
  for (const PlanPhase &ph : plan.phases)
    runs += 2 * ph.runsPerStep;
  ASSERT_EQ(int64_t(profiler.runs().size()), runs);
  for (const Profiler::Run &r : profiler.runs()) {
    const PlanPhase &ph = *plan.findPhase(r.phase);
    double first = 1e300, last = -1, previous = -1;
    for (const PlanOp &op : ph.ops) {
      const Profiler::OpSpan &span = r.ops.at(size_t(op.index));
      ASSERT_GE(span.start, 0) << "op " << op.index << " has no span";
      EXPECT_LE(span.start, span.end) << "op " << op.index;
      EXPECT_GE(span.start, previous) << "op " << op.index;
      previous = span.start;
      first = std::min(first, span.start);
      last = std::max(last, span.end);
    }
    EXPECT_EQ(r.start, first);
    EXPECT_EQ(r.end, last);
  }
  // A device fusing the adam_update ops (the CUDA device's default): the
  // fused call, issued after the last of them was deferred, is the first
  // one's span; the others' are what their deferral took (empty on a GPU).
  CpuDeviceOptions fusing = timed;
  fusing.fuseAdam = true;
  auto fused = makeCpuDevice(fusing);
  Profiler fusedClock;
  fusedClock.useDeviceClock(*fused);
  ASSERT_EQ(train(plan, true, 2, fused.get(), true, &fusedClock).error, "");
  int64_t optimizerRuns = 0;
  for (const Profiler::Run &r : fusedClock.runs()) {
    if (r.phase != PhaseKind::OptimizerStep)
      continue;
    ++optimizerRuns;
    std::vector<const Profiler::OpSpan *> adam;
    for (const PlanOp &op : plan.findPhase(r.phase)->ops)
      if (op.kind == OpKind::AdamUpdate)
        adam.push_back(&r.ops.at(size_t(op.index)));
    ASSERT_GT(adam.size(), 1u);
    for (size_t i = 1; i < adam.size(); ++i)
      EXPECT_GE(adam[0]->start, adam[i]->end) << "adam op " << i;
    EXPECT_GT(adam[0]->end, adam[0]->start);
  }
  EXPECT_EQ(optimizerRuns, 2);
  // Threads per stream: the profiler cannot hand out slots from them.
  auto threaded = makeCpuDevice(CpuDeviceOptions{false, false, nullptr, true});
  Profiler hostClock;
  hostClock.useDeviceClock(*threaded);
  EXPECT_FALSE(hostClock.deviceClock());
}

// At one rank on the CPU a stream of nothing but collectives and waits (a
// local copy each) runs on the compute stream, in program order; a stream
// with other work (a copy) keeps its thread, and at two ranks, or on a
// device that issues from one thread anyway, nothing moves.
TEST(PackParamGradients, EachRanksBlockHoldsItsChunkOfEveryGradient) {
  // Gradients of 9, 4 and 7 f32 over 3 ranks (shards of 3, 2 and 3; the
  // last rank of the second gets none, of the third one): block r's slot
  // of gradient k must hold elements [r s_k, (r + 1) s_k) of it, zeros past
  // its end, whatever the buffer held before.
  auto dev = makeCpuDevice();
  std::vector<int64_t> numels = {9, 4, 7};
  const int64_t ranks = 3;
  std::vector<ParamGradient> params;
  std::vector<std::vector<float>> grads;
  std::vector<const void *> data;
  for (int64_t n : numels) {
    params.push_back({{n, ranks}, 4});
    grads.emplace_back(size_t(n));
    std::iota(grads.back().begin(), grads.back().end(),
              float(100 * grads.size()));
  }
  for (const std::vector<float> &g : grads)
    data.push_back(g.data());
  WorkspaceLayout ws;
  ParamReduceScatterParts parts = reduceScatterParamParts(ws, params);
  ASSERT_TRUE(parts.packed());
  std::vector<float> send(size_t(parts.blockElements * ranks), -1.0f);
  packParamGradients(*dev, reinterpret_cast<char *>(send.data()), parts, params,
                     data);
  for (int64_t r = 0; r < ranks; ++r)
    for (size_t k = 0; k < numels.size(); ++k) {
      int64_t s = (numels[k] + ranks - 1) / ranks;
      ASSERT_GE(parts.slots[k], 0);
      for (int64_t j = 0; j < parts.slotElements[k]; ++j) {
        int64_t element = r * s + j;
        float want =
            j < s && element < numels[k] ? grads[k][size_t(element)] : 0.0f;
        EXPECT_EQ(send[size_t(r * parts.blockElements + parts.slots[k] + j)],
                  want)
            << "rank " << r << ", gradient " << k << ", element " << j;
      }
    }
}

TEST(PreparedPhase, OneRankRunsCollectiveStreamsOnTheComputeStream) {
  auto op = [](int64_t index, OpKind kind, int64_t stream,
               std::string collective = "") {
    PlanOp o;
    o.index = index;
    o.kind = kind;
    o.attrs = defaultAttrs(kind);
    o.stream = stream;
    o.collective = std::move(collective);
    return o;
  };
  PlanPhase ph;
  ph.ops = {op(0, OpKind::ReduceScatterStart, 2, "reduce_scatter"),
            op(1, OpKind::Wait, 0),
            op(2, OpKind::CopyStart, 3),
            op(3, OpKind::Wait, 3),
            op(4, OpKind::AllGatherStart, 1, "all_gather"),
            op(5, OpKind::Wait, 1)};
  auto streamsOf = [&](int64_t ws, bool threadPerStream) {
    PreparedPhase p =
        PreparedPhase::prepare(ph, nullptr, 0, ws, false, threadPerStream);
    std::vector<int64_t> ids;
    for (const auto &[id, ops] : p.streams)
      ids.push_back(id);
    return std::make_pair(ids, p.streamOf);
  };
  auto [ids, streamOf] = streamsOf(1, true);
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(streamOf.at(0), 0);
  EXPECT_EQ(streamOf.at(4), 0);
  EXPECT_EQ(streamOf.at(5), 0);
  EXPECT_EQ(streamOf.at(2), 3);
  EXPECT_EQ(streamsOf(2, true).first, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(streamsOf(1, false).first, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(Executor, MeasuredPeakMatchesThePrediction) {
  TrainRun r = train(tinyPlan(), true, 2);
  ASSERT_EQ(r.error, "");
  // No more than the plan, and at least 98% of it: issue #19's bound, the
  // same as zerorun_e2e.py's (docs/zerorun.md, "Memory"); not a rounding
  // tolerance. Observed: equal to the byte (2,642,176 bytes).
  EXPECT_LE(r.measured, r.predicted);
  EXPECT_GE(double(r.measured), 0.98 * double(r.predicted));
}

// The counting allocator sees the device memory itself: the plan's tensors
// (persistent state and the whole arena) at exactly the predicted peak,
// nothing unplanned, and the kernels' scratch apart, outside the plan.
TEST(Executor, AllocatorPeakIsThePredictionAndScratchIsNamedApart) {
  TrainRun r = train(tinyPlan(), true, 2);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.allocated.tensorPeak, r.predicted);
  EXPECT_EQ(r.allocated.peakOf(MemoryUse::PlannedTensors), r.predicted);
  EXPECT_EQ(r.allocated.peakOf(MemoryUse::UnplannedWorkspace), 0);
  EXPECT_GT(r.allocated.peakOf(MemoryUse::KernelScratch), 0);
  EXPECT_GE(r.allocated.totalPeak, r.allocated.tensorPeak);
  // Everything is released with the executor.
  EXPECT_EQ(deviceMemory().counts().of(MemoryUse::PlannedTensors), 0);
  EXPECT_EQ(deviceMemory().counts().of(MemoryUse::KernelScratch), 0);
}

TEST(MemoryCounter, KeepsPeaksByUseAndOfTheTensors) {
  MemoryCounter c;
  c.allocated(MemoryUse::PlannedTensors, 100);
  c.allocated(MemoryUse::KernelScratch, 50);
  c.released(MemoryUse::KernelScratch, 50);
  c.allocated(MemoryUse::UnplannedWorkspace, 30);
  c.released(MemoryUse::UnplannedWorkspace, 30);
  MemoryCounts k = c.counts();
  EXPECT_EQ(k.tensorPeak, 130);
  EXPECT_EQ(k.totalPeak, 150);
  EXPECT_EQ(k.peakOf(MemoryUse::KernelScratch), 50);
  EXPECT_EQ(k.of(MemoryUse::PlannedTensors), 100);
  c.resetPeaks();
  EXPECT_EQ(c.counts().tensorPeak, 100);
  EXPECT_EQ(c.counts().peakOf(MemoryUse::KernelScratch), 0);
  EXPECT_EQ(memoryUseName(MemoryUse::CollectiveStaging), "collective_staging");
}

TEST(Executor, AFailingOpOnAnotherStreamStopsTheStepWithItsError) {
  for (bool threads : {true, false}) {
    Plan plan = tinyPlan();
    PlanOp *broken = nullptr;
    for (PlanOp &op : plan.phases[0].ops)
      if (op.kind == OpKind::ReduceScatterStart && op.stream != 0) {
        broken = &op;
        break;
      }
    ASSERT_NE(broken, nullptr);
    std::get<ReduceScatterAttrs>(broken->attrs).offsets.clear();
    // `broken` points into `plan`, which train() takes and frees.
    int64_t brokenIndex = broken->index;
    TrainRun r = train(std::move(plan), threads, 1, nullptr, /*join=*/false);
    EXPECT_NE(r.error.find("op " + std::to_string(brokenIndex) +
                           ": reduce_scatter needs one target and offset "
                           "per input"),
              std::string::npos)
        << r.error;
    EXPECT_TRUE(r.losses.empty());
  }
}

namespace {

/// A kernel set that records which kernels ran, in order ("a+b" for a
/// composite op such as moe_experts), for the dispatch table test.
struct RecordingKernels {
  std::string ran;
#define ZEROC_RECORD_KERNEL(name)                                              \
  template <typename... Args> cpu::Status name(Args &&...) {                   \
    ran += (ran.empty() ? "" : "+") + std::string(#name);                      \
    return {};                                                                 \
  }
  ZEROC_MODEL_KERNELS(ZEROC_RECORD_KERNEL)
#undef ZEROC_RECORD_KERNEL
};

} // namespace

// Every model op kind of the plan format has a kernel (or, for the mixture
// of experts, a chain of kernels) in the one dispatch both devices use, and
// nothing else does: adding a kind to PlanOps.h without a kernel fails here
// (and, through -Wswitch, at compile time).
TEST(Dispatch, EveryModelOpKindHasAKernel) {
  cpu::Tensor scratch{nullptr, DType::F32, {1, 1, 1}};
  std::vector<char> workspace(4096);
  auto any = [&](size_t) -> const cpu::Tensor & { return scratch; };
  std::set<std::string> kernels;
  for (OpKind kind : kAllOpKinds) {
    SCOPED_TRACE(opKindName(kind));
    PlanOp op;
    op.kind = kind;
    op.attrs = defaultAttrs(kind);
    op.inputs = {0, 1, 2, 3, 4, 5};
    op.outputs = {0, 1, 2};
    RecordingKernels k;
    EXPECT_LE(modelOpScratchBytes(op, any, any), int64_t(workspace.size()));
    // The local experts take the dispatch exchange's counts from the
    // executor: none received here.
    std::vector<int64_t> noRows = {0};
    StepContext step;
    step.expertRows = &noRows;
    std::optional<cpu::Status> status =
        runModelOp(k, op, any, any, step, workspace.data());
    if (status) {
      EXPECT_TRUE(status->ok()) << status->error;
    }
    EXPECT_EQ(status.has_value(), isModelOp(kind));
    EXPECT_EQ(!k.ran.empty(), isModelOp(kind));
    if (isModelOp(kind)) {
      EXPECT_TRUE(kernels.insert(k.ran).second)
          << "two kinds run kernel " << k.ran;
    }
  }
}

// The local experts without the exchange's counts refuse to guess them.
TEST(Dispatch, LocalExpertsNeedTheExchangedCounts) {
  cpu::Tensor scratch{nullptr, DType::F32, {1, 1, 1}};
  std::vector<char> workspace(4096);
  auto any = [&](size_t) -> const cpu::Tensor & { return scratch; };
  for (OpKind kind :
       {OpKind::MoeLocalExperts, OpKind::MoeLocalExpertsBackward}) {
    PlanOp op;
    op.kind = kind;
    op.attrs = defaultAttrs(kind);
    op.inputs = {0, 1, 2, 3, 4, 5};
    op.outputs = {0, 1, 2, 3};
    RecordingKernels k;
    std::optional<cpu::Status> status =
        runModelOp(k, op, any, any, StepContext{}, workspace.data());
    ASSERT_TRUE(status);
    EXPECT_NE(status->error.find("no row counts of the dispatch exchange"),
              std::string::npos)
        << status->error;
    EXPECT_TRUE(k.ran.empty());
  }
}

//===----------------------------------------------------------------------===//
// Expert parallelism's split ops against the fused experts
//===----------------------------------------------------------------------===//

namespace {

/// A float tensor with its storage.
struct Owned {
  std::vector<float> data;
  cpu::Tensor t;
  Owned(std::vector<int64_t> shape, DType dtype = DType::F32) {
    t.dtype = dtype;
    t.shape = std::move(shape);
    data.assign(size_t(t.numel()), 0.0f); // i32 fits a float's 4 bytes.
    t.data = data.data();
  }
  float *f() { return data.data(); }
  int32_t *i() { return reinterpret_cast<int32_t *>(data.data()); }
};

/// Runs model op `kind` on `in` into `out` through the CPU kernels.
void runOp(OpKind kind, PlanOpAttrs attrs, std::vector<cpu::Tensor> in,
           std::vector<cpu::Tensor> out, const StepContext &step = {}) {
  PlanOp op;
  op.kind = kind;
  op.attrs = std::move(attrs);
  for (size_t i = 0; i < in.size(); ++i)
    op.inputs.push_back(int64_t(i));
  for (size_t i = 0; i < out.size(); ++i)
    op.outputs.push_back(int64_t(100 + i));
  std::vector<char> ws(
      size_t(std::max<int64_t>(modelOpScratchBytes(op, in, out), 1)));
  CpuKernels k;
  std::optional<cpu::Status> status =
      runModelOp(k, op, in, out, step, ws.data());
  ASSERT_TRUE(status) << opKindName(kind);
  ASSERT_TRUE(status->ok()) << opKindName(kind) << ": " << status->error;
}

/// The rows [first, first + count) of a [rows, h] tensor, as a copy.
std::vector<float> rowsCopy(const float *p, int64_t first, int64_t count,
                            int64_t h) {
  return std::vector<float>(p + first * h, p + (first + count) * h);
}

void expectNear(const std::vector<float> &got, const std::vector<float> &want,
                const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 1e-30f;
  for (float w : want)
    scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-6f * scale) << what << "[" << i << "]";
}

/// Two simulated ranks of an expert-parallel group of 2 (4 experts, 2 each)
/// run the split ops, the all-to-alls done by hand as zerorun's
/// ExpertExchange does them; each rank's output, input and routing-weight
/// gradients and each expert's weight gradients equal the fused
/// moe_experts (and its backward) on each rank's tokens, the weight
/// gradients summed over both (the expert-data-parallel reduction being
/// the executor's). `route(rank, token, slot)` is the router's choice.
void splitEqualsFused(const std::function<int32_t(int, int, int)> &route,
                      bool rank1ReceivesNothing = false) {
  const int64_t T = 6, k = 2, h = 4, I = 5, E = 4, ep = 2, local = E / ep;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](Owned &o) {
    for (float &v : o.data)
      v = u(gen);
  };
  Owned w1({E, I, h}), w3({E, I, h}), w2({E, h, I});
  fill(w1), fill(w3), fill(w2);
  auto expertsOf = [&](Owned &w, int64_t q) {
    cpu::Tensor v = w.t;
    v.shape[0] = local;
    v.data = w.f() + q * local * w.t.shape[1] * w.t.shape[2];
    return v;
  };
  struct Rank {
    Owned x{{1, 6, 4}}, weights{{1, 6, 2}}, indices{{1, 6, 2}, DType::I32},
        dy{{1, 6, 4}};
    Owned y{{1, 6, 4}}, saved{{12 * (5 + 5 + 4)}};
    Owned dx{{1, 6, 4}}, dweights{{1, 6, 2}}, dw1{{4, 5, 4}}, dw3{{4, 5, 4}},
        dw2{{4, 4, 5}};
  } ranks[2];
  MoeExpertCountAttrs count{E};
  for (int r = 0; r < 2; ++r) {
    Rank &R = ranks[r];
    fill(R.x), fill(R.dy);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) {
        R.weights.f()[t * k + j] = 0.25f + 0.5f * float(j);
        R.indices.i()[t * k + j] = route(r, t, j);
      }
    runOp(OpKind::MoeExperts, MoeExpertsAttrs{},
          {R.x.t, R.weights.t, R.indices.t, w1.t, w3.t, w2.t},
          {R.y.t, R.saved.t});
    runOp(
        OpKind::MoeExpertsBackward, NoAttrs{},
        {R.x.t, R.weights.t, R.indices.t, w1.t, w3.t, w2.t, R.dy.t, R.saved.t},
        {R.dx.t, R.dweights.t, R.dw1.t, R.dw3.t, R.dw2.t});
  }

  // Dispatch: each rank's rows by expert; what each sends to each expert.
  std::vector<Owned> rows;
  std::vector<std::vector<int64_t>> sent(2, std::vector<int64_t>(E, 0));
  for (int r = 0; r < 2; ++r) {
    rows.emplace_back(std::vector<int64_t>{T * k, h});
    runOp(OpKind::MoeDispatch, count, {ranks[r].x.t, ranks[r].indices.t},
          {rows[r].t});
    for (int64_t p = 0; p < T * k; ++p)
      ++sent[r][size_t(ranks[r].indices.i()[p])];
  }
  auto firstRow = [&](int r, int64_t e) {
    return std::accumulate(sent[r].begin(), sent[r].begin() + e, int64_t(0));
  };
  // Rank q receives, source by source, its experts' rows; the planned
  // receive buffer holds every row (R = ep T k).
  const int64_t R = ep * T * k;
  std::vector<Owned> recv, out, saved, dout, drows;
  std::vector<std::vector<int64_t>> counts(2);
  Owned dw1({E, I, h}), dw3({E, I, h}), dw2({E, h, I});
  for (int q = 0; q < 2; ++q) {
    recv.emplace_back(std::vector<int64_t>{R, h});
    int64_t at = 0;
    for (int s = 0; s < 2; ++s)
      for (int64_t l = 0; l < local; ++l) {
        int64_t e = q * local + l, n = sent[s][size_t(e)];
        counts[q].push_back(n);
        std::vector<float> block = rowsCopy(rows[s].f(), firstRow(s, e), n, h);
        std::copy(block.begin(), block.end(), recv[q].f() + at * h);
        at += n;
      }
    out.emplace_back(std::vector<int64_t>{R, h});
    saved.emplace_back(std::vector<int64_t>{R * 2 * I});
    StepContext step;
    step.expertRows = &counts[q];
    runOp(OpKind::MoeLocalExperts, MoeLocalExpertsAttrs{E, k, {}},
          {recv[q].t, expertsOf(w1, q), expertsOf(w3, q), expertsOf(w2, q)},
          {out[q].t, saved[q].t}, step);
  }
  // Combine: each source gets its rows back, in dispatch order.
  auto back = [&](std::vector<Owned> &fromExperts, int s) {
    Owned mine({T * k, h});
    int64_t at = 0;
    for (int q = 0; q < 2; ++q) {
      int64_t from = 0;
      for (int s2 = 0; s2 < s; ++s2)
        for (int64_t l = 0; l < local; ++l)
          from += counts[q][size_t(s2 * local + l)];
      int64_t n = 0;
      for (int64_t l = 0; l < local; ++l)
        n += counts[q][size_t(s * local + l)];
      std::vector<float> block = rowsCopy(fromExperts[q].f(), from, n, h);
      std::copy(block.begin(), block.end(), mine.f() + at * h);
      at += n;
    }
    return mine;
  };
  std::vector<Owned> combined;
  for (int s = 0; s < 2; ++s) {
    combined.push_back(back(out, s));
    Owned y({1, T, h});
    runOp(OpKind::MoeCombine, count,
          {combined[s].t, ranks[s].indices.t, ranks[s].weights.t}, {y.t});
    expectNear(y.data, ranks[s].y.data, "y");
  }

  // Backward: the combine's gradient to the experts, as the dispatch.
  std::vector<Owned> drowsOut;
  for (int s = 0; s < 2; ++s) {
    drowsOut.emplace_back(std::vector<int64_t>{T * k, h});
    Owned dweights({1, T, k});
    runOp(
        OpKind::MoeCombineBackward, count,
        {ranks[s].dy.t, combined[s].t, ranks[s].weights.t, ranks[s].indices.t},
        {drowsOut[s].t, dweights.t});
    expectNear(dweights.data, ranks[s].dweights.data, "dweights");
  }
  for (int q = 0; q < 2; ++q) {
    dout.emplace_back(std::vector<int64_t>{R, h});
    int64_t at = 0;
    for (int s = 0; s < 2; ++s)
      for (int64_t l = 0; l < local; ++l) {
        int64_t e = q * local + l, n = sent[s][size_t(e)];
        std::vector<float> block =
            rowsCopy(drowsOut[s].f(), firstRow(s, e), n, h);
        std::copy(block.begin(), block.end(), dout[q].f() + at * h);
        at += n;
      }
    drows.emplace_back(std::vector<int64_t>{R, h});
    StepContext step;
    step.expertRows = &counts[q];
    runOp(OpKind::MoeLocalExpertsBackward, NoAttrs{},
          {recv[q].t, expertsOf(w1, q), expertsOf(w3, q), expertsOf(w2, q),
           dout[q].t, saved[q].t},
          {drows[q].t, expertsOf(dw1, q), expertsOf(dw3, q), expertsOf(dw2, q)},
          step);
  }
  for (int s = 0; s < 2; ++s) {
    Owned mine = back(drows, s);
    Owned dx({1, T, h});
    runOp(OpKind::MoeCombine, count, {mine.t, ranks[s].indices.t}, {dx.t});
    expectNear(dx.data, ranks[s].dx.data, "dx");
  }
  if (rank1ReceivesNothing) {
    EXPECT_EQ(counts[1], std::vector<int64_t>(size_t(ep * local), 0));
    for (Owned *dw : {&dw1, &dw3, &dw2})
      for (size_t i = dw->data.size() / 2; i < dw->data.size(); ++i)
        ASSERT_EQ(dw->data[i], 0.0f);
  }
  // Each expert's weight gradient: both ranks' tokens.
  for (auto [got, a, b] :
       {std::make_tuple(&dw1, &ranks[0].dw1, &ranks[1].dw1),
        std::make_tuple(&dw3, &ranks[0].dw3, &ranks[1].dw3),
        std::make_tuple(&dw2, &ranks[0].dw2, &ranks[1].dw2)}) {
    std::vector<float> want(a->data.size());
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = a->data[i] + b->data[i];
    expectNear(got->data, want, "dw");
  }
}

} // namespace

TEST(ExpertParallelOps, SplitEqualsFusedExperts) {
  // Tokens spread over all four experts, the two ranks differently.
  splitEqualsFused([](int r, int t, int j) {
    int first = (3 * t + r) % 4;
    return j == 0 ? first : (first + 1 + t % 3) % 4;
  });
}

TEST(ExpertParallelOps, RankWhoseExpertsReceiveNoTokens) {
  // Every token of both ranks routes to experts 0 and 1: rank 1's experts
  // (2 and 3) receive no row; their outputs are none, their weight
  // gradients zero, and the other rank's results those of the fused op.
  splitEqualsFused([](int, int t, int j) { return (t + j) % 2; }, true);
}

//===----------------------------------------------------------------------===//
// Arrival skew (exec/ArrivalSkew.h)
//===----------------------------------------------------------------------===//

TEST(ArrivalSkew, WhoArrivedLastAndWhatItCost) {
  // Three ranks, two collectives. At the first rank 1 arrives last (1.3 s),
  // 0.2 s after rank 2: its cost; ranks 0 and 2 wait 0.3 and 0.2 s. At the
  // second rank 2 arrives 0.5 s after the other two.
  std::vector<std::vector<double>> arrivals = {
      {1.0, 2.0}, {1.3, 2.0}, {1.1, 2.5}};
  StepSkew s = skewFromLateness(arrivals, SkewMethod::Arrival, 0);
  EXPECT_EQ(s.collectives, 2);
  ASSERT_EQ(s.cost.size(), 3u);
  EXPECT_NEAR(s.cost[0], 0.0, 1e-12);
  EXPECT_NEAR(s.cost[1], 0.2, 1e-12);
  EXPECT_NEAR(s.cost[2], 0.5, 1e-12);
  EXPECT_NEAR(s.waitForLast[0], 0.3 + 0.5, 1e-12);
  EXPECT_NEAR(s.waitForLast[1], 0.0 + 0.5, 1e-12);
  EXPECT_NEAR(s.waitForLast[2], 0.2 + 0.0, 1e-12);
  EXPECT_EQ(s.lastAt, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(s.slowestRank, 2);
  EXPECT_EQ(s.lastRank, (std::vector<int>{1, 2}));
  EXPECT_NEAR(s.myWait[0], 0.3, 1e-12);
  EXPECT_NEAR(s.myWait[1], 0.5, 1e-12);

  // Across hosts: each rank's wait from its post to the completion, here
  // at 1.35 s and 2.55 s everywhere. Minus the wait orders the ranks as
  // their arrivals do, shifted by the completion: the same figures.
  std::vector<std::vector<double>> minusWaits = {
      {-0.35, -0.55}, {-0.05, -0.55}, {-0.25, -0.05}};
  StepSkew w = skewFromLateness(minusWaits, SkewMethod::Wait, 0);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_NEAR(w.cost[r], s.cost[r], 1e-12);
    EXPECT_NEAR(w.waitForLast[r], s.waitForLast[r], 1e-12);
  }
  EXPECT_EQ(w.slowestRank, 2);
  EXPECT_STREQ(skewMethodName(w.method), "wait");

  // One rank: nobody waits, nothing costs.
  StepSkew alone = skewFromLateness({{1.0, 2.0}}, SkewMethod::Arrival, 0);
  EXPECT_EQ(alone.cost, (std::vector<double>{0.0}));
  EXPECT_EQ(alone.waitForLast, (std::vector<double>{0.0}));
}

TEST(ArrivalSkew, AStragglerIsSlowestInMostStepsAndCostsMoreThanFivePercent) {
  auto step = [](int slowest, double cost) {
    StepSkew s;
    s.cost = {0.0, 0.0};
    s.cost[size_t(slowest)] = cost;
    s.slowestRank = slowest;
    return s;
  };
  // Rank 1 slowest in 3 of 4 one-second steps, 0.1 s each time.
  StragglerTally t;
  for (int i = 0; i < 3; ++i)
    t.add(step(1, 0.1), 1.0);
  t.add(step(0, 0.01), 1.0);
  StragglerVerdict v = t.slowest();
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.slowestSteps, 3);
  EXPECT_EQ(v.steps, 4);
  EXPECT_NEAR(v.costPerStep, 0.3 / 4, 1e-12);
  EXPECT_NEAR(v.stepSeconds, 1.0, 1e-12);
  EXPECT_TRUE(t.isStraggler(v));
  // Half the steps is not "persistently".
  StragglerTally half;
  half.add(step(1, 0.2), 1.0);
  half.add(step(0, 0.0), 1.0);
  EXPECT_FALSE(half.isStraggler(half.slowest()));
  // Slowest every time, but 4% of the step: noise, not a straggler.
  StragglerTally cheap;
  for (int i = 0; i < 4; ++i)
    cheap.add(step(1, 0.04), 1.0);
  EXPECT_EQ(cheap.slowest().rank, 1);
  EXPECT_FALSE(cheap.isStraggler(cheap.slowest()));
  // No step: no verdict.
  EXPECT_EQ(StragglerTally().slowest().rank, -1);
}
