//===- ModelDialect.td - The model dialect ------------------*- tablegen -*-===//
//
// What the user trains: parameters as module-level symbols and a forward
// function of layer-granularity ops over tensors.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_MODEL_DIALECT
#define ZEROC_MODEL_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Model_Dialect : Dialect {
  let name = "model";
  let cppNamespace = "::zeroc::model";
  let summary = "Training graphs at layer granularity";
  let description = [{
    The `model` dialect describes what a user trains. Parameters are
    module-level symbols (`model.param`) with a static shape, a dtype (f32,
    bf16 or f16) and an initialization spec. The forward function
    (`func.func @forward`) takes token ids and targets and returns the scalar
    loss; it refers to parameters through `model.param_ref`.

    Ops are at layer granularity (embedding, linear, norms, activations,
    attention, loss) because that is the unit ZeRO schedules and the unit the
    runtime has kernels for. Every compute op implements `CostOpInterface`,
    `SavesForBackwardOpInterface` and `DifferentiableOpInterface`, which
    later passes query instead of switching on op names. The backward ops
    and the training-step ops (`model.accumulate_grad`, `model.adam_update`,
    ...) are what `zero-expand-training-step` builds from them.

    Conventions: a linear weight is `[out_features, in_features]` and computes
    `y = x W^T + b` (PyTorch's layout); activations are `[batch, seq, ...]`;
    token ids are `i32`.
  }];
  let useDefaultAttributePrinterParser = 1;
}

class Model_Op<string mnemonic, list<Trait> traits = []>
    : Op<Model_Dialect, mnemonic, traits>;

/// An op that names a parameter's logical state (its value, its gradient,
/// its optimizer update) and that zero-insert-collectives lowers to sched
/// ops: a schedule that still holds one is not a plan.
def Model_MustLowerBeforePlan : NativeOpTrait<"MustLowerBeforePlan"> {
  let cppNamespace = "::zeroc::model";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Model_InitKind : I32EnumAttr<"InitKind", "parameter initialization", [
    I32EnumAttrCase<"Zeros", 0, "zeros">,
    I32EnumAttrCase<"Ones", 1, "ones">,
    I32EnumAttrCase<"Normal", 2, "normal">,
  ]> {
  let cppNamespace = "::zeroc::model";
  let genSpecializedAttr = 0;
}

def Model_AttentionKernel : I32EnumAttr<"AttentionKernel",
    "the kernel family of an attention and its backward", [
    I32EnumAttrCase<"Flash", 0, "flash">,
    I32EnumAttrCase<"Materialized", 1, "materialized">,
  ]> {
  let cppNamespace = "::zeroc::model";
}

def Model_InitAttr : AttrDef<Model_Dialect, "Init"> {
  let mnemonic = "init";
  let summary = "How a parameter is initialized";
  let description = [{
    `zeros`, `ones`, or `normal(STD)`: a normal distribution with mean 0 and
    the given standard deviation. The runtime draws the value of element `i`
    from a counter-based generator keyed by the parameter and `i`, so a
    sharded run starts from exactly the weights of an unsharded one.

    ```mlir
    #model.init<normal(0.02)>
    #model.init<ones>
    ```
  }];
  let parameters = (ins "::zeroc::model::InitKind":$kind,
                        APFloatParameter<"standard deviation">:$std);
  let builders = [
    AttrBuilder<(ins "::zeroc::model::InitKind":$kind, CArg<"double", "0.0">:$std), [{
      return $_get($_ctxt, kind, ::llvm::APFloat(std));
    }]>
  ];
  let extraClassDeclaration = [{
    double getStdDouble() const { return getStd().convertToDouble(); }
  }];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // ZEROC_MODEL_DIALECT
