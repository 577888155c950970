//===- Context.h - cuBLAS handles and workspace of one stream ---*- C++ -*-===//
//
// What the GEMM kernels (linear, attention) need beyond a launch: a cuBLASLt
// handle, a cuBLAS handle, the workspace both use, and the cuBLASLt
// algorithms already chosen for each GEMM shape. Create one per stream that
// runs kernels concurrently, once (init() allocates and synchronizes), and
// keep it for the run: the workspace is used in stream order, so two streams
// running at the same time must not share a context. Not thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_CONTEXT_H
#define ZEROC_RUNTIME_KERNELS_CUDA_CONTEXT_H

#include "KernelTypes.h"

#include <cstddef>
#include <memory>

namespace zeroc::cuda {

class KernelContext {
public:
  /// cuBLAS's recommendation for Hopper.
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;

  /// Makes no CUDA call: constructing a context needs no GPU.
  explicit KernelContext(size_t workspaceBytes = kDefaultWorkspaceBytes);
  ~KernelContext();
  KernelContext(const KernelContext &) = delete;
  KernelContext &operator=(const KernelContext &) = delete;

  /// Creates the handles and allocates the workspace on the current device
  /// (cudaMalloc synchronizes: call it before the first step). The GEMM
  /// kernels call it on first use; later calls return at once.
  runtime::Status init();

  /// The handles, workspace and algorithm cache (cuda/ContextImpl.h).
  struct Impl;
  Impl &impl() { return *impl_; }

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_CONTEXT_H
