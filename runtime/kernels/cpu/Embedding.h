//===- Embedding.h - Token and learned position embeddings ------*- C++ -*-===//
//
// embedding:           out[b, s, :] = table[ids[b, s], :]
// embedding_backward:  dtable[v, :] = sum of dy[b, s, :] over ids[b, s] == v
// position_embedding:  out[b, s, :] = table[s, :]
// position_embedding_backward:
//                      dtable[s, :] = sum over b of dy[b, s, :] for s < seq,
//                      zero for the rows the forward did not read
//
// Lookups are copies (one rounding when the dtypes differ); the backward sums
// are taken in f32 and rounded once into the table's dtype. Nothing is saved
// for backward but the token ids, which are an SSA value.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_KERNELS_CPU_EMBEDDING_H
#define ZEROC_RUNTIME_KERNELS_CPU_EMBEDDING_H

#include "cpu/Tensor.h"

namespace zeroc::cpu {

/// table [vocab, hidden], ids [batch, seq] i32, out [batch, seq, hidden].
/// An id outside [0, vocab) is an error, reported before anything is written.
Status embeddingForward(const Tensor &table, const Tensor &ids,
                        const Tensor &out);

/// dy [batch, seq, hidden], ids [batch, seq] i32, dtable [vocab, hidden]
/// (overwritten). Deterministic: each row sums its tokens in position order.
Status embeddingBackward(const Tensor &dy, const Tensor &ids,
                         const Tensor &dtable);

/// table [max_positions, hidden], out [batch, seq, hidden], seq <=
/// max_positions: out[b, s] = table[s], or with `documents`
/// (checkDocumentStarts; --reset-position-ids) table[s - documents[b, s]],
/// each document's positions counted from 0.
Status positionEmbeddingForward(const Tensor &table, const Tensor &out,
                                const Tensor *documents = nullptr);

/// dy [batch, seq, hidden], dtable [max_positions, hidden] (overwritten):
/// row p sums the dy of the tokens at position p, in (batch, seq) order.
Status positionEmbeddingBackward(const Tensor &dy, const Tensor &dtable,
                                 const Tensor *documents = nullptr);

/// The argument checks of the kernels above, shared with the CUDA backend:
/// dtypes and shapes only. The CPU kernels then check the ids' values
/// (`checkIdsInRange`), which a device cannot do without a sync.
Status checkEmbeddingForward(const Tensor &table, const Tensor &ids,
                             const Tensor &out);
Status checkEmbeddingBackward(const Tensor &dy, const Tensor &ids,
                              const Tensor &dtable);
Status checkPositionEmbeddingForward(const Tensor &table, const Tensor &out);
Status checkPositionEmbeddingBackward(const Tensor &dy, const Tensor &dtable);
/// Every id in [0, vocab) for a table [vocab, hidden] (host data).
Status checkIdsInRange(const char *op, const Tensor &table, const Tensor &ids);

} // namespace zeroc::cpu

#endif // ZEROC_RUNTIME_KERNELS_CPU_EMBEDDING_H
