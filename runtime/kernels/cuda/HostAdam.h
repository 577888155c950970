//===- HostAdam.h - The offload path's Adam on the host ---------*- C++ -*-===//
//
// With the optimizer offloaded (ZeRO-Offload), the f32 master weights and
// Adam moments live in host memory and the step runs on the CPU. This is
// cpu::adamUpdate made fast for that: the same arguments, checks and results
// element for element (bit for bit: the same per-step constants and order of
// operations, no fused multiply-adds), but vectorized (AVX2 when the CPU has
// it, chosen at run time, else the compiler's vectorization of the portable
// loop) and split over std::threads in contiguous ranges. Plain C++: no
// CUDA needed.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_HOSTADAM_H
#define ZEROC_RUNTIME_KERNELS_CUDA_HOSTADAM_H

#include "cpu/Optimizer.h"

namespace zeroc::cuda {

struct HostAdamOptions {
  /// At most this many threads (0: std::thread::hardware_concurrency());
  /// fewer for small tensors, each thread taking at least 64 Ki elements.
  unsigned threads = 0;
  /// false runs the portable loop even where AVX2 is available (tests).
  bool simd = true;
};

/// cpu::adamUpdate on host tensors.
cpu::Status hostAdamUpdate(const cpu::AdamSettings &settings, int64_t step,
                           const cpu::Tensor &grad, const cpu::Tensor &master,
                           const cpu::Tensor &expAvg,
                           const cpu::Tensor &expAvgSq,
                           const cpu::Tensor *param16,
                           const HostAdamOptions &options = {});

/// Whether hostAdamUpdate runs its AVX2 loop on this CPU.
bool hostAdamUsesAvx2();

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_HOSTADAM_H
