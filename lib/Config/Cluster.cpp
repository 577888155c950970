//===- Cluster.cpp - Read cluster descriptions and presets ----------------===//
//
// The reader walks a table of figures: each has its JSON key, its unit (the
// JSON holds GiB, GB/s, TFLOP/s and microseconds; the struct holds bytes,
// bytes/s, FLOP/s and seconds) and its lower bound. A figure is a number or
// {"value": number, "source": "where it comes from"}.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Config/Cluster.h"
#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/Limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>

using nlohmann::json;

namespace zeroc {

double Cluster::peakFlops(DType dtype) const {
  switch (dtype) {
  case DType::BF16:
    return gpu.peak.bf16;
  case DType::F16:
    return gpu.peak.f16;
  case DType::F32:
  case DType::I32:
    return gpu.peak.f32;
  }
  return gpu.peak.f32;
}

double ClusterCalibration::matmulMisalignedFactor(int d) const {
  for (int k = kMatmulClasses - 1; k >= 0; --k)
    if (matmul[d][k] > 0)
      return matmulMisaligned[d] > 0 ? matmulMisaligned[d] / matmul[d][k] : 1.0;
  return 1.0;
}

/// The best rate of `curve` at or past point `i`: the curve made
/// non-increasing in bytes (a larger pool is never found in cache more).
static double envelope(const std::vector<std::pair<double, double>> &curve,
                       size_t i) {
  double best = 0;
  for (size_t j = i; j < curve.size(); ++j)
    best = std::max(best, curve[j].second);
  return best;
}

double ClusterCalibration::cacheReuseInCacheRate() const {
  if (cacheReuse.size() < 2)
    return 0;
  const double best = envelope(cacheReuse, 0);
  return best > cacheReuse.back().second ? best : 0;
}

double ClusterCalibration::cachedShare(double bytes) const {
  const double inCache = cacheReuseInCacheRate();
  if (inCache <= 0)
    return -1;
  const double hot = 1 / inCache, cold = 1 / cacheReuse.back().second;
  if (bytes <= cacheReuse.front().first)
    return 1;
  if (bytes >= cacheReuse.back().first)
    return 0;
  size_t i = 1;
  while (cacheReuse[i].first < bytes)
    ++i;
  const double b0 = cacheReuse[i - 1].first, b1 = cacheReuse[i].first;
  const double f = std::log(bytes / b0) / std::log(b1 / b0);
  const double perByte =
      (1 - f) / envelope(cacheReuse, i - 1) + f / envelope(cacheReuse, i);
  return std::clamp((cold - perByte) / (cold - hot), 0.0, 1.0);
}

namespace {

/// A collective's seconds read from `points` (CollectiveFit::seconds).
double curveSeconds(const std::vector<std::pair<double, double>> &points,
                    double latency, double busBandwidth, double busBytes,
                    double busPerByte) {
  // Walk the points in bus bytes, their seconds made non-decreasing; (xa,
  // ta) the one before, (xp, tp) the one before that.
  double xa = 0, ta = 0, xp = 0, tp = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const double x = points[i].first * busPerByte;
    const double t = std::max(ta, points[i].second);
    if (busBytes <= x) {
      if (i == 0) {
        const double fixed = std::min(latency, t);
        return fixed + (t - fixed) * busBytes / x;
      }
      return ta + (t - ta) * (busBytes - xa) / (x - xa);
    }
    xp = xa, tp = ta, xa = x, ta = t;
  }
  double perByte = (ta - tp) / (xa - xp);
  if (busBandwidth > 0)
    perByte = std::max(perByte, 1 / busBandwidth);
  return ta + (busBytes - xa) * perByte;
}

} // namespace

double ClusterCalibration::CollectiveFit::seconds(double busBytes,
                                                  double busPerByte) const {
  if (!readsSizes(busPerByte))
    return latency + (busBandwidth > 0 ? busBytes / busBandwidth : 0.0);
  return curveSeconds(bySize, latency, busBandwidth, busBytes, busPerByte);
}

double ClusterCalibration::CollectiveFit::seconds(double busBytes,
                                                  double busPerByte,
                                                  double hot) const {
  const double inCache = seconds(busBytes, busPerByte);
  if (hot < 0 || !readsColdSizes(busPerByte))
    return inCache;
  hot = std::min(hot, 1.0);
  // From memory never faster than in cache (a noisy small size can be).
  const double fromMemory =
      std::max(inCache, curveSeconds(coldBySize, latency, busBandwidth,
                                     busBytes, busPerByte));
  return hot * inCache + (1 - hot) * fromMemory;
}

void ClusterCalibration::CollectiveFit::scaleBandwidth(double factor) {
  busBandwidth *= factor;
  for (auto *points : {&bySize, &coldBySize})
    for (auto &[bytes, t] : *points)
      t = std::min(latency, t) + std::max(0.0, t - latency) / factor;
}

bool ClusterCalibration::any() const {
  for (const auto &row : matmul)
    for (double v : row)
      if (v > 0)
        return true;
  for (double v : matmulMisaligned)
    if (v > 0)
      return true;
  if (!matmulShape.empty() || !matmulShapeCold.empty() ||
      !attentionByShape.empty() || handoffBandwidth > 0 || cacheBytes > 0 ||
      !cacheReuse.empty())
    return true;
  for (const auto *table : {&kernelBandwidth, &kernelHotBandwidth})
    for (const auto &[kind, v] : *table)
      if (v > 0)
        return true;
  for (const auto &[kind, v] : serialKernelBandwidth)
    if (v > 0)
      return true;
  for (const CollectiveFit &f : collective)
    if (f.busBandwidth > 0)
      return true;
  return attention > 0 || adamBandwidth > 0 || clipBandwidth > 0 ||
         opOverhead > 0 || phaseOverhead > 0;
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGBPerS = 1e9;
constexpr double kTFlops = 1e12;
constexpr double kMicrosecond = 1e-6;

/// Scalars verbatim, containers by kind.
std::string describe(const json &v) {
  if (v.is_object() || v.is_array())
    return describeJsonType(v);
  return v.dump();
}

/// The values a figure accepts.
enum class Bound { Positive, NonNegative, Fraction, Count };

const char *boundText(Bound bound) {
  switch (bound) {
  case Bound::Positive:
    return "a number > 0";
  case Bound::NonNegative:
    return "a number >= 0";
  case Bound::Fraction:
    return "a number in (0, 1]";
  case Bound::Count:
    return "an integer from 1 to 1000000";
  }
  return "a number";
}

bool inBounds(double v, Bound bound) {
  if (!std::isfinite(v))
    return false;
  switch (bound) {
  case Bound::Positive:
    return v > 0;
  case Bound::NonNegative:
    return v >= 0;
  case Bound::Fraction:
    return v > 0 && v <= 1;
  case Bound::Count:
    return v >= 1 && v <= 1e6;
  }
  return false;
}

/// Integer figures are read as doubles, then converted.
struct Counts {
  double nodes = 1, gpusPerNode = 1;
};

/// One figure of the format: its dotted key, its unit (SI value = JSON
/// value x scale), the values it accepts, and the member it fills. The
/// reader and the writer both walk this table.
struct FigureSpec {
  const char *key;
  double scale;
  Bound bound;
  bool optional;
  double &(*field)(Cluster &, Counts &);
};

// The calibration's figures (ClusterCalibration), all optional.
#define ZEROC_MATMUL(dtype, d, cls, k)                                         \
  {                                                                            \
    "calibration.matmul_tflops." dtype "." cls, kTFlops, Bound::Positive,      \
        true, [](Cluster &c, Counts &) -> double & {                           \
          return c.calibration.matmul[d][k];                                   \
        }                                                                      \
  }
#define ZEROC_MATMULS(dtype, d)                                                \
  ZEROC_MATMUL(dtype, d, "small", 0), ZEROC_MATMUL(dtype, d, "medium", 1),     \
      ZEROC_MATMUL(dtype, d, "large", 2), ZEROC_MATMUL(dtype, d, "xlarge", 3), \
  {                                                                            \
    "calibration.matmul_tflops." dtype ".misaligned", kTFlops,                 \
        Bound::Positive, true, [](Cluster &c, Counts &) -> double & {          \
          return c.calibration.matmulMisaligned[d];                            \
        }                                                                      \
  }
#define ZEROC_MATMUL_KIND(dtype, d, kind, i, cls, k)                           \
  {                                                                            \
    "calibration.matmul_kind_tflops." dtype "." kind "." cls, kTFlops,         \
        Bound::Positive, true, [](Cluster &c, Counts &) -> double & {          \
          return c.calibration.matmulKind[d][i][k];                            \
        }                                                                      \
  }
#define ZEROC_MATMUL_KIND_CLASSES(dtype, d, kind, i)                           \
  ZEROC_MATMUL_KIND(dtype, d, kind, i, "small", 0),                            \
      ZEROC_MATMUL_KIND(dtype, d, kind, i, "medium", 1),                       \
      ZEROC_MATMUL_KIND(dtype, d, kind, i, "large", 2),                        \
      ZEROC_MATMUL_KIND(dtype, d, kind, i, "xlarge", 3)
#define ZEROC_MATMUL_KINDS(dtype, d)                                           \
  ZEROC_MATMUL_KIND_CLASSES(dtype, d, "linear", 0),                            \
      ZEROC_MATMUL_KIND_CLASSES(dtype, d, "linear_grad_input", 1),             \
      ZEROC_MATMUL_KIND_CLASSES(dtype, d, "linear_grad_weight", 2)
// The element-wise kernels every table of memory-bound rates has (zerorun
// --calibrate's memoryBound), each as `entry(kind)`, separated by commas.
#define ZEROC_ELEMENTWISE_KERNELS(entry)                                       \
  entry("gelu"), entry("gelu_backward"), entry("silu"),                        \
      entry("silu_backward"), entry("add"), entry("mul"), entry("layernorm"),  \
      entry("layernorm_backward"), entry("linear_grad_bias"),                  \
      entry("rmsnorm"), entry("rmsnorm_backward"), entry("rotary"),            \
      entry("rotary_backward")
// A memory-bound kernel's rate in one of the tables (`object` under
// "calibration", `member` of ClusterCalibration).
#define ZEROC_KERNEL_RATE(object, member, kind)                                \
  {                                                                            \
    "calibration." object "." kind, kGBPerS, Bound::Positive, true,            \
        [](Cluster &c, Counts &) -> double & {                                 \
          return c.calibration.member[kind];                                   \
        }                                                                      \
  }
#define ZEROC_KERNEL(kind)                                                     \
  ZEROC_KERNEL_RATE("kernel_gb_per_s", kernelBandwidth, kind)
#define ZEROC_HOT_KERNEL(kind)                                                 \
  ZEROC_KERNEL_RATE("kernel_hot_gb_per_s", kernelHotBandwidth, kind)
#define ZEROC_SERIAL_KERNEL(kind)                                              \
  ZEROC_KERNEL_RATE("serial_kernel_gb_per_s", serialKernelBandwidth, kind)
#define ZEROC_COLLECTIVE(name, k)                                              \
  {"calibration." name ".latency_us", kMicrosecond, Bound::NonNegative, true,  \
   [](Cluster &c, Counts &) -> double & {                                      \
     return c.calibration.collective[k].latency;                               \
   }},                                                                         \
      {"calibration." name ".bus_gb_per_s", kGBPerS, Bound::Positive, true,    \
       [](Cluster &c, Counts &) -> double & {                                  \
         return c.calibration.collective[k].busBandwidth;                      \
       }},                                                                     \
      {"calibration." name ".per_tensor_us", kMicrosecond, Bound::NonNegative, \
       true,                                                                   \
       [](Cluster &c, Counts &) -> double & {                                  \
         return c.calibration.collective[k].perTensor;                         \
       }},                                                                     \
      {"calibration." name ".contended_latency_us", kMicrosecond,              \
       Bound::NonNegative, true,                                               \
       [](Cluster &c, Counts &) -> double & {                                  \
         return c.calibration.contended[k].latency;                            \
       }},                                                                     \
  {                                                                            \
    "calibration." name ".contended_bus_gb_per_s", kGBPerS, Bound::Positive,   \
        true, [](Cluster &c, Counts &) -> double & {                           \
          return c.calibration.contended[k].busBandwidth;                      \
        }                                                                      \
  }

const FigureSpec kFigures[] = {
    {"nodes", 1, Bound::Count, false,
     [](Cluster &, Counts &n) -> double & { return n.nodes; }},
    {"gpus_per_node", 1, Bound::Count, false,
     [](Cluster &, Counts &n) -> double & { return n.gpusPerNode; }},
    {"gpu.memory_gib", kGiB, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.gpu.memoryBytes; }},
    {"gpu.usable_memory_gib", kGiB, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & { return c.gpu.usableMemoryBytes; }},
    {"gpu.runtime_reserve_gib", kGiB, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & {
       return c.gpu.runtimeReserveBytes;
     }},
    {"gpu.peak_tflops.bf16", kTFlops, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.gpu.peak.bf16; }},
    {"gpu.peak_tflops.f16", kTFlops, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.gpu.peak.f16; }},
    {"gpu.peak_tflops.tf32", kTFlops, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.gpu.peak.tf32; }},
    {"gpu.peak_tflops.f32", kTFlops, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.gpu.peak.f32; }},
    {"gpu.hbm_gb_per_s", kGBPerS, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.gpu.hbmBandwidth; }},
    {"intra_node.bus_gb_per_s", kGBPerS, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.intraNode.busBandwidth; }},
    {"intra_node.latency_us", kMicrosecond, Bound::NonNegative, false,
     [](Cluster &c, Counts &) -> double & { return c.intraNode.latency; }},
    {"inter_node.bus_gb_per_s", kGBPerS, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & {
       return c.interNode->busBandwidth;
     }},
    {"inter_node.latency_us", kMicrosecond, Bound::NonNegative, false,
     [](Cluster &c, Counts &) -> double & { return c.interNode->latency; }},
    {"collective_latency_us", kMicrosecond, Bound::NonNegative, false,
     [](Cluster &c, Counts &) -> double & { return c.collectiveLatency; }},
    {"host.memory_gib", kGiB, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.host.memoryBytes; }},
    {"host.reserve_gib", kGiB, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & { return c.host.reserveBytes; }},
    {"host.nvme_capacity_gib", kGiB, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & { return c.host.nvmeCapacityBytes; }},
    {"host.memory_gb_per_s", kGBPerS, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.host.memoryBandwidth; }},
    {"host.pcie_gb_per_s", kGBPerS, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.host.pcieBandwidth; }},
    {"host.nvme_gb_per_s", kGBPerS, Bound::Positive, false,
     [](Cluster &c, Counts &) -> double & { return c.host.nvmeBandwidth; }},
    {"compute_efficiency", 1, Bound::Fraction, true,
     [](Cluster &c, Counts &) -> double & { return c.computeEfficiency; }},
    {"calibration.ranks", 1, Bound::Count, true,
     [](Cluster &c, Counts &) -> double & { return c.calibration.ranks; }},
    {"calibration.meeting_wait.compute", 1, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.meetingWait[0];
     }},
    {"calibration.meeting_wait.memory", 1, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.meetingWait[1];
     }},
    {"calibration.threads_per_rank", 1, Bound::Count, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.threadsPerRank;
     }},
    {"calibration.handoff_gb_per_s", kGBPerS, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.handoffBandwidth;
     }},
    {"calibration.op_overhead_us", kMicrosecond, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & { return c.calibration.opOverhead; }},
    {"calibration.phase_overhead_us", kMicrosecond, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.phaseOverhead;
     }},
    ZEROC_MATMULS("f32", 0),
    ZEROC_MATMULS("bf16", 1),
    ZEROC_MATMULS("f16", 2),
    ZEROC_MATMUL_KINDS("f32", 0),
    ZEROC_MATMUL_KINDS("bf16", 1),
    ZEROC_MATMUL_KINDS("f16", 2),
    {"calibration.attention_tflops", kTFlops, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & { return c.calibration.attention; }},
    {"calibration.attention_small_tflops", kTFlops, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.attentionSmall;
     }},
    {"calibration.attention_backward_tflops", kTFlops, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.attentionBackward;
     }},
    {"calibration.attention_backward_small_tflops", kTFlops, Bound::Positive,
     true,
     [](Cluster &c,
        Counts &) -> double & { return c.calibration.attentionBackwardSmall; }},
    ZEROC_KERNEL("default"),
    ZEROC_ELEMENTWISE_KERNELS(ZEROC_KERNEL),
    ZEROC_KERNEL("cross_entropy"),
    ZEROC_KERNEL("cross_entropy_backward"),
    ZEROC_KERNEL("accumulate"),
    ZEROC_KERNEL("zero_grads"),
    ZEROC_HOT_KERNEL("default"),
    ZEROC_ELEMENTWISE_KERNELS(ZEROC_HOT_KERNEL),
    {"calibration.cache_mib", kMiB, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & { return c.calibration.cacheBytes; }},
    {"calibration.serial_kernel_elements", 1, Bound::Count, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.serialKernelElements;
     }},
    ZEROC_ELEMENTWISE_KERNELS(ZEROC_SERIAL_KERNEL),
    ZEROC_SERIAL_KERNEL("cross_entropy"),
    ZEROC_SERIAL_KERNEL("cross_entropy_backward"),
    ZEROC_SERIAL_KERNEL("accumulate"),
    ZEROC_SERIAL_KERNEL("zero_grads"),
    {"calibration.adam_gb_per_s", kGBPerS, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.adamBandwidth;
     }},
    {"calibration.clip_gb_per_s", kGBPerS, Bound::Positive, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.clipBandwidth;
     }},
    {"calibration.adam_call_us", kMicrosecond, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & { return c.calibration.adamCall; }},
    {"calibration.clip_per_tensor_us", kMicrosecond, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.clipPerTensor;
     }},
    {"calibration.packed_gradient_us", kMicrosecond, Bound::NonNegative, true,
     [](Cluster &c, Counts &) -> double & {
       return c.calibration.packedGradient;
     }},
    ZEROC_COLLECTIVE("all_gather", 0),
    ZEROC_COLLECTIVE("reduce_scatter", 1),
    ZEROC_COLLECTIVE("all_reduce", 2),
    ZEROC_COLLECTIVE("all_to_all", 3),
};
#undef ZEROC_MATMUL
#undef ZEROC_MATMULS
#undef ZEROC_KERNEL
#undef ZEROC_COLLECTIVE

struct StringSpec {
  const char *key;
  bool optional;
  std::string &(*field)(Cluster &);
};

const StringSpec kStrings[] = {
    {"name", false, [](Cluster &c) -> std::string & { return c.name; }},
    {"description", true,
     [](Cluster &c) -> std::string & { return c.description; }},
    {"gpu.model", false,
     [](Cluster &c) -> std::string & { return c.gpu.model; }},
    {"calibration.device", true,
     [](Cluster &c) -> std::string & { return c.calibration.device; }},
    {"calibration.matmul_shapes.source", true,
     [](Cluster &c) -> std::string & {
       return c.sources["calibration.matmul_shapes"];
     }},
    {"calibration.attention_shapes.source", true,
     [](Cluster &c) -> std::string & {
       return c.sources["calibration.attention_shapes"];
     }},
    {"calibration.cache_reuse.source", true,
     [](Cluster &c) -> std::string & {
       return c.sources["calibration.cache_reuse"];
     }},
    {"calibration.steadiness.source", true,
     [](Cluster &c) -> std::string & {
       return c.sources["calibration.steadiness"];
     }},
#define ZEROC_BY_SIZE_SOURCE(name, object)                                     \
  {                                                                            \
    "calibration." name "." object ".source", true,                            \
        [](Cluster &c) -> std::string & {                                      \
          return c.sources["calibration." name "." object];                    \
        }                                                                      \
  }
    ZEROC_BY_SIZE_SOURCE("all_gather", "by_size"),
    ZEROC_BY_SIZE_SOURCE("all_gather", "contended_by_size"),
    ZEROC_BY_SIZE_SOURCE("all_gather", "cold_by_size"),
    ZEROC_BY_SIZE_SOURCE("reduce_scatter", "by_size"),
    ZEROC_BY_SIZE_SOURCE("reduce_scatter", "contended_by_size"),
    ZEROC_BY_SIZE_SOURCE("reduce_scatter", "cold_by_size"),
    ZEROC_BY_SIZE_SOURCE("all_reduce", "by_size"),
    ZEROC_BY_SIZE_SOURCE("all_reduce", "contended_by_size"),
    ZEROC_BY_SIZE_SOURCE("all_reduce", "cold_by_size"),
    ZEROC_BY_SIZE_SOURCE("all_to_all", "by_size"),
    ZEROC_BY_SIZE_SOURCE("all_to_all", "contended_by_size"),
    ZEROC_BY_SIZE_SOURCE("all_to_all", "cold_by_size"),
#undef ZEROC_BY_SIZE_SOURCE
};

/// The objects of the format, each after the one holding it. "" is the
/// document. A missing optional object leaves out the figures in it.
struct ObjectSpec {
  const char *key;
  bool optional;
};

const ObjectSpec kObjects[] = {
    {"", false},
    {"gpu", false},
    {"gpu.peak_tflops", false},
    {"intra_node", false},
    {"inter_node", true},
    {"host", false},
    {"calibration", true},
    {"calibration.matmul_tflops", true},
    {"calibration.matmul_tflops.f32", true},
    {"calibration.matmul_tflops.bf16", true},
    {"calibration.matmul_tflops.f16", true},
    {"calibration.matmul_kind_tflops", true},
    {"calibration.matmul_kind_tflops.f32", true},
    {"calibration.matmul_kind_tflops.f32.linear", true},
    {"calibration.matmul_kind_tflops.f32.linear_grad_input", true},
    {"calibration.matmul_kind_tflops.f32.linear_grad_weight", true},
    {"calibration.matmul_kind_tflops.bf16", true},
    {"calibration.matmul_kind_tflops.bf16.linear", true},
    {"calibration.matmul_kind_tflops.bf16.linear_grad_input", true},
    {"calibration.matmul_kind_tflops.bf16.linear_grad_weight", true},
    {"calibration.matmul_kind_tflops.f16", true},
    {"calibration.matmul_kind_tflops.f16.linear", true},
    {"calibration.matmul_kind_tflops.f16.linear_grad_input", true},
    {"calibration.matmul_kind_tflops.f16.linear_grad_weight", true},
    {"calibration.kernel_gb_per_s", true},
    {"calibration.kernel_hot_gb_per_s", true},
    {"calibration.serial_kernel_gb_per_s", true},
    {"calibration.all_gather", true},
    {"calibration.all_gather.by_size", true},
    {"calibration.all_gather.contended_by_size", true},
    {"calibration.all_gather.cold_by_size", true},
    {"calibration.reduce_scatter", true},
    {"calibration.reduce_scatter.by_size", true},
    {"calibration.reduce_scatter.contended_by_size", true},
    {"calibration.reduce_scatter.cold_by_size", true},
    {"calibration.all_reduce", true},
    {"calibration.all_reduce.by_size", true},
    {"calibration.all_reduce.contended_by_size", true},
    {"calibration.all_reduce.cold_by_size", true},
    {"calibration.all_to_all", true},
    {"calibration.all_to_all.by_size", true},
    {"calibration.all_to_all.contended_by_size", true},
    {"calibration.all_to_all.cold_by_size", true},
    {"calibration.meeting_wait", true},
    {"calibration.matmul_shapes", true},
    {"calibration.attention_shapes", true},
    {"calibration.cache_reuse", true},
    {"calibration.steadiness", true},
};

/// The calibration's GEMMs by a plan's shapes: {"source": TEXT,
/// "gemms": [{"kind", "dtype", "rows", "in", "out", "tflops"[,
/// "cold_tflops"]}, ...]}.
constexpr const char *kMatmulShapes = "calibration.matmul_shapes";
/// The calibration's flash attention by a plan's shapes: {"source": TEXT,
/// "kernels": [{"direction", "dtype", "batch", "seq", "heads", "kv_heads",
/// "head_dim", "window", "tflops"}, ...]}.
constexpr const char *kAttentionShapes = "calibration.attention_shapes";
/// The cache's hold by reuse distance: {"source": TEXT, "points":
/// [{"mib", "gb_per_s"}, ...]}, ascending in mib.
constexpr const char *kCacheReuse = "calibration.cache_reuse";
/// The machine's speed through the calibration: {"source": TEXT, "points":
/// [{"s", "ms"}, ...]}, ascending in s (seconds since it started), ms the
/// slowest rank's time of the probe.
constexpr const char *kSteadiness = "calibration.steadiness";
/// A collective's curves of seconds by size: "calibration.KIND.by_size"
/// (alone, buffers in cache), ".contended_by_size" (beside compute) and
/// ".cold_by_size" (alone, buffers from memory) = {"source": TEXT,
/// "points": [{"bytes", "us"}, ...]}, ascending in bytes.
enum class Curve { Alone, Contended, Cold };
constexpr Curve kCurves[] = {Curve::Alone, Curve::Contended, Curve::Cold};

std::string bySizeKey(int kind, Curve curve) {
  return "calibration." + std::string(collectiveName(CollectiveKind(kind))) +
         (curve == Curve::Contended ? ".contended_by_size"
          : curve == Curve::Cold    ? ".cold_by_size"
                                    : ".by_size");
}

/// The fit `curve` belongs to (the cold one is the fit alone's).
template <typename Calibration>
auto &fitOf(Calibration &cal, int kind, Curve curve) {
  return (curve == Curve::Contended ? cal.contended
                                    : cal.collective)[size_t(kind)];
}

/// The points of `curve` in `fit`.
template <typename Fit> auto &pointsOf(Fit &fit, Curve curve) {
  return curve == Curve::Cold ? fit.coldBySize : fit.bySize;
}

/// "gpu.peak_tflops.bf16" -> {"gpu", "peak_tflops", "bf16"}.
JsonPath pathOf(const std::string &dotted) {
  return JsonPath::fromDotted(dotted);
}

/// The dotted key of the object holding `dotted` ("" for the document).
std::string parentOf(const std::string &dotted) {
  size_t dot = dotted.rfind('.');
  return dot == std::string::npos ? "" : dotted.substr(0, dot);
}

std::string lastKeyOf(const std::string &dotted) {
  size_t dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

/// The keys an object allows: its strings, its figures, its sub-objects.
std::vector<std::string> keysOf(const std::string &object) {
  std::vector<std::string> keys;
  for (const StringSpec &s : kStrings)
    if (parentOf(s.key) == object)
      keys.push_back(lastKeyOf(s.key));
  for (const FigureSpec &f : kFigures)
    if (parentOf(f.key) == object)
      keys.push_back(lastKeyOf(f.key));
  for (const ObjectSpec &o : kObjects)
    if (*o.key && parentOf(o.key) == object)
      keys.push_back(lastKeyOf(o.key));
  if (object == kMatmulShapes)
    keys.push_back("gemms"); // Reader::readMatmulShapes
  if (object == kAttentionShapes)
    keys.push_back("kernels"); // Reader::readAttentionShapes
  if (object == kCacheReuse || object == kSteadiness)
    keys.push_back("points"); // Reader::readCacheReuse, readSteadiness
  for (int kind = 0; kind < ClusterCalibration::kCollectiveKinds; ++kind)
    for (Curve curve : kCurves)
      if (object == bySizeKey(kind, curve))
        keys.push_back("points"); // Reader::readBySize
  return keys;
}

class Reader {
public:
  explicit Reader(const JsonDocument &doc) : doc(doc) {}

  Expected<Cluster> read();

private:
  const JsonDocument &doc;
  std::optional<Diagnostic> error;
  Cluster cluster;
  Counts counts;
  /// The objects found, by dotted key.
  std::map<std::string, const json *> objects;

  /// Records the first error, at `at`, naming `name` (by default `at`).
  bool fail(const JsonPath &at, const std::string &message,
            const JsonPath *name = nullptr) {
    if (!error) {
      std::string where = (name ? *name : at).dotted();
      error = doc.error(at.pointer(), "cluster" +
                                          (where.empty() ? "" : " " + where) +
                                          ": " + message);
    }
    return false;
  }

  /// Rejects keys outside `known`, suggesting the closest.
  bool checkKeys(const json &object, const JsonPath &at,
                 const std::vector<std::string> &known) {
    for (auto it = object.begin(); it != object.end(); ++it) {
      if (std::find(known.begin(), known.end(), it.key()) != known.end())
        continue;
      std::string message = "unknown key '" + it.key() + "'";
      if (std::optional<std::string> match = closestMatch(it.key(), known)) {
        message += "; did you mean '" + *match + "'?";
      } else {
        message += "; expected one of";
        for (size_t i = 0; i < known.size(); ++i)
          message += (i ? ", '" : " '") + known[i] + "'";
      }
      // Point at the key itself, name the object it is in.
      return fail(at / it.key(), message, &at);
    }
    return true;
  }

  /// The member `key` of the object at `at`, or null (an error when
  /// required).
  const json *member(const json &object, const JsonPath &at,
                     const std::string &key, bool optional) {
    auto it = object.find(key);
    if (it != object.end())
      return &*it;
    if (!optional)
      fail(at, "missing required key '" + key + "'");
    return nullptr;
  }

  bool readObjects();
  bool readString(const json &value, const JsonPath &at, std::string &out);
  bool readFigure(const json &figure, const JsonPath &at,
                  const FigureSpec &spec);
  bool readMatmulShapes(const json &object);
  bool readAttentionShapes(const json &object);
  bool readCacheReuse(const json &object);
  bool readSteadiness(const json &object);
  bool readBySize(const json &object, int kind, Curve curve);
  /// `table`'s "points": objects of exactly `x` and `y`, both > 0 (read in
  /// units of `xScale` and `yScale`), ascending in `x`, at least two
  /// (`why` says what for).
  bool readPoints(const json &object, const std::string &table, const char *x,
                  double xScale, const char *y, double yScale, const char *why,
                  std::vector<std::pair<double, double>> &points);
  /// The entries of a shapes table `table` (its list under `list`): each
  /// an object with exactly `keys`, handed to `entry` with its path.
  bool
  readEntries(const json &object, const char *table, const char *list,
              const std::vector<std::string> &keys,
              const std::function<bool(const json &, const JsonPath &)> &entry);
  /// Members of one entry of a shapes table at `at`: one of `names` (its
  /// index), a positive integer (or zero where `zero`), a rate in TFLOP/s.
  bool readChoice(const json &entry, const JsonPath &at, const char *key,
                  const std::vector<std::string> &names, int &index);
  bool readDimension(const json &entry, const JsonPath &at, const char *key,
                     int64_t &out, bool zero = false);
  bool readTFlops(const json &entry, const JsonPath &at, double &out,
                  const char *key = "tflops") {
    return readPositive(entry, at, key, kTFlops, out);
  }
  /// A member `key` > 0 of one entry, times `scale`.
  bool readPositive(const json &entry, const JsonPath &at, const char *key,
                    double scale, double &out);
};

bool Reader::readObjects() {
  for (const ObjectSpec &spec : kObjects) {
    JsonPath at = pathOf(spec.key);
    const json *value = &doc.root();
    if (*spec.key) {
      auto parent = objects.find(parentOf(spec.key));
      if (parent == objects.end())
        continue;
      value = member(*parent->second, pathOf(parentOf(spec.key)),
                     lastKeyOf(spec.key), spec.optional);
      if (!value) {
        if (error)
          return false;
        continue;
      }
    }
    if (!value->is_object())
      return fail(at, "expected an object, found " + describe(*value));
    if (!checkKeys(*value, at, keysOf(spec.key)))
      return false;
    objects[spec.key] = value;
  }
  return true;
}

bool Reader::readString(const json &value, const JsonPath &at,
                        std::string &out) {
  if (!value.is_string())
    return fail(at, "expected a string, found " + describe(value));
  out = value.get<std::string>();
  return true;
}

/// A figure: a number, or {"value": number, "source": string}.
bool Reader::readFigure(const json &figure, const JsonPath &at,
                        const FigureSpec &spec) {
  const json *value = &figure;
  JsonPath valueAt = at;
  std::string source;
  if (figure.is_object()) {
    if (!checkKeys(figure, at, {"value", "source"}))
      return false;
    value = member(figure, at, "value", false);
    const json *text = member(figure, at, "source", false);
    if (!value || !text || !readString(*text, at / "source", source))
      return false;
    valueAt = at / "value";
  }
  bool typeOk = spec.bound == Bound::Count ? value->is_number_integer()
                                           : value->is_number();
  if (!typeOk || !inBounds(value->get<double>(), spec.bound)) {
    std::string expected = boundText(spec.bound);
    // A figure of the wrong kind altogether may have meant either form.
    if (!value->is_number() && value == &figure)
      expected += " or {\"value\": NUMBER, \"source\": TEXT}";
    return fail(valueAt,
                "expected " + expected + ", found " + describe(*value));
  }
  spec.field(cluster, counts) = value->get<double>() * spec.scale;
  if (!source.empty())
    cluster.sources[spec.key] = source;
  return true;
}

bool Reader::readChoice(const json &entry, const JsonPath &at, const char *key,
                        const std::vector<std::string> &names, int &index) {
  const json *v = member(entry, at, key, false);
  std::string text;
  if (!v || !readString(*v, at / key, text))
    return false;
  auto it = std::find(names.begin(), names.end(), text);
  if (it != names.end()) {
    index = int(it - names.begin());
    return true;
  }
  std::string message = "expected one of";
  for (size_t n = 0; n < names.size(); ++n)
    message += (n ? ", '" : " '") + names[n] + "'";
  return fail(at / key, message + ", found '" + text + "'");
}

bool Reader::readDimension(const json &entry, const JsonPath &at,
                           const char *key, int64_t &out, bool zero) {
  const json *v = member(entry, at, key, false);
  if (!v)
    return false;
  if (!v->is_number_integer() || v->get<double>() < (zero ? 0 : 1) ||
      v->get<double>() > 9e15)
    return fail(at / key, std::string("expected a ") +
                              (zero ? "non-negative" : "positive") +
                              " integer, found " + describe(*v));
  out = v->get<int64_t>();
  return true;
}

bool Reader::readPositive(const json &entry, const JsonPath &at,
                          const char *key, double scale, double &out) {
  const json *value = member(entry, at, key, false);
  if (!value)
    return false;
  if (!value->is_number() || !inBounds(value->get<double>(), Bound::Positive))
    return fail(at / key, std::string("expected ") +
                              boundText(Bound::Positive) + ", found " +
                              describe(*value));
  out = value->get<double>() * scale;
  return true;
}

bool Reader::readEntries(
    const json &object, const char *table, const char *list,
    const std::vector<std::string> &keys,
    const std::function<bool(const json &, const JsonPath &)> &entry) {
  const JsonPath at = pathOf(table) / list;
  const json *entries = member(object, pathOf(table), list, false);
  if (!entries)
    return false;
  if (!entries->is_array()) {
    std::string fields;
    for (const std::string &key : keys)
      fields += (fields.empty() ? "\"" : ", \"") + key + "\"";
    return fail(at, "expected an array of {" + fields + "}, found " +
                        describe(*entries));
  }
  for (size_t i = 0; i < entries->size(); ++i) {
    const json &e = (*entries)[i];
    const JsonPath eat = at / std::to_string(i);
    if (!e.is_object())
      return fail(eat, "expected an object, found " + describe(e));
    if (!checkKeys(e, eat, keys) || !entry(e, eat))
      return false;
  }
  return true;
}

bool Reader::readMatmulShapes(const json &object) {
  using C = ClusterCalibration;
  const std::vector<std::string> kinds(std::begin(C::kMatmulKindNames),
                                       std::end(C::kMatmulKindNames));
  const std::vector<std::string> dtypes(std::begin(C::kMatmulDTypeNames),
                                        std::end(C::kMatmulDTypeNames));
  return readEntries(
      object, kMatmulShapes, "gemms",
      {"kind", "dtype", "rows", "in", "out", "tflops", "cold_tflops"},
      [&](const json &g, const JsonPath &gat) {
        int kind = 0, dtype = 0;
        LinearGeometry geometry;
        double rate = 0, cold = 0;
        if (!readChoice(g, gat, "kind", kinds, kind) ||
            !readChoice(g, gat, "dtype", dtypes, dtype) ||
            !readDimension(g, gat, "rows", geometry.rows) ||
            !readDimension(g, gat, "in", geometry.in) ||
            !readDimension(g, gat, "out", geometry.out) ||
            !readTFlops(g, gat, rate) ||
            (g.contains("cold_tflops") &&
             !readTFlops(g, gat, cold, "cold_tflops")))
          return false;
        const C::MatmulShapeKey key{dtype, kind, geometry};
        if (cold > 0)
          cluster.calibration.matmulShapeCold[key] = cold;
        auto [it, fresh] = cluster.calibration.matmulShape.emplace(key, rate);
        if (!fresh)
          return fail(gat, "a second " + kinds[size_t(kind)] + " " +
                               dtypes[size_t(dtype)] + " GEMM of rows " +
                               std::to_string(geometry.rows) + ", in " +
                               std::to_string(geometry.in) + ", out " +
                               std::to_string(geometry.out) +
                               " (each shape once)");
        return true;
      });
}

bool Reader::readAttentionShapes(const json &object) {
  using C = ClusterCalibration;
  const std::vector<std::string> directions = {"forward", "backward"};
  const std::vector<std::string> dtypes(std::begin(C::kMatmulDTypeNames),
                                        std::end(C::kMatmulDTypeNames));
  return readEntries(
      object, kAttentionShapes, "kernels",
      {"direction", "dtype", "batch", "seq", "heads", "kv_heads", "head_dim",
       "window", "tflops"},
      [&](const json &k, const JsonPath &kat) {
        int direction = 0, dtype = 0;
        AttentionGeometry g;
        double rate = 0;
        if (!readChoice(k, kat, "direction", directions, direction) ||
            !readChoice(k, kat, "dtype", dtypes, dtype) ||
            !readDimension(k, kat, "batch", g.batch) ||
            !readDimension(k, kat, "seq", g.seq) ||
            !readDimension(k, kat, "heads", g.heads) ||
            !readDimension(k, kat, "kv_heads", g.kvHeads) ||
            !readDimension(k, kat, "head_dim", g.headDim) ||
            !readDimension(k, kat, "window", g.window, /*zero=*/true) ||
            !readTFlops(k, kat, rate))
          return false;
        if (g.window >= g.seq)
          return fail(kat / "window",
                      "expected 0 (none) or a window below seq " +
                          std::to_string(g.seq) + ", found " +
                          std::to_string(g.window));
        if (g.heads % g.kvHeads != 0)
          return fail(kat / "kv_heads",
                      "expected a divisor of heads " + std::to_string(g.heads) +
                          ", found " + std::to_string(g.kvHeads));
        auto [it, fresh] = cluster.calibration.attentionByShape.emplace(
            C::AttentionShapeKey{dtype, direction == 1, g}, rate);
        if (!fresh)
          return fail(kat, "a second " + directions[size_t(direction)] + " " +
                               dtypes[size_t(dtype)] +
                               " attention of this shape (each shape once)");
        return true;
      });
}

bool Reader::readPoints(const json &object, const std::string &table,
                        const char *x, double xScale, const char *y,
                        double yScale, const char *why,
                        std::vector<std::pair<double, double>> &points) {
  if (!readEntries(object, table.c_str(), "points", {x, y},
                   [&](const json &p, const JsonPath &pat) {
                     double at = 0, v = 0;
                     if (!readPositive(p, pat, x, xScale, at) ||
                         !readPositive(p, pat, y, yScale, v))
                       return false;
                     if (!points.empty() && at <= points.back().first) {
                       char before[32];
                       std::snprintf(before, sizeof before, "%.12g",
                                     points.back().first / xScale);
                       return fail(pat / x,
                                   std::string("expected more than the "
                                               "point before's ") +
                                       before + " (points ascend in " + x +
                                       "), found " + describe(p.at(x)));
                     }
                     points.emplace_back(at, v);
                     return true;
                   }))
    return false;
  if (points.size() < 2)
    return fail(pathOf(table) / "points",
                std::string("expected at least 2 points (") + why +
                    "), found " + std::to_string(points.size()));
  return true;
}

bool Reader::readCacheReuse(const json &object) {
  return readPoints(object, kCacheReuse, "mib", kMiB, "gb_per_s", kGBPerS,
                    "in cache and from memory", cluster.calibration.cacheReuse);
}

bool Reader::readSteadiness(const json &object) {
  return readPoints(object, kSteadiness, "s", 1, "ms", 1e-3,
                    "a probe timed again and again",
                    cluster.calibration.steadiness);
}

bool Reader::readBySize(const json &object, int kind, Curve curve) {
  const std::string key = bySizeKey(kind, curve);
  const bool contended = curve == Curve::Contended;
  ClusterCalibration::CollectiveFit &fit =
      fitOf(cluster.calibration, kind, curve);
  if (!readPoints(object, key, "bytes", 1, "us", kMicrosecond,
                  "sizes between which the cost model interpolates",
                  pointsOf(fit, curve)))
    return false;
  if (fit.busBandwidth <= 0)
    return fail(pathOf(key),
                "expected calibration." +
                    std::string(collectiveName(CollectiveKind(kind))) +
                    (contended ? ".contended_bus_gb_per_s" : ".bus_gb_per_s") +
                    " beside it (past the last point the cost model goes on "
                    "at no less than the fit's rate)");
  if (cluster.calibration.ranks < 2)
    return fail(pathOf(key),
                "expected calibration.ranks of at least 2 beside it (the "
                "points are read in bus bytes at the ranks that measured "
                "them)");
  return true;
}

Expected<Cluster> Reader::read() {
  if (!readObjects())
    return *error;
  if (objects.count("inter_node"))
    cluster.interNode.emplace();

  // Strings and figures, in the objects that hold them.
  auto memberOf = [&](const char *key, bool optional) -> const json * {
    auto parent = objects.find(parentOf(key));
    if (error || parent == objects.end())
      return nullptr;
    return member(*parent->second, pathOf(parent->first), lastKeyOf(key),
                  optional);
  };
  for (const StringSpec &spec : kStrings)
    if (const json *v = memberOf(spec.key, spec.optional))
      readString(*v, pathOf(spec.key), spec.field(cluster));
  for (const FigureSpec &spec : kFigures)
    if (const json *v = memberOf(spec.key, spec.optional))
      readFigure(*v, pathOf(spec.key), spec);
  if (auto shapes = objects.find(kMatmulShapes);
      !error && shapes != objects.end())
    readMatmulShapes(*shapes->second);
  if (auto shapes = objects.find(kAttentionShapes);
      !error && shapes != objects.end())
    readAttentionShapes(*shapes->second);
  for (int kind = 0; kind < ClusterCalibration::kCollectiveKinds; ++kind)
    for (Curve curve : kCurves)
      if (auto sizes = objects.find(bySizeKey(kind, curve));
          !error && sizes != objects.end())
        readBySize(*sizes->second, kind, curve);
  if (auto probes = objects.find(kSteadiness);
      !error && probes != objects.end())
    readSteadiness(*probes->second);
  if (auto curve = objects.find(kCacheReuse); !error && curve != objects.end())
    if (readCacheReuse(*curve->second) && cluster.calibration.cacheBytes <= 0)
      fail(pathOf(kCacheReuse),
           "expected calibration.cache_mib beside it (the curve's pools are "
           "read against the ranks' shares of that cache)");
  if (error)
    return *error;

  cluster.nodes = int64_t(counts.nodes);
  cluster.gpusPerNode = int64_t(counts.gpusPerNode);
  const std::string &device = cluster.calibration.device;
  if (cluster.name.empty())
    fail(pathOf("name"), "expected a non-empty string");
  else if (objects.count("calibration") &&
           objects.at("calibration")->contains("device") && device != "cpu" &&
           device != "cuda")
    fail(pathOf("calibration.device"),
         "expected \"cpu\" or \"cuda\" (the zerorun device that "
         "measured), got \"" +
             device + "\"");
  else if (cluster.nodes > 1 && !cluster.interNode)
    fail({}, "missing required key 'inter_node': the cluster has " +
                 std::to_string(cluster.nodes) +
                 " nodes, so collectives cross a network");
  else if (cluster.gpus() > limits::kMaxWorldSize)
    fail(pathOf("gpus_per_node"),
         std::to_string(cluster.nodes) + " nodes x " +
             std::to_string(cluster.gpusPerNode) +
             " GPUs = " + std::to_string(cluster.gpus()) +
             " ranks, more than MPI and NCCL address (2147483647, their "
             "ranks are 32-bit ints)");
  if (error)
    return *error;
  return cluster;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// Undoes the unit scale without printing 3.4000000000000004 for 3.4 us.
double inUnits(double si, double scale) {
  char text[64];
  std::snprintf(text, sizeof text, "%.12g", si / scale);
  return std::strtod(text, nullptr);
}

json::json_pointer pointerOf(const std::string &dotted) {
  return json::json_pointer(pathOf(dotted).pointer());
}

} // namespace

json toJson(const Cluster &c) {
  Cluster copy = c;
  Counts counts{double(c.nodes), double(c.gpusPerNode)};
  json out = json::object();
  for (const StringSpec &spec : kStrings)
    if (!spec.optional || !spec.field(copy).empty())
      out[pointerOf(spec.key)] = spec.field(copy);
  for (const FigureSpec &spec : kFigures) {
    if (parentOf(spec.key) == "inter_node" && !c.interNode)
      continue;
    // An optional figure at its default, with no source: left out, so that
    // a file without it reads back equal.
    Cluster defaults;
    Counts defaultCounts;
    if (spec.optional && !c.sources.count(spec.key) &&
        spec.field(copy, counts) == spec.field(defaults, defaultCounts))
      continue;
    double v = inUnits(spec.field(copy, counts), spec.scale);
    json value = (v == std::floor(v) && std::fabs(v) < 9e15) ? json(int64_t(v))
                                                             : json(v);
    auto source = c.sources.find(spec.key);
    out[pointerOf(spec.key)] =
        source == c.sources.end()
            ? value
            : json{{"value", value}, {"source", source->second}};
  }
  // With its source (written above) the object needs its `gemms`, even
  // none.
  auto shapesSource = c.sources.find(kMatmulShapes);
  if (!c.calibration.matmulShape.empty() ||
      (shapesSource != c.sources.end() && !shapesSource->second.empty())) {
    json gemms = json::array();
    for (const auto &[key, rate] : c.calibration.matmulShape) {
      const auto &[dtype, kind, g] = key;
      gemms.push_back(
          {{"kind", ClusterCalibration::kMatmulKindNames[size_t(kind)]},
           {"dtype", ClusterCalibration::kMatmulDTypeNames[dtype]},
           {"rows", g.rows},
           {"in", g.in},
           {"out", g.out},
           {"tflops", inUnits(rate, kTFlops)}});
      if (auto cold = c.calibration.matmulShapeCold.find(key);
          cold != c.calibration.matmulShapeCold.end())
        gemms.back()["cold_tflops"] = inUnits(cold->second, kTFlops);
    }
    out[pointerOf(std::string(kMatmulShapes) + ".gemms")] = gemms;
  }
  auto attentionSource = c.sources.find(kAttentionShapes);
  if (!c.calibration.attentionByShape.empty() ||
      (attentionSource != c.sources.end() &&
       !attentionSource->second.empty())) {
    json kernels = json::array();
    for (const auto &[key, rate] : c.calibration.attentionByShape) {
      const auto &[dtype, backward, g] = key;
      kernels.push_back(
          {{"direction", backward ? "backward" : "forward"},
           {"dtype", ClusterCalibration::kMatmulDTypeNames[dtype]},
           {"batch", g.batch},
           {"seq", g.seq},
           {"heads", g.heads},
           {"kv_heads", g.kvHeads},
           {"head_dim", g.headDim},
           {"window", g.window},
           {"tflops", inUnits(rate, kTFlops)}});
    }
    out[pointerOf(std::string(kAttentionShapes) + ".kernels")] = kernels;
  }
  if (!c.calibration.cacheReuse.empty()) {
    json points = json::array();
    for (const auto &[bytes, rate] : c.calibration.cacheReuse)
      points.push_back({{"mib", inUnits(bytes, kMiB)},
                        {"gb_per_s", inUnits(rate, kGBPerS)}});
    out[pointerOf(std::string(kCacheReuse) + ".points")] = points;
  }
  if (!c.calibration.steadiness.empty()) {
    json points = json::array();
    for (const auto &[at, t] : c.calibration.steadiness)
      points.push_back({{"s", inUnits(at, 1)}, {"ms", inUnits(t, 1e-3)}});
    out[pointerOf(std::string(kSteadiness) + ".points")] = points;
  }
  // A collective's sizes where the reader would take them back (two or
  // more beside the fit, at 2+ ranks); otherwise none, nor their source.
  for (int kind = 0; kind < ClusterCalibration::kCollectiveKinds; ++kind)
    for (Curve curve : kCurves) {
      const ClusterCalibration::CollectiveFit &fit =
          fitOf(c.calibration, kind, curve);
      const std::vector<std::pair<double, double>> &sizes =
          pointsOf(fit, curve);
      const json::json_pointer at = pointerOf(bySizeKey(kind, curve));
      if (sizes.size() < 2 || fit.busBandwidth <= 0 ||
          c.calibration.ranks < 2) {
        if (out.contains(at))
          out[at.parent_pointer()].erase(at.back());
        continue;
      }
      json points = json::array();
      for (const auto &[bytes, t] : sizes)
        points.push_back(
            {{"bytes", inUnits(bytes, 1)}, {"us", inUnits(t, kMicrosecond)}});
      out[at / "points"] = points;
    }
  return out;
}

Expected<Cluster> readCluster(const JsonDocument &doc) {
  try {
    return Reader(doc).read();
  } catch (const std::exception &e) {
    // The reader checks types before every get<>(); this is a backstop so
    // that nothing escapes as an exception.
    return Diagnostic{doc.name(), 0, 0,
                      std::string("cluster: internal error: ") + e.what()};
  }
}

Expected<Cluster> loadClusterFile(const std::string &path) {
  Expected<JsonDocument> doc = JsonDocument::load(path);
  if (!doc)
    return doc.error();
  return readCluster(*doc);
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

namespace {

struct Preset {
  const char *name;
  const char *text;
};

/// {name, text of examples/clusters/NAME.json}, generated by CMake from the
/// files so that the two cannot drift apart.
const Preset kPresets[] = {
#include "ClusterPresets.inc"
};

} // namespace

const std::vector<std::string> &clusterPresetNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Preset &p : kPresets)
      out.push_back(p.name);
    return out;
  }();
  return names;
}

Expected<Cluster> clusterPreset(const std::string &name) {
  for (const Preset &p : kPresets) {
    if (name != p.name)
      continue;
    Expected<JsonDocument> doc =
        JsonDocument::parse(p.text, "examples/clusters/" + name + ".json");
    if (!doc)
      return doc.error();
    return readCluster(*doc);
  }
  std::string message = "unknown cluster preset '" + name + "'";
  if (std::optional<std::string> match =
          closestMatch(name, clusterPresetNames()))
    message += "; did you mean '" + *match + "'?";
  message += " (presets:";
  for (const std::string &n : clusterPresetNames())
    message += " " + n;
  return Diagnostic{"", 0, 0, message + ")"};
}

Expected<Cluster> loadCluster(const std::string &spec) {
  if (std::ifstream(spec).good())
    return loadClusterFile(spec);
  bool looksLikePath = spec.find('/') != std::string::npos ||
                       spec.find('.') != std::string::npos;
  if (looksLikePath)
    return loadClusterFile(spec); // reports "cannot open file"
  return clusterPreset(spec);
}

Expected<Cluster> withNodes(Cluster cluster, int64_t nodes) {
  if (nodes < 1)
    return Diagnostic{
        "", 0, 0, "--nodes must be at least 1, found " + std::to_string(nodes)};
  if (nodes > limits::kMaxWorldSize / cluster.gpusPerNode)
    return Diagnostic{"", 0, 0,
                      "--nodes " + std::to_string(nodes) + " x " +
                          std::to_string(cluster.gpusPerNode) +
                          " GPUs per node is more ranks than MPI and NCCL "
                          "address (2147483647, their ranks are 32-bit ints)"};
  if (nodes > 1 && !cluster.interNode)
    return Diagnostic{"", 0, 0,
                      "--nodes " + std::to_string(nodes) + ": " + cluster.name +
                          " describes one machine with no inter_node link; "
                          "write a cluster file with inter_node for more "
                          "nodes"};
  cluster.nodes = nodes;
  cluster.sources["nodes"] = "--nodes on the command line";
  return cluster;
}

std::optional<Diagnostic> checkFits(const Cluster &cluster, int64_t worldSize) {
  if (worldSize <= cluster.gpus())
    return std::nullopt;
  return Diagnostic{
      "", 0, 0,
      "the plan runs on " + std::to_string(worldSize) + " ranks but cluster '" +
          cluster.name + "' has " + std::to_string(cluster.gpus()) +
          (cluster.gpus() == 1 ? " GPU (" : " GPUs (") +
          std::to_string(cluster.nodes) + " node" +
          (cluster.nodes == 1 ? "" : "s") + " x " +
          std::to_string(cluster.gpusPerNode) + "); describe a cluster with " +
          std::to_string((worldSize + cluster.gpusPerNode - 1) /
                         cluster.gpusPerNode) +
          " nodes"};
}

} // namespace zeroc
