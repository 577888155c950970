//===- PlanWriter.h - A final sched module as a plan ------------*- C++ -*-===//
//
// Turns the verified schedule into the plan file's data (zeroc/Plan/Plan.h):
// persistent tensors, flat groups, streams, and per phase the values and the
// ops in program order with their dependencies and communication volume.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_EXPORT_PLANWRITER_H
#define ZEROC_EXPORT_PLANWRITER_H

#include "sched/SchedOps.h"
#include "zeroc/Plan/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace zeroc {

/// What the plan records that the schedule does not: where it came from.
struct PlanSource {
  std::string generator;
  PlanModel model;
  int64_t gradientAccumulationSteps = 1;
  RecomputePolicy recompute;
  nlohmann::json config = nlohmann::json::object();
};

/// The sched dialect's enums as the plan spells them (PlanOps.h); the names
/// agree (PipelineTest.SchedEnumsArePlanEnums).
TensorRole planRole(sched::Role role);
Placement planPlacement(sched::Placement placement);
PhaseKind planPhaseKind(sched::Phase phase);

/// Fails with a diagnostic on the module if it is not a final schedule.
mlir::FailureOr<Plan> buildPlan(mlir::ModuleOp module,
                                const PlanSource &source);

} // namespace zeroc

#endif // ZEROC_EXPORT_PLANWRITER_H
