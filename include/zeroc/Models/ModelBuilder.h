//===- ModelBuilder.h - ModelSpec to a model-dialect module -----*- C++ -*-===//
//
// Generates the forward graph of a GPT-2 or Llama-family decoder (Llama,
// Mistral, Qwen2, Gemma, Phi-3) in the `model` dialect, the input of every
// zeroc pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_MODELS_MODELBUILDER_H
#define ZEROC_MODELS_MODELBUILDER_H

#include "zeroc/Models/ModelSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace zeroc {

/// Builds `module @<name> { model.param ...; func.func @forward(...) }`.
/// Parameter names follow the Hugging Face state dicts
/// (`h.0.attn.q_proj.weight`, `layers.0.mlp.gate_proj.weight`, Phi-3's fused
/// `layers.0.self_attn.qkv_proj.weight`); op locations
/// name the module they belong to. The context must have the model and func
/// dialects loaded.
mlir::OwningOpRef<mlir::ModuleOp> buildModel(mlir::MLIRContext &context,
                                             const ModelSpec &spec);

} // namespace zeroc

#endif // ZEROC_MODELS_MODELBUILDER_H
