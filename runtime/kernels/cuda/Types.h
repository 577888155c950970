//===- Types.h - What the CUDA kernels share with the CPU's -----*- C++ -*-===//
//
// The CUDA kernels take the runtime's tensor view (KernelTypes.h), with
// `data` a device pointer, and return its Status; they share the CPU
// kernels' argument checks (cpu/Tensor.h), so both give the same messages.
// Every kernel enqueues its work on a stream and returns without synchronizing.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_TYPES_H
#define ZEROC_RUNTIME_KERNELS_CUDA_TYPES_H

#include "cpu/Tensor.h"

#include <cuda_runtime_api.h>

namespace zeroc::cuda {

using runtime::Status;
using runtime::Tensor;

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_TYPES_H
