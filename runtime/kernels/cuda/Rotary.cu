//===- Rotary.cu - Rotary position embedding (RoPE) on the GPU ------------===//

#include "cuda/Rotary.h"

#include "cpu/Rotary.h"
#include "cuda/Device.cuh"

namespace zeroc::cuda {

namespace {

// Pair p of row r (= b * seq + s): head p / half, element i = p % half and
// its partner i + half. Both are read before either is written.
__global__ void rotaryKernel(const void *in, DType inType, void *out,
                             DType outType, int64_t rows, int64_t seq,
                             int64_t width, int64_t headDim, double theta,
                             float direction) {
  int64_t half = headDim / 2, pairsPerRow = width / 2;
  for (int64_t e = globalThread(); e < rows * pairsPerRow;
       e += globalThreads()) {
    int64_t r = e / pairsPerRow, p = e % pairsPerRow;
    int64_t i = p % half;
    int64_t lo = r * width + p / half * headDim + i, hi = lo + half;
    double angle =
        double(r % seq) * pow(theta, -2.0 * double(i) / double(headDim));
    float c = float(cos(angle)), sn = direction * float(sin(angle));
    float a = loadAsFloat(in, inType, lo), b = loadAsFloat(in, inType, hi);
    storeFromFloat(out, outType, lo, a * c - b * sn);
    storeFromFloat(out, outType, hi, b * c + a * sn);
  }
}

Status rotate(const char *op, const Tensor &in, int64_t headDim, double theta,
              const Tensor &out, float direction, cudaStream_t stream) {
  int64_t rows = in.dim(0) * in.dim(1), width = in.dim(2);
  if (rows * width == 0)
    return {};
  rotaryKernel<<<gridFor(rows * width / 2), kThreads, 0, stream>>>(
      in.data, in.dtype, out.data, out.dtype, rows, in.dim(1), width, headDim,
      theta, direction);
  return launchStatus(op);
}

} // namespace

Status rotaryForward(const Tensor &x, int64_t headDim, double theta,
                     const Tensor &y, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkRotaryForward(x, headDim, theta, y));
  return rotate("rotary", x, headDim, theta, y, 1.0f, stream);
}

Status rotaryBackward(const Tensor &dy, int64_t headDim, double theta,
                      const Tensor &dx, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkRotaryBackward(dy, headDim, theta, dx));
  return rotate("rotary_backward", dy, headDim, theta, dx, -1.0f, stream);
}

} // namespace zeroc::cuda
