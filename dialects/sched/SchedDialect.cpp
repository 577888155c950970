//===- SchedDialect.cpp - The sched dialect and its types -----------------===//

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
