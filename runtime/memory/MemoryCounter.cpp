//===- MemoryCounter.cpp - The device memory this process allocates -------===//

#include "memory/MemoryCounter.h"

#include <algorithm>

namespace zeroc::runtime {

std::string_view memoryUseName(MemoryUse use) {
  switch (use) {
  case MemoryUse::PlannedTensors:
    return "planned_tensors";
  case MemoryUse::UnplannedWorkspace:
    return "unplanned_workspace";
  case MemoryUse::KernelScratch:
    return "kernel_scratch";
  case MemoryUse::CollectiveStaging:
    return "collective_staging";
  case MemoryUse::DeviceRuntime:
    return "device_runtime";
  }
  return "?";
}

int64_t MemoryCounts::total() const {
  int64_t sum = 0;
  for (int64_t b : inUse)
    sum += b;
  return sum;
}

void MemoryCounter::notePeaks() {
  for (size_t i = 0; i < kMemoryUses; ++i)
    c.peak[i] = std::max(c.peak[i], c.inUse[i]);
  c.tensorPeak =
      std::max(c.tensorPeak, c.of(MemoryUse::PlannedTensors) +
                                 c.of(MemoryUse::UnplannedWorkspace));
  c.totalPeak = std::max(c.totalPeak, c.total());
}

void MemoryCounter::allocated(MemoryUse use, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  c.inUse[size_t(use)] += bytes;
  notePeaks();
}

void MemoryCounter::released(MemoryUse use, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  c.inUse[size_t(use)] -= bytes;
}

MemoryCounts MemoryCounter::counts() const {
  std::lock_guard<std::mutex> lock(mutex);
  return c;
}

void MemoryCounter::resetPeaks() {
  std::lock_guard<std::mutex> lock(mutex);
  c.peak = c.inUse;
  c.tensorPeak = 0;
  c.totalPeak = 0;
  notePeaks();
}

MemoryCounter &deviceMemory() {
  // Never destroyed: static kernels' and communicators' buffers may be
  // released after main returns.
  static MemoryCounter *counter = new MemoryCounter;
  return *counter;
}

} // namespace zeroc::runtime
