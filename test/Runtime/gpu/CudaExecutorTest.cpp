//===- CudaExecutorTest.cpp - Whole training steps on the GPU vs the CPU --===//
//
// The executor with the CUDA device and NCCL (world size 1, no MPI) trains
// the checked-in tiny plans (test/Runtime/Inputs; ExecutorTest.cpp says how
// they were made) to the CPU executor's losses, and its measured peak
// matches the plan's prediction. Needs no compiler, so it runs on a GPU
// machine with a runtime-only build; skips where no GPU is usable.
//
//===----------------------------------------------------------------------===//

#include "comm/Communicator.h"
#include "comm/NcclCommunicator.h"
#include "cpu/Optimizer.h"
#include "data/DataLoader.h"
#include "exec/CudaBackend.h"
#include "exec/Device.h"
#include "exec/Executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <ostream>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

struct Trained {
  std::vector<double> losses;
  int64_t measured = 0, predicted = 0;
};

Trained train(const std::string &input, Communicator &comm, Device *device,
              int steps) {
  Trained t;
  // One counter per process: this run's high-water marks from here.
  deviceMemory().resetPeaks();
  auto plan =
      loadPlan(std::string(ZEROC_SOURCE_DIR) + "/test/Runtime/Inputs/" + input);
  EXPECT_TRUE(bool(plan)) << plan.error().str();
  if (!plan)
    return t;
  ExecutorOptions options;
  options.device = device;
  auto ex = Executor::create(std::move(*plan), comm, options);
  EXPECT_TRUE(bool(ex)) << ex.error().message;
  if (!ex)
    return t;
  const Plan &p = (*ex)->plan();
  BatchShape shape;
  shape.gradientAccumulation = p.gradientAccumulationSteps;
  shape.microBatch = p.model.microBatch;
  shape.seqLen = p.model.seqLen;
  auto data = DataLoader::synthetic(0, shape, (*ex)->vocabSize());
  for (int s = 0; s < steps; ++s) {
    auto step = (*ex)->runStep(*data, s);
    EXPECT_TRUE(bool(step)) << step.error().message;
    if (!step)
      break;
    t.losses.push_back(step->loss);
  }
  t.measured = (*ex)->allocatedMemory().tensorPeak;
  t.predicted = (*ex)->predictedPeakBytes();
  if (device && device->memoryInUseAtStart() >= 0)
    std::cout << "device memory outside the counting allocator: "
              << device->memoryInUse() - device->memoryInUseAtStart() -
                     (*ex)->allocatedMemory().total()
              << " bytes (cudaMemGetInfo)\n";
  return t;
}

struct PlanCase {
  const char *input;
  double tolerance; ///< Relative, on each step's loss.
};
void PrintTo(const PlanCase &c, std::ostream *os) { *os << c.input; }

class CudaExecutor : public ::testing::TestWithParam<PlanCase> {};

TEST_P(CudaExecutor, TrainsToTheCpuLossesWithThePlannedMemory) {
  auto [input, tolerance] = GetParam();
  std::string why;
  // The backend linked in (libzerorun-cuda.so's objects), not dlopened.
  std::unique_ptr<Device> gpu = zeroc_cuda_backend_v1()->makeDevice(why);
  if (!gpu)
    GTEST_SKIP() << why;
  LocalCommunicator cpuComm;
  Trained cpu = train(input, cpuComm, nullptr, 3);
  auto nccl = NcclCommunicator::world();
  Trained cuda = train(input, *nccl, gpu.get(), 3);
  ASSERT_EQ(cpu.losses.size(), 3u);
  ASSERT_EQ(cuda.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LE(std::abs(cuda.losses[i] - cpu.losses[i]) /
                  std::abs(cpu.losses[i]),
              tolerance)
        << "step " << i + 1 << ": cpu " << cpu.losses[i] << ", cuda "
        << cuda.losses[i];
  // Issue #19's memory bound, as in ExecutorTest: not a rounding tolerance.
  EXPECT_LE(cuda.measured, cuda.predicted);
  EXPECT_GE(double(cuda.measured), 0.98 * double(cuda.predicted));
}

// f32 stage 3 on three streams; bf16 stage 2 with the optimizer on the host
// (host Adam, reduced gradients landing in pinned memory). Loss tolerances,
// relative: f32 sides differ only in summation order, a few hundred u
// (2^-24) per kernel compounded over the layers and 3 steps, so 1e-4 is
// about 1700 u. In bf16 both sides round every stored tensor (u = 2^-8,
// docs/gpu-kernels.md) from f32 values that differ in their last bits, so
// some elements round the other way, by one bf16 ulp; 3e-2 is about 8 bf16
// u. Neither is derived tightly, and neither was measured (written without
// a GPU): the run should print the observed differences. The Llama plan: `zeroc
// gen --preset tiny-llama
// --seq-len 8 --micro-batch 2 --dtype bf16`, compiled at world size 1 with
// {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
// "bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
// "overlap_comm": true, "reduce_bucket_size": 3000, "offload_optimizer":
// {"device": "cpu"}}}.
INSTANTIATE_TEST_SUITE_P(
    TinyPlans, CudaExecutor,
    ::testing::Values(PlanCase{"tiny-gpt2-stage3-ws1.json", 1e-4},
                      PlanCase{"tiny-llama-bf16-stage2-offload-ws1.json",
                               3e-2}),
    [](const auto &info) {
      return std::string(info.index == 0 ? "Gpt2F32Stage3"
                                         : "LlamaBf16Stage2Offload");
    });

/// ZEROC_CUDA_ADAM and ZEROC_CUDA_CLIP for the devices made while it
/// lives (the device reads them when made); unset again after.
struct KernelChoices {
  KernelChoices(const char *adam, const char *clip) {
    setenv("ZEROC_CUDA_ADAM", adam, 1);
    setenv("ZEROC_CUDA_CLIP", clip, 1);
  }
  ~KernelChoices() {
    unsetenv("ZEROC_CUDA_ADAM");
    unsetenv("ZEROC_CUDA_CLIP");
  }
};

// The default kernels (docs/gpu-kernels.md, "Fused Adam, one-pass
// clipping, pinned staging") against the per-tensor ones on the same GPU,
// three steps of the f32 stage-3 plan (36 adam_update ops, one
// clip_grad_norm): the fused Adam does each element's operations in the
// same order, so the losses are the same bits; the one-pass sum of squares
// adds in another order, so the clip coefficient may differ in its last
// bit: 1e-6 relative (f32 u = 6e-8, through three steps). Passed on an
// H100 (bench/RESULTS.md).
TEST(CudaExecutorKernels, FusedAdamAndOnePassClipTrainAsThePerTensorKernels) {
  std::string why;
  std::unique_ptr<Device> plain;
  {
    KernelChoices choose("tensor", "tensor");
    plain = zeroc_cuda_backend_v1()->makeDevice(why);
  }
  if (!plain)
    GTEST_SKIP() << why;
  auto nccl = NcclCommunicator::world();
  const char *input = "tiny-gpt2-stage3-ws1.json";
  Trained expected = train(input, *nccl, plain.get(), 3);
  plain.reset();
  ASSERT_EQ(expected.losses.size(), 3u);
  {
    KernelChoices choose("fused", "tensor");
    std::unique_ptr<Device> fused = zeroc_cuda_backend_v1()->makeDevice(why);
    ASSERT_TRUE(fused) << why;
    Trained t = train(input, *nccl, fused.get(), 3);
    ASSERT_EQ(t.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(t.losses[i], expected.losses[i])
          << "fused Adam, step " << i + 1;
    EXPECT_EQ(t.measured, expected.measured);
  }
  {
    KernelChoices choose("fused", "grid");
    std::unique_ptr<Device> both = zeroc_cuda_backend_v1()->makeDevice(why);
    ASSERT_TRUE(both) << why;
    Trained t = train(input, *nccl, both.get(), 3);
    ASSERT_EQ(t.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LE(std::abs(t.losses[i] - expected.losses[i]) /
                    std::abs(expected.losses[i]),
                1e-6)
          << "fused Adam and one-pass clip, step " << i + 1;
  }
}

// The bf16 stage-2 offload plan trained 3 steps with kernel choice `var` set
// to `first`, then to `second`; nothing without a GPU.
using OffloadRuns = std::pair<Trained, Trained>;
std::optional<OffloadRuns> trainBothWays(const char *var, const char *first,
                                         const char *second) {
  const char *input = "tiny-llama-bf16-stage2-offload-ws1.json";
  OffloadRuns runs;
  std::unique_ptr<NcclCommunicator> nccl; // Once a device is made.
  for (auto [value, into] :
       {std::pair{first, &runs.first}, std::pair{second, &runs.second}}) {
    std::string why;
    setenv(var, value, 1);
    std::unique_ptr<Device> device = zeroc_cuda_backend_v1()->makeDevice(why);
    unsetenv(var);
    if (!device)
      return std::nullopt;
    if (!nccl)
      nccl = NcclCommunicator::world();
    *into = train(input, *nccl, device.get(), 3);
    EXPECT_EQ(into->losses.size(), 3u) << var << "=" << value;
    into->losses.resize(3);
  }
  return runs;
}

// ZEROC_CUDA_HOST_STAGING=pinned (the default): the offloaded Adam's host
// copies in reused pinned buffers, the same bytes as pageable staging's
// fresh vectors, so the same losses to the bit on the bf16 stage-2 offload
// plan.
TEST(CudaExecutorKernels, PinnedStagingTrainsAsPageableStaging) {
  std::optional<OffloadRuns> runs =
      trainBothWays("ZEROC_CUDA_HOST_STAGING", "pageable", "pinned");
  if (!runs)
    GTEST_SKIP() << "no GPU";
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(runs->second.losses[i], runs->first.losses[i])
        << "step " << i + 1;
}

// ZEROC_CUDA_HOST_PASSES=cpu (opt-in): clipping and zeroing the offloaded
// gradient partition on the host's cores (the CPU kernels, after the
// stream's work) instead of device kernels over pinned memory. The norm is
// then the CPU executor's sum; the losses are the device kernels' within
// the bf16 plan's tolerance above (3e-2 relative), and the plan's memory.
TEST(CudaExecutorKernels, HostPassesOnTheCpuTrainAsTheDeviceKernels) {
  std::optional<OffloadRuns> runs =
      trainBothWays("ZEROC_CUDA_HOST_PASSES", "device", "cpu");
  if (!runs)
    GTEST_SKIP() << "no GPU";
  const Trained &expected = runs->first, &t = runs->second;
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LE(std::abs(t.losses[i] - expected.losses[i]) /
                  std::abs(expected.losses[i]),
              3e-2)
        << "step " << i + 1 << ": device kernels " << expected.losses[i]
        << ", host passes " << t.losses[i];
  EXPECT_LE(t.measured, t.predicted);
}

// The same choice at the device: a pass over host memory runs the CPU kernel
// once the stream's queued work is done. A sum of squares taken right after
// an asynchronous copy into pinned memory sees the copied values, with the
// CPU kernel's bits; a pageable vector, which no device kernel may read,
// is summed, scaled and zeroed in place.
TEST(CudaExecutorKernels, HostPassesRunTheCpuKernelsAfterTheQueue) {
  std::string why;
  setenv("ZEROC_CUDA_HOST_PASSES", "cpu", 1);
  std::unique_ptr<Device> dev = zeroc_cuda_backend_v1()->makeDevice(why);
  unsetenv("ZEROC_CUDA_HOST_PASSES");
  if (!dev)
    GTEST_SKIP() << why;
  const int64_t n = int64_t(1) << 20, bytes = n * 4;
  std::vector<float> values(static_cast<size_t>(n));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = float(i % 1000) * 1e-3f - 0.5f;
  double want = cpu::sumOfSquares(Tensor{values.data(), DType::F32, {n}});
  char *onGpu = dev->allocate(bytes, true);
  char *pinned = dev->allocate(bytes, false);
  dev->fromHost(onGpu, values.data(), bytes);
  dev->copy(pinned, onGpu, bytes); // Queued, not waited for.
  EXPECT_EQ(dev->sumOfSquares(Tensor{pinned, DType::F32, {n}}), want);
  std::vector<float> pageable = values;
  Tensor p{pageable.data(), DType::F32, {n}};
  EXPECT_EQ(dev->sumOfSquares(p), want);
  EXPECT_EQ(dev->sumOfSquaresOf({p, p}), 2 * want);
  ASSERT_TRUE(dev->scaleInPlace(p, 2.0f).ok());
  EXPECT_EQ(pageable[7], 2 * values[7]);
  ASSERT_TRUE(dev->zeroTensor(p).ok());
  EXPECT_TRUE(std::all_of(pageable.begin(), pageable.end(),
                          [](float v) { return v == 0; }));
  dev->release(pinned, false);
  dev->release(onGpu, true);
}

// Device::hostTraffic: copies across PCIe by direction, fills of host
// memory, and kernels reading or writing pinned host memory in place (the
// epilogue adding into a host gradient partition, a fetch's cast, a norm
// over host gradients), by the bytes they touch; nothing for device-only
// work or the readback of a norm. What zerorun compares per step with the
// plan's figure (zeroc/Cost/CostModel.h, offloadTrafficPerStep).
TEST(CudaExecutorKernels, CountsWhatCrossesPcie) {
  std::string why;
  unsetenv("ZEROC_CUDA_HOST_PASSES"); // The device kernels over host memory.
  std::unique_ptr<Device> dev = zeroc_cuda_backend_v1()->makeDevice(why);
  if (!dev)
    GTEST_SKIP() << why;
  const int64_t n = int64_t(1) << 20, bytes = n * 4;
  char *a = dev->allocate(bytes, true), *b = dev->allocate(bytes, true);
  char *pinned = dev->allocate(bytes, false);
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  dev->fromHost(a, ones.data(), bytes);
  ASSERT_TRUE(dev->hostTraffic().has_value());
  HostTraffic before = *dev->hostTraffic();
  EXPECT_EQ(before.toDevice, bytes);
  EXPECT_EQ(before.toHost, 0);
  Tensor ta{a, DType::F32, {n}}, tb{b, DType::F32, {n / 2}},
      host{pinned, DType::F32, {n}};
  dev->copy(b, a, bytes);                      // Device to device: nothing.
  dev->copy(pinned, a, bytes);                 // To the host.
  dev->copy(a, pinned, bytes);                 // To the GPU.
  dev->zero(b, bytes);                         // Device memory: nothing.
  ASSERT_TRUE(dev->accumulate(host, ta).ok()); // Host read and written.
  Tensor half{b, DType::BF16, {n}};
  ASSERT_TRUE(dev->castTensor(host, half).ok());       // Host read.
  EXPECT_EQ(dev->sumOfSquares(ta), double(n));         // Readback not counted.
  EXPECT_EQ(dev->sumOfSquares(host), 4.0 * double(n)); // Host read.
  ASSERT_TRUE(dev->copyElements(host, 0, tb, 0, n / 2).ok()); // Half read.
  dev->zero(pinned, bytes); // A fill of host memory: written.
  dev->synchronize();
  HostTraffic after = *dev->hostTraffic();
  EXPECT_EQ(after.toDevice - before.toDevice,
            bytes + bytes + bytes + bytes + bytes / 2);
  EXPECT_EQ(after.toHost - before.toHost, bytes + bytes + bytes);
  dev->release(pinned, false);
  dev->release(b, true);
  dev->release(a, true);
}

// A packed stage-3 reduce-scatter's send buffer (Workspace.h) through
// cudaMemcpy2DAsync and cudaMemset2DAsync: the CPU device's bytes, over a
// buffer that held other bytes before, every one of which is written.
// Gradients of 9, 4 and 7 f32 over three ranks (whole chunks, a rank with
// none, a partial one) and one of 20,000 (80 KB, sent alone, skipped).
TEST(CudaExecutorKernels, PacksStageThreeGradientsAsTheCpu) {
  std::string why;
  std::unique_ptr<Device> cuda = zeroc_cuda_backend_v1()->makeDevice(why);
  if (!cuda)
    GTEST_SKIP() << why;
  std::unique_ptr<Device> cpu = makeCpuDevice();
  const int64_t ranks = 3;
  std::vector<ParamGradient> params;
  std::vector<std::vector<float>> grads;
  for (int64_t n : {9, 4, 20000, 7}) {
    params.push_back({{n, ranks}, 4});
    grads.emplace_back(size_t(n));
    for (size_t i = 0; i < grads.back().size(); ++i)
      grads.back()[i] = float(grads.size() * 1000 + i);
  }
  WorkspaceLayout ws;
  ParamReduceScatterParts parts = reduceScatterParamParts(ws, params);
  ASSERT_TRUE(parts.packed());
  int64_t sendBytes = parts.blockElements * ranks * 4;
  std::vector<float> before(size_t(sendBytes / 4), -7.0f);
  auto pack = [&](Device &dev) {
    std::vector<char *> onDevice;
    std::vector<const void *> from;
    for (const std::vector<float> &g : grads) {
      int64_t bytes = int64_t(g.size()) * 4;
      onDevice.push_back(dev.allocate(bytes, true));
      dev.fromHost(onDevice.back(), g.data(), bytes);
      from.push_back(onDevice.back());
    }
    char *send = dev.allocate(sendBytes, true);
    dev.fromHost(send, before.data(), sendBytes);
    packParamGradients(dev, send, parts, params, from);
    std::vector<float> out(before.size());
    dev.toHost(out.data(), send, sendBytes);
    dev.release(send, true);
    for (char *p : onDevice)
      dev.release(p, true);
    return out;
  };
  std::vector<float> want = pack(*cpu), got = pack(*cuda);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "element " << i << " of the send buffer";
  // The CPU's own layout is checked element by element in ExecutorTest
  // (PackParamGradients).
  EXPECT_EQ(std::count(want.begin(), want.end(), -7.0f), 0);
  EXPECT_EQ(parts.packedCount, 3);
}

TEST(CudaExecutorKernels, RejectsAnUnknownKernelChoice) {
  std::string why;
  if (!zeroc_cuda_backend_v1()->makeDevice(why))
    GTEST_SKIP() << why;
  {
    KernelChoices choose("multi", "tensor");
    EXPECT_FALSE(zeroc_cuda_backend_v1()->makeDevice(why));
    EXPECT_EQ(why, "ZEROC_CUDA_ADAM: expected fused or tensor, found 'multi'");
  }
  {
    KernelChoices choose("tensor", "fast");
    EXPECT_FALSE(zeroc_cuda_backend_v1()->makeDevice(why));
    EXPECT_EQ(why, "ZEROC_CUDA_CLIP: expected grid or tensor, found 'fast'");
  }
  setenv("ZEROC_CUDA_HOST_STAGING", "locked", 1);
  EXPECT_FALSE(zeroc_cuda_backend_v1()->makeDevice(why));
  unsetenv("ZEROC_CUDA_HOST_STAGING");
  EXPECT_EQ(why, "ZEROC_CUDA_HOST_STAGING: expected pinned or pageable, "
                 "found 'locked'");
  setenv("ZEROC_CUDA_HOST_PASSES", "host", 1);
  EXPECT_FALSE(zeroc_cuda_backend_v1()->makeDevice(why));
  unsetenv("ZEROC_CUDA_HOST_PASSES");
  EXPECT_EQ(why, "ZEROC_CUDA_HOST_PASSES: expected device or cpu, found "
                 "'host'");
}

} // namespace
