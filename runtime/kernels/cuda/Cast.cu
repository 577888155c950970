//===- Cast.cu - Dtype casts, copies, accumulation on the GPU -------------===//

#include "cuda/Cast.h"

#include "cpu/Cast.h"
#include "cuda/Elementwise.cuh"

namespace zeroc::cuda {

namespace {

struct First {
  __device__ float operator()(float a, float) const { return a; }
};

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

} // namespace

Status convertElements(const char *op, const void *src, DType srcType,
                       void *dst, DType dstType, int64_t n,
                       cudaStream_t stream) {
  if (n == 0)
    return {};
  if (srcType == dstType) {
    // Any memory the device addresses (pinned host tensors too); ranges may
    // overlap, as the CPU's memmove allows: then through scratch.
    size_t bytes = size_t(n * bytesPerElement(srcType));
    if (src == dst)
      return {};
    auto a = reinterpret_cast<uintptr_t>(src),
         b = reinterpret_cast<uintptr_t>(dst);
    if (a < b + bytes && b < a + bytes) {
      Scratch tmp;
      ZEROC_RETURN_IF_ERROR(tmp.allocate(op, bytes, stream));
      ZEROC_RETURN_IF_ERROR(cudaStatus(
          op, "cudaMemcpyAsync",
          cudaMemcpyAsync(tmp.get(), src, bytes, cudaMemcpyDefault, stream)));
      src = tmp.get();
      return cudaStatus(
          op, "cudaMemcpyAsync",
          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    }
    return cudaStatus(
        op, "cudaMemcpyAsync",
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  }
  return launchMap(op, src, srcType, nullptr, DType::F32, dst, dstType, n,
                   First{}, stream);
}

Status castTensor(const Tensor &src, const Tensor &dst, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkCastTensor(src, dst));
  return convertElements("cast", src.data, src.dtype, dst.data, dst.dtype,
                         src.numel(), stream);
}

Status accumulate(const Tensor &acc, const Tensor &g, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkAccumulate(acc, g));
  return launchMap("accumulate", acc.data, acc.dtype, g.data, g.dtype, acc.data,
                   acc.dtype, acc.numel(), Add{}, stream);
}

Status zeroTensor(const Tensor &t, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkZeroTensor(t));
  if (t.numel() == 0)
    return {};
  return cudaStatus("zero", "cudaMemsetAsync",
                    cudaMemsetAsync(t.data, 0, size_t(t.bytes()), stream));
}

Status copyElements(const Tensor &src, int64_t srcOffset, const Tensor &dst,
                    int64_t dstOffset, int64_t n, cudaStream_t stream) {
  return convertElements("copy", offsetData(src, srcOffset), src.dtype,
                         offsetData(dst, dstOffset), dst.dtype, n, stream);
}

} // namespace zeroc::cuda
