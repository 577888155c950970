//===- Calibrate.h - zerorun --calibrate: measure this machine --*- C++ -*-===//
//
// Measures what the cost model (docs/cost-model.md) uses, through the
// executor's own kernels, scheduler and communicator, and writes a cluster
// file (docs/cluster-format.md) whose measured figures say "measured on
// HOST at DATE by zerorun --calibrate". Under mpirun every rank measures at
// once, as they run a plan (sharing cores, memory and the communicator);
// each figure is the slowest rank's. docs/zerorun.md, "Calibration".
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TOOLS_ZERORUN_CALIBRATE_H
#define ZEROC_TOOLS_ZERORUN_CALIBRATE_H

#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/AttentionGeometry.h"

#include <string>
#include <vector>

namespace zeroc::runtime {

class Communicator;
class Device;

/// A linear-class GEMM of a plan, as its op runs it: the kind, the
/// geometry, and the dtypes of its two operands and its result. Ordered
/// (and so made distinct) by the cost model's key alone, ClusterCalibration::
/// matmulShape's (kind, result dtype, geometry): the operands' dtypes are
/// the first op's of that key.
struct PlanGemm {
  OpKind kind = OpKind::Linear;
  LinearGeometry geometry;
  DType first = DType::F32, second = DType::F32, result = DType::F32;
  bool operator<(const PlanGemm &o) const {
    return std::tie(kind, geometry, result) <
           std::tie(o.kind, o.geometry, o.result);
  }
};

/// Every distinct linear-class GEMM of `plan`'s phases (the cost model's
/// lookup: ClusterCalibration::matmulShape), in a fixed order.
std::vector<PlanGemm> planGemms(const Plan &plan);

/// A flash attention op of a plan: its geometry and dtype (the cost
/// model's lookup, ClusterCalibration::attentionByShape, for both
/// directions).
struct PlanAttention {
  AttentionGeometry geometry;
  DType dtype = DType::F32;
  bool operator<(const PlanAttention &o) const {
    return std::tie(geometry, dtype) < std::tie(o.geometry, o.dtype);
  }
};

/// Every distinct flash causal_attention of `plan`'s phases, in a fixed
/// order.
std::vector<PlanAttention> planAttentions(const Plan &plan);

/// Writes the cluster file to `output` (rank 0). `scratchDir`: where the
/// NVMe test file goes. `gemms` and `attentions` (from --shapes PLAN): also
/// times each of these on its own shapes (attention in both directions);
/// `gemmsFrom` names the plans for the file's sources. Returns the exit
/// status.
int calibrate(Communicator &comm, Device &device, const std::string &output,
              const std::string &scratchDir,
              const std::vector<PlanGemm> &gemms = {},
              const std::string &gemmsFrom = "",
              const std::vector<PlanAttention> &attentions = {});

} // namespace zeroc::runtime

#endif // ZEROC_TOOLS_ZERORUN_CALIBRATE_H
