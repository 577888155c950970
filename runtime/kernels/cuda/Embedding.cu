//===- Embedding.cu - Token and position embeddings on the GPU ------------===//

#include "cuda/Embedding.h"

#include "cpu/Embedding.h"
#include "cuda/Device.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <climits>

namespace zeroc::cuda {

namespace {

// One block per token (grid-stride), threads along the hidden dimension.
__global__ void embeddingForwardKernel(const void *table, DType tableType,
                                       const int32_t *ids, int64_t vocab,
                                       void *out, DType outType, int64_t tokens,
                                       int64_t hidden) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    int32_t id = ids[t];
    bool valid = id >= 0 && id < vocab;
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x)
      storeFromFloat(out, outType, t * hidden + h,
                     valid ? loadAsFloat(table, tableType, id * hidden + h)
                           : quietNaN());
  }
}

// Sort keys: the id, or `vocab` (after every valid id) for an invalid one.
__global__ void sortKeysKernel(const int32_t *ids, int64_t tokens,
                               int64_t vocab, uint32_t *keys,
                               int32_t *positions) {
  for (int64_t t = globalThread(); t < tokens; t += globalThreads()) {
    int32_t id = ids[t];
    keys[t] = id >= 0 && id < vocab ? uint32_t(id) : uint32_t(vocab);
    positions[t] = int32_t(t);
  }
}

// One block per sorted position that starts a run of equal keys: the block
// finds the run's end, then sums the run's dy rows in position order.
__global__ void embeddingBackwardKernel(const uint32_t *keys,
                                        const int32_t *positions,
                                        int64_t tokens, int64_t vocab,
                                        const void *dy, DType dyType,
                                        void *dtable, DType tableType,
                                        int64_t hidden) {
  for (int64_t start = blockIdx.x; start < tokens; start += gridDim.x) {
    uint32_t key = keys[start];
    // Uniform over the block: every thread skips or none does.
    if (key >= vocab || (start > 0 && keys[start - 1] == key))
      continue;
    // Keys are sorted, so the matches in any window past `start` are a
    // prefix of it.
    int64_t end = start;
    while (true) {
      int64_t j = end + threadIdx.x;
      int matches = __syncthreads_count(j < tokens && keys[j] == key);
      end += matches;
      if (matches < int(blockDim.x))
        break;
    }
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
      float sum = 0.0f;
      for (int64_t j = start; j < end; ++j)
        sum += loadAsFloat(dy, dyType, int64_t(positions[j]) * hidden + h);
      storeFromFloat(dtable, tableType, int64_t(key) * hidden + h, sum);
    }
  }
}

__global__ void positionForwardKernel(const void *table, DType tableType,
                                      void *out, DType outType, int64_t batch,
                                      int64_t seq, int64_t hidden) {
  int64_t n = batch * seq * hidden, perBatch = seq * hidden;
  for (int64_t e = globalThread(); e < n; e += globalThreads())
    storeFromFloat(out, outType, e,
                   loadAsFloat(table, tableType, e % perBatch));
}

__global__ void positionBackwardKernel(const void *dy, DType dyType,
                                       void *dtable, DType tableType,
                                       int64_t batch, int64_t seq,
                                       int64_t hidden) {
  int64_t perBatch = seq * hidden;
  for (int64_t e = globalThread(); e < perBatch; e += globalThreads()) {
    float sum = 0.0f;
    for (int64_t b = 0; b < batch; ++b)
      sum += loadAsFloat(dy, dyType, b * perBatch + e);
    storeFromFloat(dtable, tableType, e, sum);
  }
}

size_t roundUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

} // namespace

Status embeddingForward(const Tensor &table, const Tensor &ids,
                        const Tensor &out, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkEmbeddingForward(table, ids, out));
  int64_t tokens = ids.numel(), hidden = table.dim(1);
  if (tokens == 0 || hidden == 0)
    return {};
  embeddingForwardKernel<<<rowGrid(tokens), kThreads, 0, stream>>>(
      table.data, table.dtype, ids.i32(), table.dim(0), out.data, out.dtype,
      tokens, hidden);
  return launchStatus("embedding");
}

Status embeddingBackward(const Tensor &dy, const Tensor &ids,
                         const Tensor &dtable, cudaStream_t stream) {
  const char *op = "embedding_backward";
  ZEROC_RETURN_IF_ERROR(cpu::checkEmbeddingBackward(dy, ids, dtable));
  int64_t vocab = dtable.dim(0), hidden = dtable.dim(1), tokens = ids.numel();
  if (tokens > INT_MAX)
    return {std::string(op) + ": " + std::to_string(tokens) +
            " tokens exceed what the device sort takes (" +
            std::to_string(INT_MAX) + ")"};
  // Rows no token names stay zero.
  if (dtable.numel() > 0)
    ZEROC_RETURN_IF_ERROR(cudaStatus(
        op, "cudaMemsetAsync",
        cudaMemsetAsync(dtable.data, 0, size_t(dtable.bytes()), stream)));
  if (tokens == 0 || hidden == 0)
    return {};

  int endBit = 1;
  while (endBit < 32 && (uint64_t(1) << endBit) <= uint64_t(vocab))
    ++endBit;
  size_t sortBytes = 0;
  ZEROC_RETURN_IF_ERROR(cudaStatus(
      op, "cub::DeviceRadixSort::SortPairs (size query)",
      cub::DeviceRadixSort::SortPairs(
          nullptr, sortBytes, static_cast<const uint32_t *>(nullptr),
          static_cast<uint32_t *>(nullptr),
          static_cast<const int32_t *>(nullptr),
          static_cast<int32_t *>(nullptr), int(tokens), 0, endBit, stream)));
  // One allocation: keys and positions before and after the sort, then the
  // sort's temporary storage.
  size_t array = roundUp256(size_t(tokens) * 4);
  Scratch scratch;
  ZEROC_RETURN_IF_ERROR(scratch.allocate(op, 4 * array + sortBytes, stream));
  char *base = scratch.get<char>();
  auto *keys = reinterpret_cast<uint32_t *>(base);
  auto *positions = reinterpret_cast<int32_t *>(base + array);
  auto *sortedKeys = reinterpret_cast<uint32_t *>(base + 2 * array);
  auto *sortedPositions = reinterpret_cast<int32_t *>(base + 3 * array);
  sortKeysKernel<<<gridFor(tokens), kThreads, 0, stream>>>(
      ids.i32(), tokens, vocab, keys, positions);
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  ZEROC_RETURN_IF_ERROR(cudaStatus(
      op, "cub::DeviceRadixSort::SortPairs",
      cub::DeviceRadixSort::SortPairs(base + 4 * array, sortBytes, keys,
                                      sortedKeys, positions, sortedPositions,
                                      int(tokens), 0, endBit, stream)));
  embeddingBackwardKernel<<<rowGrid(tokens), kThreads, 0, stream>>>(
      sortedKeys, sortedPositions, tokens, vocab, dy.data, dy.dtype,
      dtable.data, dtable.dtype, hidden);
  return launchStatus(op);
}

Status positionEmbeddingForward(const Tensor &table, const Tensor &out,
                                cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkPositionEmbeddingForward(table, out));
  int64_t n = out.numel();
  if (n == 0)
    return {};
  positionForwardKernel<<<gridFor(n), kThreads, 0, stream>>>(
      table.data, table.dtype, out.data, out.dtype, out.dim(0), out.dim(1),
      out.dim(2));
  return launchStatus("position_embedding");
}

Status positionEmbeddingBackward(const Tensor &dy, const Tensor &dtable,
                                 cudaStream_t stream) {
  const char *op = "position_embedding_backward";
  ZEROC_RETURN_IF_ERROR(cpu::checkPositionEmbeddingBackward(dy, dtable));
  int64_t batch = dy.dim(0), seq = dy.dim(1), hidden = dy.dim(2);
  if (seq * hidden > 0) {
    positionBackwardKernel<<<gridFor(seq * hidden), kThreads, 0, stream>>>(
        dy.data, dy.dtype, dtable.data, dtable.dtype, batch, seq, hidden);
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
  }
  int64_t tail = (dtable.dim(0) - seq) * hidden;
  if (tail == 0)
    return {};
  return cudaStatus(
      op, "cudaMemsetAsync",
      cudaMemsetAsync(offsetData(dtable, seq * hidden), 0,
                      size_t(tail * bytesPerElement(dtable.dtype)), stream));
}

} // namespace zeroc::cuda
