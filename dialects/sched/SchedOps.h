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
#include "llvm/ADT/DenseMap.h"

#include <optional>

#include "sched/SchedDialect.h.inc"
#include "sched/SchedEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "sched/SchedTypes.h.inc"

#include "sched/SchedInterfaces.h.inc"

#define GET_OP_CLASSES
#include "sched/SchedOps.h.inc"

#include "zeroc/Support/ExpertParallel.h"

namespace zeroc::sched {

/// Module attributes of a schedule (SchedDialect.td declares them, the
/// dialect verifies them).
constexpr llvm::StringLiteral kWorldSizeAttr =
    SchedDialect::WorldSizeAttrHelper::getNameStr();
constexpr llvm::StringLiteral kStageAttr =
    SchedDialect::StageAttrHelper::getNameStr();
constexpr llvm::StringLiteral kExpertParallelSizeAttr =
    SchedDialect::ExpertParallelSizeAttrHelper::getNameStr();

/// The world size of the schedule containing `op` (1 when unset).
int64_t getWorldSize(mlir::Operation *op);

/// The expert-parallel size of the schedule containing `op` (1 when unset).
int64_t getExpertParallelSize(mlir::Operation *op);

/// The ranks of `group` in a schedule of `worldSize` ranks and expert-
/// parallel size `expertParallelSize`.
int64_t groupSize(CommGroup group, int64_t worldSize,
                  int64_t expertParallelSize);

/// The group as zeroc/Support/ExpertParallel.h (and the plan) names it.
CommGroupKind commGroupKind(CommGroup group);

/// The ZeRO stage of `module`; nothing if zero-partition has not run.
std::optional<int64_t> getStage(mlir::ModuleOp module);

/// Records the facts zero-partition decides.
void setWorldSize(mlir::ModuleOp module, int64_t worldSize);
void setStage(mlir::ModuleOp module, int64_t stage);
void setExpertParallelSize(mlir::ModuleOp module, int64_t expertParallelSize);

/// The function of `module` that runs `phase`, or null.
mlir::func::FuncOp lookupPhase(mlir::ModuleOp module, Phase phase);

/// The persistent state of parameters and flat groups by what it belongs
/// to: each `sched.tensor`'s `of` and `role`. Passes find a gradient or an
/// optimizer state through this relation; tensor names are only display.
class StateTable {
public:
  explicit StateTable(mlir::ModuleOp module);

  /// The `role` tensor of `owner` (a param tensor's or a flat group's
  /// name); for Role::Param, the param tensor named `owner`. Null if none.
  TensorOp stateOf(llvm::StringRef owner, Role role) const;

private:
  llvm::DenseMap<std::pair<llvm::StringRef, Role>, TensorOp> states;
};

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
