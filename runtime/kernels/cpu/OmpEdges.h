//===- OmpEdges.h - An OpenMP region's fork and join, told to TSan -*- C++
//-*-===//
//
// GCC's libgomp is not built with -fsanitize=thread, so ThreadSanitizer
// sees neither the fork of a parallel region (the pool threads start after
// everything the opening thread wrote) nor the barrier that closes it (the
// opening thread goes on after everything the pool threads wrote): every
// pool thread's access looks unordered against the opening thread's next
// one (docs/fuzzing.md, "Sanitizer runs of the whole suite"). OmpEdges
// states both edges through TSan's annotation interface. In any other
// build it is empty and its calls compile to nothing.
//
// Use: an OmpEdges on the opening thread's stack before the region,
// enter() at the start and leave() at the end of each iteration's body.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_OMPEDGES_H
#define ZEROC_RUNTIME_KERNELS_CPU_OMPEDGES_H

#if defined(__SANITIZE_THREAD__)
#define ZEROC_OMP_EDGES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZEROC_OMP_EDGES 1
#endif
#endif

#ifdef ZEROC_OMP_EDGES
#include <sanitizer/tsan_interface.h>
#endif

namespace zeroc::cpu {

class OmpEdges {
public:
  /// The fork: what the opening thread did so far happens before every
  /// iteration.
  OmpEdges() { release(&fork); }
  /// The join: every iteration happens before what the opening thread does
  /// after the region.
  ~OmpEdges() { acquire(&join); }
  OmpEdges(const OmpEdges &) = delete;
  OmpEdges &operator=(const OmpEdges &) = delete;

  void enter() { acquire(&fork); }
  void leave() { release(&join); }

private:
#ifdef ZEROC_OMP_EDGES
  static void release(char *at) { __tsan_release(at); }
  static void acquire(char *at) { __tsan_acquire(at); }
#else
  static void release(char *) {}
  static void acquire(char *) {}
#endif
  char fork = 0, join = 0;
};

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_OMPEDGES_H
