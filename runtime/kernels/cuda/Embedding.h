//===- Embedding.h - Token and position embeddings on the GPU ---*- C++ -*-===//
//
// cpu/Embedding.h on device data, same shape checks and messages. The ids
// are device data, which a kernel cannot check without a sync: an id outside
// [0, vocab) gives a row of NaNs in the forward (so the loss shows it) and
// contributes nothing in the backward.
//
// embedding_backward is deterministic and sums each table row in position
// order, like the CPU: a stable radix sort (CUB) of (id, position) pairs,
// then one block per run of equal ids adds that run's dy rows in f32 and
// rounds once. No atomics; the f32 sums equal the CPU's bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CUDA_EMBEDDING_H
#define ZEROC_RUNTIME_KERNELS_CUDA_EMBEDDING_H

#include "cuda/Types.h"

namespace zeroc::cuda {

/// table [vocab, hidden], ids [batch, seq] i32, out [batch, seq, hidden].
Status embeddingForward(const Tensor &table, const Tensor &ids,
                        const Tensor &out, cudaStream_t stream);

/// dy [batch, seq, hidden], ids [batch, seq] i32, dtable [vocab, hidden]
/// (overwritten).
Status embeddingBackward(const Tensor &dy, const Tensor &ids,
                         const Tensor &dtable, cudaStream_t stream);

/// table [max_positions, hidden], out [batch, seq, hidden].
Status positionEmbeddingForward(const Tensor &table, const Tensor &out,
                                cudaStream_t stream);

/// dy [batch, seq, hidden], dtable [max_positions, hidden] (overwritten;
/// rows from seq on are zero). Sums over the batch in order.
Status positionEmbeddingBackward(const Tensor &dy, const Tensor &dtable,
                                 cudaStream_t stream);

/// The two above with the CPU kernels' `documents` (--reset-position-ids):
/// refused unless null (refuseDocuments).
inline Status positionEmbeddingForward(const Tensor &table, const Tensor &out,
                                       const Tensor *documents,
                                       cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(refuseDocuments("position_embedding", documents));
  return positionEmbeddingForward(table, out, stream);
}
inline Status positionEmbeddingBackward(const Tensor &dy, const Tensor &dtable,
                                        const Tensor *documents,
                                        cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(
      refuseDocuments("position_embedding_backward", documents));
  return positionEmbeddingBackward(dy, dtable, stream);
}

} // namespace zeroc::cuda

#endif // ZEROC_RUNTIME_KERNELS_CUDA_EMBEDDING_H
