//===- Linear.cu - Affine layers and their gradients on the GPU -----------===//

#include "cuda/Linear.h"

#include "cpu/Linear.h"
#include "cuda/ColumnSum.cuh"
#include "cuda/Gemm.h"

namespace zeroc::cuda {

namespace {

struct RowValue {
  const void *dy;
  DType type;
  int64_t cols;
  __device__ float2 operator()(int64_t r, int64_t c) const {
    return make_float2(loadAsFloat(dy, type, r * cols + c), 0.0f);
  }
};

struct StoreFirst {
  void *out;
  DType type;
  __device__ void operator()(int64_t c, float2 total) const {
    storeFromFloat(out, type, c, total.x);
  }
};

} // namespace

// The row-major products are those of cpu/Linear.cpp's cblas calls.
Status linearForward(const Tensor &x, const Tensor &weight, const Tensor *bias,
                     const Tensor &y, KernelContext &ctx, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkLinearForward(x, weight, bias, y));
  int64_t rows = x.rows(), in = x.dim(-1), out = y.dim(-1);
  return linearGemm(
      "linear", ctx, stream, rows, out, in, {x.data, x.dtype, in, false},
      {weight.data, weight.dtype, in, true}, bias, y.data, y.dtype, out);
}

Status linearGradInput(const Tensor &dy, const Tensor &weight, const Tensor &dx,
                       KernelContext &ctx, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkLinearGradInput(dy, weight, dx));
  int64_t rows = dy.rows(), out = dy.dim(-1), in = dx.dim(-1);
  return linearGemm("linear_grad_input", ctx, stream, rows, in, out,
                    {dy.data, dy.dtype, out, false},
                    {weight.data, weight.dtype, in, false}, nullptr, dx.data,
                    dx.dtype, in);
}

Status linearGradWeight(const Tensor &dy, const Tensor &x, const Tensor &dw,
                        KernelContext &ctx, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkLinearGradWeight(dy, x, dw));
  int64_t rows = dy.rows(), out = dy.dim(-1), in = x.dim(-1);
  return linearGemm("linear_grad_weight", ctx, stream, out, in, rows,
                    {dy.data, dy.dtype, out, true},
                    {x.data, x.dtype, in, false}, nullptr, dw.data, dw.dtype,
                    in);
}

Status linearGradBias(const Tensor &dy, const Tensor &db, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkLinearGradBias(dy, db));
  int64_t out = db.dim(0);
  return columnSums("linear_grad_bias", dy.rows(), out,
                    RowValue{dy.data, dy.dtype, out},
                    StoreFirst{db.data, db.dtype}, stream);
}

} // namespace zeroc::cuda
