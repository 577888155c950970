//===- ZeroNames.h - Names of the state the ZeRO pipeline declares -*- C++ -*-//
//
// How the partitioner names gradient and optimizer-state tensors. The names
// are for people (diagnostics, the plan): passes find a tensor through what
// it belongs to, its `of` and `role` (sched::StateTable).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TRANSFORMS_ZERONAMES_H
#define ZEROC_TRANSFORMS_ZERONAMES_H

#include "sched/SchedOps.h"

#include <string>

namespace zeroc {

/// The flat group of stages 1 and 2.
inline constexpr llvm::StringLiteral kFlatGroupName = "zero.flat0";

/// The flat group of the expert parameters under expert parallelism
/// (stages 1 and 2): partitioned over the expert-data-parallel group, as
/// DeepSpeed's ZeRO partitions its MoE parameter groups.
inline constexpr llvm::StringLiteral kExpertFlatGroupName = "zero.experts0";

/// "<owner>.grad", "<owner>.master", "<owner>.exp_avg", "<owner>.exp_avg_sq".
inline std::string stateName(llvm::StringRef owner, sched::Role role) {
  return (owner + "." + sched::stringifyRole(role)).str();
}

} // namespace zeroc

#endif // ZEROC_TRANSFORMS_ZERONAMES_H
