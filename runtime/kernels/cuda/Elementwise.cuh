//===- Elementwise.cuh - One thread per element ----------------*- CUDA -*-===//
//
// Internal to runtime/kernels/cuda: `out[i] = f(a[i], b[i])` over tensors of
// any float dtypes, read as f32 and rounded once, in a grid-stride loop.
// Each element is read and written by one thread, so `out` may alias `a`
// or `b`.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_ELEMENTWISE_CUH
#define ZEROC_RUNTIME_KERNELS_CUDA_ELEMENTWISE_CUH

#include "cuda/Device.cuh"

namespace zeroc::cuda {

/// `f` is a functor with `__device__ float operator()(float a, float b)`;
/// a null `b` reads as 0.
template <typename F>
__global__ void mapKernel(const void *a, DType aType, const void *b,
                          DType bType, void *out, DType outType, int64_t n,
                          F f) {
  for (int64_t i = globalThread(); i < n; i += globalThreads()) {
    float x = loadAsFloat(a, aType, i);
    float y = b ? loadAsFloat(b, bType, i) : 0.0f;
    storeFromFloat(out, outType, i, f(x, y));
  }
}

template <typename F>
Status launchMap(const char *op, const void *a, DType aType, const void *b,
                 DType bType, void *out, DType outType, int64_t n, F f,
                 cudaStream_t stream) {
  if (n == 0)
    return {};
  mapKernel<<<gridFor(n), kThreads, 0, stream>>>(a, aType, b, bType, out,
                                                 outType, n, f);
  return launchStatus(op);
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_ELEMENTWISE_CUH
