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
  flashForwardKernel<<<warpGrid(rows), kThreads, 0, stream>>>(
      flashArgs(a, q, k, v, nullptr, nullptr), out.data, out.dtype,
      lse ? static_cast<float *>(lse->data) : nullptr);
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
    flashForwardKernel<<<warpGrid(rows), kThreads, 0, stream>>>(
        args, nullptr, DType::F32, lseScratch.get<float>());
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
    l = lseScratch.get<float>();
  }
  flashGradQueryKernel<<<warpGrid(rows), kThreads, 0, stream>>>(
      args, l, dq.data, dq.dtype);
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  flashGradKeyValueKernel<<<warpGrid(a.batch * a.kvHeads * a.seq), kThreads, 0,
                            stream>>>(args, l, dk.data, dk.dtype, dv.data,
                                      dv.dtype);
  return launchStatus(op);
}

} // namespace zeroc::cuda
