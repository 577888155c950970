//===- HalfFloat.h - bf16 and f16 bits for the communicators ----*- C++ -*-===//
//
// The runtime stores 16-bit floats as their raw bits (uint16_t). MPI has no
// 16-bit float type, so the communicators reduce 16-bit buffers through f32
// scratch with the shared conversions of zeroc/Support/Float16.h.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_COMM_HALFFLOAT_H
#define ZEROC_RUNTIME_COMM_HALFFLOAT_H

#include "zeroc/Support/Float16.h"

namespace zeroc::runtime {

using zeroc::bf16ToFloat;
using zeroc::f16ToFloat;
using zeroc::floatBits;
using zeroc::floatToBf16;
using zeroc::floatToF16;

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_COMM_HALFFLOAT_H
