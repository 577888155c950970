//===- Gemm.h - The matrix products of the CUDA kernels ---------*- C++ -*-===//
//
// Internal to runtime/kernels/cuda. Both take row-major operands, with the
// meaning of cpu::gemm (cpu/Gemm.h), and accumulate in f32:
// - linearGemm: one product in any mix of float dtypes with an optional
//   bias, through cuBLASLt (bias epilogue, f32 compute, no TF32) when the
//   dtypes allow it, else through cublasGemmEx into f32 and a rounding
//   kernel. Either way the result is rounded once into C's dtype.
// - gemmF32Batched: a strided batch of f32 products
// (cublasGemmStridedBatchedEx,
//   f32 compute), for attention.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_GEMM_H
#define ZEROC_RUNTIME_KERNELS_CUDA_GEMM_H

#include "cuda/Common.h"
#include "cuda/Context.h"

#include <string>

namespace zeroc::cuda {

/// A row-major matrix operand: `trans` means op(X) = X^T; `ld` in elements.
struct GemmOperand {
  const void *data;
  DType dtype;
  int64_t ld;
  bool trans;
};

/// C[m, n] = op(A)[m, k] op(B)[k, n] (+ bias[n] on every row), rounded once
/// into `cType`. With k == 0, C is the bias (or zero).
Status linearGemm(const char *op, KernelContext &ctx, cudaStream_t stream,
                  int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b,
                  const Tensor *bias, void *c, DType cType, int64_t ldc);

/// Products whose A or C rows are not a multiple of 16 bytes (an odd
/// vocabulary's logits: GPT-2's 50,257 bf16 a row), for which cuBLASLt has
/// only slow kernels (GPT-2 124M's lm_head at 94-145 TFLOP/s on an H100,
/// against 667 for aligned 4096^3): with `staged`, linearGemm copies such
/// operands through staging buffers with rows rounded up to 16 bytes
/// (cudaMemcpy2DAsync), in chunks of C's rows of at most `bytes` of
/// staging, and C back the same way. From ZEROC_CUDA_GEMM_ROWS
/// (`direct`, the default, or `staged`) when first read; tests may change
/// it. Not yet run on a GPU (docs/gpu-kernels.md).
struct GemmStaging {
  bool staged = false;
  int64_t bytes = int64_t(64) << 20;
  /// Set when ZEROC_CUDA_GEMM_ROWS has another value: every product then
  /// fails with it.
  std::string error;
  /// Products that went through staging (for tests: that the path ran).
  int64_t stagedProducts = 0;
};
GemmStaging &gemmStaging();
/// The setting for a value of ZEROC_CUDA_GEMM_ROWS (null: unset).
GemmStaging gemmStagingFrom(const char *value);

/// For each i < batch: C_i = alpha op(A_i) op(B_i) + beta C_i, where X_i
/// starts `strideX` elements after X_{i-1} (a stride may be 0).
Status gemmF32Batched(const char *op, KernelContext &ctx, cudaStream_t stream,
                      bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, int64_t strideA,
                      const float *b, int64_t ldb, int64_t strideB, float beta,
                      float *c, int64_t ldc, int64_t strideC, int64_t batch);

/// Converts `n` elements of float storage to f32 (a copy when already f32).
Status widenToF32(const char *op, const void *src, DType srcType, float *dst,
                  int64_t n, cudaStream_t stream);

/// `t` as f32: its own data when it is f32, else a converted copy in
/// `scratch`.
Status f32View(const char *op, const Tensor &t, Scratch &scratch,
               cudaStream_t stream, const float *&view);

/// Where to compute `t` in f32: its own data when it is f32, else
/// `scratch`, which commitOutput then rounds into `t`.
Status f32Output(const char *op, const Tensor &t, Scratch &scratch,
                 cudaStream_t stream, float *&view);
Status commitOutput(const char *op, const float *view, const Tensor &t,
                    cudaStream_t stream);

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_GEMM_H
