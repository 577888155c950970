//===- Cluster.h - The machines a plan runs on ------------------*- C++ -*-===//
//
// A cluster description: nodes of identical GPUs, the GPU's peak FLOP/s and
// HBM bandwidth, the buses between GPUs inside a node and between nodes, and
// the host's memory, PCIe and NVMe. The cost model (zeroc/Cost) turns a plan
// into time with it. Read from JSON (docs/cluster-format.md) with errors that
// point into the file, or taken from a named preset whose figures cite their
// sources. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CONFIG_CLUSTER_H
#define ZEROC_CONFIG_CLUSTER_H

#include "zeroc/Support/AttentionGeometry.h"
#include "zeroc/Support/DType.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"
#include "zeroc/Support/LinearGeometry.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace zeroc {

/// A bus that collectives run over: what NCCL's ring achieves on it.
struct ClusterLink {
  /// Bus bandwidth in bytes/s, as nccl-tests reports it (busbw): inside a
  /// node per GPU, between nodes per node (all its NICs together).
  double busBandwidth = 0;
  /// Seconds per ring step (NCCL's per-hop latency).
  double latency = 0;
};

/// Dense peak FLOP/s of one GPU by math mode.
struct ClusterPeakFlops {
  double bf16 = 0, f16 = 0, tf32 = 0, f32 = 0;
};

/// The default of `gpu.runtime_reserve_gib`: device memory a training
/// process holds outside its tensors (docs/cluster-format.md derives it).
inline constexpr double kDefaultRuntimeReserveBytes = 2.0 * (1ull << 30);
/// The default of `host.reserve_gib`: host memory a node keeps for itself.
inline constexpr double kDefaultHostReserveBytes = 32.0 * (1ull << 30);

struct ClusterGpu {
  std::string model;
  double memoryBytes = 0; ///< The datasheet's figure.
  /// What the driver lets a process allocate (PyTorch's "total capacity");
  /// 0 when not given: then memoryBytes.
  double usableMemoryBytes = 0;
  /// Held outside the plan's tensors: CUDA context, NCCL buffers, cuBLAS
  /// workspaces, allocator slack.
  double runtimeReserveBytes = kDefaultRuntimeReserveBytes;
  /// What the plan's peak may use: usable memory less the reserve.
  double usableBytes() const {
    return usableMemoryBytes > 0 ? usableMemoryBytes : memoryBytes;
  }
  double planBudgetBytes() const { return usableBytes() - runtimeReserveBytes; }
  ClusterPeakFlops peak;
  double hbmBandwidth = 0; ///< Bytes/s.
};

/// Per node; the cost model shares node-wide figures among the node's ranks.
struct ClusterHost {
  double memoryBytes = 0;
  double memoryBandwidth = 0; ///< Bytes/s, all sockets.
  double pcieBandwidth = 0;   ///< Bytes/s per GPU and direction.
  double nvmeBandwidth = 0;   ///< Bytes/s, all drives.
  /// Kept by the node itself (OS, page cache, each rank's process).
  double reserveBytes = kDefaultHostReserveBytes;
  double nvmeCapacityBytes = 0; ///< All drives; 0 when not given.
};

/// What `zerorun --calibrate` measured on the machine itself
/// (docs/cluster-format.md, "calibration"): rates by kernel and size class
/// that replace the datasheet roofline where present. 0 means "not
/// measured": the cost model then uses the datasheet figures.
struct ClusterCalibration {
  /// The GEMM size classes, by the FLOPs of one call: a square GEMM of
  /// side 64, 256, 1024 and 4096 (2 n^3 FLOPs; the last measured on GPUs
  /// only, where 1024 is still far from the tensor cores' rate). Between
  /// two classes the cost model interpolates the rate in log(FLOPs);
  /// outside, it takes the nearest measured class's.
  static constexpr int kMatmulClasses = 4;
  static constexpr double kMatmulClassFlops[kMatmulClasses] = {
      2.0 * 64 * 64 * 64, 2.0 * 256 * 256 * 256, 2.0 * 1024 * 1024 * 1024,
      2.0 * 4096 * 4096 * 4096};
  /// Achieved FLOP/s of linear-class kernels by dtype (f32, bf16, f16)
  /// and size class (small, medium, large, xlarge); 0: not measured.
  double matmul[3][kMatmulClasses] = {};
  /// The same for each of the three kinds timed alone, indexed as
  /// kMatmulKindNames (plan op kinds: linear, x W^T; linear_grad_input,
  /// dy W; linear_grad_weight, dy^T x); 0: not measured, when the cost
  /// model takes `matmul`, their mean. The forward carries its epilogue's
  /// fixed work: on a 2-core CPU it took 1.39 times the gradients' time at
  /// 64^3 and 1.15 at 1024^3.
  static constexpr int kMatmulKinds = 3;
  static constexpr std::string_view kMatmulKindNames[kMatmulKinds] = {
      "linear", "linear_grad_input", "linear_grad_weight"};
  double matmulKind[3][kMatmulKinds][kMatmulClasses] = {};
  /// The index in kMatmulKindNames of a plan op kind's name; -1 for
  /// another kind.
  static int matmulKindIndex(std::string_view kind) {
    for (int i = 0; i < kMatmulKinds; ++i)
      if (kMatmulKindNames[i] == kind)
        return i;
    return -1;
  }
  /// The first index of `matmul` (and of matmulMisaligned) for a dtype:
  /// 0 f32 (and any other), 1 bf16, 2 f16.
  static int matmulIndex(DType dtype) {
    return dtype == DType::BF16 ? 1 : dtype == DType::F16 ? 2 : 0;
  }
  /// The file's name of each matmulIndex.
  static constexpr const char *kMatmulDTypeNames[3] = {"f32", "bf16", "f16"};
  /// The same three GEMMs at the largest class measured for the dtype, with
  /// the output width one less than the side (n - 1 columns): rows of a
  /// byte length that is not a multiple of 16, like GPT-2's logits over its
  /// 50,257-word vocabulary, where GPU GEMM libraries cannot use their
  /// vectorized kernels. By dtype; 0: not measured. The cost model
  /// multiplies the interpolated rate of a GEMM with such rows by this over
  /// that class's aligned rate (matmulMisalignedFactor).
  double matmulMisaligned[3] = {};
  /// Achieved FLOP/s of each linear-class kind on a plan's own GEMMs
  /// (zerorun --calibrate --shapes PLAN), keyed by (matmulIndex of the
  /// dtype, index in kMatmulKindNames, the layer's geometry). The cost
  /// model prices an op whose GEMM is here at its rate, over the classes'
  /// interpolation and the misaligned factor (those rows were timed as
  /// they are). Empty: not measured.
  using MatmulShapeKey = std::tuple<int, int, LinearGeometry>;
  std::map<MatmulShapeKey, double> matmulShape;
  /// The same GEMMs with every call's operands the next set of a pool of
  /// twice `cacheBytes` (on a CPU): from memory, as a step's weights are,
  /// last touched a whole pass earlier. `matmulShape` reuses its operands
  /// call after call (in cache, as a step's activations just written are).
  /// The cost model prices a GEMM between the two by the share of its
  /// operand bytes still in cache (CostModel's residency). Empty: not
  /// measured (a GPU, or a file before session 23).
  std::map<MatmulShapeKey, double> matmulShapeCold;
  /// Achieved FLOP/s (as the plans count them, Plan/AttentionFlops.h) of
  /// the flash attention kernels on a plan's own shapes (zerorun
  /// --calibrate --shapes PLAN), keyed by (matmulIndex of the dtype,
  /// backward, the op's geometry). The cost model prices a flash attention
  /// op of such a shape at its rate, over the two classes' interpolation.
  /// Empty: not measured.
  using AttentionShapeKey = std::tuple<int, bool, AttentionGeometry>;
  std::map<AttentionShapeKey, double> attentionByShape;
  /// matmulMisaligned[d] over the aligned rate of the largest class measured
  /// for dtype index d; 1 where either is not measured.
  double matmulMisalignedFactor(int d) const;
  /// Achieved FLOP/s of the attention kernels (forward and backward,
  /// flash; f32 on a CPU, bf16 on a GPU) at the large class, and at the
  /// small class (0: not measured). The classes are attentionShape's; the
  /// cost model interpolates the rate in log(seq^2 x head_dim) of one
  /// (batch, head) item between them, and takes the nearer class's outside.
  double attention = 0;
  double attentionSmall = 0;
  /// The backward's rates at the same classes, timed apart from the
  /// forward (0: not measured). Where given, `attention` and
  /// `attentionSmall` are the forward's; a file without them (before
  /// session 12) timed forward and backward together, and both take that
  /// rate. The two differ: tiny Llama's forward took twice its combined
  /// price at 2 ranks and its backward 0.94 (bench/RESULTS.md, run 22).
  double attentionBackward = 0;
  double attentionBackwardSmall = 0;
  /// A shape zerorun --calibrate times attention at: `small` on a CPU is a
  /// test-sized model's (sequence 32, heads of 16), the large one a
  /// GPT-2-like head layout.
  static AttentionGeometry attentionShape(bool gpu, bool small) {
    // batch, seq, heads, kv heads, head_dim, window.
    if (small)
      return gpu ? AttentionGeometry{4, 128, 12, 12, 64, 0}
                 : AttentionGeometry{2, 32, 4, 4, 16, 0};
    return gpu ? AttentionGeometry{4, 1024, 12, 12, 64, 0}
               : AttentionGeometry{1, 256, 4, 4, 64, 0};
  }
  /// Achieved bytes/s (the plan's bytes over the time) of memory-bound
  /// kernels by plan op kind name; "default" for the kinds not measured.
  std::map<std::string, double> kernelBandwidth;
  /// The same kernels with their operands in the last-level cache (a pool
  /// of a few, reused), as a step's activations are where the op before
  /// just wrote them: bytes/s by kind, "default" too (0 and absent: not
  /// measured; both tables on a 2-core EPYC VM: bench/RESULTS.md, run 41).
  /// Accumulates and zeroing (gradients, from memory) are not timed so.
  std::map<std::string, double> kernelHotBandwidth;
  /// The last-level cache of a node (bytes), as the calibration found it:
  /// what the cost model's residency shares among the node's ranks. 0: not
  /// measured (residency off).
  double cacheBytes = 0;
  /// How well the cache holds what a rank touched `bytes` ago: accumulate's
  /// bytes/s over a pool of `bytes` reused in turn (every operand touched
  /// again after the whole pool), each of `ranks` ranks at once with a pool
  /// of its own. Ascending in bytes, from the pool of `kernelHotBandwidth`
  /// (which the cost model takes as in cache) to at least twice the ranks'
  /// shares of `cacheBytes` (from memory). Where given, the cost model counts
  /// an operand last touched d bytes ago as in cache by the share this curve
  /// gives at d (CostModel's residency), not by whether d fits in the
  /// cache: on the 2-core EPYC VM (a 32 MiB last-level cache) it held its
  /// in-cache rate to 8 MiB of pool at one rank and fell by 16; at two
  /// ranks it fell to 0.6 of it by 8 MiB a rank (bench/RESULTS.md, run 43).
  /// A pool's bytes stand for the distance: an operand of it is touched
  /// again after the rest of the pool and itself, one [64, 1024] operand
  /// less (12% at the first pool, less past it).
  /// Empty: not measured (a GPU, a file before session 25).
  std::vector<std::pair<double, double>> cacheReuse;
  /// `cacheReuse`'s in-cache rate: its best (a slow first measurement
  /// does not stand for the cache); 0 without a curve, or with one that
  /// does not fall to a slower last point (it says nothing).
  double cacheReuseInCacheRate() const;
  /// The share of an operand last touched `bytes` ago that `cacheReuse`
  /// finds in cache: its rates made non-increasing (each the best at or
  /// past its pool), 1 up to the first pool, 0 from the last, between the
  /// two the time per byte interpolated in log(bytes) and placed between
  /// the in-cache rate's and the last's. -1 where
  /// cacheReuseInCacheRate() is 0.
  double cachedShare(double bytes) const;
  /// On a CPU whose ranks ran several threads each, the same kernels on an
  /// operand below the kernels' parallel threshold (`serialKernelElements`,
  /// cpu::kParallelMinWork), which they run on the calling thread alone,
  /// in cache (a model small enough for such ops keeps its operands
  /// there). By op kind name; the cost model prices a model op whose
  /// largest operand has fewer elements at these rates where given. 0 (and
  /// absent): not measured, as when each rank ran one thread.
  std::map<std::string, double> serialKernelBandwidth;
  double serialKernelElements = 0;
  /// On a CPU whose ranks run several kernel threads: bytes per second of
  /// the extra time a thread takes to read data another core's thread just
  /// wrote, over data it wrote itself (bytes / (remote time - local time)),
  /// sampled through the calibration. GEMMs and attention are calibrated
  /// on operands that stay in each thread's own cache call after call; in
  /// a step the part a worker computes reads what the op before wrote on
  /// the calling thread's core (CostModel::handoffTime prices the split
  /// ones). On this 2-core VM the two vCPUs moved between sharing an L3 (a
  /// cache line's round trip 100 ns) and not (430-530 ns), the remote read
  /// 11 GB/s against 30 local (bench/RESULTS.md, runs 37-38). 0: not
  /// measured.
  double handoffBandwidth = 0;
  /// Adam on the device's memory (bytes as the cost model counts them).
  double adamBandwidth = 0;
  /// clip_grad_norm's pass over the gradients (norm and scale), bytes of
  /// the gradients per second.
  double clipBandwidth = 0;
  /// Seconds each adam_update call costs beyond its bytes, and each
  /// further gradient of a clip_grad_norm (0: not measured).
  double adamCall = 0;
  double clipPerTensor = 0;
  /// Seconds each further gradient of a packed stage-3 reduce-scatter
  /// (Workspace.h) costs beyond its bytes: its pack into the ranks' blocks
  /// and its accumulate (0: not measured; its bytes alone are priced).
  double packedGradient = 0;
  /// Seconds every op the executor runs costs on the host (scheduling,
  /// dispatch), and every phase run (starting and joining the streams).
  double opOverhead = 0;
  double phaseOverhead = 0;
  /// Per collective kind (indexed by CollectiveKind: all_gather,
  /// reduce_scatter, all_reduce, all_to_all): the fitted fixed seconds and
  /// bus bandwidth (nccl-tests' busbw); 0: not measured, when the cost
  /// model takes the links' figures.
  struct CollectiveFit {
    double latency = 0;
    double busBandwidth = 0;
    /// What each further tensor of a bucket adds: zerorun starts one
    /// collective per tensor, and 32 of 4 KiB started together took this
    /// much more each than one of their 128 KiB (0: not measured; the
    /// fitted `latency` stands in).
    double perTensor = 0;
    /// The collective's seconds by size as measured, (bytes, seconds)
    /// ascending in bytes, with the calibration's `ranks` ranks; bytes is
    /// nccl-tests' size (the buffer of every rank's elements: an
    /// all-reduce's buffer, a reduce-scatter's input, an all-gather's
    /// output). A line does not fit a CPU node's collectives: on the 2-core
    /// VM a reduce-scatter of 16 MiB took 14-17 ms where the line fitted
    /// over 4 KiB to 16 MiB said 3-9 (the buffers leave the cache; the
    /// points weigh by their relative error). Empty: not measured (a file
    /// before session 26), when the fit alone prices.
    std::vector<std::pair<double, double>> bySize;
    /// The same sizes with each call's buffers the next set of a pool of
    /// twice the last-level cache (CPU calibrations): from memory, as a
    /// step's gradients come to their collective once the backward has
    /// passed its other tensors through the cache. `bySize` times one
    /// buffer call after call, in cache up to a few MiB: small Llama's
    /// stage-0 all-reduce (39 gradients, 20 MB) ran 20-21 ms at two ranks
    /// on the development VM where `bySize` priced 5.7-6.3 (plain MPI: 6-7
    /// ms on buffers just touched, 17-19 on buffers last touched by the
    /// collective before; bench/RESULTS.md, run 46). Empty: not measured.
    std::vector<std::pair<double, double>> coldBySize;
    /// Seconds for a collective of `busBytes` (nccl-tests' bus bytes: its
    /// size times the collective's bus factor) with `busPerByte` the
    /// calibration's bus factor (its `ranks`), which places `bySize` in
    /// bus bytes (busbw is the same at any rank count on one link). With
    /// at least two points: their seconds made non-decreasing in size,
    /// interpolated linearly between neighbours; below the first, on the
    /// line from the fitted latency (at most the first point's) to it;
    /// past the last, the last two's seconds per byte on (at least the
    /// fit's). Otherwise the fit: latency + busBytes / busBandwidth.
    double seconds(double busBytes, double busPerByte) const;
    /// Whether seconds() reads the measured sizes at `busPerByte`.
    bool readsSizes(double busPerByte) const {
      return bySize.size() >= 2 && busPerByte > 0;
    }
    /// seconds() for buffers a share `hot` of which is in the last-level
    /// cache: hot x seconds() + (1 - hot) x the same read from
    /// `coldBySize` (never below seconds()). seconds() where `hot` is
    /// unknown (< 0) or the cold sizes are not read (readsColdSizes).
    double seconds(double busBytes, double busPerByte, double hot) const;
    /// Whether the cold sizes price too: both curves read at `busPerByte`.
    bool readsColdSizes(double busPerByte) const {
      return readsSizes(busPerByte) && coldBySize.size() >= 2;
    }
    /// The link `factor` times as fast (what-if): the bandwidth, and each
    /// point's seconds past the latency divided by `factor` (both curves).
    void scaleBandwidth(double factor);
  };
  static constexpr int kCollectiveKinds = 4;
  CollectiveFit collective[kCollectiveKinds];
  /// The same fits measured while a thread of every rank computes (CPU
  /// ranks, whose streams share the cores): the simulator's figure for a
  /// collective on its own stream while compute is still to run beside it
  /// (docs/cost-model.md, "Streams on a CPU rank"). 0: not measured.
  CollectiveFit contended[kCollectiveKinds];
  /// At every collective the ranks meet and each waits for the latest, as
  /// their progress since the last meeting differs (on a shared machine
  /// most when they stream memory at the same time). The mean wait as a
  /// share of the time since that meeting, measured with every rank
  /// running the same work between meetings: [0] GEMMs (compute-bound),
  /// [1] a streaming kernel over memory. 0: not measured (one rank).
  double meetingWait[2] = {0, 0};
  /// How steady the machine's speed was while it calibrated: a fixed probe
  /// (a GEMM every rank runs at once for about 2 ms) timed at most every
  /// half second through the calibration, (seconds since it started, the
  /// slowest rank's seconds) ascending in time; Steadiness::of summarizes
  /// it. Every other figure is the median of its repeats and describes the
  /// machine's usual speed; on a shared machine a step can land in a spell
  /// at which it runs slower (on the development VM five neighbouring GEMM
  /// shapes of one calibration ran at half speed; bench/RESULTS.md, run
  /// 46). Empty: not measured.
  std::vector<std::pair<double, double>> steadiness;
  /// How many ranks ran the calibration at once (they contend for the
  /// same cores and memory).
  double ranks = 0;
  /// A CPU rank's kernel threads (cpu::threads(): OMP_NUM_THREADS, else
  /// the cores it may run on). With one, the rank's streams take turns on
  /// its one core: the simulator runs them on one lane (docs/cost-model.md,
  /// "Streams on a CPU rank"). 0: not said.
  double threadsPerRank = 0;
  /// The zerorun device that measured: "cpu" (each plan stream a host
  /// thread on the ranks' cores), "cuda", or "" (not said). The simulator
  /// schedules a CPU rank's streams as its executor does
  /// (docs/cost-model.md, "Streams on a CPU rank").
  std::string device;

  bool any() const;
};

/// The default of `compute_efficiency`: the share of peak FLOP/s that
/// matmul-class work reaches (docs/cost-model.md says why 0.7).
inline constexpr double kDefaultComputeEfficiency = 0.7;

struct Cluster {
  std::string name;
  std::string description;
  int64_t nodes = 1;
  int64_t gpusPerNode = 1;
  ClusterGpu gpu;
  ClusterLink intraNode;
  /// Absent for a single machine with no fabric; required when nodes > 1.
  std::optional<ClusterLink> interNode;
  /// Seconds every collective pays once, whatever its size (NCCL's base
  /// latency).
  double collectiveLatency = 0;
  ClusterHost host;
  double computeEfficiency = kDefaultComputeEfficiency;
  ClusterCalibration calibration;
  /// Where each figure comes from, by dotted key ("gpu.hbm_gb_per_s").
  std::map<std::string, std::string> sources;

  int64_t gpus() const { return nodes * gpusPerNode; }

  /// Dense peak FLOP/s for math in `dtype`: f32 uses the plain FP32 figure
  /// (PyTorch does not use TF32 for matmuls by default), i32 too.
  double peakFlops(DType dtype) const;
};

/// Reads and checks a cluster description. Errors name the file, line and
/// column, the dotted key, and what was expected; unknown keys are errors
/// with a did-you-mean.
Expected<Cluster> readCluster(const JsonDocument &doc);
Expected<Cluster> loadClusterFile(const std::string &path);

/// The canonical JSON form of a cluster: every figure as {"value", "source"}
/// where a source is known. readCluster(toJson(c)) gives c back.
nlohmann::json toJson(const Cluster &cluster);

/// Names of the built-in presets ("h100-sxm-8", ...), in a stable order.
const std::vector<std::string> &clusterPresetNames();

/// A built-in preset: the text of examples/clusters/NAME.json, compiled in.
Expected<Cluster> clusterPreset(const std::string &name);

/// `--cluster SPEC`: a file when one exists at SPEC, else a preset name.
/// An error lists the presets and suggests the closest one.
Expected<Cluster> loadCluster(const std::string &spec);

/// `cluster` with `nodes` nodes (`--nodes`): a preset sized without editing
/// its JSON. More than one node needs the cluster's inter_node link.
Expected<Cluster> withNodes(Cluster cluster, int64_t nodes);

/// Checks that `worldSize` ranks fit on the cluster (ranks fill nodes in
/// order, gpusPerNode per node).
std::optional<Diagnostic> checkFits(const Cluster &cluster, int64_t worldSize);

} // namespace zeroc

#endif // ZEROC_CONFIG_CLUSTER_H
