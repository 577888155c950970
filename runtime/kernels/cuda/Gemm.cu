//===- Gemm.cu - The matrix products of the CUDA kernels ------------------===//

#include "cuda/Gemm.h"

#include "cuda/ContextImpl.h"
#include "cuda/Device.cuh"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace zeroc::cuda {

namespace {

cudaDataType cudaType(DType t) {
  switch (t) {
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

Status blasStatus(const char *op, const char *what, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return {};
  return {std::string(op) + ": " + what + " failed: " + cublasGetStatusName(s) +
          " (" + cublasGetStatusString(s) + ")"};
}

/// The largest power of two up to 256 that divides the address.
int64_t alignmentOf(const void *p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 1;
  while (alignment < 256 && address % uintptr_t(alignment * 2) == 0)
    alignment *= 2;
  return alignment;
}

/// Owners of cuBLASLt descriptors.
struct LtDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~LtDesc() {
    if (desc)
      cublasLtMatmulDescDestroy(desc);
  }
};
struct LtLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  ~LtLayout() {
    if (layout)
      cublasLtMatrixLayoutDestroy(layout);
  }
};
struct LtPreference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtPreference() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
  }
};

template <typename T>
cublasStatus_t setDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                       const T &value) {
  return cublasLtMatmulDescSetAttribute(d, a, &value, sizeof(value));
}

template <typename T>
cublasStatus_t setPref(cublasLtMatmulPreference_t p,
                       cublasLtMatmulPreferenceAttributes_t a, const T &value) {
  return cublasLtMatmulPreferenceSetAttribute(p, a, &value, sizeof(value));
}

// C[i, j] = round(src[i, j] + bias[j]) for i < m, j < n; a null `src` reads
// as zero and a null `bias` adds nothing. `src` may be `c` (f32, in place).
__global__ void finishRowsKernel(const float *src, int64_t ldSrc,
                                 const void *bias, DType biasType, void *c,
                                 DType cType, int64_t ldc, int64_t m,
                                 int64_t n) {
  for (int64_t e = globalThread(); e < m * n; e += globalThreads()) {
    int64_t i = e / n, j = e % n;
    float x = src ? src[i * ldSrc + j] : 0.0f;
    if (bias)
      x += loadAsFloat(bias, biasType, j);
    storeFromFloat(c, cType, i * ldc + j, x);
  }
}

// C_b[i, j] *= beta (0 writes zeros) for a strided batch of [m, n] matrices.
__global__ void scaleBatchedKernel(float *c, int64_t ldc, int64_t strideC,
                                   int64_t m, int64_t n, int64_t batch,
                                   float beta) {
  for (int64_t e = globalThread(); e < batch * m * n; e += globalThreads()) {
    int64_t b = e / (m * n), i = e / n % m, j = e % n;
    float &x = c[b * strideC + i * ldc + j];
    x = beta == 0.0f ? 0.0f : beta * x;
  }
}

Status finishRows(const char *op, const float *src, int64_t ldSrc,
                  const Tensor *bias, void *c, DType cType, int64_t ldc,
                  int64_t m, int64_t n, cudaStream_t stream) {
  finishRowsKernel<<<gridFor(m * n), kThreads, 0, stream>>>(
      src, ldSrc, bias ? bias->data : nullptr, bias ? bias->dtype : DType::F32,
      c, cType, ldc, m, n);
  return launchStatus(op);
}

// Points the cuBLAS handle at `stream` and our workspace: cublasSetStream
// resets the workspace to cuBLAS's own pool, so ours is set after it, every
// time.
cublasStatus_t bindStream(KernelContext::Impl &impl, cudaStream_t stream) {
  cublasStatus_t status = cublasSetStream(impl.blas, stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  return cublasSetWorkspace(impl.blas, impl.workspace, impl.workspaceBytes);
}

// The cuBLASLt path of linearGemm, in column-major terms: D'[n, m] =
// op(B') op(A') where B' is the row-major B (n x k as stored transposed or
// not) and A' the row-major A. `done` is false when cuBLASLt has no
// algorithm for the case; nothing was launched then.
Status ltMatmul(const char *op, KernelContext::Impl &impl, cudaStream_t stream,
                int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b,
                const void *bias, DType biasType, void *d, DType dType,
                int64_t ldd, bool &done) {
  done = false;
  LtDesc desc;
  LtLayout first, second, out;
  cublasOperation_t opFirst = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t s =
      cublasLtMatmulDescCreate(&desc.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = setDesc(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, opFirst);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = setDesc(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB, opSecond);
  if (bias) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setDesc(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                  CUBLASLT_EPILOGUE_BIAS);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setDesc(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setDesc(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                  int32_t(cudaType(biasType)));
  }
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&first.layout, cudaType(b.dtype),
                                   b.trans ? k : n, b.trans ? n : k, b.ld);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&second.layout, cudaType(a.dtype),
                                   a.trans ? m : k, a.trans ? k : m, a.ld);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&out.layout, cudaType(dType), n, m, ldd);
  ZEROC_RETURN_IF_ERROR(blasStatus(op, "cuBLASLt descriptor setup", s));

  KernelContext::Impl::AlgoKey key = {m,
                                      n,
                                      k,
                                      a.ld,
                                      b.ld,
                                      ldd,
                                      a.trans,
                                      b.trans,
                                      int64_t(a.dtype),
                                      int64_t(dType),
                                      bias ? int64_t(biasType) : -1,
                                      alignmentOf(a.data),
                                      alignmentOf(b.data),
                                      alignmentOf(d),
                                      bias ? alignmentOf(bias) : 0};
  auto found = impl.algos.find(key);
  if (found == impl.algos.end()) {
    LtPreference pref;
    s = cublasLtMatmulPreferenceCreate(&pref.pref);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setPref(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                  uint64_t(impl.workspaceBytes));
    // cuBLASLt's "A" is our B and its "B" our A.
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                  uint32_t(alignmentOf(b.data)));
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                  uint32_t(alignmentOf(a.data)));
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                  uint32_t(alignmentOf(d)));
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                  uint32_t(alignmentOf(d)));
    ZEROC_RETURN_IF_ERROR(blasStatus(op, "cuBLASLt preference setup", s));
    cublasLtMatmulHeuristicResult_t result = {};
    int count = 0;
    s = cublasLtMatmulAlgoGetHeuristic(impl.lt, desc.desc, first.layout,
                                       second.layout, out.layout, out.layout,
                                       pref.pref, 1, &result, &count);
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (s == CUBLAS_STATUS_SUCCESS && count > 0 &&
        result.state == CUBLAS_STATUS_SUCCESS)
      algo = result.algo;
    found = impl.algos.emplace(key, algo).first;
  }
  if (!found->second)
    return {};

  float alpha = 1.0f, beta = 0.0f;
  s = cublasLtMatmul(impl.lt, desc.desc, &alpha, b.data, first.layout, a.data,
                     second.layout, &beta, d, out.layout, d, out.layout,
                     &*found->second, impl.workspace, impl.workspaceBytes,
                     stream);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
    found->second.reset();
    return {};
  }
  ZEROC_RETURN_IF_ERROR(blasStatus(op, "cublasLtMatmul", s));
  done = true;
  return {};
}

} // namespace

Status widenToF32(const char *op, const void *src, DType srcType, float *dst,
                  int64_t n, cudaStream_t stream) {
  return convertElements(op, src, srcType, dst, DType::F32, n, stream);
}

Status f32Output(const char *op, const Tensor &t, Scratch &scratch,
                 cudaStream_t stream, float *&view) {
  view = t.f32();
  if (t.dtype == DType::F32)
    return {};
  ZEROC_RETURN_IF_ERROR(scratch.allocate(op, size_t(t.numel()) * 4, stream));
  view = scratch.get<float>();
  return {};
}

Status f32View(const char *op, const Tensor &t, Scratch &scratch,
               cudaStream_t stream, const float *&view) {
  float *f32;
  ZEROC_RETURN_IF_ERROR(f32Output(op, t, scratch, stream, f32));
  view = f32;
  if (t.dtype == DType::F32)
    return {};
  return widenToF32(op, t.data, t.dtype, f32, t.numel(), stream);
}

Status commitOutput(const char *op, const float *view, const Tensor &t,
                    cudaStream_t stream) {
  if (view == t.data)
    return {};
  return convertElements(op, view, DType::F32, t.data, t.dtype, t.numel(),
                         stream);
}

GemmStaging gemmStagingFrom(const char *value) {
  GemmStaging s;
  std::string v = value ? value : "";
  s.staged = v == "staged";
  if (!v.empty() && v != "staged" && v != "direct")
    s.error =
        "ZEROC_CUDA_GEMM_ROWS: expected direct or staged, found '" + v + "'";
  return s;
}

GemmStaging &gemmStaging() {
  static GemmStaging staging =
      gemmStagingFrom(std::getenv("ZEROC_CUDA_GEMM_ROWS"));
  return staging;
}

namespace {

bool alignedRows(int64_t ld, DType t) {
  return (ld * bytesPerElement(t)) % 16 == 0;
}

int64_t roundUp8(int64_t x) { return (x + 7) / 8 * 8; }

// `rows` rows of `width` bytes from `src` (pitch `srcPitch` bytes) to
// `dst` (pitch `dstPitch`).
Status copyRows(const char *op, void *dst, int64_t dstPitch, const void *src,
                int64_t srcPitch, int64_t width, int64_t rows,
                cudaStream_t stream) {
  return cudaStatus(op, "cudaMemcpy2DAsync of a staged GEMM operand",
                    cudaMemcpy2DAsync(dst, size_t(dstPitch), src,
                                      size_t(srcPitch), size_t(width),
                                      size_t(rows), cudaMemcpyDeviceToDevice,
                                      stream));
}

} // namespace

namespace {

// linearGemm with A's or C's rows misaligned (GemmStaging): C's rows in
// chunks, each through aligned staging buffers. Only for one dtype
// throughout and B aligned; `handled` false otherwise.
Status stagedGemm(const char *op, KernelContext &ctx, cudaStream_t stream,
                  int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b,
                  const Tensor *bias, void *c, DType cType, int64_t ldc,
                  bool &handled) {
  handled = false;
  const GemmStaging &staging = gemmStaging();
  if (!staging.error.empty())
    return {std::string(op) + ": " + staging.error};
  bool stageA = !alignedRows(a.ld, a.dtype);
  bool stageC = !alignedRows(ldc, cType);
  if (!staging.staged || (!stageA && !stageC) || a.dtype != b.dtype ||
      a.dtype != cType || !alignedRows(b.ld, b.dtype) ||
      reinterpret_cast<uintptr_t>(a.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(b.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(c) % 16 != 0)
    return {};
  handled = true;
  ++gemmStaging().stagedProducts;
  const int64_t es = bytesPerElement(cType);
  // Staging bytes per row of C: its own row, and A's share (a row of k
  // when A is not transposed, a column of k when it is).
  const int64_t perRow =
      (stageC ? roundUp8(n) : 0) * es + (stageA ? k * es : 0);
  int64_t chunk =
      std::max<int64_t>(8, staging.bytes / std::max<int64_t>(perRow, 1));
  chunk = std::min(roundUp8(m), chunk / 8 * 8);
  Scratch aStage, cStage;
  const int64_t ldA = a.trans ? roundUp8(chunk) : roundUp8(k);
  if (stageA)
    ZEROC_RETURN_IF_ERROR(aStage.allocate(
        op, size_t((a.trans ? k * ldA : chunk * ldA) * es), stream));
  const int64_t ldC = roundUp8(n);
  if (stageC)
    ZEROC_RETURN_IF_ERROR(
        cStage.allocate(op, size_t(chunk * ldC * es), stream));
  const char *aBytes = static_cast<const char *>(a.data);
  char *cBytes = static_cast<char *>(c);
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = std::min(chunk, m - r0);
    // This chunk's A: rows r0.. of A (columns r0.. of A^T).
    GemmOperand part = a;
    part.data = a.trans ? aBytes + r0 * es : aBytes + r0 * a.ld * es;
    if (stageA) {
      if (a.trans)
        ZEROC_RETURN_IF_ERROR(copyRows(op, aStage.get(), ldA * es, part.data,
                                       a.ld * es, rows * es, k, stream));
      else
        ZEROC_RETURN_IF_ERROR(copyRows(op, aStage.get(), ldA * es, part.data,
                                       a.ld * es, k * es, rows, stream));
      part.data = aStage.get();
      part.ld = ldA;
    }
    void *out = stageC ? cStage.get() : cBytes + r0 * ldc * es;
    ZEROC_RETURN_IF_ERROR(linearGemm(op, ctx, stream, rows, n, k, part, b, bias,
                                     out, cType, stageC ? ldC : ldc));
    if (stageC)
      ZEROC_RETURN_IF_ERROR(copyRows(op, cBytes + r0 * ldc * es, ldc * es,
                                     cStage.get(), ldC * es, n * es, rows,
                                     stream));
  }
  return {};
}

} // namespace

Status linearGemm(const char *op, KernelContext &ctx, cudaStream_t stream,
                  int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b,
                  const Tensor *bias, void *c, DType cType, int64_t ldc) {
  if (m == 0 || n == 0)
    return {};
  if (k == 0)
    return finishRows(op, nullptr, 0, bias, c, cType, ldc, m, n, stream);
  bool staged = false;
  ZEROC_RETURN_IF_ERROR(
      stagedGemm(op, ctx, stream, m, n, k, a, b, bias, c, cType, ldc, staged));
  if (staged)
    return {};
  ZEROC_RETURN_IF_ERROR(ctx.init());
  KernelContext::Impl &impl = ctx.impl();

  // cuBLAS multiplies operands of one dtype: widen the 16-bit one(s) of a
  // mixed pair (exact), keeping their leading dimensions.
  Scratch wideA, wideB;
  auto widen = [&](GemmOperand &x, int64_t rows, int64_t cols,
                   Scratch &scratch) -> Status {
    if (x.dtype == DType::F32)
      return {};
    int64_t count = (rows - 1) * x.ld + cols;
    ZEROC_RETURN_IF_ERROR(scratch.allocate(op, size_t(count) * 4, stream));
    ZEROC_RETURN_IF_ERROR(
        widenToF32(op, x.data, x.dtype, scratch.get<float>(), count, stream));
    x.data = scratch.get();
    x.dtype = DType::F32;
    return {};
  };
  if (a.dtype != b.dtype) {
    ZEROC_RETURN_IF_ERROR(widen(a, a.trans ? k : m, a.trans ? m : k, wideA));
    ZEROC_RETURN_IF_ERROR(widen(b, b.trans ? n : k, b.trans ? k : n, wideB));
  }

  // cuBLASLt writes D in the operands' dtype or f32, and takes a bias of
  // D's dtype (16-byte aligned to be safe); otherwise D is f32 scratch with
  // an f32 bias, rounded into C afterwards.
  DType dType = cType == a.dtype || cType == DType::F32 ? cType : DType::F32;
  const void *biasData = bias ? bias->data : nullptr;
  DType biasType = bias ? bias->dtype : DType::F32;
  Scratch wideBias;
  if (bias && (biasType != dType || alignmentOf(biasData) < 16)) {
    ZEROC_RETURN_IF_ERROR(wideBias.allocate(op, size_t(n) * 4, stream));
    ZEROC_RETURN_IF_ERROR(
        widenToF32(op, biasData, biasType, wideBias.get<float>(), n, stream));
    biasData = wideBias.get();
    biasType = DType::F32;
    dType = DType::F32;
  }
  Scratch dScratch;
  void *d = c;
  int64_t ldd = ldc;
  if (dType != cType) {
    ZEROC_RETURN_IF_ERROR(dScratch.allocate(op, size_t(m * n) * 4, stream));
    d = dScratch.get();
    ldd = n;
  }

  bool done = false;
  ZEROC_RETURN_IF_ERROR(ltMatmul(op, impl, stream, m, n, k, a, b, biasData,
                                 biasType, d, dType, ldd, done));
  if (done)
    return d == c ? Status{}
                  : finishRows(op, static_cast<const float *>(d), n, nullptr, c,
                               cType, ldc, m, n, stream);

  // No cuBLASLt algorithm (odd alignments, say): cublasGemmEx into f32 (C
  // itself when C is f32), then the bias and one rounding.
  float *f = cType == DType::F32 ? static_cast<float *>(c)
                                 : static_cast<float *>(dScratch.get());
  int64_t ldf = cType == DType::F32 ? ldc : n;
  if (!f) {
    ZEROC_RETURN_IF_ERROR(dScratch.allocate(op, size_t(m * n) * 4, stream));
    f = dScratch.get<float>();
  }
  cublasStatus_t s = bindStream(impl, stream);
  float alpha = 1.0f, beta = 0.0f;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasGemmEx(impl.blas, b.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                     a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m),
                     int(k), &alpha, b.data, cudaType(b.dtype), int(b.ld),
                     a.data, cudaType(a.dtype), int(a.ld), &beta, f, CUDA_R_32F,
                     int(ldf), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  ZEROC_RETURN_IF_ERROR(blasStatus(op, "cublasGemmEx", s));
  return finishRows(op, f, ldf, bias, c, cType, ldc, m, n, stream);
}

Status gemmF32Batched(const char *op, KernelContext &ctx, cudaStream_t stream,
                      bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, int64_t strideA,
                      const float *b, int64_t ldb, int64_t strideB, float beta,
                      float *c, int64_t ldc, int64_t strideC, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0)
    return {};
  if (k == 0) {
    if (beta == 1.0f)
      return {};
    scaleBatchedKernel<<<gridFor(batch * m * n), kThreads, 0, stream>>>(
        c, ldc, strideC, m, n, batch, beta);
    return launchStatus(op);
  }
  ZEROC_RETURN_IF_ERROR(ctx.init());
  KernelContext::Impl &impl = ctx.impl();
  cublasStatus_t s = bindStream(impl, stream);
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasGemmStridedBatchedEx(
        impl.blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
        transA ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &alpha, b,
        CUDA_R_32F, int(ldb), strideB, a, CUDA_R_32F, int(lda), strideA, &beta,
        c, CUDA_R_32F, int(ldc), strideC, int(batch), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
  return blasStatus(op, "cublasGemmStridedBatchedEx", s);
}

} // namespace zeroc::cuda
