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

#include <cstdlib>
#include <string>

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

// The tiled kernels take head_dim <= 128 and grids of at most 65535 heads
// and batch rows; ZEROC_CUDA_FLASH=rows forces the warp-per-row kernels
// (for comparison).
bool useTiled(const cpu::AttentionShape &a) {
  static const bool forcedRows = [] {
    const char *e = std::getenv("ZEROC_CUDA_FLASH");
    return e && std::string(e) == "rows";
  }();
  return !forcedRows && a.headDim <= kMaxTiledHeadDim && a.heads <= 65535 &&
         a.kvHeads <= 65535 && a.batch <= 65535;
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
  if (useTiled(a))
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
  // Without the saved log-sum-exp (nothing kept), recompute it first.
  Scratch lseScratch;
  const float *l = lse ? static_cast<const float *>(lse->data) : nullptr;
  if (!l) {
    ZEROC_RETURN_IF_ERROR(
        lseScratch.allocate(op, size_t(rows) * sizeof(float), stream));
    if (useTiled(a)) {
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
  if (useTiled(a))
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

} // namespace zeroc::cuda
