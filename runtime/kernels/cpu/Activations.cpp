//===- Activations.cpp - Elementwise ops: GELU, SiLU, add, mul ------------===//

#include "cpu/Activations.h"

#include <algorithm>
#include <cmath>

namespace zeroc::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// Applies `f(a, b)` elementwise over tensors of one shape, in chunks of f32,
// so that any mix of storage dtypes (and in-place use) works.
template <typename F>
Status binaryMap(const char *op, const char *aName, const Tensor &a,
                 const char *bName, const Tensor &b, const char *outName,
                 const Tensor &out, F f) {
  if (Status s = firstError({checkFloat(op, aName, a), checkFloat(op, bName, b),
                             checkFloat(op, outName, out),
                             checkSameShape(op, bName, b, aName, a),
                             checkSameShape(op, outName, out, aName, a)});
      !s.ok())
    return s;
  constexpr int64_t kChunk = 4096;
  float av[kChunk], bv[kChunk];
  for (int64_t done = 0, n = a.numel(); done < n; done += kChunk) {
    int64_t count = std::min(kChunk, n - done);
    loadF32(a, done, count, av);
    loadF32(b, done, count, bv);
    for (int64_t i = 0; i < count; ++i)
      av[i] = f(av[i], bv[i]);
    storeF32(out, done, count, av);
  }
  return {};
}

template <typename F>
Status unaryMap(const char *op, const Tensor &x, const Tensor &y, F f) {
  // The second operand is x again, ignored by `f`.
  return binaryMap(op, "input", x, "input", x, "result", y,
                   [&](float a, float) { return f(a); });
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

} // namespace

Status geluForward(const Tensor &x, const Tensor &y) {
  return unaryMap("gelu", x, y, [](float v) {
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    return 0.5f * v * (1.0f + std::tanh(u));
  });
}

Status geluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  return binaryMap(
      "gelu_backward", "input", x, "dy", dy, "result", dx,
      [](float v, float g) {
        float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
        float t = std::tanh(u);
        float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
        return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
      });
}

Status siluForward(const Tensor &x, const Tensor &y) {
  return unaryMap("silu", x, y, [](float v) { return v * sigmoid(v); });
}

Status siluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  return binaryMap("silu_backward", "input", x, "dy", dy, "result", dx,
                   [](float v, float g) {
                     float s = sigmoid(v);
                     return g * s * (1.0f + v * (1.0f - s));
                   });
}

Status add(const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  return binaryMap("add", "lhs", lhs, "rhs", rhs, "result", out,
                   [](float a, float b) { return a + b; });
}

Status mul(const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  return binaryMap("mul", "lhs", lhs, "rhs", rhs, "result", out,
                   [](float a, float b) { return a * b; });
}

} // namespace zeroc::cpu
