//===- Kernels.h - Every CPU kernel of the runtime --------------*- C++ -*-===//
//
// One include for the executor: the forward and backward kernels of every
// op of the model dialect, the optimizer and the casts. docs/runtime-kernels.md
// describes the API, layouts and numerics.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_KERNELS_H
#define ZEROC_RUNTIME_KERNELS_KERNELS_H

#include "cpu/Activations.h"
#include "cpu/Attention.h"
#include "cpu/Cast.h"
#include "cpu/CrossEntropy.h"
#include "cpu/Embedding.h"
#include "cpu/Linear.h"
#include "cpu/Moe.h"
#include "cpu/Norms.h"
#include "cpu/Optimizer.h"
#include "cpu/Rotary.h"
#include "cpu/Tensor.h"
#include "cpu/Threads.h"

#endif // ZEROC_RUNTIME_KERNELS_KERNELS_H
