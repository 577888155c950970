//===- CostModel.cpp - Time of collectives, compute ops and copies --------===//

#include "zeroc/Cost/CostModel.h"

#include "zeroc/Config/DeepSpeedConfig.h"
#include "zeroc/Plan/MoeFlops.h"
#include "zeroc/Support/GemmSlices.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

using nlohmann::json;

namespace zeroc {

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

RankLayout rankLayout(const Cluster &cluster, int64_t ranks) {
  RankLayout layout;
  int64_t perNode = std::max<int64_t>(1, cluster.gpusPerNode);
  layout.ranks = std::max<int64_t>(1, ranks);
  layout.ranksPerNode = std::min(layout.ranks, perNode);
  layout.nodes = (layout.ranks + perNode - 1) / perNode;
  layout.nicSharers = layout.ranksPerNode;
  return layout;
}

std::optional<RankLayout> groupLayout(const Cluster &cluster, int64_t worldSize,
                                      int64_t ep, CommGroupKind kind) {
  RankLayout world = rankLayout(cluster, worldSize);
  CommGroupShape shape = commGroupShape(kind, worldSize, ep);
  if (kind == CommGroupKind::World || shape.size == worldSize)
    return world;
  RankLayout g;
  g.ranks = shape.size;
  g.nicSharers = world.ranksPerNode;
  if (world.nodes == 1) { // Every group inside the one node.
    g.ranksPerNode = g.ranks;
    return g;
  }
  int64_t perNode = world.ranksPerNode;
  if (perNode % ep != 0 && ep % perNode != 0)
    return std::nullopt;
  if (kind == CommGroupKind::ExpertParallel) {
    // Consecutive ranks: whole groups in a node, or whole nodes in a group.
    g.ranksPerNode = std::min(ep, perNode);
  } else {
    // Ranks ep apart: perNode / ep of them share a node, or one per node;
    // alike on every node only if every node is full.
    if (worldSize % perNode != 0)
      return std::nullopt;
    g.ranksPerNode = ep >= perNode ? 1 : perNode / ep;
  }
  g.nodes = g.ranks / g.ranksPerNode;
  return g;
}

namespace {

/// Ring steps and the share of the buffer each rank sends: NCCL's `nsteps`
/// and nccl-tests' bus-bandwidth factor.
struct RingShape {
  double steps = 0;
  double factor = 0;
};

RingShape ringShape(CollectiveKind kind, int64_t ranks) {
  if (ranks <= 1)
    return {};
  double n = double(ranks);
  bool allReduce = kind == CollectiveKind::AllReduce;
  return {(allReduce ? 2.0 : 1.0) * (n - 1),
          commElementsPerRank(kind, 1.0, ranks)};
}

/// Adds one ring to `time`: its latency to `latency`, its bandwidth time to
/// `bandwidthPart`.
void addRing(CollectiveTime &time, double &bandwidthPart, CollectiveKind kind,
             double bytes, int64_t ranks, const ClusterLink &link) {
  RingShape ring = ringShape(kind, ranks);
  time.latency += ring.steps * link.latency;
  if (link.busBandwidth > 0)
    bandwidthPart += bytes * ring.factor / link.busBandwidth;
}

} // namespace

double ringTime(CollectiveKind kind, double bytes, int64_t ranks,
                double busBandwidth, double stepLatency) {
  if (ranks <= 1 || bytes <= 0)
    return 0;
  RingShape ring = ringShape(kind, ranks);
  return ring.steps * stepLatency +
         (busBandwidth > 0 ? bytes * ring.factor / busBandwidth : 0);
}

CollectiveTime collectiveTime(const Cluster &cluster, CollectiveKind kind,
                              double bytes, int64_t ranks) {
  return collectiveTime(cluster, kind, bytes, rankLayout(cluster, ranks));
}

CollectiveTime collectiveTime(const Cluster &cluster, CollectiveKind kind,
                              double bytes, const RankLayout &layout) {
  CollectiveTime t;
  if (layout.ranks <= 1 || bytes <= 0)
    return t;
  t.latency = cluster.collectiveLatency;
  const ClusterLink &intra = cluster.intraNode;
  if (layout.nodes == 1) {
    addRing(t, t.intraNode, kind, bytes, layout.ranks, intra);
  } else {
    // The g ranks of a node each run an inter-node ring over 1/g of the data
    // at the same time, sharing the node's NICs (with the other groups'
    // rings, for a communicator group: nicSharers in all).
    int64_t g = layout.ranksPerNode;
    ClusterLink net = cluster.interNode ? *cluster.interNode : intra;
    net.busBandwidth /= double(std::max(g, layout.nicSharers));
    double slice = bytes / double(g);
    switch (kind) {
    case CollectiveKind::ReduceScatter:
      addRing(t, t.intraNode, kind, bytes, g, intra);
      addRing(t, t.interNode, kind, slice, layout.nodes, net);
      break;
    case CollectiveKind::AllGather:
      addRing(t, t.interNode, kind, slice, layout.nodes, net);
      addRing(t, t.intraNode, kind, bytes, g, intra);
      break;
    case CollectiveKind::AllReduce:
      addRing(t, t.intraNode, CollectiveKind::ReduceScatter, bytes, g, intra);
      addRing(t, t.interNode, kind, slice, layout.nodes, net);
      addRing(t, t.intraNode, CollectiveKind::AllGather, bytes, g, intra);
      break;
    case CollectiveKind::AllToAll: {
      // No hierarchy: each rank sends bytes / n to every other rank at once,
      // (g-1)/n of its buffer inside the node and (n-g)/n through the node's
      // NICs, which its g ranks share (net.busBandwidth is already shared).
      double n = double(layout.ranks), local = double(g);
      t.latency +=
          (local - 1) * intra.latency + double(layout.nodes - 1) * net.latency;
      if (intra.busBandwidth > 0)
        t.intraNode += bytes * (local - 1) / n / intra.busBandwidth;
      if (net.busBandwidth > 0)
        t.interNode += bytes * (n - local) / n / net.busBandwidth;
      break;
    }
    }
  }
  t.seconds = t.latency + t.intraNode + t.interNode;
  return t;
}

//===----------------------------------------------------------------------===//
// Compute and offload
//===----------------------------------------------------------------------===//

double computeTime(const Cluster &cluster, double flops, double bytes,
                   DType dtype) {
  double peak = cluster.peakFlops(dtype) * cluster.computeEfficiency;
  double math = flops > 0 && peak > 0 ? flops / peak : 0;
  double memory = bytes > 0 && cluster.gpu.hbmBandwidth > 0
                      ? bytes / cluster.gpu.hbmBandwidth
                      : 0;
  return std::max(math, memory);
}

namespace {

/// The rate at `x` of measured points (x, rate) in increasing x: linear
/// between two, the nearer one's outside; 0 without points.
double interpolateRate(const std::vector<std::pair<double, double>> &points,
                       double x) {
  if (points.empty())
    return 0;
  if (x <= points.front().first)
    return points.front().second;
  for (size_t i = 1; i < points.size(); ++i)
    if (x <= points[i].first) {
      double w =
          (x - points[i - 1].first) / (points[i].first - points[i - 1].first);
      return points[i - 1].second +
             w * (points[i].second - points[i - 1].second);
    }
  return points.back().second;
}

/// The index in ClusterCalibration::kMatmulKindNames of `kind`; -1 for
/// another kind.
int matmulKindIndex(OpKind kind) {
  return ClusterCalibration::matmulKindIndex(opKindName(kind));
}

} // namespace

double calibratedMatmulRate(const ClusterCalibration &calibration, DType dtype,
                            double flops, std::optional<OpKind> kind) {
  using C = ClusterCalibration;
  int d = C::matmulIndex(dtype);
  int i = kind ? matmulKindIndex(*kind) : -1;
  auto pointsOf = [&](const double(&rates)[C::kMatmulClasses]) {
    std::vector<std::pair<double, double>> points; // (log flops, rate)
    for (int k = 0; k < C::kMatmulClasses; ++k)
      if (rates[k] > 0)
        points.push_back({std::log(C::kMatmulClassFlops[k]), rates[k]});
    return points;
  };
  std::vector<std::pair<double, double>> points;
  if (i >= 0)
    points = pointsOf(calibration.matmulKind[d][i]);
  if (points.empty())
    points = pointsOf(calibration.matmul[d]);
  double at = std::log(std::max(flops, 1.0));
  double rate = interpolateRate(points, at);
  // No product faster than a smaller class's call: where the host's issue
  // bounds the classes (an H100's bf16 GEMMs of side 64 to 1024 took 19-22 us a
  // call, their rates 0.03 to 97 TFLOP/s), the rate interpolated in
  // log(FLOPs) would price a product of 67 MFLOP at 3.8 us, one of 34 at
  // 19.5.
  for (const auto &[logFlops, classRate] : points)
    if (logFlops <= at)
      rate = std::min(rate, std::exp(at - logFlops) * classRate);
  return rate;
}

double calibratedAttentionRate(const ClusterCalibration &calibration,
                               double itemWork, bool backward) {
  // The backward's own rates where the file has them; otherwise both
  // directions take the rate they were timed at together.
  bool own = backward && calibration.attentionBackward > 0;
  double large = own ? calibration.attentionBackward : calibration.attention;
  double small =
      own ? calibration.attentionBackwardSmall : calibration.attentionSmall;
  if (large <= 0)
    return 0;
  if (small <= 0 || itemWork <= 0)
    return large;
  bool gpu = calibration.device != "cpu";
  using C = ClusterCalibration;
  return interpolateRate(
      {{std::log(C::attentionShape(gpu, true).itemWork()), small},
       {std::log(C::attentionShape(gpu, false).itemWork()), large}},
      std::log(itemWork));
}

bool rowsMisaligned(const std::vector<int64_t> &shape, DType dtype) {
  return !shape.empty() && (shape.back() * bytesPerElement(dtype)) % 16 != 0;
}

bool pricedByFlopRate(OpKind kind) {
  switch (kind) {
  case OpKind::Linear:
  case OpKind::LinearGradInput:
  case OpKind::LinearGradWeight:
  case OpKind::CausalAttention:
  case OpKind::CausalAttentionBackward:
    return true;
  default:
    return false;
  }
}

double kernelTime(const Cluster &cluster, OpKind kind, double flops,
                  double bytes, DType dtype, bool misalignedRows,
                  double elements, double attentionWork,
                  const LinearGeometry *gemm,
                  const AttentionGeometry *attention, double hot) {
  const ClusterCalibration &cal = cluster.calibration;
  // Seconds for `work` at `rate` (in cache) and `cold` (from memory) in
  // the proportion `hot`; at `rate` alone where either is unknown.
  auto blend = [&](double work, double rate, double cold) {
    if (hot < 0 || cold <= 0)
      return work / rate;
    return work * (hot / rate + (1 - hot) / cold);
  };
  if (elements > 0 && elements < cal.serialKernelElements)
    if (auto it = cal.serialKernelBandwidth.find(opKindName(kind));
        it != cal.serialKernelBandwidth.end() && it->second > 0)
      return bytes / it->second;
  if (pricedByFlopRate(kind)) {
    bool isAttention = kind == OpKind::CausalAttention ||
                       kind == OpKind::CausalAttentionBackward;
    // The plan's own attention, timed as it is.
    if (isAttention && attention)
      if (auto it = cal.attentionByShape.find(
              {ClusterCalibration::matmulIndex(dtype),
               kind == OpKind::CausalAttentionBackward, *attention});
          it != cal.attentionByShape.end())
        return flops / it->second;
    // The plan's own GEMM, timed as it is (its rows aligned or not).
    if (gemm && !isAttention)
      if (auto it =
              cal.matmulShape.find({ClusterCalibration::matmulIndex(dtype),
                                    matmulKindIndex(kind), *gemm});
          it != cal.matmulShape.end()) {
        auto cold = cal.matmulShapeCold.find(it->first);
        return blend(flops, it->second,
                     cold == cal.matmulShapeCold.end() ? 0 : cold->second);
      }
    double rate =
        isAttention
            ? calibratedAttentionRate(cal, attentionWork,
                                      kind == OpKind::CausalAttentionBackward)
            : calibratedMatmulRate(cal, dtype, flops, kind);
    if (rate > 0 && misalignedRows && !isAttention)
      rate *=
          cal.matmulMisalignedFactor(ClusterCalibration::matmulIndex(dtype));
    if (rate > 0)
      return flops / rate;
  }
  // Memory-bound: the pooled table is from memory, the hot one in cache.
  auto streaming = [&](const std::string &name, double coldRate) {
    auto h = cal.kernelHotBandwidth.find(name);
    if (hot < 0 || h == cal.kernelHotBandwidth.end() || h->second <= 0)
      return bytes / coldRate;
    return blend(bytes, h->second, coldRate);
  };
  if (auto it = cal.kernelBandwidth.find(opKindName(kind));
      it != cal.kernelBandwidth.end() && it->second > 0)
    return streaming(it->first, it->second);
  if (auto it = cal.kernelBandwidth.find("default");
      it != cal.kernelBandwidth.end() && it->second > 0) {
    double peak = cluster.peakFlops(dtype) * cluster.computeEfficiency;
    return std::max(flops > 0 && peak > 0 ? flops / peak : 0.0,
                    streaming(it->first, it->second));
  }
  return computeTime(cluster, flops, bytes, dtype);
}

RankRates rankRates(const Cluster &cluster, int64_t worldSize) {
  double local = double(rankLayout(cluster, worldSize).ranksPerNode);
  RankRates rates;
  rates.pcie = cluster.host.pcieBandwidth;
  rates.nvme = cluster.host.nvmeBandwidth / local;
  rates.hostMemory = cluster.host.memoryBandwidth / local;
  return rates;
}

double transferTime(const RankRates &rates, Placement from, Placement to,
                    double bytes) {
  if (from == to || bytes <= 0)
    return 0;
  auto over = [&](double rate) { return rate > 0 ? bytes / rate : 0.0; };
  bool pcie = from == Placement::Device || to == Placement::Device;
  bool nvme = from == Placement::Nvme || to == Placement::Nvme;
  return (pcie ? over(rates.pcie) : 0) + (nvme ? over(rates.nvme) : 0);
}

//===----------------------------------------------------------------------===//
// Plan ops
//===----------------------------------------------------------------------===//

std::string_view opClassName(OpClass cls) {
  switch (cls) {
  case OpClass::Free:
    return "free";
  case OpClass::Compute:
    return "compute";
  case OpClass::Collective:
    return "collective";
  case OpClass::Offload:
    return "offload";
  case OpClass::Host:
    return "host";
  }
  return "?";
}

double modelFlops(
    const PlanOp &op,
    const std::function<const std::vector<int64_t> &(size_t)> &inputShape) {
  if (!op.recompute.empty())
    return 0;
  switch (op.kind) {
  case OpKind::Linear:
  case OpKind::LinearGradInput:
  case OpKind::LinearGradWeight:
    return double(op.flops);
  case OpKind::CausalAttention:
    return 3 * double(op.flops);
  case OpKind::MoeRouter: {
    // x [..., hidden], gate [experts, hidden].
    const std::vector<int64_t> &x = inputShape(0), &gate = inputShape(1);
    if (x.empty() || gate.size() != 2 || gate[1] <= 0)
      return 0;
    return 3 * double(moeRouterProductFlops(
                   shapeElements(x).value_or(0) / gate[1], gate[0], gate[1]));
  }
  case OpKind::MoeExperts: {
    // weights [..., top_k]: one routed row each; w1 [experts, I, hidden].
    const std::vector<int64_t> &weights = inputShape(1), &w1 = inputShape(3);
    if (w1.size() != 3)
      return 0;
    return 3 * double(moeExpertProductFlops(shapeElements(weights).value_or(0),
                                            w1[2], w1[1]));
  }
  default:
    return 0;
  }
}

CostModel::CostModel(const Plan &plan, const Cluster &cluster)
    : plan(plan), clusterRef(cluster),
      rankRatesPerRank(rankRates(cluster, plan.worldSize)),
      collectiveDTypes(plan) {
  for (const PlanTensor &t : plan.tensors)
    tensors[t.name] = &t;
  oneBitOptimizer = OptimizerConfig::oneBitType(planOptimizerType(plan));
  for (const PlanFlatGroup &g : plan.flatGroups) {
    groups[g.name] = &g;
    // Laid out as the runtime lays it out (PersistentState): over the
    // ranks its first parameter is sharded over.
    std::vector<int64_t> numels;
    const PlanTensor *first = nullptr;
    for (const std::string &name : g.params)
      if (const PlanTensor *p = plan.findTensor(name)) {
        numels.push_back(p->numel);
        first = first ? first : p;
      }
    if (first && numels.size() == g.params.size())
      flatLayouts.emplace(g.name,
                          FlatGroupLayout(numels, plan.shardRanks(*first)));
  }
  for (const PlanPhase &phase : plan.phases) {
    PhaseInfo &info = phases[&phase];
    for (const PlanValue &v : phase.values) {
      info.values[v.id] = &v;
      info.dtypes[v.id] = v.dtype;
    }
    std::unordered_map<int64_t, const PlanOp *> byIndex;
    for (const PlanOp &op : phase.ops) {
      byIndex[op.index] = &op;
      if (op.kind == OpKind::CopyStart) {
        const CopyAttrs &copy = op.attrsAs<CopyAttrs>();
        copiedTensors.insert(copy.sources.begin(), copy.sources.end());
        copiedTensors.insert(copy.destinations.begin(),
                             copy.destinations.end());
      }
      if (op.kind != OpKind::Wait)
        continue;
      double bytes = 0;
      for (int64_t id : op.outputs)
        if (auto v = info.values.find(id); v != info.values.end())
          bytes += double(v->second->bytes);
      for (int64_t dep : op.deps)
        if (auto d = byIndex.find(dep);
            d != byIndex.end() && isAsyncStart(d->second->kind))
          info.waitBytes[dep] += bytes;
    }
  }
  computeResidency();
}

void CostModel::computeResidency() {
  const ClusterCalibration &cal = clusterRef.calibration;
  // Measured on CPUs only (a GPU's L2 holds little of a step's operands).
  if (cal.cacheBytes <= 0 || cal.device != "cpu")
    return;
  // The node's ranks share its cache.
  const int64_t ranksPerNode =
      std::max<int64_t>(1, rankLayout(clusterRef, plan.worldSize).ranksPerNode);
  const double capacity = cal.cacheBytes / double(ranksPerNode);
  // The share of `bytes` touched `since` bytes ago still in cache: by the
  // calibrated curve where measured (each of its ranks had a share of the
  // cache; this plan's have theirs), else whether it fits.
  const double curveScale = double(ranksPerNode) / std::max(1.0, cal.ranks);
  const bool curve = cal.cacheReuseInCacheRate() > 0;
  // A collective's share where the calibration timed collectives from
  // memory too (CollectiveFit::coldBySize).
  const bool coldCollectives =
      std::any_of(std::begin(cal.collective), std::end(cal.collective),
                  [](const ClusterCalibration::CollectiveFit &f) {
                    return f.coldBySize.size() >= 2;
                  });
  auto cached = [&](double since) {
    double share = cal.cachedShare(since * curveScale);
    return share >= 0 ? share : since <= capacity ? 1.0 : 0.0;
  };
  // An LRU stack by bytes, approximated: a running count of the bytes the
  // ops touched, and the count at each piece of memory's last touch. A
  // value is in cache where what was touched since, and itself, fit (in
  // the share `cached` says of them). The
  // memory a value stands for: its arena offset (phases share the arena,
  // and a result written where another value just lived writes cached
  // lines), the tensor a `read` views (a weight), else the value itself.
  // Ops other than the model's touch their values too (a wait yields the
  // gathered parameters) and their tensors' bytes on this rank (the
  // optimizer streams every state it updates). The step repeats: the plan
  // is walked twice and the second walk's shares kept, so that a weight
  // the previous step left in cache is found there; a phase of R runs a
  // step runs twice there, its first run's share weighing 1 / R, the
  // second's (R - 1) / R (later runs find what the run before left).
  double touched = 0;
  std::unordered_map<std::string, double> lastTouch;
  for (int walk = 0; walk < 2; ++walk)
    for (size_t pi = 0; pi < plan.phases.size(); ++pi) {
      const PlanPhase &phase = plan.phases[pi];
      PhaseInfo &info = phases[&phase];
      const int64_t runs = std::max<int64_t>(1, phase.runsPerStep);
      std::unordered_map<int64_t, std::string> views;
      auto memoryOf = [&](int64_t id, const PlanValue &v) {
        if (v.offset >= 0)
          return "a" + std::to_string(v.offset);
        if (auto t = views.find(id); t != views.end())
          return t->second;
        return "p" + std::to_string(pi) + ":" + std::to_string(id);
      };
      for (int64_t run = 0; run < std::min<int64_t>(runs, 2); ++run)
        for (const PlanOp &op : phase.ops) {
          if (op.kind == OpKind::Read) {
            if (!op.outputs.empty() && !op.tensors.empty())
              views[op.outputs[0]] = "t" + op.tensors[0];
            continue;
          }
          // Model ops and, with a curve, accumulates (their value and
          // their target's part: the curve is that kernel's) keep their
          // share, from the second walk. An accumulate reads and writes
          // its target's part: it weighs twice in the share (not in the
          // bytes touched).
          const bool accumulate = op.kind == OpKind::Accumulate && curve;
          // A collective keeps the share of what it moves: its values and
          // the tensors it names.
          const bool collective = coldCollectives && !op.collective.empty();
          const bool keep =
              (isModelOp(op.kind) || accumulate || collective) && walk == 1;
          double hotBytes = 0, allBytes = 0, shareBytes = 0;
          std::vector<std::string> memories;
          // `bytes` of `memory` into the share, `weight` times.
          auto share = [&](const std::string &memory, double bytes,
                           double weight) {
            if (!keep)
              return;
            shareBytes += weight * bytes;
            if (auto t = lastTouch.find(memory); t != lastTouch.end())
              hotBytes += weight * bytes * cached(touched - t->second + bytes);
          };
          auto visit = [&](int64_t id) {
            auto v = info.values.find(id);
            if (v == info.values.end())
              return;
            const double bytes = double(v->second->bytes);
            memories.push_back(memoryOf(id, *v->second));
            allBytes += bytes;
            share(memories.back(), bytes, 1);
          };
          for (int64_t id : op.inputs)
            visit(id);
          for (int64_t id : op.outputs)
            visit(id);
          if (!isModelOp(op.kind))
            for (auto &[memory, bytes] : touchedTensors(info, op)) {
              allBytes += bytes;
              if (accumulate || collective)
                share(memory, bytes, accumulate ? 2 : 1);
              memories.push_back(std::move(memory));
            }
          if (keep && shareBytes > 0)
            info.hot[op.index] += hotBytes / shareBytes *
                                  (run == 0 ? 1.0 / double(runs)
                                            : double(runs - 1) / double(runs));
          touched += allBytes;
          for (const std::string &m : memories)
            lastTouch[m] = touched;
        }
    }
}

std::vector<std::pair<std::string, double>>
CostModel::touchedTensors(const PhaseInfo &info, const PlanOp &op) const {
  // Each tensor once: a stage-2 reduce-scatter names its flat gradient
  // buffer once per gradient it adds there. Of an accumulate's target only
  // its part: a stage-0/1 gradient's slice of the replicated flat buffer
  // (the whole buffer, counted per gradient, had evicted every activation
  // of a small model: bench/RESULTS.md, run 42). A slice is its own piece
  // of memory: a later use of the whole buffer does not refresh it, nor it
  // the whole.
  const auto *acc = std::get_if<AccumulateAttrs>(&op.attrs);
  double added = 0; // The elements an accumulate adds: its one input's.
  if (acc && !op.inputs.empty())
    if (auto v = info.values.find(op.inputs.front()); v != info.values.end())
      added =
          double(v->second->bytes) / double(bytesPerElement(v->second->dtype));
  std::vector<std::pair<std::string, double>> out;
  std::set<std::string> seen;
  for (const std::string &name : op.tensors) {
    if (!seen.insert(name).second)
      continue;
    const double whole = rankBytes(name);
    const double part = added * double(bytesPerElement(dtypeOf(name)));
    if (acc && name == acc->tensor && part > 0 && part < whole)
      out.emplace_back("t" + name + "@" + std::to_string(acc->offset), part);
    else
      out.emplace_back("t" + name, whole);
  }
  return out;
}

double CostModel::rankElements(const std::string &name) const {
  if (auto t = tensors.find(name); t != tensors.end())
    return double(t->second->localNumel);
  if (auto g = groups.find(name); g != groups.end())
    return double(g->second->partition);
  return 0;
}

const PlanTensor *CostModel::representative(const std::string &name) const {
  if (auto t = tensors.find(name); t != tensors.end())
    return t->second;
  if (auto g = groups.find(name);
      g != groups.end() && !g->second->params.empty())
    if (auto p = tensors.find(g->second->params.front()); p != tensors.end())
      return p->second;
  return nullptr;
}

DType CostModel::dtypeOf(const std::string &name) const {
  const PlanTensor *t = representative(name);
  return t ? t->dtype : plan.model.dtype;
}

Placement CostModel::placementOf(const std::string &name) const {
  const PlanTensor *t = representative(name);
  return t ? t->placement : Placement::Device;
}

double CostModel::stateTrafficTime(const std::string &name, double passes,
                                   OpKind kind) const {
  double bytes = rankBytes(name) * passes;
  Placement placement = kernelMemory(placementOf(name));
  if (placement == Placement::Device) {
    if (kind == OpKind::ClipGradNorm &&
        clusterRef.calibration.clipBandwidth > 0)
      return rankBytes(name) / clusterRef.calibration.clipBandwidth;
    return kernelTime(clusterRef, kind, 0, bytes, dtypeOf(name));
  }
  if (placement == Placement::Host)
    return rankRatesPerRank.hostMemory > 0 ? bytes / rankRatesPerRank.hostMemory
                                           : 0;
  return rankRatesPerRank.nvme > 0 ? bytes / rankRatesPerRank.nvme : 0;
}

DType CostModel::computeDType(const PhaseInfo &info, const PlanOp &op) const {
  for (const std::vector<int64_t> *ids : {&op.outputs, &op.inputs})
    for (int64_t id : *ids)
      if (auto t = info.dtypes.find(id);
          t != info.dtypes.end() && t->second != DType::I32)
        return t->second;
  return plan.model.dtype;
}

double CostModel::handoffTime(const PlanOp &op,
                              const std::optional<LinearGeometry> &gemm) const {
  const ClusterCalibration &cal = clusterRef.calibration;
  const double threads = cal.threadsPerRank;
  if (cal.device != "cpu" || threads < 2 || cal.handoffBandwidth <= 0 ||
      !pricedByFlopRate(op.kind))
    return 0;
  // Only work the kernels split runs on other threads: a GEMM as
  // gemmSlices cuts it (the product each kind runs, cpu/Linear.cpp), an
  // attention's (batch, head) items past the pool's threshold
  // (cpu/Parallel.h).
  bool split = false;
  if (op.kind == OpKind::CausalAttention ||
      op.kind == OpKind::CausalAttentionBackward) {
    split = double(op.flops) / 2 >= cal.serialKernelElements;
  } else if (gemm) {
    const LinearGeometry &g = *gemm;
    GemmSlices s = op.kind == OpKind::Linear ? gemmSlices(g.rows, g.out, g.in)
                   : op.kind == OpKind::LinearGradInput
                       ? gemmSlices(g.rows, g.in, g.out)
                       : gemmSlices(g.out, g.in, g.rows);
    split = s.count > 1;
  }
  if (!split)
    return 0;
  return double(op.bytes) * (threads - 1) / threads / cal.handoffBandwidth;
}

std::optional<LinearGeometry> CostModel::gemmOf(const PhaseInfo &info,
                                                const PlanOp &op) const {
  if (op.inputs.empty() || op.outputs.empty())
    return std::nullopt;
  auto x = info.values.find(op.inputs[0]);
  auto y = info.values.find(op.outputs[0]);
  if (x == info.values.end() || y == info.values.end())
    return std::nullopt;
  return linearGeometry(op.kind, x->second->shape, y->second->shape);
}

double CostModel::largestOperandElements(const PhaseInfo &info,
                                         const PlanOp &op) const {
  // The CPU kernels decide on their whole work (cpu/Parallel.h): a
  // cross-entropy's logits and a bias gradient's dy are inputs.
  double most = 0;
  for (const std::vector<int64_t> *ids : {&op.inputs, &op.outputs})
    for (int64_t id : *ids)
      if (auto v = info.values.find(id); v != info.values.end())
        most =
            std::max(most, double(shapeElements(v->second->shape).value_or(0)));
  return most;
}

std::optional<AttentionGeometry>
CostModel::attentionOf(const PhaseInfo &info, const PlanOp &op) const {
  const auto *attrs = std::get_if<AttentionAttrs>(&op.attrs);
  if (!attrs || op.inputs.empty())
    return std::nullopt;
  // q [batch, seq, heads x head_dim], the first operand of both kinds.
  auto q = info.values.find(op.inputs[0]);
  if (q == info.values.end())
    return std::nullopt;
  return attentionGeometry(q->second->shape, attrs->numHeads, attrs->numKvHeads,
                           attrs->window);
}

double CostModel::biasPassTime(const PhaseInfo &info, const PlanOp &op) const {
  if (op.kind != OpKind::Linear || op.inputs.size() < 3 || op.outputs.empty() ||
      clusterRef.calibration.device != "cpu")
    return 0;
  auto y = info.values.find(op.outputs[0]);
  if (y == info.values.end() || y->second->shape.empty())
    return 0;
  double elements = double(shapeElements(y->second->shape).value_or(0));
  // cpu/Linear.cpp: y's rows set to the bias (the row read once, y
  // written), which the GEMM then reads (beta = 1): a streaming pass like
  // add's (the parallel threshold on the same work), in cache as much as
  // the op's operands are.
  double bytes = (2 * elements + double(y->second->shape.back())) * 4;
  return kernelTime(clusterRef, OpKind::Add, 0, bytes, DType::F32, false,
                    elements, 0, nullptr, nullptr, info.hotShare(op.index));
}

bool CostModel::hasMisalignedRows(const PhaseInfo &info,
                                  const PlanOp &op) const {
  for (const std::vector<int64_t> *ids : {&op.inputs, &op.outputs})
    for (int64_t id : *ids) {
      auto v = info.values.find(id);
      auto t = info.dtypes.find(id);
      if (v != info.values.end() && t != info.dtypes.end() &&
          rowsMisaligned(v->second->shape, t->second))
        return true;
    }
  return false;
}

int64_t CostModel::flatShares(const PhaseInfo &info, const PlanOp &op,
                              std::vector<FlatShare> &shares) const {
  if (op.kind != OpKind::ReduceScatterStart)
    return 0;
  const ReduceScatterAttrs &rs = op.attrsAs<ReduceScatterAttrs>();
  int64_t elementBytes = 0;
  for (size_t i = 0; i < std::min(rs.targets.size(), op.inputs.size()); ++i) {
    const PlanTensor *t = plan.findTensor(rs.targets[i]);
    auto layout = t ? flatLayouts.find(t->of) : flatLayouts.end();
    auto v = info.values.find(op.inputs[i]);
    if (layout == flatLayouts.end() || v == info.values.end() ||
        i >= rs.offsets.size())
      continue;
    int64_t e = bytesPerElement(v->second->dtype);
    int64_t n = e > 0 ? v->second->bytes / e : 0;
    elementBytes = elementBytes ? elementBytes : e;
    shares.push_back({&layout->second, {rs.offsets[i], rs.offsets[i] + n}});
  }
  return elementBytes;
}

std::vector<ParamGradient> CostModel::paramGradients(const PhaseInfo &info,
                                                     const PlanOp &op) const {
  std::vector<ParamGradient> params;
  if (op.kind != OpKind::ReduceScatterStart)
    return params;
  const std::vector<std::string> &targets =
      op.attrsAs<ReduceScatterAttrs>().targets;
  int64_t n = plan.groupSize(op.group);
  for (size_t i = 0; i < std::min(targets.size(), op.inputs.size()); ++i) {
    const PlanTensor *t = plan.findTensor(targets[i]);
    if (!t || groups.count(t->of))
      continue;
    auto d = info.dtypes.find(op.inputs[i]);
    DType dtype = d != info.dtypes.end() ? d->second : t->dtype;
    params.push_back({ParamShardLayout{t->numel, n}, bytesPerElement(dtype)});
  }
  return params;
}

int64_t
CostModel::communicatorCalls(const PlanOp &op,
                             const std::vector<FlatUnit> &flat,
                             const ParamReduceScatterParts *packed) const {
  switch (op.kind) {
  case OpKind::AllGatherStart:
    return int64_t(op.inputs.size());
  case OpKind::ReduceScatterStart: {
    // A unit of flat-group inputs is one collective; the stage-3 gradients
    // packed together are one.
    int64_t calls = int64_t(op.inputs.size());
    if (packed && packed->packed())
      calls -= packed->packedCount - 1;
    for (const FlatUnit &u : flat)
      calls -= int64_t(u.inputs.size()) - 1;
    return calls;
  }
  case OpKind::AllReduceStart:
    return int64_t(op.attrsAs<TensorListAttrs>().tensors.size());
  case OpKind::AllGatherUpdatesStart: {
    // A flat group gathers in place; a replicated parameter whose states are
    // sharded through its padded copy; a sharded parameter is gathered when
    // used.
    int64_t calls = 0;
    for (const std::string &t : op.attrsAs<TargetListAttrs>().targets) {
      const PlanTensor *p = plan.findTensor(t);
      calls += groups.count(t) || (p && !p->sharded) ? 1 : 0;
    }
    return calls;
  }
  default:
    return 1;
  }
}

std::vector<double>
CostModel::collectiveParts(const PlanOp &op, double bytes, double elementBytes,
                           bool packedSmall,
                           const std::vector<FlatUnit> &flat) const {
  std::vector<double> parts;
  double sum = 0;
  if (!flat.empty()) {
    // A flat group's reduce-scatter: a collective per unit, over its range
    // of the group's buffer (the op names the group once per gradient).
    for (const FlatUnit &u : flat) {
      parts.push_back(double(u.range.size()) * elementBytes);
      sum += parts.back();
    }
  } else {
    // 1-bit Adam's compressed all-reduce moves none of its tensors' bytes.
    if (op.tensors.size() < 2 || op.kind == OpKind::AllGatherUpdatesStart ||
        (oneBitOptimizer && op.kind == OpKind::AllReduceStart))
      return {};
    double small = 0;
    for (const std::string &name : op.tensors) {
      auto it = tensors.find(name);
      if (it == tensors.end())
        return {};
      double b = double(it->second->numel) * elementBytes;
      sum += b;
      if (packedSmall && b <= double(kPackedGradientMaxBytes))
        small += b;
      else
        parts.push_back(b);
    }
    if (small > 0)
      parts.push_back(small);
  }
  // Only where the parts are what the op moves (not inputs outside a flat
  // group as well).
  if (parts.size() < 2 || std::fabs(sum - bytes) > 1e-6 * bytes)
    return {};
  return parts;
}

double CostModel::transfer(OpCost &cost, Placement from, Placement to,
                           double bytes, double nvmeBytes) const {
  if (from == to || bytes <= 0)
    return 0;
  if (nvmeBytes < 0)
    nvmeBytes = double(nvmeBlockBytes(int64_t(std::ceil(bytes))));
  Placement a = copyMemory(from), b = copyMemory(to);
  if (a != b) {
    OffloadTraffic &t = cost.traffic;
    t.toHost += a == Placement::Device ? bytes : 0;
    t.toDevice += b == Placement::Device ? bytes : 0;
    t.nvmeRead += a == Placement::Nvme ? nvmeBytes : 0;
    t.nvmeWrite += b == Placement::Nvme ? nvmeBytes : 0;
  }
  return transferTime(rankRatesPerRank, from, to, bytes);
}

double CostModel::inPlaceOverPcie(OpCost &cost, Placement placement,
                                  double bytes) const {
  if (copyMemory(placement) == copyMemory(Placement::Device) || bytes <= 0)
    return 0;
  cost.traffic.toDevice += bytes;
  cost.traffic.toHost += bytes;
  return transferTime(rankRatesPerRank, Placement::Device, placement, bytes);
}

double CostModel::offDeviceResultTime(OpCost &cost, const PlanOp &op,
                                      CollectiveKind kind, double elementBytes,
                                      int64_t n) const {
  double seconds = 0;
  std::vector<std::string> targets;
  if (op.kind == OpKind::ReduceScatterStart)
    targets = op.attrsAs<ReduceScatterAttrs>().targets;
  else if (op.kind == OpKind::AllGatherUpdatesStart)
    targets = op.attrsAs<TargetListAttrs>().targets;
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  std::map<Placement, int64_t> offDevice;
  for (const std::string &t : targets)
    if (Placement p = placementOf(t); p != Placement::Device)
      ++offDevice[p];
  for (const auto &[placement, count] : offDevice) {
    if (copyMemory(Placement::Device) == copyMemory(placement))
      continue; // CPU ranks: the epilogue adds into host memory where it is.
    double part = double(op.commElements) * elementBytes;
    if (kind == CollectiveKind::ReduceScatter)
      part /= double(std::max<int64_t>(1, n));
    part *= double(count) / double(targets.size());
    // A reduce-scatter's epilogue adds into the target in place
    // (runtime/exec/Collectives.cpp); all_gather_updates copies the
    // gathered tensor to it.
    seconds += kind == CollectiveKind::ReduceScatter
                   ? inPlaceOverPcie(cost, placement, part)
                   : transfer(cost, Placement::Device, placement, part);
  }
  return seconds;
}

OpCost CostModel::collectiveCost(const PhaseInfo &info, const PlanOp &op,
                                 bool contended) const {
  OpCost cost;
  cost.cls = OpClass::Collective;
  std::optional<CollectiveKind> kind = parseCollectiveKind(op.collective);
  if (!kind)
    return cost;
  DType dtype = collectiveDTypes.of(info.dtypes, op).value_or(plan.model.dtype);
  double elementBytes = double(bytesPerElement(dtype));
  double bytes = double(op.commElements) * elementBytes;
  // 1-bit Adam, 0/1 Adam and 1-bit LAMB (stage 0 only) replace the
  // gradient all-reduce by their compressed one once warmed up: one sign
  // bit per element through an all-to-all and an all-gather (Tang et al.
  // 2021, "1-bit Adam", Sec. 4; DeepSpeed's NcclBackend.compressed_allreduce),
  // which moves what a ring all-reduce of n/8 bytes moves; the per-chunk
  // scales are negligible. The first freeze_step steps cost Adam's.
  if (oneBitOptimizer && op.kind == OpKind::AllReduceStart)
    bytes = double(op.commElements) / 8.0;
  // An expert-parallel all-to-all takes as long as its busiest rank's
  // exchange under the plan's token distribution (the larger of what it
  // sends and receives).
  if (op.kind == OpKind::AllToAllStart)
    bytes = std::max(bytes, double(op.attrsAs<AllToAllAttrs>().bytes));
  // The ranks of the op's communicator group and where they sit
  // (predictStep refuses plans whose groups have no layout).
  int64_t n = plan.groupSize(op.group);
  RankLayout layout =
      groupLayout(clusterRef, plan.worldSize, plan.expertParallelSize, op.group)
          .value_or(rankLayout(clusterRef, n));
  if (n == 1 && (*kind == CollectiveKind::ReduceScatter ||
                 *kind == CollectiveKind::AllReduce)) {
    // One rank: no collective and no copy (runtime/exec/Collectives.cpp);
    // a reduce-scatter's epilogue adds each gradient into its partition or
    // shard, except into the replicated flat buffer it already is (stage 1).
    if (*kind == CollectiveKind::ReduceScatter) {
      double added = bytes;
      const ReduceScatterAttrs &rs = op.attrsAs<ReduceScatterAttrs>();
      for (size_t i = 0; i < std::min(rs.targets.size(), op.inputs.size());
           ++i) {
        const PlanTensor *t = plan.findTensor(rs.targets[i]);
        auto v = info.values.find(op.inputs[i]);
        if (t && !t->sharded && flatLayouts.count(t->of) &&
            v != info.values.end())
          added -= double(v->second->bytes);
      }
      cost.seconds = kernelTime(clusterRef, OpKind::Accumulate, 0,
                                3 * std::max(0.0, added), dtype);
    }
    cost.seconds += offDeviceResultTime(cost, op, *kind, elementBytes, n);
    return cost;
  }
  const ClusterCalibration::CollectiveFit &fit =
      clusterRef.calibration.collective[size_t(*kind)];
  const ClusterCalibration::CollectiveFit &busy =
      clusterRef.calibration.contended[size_t(*kind)];
  const bool measured = fit.busBandwidth > 0 && n > 1 && layout.nodes == 1;
  // Measured on this node: nccl-tests' busbw convention; by the measured
  // sizes where the file has them (at the calibration's ranks, placed in
  // bus bytes), else the fixed time and bandwidth fitted. Beside compute
  // on a CPU rank's cores: as measured so, where it is slower. Compute
  // beside a collective cannot speed it up; a contended fit that came out
  // faster measured other processes' load.
  const double calibrated = clusterRef.calibration.ranks;
  const double busPerByte =
      calibrated >= 2
          ? commElementsPerRank(*kind, 1.0, int64_t(std::llround(calibrated)))
          : 0.0;
  // From memory in the share of its bytes the cache no longer holds
  // (computeResidency), where the calibration timed that too.
  const double hot = info.hotShare(op.index);
  auto measuredTime = [&](double b) {
    double bus = b * commElementsPerRank(*kind, 1.0, n);
    double t = fit.seconds(bus, busPerByte, hot);
    if (contended && busy.busBandwidth > 0)
      t = std::max(t, busy.seconds(bus, busPerByte));
    return t;
  };
  const bool bySize = measured && fit.readsSizes(busPerByte);
  if (measured) {
    cost.seconds = measuredTime(bytes);
  } else
    cost.seconds = collectiveTime(clusterRef, *kind, bytes, layout).seconds;
  const double whole = cost.seconds; // The op as one collective.
  // zerorun starts one communicator collective per tensor the op moves
  // (runtime/exec/Collectives.cpp): each pays the fixed time, the bytes are
  // shared. A bucket of 21 gradients of tiny Llama at 2 ranks on the
  // development VM: 21 MPI reduce-scatters took 200 us where one of the
  // same 500 KB took 100 (bench/RESULTS.md, run 22). Several stage-3
  // gradients are packed into one (Workspace.h): one collective, and the
  // pack reads each gradient and writes the ranks' blocks.
  std::optional<ParamReduceScatterParts> packed;
  if (std::vector<ParamGradient> params = paramGradients(info, op);
      !params.empty()) {
    WorkspaceLayout ws;
    packed = reduceScatterParamParts(ws, params);
    if (packed->packed()) {
      double read = 0;
      for (size_t i = 0; i < params.size(); ++i)
        if (packed->slots[i] >= 0)
          read += double(params[i].layout.numel * params[i].elementBytes);
      double written = double(packed->blockElements * n) *
                       double(params.front().elementBytes);
      cost.seconds += computeTime(clusterRef, 0, read + written, dtype) +
                      double(packed->packedCount - 1) *
                          clusterRef.calibration.packedGradient;
    }
  }
  // Runs of small flat-group gradients go out as one collective each, out
  // of a staging copy (Workspace.h).
  std::vector<FlatUnit> flat;
  std::vector<FlatShare> shares;
  int64_t flatElementBytes = flatShares(info, op, shares);
  if (!shares.empty()) {
    WorkspaceLayout ws;
    flat = reduceScatterFlatParts(ws, shares, flatElementBytes, 0);
    for (const FlatUnit &u : flat)
      if (u.send >= 0)
        cost.seconds +=
            computeTime(clusterRef, 0,
                        2.0 * double(u.range.size() * flatElementBytes),
                        dtype) +
            double(u.inputs.size() - 1) * clusterRef.calibration.packedGradient;
  }
  // By measured sizes, each collective of the op (one per tensor it names,
  // stage 3's small gradients packed into one; a flat group's
  // reduce-scatter one per unit: a gradient, or a staged run of small ones,
  // over its range of the group's buffer) is read at its own size: the time
  // rises faster than the bytes once a collective's buffers leave the
  // cache. Small Llama's stage-3 bucket of 39 gradients (20 MB, the largest
  // 4 MB) ran 12 ms a micro-step at two ranks where one collective of 20 MB
  // is priced 22 (bench/RESULTS.md, run 45); its stage-2 bucket, read
  // whole, 18-22 ms where it ran 10 (run 47). Each part's time holds its
  // fixed time: no per-tensor time on top.
  bool perPart = false;
  if (bySize) {
    std::vector<double> parts = collectiveParts(
        op, bytes, elementBytes, packed && packed->packed(), flat);
    if (!parts.empty()) {
      double sum = 0;
      for (double b : parts)
        sum += measuredTime(b);
      cost.seconds += sum - whole;
      perPart = true;
    }
  }
  if (int64_t calls = communicatorCalls(op, flat, packed ? &*packed : nullptr);
      calls > 1 && !perPart) {
    double fixed = measured
                       ? (fit.perTensor > 0 ? fit.perTensor : fit.latency)
                       : collectiveTime(clusterRef, *kind, 0, layout).latency;
    cost.seconds += double(calls - 1) * fixed;
  }
  // One rank launches no collective, but a gather or a reduce-scatter out
  // of place still copies its buffer (the communicator's local copy). The
  // updates' gather of flat groups is in place (each rank sends its
  // partition of the group's own buffer): nothing to copy (small Llama,
  // stage 2 at one rank: 9 us a step measured, 1.3 ms priced as a copy).
  bool inPlace = false;
  if (op.kind == OpKind::AllGatherUpdatesStart) {
    const auto &targets = op.attrsAs<TargetListAttrs>().targets;
    inPlace = !targets.empty() && std::all_of(targets.begin(), targets.end(),
                                              [&](const std::string &t) {
                                                return groups.count(t);
                                              });
  }
  if (plan.worldSize <= 1 && *kind != CollectiveKind::AllReduce && !inPlace)
    cost.seconds += computeTime(clusterRef, 0, 2 * bytes, dtype);
  // A reduce-scatter's epilogue adds the rank's part of the result into its
  // gradient shard or partition: the part read, the target read and
  // written, an accumulate kernel's work.
  if (*kind == CollectiveKind::ReduceScatter) {
    double part = double(op.commElements) / double(std::max<int64_t>(1, n)) *
                  elementBytes;
    cost.seconds +=
        kernelTime(clusterRef, OpKind::Accumulate, 0, 3 * part, dtype);
  }

  cost.seconds += offDeviceResultTime(cost, op, *kind, elementBytes, n);
  return cost;
}

OpCost CostModel::fetchCost(const PhaseInfo &info, const PlanOp &op) const {
  OpCost cost;
  cost.cls = OpClass::Offload;
  double bytes = 0;
  if (auto w = info.waitBytes.find(op.index); w != info.waitBytes.end())
    bytes = w->second;
  if (bytes <= 0)
    for (const std::string &name : op.tensors)
      bytes += rankBytes(name);
  Placement from =
      op.tensors.empty() ? Placement::Host : placementOf(op.tensors[0]);
  // Each file is read whole.
  double nvmeBytes = 0;
  for (const std::string &name : op.tensors)
    nvmeBytes += double(nvmeBlockBytes(int64_t(rankBytes(name))));
  cost.seconds = transfer(cost, from, Placement::Device, bytes, nvmeBytes);
  return cost;
}

OpCost CostModel::copyCost(const PlanOp &op) const {
  OpCost cost;
  cost.cls = OpClass::Offload;
  const std::vector<std::string> &sources = op.attrsAs<CopyAttrs>().sources;
  const std::vector<std::string> &destinations =
      op.attrsAs<CopyAttrs>().destinations;
  for (size_t i = 0; i < std::min(sources.size(), destinations.size()); ++i) {
    // Converted by the device's kernel (castTensor): what crosses is the
    // device's side's dtype read from or written to the other placement.
    Placement from = placementOf(sources[i]), to = placementOf(destinations[i]);
    const std::string &crossing =
        from == Placement::Device ? destinations[i] : sources[i];
    double bytes =
        rankElements(sources[i]) * double(bytesPerElement(dtypeOf(crossing)));
    cost.seconds += transfer(cost, from, to, bytes);
  }
  return cost;
}

OpCost CostModel::adamCost(const PlanOp &op) const {
  const AdamAttrs &adam = op.attrsAs<AdamAttrs>();
  const std::string &grad = adam.grad;
  const std::string &param = adam.param;
  std::vector<std::string> states = {adam.expAvg, adam.expAvgSq};
  if (adam.master)
    states.insert(states.begin(), *adam.master);
  bool hasMaster = adam.master.has_value();

  // Adam reads the gradient, reads and writes each state (the f32 master and
  // both moments) and writes the parameter (reads it too when it is its own
  // master).
  double bytes = 0;
  if (!grad.empty())
    bytes += rankBytes(grad);
  for (const std::string &s : states)
    bytes += 2 * rankBytes(s);
  if (!param.empty())
    bytes += (hasMaster ? 1 : 2) * rankBytes(param);

  OpCost cost;
  if (adam.on != Placement::Host) {
    cost.cls = OpClass::Compute;
    double measured = clusterRef.calibration.adamBandwidth;
    cost.seconds = measured > 0 ? bytes / measured
                                : computeTime(clusterRef, 0, bytes, DType::F32);
    cost.seconds += clusterRef.calibration.adamCall;
    cost.host = clusterRef.calibration.adamCall;
    return cost;
  }
  // CPU Adam, memory-bound on the host, then the transfers around it, one
  // after the other: the reduced gradient to the host, the states from and
  // back to NVMe, the updated parameter to where it lives.
  cost.cls = OpClass::Host;
  const RankRates &rates = rankRatesPerRank;
  cost.seconds = rates.hostMemory > 0 ? bytes / rates.hostMemory : 0;
  // A CPU calibration timed the host's own Adam call.
  if (clusterRef.calibration.device == "cpu")
    cost.seconds += clusterRef.calibration.adamCall;
  auto copied = [&](const std::string &name) {
    return copiedTensors.count(name) != 0;
  };
  // (On CPU ranks the device's memory is the host's: the CPU Adam reads a
  // gradient and writes a parameter "on the device" where they are.)
  // (The gradient: stage 1's replicated flat buffer is read in this rank's
  // partition only, as many elements as the states.)
  if (!grad.empty() && !copied(grad))
    cost.seconds +=
        transfer(cost, copyMemory(placementOf(grad)), Placement::Host,
                 std::min(rankElements(grad), rankElements(adam.expAvg)) *
                     double(bytesPerElement(dtypeOf(grad))));
  for (const std::string &s : states) {
    Placement at = copyMemory(placementOf(s));
    cost.seconds += transfer(cost, at, Placement::Host, rankBytes(s));
    cost.seconds += transfer(cost, Placement::Host, at, rankBytes(s));
  }
  if (!param.empty() && !copied(param)) {
    // A parameter that is its own master is read first.
    Placement at = copyMemory(placementOf(param));
    if (!hasMaster)
      cost.seconds += transfer(cost, at, Placement::Host, rankBytes(param));
    cost.seconds += transfer(cost, Placement::Host, at, rankBytes(param));
  }
  return cost;
}

OpCost CostModel::gradientPassCost(const PlanOp &op, double passes) const {
  OpCost cost;
  cost.cls = OpClass::Compute;
  for (const std::string &name : op.tensors) {
    cost.seconds += stateTrafficTime(name, passes, op.kind);
    if (placementOf(name) != Placement::Device)
      cost.cls = OpClass::Host;
  }
  return cost;
}

OpCost CostModel::cost(const PlanPhase &phase, const PlanOp &op,
                       bool contended) const {
  OpCost cost = workCost(phase, op, contended);
  // The host's share of running any op (calibrated; 0 otherwise): the
  // executor schedules and dispatches reads, waits and releases too.
  cost.seconds += clusterRef.calibration.opOverhead;
  cost.host += clusterRef.calibration.opOverhead;
  return cost;
}

double CostModel::collectiveBytes(const PlanPhase &phase,
                                  const PlanOp &op) const {
  if (op.collective.empty())
    return 0;
  auto found = phases.find(&phase);
  static const PhaseInfo empty;
  const PhaseInfo &info = found == phases.end() ? empty : found->second;
  DType dtype = collectiveDTypes.of(info.dtypes, op).value_or(plan.model.dtype);
  return double(op.commElements) * double(bytesPerElement(dtype));
}

OpCost CostModel::workCost(const PlanPhase &phase, const PlanOp &op,
                           bool contended) const {
  auto found = phases.find(&phase);
  static const PhaseInfo empty;
  const PhaseInfo &info = found == phases.end() ? empty : found->second;

  // Optimizer-phase ops carry no FLOPs or bytes in the plan: each streams
  // over the gradients it names. Clipping and unscaling also agree on a
  // scalar across ranks (the global norm, the overflow flag).
  auto scalarAllReduce = [&] {
    return collectiveTime(clusterRef, CollectiveKind::AllReduce, 4.0,
                          plan.worldSize)
        .seconds;
  };
  // Every kind is decided here: a new one is a compile error (-Wswitch).
  switch (op.kind) {
#define ZEROC_COST_MODEL_OP(e, name, attrs) case OpKind::e:
    ZEROC_PLAN_MODEL_OPS(ZEROC_COST_MODEL_OP)
#undef ZEROC_COST_MODEL_OP
    {
      // A kernel: the roofline of its FLOPs and device-memory bytes.
      OpCost cost;
      cost.cls = OpClass::Compute;
      cost.flops = double(op.flops);
      static const std::vector<int64_t> unknown;
      cost.modelFlops = modelFlops(
          op, [&](size_t i) -> const auto & {
            if (i >= op.inputs.size())
              return unknown;
            auto v = info.values.find(op.inputs[i]);
            return v == info.values.end() ? unknown : v->second->shape;
          });
      std::optional<LinearGeometry> gemm = gemmOf(info, op);
      bool misaligned = hasMisalignedRows(info, op);
      DType dtype = computeDType(info, op);
      double elements = largestOperandElements(info, op);
      std::optional<AttentionGeometry> attention = attentionOf(info, op);
      double itemWork = attention ? attention->itemWork() : 0;
      // Only the flash kernels were timed by shape.
      const auto *attrs = std::get_if<AttentionAttrs>(&op.attrs);
      bool flash = attrs && attrs->kernel == AttentionKernel::Flash;
      cost.seconds = kernelTime(
          clusterRef, op.kind, double(op.flops), double(op.bytes), dtype,
          misaligned, elements, itemWork, gemm ? &*gemm : nullptr,
          attention && flash ? &*attention : nullptr, info.hotShare(op.index));
      // What the misaligned rows cost: the price at the aligned classes
      // (GEMMs only: no misaligned factor applies to attention, whose f32
      // log-sum-exp rows may be any length).
      // (A shaped GEMM's from-memory share is residency, not
      // misalignment: the difference is taken at its in-cache rate.)
      if (misaligned && pricedByFlopRate(op.kind) && !attention)
        cost.misaligned = std::max(
            0.0,
            kernelTime(clusterRef, op.kind, double(op.flops), double(op.bytes),
                       dtype, misaligned, elements, itemWork,
                       gemm ? &*gemm : nullptr) -
                kernelTime(clusterRef, op.kind, double(op.flops),
                           double(op.bytes), dtype, false, elements, itemWork));
      cost.seconds += biasPassTime(info, op) + handoffTime(op, gemm);
      return cost;
    }
  case OpKind::AllGatherStart:
  case OpKind::ReduceScatterStart:
  case OpKind::AllReduceStart:
  case OpKind::AllGatherUpdatesStart:
  case OpKind::AllToAllStart:
    return collectiveCost(info, op, contended);
  case OpKind::FetchStart:
    return fetchCost(info, op);
  case OpKind::CopyStart:
    return copyCost(op);
  case OpKind::AdamUpdate:
    return adamCost(op);
  case OpKind::ClipGradNorm: {
    OpCost cost = gradientPassCost(op, 1);
    cost.seconds += scalarAllReduce();
    if (!op.tensors.empty())
      cost.seconds +=
          double(op.tensors.size() - 1) * clusterRef.calibration.clipPerTensor;
    return cost;
  }
  case OpKind::UnscaleGrads: {
    OpCost cost = gradientPassCost(op, 2);
    cost.seconds += scalarAllReduce();
    return cost;
  }
  case OpKind::ZeroGrads:
    return gradientPassCost(op, 1);
  case OpKind::Accumulate:
    return accumulateCost(info, op);
  case OpKind::Read:
  case OpKind::Release:
  case OpKind::Wait:
  case OpKind::Return:
    return {}; // Views, bookkeeping and the waits of timed collectives.
  }
  return {};
}

OpCost CostModel::accumulateCost(const PhaseInfo &info,
                                 const PlanOp &op) const {
  // target += value: read the value, read and write the target's part.
  const std::string &target = op.attrsAs<AccumulateAttrs>().tensor;
  double inBytes = 0, elements = 0;
  for (int64_t id : op.inputs)
    if (auto v = info.values.find(id); v != info.values.end()) {
      inBytes += double(v->second->bytes);
      elements +=
          double(v->second->bytes) / double(bytesPerElement(v->second->dtype));
    }
  double targetBytes = 2 * elements * double(bytesPerElement(dtypeOf(target)));
  OpCost cost;
  Placement placement =
      target.empty() ? Placement::Device : kernelMemory(placementOf(target));
  if (placement == Placement::Device) {
    cost.cls = OpClass::Compute;
    cost.seconds = kernelTime(clusterRef, OpKind::Accumulate, 0,
                              inBytes + targetBytes, computeDType(info, op));
    // In cache by its operands' share (residency keeps one for an
    // accumulate only where the cache curve, this kernel's own, falls).
    if (const double hot = info.hotShare(op.index); hot >= 0)
      cost.seconds = hot * (inBytes + targetBytes) /
                         clusterRef.calibration.cacheReuseInCacheRate() +
                     (1 - hot) * cost.seconds;
  } else {
    // The device's kernel adds into host memory in place
    // (runtime/exec/ComputeOps.cpp): the target's part crosses PCIe both
    // ways.
    cost.cls = OpClass::Host;
    cost.seconds = inPlaceOverPcie(cost, placement, targetBytes / 2);
  }
  return cost;
}

OffloadTraffic offloadTrafficPerStep(const Plan &plan, bool gpuRanks) {
  // The bytes do not depend on the rates: any cluster with a node of the
  // plan's ranks, its calibration naming the kind of rank.
  Cluster cluster;
  cluster.gpusPerNode = std::max<int64_t>(1, plan.worldSize);
  cluster.calibration.device = gpuRanks ? "cuda" : "cpu";
  CostModel model(plan, cluster);
  OffloadTraffic step;
  for (const PlanPhase &phase : plan.phases) {
    OffloadTraffic run;
    for (const PlanOp &op : phase.ops)
      run += model.workCost(phase, op).traffic;
    // The batch (runtime/exec/Executor.cpp, runPhase).
    if (gpuRanks && phase.args.size() >= 2)
      for (size_t i = 0; i < 2; ++i)
        for (const PlanValue &v : phase.values)
          if (v.id == phase.args[i])
            run.toDevice += double(v.bytes);
    step += run.scaled(double(phase.runsPerStep));
  }
  return step;
}

} // namespace zeroc
