//===- ShardLayout.h - Which elements of a tensor each rank holds -*- C++
//-*-===//
//
// The one place that computes ZeRO shard layouts, DeepSpeed-compatible, for
// the partitioning pass, the plan file, the inspector and the runtime alike.
// MLIR-free.
//
//  * Stage 3 partitions each parameter on its own: padded to a multiple of
//    the world size, rank r owns elements [r*s, (r+1)*s) of the padded
//    tensor, s = ceil(numel / world_size) (DeepSpeed's partition_parameters).
//  * Stages 1 and 2 concatenate a group's parameters, in order, into one flat
//    buffer padded to a multiple of 2 * world_size (DeepSpeed's NCCL start
//    alignment); rank r owns [r*P, (r+1)*P), P = padded / world_size, and a
//    parameter may straddle ranks (stage_1_and_2's flat partitions).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_SHARDLAYOUT_H
#define ZEROC_SUPPORT_SHARDLAYOUT_H

#include <algorithm>
#include <cstdint>
#include <vector>

namespace zeroc {

/// A half-open range of element indices, [begin, end).
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return size() == 0; }
  ElementRange intersect(const ElementRange &other) const {
    return {std::max(begin, other.begin), std::min(end, other.end)};
  }
  bool operator==(const ElementRange &o) const {
    return begin == o.begin && end == o.end;
  }
};

/// Stage 3: one parameter split evenly across ranks, padded at the end.
struct ParamShardLayout {
  int64_t numel = 0;
  int64_t worldSize = 1;

  /// Elements each rank stores, padding included: ceil(numel / world_size).
  int64_t shardSize() const { return (numel + worldSize - 1) / worldSize; }
  /// The padded tensor all-gathered for compute.
  int64_t paddedNumel() const { return shardSize() * worldSize; }
  /// Elements of the real (unpadded) tensor that rank `rank` owns.
  ElementRange ownedBy(int64_t rank) const {
    return ElementRange{rank * shardSize(), (rank + 1) * shardSize()}.intersect(
        {0, numel});
  }
};

/// Stages 1 and 2: a group of parameters flattened into one buffer.
class FlatGroupLayout {
public:
  /// `numels` in group order; the buffer is padded to a multiple of
  /// `alignmentFactor * world_size` elements.
  FlatGroupLayout(const std::vector<int64_t> &numels, int64_t worldSize,
                  int64_t alignmentFactor = 2)
      : worldSize(worldSize) {
    offsets.reserve(numels.size());
    for (int64_t n : numels) {
      offsets.push_back(numel);
      sizes.push_back(n);
      numel += n;
    }
    int64_t alignment = alignmentFactor * worldSize;
    padded = (numel + alignment - 1) / alignment * alignment;
    if (padded == 0)
      padded = alignment;
  }

  int64_t worldSize = 1;
  int64_t numel = 0;  ///< Sum of the parameters' elements.
  int64_t padded = 0; ///< Flat buffer size.
  std::vector<int64_t> offsets, sizes;

  /// Elements of the flat buffer each rank owns.
  int64_t partitionSize() const { return padded / worldSize; }
  ElementRange partition(int64_t rank) const {
    return {rank * partitionSize(), (rank + 1) * partitionSize()};
  }
  /// Where parameter `index` lies in the flat buffer.
  ElementRange param(size_t index) const {
    return {offsets[index], offsets[index] + sizes[index]};
  }
  /// The part of parameter `index` that rank `rank` owns, in flat indices.
  ElementRange ownedBy(size_t index, int64_t rank) const {
    return param(index).intersect(partition(rank));
  }
  /// Elements rank `rank` receives of a reduce-scatter over `bucket`, a
  /// range of the buffer: the part of it the rank owns.
  int64_t receiveCount(ElementRange bucket, int64_t rank) const {
    return bucket.intersect(partition(rank)).size();
  }
  /// receiveCount for every rank: a reduce-scatter's receive counts.
  std::vector<int64_t> receiveCounts(ElementRange bucket) const {
    std::vector<int64_t> counts;
    counts.reserve(size_t(worldSize));
    for (int64_t r = 0; r < worldSize; ++r)
      counts.push_back(receiveCount(bucket, r));
    return counts;
  }
};

} // namespace zeroc

#endif // ZEROC_SUPPORT_SHARDLAYOUT_H
