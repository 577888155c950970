//===- Gemm.cpp - The one matrix product of the CPU kernels ---------------===//

#include "cpu/Gemm.h"

#include <cblas.h>

#include <climits>

namespace zeroc::cpu {

void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
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

std::string checkGemmDims(const char *op, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d > INT_MAX)
      return std::string(op) + ": dimension " + std::to_string(d) +
             " exceeds what BLAS takes (" + std::to_string(INT_MAX) + ")";
  return "";
}

} // namespace zeroc::cpu
