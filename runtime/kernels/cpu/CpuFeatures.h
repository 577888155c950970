//===- CpuFeatures.h - The vector extensions this CPU has -------*- C++ -*-===//
//-*-===//
//
// What the kernels' run-time loop choices (adamLoopFor, vectorLoopFor) ask:
// whether the CPU running the process has AVX-512F and AVX2, read once.
// False on every other architecture and compiler, where those loops are
// not built (ZEROC_CPU_X86 undefined).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_CPUFEATURES_H
#define ZEROC_RUNTIME_KERNELS_CPU_CPUFEATURES_H

namespace zeroc::cpu {

/// Defined where the kernels build their AVX2 and AVX-512 loops (x86-64,
/// with GCC's or Clang's target attributes).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ZEROC_CPU_X86 1
#endif

#ifdef ZEROC_CPU_X86
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
