//===- Types.h - What the CUDA kernels share with the CPU's -----*- C++ -*-===//
//
// The CUDA kernels take the CPU kernels' tensor view (cpu/Tensor.h), with
// `data` a device pointer, and return their Status: the same argument checks
// give the same messages. Every kernel enqueues its work on a stream and
// returns without synchronizing.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_TYPES_H
#define ZEROC_RUNTIME_KERNELS_CUDA_TYPES_H

#include "cpu/Tensor.h"

#include <cuda_runtime_api.h>

namespace zeroc::cuda {

using cpu::Status;
using cpu::Tensor;

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_TYPES_H
