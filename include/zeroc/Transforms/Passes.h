//===- Passes.h - zeroc's lowering passes -----------------------*- C++ -*-===//
//
// Declarations and registration of every pass in Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TRANSFORMS_PASSES_H
#define ZEROC_TRANSFORMS_PASSES_H

#include "model/ModelOps.h"
#include "sched/SchedOps.h"
#include "zeroc/Support/Recompute.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace zeroc {

/// model-specialize's `dtype`: the element type training uses.
enum class TrainingDType { Keep, F32, BF16, F16 };

/// zero-expand-training-step's `optimizer`: how Adam applies weight decay,
/// or LAMB (Adam's update scaled by the per-parameter trust ratio).
enum class AdamMode { Adam, AdamW, Lamb };

/// The values of zero-offload's placements, spelled as DeepSpeed's offload
/// devices.
inline llvm::cl::ValuesClass offloadTargetValues() {
  return llvm::cl::values(
      clEnumValN(sched::Placement::Device, "none", "on the device"),
      clEnumValN(sched::Placement::Host, "cpu", "in host memory"),
      clEnumValN(sched::Placement::NVMe, "nvme", "in NVMe files"));
}

#define GEN_PASS_DECL
#include "zeroc/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "zeroc/Transforms/Passes.h.inc"

} // namespace zeroc

#endif // ZEROC_TRANSFORMS_PASSES_H
