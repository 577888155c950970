//===- ModelStats.h - Size, FLOPs and activation memory of a model -*- C++
//-*-===//
//
// What `zeroc stats` reports: the exact parameter count, the training FLOPs
// per token, and the bytes kept for backward per micro-batch, in total and per
// layer. Everything is read off the IR through the model ops' interfaces.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_ANALYSIS_MODELSTATS_H
#define ZEROC_ANALYSIS_MODELSTATS_H

#include "zeroc/Support/Recompute.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zeroc {

/// One row of the per-layer table. A layer is the group of parameters whose
/// names share the prefix up to the first numeric component ("h.3",
/// "layers.3"), or their first component ("wte", "norm", "lm_head").
struct LayerStats {
  std::string name;
  int64_t params = 0;
  int64_t paramBytes = 0;
  int64_t forwardFlops = 0; ///< Per micro-batch.
  int64_t savedBytes = 0;   ///< Kept for backward, per micro-batch.
  /// The kernel family of the layer's attention ("flash", "materialized"),
  /// empty where the layer has none.
  std::string attentionKernel;
};

/// The mixture-of-experts layers of a model (Mixtral), and the planning
/// assumption on how tokens distribute over their experts.
struct MoeStats {
  int64_t layers = 0;  ///< model.moe_experts ops.
  int64_t experts = 0; ///< Per layer (the largest, if they differ).
  int64_t topK = 0;    ///< Experts per token.
  /// Routed (token, slot) rows per layer and micro-batch: tokens * topK.
  int64_t routedRows = 0;
  /// The assumed largest share of the routed rows one expert receives
  /// (1 / experts: uniform), and the worst case, 1 / topK.
  double assumedMaxShare = 0;
  bool uniform() const { return assumedMaxShare * experts <= 1.0 + 1e-9; }
  int64_t assumedMaxRows() const;
  /// Every token sends one slot to the same expert: tokens rows.
  int64_t worstCaseMaxRows() const { return topK ? routedRows / topK : 0; }

  /// Expert parallelism over `ep` ranks, each holding experts / ep of them
  /// (1 when not set: `zeroc stats --ep-size`).
  int64_t expertParallelSize = 1;
  /// The (token, slot) rows of one rank's all-to-all buffer per layer and
  /// micro-batch: a dispatch sends all routedRows of the rank's tokens, and
  /// the busiest rank receives, from each of the `ep` ranks, the rows
  /// routed to its experts: at most (busiest expert's rows) x (experts per
  /// rank), and at most tokens x min(top_k, experts per rank) since a token
  /// sends one slot per expert. The larger of sent and received, under the
  /// assumed share and under the worst case; the combine returns the same
  /// rows, and the backward's two all-to-alls move the same again.
  struct ExchangeRows {
    int64_t assumed = 0;
    int64_t worst = 0;
  };
  ExchangeRows expertParallelRows() const;
};

struct ModelStats {
  std::string name;
  int64_t params = 0; ///< Every parameter (the total).
  /// Of them, a padded vocabulary's padding rows (model.param valid_rows):
  /// zero and never trained, but held and multiplied like the others.
  int64_t paddingParams = 0;
  /// The parameters one token's forward uses: all of them in a dense model;
  /// a mixture of experts counts only the experts a token is routed to.
  /// The FLOPs formula below uses these.
  int64_t activeParams = 0;
  MoeStats moe; ///< layers == 0 for a dense model.
  int64_t paramBytes = 0;
  int64_t batch = 0;     ///< Micro-batch size (tokens argument, dim 0).
  int64_t seqLen = 0;    ///< Sequence length (tokens argument, dim 1).
  int64_t numLayers = 0; ///< Attention layers.
  /// Attention layers by kernel family ("flash" -> 32), in name order.
  std::map<std::string, int64_t> attentionKernels;
  int64_t hiddenSize = 0;   ///< Width of the token embedding.
  std::string dtype;        ///< Element type of the parameters ("bf16", ...).
  int64_t forwardFlops = 0; ///< Per micro-batch, sum over ops.
  /// 3x the forward FLOPs per token (backward costs twice the forward).
  int64_t trainFlopsPerToken = 0;
  /// The usual estimate 6 N + 12 L H S (PaLM, appendix B), N the active
  /// parameters.
  int64_t formulaFlopsPerToken = 0;
  /// Its attention term, 12 L H S, with H = heads * head_dim.
  int64_t attentionFlopsPerToken = 0;
  int64_t savedBytes = 0; ///< Kept for backward, per micro-batch.
  /// The recomputation the saved bytes assume (none unless
  /// applyRecomputation, Pipeline.h, says otherwise).
  RecomputePolicy recompute;
  std::vector<LayerStats> layers;

  int64_t tokens() const { return batch * seqLen; }
};

/// The layer a parameter belongs to (see LayerStats).
std::string layerOfParameter(llvm::StringRef name);

/// The number of a numbered (transformer) layer, 3 for "h.3" or "layers.3";
/// none for "wte", "ln_f" or "lm_head". Recomputation applies to these.
std::optional<int64_t> layerNumber(llvm::StringRef layer);

/// The function `forward`, or the module's only function. Emits an error on
/// the module otherwise.
mlir::FailureOr<mlir::Operation *> findForwardFunction(mlir::ModuleOp module);

/// Computes the statistics; emits a diagnostic and fails on IR that is not a
/// model (no forward function, unexpected arguments).
mlir::FailureOr<ModelStats> computeModelStats(mlir::ModuleOp module);

/// Bytes per layer of the forward values the backward of a training step
/// (@micro_step, after zero-expand-training-step) reads: what stays alive
/// from forward to backward under the step's recomputation policy. A value
/// counts in the layer of its first forward reader, else of its producer;
/// parameters do not count. Without recomputation it equals each layer's
/// LayerStats::savedBytes (ModelsTest).
mlir::FailureOr<std::map<std::string, int64_t>>
savedBytesOfTrainingStep(mlir::ModuleOp module);

nlohmann::json toJson(const ModelStats &stats);

/// The human-readable report of `zeroc stats`.
std::string formatModelStats(const ModelStats &stats);

} // namespace zeroc

#endif // ZEROC_ANALYSIS_MODELSTATS_H
