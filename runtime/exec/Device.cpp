//===- Device.cpp - Device allocations, counted ---------------------------===//

#include "exec/Device.h"

namespace zeroc::runtime {

char *Device::allocate(int64_t bytes, bool onDevice, int64_t alignment,
                       MemoryUse use) {
  char *p = allocateMemory(bytes, onDevice, alignment);
  if (onDevice) {
    {
      std::lock_guard<std::mutex> lock(allocationsMutex);
      allocations[p] = {bytes, use};
    }
    deviceMemory().allocated(use, bytes);
  }
  return p;
}

void Device::release(char *p, bool onDevice) {
  if (onDevice && p) {
    std::pair<int64_t, MemoryUse> a{0, MemoryUse::PlannedTensors};
    {
      std::lock_guard<std::mutex> lock(allocationsMutex);
      auto it = allocations.find(p);
      if (it != allocations.end()) {
        a = it->second;
        allocations.erase(it);
      }
    }
    deviceMemory().released(a.second, a.first);
  }
  releaseMemory(p, onDevice);
}

double Device::sumOfSquaresOf(const std::vector<Tensor> &grads) {
  double total = 0;
  for (const Tensor &g : grads)
    total += sumOfSquares(g);
  return total;
}

Status Device::scaleAll(const std::vector<Tensor> &tensors, float factor) {
  for (const Tensor &t : tensors)
    ZEROC_RETURN_IF_ERROR(scaleInPlace(t, factor));
  return {};
}

Status Device::adamUpdates(const cpu::AdamSettings &settings, int64_t step,
                           const std::vector<AdamPart> &parts) {
  for (const AdamPart &p : parts)
    ZEROC_RETURN_IF_ERROR(adamUpdate(settings, step, p.grad, p.master, p.expAvg,
                                     p.expAvgSq,
                                     p.param16 ? &*p.param16 : nullptr));
  return {};
}

} // namespace zeroc::runtime
