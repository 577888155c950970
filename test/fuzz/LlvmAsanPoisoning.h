//===- LlvmAsanPoisoning.h - Fuzz builds: no LLVM allocator poisoning -----===//
//
// Force-included (-include) into the fuzz build's translation units that use
// LLVM and MLIR headers. Debian's LLVM and MLIR libraries are built without
// AddressSanitizer; LLVM's headers poison BumpPtrAllocator slabs when the
// including code is instrumented (llvm/Support/Compiler.h). With one copy of
// each inline allocator function picked from either side at link time, an
// instrumented StartNewSlab poisons what an uninstrumented Allocate never
// unpoisons: a use-after-poison report inside MLIRContext's constructor on
// the first input, before any zeroc code runs. Turning the annotations off
// for these translation units loses only that allocator's poisoning (which
// the uninstrumented libraries never had); ASan still checks every access.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TEST_FUZZ_LLVMASANPOISONING_H
#define ZEROC_TEST_FUZZ_LLVMASANPOISONING_H

#if defined(__has_include) && __has_include(<sanitizer/asan_interface.h>)
#include <sanitizer/asan_interface.h>
#endif
#define __asan_poison_memory_region(p, size) ((void)(p), (void)(size))
#define __asan_unpoison_memory_region(p, size) ((void)(p), (void)(size))

#endif // ZEROC_TEST_FUZZ_LLVMASANPOISONING_H
