//===- HalfFloat.h - bf16 and f16 bits to and from f32 ----------*- C++ -*-===//
//
// The runtime stores 16-bit floats as their raw bits (uint16_t). These are
// the conversions, rounding to nearest even like PyTorch and CUDA's
// __float2bfloat16 / __float2half_rn. MPI has no 16-bit float type, so the
// communicator reduces 16-bit buffers through f32 scratch using these.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_COMM_HALFFLOAT_H
#define ZEROC_RUNTIME_COMM_HALFFLOAT_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace zeroc::runtime {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float floatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float bf16ToFloat(uint16_t h) {
  return floatFromBits(uint32_t(h) << 16);
}

/// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) { // Zero or subnormal: mantissa * 2^-24.
    float v = float(mantissa) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exponent == 31) // Inf or NaN.
    return floatFromBits(sign | 0x7f800000u | (mantissa << 13));
  return floatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/// Round to nearest even; overflow gives infinity, NaN stays a (quiet) NaN.
inline uint16_t floatToF16(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) // Inf or NaN.
    return uint16_t(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x0200u : 0u) |
                    ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u) // >= 65520 rounds past 65504.
    return uint16_t(sign | 0x7c00u);
  if (magnitude < 0x38800000u) { // Below 2^-14: a subnormal half (or zero).
    // Exact scaling by 2^24, then the default (nearest-even) rounding.
    float scaled = floatFromBits(magnitude) * 16777216.0f;
    return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
  }
  // Rebias the exponent (127 -> 15) and round the dropped 13 bits to even.
  magnitude += 0xc8000fffu + ((magnitude >> 13) & 1u);
  return uint16_t(sign | (magnitude >> 13));
}

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_COMM_HALFFLOAT_H
