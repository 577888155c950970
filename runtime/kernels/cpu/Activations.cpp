//===- Activations.cpp - Elementwise ops and copies ----------------------===//

#include "cpu/Activations.h"
#include "cpu/Parallel.h"

#include <algorithm>
#include <cmath>

namespace zeroc::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// Three float tensors of one shape.
Status checkBinary(const char *op, const char *aName, const Tensor &a,
                   const char *bName, const Tensor &b, const char *outName,
                   const Tensor &out) {
  return firstError({checkFloat(op, aName, a), checkFloat(op, bName, b),
                     checkFloat(op, outName, out),
                     checkSameShape(op, bName, b, aName, a),
                     checkSameShape(op, outName, out, aName, a)});
}

// Applies `f(a, b)` elementwise over checked tensors of one shape, in chunks
// of f32, so that any mix of storage dtypes (and in-place use) works.
template <typename F>
void binaryMap(const Tensor &a, const Tensor &b, const Tensor &out, F f) {
  constexpr int64_t kChunk = 4096;
  // Chunks on the pool: each element's result is f of its own inputs.
  parallelChunks(a.numel(), kChunk, [&](int64_t done, int64_t count) {
    float av[kChunk], bv[kChunk];
    loadF32(a, done, count, av);
    loadF32(b, done, count, bv);
    for (int64_t i = 0; i < count; ++i)
      av[i] = f(av[i], bv[i]);
    storeF32(out, done, count, av);
  });
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

} // namespace

Status checkGeluForward(const Tensor &x, const Tensor &y) {
  return checkBinary("gelu", "input", x, "input", x, "result", y);
}

Status checkGeluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  return checkBinary("gelu_backward", "input", x, "dy", dy, "result", dx);
}

Status checkSiluForward(const Tensor &x, const Tensor &y) {
  return checkBinary("silu", "input", x, "input", x, "result", y);
}

Status checkSiluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  return checkBinary("silu_backward", "input", x, "dy", dy, "result", dx);
}

Status checkAdd(const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  return checkBinary("add", "lhs", lhs, "rhs", rhs, "result", out);
}

Status checkMul(const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  return checkBinary("mul", "lhs", lhs, "rhs", rhs, "result", out);
}

Status checkScale(const Tensor &x, double factor, const Tensor &y) {
  ZEROC_RETURN_IF_ERROR(
      checkBinary("scale", "input", x, "input", x, "result", y));
  if (!std::isfinite(factor))
    return {"scale: factor must be finite, found " + std::to_string(factor)};
  return {};
}

float scaleFactor(double factor, DType dtype) {
  return roundToDType(float(factor), dtype);
}

Status checkSplit(const char *op, const Tensor &whole,
                  const std::vector<Tensor> &pieces) {
  ZEROC_RETURN_IF_ERROR(firstError({checkFloat(op, "input", whole)}));
  std::string name(op);
  if (pieces.empty() || whole.shape.empty())
    return {name +
            ": needs at least one piece and an input of rank >= 1, "
            "found " +
            std::to_string(pieces.size()) + " pieces of " + describe(whole)};
  int64_t width = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Tensor &p = pieces[i];
    std::vector<int64_t> lead(whole.shape.begin(), whole.shape.end() - 1);
    if (!isFloat(p.dtype) || p.shape.size() != whole.shape.size() ||
        !std::equal(lead.begin(), lead.end(), p.shape.begin()))
      return {name + ": piece " + std::to_string(i) + " " + describe(p) +
              " must be a float tensor with the leading dimensions of " +
              describe(whole)};
    width += p.shape.back();
  }
  if (width != whole.shape.back())
    return {name + ": the pieces' last dimensions sum to " +
            std::to_string(width) + ", expected " +
            std::to_string(whole.shape.back())};
  return {};
}

Status geluForward(const Tensor &x, const Tensor &y) {
  ZEROC_RETURN_IF_ERROR(checkGeluForward(x, y));
  // The second operand is x again, ignored.
  binaryMap(x, x, y, [](float v, float) {
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    return 0.5f * v * (1.0f + std::tanh(u));
  });
  return {};
}

Status geluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  ZEROC_RETURN_IF_ERROR(checkGeluBackward(x, dy, dx));
  binaryMap(x, dy, dx, [](float v, float g) {
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    float t = std::tanh(u);
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  });
  return {};
}

Status siluForward(const Tensor &x, const Tensor &y) {
  ZEROC_RETURN_IF_ERROR(checkSiluForward(x, y));
  binaryMap(x, x, y, [](float v, float) { return v * sigmoid(v); });
  return {};
}

Status siluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  ZEROC_RETURN_IF_ERROR(checkSiluBackward(x, dy, dx));
  binaryMap(x, dy, dx, [](float v, float g) {
    float s = sigmoid(v);
    return g * s * (1.0f + v * (1.0f - s));
  });
  return {};
}

Status add(const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  ZEROC_RETURN_IF_ERROR(checkAdd(lhs, rhs, out));
  binaryMap(lhs, rhs, out, [](float a, float b) { return a + b; });
  return {};
}

Status mul(const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  ZEROC_RETURN_IF_ERROR(checkMul(lhs, rhs, out));
  binaryMap(lhs, rhs, out, [](float a, float b) { return a * b; });
  return {};
}

Status scale(const Tensor &x, double factor, const Tensor &y) {
  ZEROC_RETURN_IF_ERROR(checkScale(x, factor, y));
  float c = scaleFactor(factor, x.dtype);
  binaryMap(x, x, y, [c](float v, float) { return v * c; });
  return {};
}

namespace {

// Copies columns between `whole` [rows, n] and its pieces [rows, n_r]: out
// of `whole` (split) or into it (its backward).
void copyPieces(const Tensor &whole, const std::vector<Tensor> &pieces,
                bool intoPieces) {
  int64_t n = whole.shape.back(), rows = n ? whole.numel() / n : 0;
  int64_t offset = 0;
  for (const Tensor &p : pieces) {
    int64_t w = p.shape.back();
    parallelFor(rows, w, [&](int64_t r) {
      if (intoPieces)
        copyElements(whole, r * n + offset, p, r * w, w);
      else
        copyElements(p, r * w, whole, r * n + offset, w);
    });
    offset += w;
  }
}

} // namespace

Status split(const Tensor &x, const std::vector<Tensor> &pieces) {
  ZEROC_RETURN_IF_ERROR(checkSplit("split", x, pieces));
  copyPieces(x, pieces, true);
  return {};
}

Status splitBackward(const std::vector<Tensor> &dpieces, const Tensor &dx) {
  ZEROC_RETURN_IF_ERROR(checkSplit("split_backward", dx, dpieces));
  copyPieces(dx, dpieces, false);
  return {};
}

} // namespace zeroc::cpu
