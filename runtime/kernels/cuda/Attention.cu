//===- Attention.cu - Causal grouped-query attention on the GPU -----------===//

#include "cuda/Attention.h"

#include "cpu/Attention.h"
#include "cuda/Device.cuh"
#include "cuda/Gemm.h"

namespace zeroc::cuda {

namespace {

constexpr int64_t kScoreBudgetBytes = int64_t(256) << 20;

// P = causal softmax of each row of `scores` [rows, seq] (row R is query
// position R % seq) over the keys it sees (its window's, with `window` > 0),
// in place, rounded to `roundType`, zero elsewhere; also stored into `probs`
// (its own dtype) when given. Each entry is read and written by one thread.
__global__ void causalSoftmaxKernel(float *scores, int64_t rows, int64_t seq,
                                    int64_t window, DType roundType,
                                    void *probs, DType probsType) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t i = r % seq;
    int64_t first = window > 0 && i >= window ? i - window + 1 : 0;
    float *row = scores + r * seq;
    float max = -INFINITY;
    for (int64_t j = first + threadIdx.x; j <= i; j += blockDim.x)
      max = fmaxf(max, row[j]);
    max = blockMax(max);
    float sum = 0.0f;
    for (int64_t j = first + threadIdx.x; j <= i; j += blockDim.x)
      sum += expf(row[j] - max);
    sum = blockSum(sum);
    for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
      float p = j >= first && j <= i
                    ? roundToStorage(expf(row[j] - max) / sum, roundType)
                    : 0.0f;
      row[j] = p;
      if (probs)
        storeFromFloat(probs, probsType, r * seq + j, p);
    }
  }
}

// rowDot[(b * heads + h) * seq + i] = sum over the head's columns of
// dout * out at (b, i): one warp per row.
__global__ void rowDotKernel(const void *dout, DType doutType, const void *out,
                             DType outType, int64_t batch, int64_t seq,
                             int64_t heads, int64_t headDim, float *rowDot) {
  int64_t lane = threadIdx.x % 32;
  int64_t rows = batch * heads * seq, width = heads * headDim;
  for (int64_t r = globalThread() / 32; r < rows; r += globalThreads() / 32) {
    int64_t i = r % seq, h = r / seq % heads, b = r / (seq * heads);
    int64_t base = (b * seq + i) * width + h * headDim;
    float sum = 0.0f;
    for (int64_t c = lane; c < headDim; c += 32)
      sum += loadAsFloat(dout, doutType, base + c) *
             loadAsFloat(out, outType, base + c);
    sum = warpReduce(sum, SumOp{});
    if (lane == 0)
      rowDot[r] = sum;
  }
}

// dS = P * (dP - rowDot) * scale on and below the diagonal, 0 above, in
// place of dP [rows, seq] (P is 0 before a window, and so is dS).
__global__ void scoreGradKernel(const float *p, float *dp, const float *rowDot,
                                int64_t rows, int64_t seq, float scale) {
  for (int64_t e = globalThread(); e < rows * seq; e += globalThreads()) {
    int64_t r = e / seq, j = e % seq;
    dp[e] = j <= r % seq ? p[e] * (dp[e] - rowDot[r]) * scale : 0.0f;
  }
}

// How (batch entry b, query head h) sits in the three kinds of matrices:
// q-like [batch, seq, heads * d], kv-like [batch, seq, kv_heads * d] (h's kv
// head) and scores [chunk, heads, seq, seq] (relative to the chunk's first
// batch entry).
enum class Layout { Q, KV, Scores };

// The loops over the heads of one attention call.
struct Heads {
  const char *op;
  cpu::AttentionShape a;
  KernelContext &ctx;
  cudaStream_t stream;

  int64_t perBatch() const { return a.heads * a.seq * a.seq; }

  // Each product below is one strided-batched GEMM per batch entry b and
  // position r within a kv group, batched over the kv heads g: batch entry g
  // is query head h = g * group + r. These locate the entry g = 0 (head r)
  // and step from one g to the next.
  int64_t offset(Layout l, int64_t first, int64_t b, int64_t r) const {
    switch (l) {
    case Layout::Q:
      return b * a.seq * a.qWidth() + r * a.headDim;
    case Layout::KV:
      return b * a.seq * a.kvWidth();
    case Layout::Scores:
      return ((b - first) * a.heads + r) * a.seq * a.seq;
    }
    return 0;
  }
  int64_t ld(Layout l) const {
    return l == Layout::Q ? a.qWidth() : l == Layout::KV ? a.kvWidth() : a.seq;
  }
  int64_t stride(Layout l) const {
    return l == Layout::Q    ? a.group() * a.headDim
           : l == Layout::KV ? a.headDim
                             : a.group() * a.seq * a.seq;
  }
  int64_t columns(Layout l) const {
    return l == Layout::Scores ? a.seq : a.headDim;
  }

  // C = alpha op(A) op(B) + beta C for every (b, r) of batch entries
  // [first, first + count), r ascending: sums into kv-like C (beta 1) run in
  // head order, as on the CPU. Every product has seq rows.
  Status product(int64_t first, int64_t count, bool transA, bool transB,
                 float alpha, const float *x, Layout lx, const float *y,
                 Layout ly, float beta, float *c, Layout lc) const {
    int64_t k = transA ? a.seq : columns(lx);
    for (int64_t b = first; b < first + count; ++b)
      for (int64_t r = 0; r < a.group(); ++r)
        ZEROC_RETURN_IF_ERROR(gemmF32Batched(
            op, ctx, stream, transA, transB, a.seq, columns(lc), k, alpha,
            x + offset(lx, first, b, r), ld(lx), stride(lx),
            y + offset(ly, first, b, r), ld(ly), stride(ly), beta,
            c + offset(lc, first, b, r), ld(lc), stride(lc), a.kvHeads));
    return {};
  }

  // P for batch entries [first, first + count): S = scale Q K^T, then the
  // causal softmax, rounded to `roundType` (and saved into `probs`).
  Status probabilities(const float *q, const float *k, int64_t first,
                       int64_t count, float *scores, DType roundType,
                       const Tensor *probs) const {
    ZEROC_RETURN_IF_ERROR(product(first, count, false, true, a.scale(), q,
                                  Layout::Q, k, Layout::KV, 0.0f, scores,
                                  Layout::Scores));
    int64_t rows = count * a.heads * a.seq;
    int threads = int(std::min<int64_t>(256, (a.seq + 31) / 32 * 32));
    causalSoftmaxKernel<<<rowGrid(rows), threads, 0, stream>>>(
        scores, rows, a.seq, a.window, roundType,
        probs ? offsetData(*probs, first * perBatch()) : nullptr,
        probs ? probs->dtype : DType::F32);
    return launchStatus(op);
  }
};

int64_t batchChunk(const cpu::AttentionShape &a) {
  int64_t perBatchBytes = a.heads * a.seq * a.seq * 4;
  return std::clamp<int64_t>(
      kScoreBudgetBytes / std::max<int64_t>(perBatchBytes, 1), 1, a.batch);
}

} // namespace

Status attentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                        int64_t numHeads, int64_t numKvHeads, int64_t window,
                        const Tensor &out, const Tensor *probs,
                        KernelContext &ctx, cudaStream_t stream) {
  const char *op = "causal_attention";
  cpu::AttentionShape a;
  ZEROC_RETURN_IF_ERROR(
      cpu::checkAttentionForward(q, k, v, numHeads, numKvHeads, out, probs, a));
  ZEROC_RETURN_IF_ERROR(cpu::checkAttentionWindow(op, window, a));
  if (a.batch == 0 || a.seq == 0)
    return {};
  Heads heads{op, a, ctx, stream};
  Scratch qScratch, kScratch, vScratch, outScratch, scores;
  const float *qf, *kf, *vf;
  float *of;
  ZEROC_RETURN_IF_ERROR(f32View(op, q, qScratch, stream, qf));
  ZEROC_RETURN_IF_ERROR(f32View(op, k, kScratch, stream, kf));
  ZEROC_RETURN_IF_ERROR(f32View(op, v, vScratch, stream, vf));
  ZEROC_RETURN_IF_ERROR(f32Output(op, out, outScratch, stream, of));
  int64_t chunk = batchChunk(a);
  ZEROC_RETURN_IF_ERROR(
      scores.allocate(op, size_t(chunk * heads.perBatch()) * 4, stream));
  float *p = scores.get<float>();
  for (int64_t first = 0; first < a.batch; first += chunk) {
    int64_t count = std::min(chunk, a.batch - first);
    ZEROC_RETURN_IF_ERROR(
        heads.probabilities(qf, kf, first, count, p, out.dtype, probs));
    // out = P V.
    ZEROC_RETURN_IF_ERROR(heads.product(first, count, false, false, 1.0f, p,
                                        Layout::Scores, vf, Layout::KV, 0.0f,
                                        of, Layout::Q));
  }
  return commitOutput(op, of, out, stream);
}

Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &out, const Tensor &dout,
                         int64_t numHeads, int64_t numKvHeads, int64_t window,
                         const Tensor *probs, const Tensor &dq,
                         const Tensor &dk, const Tensor &dv, KernelContext &ctx,
                         cudaStream_t stream) {
  const char *op = "causal_attention_backward";
  cpu::AttentionShape a;
  ZEROC_RETURN_IF_ERROR(cpu::checkAttentionBackward(
      q, k, v, out, dout, numHeads, numKvHeads, probs, dq, dk, dv, a));
  ZEROC_RETURN_IF_ERROR(cpu::checkAttentionWindow(op, window, a));
  if (a.batch == 0 || a.seq == 0)
    return {};
  Heads heads{op, a, ctx, stream};
  Scratch qScratch, kScratch, vScratch, doScratch, dqScratch, dkScratch,
      dvScratch;
  const float *qf, *kf, *vf, *dof;
  float *dqf, *dkf, *dvf;
  ZEROC_RETURN_IF_ERROR(f32View(op, q, qScratch, stream, qf));
  ZEROC_RETURN_IF_ERROR(f32View(op, k, kScratch, stream, kf));
  ZEROC_RETURN_IF_ERROR(f32View(op, v, vScratch, stream, vf));
  ZEROC_RETURN_IF_ERROR(f32View(op, dout, doScratch, stream, dof));
  ZEROC_RETURN_IF_ERROR(f32Output(op, dq, dqScratch, stream, dqf));
  ZEROC_RETURN_IF_ERROR(f32Output(op, dk, dkScratch, stream, dkf));
  ZEROC_RETURN_IF_ERROR(f32Output(op, dv, dvScratch, stream, dvf));
  // dK and dV accumulate over the query heads of a group.
  size_t kvBytes = size_t(dk.numel()) * 4;
  ZEROC_RETURN_IF_ERROR(cudaStatus(op, "cudaMemsetAsync",
                                   cudaMemsetAsync(dkf, 0, kvBytes, stream)));
  ZEROC_RETURN_IF_ERROR(cudaStatus(op, "cudaMemsetAsync",
                                   cudaMemsetAsync(dvf, 0, kvBytes, stream)));

  int64_t seq = a.seq, d = a.headDim, rows = a.batch * a.heads * seq;
  Scratch rowDotScratch;
  ZEROC_RETURN_IF_ERROR(rowDotScratch.allocate(op, size_t(rows) * 4, stream));
  float *rowDot = rowDotScratch.get<float>();
  rowDotKernel<<<gridFor(rows * 32), kThreads, 0, stream>>>(
      dout.data, dout.dtype, out.data, out.dtype, a.batch, seq, a.heads, d,
      rowDot);
  ZEROC_RETURN_IF_ERROR(launchStatus(op));

  int64_t chunk = batchChunk(a);
  bool probsInPlace = probs && probs->dtype == DType::F32;
  Scratch pScratch, dpScratch;
  size_t chunkBytes = size_t(chunk * heads.perBatch()) * 4;
  if (!probsInPlace)
    ZEROC_RETURN_IF_ERROR(pScratch.allocate(op, chunkBytes, stream));
  ZEROC_RETURN_IF_ERROR(dpScratch.allocate(op, chunkBytes, stream));
  float *dp = dpScratch.get<float>();
  for (int64_t first = 0; first < a.batch; first += chunk) {
    int64_t count = std::min(chunk, a.batch - first);
    float *p = pScratch.get<float>();
    if (probsInPlace)
      p = probs->f32() + first * heads.perBatch();
    else if (probs) {
      ZEROC_RETURN_IF_ERROR(
          widenToF32(op, offsetData(*probs, first * heads.perBatch()),
                     probs->dtype, p, count * heads.perBatch(), stream));
    } else
      ZEROC_RETURN_IF_ERROR(
          heads.probabilities(qf, kf, first, count, p, out.dtype, nullptr));

    // dV += P^T dout; dP = dout V^T.
    ZEROC_RETURN_IF_ERROR(heads.product(first, count, true, false, 1.0f, p,
                                        Layout::Scores, dof, Layout::Q, 1.0f,
                                        dvf, Layout::KV));
    ZEROC_RETURN_IF_ERROR(heads.product(first, count, false, true, 1.0f, dof,
                                        Layout::Q, vf, Layout::KV, 0.0f, dp,
                                        Layout::Scores));
    // dS = P * (dP - D) * scale, in place of dP.
    int64_t chunkRows = count * a.heads * seq;
    scoreGradKernel<<<gridFor(chunkRows * seq), kThreads, 0, stream>>>(
        p, dp, rowDot + first * a.heads * seq, chunkRows, seq, a.scale());
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
    // dQ = dS K; dK += dS^T Q.
    ZEROC_RETURN_IF_ERROR(heads.product(first, count, false, false, 1.0f, dp,
                                        Layout::Scores, kf, Layout::KV, 0.0f,
                                        dqf, Layout::Q));
    ZEROC_RETURN_IF_ERROR(heads.product(first, count, true, false, 1.0f, dp,
                                        Layout::Scores, qf, Layout::Q, 1.0f,
                                        dkf, Layout::KV));
  }
  ZEROC_RETURN_IF_ERROR(commitOutput(op, dqf, dq, stream));
  ZEROC_RETURN_IF_ERROR(commitOutput(op, dkf, dk, stream));
  return commitOutput(op, dvf, dv, stream);
}

} // namespace zeroc::cuda
