//===- Norms.cpp - Layer and RMS normalization ----------------------------===//

#include "cpu/Norms.h"
#include "cpu/Parallel.h"

#include <cmath>
#include <vector>

namespace zeroc::cpu {

// x [..., hidden] with `others` (y, dy, dx) of its shape, and per-feature
// parameters [hidden].
static Status checkNorm(const char *op, const Tensor &x,
                        std::initializer_list<NamedTensor> others,
                        std::initializer_list<NamedTensor> params) {
  ZEROC_RETURN_IF_ERROR(firstError({checkFloat(op, "input", x)}));
  if (x.rank() < 1)
    return {std::string(op) + ": input must be [..., hidden], found " +
            describe(x)};
  for (auto [name, t] : others)
    ZEROC_RETURN_IF_ERROR(firstError(
        {checkFloat(op, name, *t), checkSameShape(op, name, *t, "input", x)}));
  for (auto [name, t] : params) {
    ZEROC_RETURN_IF_ERROR(firstError({checkFloat(op, name, *t)}));
    if (t->rank() != 1 || t->dim(0) != x.dim(-1))
      return {std::string(op) + ": " + name + " must be [" +
              std::to_string(x.dim(-1)) + "], found " + describe(*t)};
  }
  return {};
}

static void layerNormStats(const float *x, int64_t n, float eps, float &mean,
                           float &rstd) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    sum += x[i];
  mean = n ? sum / float(n) : 0.0f;
  float var = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    var += (x[i] - mean) * (x[i] - mean);
  var = n ? var / float(n) : 0.0f;
  rstd = 1.0f / std::sqrt(var + eps);
}

static float rmsNormStat(const float *x, int64_t n, float eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    sum += x[i] * x[i];
  return 1.0f / std::sqrt((n ? sum / float(n) : 0.0f) + eps);
}

// Rows on the pool, in blocks of rows sharing one row buffer; f(r, row)
// handles row r. Each row is computed on its own: the same bits for any
// thread count.
template <typename F> static void forEachRow(int64_t rows, int64_t n, F f) {
  constexpr int64_t kRowsPerBlock = 16;
  parallelChunks(rows, kRowsPerBlock, n, [&](int64_t first, int64_t count) {
    ScratchVector<float> row(n);
    for (int64_t r = first; r < first + count; ++r)
      f(r, row.data());
  });
}

// The weight gradients of a norm: for each feature i, the sum over rows in
// row order (the serial order) of term(r, i, x, dy), split over the pool by
// blocks of features, so the bits do not depend on the thread count.
// term(r, c0, width, x, dy) adds row r's terms of features [c0, c0 + width).
template <typename F>
static void columnSums(const Tensor &x, const Tensor &dy, int64_t rows,
                       int64_t n, F term) {
  constexpr int64_t kColumns = 256;
  parallelChunks(n, kColumns, rows, [&](int64_t c0, int64_t width) {
    float xs[kColumns], dys[kColumns];
    for (int64_t r = 0; r < rows; ++r) {
      loadF32(x, r * n + c0, width, xs);
      loadF32(dy, r * n + c0, width, dys);
      term(r, c0, width, xs, dys);
    }
  });
}

Status checkLayerNormForward(const Tensor &x, const Tensor &weight,
                             const Tensor &bias, const Tensor &y) {
  return checkNorm("layernorm", x, {{"result", &y}},
                   {{"weight", &weight}, {"bias", &bias}});
}

Status checkLayerNormBackward(const Tensor &x, const Tensor &weight,
                              const Tensor &dy, const Tensor &dx,
                              const Tensor &dweight, const Tensor &dbias) {
  return checkNorm(
      "layernorm_backward", x, {{"dy", &dy}, {"dinput", &dx}},
      {{"weight", &weight}, {"dweight", &dweight}, {"dbias", &dbias}});
}

Status checkRmsNormForward(const Tensor &x, const Tensor &weight,
                           const Tensor &y) {
  return checkNorm("rmsnorm", x, {{"result", &y}}, {{"weight", &weight}});
}

Status checkRmsNormBackward(const Tensor &x, const Tensor &weight,
                            const Tensor &dy, const Tensor &dx,
                            const Tensor &dweight) {
  return checkNorm("rmsnorm_backward", x, {{"dy", &dy}, {"dinput", &dx}},
                   {{"weight", &weight}, {"dweight", &dweight}});
}

Status layerNormForward(const Tensor &x, const Tensor &weight,
                        const Tensor &bias, float eps, const Tensor &y,
                        float *saved) {
  ZEROC_RETURN_IF_ERROR(checkLayerNormForward(x, weight, bias, y));
  int64_t rows = x.rows(), n = x.dim(-1);
  ScratchVector<float> w(n), b(n);
  loadF32(weight, 0, n, w.data());
  loadF32(bias, 0, n, b.data());
  forEachRow(rows, n, [&](int64_t r, float *row) {
    loadF32(x, r * n, n, row);
    float mean, rstd;
    layerNormStats(row, n, eps, mean, rstd);
    for (int64_t i = 0; i < n; ++i)
      row[i] = (row[i] - mean) * rstd * w[i] + b[i];
    storeF32(y, r * n, n, row);
    if (saved) {
      saved[r] = mean;
      saved[rows + r] = rstd;
    }
  });
  return {};
}

Status layerNormBackward(const Tensor &x, const Tensor &weight,
                         const Tensor &dy, float eps, const float *saved,
                         const Tensor &dx, const Tensor &dweight,
                         const Tensor &dbias) {
  ZEROC_RETURN_IF_ERROR(
      checkLayerNormBackward(x, weight, dy, dx, dweight, dbias));
  int64_t rows = x.rows(), n = x.dim(-1);
  ScratchVector<float> w(n), dw(n, 0.0f), db(n, 0.0f);
  ScratchVector<float> means(rows), rstds(rows);
  loadF32(weight, 0, n, w.data());
  // The rows' statistics; dweight and dbias feature by feature, each
  // summing over the rows in order; then dx row by row (last: dx may be
  // dy's or x's memory).
  forEachRow(rows, saved ? 0 : n, [&](int64_t r, float *row) {
    if (saved) {
      means[r] = saved[r];
      rstds[r] = saved[rows + r];
    } else {
      loadF32(x, r * n, n, row);
      layerNormStats(row, n, eps, means[r], rstds[r]);
    }
  });
  columnSums(x, dy, rows, n,
             [&](int64_t r, int64_t c0, int64_t width, const float *xs,
                 const float *dys) {
               for (int64_t i = 0; i < width; ++i) {
                 float xhat = (xs[i] - means[r]) * rstds[r];
                 dw[c0 + i] += dys[i] * xhat;
                 db[c0 + i] += dys[i];
               }
             });
  constexpr int64_t kRowsPerBlock = 16;
  parallelChunks(rows, kRowsPerBlock, n, [&](int64_t first, int64_t count) {
    ScratchVector<float> xrow(n), dyrow(n);
    for (int64_t r = first; r < first + count; ++r) {
      loadF32(x, r * n, n, xrow.data());
      loadF32(dy, r * n, n, dyrow.data());
      float mean = means[r], rstd = rstds[r];
      float meanG = 0.0f, meanGXhat = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        float xhat = (xrow[i] - mean) * rstd;
        float g = dyrow[i] * w[i];
        meanG += g;
        meanGXhat += g * xhat;
        xrow[i] = xhat;
      }
      meanG /= float(n);
      meanGXhat /= float(n);
      for (int64_t i = 0; i < n; ++i) {
        float g = dyrow[i] * w[i];
        dyrow[i] = rstd * (g - meanG - xrow[i] * meanGXhat);
      }
      storeF32(dx, r * n, n, dyrow.data());
    }
  });
  storeF32(dweight, 0, n, dw.data());
  storeF32(dbias, 0, n, db.data());
  return {};
}

// The scale of an RMS norm: the weight, or 1 + weight (unit offset), f32.
static void loadRmsScale(const Tensor &weight, int64_t n, bool unitOffset,
                         float *w) {
  loadF32(weight, 0, n, w);
  if (unitOffset)
    for (int64_t i = 0; i < n; ++i)
      w[i] += 1.0f;
}

Status rmsNormForward(const Tensor &x, const Tensor &weight, float eps,
                      bool unitOffset, const Tensor &y, float *saved) {
  ZEROC_RETURN_IF_ERROR(checkRmsNormForward(x, weight, y));
  int64_t rows = x.rows(), n = x.dim(-1);
  ScratchVector<float> w(n);
  loadRmsScale(weight, n, unitOffset, w.data());
  forEachRow(rows, n, [&](int64_t r, float *row) {
    loadF32(x, r * n, n, row);
    float rrms = rmsNormStat(row, n, eps);
    for (int64_t i = 0; i < n; ++i)
      row[i] = row[i] * rrms * w[i];
    storeF32(y, r * n, n, row);
    if (saved)
      saved[r] = rrms;
  });
  return {};
}

Status rmsNormBackward(const Tensor &x, const Tensor &weight, const Tensor &dy,
                       float eps, bool unitOffset, const float *saved,
                       const Tensor &dx, const Tensor &dweight) {
  ZEROC_RETURN_IF_ERROR(checkRmsNormBackward(x, weight, dy, dx, dweight));
  int64_t rows = x.rows(), n = x.dim(-1);
  ScratchVector<float> w(n), dw(n, 0.0f), rrmss(rows);
  loadRmsScale(weight, n, unitOffset, w.data());
  // The rows' statistics; dweight feature by feature over the rows in
  // order; then dx row by row (last: dx may be dy's or x's memory).
  forEachRow(rows, saved ? 0 : n, [&](int64_t r, float *row) {
    if (saved) {
      rrmss[r] = saved[r];
    } else {
      loadF32(x, r * n, n, row);
      rrmss[r] = rmsNormStat(row, n, eps);
    }
  });
  columnSums(x, dy, rows, n,
             [&](int64_t r, int64_t c0, int64_t width, const float *xs,
                 const float *dys) {
               for (int64_t i = 0; i < width; ++i) {
                 float xhat = xs[i] * rrmss[r];
                 dw[c0 + i] += dys[i] * xhat;
               }
             });
  constexpr int64_t kRowsPerBlock = 16;
  parallelChunks(rows, kRowsPerBlock, n, [&](int64_t first, int64_t count) {
    ScratchVector<float> xrow(n), dyrow(n);
    for (int64_t r = first; r < first + count; ++r) {
      loadF32(x, r * n, n, xrow.data());
      loadF32(dy, r * n, n, dyrow.data());
      float rrms = rrmss[r];
      float meanGXhat = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        float xhat = xrow[i] * rrms;
        meanGXhat += dyrow[i] * w[i] * xhat;
        xrow[i] = xhat;
      }
      meanGXhat /= float(n);
      for (int64_t i = 0; i < n; ++i) {
        float g = dyrow[i] * w[i];
        dyrow[i] = rrms * (g - xrow[i] * meanGXhat);
      }
      storeF32(dx, r * n, n, dyrow.data());
    }
  });
  storeF32(dweight, 0, n, dw.data());
  return {};
}

} // namespace zeroc::cpu
