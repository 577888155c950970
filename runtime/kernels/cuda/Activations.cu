//===- Activations.cu - Elementwise ops and copies on the GPU ------------===//

#include "cuda/Activations.h"

#include "cpu/Activations.h"
#include "cuda/Elementwise.cuh"

namespace zeroc::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

struct GeluForward {
  __device__ float operator()(float v, float) const {
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    return 0.5f * v * (1.0f + tanhf(u));
  }
};

struct GeluBackward {
  __device__ float operator()(float v, float g) const {
    float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
    float t = tanhf(u);
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
};

struct SiluForward {
  __device__ float operator()(float v, float) const { return v * sigmoid(v); }
};

struct SiluBackward {
  __device__ float operator()(float v, float g) const {
    float s = sigmoid(v);
    return g * s * (1.0f + v * (1.0f - s));
  }
};

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};

struct Scale {
  float c;
  __device__ float operator()(float v, float) const { return v * c; }
};

// Columns [offset, offset + w) of `whole` [rows, n] to or from `piece`
// [rows, w], one thread per element of the piece.
__global__ void copyPieceKernel(void *whole, DType wholeType, int64_t n,
                                int64_t offset, void *piece, DType pieceType,
                                int64_t rows, int64_t w, bool intoPiece) {
  for (int64_t e = globalThread(); e < rows * w; e += globalThreads()) {
    int64_t at = e / w * n + offset + e % w;
    if (intoPiece)
      storeFromFloat(piece, pieceType, e, loadAsFloat(whole, wholeType, at));
    else
      storeFromFloat(whole, wholeType, at, loadAsFloat(piece, pieceType, e));
  }
}

Status copyPieces(const char *op, const Tensor &whole,
                  const std::vector<Tensor> &pieces, bool intoPieces,
                  cudaStream_t stream) {
  int64_t n = whole.shape.back(), rows = n ? whole.numel() / n : 0;
  int64_t offset = 0;
  for (const Tensor &p : pieces) {
    int64_t w = p.shape.back();
    if (rows * w > 0) {
      copyPieceKernel<<<gridFor(rows * w), kThreads, 0, stream>>>(
          whole.data, whole.dtype, n, offset, p.data, p.dtype, rows, w,
          intoPieces);
      ZEROC_RETURN_IF_ERROR(launchStatus(op));
    }
    offset += w;
  }
  return {};
}

template <typename F>
Status unary(const char *op, const Tensor &x, const Tensor &y, F f,
             cudaStream_t stream) {
  return launchMap(op, x.data, x.dtype, nullptr, DType::F32, y.data, y.dtype,
                   x.numel(), f, stream);
}

template <typename F>
Status binary(const char *op, const Tensor &a, const Tensor &b,
              const Tensor &out, F f, cudaStream_t stream) {
  return launchMap(op, a.data, a.dtype, b.data, b.dtype, out.data, out.dtype,
                   a.numel(), f, stream);
}

} // namespace

Status geluForward(const Tensor &x, const Tensor &y, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkGeluForward(x, y));
  return unary("gelu", x, y, GeluForward{}, stream);
}

Status geluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx,
                    cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkGeluBackward(x, dy, dx));
  return binary("gelu_backward", x, dy, dx, GeluBackward{}, stream);
}

Status siluForward(const Tensor &x, const Tensor &y, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkSiluForward(x, y));
  return unary("silu", x, y, SiluForward{}, stream);
}

Status siluBackward(const Tensor &x, const Tensor &dy, const Tensor &dx,
                    cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkSiluBackward(x, dy, dx));
  return binary("silu_backward", x, dy, dx, SiluBackward{}, stream);
}

Status add(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
           cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkAdd(lhs, rhs, out));
  return binary("add", lhs, rhs, out, Add{}, stream);
}

Status mul(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
           cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkMul(lhs, rhs, out));
  return binary("mul", lhs, rhs, out, Mul{}, stream);
}

Status scale(const Tensor &x, double factor, const Tensor &y,
             cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkScale(x, factor, y));
  return unary("scale", x, y, Scale{cpu::scaleFactor(factor, x.dtype)}, stream);
}

Status split(const Tensor &x, const std::vector<Tensor> &pieces,
             cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkSplit("split", x, pieces));
  return copyPieces("split", x, pieces, true, stream);
}

Status splitBackward(const std::vector<Tensor> &dpieces, const Tensor &dx,
                     cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkSplit("split_backward", dx, dpieces));
  return copyPieces("split_backward", dx, dpieces, false, stream);
}

} // namespace zeroc::cuda
