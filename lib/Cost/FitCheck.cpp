//===- FitCheck.cpp - Does a plan fit every memory of a cluster -----------===//

#include "zeroc/Cost/FitCheck.h"

#include "zeroc/Plan/PlanMemory.h"
#include "zeroc/Support/Format.h"

#include <algorithm>

namespace zeroc {

namespace {

NodeMemory nodeMemoryOf(const MemorySummary &m, const Plan &plan,
                        const Cluster &cluster) {
  NodeMemory node;
  node.ranksPerNode = std::max<int64_t>(
      1, std::min<int64_t>(cluster.gpusPerNode, plan.worldSize));
  node.hostBytes = double(m.hostPinnedBytes + m.hostPageableBytes) *
                   double(node.ranksPerNode);
  node.nvmeBytes = double(m.nvmeBytes) * double(node.ranksPerNode);
  return node;
}

} // namespace

NodeMemory nodeMemory(const Plan &plan, const Cluster &cluster) {
  return nodeMemoryOf(summarizeMemory(plan), plan, cluster);
}

std::optional<std::string> checkNodeFit(const Plan &plan,
                                        const Cluster &cluster) {
  MemorySummary m = summarizeMemory(plan);
  NodeMemory node = nodeMemoryOf(m, plan, cluster);
  const ClusterHost &host = cluster.host;
  double hostNeed = node.hostBytes + host.reserveBytes;
  if (hostNeed > host.memoryBytes) {
    std::string msg = "host memory: the plan needs " + humanBytes(hostNeed) +
                      " per node, but " + cluster.name + "'s nodes have " +
                      humanBytes(host.memoryBytes) + " (" +
                      humanBytes(hostNeed - host.memoryBytes) + " over)\n";
    msg += "  " + std::to_string(node.ranksPerNode) + " ranks x (" +
           humanBytes(double(m.hostPinnedBytes)) + " pinned + " +
           humanBytes(double(m.hostPageableBytes)) +
           " pageable) = " + humanBytes(node.hostBytes) +
           ", plus the node's reserve of " + humanBytes(host.reserveBytes) +
           " (host.reserve_gib)\n";
    msg += "ways out:\n";
    msg += "  - offload to NVMe (offload_optimizer / offload_param "
           "{\"device\": \"nvme\"}): the states move to the drives, only "
           "swap buffers stay in host memory\n";
    msg += "  - more nodes (--nodes, or a larger world size) spread the same "
           "model state over more ranks\n";
    msg += "  - offload less: keep the parameters (offload_param) or the "
           "optimizer states on the GPUs if they fit there\n";
    msg += "(zeroc --allow-oom writes the plan anyway)";
    return msg;
  }
  if (host.nvmeCapacityBytes > 0 && node.nvmeBytes > host.nvmeCapacityBytes)
    return "NVMe: the plan keeps " + humanBytes(node.nvmeBytes) +
           " per node in NVMe files (" + std::to_string(node.ranksPerNode) +
           " ranks x " + humanBytes(double(m.nvmeBytes)) + "), but " +
           cluster.name + "'s nodes have " +
           humanBytes(host.nvmeCapacityBytes) +
           " of NVMe (host.nvme_capacity_gib)\nways out:\n  - more nodes "
           "(--nodes) spread the state over more drives\n  - offload only "
           "the optimizer states to NVMe, the parameters to host memory\n"
           "(zeroc --allow-oom writes the plan anyway)";
  return std::nullopt;
}

std::optional<std::string> checkClusterFit(const Plan &plan,
                                           const Cluster &cluster) {
  const ClusterGpu &gpu = cluster.gpu;
  double usable = gpu.usableBytes();
  if (auto gpuRefusal = checkFit(
          plan, int64_t(gpu.planBudgetBytes()),
          cluster.name + "'s " + gpu.model + " (" + humanBytes(usable) +
              " usable less a runtime reserve "
              "of " +
              humanBytes(gpu.runtimeReserveBytes) +
              " for the CUDA context, NCCL and cuBLAS buffers and "
              "allocator slack)"))
    return gpuRefusal;

  return checkNodeFit(plan, cluster);
}

} // namespace zeroc
