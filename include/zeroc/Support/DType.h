//===- DType.h - The element types zeroc knows, in one table ----*- C++ -*-===//
//
// One bytes-per-dtype table and one set of names, shared by the compiler, the
// inspector and the runtime. MLIR-free on purpose: the runtime includes it.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_DTYPE_H
#define ZEROC_SUPPORT_DTYPE_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroc {

enum class DType : uint8_t { F32, BF16, F16, I32 };

/// Bytes one element occupies.
constexpr int64_t bytesPerElement(DType t) {
  switch (t) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  }
  return 0;
}

/// The MLIR spelling, also used in plan files: "f32", "bf16", "f16", "i32".
constexpr std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::I32:
    return "i32";
  }
  return "?";
}

/// The number of elements of a shape, or nullopt when a dimension is
/// negative or the product overflows 64 bits: shapes come from files, which
/// may say anything.
inline std::optional<int64_t> shapeElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return std::nullopt;
  return n;
}

/// "[5, 4]": a shape as messages print it.
inline std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Accepts the MLIR spellings and the PyTorch / Hugging Face ones
/// ("float32", "bfloat16", "float16", "fp16", ...).
inline std::optional<DType> parseDType(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float")
    return DType::F32;
  if (s == "bf16" || s == "bfloat16")
    return DType::BF16;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half")
    return DType::F16;
  if (s == "i32" || s == "int32")
    return DType::I32;
  return std::nullopt;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_DTYPE_H
