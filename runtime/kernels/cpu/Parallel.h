//===- Parallel.h - Parallel loops of the CPU kernels ------------*- C++
//-*-===//
//
// For the kernels' .cpp files (compiled with OpenMP): loops whose
// iterations are independent, each computing its outputs in a fixed order,
// so the result does not depend on the thread count (cpu/Threads.h). Small
// loops stay on the calling thread.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_PARALLEL_H
#define ZEROC_RUNTIME_KERNELS_CPU_PARALLEL_H

#include "cpu/OmpEdges.h"
#include "cpu/Threads.h"

#include <algorithm>
#include <cstdint>
#include <omp.h>
#include <utility>
#include <vector>

namespace zeroc::cpu {

/// f(i) for i in [0, n), on the pool when the whole loop is worth it
/// (`workPerItem`: about the element operations of one iteration). f must
/// not throw.
template <class F> void parallelFor(int64_t n, int64_t workPerItem, F &&f) {
  // Dynamic: on a busy machine a thread the OS does not run holds up one
  // item, not a static share of them. Any assignment gives the same bits.
  // A loop inside another's iteration (a GEMM in an attention head) stays
  // on its thread: the outer loop already holds the pool.
  bool worth = n > 1 &&
               n * std::max<int64_t>(workPerItem, 1) >= kParallelMinWork &&
               !omp_in_parallel();
  int team = threads();
  OmpEdges edges;
#pragma omp parallel for schedule(dynamic) num_threads(team) if (worth)
  for (int64_t i = 0; i < n; ++i) {
    edges.enter();
    f(i);
    edges.leave();
  }
}

/// f(begin, count) over [0, n) in chunks of `chunk` items, each item
/// about `workPerItem` element operations.
template <class F>
void parallelChunks(int64_t n, int64_t chunk, int64_t workPerItem, F &&f) {
  int64_t chunks = (n + chunk - 1) / chunk;
  parallelFor(chunks, chunk * std::max<int64_t>(workPerItem, 1),
              [&](int64_t c) {
                int64_t begin = c * chunk;
                f(begin, std::min(chunk, n - begin));
              });
}

/// The same for items of one element operation each.
template <class F> void parallelChunks(int64_t n, int64_t chunk, F &&f) {
  parallelChunks(n, chunk, 1, std::forward<F>(f));
}

/// The sum over [0, n) of what f(begin, count) returns for each chunk of
/// kReduceChunk elements, added in chunk order: the same bits for any
/// thread count.
template <class F> double parallelSum(int64_t n, F &&f) {
  int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  if (chunks <= 1)
    return n > 0 ? f(int64_t(0), n) : 0.0;
  std::vector<double> partial(static_cast<size_t>(chunks));
  parallelFor(chunks, kReduceChunk, [&](int64_t c) {
    int64_t begin = c * kReduceChunk;
    partial[size_t(c)] = f(begin, std::min(kReduceChunk, n - begin));
  });
  double sum = 0.0;
  for (double p : partial)
    sum += p;
  return sum;
}

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_PARALLEL_H
