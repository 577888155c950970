//===- Common.h - Host-side helpers of the CUDA kernels ---------*- C++ -*-===//
//
// Internal to runtime/kernels/cuda: CUDA errors as a Status, stream-ordered
// scratch memory, and grid sizes. Not part of the backend's API.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_COMMON_H
#define ZEROC_RUNTIME_KERNELS_CUDA_COMMON_H

#include "cuda/Types.h"
#include "memory/MemoryCounter.h"

#include <algorithm>
#include <string>

namespace zeroc::cuda {

/// "op: <what> failed: cudaErrorX (text)", or ok for cudaSuccess.
inline Status cudaStatus(const char *op, const char *what, cudaError_t e) {
  if (e == cudaSuccess)
    return {};
  return {std::string(op) + ": " + what + " failed: " + cudaGetErrorName(e) +
          " (" + cudaGetErrorString(e) + ")"};
}

/// After a kernel launch: the launch error, if any (configuration errors and
/// errors left by earlier asynchronous work on the device).
inline Status launchStatus(const char *op) {
  return cudaStatus(op, "kernel launch", cudaGetLastError());
}

/// Device memory for one call's temporaries, allocated and freed in stream
/// order (cudaMallocAsync / cudaFreeAsync): no device synchronization, and
/// the memory is reused by the pool once the stream has passed the free.
class Scratch {
public:
  Scratch() = default;
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  ~Scratch() {
    if (ptr_) {
      cudaFreeAsync(ptr_, stream_);
      runtime::deviceMemory().released(runtime::MemoryUse::KernelScratch,
                                       int64_t(bytes_));
    }
  }

  /// Allocates `bytes` (nothing for 0) on `stream`. Counted as kernel
  /// scratch (memory/MemoryCounter.h) from the enqueue to the free's.
  Status allocate(const char *op, size_t bytes, cudaStream_t stream) {
    stream_ = stream;
    if (bytes == 0)
      return {};
    Status st = cudaStatus(op, "cudaMallocAsync of scratch memory",
                           cudaMallocAsync(&ptr_, bytes, stream));
    if (ptr_) {
      bytes_ = bytes;
      runtime::deviceMemory().allocated(runtime::MemoryUse::KernelScratch,
                                        int64_t(bytes));
    }
    return st;
  }

  template <typename T = void> T *get() const { return static_cast<T *>(ptr_); }

private:
  void *ptr_ = nullptr;
  size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

constexpr int kThreads = 256;
/// Grid-stride loops need no more blocks than this to fill an H100.
constexpr int64_t kMaxBlocks = 4096;

/// Blocks for `n` items of `perBlock` each, at least 1, at most `cap`.
inline unsigned gridFor(int64_t n, int64_t perBlock = kThreads,
                        int64_t cap = kMaxBlocks) {
  return unsigned(std::clamp<int64_t>((n + perBlock - 1) / perBlock, 1, cap));
}

/// Converts `n` elements between float storage dtypes, rounding once (a
/// plain copy when the dtypes agree). Defined in Cast.cu.
Status convertElements(const char *op, const void *src, DType srcType,
                       void *dst, DType dstType, int64_t n,
                       cudaStream_t stream);

/// Blocks for kernels that give a block to each row (grid-stride over rows).
inline unsigned rowGrid(int64_t rows) {
  return unsigned(std::clamp<int64_t>(rows, 1, 65535));
}

/// `t`'s data offset by `elements` elements.
inline void *offsetData(const Tensor &t, int64_t elements) {
  return static_cast<char *>(t.data) + elements * bytesPerElement(t.dtype);
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_COMMON_H
