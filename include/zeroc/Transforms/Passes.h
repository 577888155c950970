//===- Passes.h - zeroc's lowering passes -----------------------*- C++ -*-===//
//
// Declarations and registration of every pass in Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TRANSFORMS_PASSES_H
#define ZEROC_TRANSFORMS_PASSES_H

#include "model/ModelOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace zeroc {

#define GEN_PASS_DECL
#include "zeroc/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "zeroc/Transforms/Passes.h.inc"

} // namespace zeroc

#endif // ZEROC_TRANSFORMS_PASSES_H
