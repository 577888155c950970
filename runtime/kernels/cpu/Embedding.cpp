//===- Embedding.cpp - Token and learned position embeddings --------------===//

#include "cpu/Embedding.h"
#include "cpu/Parallel.h"

#include <algorithm>

namespace zeroc::cpu {

// The shape rules shared by the token embedding's forward and backward:
// `table` [vocab, hidden], `ids` [batch, seq], `act` [batch, seq, hidden].
static Status checkEmbedding(const char *op, const Tensor &table,
                             const char *tableName, const Tensor &ids,
                             const Tensor &act, const char *actName) {
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkFloat(op, tableName, table), checkRank(op, tableName, table, 2),
       checkIds(op, "ids", ids), checkRank(op, "ids", ids, 2),
       checkFloat(op, actName, act), checkRank(op, actName, act, 3)}));
  std::vector<int64_t> expected = {ids.dim(0), ids.dim(1), table.dim(1)};
  if (act.shape != expected)
    return {std::string(op) + ": " + actName +
            " must be [batch, seq, hidden] of ids " + describe(ids) +
            " and table " + describe(table) + ", found " + describe(act)};
  return {};
}

Status checkIdsInRange(const char *op, const Tensor &table, const Tensor &ids) {
  const int32_t *id = ids.i32();
  for (int64_t i = 0, n = ids.numel(); i < n; ++i)
    if (id[i] < 0 || id[i] >= table.dim(0))
      return {std::string(op) + ": token id " + std::to_string(id[i]) +
              " at position " + std::to_string(i) + " is outside [0, " +
              std::to_string(table.dim(0)) + ")"};
  return {};
}

Status checkEmbeddingForward(const Tensor &table, const Tensor &ids,
                             const Tensor &out) {
  return checkEmbedding("embedding", table, "table", ids, out, "out");
}

Status checkEmbeddingBackward(const Tensor &dy, const Tensor &ids,
                              const Tensor &dtable) {
  return checkEmbedding("embedding_backward", dtable, "dtable", ids, dy, "dy");
}

Status embeddingForward(const Tensor &table, const Tensor &ids,
                        const Tensor &out) {
  ZEROC_RETURN_IF_ERROR(checkEmbeddingForward(table, ids, out));
  ZEROC_RETURN_IF_ERROR(checkIdsInRange("embedding", table, ids));
  int64_t hidden = table.dim(1);
  const int32_t *id = ids.i32();
  parallelFor(ids.numel(), hidden, [&](int64_t t) {
    copyElements(table, id[t] * hidden, out, t * hidden, hidden);
  });
  return {};
}

Status embeddingBackward(const Tensor &dy, const Tensor &ids,
                         const Tensor &dtable) {
  ZEROC_RETURN_IF_ERROR(checkEmbeddingBackward(dy, ids, dtable));
  ZEROC_RETURN_IF_ERROR(checkIdsInRange("embedding_backward", dtable, ids));
  int64_t vocab = dtable.dim(0), hidden = dtable.dim(1), tokens = ids.numel();
  const int32_t *id = ids.i32();
  // Bucket the token positions by id (a counting sort), so that each table
  // row is summed in f32 and rounded once, in position order.
  ScratchVector<int64_t> start(vocab + 1, 0), order(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    ++start[id[t] + 1];
  for (int64_t v = 0; v < vocab; ++v)
    start[v + 1] += start[v];
  ScratchVector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t t = 0; t < tokens; ++t)
    order[next[id[t]]++] = t;

  // Table rows on the pool: each is its own sum, in position order.
  parallelChunks(vocab, 64, hidden, [&](int64_t first, int64_t count) {
    ScratchVector<float> sum(hidden), row(hidden);
    for (int64_t v = first; v < first + count; ++v) {
      int64_t begin = start[v], end = start[v + 1];
      if (begin == end) {
        zeroElements(dtable, v * hidden, hidden);
        continue;
      }
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t k = begin; k < end; ++k) {
        loadF32(dy, order[k] * hidden, hidden, row.data());
        for (int64_t h = 0; h < hidden; ++h)
          sum[h] += row[h];
      }
      storeF32(dtable, v * hidden, hidden, sum.data());
    }
  });
  return {};
}

// `table` [max_positions, hidden], `act` [batch, seq, hidden].
static Status checkPositionEmbedding(const char *op, const Tensor &table,
                                     const char *tableName, const Tensor &act,
                                     const char *actName) {
  ZEROC_RETURN_IF_ERROR(firstError(
      {checkFloat(op, tableName, table), checkRank(op, tableName, table, 2),
       checkFloat(op, actName, act), checkRank(op, actName, act, 3)}));
  if (act.dim(2) != table.dim(1) || act.dim(1) > table.dim(0))
    return {std::string(op) + ": " + actName +
            " must be [batch, seq, hidden] with seq <= max_positions of " +
            tableName + " " + describe(table) + ", found " + describe(act)};
  return {};
}

Status checkPositionEmbeddingForward(const Tensor &table, const Tensor &out) {
  return checkPositionEmbedding("position_embedding", table, "table", out,
                                "out");
}

Status checkPositionEmbeddingBackward(const Tensor &dy, const Tensor &dtable) {
  return checkPositionEmbedding("position_embedding_backward", dtable, "dtable",
                                dy, "dy");
}

Status positionEmbeddingForward(const Tensor &table, const Tensor &out,
                                const Tensor *documents) {
  ZEROC_RETURN_IF_ERROR(checkPositionEmbeddingForward(table, out));
  int64_t batch = out.dim(0), seq = out.dim(1), hidden = out.dim(2);
  ZEROC_RETURN_IF_ERROR(
      checkDocumentStarts("position_embedding", documents, batch, seq));
  for (int64_t b = 0; b < batch; ++b) {
    if (!documents) {
      copyElements(table, 0, out, b * seq * hidden, seq * hidden);
      continue;
    }
    const int32_t *starts = documents->i32() + b * seq;
    for (int64_t s = 0; s < seq; ++s)
      copyElements(table, (s - starts[s]) * hidden, out, (b * seq + s) * hidden,
                   hidden);
  }
  return {};
}

Status positionEmbeddingBackward(const Tensor &dy, const Tensor &dtable,
                                 const Tensor *documents) {
  ZEROC_RETURN_IF_ERROR(checkPositionEmbeddingBackward(dy, dtable));
  int64_t batch = dy.dim(0), seq = dy.dim(1), hidden = dy.dim(2);
  ZEROC_RETURN_IF_ERROR(checkDocumentStarts("position_embedding_backward",
                                            documents, batch, seq));
  if (documents) {
    // Position p gathers every token at p, whichever row and offset.
    ScratchVector<float> sums(seq * hidden, 0.0f), row(hidden);
    const int32_t *starts = documents->i32();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s) {
        loadF32(dy, (b * seq + s) * hidden, hidden, row.data());
        float *sum = &sums[(s - starts[b * seq + s]) * hidden];
        for (int64_t h = 0; h < hidden; ++h)
          sum[h] += row[h];
      }
    storeF32(dtable, 0, seq * hidden, sums.data());
    zeroElements(dtable, seq * hidden, (dtable.dim(0) - seq) * hidden);
    return {};
  }
  parallelChunks(seq, 8, batch * hidden, [&](int64_t first, int64_t count) {
    ScratchVector<float> sum(hidden), row(hidden);
    for (int64_t s = first; s < first + count; ++s) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t b = 0; b < batch; ++b) {
        loadF32(dy, (b * seq + s) * hidden, hidden, row.data());
        for (int64_t h = 0; h < hidden; ++h)
          sum[h] += row[h];
      }
      storeF32(dtable, s * hidden, hidden, sum.data());
    }
  });
  zeroElements(dtable, seq * hidden, (dtable.dim(0) - seq) * hidden);
  return {};
}

} // namespace zeroc::cpu
