//===- Norms.cu - Layer and RMS normalization on the GPU ------------------===//

#include "cuda/Norms.h"

#include "cpu/Norms.h"
#include "cuda/ColumnSum.cuh"

namespace zeroc::cuda {

namespace {

constexpr int kNormThreads = 256;

// The statistics of one row, shared by the forwards and the backwards'
// recomputation. Not inlined: both use one compiled body, so the
// recomputed statistics equal the saved ones bit for bit.
__device__ __noinline__ float2 layerNormStats(const void *x, DType xType,
                                              int64_t offset, int64_t n,
                                              float eps) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    sum += loadAsFloat(x, xType, offset + i);
  sum = blockSum(sum);
  float mean = n ? sum / float(n) : 0.0f;
  float var = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float d = loadAsFloat(x, xType, offset + i) - mean;
    var += d * d;
  }
  var = blockSum(var);
  var = n ? var / float(n) : 0.0f;
  return make_float2(mean, 1.0f / sqrtf(var + eps));
}

__device__ __noinline__ float
rmsNormStat(const void *x, DType xType, int64_t offset, int64_t n, float eps) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = loadAsFloat(x, xType, offset + i);
    sum += v * v;
  }
  sum = blockSum(sum);
  return 1.0f / sqrtf((n ? sum / float(n) : 0.0f) + eps);
}

// Each element of a row is read and written by one thread (i mod blockDim),
// so y may be x and dx may be dy.

__global__ void layerNormForwardKernel(const void *x, DType xType,
                                       const void *w, DType wType,
                                       const void *b, DType bType, void *y,
                                       DType yType, int64_t rows, int64_t n,
                                       float eps, float *saved) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float2 stats = layerNormStats(x, xType, r * n, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float v = (loadAsFloat(x, xType, r * n + i) - stats.x) * stats.y;
      storeFromFloat(y, yType, r * n + i,
                     v * loadAsFloat(w, wType, i) + loadAsFloat(b, bType, i));
    }
    if (saved && threadIdx.x == 0) {
      saved[r] = stats.x;
      saved[rows + r] = stats.y;
    }
  }
}

// The statistics the forwards save, recomputed: layernorm's mean[rows]
// then rstd[rows], or rmsnorm's rrms[rows].
__global__ void normStatsKernel(const void *x, DType xType, int64_t rows,
                                int64_t n, float eps, bool rms, float *stats) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    if (rms) {
      float rrms = rmsNormStat(x, xType, r * n, n, eps);
      if (threadIdx.x == 0)
        stats[r] = rrms;
    } else {
      float2 s = layerNormStats(x, xType, r * n, n, eps);
      if (threadIdx.x == 0) {
        stats[r] = s.x;
        stats[rows + r] = s.y;
      }
    }
  }
}

__global__ void layerNormBackwardKernel(const void *x, DType xType,
                                        const void *w, DType wType,
                                        const void *dy, DType dyType, void *dx,
                                        DType dxType, int64_t rows, int64_t n,
                                        const float *stats) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float mean = stats[r], rstd = stats[rows + r];
    float sumG = 0.0f, sumGXhat = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float xhat = (loadAsFloat(x, xType, r * n + i) - mean) * rstd;
      float g = loadAsFloat(dy, dyType, r * n + i) * loadAsFloat(w, wType, i);
      sumG += g;
      sumGXhat += g * xhat;
    }
    float meanG = blockSum(sumG) / float(n);
    float meanGXhat = blockSum(sumGXhat) / float(n);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float xhat = (loadAsFloat(x, xType, r * n + i) - mean) * rstd;
      float g = loadAsFloat(dy, dyType, r * n + i) * loadAsFloat(w, wType, i);
      storeFromFloat(dx, dxType, r * n + i,
                     rstd * (g - meanG - xhat * meanGXhat));
    }
  }
}

// The scale of an RMS norm, f32: the weight, or 1 + weight (unit offset).
__device__ __forceinline__ float rmsScale(const void *w, DType wType, int64_t i,
                                          float offset) {
  return loadAsFloat(w, wType, i) + offset;
}

__global__ void rmsNormForwardKernel(const void *x, DType xType, const void *w,
                                     DType wType, float offset, void *y,
                                     DType yType, int64_t rows, int64_t n,
                                     float eps, float *saved) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float rrms = rmsNormStat(x, xType, r * n, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float v = loadAsFloat(x, xType, r * n + i) * rrms;
      storeFromFloat(y, yType, r * n + i, v * rmsScale(w, wType, i, offset));
    }
    if (saved && threadIdx.x == 0)
      saved[r] = rrms;
  }
}

__global__ void rmsNormBackwardKernel(const void *x, DType xType, const void *w,
                                      DType wType, float offset, const void *dy,
                                      DType dyType, void *dx, DType dxType,
                                      int64_t rows, int64_t n,
                                      const float *stats) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float rrms = stats[r];
    float sumGXhat = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float xhat = loadAsFloat(x, xType, r * n + i) * rrms;
      sumGXhat += loadAsFloat(dy, dyType, r * n + i) *
                  rmsScale(w, wType, i, offset) * xhat;
    }
    float meanGXhat = blockSum(sumGXhat) / float(n);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float xhat = loadAsFloat(x, xType, r * n + i) * rrms;
      float g =
          loadAsFloat(dy, dyType, r * n + i) * rmsScale(w, wType, i, offset);
      storeFromFloat(dx, dxType, r * n + i, rrms * (g - xhat * meanGXhat));
    }
  }
}

// dweight (and dbias) terms of row r, column c: dy * xhat (and dy), with
// xhat = (x - shift[r]) * scale[r]; rmsnorm has no shift.
struct NormParamTerms {
  const void *x, *dy;
  DType xType, dyType;
  int64_t n;
  const float *shift, *scale;
  __device__ float2 operator()(int64_t r, int64_t c) const {
    float xv = loadAsFloat(x, xType, r * n + c);
    float xhat = (shift ? xv - shift[r] : xv) * scale[r];
    float g = loadAsFloat(dy, dyType, r * n + c);
    return make_float2(g * xhat, g);
  }
};

struct StoreParamGrads {
  void *dweight, *dbias;
  DType dweightType, dbiasType;
  __device__ void operator()(int64_t c, float2 total) const {
    storeFromFloat(dweight, dweightType, c, total.x);
    if (dbias)
      storeFromFloat(dbias, dbiasType, c, total.y);
  }
};

// `saved`, or the statistics recomputed into `scratch` when it is null.
Status statistics(const char *op, const Tensor &x, float eps, bool rms,
                  const float *saved, Scratch &scratch, cudaStream_t stream,
                  const float *&stats) {
  stats = saved;
  int64_t rows = x.rows();
  if (saved || rows == 0)
    return {};
  ZEROC_RETURN_IF_ERROR(
      scratch.allocate(op, size_t(rows) * (rms ? 4 : 8), stream));
  normStatsKernel<<<rowGrid(rows), kNormThreads, 0, stream>>>(
      x.data, x.dtype, rows, x.dim(-1), eps, rms, scratch.get<float>());
  stats = scratch.get<float>();
  return launchStatus(op);
}

} // namespace

Status layerNormForward(const Tensor &x, const Tensor &weight,
                        const Tensor &bias, float eps, const Tensor &y,
                        float *saved, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkLayerNormForward(x, weight, bias, y));
  int64_t rows = x.rows(), n = x.dim(-1);
  if (rows == 0)
    return {};
  layerNormForwardKernel<<<rowGrid(rows), kNormThreads, 0, stream>>>(
      x.data, x.dtype, weight.data, weight.dtype, bias.data, bias.dtype, y.data,
      y.dtype, rows, n, eps, saved);
  return launchStatus("layernorm");
}

Status layerNormBackward(const Tensor &x, const Tensor &weight,
                         const Tensor &dy, float eps, const float *saved,
                         const Tensor &dx, const Tensor &dweight,
                         const Tensor &dbias, cudaStream_t stream) {
  const char *op = "layernorm_backward";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkLayerNormBackward(x, weight, dy, dx, dweight, dbias));
  int64_t rows = x.rows(), n = x.dim(-1);
  Scratch recomputed;
  const float *stats;
  ZEROC_RETURN_IF_ERROR(
      statistics(op, x, eps, false, saved, recomputed, stream, stats));
  // The column sums read dy before the row kernel may overwrite it (dx may
  // be dy).
  ZEROC_RETURN_IF_ERROR(columnSums(
      op, rows, n,
      NormParamTerms{x.data, dy.data, x.dtype, dy.dtype, n, stats,
                     stats ? stats + rows : nullptr},
      StoreParamGrads{dweight.data, dbias.data, dweight.dtype, dbias.dtype},
      stream));
  if (rows == 0)
    return {};
  layerNormBackwardKernel<<<rowGrid(rows), kNormThreads, 0, stream>>>(
      x.data, x.dtype, weight.data, weight.dtype, dy.data, dy.dtype, dx.data,
      dx.dtype, rows, n, stats);
  return launchStatus(op);
}

Status rmsNormForward(const Tensor &x, const Tensor &weight, float eps,
                      bool unitOffset, const Tensor &y, float *saved,
                      cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkRmsNormForward(x, weight, y));
  int64_t rows = x.rows(), n = x.dim(-1);
  if (rows == 0)
    return {};
  rmsNormForwardKernel<<<rowGrid(rows), kNormThreads, 0, stream>>>(
      x.data, x.dtype, weight.data, weight.dtype, unitOffset ? 1.0f : 0.0f,
      y.data, y.dtype, rows, n, eps, saved);
  return launchStatus("rmsnorm");
}

Status rmsNormBackward(const Tensor &x, const Tensor &weight, const Tensor &dy,
                       float eps, bool unitOffset, const float *saved,
                       const Tensor &dx, const Tensor &dweight,
                       cudaStream_t stream) {
  const char *op = "rmsnorm_backward";
  ZEROC_RETURN_IF_ERROR(cpu::checkRmsNormBackward(x, weight, dy, dx, dweight));
  int64_t rows = x.rows(), n = x.dim(-1);
  Scratch recomputed;
  const float *stats;
  ZEROC_RETURN_IF_ERROR(
      statistics(op, x, eps, true, saved, recomputed, stream, stats));
  ZEROC_RETURN_IF_ERROR(columnSums(
      op, rows, n,
      NormParamTerms{x.data, dy.data, x.dtype, dy.dtype, n, nullptr, stats},
      StoreParamGrads{dweight.data, nullptr, dweight.dtype, DType::F32},
      stream));
  if (rows == 0)
    return {};
  rmsNormBackwardKernel<<<rowGrid(rows), kNormThreads, 0, stream>>>(
      x.data, x.dtype, weight.data, weight.dtype, unitOffset ? 1.0f : 0.0f,
      dy.data, dy.dtype, dx.data, dx.dtype, rows, n, stats);
  return launchStatus(op);
}

} // namespace zeroc::cuda
