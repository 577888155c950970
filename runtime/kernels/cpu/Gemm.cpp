//===- Gemm.cpp - The one matrix product of the CPU kernels ---------------===//

#include "cpu/Gemm.h"

#include "cpu/Parallel.h"

#include <cblas.h>

#include <algorithm>
#include <climits>

namespace zeroc::cpu {

void gemmSerial(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                float alpha, const float *a, int64_t lda, const float *b,
                int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha,
              a, int(lda), b, int(ldb), beta, c, int(ldc));
}

void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
  GemmSlices s = gemmSlices(m, n, k);
  if (s.count <= 1) {
    gemmSerial(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Each slice is a whole block of C's rows (or columns) with the whole K:
  // every element's sum is the one BLAS call's, whichever thread runs it.
  // Row-major op(A) is [m, k]: rows i0.. start at a + i0 * lda, or at
  // column a + i0 when A is stored [k, m]. op(B) is [k, n]: columns j0..
  // start at b + j0, or at row b + j0 * ldb when B is stored [n, k].
  parallelFor(s.count, kParallelMinWork, [&](int64_t i) {
    int64_t begin = i * s.size;
    if (s.alongM) {
      int64_t rows = std::min(s.size, m - begin);
      gemmSerial(transA, transB, rows, n, k, alpha,
                 a + (transA ? begin : begin * lda), lda, b, ldb, beta,
                 c + begin * ldc, ldc);
    } else {
      int64_t cols = std::min(s.size, n - begin);
      gemmSerial(transA, transB, m, cols, k, alpha, a, lda,
                 b + (transB ? begin * ldb : begin), ldb, beta, c + begin, ldc);
    }
  });
}

std::string checkGemmDims(const char *op, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d > INT_MAX)
      return std::string(op) + ": dimension " + std::to_string(d) +
             " exceeds what BLAS takes (" + std::to_string(INT_MAX) + ")";
  return "";
}

} // namespace zeroc::cpu
