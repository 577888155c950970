//===- CpuDevice.cpp - Host memory and the CPU kernels --------------------===//

#include "exec/Device.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace zeroc::runtime {

namespace {

class CpuDevice final : public Device {
public:
  std::string name() const override { return "cpu"; }

  char *allocateMemory(int64_t bytes, bool, int64_t alignment) override {
    alignment = std::max<int64_t>(alignment, 64);
    size_t size = size_t((std::max<int64_t>(bytes, 1) + alignment - 1) /
                         alignment * alignment);
    char *p = static_cast<char *>(std::aligned_alloc(size_t(alignment), size));
    if (!p)
      throw std::bad_alloc();
    std::memset(p, 0, size);
    return p;
  }
  void releaseMemory(char *p, bool) override { std::free(p); }
  bool hostAddressable() const override { return true; }
  StreamScheduling scheduling() const override {
    return StreamScheduling::ThreadPerStream;
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
                                double lossScale) override {
    CpuKernels kernels;
    return runModelOp(kernels, op, in, out, lossScale);
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
};

} // namespace

std::unique_ptr<Device> makeCpuDevice() {
  return std::make_unique<CpuDevice>();
}

} // namespace zeroc::runtime
