//===- Tensor.h - Tensor views and 16-bit storage ---------------*- C++ -*-===//
//
// What every CPU kernel uses besides the tensor view and Status of
// KernelTypes.h: the f32 <-> bf16 / f16 conversions (our own, no external
// library), f32 loads and stores of any float dtype, and the argument
// checks. Kernels compute in f32 whatever the storage dtype and round once
// when they store.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_TENSOR_H
#define ZEROC_RUNTIME_KERNELS_CPU_TENSOR_H

#include "KernelTypes.h"
#include "memory/MemoryCounter.h"
#include "zeroc/Support/DType.h"
#include "zeroc/Support/Float16.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace zeroc::cpu {

/// A kernel's per-call scratch: counted as kernel scratch in the device
/// memory (memory/MemoryCounter.h), outside the plan.
using runtime::ScratchVector;

// The tensor view and Status are the runtime's one definition
// (KernelTypes.h), shared with the CUDA kernels and the executor.
using runtime::Status;
using runtime::Tensor;

//===----------------------------------------------------------------------===//
// 16-bit storage
//===----------------------------------------------------------------------===//

// The conversions live in zeroc/Support/Float16.h, shared with the
// communicators and checkpoints.
using zeroc::bf16ToFloat;
using zeroc::bitsFloat;
using zeroc::f16ToFloat;
using zeroc::floatBits;
using zeroc::floatToBf16;
using zeroc::floatToF16;

/// `x` rounded to what `dtype` can store, as a float (identity for f32).
float roundToDType(float x, DType dtype);

//===----------------------------------------------------------------------===//
// Reading and writing floating-point tensors as f32
//===----------------------------------------------------------------------===//

inline bool isFloat(DType t) { return t != DType::I32; }

/// Converts elements `[offset, offset + n)` of `t` to f32 in `dst`.
void loadF32(const Tensor &t, int64_t offset, int64_t n, float *dst);
/// Rounds `src` to `t`'s dtype into elements `[offset, offset + n)` of `t`.
void storeF32(const Tensor &t, int64_t offset, int64_t n, const float *src);

inline float loadElement(const Tensor &t, int64_t i) {
  float x;
  loadF32(t, i, 1, &x);
  return x;
}
inline void storeElement(const Tensor &t, int64_t i, float x) {
  storeF32(t, i, 1, &x);
}

/// Copies `n` elements between tensors of any float dtypes, rounding once.
void copyElements(const Tensor &src, int64_t srcOffset, const Tensor &dst,
                  int64_t dstOffset, int64_t n);

/// Sets elements `[offset, offset + n)` to +0 (all-zero bits in every dtype).
inline void zeroElements(const Tensor &t, int64_t offset, int64_t n) {
  int64_t size = bytesPerElement(t.dtype);
  if (n > 0)
    std::memset(static_cast<char *>(t.data) + offset * size, 0,
                size_t(n * size));
}

/// `t`'s elements as f32: its own memory when it is f32, otherwise a
/// converted copy in `scratch`.
const float *readF32(const Tensor &t, ScratchVector<float> &scratch);

/// Where a kernel writes `t`'s elements in f32: `t`'s own memory when it is
/// f32, otherwise `scratch`, which `commitF32` then rounds into `t`.
float *writeF32(const Tensor &t, ScratchVector<float> &scratch);
void commitF32(const Tensor &t, const ScratchVector<float> &scratch);

//===----------------------------------------------------------------------===//
// Argument checks shared by the kernels
//===----------------------------------------------------------------------===//

/// "[4, 1024, 768] bf16".
std::string describe(const Tensor &t);

/// Each returns an empty string when the check passes, else the message,
/// prefixed by `op` and the argument's name.
std::string checkFloat(const char *op, const char *name, const Tensor &t);
std::string checkIds(const char *op, const char *name, const Tensor &t);
std::string checkRank(const char *op, const char *name, const Tensor &t,
                      int64_t rank);
std::string checkSameShape(const char *op, const char *name, const Tensor &t,
                           const char *otherName, const Tensor &other);

/// An argument and its name in messages.
using NamedTensor = std::pair<const char *, const Tensor *>;

/// The first non-empty message of a list of checks, as a Status.
Status firstError(std::initializer_list<std::string> checks);

/// Packed sequences: `documents` is null, or i32 [batch, seq] (host data)
/// where entry (b, i) is the position in row b where token i's document
/// starts: 0 <= it <= i, and each entry is the one before it or i itself
/// (documents are contiguous). The attention, position-embedding and rotary
/// kernels take it (--no-cross-doc-attention, --reset-position-ids).
Status checkDocumentStarts(const char *op, const Tensor *documents,
                           int64_t batch, int64_t seq);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_TENSOR_H
