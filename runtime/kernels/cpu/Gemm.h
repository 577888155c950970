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

/// How gemm splits C: `count` slices of `size` rows (alongM) or columns
/// (the last one shorter), the longer of M and N. A function of the shape
/// only, never of the thread count.
struct GemmSlices {
  bool alongM = true;
  int64_t size = 0, count = 0;
};
GemmSlices gemmSlices(int64_t m, int64_t n, int64_t k);

/// Slices have at least kGemmSliceMin rows (or columns), a multiple of
/// kGemmSliceAlign, and kGemmSliceMinWork multiply-adds; at most
/// kGemmMaxSlices of them. Each slice packs the whole other operand again:
/// at one thread, GPT-2 124M's MLP products took 4-17% more CPU time in 16
/// slices than in one call, 0-10% in 8 (bench/startup-RESULTS.md).
inline constexpr int64_t kGemmSliceMin = 128;
/// Slices start on the BLAS kernel's tile grid, so that each element of C
/// goes through the same micro-kernel as in one call: OpenBLAS 0.3.21's Zen
/// kernels (AVX2) tile 24 rows, and a 128-row slice put 8 rows of every
/// slice in an edge kernel that rounds differently (600x300x200: 12,037 of
/// 180,000 elements differed from one call, up to 8e-4 relative); with
/// AVX-512 (SkylakeX) the tile is 16. 48 is a multiple of both.
inline constexpr int64_t kGemmSliceAlign = 48;
inline constexpr int64_t kGemmSliceMinWork = int64_t(1) << 21;
inline constexpr int64_t kGemmMaxSlices = 8;

/// Empty when every dimension and leading dimension fits BLAS's int.
std::string checkGemmDims(const char *op, std::initializer_list<int64_t> dims);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_GEMM_H
