//===- VectorMath.h - exp and sigmoid a compiler can vectorize --*- C++ -*-===//
//
// libm's expf and tanhf are calls the compiler cannot vectorize, and on the
// 2-core development VM glibc's tanhf took 8-13 ns an element (more far from
// 0): tiny GPT-2's gelu and gelu_backward were 45% of its micro-step
// (bench/RESULTS.md, "Activations without libm"). These are branch-free
// inline functions of IEEE operations only, so that a loop over them
// vectorizes, and they round alike in every lane width: a file that uses
// them is compiled with -ffp-contract=off (no fused multiply-add), so its
// portable, AVX2 and AVX-512 loops give the same bits.
//
// expApprox is Cephes' expf: x = n ln 2 + r, |r| <= ln 2 / 2 (ln 2 in two
// parts, the first exact in n ln2_hi), e^r from a degree-7 polynomial, 2^n
// built in the exponent bits. Within 2 ulp of exp over [-87, 88.72]
// (KernelTest's ExpApprox.WithinTwoUlpOfExp checks every 97th float there);
// +inf above 88.7228 (expf's overflow), 0 below -87.3365 (where expf is
// subnormal), NaN for NaN.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_VECTORMATH_H
#define ZEROC_RUNTIME_KERNELS_CPU_VECTORMATH_H

#include <cstdint>
#include <limits>

namespace zeroc::cpu {

inline float expApprox(float x) {
  // NaN computes e^0 (converting NaN to an integer would be undefined) and
  // is returned as itself at the end.
  float c = x > 88.72283935546875f ? 88.72283935546875f : x;
  c = c < -87.33654022216797f ? -87.33654022216797f : c;
  c = c != c ? 0.0f : c;
  // n = round(c log2 e) in [-126, 128]: adding and subtracting 1.5 * 2^23
  // rounds to an integer (|c log2 e| < 2^22).
  const float magic = 12582912.0f;
  float n = (c * 1.44269504088896341f + magic) - magic;
  float r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n as 2^h 2^(n - h), h = floor(n / 2): both normal floats' exponent
  // fields for n in [-126, 128] (2^128 alone is not a float).
  const int32_t ni = int32_t(n), h = ni >> 1;
  float e = p * __builtin_bit_cast(float, (h + 127) * (1 << 23));
  e = e * __builtin_bit_cast(float, (ni - h + 127) * (1 << 23));
  e = x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : e;
  e = x < -87.33654022216797f ? 0.0f : e;
  return x != x ? x : e;
}

/// 1 / (1 + e^-x): 0 for x below about -88.7 (e^-x overflows), 1 above
/// about 17 (e^-x under half an ulp of 1).
inline float sigmoidApprox(float x) { return 1.0f / (1.0f + expApprox(-x)); }

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_VECTORMATH_H
