//===- ContextImpl.h - Inside a KernelContext -------------------*- C++ -*-===//
//
// Internal to runtime/kernels/cuda: the cuBLAS objects of a KernelContext
// and the cache of cuBLASLt algorithms, keyed by everything the heuristic
// looks at (shapes, dtypes, transposes, epilogue, pointer alignments).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_CONTEXTIMPL_H
#define ZEROC_RUNTIME_KERNELS_CUDA_CONTEXTIMPL_H

#include "cuda/Context.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <map>
#include <optional>

namespace zeroc::cuda {

struct KernelContext::Impl {
  size_t workspaceBytes = 0;
  void *workspace = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  bool ready = false;

  /// m, n, k, lda, ldb, ldd, transA, transB, A/B type, D type, bias type (-1
  /// for none), and the alignments of A, B, D and the bias.
  using AlgoKey = std::array<int64_t, 15>;
  /// nullopt: cuBLASLt has no algorithm for the key (use the fallback).
  std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> algos;
};

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_CONTEXTIMPL_H
