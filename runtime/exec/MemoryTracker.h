//===- MemoryTracker.h - The executor's allocations, counted ----*- C++ -*-===//
//
// Every byte the executor allocates goes through a MemoryTracker, which
// counts it by placement and keeps a device high-water mark by the plan's
// own accounting (the arena counted as far as it is used): the tracker's
// figure in zerorun's log. The memory actually allocated is counted below
// it, by the device's counting allocator (memory/MemoryCounter.h), whose
// high-water mark zerorun compares with the plan's prediction
// (docs/zerorun.md, "Memory").
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_MEMORYTRACKER_H
#define ZEROC_RUNTIME_EXEC_MEMORYTRACKER_H

#include "memory/MemoryCounter.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

namespace zeroc::runtime {

class Device;

/// Counts the bytes the executor allocates, by placement, and the device
/// high-water mark. The arena is allocated once but counted as it is used:
/// its high-water mark is the highest arena byte any buffer, saved state or
/// workspace has occupied, so memory the plan reserved but the run never
/// touched does not count, and memory outside the plan shows as the excess
/// over the prediction. Thread-safe.
class MemoryTracker {
public:
  /// `alignment`-byte aligned (a power of two, at least 64), zero-filled.
  /// `device` selects the counter; `use` is what the device's counting
  /// allocator files device memory under (memory/MemoryCounter.h).
  std::shared_ptr<char> allocate(int64_t bytes, bool device,
                                 int64_t alignment = 64,
                                 MemoryUse use = MemoryUse::PlannedTensors);
  /// The arena: allocated like allocate(bytes, true), counted by useArena.
  std::shared_ptr<char> allocateArena(int64_t bytes);
  /// Allocations go through `device` (else aligned host memory); it must
  /// outlive every allocation.
  void setDevice(Device *device) { owner = device; }
  /// Records that arena bytes [0, end) may be in use.
  void useArena(int64_t end);
  int64_t deviceBytes() const;
  int64_t hostBytes() const;
  int64_t devicePeak() const;

private:
  void notePeak() { peak = std::max(peak, device + arenaHigh); }
  mutable std::mutex mutex;
  Device *owner = nullptr;
  int64_t device = 0, host = 0, peak = 0, arenaHigh = 0;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_MEMORYTRACKER_H
