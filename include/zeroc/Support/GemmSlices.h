//===- GemmSlices.h - How the CPU kernels split a GEMM ----------*- C++ -*-===//
//
// The CPU GEMM (runtime/kernels/cpu/Gemm.h) splits a large product into
// slices of C's rows or columns, each one single-threaded BLAS call on the
// kernels' pool; a small one runs on the calling thread. The rule is the
// shape's alone, never the thread count's. The cost model uses the same
// rule to know which products other threads share (their operands cross
// between cores: CostModel::handoffTime).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_GEMMSLICES_H
#define ZEROC_SUPPORT_GEMMSLICES_H

#include <algorithm>
#include <cstdint>

namespace zeroc {

/// Slices have at least kGemmSliceMin rows (or columns), a multiple of
/// kGemmSliceAlign, and kGemmSliceMinWork multiply-adds; at most
/// kGemmMaxSlices of them. Each slice packs the whole other operand again:
/// at one thread, GPT-2 124M's MLP products took 4-17% more CPU time in 16
/// slices than in one call, 0-10% in 8 (bench/startup-RESULTS.md).
inline constexpr int64_t kGemmSliceMin = 128;
/// Slices start on the BLAS kernel's tile grid, so that each element of C
/// goes through the same micro-kernel as in one call: OpenBLAS 0.3.21's Zen
/// kernels (AVX2) tile 24 rows, and a 128-row slice put 8 rows of every
/// slice in an edge kernel that rounds differently (600x300x200: 12,037 of
/// 180,000 elements differed from one call, up to 8e-4 relative); with
/// AVX-512 (SkylakeX) the tile is 16. 48 is a multiple of both.
inline constexpr int64_t kGemmSliceAlign = 48;
inline constexpr int64_t kGemmSliceMinWork = int64_t(1) << 21;
inline constexpr int64_t kGemmMaxSlices = 8;

/// How the CPU gemm splits C[m, n] (a product of K = k): `count` slices of
/// `size` rows (alongM) or columns (the last one shorter), the longer of M
/// and N; one slice (the whole product on the calling thread) below the
/// thresholds.
struct GemmSlices {
  bool alongM = true;
  int64_t size = 0, count = 0;
};
inline GemmSlices gemmSlices(int64_t m, int64_t n, int64_t k) {
  GemmSlices s;
  s.alongM = m >= n;
  int64_t along = s.alongM ? m : n;
  int64_t work = m * n * k; // multiply-adds
  s.size = along;
  s.count = along > 0 ? 1 : 0;
  if (work < 2 * kGemmSliceMinWork || along < 2 * kGemmSliceMin)
    return s;
  int64_t count = std::min(
      {kGemmMaxSlices, along / kGemmSliceMin, work / kGemmSliceMinWork});
  s.size = (along + count - 1) / count;
  s.size = (s.size + kGemmSliceAlign - 1) / kGemmSliceAlign * kGemmSliceAlign;
  s.count = (along + s.size - 1) / s.size;
  return s;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_GEMMSLICES_H
