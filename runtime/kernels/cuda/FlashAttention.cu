//===- FlashAttention.cu - Flash attention on the GPU ---------------------===//
//
// cpu/Attention.h's flash kernels on device data: the online softmax over
// the keys of each query row, keeping only the row log-sum-exp L for the
// backward, which recomputes P = exp(S - L) and needs no [seq, seq]
// buffer. One warp per row, each lane holding head_dim / 32 columns in
// registers (head_dim <= 256); operands are read in their own dtype, so a
// training call takes no scratch memory. Written for correctness first:
// no shared-memory tiling or tensor cores yet (docs/gpu-kernels.md).
// Deterministic: dK and dV are summed per key row by one warp, over the
// query heads of a group in head order, then the queries in order. A
// sliding window (`window` > 0) bounds each row's loop to the keys (or, for
// dK and dV, the queries) it pairs with: i - window < j <= i.
//
//===----------------------------------------------------------------------===//

#include "cuda/Attention.h"

#include "cpu/Attention.h"
#include "cuda/Device.cuh"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mma.h>
#include <string>
#include <type_traits>

namespace zeroc::cuda {

namespace {

constexpr int kMaxColumnsPerLane = 8;
constexpr int64_t kMaxHeadDim = 32 * kMaxColumnsPerLane;

// The sizes and operands every flash kernel reads.
struct FlashArgs {
  const void *q, *k, *v, *out, *dout;
  DType qType, kType, vType, outType, doutType;
  int64_t batch, seq, heads, kvHeads, headDim, window;
  float scale;

  // The keys query i sees are firstKey(i) .. i; the queries key j is seen
  // by are j .. lastQuery(j).
  __device__ int64_t firstKey(int64_t i) const {
    return window > 0 && i >= window ? i - window + 1 : 0;
  }
  __device__ int64_t lastQuery(int64_t j) const {
    return window > 0 && j + window < seq ? j + window - 1 : seq - 1;
  }
  __device__ int64_t qWidth() const { return heads * headDim; }
  __device__ int64_t kvWidth() const { return kvHeads * headDim; }
  __device__ int64_t group() const { return heads / kvHeads; }
};

// A row of `p` (dtype `t`) from `base`, lane-strided into registers.
__device__ __forceinline__ void loadRow(const void *p, DType t, int64_t base,
                                        int64_t d, float *row) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < kMaxColumnsPerLane; ++c) {
    int64_t col = lane + 32 * c;
    row[c] = col < d ? loadAsFloat(p, t, base + col) : 0.0f;
  }
}

// The dot product of a register row with a row of `p`, in every lane.
__device__ __forceinline__ float dotRow(const float *row, const void *p,
                                        DType t, int64_t base, int64_t d) {
  int lane = threadIdx.x % 32;
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxColumnsPerLane; ++c) {
    int64_t col = lane + 32 * c;
    if (col < d)
      sum += row[c] * loadAsFloat(p, t, base + col);
  }
  return warpReduce(sum, SumOp{});
}

// acc += x * row of `p`.
__device__ __forceinline__ void axpyRow(float x, const void *p, DType t,
                                        int64_t base, int64_t d, float *acc) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < kMaxColumnsPerLane; ++c) {
    int64_t col = lane + 32 * c;
    if (col < d)
      acc[c] += x * loadAsFloat(p, t, base + col);
  }
}

__device__ __forceinline__ void storeRow(void *p, DType t, int64_t base,
                                         int64_t d, const float *row) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < kMaxColumnsPerLane; ++c) {
    int64_t col = lane + 32 * c;
    if (col < d)
      storeFromFloat(p, t, base + col, row[c]);
  }
}

// Row r = (b * heads + h) * seq + i: the online softmax over the keys
// firstKey(i)..i, lse[r] = m + log l, and with `out` the output row.
__global__ void flashForwardKernel(FlashArgs a, void *out, DType outType,
                                   float *lse) {
  int64_t rows = a.batch * a.heads * a.seq, d = a.headDim;
  for (int64_t r = globalThread() / 32; r < rows; r += globalThreads() / 32) {
    int64_t i = r % a.seq, h = r / a.seq % a.heads, b = r / (a.seq * a.heads);
    int64_t qBase = (b * a.seq + i) * a.qWidth() + h * d;
    int64_t kvHead = (h / a.group()) * d;
    float q[kMaxColumnsPerLane], acc[kMaxColumnsPerLane] = {};
    loadRow(a.q, a.qType, qBase, d, q);
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = a.firstKey(i); j <= i; ++j) {
      int64_t kBase = (b * a.seq + j) * a.kvWidth() + kvHead;
      float s = dotRow(q, a.k, a.kType, kBase, d) * a.scale;
      float next = fmaxf(m, s), correction = expf(m - next);
      float p = expf(s - next);
      l = l * correction + p;
      m = next;
      if (out) {
#pragma unroll
        for (int c = 0; c < kMaxColumnsPerLane; ++c)
          acc[c] *= correction;
        axpyRow(p, a.v, a.vType, kBase, d, acc);
      }
    }
    if (lse && threadIdx.x % 32 == 0)
      lse[r] = m + logf(l);
    if (out) {
#pragma unroll
      for (int c = 0; c < kMaxColumnsPerLane; ++c)
        acc[c] /= l;
      storeRow(out, outType, qBase, d, acc);
    }
  }
}

// dQ of row r: sum over keys firstKey(i) <= j <= i of dS[i, j] K[j], with
// P = exp(S - L), dS = P * (dout . v_j - D) * scale, D = dout . out.
__global__ void flashGradQueryKernel(FlashArgs a, const float *lse, void *dq,
                                     DType dqType) {
  int64_t rows = a.batch * a.heads * a.seq, d = a.headDim;
  for (int64_t r = globalThread() / 32; r < rows; r += globalThreads() / 32) {
    int64_t i = r % a.seq, h = r / a.seq % a.heads, b = r / (a.seq * a.heads);
    int64_t qBase = (b * a.seq + i) * a.qWidth() + h * d;
    int64_t kvHead = (h / a.group()) * d;
    float q[kMaxColumnsPerLane], dout[kMaxColumnsPerLane];
    float acc[kMaxColumnsPerLane] = {};
    loadRow(a.q, a.qType, qBase, d, q);
    loadRow(a.dout, a.doutType, qBase, d, dout);
    float rowDot = dotRow(dout, a.out, a.outType, qBase, d);
    for (int64_t j = a.firstKey(i); j <= i; ++j) {
      int64_t kBase = (b * a.seq + j) * a.kvWidth() + kvHead;
      float p = expf(dotRow(q, a.k, a.kType, kBase, d) * a.scale - lse[r]);
      float dp = dotRow(dout, a.v, a.vType, kBase, d);
      axpyRow(p * (dp - rowDot) * a.scale, a.k, a.kType, kBase, d, acc);
    }
    storeRow(dq, dqType, qBase, d, acc);
  }
}

// dK and dV of key row (b, g, j): over the query heads h of kv head g and
// the queries j <= i <= lastQuery(j), dV += P[i, j] dout_i and
// dK += dS[i, j] q_i.
__global__ void flashGradKeyValueKernel(FlashArgs a, const float *lse, void *dk,
                                        DType dkType, void *dv, DType dvType) {
  int64_t rows = a.batch * a.kvHeads * a.seq, d = a.headDim;
  for (int64_t r = globalThread() / 32; r < rows; r += globalThreads() / 32) {
    int64_t j = r % a.seq, g = r / a.seq % a.kvHeads,
            b = r / (a.seq * a.kvHeads);
    int64_t kBase = (b * a.seq + j) * a.kvWidth() + g * d;
    float k[kMaxColumnsPerLane], v[kMaxColumnsPerLane];
    float dkAcc[kMaxColumnsPerLane] = {}, dvAcc[kMaxColumnsPerLane] = {};
    loadRow(a.k, a.kType, kBase, d, k);
    loadRow(a.v, a.vType, kBase, d, v);
    for (int64_t h = g * a.group(); h < (g + 1) * a.group(); ++h)
      for (int64_t i = j; i <= a.lastQuery(j); ++i) {
        int64_t qBase = (b * a.seq + i) * a.qWidth() + h * d;
        float L = lse[(b * a.heads + h) * a.seq + i];
        float p = expf(dotRow(k, a.q, a.qType, qBase, d) * a.scale - L);
        float dp = dotRow(v, a.dout, a.doutType, qBase, d);
        // D = dout_i . out_i, recomputed here rather than kept in scratch.
        float out[kMaxColumnsPerLane];
        loadRow(a.out, a.outType, qBase, d, out);
        float rowDot = dotRow(out, a.dout, a.doutType, qBase, d);
        axpyRow(p, a.dout, a.doutType, qBase, d, dvAcc);
        axpyRow(p * (dp - rowDot) * a.scale, a.q, a.qType, qBase, d, dkAcc);
      }
    storeRow(dk, dkType, kBase, d, dkAcc);
    storeRow(dv, dvType, kBase, d, dvAcc);
  }
}

//===----------------------------------------------------------------------===//
// Tiled kernels (head_dim <= 128): a block of 256 threads takes a tile of 64
// query rows (dQ and the forward) or 64 key rows (dK, dV) of one head and
// loops over the other side's 64-row tiles, each staged once in shared
// memory as f32, so a K or V row is read from device memory once per tile
// of 64 queries instead of once per query (the warp-per-row kernels above
// re-read it for every row: 92% of a GPT-2 124M step on an H100, 761 of
// 826 ms, before these). The tile products run on the f32 FMA units,
// each thread a 4 x (cols / 16) piece of the 64 x cols result, rows
// ty + 16 i and columns tx + 16 j. The sums run in the same orders as the
// warp kernels' (keys in order; heads of a group in order, then queries in
// order, for dK and dV), so the result is deterministic.
//===----------------------------------------------------------------------===//

constexpr int kTile = 64;
constexpr int kTileThreads = 256;
constexpr int64_t kMaxTiledHeadDim = 128;

// acc[i][j] += sum_k A(ty + 16 i, k) * B(tx + 16 j, k), with
// A(r, k) = A[r * aR + k * aK] and B(c, k) = B[c * bC + k * bK] in shared
// memory.
template <int TM, int TN>
__device__ __forceinline__ void
tileProduct(float (&acc)[TM][TN], const float *A, int aR, int aK,
            const float *B, int bC, int bK, int depth) {
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  for (int k = 0; k < depth; ++k) {
    float x[TM], y[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
      x[i] = A[(ty + 16 * i) * aR + k * aK];
#pragma unroll
    for (int j = 0; j < TN; ++j)
      y[j] = B[(tx + 16 * j) * bC + k * bK];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
        acc[i][j] = fmaf(x[i], y[j], acc[i][j]);
  }
}

// Rows row0 .. row0 + 63 of head `head` of `p` (rows of `width` elements,
// `d` of them the head's) into `tile` (row stride DMAX + 1), zeros past the
// sequence and past d.
template <int DMAX>
__device__ void loadTile(float *tile, const void *p, DType t, int64_t batch,
                         int64_t seq, int64_t width, int64_t head, int64_t d,
                         int64_t row0) {
  constexpr int ld = DMAX + 1;
  for (int e = threadIdx.x; e < kTile * DMAX; e += kTileThreads) {
    int r = e / DMAX, c = e % DMAX;
    int64_t i = row0 + r;
    tile[r * ld + c] =
        i < seq && c < d
            ? loadAsFloat(p, t, (batch * seq + i) * width + head * d + c)
            : 0.0f;
  }
}

// Per query row of the tile (4 threads a row): the saved log-sum-exp and
// D = dout . out, the row's term in dS = P (dP - D).
template <int DMAX>
__device__ void rowTerms(const FlashArgs &a, const float *lse,
                         const float *doutTile, int64_t b, int64_t h,
                         int64_t q0, float *rowLse, float *rowD) {
  constexpr int ld = DMAX + 1;
  int r = threadIdx.x / 4, part = threadIdx.x % 4;
  int64_t i = q0 + r, d = a.headDim;
  float dot = 0.0f;
  if (i < a.seq)
    for (int64_t c = part; c < d; c += 4)
      dot += doutTile[r * ld + c] *
             loadAsFloat(a.out, a.outType,
                         (b * a.seq + i) * a.qWidth() + h * d + c);
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  dot += __shfl_xor_sync(0xffffffffu, dot, 2);
  if (part == 0) {
    rowD[r] = dot;
    rowLse[r] = i < a.seq ? lse[(b * a.heads + h) * a.seq + i] : 0.0f;
  }
}

__device__ __forceinline__ bool pairs(const FlashArgs &a, int64_t i,
                                      int64_t j) {
  return i < a.seq && j <= i && j >= a.firstKey(i);
}

template <int DMAX>
__global__ void __launch_bounds__(kTileThreads)
    flashForwardTiled(FlashArgs a, void *out, DType outType, float *lse) {
  constexpr int ld = DMAX + 1, lds = kTile + 1, TN = DMAX / 16;
  extern __shared__ float shared[];
  float *qs = shared, *ks = qs + kTile * ld, *vs = ks + kTile * ld;
  float *ps = vs + kTile * ld, *rowM = ps + kTile * lds, *rowL = rowM + kTile,
        *rowC = rowL + kTile;
  int64_t b = blockIdx.z, h = blockIdx.y, q0 = int64_t(blockIdx.x) * kTile;
  int64_t d = a.headDim, g = h / a.group();
  int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  loadTile<DMAX>(qs, a.q, a.qType, b, a.seq, a.qWidth(), h, d, q0);
  if (tid < kTile) {
    rowM[tid] = -INFINITY;
    rowL[tid] = 0.0f;
  }
  float acc[4][TN] = {};
  int64_t qLast = min(q0 + kTile, a.seq) - 1;
  for (int64_t k0 = a.firstKey(q0) / kTile * kTile; k0 <= qLast; k0 += kTile) {
    __syncthreads();
    loadTile<DMAX>(ks, a.k, a.kType, b, a.seq, a.kvWidth(), g, d, k0);
    loadTile<DMAX>(vs, a.v, a.vType, b, a.seq, a.kvWidth(), g, d, k0);
    __syncthreads();
    float s[4][4] = {};
    tileProduct<4, 4>(s, qs, ld, 1, ks, ld, 1, int(d));
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        int r = ty + 16 * i, c = tx + 16 * j;
        ps[r * lds + c] =
            pairs(a, q0 + r, k0 + c) ? s[i][j] * a.scale : -INFINITY;
      }
    __syncthreads();
    {
      // The online softmax, 4 threads a row, 16 columns each.
      int r = tid / 4, part = tid % 4;
      float *row = ps + r * lds + part * 16;
      float mx = -INFINITY;
      for (int c = 0; c < 16; ++c)
        mx = fmaxf(mx, row[c]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float mOld = rowM[r], mNew = fmaxf(mOld, mx), sum = 0.0f;
      for (int c = 0; c < 16; ++c) {
        float p = mNew == -INFINITY ? 0.0f : expf(row[c] - mNew);
        row[c] = p;
        sum += p;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      // Every lane of the row has read rowM[r] before its first lane
      // writes it (the shuffles already order them; compute-sanitizer's
      // racecheck reports the pair without this barrier).
      __syncwarp();
      if (part == 0) {
        float correction = mNew == -INFINITY ? 1.0f : expf(mOld - mNew);
        rowC[r] = correction;
        rowL[r] = rowL[r] * correction + sum;
        rowM[r] = mNew;
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float correction = rowC[ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TN; ++j)
        acc[i][j] *= correction;
    }
    tileProduct<4, TN>(acc, ps, lds, 1, vs, 1, ld, kTile);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int r = ty + 16 * i;
    int64_t q = q0 + r;
    if (out && q < a.seq)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        int c = tx + 16 * j;
        if (c < d)
          storeFromFloat(out, outType, (b * a.seq + q) * a.qWidth() + h * d + c,
                         acc[i][j] / rowL[r]);
      }
  }
  if (lse && tid < kTile && q0 + tid < a.seq)
    lse[(b * a.heads + h) * a.seq + q0 + tid] = rowM[tid] + logf(rowL[tid]);
}

// For a staged (query tile, key tile) pair: P = exp(S - L) and
// dS = P (dP - D) scale, with S = Q K^T and dP = dO V^T; dS into `dss`,
// and P into `ps` with kKeepP. The dQ and the dK/dV kernels both need it.
template <int DMAX, bool kKeepP>
__device__ __forceinline__ void
tileScoreGrads(const FlashArgs &a, const float *qs, const float *dos,
               const float *ks, const float *vs, const float *rowLse,
               const float *rowD, int64_t q0, int64_t k0, float *ps,
               float *dss) {
  constexpr int ld = DMAX + 1, lds = kTile + 1;
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float s[4][4] = {}, dp[4][4] = {};
  tileProduct<4, 4>(s, qs, ld, 1, ks, ld, 1, int(a.headDim));
  tileProduct<4, 4>(dp, dos, ld, 1, vs, ld, 1, int(a.headDim));
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int r = ty + 16 * i, c = tx + 16 * j;
      float p =
          pairs(a, q0 + r, k0 + c) ? expf(s[i][j] * a.scale - rowLse[r]) : 0.0f;
      if constexpr (kKeepP)
        ps[r * lds + c] = p;
      dss[r * lds + c] = p * (dp[i][j] - rowD[r]) * a.scale;
    }
}

template <int DMAX>
__global__ void __launch_bounds__(kTileThreads)
    flashGradQueryTiled(FlashArgs a, const float *lse, void *dq, DType dqType) {
  constexpr int ld = DMAX + 1, lds = kTile + 1, TN = DMAX / 16;
  extern __shared__ float shared[];
  float *qs = shared, *dos = qs + kTile * ld, *ks = dos + kTile * ld,
        *vs = ks + kTile * ld, *dss = vs + kTile * ld;
  float *rowLse = dss + kTile * lds, *rowD = rowLse + kTile;
  int64_t b = blockIdx.z, h = blockIdx.y, q0 = int64_t(blockIdx.x) * kTile;
  int64_t d = a.headDim, g = h / a.group();
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  loadTile<DMAX>(qs, a.q, a.qType, b, a.seq, a.qWidth(), h, d, q0);
  loadTile<DMAX>(dos, a.dout, a.doutType, b, a.seq, a.qWidth(), h, d, q0);
  __syncthreads();
  rowTerms<DMAX>(a, lse, dos, b, h, q0, rowLse, rowD);
  float acc[4][TN] = {};
  int64_t qLast = min(q0 + kTile, a.seq) - 1;
  for (int64_t k0 = a.firstKey(q0) / kTile * kTile; k0 <= qLast; k0 += kTile) {
    __syncthreads();
    loadTile<DMAX>(ks, a.k, a.kType, b, a.seq, a.kvWidth(), g, d, k0);
    loadTile<DMAX>(vs, a.v, a.vType, b, a.seq, a.kvWidth(), g, d, k0);
    __syncthreads();
    tileScoreGrads<DMAX, false>(a, qs, dos, ks, vs, rowLse, rowD, q0, k0,
                                nullptr, dss);
    __syncthreads();
    tileProduct<4, TN>(acc, dss, lds, 1, ks, 1, ld, kTile);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int64_t q = q0 + ty + 16 * i;
    if (q < a.seq)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        int c = tx + 16 * j;
        if (c < d)
          storeFromFloat(dq, dqType, (b * a.seq + q) * a.qWidth() + h * d + c,
                         acc[i][j]);
      }
  }
}

template <int DMAX>
__global__ void __launch_bounds__(kTileThreads)
    flashGradKeyValueTiled(FlashArgs a, const float *lse, void *dk,
                           DType dkType, void *dv, DType dvType) {
  constexpr int ld = DMAX + 1, lds = kTile + 1, TN = DMAX / 16;
  extern __shared__ float shared[];
  float *ks = shared, *vs = ks + kTile * ld, *qs = vs + kTile * ld,
        *dos = qs + kTile * ld, *ps = dos + kTile * ld, *dss = ps + kTile * lds;
  float *rowLse = dss + kTile * lds, *rowD = rowLse + kTile;
  int64_t b = blockIdx.z, g = blockIdx.y, k0 = int64_t(blockIdx.x) * kTile;
  int64_t d = a.headDim;
  int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  loadTile<DMAX>(ks, a.k, a.kType, b, a.seq, a.kvWidth(), g, d, k0);
  loadTile<DMAX>(vs, a.v, a.vType, b, a.seq, a.kvWidth(), g, d, k0);
  float dkAcc[4][TN] = {}, dvAcc[4][TN] = {};
  int64_t qEnd = a.lastQuery(min(k0 + kTile, a.seq) - 1);
  for (int64_t h = g * a.group(); h < (g + 1) * a.group(); ++h)
    for (int64_t q0 = k0; q0 <= qEnd; q0 += kTile) {
      __syncthreads();
      loadTile<DMAX>(qs, a.q, a.qType, b, a.seq, a.qWidth(), h, d, q0);
      loadTile<DMAX>(dos, a.dout, a.doutType, b, a.seq, a.qWidth(), h, d, q0);
      __syncthreads();
      rowTerms<DMAX>(a, lse, dos, b, h, q0, rowLse, rowD);
      __syncthreads();
      tileScoreGrads<DMAX, true>(a, qs, dos, ks, vs, rowLse, rowD, q0, k0, ps,
                                 dss);
      __syncthreads();
      // Rows of these products are keys, columns head dims, and the sum
      // runs over the tile's queries.
      tileProduct<4, TN>(dvAcc, ps, 1, lds, dos, 1, ld, kTile);
      tileProduct<4, TN>(dkAcc, dss, 1, lds, qs, 1, ld, kTile);
    }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int64_t j = k0 + ty + 16 * i;
    if (j < a.seq)
#pragma unroll
      for (int n = 0; n < TN; ++n) {
        int c = tx + 16 * n;
        if (c < d) {
          int64_t at = (b * a.seq + j) * a.kvWidth() + g * d + c;
          storeFromFloat(dk, dkType, at, dkAcc[i][n]);
          storeFromFloat(dv, dvType, at, dvAcc[i][n]);
        }
      }
  }
}

// Shared memory of the three tiled kernels, in floats: `tiles` tiles of
// 64 x (DMAX + 1), `scores` of 64 x 65, `rows` per-row arrays of 64.
constexpr size_t tiledSharedBytes(int dmax, int tiles, int scores, int rows) {
  return sizeof(float) *
         (size_t(tiles) * kTile * (dmax + 1) +
          size_t(scores) * kTile * (kTile + 1) + size_t(rows) * kTile);
}

template <typename Kernel>
Status allowShared(const char *op, Kernel kernel, size_t bytes) {
  cudaError_t e = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e != cudaSuccess)
    return {std::string(op) + ": cannot give the tiled attention kernel " +
            std::to_string(bytes) +
            " bytes of shared memory: " + cudaGetErrorString(e)};
  return {};
}

template <int DMAX>
Status tiledForward(const char *op, const FlashArgs &args, void *out,
                    DType outType, float *lse, cudaStream_t stream) {
  size_t bytes = tiledSharedBytes(DMAX, 3, 1, 3);
  ZEROC_RETURN_IF_ERROR(allowShared(op, flashForwardTiled<DMAX>, bytes));
  dim3 grid(unsigned((args.seq + kTile - 1) / kTile), unsigned(args.heads),
            unsigned(args.batch));
  flashForwardTiled<DMAX>
      <<<grid, kTileThreads, bytes, stream>>>(args, out, outType, lse);
  return launchStatus(op);
}

template <int DMAX>
Status tiledBackward(const char *op, const FlashArgs &args, const float *lse,
                     const Tensor &dq, const Tensor &dk, const Tensor &dv,
                     cudaStream_t stream) {
  unsigned tiles = unsigned((args.seq + kTile - 1) / kTile);
  size_t qBytes = tiledSharedBytes(DMAX, 4, 1, 2);
  ZEROC_RETURN_IF_ERROR(allowShared(op, flashGradQueryTiled<DMAX>, qBytes));
  flashGradQueryTiled<DMAX>
      <<<dim3(tiles, unsigned(args.heads), unsigned(args.batch)), kTileThreads,
         qBytes, stream>>>(args, lse, dq.data, dq.dtype);
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  size_t kvBytes = tiledSharedBytes(DMAX, 4, 2, 2);
  ZEROC_RETURN_IF_ERROR(allowShared(op, flashGradKeyValueTiled<DMAX>, kvBytes));
  flashGradKeyValueTiled<DMAX>
      <<<dim3(tiles, unsigned(args.kvHeads), unsigned(args.batch)),
         kTileThreads, kvBytes, stream>>>(args, lse, dk.data, dk.dtype, dv.data,
                                          dv.dtype);
  return launchStatus(op);
}

//===----------------------------------------------------------------------===//
// Tensor-core kernels (bf16 or f16 operands, head_dim a multiple of 8 up to
// 128): the same 64-row tiles, the products on the tensor cores through
// WMMA (16 x 16 x 16 pieces, f32 accumulators). A block of 4 warps; warp w
// owns rows 16 w .. 16 w + 15 of the block's tile (queries in the forward
// and dQ, keys in dK and dV), so between a product and the element-wise
// work on its rows only the warp synchronizes. Operands stay in their
// 16-bit dtype in shared memory (rows padded by 16 bytes against bank
// conflicts); P and dS are rounded to it before their products, as
// FlashAttention-2 does. The forward makes two passes over the keys: the
// first finds each row's log-sum-exp L, the second sums exp(S - L) V, so
// the output's accumulators never need rescaling (a third product per
// tile, in exchange for no shared-memory round trip of the output). The
// sums run in a fixed order: deterministic.
//===----------------------------------------------------------------------===//

constexpr int kMmaThreads = 128;
constexpr int kMmaWarps = kMmaThreads / 32;
static_assert(kMmaWarps * 16 == kTile, "a warp owns 16 rows of a tile");

template <typename T> __device__ __forceinline__ T toDType(float x);
template <> __device__ __forceinline__ __nv_bfloat16 toDType(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half toDType(float x) {
  return __float2half_rn(x);
}
__device__ __forceinline__ float toFloat(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float toFloat(__half x) { return __half2float(x); }

// The shared-memory layout of the tensor-core kernels, in bytes: 16-bit
// tiles of 64 x (DMAX + 8), 16-bit score tiles of 64 x 72, f32 score tiles
// of 64 x (max(64, DMAX) + 4) (the first also stages each warp's output
// rows), and f32 arrays of 64. Every piece starts 32-byte aligned, as WMMA
// loads and stores need.
template <int DMAX> struct MmaLayout {
  static constexpr int ldT = DMAX + 8;
  static constexpr int ldP = kTile + 8;
  static constexpr int ldS = (DMAX > kTile ? DMAX : kTile) + 4;
  static constexpr size_t tileBytes = size_t(kTile) * ldT * 2;
  static constexpr size_t pBytes = size_t(kTile) * ldP * 2;
  static constexpr size_t sBytes = size_t(kTile) * ldS * 4;
  static constexpr size_t bytes(int tiles, int ps, int ss, int rows) {
    return tiles * tileBytes + ps * pBytes + ss * sBytes +
           size_t(rows) * kTile * 4;
  }
  static_assert(tileBytes % 32 == 0 && pBytes % 32 == 0 && sBytes % 32 == 0,
                "aligned pieces");
};

// Rows row0 .. row0 + 63 of head `head` of `p` (16-bit, rows of `width`
// elements, `d` of them the head's, d % 8 == 0) into `tile`, 16 bytes at a
// time; zeros past the sequence and past d.
template <typename T, int DMAX>
__device__ void loadTileMma(T *tile, const T *p, int64_t batch, int64_t seq,
                            int64_t width, int64_t head, int64_t d,
                            int64_t row0) {
  constexpr int ld = MmaLayout<DMAX>::ldT, vecs = DMAX / 8;
  for (int e = threadIdx.x; e < kTile * vecs; e += kMmaThreads) {
    int r = e / vecs, c = (e % vecs) * 8;
    int64_t i = row0 + r;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (i < seq && c < d)
      x = *reinterpret_cast<const uint4 *>(p + (batch * seq + i) * width +
                                           head * d + c);
    *reinterpret_cast<uint4 *>(tile + r * ld + c) = x;
  }
}

using AccFragment =
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

// S[16 w + r][c] = sum_k A[16 w + r][k] B[c][k] for the calling warp's 16
// rows and all 64 columns, over the first `depth` (a multiple of 16) k:
// A Bᵀ of two row-major 16-bit tiles, into the f32 tile S.
template <typename T, int DMAX>
__device__ __forceinline__ void warpScores(const T *A, const T *B, float *S,
                                           int depth) {
  using namespace nvcuda;
  constexpr int ld = MmaLayout<DMAX>::ldT, ldS = MmaLayout<DMAX>::ldS;
  int w = threadIdx.x / 32;
  AccFragment acc[kTile / 16];
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n)
    wmma::fill_fragment(acc[n], 0.0f);
  for (int k = 0; k < depth; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::load_matrix_sync(a, A + 16 * w * ld + k, ld);
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
      wmma::load_matrix_sync(b, B + 16 * n * ld + k, ld);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n)
    wmma::store_matrix_sync(S + 16 * w * ldS + 16 * n, acc[n], ldS,
                            wmma::mem_row_major);
}

// acc[n] += P[16 w .. 16 w + 15][0 .. 63] X[0 .. 63][16 n .. 16 n + 15]: the
// calling warp's rows of a 16-bit 64 x 64 tile P (row stride ldP) times a
// 16-bit 64 x DMAX tile X.
template <typename T, int DMAX>
__device__ __forceinline__ void warpAccumulate(AccFragment (&acc)[DMAX / 16],
                                               const T *P, const T *X) {
  using namespace nvcuda;
  constexpr int ld = MmaLayout<DMAX>::ldT, ldP = MmaLayout<DMAX>::ldP;
  int w = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < kTile; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::load_matrix_sync(a, P + 16 * w * ldP + k, ldP);
#pragma unroll
    for (int n = 0; n < DMAX / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
      wmma::load_matrix_sync(b, X + k * ld + 16 * n, ld);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

// The calling warp's rows of `acc` (16 x DMAX) to device memory: staged
// through the warp's own rows of the f32 tile S, then each row (two lanes
// a row) converted to `t` at (base(row) + c) for c < d, rows < seq.
template <typename T, int DMAX>
__device__ __forceinline__ void
warpStoreRows(AccFragment (&acc)[DMAX / 16], float *S, T *p, int64_t batch,
              int64_t seq, int64_t width, int64_t head, int64_t d,
              int64_t row0) {
  using namespace nvcuda;
  constexpr int ldS = MmaLayout<DMAX>::ldS;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncwarp();
#pragma unroll
  for (int n = 0; n < DMAX / 16; ++n)
    wmma::store_matrix_sync(S + 16 * w * ldS + 16 * n, acc[n], ldS,
                            wmma::mem_row_major);
  __syncwarp();
  int r = 16 * w + lane / 2;
  int64_t i = row0 + r;
  if (i < seq)
    for (int64_t c = (lane % 2) * (DMAX / 2); c < (lane % 2 + 1) * (DMAX / 2);
         ++c)
      if (c < d)
        p[(batch * seq + i) * width + head * d + c] =
            toDType<T>(S[r * ldS + c]);
  __syncwarp();
}

__device__ __forceinline__ int roundUp16(int64_t d) {
  return int((d + 15) / 16 * 16);
}

// The forward: the query tile q0 (tiles taken longest first: the last
// query tiles see the most keys) of head h and batch row b. Pass 1: each
// row's log-sum-exp (two lanes a row, each half the tile's keys, merged at
// the end); pass 2, only with `out`: O = sum exp(S - L) V.
template <typename T, int DMAX>
__global__ void __launch_bounds__(kMmaThreads)
    flashForwardMma(FlashArgs a, T *out, float *lse) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L = MmaLayout<DMAX>;
  constexpr int ldS = L::ldS, ldP = L::ldP;
  extern __shared__ __align__(32) unsigned char smem[];
  T *qs = reinterpret_cast<T *>(smem);
  T *ks = reinterpret_cast<T *>(smem + L::tileBytes);
  T *vs = reinterpret_cast<T *>(smem + 2 * L::tileBytes);
  float *ss = reinterpret_cast<float *>(smem + 3 * L::tileBytes);
  T *ps = reinterpret_cast<T *>(smem + 3 * L::tileBytes + L::sBytes);
  const T *q = static_cast<const T *>(a.q), *k = static_cast<const T *>(a.k),
          *v = static_cast<const T *>(a.v);
  int64_t tiles = (a.seq + kTile - 1) / kTile;
  int64_t b = blockIdx.z, h = blockIdx.y,
          q0 = (tiles - 1 - int64_t(blockIdx.x)) * kTile;
  int64_t d = a.headDim, g = h / a.group();
  int depth = roundUp16(d);
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  int r = 16 * w + lane / 2, c0 = (lane % 2) * (kTile / 2);
  int64_t i = q0 + r;
  loadTileMma<T, DMAX>(qs, q, b, a.seq, a.qWidth(), h, d, q0);
  int64_t kFirst = a.firstKey(q0) / kTile * kTile;
  int64_t qLast = min(q0 + kTile, a.seq) - 1;

  float m = -INFINITY, l = 0.0f;
  for (int64_t k0 = kFirst; k0 <= qLast; k0 += kTile) {
    __syncthreads();
    loadTileMma<T, DMAX>(ks, k, b, a.seq, a.kvWidth(), g, d, k0);
    __syncthreads();
    warpScores<T, DMAX>(qs, ks, ss, depth);
    __syncwarp();
    float mx = -INFINITY;
    for (int c = c0; c < c0 + kTile / 2; ++c)
      if (pairs(a, i, k0 + c))
        mx = fmaxf(mx, ss[r * ldS + c] * a.scale);
    if (mx != -INFINITY) {
      float mNew = fmaxf(m, mx), sum = 0.0f;
      for (int c = c0; c < c0 + kTile / 2; ++c)
        if (pairs(a, i, k0 + c))
          sum += expf(ss[r * ldS + c] * a.scale - mNew);
      l = l * expf(m - mNew) + sum;
      m = mNew;
    }
    __syncwarp();
  }
  float m2 = __shfl_xor_sync(0xffffffffu, m, 1),
        l2 = __shfl_xor_sync(0xffffffffu, l, 1);
  float mAll = fmaxf(m, m2);
  float rowLse = -INFINITY;
  if (mAll != -INFINITY)
    rowLse = mAll + logf(l * expf(m - mAll) + l2 * expf(m2 - mAll));
  if (lse && lane % 2 == 0 && i < a.seq)
    lse[(b * a.heads + h) * a.seq + i] = rowLse;
  if (!out)
    return;

  AccFragment acc[DMAX / 16];
#pragma unroll
  for (int n = 0; n < DMAX / 16; ++n)
    nvcuda::wmma::fill_fragment(acc[n], 0.0f);
  for (int64_t k0 = kFirst; k0 <= qLast; k0 += kTile) {
    __syncthreads();
    loadTileMma<T, DMAX>(ks, k, b, a.seq, a.kvWidth(), g, d, k0);
    loadTileMma<T, DMAX>(vs, v, b, a.seq, a.kvWidth(), g, d, k0);
    __syncthreads();
    warpScores<T, DMAX>(qs, ks, ss, depth);
    __syncwarp();
    for (int c = c0; c < c0 + kTile / 2; ++c)
      ps[r * ldP + c] = toDType<T>(
          pairs(a, i, k0 + c) ? expf(ss[r * ldS + c] * a.scale - rowLse)
                              : 0.0f);
    __syncwarp();
    warpAccumulate<T, DMAX>(acc, ps, vs);
  }
  warpStoreRows<T, DMAX>(acc, ss, out, b, a.seq, a.qWidth(), h, d, q0);
#else
  __trap();
#endif
}

// dQ of the query tile q0 of head h: over the key tiles, S = Q Kᵀ and
// dP = dO Vᵀ, dS = P (dP - D) scale, dQ += dS K. Each lane keeps its row's
// L and D = dO . O in registers.
template <typename T, int DMAX>
__global__ void __launch_bounds__(kMmaThreads)
    flashGradQueryMma(FlashArgs a, const float *lse, T *dq) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L = MmaLayout<DMAX>;
  constexpr int ldS = L::ldS, ldP = L::ldP;
  extern __shared__ __align__(32) unsigned char smem[];
  T *qs = reinterpret_cast<T *>(smem);
  T *dos = reinterpret_cast<T *>(smem + L::tileBytes);
  T *ks = reinterpret_cast<T *>(smem + 2 * L::tileBytes);
  T *vs = reinterpret_cast<T *>(smem + 3 * L::tileBytes);
  float *ss = reinterpret_cast<float *>(smem + 4 * L::tileBytes);
  float *dps = reinterpret_cast<float *>(smem + 4 * L::tileBytes + L::sBytes);
  T *dss = reinterpret_cast<T *>(smem + 4 * L::tileBytes + 2 * L::sBytes);
  const T *q = static_cast<const T *>(a.q), *k = static_cast<const T *>(a.k),
          *v = static_cast<const T *>(a.v), *o = static_cast<const T *>(a.out),
          *dout = static_cast<const T *>(a.dout);
  int64_t tiles = (a.seq + kTile - 1) / kTile;
  int64_t b = blockIdx.z, h = blockIdx.y,
          q0 = (tiles - 1 - int64_t(blockIdx.x)) * kTile;
  int64_t d = a.headDim, g = h / a.group();
  int depth = roundUp16(d);
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  int r = 16 * w + lane / 2, c0 = (lane % 2) * (kTile / 2);
  int64_t i = q0 + r;
  loadTileMma<T, DMAX>(qs, q, b, a.seq, a.qWidth(), h, d, q0);
  loadTileMma<T, DMAX>(dos, dout, b, a.seq, a.qWidth(), h, d, q0);
  __syncthreads();
  float rowLse = 0.0f, rowD = 0.0f;
  if (i < a.seq) {
    rowLse = lse[(b * a.heads + h) * a.seq + i];
    for (int64_t c = (lane % 2) * (d / 2); c < (lane % 2 ? d : d / 2); ++c)
      rowD += toFloat(dos[r * L::ldT + c]) *
              toFloat(o[(b * a.seq + i) * a.qWidth() + h * d + c]);
  }
  rowD += __shfl_xor_sync(0xffffffffu, rowD, 1);

  AccFragment acc[DMAX / 16];
#pragma unroll
  for (int n = 0; n < DMAX / 16; ++n)
    nvcuda::wmma::fill_fragment(acc[n], 0.0f);
  int64_t qLast = min(q0 + kTile, a.seq) - 1;
  for (int64_t k0 = a.firstKey(q0) / kTile * kTile; k0 <= qLast; k0 += kTile) {
    __syncthreads();
    loadTileMma<T, DMAX>(ks, k, b, a.seq, a.kvWidth(), g, d, k0);
    loadTileMma<T, DMAX>(vs, v, b, a.seq, a.kvWidth(), g, d, k0);
    __syncthreads();
    warpScores<T, DMAX>(qs, ks, ss, depth);
    warpScores<T, DMAX>(dos, vs, dps, depth);
    __syncwarp();
    for (int c = c0; c < c0 + kTile / 2; ++c) {
      float p =
          pairs(a, i, k0 + c) ? expf(ss[r * ldS + c] * a.scale - rowLse) : 0.0f;
      dss[r * ldP + c] = toDType<T>(p * (dps[r * ldS + c] - rowD) * a.scale);
    }
    __syncwarp();
    warpAccumulate<T, DMAX>(acc, dss, ks);
  }
  warpStoreRows<T, DMAX>(acc, ss, dq, b, a.seq, a.qWidth(), h, d, q0);
#else
  __trap();
#endif
}

// dK and dV of the key tile k0 of kv head g: over the query heads of the
// group in order, then the query tiles in order, Sᵀ = K Qᵀ and
// dPᵀ = V dOᵀ (rows keys, columns queries), dV += Pᵀ dO and dK += dSᵀ Q.
// The queries' L and D are staged per tile in shared memory.
template <typename T, int DMAX>
__global__ void __launch_bounds__(kMmaThreads)
    flashGradKeyValueMma(FlashArgs a, const float *lse, T *dk, T *dv) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L = MmaLayout<DMAX>;
  constexpr int ldS = L::ldS, ldP = L::ldP;
  extern __shared__ __align__(32) unsigned char smem[];
  T *ks = reinterpret_cast<T *>(smem);
  T *vs = reinterpret_cast<T *>(smem + L::tileBytes);
  T *qs = reinterpret_cast<T *>(smem + 2 * L::tileBytes);
  T *dos = reinterpret_cast<T *>(smem + 3 * L::tileBytes);
  float *ss = reinterpret_cast<float *>(smem + 4 * L::tileBytes);
  float *dps = reinterpret_cast<float *>(smem + 4 * L::tileBytes + L::sBytes);
  T *ps = reinterpret_cast<T *>(smem + 4 * L::tileBytes + 2 * L::sBytes);
  T *dss = reinterpret_cast<T *>(smem + 4 * L::tileBytes + 2 * L::sBytes +
                                 L::pBytes);
  float *rowLse = reinterpret_cast<float *>(smem + 4 * L::tileBytes +
                                            2 * L::sBytes + 2 * L::pBytes);
  float *rowD = rowLse + kTile;
  const T *q = static_cast<const T *>(a.q), *k = static_cast<const T *>(a.k),
          *v = static_cast<const T *>(a.v), *o = static_cast<const T *>(a.out),
          *dout = static_cast<const T *>(a.dout);
  int64_t b = blockIdx.z, g = blockIdx.y, k0 = int64_t(blockIdx.x) * kTile;
  int64_t d = a.headDim;
  int depth = roundUp16(d);
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  int r = 16 * w + lane / 2, c0 = (lane % 2) * (kTile / 2);
  int64_t j = k0 + r;
  loadTileMma<T, DMAX>(ks, k, b, a.seq, a.kvWidth(), g, d, k0);
  loadTileMma<T, DMAX>(vs, v, b, a.seq, a.kvWidth(), g, d, k0);
  AccFragment dkAcc[DMAX / 16], dvAcc[DMAX / 16];
#pragma unroll
  for (int n = 0; n < DMAX / 16; ++n) {
    nvcuda::wmma::fill_fragment(dkAcc[n], 0.0f);
    nvcuda::wmma::fill_fragment(dvAcc[n], 0.0f);
  }
  int64_t qEnd = a.lastQuery(min(k0 + kTile, a.seq) - 1);
  for (int64_t h = g * a.group(); h < (g + 1) * a.group(); ++h)
    for (int64_t q0 = k0; q0 <= qEnd; q0 += kTile) {
      __syncthreads();
      loadTileMma<T, DMAX>(qs, q, b, a.seq, a.qWidth(), h, d, q0);
      loadTileMma<T, DMAX>(dos, dout, b, a.seq, a.qWidth(), h, d, q0);
      __syncthreads();
      {
        // Two threads a query row: its L and D = dO . O.
        int qr = threadIdx.x / 2, part = threadIdx.x % 2;
        int64_t qi = q0 + qr;
        float dot = 0.0f;
        if (qi < a.seq)
          for (int64_t c = part * (d / 2); c < (part ? d : d / 2); ++c)
            dot += toFloat(dos[qr * L::ldT + c]) *
                   toFloat(o[(b * a.seq + qi) * a.qWidth() + h * d + c]);
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        if (part == 0) {
          rowD[qr] = dot;
          rowLse[qr] = qi < a.seq ? lse[(b * a.heads + h) * a.seq + qi] : 0.0f;
        }
      }
      __syncthreads();
      warpScores<T, DMAX>(ks, qs, ss, depth);
      warpScores<T, DMAX>(vs, dos, dps, depth);
      __syncwarp();
      for (int c = c0; c < c0 + kTile / 2; ++c) {
        float p = pairs(a, q0 + c, j)
                      ? expf(ss[r * ldS + c] * a.scale - rowLse[c])
                      : 0.0f;
        ps[r * ldP + c] = toDType<T>(p);
        dss[r * ldP + c] =
            toDType<T>(p * (dps[r * ldS + c] - rowD[c]) * a.scale);
      }
      __syncwarp();
      warpAccumulate<T, DMAX>(dvAcc, ps, dos);
      warpAccumulate<T, DMAX>(dkAcc, dss, qs);
    }
  warpStoreRows<T, DMAX>(dkAcc, ss, dk, b, a.seq, a.kvWidth(), g, d, k0);
  warpStoreRows<T, DMAX>(dvAcc, ss, dv, b, a.seq, a.kvWidth(), g, d, k0);
#else
  __trap();
#endif
}

template <typename T, int DMAX>
Status mmaForward(const char *op, const FlashArgs &args, void *out, float *lse,
                  cudaStream_t stream) {
  size_t bytes = MmaLayout<DMAX>::bytes(3, 1, 1, 0);
  ZEROC_RETURN_IF_ERROR(allowShared(op, flashForwardMma<T, DMAX>, bytes));
  dim3 grid(unsigned((args.seq + kTile - 1) / kTile), unsigned(args.heads),
            unsigned(args.batch));
  flashForwardMma<T, DMAX>
      <<<grid, kMmaThreads, bytes, stream>>>(args, static_cast<T *>(out), lse);
  return launchStatus(op);
}

template <typename T, int DMAX>
Status mmaBackward(const char *op, const FlashArgs &args, const float *lse,
                   const Tensor &dq, const Tensor &dk, const Tensor &dv,
                   cudaStream_t stream) {
  unsigned tiles = unsigned((args.seq + kTile - 1) / kTile);
  size_t qBytes = MmaLayout<DMAX>::bytes(4, 1, 2, 0);
  ZEROC_RETURN_IF_ERROR(allowShared(op, flashGradQueryMma<T, DMAX>, qBytes));
  flashGradQueryMma<T, DMAX>
      <<<dim3(tiles, unsigned(args.heads), unsigned(args.batch)), kMmaThreads,
         qBytes, stream>>>(args, lse, static_cast<T *>(dq.data));
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  size_t kvBytes = MmaLayout<DMAX>::bytes(4, 2, 2, 2);
  ZEROC_RETURN_IF_ERROR(
      allowShared(op, flashGradKeyValueMma<T, DMAX>, kvBytes));
  flashGradKeyValueMma<T, DMAX>
      <<<dim3(tiles, unsigned(args.kvHeads), unsigned(args.batch)), kMmaThreads,
         kvBytes, stream>>>(args, lse, static_cast<T *>(dk.data),
                            static_cast<T *>(dv.data));
  return launchStatus(op);
}

// The tensor-core kernels for 16-bit `t` and the head dim's instantiation.
Status mmaForwardFor(const char *op, DType t, const FlashArgs &args, void *out,
                     float *lse, cudaStream_t stream) {
  bool small = args.headDim <= 64;
  if (t == DType::BF16)
    return small ? mmaForward<__nv_bfloat16, 64>(op, args, out, lse, stream)
                 : mmaForward<__nv_bfloat16, 128>(op, args, out, lse, stream);
  return small ? mmaForward<__half, 64>(op, args, out, lse, stream)
               : mmaForward<__half, 128>(op, args, out, lse, stream);
}

Status mmaBackwardFor(const char *op, DType t, const FlashArgs &args,
                      const float *lse, const Tensor &dq, const Tensor &dk,
                      const Tensor &dv, cudaStream_t stream) {
  bool small = args.headDim <= 64;
  if (t == DType::BF16)
    return small ? mmaBackward<__nv_bfloat16, 64>(op, args, lse, dq, dk, dv,
                                                  stream)
                 : mmaBackward<__nv_bfloat16, 128>(op, args, lse, dq, dk, dv,
                                                   stream);
  return small ? mmaBackward<__half, 64>(op, args, lse, dq, dk, dv, stream)
               : mmaBackward<__half, 128>(op, args, lse, dq, dk, dv, stream);
}

//===----------------------------------------------------------------------===//
// Register kernels (the default where they apply: bf16 or f16, head_dim a
// multiple of 8 up to 64; ZEROC_CUDA_FLASH=wmma runs the WMMA kernels
// instead): FlashAttention-2's structure. The same 64-row
// tiles and 4 warps a block, warp w owning rows 16 w .. 16 w + 15, but the
// products are `mma.sync.m16n8k16` with their fragments loaded by
// `ldmatrix`, and everything between two products stays in registers: the
// score fragments (f32 accumulators) are masked, exponentiated and rounded
// to the operands' dtype in place, and become the next product's A
// fragments directly (an accumulator's 16 x 8 layout pairs into the A
// operand's 16 x 16 one). The forward is one pass with the online softmax
// (each row's running maximum and sum in the four lanes that hold it,
// combined with two shuffles), rescaling the output fragments per key
// tile. The backward's dq kernel and dk/dv kernel are those of the WMMA
// kernels (one writer per gradient, fixed order): the dk/dv warp computes
// S^T = K Q^T and dP^T = V dO^T for its key rows, so P^T and dS^T are
// already A fragments for dV += P^T dO and dK += dS^T Q. Not yet run on a
// GPU (docs/gpu-kernels.md).
//===----------------------------------------------------------------------===//

constexpr int kRegDim = 64;
constexpr int kRegLd = kRegDim + 8; // 144-byte rows: ldmatrix conflict-free

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix4(uint32_t (&r)[4], const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(sharedAddress(p)));
}

__device__ __forceinline__ void ldmatrix4Trans(uint32_t (&r)[4],
                                               const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(sharedAddress(p)));
}

// d += a b for one 16 x 8 x 16 piece (f32 accumulators).
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
}

// Two floats rounded to T, `lo` in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, 4);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, 4);
  }
  return r;
}

// The A fragments of the calling warp's 16 rows of a 16-bit tile (row
// stride kRegLd), for each 16-column step of its first kRegDim columns.
template <typename T>
__device__ __forceinline__ void loadRowFragments(uint32_t (&f)[kRegDim / 16][4],
                                                 const T *tile) {
  int w = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < kRegDim / 16; ++kk)
    ldmatrix4(f[kk],
              tile + (16 * w + lane % 16) * kRegLd + 16 * kk + (lane / 16) * 8);
}

// acc[n] (8 n-tiles of 8 columns: the 64 rows of `rowsB`) = A rowsB^T over
// the first kRegDim columns: A's fragments `a` (16 rows), B's rows read
// from the 16-bit tile `rowsB` (each row one column of the product).
template <typename T>
__device__ __forceinline__ void
scoresFromRows(float (&acc)[kTile / 8][4], const uint32_t (&a)[kRegDim / 16][4],
               const T *rowsB) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[n][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < kRegDim / 16; ++kk)
#pragma unroll
    for (int np = 0; np < kTile / 16; ++np) {
      uint32_t b[4];
      ldmatrix4(b, rowsB + (16 * np + lane % 8 + (lane / 16) * 8) * kRegLd +
                       16 * kk + ((lane / 8) % 2) * 8);
      mma16816<T>(acc[2 * np], a[kk], b[0], b[1]);
      mma16816<T>(acc[2 * np + 1], a[kk], b[2], b[3]);
    }
}

// out[n] (kRegDim / 8 n-tiles over the head's columns) += P X, P the
// calling warp's 16 x 64 score fragments (f32, rounded to T here), X the
// 64 x kRegDim 16-bit tile (row stride kRegLd).
template <typename T>
__device__ __forceinline__ void accumulateScores(float (&out)[kRegDim / 8][4],
                                                 const float (&p)[kTile / 8][4],
                                                 const T *x) {
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int kt = 0; kt < kTile / 16; ++kt) {
    uint32_t a[4] = {pack2<T>(p[2 * kt][0], p[2 * kt][1]),
                     pack2<T>(p[2 * kt][2], p[2 * kt][3]),
                     pack2<T>(p[2 * kt + 1][0], p[2 * kt + 1][1]),
                     pack2<T>(p[2 * kt + 1][2], p[2 * kt + 1][3])};
#pragma unroll
    for (int np = 0; np < kRegDim / 16; ++np) {
      uint32_t b[4];
      ldmatrix4Trans(b,
                     x + (16 * kt + lane % 8 + ((lane / 8) % 2) * 8) * kRegLd +
                         16 * np + (lane / 16) * 8);
      mma16816<T>(out[2 * np], a, b[0], b[1]);
      mma16816<T>(out[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// The calling warp's fragments `acc` (16 rows x kRegDim) times `scale[r]`
// (r 0: row g, 1: row g + 8) to device memory at rows row0 + 16 w + ..,
// columns < d.
template <typename T>
__device__ __forceinline__ void
storeFragments(const float (&acc)[kRegDim / 8][4], const float (&scale)[2],
               T *p, int64_t batch, int64_t seq, int64_t width, int64_t head,
               int64_t d, int64_t row0) {
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int64_t i = row0 + 16 * w + g + 8 * half;
    if (i >= seq)
      continue;
#pragma unroll
    for (int n = 0; n < kRegDim / 8; ++n) {
      int64_t c = 8 * n + 2 * t;
      if (c < d) {
        T *at = p + (batch * seq + i) * width + head * d + c;
        at[0] = toDType<T>(acc[n][2 * half] * scale[half]);
        at[1] = toDType<T>(acc[n][2 * half + 1] * scale[half]);
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kMmaThreads)
    flashForwardRegisters(FlashArgs a, T *out, float *lse) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ __align__(128) T qs[kTile * kRegLd], ks[kTile * kRegLd],
      vs[kTile * kRegLd];
  const T *q = static_cast<const T *>(a.q), *k = static_cast<const T *>(a.k),
          *v = static_cast<const T *>(a.v);
  int64_t tiles = (a.seq + kTile - 1) / kTile;
  int64_t b = blockIdx.z, h = blockIdx.y,
          q0 = (tiles - 1 - int64_t(blockIdx.x)) * kTile;
  int64_t d = a.headDim, g0 = h / a.group();
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  loadTileMma<T, kRegDim>(qs, q, b, a.seq, a.qWidth(), h, d, q0);
  __syncthreads();
  uint32_t qf[kRegDim / 16][4];
  loadRowFragments<T>(qf, qs);
  float o[kRegDim / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  int64_t qLast = min(q0 + kTile, a.seq) - 1;
  for (int64_t k0 = a.firstKey(q0) / kTile * kTile; k0 <= qLast; k0 += kTile) {
    __syncthreads();
    loadTileMma<T, kRegDim>(ks, k, b, a.seq, a.kvWidth(), g0, d, k0);
    loadTileMma<T, kRegDim>(vs, v, b, a.seq, a.kvWidth(), g0, d, k0);
    __syncthreads();
    float s[kTile / 8][4];
    scoresFromRows<T>(s, qf, ks);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int half = e / 2;
        int64_t i = q0 + 16 * w + g + 8 * half, j = k0 + 8 * n + 2 * t + e % 2;
        s[n][e] = pairs(a, i, j) ? s[n][e] * a.scale : -INFINITY;
        mx[half] = fmaxf(mx[half], s[n][e]);
      }
    float corr[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
      mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
      float mNew = fmaxf(m[half], mx[half]);
      corr[half] = mNew == -INFINITY ? 1.0f : expf(m[half] - mNew);
      m[half] = mNew;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int half = e / 2;
        float p = m[half] == -INFINITY ? 0.0f : expf(s[n][e] - m[half]);
        s[n][e] = p;
        sum[half] += p;
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 1);
      sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 2);
      l[half] = l[half] * corr[half] + sum[half];
    }
#pragma unroll
    for (int n = 0; n < kRegDim / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[n][e] *= corr[e / 2];
    accumulateScores<T>(o, s, vs);
  }
  if (out) {
    float inv[2] = {l[0] > 0 ? 1.0f / l[0] : 0.0f,
                    l[1] > 0 ? 1.0f / l[1] : 0.0f};
    storeFragments<T>(o, inv, out, b, a.seq, a.qWidth(), h, d, q0);
  }
  if (lse && t == 0)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      int64_t i = q0 + 16 * w + g + 8 * half;
      if (i < a.seq)
        lse[(b * a.heads + h) * a.seq + i] = m[half] + logf(l[half]);
    }
#else
  __trap();
#endif
}

// Per row of a 64-row query tile staged in `dos` (two threads a row): its
// saved log-sum-exp and D = dO . O, into rowLse and rowD.
template <typename T>
__device__ __forceinline__ void
queryRowTerms(const FlashArgs &a, const float *lse, const T *dos, int64_t b,
              int64_t h, int64_t q0, float *rowLse, float *rowD) {
  const T *o = static_cast<const T *>(a.out);
  int qr = threadIdx.x / 2, part = threadIdx.x % 2;
  int64_t qi = q0 + qr, d = a.headDim;
  float dot = 0.0f;
  if (qi < a.seq)
    for (int64_t c = part * (d / 2); c < (part ? d : d / 2); ++c)
      dot += toFloat(dos[qr * kRegLd + c]) *
             toFloat(o[(b * a.seq + qi) * a.qWidth() + h * d + c]);
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  if (part == 0) {
    rowD[qr] = dot;
    rowLse[qr] = qi < a.seq ? lse[(b * a.heads + h) * a.seq + qi] : 0.0f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kMmaThreads)
    flashGradQueryRegisters(FlashArgs a, const float *lse, T *dq) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ __align__(128) T qs[kTile * kRegLd], dos[kTile * kRegLd],
      ks[kTile * kRegLd], vs[kTile * kRegLd];
  __shared__ float rowLse[kTile], rowD[kTile];
  const T *q = static_cast<const T *>(a.q), *k = static_cast<const T *>(a.k),
          *v = static_cast<const T *>(a.v),
          *dout = static_cast<const T *>(a.dout);
  int64_t tiles = (a.seq + kTile - 1) / kTile;
  int64_t b = blockIdx.z, h = blockIdx.y,
          q0 = (tiles - 1 - int64_t(blockIdx.x)) * kTile;
  int64_t d = a.headDim, g0 = h / a.group();
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  loadTileMma<T, kRegDim>(qs, q, b, a.seq, a.qWidth(), h, d, q0);
  loadTileMma<T, kRegDim>(dos, dout, b, a.seq, a.qWidth(), h, d, q0);
  __syncthreads();
  queryRowTerms<T>(a, lse, dos, b, h, q0, rowLse, rowD);
  __syncthreads();
  uint32_t qf[kRegDim / 16][4], df[kRegDim / 16][4];
  loadRowFragments<T>(qf, qs);
  loadRowFragments<T>(df, dos);
  float L[2] = {rowLse[16 * w + g], rowLse[16 * w + g + 8]},
        D[2] = {rowD[16 * w + g], rowD[16 * w + g + 8]};
  float acc[kRegDim / 8][4] = {};
  int64_t qLast = min(q0 + kTile, a.seq) - 1;
  for (int64_t k0 = a.firstKey(q0) / kTile * kTile; k0 <= qLast; k0 += kTile) {
    __syncthreads();
    loadTileMma<T, kRegDim>(ks, k, b, a.seq, a.kvWidth(), g0, d, k0);
    loadTileMma<T, kRegDim>(vs, v, b, a.seq, a.kvWidth(), g0, d, k0);
    __syncthreads();
    float s[kTile / 8][4], dp[kTile / 8][4];
    scoresFromRows<T>(s, qf, ks);
    scoresFromRows<T>(dp, df, vs);
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int half = e / 2;
        int64_t i = q0 + 16 * w + g + 8 * half, j = k0 + 8 * n + 2 * t + e % 2;
        float p = pairs(a, i, j) ? expf(s[n][e] * a.scale - L[half]) : 0.0f;
        s[n][e] = p * (dp[n][e] - D[half]) * a.scale;
      }
    accumulateScores<T>(acc, s, ks);
  }
  const float one[2] = {1.0f, 1.0f};
  storeFragments<T>(acc, one, dq, b, a.seq, a.qWidth(), h, d, q0);
#else
  __trap();
#endif
}

template <typename T>
__global__ void __launch_bounds__(kMmaThreads)
    flashGradKeyValueRegisters(FlashArgs a, const float *lse, T *dk, T *dv) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ __align__(128) T ks[kTile * kRegLd], vs[kTile * kRegLd],
      qs[kTile * kRegLd], dos[kTile * kRegLd];
  __shared__ float rowLse[kTile], rowD[kTile];
  const T *q = static_cast<const T *>(a.q), *k = static_cast<const T *>(a.k),
          *v = static_cast<const T *>(a.v),
          *dout = static_cast<const T *>(a.dout);
  int64_t b = blockIdx.z, g0 = blockIdx.y, k0 = int64_t(blockIdx.x) * kTile;
  int64_t d = a.headDim;
  int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  loadTileMma<T, kRegDim>(ks, k, b, a.seq, a.kvWidth(), g0, d, k0);
  loadTileMma<T, kRegDim>(vs, v, b, a.seq, a.kvWidth(), g0, d, k0);
  __syncthreads();
  uint32_t kf[kRegDim / 16][4], vf[kRegDim / 16][4];
  loadRowFragments<T>(kf, ks);
  loadRowFragments<T>(vf, vs);
  float dkAcc[kRegDim / 8][4] = {}, dvAcc[kRegDim / 8][4] = {};
  int64_t qEnd = a.lastQuery(min(k0 + kTile, a.seq) - 1);
  for (int64_t h = g0 * a.group(); h < (g0 + 1) * a.group(); ++h)
    for (int64_t q0 = k0; q0 <= qEnd; q0 += kTile) {
      __syncthreads();
      loadTileMma<T, kRegDim>(qs, q, b, a.seq, a.qWidth(), h, d, q0);
      loadTileMma<T, kRegDim>(dos, dout, b, a.seq, a.qWidth(), h, d, q0);
      __syncthreads();
      queryRowTerms<T>(a, lse, dos, b, h, q0, rowLse, rowD);
      __syncthreads();
      // Rows: the warp's keys; columns: the tile's queries.
      float st[kTile / 8][4], dpt[kTile / 8][4], pt[kTile / 8][4];
      scoresFromRows<T>(st, kf, qs);
      scoresFromRows<T>(dpt, vf, dos);
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int col = 8 * n + 2 * t + e % 2;
          int64_t j = k0 + 16 * w + g + 8 * (e / 2), i = q0 + col;
          float p =
              pairs(a, i, j) ? expf(st[n][e] * a.scale - rowLse[col]) : 0.0f;
          pt[n][e] = p;
          st[n][e] = p * (dpt[n][e] - rowD[col]) * a.scale;
        }
      accumulateScores<T>(dvAcc, pt, dos);
      accumulateScores<T>(dkAcc, st, qs);
    }
  const float one[2] = {1.0f, 1.0f};
  storeFragments<T>(dkAcc, one, dk, b, a.seq, a.kvWidth(), g0, d, k0);
  storeFragments<T>(dvAcc, one, dv, b, a.seq, a.kvWidth(), g0, d, k0);
#else
  __trap();
#endif
}

template <typename T>
Status registersForward(const char *op, const FlashArgs &args, void *out,
                        float *lse, cudaStream_t stream) {
  dim3 grid(unsigned((args.seq + kTile - 1) / kTile), unsigned(args.heads),
            unsigned(args.batch));
  flashForwardRegisters<T>
      <<<grid, kMmaThreads, 0, stream>>>(args, static_cast<T *>(out), lse);
  return launchStatus(op);
}

template <typename T>
Status registersBackward(const char *op, const FlashArgs &args,
                         const float *lse, const Tensor &dq, const Tensor &dk,
                         const Tensor &dv, cudaStream_t stream) {
  unsigned tiles = unsigned((args.seq + kTile - 1) / kTile);
  flashGradQueryRegisters<T>
      <<<dim3(tiles, unsigned(args.heads), unsigned(args.batch)), kMmaThreads,
         0, stream>>>(args, lse, static_cast<T *>(dq.data));
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  flashGradKeyValueRegisters<T>
      <<<dim3(tiles, unsigned(args.kvHeads), unsigned(args.batch)), kMmaThreads,
         0, stream>>>(args, lse, static_cast<T *>(dk.data),
                      static_cast<T *>(dv.data));
  return launchStatus(op);
}

Status registersForwardFor(const char *op, DType t, const FlashArgs &args,
                           void *out, float *lse, cudaStream_t stream) {
  return t == DType::BF16
             ? registersForward<__nv_bfloat16>(op, args, out, lse, stream)
             : registersForward<__half>(op, args, out, lse, stream);
}

Status registersBackwardFor(const char *op, DType t, const FlashArgs &args,
                            const float *lse, const Tensor &dq,
                            const Tensor &dk, const Tensor &dv,
                            cudaStream_t stream) {
  return t == DType::BF16
             ? registersBackward<__nv_bfloat16>(op, args, lse, dq, dk, dv,
                                                stream)
             : registersBackward<__half>(op, args, lse, dq, dk, dv, stream);
}

// The operands' common 16-bit dtype (BF16 or F16), or F32 where they are
// not all one 16-bit dtype or not all 16-byte aligned: the tensor-core
// kernels read 8 elements at a time.
DType mmaDType(std::initializer_list<const Tensor *> operands) {
  DType t = operands.begin()[0]->dtype;
  if (t != DType::BF16 && t != DType::F16)
    return DType::F32;
  for (const Tensor *x : operands)
    if (x->dtype != t || reinterpret_cast<uintptr_t>(x->data) % 16 != 0)
      return DType::F32;
  return t;
}

Status flashKernelFor(const char *op, const cpu::AttentionShape &a,
                      std::initializer_list<const Tensor *> operands,
                      FlashKernel &kind) {
  // The device's compute capability, asked of the driver once per device
  // rather than on every attention op (0 where it cannot say).
  static std::array<std::atomic<int>, 64> majors{};
  int device = 0, major = 0;
  if (cudaGetDevice(&device) == cudaSuccess) {
    if (device >= 0 && device < int(majors.size()))
      major = majors[size_t(device)].load(std::memory_order_relaxed);
    if (major <= 0 &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               device) == cudaSuccess &&
        device >= 0 && device < int(majors.size()))
      majors[size_t(device)].store(major, std::memory_order_relaxed);
  }
  return chooseFlashKernel(op, flashKernelChoice(), a.headDim, a.heads,
                           a.kvHeads, a.batch, mmaDType(operands) != DType::F32,
                           major, kind);
}

Status checkHeadDim(const char *op, const cpu::AttentionShape &a) {
  if (a.headDim > kMaxHeadDim)
    return {std::string(op) + ": the CUDA flash kernel takes head_dim up to " +
            std::to_string(kMaxHeadDim) + ", found " +
            std::to_string(a.headDim)};
  return {};
}

FlashArgs flashArgs(const cpu::AttentionShape &a, const Tensor &q,
                    const Tensor &k, const Tensor &v, const Tensor *out,
                    const Tensor *dout) {
  return {q.data,
          k.data,
          v.data,
          out ? out->data : nullptr,
          dout ? dout->data : nullptr,
          q.dtype,
          k.dtype,
          v.dtype,
          out ? out->dtype : DType::F32,
          dout ? dout->dtype : DType::F32,
          a.batch,
          a.seq,
          a.heads,
          a.kvHeads,
          a.headDim,
          a.window,
          a.scale()};
}

unsigned warpGrid(int64_t rows) { return gridFor(rows * 32); }

} // namespace

Status flashAttentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                             int64_t numHeads, int64_t numKvHeads,
                             int64_t window, const Tensor &out,
                             const Tensor *lse, KernelContext &,
                             cudaStream_t stream) {
  const char *op = "causal_attention";
  cpu::AttentionShape a;
  ZEROC_RETURN_IF_ERROR(cpu::checkFlashAttentionForward(
      q, k, v, numHeads, numKvHeads, out, lse, a));
  ZEROC_RETURN_IF_ERROR(cpu::checkAttentionWindow(op, window, a));
  ZEROC_RETURN_IF_ERROR(checkHeadDim(op, a));
  int64_t rows = a.batch * a.heads * a.seq;
  if (rows == 0)
    return {};
  FlashArgs args = flashArgs(a, q, k, v, nullptr, nullptr);
  float *l = lse ? static_cast<float *>(lse->data) : nullptr;
  FlashKernel kind;
  ZEROC_RETURN_IF_ERROR(flashKernelFor(op, a, {&q, &k, &v, &out}, kind));
  if (kind == FlashKernel::Registers)
    return registersForwardFor(op, q.dtype, args, out.data, l, stream);
  if (kind == FlashKernel::TensorCores)
    return mmaForwardFor(op, q.dtype, args, out.data, l, stream);
  if (kind == FlashKernel::Tiled)
    return a.headDim <= 64
               ? tiledForward<64>(op, args, out.data, out.dtype, l, stream)
               : tiledForward<128>(op, args, out.data, out.dtype, l, stream);
  flashForwardKernel<<<warpGrid(rows), kThreads, 0, stream>>>(args, out.data,
                                                              out.dtype, l);
  return launchStatus(op);
}

Status flashAttentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                              const Tensor &out, const Tensor &dout,
                              int64_t numHeads, int64_t numKvHeads,
                              int64_t window, const Tensor *lse,
                              const Tensor &dq, const Tensor &dk,
                              const Tensor &dv, KernelContext &,
                              cudaStream_t stream) {
  const char *op = "causal_attention_backward";
  cpu::AttentionShape a;
  ZEROC_RETURN_IF_ERROR(cpu::checkFlashAttentionBackward(
      q, k, v, out, dout, numHeads, numKvHeads, lse, dq, dk, dv, a));
  ZEROC_RETURN_IF_ERROR(cpu::checkAttentionWindow(op, window, a));
  ZEROC_RETURN_IF_ERROR(checkHeadDim(op, a));
  int64_t rows = a.batch * a.heads * a.seq;
  if (rows == 0)
    return {};
  FlashArgs args = flashArgs(a, q, k, v, &out, &dout);
  FlashKernel kind;
  ZEROC_RETURN_IF_ERROR(
      flashKernelFor(op, a, {&q, &k, &v, &out, &dout, &dq, &dk, &dv}, kind));
  // Without the saved log-sum-exp (nothing kept), recompute it first, with
  // the forward's own kernel (the same values it saved).
  Scratch lseScratch;
  const float *l = lse ? static_cast<const float *>(lse->data) : nullptr;
  if (!l) {
    ZEROC_RETURN_IF_ERROR(
        lseScratch.allocate(op, size_t(rows) * sizeof(float), stream));
    FlashKernel forwardKind;
    ZEROC_RETURN_IF_ERROR(
        flashKernelFor(op, a, {&q, &k, &v, &out}, forwardKind));
    if (forwardKind == FlashKernel::Registers) {
      ZEROC_RETURN_IF_ERROR(registersForwardFor(
          op, q.dtype, args, nullptr, lseScratch.get<float>(), stream));
    } else if (forwardKind == FlashKernel::TensorCores) {
      ZEROC_RETURN_IF_ERROR(mmaForwardFor(op, q.dtype, args, nullptr,
                                          lseScratch.get<float>(), stream));
    } else if (forwardKind == FlashKernel::Tiled) {
      ZEROC_RETURN_IF_ERROR(
          a.headDim <= 64 ? tiledForward<64>(op, args, nullptr, DType::F32,
                                             lseScratch.get<float>(), stream)
                          : tiledForward<128>(op, args, nullptr, DType::F32,
                                              lseScratch.get<float>(), stream));
    } else {
      flashForwardKernel<<<warpGrid(rows), kThreads, 0, stream>>>(
          args, nullptr, DType::F32, lseScratch.get<float>());
      ZEROC_RETURN_IF_ERROR(launchStatus(op));
    }
    l = lseScratch.get<float>();
  }
  if (kind == FlashKernel::Registers)
    return registersBackwardFor(op, q.dtype, args, l, dq, dk, dv, stream);
  if (kind == FlashKernel::TensorCores)
    return mmaBackwardFor(op, q.dtype, args, l, dq, dk, dv, stream);
  if (kind == FlashKernel::Tiled)
    return a.headDim <= 64
               ? tiledBackward<64>(op, args, l, dq, dk, dv, stream)
               : tiledBackward<128>(op, args, l, dq, dk, dv, stream);
  flashGradQueryKernel<<<warpGrid(rows), kThreads, 0, stream>>>(
      args, l, dq.data, dq.dtype);
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  flashGradKeyValueKernel<<<warpGrid(a.batch * a.kvHeads * a.seq), kThreads, 0,
                            stream>>>(args, l, dk.data, dk.dtype, dv.data,
                                      dv.dtype);
  return launchStatus(op);
}

std::string &flashKernelChoice() {
  static std::string choice = [] {
    const char *e = std::getenv("ZEROC_CUDA_FLASH");
    return std::string(e ? e : "");
  }();
  return choice;
}

Status chooseFlashKernel(const char *op, std::string_view choice,
                         int64_t headDim, int64_t heads, int64_t kvHeads,
                         int64_t batch, bool sixteenBitAligned,
                         int computeMajor, FlashKernel &kind) {
  if (!choice.empty() && choice != "auto" && choice != "registers" &&
      choice != "wmma" && choice != "tiled" && choice != "rows")
    return {std::string(op) +
            ": ZEROC_CUDA_FLASH: expected auto, registers, wmma, tiled "
            "or rows, found '" +
            std::string(choice) + "'"};
  bool tiles = headDim <= kMaxTiledHeadDim && heads <= 65535 &&
               kvHeads <= 65535 && batch <= 65535;
  if (choice == "rows" || !tiles)
    kind = FlashKernel::Rows;
  else if (choice == "tiled" || !sixteenBitAligned || headDim % 8 != 0 ||
           computeMajor < 8)
    kind = FlashKernel::Tiled;
  else if (choice != "wmma" && headDim <= kRegDim)
    kind = FlashKernel::Registers;
  else
    kind = FlashKernel::TensorCores;
  return {};
}

} // namespace zeroc::cuda
