//===- Device.cuh - Device-side helpers of the CUDA kernels ----*- CUDA -*-===//
//
// Internal to runtime/kernels/cuda: loading any float storage dtype as f32
// and storing f32 rounded once (the same round-to-nearest-even as
// zeroc/Support/Float16.h), warp and block reductions with a fixed order
// (so every kernel is deterministic), and grid-stride index helpers.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_DEVICE_CUH
#define ZEROC_RUNTIME_KERNELS_CUDA_DEVICE_CUH

#include "cuda/Common.h"

#include <cuda_fp16.h>

#include <cstdint>

namespace zeroc::cuda {

//===----------------------------------------------------------------------===//
// Storage dtypes
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float bf16BitsToFloat(uint16_t h) {
  return __uint_as_float(uint32_t(h) << 16);
}

/// Float16.h's floatToBf16, bit for bit (NaN payloads included).
__device__ __forceinline__ uint16_t floatToBf16Bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// Element `i` of float storage `p` of dtype `t`, as f32 (exact).
__device__ __forceinline__ float loadAsFloat(const void *p, DType t,
                                             int64_t i) {
  switch (t) {
  case DType::BF16:
    return bf16BitsToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::F16:
    return __half2float(static_cast<const __half *>(p)[i]);
  default:
    return static_cast<const float *>(p)[i];
  }
}

/// Stores `x` rounded to nearest even into element `i` of `p` (dtype `t`).
/// f16 uses the hardware conversion (IEEE round to nearest even, subnormals,
/// overflow to infinity), equal to Float16.h's but for NaN payloads.
__device__ __forceinline__ void storeFromFloat(void *p, DType t, int64_t i,
                                               float x) {
  switch (t) {
  case DType::BF16:
    static_cast<uint16_t *>(p)[i] = floatToBf16Bits(x);
    return;
  case DType::F16:
    static_cast<__half *>(p)[i] = __float2half_rn(x);
    return;
  default:
    static_cast<float *>(p)[i] = x;
  }
}

__device__ __forceinline__ float quietNaN() {
  return __int_as_float(0x7fc00000);
}

/// `x` rounded to what `t` stores, as f32 (cpu::roundToDType).
__device__ __forceinline__ float roundToStorage(float x, DType t) {
  switch (t) {
  case DType::BF16:
    return bf16BitsToFloat(floatToBf16Bits(x));
  case DType::F16:
    return __half2float(__float2half_rn(x));
  default:
    return x;
  }
}

//===----------------------------------------------------------------------===//
// Reductions (fixed order: deterministic for a given block size)
//===----------------------------------------------------------------------===//

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op> __device__ T warpReduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Reduces `v` over the block; every thread receives the result. blockDim.x
/// must be a multiple of 32 (at most 1024), and every thread must call it.
template <typename T, typename Op>
__device__ T blockReduce(T v, Op op, T identity) {
  __shared__ T partials[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warpReduce(v, op);
  __syncthreads(); // `partials` may still be read by a previous call.
  if (lane == 0)
    partials[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? partials[lane] : identity;
  return warpReduce(v, op);
}

template <typename T> __device__ T blockSum(T v) {
  return blockReduce(v, SumOp{}, T(0));
}

__device__ __forceinline__ float blockMax(float v) {
  return blockReduce(v, MaxOp{}, -INFINITY);
}

//===----------------------------------------------------------------------===//
// Grid-stride loops
//===----------------------------------------------------------------------===//

__device__ __forceinline__ int64_t globalThread() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t globalThreads() {
  return int64_t(gridDim.x) * blockDim.x;
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_DEVICE_CUH
