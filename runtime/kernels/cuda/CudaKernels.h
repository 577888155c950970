//===- CudaKernels.h - Every CUDA kernel of the runtime ---------*- C++ -*-===//
//
// One include for the executor's CUDA backend: the functions of Kernels.h's
// CPU kernels with the same names, arguments and checks, on device data,
// each taking the stream it enqueues on (and the GEMM ones a
// KernelContext). docs/gpu-kernels.md describes the API and numerics.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
#define ZEROC_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H

#include "cuda/Activations.h"
#include "cuda/Attention.h"
#include "cuda/Cast.h"
#include "cuda/Context.h"
#include "cuda/CrossEntropy.h"
#include "cuda/Embedding.h"
#include "cuda/Linear.h"
#include "cuda/Moe.h"
#include "cuda/Norms.h"
#include "cuda/Optimizer.h"
#include "cuda/Rotary.h"

#endif // ZEROC_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
