//===- Threads.cpp - The CPU kernels' thread pool -------------------------===//

#include "cpu/Threads.h"

#include <algorithm>
#include <atomic>
#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

namespace zeroc::cpu {

namespace {
/// 0 until setThreads: OpenMP's default then.
std::atomic<int> poolThreads{0};
} // namespace

void setThreads(int n) {
  n = std::max(1, n);
  poolThreads.store(n);
  // This thread's OpenMP default too (a thread of its own, such as a plan
  // stream's worker, reads poolThreads through parallelFor's num_threads).
  omp_set_num_threads(n);
  // GEMMs are sliced over the OpenMP pool (cpu/Gemm.h), each slice one
  // single-threaded BLAS call: OpenBLAS's own threads would make a sum's
  // order depend on the thread count.
  openblas_set_num_threads(1);
}

int threads() {
  int n = poolThreads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

int availableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return std::max(1, CPU_COUNT(&set));
  return std::max(1, omp_get_num_procs());
}

} // namespace zeroc::cpu

namespace zeroc::cpu {

int onlineCores() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

} // namespace zeroc::cpu
