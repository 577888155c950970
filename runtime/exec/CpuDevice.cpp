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

  char *allocate(int64_t bytes, bool, int64_t alignment) override {
    alignment = std::max<int64_t>(alignment, 64);
    size_t size = size_t((std::max<int64_t>(bytes, 1) + alignment - 1) /
                         alignment * alignment);
    char *p = static_cast<char *>(std::aligned_alloc(size_t(alignment), size));
    if (!p)
      throw std::bad_alloc();
    std::memset(p, 0, size);
    return p;
  }
  void release(char *p, bool) override { std::free(p); }

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

  std::optional<cpu::Status> modelOp(const PlanOp &op,
                                     const std::vector<cpu::Tensor> &in,
                                     const std::vector<cpu::Tensor> &out,
                                     double lossScale) override {
    CpuKernels kernels;
    return runModelOp(kernels, op, in, out, lossScale);
  }
  cpu::Status accumulate(const cpu::Tensor &acc,
                         const cpu::Tensor &g) override {
    return cpu::accumulate(acc, g);
  }
  cpu::Status zeroTensor(const cpu::Tensor &t) override {
    return cpu::zeroTensor(t);
  }
  cpu::Status castTensor(const cpu::Tensor &src,
                         const cpu::Tensor &dst) override {
    return cpu::castTensor(src, dst);
  }
  cpu::Status copyElements(const cpu::Tensor &src, int64_t srcOffset,
                           const cpu::Tensor &dst, int64_t dstOffset,
                           int64_t n) override {
    cpu::copyElements(src, srcOffset, dst, dstOffset, n);
    return {};
  }
  cpu::Status adamUpdate(const cpu::AdamSettings &settings, int64_t step,
                         const cpu::Tensor &grad, const cpu::Tensor &master,
                         const cpu::Tensor &expAvg, const cpu::Tensor &expAvgSq,
                         const cpu::Tensor *param16) override {
    return cpu::adamUpdate(settings, step, grad, master, expAvg, expAvgSq,
                           param16);
  }
  cpu::Status scaleInPlace(const cpu::Tensor &t, float factor) override {
    return cpu::scaleInPlace(t, factor);
  }
  double sumOfSquares(const cpu::Tensor &g) override {
    return cpu::sumOfSquares(g);
  }
  cpu::Status unscaleGrads(const cpu::Tensor &g, double lossScale,
                           bool &overflow) override {
    return cpu::unscaleGrads(g, lossScale, overflow);
  }
  float loadElement(const cpu::Tensor &t, int64_t i) override {
    return cpu::loadElement(t, i);
  }
};

} // namespace

std::unique_ptr<Device> makeCpuDevice() {
  return std::make_unique<CpuDevice>();
}

#ifndef ZEROC_HAVE_CUDA
std::unique_ptr<Device> makeCudaDevice(std::string &why) {
  why = "this zerorun was built without the CUDA backend (no CUDA toolkit "
        "with cuBLASLt and NCCL was found at configure time)";
  return nullptr;
}
#endif

} // namespace zeroc::runtime
