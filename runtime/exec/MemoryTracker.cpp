//===- MemoryTracker.cpp - The executor's allocations and their peak ------===//

#include "exec/MemoryTracker.h"

#include "exec/Device.h"

namespace zeroc::runtime {

namespace {
/// Where a MemoryTracker without a device allocates: host memory.
Device &hostDevice() {
  static std::unique_ptr<Device> cpu = makeCpuDevice();
  return *cpu;
}
} // namespace

std::shared_ptr<char> MemoryTracker::allocate(int64_t bytes, bool onDevice,
                                              int64_t alignment,
                                              MemoryUse use) {
  Device *dev = owner ? owner : &hostDevice();
  char *p = dev->allocate(bytes, onDevice, alignment, use);
  std::lock_guard<std::mutex> lock(mutex);
  int64_t *counter = onDevice ? &device : &host;
  *counter += bytes;
  notePeak();
  return std::shared_ptr<char>(p,
                               [this, bytes, counter, dev, onDevice](char *q) {
                                 {
                                   std::lock_guard<std::mutex> lock(mutex);
                                   *counter -= bytes;
                                 }
                                 dev->release(q, onDevice);
                               });
}

std::shared_ptr<char> MemoryTracker::allocateArena(int64_t bytes) {
  Device *dev = owner ? owner : &hostDevice();
  return std::shared_ptr<char>(dev->allocate(bytes, true),
                               [dev](char *q) { dev->release(q, true); });
}

void MemoryTracker::useArena(int64_t end) {
  std::lock_guard<std::mutex> lock(mutex);
  if (end > arenaHigh) {
    arenaHigh = end;
    notePeak();
  }
}

int64_t MemoryTracker::deviceBytes() const {
  std::lock_guard<std::mutex> lock(mutex);
  return device + arenaHigh;
}
int64_t MemoryTracker::hostBytes() const {
  std::lock_guard<std::mutex> lock(mutex);
  return host;
}
int64_t MemoryTracker::devicePeak() const {
  std::lock_guard<std::mutex> lock(mutex);
  return peak;
}

} // namespace zeroc::runtime
