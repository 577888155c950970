//===- Rotary.cpp - Rotary position embedding (RoPE) ----------------------===//

#include "cpu/Rotary.h"
#include "cpu/Parallel.h"

#include <cmath>
#include <vector>

namespace zeroc::cpu {

static Status checkRotary(const char *op, const Tensor &in, int64_t headDim,
                          double theta, const Tensor &out) {
  ZEROC_RETURN_IF_ERROR(
      firstError({checkFloat(op, "input", in), checkRank(op, "input", in, 3),
                  checkFloat(op, "result", out),
                  checkSameShape(op, "result", out, "input", in)}));
  if (headDim <= 0 || headDim % 2 != 0 || in.dim(2) % headDim != 0)
    return {std::string(op) + ": head_dim " + std::to_string(headDim) +
            " must be even and divide the last dimension of " + describe(in)};
  if (!(theta > 0.0))
    return {std::string(op) + ": theta must be positive, found " +
            std::to_string(theta)};
  return {};
}

Status checkRotaryForward(const Tensor &x, int64_t headDim, double theta,
                          const Tensor &y) {
  return checkRotary("rotary", x, headDim, theta, y);
}

Status checkRotaryBackward(const Tensor &dy, int64_t headDim, double theta,
                           const Tensor &dx) {
  return checkRotary("rotary_backward", dy, headDim, theta, dx);
}

// Rotates every pair of checked `in` by `direction` (+1 forward, -1 backward)
// times its angle.
namespace {

/// cos and sin of pos * theta^(-2i / head_dim), per position and pair: the
/// same for every call of a model's layers, so each thread keeps the last
/// table it computed (a table costs seq x head_dim / 2 sines and cosines in
/// f64, more than rotating the rows of a small model's step).
struct RotaryTable {
  int64_t seq = 0, headDim = 0;
  double theta = 0;
  std::vector<float> cosines, sines;
};

const RotaryTable &rotaryTable(int64_t seq, int64_t headDim, double theta) {
  thread_local RotaryTable t;
  if (t.seq == seq && t.headDim == headDim && t.theta == theta)
    return t;
  int64_t half = headDim / 2;
  t.cosines.assign(size_t(seq * half), 0.0f);
  t.sines.assign(size_t(seq * half), 0.0f);
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t i = 0; i < half; ++i) {
      double angle =
          double(s) * std::pow(theta, -2.0 * double(i) / double(headDim));
      t.cosines[size_t(s * half + i)] = float(std::cos(angle));
      t.sines[size_t(s * half + i)] = float(std::sin(angle));
    }
  t.seq = seq;
  t.headDim = headDim;
  t.theta = theta;
  return t;
}

} // namespace

static void rotate(const Tensor &in, int64_t headDim, double theta,
                   const Tensor &out, float direction,
                   const Tensor *documents) {
  int64_t batch = in.dim(0), seq = in.dim(1), width = in.dim(2);
  int64_t half = headDim / 2;
  const RotaryTable &table = rotaryTable(seq, headDim, theta);
  const std::vector<float> &cosines = table.cosines, &sines = table.sines;

  // Rows (batch x seq) on the pool, each rotated on its own.
  parallelChunks(batch * seq, 8, width, [&](int64_t first, int64_t count) {
    ScratchVector<float> row(width);
    for (int64_t bs = first; bs < first + count; ++bs) {
      int64_t s = bs % seq, offset = bs * width;
      int64_t pos = documents ? s - documents->i32()[bs] : s;
      loadF32(in, offset, width, row.data());
      const float *c = &cosines[pos * half];
      const float *sn = &sines[pos * half];
      for (int64_t h = 0; h < width; h += headDim) {
        float *lo = &row[h], *hi = lo + half;
        for (int64_t i = 0; i < half; ++i) {
          // direction * sin: exact (+-1), the bits of the sine itself.
          float a = lo[i], bv = hi[i], si = direction * sn[i];
          lo[i] = a * c[i] - bv * si;
          hi[i] = bv * c[i] + a * si;
        }
      }
      storeF32(out, offset, width, row.data());
    }
  });
}

Status rotaryForward(const Tensor &x, int64_t headDim, double theta,
                     const Tensor &y, const Tensor *documents) {
  ZEROC_RETURN_IF_ERROR(checkRotaryForward(x, headDim, theta, y));
  ZEROC_RETURN_IF_ERROR(
      checkDocumentStarts("rotary", documents, x.dim(0), x.dim(1)));
  rotate(x, headDim, theta, y, 1.0f, documents);
  return {};
}

Status rotaryBackward(const Tensor &dy, int64_t headDim, double theta,
                      const Tensor &dx, const Tensor *documents) {
  ZEROC_RETURN_IF_ERROR(checkRotaryBackward(dy, headDim, theta, dx));
  ZEROC_RETURN_IF_ERROR(
      checkDocumentStarts("rotary_backward", documents, dy.dim(0), dy.dim(1)));
  rotate(dy, headDim, theta, dx, -1.0f, documents);
  return {};
}

} // namespace zeroc::cpu
