//===- Activations.cpp - Elementwise ops and copies ----------------------===//

#include "cpu/Activations.h"
#include "cpu/CpuFeatures.h"
#include "cpu/Parallel.h"
#include "cpu/VectorMath.h"

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

// Runs `rows(av, bv, count)` over checked tensors of one shape in chunks of
// f32 (a's and b's elements in av and bv; it leaves the results in av), so
// that any mix of storage dtypes (and in-place use) works. Chunks on the
// pool: each element's result depends on its own inputs only.
template <typename Rows>
void chunkMap(const Tensor &a, const Tensor &b, const Tensor &out, Rows rows) {
  constexpr int64_t kChunk = 4096;
  parallelChunks(a.numel(), kChunk, [&](int64_t done, int64_t count) {
    float av[kChunk], bv[kChunk];
    loadF32(a, done, count, av);
    loadF32(b, done, count, bv);
    rows(av, bv, count);
    storeF32(out, done, count, av);
  });
}

// Applies `f(a, b)` elementwise.
template <typename F>
void binaryMap(const Tensor &a, const Tensor &b, const Tensor &out, F f) {
  chunkMap(a, b, out, [&](float *av, const float *bv, int64_t count) {
    for (int64_t i = 0; i < count; ++i)
      av[i] = f(av[i], bv[i]);
  });
}

// gelu and silu through expApprox (cpu/VectorMath.h), in loops the compiler
// vectorizes: 1 + tanh u = 2 sigmoid(2u), so gelu is x sigmoid(2u), and
// 1 - tanh^2 u = 4 s (1 - s) with s = sigmoid(2u). The forms are equal to
// Activations.h's; without the cancellation of 1 + tanh u for negative u.
struct Gelu {
  float operator()(float v, float) const {
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    return v * sigmoidApprox(2.0f * u);
  }
};
// 1 - s for s = 1 / (1 + e): e s where s is near 1 (1 - s would cancel),
// else 1 - s (e may be infinite there).
inline float oneMinusSigmoid(float s, float e) {
  return s < 0.5f ? 1.0f - s : e * s;
}
struct GeluBackward {
  float operator()(float v, float g) const {
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    float e = expApprox(-2.0f * u), s = 1.0f / (1.0f + e);
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    return g * (s + 2.0f * v * s * oneMinusSigmoid(s, e) * du);
  }
};
struct Silu {
  float operator()(float v, float) const { return v * sigmoidApprox(v); }
};
struct SiluBackward {
  float operator()(float v, float g) const {
    float e = expApprox(-v), s = 1.0f / (1.0f + e);
    return g * s * (1.0f + v * oneMinusSigmoid(s, e));
  }
};

using ArrayMap = void (*)(const float *, const float *, float *, int64_t);

template <typename F>
[[gnu::always_inline]] inline void mapArrays(const float *a, const float *b,
                                             float *out, int64_t n) {
  F f;
  for (int64_t i = 0; i < n; ++i)
    out[i] = f(a[i], b[i]);
}

template <typename F>
void mapPortable(const float *a, const float *b, float *out, int64_t n) {
  mapArrays<F>(a, b, out, n);
}

#ifdef ZEROC_CPU_X86
template <typename F>
__attribute__((target("avx2"))) void mapAvx2(const float *a, const float *b,
                                             float *out, int64_t n) {
  mapArrays<F>(a, b, out, n);
}
template <typename F>
__attribute__((target("avx512f"))) void
mapAvx512(const float *a, const float *b, float *out, int64_t n) {
  mapArrays<F>(a, b, out, n);
}
#endif

template <typename F> ArrayMap arrayMap(VectorLoop requested) {
  switch (vectorLoopFor(requested)) {
#ifdef ZEROC_CPU_X86
  case VectorLoop::Avx512:
    return mapAvx512<F>;
  case VectorLoop::Avx2:
    return mapAvx2<F>;
#endif
  default:
    return mapPortable<F>;
  }
}

// binaryMap with F's array loop for `loop`.
template <typename F>
void vectorMap(const Tensor &a, const Tensor &b, const Tensor &out,
               VectorLoop loop) {
  ArrayMap map = arrayMap<F>(loop);
  chunkMap(a, b, out, [&](float *av, const float *bv, int64_t count) {
    map(av, bv, av, count);
  });
}

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

VectorLoop vectorLoopFor(VectorLoop requested) {
#ifdef ZEROC_CPU_X86
  if ((requested == VectorLoop::Best || requested == VectorLoop::Avx512) &&
      cpuHasAvx512())
    return VectorLoop::Avx512;
  if (requested != VectorLoop::Portable && cpuHasAvx2())
    return VectorLoop::Avx2;
#else
  (void)requested;
#endif
  return VectorLoop::Portable;
}

Status geluForwardLoop(const Tensor &x, const Tensor &y, VectorLoop loop) {
  ZEROC_RETURN_IF_ERROR(checkGeluForward(x, y));
  // The second operand is x again, ignored.
  vectorMap<Gelu>(x, x, y, loop);
  return {};
}

Status geluForward(const Tensor &x, const Tensor &y) {
  return geluForwardLoop(x, y, VectorLoop::Best);
}

Status geluBackwardLoop(const Tensor &x, const Tensor &dy, const Tensor &dx,
                        VectorLoop loop) {
  ZEROC_RETURN_IF_ERROR(checkGeluBackward(x, dy, dx));
  vectorMap<GeluBackward>(x, dy, dx, loop);
  return {};
}

Status geluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  return geluBackwardLoop(x, dy, dx, VectorLoop::Best);
}

Status siluForwardLoop(const Tensor &x, const Tensor &y, VectorLoop loop) {
  ZEROC_RETURN_IF_ERROR(checkSiluForward(x, y));
  vectorMap<Silu>(x, x, y, loop);
  return {};
}

Status siluForward(const Tensor &x, const Tensor &y) {
  return siluForwardLoop(x, y, VectorLoop::Best);
}

Status siluBackwardLoop(const Tensor &x, const Tensor &dy, const Tensor &dx,
                        VectorLoop loop) {
  ZEROC_RETURN_IF_ERROR(checkSiluBackward(x, dy, dx));
  vectorMap<SiluBackward>(x, dy, dx, loop);
  return {};
}

Status siluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx) {
  return siluBackwardLoop(x, dy, dx, VectorLoop::Best);
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
