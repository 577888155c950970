//===- MemoryCounter.h - The device memory this process allocates -*- C++
//-*-===//
//
// The counting allocator zerorun's memory figures come from (docs/zerorun.md,
// "Memory"): every device allocation of the executor (exec/Device.h), every
// per-call scratch buffer of the CPU kernels, and the communicators' staging
// buffers count here, each under what it is for, so that the high-water
// mark of the memory the plan accounts for can be compared with the plan's
// prediction and what lies outside the plan can be named. One device per
// process, so one counter per process.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_MEMORY_MEMORYCOUNTER_H
#define ZEROC_RUNTIME_MEMORY_MEMORYCOUNTER_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string_view>
#include <vector>

namespace zeroc::runtime {

/// What device memory is for. The first is what the plan predicts; the
/// others lie outside the plan and are reported by name.
enum class MemoryUse : uint8_t {
  /// Persistent device tensors and the phases' arena, as the plan sizes
  /// them.
  PlannedTensors,
  /// Tensors the executor allocates because the plan did not size them
  /// (workspaces and padded gathers of an older plan, values without an
  /// arena offset): tensor memory, but not the plan's.
  UnplannedWorkspace,
  /// Per-call buffers of the kernels: f32 copies of 16-bit tensors,
  /// attention probabilities, row buffers.
  KernelScratch,
  /// The communicators' buffers: f32 copies of 16-bit inputs of a
  /// reduction (MPI), receive scratch and scalar buffers (NCCL).
  CollectiveStaging,
  /// The device's own buffers: per-stream readback scratch and the
  /// cuBLASLt workspace (CUDA).
  DeviceRuntime,
};
inline constexpr size_t kMemoryUses = 5;

/// "planned_tensors", "unplanned_workspace", "kernel_scratch",
/// "collective_staging", "device_runtime": the names in zerorun's log.
std::string_view memoryUseName(MemoryUse use);

/// What a MemoryCounter has seen.
struct MemoryCounts {
  /// Bytes in use now, and each use's own high-water mark.
  std::array<int64_t, kMemoryUses> inUse{}, peak{};
  /// High-water mark of the tensors (PlannedTensors + UnplannedWorkspace):
  /// what is compared with the plan's predicted peak.
  int64_t tensorPeak = 0;
  /// High-water mark of everything counted.
  int64_t totalPeak = 0;

  int64_t of(MemoryUse use) const { return inUse[size_t(use)]; }
  int64_t peakOf(MemoryUse use) const { return peak[size_t(use)]; }
  int64_t total() const;
};

/// Bytes allocated and released, by use, and their high-water marks.
/// Thread-safe.
class MemoryCounter {
public:
  void allocated(MemoryUse use, int64_t bytes);
  void released(MemoryUse use, int64_t bytes);
  MemoryCounts counts() const;
  /// Starts the high-water marks again from the bytes in use now (tests).
  void resetPeaks();

private:
  void notePeaks();
  mutable std::mutex mutex;
  MemoryCounts c;
};

/// The device memory of this process: the CPU's on the CPU backend (host
/// memory), the GPU's on the CUDA backend.
MemoryCounter &deviceMemory();

/// A standard allocator whose allocations count in deviceMemory() as `Use`:
/// the scratch of kernels and communicators is a std::vector of this.
template <typename T, MemoryUse Use> struct CountingAllocator {
  using value_type = T;
  CountingAllocator() = default;
  template <typename U>
  CountingAllocator(const CountingAllocator<U, Use> &) noexcept {}
  template <typename U> struct rebind {
    using other = CountingAllocator<U, Use>;
  };
  T *allocate(size_t n) {
    T *p = static_cast<T *>(::operator new(n * sizeof(T)));
    deviceMemory().allocated(Use, int64_t(n * sizeof(T)));
    return p;
  }
  void deallocate(T *p, size_t n) noexcept {
    deviceMemory().released(Use, int64_t(n * sizeof(T)));
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const CountingAllocator<U, Use> &) const {
    return true;
  }
  template <typename U>
  bool operator!=(const CountingAllocator<U, Use> &) const {
    return false;
  }
};

/// A kernel's per-call scratch.
template <typename T>
using ScratchVector =
    std::vector<T, CountingAllocator<T, MemoryUse::KernelScratch>>;
/// A communicator's staging buffer.
template <typename T>
using StagingVector =
    std::vector<T, CountingAllocator<T, MemoryUse::CollectiveStaging>>;

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_MEMORY_MEMORYCOUNTER_H
