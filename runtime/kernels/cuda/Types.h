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

/// Packed-sequence document starts (cpu::checkDocumentStarts) are taken by
/// the GPU kernels' overloads so that the executor calls both backends alike,
/// but not implemented on the GPU: a non-null `documents` is refused, naming
/// the op.
inline Status refuseDocuments(const char *op, const Tensor *documents) {
  if (!documents)
    return {};
  return {std::string(op) +
          ": packed-sequence document starts (--no-cross-doc-attention, "
          "--reset-position-ids) are not implemented by the CUDA kernels; run "
          "on the CPU"};
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_TYPES_H
