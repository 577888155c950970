//===- ModelLimits.cpp - What zeroc derives from a shape must fit 64 bits -===//
//
// The per-key caps of a Hugging Face config are checked where the keys are
// read (HFConfig.cpp); this checks what they make together with the batch
// shape: tokens per micro-batch, the FLOPs and the activation bytes of one
// micro-batch, each computed in floating point so that the check itself
// cannot overflow.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Models/ModelSpec.h"
#include "zeroc/Support/Format.h"
#include "zeroc/Support/Limits.h"

#include <cstdio>

namespace zeroc {

namespace {

std::string approx(long double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3Lg", x);
  return buf;
}

} // namespace

std::optional<Diagnostic> checkModelScale(const ModelSpec &spec) {
  const std::string where = " (docs/model-dialect.md, \"Limits\")";
  if (spec.seqLen > limits::kMaxPositions)
    return Diagnostic{"", 0, 0,
                      "the sequence length " + std::to_string(spec.seqLen) +
                          " is above zeroc's limit of " +
                          std::to_string(limits::kMaxPositions) + where};
  long double tokens = (long double)spec.microBatch * (long double)spec.seqLen;
  if (tokens > (long double)limits::kMaxMicroBatchTokens)
    return Diagnostic{"", 0, 0,
                      "a micro-batch of " + std::to_string(spec.microBatch) +
                          " x " + std::to_string(spec.seqLen) + " = " +
                          approx(tokens) +
                          " tokens (--micro-batch x --seq-len) is above "
                          "zeroc's limit of " +
                          std::to_string(limits::kMaxMicroBatchTokens) + where};
  // Upper bounds, not estimates: every parameter in a matmul (6 FLOPs per
  // parameter and token, forward and backward) plus attention's two matmuls
  // over the whole sequence, recomputed once.
  long double h = spec.hiddenSize, i = spec.intermediateSize,
              v = spec.paddedVocabSize(), layers = spec.numLayers,
              q = (long double)spec.numHeads * spec.headDim,
              kv = (long double)spec.numKVHeads * spec.headDim,
              seq = spec.seqLen, heads = spec.numHeads;
  long double params =
      2 * v * h + spec.maxPositions * h +
      layers * (4 * h * q + 2 * h * kv + 4 * h * i + 8 * h + 4 * i + 2 * q);
  long double flops = 8 * params * tokens + 16 * layers * tokens * seq * q;
  const long double cap = (long double)limits::kMaxCount;
  if (params > cap || flops > cap)
    return Diagnostic{
        "", 0, 0,
        "the model's training FLOPs per micro-batch, about " + approx(flops) +
            ", are above what zeroc counts in 64 bits (2^62)" + where};
  // Activations: a generous count of the values each layer saves, with the
  // attention scores when they are materialized.
  long double perLayer = tokens * (32 * h + 8 * i + 8 * q + 4 * kv);
  if (spec.attentionKernel == AttentionKernel::Materialized)
    perLayer += 4 * tokens * seq * heads;
  long double bytes = 4 * (layers * perLayer + 4 * tokens * v);
  if (bytes > cap)
    return Diagnostic{"", 0, 0,
                      "the model's activations per micro-batch, about " +
                          approx(bytes) +
                          " bytes, are above what zeroc counts in 64 bits "
                          "(2^62)" +
                          where};
  return std::nullopt;
}

} // namespace zeroc
