//===- Threads.h - The CPU kernels' thread pool ------------------*- C++
//-*-===//
//
// Every CPU kernel runs on one pool, OpenMP's, sized by setThreads: the
// element-wise, row-wise and attention kernels, and GEMMs, which are split
// into slices of their output, each one single-threaded OpenBLAS call
// (cpu/Gemm.h; OpenBLAS's own threads stay at one). A kernel splits its work
// only where each element (or row, or reduction chunk) is computed by the same
// code in the same order whatever thread takes it: results are bit-identical
// for any thread count. Reductions over a tensor sum fixed-size chunks
// (kReduceChunk, not one chunk per thread) and then the chunks' partial sums in
// order.
//
// zerorun sizes the pool as cores / ranks on the node (docs/zerorun.md,
// "Threads"): ranks x threads <= cores.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_THREADS_H
#define ZEROC_RUNTIME_KERNELS_CPU_THREADS_H

#include <cstdint>

namespace zeroc::cpu {

/// Sets the kernels' thread count and the calling thread's OpenMP default
/// (n < 1 counts as 1); OpenBLAS's to one. For every thread of the process: a
/// parallel loop (cpu/Parallel.h) asks for threads() whichever thread runs
/// it.
void setThreads(int n);
/// The kernels' thread count: setThreads's, or OpenMP's default before.
int threads();
/// CPUs this process may run on (sched_getaffinity; at least 1).
int availableCores();
/// CPUs online on this machine (at least 1): more than availableCores()
/// when the launcher bound the process to some of them.
int onlineCores();

/// Elements per chunk of a parallel reduction: partial sums of fixed
/// chunks, then the chunks in order, so the result is the same for any
/// thread count.
inline constexpr int64_t kReduceChunk = 1 << 14;

/// Work below which a kernel stays on the calling thread (waking the pool
/// costs more than it saves).
inline constexpr int64_t kParallelMinWork = 1 << 15;

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_THREADS_H
