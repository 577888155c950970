//===- ModelBuilder.cpp - ModelSpec to a model-dialect module -------------===//
//
// GPT-2, and the Llama-style decoders (Llama, Mistral, Qwen2, Gemma, Phi-3)
// with their parameter names, layouts and numerics from Hugging Face.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Models/ModelBuilder.h"

#include "model/ModelOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

using namespace mlir;
using namespace zeroc::model;

namespace zeroc {
namespace {

class DecoderBuilder {
public:
  DecoderBuilder(MLIRContext &context, const ModelSpec &spec)
      : ctx(context), spec(spec), b(&context),
        dtype(elementType(context, spec.dtype)) {}

  OwningOpRef<ModuleOp> build() {
    OwningOpRef<ModuleOp> module =
        ModuleOp::create(UnknownLoc::get(&ctx), StringRef(spec.name));
    moduleBody = module->getBody();
    if (spec.hfConfig.is_object())
      (*module)->setAttr(kHFConfigAttr, b.getStringAttr(spec.hfConfig.dump()));
    b.setInsertionPointToEnd(moduleBody);

    auto ids =
        RankedTensorType::get({spec.microBatch, spec.seqLen}, b.getI32Type());
    auto loss = RankedTensorType::get({}, b.getF32Type());
    auto func = b.create<func::FuncOp>(at("forward"), "forward",
                                       b.getFunctionType({ids, ids}, {loss}));
    forward = func;
    Block *entry = func.addEntryBlock();
    b.setInsertionPointToEnd(entry);
    Value tokens = entry->getArgument(0), targets = entry->getArgument(1);

    Value result = spec.family == ModelFamily::GPT2 ? gpt2(tokens, targets)
                                                    : llama(tokens, targets);
    b.create<func::ReturnOp>(at("forward"), result);
    return module;
  }

private:
  static Type elementType(MLIRContext &ctx, DType t) {
    switch (t) {
    case DType::BF16:
      return BFloat16Type::get(&ctx);
    case DType::F16:
      return Float16Type::get(&ctx);
    default:
      return Float32Type::get(&ctx);
    }
  }

  Location at(StringRef name) { return NameLoc::get(b.getStringAttr(name)); }

  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, dtype);
  }

  RankedTensorType activation(int64_t width) {
    return tensor({spec.microBatch, spec.seqLen, width});
  }

  /// Declares a parameter (once) and reads it at the current point.
  /// `validRows`: a padded table's rows that are not padding (ParamOp).
  Value param(const std::string &name, ArrayRef<int64_t> shape, InitAttr init,
              IntegerAttr validRows = IntegerAttr()) {
    RankedTensorType type = tensor(shape);
    if (!declared.count(name)) {
      // Parameters go before the forward function, in creation order.
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(forward);
      b.create<ParamOp>(at(name), name, type, init, validRows);
      declared.insert(name);
    }
    return b.create<ParamRefOp>(at(name), type, name);
  }

  /// The vocabulary's rows, padded as the spec asks: the shape's first
  /// dimension, and the valid rows when there is padding.
  int64_t vocabRows() const { return spec.paddedVocabSize(); }
  IntegerAttr vocabValidRows() {
    if (spec.paddedVocabSize() == spec.vocabSize)
      return IntegerAttr();
    return b.getI64IntegerAttr(spec.vocabSize);
  }
  Value vocabTable(const std::string &name) {
    return param(name, {vocabRows(), spec.hiddenSize},
                 normal(spec.initializerRange), vocabValidRows());
  }

  InitAttr normal(double std) {
    return InitAttr::get(&ctx, InitKind::Normal, std);
  }
  InitAttr ones() { return InitAttr::get(&ctx, InitKind::Ones); }
  InitAttr zeros() { return InitAttr::get(&ctx, InitKind::Zeros); }

  /// Output projections of residual branches start smaller (GPT-2 paper:
  /// scaled by 1/sqrt(2 * layers)).
  double residualStd() const {
    return spec.initializerRange / std::sqrt(2.0 * spec.numLayers);
  }

  Value linear(const std::string &prefix, Value x, int64_t in, int64_t out,
               bool bias, double std) {
    Value w = param(prefix + ".weight", {out, in}, normal(std));
    Value bv = bias ? param(prefix + ".bias", {out}, zeros()) : Value();
    auto type = activation(out);
    if (bv)
      return b.create<LinearOp>(at(prefix), type, x, w, bv);
    return b.create<LinearOp>(at(prefix), type, x, w, Value());
  }

  Value layerNorm(const std::string &prefix, Value x) {
    int64_t h = spec.hiddenSize;
    Value g = param(prefix + ".weight", {h}, ones());
    Value beta = param(prefix + ".bias", {h}, zeros());
    return b
        .create<LayerNormOp>(at(prefix), x.getType(), /*saved=*/Type(), x, g,
                             beta, b.getF64FloatAttr(spec.normEpsilon))
        .getResult();
  }

  /// Gemma's norms scale by 1 + weight, so their weights start at zero.
  Value rmsNorm(const std::string &prefix, Value x) {
    bool offset = spec.normUnitOffset;
    Value g =
        param(prefix + ".weight", {spec.hiddenSize}, offset ? zeros() : ones());
    return b
        .create<RMSNormOp>(at(prefix), x.getType(), /*saved=*/Type(), x, g,
                           b.getF64FloatAttr(spec.normEpsilon),
                           offset ? b.getUnitAttr() : UnitAttr())
        .getResult();
  }

  Value add(const std::string &name, Value lhs, Value rhs) {
    return b.create<AddOp>(at(name), lhs, rhs);
  }

  AttentionKernelAttr modelKernel(zeroc::AttentionKernel kernel) {
    return AttentionKernelAttr::get(b.getContext(),
                                    kernel == zeroc::AttentionKernel::Flash
                                        ? model::AttentionKernel::Flash
                                        : model::AttentionKernel::Materialized);
  }

  Value attention(const std::string &prefix, Value q, Value k, Value v) {
    return b
        .create<CausalAttentionOp>(at(prefix), q.getType(), /*saved=*/Type(), q,
                                   k, v, b.getI64IntegerAttr(spec.numHeads),
                                   b.getI64IntegerAttr(spec.numKVHeads),
                                   modelKernel(spec.attentionKernel),
                                   b.getI64IntegerAttr(spec.slidingWindow))
        .getResult();
  }

  /// The pieces of a fused projection's output, of the given widths, in
  /// order (Phi-3's qkv_proj and gate_up_proj).
  SmallVector<Value> split(const std::string &name, Value fused,
                           ArrayRef<int64_t> widths) {
    SmallVector<Type> types;
    for (int64_t w : widths)
      types.push_back(activation(w));
    auto op = b.create<SplitOp>(at(name), types, fused);
    return SmallVector<Value>(op.getResults());
  }

  Value lossHead(Value h, Value targets, const std::string &headName) {
    Value w = vocabTable((spec.tieWordEmbeddings ? embeddingName() : headName) +
                         ".weight");
    Value logits = b.create<LinearOp>(at(headName), activation(vocabRows()), h,
                                      w, Value());
    return b.create<CrossEntropyOp>(at("loss"),
                                    RankedTensorType::get({}, b.getF32Type()),
                                    logits, targets, vocabValidRows());
  }

  std::string embeddingName() const {
    return spec.family == ModelFamily::GPT2 ? "wte" : "embed_tokens";
  }

  Value gpt2(Value tokens, Value targets) {
    int64_t d = spec.hiddenSize, ff = spec.intermediateSize;
    double std = spec.initializerRange;
    Value wte = vocabTable("wte.weight");
    Value x = b.create<EmbeddingOp>(at("wte"), activation(d), wte, tokens);
    Value wpe = param("wpe.weight", {spec.maxPositions, d}, normal(std));
    Value pos = b.create<PositionEmbeddingOp>(at("wpe"), activation(d), wpe);
    x = add("embed", x, pos);
    for (int64_t l = 0; l < spec.numLayers; ++l) {
      std::string p = "h." + std::to_string(l);
      Value h = layerNorm(p + ".ln_1", x);
      Value q = linear(p + ".attn.q_proj", h, d, d, true, std);
      Value k = linear(p + ".attn.k_proj", h, d, d, true, std);
      Value v = linear(p + ".attn.v_proj", h, d, d, true, std);
      Value a = attention(p + ".attn", q, k, v);
      Value o = linear(p + ".attn.c_proj", a, d, d, true, residualStd());
      x = add(p + ".attn.residual", x, o);
      h = layerNorm(p + ".ln_2", x);
      Value f = linear(p + ".mlp.c_fc", h, d, ff, true, std);
      f = b.create<GeluOp>(at(p + ".mlp.act"), f);
      Value m = linear(p + ".mlp.c_proj", f, ff, d, true, residualStd());
      x = add(p + ".mlp.residual", x, m);
    }
    Value h = layerNorm("ln_f", x);
    return lossHead(h, targets, "lm_head");
  }

  /// Mixtral's sparse MoE block: the router (`gate`, [experts, hidden]) and
  /// the experts' weights stacked along a leading expert dimension
  /// (`experts.w1` holds the checkpoint's `experts.{e}.w1.weight`, ...).
  Value mixtureOfExperts(const std::string &prefix, Value h) {
    int64_t d = spec.hiddenSize, ff = spec.intermediateSize;
    int64_t e = spec.numExperts, k = spec.expertsPerToken;
    double std = spec.initializerRange;
    Value gate = param(prefix + ".gate.weight", {e, d}, normal(std));
    auto routed = [&](Type element) {
      return RankedTensorType::get({spec.microBatch, spec.seqLen, k}, element);
    };
    auto router = b.create<MoeRouterOp>(
        at(prefix + ".gate"), routed(b.getF32Type()), routed(b.getI32Type()),
        /*saved=*/Type(), h, gate, b.getI64IntegerAttr(k), b.getUnitAttr());
    if (spec.routerAuxLoss)
      routerStats.push_back(b.create<MoeRouterStatsOp>(
          at(prefix + ".gate.stats"),
          RankedTensorType::get({2, e}, b.getF32Type()), h, gate,
          router.getIndices()));
    Value w1 = param(prefix + ".experts.w1", {e, ff, d}, normal(std));
    Value w3 = param(prefix + ".experts.w3", {e, ff, d}, normal(std));
    Value w2 = param(prefix + ".experts.w2", {e, d, ff}, normal(std));
    FloatAttr share = spec.maxExpertShare > 0
                          ? b.getF64FloatAttr(spec.maxExpertShare)
                          : FloatAttr();
    return b
        .create<MoeExpertsOp>(at(prefix + ".experts"), activation(d),
                              /*saved=*/Type(), h, router.getWeights(),
                              router.getIndices(), w1, w3, w2, share)
        .getResult();
  }

  /// Llama and the families built like it (Mistral, Qwen2, Gemma, Phi-3),
  /// as their Hugging Face modeling_*.py lay them out.
  Value llama(Value tokens, Value targets) {
    int64_t d = spec.hiddenSize, ff = spec.intermediateSize;
    int64_t qWidth = spec.numHeads * spec.headDim;
    int64_t kvWidth = spec.numKVHeads * spec.headDim;
    double std = spec.initializerRange;
    Value table = vocabTable("embed_tokens.weight");
    Value x =
        b.create<EmbeddingOp>(at("embed_tokens"), activation(d), table, tokens);
    if (spec.scaleEmbeddings)
      x = b.create<ScaleOp>(at("embed_scale"), x,
                            b.getF64FloatAttr(std::sqrt(double(d))));
    auto headDim = b.getI64IntegerAttr(spec.headDim);
    auto theta = b.getF64FloatAttr(spec.ropeTheta);
    for (int64_t l = 0; l < spec.numLayers; ++l) {
      std::string p = "layers." + std::to_string(l);
      bool qkvb = spec.qkvBias, ob = spec.outputBias, mb = spec.mlpBias;
      Value h = rmsNorm(p + ".input_layernorm", x);
      Value q, k, v;
      if (spec.fusedProjections) {
        Value qkv = linear(p + ".self_attn.qkv_proj", h, d,
                           qWidth + 2 * kvWidth, qkvb, std);
        SmallVector<Value> pieces =
            split(p + ".self_attn.qkv_split", qkv, {qWidth, kvWidth, kvWidth});
        q = pieces[0], k = pieces[1], v = pieces[2];
      } else {
        q = linear(p + ".self_attn.q_proj", h, d, qWidth, qkvb, std);
        k = linear(p + ".self_attn.k_proj", h, d, kvWidth, qkvb, std);
        v = linear(p + ".self_attn.v_proj", h, d, kvWidth, qkvb, std);
      }
      q = b.create<RotaryOp>(at(p + ".self_attn.rotary_q"), q, headDim, theta);
      k = b.create<RotaryOp>(at(p + ".self_attn.rotary_k"), k, headDim, theta);
      Value a = attention(p + ".self_attn", q, k, v);
      Value o = linear(p + ".self_attn.o_proj", a, qWidth, d, ob, std);
      x = add(p + ".self_attn.residual", x, o);
      h = rmsNorm(p + ".post_attention_layernorm", x);
      if (spec.numExperts) {
        x = add(p + ".block_sparse_moe.residual", x,
                mixtureOfExperts(p + ".block_sparse_moe", h));
        continue;
      }
      Value gate, up;
      if (spec.fusedProjections) {
        Value gateUp = linear(p + ".mlp.gate_up_proj", h, d, 2 * ff, mb, std);
        SmallVector<Value> pieces =
            split(p + ".mlp.gate_up_split", gateUp, {ff, ff});
        gate = pieces[0], up = pieces[1];
      } else {
        gate = linear(p + ".mlp.gate_proj", h, d, ff, mb, std);
        up = linear(p + ".mlp.up_proj", h, d, ff, mb, std);
      }
      if (spec.gegluMlp)
        gate = b.create<GeluOp>(at(p + ".mlp.act"), gate);
      else
        gate = b.create<SiluOp>(at(p + ".mlp.act"), gate);
      Value prod = b.create<MulOp>(at(p + ".mlp.gated"), gate, up);
      Value down = linear(p + ".mlp.down_proj", prod, ff, d, mb, std);
      x = add(p + ".mlp.residual", x, down);
    }
    Value h = rmsNorm("norm", x);
    Value loss = lossHead(h, targets, "lm_head");
    if (routerStats.empty())
      return loss;
    // Mixtral's output_router_logits: the load-balancing loss of every
    // layer's router, added as MixtralForCausalLM adds it.
    return b.create<MoeLoadBalancingLossOp>(
        at("router_aux_loss"), loss.getType(), loss, routerStats,
        b.getF64FloatAttr(spec.routerAuxLossCoef),
        b.getI64IntegerAttr(spec.expertsPerToken));
  }

  MLIRContext &ctx;
  const ModelSpec &spec;
  OpBuilder b;
  Type dtype;
  Block *moduleBody = nullptr;
  Operation *forward = nullptr;
  llvm::StringSet<> declared;
  /// Each layer's router statistics, with output_router_logits.
  SmallVector<Value> routerStats;
};

} // namespace

OwningOpRef<ModuleOp> buildModel(MLIRContext &context, const ModelSpec &spec) {
  return DecoderBuilder(context, spec).build();
}

} // namespace zeroc
