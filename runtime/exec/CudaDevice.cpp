//===- CudaDevice.cpp - Device memory, CUDA streams and kernels -----------===//
//
// The CUDA device of the executor (exec/Device.h). Each plan stream is a
// CUDA stream; one host thread issues every op in program order, binding
// to the op's stream first (StreamScheduling::OneIssuingThread). A
// dependency on an op of another stream is a CUDA event that op recorded
// (one event per op index, reused every phase run). Collectives are NCCL
// calls on the issuing stream (NcclCommunicator), and their epilogues
// (accumulating the received shard) follow in stream order. Persistent
// tensors on `host` are pinned memory that kernels read and write over PCIe
// (unified addressing); an Adam step whose states are on the host runs on
// the CPU (cpu::adamUpdate, vectorized and multi-threaded) after the
// stream's earlier work, as ZeRO-Offload does.
//
// Built only with the CUDA backend, into libzerorun-cuda.so, which zerorun
// opens for --device cuda (exec/CudaBackend.h); nothing here has run on a
// GPU yet (docs/zerorun.md, "GPU").
//
//===----------------------------------------------------------------------===//

#include "comm/Communicator.h"
#include "comm/MpiCommunicator.h"
#include "comm/NcclCommunicator.h"
#include "cpu/Cast.h"
#include "cpu/Optimizer.h"
#include "cuda/CudaKernels.h"
#include "exec/CudaBackend.h"
#include "exec/Device.h"

#include <cuda_runtime_api.h>

#include <atomic>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace zeroc::runtime {

namespace {

void ok(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + ": " +
                             cudaGetErrorString(e));
}

/// The CUDA kernel set for runModelOp: the CPU signatures, plus the stream
/// (and for GEMMs the cuBLAS context) of the calling thread.
struct CudaKernels {
  cudaStream_t stream;
  cuda::KernelContext &ctx;
#define ZEROC_CUDA_KERNEL(name)                                                \
  template <typename... Args> Status name(Args &&...args) {                    \
    return cuda::name(std::forward<Args>(args)..., stream);                    \
  }
#define ZEROC_CUDA_GEMM_KERNEL(name)                                           \
  template <typename... Args> Status name(Args &&...args) {                    \
    return cuda::name(std::forward<Args>(args)..., ctx, stream);               \
  }
  ZEROC_CUDA_KERNEL(embeddingForward)
  ZEROC_CUDA_KERNEL(embeddingBackward)
  ZEROC_CUDA_KERNEL(positionEmbeddingForward)
  ZEROC_CUDA_KERNEL(positionEmbeddingBackward)
  ZEROC_CUDA_GEMM_KERNEL(linearForward)
  ZEROC_CUDA_GEMM_KERNEL(linearGradInput)
  ZEROC_CUDA_GEMM_KERNEL(linearGradWeight)
  ZEROC_CUDA_KERNEL(linearGradBias)
  ZEROC_CUDA_KERNEL(layerNormForward)
  ZEROC_CUDA_KERNEL(layerNormBackward)
  ZEROC_CUDA_KERNEL(rmsNormForward)
  ZEROC_CUDA_KERNEL(rmsNormBackward)
  ZEROC_CUDA_KERNEL(geluForward)
  ZEROC_CUDA_KERNEL(geluBackward)
  ZEROC_CUDA_KERNEL(siluForward)
  ZEROC_CUDA_KERNEL(siluBackward)
  ZEROC_CUDA_KERNEL(add)
  ZEROC_CUDA_KERNEL(mul)
  ZEROC_CUDA_KERNEL(scale)
  ZEROC_CUDA_KERNEL(split)
  ZEROC_CUDA_KERNEL(splitBackward)
  ZEROC_CUDA_KERNEL(rotaryForward)
  ZEROC_CUDA_KERNEL(rotaryBackward)
  ZEROC_CUDA_GEMM_KERNEL(attentionForward)
  ZEROC_CUDA_GEMM_KERNEL(attentionBackward)
  ZEROC_CUDA_GEMM_KERNEL(flashAttentionForward)
  ZEROC_CUDA_GEMM_KERNEL(flashAttentionBackward)
  ZEROC_CUDA_KERNEL(crossEntropyForward)
  ZEROC_CUDA_KERNEL(crossEntropyBackward)
  ZEROC_CUDA_GEMM_KERNEL(moeRouterForward)
  ZEROC_CUDA_KERNEL(moeRouterBackward)
  ZEROC_CUDA_KERNEL(moeDispatchPlan)
  ZEROC_CUDA_GEMM_KERNEL(moeExpertsForward)
  ZEROC_CUDA_KERNEL(moeCombineForward)
  ZEROC_CUDA_KERNEL(moeCombineBackward)
  ZEROC_CUDA_GEMM_KERNEL(moeExpertsBackward)
  ZEROC_CUDA_KERNEL(moeRouterStats)
  ZEROC_CUDA_KERNEL(moeRouterStatsBackward)
  ZEROC_CUDA_KERNEL(moeLoadBalancingLoss)
  ZEROC_CUDA_KERNEL(moeLoadBalancingLossBackward)
  ZEROC_CUDA_KERNEL(backwardSeed)
  ZEROC_CUDA_KERNEL(moeGatherRows)
  ZEROC_CUDA_KERNEL(moeScatterAddRows)
  ZEROC_CUDA_KERNEL(moeReceivedPlan)
#undef ZEROC_CUDA_KERNEL
#undef ZEROC_CUDA_GEMM_KERNEL
};

/// The plan stream the calling thread runs.
thread_local int64_t boundStream = 0;

bool onDevice(const void *p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

/// An opt-in kernel choice: `name`'s value, one of `values` (the first when
/// unset or empty); any other value is an error naming the variable.
std::string kernelChoice(const char *name,
                         const std::vector<std::string> &values) {
  const char *env = std::getenv(name);
  if (!env || !*env)
    return values.front();
  for (const std::string &v : values)
    if (v == env)
      return v;
  std::string list;
  for (const std::string &v : values)
    list += (list.empty() ? "" : " or ") + v;
  throw std::runtime_error(std::string(name) + ": expected " + list +
                           ", found '" + env + "'");
}

class CudaDevice final : public Device {
public:
  explicit CudaDevice(int device)
      : deviceId(device), inUseAtStart(memoryInUse()),
        // The defaults since their run on an H100 (docs/gpu-kernels.md,
        // "Fused Adam, one-pass clipping, pinned staging"); the per-tensor
        // kernels and pageable staging stay selectable.
        fusedAdam(kernelChoice("ZEROC_CUDA_ADAM", {"fused", "tensor"}) ==
                  "fused"),
        gridClip(kernelChoice("ZEROC_CUDA_CLIP", {"grid", "tensor"}) == "grid"),
        pinnedStaging(kernelChoice("ZEROC_CUDA_HOST_STAGING",
                                   {"pinned", "pageable"}) == "pinned"),
        cpuHostPasses(kernelChoice("ZEROC_CUDA_HOST_PASSES",
                                   {"device", "cpu"}) == "cpu") {}
  ~CudaDevice() override {
    cudaSetDevice(deviceId);
    for (auto &[id, s] : streams) {
      cudaStreamSynchronize(s.stream);
      cudaStreamDestroy(s.stream);
      cudaFree(s.scratch);
      deviceMemory().released(MemoryUse::DeviceRuntime, kStreamRuntimeBytes);
    }
    for (cudaEvent_t e : events)
      cudaEventDestroy(e);
    for (cudaEvent_t e : timing)
      cudaEventDestroy(e);
    if (timingOrigin)
      cudaEventDestroy(timingOrigin);
    for (Staging &s : staging)
      if (s.data)
        cudaFreeHost(s.data);
  }

  std::string name() const override { return "cuda"; }

  char *allocateMemory(int64_t bytes, bool device, int64_t alignment) override {
    ok(cudaSetDevice(deviceId), "cudaSetDevice");
    size_t size = size_t(std::max<int64_t>(bytes, 1));
    void *p = nullptr;
    if (device) {
      // cudaMalloc aligns to 256 bytes; more is not asked of device memory.
      cudaError_t e = cudaMalloc(&p, size);
      if (e != cudaSuccess)
        throw std::runtime_error(
            "cudaMalloc of " + std::to_string(bytes) +
            " bytes failed: " + cudaGetErrorString(e) +
            " (the plan's prediction is printed by `zeroc inspect`)");
      // cudaMemset runs on the legacy stream, which the (non-blocking)
      // plan streams do not wait for: finish it here (allocation is setup).
      ok(cudaMemset(p, 0, size), "cudaMemset");
      ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    } else {
      // Pinned, page-aligned (covers direct I/O's 4 KiB).
      (void)alignment;
      ok(cudaMallocHost(&p, size), "cudaMallocHost");
      std::memset(p, 0, size);
    }
    return static_cast<char *>(p);
  }
  void releaseMemory(char *p, bool device) override {
    cudaSetDevice(deviceId);
    if (device)
      cudaFree(p);
    else
      cudaFreeHost(p);
  }
  bool hostAddressable() const override { return false; }
  StreamScheduling scheduling() const override {
    return StreamScheduling::OneIssuingThread;
  }

  void bindStream(int64_t stream) override {
    ok(cudaSetDevice(deviceId), "cudaSetDevice");
    boundStream = stream;
    (void)state();
  }
  void beginPhase(int64_t opCount) override {
    std::lock_guard<std::mutex> lock(mutex);
    ok(cudaSetDevice(deviceId), "cudaSetDevice");
    while (int64_t(events.size()) < opCount) {
      cudaEvent_t e;
      ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
         "cudaEventCreate");
      events.push_back(e);
    }
  }
  void waitForOp(int64_t index) override {
    ok(cudaStreamWaitEvent(stream(), events.at(size_t(index)), 0),
       "cudaStreamWaitEvent");
  }
  void opDone(int64_t index) override {
    ok(cudaEventRecord(events.at(size_t(index)), stream()), "cudaEventRecord");
  }
  void synchronize() override {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto &[id, s] : streams)
      ok(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
  }
  void streamSynchronize() override {
    ok(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }
  bool streamOrderedCollectives() const override { return true; }
  void useStreamFor(Communicator &comm) override { comm.useStream(stream()); }

  void copy(void *dst, const void *src, int64_t bytes) override {
    if (bytes > 0 && dst != src) {
      crossing(dst, src, bytes);
      ok(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, stream()),
         "cudaMemcpyAsync");
    }
  }
  void zero(void *dst, int64_t bytes) override {
    if (bytes > 0) {
      crossing(dst, nullptr, bytes);
      ok(cudaMemsetAsync(dst, 0, size_t(bytes), stream()), "cudaMemsetAsync");
    }
  }
  void copyRows(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
                int64_t rowBytes, int64_t rows) override {
    if (rowBytes <= 0 || rows <= 0)
      return;
    crossing(dst, src, rowBytes * rows);
    ok(cudaMemcpy2DAsync(dst, size_t(dstPitch), src, size_t(srcPitch),
                         size_t(rowBytes), size_t(rows), cudaMemcpyDefault,
                         stream()),
       "cudaMemcpy2DAsync");
  }
  void zeroRows(void *dst, int64_t pitch, int64_t rowBytes,
                int64_t rows) override {
    if (rowBytes <= 0 || rows <= 0)
      return;
    crossing(dst, nullptr, rowBytes * rows);
    ok(cudaMemset2DAsync(dst, size_t(pitch), 0, size_t(rowBytes), size_t(rows),
                         stream()),
       "cudaMemset2DAsync");
  }
  void toHost(void *hostDst, const void *src, int64_t bytes) override {
    copy(hostDst, src, bytes);
    ok(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }
  void fromHost(void *dst, const void *hostSrc, int64_t bytes) override {
    copy(dst, hostSrc, bytes);
    ok(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }

  std::optional<Status> modelOp(const PlanOp &op, const std::vector<Tensor> &in,
                                const std::vector<Tensor> &out,
                                const StepContext &step,
                                char *scratch) override {
    StreamState &s = state();
    CudaKernels kernels{s.stream, *s.context};
    return runModelOp(kernels, op, in, out, step, scratch);
  }
  Status accumulate(const Tensor &acc, const Tensor &g) override {
    touches(acc, Reads | Writes);
    touches(g, Reads);
    return cuda::accumulate(acc, g, stream());
  }
  Status zeroTensor(const Tensor &t) override {
    if (onCpu(t))
      return cpu::zeroTensor(t);
    touches(t, Writes);
    return cuda::zeroTensor(t, stream());
  }
  Status castTensor(const Tensor &src, const Tensor &dst) override {
    touches(src, Reads);
    touches(dst, Writes);
    return cuda::castTensor(src, dst, stream());
  }
  Status copyElements(const Tensor &src, int64_t srcOffset, const Tensor &dst,
                      int64_t dstOffset, int64_t n) override {
    touches(src, Reads, n * bytesPerElement(src.dtype));
    touches(dst, Writes, n * bytesPerElement(dst.dtype));
    return cuda::copyElements(src, srcOffset, dst, dstOffset, n, stream());
  }
  Status adamUpdate(const cpu::AdamSettings &settings, int64_t step,
                    const Tensor &grad, const Tensor &master,
                    const Tensor &expAvg, const Tensor &expAvgSq,
                    const Tensor *param16) override {
    if (onDevice(expAvg.data)) {
      touchesAdam(grad, master, param16);
      return cuda::adamUpdate(settings, step, grad, master, expAvg, expAvgSq,
                              param16, stream());
    }
    return onHost(&grad, master, param16,
                  [&](const Tensor &g, const Tensor &m, const Tensor *out16) {
                    return cpu::adamUpdate(settings, step, g, m, expAvg,
                                           expAvgSq, out16);
                  });
  }
  bool fusesAdam(const Tensor &expAvg) override {
    return fusedAdam && onDevice(expAvg.data);
  }
  Status adamUpdates(const cpu::AdamSettings &settings, int64_t step,
                     const std::vector<AdamPart> &parts) override {
    if (!fusedAdam)
      return Device::adamUpdates(settings, step, parts);
    std::vector<cuda::AdamTensors> list;
    list.reserve(parts.size());
    for (const AdamPart &p : parts) {
      touchesAdam(p.grad, p.master, p.param16 ? &*p.param16 : nullptr);
      list.push_back({p.grad, p.master, p.expAvg, p.expAvgSq,
                      p.param16 ? &*p.param16 : nullptr});
    }
    return cuda::multiTensorAdamUpdate(settings, step, list, stream());
  }
  Status lambMoments(const cpu::AdamSettings &settings, const Tensor &grad,
                     const Tensor &master, const Tensor &expAvg,
                     const Tensor &expAvgSq, cpu::LambSums &sums) override {
    if (!onDevice(expAvg.data))
      return onHost(&grad, master, nullptr,
                    [&](const Tensor &g, const Tensor &m, const Tensor *) {
                      return cpu::lambMoments(settings, g, m, expAvg, expAvgSq,
                                              sums);
                    });
    StreamState &s = state();
    double *device = static_cast<double *>(s.scratch);
    zero(device, 2 * sizeof(double));
    touches(grad, Reads);
    touches(master, Reads); // LAMB's first half writes only the moments.
    Status st = cuda::lambMoments(settings, grad, master, expAvg, expAvgSq,
                                  device, s.stream);
    if (!st.ok())
      return st;
    double host[2] = {0, 0};
    readback(host, device, sizeof(host));
    sums = {host[0], host[1]};
    return st;
  }
  Status lambApply(const cpu::AdamSettings &settings, int64_t step,
                   float trustRatio, const Tensor &master, const Tensor &expAvg,
                   const Tensor &expAvgSq, const Tensor *param16) override {
    if (onDevice(expAvg.data)) {
      touches(master, Reads | Writes);
      if (param16)
        touches(*param16, Writes);
      return cuda::lambApply(settings, step, trustRatio, master, expAvg,
                             expAvgSq, param16, stream());
    }
    return onHost(nullptr, master, param16,
                  [&](const Tensor &, const Tensor &m, const Tensor *out16) {
                    return cpu::lambApply(settings, step, trustRatio, m, expAvg,
                                          expAvgSq, out16);
                  });
  }
  /// ZeRO-Offload: the states are on the host, and so runs the optimizer.
  /// The gradient (reduced on this stream), an f32 parameter that is its own
  /// master, and the 16-bit parameter may be device memory: `update` gets
  /// host copies of those, and the master and the 16-bit parameter are
  /// copied back after it.
  template <typename Update>
  Status onHost(const Tensor *grad, const Tensor &master, const Tensor *param16,
                Update update) {
    ok(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
    std::vector<char> gradHost, masterHost, paramHost;
    Tensor g = grad ? *grad : master, m = master, p16;
    if (grad && onDevice(grad->data)) {
      g.data = hostBuffer(0, gradHost, grad->bytes());
      toHost(g.data, grad->data, grad->bytes());
    }
    bool masterOnDevice = onDevice(master.data);
    if (masterOnDevice) {
      m.data = hostBuffer(1, masterHost, master.bytes());
      toHost(m.data, master.data, master.bytes());
    }
    const Tensor *out16 = param16;
    if (param16 && onDevice(param16->data)) {
      p16 = *param16;
      p16.data = hostBuffer(2, paramHost, param16->bytes());
      out16 = &p16;
    }
    Status st = update(g, m, out16);
    if (st.ok() && masterOnDevice)
      fromHost(master.data, m.data, master.bytes());
    if (st.ok() && out16 == &p16)
      fromHost(param16->data, p16.data, param16->bytes());
    return st;
  }
  /// onHost's host copy of a device tensor (`role` 0: the gradient, 1: the
  /// master, 2: the 16-bit parameter): a new vector each call, or with
  /// ZEROC_CUDA_HOST_STAGING=pinned one pinned buffer per role, kept and
  /// grown across calls (no zero fill and page faults per call, and DMA
  /// copies instead of pageable ones).
  char *hostBuffer(int role, std::vector<char> &fresh, int64_t bytes) {
    if (!pinnedStaging) {
      fresh.resize(size_t(bytes));
      return fresh.data();
    }
    Staging &s = staging[role];
    if (s.bytes < bytes) {
      if (s.data)
        ok(cudaFreeHost(s.data), "cudaFreeHost");
      s = {};
      void *p = nullptr;
      ok(cudaMallocHost(&p, size_t(bytes)),
         "cudaMallocHost of the offloaded Adam's staging buffer");
      s = {static_cast<char *>(p), bytes};
    }
    return s.data;
  }
  Status scaleInPlace(const Tensor &t, float factor) override {
    if (onCpu(t))
      return cpu::scaleInPlace(t, factor);
    touches(t, Reads | Writes);
    return cuda::scaleInPlace(t, factor, stream());
  }
  double sumOfSquares(const Tensor &g) override {
    if (onCpu(g))
      return cpu::sumOfSquares(g);
    StreamState &s = state();
    zero(s.scratch, sizeof(double));
    touches(g, Reads);
    Status st =
        cuda::sumOfSquares(g, static_cast<double *>(s.scratch), s.stream);
    if (!st.ok())
      throw std::runtime_error(st.error);
    double sum = 0;
    readback(&sum, s.scratch, sizeof(double));
    return sum;
  }
  double sumOfSquaresOf(const std::vector<Tensor> &grads) override {
    if (!gridClip || onCpu(grads))
      return Device::sumOfSquaresOf(grads);
    StreamState &s = state();
    zero(s.scratch, sizeof(double));
    for (const Tensor &g : grads)
      touches(g, Reads);
    Status st = cuda::multiTensorSumOfSquares(
        grads, static_cast<double *>(s.scratch), s.stream);
    if (!st.ok())
      throw std::runtime_error(st.error);
    double sum = 0;
    readback(&sum, s.scratch, sizeof(double));
    return sum;
  }
  Status scaleAll(const std::vector<Tensor> &tensors, float factor) override {
    if (!gridClip || onCpu(tensors))
      return Device::scaleAll(tensors, factor);
    for (const Tensor &t : tensors)
      touches(t, Reads | Writes);
    return cuda::multiTensorScale(tensors, factor, stream());
  }
  Status unscaleGrads(const Tensor &g, double lossScale,
                      bool &overflow) override {
    if (onCpu(g))
      return cpu::unscaleGrads(g, lossScale, overflow);
    StreamState &s = state();
    int *flag = reinterpret_cast<int *>(static_cast<char *>(s.scratch) + 8);
    zero(flag, sizeof(int));
    touches(g, Reads | Writes);
    Status st = cuda::unscaleGrads(g, lossScale, flag, s.stream);
    if (!st.ok())
      return st;
    int host = 0;
    readback(&host, flag, sizeof(int));
    overflow = overflow || host != 0;
    return st;
  }
  float loadElement(const Tensor &t, int64_t i) override {
    int64_t es = bytesPerElement(t.dtype);
    char bytes[8] = {};
    readback(bytes, static_cast<const char *>(t.data) + i * es, es);
    return cpu::loadElement(Tensor{bytes, t.dtype, {1}}, 0);
  }
  int64_t memoryInUse() const override {
    size_t freeBytes = 0, total = 0;
    if (cudaMemGetInfo(&freeBytes, &total) != cudaSuccess)
      return -1;
    return int64_t(total - freeBytes);
  }
  int64_t memoryInUseAtStart() const override { return inUseAtStart; }
  void releaseCachedMemory() override {
    if (cudaDeviceSynchronize() != cudaSuccess)
      return;
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, deviceId) == cudaSuccess)
      (void)cudaMemPoolTrimTo(pool, 0);
  }
  int64_t memoryCapacity() const override {
    size_t freeBytes = 0, total = 0;
    if (cudaMemGetInfo(&freeBytes, &total) != cudaSuccess)
      return -1;
    return int64_t(total);
  }
  std::optional<HostTraffic> hostTraffic() const override {
    return HostTraffic{traffic.toDevice.load(), traffic.toHost.load()};
  }

  bool timesOps() const override { return true; }
  void startOpTiming() override {
    if (!timingOrigin)
      ok(cudaEventCreate(&timingOrigin), "cudaEventCreate");
    ok(cudaEventRecord(timingOrigin, stream()), "cudaEventRecord");
    ok(cudaEventSynchronize(timingOrigin), "cudaEventSynchronize");
    marked = 0;
  }
  void markOpStart(int64_t slot) override { mark(2 * size_t(slot)); }
  void markOpEnd(int64_t slot) override { mark(2 * size_t(slot) + 1); }
  std::vector<std::pair<double, double>> opTimes() override {
    std::vector<std::pair<double, double>> out(marked / 2, {-1.0, -1.0});
    auto since = [&](cudaEvent_t e) {
      float ms = 0;
      if (cudaEventSynchronize(e) != cudaSuccess ||
          cudaEventElapsedTime(&ms, timingOrigin, e) != cudaSuccess) {
        (void)cudaGetLastError(); // Not recorded (a failed op).
        return -1.0;
      }
      return double(ms) / 1e3;
    };
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = {since(timing[2 * i]), since(timing[2 * i + 1])};
    marked = 0; // Every event completed: reused from the next mark on.
    return out;
  }

private:
  struct StreamState {
    cudaStream_t stream = nullptr;
    std::unique_ptr<cuda::KernelContext> context;
    /// 16 bytes for host readbacks: a double and an int, or LAMB's two
    /// doubles; each use is synchronous.
    void *scratch = nullptr;
  };
  StreamState &state() {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = streams.find(boundStream);
    if (it != streams.end())
      return it->second;
    StreamState s;
    ok(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
       "cudaStreamCreate");
    s.context = std::make_unique<cuda::KernelContext>();
    Status st = s.context->init();
    if (!st.ok())
      throw std::runtime_error(st.error);
    ok(cudaMalloc(&s.scratch, 16), "cudaMalloc");
    deviceMemory().allocated(MemoryUse::DeviceRuntime, kStreamRuntimeBytes);
    return streams.emplace(boundStream, std::move(s)).first->second;
  }
  cudaStream_t stream() { return state().stream; }

  /// What a stream's state allocates: its readback scratch and its
  /// cuBLASLt workspace.
  static constexpr int64_t kStreamRuntimeBytes =
      16 + int64_t(cuda::KernelContext::kDefaultWorkspaceBytes);
  int deviceId;
  int64_t inUseAtStart = -1;
  /// ZEROC_CUDA_ADAM=fused: adam_update ops of device states in one
  /// multi-tensor launch (Device::fusesAdam).
  bool fusedAdam = false;
  /// ZEROC_CUDA_CLIP=grid: clip_grad_norm's sums in one pass, one readback.
  bool gridClip = false;
  /// ZEROC_CUDA_HOST_STAGING=pinned: onHost's buffers pinned and reused.
  bool pinnedStaging = false;
  /// ZEROC_CUDA_HOST_PASSES=cpu (opt-in): clipping's norm and scale,
  /// zeroing and unscaling of tensors in host memory (an offloaded
  /// optimizer's gradient partition) on the host's cores, as the CPU
  /// executor runs them, instead of device kernels reading pinned memory
  /// over PCIe (GPT-2 124M, stage 2 + offload on an H100: the norm 15.0 ms
  /// a step, 33 GB/s; the host's Adam ran at 150 GB/s; bench/gpu-RESULTS.md,
  /// third lease).
  bool cpuHostPasses = false;
  /// Whether a pass over `t` runs on the host's cores: the choice above,
  /// and `t` in host memory. The stream's work is finished first (what
  /// wrote `t` may still be queued).
  bool onCpu(const Tensor &t) {
    if (!cpuHostPasses || t.numel() == 0 || onDevice(t.data))
      return false;
    streamSynchronize();
    return true;
  }
  /// The same for a list: every tensor in host memory.
  bool onCpu(const std::vector<Tensor> &ts) {
    if (!cpuHostPasses || ts.empty())
      return false;
    for (const Tensor &t : ts)
      if (onDevice(t.data))
        return false;
    streamSynchronize();
    return true;
  }
  /// hostTraffic's counts: by copy (crossing) and by kernel (touches).
  struct {
    std::atomic<int64_t> toDevice{0}, toHost{0};
  } traffic;
  /// A copy of `bytes` from `src` to `dst` (a fill where `src` is null):
  /// counted where exactly one side is device memory (a fill of host
  /// memory: to the host).
  void crossing(const void *dst, const void *src, int64_t bytes) {
    // A fill (no source) comes from the device.
    bool to = onDevice(dst), from = src ? onDevice(src) : true;
    if (from && !to)
      traffic.toHost += bytes;
    else if (!from && to)
      traffic.toDevice += bytes;
  }
  enum Access { Reads = 1, Writes = 2 };
  /// A kernel reading and/or writing `bytes` of `t` (default: all of it)
  /// where it lies: counted when that is host memory.
  void touches(const Tensor &t, int access, int64_t bytes = -1) {
    if (t.numel() == 0 || onDevice(t.data))
      return;
    if (bytes < 0)
      bytes = t.bytes();
    if (access & Reads)
      traffic.toDevice += bytes;
    if (access & Writes)
      traffic.toHost += bytes;
  }
  /// A device Adam's (or LAMB's moments') tensors other than its states.
  void touchesAdam(const Tensor &grad, const Tensor &master,
                   const Tensor *param16) {
    touches(grad, Reads);
    touches(master, Reads | Writes);
    if (param16 && param16->data != master.data)
      touches(*param16, Writes);
  }
  /// A control scalar (a norm, a flag, the loss) read back synchronously;
  /// not counted in hostTraffic.
  void readback(void *hostDst, const void *src, int64_t bytes) {
    ok(cudaMemcpyAsync(hostDst, src, size_t(bytes), cudaMemcpyDefault,
                       stream()),
       "cudaMemcpyAsync");
    ok(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }
  /// Device-clock profiling: the origin and two events per op slot,
  /// created on first use and kept for later runs; `marked`: the slots'
  /// events in use since the origin (both of each).
  cudaEvent_t timingOrigin = nullptr;
  std::vector<cudaEvent_t> timing;
  size_t marked = 0;
  void mark(size_t at) {
    while (timing.size() <= at) {
      cudaEvent_t e;
      ok(cudaEventCreate(&e), "cudaEventCreate");
      timing.push_back(e);
    }
    ok(cudaEventRecord(timing[at], stream()), "cudaEventRecord");
    marked = std::max(marked, (at | 1) + 1);
  }
  struct Staging {
    char *data = nullptr;
    int64_t bytes = 0;
  };
  Staging staging[3];
  std::mutex mutex;
  std::map<int64_t, StreamState> streams;
  std::vector<cudaEvent_t> events;
};

/// The rank's GPU: libzerorun-cuda.so's makeDevice (exec/CudaBackend.h).
std::unique_ptr<Device> makeDevice(std::string &why) {
  // This rank's place on its node first: every rank joins that collective
  // (over MPI_COMM_WORLD while MPI runs), whatever it finds next.
  NodeRank node;
  try {
    node = nodeRank(worldIfRunning());
  } catch (const std::exception &err) {
    why = err.what();
    return nullptr;
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    why = std::string("no usable CUDA GPU: ") +
          (e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    (void)cudaGetLastError();
    return nullptr;
  }
  // The rank's GPU on its node, chosen as the NCCL communicator chooses it.
  int device = localDeviceIndex(node, count);
  if ((e = cudaSetDevice(device)) != cudaSuccess) {
    why = std::string("cudaSetDevice(") + std::to_string(device) +
          "): " + cudaGetErrorString(e);
    return nullptr;
  }
  try {
    return std::make_unique<CudaDevice>(device);
  } catch (const std::exception &err) { // A ZEROC_CUDA_* choice's value
    why = err.what();
    return nullptr;
  }
}

std::unique_ptr<Communicator> ncclWorld() { return NcclCommunicator::world(); }

} // namespace

} // namespace zeroc::runtime

extern "C" const zeroc::runtime::CudaBackend *zeroc_cuda_backend_v1() {
  static const zeroc::runtime::CudaBackend backend{
      zeroc::runtime::CudaBackend::kAbiVersion, zeroc::runtime::makeDevice,
      zeroc::runtime::ncclWorld};
  return &backend;
}
