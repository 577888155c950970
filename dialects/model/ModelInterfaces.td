//===- ModelInterfaces.td - Op interfaces of the model dialect -*- tablegen -*-===//
//
// The questions that later passes ask of every model op: what it costs, what it
// keeps alive for backward, and how to differentiate it. Passes query these
// interfaces instead of switching on op names.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_MODEL_INTERFACES
#define ZEROC_MODEL_INTERFACES

include "mlir/IR/OpBase.td"

def Model_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::zeroc::model";
  let description = [{
    The forward cost of an op, used by `zeroc stats`, the cost model and the
    simulator. FLOPs count a multiply and an add as two operations. Matrix
    products are counted exactly; elementwise and normalization ops use the
    fixed per-element costs documented in docs/model-dialect.md (they are a
    few percent of a transformer's FLOPs). The backward pass of every op is
    costed as twice its forward FLOPs, the usual convention behind "6N".
    Backward ops implement the interface too: for them, "forward" means the
    computation the op itself performs.
  }];
  let methods = [
    InterfaceMethod<
      "Floating-point operations of the forward computation.",
      "int64_t", "getForwardFlops">,
    InterfaceMethod<[{
        Bytes the forward computation reads and writes in device memory,
        counting each operand read once and each result written once.
      }],
      "int64_t", "getForwardBytes", (ins), [{}], [{
        return ::zeroc::model::detail::operandAndResultBytes($_op);
      }]>,
  ];
}

def Model_SavesForBackwardOpInterface : OpInterface<"SavesForBackwardOpInterface"> {
  let cppNamespace = "::zeroc::model";
  let description = [{
    What an op keeps alive from its forward to its backward computation: some
    of its operands and results (counted once per value, however many ops save
    it), plus internal state computed by the forward (normalization
    statistics, attention probabilities). Parameters are never activations:
    values produced by `model.param_ref` do not count.

    The internal state is an SSA value, never a side channel: in a training
    graph (after `zero-expand-training-step`) the op yields it as an extra
    result of `getSavedStateType()`, and the op's backward takes that value as
    an operand. A forward-only graph leaves the result out. The link between a
    forward op and its backward is thus dataflow, checked by the verifier, not
    a name or a location; a recomputed op yields its own state.
  }];
  let methods = [
    InterfaceMethod<
      "Appends the operands and results this op's backward reads.",
      "void", "getSavedValues",
      (ins "::llvm::SmallVectorImpl<::mlir::Value> &":$saved)>,
    InterfaceMethod<[{
        The type of the internal state the op's backward reads, or null if
        the backward needs none beyond operands and results.
      }],
      "::mlir::RankedTensorType", "getSavedStateType", (ins), [{}],
      [{ return {}; }]>,
    InterfaceMethod<[{
        The result carrying the internal state, when the op yields it (in a
        training graph); null otherwise.
      }],
      "::mlir::Value", "getSavedState", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        Whether selective recomputation keeps this op's outputs instead of
        recomputing it: true for the matrix products, whose FLOPs dominate
        a layer and whose outputs are small next to them; false for the
        element-wise, normalisation and materialised-attention ops, whose
        outputs are large for their FLOPs (Korthikanti et al. 2022).
      }],
      "bool", "isKeptBySelectiveRecompute", (ins), [{}],
      [{ return false; }]>,
  ];
  let extraSharedClassDeclaration = [{
    /// Bytes of the internal state, whether or not the op yields it.
    int64_t getSavedInternalBytes() {
      return ::zeroc::model::tensorBytes($_op.getSavedStateType());
    }
  }];
}

def Model_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::zeroc::model";
  let description = [{
    How to build an op's backward computation. The training-step expansion
    (`zero-expand-training-step`) walks the forward function in reverse and
    asks every op to emit, at the builder's insertion point, the ops
    computing the gradients of its operands from the gradients of its
    results. The ops emitted carry the forward op's location, so a backward
    op points back at the module it differentiates. Gradients of operands
    that need none (token ids) are left null; so are all of them when no
    result received a gradient.
  }];
  let methods = [
    InterfaceMethod<[{
        Emits the backward ops. `resultGrads` has one entry per result (null
        where the result received no gradient); `operandGrads` gets one entry
        per operand (null where the operand needs no gradient).
      }],
      "::mlir::LogicalResult", "buildBackward",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

def Model_ParameterOpInterface : OpInterface<"ParameterOpInterface"> {
  let cppNamespace = "::zeroc::model";
  let description = [{
    A symbol that declares a trainable parameter: `model.param` before
    partitioning, a `sched.tensor` of role `param` after. The logical uses of
    a parameter (`model.param_ref`, `model.accumulate_grad`,
    `model.adam_update`) name such a symbol, so the ZeRO passes can lower
    them one at a time while the IR stays valid.
  }];
  let methods = [
    InterfaceMethod<[{
        The parameter's full logical type, or null if this symbol does not
        declare a parameter.
      }],
      "::mlir::RankedTensorType", "getParameterType">,
  ];
}

#endif // ZEROC_MODEL_INTERFACES
