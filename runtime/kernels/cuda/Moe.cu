//===- Moe.cu - Mixture-of-experts on the GPU -----------------------------===//

#include "cuda/Moe.h"

#include "cpu/Moe.h"
#include "cuda/Activations.h"
#include "cuda/Device.cuh"
#include "cuda/Gemm.h"
#include "cuda/Linear.h"

#include <cub/device/device_radix_sort.cuh>

#include <tuple>
#include <utility>
#include <vector>

namespace zeroc::cuda {

namespace {

//===----------------------------------------------------------------------===//
// Router
//===----------------------------------------------------------------------===//

// The row's maximum and the softmax's denominator.
__device__ void softmaxStats(const void *logits, DType type, int64_t base,
                             int64_t experts, float &m, float &sum) {
  m = loadAsFloat(logits, type, base);
  for (int64_t e = 1; e < experts; ++e)
    m = fmaxf(m, loadAsFloat(logits, type, base + e));
  sum = 0.0f;
  for (int64_t e = 0; e < experts; ++e)
    sum += expf(loadAsFloat(logits, type, base + e) - m);
}

__device__ float probability(const void *logits, DType type, int64_t base,
                             int64_t e, float m, float sum) {
  return expf(loadAsFloat(logits, type, base + e) - m) / sum;
}

// One thread per token. The j-th pick is the best (probability descending,
// index ascending) of the experts after the (j-1)-th in that order, so no
// per-thread list of taken experts is needed.
__global__ void routerTopKKernel(const void *logits, DType logitsType,
                                 int64_t tokens, int64_t experts, int64_t k,
                                 bool normalize, void *weights,
                                 DType weightsType, int32_t *indices) {
  for (int64_t t = globalThread(); t < tokens; t += globalThreads()) {
    int64_t base = t * experts;
    float m, sum;
    softmaxStats(logits, logitsType, base, experts, m, sum);
    float prevP = INFINITY, total = 0.0f;
    int64_t prevE = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      float bestP = 0.0f;
      for (int64_t e = 0; e < experts; ++e) {
        float p = probability(logits, logitsType, base, e, m, sum);
        bool after = p < prevP || (p == prevP && e > prevE);
        if (after && (best < 0 || p > bestP)) {
          best = e;
          bestP = p;
        }
      }
      // Only NaN logits leave nothing to pick: -1, which the dispatch plan
      // sorts after every expert.
      indices[t * k + j] = int32_t(best);
      prevP = bestP;
      prevE = best;
      total += bestP;
    }
    for (int64_t j = 0; j < k; ++j) {
      int32_t e = indices[t * k + j];
      float p =
          e < 0 ? quietNaN() : probability(logits, logitsType, base, e, m, sum);
      storeFromFloat(weights, weightsType, t * k + j,
                     normalize ? p / total : p);
    }
  }
}

// One thread per token: dlogits of cpu::moeRouterBackward, same order.
__global__ void routerBackwardKernel(const void *dweights, DType dwType,
                                     const void *logits, DType logitsType,
                                     const int32_t *indices, int64_t tokens,
                                     int64_t experts, int64_t k, bool normalize,
                                     void *dlogits, DType dlType) {
  for (int64_t t = globalThread(); t < tokens; t += globalThreads()) {
    int64_t base = t * experts;
    const int32_t *sel = indices + t * k;
    float m, sum;
    softmaxStats(logits, logitsType, base, experts, m, sum);
    auto pick = [&](int64_t j) {
      int32_t e = sel[j];
      return e >= 0 && e < experts
                 ? probability(logits, logitsType, base, e, m, sum)
                 : quietNaN();
    };
    float s = 0.0f, c = 0.0f, g = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      s += pick(j);
    if (normalize)
      for (int64_t j = 0; j < k; ++j)
        c += loadAsFloat(dweights, dwType, t * k + j) * (pick(j) / s);
    auto dp = [&](int64_t j) {
      float dw = loadAsFloat(dweights, dwType, t * k + j);
      return normalize ? (dw - c) / s : dw;
    };
    for (int64_t j = 0; j < k; ++j)
      g += pick(j) * dp(j);
    for (int64_t e = 0; e < experts; ++e) {
      float d = 0.0f;
      for (int64_t j = 0; j < k; ++j)
        if (sel[j] == e)
          d = dp(j);
      float p = probability(logits, logitsType, base, e, m, sum);
      storeFromFloat(dlogits, dlType, base + e, p * (d - g));
    }
  }
}

// One thread per token: the logits' row becomes its softmax, in place (the
// statistics' f32 workspace).
__global__ void softmaxInPlaceKernel(float *logits, int64_t tokens,
                                     int64_t experts) {
  for (int64_t t = globalThread(); t < tokens; t += globalThreads()) {
    int64_t base = t * experts;
    float m, sum;
    softmaxStats(logits, DType::F32, base, experts, m, sum);
    for (int64_t e = 0; e < experts; ++e)
      logits[base + e] = expf(logits[base + e] - m) / sum;
  }
}

// One block per expert: row 0 counts its (token, slot) pairs, row 1 sums its
// probabilities. Each thread sums a fixed stride of tokens, then a fixed tree:
// the same order every run (the counts are exact in any order).
__global__ void routerStatsKernel(const float *p, const int32_t *indices,
                                  int64_t tokens, int64_t experts, int64_t k,
                                  float *stats) {
  __shared__ float probs[kThreads], counts[kThreads];
  int64_t e = blockIdx.x;
  float prob = 0.0f, count = 0.0f;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x)
    prob += p[t * experts + e];
  for (int64_t i = threadIdx.x; i < tokens * k; i += blockDim.x)
    count += indices[i] == e ? 1.0f : 0.0f;
  probs[threadIdx.x] = prob;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) {
      probs[threadIdx.x] += probs[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats[e] = counts[0];
    stats[experts + e] = probs[0];
  }
}

// One thread per token: dlogits = p * (g - sum_e p_e g_e), g = dstats[1].
__global__ void routerStatsBackwardKernel(const float *dstats,
                                          const float *logits, int64_t tokens,
                                          int64_t experts, void *dlogits,
                                          DType dlType) {
  const float *g = dstats + experts;
  for (int64_t t = globalThread(); t < tokens; t += globalThreads()) {
    int64_t base = t * experts;
    float m, sum;
    softmaxStats(logits, DType::F32, base, experts, m, sum);
    float dot = 0.0f;
    for (int64_t e = 0; e < experts; ++e)
      dot += probability(logits, DType::F32, base, e, m, sum) * g[e];
    for (int64_t e = 0; e < experts; ++e) {
      float p = probability(logits, DType::F32, base, e, m, sum);
      storeFromFloat(dlogits, dlType, base + e, p * (g[e] - dot));
    }
  }
}

struct RouterStatsList {
  const float *layer[kMaxLoadBalancingLayers];
  int64_t count;
};

// One thread, the CPU kernel's order: C_e, Q_e over the layers ascending,
// N = sum_e C_e / k; then the loss (backward: the statistics' gradient).
__global__ void loadBalancingKernel(RouterStatsList stats, int64_t experts,
                                    int64_t k, float coefficient,
                                    const float *lossOrGrad, float *out,
                                    bool backward) {
  // Totals per expert, layers ascending (as loadTotals on the CPU).
  float pairs = 0.0f, aux = 0.0f;
  for (int64_t e = 0; e < experts; ++e) {
    float c = 0.0f;
    for (int64_t l = 0; l < stats.count; ++l)
      c += stats.layer[l][e];
    pairs += c;
  }
  float rows = pairs / float(k);
  for (int64_t e = 0; e < experts; ++e) {
    float c = 0.0f, q = 0.0f;
    for (int64_t l = 0; l < stats.count; ++l) {
      c += stats.layer[l][e];
      q += stats.layer[l][experts + e];
    }
    if (backward) {
      float scale = rows > 0.0f ? *lossOrGrad * coefficient * float(experts) /
                                      (rows * rows)
                                : 0.0f;
      out[e] = 0.0f;
      out[experts + e] = scale * c;
    } else if (rows > 0.0f) {
      aux += (c / rows) * (q / rows);
    }
  }
  if (!backward)
    *out = *lossOrGrad + coefficient * (aux * float(experts));
}

//===----------------------------------------------------------------------===//
// Stable sorts by key
//===----------------------------------------------------------------------===//

size_t roundUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// keys[i] = src[i] when in [0, numKeys), else numKeys; values[i] = i.
__global__ void sortKeysKernel(const int32_t *src, int64_t n, int64_t numKeys,
                               uint32_t *keys, int32_t *values) {
  for (int64_t i = globalThread(); i < n; i += globalThreads()) {
    int32_t key = src[i];
    keys[i] = key >= 0 && key < numKeys ? uint32_t(key) : uint32_t(numKeys);
    values[i] = int32_t(i);
  }
}

// starts[key] = the first position of `key` in sorted `keys` (n if none
// follows), for key = 0 ..= numKeys: a binary search each.
__global__ void keyStartsKernel(const uint32_t *keys, int64_t n,
                                int64_t numKeys, int32_t *starts) {
  for (int64_t key = globalThread(); key <= numKeys; key += globalThreads()) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (int64_t(keys[mid]) < key)
        lo = mid + 1;
      else
        hi = mid;
    }
    starts[key] = int32_t(lo);
  }
}

/// The positions 0 .. n-1 stably sorted by key src[i] (keys outside
/// [0, numKeys) last), and where each key's run starts: `sorted` [n] and
/// `starts` [numKeys + 1], device memory inside `scratch`.
Status sortByKey(const char *op, const int32_t *src, int64_t n, int64_t numKeys,
                 Scratch &scratch, const int32_t *&sorted,
                 const int32_t *&starts, cudaStream_t stream) {
  int endBit = 1;
  while (endBit < 32 && (uint64_t(1) << endBit) <= uint64_t(numKeys))
    ++endBit;
  size_t sortBytes = 0;
  if (n > 0)
    ZEROC_RETURN_IF_ERROR(cudaStatus(
        op, "cub::DeviceRadixSort::SortPairs (size query)",
        cub::DeviceRadixSort::SortPairs(
            nullptr, sortBytes, static_cast<const uint32_t *>(nullptr),
            static_cast<uint32_t *>(nullptr),
            static_cast<const int32_t *>(nullptr),
            static_cast<int32_t *>(nullptr), int(n), 0, endBit, stream)));
  // Keys and positions before and after the sort, the run starts, then the
  // sort's temporary storage.
  size_t array = roundUp256(size_t(n) * 4);
  size_t startBytes = roundUp256(size_t(numKeys + 1) * 4);
  ZEROC_RETURN_IF_ERROR(
      scratch.allocate(op, 4 * array + startBytes + sortBytes, stream));
  char *base = scratch.get<char>();
  auto *keys = reinterpret_cast<uint32_t *>(base);
  auto *values = reinterpret_cast<int32_t *>(base + array);
  auto *sortedKeys = reinterpret_cast<uint32_t *>(base + 2 * array);
  auto *sortedValues = reinterpret_cast<int32_t *>(base + 3 * array);
  auto *runStarts = reinterpret_cast<int32_t *>(base + 4 * array);
  if (n > 0) {
    sortKeysKernel<<<gridFor(n), kThreads, 0, stream>>>(src, n, numKeys, keys,
                                                        values);
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
    ZEROC_RETURN_IF_ERROR(cudaStatus(
        op, "cub::DeviceRadixSort::SortPairs",
        cub::DeviceRadixSort::SortPairs(
            base + 4 * array + startBytes, sortBytes, keys, sortedKeys, values,
            sortedValues, int(n), 0, endBit, stream)));
  }
  keyStartsKernel<<<gridFor(numKeys + 1), kThreads, 0, stream>>>(
      sortedKeys, n, numKeys, runStarts);
  sorted = sortedValues;
  starts = runStarts;
  return launchStatus(op);
}

__global__ void pairRowsKernel(const int32_t *sortedPairs, int64_t n, int64_t k,
                               int32_t *rowToken, int32_t *rowSlot) {
  for (int64_t r = globalThread(); r < n; r += globalThreads()) {
    int32_t pair = sortedPairs[r];
    rowToken[r] = int32_t(pair / k);
    rowSlot[r] = int32_t(pair % k);
  }
}

//===----------------------------------------------------------------------===//
// Gathers and sums of rows
//===----------------------------------------------------------------------===//

// dst[r, :] = x[rowToken[r], :] (a token out of range gives NaNs).
__global__ void gatherRowsKernel(const void *x, DType type, int64_t tokens,
                                 int64_t h, const int32_t *rowToken,
                                 int64_t rows, void *dst) {
  for (int64_t e = globalThread(); e < rows * h; e += globalThreads()) {
    int64_t r = e / h, i = e % h;
    int32_t t = rowToken[r];
    float v = t >= 0 && t < tokens ? loadAsFloat(x, type, int64_t(t) * h + i)
                                   : quietNaN();
    storeFromFloat(dst, type, e, v);
  }
}

// rows[r, :] = x[rowToken[r], :] as bits (Word: the dtype's element size),
// a copy as the CPU's memcpy; a token out of range gives NaNs.
template <typename Word>
__global__ void copyRowsKernel(const Word *x, DType type, int64_t tokens,
                               int64_t h, const int32_t *rowToken, int64_t rows,
                               Word *dst) {
  for (int64_t e = globalThread(); e < rows * h; e += globalThreads()) {
    int64_t r = e / h, i = e % h;
    int32_t t = rowToken[r];
    if (t >= 0 && t < tokens)
      dst[e] = x[int64_t(t) * h + i];
    else
      storeFromFloat(dst, type, e, quietNaN());
  }
}

// dst[t, i] = sum over t's rows r, ascending, of (w[t, rowSlot[r]] *)
// src[r, i]: products and sums rounded separately, as the CPU's loop.
__global__ void sumRowsKernel(const int32_t *sortedRows, const int32_t *starts,
                              const void *src, DType srcType, int64_t tokens,
                              int64_t h, const void *weights, DType wType,
                              const int32_t *rowSlot, int64_t k, void *dst,
                              DType dstType) {
  for (int64_t e = globalThread(); e < tokens * h; e += globalThreads()) {
    int64_t t = e / h, i = e % h;
    float acc = 0.0f;
    for (int32_t q = starts[t]; q < starts[t + 1]; ++q) {
      int64_t r = sortedRows[q];
      float v = loadAsFloat(src, srcType, r * h + i);
      if (weights) {
        int32_t slot = rowSlot[r];
        float w = slot >= 0 && slot < k
                      ? loadAsFloat(weights, wType, t * k + slot)
                      : quietNaN();
        v = __fmul_rn(w, v);
      }
      acc = __fadd_rn(acc, v);
    }
    storeFromFloat(dst, dstType, e, acc);
  }
}

// dysorted[r, i] = weights[t, j] dy[t, i] for row r = (t, j).
__global__ void scatterGradKernel(const void *dy, DType dyType,
                                  const void *weights, DType wType,
                                  const int32_t *rowToken,
                                  const int32_t *rowSlot, int64_t tokens,
                                  int64_t k, int64_t h, void *dys,
                                  DType dysType) {
  for (int64_t e = globalThread(); e < tokens * k * h; e += globalThreads()) {
    int64_t r = e / h, i = e % h;
    int32_t t = rowToken[r], j = rowSlot[r];
    bool valid = t >= 0 && t < tokens && j >= 0 && j < k;
    float v = valid ? __fmul_rn(loadAsFloat(dy, dyType, int64_t(t) * h + i),
                                loadAsFloat(weights, wType, int64_t(t) * k + j))
                    : quietNaN();
    storeFromFloat(dys, dysType, e, v);
  }
}

// One block per row r = (t, j): dweights[t, j] = dy[t] . ysorted[r].
__global__ void weightGradKernel(const void *dy, DType dyType, const void *ys,
                                 DType ysType, const int32_t *rowToken,
                                 const int32_t *rowSlot, int64_t tokens,
                                 int64_t k, int64_t h, void *dweights,
                                 DType dwType) {
  for (int64_t r = blockIdx.x; r < tokens * k; r += gridDim.x) {
    int32_t t = rowToken[r], j = rowSlot[r];
    // Uniform over the block.
    if (t < 0 || t >= tokens || j < 0 || j >= k)
      continue;
    float part = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
      part += loadAsFloat(dy, dyType, int64_t(t) * h + i) *
              loadAsFloat(ys, ysType, r * h + i);
    float dot = blockSum(part);
    if (threadIdx.x == 0)
      storeFromFloat(dweights, dwType, int64_t(t) * k + j, dot);
  }
}

//===----------------------------------------------------------------------===//
// Experts
//===----------------------------------------------------------------------===//

/// A device tensor view of scratch memory.
Tensor viewOf(void *data, DType dtype, std::vector<int64_t> shape) {
  return Tensor{data, dtype, std::move(shape)};
}

/// Scratch for a [rows, cols] tensor of `dtype`.
Status scratchTensor(const char *op, Scratch &scratch, DType dtype,
                     int64_t rows, int64_t cols, cudaStream_t stream,
                     Tensor &t) {
  ZEROC_RETURN_IF_ERROR(scratch.allocate(
      op, size_t(rows * cols * bytesPerElement(dtype)), stream));
  t = viewOf(scratch.get(), dtype, {rows, cols});
  return {};
}

/// The offsets on the host, checked: the experts' GEMM sizes.
Status hostOffsets(const char *op, const Tensor &offsets, int64_t rows,
                   cudaStream_t stream, std::vector<int32_t> &off) {
  off.assign(size_t(offsets.numel()), 0);
  ZEROC_RETURN_IF_ERROR(cudaStatus(
      op, "cudaMemcpyAsync of the offsets",
      cudaMemcpyAsync(off.data(), offsets.data, size_t(offsets.bytes()),
                      cudaMemcpyDeviceToHost, stream)));
  ZEROC_RETURN_IF_ERROR(
      cudaStatus(op, "cudaStreamSynchronize", cudaStreamSynchronize(stream)));
  return cpu::checkMoeOffsets(op, off.data(), offsets.numel() - 1, rows);
}

/// Row `row` of a row-major matrix with `cols` columns (or matrix `row` of
/// a stack of [rows', cols'] matrices with cols = rows' * cols').
const void *at(const Tensor &t, int64_t row, int64_t cols) {
  return offsetData(t, row * cols);
}
void *at(void *data, DType type, int64_t row, int64_t cols) {
  return static_cast<char *>(data) + row * cols * bytesPerElement(type);
}

/// x's rows in sorted order, [rows, h] of x's dtype, in `scratch`.
Status gatherRows(const char *op, const Tensor &x, const Tensor &rowToken,
                  Scratch &scratch, cudaStream_t stream, Tensor &xs) {
  int64_t rows = rowToken.dim(0), h = x.dim(-1);
  ZEROC_RETURN_IF_ERROR(
      scratchTensor(op, scratch, x.dtype, rows, h, stream, xs));
  if (rows * h == 0)
    return {};
  gatherRowsKernel<<<gridFor(rows * h), kThreads, 0, stream>>>(
      x.data, x.dtype, x.rows(), h, rowToken.i32(), rows, xs.data);
  return launchStatus(op);
}

} // namespace

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

Status moeRouterForward(const Tensor &x, const Tensor &gate, int64_t k,
                        bool normalize, const Tensor &logits,
                        const Tensor &weights, const Tensor &indices,
                        KernelContext &ctx, cudaStream_t stream) {
  const char *op = "moe_router";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkMoeRouterForward(x, gate, k, logits, weights, indices));
  ZEROC_RETURN_IF_ERROR(linearForward(x, gate, nullptr, logits, ctx, stream));
  int64_t tokens = x.rows(), experts = gate.dim(0);
  if (tokens == 0)
    return {};
  routerTopKKernel<<<gridFor(tokens), kThreads, 0, stream>>>(
      logits.data, logits.dtype, tokens, experts, k, normalize, weights.data,
      weights.dtype, indices.i32());
  return launchStatus(op);
}

Status moeRouterBackward(const Tensor &dweights, const Tensor &logits,
                         const Tensor &indices, bool normalize,
                         const Tensor &dlogits, cudaStream_t stream) {
  const char *op = "moe_router_backward";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkMoeRouterBackward(dweights, logits, indices, dlogits));
  int64_t tokens = logits.rows(), experts = logits.dim(-1), k = indices.dim(-1);
  if (tokens == 0)
    return {};
  routerBackwardKernel<<<gridFor(tokens), kThreads, 0, stream>>>(
      dweights.data, dweights.dtype, logits.data, logits.dtype, indices.i32(),
      tokens, experts, k, normalize, dlogits.data, dlogits.dtype);
  return launchStatus(op);
}

Status moeDispatchPlan(const Tensor &indices, int64_t numExperts,
                       const Tensor &offsets, const Tensor &rowToken,
                       const Tensor &rowSlot, cudaStream_t stream) {
  const char *op = "moe_dispatch_plan";
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeDispatchPlan(indices, numExperts, offsets,
                                                  rowToken, rowSlot));
  int64_t pairs = indices.numel(), k = indices.dim(-1);
  Scratch scratch;
  const int32_t *sorted, *starts;
  ZEROC_RETURN_IF_ERROR(sortByKey(op, indices.i32(), pairs, numExperts, scratch,
                                  sorted, starts, stream));
  ZEROC_RETURN_IF_ERROR(
      cudaStatus(op, "cudaMemcpyAsync of the offsets",
                 cudaMemcpyAsync(offsets.data, starts, size_t(offsets.bytes()),
                                 cudaMemcpyDeviceToDevice, stream)));
  if (pairs == 0)
    return {};
  pairRowsKernel<<<gridFor(pairs), kThreads, 0, stream>>>(
      sorted, pairs, k, rowToken.i32(), rowSlot.i32());
  return launchStatus(op);
}

Status moeExpertsForward(const Tensor &x, const Tensor &w1, const Tensor &w3,
                         const Tensor &w2, const Tensor &offsets,
                         const Tensor &rowToken, const Tensor &h1,
                         const Tensor &h3, const Tensor &ysorted,
                         KernelContext &ctx, cudaStream_t stream) {
  const char *op = "moe_experts";
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeExpertsForward(x, w1, w3, w2, offsets,
                                                    rowToken, h1, h3, ysorted));
  int64_t h = x.dim(-1), experts = w1.dim(0), inter = w1.dim(1),
          rows = rowToken.dim(0);
  std::vector<int32_t> off;
  ZEROC_RETURN_IF_ERROR(hostOffsets(op, offsets, rows, stream, off));
  if (rows == 0)
    return {};
  Scratch xsScratch, aScratch;
  Tensor xs, a;
  ZEROC_RETURN_IF_ERROR(gatherRows(op, x, rowToken, xsScratch, stream, xs));
  for (int64_t e = 0; e < experts; ++e) {
    int64_t first = off[size_t(e)], count = off[size_t(e) + 1] - first;
    if (count == 0)
      continue;
    GemmOperand xe{at(xs, first, h), x.dtype, h, false};
    ZEROC_RETURN_IF_ERROR(
        linearGemm(op, ctx, stream, count, inter, h, xe,
                   {at(w1, e, inter * h), w1.dtype, h, true}, nullptr,
                   at(h1.data, h1.dtype, first, inter), h1.dtype, inter));
    ZEROC_RETURN_IF_ERROR(
        linearGemm(op, ctx, stream, count, inter, h, xe,
                   {at(w3, e, inter * h), w3.dtype, h, true}, nullptr,
                   at(h3.data, h3.dtype, first, inter), h3.dtype, inter));
  }
  // The dense chain's SwiGLU over all rows: a = silu(h1) * h3 in h1's dtype.
  ZEROC_RETURN_IF_ERROR(
      scratchTensor(op, aScratch, h1.dtype, rows, inter, stream, a));
  ZEROC_RETURN_IF_ERROR(siluForward(h1, a, stream));
  ZEROC_RETURN_IF_ERROR(mul(a, h3, a, stream));
  for (int64_t e = 0; e < experts; ++e) {
    int64_t first = off[size_t(e)], count = off[size_t(e) + 1] - first;
    if (count == 0)
      continue;
    ZEROC_RETURN_IF_ERROR(linearGemm(
        op, ctx, stream, count, h, inter,
        {at(a, first, inter), a.dtype, inter, false},
        {at(w2, e, h * inter), w2.dtype, inter, true}, nullptr,
        at(ysorted.data, ysorted.dtype, first, h), ysorted.dtype, h));
  }
  return {};
}

Status moeGatherRows(const Tensor &x, const Tensor &rowToken,
                     const Tensor &rows, cudaStream_t stream) {
  const char *op = "moe_gather_rows";
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeGatherRows(x, rowToken, rows));
  int64_t n = rowToken.dim(0), h = x.dim(-1), tokens = x.rows();
  if (n * h == 0)
    return {};
  if (bytesPerElement(x.dtype) == 2)
    copyRowsKernel<<<gridFor(n * h), kThreads, 0, stream>>>(
        static_cast<const uint16_t *>(x.data), x.dtype, tokens, h,
        rowToken.i32(), n, static_cast<uint16_t *>(rows.data));
  else
    copyRowsKernel<<<gridFor(n * h), kThreads, 0, stream>>>(
        static_cast<const uint32_t *>(x.data), x.dtype, tokens, h,
        rowToken.i32(), n, static_cast<uint32_t *>(rows.data));
  return launchStatus(op);
}

Status moeScatterAddRows(const Tensor &rows, const Tensor &rowToken,
                         const Tensor &y, cudaStream_t stream) {
  const char *op = "moe_scatter_add_rows";
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeScatterAddRows(rows, rowToken, y));
  int64_t n = rowToken.dim(0), h = y.dim(-1), tokens = y.rows();
  // Each token's rows by a stable sort, summed in ascending row order: the
  // experts' dx sum without the experts.
  Scratch scratch;
  const int32_t *sorted, *starts;
  ZEROC_RETURN_IF_ERROR(sortByKey(op, rowToken.i32(), n, tokens, scratch,
                                  sorted, starts, stream));
  if (tokens * h == 0)
    return {};
  sumRowsKernel<<<gridFor(tokens * h), kThreads, 0, stream>>>(
      sorted, starts, rows.data, rows.dtype, tokens, h, nullptr, DType::F32,
      nullptr, 1, y.data, y.dtype);
  return launchStatus(op);
}

Status moeReceivedPlan(const std::vector<int64_t> &counts, int64_t local,
                       const Tensor &offsets, const Tensor &rowToken,
                       cudaStream_t stream) {
  const char *op = "moe_received_plan";
  // Made on the host, copied through pageable memory that must outlive the
  // copies: hence the synchronization, as in hostOffsets.
  std::vector<int32_t> plan(size_t(offsets.numel() + rowToken.numel()));
  ZEROC_RETURN_IF_ERROR(
      cpu::moeReceivedPlanOnHost(counts, local, offsets, rowToken, plan.data(),
                                 plan.data() + offsets.numel()));
  for (auto [dst, src, bytes] :
       {std::tuple{offsets.data, plan.data(), offsets.bytes()},
        std::tuple{rowToken.data, plan.data() + offsets.numel(),
                   rowToken.bytes()}})
    if (bytes > 0)
      ZEROC_RETURN_IF_ERROR(
          cudaStatus(op, "cudaMemcpyAsync of the plan",
                     cudaMemcpyAsync(dst, src, size_t(bytes),
                                     cudaMemcpyHostToDevice, stream)));
  return cudaStatus(op, "cudaStreamSynchronize", cudaStreamSynchronize(stream));
}

Status moeCombineForward(const Tensor &ysorted, const Tensor &weights,
                         const Tensor &rowToken, const Tensor &rowSlot,
                         const Tensor &y, cudaStream_t stream) {
  const char *op = "moe_combine";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkMoeCombineForward(ysorted, weights, rowToken, rowSlot, y));
  int64_t tokens = weights.rows(), k = weights.dim(-1), h = ysorted.dim(1);
  Scratch scratch;
  const int32_t *sorted, *starts;
  ZEROC_RETURN_IF_ERROR(sortByKey(op, rowToken.i32(), tokens * k, tokens,
                                  scratch, sorted, starts, stream));
  if (tokens * h == 0)
    return {};
  sumRowsKernel<<<gridFor(tokens * h), kThreads, 0, stream>>>(
      sorted, starts, ysorted.data, ysorted.dtype, tokens, h, weights.data,
      weights.dtype, rowSlot.i32(), k, y.data, y.dtype);
  return launchStatus(op);
}

Status moeCombineBackward(const Tensor &dy, const Tensor &ysorted,
                          const Tensor &weights, const Tensor &rowToken,
                          const Tensor &rowSlot, const Tensor &dysorted,
                          const Tensor &dweights, cudaStream_t stream) {
  const char *op = "moe_combine_backward";
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeCombineBackward(
      dy, ysorted, weights, rowToken, rowSlot, dysorted, dweights));
  int64_t tokens = weights.rows(), k = weights.dim(-1), h = ysorted.dim(1);
  if (tokens * k == 0)
    return {};
  if (h > 0) {
    scatterGradKernel<<<gridFor(tokens * k * h), kThreads, 0, stream>>>(
        dy.data, dy.dtype, weights.data, weights.dtype, rowToken.i32(),
        rowSlot.i32(), tokens, k, h, dysorted.data, dysorted.dtype);
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
  }
  weightGradKernel<<<rowGrid(tokens * k), kThreads, 0, stream>>>(
      dy.data, dy.dtype, ysorted.data, ysorted.dtype, rowToken.i32(),
      rowSlot.i32(), tokens, k, h, dweights.data, dweights.dtype);
  return launchStatus(op);
}

Status moeExpertsBackward(const Tensor &dysorted, const Tensor &x,
                          const Tensor &w1, const Tensor &w3, const Tensor &w2,
                          const Tensor &offsets, const Tensor &rowToken,
                          const Tensor &h1, const Tensor &h3, const Tensor &dx,
                          const Tensor &dw1, const Tensor &dw3,
                          const Tensor &dw2, KernelContext &ctx,
                          cudaStream_t stream) {
  const char *op = "moe_experts_backward";
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeExpertsBackward(
      dysorted, x, w1, w3, w2, offsets, rowToken, h1, h3, dx, dw1, dw3, dw2));
  int64_t h = x.dim(-1), experts = w1.dim(0), inter = w1.dim(1),
          rows = rowToken.dim(0);
  std::vector<int32_t> off;
  ZEROC_RETURN_IF_ERROR(hostOffsets(op, offsets, rows, stream, off));

  Scratch xsScratch, sScratch, aScratch, daScratch, dh1Scratch, dh3Scratch,
      dx1Scratch, dx3Scratch;
  Tensor xs, s, a, da, dh1, dh3, dx1, dx3;
  ZEROC_RETURN_IF_ERROR(gatherRows(op, x, rowToken, xsScratch, stream, xs));
  DType act = h1.dtype;
  for (auto [scratch, t] :
       {std::pair{&sScratch, &s}, std::pair{&aScratch, &a},
        std::pair{&daScratch, &da}, std::pair{&dh1Scratch, &dh1},
        std::pair{&dh3Scratch, &dh3}})
    ZEROC_RETURN_IF_ERROR(
        scratchTensor(op, *scratch, act, rows, inter, stream, *t));
  ZEROC_RETURN_IF_ERROR(
      scratchTensor(op, dx1Scratch, x.dtype, rows, h, stream, dx1));
  ZEROC_RETURN_IF_ERROR(
      scratchTensor(op, dx3Scratch, x.dtype, rows, h, stream, dx3));

  // a = silu(h1) * h3 again; dW2 = dY^T a and da = dY W2 per expert (an
  // expert without rows gets dW2 = 0 from the empty product).
  ZEROC_RETURN_IF_ERROR(siluForward(h1, s, stream));
  ZEROC_RETURN_IF_ERROR(mul(s, h3, a, stream));
  for (int64_t e = 0; e < experts; ++e) {
    int64_t first = off[size_t(e)], count = off[size_t(e) + 1] - first;
    GemmOperand dye{at(dysorted, first, h), dysorted.dtype, h, false};
    ZEROC_RETURN_IF_ERROR(linearGemm(
        op, ctx, stream, h, inter, count, {dye.data, dye.dtype, h, true},
        {at(a, first, inter), act, inter, false}, nullptr,
        at(dw2.data, dw2.dtype, e, h * inter), dw2.dtype, inter));
    if (count > 0)
      ZEROC_RETURN_IF_ERROR(
          linearGemm(op, ctx, stream, count, inter, h, dye,
                     {at(w2, e, h * inter), w2.dtype, inter, false}, nullptr,
                     at(da.data, act, first, inter), act, inter));
  }
  // The dense chain's mul and silu backwards over all rows.
  ZEROC_RETURN_IF_ERROR(mul(da, h3, dh1, stream));
  ZEROC_RETURN_IF_ERROR(mul(da, s, dh3, stream));
  ZEROC_RETURN_IF_ERROR(siluBackward(h1, dh1, dh1, stream));
  for (int64_t e = 0; e < experts; ++e) {
    int64_t first = off[size_t(e)], count = off[size_t(e) + 1] - first;
    GemmOperand xe{at(xs, first, h), x.dtype, h, false};
    for (auto [dhe, w, dw, dxe] : {std::tuple{&dh1, &w1, &dw1, &dx1},
                                   std::tuple{&dh3, &w3, &dw3, &dx3}}) {
      ZEROC_RETURN_IF_ERROR(
          linearGemm(op, ctx, stream, inter, h, count,
                     {at(*dhe, first, inter), act, inter, true}, xe, nullptr,
                     at(dw->data, dw->dtype, e, inter * h), dw->dtype, h));
      if (count > 0)
        ZEROC_RETURN_IF_ERROR(
            linearGemm(op, ctx, stream, count, h, inter,
                       {at(*dhe, first, inter), act, inter, false},
                       {at(*w, e, inter * h), w->dtype, h, false}, nullptr,
                       at(dxe->data, x.dtype, first, h), x.dtype, h));
    }
  }
  ZEROC_RETURN_IF_ERROR(add(dx1, dx3, dx1, stream));

  // dx[t] = the sum of t's rows, ascending.
  return moeScatterAddRows(dx1, rowToken, dx, stream);
}

Status moeRouterStats(const Tensor &logits, const Tensor &indices,
                      const Tensor &stats, cudaStream_t stream) {
  const char *op = "moe_router_stats";
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeRouterStats(logits, indices, stats));
  if (logits.dtype != DType::F32)
    return {std::string(op) + ": the GPU kernel takes f32 logits, found " +
            cpu::describe(logits)};
  int64_t tokens = logits.rows(), experts = logits.dim(-1), k = indices.dim(-1);
  if (tokens > 0)
    softmaxInPlaceKernel<<<gridFor(tokens), kThreads, 0, stream>>>(
        logits.f32(), tokens, experts);
  routerStatsKernel<<<unsigned(experts), kThreads, 0, stream>>>(
      logits.f32(), indices.i32(), tokens, experts, k, stats.f32());
  return launchStatus(op);
}

Status moeRouterStatsBackward(const Tensor &dstats, const Tensor &logits,
                              const Tensor &dlogits, cudaStream_t stream) {
  const char *op = "moe_router_stats_backward";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkMoeRouterStatsBackward(dstats, logits, dlogits));
  if (logits.dtype != DType::F32)
    return {std::string(op) + ": the GPU kernel takes f32 logits, found " +
            cpu::describe(logits)};
  int64_t tokens = logits.rows(), experts = logits.dim(-1);
  if (tokens == 0)
    return {};
  routerStatsBackwardKernel<<<gridFor(tokens), kThreads, 0, stream>>>(
      dstats.f32(), logits.f32(), tokens, experts, dlogits.data, dlogits.dtype);
  return launchStatus(op);
}

static Status loadBalancing(bool backward, const Tensor &lossOrGrad,
                            const std::vector<Tensor> &stats, int64_t k,
                            double coefficient, const Tensor &out,
                            cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkMoeLoadBalancing(backward, lossOrGrad, stats,
                                                   k, coefficient, out));
  const char *op =
      backward ? "moe_load_balancing_loss_backward" : "moe_load_balancing_loss";
  if (int64_t(stats.size()) > kMaxLoadBalancingLayers)
    return {std::string(op) + ": " + std::to_string(stats.size()) +
            " routers, more than the GPU kernel's " +
            std::to_string(kMaxLoadBalancingLayers)};
  RouterStatsList list{};
  for (size_t l = 0; l < stats.size(); ++l)
    list.layer[l] = stats[l].f32();
  list.count = int64_t(stats.size());
  loadBalancingKernel<<<1, 1, 0, stream>>>(list, stats[0].dim(1), k,
                                           float(coefficient), lossOrGrad.f32(),
                                           out.f32(), backward);
  return launchStatus(op);
}

Status moeLoadBalancingLoss(const Tensor &loss,
                            const std::vector<Tensor> &stats, int64_t k,
                            double coefficient, const Tensor &result,
                            cudaStream_t stream) {
  return loadBalancing(false, loss, stats, k, coefficient, result, stream);
}

Status moeLoadBalancingLossBackward(const Tensor &dloss,
                                    const std::vector<Tensor> &stats, int64_t k,
                                    double coefficient, const Tensor &dstats,
                                    cudaStream_t stream) {
  return loadBalancing(true, dloss, stats, k, coefficient, dstats, stream);
}

} // namespace zeroc::cuda
