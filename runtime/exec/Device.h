//===- Device.h - Where the executor's data lives and ops run ---*- C++ -*-===//
//
// The executor (exec/Executor.h) walks a plan the same way on every
// backend; a Device is what differs: memory, kernels, data movement, how
// the plan's streams are scheduled and how an op waits for one of another
// stream.
//
//  * The CPU device: host memory; kernels run on the calling thread, so an
//    op is complete when its call returns, and each plan stream gets a
//    worker thread (exec/StreamScheduler.h).
//  * The CUDA device (exec/CudaDevice.cpp, built with the CUDA backend):
//    device memory (pinned host memory for offloaded tensors); one host
//    thread issues every op in program order onto the CUDA stream of its
//    plan stream; `deps` across streams become CUDA events; collectives
//    (NCCL) and their epilogues are enqueued in stream order, without host
//    waits.
//
// Every method that returns a value to the host (sums, flags, loss) is
// synchronous; the rest are ordered on the calling thread's stream.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_DEVICE_H
#define ZEROC_RUNTIME_EXEC_DEVICE_H

#include "Kernels.h"
#include "exec/Dispatch.h"
#include "memory/MemoryCounter.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace zeroc::runtime {

class Communicator;

/// How a device wants the plan's streams issued (exec/StreamScheduler.h).
enum class StreamScheduling {
  /// A host thread per plan stream, each blocking until its op's
  /// dependencies completed: for kernels that run on the calling thread.
  ThreadPerStream,
  /// One host thread issuing every op in program order on its stream's
  /// queue; dependencies across streams wait on the device.
  OneIssuingThread,
};

/// Bytes a device moved between its own memory and host memory.
struct HostTraffic {
  int64_t toDevice = 0, toHost = 0;
};

class Device {
public:
  virtual ~Device() = default;
  /// "cpu" or "cuda".
  virtual std::string name() const = 0;

  /// Zero-filled memory: on the device (`onDevice`), or host memory the
  /// device can copy to and from (pinned on a GPU). 64-byte aligned at
  /// least; `alignment` (a power of two) where more is needed. Device
  /// memory counts in deviceMemory() (memory/MemoryCounter.h) as `use`,
  /// by the bytes asked for (not the backend's rounding).
  char *allocate(int64_t bytes, bool onDevice, int64_t alignment = 64,
                 MemoryUse use = MemoryUse::PlannedTensors);
  void release(char *p, bool onDevice);
  /// Whether the host reads and writes `onDevice` memory directly (else
  /// through toHost and fromHost).
  virtual bool hostAddressable() const = 0;

  virtual StreamScheduling scheduling() const = 0;

  /// Binds the calling thread to plan stream `stream` for the ops it runs
  /// next.
  virtual void bindStream(int64_t stream) { (void)stream; }
  /// Called once per phase run with its number of op indices.
  virtual void beginPhase(int64_t opCount) { (void)opCount; }
  /// Orders the calling thread's stream after op `index` of another stream
  /// (whose opDone the host has seen).
  virtual void waitForOp(int64_t index) { (void)index; }
  /// Marks op `index` of the calling thread's stream as issued.
  virtual void opDone(int64_t index) { (void)index; }
  /// Waits until every stream's work is done.
  virtual void synchronize() {}
  /// Waits until the calling thread's stream's work is done.
  virtual void streamSynchronize() {}
  /// Whether a collective's epilogue may be issued right after the
  /// collective, ordered by the stream (GPU), instead of after the host saw
  /// it complete (CPU).
  virtual bool streamOrderedCollectives() const { return false; }
  /// Prepares `comm` to issue the next collective on the calling thread's
  /// stream (NCCL).
  virtual void useStreamFor(Communicator &comm) { (void)comm; }

  /// Data movement between any two buffers of this device's memory (device
  /// or host), ordered on the calling thread's stream.
  virtual void copy(void *dst, const void *src, int64_t bytes) = 0;
  virtual void zero(void *dst, int64_t bytes) = 0;
  /// `rows` rows of `rowBytes`: row k from src + k srcPitch to dst + k
  /// dstPitch (cudaMemcpy2DAsync's arguments); zeroRows sets them to zero.
  /// These defaults call copy and zero row by row.
  virtual void copyRows(void *dst, int64_t dstPitch, const void *src,
                        int64_t srcPitch, int64_t rowBytes, int64_t rows);
  virtual void zeroRows(void *dst, int64_t pitch, int64_t rowBytes,
                        int64_t rows);
  /// Synchronous copies from and to plain host memory.
  virtual void toHost(void *hostDst, const void *src, int64_t bytes) = 0;
  virtual void fromHost(void *dst, const void *hostSrc, int64_t bytes) = 0;

  // Kernels. Tensors are views of this device's memory; `scratch` is the
  // op's workspace (Dispatch.h's modelOpScratchBytes), null where it has
  // none.
  virtual std::optional<Status> modelOp(const PlanOp &op,
                                        const std::vector<Tensor> &in,
                                        const std::vector<Tensor> &out,
                                        const StepContext &step,
                                        char *scratch) = 0;
  virtual Status accumulate(const Tensor &acc, const Tensor &g) = 0;
  virtual Status zeroTensor(const Tensor &t) = 0;
  virtual Status castTensor(const Tensor &src, const Tensor &dst) = 0;
  virtual Status copyElements(const Tensor &src, int64_t srcOffset,
                              const Tensor &dst, int64_t dstOffset,
                              int64_t n) = 0;
  virtual Status adamUpdate(const cpu::AdamSettings &settings, int64_t step,
                            const Tensor &grad, const Tensor &master,
                            const Tensor &expAvg, const Tensor &expAvgSq,
                            const Tensor *param16) = 0;
  /// LAMB's halves (cpu/Optimizer.h), on the device or, with the states on
  /// the host, on the CPU. lambMoments is synchronous: the caller needs the
  /// sums on the host for the trust ratio.
  virtual Status lambMoments(const cpu::AdamSettings &settings,
                             const Tensor &grad, const Tensor &master,
                             const Tensor &expAvg, const Tensor &expAvgSq,
                             cpu::LambSums &sums) = 0;
  virtual Status lambApply(const cpu::AdamSettings &settings, int64_t step,
                           float trustRatio, const Tensor &master,
                           const Tensor &expAvg, const Tensor &expAvgSq,
                           const Tensor *param16) = 0;
  virtual Status scaleInPlace(const Tensor &t, float factor) = 0;
  /// Synchronous.
  virtual double sumOfSquares(const Tensor &g) = 0;
  /// clip_grad_norm's two passes over a list of gradients. sumOfSquaresOf:
  /// the sum of sumOfSquares over `grads` (f64, synchronous); this default
  /// adds each tensor's sum in list order, the CUDA device with
  /// ZEROC_CUDA_CLIP=grid sums them all in one pass (one readback, another
  /// order: equal within rounding). scaleAll: scaleInPlace on each, the
  /// same bits either way.
  virtual double sumOfSquaresOf(const std::vector<Tensor> &grads);
  virtual Status scaleAll(const std::vector<Tensor> &tensors, float factor);

  /// One parameter's part of a fused Adam step (adamUpdates).
  struct AdamPart {
    Tensor grad, master, expAvg, expAvgSq;
    std::optional<Tensor> param16;
  };
  /// Whether adamUpdates fuses updates of states like `expAvg`: if so the
  /// executor defers the adam_update ops that follow one another on a
  /// stream and hands them over together (exec/OptimizerOps.cpp); only
  /// where one thread issues every op (StreamScheduling::OneIssuingThread).
  /// The CUDA device with ZEROC_CUDA_ADAM=fused, for states in device
  /// memory.
  virtual bool fusesAdam(const Tensor &expAvg) {
    (void)expAvg;
    return false;
  }
  /// adamUpdate on every part; this default calls it part by part.
  virtual Status adamUpdates(const cpu::AdamSettings &settings, int64_t step,
                             const std::vector<AdamPart> &parts);
  virtual Status unscaleGrads(const Tensor &g, double lossScale,
                              bool &overflow) = 0;
  virtual float loadElement(const Tensor &t, int64_t i) = 0;

  /// Device memory in use by everything on this device (allocator pools,
  /// libraries), where the device can tell (cudaMemGetInfo); -1 where it
  /// cannot.
  virtual int64_t memoryInUse() const { return -1; }
  /// memoryInUse() when the device was created, before this process
  /// allocated anything on it (other processes' memory included); -1 where
  /// the device cannot tell.
  virtual int64_t memoryInUseAtStart() const { return -1; }
  /// The device's memory as the driver reports it (cudaMemGetInfo's total,
  /// what PyTorch calls the total capacity); -1 where the device cannot
  /// tell.
  virtual int64_t memoryCapacity() const { return -1; }
  /// Waits for the device and returns memory its allocator keeps cached
  /// for reuse (CUDA's stream-ordered pool) to the driver, so that
  /// memoryInUse() counts what is held, not what was once used.
  virtual void releaseCachedMemory() {}

  /// What this device has moved between its memory and host memory since
  /// it was created (over PCIe on a GPU): copies in either direction, and
  /// kernels reading or writing host memory where it lies (pinned,
  /// zero-copy), by the bytes they touch; not the readbacks of control
  /// scalars (norms, overflow flags, the loss). Nothing where the device's
  /// memory is the host's (the CPU device). zerorun prints it per step
  /// beside the plan's figure (zeroc/Cost/CostModel.h,
  /// offloadTrafficPerStep).
  virtual std::optional<HostTraffic> hostTraffic() const {
    return std::nullopt;
  }

  /// zerorun --profile on a device that times ops on its own clock (the
  /// CUDA device: an event before and after each op on its stream, so that
  /// spans are the device's, and copies beside kernels show as they
  /// overlap). startOpTiming takes the clock's origin and returns when it
  /// was taken (the host waits for it); markOpStart and markOpEnd bracket
  /// op `slot` (0, 1, 2, ... as the profiler hands them out) on the calling
  /// thread's stream; opTimes waits for every mark and returns each slot's
  /// start and end in seconds since the origin (-1 for a slot not marked),
  /// and frees the slots: the profiler hands them out from 0 again.
  virtual bool timesOps() const { return false; }
  virtual void startOpTiming() {}
  virtual void markOpStart(int64_t slot) { (void)slot; }
  virtual void markOpEnd(int64_t slot) { (void)slot; }
  virtual std::vector<std::pair<double, double>> opTimes() { return {}; }

protected:
  /// The backend's allocation and release behind allocate and release.
  virtual char *allocateMemory(int64_t bytes, bool onDevice,
                               int64_t alignment) = 0;
  virtual void releaseMemory(char *p, bool onDevice) = 0;

private:
  /// Each live device allocation's size and use, for its release.
  std::mutex allocationsMutex;
  std::unordered_map<char *, std::pair<int64_t, MemoryUse>> allocations;
};

/// A packed stage-3 reduce-scatter's send buffer (Workspace.h,
/// ParamReduceScatterParts): rank r's chunk of each packed gradient k
/// (`grads[k]`, the whole parameter's) into block r of `send` at slots[k],
/// zeros after it to the end of its slot; the gradients that go alone are
/// skipped. Two strided copies a gradient at most, ordered on the calling
/// thread's stream.
void packParamGradients(Device &dev, char *send,
                        const ParamReduceScatterParts &parts,
                        const std::vector<ParamGradient> &params,
                        const std::vector<const void *> &grads);

/// Host memory and the CPU kernels (runtime/kernels/cpu).
std::unique_ptr<Device> makeCpuDevice();

/// For tests: the CPU device issuing every op from one thread in program
/// order (as the CUDA device does; its kernels are synchronous, so an op is
/// done when issued) and, with `fuseAdam`, fusing adam_update ops
/// (Device::fusesAdam, the default adamUpdates), each fused call's part
/// count appended to `fusedCalls`: the executor's deferral of the CUDA
/// device's ZEROC_CUDA_ADAM=fused, run on the CPU.
struct CpuDeviceOptions {
  bool oneIssuingThread = false;
  bool fuseAdam = false;
  std::vector<size_t> *fusedCalls = nullptr;
  /// Device::timesOps with the host's clock at each mark (the profiler's
  /// device-clock path, run on the CPU).
  bool timesOps = false;
};
std::unique_ptr<Device> makeCpuDevice(const CpuDeviceOptions &options);

/// The CUDA device, where the CUDA backend was built (nullptr and a reason
/// in `why` otherwise, or when no GPU is usable).
std::unique_ptr<Device> makeCudaDevice(std::string &why);

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_DEVICE_H
