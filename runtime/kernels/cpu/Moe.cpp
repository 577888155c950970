//===- Moe.cpp - Mixture-of-experts: router, dispatch, experts ------------===//

#include "cpu/Moe.h"

#include "cpu/Activations.h"
#include "cpu/Gemm.h"
#include "cpu/Linear.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace zeroc::cpu {

namespace {

std::string dimsText(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (int64_t d : dims)
    s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

// `t` has exactly the shape `dims`, named `symbolic` ("[T, k]") in the
// message.
std::string checkDims(const char *op, const char *name, const Tensor &t,
                      const char *symbolic,
                      std::initializer_list<int64_t> dims) {
  if (t.shape != std::vector<int64_t>(dims))
    return std::string(op) + ": " + name + " must be " + symbolic + " = " +
           dimsText(dims) + ", found " + describe(t);
  return "";
}

// `t` is [..., last] with the leading dimensions of `lead` (tokens).
std::string checkTokens(const char *op, const char *name, const Tensor &t,
                        const char *symbolic, const Tensor &lead,
                        int64_t last) {
  std::vector<int64_t> expected(lead.shape.begin(), lead.shape.end() - 1);
  expected.push_back(last);
  if (t.shape != expected)
    return std::string(op) + ": " + name + " must be " + symbolic + " = " +
           dimsText(expected) + ", found " + describe(t);
  return "";
}

// At least one dimension: [..., n].
std::string checkHasLast(const char *op, const char *name, const Tensor &t) {
  if (t.rank() < 1)
    return std::string(op) + ": " + name +
           " must have at least one dimension, found " + describe(t);
  return "";
}

std::string checkTopK(const char *op, int64_t k, int64_t numExperts) {
  if (k < 1 || k > numExperts)
    return std::string(op) + ": k = " + std::to_string(k) +
           " must be between 1 and the number of experts E = " +
           std::to_string(numExperts);
  return "";
}

// Row numbers and (token, slot) pair numbers are i32.
std::string checkRowCount(const char *op, int64_t rows) {
  if (rows > std::numeric_limits<int32_t>::max())
    return std::string(op) + ": " + std::to_string(rows) +
           " dispatched rows exceed what i32 row numbers hold";
  return "";
}

/// A kernel's temporary tensor of one dtype, in counted scratch memory.
struct ScratchTensor {
  ScratchVector<float> storage;
  Tensor view;
  ScratchTensor(std::vector<int64_t> shape, DType dtype) {
    view.dtype = dtype;
    view.shape = std::move(shape);
    storage.resize(size_t((view.bytes() + 3) / 4));
    view.data = storage.data();
  }
  // `view` points into `storage`: moves keep it valid, copies would not.
  ScratchTensor(ScratchTensor &&) = default;
  ScratchTensor(const ScratchTensor &) = delete;
  ScratchTensor &operator=(const ScratchTensor &) = delete;
  operator const Tensor &() const { return view; }
};

/// Rows [first, first + count) of a [rows, cols] tensor, as a view.
Tensor rowsOf(const Tensor &t, int64_t first, int64_t count) {
  Tensor v = t;
  v.shape[0] = count;
  int64_t cols = t.dim(0) > 0 ? t.numel() / t.dim(0) : 0;
  v.data =
      static_cast<char *>(t.data) + first * cols * bytesPerElement(t.dtype);
  return v;
}

/// Expert e's matrix of a stacked [E, a, b] parameter, as an [a, b] view.
Tensor expertOf(const Tensor &stacked, int64_t e) {
  Tensor v;
  v.dtype = stacked.dtype;
  v.shape = {stacked.dim(1), stacked.dim(2)};
  v.data = static_cast<char *>(stacked.data) +
           e * v.numel() * bytesPerElement(stacked.dtype);
  return v;
}

/// x's rows rowToken[first ..< first + count], copied into [count, h].
ScratchTensor gatherRows(const Tensor &x, const int32_t *rowToken,
                         int64_t first, int64_t count) {
  int64_t h = x.dim(-1), rowBytes = h * bytesPerElement(x.dtype);
  ScratchTensor g({count, h}, x.dtype);
  for (int64_t r = 0; r < count; ++r)
    std::memcpy(static_cast<char *>(g.view.data) + r * rowBytes,
                static_cast<const char *>(x.data) +
                    int64_t(rowToken[first + r]) * rowBytes,
                size_t(rowBytes));
  return g;
}

// p = softmax(l) over `n` entries, max subtracted, f32.
void softmaxRow(const float *l, int64_t n, float *p) {
  float m = l[0];
  for (int64_t e = 1; e < n; ++e)
    m = std::max(m, l[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < n; ++e) {
    p[e] = std::exp(l[e] - m);
    sum += p[e];
  }
  for (int64_t e = 0; e < n; ++e)
    p[e] /= sum;
}

//===----------------------------------------------------------------------===//
// Checks that read the data
//===----------------------------------------------------------------------===//

// Every index in [0, numExperts); with `distinct`, no repeat within a row.
Status checkIndices(const char *op, const Tensor &indices, int64_t numExperts,
                    bool distinct) {
  int64_t tokens = indices.rows(), k = indices.dim(-1);
  const int32_t *idx = indices.i32();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int32_t e = idx[t * k + j];
      std::string at = "indices[" + std::to_string(t) + ", " +
                       std::to_string(j) + "] = " + std::to_string(e);
      if (e < 0 || e >= numExperts)
        return {std::string(op) + ": " + at + " is out of range [0, " +
                std::to_string(numExperts) + ")"};
      for (int64_t l = 0; distinct && l < j; ++l)
        if (idx[t * k + l] == e)
          return {std::string(op) + ": " + at + " repeats slot " +
                  std::to_string(l) + " of its token"};
    }
  return {};
}

// offsets rise from 0 to `rows`; rowToken's entries are tokens of x.
Status checkRows(const char *op, const Tensor &offsets, const Tensor &rowToken,
                 int64_t tokens) {
  int64_t rows = rowToken.dim(0);
  ZEROC_RETURN_IF_ERROR(
      checkMoeOffsets(op, offsets.i32(), offsets.dim(0) - 1, rows));
  const int32_t *tok = rowToken.i32();
  for (int64_t r = 0; r < rows; ++r)
    if (tok[r] < 0 || tok[r] >= tokens)
      return {std::string(op) + ": rowToken[" + std::to_string(r) +
              "] = " + std::to_string(tok[r]) + " is out of range [0, " +
              std::to_string(tokens) + ")"};
  return {};
}

// (rowToken[r], rowSlot[r]) runs over every (token, slot) pair once.
Status checkRowMap(const char *op, const Tensor &rowToken,
                   const Tensor &rowSlot, int64_t tokens, int64_t k) {
  ScratchVector<char> seen(size_t(tokens * k), 0);
  const int32_t *tok = rowToken.i32(), *slot = rowSlot.i32();
  for (int64_t r = 0; r < tokens * k; ++r) {
    std::string at = "row " + std::to_string(r) + " = (token " +
                     std::to_string(tok[r]) + ", slot " +
                     std::to_string(slot[r]) + ")";
    if (tok[r] < 0 || tok[r] >= tokens || slot[r] < 0 || slot[r] >= k)
      return {std::string(op) + ": " + at + " is out of range [0, " +
              std::to_string(tokens) + ") x [0, " + std::to_string(k) + ")"};
    char &s = seen[size_t(tok[r] * k + slot[r])];
    if (s)
      return {std::string(op) + ": " + at +
              " appears twice: rowToken and rowSlot must be a permutation of "
              "the (token, slot) pairs"};
    s = 1;
  }
  return {};
}

// The shapes of the experts' forward and backward.
Status checkExperts(const char *op, const Tensor &x, const Tensor &w1,
                    const Tensor &w3, const Tensor &w2, const Tensor &offsets,
                    const Tensor &rowToken, const Tensor &h1, const Tensor &h3,
                    const char *outName, const Tensor &out) {
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkFloat(op, "x", x), checkFloat(op, "w1", w1),
       checkFloat(op, "w3", w3), checkFloat(op, "w2", w2),
       checkIds(op, "offsets", offsets), checkIds(op, "rowToken", rowToken),
       checkFloat(op, "h1", h1), checkFloat(op, "h3", h3),
       checkFloat(op, outName, out), checkHasLast(op, "x", x),
       checkRank(op, "w1", w1, 3), checkRank(op, "rowToken", rowToken, 1)}));
  int64_t h = x.dim(-1), experts = w1.dim(0), inter = w1.dim(1),
          rows = rowToken.dim(0);
  return firstError(
      {checkDims(op, "w1", w1, "[E, I, h]", {experts, inter, h}),
       checkDims(op, "w3", w3, "[E, I, h]", {experts, inter, h}),
       checkDims(op, "w2", w2, "[E, h, I]", {experts, h, inter}),
       checkDims(op, "offsets", offsets, "[E + 1]", {experts + 1}),
       checkDims(op, "h1", h1, "[N, I]", {rows, inter}),
       checkDims(op, "h3", h3, "[N, I]", {rows, inter}),
       checkDims(op, outName, out, "[N, h]", {rows, h}),
       checkRowCount(op, rows), checkGemmDims(op, {rows, h, inter})});
}

// The shapes of combine and its backward: `sorted` [T * k, h] against
// weights [T, k].
Status checkCombine(const char *op, const char *sortedName,
                    const Tensor &sorted, const Tensor &weights,
                    const Tensor &rowToken, const Tensor &rowSlot,
                    const char *denseName, const Tensor &dense) {
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkFloat(op, sortedName, sorted), checkFloat(op, "weights", weights),
       checkIds(op, "rowToken", rowToken), checkIds(op, "rowSlot", rowSlot),
       checkFloat(op, denseName, dense), checkHasLast(op, "weights", weights),
       checkRank(op, sortedName, sorted, 2)}));
  int64_t tokens = weights.rows(), k = weights.dim(-1), h = sorted.dim(1);
  return firstError(
      {checkRowCount(op, tokens * k),
       checkDims(op, sortedName, sorted, "[T * k, h]", {tokens * k, h}),
       checkDims(op, "rowToken", rowToken, "[T * k]", {tokens * k}),
       checkDims(op, "rowSlot", rowSlot, "[T * k]", {tokens * k}),
       checkTokens(op, denseName, dense, "[..., h]", weights, h)});
}

} // namespace

//===----------------------------------------------------------------------===//
// Shape checks
//===----------------------------------------------------------------------===//

Status checkMoeOffsets(const char *op, const int32_t *offsets,
                       int64_t numExperts, int64_t rows) {
  const int32_t *off = offsets;
  if (off[0] != 0 || off[numExperts] != rows)
    return {std::string(op) + ": offsets must run from 0 to the " +
            std::to_string(rows) +
            " rows, found offsets[0] = " + std::to_string(off[0]) +
            " and offsets[" + std::to_string(numExperts) +
            "] = " + std::to_string(off[numExperts])};
  for (int64_t e = 0; e < numExperts; ++e)
    if (off[e + 1] < off[e])
      return {std::string(op) + ": offsets must not decrease, found offsets[" +
              std::to_string(e + 1) + "] = " + std::to_string(off[e + 1]) +
              " after " + std::to_string(off[e])};
  return {};
}

Status checkMoeRouterForward(const Tensor &x, const Tensor &gate, int64_t k,
                             const Tensor &logits, const Tensor &weights,
                             const Tensor &indices) {
  const char *op = "moe_router";
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkFloat(op, "x", x), checkFloat(op, "gate", gate),
       checkFloat(op, "logits", logits), checkFloat(op, "weights", weights),
       checkIds(op, "indices", indices), checkHasLast(op, "x", x),
       checkRank(op, "gate", gate, 2)}));
  int64_t tokens = x.rows(), h = x.dim(-1), experts = gate.dim(0);
  return firstError({checkDims(op, "gate", gate, "[E, h]", {experts, h}),
                     checkTopK(op, k, experts),
                     checkTokens(op, "logits", logits, "[..., E]", x, experts),
                     checkTokens(op, "weights", weights, "[..., k]", x, k),
                     checkTokens(op, "indices", indices, "[..., k]", x, k),
                     checkGemmDims(op, {tokens, h, experts})});
}

Status checkMoeRouterBackward(const Tensor &dweights, const Tensor &logits,
                              const Tensor &indices, const Tensor &dlogits) {
  const char *op = "moe_router_backward";
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkFloat(op, "dweights", dweights), checkFloat(op, "logits", logits),
       checkIds(op, "indices", indices), checkFloat(op, "dlogits", dlogits),
       checkHasLast(op, "logits", logits),
       checkHasLast(op, "indices", indices)}));
  int64_t experts = logits.dim(-1), k = indices.dim(-1);
  return firstError(
      {checkTopK(op, k, experts),
       checkTokens(op, "indices", indices, "[..., k]", logits, k),
       checkTokens(op, "dweights", dweights, "[..., k]", logits, k),
       checkTokens(op, "dlogits", dlogits, "[..., E]", logits, experts)});
}

// [2, E] f32: the statistics of one router, or their gradient.
static std::string checkStats(const char *op, const char *name, const Tensor &t,
                              int64_t experts) {
  if (t.dtype != DType::F32)
    return std::string(op) + ": " + name + " must be f32, found " + describe(t);
  return checkDims(op, name, t, "[2, E]", {2, experts});
}

// A 0-d f32 loss.
static std::string checkLoss(const char *op, const char *name,
                             const Tensor &t) {
  if (t.dtype != DType::F32 || t.rank() != 0)
    return std::string(op) + ": " + name + " must be a 0-d f32 loss, found " +
           describe(t);
  return {};
}

Status checkMoeRouterStats(const Tensor &logits, const Tensor &indices,
                           const Tensor &stats) {
  const char *op = "moe_router_stats";
  ZEROC_RETURN_IF_ERROR(firstError({checkFloat(op, "logits", logits),
                                    checkIds(op, "indices", indices),
                                    checkHasLast(op, "logits", logits),
                                    checkHasLast(op, "indices", indices)}));
  int64_t experts = logits.dim(-1), k = indices.dim(-1);
  return firstError({checkTopK(op, k, experts),
                     checkTokens(op, "indices", indices, "[..., k]", logits, k),
                     checkStats(op, "stats", stats, experts)});
}

Status checkMoeRouterStatsBackward(const Tensor &dstats, const Tensor &logits,
                                   const Tensor &dlogits) {
  const char *op = "moe_router_stats_backward";
  ZEROC_RETURN_IF_ERROR(firstError({checkFloat(op, "logits", logits),
                                    checkFloat(op, "dlogits", dlogits),
                                    checkHasLast(op, "logits", logits)}));
  int64_t experts = logits.dim(-1);
  return firstError({checkStats(op, "dstats", dstats, experts),
                     checkSameShape(op, "dlogits", dlogits, "logits", logits)});
}

Status checkMoeLoadBalancing(bool backward, const Tensor &loss,
                             const std::vector<Tensor> &stats, int64_t k,
                             double coefficient, const Tensor &result) {
  const char *op =
      backward ? "moe_load_balancing_loss_backward" : "moe_load_balancing_loss";
  if (stats.empty())
    return {std::string(op) + ": needs the statistics of at least one router"};
  if (!std::isfinite(coefficient))
    return {std::string(op) + ": the coefficient must be finite, found " +
            std::to_string(coefficient)};
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkLoss(op, "loss", loss), checkRank(op, "stats", stats[0], 2)}));
  int64_t experts = stats[0].dim(1);
  for (const Tensor &t : stats)
    ZEROC_RETURN_IF_ERROR(firstError({checkStats(op, "stats", t, experts)}));
  return firstError({checkTopK(op, k, experts),
                     backward ? checkStats(op, "dstats", result, experts)
                              : checkLoss(op, "result", result)});
}

Status checkMoeDispatchPlan(const Tensor &indices, int64_t numExperts,
                            const Tensor &offsets, const Tensor &rowToken,
                            const Tensor &rowSlot) {
  const char *op = "moe_dispatch_plan";
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkIds(op, "indices", indices), checkIds(op, "offsets", offsets),
       checkIds(op, "rowToken", rowToken), checkIds(op, "rowSlot", rowSlot),
       checkHasLast(op, "indices", indices)}));
  int64_t tokens = indices.rows(), k = indices.dim(-1);
  return firstError(
      {checkTopK(op, k, numExperts), checkRowCount(op, tokens * k),
       checkDims(op, "offsets", offsets, "[E + 1]", {numExperts + 1}),
       checkDims(op, "rowToken", rowToken, "[T * k]", {tokens * k}),
       checkDims(op, "rowSlot", rowSlot, "[T * k]", {tokens * k})});
}

Status checkMoeExpertsForward(const Tensor &x, const Tensor &w1,
                              const Tensor &w3, const Tensor &w2,
                              const Tensor &offsets, const Tensor &rowToken,
                              const Tensor &h1, const Tensor &h3,
                              const Tensor &ysorted) {
  return checkExperts("moe_experts", x, w1, w3, w2, offsets, rowToken, h1, h3,
                      "ysorted", ysorted);
}

Status checkMoeCombineForward(const Tensor &ysorted, const Tensor &weights,
                              const Tensor &rowToken, const Tensor &rowSlot,
                              const Tensor &y) {
  return checkCombine("moe_combine", "ysorted", ysorted, weights, rowToken,
                      rowSlot, "y", y);
}

Status checkMoeCombineBackward(const Tensor &dy, const Tensor &ysorted,
                               const Tensor &weights, const Tensor &rowToken,
                               const Tensor &rowSlot, const Tensor &dysorted,
                               const Tensor &dweights) {
  const char *op = "moe_combine_backward";
  ZEROC_RETURN_IF_ERROR(checkCombine(op, "ysorted", ysorted, weights, rowToken,
                                     rowSlot, "dy", dy));
  return firstError(
      {checkFloat(op, "dysorted", dysorted),
       checkFloat(op, "dweights", dweights),
       checkSameShape(op, "dysorted", dysorted, "ysorted", ysorted),
       checkSameShape(op, "dweights", dweights, "weights", weights)});
}

Status checkMoeExpertsBackward(const Tensor &dysorted, const Tensor &x,
                               const Tensor &w1, const Tensor &w3,
                               const Tensor &w2, const Tensor &offsets,
                               const Tensor &rowToken, const Tensor &h1,
                               const Tensor &h3, const Tensor &dx,
                               const Tensor &dw1, const Tensor &dw3,
                               const Tensor &dw2) {
  const char *op = "moe_experts_backward";
  ZEROC_RETURN_IF_ERROR(checkExperts(op, x, w1, w3, w2, offsets, rowToken, h1,
                                     h3, "dysorted", dysorted));
  return firstError({checkFloat(op, "dx", dx), checkFloat(op, "dw1", dw1),
                     checkFloat(op, "dw3", dw3), checkFloat(op, "dw2", dw2),
                     checkSameShape(op, "dx", dx, "x", x),
                     checkSameShape(op, "dw1", dw1, "w1", w1),
                     checkSameShape(op, "dw3", dw3, "w3", w3),
                     checkSameShape(op, "dw2", dw2, "w2", w2)});
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

Status moeRouterForward(const Tensor &x, const Tensor &gate, int64_t k,
                        bool normalize, const Tensor &logits,
                        const Tensor &weights, const Tensor &indices) {
  ZEROC_RETURN_IF_ERROR(
      checkMoeRouterForward(x, gate, k, logits, weights, indices));
  ZEROC_RETURN_IF_ERROR(linearForward(x, gate, nullptr, logits));
  int64_t tokens = x.rows(), experts = gate.dim(0);
  ScratchVector<float> row(experts), p(experts), w(k);
  ScratchVector<char> taken(experts);
  int32_t *idx = indices.i32();
  for (int64_t t = 0; t < tokens; ++t) {
    // The logits as stored: a 16-bit `logits` rounds them as HF's gate does.
    loadF32(logits, t * experts, experts, row.data());
    softmaxRow(row.data(), experts, p.data());
    std::fill(taken.begin(), taken.end(), 0);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      // Strictly greater: among equal probabilities the lower index wins.
      int64_t best = -1;
      for (int64_t e = 0; e < experts; ++e)
        if (!taken[size_t(e)] && (best < 0 || p[size_t(e)] > p[size_t(best)]))
          best = e;
      taken[size_t(best)] = 1;
      idx[t * k + j] = int32_t(best);
      w[size_t(j)] = p[size_t(best)];
      sum += w[size_t(j)];
    }
    if (normalize)
      for (float &v : w)
        v /= sum;
    storeF32(weights, t * k, k, w.data());
  }
  return {};
}

Status moeRouterBackward(const Tensor &dweights, const Tensor &logits,
                         const Tensor &indices, bool normalize,
                         const Tensor &dlogits) {
  const char *op = "moe_router_backward";
  ZEROC_RETURN_IF_ERROR(
      checkMoeRouterBackward(dweights, logits, indices, dlogits));
  int64_t tokens = logits.rows(), experts = logits.dim(-1), k = indices.dim(-1);
  ZEROC_RETURN_IF_ERROR(checkIndices(op, indices, experts, true));
  ScratchVector<float> row(experts), p(experts), dp(experts), dw(k);
  const int32_t *idx = indices.i32();
  for (int64_t t = 0; t < tokens; ++t) {
    loadF32(logits, t * experts, experts, row.data());
    softmaxRow(row.data(), experts, p.data());
    loadF32(dweights, t * k, k, dw.data());
    const int32_t *sel = idx + t * k;
    // dL/dp of the selected probabilities, through w_j = p_j / s.
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      s += p[size_t(sel[j])];
    float c = 0.0f;
    if (normalize)
      for (int64_t j = 0; j < k; ++j)
        c += dw[size_t(j)] * (p[size_t(sel[j])] / s);
    std::fill(dp.begin(), dp.end(), 0.0f);
    for (int64_t j = 0; j < k; ++j)
      dp[size_t(sel[j])] = normalize ? (dw[size_t(j)] - c) / s : dw[size_t(j)];
    // Softmax: dl_e = p_e (dp_e - sum_e' p_e' dp_e'), over the selected e'.
    float g = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      g += p[size_t(sel[j])] * dp[size_t(sel[j])];
    for (int64_t e = 0; e < experts; ++e)
      row[size_t(e)] = p[size_t(e)] * (dp[size_t(e)] - g);
    storeF32(dlogits, t * experts, experts, row.data());
  }
  return {};
}

Status moeDispatchPlan(const Tensor &indices, int64_t numExperts,
                       const Tensor &offsets, const Tensor &rowToken,
                       const Tensor &rowSlot) {
  ZEROC_RETURN_IF_ERROR(
      checkMoeDispatchPlan(indices, numExperts, offsets, rowToken, rowSlot));
  ZEROC_RETURN_IF_ERROR(
      checkIndices("moe_dispatch_plan", indices, numExperts, false));
  int64_t pairs = indices.numel(), k = indices.dim(-1);
  const int32_t *idx = indices.i32();
  int32_t *off = offsets.i32(), *tok = rowToken.i32(), *slot = rowSlot.i32();
  std::fill(off, off + numExperts + 1, 0);
  for (int64_t i = 0; i < pairs; ++i)
    ++off[idx[i] + 1];
  for (int64_t e = 0; e < numExperts; ++e)
    off[e + 1] += off[e];
  // Pairs in (token, slot) order land at the next free row of their expert.
  ScratchVector<int32_t> next(off, off + numExperts);
  for (int64_t i = 0; i < pairs; ++i) {
    int32_t r = next[size_t(idx[i])]++;
    tok[r] = int32_t(i / k);
    slot[r] = int32_t(i % k);
  }
  return {};
}

Status moeExpertsForward(const Tensor &x, const Tensor &w1, const Tensor &w3,
                         const Tensor &w2, const Tensor &offsets,
                         const Tensor &rowToken, const Tensor &h1,
                         const Tensor &h3, const Tensor &ysorted) {
  ZEROC_RETURN_IF_ERROR(checkMoeExpertsForward(x, w1, w3, w2, offsets, rowToken,
                                               h1, h3, ysorted));
  ZEROC_RETURN_IF_ERROR(checkRows("moe_experts", offsets, rowToken, x.rows()));
  int64_t experts = w1.dim(0), inter = w1.dim(1);
  const int32_t *off = offsets.i32();
  for (int64_t e = 0; e < experts; ++e) {
    int64_t first = off[e], count = off[e + 1] - off[e];
    if (count == 0)
      continue;
    ScratchTensor xe = gatherRows(x, rowToken.i32(), first, count);
    Tensor h1e = rowsOf(h1, first, count), h3e = rowsOf(h3, first, count);
    ZEROC_RETURN_IF_ERROR(linearForward(xe, expertOf(w1, e), nullptr, h1e));
    ZEROC_RETURN_IF_ERROR(linearForward(xe, expertOf(w3, e), nullptr, h3e));
    ScratchTensor a({count, inter}, h1.dtype);
    ZEROC_RETURN_IF_ERROR(siluForward(h1e, a));
    ZEROC_RETURN_IF_ERROR(mul(a, h3e, a));
    ZEROC_RETURN_IF_ERROR(linearForward(a, expertOf(w2, e), nullptr,
                                        rowsOf(ysorted, first, count)));
  }
  return {};
}

namespace {

// The row moves' tokens (host data): in [0, tokens).
Status checkRowTokens(const char *op, const int32_t *tok, int64_t n,
                      int64_t tokens) {
  for (int64_t r = 0; r < n; ++r)
    if (tok[r] < 0 || tok[r] >= tokens)
      return {std::string(op) + ": rowToken[" + std::to_string(r) +
              "] = " + std::to_string(tok[r]) + " is out of range [0, " +
              std::to_string(tokens) + ")"};
  return {};
}

} // namespace

Status checkMoeGatherRows(const Tensor &x, const Tensor &rowToken,
                          const Tensor &rows) {
  const char *op = "moe_gather_rows";
  ZEROC_RETURN_IF_ERROR(
      firstError({checkFloat(op, "x", x), checkIds(op, "rowToken", rowToken),
                  checkFloat(op, "rows", rows), checkHasLast(op, "x", x),
                  checkRank(op, "rowToken", rowToken, 1)}));
  int64_t n = rowToken.dim(0), h = x.dim(-1);
  return firstError({checkRowCount(op, n),
                     checkDims(op, "rows", rows, "[N, h]", {n, h}),
                     x.dtype == rows.dtype ? std::string()
                                           : std::string(op) +
                                                 ": rows must be x's dtype, "
                                                 "found " +
                                                 describe(rows)});
}

Status checkMoeScatterAddRows(const Tensor &rows, const Tensor &rowToken,
                              const Tensor &y) {
  const char *op = "moe_scatter_add_rows";
  ZEROC_RETURN_IF_ERROR(
      firstError({checkFloat(op, "rows", rows),
                  checkIds(op, "rowToken", rowToken), checkFloat(op, "y", y),
                  checkHasLast(op, "y", y), checkRank(op, "rows", rows, 2),
                  checkRank(op, "rowToken", rowToken, 1)}));
  int64_t n = rowToken.dim(0), h = y.dim(-1);
  return firstError(
      {checkRowCount(op, n), checkDims(op, "rows", rows, "[N, h]", {n, h})});
}

Status moeReceivedPlanOnHost(const std::vector<int64_t> &counts, int64_t local,
                             const Tensor &offsets, const Tensor &rowToken,
                             int32_t *off, int32_t *tok) {
  const char *op = "moe_received_plan";
  ZEROC_RETURN_IF_ERROR(firstError({checkIds(op, "offsets", offsets),
                                    checkIds(op, "rowToken", rowToken),
                                    checkRank(op, "rowToken", rowToken, 1)}));
  if (local < 1 || counts.size() % size_t(local) != 0)
    return {std::string(op) + ": " + std::to_string(counts.size()) +
            " counts are not a whole number of sources of " +
            std::to_string(local) + " local experts"};
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0)
      return {std::string(op) + ": a negative row count " + std::to_string(c)};
    total += c;
  }
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkRowCount(op, total),
       checkDims(op, "offsets", offsets, "[local + 1]", {local + 1}),
       checkDims(op, "rowToken", rowToken, "[rows received]", {total})}));
  int64_t sources = int64_t(counts.size()) / local;
  // Where each (source, expert) block starts in arrival order.
  ScratchVector<int64_t> start(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i)
    start[i] = start[i - 1] + counts[i - 1];
  int64_t r = 0;
  off[0] = 0;
  for (int64_t l = 0; l < local; ++l) {
    for (int64_t s = 0; s < sources; ++s) {
      size_t b = size_t(s * local + l);
      for (int64_t i = 0; i < counts[b]; ++i)
        tok[r++] = int32_t(start[b] + i);
    }
    off[l + 1] = int32_t(r);
  }
  return {};
}

Status moeGatherRows(const Tensor &x, const Tensor &rowToken,
                     const Tensor &rows) {
  const char *op = "moe_gather_rows";
  ZEROC_RETURN_IF_ERROR(checkMoeGatherRows(x, rowToken, rows));
  int64_t n = rowToken.dim(0), h = x.dim(-1);
  const int32_t *tok = rowToken.i32();
  int64_t tokens = x.rows();
  ZEROC_RETURN_IF_ERROR(checkRowTokens(op, tok, n, tokens));
  int64_t rowBytes = h * bytesPerElement(x.dtype);
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(static_cast<char *>(rows.data) + r * rowBytes,
                static_cast<const char *>(x.data) + int64_t(tok[r]) * rowBytes,
                size_t(rowBytes));
  return {};
}

Status moeScatterAddRows(const Tensor &rows, const Tensor &rowToken,
                         const Tensor &y) {
  const char *op = "moe_scatter_add_rows";
  ZEROC_RETURN_IF_ERROR(checkMoeScatterAddRows(rows, rowToken, y));
  int64_t n = rowToken.dim(0), h = y.dim(-1), tokens = y.rows();
  const int32_t *tok = rowToken.i32();
  ZEROC_RETURN_IF_ERROR(checkRowTokens(op, tok, n, tokens));
  ScratchVector<float> acc(size_t(tokens * h), 0.0f), row(h);
  for (int64_t r = 0; r < n; ++r) {
    loadF32(rows, r * h, h, row.data());
    float *out = acc.data() + int64_t(tok[r]) * h;
    for (int64_t i = 0; i < h; ++i)
      out[i] += row[size_t(i)];
  }
  storeF32(y, 0, tokens * h, acc.data());
  return {};
}

Status moeReceivedPlan(const std::vector<int64_t> &counts, int64_t local,
                       const Tensor &offsets, const Tensor &rowToken) {
  return moeReceivedPlanOnHost(counts, local, offsets, rowToken, offsets.i32(),
                               rowToken.i32());
}

Status moeCombineForward(const Tensor &ysorted, const Tensor &weights,
                         const Tensor &rowToken, const Tensor &rowSlot,
                         const Tensor &y) {
  ZEROC_RETURN_IF_ERROR(
      checkMoeCombineForward(ysorted, weights, rowToken, rowSlot, y));
  int64_t tokens = weights.rows(), k = weights.dim(-1), h = ysorted.dim(1);
  ZEROC_RETURN_IF_ERROR(
      checkRowMap("moe_combine", rowToken, rowSlot, tokens, k));
  ScratchVector<float> acc(size_t(tokens * h), 0.0f), row(h);
  const int32_t *tok = rowToken.i32(), *slot = rowSlot.i32();
  for (int64_t r = 0; r < tokens * k; ++r) {
    float w = loadElement(weights, int64_t(tok[r]) * k + slot[r]);
    loadF32(ysorted, r * h, h, row.data());
    float *out = acc.data() + int64_t(tok[r]) * h;
    for (int64_t i = 0; i < h; ++i)
      out[i] += w * row[size_t(i)];
  }
  storeF32(y, 0, tokens * h, acc.data());
  return {};
}

Status moeCombineBackward(const Tensor &dy, const Tensor &ysorted,
                          const Tensor &weights, const Tensor &rowToken,
                          const Tensor &rowSlot, const Tensor &dysorted,
                          const Tensor &dweights) {
  ZEROC_RETURN_IF_ERROR(checkMoeCombineBackward(dy, ysorted, weights, rowToken,
                                                rowSlot, dysorted, dweights));
  int64_t tokens = weights.rows(), k = weights.dim(-1), h = ysorted.dim(1);
  ZEROC_RETURN_IF_ERROR(
      checkRowMap("moe_combine_backward", rowToken, rowSlot, tokens, k));
  ScratchVector<float> g(h), row(h);
  const int32_t *tok = rowToken.i32(), *slot = rowSlot.i32();
  for (int64_t r = 0; r < tokens * k; ++r) {
    int64_t pair = int64_t(tok[r]) * k + slot[r];
    float w = loadElement(weights, pair);
    loadF32(dy, int64_t(tok[r]) * h, h, g.data());
    loadF32(ysorted, r * h, h, row.data());
    float dot = 0.0f;
    for (int64_t i = 0; i < h; ++i) {
      dot += g[size_t(i)] * row[size_t(i)];
      g[size_t(i)] *= w;
    }
    storeF32(dysorted, r * h, h, g.data());
    storeElement(dweights, pair, dot);
  }
  return {};
}

Status moeExpertsBackward(const Tensor &dysorted, const Tensor &x,
                          const Tensor &w1, const Tensor &w3, const Tensor &w2,
                          const Tensor &offsets, const Tensor &rowToken,
                          const Tensor &h1, const Tensor &h3, const Tensor &dx,
                          const Tensor &dw1, const Tensor &dw3,
                          const Tensor &dw2) {
  ZEROC_RETURN_IF_ERROR(checkMoeExpertsBackward(
      dysorted, x, w1, w3, w2, offsets, rowToken, h1, h3, dx, dw1, dw3, dw2));
  int64_t tokens = x.rows(), h = x.dim(-1);
  ZEROC_RETURN_IF_ERROR(
      checkRows("moe_experts_backward", offsets, rowToken, tokens));
  int64_t experts = w1.dim(0), inter = w1.dim(1);
  const int32_t *off = offsets.i32(), *tok = rowToken.i32();
  ScratchVector<float> acc(size_t(tokens * h), 0.0f), row(h);
  for (int64_t e = 0; e < experts; ++e) {
    int64_t first = off[e], count = off[e + 1] - off[e];
    Tensor dw1e = expertOf(dw1, e), dw3e = expertOf(dw3, e),
           dw2e = expertOf(dw2, e);
    if (count == 0) {
      zeroElements(dw1e, 0, dw1e.numel());
      zeroElements(dw3e, 0, dw3e.numel());
      zeroElements(dw2e, 0, dw2e.numel());
      continue;
    }
    ScratchTensor xe = gatherRows(x, tok, first, count);
    Tensor h1e = rowsOf(h1, first, count), h3e = rowsOf(h3, first, count),
           dye = rowsOf(dysorted, first, count);
    // The dense chain's backward, on this expert's rows.
    ScratchTensor s({count, inter}, h1.dtype), a({count, inter}, h1.dtype);
    ZEROC_RETURN_IF_ERROR(siluForward(h1e, s));
    ZEROC_RETURN_IF_ERROR(mul(s, h3e, a));
    ZEROC_RETURN_IF_ERROR(linearGradWeight(dye, a, dw2e));
    ScratchTensor da({count, inter}, h1.dtype);
    ZEROC_RETURN_IF_ERROR(linearGradInput(dye, expertOf(w2, e), da));
    ScratchTensor dh1({count, inter}, h1.dtype), dh3({count, inter}, h1.dtype);
    ZEROC_RETURN_IF_ERROR(mul(da, h3e, dh1));
    ZEROC_RETURN_IF_ERROR(mul(da, s, dh3));
    ZEROC_RETURN_IF_ERROR(siluBackward(h1e, dh1, dh1));
    ZEROC_RETURN_IF_ERROR(linearGradWeight(dh1, xe, dw1e));
    ZEROC_RETURN_IF_ERROR(linearGradWeight(dh3, xe, dw3e));
    ScratchTensor dx1({count, h}, x.dtype), dx3({count, h}, x.dtype);
    ZEROC_RETURN_IF_ERROR(linearGradInput(dh1, expertOf(w1, e), dx1));
    ZEROC_RETURN_IF_ERROR(linearGradInput(dh3, expertOf(w3, e), dx3));
    ZEROC_RETURN_IF_ERROR(add(dx1, dx3, dx1));
    for (int64_t r = 0; r < count; ++r) {
      loadF32(dx1, r * h, h, row.data());
      float *out = acc.data() + int64_t(tok[first + r]) * h;
      for (int64_t i = 0; i < h; ++i)
        out[i] += row[size_t(i)];
    }
  }
  storeF32(dx, 0, tokens * h, acc.data());
  return {};
}

} // namespace zeroc::cpu

namespace zeroc::cpu {

Status moeRouterStats(const Tensor &logits, const Tensor &indices,
                      const Tensor &stats) {
  ZEROC_RETURN_IF_ERROR(checkMoeRouterStats(logits, indices, stats));
  int64_t tokens = logits.rows(), experts = logits.dim(-1), k = indices.dim(-1);
  ZEROC_RETURN_IF_ERROR(
      checkIndices("moe_router_stats", indices, experts, false));
  ScratchVector<float> row(experts), p(experts);
  float *count = stats.f32(), *prob = stats.f32() + experts;
  std::fill(count, count + 2 * experts, 0.0f);
  const int32_t *idx = indices.i32();
  for (int64_t t = 0; t < tokens; ++t) {
    loadF32(logits, t * experts, experts, row.data());
    softmaxRow(row.data(), experts, p.data());
    for (int64_t e = 0; e < experts; ++e)
      prob[e] += p[size_t(e)];
    for (int64_t j = 0; j < k; ++j)
      count[idx[t * k + j]] += 1.0f;
  }
  return {};
}

Status moeRouterStatsBackward(const Tensor &dstats, const Tensor &logits,
                              const Tensor &dlogits) {
  ZEROC_RETURN_IF_ERROR(checkMoeRouterStatsBackward(dstats, logits, dlogits));
  int64_t tokens = logits.rows(), experts = logits.dim(-1);
  const float *g = dstats.f32() + experts;
  ScratchVector<float> row(experts), p(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    loadF32(logits, t * experts, experts, row.data());
    softmaxRow(row.data(), experts, p.data());
    float dot = 0.0f;
    for (int64_t e = 0; e < experts; ++e)
      dot += p[size_t(e)] * g[e];
    for (int64_t e = 0; e < experts; ++e)
      row[size_t(e)] = p[size_t(e)] * (g[e] - dot);
    storeF32(dlogits, t * experts, experts, row.data());
  }
  return {};
}

namespace {
/// C_e and Q_e summed over the layers (ascending), and N.
struct LoadTotals {
  std::vector<float> count, prob;
  float rows = 0.0f;
};

LoadTotals loadTotals(const std::vector<Tensor> &stats, int64_t k) {
  int64_t experts = stats[0].dim(1);
  LoadTotals s;
  s.count.assign(size_t(experts), 0.0f);
  s.prob.assign(size_t(experts), 0.0f);
  for (const Tensor &t : stats)
    for (int64_t e = 0; e < experts; ++e) {
      s.count[size_t(e)] += t.f32()[e];
      s.prob[size_t(e)] += t.f32()[experts + e];
    }
  float pairs = 0.0f;
  for (float c : s.count)
    pairs += c;
  s.rows = pairs / float(k);
  return s;
}
} // namespace

Status moeLoadBalancingLoss(const Tensor &loss,
                            const std::vector<Tensor> &stats, int64_t k,
                            double coefficient, const Tensor &result) {
  ZEROC_RETURN_IF_ERROR(
      checkMoeLoadBalancing(false, loss, stats, k, coefficient, result));
  LoadTotals s = loadTotals(stats, k);
  int64_t experts = int64_t(s.count.size());
  float aux = 0.0f;
  if (s.rows > 0.0f)
    for (int64_t e = 0; e < experts; ++e)
      aux += (s.count[size_t(e)] / s.rows) * (s.prob[size_t(e)] / s.rows);
  aux *= float(experts);
  *result.f32() = *loss.f32() + float(coefficient) * aux;
  return {};
}

Status moeLoadBalancingLossBackward(const Tensor &dloss,
                                    const std::vector<Tensor> &stats, int64_t k,
                                    double coefficient, const Tensor &dstats) {
  ZEROC_RETURN_IF_ERROR(
      checkMoeLoadBalancing(true, dloss, stats, k, coefficient, dstats));
  LoadTotals s = loadTotals(stats, k);
  int64_t experts = int64_t(s.count.size());
  float scale = s.rows > 0.0f ? *dloss.f32() * float(coefficient) *
                                    float(experts) / (s.rows * s.rows)
                              : 0.0f;
  float *out = dstats.f32();
  for (int64_t e = 0; e < experts; ++e) {
    out[e] = 0.0f;
    out[experts + e] = scale * s.count[size_t(e)];
  }
  return {};
}

} // namespace zeroc::cpu
