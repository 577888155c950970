//===- Context.cpp - cuBLAS handles and workspace of one stream -----------===//

#include "cuda/Context.h"

#include "cuda/Common.h"
#include "cuda/ContextImpl.h"

namespace zeroc::cuda {

static Status blasStatus(const char *what, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return {};
  return {std::string("cuda context: ") + what + " failed: " +
          cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")"};
}

KernelContext::KernelContext(size_t workspaceBytes)
    : impl_(std::make_unique<Impl>()) {
  impl_->workspaceBytes = workspaceBytes;
}

KernelContext::~KernelContext() {
  // Destroying handles and freeing device memory synchronizes; a context
  // lives as long as its stream's work.
  if (impl_->blas)
    cublasDestroy(impl_->blas);
  if (impl_->lt)
    cublasLtDestroy(impl_->lt);
  if (impl_->workspace)
    cudaFree(impl_->workspace);
}

Status KernelContext::init() {
  Impl &s = *impl_;
  if (s.ready)
    return {};
  if (!s.workspace && s.workspaceBytes > 0)
    ZEROC_RETURN_IF_ERROR(
        cudaStatus("cuda context", "cudaMalloc of the workspace",
                   cudaMalloc(&s.workspace, s.workspaceBytes)));
  if (!s.lt)
    ZEROC_RETURN_IF_ERROR(blasStatus("cublasLtCreate", cublasLtCreate(&s.lt)));
  if (!s.blas) {
    ZEROC_RETURN_IF_ERROR(blasStatus("cublasCreate", cublasCreate(&s.blas)));
    // f32 GEMMs stay f32: no TF32 tensor cores behind our back.
    ZEROC_RETURN_IF_ERROR(blasStatus(
        "cublasSetMathMode", cublasSetMathMode(s.blas, CUBLAS_DEFAULT_MATH)));
  }
  // Keep freed scratch in the stream-ordered pool across synchronizations
  // (the default threshold of 0 returns it to the OS at every sync, and the
  // executor synchronizes every step).
  int device = 0;
  cudaMemPool_t pool;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  s.ready = true;
  return {};
}

} // namespace zeroc::cuda
