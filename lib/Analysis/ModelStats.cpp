//===- ModelStats.cpp - Size, FLOPs and activation memory of a model ------===//

#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Support/ExpertParallel.h"

#include "model/ModelOps.h"
#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/DType.h"
#include "zeroc/Support/Format.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>

using namespace mlir;
using namespace zeroc::model;

namespace zeroc {

std::string layerOfParameter(llvm::StringRef name) {
  llvm::SmallVector<llvm::StringRef> parts;
  name.split(parts, '.');
  for (size_t i = 0; i < parts.size(); ++i)
    if (!parts[i].empty() && llvm::all_of(parts[i], llvm::isDigit))
      return llvm::join(llvm::ArrayRef(parts).take_front(i + 1), ".");
  return parts.size() > 1 ? parts.front().str() : name.str();
}

std::optional<int64_t> layerNumber(llvm::StringRef layer) {
  llvm::StringRef last = layer.substr(layer.rfind('.') + 1);
  int64_t number = 0;
  if (last.empty() || !llvm::all_of(last, llvm::isDigit) ||
      last.getAsInteger(10, number))
    return std::nullopt;
  return number;
}

FailureOr<Operation *> findForwardFunction(ModuleOp module) {
  if (auto forward = module.lookupSymbol<func::FuncOp>("forward"))
    return forward.getOperation();
  auto funcs = llvm::to_vector(module.getOps<func::FuncOp>());
  if (funcs.size() == 1)
    return funcs.front().getOperation();
  return module.emitError()
         << "expected a function named 'forward' (or exactly one function), "
            "found "
         << funcs.size() << " functions and none named 'forward'";
}

namespace {

/// Attributes ops to layer rows: a param_ref to its parameter's layer, any
/// other op to the latest layer among its operands', and an op fed only by
/// the function arguments to a pseudo-layer "(inputs)".
class LayerAttribution {
public:
  /// `layerFor` numbers a layer name, creating its row on first sight.
  explicit LayerAttribution(std::function<unsigned(llvm::StringRef)> layerFor)
      : layerFor(std::move(layerFor)) {}

  unsigned attribute(Operation *op) {
    if (auto ref = dyn_cast<ParamRefOp>(op)) {
      unsigned layer = layerFor(layerOfParameter(ref.getParam()));
      valueLayer[ref.getResult()] = layer;
      return layer;
    }
    int layer = -1;
    for (Value operand : op->getOperands()) {
      auto it = valueLayer.find(operand);
      if (it != valueLayer.end())
        layer = std::max(layer, int(it->second));
    }
    if (layer < 0) {
      if (!inputs)
        inputs = layerFor("(inputs)");
      layer = *inputs;
    }
    for (Value result : op->getResults())
      valueLayer[result] = layer;
    return layer;
  }

private:
  std::function<unsigned(llvm::StringRef)> layerFor;
  llvm::DenseMap<Value, unsigned> valueLayer;
  std::optional<unsigned> inputs;
};

} // namespace

FailureOr<ModelStats> computeModelStats(ModuleOp module) {
  ModelStats stats;
  stats.name = module.getSymName() ? module.getSymName()->str() : "model";

  // Layers are numbered in order of first appearance: parameters first, in
  // declaration order, so the table reads top to bottom like the model.
  std::vector<LayerStats> layers;
  llvm::StringMap<unsigned> layerIndex;
  auto layerFor = [&](llvm::StringRef key) -> unsigned {
    auto [it, inserted] = layerIndex.try_emplace(key, layers.size());
    if (inserted) {
      layers.emplace_back();
      layers.back().name = key.str();
    }
    return it->second;
  };
  for (ParamOp param : module.getOps<ParamOp>()) {
    LayerStats &layer = layers[layerFor(layerOfParameter(param.getSymName()))];
    layer.params += param.getNumElements();
    layer.paramBytes += tensorBytes(param.getType());
    stats.params += param.getNumElements();
    if (std::optional<int64_t> rows = param.getValidRows())
      stats.paddingParams += param.getNumElements() /
                             param.getTensorType().getDimSize(0) *
                             (param.getTensorType().getDimSize(0) - *rows);
    if (stats.dtype.empty())
      if (auto dt = toDType(param.getTensorType().getElementType()))
        stats.dtype = std::string(dtypeName(*dt));
    stats.paramBytes += tensorBytes(param.getType());
  }

  FailureOr<Operation *> found = findForwardFunction(module);
  if (failed(found))
    return failure();
  auto forward = cast<func::FuncOp>(*found);
  auto args = forward.getArgumentTypes();
  auto tokens = args.empty() ? RankedTensorType()
                             : dyn_cast<RankedTensorType>(args.front());
  if (!tokens || tokens.getRank() != 2 || !tokens.hasStaticShape())
    return forward.emitError()
           << "expected the first argument of @" << forward.getSymName()
           << " to be the token ids, tensor<BATCHxSEQxi32>, found "
           << (args.empty() ? Type() : args.front());
  stats.batch = tokens.getDimSize(0);
  stats.seqLen = tokens.getDimSize(1);

  // An op belongs to the latest layer among its operands' layers; parameters
  // carry the layer of their name. Ops fed only by the function arguments
  // fall into the first layer that follows.
  llvm::DenseSet<Value> saved;
  int64_t inactiveParams = 0;
  LayerAttribution attribution(layerFor);
  forward.walk([&](Operation *op) {
    unsigned layer = attribution.attribute(op);
    if (isa<ParamRefOp>(op))
      return;

    LayerStats &row = layers[layer];
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      row.forwardFlops += cost.getForwardFlops();
      stats.forwardFlops += cost.getForwardFlops();
    }
    if (auto embedding = dyn_cast<EmbeddingOp>(op);
        embedding && !stats.hiddenSize)
      stats.hiddenSize =
          cast<RankedTensorType>(embedding.getTable().getType()).getDimSize(1);
    if (auto attention = dyn_cast<CausalAttentionOp>(op)) {
      ++stats.numLayers;
      std::string kernel =
          stringifyAttentionKernel(attention.getKernel()).str();
      ++stats.attentionKernels[kernel];
      row.attentionKernel =
          row.attentionKernel.empty() || row.attentionKernel == kernel
              ? kernel
              : "mixed";
      stats.attentionFlopsPerToken +=
          12 * stats.seqLen * attention.getNumHeads() * attention.getHeadDim();
    }
    if (auto experts = dyn_cast<MoeExpertsOp>(op)) {
      // A token uses top_k of the experts' stacked weights.
      int64_t e = experts.getNumExperts(), k = experts.getTopK();
      int64_t perExpert = 0;
      for (Value w : {experts.getW1(), experts.getW3(), experts.getW2()})
        perExpert += cast<RankedTensorType>(w.getType()).getNumElements() / e;
      inactiveParams += (e - k) * perExpert;
      ++stats.moe.layers;
      stats.moe.experts = std::max(stats.moe.experts, e);
      stats.moe.topK = std::max(stats.moe.topK, k);
      stats.moe.routedRows = stats.tokens() * k;
      stats.moe.assumedMaxShare =
          std::max(stats.moe.assumedMaxShare, experts.getAssumedMaxShare());
    }
    if (auto keeps = dyn_cast<SavesForBackwardOpInterface>(op)) {
      llvm::SmallVector<Value> values;
      keeps.getSavedValues(values);
      int64_t bytes = keeps.getSavedInternalBytes();
      for (Value v : values)
        if (!v.getDefiningOp<ParamRefOp>() && saved.insert(v).second)
          bytes += tensorBytes(v.getType());
      row.savedBytes += bytes;
      stats.savedBytes += bytes;
    }
  });

  int64_t tokenCount = stats.tokens();
  stats.trainFlopsPerToken =
      tokenCount ? 3 * stats.forwardFlops / tokenCount : 0;
  // Every parameter is active but the experts a token is not routed to.
  stats.activeParams = stats.params - inactiveParams;
  stats.formulaFlopsPerToken =
      6 * stats.activeParams + stats.attentionFlopsPerToken;
  // Drop layers that hold nothing (an unused "(inputs)" row).
  for (LayerStats &layer : layers)
    if (layer.params || layer.forwardFlops || layer.savedBytes)
      stats.layers.push_back(std::move(layer));
  return stats;
}

FailureOr<std::map<std::string, int64_t>>
savedBytesOfTrainingStep(ModuleOp module) {
  auto step = module.lookupSymbol<func::FuncOp>("micro_step");
  if (!step || step.isExternal())
    return module.emitError() << "expected a training step (@micro_step, after "
                                 "zero-expand-training-step)";
  Operation *seed = nullptr;
  step.walk([&](BackwardSeedOp op) { seed = op; });
  if (!seed)
    return step.emitError() << "@micro_step has no model.backward_seed";

  std::vector<std::string> names;
  llvm::StringMap<unsigned> index;
  LayerAttribution attribution([&](llvm::StringRef key) {
    auto [it, inserted] = index.try_emplace(key, names.size());
    if (inserted)
      names.push_back(key.str());
    return it->second;
  });
  // Each forward value backward reads, counted in the layer of its first
  // forward reader (computeModelStats counts a value in the layer of the
  // first op that saves it, which reads it first), or of its producer.
  llvm::DenseMap<Value, unsigned> firstReader;
  llvm::SmallVector<std::pair<Value, unsigned>> produced;
  // The token ids and targets count like computeModelStats counts them,
  // where an op saves them (embedding, cross-entropy).
  for (Value arg : step.getArguments())
    produced.push_back({arg, ~0u});
  for (Operation &op : step.getBody().front()) {
    if (&op == seed)
      break;
    unsigned layer = attribution.attribute(&op);
    for (Value operand : op.getOperands())
      firstReader.try_emplace(operand, layer);
    if (!isa<ParamRefOp>(op))
      for (Value result : op.getResults())
        produced.push_back({result, layer});
  }
  std::map<std::string, int64_t> bytes;
  for (auto [value, producer] : produced) {
    bool readByBackward = llvm::any_of(value.getUsers(), [&](Operation *user) {
      return !isa<func::ReturnOp>(user) && !user->isBeforeInBlock(seed);
    });
    if (!readByBackward)
      continue;
    auto it = firstReader.find(value);
    if (it == firstReader.end() && producer == ~0u)
      continue; // An argument only the backward reads.
    unsigned layer = it != firstReader.end() ? it->second : producer;
    bytes[names[layer]] += tensorBytes(value.getType());
  }
  return bytes;
}

int64_t MoeStats::assumedMaxRows() const {
  return busiestExpertRows(assumedMaxShare, routedRows);
}

MoeStats::ExchangeRows MoeStats::expertParallelRows() const {
  auto buffer = [&](int64_t busiestRows) {
    return std::max(routedRows, expertParallelReceivedRows(
                                    routedRows, topK, experts,
                                    expertParallelSize, busiestRows));
  };
  return {buffer(assumedMaxRows()), buffer(worstCaseMaxRows())};
}

/// Why the token distribution matters, wherever the assumption is printed.
static const char *kDistributionNote =
    "memory is exact whatever the distribution (token-sorted dispatch: "
    "[tokens * top_k, .] buffers); the assumption matters for per-expert "
    "time and expert parallelism";

static nlohmann::json moeJson(const MoeStats &m) {
  if (!m.layers)
    return nullptr;
  return {{"layers", m.layers},
          {"experts", m.experts},
          {"top_k", m.topK},
          {"routed_rows_per_layer", m.routedRows},
          {"token_distribution",
           {{"assumption", m.uniform() ? "uniform" : "max_expert_share"},
            {"max_expert_share", m.assumedMaxShare},
            {"max_expert_rows", m.assumedMaxRows()},
            {"worst_case_max_expert_share", 1.0 / double(m.topK)},
            {"worst_case_max_expert_rows", m.worstCaseMaxRows()},
            {"note", kDistributionNote}}}};
}

/// Bytes of one element of the model's dtype ("bf16", ...); 4 if unknown.
static int64_t dtypeBytes(const std::string &dtype) {
  std::optional<DType> t = parseDType(dtype);
  return t ? bytesPerElement(*t) : 4;
}

/// Expert parallelism's exchange per rank, per layer and micro-batch.
static nlohmann::json expertParallelJson(const ModelStats &s) {
  MoeStats::ExchangeRows rows = s.moe.expertParallelRows();
  int64_t rowBytes = s.hiddenSize * dtypeBytes(s.dtype);
  int64_t ep = s.moe.expertParallelSize;
  return {{"ep_size", ep},
          {"experts_per_rank", s.moe.experts / ep},
          {"all_to_alls_per_layer", 4},
          {"all_to_all_rows", rows.assumed},
          {"all_to_all_bytes", rows.assumed * rowBytes},
          {"worst_case_all_to_all_rows", rows.worst},
          {"worst_case_all_to_all_bytes", rows.worst * rowBytes},
          {"sent_bytes_per_all_to_all",
           commElementsPerRank(CollectiveKind::AllToAll,
                               double(rows.assumed * rowBytes), ep)}};
}

nlohmann::json toJson(const ModelStats &stats) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerStats &l : stats.layers) {
    nlohmann::json layer = {{"name", l.name},
                            {"params", l.params},
                            {"param_bytes", l.paramBytes},
                            {"forward_flops", l.forwardFlops},
                            {"saved_bytes", l.savedBytes}};
    if (!l.attentionKernel.empty())
      layer["attention_kernel"] = l.attentionKernel;
    layers.push_back(std::move(layer));
  }
  nlohmann::json out = {
      {"model", stats.name},
      {"params", stats.params},
      {"total_params", stats.params},
      {"padding_params", stats.paddingParams},
      {"active_params", stats.activeParams},
      {"param_bytes", stats.paramBytes},
      {"micro_batch", stats.batch},
      {"seq_len", stats.seqLen},
      {"num_layers", stats.numLayers},
      {"attention_kernels", stats.attentionKernels},
      {"hidden_size", stats.hiddenSize},
      {"dtype", stats.dtype},
      {"tokens_per_micro_batch", stats.tokens()},
      {"forward_flops_per_micro_batch", stats.forwardFlops},
      {"train_flops_per_token", stats.trainFlopsPerToken},
      {"train_flops_per_token_formula", stats.formulaFlopsPerToken},
      {"attention_flops_per_token", stats.attentionFlopsPerToken},
      {"saved_bytes_per_micro_batch", stats.savedBytes},
      {"recompute",
       {{"mode", recomputeModeName(stats.recompute.mode)},
        {"every", stats.recompute.every}}},
      {"layers", layers}};
  if (stats.moe.layers) {
    out["moe"] = moeJson(stats.moe);
    if (stats.moe.expertParallelSize > 1)
      out["moe"]["expert_parallel"] = expertParallelJson(stats);
  }
  return out;
}

std::string formatModelStats(const ModelStats &s) {
  std::string out;
  char line[256];
  auto add = [&](const char *label, const std::string &value) {
    std::snprintf(line, sizeof line, "  %-34s %s\n", label, value.c_str());
    out += line;
  };
  out += "model " + s.name + "\n";
  add("parameters",
      groupDigits(s.params) + " (" + humanCount(s.params) +
          (s.paddingParams ? "; " + groupDigits(s.paddingParams) +
                                 " of them vocabulary padding, zero"
                           : std::string()) +
          ")");
  add("active parameters / token",
      groupDigits(s.activeParams) + " (" + humanCount(s.activeParams) + ")" +
          (s.activeParams == s.params ? ", all: dense" : ""));
  add("parameter bytes", humanBytes(s.paramBytes));
  add("micro-batch x sequence", std::to_string(s.batch) + " x " +
                                    std::to_string(s.seqLen) + " = " +
                                    groupDigits(s.tokens()) + " tokens");
  std::string kernels;
  for (const auto &[kernel, count] : s.attentionKernels)
    kernels +=
        (kernels.empty() ? "" : ", ") + kernel + " x " + std::to_string(count);
  add("attention layers", std::to_string(s.numLayers) +
                              (kernels.empty() ? "" : " (" + kernels + ")"));
  if (s.moe.layers) {
    add("mixture of experts",
        std::to_string(s.moe.layers) + " layers x " +
            std::to_string(s.moe.experts) + " experts, top-" +
            std::to_string(s.moe.topK) + ": " + groupDigits(s.moe.routedRows) +
            " routed rows per layer");
    char share[64];
    std::snprintf(share, sizeof share, "%.4g", s.moe.assumedMaxShare);
    add("token distribution (assumption)",
        std::string(s.moe.uniform()
                        ? "uniform"
                        : "max expert share " + std::string(share)) +
            ": busiest expert " + groupDigits(s.moe.assumedMaxRows()) +
            " rows; worst case " + groupDigits(s.moe.worstCaseMaxRows()) +
            " rows (every token to one expert)");
    out += std::string("  (") + kDistributionNote + ")\n";
    if (int64_t ep = s.moe.expertParallelSize; ep > 1) {
      MoeStats::ExchangeRows rows = s.moe.expertParallelRows();
      int64_t rowBytes = s.hiddenSize * dtypeBytes(s.dtype);
      std::string label = "expert parallelism (ep " + std::to_string(ep) + ")";
      add(label.c_str(),
          std::to_string(s.moe.experts / ep) +
              " experts per rank; 4 all-to-alls per layer and micro-batch "
              "(dispatch, combine, and both in backward)");
      add("all-to-all buffer per rank",
          groupDigits(rows.assumed) +
              " rows = " + humanBytes(rows.assumed * rowBytes) + " (" +
              (s.moe.uniform() ? "uniform" : "the assumed share") +
              "); worst case " + groupDigits(rows.worst) +
              " rows = " + humanBytes(rows.worst * rowBytes));
    }
  }
  add("train FLOPs / token (graph)",
      humanCount(s.trainFlopsPerToken) + "FLOP  (3 x forward ops)");
  add("train FLOPs / token (6N + 12LHS)",
      humanCount(s.formulaFlopsPerToken) + "FLOP  (N active; attention term " +
          humanCount(s.attentionFlopsPerToken) + ")");
  add("train FLOPs / micro-batch", humanCount(3.0 * s.forwardFlops) + "FLOP");
  add("saved for backward / micro-batch",
      humanBytes(s.savedBytes) +
          (s.recompute.mode == RecomputeMode::None
               ? std::string()
               : " (recompute " + s.recompute.describe() + ")"));
  out += "\n";
  std::snprintf(line, sizeof line, "  %-18s %15s %12s %14s %14s  %s\n", "layer",
                "params", "param bytes", "fwd FLOPs", "saved bytes",
                "attention");
  out += line;
  for (const LayerStats &l : s.layers) {
    std::snprintf(
        line, sizeof line, "  %-18s %15s %12s %14s %14s", l.name.c_str(),
        groupDigits(l.params).c_str(), humanBytes(l.paramBytes).c_str(),
        humanCount(l.forwardFlops).c_str(), humanBytes(l.savedBytes).c_str());
    out += line;
    out += l.attentionKernel.empty() ? "\n" : "  " + l.attentionKernel + "\n";
  }
  return out;
}

} // namespace zeroc
