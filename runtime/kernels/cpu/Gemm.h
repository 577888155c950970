//===- Gemm.h - The one matrix product of the CPU kernels -------*- C++ -*-===//
//
// A row-major single-precision GEMM over cblas_sgemm, with the cases BLAS
// refuses (a zero dimension) handled here, and the size check the kernels
// make before calling it (BLAS takes 32-bit dimensions).
//
// Same bits for any thread count: OpenBLAS runs single-threaded
// (cpu::setThreads), and a large product is split into slices of C's rows
// or columns, a count fixed by the shape alone (gemmSlices), each slice one
// BLAS call with the whole K on the kernels' OpenMP pool. K is never split:
// every element of C is one BLAS call's sum, whichever thread computes it.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_GEMM_H
#define ZEROC_RUNTIME_KERNELS_CPU_GEMM_H

#include "zeroc/Support/GemmSlices.h"

#include <cstdint>
#include <initializer_list>
#include <string>

namespace zeroc::cpu {

/// C[m, n] = alpha * op(A) op(B) + beta * C, where op(A) is [m, k] (A is
/// [k, m] when transposed) and op(B) is [k, n]; leading dimensions in
/// elements. With k == 0 the product is zero: C = beta * C. Sliced over
/// the pool as gemmSlices says.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc);

/// The same as one BLAS call on the calling thread.
void gemmSerial(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b,
                int64_t ldb, float beta, float *c, int64_t ldc);

// How gemm splits C (gemmSlices, kGemmSlice*): zeroc/Support/GemmSlices.h,
// shared with the cost model, which prices a split product's handoff
// between cores.
using zeroc::GemmSlices;
using zeroc::gemmSlices;
using zeroc::kGemmMaxSlices;
using zeroc::kGemmSliceAlign;
using zeroc::kGemmSliceMin;
using zeroc::kGemmSliceMinWork;

/// Empty when every dimension and leading dimension fits BLAS's int.
std::string checkGemmDims(const char *op, std::initializer_list<int64_t> dims);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_GEMM_H
