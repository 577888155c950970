//===- Random.h - Counter-based random numbers, parameter init --*- C++ -*-===//
//
// Deterministic initialization that does not depend on how a tensor is
// split: element i of a parameter is a pure function of (seed, the
// parameter's name, i), computed with Philox4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11) keyed by the seed, with the
// counter (i / 2, FNV-1a-64 of the name). So a stage-3 shard, a stage-1/2
// flat partition and the whole tensor on one rank hold the same values
// element for element, at any world size, and a run is reproducible from
// its seed alone. The synthetic data stream uses the same generator.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_INIT_RANDOM_H
#define ZEROC_RUNTIME_INIT_RANDOM_H

#include "zeroc/Plan/Plan.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/ShardLayout.h"

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace zeroc::runtime {

/// Philox4x32 with 10 rounds: 128 random bits per (counter, key), and the
/// same bits on every platform (Random123's known-answer tests hold).
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter,
                                   std::array<uint32_t, 2> key);

/// FNV-1a, 64 bits: a name's stream id, stable across platforms and builds
/// (std::hash is neither).
uint64_t fnv1a64(std::string_view text);

/// The random numbers of one stream (a parameter, the synthetic data) under
/// one seed, addressed by index: no state, so any range can be computed on
/// its own.
class CounterRng {
public:
  CounterRng(uint64_t seed, uint64_t stream) : seed(seed), stream(stream) {}
  CounterRng(uint64_t seed, std::string_view name)
      : CounterRng(seed, fnv1a64(name)) {}

  /// The 128 bits of block `block`.
  std::array<uint32_t, 4> block(uint64_t block) const;
  /// 32 random bits for index i (word i % 4 of block i / 4).
  uint32_t bits(uint64_t i) const;
  /// A uniform integer in [0, n), n < 2^32 (Lemire's multiply-shift).
  uint32_t below(uint64_t i, uint32_t n) const;
  /// Standard normal for index i: Box-Muller on block i / 2, whose 128 bits
  /// make two 53-bit uniforms; even i takes the cosine, odd i the sine.
  double normal(uint64_t i) const;
  /// out[k] = float(scale * normal(begin + k)) for k < count, on the
  /// runtime's threads (OpenMP): the same bits for any thread count.
  void normals(uint64_t begin, int64_t count, double scale, float *out) const;

private:
  uint64_t seed;
  uint64_t stream;
};

/// A parameter's init spec: "zeros", "ones" or "normal(STD)" (mean 0).
struct InitSpec {
  enum Kind { Zeros, Ones, Normal } kind = Zeros;
  double std = 0.0;
};

/// Parses a plan tensor's `init`. An empty string is "zeros".
Expected<InitSpec> parseInit(std::string_view init);

/// Elements [globalBegin, globalBegin + count) of the unpadded parameter
/// `name`, as f32 (round to 16 bits afterwards for a 16-bit parameter).
void initParameter(std::string_view name, const InitSpec &init, uint64_t seed,
                   int64_t globalBegin, int64_t count, float *out);

/// The same for a plan tensor and an init string (the parameter's own, or
/// the parameter's for its master copy: pass the parameter's tensor so the
/// master holds the same values). Throws std::invalid_argument for a bad
/// init string or a range outside the tensor. `base`: where the tensor's
/// element 0 lies in the whole parameter, for an expert tensor that holds
/// one expert-parallel rank's experts (ExpertParallel.h); so each expert
/// holds the values it has without expert parallelism. A padded table's
/// padding rows (PlanTensor::validRows) are zero.
void initParameter(const PlanTensor &param, std::string_view init,
                   uint64_t seed, int64_t globalBegin, int64_t count,
                   float *out, int64_t base = 0);

/// Stage 3: rank `rank`'s shard of `param` (layout.shardSize() elements):
/// the elements it owns, then zeros for the padding.
void initShard(const PlanTensor &param, std::string_view init, uint64_t seed,
               const ParamShardLayout &layout, int64_t rank, float *out,
               int64_t base = 0);

/// Stages 1 and 2: rank `rank`'s partition of a flat group
/// (layout.partitionSize() elements): the pieces of each parameter that fall
/// in it, each from its own parameter's stream, and zeros for the padding.
/// `params` are the group's parameters in group order, with their inits.
void initShard(const std::vector<const PlanTensor *> &params,
               const FlatGroupLayout &layout, uint64_t seed, int64_t rank,
               float *out, int64_t base = 0);

/// The same for a plan's flat group of world rank `rank`: its layout over
/// the plan's world, or for a group of expert tensors over the
/// expert-data-parallel group (holding `rank`'s experts). Throws
/// std::invalid_argument if a parameter is missing from the plan.
void initShard(const Plan &plan, const PlanFlatGroup &group, uint64_t seed,
               int64_t rank, float *out);

/// Where the tensors of world rank `rank` that hold experts start in their
/// whole parameters: its expert-parallel index x the local elements (0 for
/// any other tensor or without expert parallelism).
int64_t expertBase(const Plan &plan, const PlanTensor &t, int64_t rank);

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_INIT_RANDOM_H
