//===- ModelOps.h - The model dialect's ops, attributes, interfaces -*- C++
//-*-===//
//
// Everything a client of the model dialect includes.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_MODEL_MODELOPS_H
#define ZEROC_MODEL_MODELOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "zeroc/Support/DType.h"

#include <optional>

#include "model/ModelDialect.h.inc"
#include "model/ModelEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "model/ModelAttrs.h.inc"

namespace zeroc::model {

/// The zeroc dtype of an MLIR element type, if it is one zeroc knows.
std::optional<DType> toDType(mlir::Type elementType);

/// Bytes of a statically shaped tensor (0 for anything else).
int64_t tensorBytes(mlir::Type type);

namespace detail {
/// Default of CostOpInterface::getForwardBytes: every operand read once and
/// every result written once.
int64_t operandAndResultBytes(mlir::Operation *op);
} // namespace detail

/// Marks an op that zero-insert-collectives lowers (ModelDialect.td's
/// MustLowerBeforePlan): zero-verify-schedule refuses a schedule holding one.
template <typename ConcreteType>
class MustLowerBeforePlan
    : public mlir::OpTrait::TraitBase<ConcreteType, MustLowerBeforePlan> {};

} // namespace zeroc::model

#include "model/ModelInterfaces.h.inc"

#define GET_OP_CLASSES
#include "model/ModelOps.h.inc"

#endif // ZEROC_MODEL_MODELOPS_H
