//===- SchedDialect.cpp - The sched dialect, its types and attributes -----===//
//
// The dialect's own facts: the module attributes that say what a schedule
// is for (world size, ZeRO stage) and those the memory planner records,
// each declared in SchedDialect.td and verified here.
//
//===----------------------------------------------------------------------===//

#include "sched/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace zeroc::sched;

#include "sched/SchedDialect.cpp.inc"
#include "sched/SchedEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "sched/SchedTypes.cpp.inc"

void SchedDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "sched/SchedOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "sched/SchedTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Attribute verification
//===----------------------------------------------------------------------===//

namespace {

/// `attr` as an i64 integer of at least `min` (and at most `max`), or an
/// error on `op`.
LogicalResult verifyInteger(Operation *op, NamedAttribute attr, int64_t min,
                            std::optional<int64_t> max = std::nullopt) {
  auto value = dyn_cast<IntegerAttr>(attr.getValue());
  if (!value || !value.getType().isSignlessInteger(64))
    return op->emitOpError()
           << "attribute '" << attr.getName().getValue()
           << "' must be an i64 integer, found " << attr.getValue();
  int64_t v = value.getInt();
  if (v < min || (max && v > *max)) {
    InFlightDiagnostic diag = op->emitOpError()
                              << "attribute '" << attr.getName().getValue()
                              << "' must be";
    if (max)
      diag << " in [" << min << ", " << *max << "]";
    else
      diag << " at least " << min;
    return diag << ", found " << v;
  }
  return success();
}

/// `attr` as an i64 array of `size` entries (any size when unset), each at
/// least `min`, or an error on `op`.
LogicalResult verifyArray(Operation *op, NamedAttribute attr, int64_t min,
                          std::optional<size_t> size, StringRef per) {
  auto array = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
  if (!array)
    return op->emitOpError()
           << "attribute '" << attr.getName().getValue()
           << "' must be an array<i64>, found " << attr.getValue();
  if (size && array.size() != int64_t(*size))
    return op->emitOpError()
           << "attribute '" << attr.getName().getValue() << "' has "
           << array.size() << " entries, expected one per " << per << " ("
           << *size << ")";
  for (int64_t v : array.asArrayRef())
    if (v < min)
      return op->emitOpError() << "attribute '" << attr.getName().getValue()
                               << "' holds " << v << ", below " << min;
  return success();
}

/// The memory plan's per-phase attributes sit on a phase function.
LogicalResult verifyOnPhase(Operation *op, NamedAttribute attr) {
  auto func = dyn_cast<func::FuncOp>(op);
  if (!func || !symbolizePhase(func.getSymName()))
    return op->emitOpError() << "attribute '" << attr.getName().getValue()
                             << "' belongs on a phase function (@micro_step or "
                                "@optimizer_step)";
  return success();
}

/// The keys of `sched.memory`, every one an i64 of at least 0.
constexpr StringLiteral kMemoryKeys[] = {
    "arena_bytes",    "peak_live_bytes", "peak_op",  "activations",
    "gather_buffers", "reduce_buckets",  "workspace"};

LogicalResult verifyMemory(Operation *op, NamedAttribute attr) {
  auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
  if (!dict)
    return op->emitOpError()
           << "attribute '" << attr.getName().getValue()
           << "' must be a dictionary, found " << attr.getValue();
  for (NamedAttribute entry : dict) {
    if (!llvm::is_contained(kMemoryKeys, entry.getName().getValue()))
      return op->emitOpError()
             << "attribute '" << attr.getName().getValue()
             << "' has an unknown key '" << entry.getName().getValue() << "'";
    auto value = dyn_cast<IntegerAttr>(entry.getValue());
    if (!value || value.getInt() < 0)
      return op->emitOpError()
             << "attribute '" << attr.getName().getValue() << "' key '"
             << entry.getName().getValue()
             << "' must be a non-negative integer, found " << entry.getValue();
  }
  for (StringRef key : kMemoryKeys)
    if (!dict.get(key))
      return op->emitOpError() << "attribute '" << attr.getName().getValue()
                               << "' lacks the key '" << key << "'";
  return success();
}

} // namespace

LogicalResult SchedDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto onModule = [&]() -> LogicalResult {
    if (isa<ModuleOp>(op))
      return success();
    return op->emitOpError()
           << "attribute '" << name << "' belongs on the schedule's module";
  };
  if (name == WorldSizeAttrHelper::getNameStr())
    return failure(failed(onModule()) || failed(verifyInteger(op, attr, 1)));
  if (name == StageAttrHelper::getNameStr())
    return failure(failed(onModule()) || failed(verifyInteger(op, attr, 0, 3)));
  if (name == ExpertParallelSizeAttrHelper::getNameStr())
    return failure(failed(onModule()) || failed(verifyInteger(op, attr, 1)));
  if (name == MemoryAttrHelper::getNameStr())
    return failure(failed(verifyOnPhase(op, attr)) ||
                   failed(verifyMemory(op, attr)));
  if (name == ArgOffsetsAttrHelper::getNameStr()) {
    if (failed(verifyOnPhase(op, attr)))
      return failure();
    return verifyArray(op, attr, -1, cast<func::FuncOp>(op).getNumArguments(),
                       "argument");
  }
  if (name == LiveBytesAttrHelper::getNameStr())
    return failure(failed(verifyOnPhase(op, attr)) ||
                   failed(verifyArray(op, attr, 0, std::nullopt, "")));
  if (name == OffsetsAttrHelper::getNameStr())
    return verifyArray(op, attr, -1, op->getNumResults(), "result");
  if (name == AfterAttrHelper::getNameStr())
    return verifyArray(op, attr, 0, std::nullopt, "");
  if (name == SavedOffsetAttrHelper::getNameStr() ||
      name == WorkspaceOffsetAttrHelper::getNameStr() ||
      name == WorkspaceBytesAttrHelper::getNameStr())
    return verifyInteger(op, attr, 0);
  return op->emitOpError() << "has an unknown sched attribute '" << name << "'";
}
