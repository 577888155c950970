//===- SchedOps.h - The sched dialect's ops, types, interfaces --*- C++ -*-===//
//
// Everything a client of the sched dialect includes.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SCHED_SCHEDOPS_H
#define ZEROC_SCHED_SCHEDOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "model/ModelOps.h"
#include "zeroc/Support/Collectives.h"

#include "sched/SchedDialect.h.inc"
#include "sched/SchedEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "sched/SchedTypes.h.inc"

#include "sched/SchedInterfaces.h.inc"

#define GET_OP_CLASSES
#include "sched/SchedOps.h.inc"

namespace zeroc::sched {

/// Module attributes of a schedule.
constexpr llvm::StringLiteral kWorldSizeAttr = "sched.world_size";
constexpr llvm::StringLiteral kStageAttr = "sched.stage";

/// The world size of the schedule containing `op` (1 when unset).
int64_t getWorldSize(mlir::Operation *op);

/// Every symbol `op` names in its attributes (flat references, and arrays
/// of them), in attribute order: the persistent tensors and groups it
/// touches.
void getNamedSymbols(mlir::Operation *op,
                     llvm::SmallVectorImpl<llvm::StringRef> &names);

/// The bytes of the buffer holding `value`: its tensor's size, or for a
/// parameter an all-gather completes, the padded size (shard x world size)
/// the gather writes before the tail is dropped.
int64_t bufferBytes(mlir::Value value);

} // namespace zeroc::sched

#endif // ZEROC_SCHED_SCHEDOPS_H
