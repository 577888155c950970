//===- Float16.h - bf16 and f16 to and from f32, in one place ---*- C++ -*-===//
//
// The conversions every 16-bit path shares: the CPU kernels' storage, the
// communicators' f32 accumulation of 16-bit reductions, checkpoints and
// safetensors. Round to nearest, ties to even; NaN stays NaN. Tested over
// every bit pattern in test/Runtime/KernelTest.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_FLOAT16_H
#define ZEROC_SUPPORT_FLOAT16_H

#include <cstdint>
#include <cstring>

namespace zeroc {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// bfloat16 is the top half of an f32: widening is a shift.
inline float bf16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

/// Round to nearest, ties to even; NaN stays a (quiet) NaN, overflow rounds
/// to infinity.
inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// IEEE binary16: 5 exponent bits (bias 15), 10 mantissa bits, subnormals.
inline float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31)
    return bitsFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/// Round to nearest, ties to even, into normals and subnormals; magnitudes
/// from 65520 up become infinity; NaN stays a (quiet) NaN.
inline uint16_t floatToF16(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t exponent = (u >> 23) & 0xffu;
  uint32_t mantissa = u & 0x7fffffu;
  if (exponent == 0xff)
    return mantissa ? uint16_t(sign | 0x7e00u | (mantissa >> 13))
                    : uint16_t(sign | 0x7c00u);
  int32_t e = int32_t(exponent) - 127 + 15;
  if (e >= 31)
    return uint16_t(sign | 0x7c00u);
  if (e <= 0) {
    // A subnormal result: shift the 24-bit significand down to units of
    // 2^-24 and round the bits shifted out.
    int32_t shift = 14 - e;
    if (shift > 25)
      return sign;
    uint32_t significand = mantissa | 0x800000u;
    uint32_t half = significand >> shift;
    uint32_t rest = significand & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u)))
      ++half;
    return uint16_t(sign | half);
  }
  // A carry out of the mantissa moves into the exponent, up to infinity.
  uint32_t half = (uint32_t(e) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half;
  return uint16_t(sign | half);
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_FLOAT16_H
