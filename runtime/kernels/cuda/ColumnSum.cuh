//===- ColumnSum.cuh - Deterministic sums over rows ------------*- CUDA -*-===//
//
// Internal to runtime/kernels/cuda: for a [rows, cols] grid of f(r, c)
// (two values each, for kernels that need two sums in one pass), the sum
// over rows of every column, without atomics. Pass 1: blocks of 32 columns x
// 8 row lanes sum a chunk of rows each into f32 partials [chunks, cols];
// pass 2 adds the chunks of each column in chunk order. The order depends
// only on the shape, so results are bit-reproducible.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_COLUMNSUM_CUH
#define ZEROC_RUNTIME_KERNELS_CUDA_COLUMNSUM_CUH

#include "cuda/Device.cuh"

namespace zeroc::cuda {

constexpr int kColumnTile = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kRowsPerChunk = 128;

template <typename F>
__global__ void columnPartialsKernel(int64_t rows, int64_t cols,
                                     int64_t rowsPerChunk, F f,
                                     float2 *partials) {
  __shared__ float2 tile[kRowLanes][kColumnTile];
  int64_t c = int64_t(blockIdx.x) * kColumnTile + threadIdx.x;
  int64_t first = int64_t(blockIdx.y) * rowsPerChunk;
  int64_t last = rows < first + rowsPerChunk ? rows : first + rowsPerChunk;
  float2 sum = make_float2(0.0f, 0.0f);
  if (c < cols)
    for (int64_t r = first + threadIdx.y; r < last; r += kRowLanes) {
      float2 v = f(r, c);
      sum.x += v.x;
      sum.y += v.y;
    }
  tile[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float2 total = tile[0][threadIdx.x];
    for (int lane = 1; lane < kRowLanes; ++lane) {
      total.x += tile[lane][threadIdx.x].x;
      total.y += tile[lane][threadIdx.x].y;
    }
    partials[int64_t(blockIdx.y) * cols + c] = total;
  }
}

template <typename Store>
__global__ void columnFinishKernel(const float2 *partials, int64_t chunks,
                                   int64_t cols, Store store) {
  for (int64_t c = globalThread(); c < cols; c += globalThreads()) {
    float2 total = make_float2(0.0f, 0.0f);
    for (int64_t k = 0; k < chunks; ++k) {
      float2 v = partials[k * cols + c];
      total.x += v.x;
      total.y += v.y;
    }
    store(c, total);
  }
}

/// Calls `store(c, {sum over r of f(r, c).x, ... .y})` for every c < cols.
/// `f` and `store` are functors with __device__ call operators.
template <typename F, typename Store>
Status columnSums(const char *op, int64_t rows, int64_t cols, F f, Store store,
                  cudaStream_t stream) {
  if (cols == 0)
    return {};
  // At most kMaxChunks partial rows (gridDim.y <= 65535, and the partials'
  // scratch stays small): longer inputs get longer chunks. The order of
  // summation still depends only on the shape.
  constexpr int64_t kMaxChunks = 1024;
  int64_t rowsPerChunk =
      std::max<int64_t>(kRowsPerChunk, (rows + kMaxChunks - 1) / kMaxChunks);
  int64_t chunks = (rows + rowsPerChunk - 1) / rowsPerChunk;
  Scratch partials;
  if (chunks > 0) {
    ZEROC_RETURN_IF_ERROR(
        partials.allocate(op, size_t(chunks * cols) * sizeof(float2), stream));
    dim3 grid(unsigned((cols + kColumnTile - 1) / kColumnTile),
              unsigned(chunks));
    columnPartialsKernel<<<grid, dim3(kColumnTile, kRowLanes), 0, stream>>>(
        rows, cols, rowsPerChunk, f, partials.get<float2>());
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
  }
  columnFinishKernel<<<gridFor(cols), kThreads, 0, stream>>>(
      partials.get<float2>(), chunks, cols, store);
  return launchStatus(op);
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_COLUMNSUM_CUH
