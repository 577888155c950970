//===- CpuDevice.cpp - Host memory and the CPU kernels --------------------===//

#include "exec/Device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sys/mman.h>
#include <unordered_map>

namespace zeroc::runtime {

namespace {

class CpuDevice final : public Device {
public:
  explicit CpuDevice(const CpuDeviceOptions &options = {}) : options(options) {}
  std::string name() const override { return "cpu"; }

  /// Zero-filled memory. From `kMapBytes` on, fresh anonymous pages: the
  /// kernel zero-fills each page when it is first touched, so nothing is
  /// written (and no page faulted in) before the op that first uses it; a
  /// 2.4 GB plan starts without 2.4 GB of memset. No MADV_HUGEPAGE: on the
  /// development VM a first touch of 2 GiB took 5-15 s in huge pages
  /// against 1.2-2 s in 4 KiB pages (docs/zerorun.md, "Start-up").
  /// Smaller blocks: aligned_alloc and memset.
  char *allocateMemory(int64_t bytes, bool, int64_t alignment) override {
    alignment = std::max<int64_t>(alignment, 64);
    size_t size = size_t((std::max<int64_t>(bytes, 1) + alignment - 1) /
                         alignment * alignment);
    if (size >= kMapBytes && size_t(alignment) <= kPageBytes) {
      void *m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED)
        throw std::bad_alloc();
      std::lock_guard<std::mutex> lock(mapMutex);
      mapped[static_cast<char *>(m)] = size;
      return static_cast<char *>(m);
    }
    char *p = static_cast<char *>(std::aligned_alloc(size_t(alignment), size));
    if (!p)
      throw std::bad_alloc();
    std::memset(p, 0, size);
    return p;
  }
  void releaseMemory(char *p, bool) override {
    if (!p)
      return;
    {
      std::lock_guard<std::mutex> lock(mapMutex);
      if (auto it = mapped.find(p); it != mapped.end()) {
        ::munmap(p, it->second);
        mapped.erase(it);
        return;
      }
    }
    std::free(p);
  }
  bool hostAddressable() const override { return true; }
  StreamScheduling scheduling() const override {
    return options.oneIssuingThread ? StreamScheduling::OneIssuingThread
                                    : StreamScheduling::ThreadPerStream;
  }
  bool fusesAdam(const Tensor &) override { return options.fuseAdam; }
  Status adamUpdates(const cpu::AdamSettings &settings, int64_t step,
                     const std::vector<AdamPart> &parts) override {
    if (options.fusedCalls)
      options.fusedCalls->push_back(parts.size());
    return Device::adamUpdates(settings, step, parts);
  }

  void copy(void *dst, const void *src, int64_t bytes) override {
    if (bytes > 0 && dst != src)
      std::memmove(dst, src, size_t(bytes));
  }
  void zero(void *dst, int64_t bytes) override {
    if (bytes > 0)
      std::memset(dst, 0, size_t(bytes));
  }
  void toHost(void *hostDst, const void *src, int64_t bytes) override {
    copy(hostDst, src, bytes);
  }
  void fromHost(void *dst, const void *hostSrc, int64_t bytes) override {
    copy(dst, hostSrc, bytes);
  }

  std::optional<Status> modelOp(const PlanOp &op, const std::vector<Tensor> &in,
                                const std::vector<Tensor> &out,
                                const StepContext &step,
                                char *scratch) override {
    CpuKernels kernels;
    return runModelOp(kernels, op, in, out, step, scratch);
  }
  Status accumulate(const Tensor &acc, const Tensor &g) override {
    return cpu::accumulate(acc, g);
  }
  Status zeroTensor(const Tensor &t) override { return cpu::zeroTensor(t); }
  Status castTensor(const Tensor &src, const Tensor &dst) override {
    return cpu::castTensor(src, dst);
  }
  Status copyElements(const Tensor &src, int64_t srcOffset, const Tensor &dst,
                      int64_t dstOffset, int64_t n) override {
    cpu::copyElements(src, srcOffset, dst, dstOffset, n);
    return {};
  }
  Status adamUpdate(const cpu::AdamSettings &settings, int64_t step,
                    const Tensor &grad, const Tensor &master,
                    const Tensor &expAvg, const Tensor &expAvgSq,
                    const Tensor *param16) override {
    return cpu::adamUpdate(settings, step, grad, master, expAvg, expAvgSq,
                           param16);
  }
  Status lambMoments(const cpu::AdamSettings &settings, const Tensor &grad,
                     const Tensor &master, const Tensor &expAvg,
                     const Tensor &expAvgSq, cpu::LambSums &sums) override {
    return cpu::lambMoments(settings, grad, master, expAvg, expAvgSq, sums);
  }
  Status lambApply(const cpu::AdamSettings &settings, int64_t step,
                   float trustRatio, const Tensor &master, const Tensor &expAvg,
                   const Tensor &expAvgSq, const Tensor *param16) override {
    return cpu::lambApply(settings, step, trustRatio, master, expAvg, expAvgSq,
                          param16);
  }
  Status scaleInPlace(const Tensor &t, float factor) override {
    return cpu::scaleInPlace(t, factor);
  }
  double sumOfSquares(const Tensor &g) override { return cpu::sumOfSquares(g); }
  Status unscaleGrads(const Tensor &g, double lossScale,
                      bool &overflow) override {
    return cpu::unscaleGrads(g, lossScale, overflow);
  }
  float loadElement(const Tensor &t, int64_t i) override {
    return cpu::loadElement(t, i);
  }
  bool timesOps() const override { return options.timesOps; }
  void startOpTiming() override {
    timingOrigin = std::chrono::steady_clock::now();
    marks.clear();
  }
  void markOpStart(int64_t slot) override { mark(2 * size_t(slot)); }
  void markOpEnd(int64_t slot) override { mark(2 * size_t(slot) + 1); }
  std::vector<std::pair<double, double>> opTimes() override {
    std::vector<std::pair<double, double>> out(marks.size() / 2);
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = {marks[2 * i], marks[2 * i + 1]};
    marks.clear();
    return out;
  }

private:
  /// The host's clock for mark `at` (seconds since startOpTiming).
  void mark(size_t at) {
    if (marks.size() <= at)
      marks.resize((at | 1) + 1, -1.0);
    marks[at] = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              timingOrigin)
                    .count();
  }
  std::chrono::steady_clock::time_point timingOrigin;
  std::vector<double> marks;
  static constexpr size_t kPageBytes = 4096;
  static constexpr size_t kMapBytes = size_t(1) << 20;
  CpuDeviceOptions options;
  std::mutex mapMutex;
  std::unordered_map<char *, size_t> mapped;
};

} // namespace

std::unique_ptr<Device> makeCpuDevice() {
  return std::make_unique<CpuDevice>();
}

std::unique_ptr<Device> makeCpuDevice(const CpuDeviceOptions &options) {
  return std::make_unique<CpuDevice>(options);
}

} // namespace zeroc::runtime
