//===- CostModel.h - Time of collectives, compute ops and copies -*- C++
//-*-===//
//
// The formulas that turn a plan op into seconds on a cluster, in one place:
// alpha-beta time of ring collectives with nccl-tests' bus-bandwidth factors
// (hierarchical when a group spans nodes), roofline time of compute ops, and
// PCIe / NVMe / host-memory time of offload work. docs/cost-model.md derives
// every formula. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_COST_COSTMODEL_H
#define ZEROC_COST_COSTMODEL_H

#include "zeroc/Config/Cluster.h"
#include "zeroc/Plan/Plan.h"
#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/Workspace.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace zeroc {

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// Where `ranks` data-parallel ranks sit: they fill nodes in order,
/// gpusPerNode per node.
struct RankLayout {
  int64_t ranks = 1;
  int64_t nodes = 1;        ///< Nodes the ranks span.
  int64_t ranksPerNode = 1; ///< min(ranks, gpusPerNode).
  /// The ranks of a node that use its network at once: ranksPerNode, or
  /// for a communicator group (groupLayout) every group's ranks of the node,
  /// which run the same collective at the same time.
  int64_t nicSharers = 1;
};
RankLayout rankLayout(const Cluster &cluster, int64_t ranks);

/// Where the ranks of each group of kind `kind` sit (zeroc/Support/
/// ExpertParallel.h) among `worldSize` ranks filling nodes in order: the
/// expert-parallel groups' consecutive ranks, the expert-data-parallel
/// groups' ranks `ep` apart. Every group alike: nullopt where groups span
/// nodes unevenly (the world spans nodes, and `ep` neither divides the GPUs
/// per node nor is a multiple of them, or, for the expert-data-parallel
/// groups, the world is no whole number of nodes).
std::optional<RankLayout> groupLayout(const Cluster &cluster, int64_t worldSize,
                                      int64_t ep, CommGroupKind kind);

/// One ring collective over `ranks` ranks on one link, in seconds:
///   steps x stepLatency + bytes x factor / busBandwidth,
/// `bytes` the whole buffer (nccl-tests' "size"), factor (n-1)/n for
/// all-gather, reduce-scatter and all-to-all (nccl-tests' alltoall busbw,
/// `bytes` one rank's send buffer) and 2(n-1)/n for all-reduce, steps n-1
/// and 2(n-1). No base latency; 0 for one rank.
double ringTime(CollectiveKind kind, double bytes, int64_t ranks,
                double busBandwidth, double stepLatency);

/// A collective's time, split the way docs/cost-model.md explains it.
struct CollectiveTime {
  double seconds = 0;   ///< The sum of the parts below.
  double latency = 0;   ///< Base latency + ring steps x step latency.
  double intraNode = 0; ///< Bandwidth time on the intra-node bus.
  double interNode = 0; ///< Bandwidth time on the network.
};

/// A collective over `bytes` among `ranks` ranks: one ring inside a node, or
/// the hierarchical decomposition across nodes (reduce-scatter = intra-node
/// RS, then inter-node RS over 1/g of the data; all-gather the reverse;
/// all-reduce = intra RS + inter AR over 1/g + intra AG; an all-to-all
/// sends (g-1)/n of its buffer over the intra-node bus and (n-g)/n through
/// the node's NICs shared by its g ranks). 0 for one rank.
CollectiveTime collectiveTime(const Cluster &cluster, CollectiveKind kind,
                              double bytes, int64_t ranks);
/// The same over ranks placed as `layout` says (a communicator group's):
/// each inter-node ring shares the node's network with `nicSharers` - 1
/// others.
CollectiveTime collectiveTime(const Cluster &cluster, CollectiveKind kind,
                              double bytes, const RankLayout &layout);

//===----------------------------------------------------------------------===//
// Compute and offload
//===----------------------------------------------------------------------===//

/// Roofline: max(flops / (peak[dtype] x efficiency), bytes / HBM bandwidth).
double computeTime(const Cluster &cluster, double flops, double bytes,
                   DType dtype);

/// The calibrated FLOP/s of a linear-class kernel of `flops` FLOPs in
/// `dtype`: the measured rates of the size classes
/// (ClusterCalibration::kMatmulClassFlops) interpolated in log(FLOPs), the
/// nearest class's outside them, and never so fast that the product takes
/// less time than a smaller class's call; 0 when the cluster has none for
/// `dtype`.
/// `kind` (linear, linear_grad_input or linear_grad_weight): that kind's
/// own rates where measured (ClusterCalibration::matmulKind), else the
/// three kinds' mean.
double calibratedMatmulRate(const ClusterCalibration &calibration, DType dtype,
                            double flops,
                            std::optional<OpKind> kind = std::nullopt);

/// A model op's kernel time: the calibrated rate of its kind where the
/// cluster has one (linear-class FLOP/s by size, attention FLOP/s, the
/// kind's bytes/s, else the calibrated default bytes/s against the
/// roofline's FLOP time), the datasheet roofline otherwise. Without the
/// per-op overhead. `misalignedRows`: a linear-class op with an operand or
/// result whose rows are not a multiple of 16 bytes, priced at the
/// calibrated rate times ClusterCalibration::matmulMisalignedFactor.
/// `elements`: the op's largest operand's element count (0: unknown); below
/// ClusterCalibration::serialKernelElements a kind with a serial rate
/// takes it.
/// `attentionWork`: for causal_attention and its backward, seq^2 x
/// head_dim of one (batch, head) item (0: unknown), which places the op
/// between the calibrated attention classes (calibratedAttentionRate).
/// `gemm`: a linear-class op's geometry (null: unknown); where the
/// calibration timed that very GEMM (ClusterCalibration::matmulShape), its
/// rate is the op's.
/// `hot`: the share of the op's operand bytes still in the last-level
/// cache (CostModel's residency; negative: unknown). Where the calibration
/// timed the kind both from memory and in cache (kernelBandwidth and
/// kernelHotBandwidth; a GEMM's matmulShapeCold and matmulShape), the
/// op's bytes or FLOPs take the two rates in that proportion; otherwise
/// the one rate there is.
double kernelTime(const Cluster &cluster, OpKind kind, double flops,
                  double bytes, DType dtype, bool misalignedRows = false,
                  double elements = 0, double attentionWork = 0,
                  const LinearGeometry *gemm = nullptr,
                  const AttentionGeometry *attention = nullptr,
                  double hot = -1);

/// The kinds a calibration prices by a FLOP rate (GEMMs and attention,
/// compute-bound on every device); every other model op streams memory.
bool pricedByFlopRate(OpKind kind);

/// The calibrated attention FLOP/s for items of `itemWork` (seq^2 x
/// head_dim), interpolated in its log between the small and the large
/// class (ClusterCalibration::attentionShape); the large class's alone
/// where the small one was not measured or the work is unknown; 0 when
/// attention was not calibrated. `backward`: the backward's rates
/// (attention_backward_*) where the file has them.
double calibratedAttentionRate(const ClusterCalibration &calibration,
                               double itemWork, bool backward = false);

/// The byte length of a row (the last dimension) of a tensor of `shape` in
/// `dtype` is not a multiple of 16: GEMM libraries on GPUs cannot use
/// their vectorized kernels for such an operand (GPT-2's logits, 50,257
/// bf16 a row).
bool rowsMisaligned(const std::vector<int64_t> &shape, DType dtype);

/// Transfer rates one rank sees, in bytes/s. The host's memory bandwidth,
/// NVMe and network are per node and shared by the ranks on it; PCIe is per
/// GPU.
struct RankRates {
  double pcie = 0;
  double nvme = 0;
  double hostMemory = 0;
};
RankRates rankRates(const Cluster &cluster, int64_t worldSize);

/// Seconds to move `bytes` between placements:
/// device<->host over PCIe, host<->nvme over NVMe, device<->nvme both,
/// staged through host memory one after the other.
double transferTime(const RankRates &rates, Placement from, Placement to,
                    double bytes);

//===----------------------------------------------------------------------===//
// Plan ops
//===----------------------------------------------------------------------===//

/// What an op spends its time on.
enum class OpClass : uint8_t {
  Free,       ///< read, release, wait, return: no time of their own.
  Compute,    ///< GPU kernels: roofline.
  Collective, ///< NCCL collectives (and the PCIe copy of a host target).
  Offload,    ///< fetch_start, copy_start: PCIe / NVMe.
  Host,       ///< The CPU optimizer and its transfers.
};

std::string_view opClassName(OpClass cls);

/// Bytes one rank moves between its GPU's memory and host memory (PCIe,
/// each direction) and between host memory and NVMe, as zerorun moves
/// them (docs/cost-model.md, "Offload traffic"). On CPU ranks the device's
/// memory is the host's: nothing crosses PCIe, NVMe traffic is the same.
struct OffloadTraffic {
  double toDevice = 0; ///< Host memory -> GPU memory.
  double toHost = 0;   ///< GPU memory -> host memory.
  double nvmeRead = 0, nvmeWrite = 0;
  OffloadTraffic &operator+=(const OffloadTraffic &o) {
    toDevice += o.toDevice;
    toHost += o.toHost;
    nvmeRead += o.nvmeRead;
    nvmeWrite += o.nvmeWrite;
    return *this;
  }
  OffloadTraffic scaled(double k) const {
    return {k * toDevice, k * toHost, k * nvmeRead, k * nvmeWrite};
  }
  bool any() const {
    return toDevice > 0 || toHost > 0 || nvmeRead > 0 || nvmeWrite > 0;
  }
};

struct OpCost {
  OpClass cls = OpClass::Free;
  double seconds = 0;
  /// The part of `seconds` the host spends issuing the op (the calibrated
  /// op overhead, adam_update's per-call time): on a device that runs
  /// behind the host's queue (calibration.device other than "cpu") it
  /// overlaps the work issued before it (Simulator.cpp).
  double host = 0;
  double flops = 0; ///< The FLOPs the op executes (hardware FLOPs).
  /// Its share of the model's FLOPs (modelFlops).
  double modelFlops = 0;
  /// What it moves over PCIe and to and from NVMe.
  OffloadTraffic traffic;
  /// The part of `seconds` a linear-class op spends because its rows are
  /// not 16-byte aligned (rowsMisaligned): its time less the aligned
  /// classes' price for the same FLOPs; 0 for every other op.
  double misaligned = 0;
};

/// The model FLOPs of one op, what MFU counts (PaLM's definition: the
/// matrix products of one forward and backward pass, no recomputation):
/// the FLOPs of linear, linear_grad_input and linear_grad_weight ops, and 3x
/// those of each causal_attention forward (its backward does twice its
/// forward's matrix products, whatever the kernel recomputes), and 3x the
/// products of each moe_router and moe_experts forward (MoeFlops.h: the
/// router's logits, the active experts' three products), from their input
/// shapes (`inputShape(i)`, the shape of the op's i-th input); 0 for ops
/// that carry `recompute` and for every other op (the load-balancing
/// statistics' second logits product among them).
double modelFlops(
    const PlanOp &op,
    const std::function<const std::vector<int64_t> &(size_t)> &inputShape);

/// Costs the ops of one plan on one cluster. Holds lookups built once: the
/// tensors and flat groups by name, each phase's values and the waits that
/// complete each start.
class CostModel {
public:
  CostModel(const Plan &plan, const Cluster &cluster);
  /// The model keeps references to both: a temporary would dangle (ASan
  /// found a test costing against `exactCluster()`'s, destroyed at once).
  CostModel(const Plan &, Cluster &&) = delete;
  CostModel(Plan &&, const Cluster &) = delete;
  CostModel(Plan &&, Cluster &&) = delete;

  /// The op's work (workCost) plus the calibrated host overhead per op.
  /// `contended`: a collective runs beside compute on the same cores, at
  /// the calibration's contended fit where it has one (a CPU rank's
  /// stream: the simulator decides).
  OpCost cost(const PlanPhase &phase, const PlanOp &op,
              bool contended = false) const;
  /// The op's work alone.
  OpCost workCost(const PlanPhase &phase, const PlanOp &op,
                  bool contended = false) const;
  /// A collective's S: its comm_elements x the bytes of its dtype
  /// (docs/cost-model.md, "Bytes"); 0 for other ops.
  double collectiveBytes(const PlanPhase &phase, const PlanOp &op) const;

  const Cluster &cluster() const { return clusterRef; }
  const RankRates &rates() const { return rankRatesPerRank; }

private:
  struct PhaseInfo {
    std::unordered_map<int64_t, const PlanValue *> values;
    std::unordered_map<int64_t, DType> dtypes;
    /// Bytes the waits on each start (by op index) yield.
    std::unordered_map<int64_t, double> waitBytes;
    /// Per model op (by index), per accumulate where the calibration
    /// measured the cache curve, and per collective start where it timed
    /// collectives from memory (CollectiveFit::coldBySize): the share of
    /// its operand bytes (a collective's: of what it moves) still in the
    /// last-level cache when it runs (residency; empty where the
    /// calibration did not measure the cache).
    std::unordered_map<int64_t, double> hot;
    /// `hot`'s share for op `index`; -1 where it has none (kernelTime's
    /// "unknown").
    double hotShare(int64_t index) const {
      auto it = hot.find(index);
      return it == hot.end() ? -1.0 : it->second;
    }
  };
  /// Fills every phase's `hot`: the plan's ops in program order, each
  /// operand in cache where the bytes touched since its memory's last use
  /// and its own fit in the rank's share of the last-level cache, or by
  /// the share the calibrated curve gives at that distance
  /// (ClusterCalibration::cachedShare; the phases walked twice: a step
  /// follows a step).
  void computeResidency();
  /// The pieces of memory an op other than the model's touches of its
  /// tensors (computeResidency's keys) and their bytes on this rank: each
  /// tensor once, and of an accumulate's target only the part its input
  /// adds into.
  std::vector<std::pair<std::string, double>>
  touchedTensors(const PhaseInfo &info, const PlanOp &op) const;

  const Plan &plan;
  const Cluster &clusterRef;
  RankRates rankRatesPerRank;
  CollectiveDTypes collectiveDTypes;
  /// The plan's optimizer compresses its gradient all-reduces to one bit
  /// per element (OptimizerConfig::oneBit).
  bool oneBitOptimizer = false;
  std::unordered_map<std::string, const PlanTensor *> tensors;
  std::unordered_map<std::string, const PlanFlatGroup *> groups;
  /// Each flat group's layout, computed once (a group holds hundreds of
  /// parameters; every reduce-scatter into it asks).
  std::unordered_map<std::string, FlatGroupLayout> flatLayouts;
  std::unordered_map<const PlanPhase *, PhaseInfo> phases;
  /// Tensors a copy_start moves (sources, destinations), so that the host
  /// optimizer does not count their PCIe traffic again.
  std::unordered_set<std::string> copiedTensors;

  /// Elements, dtype and placement of one rank's part of a tensor or flat
  /// group (a group stands for its parameters).
  double rankElements(const std::string &name) const;
  /// The tensor itself, or a flat group's first parameter.
  const PlanTensor *representative(const std::string &name) const;
  DType dtypeOf(const std::string &name) const;
  Placement placementOf(const std::string &name) const;
  /// Where the kernels of a tensor placed at `p` find it, as the runtime
  /// the calibration measured sees it: on CPU ranks (calibration.device
  /// "cpu") host memory is the device's, touched by the same kernels at
  /// the same rates (small GPT-2, stage 2 with optimizer offload: the clip
  /// of the host gradient partition measured 3.1 ms a step, priced at the
  /// host's streaming rate 0.3 ms; bench/RESULTS.md, session 14).
  Placement kernelMemory(Placement p) const {
    return cpuRanks() && p == Placement::Host ? Placement::Device : p;
  }
  /// The same for copies: on CPU ranks nothing crosses between device and
  /// host memory (a stage-1 optimizer offload's gradient partition is read
  /// where it lies), NVMe still is.
  Placement copyMemory(Placement p) const {
    return cpuRanks() && p == Placement::Device ? Placement::Host : p;
  }
  bool cpuRanks() const { return clusterRef.calibration.device == "cpu"; }
  double rankBytes(const std::string &name) const {
    return rankElements(name) * double(bytesPerElement(dtypeOf(name)));
  }
  /// Moves bytes of state over host memory or HBM, by where it lives, in
  /// a kernel of `kind` (its calibrated bandwidth) on the device.
  double stateTrafficTime(const std::string &name, double passes,
                          OpKind kind) const;

  /// The communicator collectives zerorun starts for `op`: one per tensor
  /// it moves (runtime/exec/Collectives.cpp), each paying the fixed time,
  /// except a reduce-scatter's runs of small flat-group gradients (`flat`)
  /// and its small stage-3 gradients where it packs them (`packed`,
  /// Workspace.h): one for each run, one for all of those.
  int64_t communicatorCalls(const PlanOp &op, const std::vector<FlatUnit> &flat,
                            const ParamReduceScatterParts *packed) const;
  /// The bytes of each collective a collective op of `bytes` starts: one
  /// per unit of a flat group's reduce-scatter (`flat`), else one per
  /// tensor it names (of `elementBytes` each; with `packedSmall`, stage 3's
  /// packed gradients of kPackedGradientMaxBytes at most as one); empty
  /// where that is fewer than two, or not what it moves (inputs outside a
  /// flat group too; 1-bit Adam).
  std::vector<double> collectiveParts(const PlanOp &op, double bytes,
                                      double elementBytes, bool packedSmall,
                                      const std::vector<FlatUnit> &flat) const;
  /// A reduce-scatter's flat-group inputs as the executor sees them;
  /// returns their element size.
  int64_t flatShares(const PhaseInfo &info, const PlanOp &op,
                     std::vector<FlatShare> &shares) const;
  /// A reduce-scatter's stage-3 gradients (its inputs into a parameter's
  /// shard, not a flat group), as the executor lays them out.
  std::vector<ParamGradient> paramGradients(const PhaseInfo &info,
                                            const PlanOp &op) const;
  /// Results that land off the device (a host gradient partition) cross
  /// PCIe after the collective: the rank's part of a reduce-scatter, all
  /// of the others, in the share of targets that live off the device.
  /// The device's kernel adds into the host target where it lies: it reads
  /// and writes the part over PCIe (both directions, at once).
  double offDeviceResultTime(OpCost &cost, const PlanOp &op,
                             CollectiveKind kind, double elementBytes,
                             int64_t n) const;
  /// transferTime from `from` to `to`, the bytes recorded in
  /// `cost.traffic` where they cross PCIe (GPU ranks: copyMemory) or NVMe:
  /// there `nvmeBytes`, the files' whole blocks (default: one tensor's,
  /// nvmeBlockBytes of `bytes`).
  double transfer(OpCost &cost, Placement from, Placement to, double bytes,
                  double nvmeBytes = -1) const;
  /// A device kernel reading and writing `bytes` of a tensor at
  /// `placement` in place: PCIe both ways when that is host memory of a
  /// GPU rank (seconds: the one direction's, full duplex).
  double inPlaceOverPcie(OpCost &cost, Placement placement, double bytes) const;
  OpCost collectiveCost(const PhaseInfo &info, const PlanOp &op,
                        bool contended) const;
  OpCost fetchCost(const PhaseInfo &info, const PlanOp &op) const;
  OpCost copyCost(const PlanOp &op) const;
  OpCost adamCost(const PlanOp &op) const;
  OpCost accumulateCost(const PhaseInfo &info, const PlanOp &op) const;
  OpCost gradientPassCost(const PlanOp &op, double passes) const;
  DType computeDType(const PhaseInfo &info, const PlanOp &op) const;
  /// Any of the op's input or output values has misaligned rows
  /// (rowsMisaligned).
  bool hasMisalignedRows(const PhaseInfo &info, const PlanOp &op) const;
  /// The element count of the op's largest operand or result (0 when none
  /// is known).
  double largestOperandElements(const PhaseInfo &info, const PlanOp &op) const;
  /// On a CPU rank of several kernel threads, a split GEMM's (gemmSlices,
  /// zeroc/Support/GemmSlices.h, from its geometry `gemm`) or attention's
  /// operands and results that cross between cores (the share the calling
  /// thread does not compute: (threads - 1) / threads of the op's bytes) at
  /// calibration.handoff_gb_per_s: those kinds were calibrated on operands
  /// in each thread's own cache. 0 elsewhere.
  double handoffTime(const PlanOp &op,
                     const std::optional<LinearGeometry> &gemm) const;
  /// A linear-class op's GEMM (Plan.h, linearGeometry); nullopt for other
  /// ops or unknown shapes.
  std::optional<LinearGeometry> gemmOf(const PhaseInfo &info,
                                       const PlanOp &op) const;
  /// An attention op's geometry (its query [batch, seq, heads x head_dim]
  /// and its attributes); nullopt for other ops or unknown shapes.
  std::optional<AttentionGeometry> attentionOf(const PhaseInfo &info,
                                               const PlanOp &op) const;
  /// A linear's bias, added by zerorun's CPU kernel in a pass of its own
  /// over the output (0 without a bias, or off a CPU, where cuBLASLt's
  /// epilogue fuses it).
  double biasPassTime(const PhaseInfo &info, const PlanOp &op) const;
};

/// What one rank of `plan` moves per step over PCIe and to and from NVMe,
/// as zerorun moves it: every phase's ops (OpCost::traffic) as often as the
/// phase runs, and on GPU ranks (`gpuRanks`) each micro-step's batch (its
/// first two arguments, the token ids and targets, copied from the host).
/// On CPU ranks nothing crosses PCIe. No rates are needed; zerorun prints
/// it beside what it counted.
OffloadTraffic offloadTrafficPerStep(const Plan &plan, bool gpuRanks);

} // namespace zeroc

#endif // ZEROC_COST_COSTMODEL_H
