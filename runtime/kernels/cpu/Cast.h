//===- Cast.h - Dtype casts and gradient accumulation -----------*- C++ -*-===//
//
// cast:        dst = src rounded to dst's dtype (f32 master -> 16-bit copy,
//              16-bit gradient -> f32 accumulator, ...)
// accumulate:  acc += g, summed in f32 and rounded once into acc's dtype
//              (model.accumulate_grad, the plan's `accumulate`)
// zero:        t = 0 (the plan's `zero_grads`)
//
// Only element counts must match: a flat shard and a shaped tensor of the
// same size are interchangeable here.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_CAST_H
#define ZEROC_RUNTIME_KERNELS_CPU_CAST_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

Status castTensor(const Tensor &src, const Tensor &dst);
Status accumulate(const Tensor &acc, const Tensor &g);
Status zeroTensor(const Tensor &t);

/// The argument checks of the kernels above, shared with the CUDA backend.
Status checkCastTensor(const Tensor &src, const Tensor &dst);
Status checkAccumulate(const Tensor &acc, const Tensor &g);
Status checkZeroTensor(const Tensor &t);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_CAST_H
