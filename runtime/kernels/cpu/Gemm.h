//===- Gemm.h - The one matrix product of the CPU kernels -------*- C++ -*-===//
//
// A row-major single-precision GEMM over cblas_sgemm, with the cases BLAS
// refuses (a zero dimension) handled here, and the size check the kernels
// make before calling it (BLAS takes 32-bit dimensions).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_GEMM_H
#define ZEROC_RUNTIME_KERNELS_CPU_GEMM_H

#include <cstdint>
#include <initializer_list>
#include <string>

namespace zeroc::cpu {

/// C[m, n] = alpha * op(A) op(B) + beta * C, where op(A) is [m, k] (A is
/// [k, m] when transposed) and op(B) is [k, n]; leading dimensions in
/// elements. With k == 0 the product is zero: C = beta * C.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc);

/// Empty when every dimension and leading dimension fits BLAS's int.
std::string checkGemmDims(const char *op, std::initializer_list<int64_t> dims);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_GEMM_H
