//===- ModelOps.td - Ops of the model dialect ---------------*- tablegen -*-===//
//
// Parameters, their uses, and the layer-granularity compute ops of GPT-2 and
// Llama-family decoders (Llama, Mistral, Qwen2, Gemma, Phi-3), and the
// mixture-of-experts router and experts of Mixtral.
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

// Attention's kernel family; flash when absent.
def Model_AttentionKernelDefault
    : DefaultValuedAttr<Model_AttentionKernel, "AttentionKernel::Flash">;

// A compute op: no side effects, costed, explicit about what it keeps for
// backward, and differentiable. `costOverrides` and `savedOverrides` name
// interface methods with defaults that the op implements itself.
class Model_ComputeOp<string mnemonic, list<Trait> traits = [],
                      list<string> costOverrides = [],
                      list<string> savedOverrides = []>
    : Model_Op<mnemonic, !listconcat(traits, [
        Pure,
        DeclareOpInterfaceMethods<Model_CostOpInterface, costOverrides>,
        DeclareOpInterfaceMethods<Model_SavesForBackwardOpInterface,
                                  savedOverrides>,
        DeclareOpInterfaceMethods<Model_DifferentiableOpInterface>])>;

// A backward op: no side effects and costed, but neither saved for a further
// backward nor differentiable (zeroc computes first derivatives only).
class Model_BackwardOp<string mnemonic, list<Trait> traits = [],
                       list<string> costOverrides = []>
    : Model_Op<mnemonic, !listconcat(traits, [
        Pure,
        DeclareOpInterfaceMethods<Model_CostOpInterface, costOverrides>])>;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def Model_ParamOp : Model_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<Model_ParameterOpInterface>]> {
  let summary = "A trainable parameter";
  let description = [{
    Declares a trainable tensor of static shape with its initialization. The
    symbol name is the parameter's name in checkpoints (`h.0.attn.q_proj.weight`
    style; names with dots are quoted). Parameter count, shard layouts and
    optimizer state all derive from these declarations.

    ```mlir
    model.param @"wte.weight" : tensor<50257x768xbf16> init <normal(0.02)>
    ```

    `valid_rows` marks a table padded along its first dimension (a vocabulary
    rounded up so that the logits' rows are 16-byte aligned, `zeroc gen
    --pad-vocab-to-multiple-of`): rows at and past `valid_rows` are padding.
    They start at zero, no token id reaches them, and the loss ignores their
    logits (`model.cross_entropy`'s `classes`), so their gradient is zero and
    they stay zero; a Hugging Face checkpoint holds only the valid rows.
    Memory and FLOPs count the padded shape.

    ```mlir
    model.param @"wte.weight" : tensor<50304x768xbf16> init <normal(0.02)> {valid_rows = 50257 : i64}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Model_FloatTensor>:$type,
                       Model_InitAttr:$init,
                       OptionalAttr<I64Attr>:$valid_rows);
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
    Pure, Model_MustLowerBeforePlan, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
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

def Model_LinearOp : Model_ComputeOp<"linear", [], [],
    ["isKeptBySelectiveRecompute"]> {
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
    ["getSavedStateType", "getSavedState"]> {
  let summary = "Layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * weight + bias` over the last
    dimension, with `weight` and `bias` of shape `[hidden]`. Statistics are
    computed in f32 whatever the storage dtype. In a training graph the op
    also yields `saved`, the mean and reciprocal standard deviation of every
    row (f32, `[2, rows...]`: means first), which its backward reads.
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$weight,
                       Model_FloatTensor:$bias,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Model_FloatTensor:$result,
                      Optional<Model_FloatTensor>:$saved);
  let assemblyFormat = [{
    $input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_RMSNormOp : Model_ComputeOp<"rmsnorm", [], [],
    ["getSavedStateType", "getSavedState"]> {
  let summary = "Root-mean-square normalization over the last dimension";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * weight` over the last dimension (Llama),
    with `weight` of shape `[hidden]`; with `unit_offset`, the scale is
    `1 + weight` (Gemma, whose weights start at zero). The normalization and
    the scaling are computed in f32 and the result rounded once, as Hugging
    Face's Gemma does. In a training graph the op also yields `saved`, the
    reciprocal RMS of every row (f32, `[rows...]`), which its backward reads.

    ```mlir
    %y = model.rmsnorm %x, %w {unit_offset} : (tensor<1x8192x3072xbf16>, tensor<3072xbf16>) -> tensor<1x8192x3072xbf16>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$weight,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon,
                       UnitAttr:$unit_offset);
  let results = (outs Model_FloatTensor:$result,
                      Optional<Model_FloatTensor>:$saved);
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
  let description = [{
    `in_place` marks a sum of gradients (emitted by
    `zero-expand-training-step` where a value or a parameter has several
    uses): where `lhs` dies at this op, the result takes its memory, as
    PyTorch's autograd accumulates a gradient into the one that arrived
    first. `zero-plan-memory` gives the result `lhs`'s offset then; the
    kernels are element-wise, so the aliasing is safe. A forward residual
    sum has no `in_place`: PyTorch computes it out of place.

    ```mlir
    %g = model.add %g1, %g2 {in_place} : tensor<50257x768xbf16>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$lhs, Model_FloatTensor:$rhs,
                       UnitAttr:$in_place);
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

def Model_ScaleOp : Model_ComputeOp<"scale", [SameOperandsAndResultType]> {
  let summary = "Multiplication by a constant (Gemma's embedding scale)";
  let description = [{
    `input * c`, where `c` is `factor` rounded to the element type of
    `input` first: Hugging Face's Gemma multiplies its embeddings by
    `sqrt(hidden_size)` cast to the activation dtype (55.5 for 3072 in
    bf16, not 55.4256). Its gradient is the same op, `dy * c`, so it has no
    backward op of its own and keeps nothing for backward.

    FLOPs: 1 per element.

    ```mlir
    %x = model.scale %e {factor = 55.425625842204074 : f64} : tensor<1x8192x3072xbf16>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Model_SplitOp : Model_ComputeOp<"split"> {
  let summary = "Consecutive slices of the last dimension (fused projections)";
  let description = [{
    Cuts `input` (`[..., n]`) into consecutive pieces along its last
    dimension, one per result, in order: result `r` is columns
    `[o_r, o_r + n_r)` of `input`, `n_r` its last dimension and `o_r` the
    sum of the widths before it. The other dimensions are `input`'s, and
    the widths sum to `n`. Phi-3's fused `qkv_proj` and `gate_up_proj`
    produce one tensor that the model splits into q, k, v (or gate, up),
    the checkpoint's layout. A copy: no FLOPs, nothing kept for backward;
    its backward is `model.split_backward`.

    ```mlir
    %q, %k, %v = model.split %qkv : (tensor<1x4096x9216xbf16>) -> (tensor<1x4096x3072xbf16>, tensor<1x4096x3072xbf16>, tensor<1x4096x3072xbf16>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input);
  let results = (outs Variadic<Model_FloatTensor>:$pieces);
  let assemblyFormat =
      "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention and loss
//===----------------------------------------------------------------------===//

def Model_CausalAttentionOp : Model_ComputeOp<"causal_attention", [], [],
    ["getSavedStateType", "getSavedState", "isKeptBySelectiveRecompute"]> {
  let summary = "Causal scaled dot-product self-attention with grouped-query heads";
  let description = [{
    `q` is `[batch, seq, num_heads * head_dim]`; `k` and `v` are
    `[batch, seq, num_kv_heads * head_dim]`, each key/value head shared by
    `num_heads / num_kv_heads` query heads (grouped-query attention; equal
    counts are multi-head attention). Each position attends to itself and
    earlier positions with scale `1 / sqrt(head_dim)`. The result has the
    shape of `q`, heads concatenated.

    `kernel` names the kernel family, which decides what the op keeps for
    backward besides q, k, v and its result (yielded as `saved` in a
    training graph) and what its backward costs:

    - `flash` (the default, elided when printed): a tiled online-softmax
      kernel that never materialises the probabilities. It keeps the
      per-row log-sum-exp of the scaled scores, f32 `[batch, num_heads,
      seq]`; its backward recomputes the scores and probabilities from it.
    - `materialized`: the probabilities `[batch, num_heads, seq, seq]` in
      the activation dtype, the accounting of Korthikanti et al. (2022)
      without dropout; its backward reads them back.

    The forward FLOPs are the same for both.

    `window` (Mistral's and Phi-3's sliding window, 0 or absent: none,
    elided when printed) limits each query to the `window` most recent
    positions, itself included: query `i` attends to keys `j` with
    `i - window < j <= i` (Hugging Face's sliding-window mask). A window of
    at least `seq` is no window.

    ```mlir
    %a = model.causal_attention %q, %k, %v {num_heads = 32 : i64, num_kv_heads = 8 : i64}
        : (tensor<1x8192x4096xbf16>, tensor<1x8192x1024xbf16>, tensor<1x8192x1024xbf16>) -> tensor<1x8192x4096xbf16>
    %m = model.causal_attention %q, %k, %v kernel = materialized {num_heads = 32 : i64, num_kv_heads = 8 : i64}
        : (tensor<1x8192x4096xbf16>, tensor<1x8192x1024xbf16>, tensor<1x8192x1024xbf16>) -> tensor<1x8192x4096xbf16>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$q, Model_FloatTensor:$k,
                       Model_FloatTensor:$v,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads,
                       Model_AttentionKernelDefault:$kernel,
                       DefaultValuedAttr<I64Attr, "0">:$window);
  let results = (outs Model_FloatTensor:$result,
                      Optional<Model_FloatTensor>:$saved);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`kernel` `=` $kernel^)? attr-dict `:` functional-type(operands, results)
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

    With `classes`, only the first `classes` logits of each row are the
    vocabulary (the rest are a padded table's rows, `model.param`'s
    `valid_rows`): the softmax runs over them alone and every target must be
    below `classes`. Without it, `classes` is the logits' last dimension.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_TokenTensor:$targets,
                       OptionalAttr<I64Attr>:$classes);
  let results = (outs Model_LossTensor:$loss);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Backward
//
// The ops that `DifferentiableOpInterface::buildBackward` emits: each computes
// the gradients of one forward op's operands from the gradient of its result
// (`dy`) and what the forward op saved. They are Pure and costed like the
// forward ops; matrix products are counted exactly and elementwise work at
// twice the forward op's per-element cost (the convention behind "backward is
// twice the forward").
//===----------------------------------------------------------------------===//

def Model_EmbeddingBackwardOp : Model_BackwardOp<"embedding_backward"> {
  let summary = "Gradient of a token embedding table";
  let description = [{
    Scatter-add of the rows of `dy` (`[batch, seq, hidden]`) into a zero table
    `[vocab, hidden]`: `result[ids[b, s], :] += dy[b, s, :]`. The vocabulary
    size comes from the result type.

    FLOPs: one add per element of `dy` (the forward lookup has none).

    ```mlir
    %dwte = model.embedding_backward %dy, %ids : (tensor<4x1024x768xf32>, tensor<4x1024xi32>) -> tensor<50257x768xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$dy, Model_TokenTensor:$ids);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat =
      "$dy `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Model_PositionEmbeddingBackwardOp
    : Model_BackwardOp<"position_embedding_backward"> {
  let summary = "Gradient of a learned position embedding table";
  let description = [{
    `result[s, :] = sum over b of dy[b, s, :]` for `s < seq`, and zero for the
    rows `seq .. max_positions-1` that the forward did not read. `dy` is
    `[batch, seq, hidden]`, the result `[max_positions, hidden]` with
    `seq <= max_positions`.

    FLOPs: one add per element of `dy`.

    ```mlir
    %dwpe = model.position_embedding_backward %dy : (tensor<4x1024x768xf32>) -> tensor<1024x768xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$dy);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Model_LinearGradInputOp : Model_BackwardOp<"linear_grad_input"> {
  let summary = "Gradient of a linear layer's input: dx = dy W";
  let description = [{
    `dy` is `[..., out]`, `weight` is `[out, in]`; the result is `[..., in]`.

    FLOPs: `2 * rows * out * in`, rows being every element of `dy` but the
    last dimension.

    ```mlir
    %dx = model.linear_grad_input %dy, %w : (tensor<4x1024x3072xf32>, tensor<3072x768xf32>) -> tensor<4x1024x768xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$dy, Model_FloatTensor:$weight);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat =
      "$dy `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Model_LinearGradWeightOp : Model_BackwardOp<"linear_grad_weight"> {
  let summary = "Gradient of a linear layer's weight: dW = dy^T x";
  let description = [{
    `dy` is `[..., out]` and `input` (the forward input) `[..., in]` with the
    same leading dimensions; the result `[out, in]` sums `dy[r, :]^T x[r, :]`
    over all rows `r`.

    FLOPs: `2 * rows * out * in`.

    ```mlir
    %dw = model.linear_grad_weight %dy, %x : (tensor<4x1024x3072xf32>, tensor<4x1024x768xf32>) -> tensor<3072x768xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$dy, Model_FloatTensor:$input);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat =
      "$dy `,` $input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Model_LinearGradBiasOp : Model_BackwardOp<"linear_grad_bias"> {
  let summary = "Gradient of a linear layer's bias: db = sum of dy over rows";
  let description = [{
    `dy` is `[..., out]`; the result `[out]` is its sum over every dimension
    but the last.

    FLOPs: `rows * out` (one add per element of `dy`).

    ```mlir
    %db = model.linear_grad_bias %dy : (tensor<4x1024x3072xf32>) -> tensor<3072xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$dy);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Model_LayerNormBackwardOp : Model_BackwardOp<"layernorm_backward"> {
  let summary = "Gradients of layer normalization";
  let description = [{
    From the forward input `x`, the scale `weight` (`[hidden]`) and the
    result gradient `dy` (the type of `x`), computes `dx`, `dweight` and
    `dbias`. With `xhat = (x - mean) * rstd` per row and `g = dy * weight`:
    `dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`,
    `dweight = sum over rows of dy * xhat`, `dbias = sum over rows of dy`.
    The row statistics are `saved`, the state the forward `model.layernorm`
    yielded (means, then reciprocal standard deviations, f32).

    FLOPs: 16 per element of `x`.

    ```mlir
    %y, %stats = model.layernorm %x, %g, %b : (tensor<4x1024x768xf32>, tensor<768xf32>, tensor<768xf32>) -> (tensor<4x1024x768xf32>, tensor<2x4x1024xf32>)
    %dx, %dg, %db = model.layernorm_backward %x, %g, %dy, %stats : (tensor<4x1024x768xf32>, tensor<768xf32>, tensor<4x1024x768xf32>, tensor<2x4x1024xf32>) -> (tensor<4x1024x768xf32>, tensor<768xf32>, tensor<768xf32>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$weight,
                       Model_FloatTensor:$dy, Model_FloatTensor:$saved,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Model_FloatTensor:$dinput, Model_FloatTensor:$dweight,
                      Model_FloatTensor:$dbias);
  let assemblyFormat = [{
    $input `,` $weight `,` $dy `,` $saved attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_RMSNormBackwardOp : Model_BackwardOp<"rmsnorm_backward"> {
  let summary = "Gradients of RMS normalization";
  let description = [{
    From the forward input `x`, the scale `weight` (`[hidden]`) and the
    result gradient `dy`, computes `dx` and `dweight`. With
    `xhat = x * rrms` per row and `g = dy * weight`:
    `dx = rrms * (g - xhat * mean(g * xhat))`,
    `dweight = sum over rows of dy * xhat`, with `rrms` from `saved`, the
    state the forward `model.rmsnorm` yielded. With `unit_offset` (which
    must be its forward's), `g = dy * (1 + weight)`.

    FLOPs: 8 per element of `x`.

    ```mlir
    %dx, %dg = model.rmsnorm_backward %x, %g, %dy, %rrms : (tensor<1x8192x4096xbf16>, tensor<4096xbf16>, tensor<1x8192x4096xbf16>, tensor<1x8192xf32>) -> (tensor<1x8192x4096xbf16>, tensor<4096xbf16>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$weight,
                       Model_FloatTensor:$dy, Model_FloatTensor:$saved,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon,
                       UnitAttr:$unit_offset);
  let results = (outs Model_FloatTensor:$dinput, Model_FloatTensor:$dweight);
  let assemblyFormat = [{
    $input `,` $weight `,` $dy `,` $saved attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

class Model_ActivationBackwardOp<string mnemonic>
    : Model_BackwardOp<mnemonic, [SameOperandsAndResultType]> {
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$dy);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$input `,` $dy attr-dict `:` type($result)";
}

def Model_GeluBackwardOp : Model_ActivationBackwardOp<"gelu_backward"> {
  let summary = "Gradient of GELU (tanh approximation): dy * gelu'(x)";
  let description = [{
    With `u = sqrt(2/pi) (x + 0.044715 x^3)`:
    `dx = dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2))`.

    FLOPs: 16 per element.

    ```mlir
    %dx = model.gelu_backward %x, %dy : tensor<4x1024x3072xf32>
    ```
  }];
}

def Model_SiluBackwardOp : Model_ActivationBackwardOp<"silu_backward"> {
  let summary = "Gradient of SiLU: dy * silu'(x)";
  let description = [{
    `dx = dy * sigmoid(x) * (1 + x (1 - sigmoid(x)))`.

    FLOPs: 8 per element.

    ```mlir
    %dx = model.silu_backward %x, %dy : tensor<1x8192x14336xbf16>
    ```
  }];
}

def Model_RotaryBackwardOp
    : Model_BackwardOp<"rotary_backward", [SameOperandsAndResultType]> {
  let summary = "Gradient of rotary position embedding";
  let description = [{
    RoPE is a rotation per pair of elements, so its gradient is `dy` rotated
    by the negative angles, `-pos * theta^(-2i / head_dim)`, with the forward
    op's pairing. It needs nothing from the forward but its attributes.

    FLOPs: 6 per element.

    ```mlir
    %dq = model.rotary_backward %dy {head_dim = 128 : i64, theta = 5.000000e+05 : f64} : tensor<1x8192x4096xbf16>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$dy,
                       ConfinedAttr<I64Attr, [IntPositive]>:$head_dim,
                       DefaultValuedAttr<F64Attr, "10000.0">:$theta);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Model_SplitBackwardOp : Model_BackwardOp<"split_backward"> {
  let summary = "Gradient of a split: its pieces' gradients, concatenated";
  let description = [{
    The gradients of a `model.split`'s results, in order, concatenated
    along the last dimension into the gradient of its input.

    FLOPs: none (a copy).

    ```mlir
    %dqkv = model.split_backward %dq, %dk, %dv : (tensor<1x4096x3072xbf16>, tensor<1x4096x3072xbf16>, tensor<1x4096x3072xbf16>) -> tensor<1x4096x9216xbf16>
    ```
  }];
  let arguments = (ins Variadic<Model_FloatTensor>:$dpieces);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat =
      "$dpieces attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Model_CausalAttentionBackwardOp
    : Model_BackwardOp<"causal_attention_backward"> {
  let summary = "Gradients of causal grouped-query attention";
  let description = [{
    From the forward operands `q`, `k`, `v`, the forward result `out` and its
    gradient `dout` (both the shape of `q`), computes `dq`, `dk` and `dv`
    with the shapes of `q`, `k` and `v`. With `P` the causal softmax
    probabilities and `D = rowsum(dout * out)`:
    `dv = P^T dout`, `dP = dout v^T`, `dS = P * (dP - D) / sqrt(head_dim)`,
    `dq = dS k`, `dk = dS^T q`. A key/value head shared by several query
    heads receives the sum of their contributions in `dk` and `dv`.

    `saved` is what the forward `model.causal_attention` of the same
    `kernel` yielded: for `flash` the row log-sum-exp `L` (f32 `[batch,
    num_heads, seq]`), from which the backward recomputes `S = q k^T /
    sqrt(head_dim)` and `P = exp(S - L)`; for `materialized`, `P` itself.
    `window` must be its forward's: keys outside it have `P = 0`.

    FLOPs: `8 * batch * num_heads * seq^2 * head_dim` for the four products
    (over the full square, like the forward) + 10 per score; `flash` adds
    the recomputation, `2 * batch * num_heads * seq^2 * head_dim` for
    `q k^T` + 2 per score for `exp(S - L)`.

    ```mlir
    %dq, %dk, %dv = model.causal_attention_backward %q, %k, %v, %out, %dout, %lse {num_heads = 32 : i64, num_kv_heads = 8 : i64}
        : (tensor<1x8192x4096xbf16>, tensor<1x8192x1024xbf16>, tensor<1x8192x1024xbf16>, tensor<1x8192x4096xbf16>, tensor<1x8192x4096xbf16>, tensor<1x32x8192xf32>)
        -> (tensor<1x8192x4096xbf16>, tensor<1x8192x1024xbf16>, tensor<1x8192x1024xbf16>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$q, Model_FloatTensor:$k,
                       Model_FloatTensor:$v, Model_FloatTensor:$out,
                       Model_FloatTensor:$dout, Model_FloatTensor:$saved,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads,
                       Model_AttentionKernelDefault:$kernel,
                       DefaultValuedAttr<I64Attr, "0">:$window);
  let results = (outs Model_FloatTensor:$dq, Model_FloatTensor:$dk,
                      Model_FloatTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $dout `,` $saved (`kernel` `=` $kernel^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getHeadDim() {
      return getQ().getType().getShape().back() / getNumHeads();
    }
  }];
}

def Model_CrossEntropyBackwardOp : Model_BackwardOp<"cross_entropy_backward"> {
  let summary = "Gradient of the mean cross-entropy with respect to the logits";
  let description = [{
    `dlogits[b, s, :] = (softmax(logits[b, s, :]) - onehot(targets[b, s])) *
    dloss / (batch * seq)`, computed in f32 and stored in the logits' dtype.
    `dloss` is the gradient of the loss (the backward seed). With `classes`
    (the forward's), the softmax is over the first `classes` logits and the
    padding columns' gradient is zero.

    FLOPs: 8 per logit.

    ```mlir
    %dlogits = model.cross_entropy_backward %logits, %targets, %seed : (tensor<4x1024x50257xf32>, tensor<4x1024xi32>, tensor<f32>) -> tensor<4x1024x50257xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_TokenTensor:$targets,
                       Model_LossTensor:$dloss,
                       OptionalAttr<I64Attr>:$classes);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $targets `,` $dloss attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mixture of experts (Mixtral)
//===----------------------------------------------------------------------===//

def Model_RoutingWeights : StaticShapeTensorOf<[F32]>;

def Model_MoeRouterOp : Model_ComputeOp<"moe_router", [], [],
    ["getSavedStateType", "getSavedState"]> {
  let summary = "Mixture-of-experts router: linear, softmax, top-k";
  let description = [{
    Hugging Face's `MixtralSparseMoeBlock` routing, for `input`
    `[batch, seq, hidden]` and the router weight `gate` `[num_experts,
    hidden]` (no bias):
    `logits[t, e] = sum_i x[t, i] gate[e, i]`, `p = softmax(logits[t, :])`
    in f32, and `(weights[t, j], indices[t, j])` the `top_k` largest `p`,
    in decreasing order, ties broken by the lower expert index. With
    `normalize` (Mixtral's `norm_topk_prob`), the `top_k` weights are
    divided by their sum. `weights` is f32 `[batch, seq, top_k]`,
    `indices` i32 `[batch, seq, top_k]`.

    In a training graph the op yields `saved`, the logits (f32
    `[batch, seq, num_experts]`), from which its backward recomputes the
    softmax. The selection is a constant of the backward: the gradient
    flows through the weights only. No auxiliary load-balancing loss: the
    Mixtral config that asks for one (`output_router_logits: true`) is
    refused by `zeroc gen` (docs/model-dialect.md, "Mixture of experts").

    FLOPs: `2 * tokens * num_experts * hidden` for the logits, 4 per logit
    for the softmax, 2 per selected weight for the normalisation.

    ```mlir
    %w, %idx = model.moe_router %x, %gate {normalize, top_k = 2 : i64} : (tensor<1x4096x4096xbf16>, tensor<8x4096xbf16>) -> (tensor<1x4096x2xf32>, tensor<1x4096x2xi32>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$gate,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
                       UnitAttr:$normalize);
  let results = (outs Model_RoutingWeights:$weights,
                      Model_TokenTensor:$indices,
                      Optional<Model_RoutingWeights>:$saved);
  let assemblyFormat = [{
    $input `,` $gate attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumExperts() {
      return ::llvm::cast<::mlir::RankedTensorType>(getGate().getType())
          .getDimSize(0);
    }
  }];
}

def Model_MoeExpertsOp : Model_ComputeOp<"moe_experts", [], [],
    ["getSavedStateType", "getSavedState", "isKeptBySelectiveRecompute"]> {
  let summary = "Mixture-of-experts block: routed SwiGLU experts, combined";
  let description = [{
    `num_experts` SwiGLU experts with stacked parameters, `w1` and `w3`
    `[num_experts, intermediate, hidden]`, `w2` `[num_experts, hidden,
    intermediate]` (Mixtral's `experts.*.w1`, `w3`, `w2` stacked along a
    new leading dimension), applied to `input` `[batch, seq, hidden]` as
    the router `weights` and `indices` (`[batch, seq, top_k]`, from
    `model.moe_router`) say:
    `expert_e(v) = W2_e (silu(W1_e v) * (W3_e v))`,
    `y[t] = sum_j weights[t, j] * expert_{indices[t, j]}(x[t])`.

    Dropless, token-sorted dispatch: the `tokens * top_k` (token, slot)
    pairs are ordered by expert (a stable counting sort), so the dispatched
    rows are `[tokens * top_k, .]` whatever the routing: memory does not
    depend on the token distribution. In a training graph the op yields
    `saved`, the model dtype, `tokens * top_k * (2 * intermediate +
    hidden)` elements: `W1 v` and `W3 v` of every dispatched row
    (`[tokens * top_k, intermediate]` each) and the experts' outputs before
    the combine (`[tokens * top_k, hidden]`), in that order.

    `max_expert_share` is a planning assumption, not semantics: the largest
    share of the `tokens * top_k` dispatched rows one expert receives,
    `1 / num_experts` (uniform, the default when absent) to `1 / top_k`
    (the worst case: every token routes one slot to the same expert). With
    local experts it changes neither the FLOPs nor the memory (the grouped
    products cover `tokens * top_k` rows in all); it bounds the busiest
    expert's rows, what per-expert time and expert parallelism depend on.

    FLOPs: `6 * tokens * top_k * hidden * intermediate` for the three
    products of the routed rows only (`top_k` active experts per token),
    5 per intermediate element (SiLU 4, product 1), 2 per combined
    element (`tokens * top_k * hidden`).

    ```mlir
    %y = model.moe_experts %x, %w, %idx, %w1, %w3, %w2 : (tensor<1x4096x4096xbf16>, tensor<1x4096x2xf32>, tensor<1x4096x2xi32>, tensor<8x14336x4096xbf16>, tensor<8x14336x4096xbf16>, tensor<8x4096x14336xbf16>) -> tensor<1x4096x4096xbf16>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input,
                       Model_RoutingWeights:$weights,
                       Model_TokenTensor:$indices, Model_FloatTensor:$w1,
                       Model_FloatTensor:$w3, Model_FloatTensor:$w2,
                       OptionalAttr<F64Attr>:$max_expert_share);
  let results = (outs Model_FloatTensor:$result,
                      Optional<Model_FloatTensor>:$saved);
  let assemblyFormat = [{
    $input `,` $weights `,` $indices `,` $w1 `,` $w3 `,` $w2 attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumExperts() {
      return ::llvm::cast<::mlir::RankedTensorType>(getW1().getType())
          .getDimSize(0);
    }
    int64_t getIntermediateSize() {
      return ::llvm::cast<::mlir::RankedTensorType>(getW1().getType())
          .getDimSize(1);
    }
    int64_t getTopK() {
      return ::llvm::cast<::mlir::RankedTensorType>(getWeights().getType())
          .getShape().back();
    }
    /// The planning assumption: max_expert_share, 1 / num_experts when
    /// absent.
    double getAssumedMaxShare() {
      if (auto share = getMaxExpertShareAttr())
        return share.getValueAsDouble();
      return 1.0 / double(getNumExperts());
    }
  }];
}

def Model_MoeRouterBackwardOp : Model_BackwardOp<"moe_router_backward"> {
  let summary = "Gradients of the mixture-of-experts router";
  let description = [{
    From the forward's `input` and `gate`, the gradient of the routing
    weights `dweights` (f32 `[batch, seq, top_k]`), the forward's `saved`
    logits and `indices`: the selection is constant; with `p` the softmax
    of the logits and `normalize` (its forward's), the selected weights are
    `w_j = p_{i_j} / s`, `s = sum_j p_{i_j}`, so
    `dp_{i_j} = (dw_j - sum_l dw_l w_l) / s` (without `normalize`,
    `dp_{i_j} = dw_j`), zero elsewhere; `dlogits = p * (dp - sum_e dp_e p_e)`;
    then `dinput = dlogits gate` and `dgate = dlogits^T input`, summed over
    tokens, in the dtypes of `input` and `gate`.

    FLOPs: `4 * tokens * num_experts * hidden` for the two products, 6 per
    logit.

    ```mlir
    %dx, %dgate = model.moe_router_backward %x, %gate, %dw, %logits, %idx {normalize} : (tensor<1x8x64xf32>, tensor<4x64xf32>, tensor<1x8x2xf32>, tensor<1x8x4xf32>, tensor<1x8x2xi32>) -> (tensor<1x8x64xf32>, tensor<4x64xf32>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$gate,
                       Model_RoutingWeights:$dweights,
                       Model_RoutingWeights:$saved,
                       Model_TokenTensor:$indices, UnitAttr:$normalize);
  let results = (outs Model_FloatTensor:$dinput, Model_FloatTensor:$dgate);
  let assemblyFormat = [{
    $input `,` $gate `,` $dweights `,` $saved `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_MoeExpertsBackwardOp : Model_BackwardOp<"moe_experts_backward"> {
  let summary = "Gradients of the mixture-of-experts block";
  let description = [{
    From the forward's operands, the gradient `dy` of its result and its
    `saved` state: the combine's backward (`dweights[t, j] = dy[t] .
    expert_{indices[t, j]}(x[t])`, f32, and each dispatched row's gradient
    `weights[t, j] dy[t]`), then each expert's SwiGLU backward on its rows:
    `dinput` (the sum over a token's `top_k` slots) and `dw1`, `dw3`, `dw2`
    (each expert's gradient from its own rows only; an expert that
    receives no token gets zeros).

    FLOPs: `12 * tokens * top_k * hidden * intermediate` (twice the
    forward products), 10 per intermediate element, 4 per combined
    element.

    ```mlir
    %dx, %dw, %dw1, %dw3, %dw2 = model.moe_experts_backward %x, %w, %idx, %w1, %w3, %w2, %dy, %saved : (...) -> (...)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input,
                       Model_RoutingWeights:$weights,
                       Model_TokenTensor:$indices, Model_FloatTensor:$w1,
                       Model_FloatTensor:$w3, Model_FloatTensor:$w2,
                       Model_FloatTensor:$dy, Model_FloatTensor:$saved);
  let results = (outs Model_FloatTensor:$dinput,
                      Model_RoutingWeights:$dweights,
                      Model_FloatTensor:$dw1, Model_FloatTensor:$dw3,
                      Model_FloatTensor:$dw2);
  let assemblyFormat = [{
    $input `,` $weights `,` $indices `,` $w1 `,` $w3 `,` $w2 `,` $dy `,` $saved attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_MoeRouterStatsOp : Model_ComputeOp<"moe_router_stats"> {
  let summary = "A router's load statistics, for the load-balancing loss";
  let description = [{
    What Hugging Face's `load_balancing_loss_func` takes from one layer's
    router, for `input` `[batch, seq, hidden]`, the router weight `gate`
    `[num_experts, hidden]` and the router's `indices` `[batch, seq,
    top_k]`: row 0 of the f32 result `[2, num_experts]` counts the
    (token, slot) pairs routed to each expert (`torch.histc` of the
    selected experts), row 1 sums each expert's softmax probability over
    the tokens, `p = softmax(x gate^T)` in f32, as `moe_router` computes
    it. The logits are recomputed from `input` and `gate` (the router
    keeps them only as its saved state): a second `2 * tokens *
    num_experts * hidden` product, not a model FLOP.

    Its backward (`moe_router_stats_backward`) takes the gradient of the
    probability sums (the counts are constants) to `input` and `gate`.

    FLOPs: `2 * tokens * num_experts * hidden` for the logits, 5 per logit
    (softmax and sum), 1 per selected expert.

    ```mlir
    %s = model.moe_router_stats %x, %gate, %idx : (tensor<1x4096x4096xbf16>, tensor<8x4096xbf16>, tensor<1x4096x2xi32>) -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$gate,
                       Model_TokenTensor:$indices);
  let results = (outs Model_RoutingWeights:$result);
  let assemblyFormat = [{
    $input `,` $gate `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumExperts() {
      return ::llvm::cast<::mlir::RankedTensorType>(getGate().getType())
          .getDimSize(0);
    }
  }];
}

def Model_MoeLoadBalancingLossOp
    : Model_ComputeOp<"moe_load_balancing_loss"> {
  let summary = "The loss plus Mixtral's auxiliary load-balancing loss";
  let description = [{
    `loss + coefficient * aux` with Hugging Face's `load_balancing_loss_func`
    (Switch Transformer's equations 4-6) over every layer's
    `moe_router_stats` `[2, num_experts]`: with `C_e` the (token, slot)
    pairs routed to expert `e` and `P_e` its summed probability, both summed
    over the layers, and `N` the rows over all layers (`sum_e C_e /
    top_k`), `aux = num_experts * sum_e (C_e / N) (P_e / N)`.
    `coefficient` is Mixtral's `router_aux_loss_coef`; Hugging Face adds
    the term when `output_router_logits` is true.

    The term is a micro-batch's, like the cross-entropy beside it: the
    backward seed's `1 / micro_steps` and the ranks' mean average it over
    the global batch (DeepSpeed's `engine.backward` and data-parallel mean).

    FLOPs: 3 per statistic.

    ```mlir
    %l = model.moe_load_balancing_loss %ce, %s0, %s1 {coefficient = 2.000000e-02 : f64, top_k = 2 : i64} : (tensor<f32>, tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Model_LossTensor:$loss,
                       Variadic<Model_RoutingWeights>:$stats,
                       F64Attr:$coefficient,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k);
  let results = (outs Model_LossTensor:$result);
  let assemblyFormat = [{
    $loss `,` $stats attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_MoeRouterStatsBackwardOp
    : Model_BackwardOp<"moe_router_stats_backward"> {
  let summary = "Gradients of a router's probability sums";
  let description = [{
    From the forward's `input` and `gate` and `dstats` `[2, num_experts]`
    (row 1, the gradient of the probability sums `g`; row 0, of the counts,
    is not read): the logits and `p` are recomputed as the forward computes
    them, `dlogits = p * (g - sum_e p_e g_e)` in the model dtype, then
    `dinput = dlogits gate` and `dgate = dlogits^T input`, summed over
    tokens, in the dtypes of `input` and `gate`.

    FLOPs: `6 * tokens * num_experts * hidden` (the logits again and the
    two products), 8 per logit.

    ```mlir
    %dx, %dgate = model.moe_router_stats_backward %x, %gate, %ds : (tensor<1x8x64xf32>, tensor<4x64xf32>, tensor<2x4xf32>) -> (tensor<1x8x64xf32>, tensor<4x64xf32>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_FloatTensor:$gate,
                       Model_RoutingWeights:$dstats);
  let results = (outs Model_FloatTensor:$dinput, Model_FloatTensor:$dgate);
  let assemblyFormat = [{
    $input `,` $gate `,` $dstats attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_MoeLoadBalancingLossBackwardOp
    : Model_BackwardOp<"moe_load_balancing_loss_backward"> {
  let summary = "Gradient of the load-balancing loss in the routers' statistics";
  let description = [{
    From `dloss` and the forward's `stats`: the gradient of every layer's
    statistics, the same for each, `[2, num_experts]`: row 0 zero (the
    counts are constants), row 1 `dloss * coefficient * num_experts * C_e /
    N^2` (the notation of `moe_load_balancing_loss`). The loss operand's
    own gradient is `dloss`.

    FLOPs: 1 per statistic.

    ```mlir
    %ds = model.moe_load_balancing_loss_backward %dl, %s0, %s1 {coefficient = 2.000000e-02 : f64, top_k = 2 : i64} : (tensor<f32>, tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Model_LossTensor:$dloss,
                       Variadic<Model_RoutingWeights>:$stats,
                       F64Attr:$coefficient,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k);
  let results = (outs Model_RoutingWeights:$dstats);
  let assemblyFormat = [{
    $dloss `,` $stats attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Expert parallelism
//
// Under expert parallelism (DeepSpeed-MoE's `ep_size`), `zero-partition`
// splits each `model.moe_experts` and its backward at the two token
// exchanges: the dispatch (rows sorted by expert), this rank's local experts
// on the rows it receives, and the combine. `zero-insert-collectives` puts
// the `sched.all_to_all_start` exchanges between them. They are schedule
// ops: built after differentiation, costed, not differentiable.
//===----------------------------------------------------------------------===//

class Model_ExpertParallelOp<string mnemonic, list<Trait> traits = []>
    : Model_Op<mnemonic, !listconcat(traits, [
        Pure, DeclareOpInterfaceMethods<Model_CostOpInterface>])>;

def Model_MoeDispatchOp : Model_ExpertParallelOp<"moe_dispatch"> {
  let summary = "Rows of the routed tokens, sorted by expert";
  let description = [{
    For `input` `[batch, seq, hidden]` and the router's `indices`
    `[batch, seq, top_k]` over `num_experts` experts: the `tokens * top_k`
    (token, slot) pairs ordered by expert, a stable counting sort (as
    `model.moe_experts` orders them), each row `input[t]`. So the rows each
    rank of the expert-parallel group receives (its experts' rows) are
    contiguous. A copy: no FLOPs.

    ```mlir
    %rows = model.moe_dispatch %x, %idx {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<1x8x2xi32>) -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$input, Model_TokenTensor:$indices,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts);
  let results = (outs Model_FloatTensor:$rows);
  let assemblyFormat = [{
    $input `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_MoeCombineOp : Model_ExpertParallelOp<"moe_combine"> {
  let summary = "Expert rows back to their tokens, weighted and summed";
  let description = [{
    The inverse of `model.moe_dispatch` for `rows` `[tokens * top_k,
    hidden]` in its order: `result[t] = sum_j weights[t, j] *
    rows[pos(t, j)]` (`result` `[batch, seq, hidden]` as `indices`' first
    two dimensions say). Without `weights` the rows are summed unweighted:
    the gradient of the dispatch's input.

    FLOPs: 2 per combined element with `weights`, 1 without.

    ```mlir
    %y = model.moe_combine %rows, %idx, %w {num_experts = 4 : i64} : (tensor<16x64xf32>, tensor<1x8x2xi32>, tensor<1x8x2xf32>) -> tensor<1x8x64xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$rows, Model_TokenTensor:$indices,
                       Optional<Model_RoutingWeights>:$weights,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $rows `,` $indices (`,` $weights^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_MoeCombineBackwardOp
    : Model_ExpertParallelOp<"moe_combine_backward"> {
  let summary = "Gradients of the weighted combine";
  let description = [{
    From `dy` `[batch, seq, hidden]`, the combined `rows`, the routing
    `weights` and `indices`: `drows[pos(t, j)] = weights[t, j] dy[t]` (in
    dispatch order) and `dweights[t, j] = dy[t] . rows[pos(t, j)]` (f32).

    FLOPs: 3 per combined element.

    ```mlir
    %drows, %dw = model.moe_combine_backward %dy, %rows, %w, %idx {num_experts = 4 : i64} : (tensor<1x8x64xf32>, tensor<16x64xf32>, tensor<1x8x2xf32>, tensor<1x8x2xi32>) -> (tensor<16x64xf32>, tensor<1x8x2xf32>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$dy, Model_FloatTensor:$rows,
                       Model_RoutingWeights:$weights,
                       Model_TokenTensor:$indices,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts);
  let results = (outs Model_FloatTensor:$drows,
                      Model_RoutingWeights:$dweights);
  let assemblyFormat = [{
    $dy `,` $rows `,` $weights `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Model_MoeLocalExpertsOp : Model_ExpertParallelOp<"moe_local_experts"> {
  let summary = "This rank's experts on the rows they receive";
  let description = [{
    The `num_experts / ep` experts this rank holds (`w1`, `w3` `[local,
    intermediate, hidden]`, `w2` `[local, hidden, intermediate]`, ep the
    module's `sched.expert_parallel_size`), each applied to its rows of
    `rows` `[R, hidden]`: `W2_e (silu(W1_e v) * (W3_e v))`. Which rows go
    to which local expert is the per-(source rank, expert) row counts the
    dispatch exchange delivers with the rows (grouped by source rank, then
    expert).

    `R` is what the planning assumption gives the busiest rank
    (`max_expert_share`, absent: `1 / num_experts`, uniform; the formula
    is zeroc/Support/ExpertParallel.h's, `tokens * top_k` when uniform and
    divisible); `zero-insert-collectives` plans the receive buffer for it. `saved` is `W1 v` and `W3 v` of every row, the
    model dtype, `R * 2 * intermediate` elements.

    FLOPs: `6 * R * hidden * intermediate` for the three products, 5 per
    intermediate element (SiLU 4, product 1).

    ```mlir
    %out, %saved = model.moe_local_experts %rows, %w1, %w3, %w2 {num_experts = 4 : i64, top_k = 2 : i64} : (tensor<16x64xf32>, tensor<2x96x64xf32>, tensor<2x96x64xf32>, tensor<2x64x96xf32>) -> (tensor<16x64xf32>, tensor<3072xf32>)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$rows, Model_FloatTensor:$w1,
                       Model_FloatTensor:$w3, Model_FloatTensor:$w2,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$top_k,
                       OptionalAttr<F64Attr>:$max_expert_share);
  let results = (outs Model_FloatTensor:$result, Model_FloatTensor:$saved);
  let assemblyFormat = [{
    $rows `,` $w1 `,` $w3 `,` $w2 attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getLocalExperts() {
      return ::llvm::cast<::mlir::RankedTensorType>(getW1().getType())
          .getDimSize(0);
    }
  }];
}

def Model_MoeLocalExpertsBackwardOp
    : Model_ExpertParallelOp<"moe_local_experts_backward"> {
  let summary = "Gradients of this rank's experts";
  let description = [{
    From the forward's `rows`, weights and `saved` state and the gradient
    `drows_out` of its result: each local expert's SwiGLU backward on its
    rows, `drows` and `dw1`, `dw3`, `dw2` (an expert that receives no row
    gets zeros).

    FLOPs: `12 * R * hidden * intermediate`, 10 per intermediate element.

    ```mlir
    %drows, %dw1, %dw3, %dw2 = model.moe_local_experts_backward %rows, %w1, %w3, %w2, %dout, %saved : (...) -> (...)
    ```
  }];
  let arguments = (ins Model_FloatTensor:$rows, Model_FloatTensor:$w1,
                       Model_FloatTensor:$w3, Model_FloatTensor:$w2,
                       Model_FloatTensor:$dout, Model_FloatTensor:$saved);
  let results = (outs Model_FloatTensor:$drows, Model_FloatTensor:$dw1,
                      Model_FloatTensor:$dw3, Model_FloatTensor:$dw2);
  let assemblyFormat = [{
    $rows `,` $w1 `,` $w3 `,` $w2 `,` $dout `,` $saved attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Training step
//
// The ops around the gradients that `zero-expand-training-step` emits: the
// backward seed, gradient accumulation, and the optimizer step. They act on
// state that is not an SSA value (the loss scale, the gradient accumulators,
// the optimizer state), so none is Pure: their memory effects keep generic
// passes from removing, merging or reordering them.
//===----------------------------------------------------------------------===//

def Model_BackwardSeedOp
    : Model_Op<"backward_seed", [MemoryEffects<[MemRead]>]> {
  let summary = "The gradient of the loss that starts backward";
  let description = [{
    `1 / micro_steps`, times the current loss scale when `loss_scaling` is
    set (the static scale, or the dynamic scale that `model.unscale_grads`
    maintains, DeepSpeed's fp16 semantics). Seeding backward with
    `1 / micro_steps` makes the gradient accumulated over `micro_steps`
    micro-batches the gradient of their mean loss. It reads the loss-scale
    state, hence its read effect.

    ```mlir
    %seed = model.backward_seed {loss_scaling, micro_steps = 4 : i64} : tensor<f32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntPositive]>:$micro_steps,
                       UnitAttr:$loss_scaling);
  let results = (outs Model_LossTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Model_AccumulateGradOp : Model_Op<"accumulate_grad", [
    MemoryEffects<[MemWrite]>, Model_MustLowerBeforePlan,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Adds a gradient into a parameter's gradient accumulator";
  let description = [{
    `grad(param) += grad`. The accumulator has the parameter's type, starts
    at zero and is cleared by `model.adam_update`. The training-step
    expansion emits one per parameter, as soon as the parameter's gradient is
    complete in the micro-step, which is where a ZeRO schedule can start
    reducing it.

    ```mlir
    model.accumulate_grad @"h.0.mlp.c_fc.weight", %dw : tensor<3072x768xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Model_FloatTensor:$grad);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($grad)";
}

def Model_UnscaleGradsOp : Model_Op<"unscale_grads", [
    MemoryEffects<[MemRead, MemWrite]>, Model_MustLowerBeforePlan]> {
  let summary = "Unscales the gradients and updates the loss scale";
  let description = [{
    fp16 loss scaling, DeepSpeed's semantics: divides every accumulated
    gradient by the current loss scale and checks all of them for inf or NaN.
    With a positive `static_loss_scale` the scale is that constant. Otherwise
    it is dynamic: it starts at `2^initial_scale_power`; an overflow skips the
    rest of the optimizer step (the gradients are discarded and the
    parameters, optimizer state and step count are left as they are) and,
    once `hysteresis` overflows have been seen, halves the scale, not below
    `min_loss_scale`; `loss_scale_window` steps in a row without overflow
    double it.

    ```mlir
    model.unscale_grads {hysteresis = 2 : i64, initial_scale_power = 16 : i64, loss_scale_window = 1000 : i64, min_loss_scale = 1.000000e+00 : f64, static_loss_scale = 0.000000e+00 : f64}
    ```
  }];
  let arguments = (ins F64Attr:$static_loss_scale,
                       I64Attr:$initial_scale_power,
                       I64Attr:$loss_scale_window, I64Attr:$hysteresis,
                       F64Attr:$min_loss_scale);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The verifier's rules, shared with the training-step expansion, which
    /// checks its options with them before building the op.
    static ::mlir::LogicalResult verifySettings(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
        double staticLossScale, int64_t initialScalePower,
        int64_t lossScaleWindow, int64_t hysteresis, double minLossScale);
  }];
}

def Model_ClipGradNormOp : Model_Op<"clip_grad_norm", [
    MemoryEffects<[MemRead, MemWrite]>, Model_MustLowerBeforePlan]> {
  let summary = "Clips the global gradient norm";
  let description = [{
    Computes the L2 norm of all parameters' accumulated gradients together
    and scales every gradient by `max_norm / max(norm, max_norm)`, so the
    global norm is at most `max_norm`. Under ZeRO the norm is a sum of
    per-shard squares reduced over ranks.

    ```mlir
    model.clip_grad_norm {max_norm = 1.000000e+00 : f64}
    ```
  }];
  let arguments = (ins F64Attr:$max_norm);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Model_AdamUpdateOp : Model_Op<"adam_update", [
    MemoryEffects<[MemRead, MemWrite]>, Model_MustLowerBeforePlan,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "One Adam, AdamW or LAMB step of a parameter";
  let description = [{
    Updates `param` from its accumulated gradient `g`, then clears the
    accumulator. With step count `t` (kept by the runtime, advanced once per
    optimizer step that is not skipped):
    `m = beta1 m + (1 - beta1) g`, `v = beta2 v + (1 - beta2) g^2`,
    `p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)`.
    Weight decay is decoupled with `adamw` (`p -= lr * weight_decay * p`
    first) and otherwise added to the gradient (`g += weight_decay * p`).

    With `lamb` it is DeepSpeed's FusedLamb step instead:
    `u = m / (sqrt(v) + eps) + weight_decay p`,
    `r = clamp(||p|| / ||u||, min_coeff, max_coeff)` (1 when either norm is
    0), `p -= lr sqrt(1 - beta2^t) / (1 - beta1^t) r u`. The norms are the
    whole parameter's, however its state is sharded.

    `no_bias_correction` (DeepSpeed's `bias_correction: false`) drops the
    correction of the moments: Adam's step is
    `p -= lr * m / (sqrt(v) + eps)` and LAMB's `p -= lr r u`.

    The optimizer state (`exp_avg` and `exp_avg_sq` in f32, plus an f32
    master copy of a 16-bit parameter) is implied; where it lives and how it
    is sharded is the partitioner's business.

    ```mlir
    model.adam_update @"wte.weight" {adamw, beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-01 : f64}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, F64Attr:$lr, F64Attr:$beta1,
                       F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay,
                       UnitAttr:$adamw, UnitAttr:$lamb,
                       OptionalAttr<F64Attr>:$max_coeff,
                       OptionalAttr<F64Attr>:$min_coeff,
                       UnitAttr:$no_bias_correction);
  let assemblyFormat = "$param attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The verifier's rules, shared with the training-step expansion, which
    /// checks its options with them before building the op.
    static ::mlir::LogicalResult verifySettings(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
        double lr, double beta1, double beta2, double eps, double weightDecay);
    /// LAMB's trust-ratio bounds, checked by the verifier and the expansion.
    static ::mlir::LogicalResult verifyLambSettings(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
        double maxCoeff, double minCoeff);
    /// Which step the attributes select: the trust-ratio bounds exactly
    /// with `lamb`, not `adamw` with it, and the bounds in range. Shared
    /// with sched.adam_update.
    static ::mlir::LogicalResult verifyStepKind(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError,
        bool adamw, bool lamb, ::mlir::FloatAttr maxCoeff,
        ::mlir::FloatAttr minCoeff);
  }];
}

#endif // ZEROC_MODEL_OPS
