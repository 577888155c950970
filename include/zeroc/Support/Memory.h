//===- Memory.h - How a rank's memory adds up -------------------*- C++ -*-===//
//
// The sums every reader of a memory plan makes, defined once: what a
// persistent tensor takes on a rank, how buffers are aligned in a phase's
// arena, what a phase holds at its peak, and the device peak a plan
// predicts. The memory planner (zero-plan-memory), the inspector and
// `zeroc advise` (lib/Plan), and the runtime's executor use these, so that
// the prediction and the runtime's accounting cannot drift apart.
// MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_MEMORY_H
#define ZEROC_SUPPORT_MEMORY_H

#include "zeroc/Support/DType.h"

#include <algorithm>
#include <cstdint>

namespace zeroc {

/// Every buffer in a phase's arena, and every part of an op's workspace,
/// starts at a multiple of this many bytes (cuBLAS and NCCL want at least
/// 16; 256 keeps every vector load aligned).
inline constexpr int64_t kArenaAlignment = 256;

/// `bytes` rounded up to kArenaAlignment: the room a buffer takes.
constexpr int64_t arenaAligned(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// Bytes a rank stores of a persistent tensor: its local elements (the
/// shard, padding included, or the whole tensor) at its dtype.
constexpr int64_t localBytes(int64_t localNumel, DType dtype) {
  return localNumel * bytesPerElement(dtype);
}

/// What a phase holds on the device at its peak beyond persistent state:
/// its arena, allocated once and whole (at least the live peak it was
/// planned for; more by the allocator's holes).
constexpr int64_t phaseTransientBytes(int64_t arenaBytes,
                                      int64_t peakLiveBytes) {
  return std::max(arenaBytes, peakLiveBytes);
}

/// The device peak a plan predicts for a rank: the persistent state it
/// holds across the step plus the largest phase's transient bytes.
constexpr int64_t predictedPeakBytes(int64_t persistentDeviceBytes,
                                     int64_t largestPhaseTransientBytes) {
  return persistentDeviceBytes + largestPhaseTransientBytes;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_MEMORY_H
