//===- Attention.cpp - Causal grouped-query self-attention ----------------===//

#include "cpu/Attention.h"

#include "cpu/Gemm.h"

#include <algorithm>
#include <cmath>

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
// to `dtype`, the dtype it is stored in. `qh` and `kh` point at the head's
// first column; rows are `qld` and `kld` apart.
void causalProbs(const AttentionShape &a, const float *qh, int64_t qld,
                 const float *kh, int64_t kld, DType dtype, float *p) {
  int64_t seq = a.seq;
  gemm(false, true, seq, seq, a.headDim, a.scale(), qh, qld, kh, kld, 0.0f, p,
       seq);
  for (int64_t i = 0; i < seq; ++i) {
    float *row = p + i * seq;
    float max = *std::max_element(row, row + i + 1);
    float sum = 0.0f;
    for (int64_t j = 0; j <= i; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    for (int64_t j = 0; j <= i; ++j)
      row[j] = roundToDType(row[j] / sum, dtype);
    std::fill(row + i + 1, row + seq, 0.0f);
  }
}

} // namespace

float AttentionShape::scale() const { return 1.0f / std::sqrt(float(headDim)); }

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
                        int64_t numHeads, int64_t numKvHeads, const Tensor &out,
                        const Tensor *probs) {
  AttentionShape a;
  ZEROC_RETURN_IF_ERROR(
      checkAttentionForward(q, k, v, numHeads, numKvHeads, out, probs, a));
  ScratchVector<float> qScratch, kScratch, vScratch, outScratch;
  const float *qf = readF32(q, qScratch);
  const float *kf = readF32(k, kScratch);
  const float *vf = readF32(v, vScratch);
  float *of = writeF32(out, outScratch);
  int64_t seq = a.seq, d = a.headDim, qw = a.qWidth(), kw = a.kvWidth();
  ScratchVector<float> p(seq * seq);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      int64_t g = h / a.group();
      const float *qh = qf + b * seq * qw + h * d;
      const float *kh = kf + b * seq * kw + g * d;
      const float *vh = vf + b * seq * kw + g * d;
      causalProbs(a, qh, qw, kh, kw, out.dtype, p.data());
      gemm(false, false, seq, d, seq, 1.0f, p.data(), seq, vh, kw, 0.0f,
           of + b * seq * qw + h * d, qw);
      if (probs)
        storeF32(*probs, (b * a.heads + h) * seq * seq, seq * seq, p.data());
    }
  commitF32(out, outScratch);
  return {};
}

Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &out, const Tensor &dout,
                         int64_t numHeads, int64_t numKvHeads,
                         const Tensor *probs, const Tensor &dq,
                         const Tensor &dk, const Tensor &dv) {
  AttentionShape a;
  ZEROC_RETURN_IF_ERROR(checkAttentionBackward(
      q, k, v, out, dout, numHeads, numKvHeads, probs, dq, dk, dv, a));
  ScratchVector<float> qScratch, kScratch, vScratch, oScratch, doScratch;
  ScratchVector<float> dqScratch, dkScratch, dvScratch;
  const float *qf = readF32(q, qScratch);
  const float *kf = readF32(k, kScratch);
  const float *vf = readF32(v, vScratch);
  const float *of = readF32(out, oScratch);
  const float *dof = readF32(dout, doScratch);
  float *dqf = writeF32(dq, dqScratch);
  float *dkf = writeF32(dk, dkScratch);
  float *dvf = writeF32(dv, dvScratch);
  // dk and dv accumulate over the query heads of a group.
  std::fill(dkf, dkf + dk.numel(), 0.0f);
  std::fill(dvf, dvf + dv.numel(), 0.0f);

  int64_t seq = a.seq, d = a.headDim, qw = a.qWidth(), kw = a.kvWidth();
  float scale = a.scale();
  ScratchVector<float> p(seq * seq), dp(seq * seq);
  ScratchVector<float> rowDot(seq);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h) {
      int64_t g = h / a.group();
      int64_t qOffset = b * seq * qw + h * d, kOffset = b * seq * kw + g * d;
      const float *qh = qf + qOffset, *kh = kf + kOffset, *vh = vf + kOffset;
      const float *oh = of + qOffset, *doh = dof + qOffset;
      if (probs)
        loadF32(*probs, (b * a.heads + h) * seq * seq, seq * seq, p.data());
      else
        causalProbs(a, qh, qw, kh, kw, out.dtype, p.data());

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
      // dS = P * (dP - D) * scale, in place of dP; zero above the diagonal.
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
  commitF32(dq, dqScratch);
  commitF32(dk, dkScratch);
  commitF32(dv, dvScratch);
  return {};
}

} // namespace zeroc::cpu
