//===- ModelOps.td - Ops of the model dialect ---------------*- tablegen -*-===//
//
// Parameters, their uses, and the layer-granularity compute ops of GPT-2 and
// Llama-family decoders.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_MODEL_OPS
#define ZEROC_MODEL_OPS

include "model/ModelDialect.td"
include "model/ModelInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Model_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
def Model_TokenTensor : StaticShapeTensorOf<[I32]>;
def Model_LossTensor : 0DTensorOf<[F32]>;

// A compute op: no side effects, costed, and explicit about what it keeps for
// backward. `costOverrides` and `savedOverrides` name interface methods with
// defaults that the op implements itself.
class Model_ComputeOp<string mnemonic, list<Trait> traits = [],
                      list<string> costOverrides = [],
                      list<string> savedOverrides = []>
    : Model_Op<mnemonic, !listconcat(traits, [
        Pure,
        DeclareOpInterfaceMethods<Model_CostOpInterface, costOverrides>,
        DeclareOpInterfaceMethods<Model_SavesForBackwardOpInterface,
                                  savedOverrides>])>;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def Model_ParamOp : Model_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "A trainable parameter";
  let description = [{
    Declares a trainable tensor of static shape with its initialization. The
    symbol name is the parameter's name in checkpoints (`h.0.attn.q_proj.weight`
    style; names with dots are quoted). Parameter count, shard layouts and
    optimizer state all derive from these declarations.

    ```mlir
    model.param @"wte.weight" : tensor<50257x768xbf16> init <normal(0.02)>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Model_FloatTensor>:$type,
                       Model_InitAttr:$init);
  let assemblyFormat = "$sym_name `:` $type `init` $init attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// Number of elements.
    int64_t getNumElements() { return getTensorType().getNumElements(); }
  }];
}

def Model_ParamRefOp : Model_Op<"param_ref", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The value of a parameter";
  let description = [{
    Reads the parameter named by `param`. The result type must equal the
    parameter's declared type. Two uses of one parameter (weight tying) are
    two `param_ref`s of the same symbol.

    ```mlir
    %w = model.param_ref @"wte.weight" : tensor<50257x768xbf16>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

def Model_EmbeddingOp : Model_ComputeOp<"embedding", [], ["getForwardBytes"]> {
  let summary = "Token embedding lookup";
  let description = [{
    `result[b, s, :] = table[ids[b, s], :]` for a table `[vocab, hidden]` and
    ids `[batch, seq]`.

    ```mlir
    %x = model.embedding %wte, %ids : (tensor<50257x768xf32>, tensor<4x1024xi32>) -> tensor<4x1024x768xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$table, Model_TokenTensor:$ids);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat =
      "$table `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Model_PositionEmbeddingOp
    : Model_ComputeOp<"position_embedding", [], ["getForwardBytes"]> {
  let summary = "Learned position embedding";
  let description = [{
    `result[b, s, :] = table[s, :]` for a table `[max_positions, hidden]`: the
    embedding of positions `0 .. seq-1`, broadcast over the batch. The result
    type gives batch and sequence length, which must not exceed
    `max_positions`.

    ```mlir
    %p = model.position_embedding %wpe : (tensor<1024x768xf32>) -> tensor<4x1024x768xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$table);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat =
      "$table attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear layers and normalization
//===----------------------------------------------------------------------===//

def Model_LinearOp : Model_ComputeOp<"linear"> {
  let summary = "Affine map y = x W^T + b";
  let description = [{
    `input` is `[..., in]`, `weight` is `[out, in]`, the optional `bias` is
    `[out]`; the result is `[..., out]`. A weight shared with an embedding
    table (weight tying) is the same parameter used twice.

    ```mlir
    %y = model.linear %x, %w, %b : (tensor<4x1024x768xf32>, tensor<3072x768xf32>, tensor<3072xf32>) -> tensor<4x1024x3072xf32>
    %logits = model.linear %h, %wte : (tensor<4x1024x768xf32>, tensor<50257x768xf32>) -> tensor<4x1024x50257xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$weight,
                       Optional<Model_FloatTensor>:$bias);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_LayerNormOp : Model_ComputeOp<"layernorm", [], [],
    ["getSavedInternalBytes"]> {
  let summary = "Layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * weight + bias` over the last
    dimension, with `weight` and `bias` of shape `[hidden]`. Statistics are
    computed in f32 whatever the storage dtype; mean and reciprocal standard
    deviation (f32, one each per row) are kept for backward.
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$weight,
                       Model_FloatTensor:$bias,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_RMSNormOp : Model_ComputeOp<"rmsnorm", [], [],
    ["getSavedInternalBytes"]> {
  let summary = "Root-mean-square normalization over the last dimension";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * weight` over the last dimension (Llama),
    with `weight` of shape `[hidden]`. The reciprocal RMS (f32, one per row) is
    kept for backward.
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$weight,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Model_UnaryOp<string mnemonic, list<Trait> traits = []>
    : Model_ComputeOp<mnemonic, !listconcat(traits, [SameOperandsAndResultType])> {
  let arguments = (ins Model_FloatTensor:$input);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

class Model_BinaryOp<string mnemonic, list<Trait> traits = []>
    : Model_ComputeOp<mnemonic, !listconcat(traits, [SameOperandsAndResultType])> {
  let arguments = (ins Model_FloatTensor:$lhs, Model_FloatTensor:$rhs);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Model_GeluOp : Model_UnaryOp<"gelu"> {
  let summary = "GELU, tanh approximation";
  let description = [{
    `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, GPT-2's `gelu_new`
    (PyTorch's `gelu(approximate="tanh")`).
  }];
}

def Model_SiluOp : Model_UnaryOp<"silu"> {
  let summary = "SiLU (swish): x * sigmoid(x)";
}

def Model_AddOp : Model_BinaryOp<"add", [Commutative]> {
  let summary = "Elementwise sum of two tensors of one type (residuals)";
}

def Model_MulOp : Model_BinaryOp<"mul", [Commutative]> {
  let summary = "Elementwise product of two tensors of one type (gated MLPs)";
}

def Model_RotaryOp : Model_ComputeOp<"rotary", [SameOperandsAndResultType]> {
  let summary = "Rotary position embedding (RoPE)";
  let description = [{
    Rotates each head of `input` (`[batch, seq, heads * head_dim]`) by the
    position-dependent angles `pos * theta^(-2i / head_dim)`, pairing element
    `i` with `i + head_dim / 2` (the Hugging Face Llama convention).
  }];
  let arguments = (ins Model_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntPositive]>:$head_dim,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention and loss
//===----------------------------------------------------------------------===//

def Model_CausalAttentionOp : Model_ComputeOp<"causal_attention", [], [],
    ["getSavedInternalBytes"]> {
  let summary = "Causal scaled dot-product self-attention with grouped-query heads";
  let description = [{
    `q` is `[batch, seq, num_heads * head_dim]`; `k` and `v` are
    `[batch, seq, num_kv_heads * head_dim]`, each key/value head shared by
    `num_heads / num_kv_heads` query heads (grouped-query attention; equal
    counts are multi-head attention). Each position attends to itself and
    earlier positions with scale `1 / sqrt(head_dim)`. The result has the
    shape of `q`, heads concatenated.

    For backward it keeps q, k, v, its result, and the softmax probabilities
    (`batch * num_heads * seq^2` elements in the activation dtype), the
    accounting of Korthikanti et al. (2022) without dropout.

    ```mlir
    %a = model.causal_attention %q, %k, %v {num_heads = 32 : i64, num_kv_heads = 8 : i64}
        : (tensor<1x8192x4096xbf16>, tensor<1x8192x1024xbf16>, tensor<1x8192x1024xbf16>) -> tensor<1x8192x4096xbf16>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$q, Model_FloatTensor:$k,
                       Model_FloatTensor:$v,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getHeadDim() {
      return getQ().getType().getShape().back() / getNumHeads();
    }
  }];
}

def Model_CrossEntropyOp : Model_ComputeOp<"cross_entropy"> {
  let summary = "Mean softmax cross-entropy of logits against target ids";
  let description = [{
    `mean over (b, s) of -log softmax(logits[b, s, :])[targets[b, s]]` for
    logits `[batch, seq, vocab]` and targets `[batch, seq]`, computed in f32.
    The loss is a 0-d f32 tensor, the value the training step minimizes.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_TokenTensor:$targets);
  let results = (outs Model_LossTensor:$loss);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // ZEROC_MODEL_OPS
