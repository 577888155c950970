//===- KernelTypes.h - Tensor view and Status of all backends ---*- C++ -*-===//
//
// What every kernel backend (runtime/kernels/cpu, runtime/kernels/cuda) and
// the executor's devices (runtime/exec) take and return: a non-owning view
// of a row-major tensor (pointer, dtype, shape; host or device memory), and
// the Status a kernel returns when its arguments do not fit together. One
// definition for all of them; the backends' namespaces name it with
// `using`.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_KERNELTYPES_H
#define ZEROC_RUNTIME_KERNELS_KERNELTYPES_H

#include "zeroc/Support/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zeroc::runtime {

/// A target the cross-entropy ignores (no loss, zero gradient): Hugging
/// Face's label convention and PyTorch's ignore_index. The data loader
/// writes it for targets masked out of the loss.
inline constexpr int32_t kIgnoredTarget = -100;

/// A row-major tensor the caller owns. `data` points at `numel()` elements of
/// `dtype`; a 0-d tensor (empty shape) has one element.
struct Tensor {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  /// The size of dimension `i`; negative `i` counts from the end.
  int64_t dim(int64_t i) const { return shape[i < 0 ? rank() + i : i]; }
  /// The product of all dimensions but the last: the rows of a [..., n] view.
  int64_t rows() const {
    int64_t n = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i)
      n *= shape[i];
    return n;
  }
  int64_t bytes() const { return numel() * bytesPerElement(dtype); }
  float *f32() const { return static_cast<float *>(data); }
  int32_t *i32() const { return static_cast<int32_t *>(data); }
};

/// What a kernel returns: empty `error` when it ran, otherwise what was wrong
/// with its arguments (nothing was written then).
struct Status {
  std::string error;
  bool ok() const { return error.empty(); }
};

} // namespace zeroc::runtime

/// Returns the Status of `expr` from the enclosing function unless it is ok:
/// the one way Status errors travel up.
#define ZEROC_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    if (::zeroc::runtime::Status zerocStatus_ = (expr); !zerocStatus_.ok())    \
      return zerocStatus_;                                                     \
  } while (0)

#endif // ZEROC_RUNTIME_KERNELS_KERNELTYPES_H
