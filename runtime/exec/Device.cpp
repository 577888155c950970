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

} // namespace zeroc::runtime
