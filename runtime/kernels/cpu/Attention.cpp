//===- Attention.cpp - Causal grouped-query self-attention ----------------===//

#include "cpu/Attention.h"

#include "cpu/Gemm.h"
#include "cpu/Parallel.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace zeroc::cpu {

namespace {

Status checkAttention(const char *op, const Tensor &q, const Tensor &k,
                      const Tensor &v, int64_t heads, int64_t kvHeads,
                      std::initializer_list<NamedTensor> likeQ,
                      std::initializer_list<NamedTensor> likeK,
                      const Tensor *probs, AttentionShape &shape) {
  ZEROC_RETURN_IF_ERROR(
      firstError({checkFloat(op, "q", q), checkRank(op, "q", q, 3),
                  checkFloat(op, "k", k), checkFloat(op, "v", v)}));
  std::string name(op);
  if (heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0 ||
      q.dim(2) % heads != 0)
    return {name + ": num_heads " + std::to_string(heads) +
            " must be a positive multiple of num_kv_heads " +
            std::to_string(kvHeads) + " and divide the last dimension of q " +
            describe(q)};
  shape = {q.dim(0), q.dim(1), heads, kvHeads, q.dim(2) / heads};
  std::vector<int64_t> kvShape = {shape.batch, shape.seq, shape.kvWidth()};
  if (k.shape != kvShape || v.shape != kvShape)
    return {name + ": k " + describe(k) + " and v " + describe(v) +
            " must be [batch, seq, num_kv_heads * head_dim] = [" +
            std::to_string(shape.batch) + ", " + std::to_string(shape.seq) +
            ", " + std::to_string(shape.kvWidth()) + "]"};
  for (auto [n, t] : likeQ)
    ZEROC_RETURN_IF_ERROR(
        firstError({checkFloat(op, n, *t), checkSameShape(op, n, *t, "q", q)}));
  for (auto [n, t] : likeK)
    ZEROC_RETURN_IF_ERROR(
        firstError({checkFloat(op, n, *t), checkSameShape(op, n, *t, "k", k)}));
  if (probs) {
    ZEROC_RETURN_IF_ERROR(firstError({checkFloat(op, "probs", *probs)}));
    std::vector<int64_t> expected = {shape.batch, heads, shape.seq, shape.seq};
    if (probs->shape != expected)
      return {name + ": probs must be [batch, num_heads, seq, seq] = [" +
              std::to_string(shape.batch) + ", " + std::to_string(heads) +
              ", " + std::to_string(shape.seq) + ", " +
              std::to_string(shape.seq) + "], found " + describe(*probs)};
  }
  return firstError({checkGemmDims(
      op, {shape.seq, shape.headDim, shape.qWidth(), shape.kvWidth()})});
}

// P = causal softmax(scale * Q K^T) of one (batch, head), [seq, seq], rounded
// to `dtype`, the dtype it is stored in; 0 outside the keys each query sees
// (after it, or before its window). `qh` and `kh` point at the head's first
// column; rows are `qld` and `kld` apart.
void causalProbs(const AttentionShape &a, const float *qh, int64_t qld,
                 const float *kh, int64_t kld, DType dtype, float *p) {
  int64_t seq = a.seq;
  gemm(false, true, seq, seq, a.headDim, a.scale(), qh, qld, kh, kld, 0.0f, p,
       seq);
  parallelFor(seq, seq, [&](int64_t i) { // rows on the pool (cpu/Parallel.h)
    float *row = p + i * seq;
    int64_t first = a.firstKey(i);
    float max = *std::max_element(row + first, row + i + 1);
    float sum = 0.0f;
    for (int64_t j = first; j <= i; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    for (int64_t j = first; j <= i; ++j)
      row[j] = roundToDType(row[j] / sum, dtype);
    std::fill(row, row + first, 0.0f);
    std::fill(row + i + 1, row + seq, 0.0f);
  });
}

// A backward's operands as f32 (16-bit ones widened into scratch) and the
// f32 buffers of its gradients, dk and dv zeroed: they accumulate over the
// query heads of a group. commit() rounds the gradients into their tensors.
struct BackwardBuffers {
  ScratchVector<float> scratch[8];
  const float *q, *k, *v, *out, *dout;
  float *dq, *dk, *dv;

  BackwardBuffers(const Tensor &qT, const Tensor &kT, const Tensor &vT,
                  const Tensor &outT, const Tensor &doutT, const Tensor &dqT,
                  const Tensor &dkT, const Tensor &dvT)
      : q(readF32(qT, scratch[0])), k(readF32(kT, scratch[1])),
        v(readF32(vT, scratch[2])), out(readF32(outT, scratch[3])),
        dout(readF32(doutT, scratch[4])), dq(writeF32(dqT, scratch[5])),
        dk(writeF32(dkT, scratch[6])), dv(writeF32(dvT, scratch[7])) {
    std::fill(dk, dk + dkT.numel(), 0.0f);
    std::fill(dv, dv + dvT.numel(), 0.0f);
  }
  BackwardBuffers(const BackwardBuffers &) = delete;
  BackwardBuffers &operator=(const BackwardBuffers &) = delete;

  void commit(const Tensor &dqT, const Tensor &dkT, const Tensor &dvT) {
    commitF32(dqT, scratch[5]);
    commitF32(dkT, scratch[6]);
    commitF32(dvT, scratch[7]);
  }
};

Status checkLse(const char *op, const Tensor *lse, const AttentionShape &a) {
  if (!lse)
    return {};
  std::vector<int64_t> expected = {a.batch, a.heads, a.seq};
  if (lse->dtype != DType::F32 || lse->shape != expected)
    return {std::string(op) + ": lse must be f32 [batch, num_heads, seq] = [" +
            std::to_string(a.batch) + ", " + std::to_string(a.heads) + ", " +
            std::to_string(a.seq) + "], found " + describe(*lse)};
  return {};
}

// One tile of scaled scores, S = scale * Q[i0, i0 + rows) K[j0, j0 + cols)^T,
// [rows, cols], -inf where the key comes after the query or before its
// window.
void scoreTile(const AttentionShape &a, const float *qh, int64_t qld,
               const float *kh, int64_t kld, int64_t i0, int64_t rows,
               int64_t j0, int64_t cols, float *s) {
  gemm(false, true, rows, cols, a.headDim, a.scale(), qh + i0 * qld, qld,
       kh + j0 * kld, kld, 0.0f, s, cols);
  for (int64_t r = 0; r < rows; ++r) {
    float *row = s + r * cols;
    int64_t before = std::clamp<int64_t>(a.firstKey(i0 + r) - j0, 0, cols);
    std::fill(row, row + before, -INFINITY);
    for (int64_t c = std::max<int64_t>(i0 + r + 1 - j0, 0); c < cols; ++c)
      row[c] = -INFINITY;
  }
}

// Scratch of the flash kernels for one tile (no larger than the sequence).
struct FlashScratch {
  ScratchVector<float> scores, dscores, acc, max, sum;
  FlashScratch(const AttentionShape &a, bool backward)
      : scores(tile(a) * tile(a)), dscores(backward ? tile(a) * tile(a) : 0),
        acc(tile(a) * a.headDim), max(tile(a)), sum(tile(a)) {}
  static int64_t tile(const AttentionShape &a) {
    return std::min(kFlashTile, a.seq);
  }
};

// The online softmax over the keys of query rows [i0, i0 + rows) of one
// (batch, head): their log-sum-exp into `lse`, and with `o` (rows `qld`
// apart) their output.
void flashRows(const AttentionShape &a, const float *qh, int64_t qld,
               const float *kh, const float *vh, int64_t kld, int64_t i0,
               int64_t rows, FlashScratch &w, float *o, float *lse) {
  int64_t d = a.headDim, keys = i0 + rows;
  float *s = w.scores.data(), *acc = w.acc.data();
  float *m = w.max.data(), *l = w.sum.data();
  std::fill(m, m + rows, -INFINITY);
  std::fill(l, l + rows, 0.0f);
  std::fill(acc, acc + rows * d, 0.0f);
  // The tiles before the first one holding a key of query i0 are masked.
  int64_t first = a.firstKey(i0) / kFlashTile * kFlashTile;
  for (int64_t j0 = first; j0 < keys; j0 += kFlashTile) {
    int64_t cols = std::min(kFlashTile, keys - j0);
    scoreTile(a, qh, qld, kh, kld, i0, rows, j0, cols, s);
    for (int64_t r = 0; r < rows; ++r) {
      float *row = s + r * cols;
      float next = std::max(m[r], *std::max_element(row, row + cols));
      if (next == -INFINITY) {
        // No key of this row yet (its window starts in a later tile).
        std::fill(row, row + cols, 0.0f);
        continue;
      }
      float correction = std::exp(m[r] - next), sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c) {
        row[c] = std::exp(row[c] - next);
        sum += row[c];
      }
      l[r] = l[r] * correction + sum;
      m[r] = next;
      if (o)
        for (int64_t c = 0; c < d; ++c)
          acc[r * d + c] *= correction;
    }
    if (o)
      gemm(false, false, rows, d, cols, 1.0f, s, cols, vh + j0 * kld, kld, 1.0f,
           acc, d);
  }
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = m[r] + std::log(l[r]);
    if (o)
      for (int64_t c = 0; c < d; ++c)
        o[r * qld + c] = acc[r * d + c] / l[r];
  }
}

} // namespace

float AttentionShape::scale() const { return 1.0f / std::sqrt(float(headDim)); }

Status checkAttentionDocuments(const char *op, const Tensor *documents,
                               const AttentionShape &a) {
  return checkDocumentStarts(op, documents, a.batch, a.seq);
}

Status checkAttentionWindow(const char *op, int64_t window,
                            AttentionShape &shape) {
  if (window < 0)
    return {std::string(op) + ": window must be >= 0 (0: none), found " +
            std::to_string(window)};
  shape.window = window;
  return {};
}

Status checkAttentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                             int64_t numHeads, int64_t numKvHeads,
                             const Tensor &out, const Tensor *probs,
                             AttentionShape &shape) {
  return checkAttention("causal_attention", q, k, v, numHeads, numKvHeads,
                        {{"result", &out}}, {}, probs, shape);
}

Status checkAttentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                              const Tensor &out, const Tensor &dout,
                              int64_t numHeads, int64_t numKvHeads,
                              const Tensor *probs, const Tensor &dq,
                              const Tensor &dk, const Tensor &dv,
                              AttentionShape &shape) {
  return checkAttention("causal_attention_backward", q, k, v, numHeads,
                        numKvHeads,
                        {{"out", &out}, {"dout", &dout}, {"dq", &dq}},
                        {{"dk", &dk}, {"dv", &dv}}, probs, shape);
}

Status attentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                        int64_t numHeads, int64_t numKvHeads, int64_t window,
                        const Tensor &out, const Tensor *probs,
                        const Tensor *documents) {
  AttentionShape a;
  ZEROC_RETURN_IF_ERROR(
      checkAttentionForward(q, k, v, numHeads, numKvHeads, out, probs, a));
  ZEROC_RETURN_IF_ERROR(checkAttentionWindow("causal_attention", window, a));
  ZEROC_RETURN_IF_ERROR(
      checkAttentionDocuments("causal_attention", documents, a));
  ScratchVector<float> qScratch, kScratch, vScratch, outScratch;
  const float *qf = readF32(q, qScratch);
  const float *kf = readF32(k, kScratch);
  const float *vf = readF32(v, vScratch);
  float *of = writeF32(out, outScratch);
  int64_t seq = a.seq, d = a.headDim, qw = a.qWidth(), kw = a.kvWidth();
  // Each (batch, head) on the pool, computed as one thread would.
  parallelFor(a.batch * a.heads, 2 * seq * seq * d, [&](int64_t item) {
    int64_t b = item / a.heads, h = item % a.heads;
    AttentionShape s = a;
    s.docStart = documents ? documents->i32() + b * seq : nullptr;
    int64_t g = h / s.group();
    const float *qh = qf + b * seq * qw + h * d;
    const float *kh = kf + b * seq * kw + g * d;
    const float *vh = vf + b * seq * kw + g * d;
    ScratchVector<float> p(seq * seq);
    causalProbs(s, qh, qw, kh, kw, out.dtype, p.data());
    gemm(false, false, seq, d, seq, 1.0f, p.data(), seq, vh, kw, 0.0f,
         of + b * seq * qw + h * d, qw);
    if (probs)
      storeF32(*probs, (b * s.heads + h) * seq * seq, seq * seq, p.data());
  });
  commitF32(out, outScratch);
  return {};
}

Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &out, const Tensor &dout,
                         int64_t numHeads, int64_t numKvHeads, int64_t window,
                         const Tensor *probs, const Tensor &dq,
                         const Tensor &dk, const Tensor &dv,
                         const Tensor *documents) {
  AttentionShape a;
  ZEROC_RETURN_IF_ERROR(checkAttentionBackward(
      q, k, v, out, dout, numHeads, numKvHeads, probs, dq, dk, dv, a));
  ZEROC_RETURN_IF_ERROR(
      checkAttentionWindow("causal_attention_backward", window, a));
  ZEROC_RETURN_IF_ERROR(
      checkAttentionDocuments("causal_attention_backward", documents, a));
  BackwardBuffers f(q, k, v, out, dout, dq, dk, dv);
  const float *qf = f.q, *kf = f.k, *vf = f.v, *of = f.out, *dof = f.dout;
  float *dqf = f.dq, *dkf = f.dk, *dvf = f.dv;

  int64_t seq = a.seq, d = a.headDim, qw = a.qWidth(), kw = a.kvWidth();
  float scale = a.scale();
  // Each (batch, key-value head) on the pool: dk and dv sum over the query
  // heads of the group in head order, as one thread would.
  parallelFor(
      a.batch * a.kvHeads, 4 * a.group() * seq * seq * d, [&](int64_t item) {
        int64_t b = item / a.kvHeads, g = item % a.kvHeads;
        AttentionShape s = a;
        s.docStart = documents ? documents->i32() + b * seq : nullptr;
        ScratchVector<float> p(seq * seq), dp(seq * seq), rowDot(seq);
        for (int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
          int64_t qOffset = b * seq * qw + h * d,
                  kOffset = b * seq * kw + g * d;
          const float *qh = qf + qOffset, *kh = kf + kOffset,
                      *vh = vf + kOffset;
          const float *oh = of + qOffset, *doh = dof + qOffset;
          if (probs)
            loadF32(*probs, (b * s.heads + h) * seq * seq, seq * seq, p.data());
          else
            causalProbs(s, qh, qw, kh, kw, out.dtype, p.data());

          for (int64_t i = 0; i < seq; ++i) {
            float sum = 0.0f;
            for (int64_t c = 0; c < d; ++c)
              sum += doh[i * qw + c] * oh[i * qw + c];
            rowDot[i] = sum;
          }
          // dV += P^T dout; dP = dout V^T.
          gemm(true, false, seq, d, seq, 1.0f, p.data(), seq, doh, qw, 1.0f,
               dvf + kOffset, kw);
          gemm(false, true, seq, seq, d, 1.0f, doh, qw, vh, kw, 0.0f, dp.data(),
               seq);
          // dS = P * (dP - D) * scale, in place of dP; zero above the diagonal
          // (and before the window, where P is 0).
          for (int64_t i = 0; i < seq; ++i)
            for (int64_t j = 0; j < seq; ++j) {
              float &ds = dp[i * seq + j];
              ds = j <= i ? p[i * seq + j] * (ds - rowDot[i]) * scale : 0.0f;
            }
          // dQ = dS K; dK += dS^T Q.
          gemm(false, false, seq, d, seq, 1.0f, dp.data(), seq, kh, kw, 0.0f,
               dqf + qOffset, qw);
          gemm(true, false, seq, d, seq, 1.0f, dp.data(), seq, qh, qw, 1.0f,
               dkf + kOffset, kw);
        }
      });
  f.commit(dq, dk, dv);
  return {};
}

//===----------------------------------------------------------------------===//
// Flash attention
//===----------------------------------------------------------------------===//

Status checkFlashAttentionForward(const Tensor &q, const Tensor &k,
                                  const Tensor &v, int64_t numHeads,
                                  int64_t numKvHeads, const Tensor &out,
                                  const Tensor *lse, AttentionShape &shape) {
  ZEROC_RETURN_IF_ERROR(checkAttentionForward(q, k, v, numHeads, numKvHeads,
                                              out, nullptr, shape));
  return checkLse("causal_attention", lse, shape);
}

Status checkFlashAttentionBackward(const Tensor &q, const Tensor &k,
                                   const Tensor &v, const Tensor &out,
                                   const Tensor &dout, int64_t numHeads,
                                   int64_t numKvHeads, const Tensor *lse,
                                   const Tensor &dq, const Tensor &dk,
                                   const Tensor &dv, AttentionShape &shape) {
  ZEROC_RETURN_IF_ERROR(checkAttentionBackward(
      q, k, v, out, dout, numHeads, numKvHeads, nullptr, dq, dk, dv, shape));
  return checkLse("causal_attention_backward", lse, shape);
}

Status flashAttentionForward(const Tensor &q, const Tensor &k, const Tensor &v,
                             int64_t numHeads, int64_t numKvHeads,
                             int64_t window, const Tensor &out,
                             const Tensor *lse, const Tensor *documents) {
  AttentionShape a;
  ZEROC_RETURN_IF_ERROR(
      checkFlashAttentionForward(q, k, v, numHeads, numKvHeads, out, lse, a));
  ZEROC_RETURN_IF_ERROR(checkAttentionWindow("causal_attention", window, a));
  ZEROC_RETURN_IF_ERROR(
      checkAttentionDocuments("causal_attention", documents, a));
  ScratchVector<float> qScratch, kScratch, vScratch, outScratch;
  const float *qf = readF32(q, qScratch);
  const float *kf = readF32(k, kScratch);
  const float *vf = readF32(v, vScratch);
  float *of = writeF32(out, outScratch);
  int64_t seq = a.seq, d = a.headDim, qw = a.qWidth(), kw = a.kvWidth();
  // Each (batch, head, query tile) on the pool: its rows of the output and
  // of the log-sum-exp, computed as one thread would.
  int64_t tiles = (seq + kFlashTile - 1) / kFlashTile;
  parallelFor(
      a.batch * a.heads * tiles, 2 * kFlashTile * seq * d, [&](int64_t item) {
        int64_t b = item / (a.heads * tiles), h = item / tiles % a.heads;
        int64_t i0 = item % tiles * kFlashTile;
        AttentionShape s = a;
        s.docStart = documents ? documents->i32() + b * seq : nullptr;
        FlashScratch w(s, false);
        ScratchVector<float> rowLse(FlashScratch::tile(s));
        int64_t qOffset = b * seq * qw + h * d;
        int64_t kOffset = b * seq * kw + h / s.group() * d;
        int64_t rows = std::min(kFlashTile, seq - i0);
        flashRows(s, qf + qOffset, qw, kf + kOffset, vf + kOffset, kw, i0, rows,
                  w, of + qOffset + i0 * qw, rowLse.data());
        if (lse)
          storeF32(*lse, (b * s.heads + h) * seq + i0, rows, rowLse.data());
      });
  commitF32(out, outScratch);
  return {};
}

Status flashAttentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                              const Tensor &out, const Tensor &dout,
                              int64_t numHeads, int64_t numKvHeads,
                              int64_t window, const Tensor *lse,
                              const Tensor &dq, const Tensor &dk,
                              const Tensor &dv, const Tensor *documents) {
  AttentionShape a;
  ZEROC_RETURN_IF_ERROR(checkFlashAttentionBackward(
      q, k, v, out, dout, numHeads, numKvHeads, lse, dq, dk, dv, a));
  ZEROC_RETURN_IF_ERROR(
      checkAttentionWindow("causal_attention_backward", window, a));
  ZEROC_RETURN_IF_ERROR(
      checkAttentionDocuments("causal_attention_backward", documents, a));
  BackwardBuffers f(q, k, v, out, dout, dq, dk, dv);
  const float *qf = f.q, *kf = f.k, *vf = f.v, *of = f.out, *dof = f.dout;
  float *dqf = f.dq, *dkf = f.dk, *dvf = f.dv;
  // dq accumulates over key tiles, dk and dv over query tiles too.
  std::fill(dqf, dqf + dq.numel(), 0.0f);

  int64_t seq = a.seq, d = a.headDim, qw = a.qWidth(), kw = a.kvWidth();
  float scale = a.scale();
  // Each (batch, key-value head) on the pool: dk and dv sum over the query
  // heads of the group in head order, and every gradient over the tiles in
  // the order below, as one thread would.
  parallelFor(
      a.batch * a.kvHeads, 4 * a.group() * seq * seq * d, [&](int64_t item) {
        int64_t b = item / a.kvHeads, g = item % a.kvHeads;
        AttentionShape s = a;
        s.docStart = documents ? documents->i32() + b * seq : nullptr;
        FlashScratch w(s, true);
        ScratchVector<float> rowLse(seq), rowDot(seq);
        float *p = w.scores.data(), *ds = w.dscores.data();
        for (int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
          int64_t qOffset = b * seq * qw + h * d;
          int64_t kOffset = b * seq * kw + g * d;
          const float *qh = qf + qOffset, *kh = kf + kOffset,
                      *vh = vf + kOffset;
          const float *oh = of + qOffset, *doh = dof + qOffset;
          if (lse)
            loadF32(*lse, (b * s.heads + h) * seq, seq, rowLse.data());
          else
            for (int64_t i0 = 0; i0 < seq; i0 += kFlashTile)
              flashRows(s, qh, qw, kh, vh, kw, i0,
                        std::min(kFlashTile, seq - i0), w, nullptr,
                        rowLse.data() + i0);
          for (int64_t i = 0; i < seq; ++i) {
            float sum = 0.0f;
            for (int64_t c = 0; c < d; ++c)
              sum += doh[i * qw + c] * oh[i * qw + c];
            rowDot[i] = sum;
          }
          // Key tile j0 is seen by query tiles from j0 on (causal), up to the
          // last whose first query's window (or document) reaches into it: the
          // first key grows with the query.
          for (int64_t j0 = 0; j0 < seq; j0 += kFlashTile) {
            int64_t cols = std::min(kFlashTile, seq - j0);
            for (int64_t i0 = j0; i0 < seq && s.firstKey(i0) < j0 + cols;
                 i0 += kFlashTile) {
              int64_t rows = std::min(kFlashTile, seq - i0);
              // P = exp(S - L), 0 above the diagonal.
              scoreTile(s, qh, qw, kh, kw, i0, rows, j0, cols, p);
              for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                  p[r * cols + c] = std::exp(p[r * cols + c] - rowLse[i0 + r]);
              // dV += P^T dout; dP = dout V^T.
              gemm(true, false, cols, d, rows, 1.0f, p, cols, doh + i0 * qw, qw,
                   1.0f, dvf + kOffset + j0 * kw, kw);
              gemm(false, true, rows, cols, d, 1.0f, doh + i0 * qw, qw,
                   vh + j0 * kw, kw, 0.0f, ds, cols);
              // dS = P * (dP - D) * scale, in place of dP.
              for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                  float &x = ds[r * cols + c];
                  x = p[r * cols + c] * (x - rowDot[i0 + r]) * scale;
                }
              // dQ += dS K; dK += dS^T Q.
              gemm(false, false, rows, d, cols, 1.0f, ds, cols, kh + j0 * kw,
                   kw, 1.0f, dqf + qOffset + i0 * qw, qw);
              gemm(true, false, cols, d, rows, 1.0f, ds, cols, qh + i0 * qw, qw,
                   1.0f, dkf + kOffset + j0 * kw, kw);
            }
          }
        }
      });
  f.commit(dq, dk, dv);
  return {};
}

} // namespace zeroc::cpu
