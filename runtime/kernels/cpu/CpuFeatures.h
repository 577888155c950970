//===- CpuFeatures.h - The vector extensions this CPU has -------*- C++ -*-===//
//-*-===//
//
// What the kernels' run-time loop choices (adamLoopFor, vectorLoopFor) ask:
// whether the CPU running the process has AVX-512F and AVX2, read once.
// False on every other architecture and compiler, where those loops are
// not built.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_CPUFEATURES_H
#define ZEROC_RUNTIME_KERNELS_CPU_CPUFEATURES_H

namespace zeroc::cpu {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
inline bool cpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
inline bool cpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#else
inline bool cpuHasAvx512() { return false; }
inline bool cpuHasAvx2() { return false; }
#endif

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_CPUFEATURES_H
