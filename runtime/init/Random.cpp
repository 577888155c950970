//===- Random.cpp - Philox4x32-10 and parameter initialization ------------===//

#include "init/Random.h"
#include "kernels/cpu/OmpEdges.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

namespace zeroc::runtime {

//===----------------------------------------------------------------------===//
// Philox4x32-10
//===----------------------------------------------------------------------===//

// One round: two 32x32->64 multiplies whose halves are mixed with the other
// two words and the round key; the key is bumped by Weyl constants (the
// golden ratio and sqrt(3) - 1) between rounds.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c,
                                   std::array<uint32_t, 2> k) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    uint64_t p0 = kM0 * c[0], p1 = kM1 * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1),
         uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::array<uint32_t, 4> CounterRng::block(uint64_t b) const {
  return philox4x32({uint32_t(b), uint32_t(b >> 32), uint32_t(stream),
                     uint32_t(stream >> 32)},
                    {uint32_t(seed), uint32_t(seed >> 32)});
}

uint32_t CounterRng::bits(uint64_t i) const { return block(i / 4)[i % 4]; }

uint32_t CounterRng::below(uint64_t i, uint32_t n) const {
  return uint32_t((uint64_t(bits(i)) * n) >> 32);
}

namespace {

/// Box-Muller on the 128 bits of one block: both of its normals (the
/// cosine for the even index, the sine for the odd one).
std::pair<double, double> normalPair(const std::array<uint32_t, 4> &w) {
  constexpr double k2Pow53 = 1.0 / 9007199254740992.0;
  auto uniform = [&](uint32_t hi, uint32_t lo) {
    return double(((uint64_t(hi) << 32) | lo) >> 11) * k2Pow53; // [0, 1)
  };
  double u1 = 1.0 - uniform(w[0], w[1]); // (0, 1]: log is finite.
  double u2 = uniform(w[2], w[3]);
  double radius = std::sqrt(-2.0 * std::log(u1));
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  double angle = kTwoPi * u2;
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

} // namespace

double CounterRng::normal(uint64_t i) const {
  std::pair<double, double> p = normalPair(block(i / 2));
  return i % 2 == 0 ? p.first : p.second;
}

void CounterRng::normals(uint64_t begin, int64_t count, double scale,
                         float *out) const {
  if (count <= 0)
    return;
  int64_t at = 0;
  if (begin % 2 == 1) { // the first index is a block's sine
    out[at++] = float(scale * normalPair(block(begin / 2)).second);
  }
  // Whole blocks: each element is a function of its index alone, so the
  // split over threads does not change a bit.
  int64_t pairs = (count - at) / 2;
  uint64_t firstBlock = (begin + uint64_t(at)) / 2;
  float *pairOut = out + at;
  {
    cpu::OmpEdges edges;
#pragma omp parallel for schedule(static) if (pairs >= 8192)
    for (int64_t k = 0; k < pairs; ++k) {
      edges.enter();
      std::pair<double, double> p = normalPair(block(firstBlock + uint64_t(k)));
      pairOut[2 * k] = float(scale * p.first);
      pairOut[2 * k + 1] = float(scale * p.second);
      edges.leave();
    }
  }
  at += 2 * pairs;
  if (at < count) // the last index is a block's cosine
    out[at] = float(scale * normal(begin + uint64_t(at)));
}

Expected<InitSpec> parseInit(std::string_view init) {
  InitSpec spec;
  if (init.empty() || init == "zeros")
    return spec;
  if (init == "ones") {
    spec.kind = InitSpec::Ones;
    return spec;
  }
  constexpr std::string_view prefix = "normal(";
  if (init.size() > prefix.size() + 1 &&
      init.substr(0, prefix.size()) == prefix && init.back() == ')') {
    std::string number(
        init.substr(prefix.size(), init.size() - prefix.size() - 1));
    char *end = nullptr;
    errno = 0;
    double std = std::strtod(number.c_str(), &end);
    if (end == number.c_str() + number.size() && errno == 0 &&
        std::isfinite(std) && std > 0.0) {
      spec.kind = InitSpec::Normal;
      spec.std = std;
      return spec;
    }
  }
  return Diagnostic{"", 0, 0,
                    "unknown parameter init '" + std::string(init) +
                        "'; expected zeros, ones or normal(STD) with a "
                        "positive, finite STD"};
}

void initParameter(std::string_view name, const InitSpec &init, uint64_t seed,
                   int64_t globalBegin, int64_t count, float *out) {
  switch (init.kind) {
  case InitSpec::Zeros:
    std::fill(out, out + count, 0.0f);
    return;
  case InitSpec::Ones:
    std::fill(out, out + count, 1.0f);
    return;
  case InitSpec::Normal:
    CounterRng(seed, name).normals(uint64_t(globalBegin), count, init.std, out);
    return;
  }
}

static InitSpec parseOrThrow(const PlanTensor &param, std::string_view init) {
  Expected<InitSpec> spec = parseInit(init);
  if (!spec)
    throw std::invalid_argument("tensor '" + param.name +
                                "': " + spec.error().message);
  return *spec;
}

void initParameter(const PlanTensor &param, std::string_view init,
                   uint64_t seed, int64_t globalBegin, int64_t count,
                   float *out, int64_t base) {
  if (globalBegin < 0 || count < 0 || globalBegin + count > param.numel)
    throw std::invalid_argument("tensor '" + param.name + "': elements [" +
                                std::to_string(globalBegin) + ", " +
                                std::to_string(globalBegin + count) +
                                ") are outside its " +
                                std::to_string(param.numel) + " elements");
  initParameter(param.name, parseOrThrow(param, init), seed, base + globalBegin,
                count, out);
  // A padded table's padding rows are zero; the valid rows hold exactly the
  // unpadded table's values (element i is drawn by its index either way).
  int64_t from = std::max(param.validNumel(), globalBegin);
  if (from < globalBegin + count)
    std::fill(out + (from - globalBegin), out + count, 0.0f);
}

void initShard(const PlanTensor &param, std::string_view init, uint64_t seed,
               const ParamShardLayout &layout, int64_t rank, float *out,
               int64_t base) {
  if (layout.numel != param.numel)
    throw std::invalid_argument(
        "tensor '" + param.name + "' has " + std::to_string(param.numel) +
        " elements, its shard layout " + std::to_string(layout.numel));
  // A rank past the end holds only padding: its range is empty (and may
  // begin past numel).
  ElementRange owned = layout.ownedBy(rank);
  if (!owned.empty())
    initParameter(param, init, seed, owned.begin, owned.size(), out, base);
  else
    parseOrThrow(param, init);
  std::fill(out + owned.size(), out + layout.shardSize(), 0.0f);
}

void initShard(const std::vector<const PlanTensor *> &params,
               const FlatGroupLayout &layout, uint64_t seed, int64_t rank,
               float *out, int64_t base) {
  if (params.size() != layout.sizes.size())
    throw std::invalid_argument(
        "flat group init: " + std::to_string(params.size()) +
        " parameters for a layout of " + std::to_string(layout.sizes.size()));
  ElementRange partition = layout.partition(rank);
  std::fill(out, out + partition.size(), 0.0f);
  for (size_t k = 0; k < params.size(); ++k) {
    const PlanTensor &param = *params[k];
    if (param.numel != layout.sizes[k])
      throw std::invalid_argument(
          "tensor '" + param.name + "' has " + std::to_string(param.numel) +
          " elements, its flat-group slot " + std::to_string(layout.sizes[k]));
    ElementRange piece = layout.ownedBy(k, rank);
    if (piece.empty())
      continue;
    initParameter(param, param.init, seed, piece.begin - layout.offsets[k],
                  piece.size(), out + (piece.begin - partition.begin), base);
  }
}

void initShard(const Plan &plan, const PlanFlatGroup &group, uint64_t seed,
               int64_t rank, float *out) {
  std::vector<const PlanTensor *> params;
  std::vector<int64_t> numels;
  for (const std::string &name : group.params) {
    const PlanTensor *t = plan.findTensor(name);
    if (!t)
      throw std::invalid_argument("flat group '" + group.name +
                                  "' names parameter '" + name +
                                  "', which the plan does not declare");
    params.push_back(t);
    numels.push_back(t->numel);
  }
  // An expert group's members are alike (the plan reader holds them so).
  const PlanTensor &first = *params.at(0);
  CommGroupShape shards = commGroupShape(
      first.expert ? CommGroupKind::ExpertDataParallel : CommGroupKind::World,
      plan.worldSize, plan.expertParallelSize);
  if (!first.expert) {
    initShard(params, FlatGroupLayout(numels, shards.size), seed,
              shards.indexOf(rank), out);
    return;
  }
  // Each member starts at its own expert base (its local elements times the
  // expert-parallel index): one group, pieces initialized one by one.
  FlatGroupLayout layout(numels, shards.size);
  int64_t r = shards.indexOf(rank);
  ElementRange partition = layout.partition(r);
  std::fill(out, out + partition.size(), 0.0f);
  for (size_t k = 0; k < params.size(); ++k) {
    ElementRange piece = layout.ownedBy(k, r);
    if (piece.empty())
      continue;
    initParameter(*params[k], params[k]->init, seed,
                  piece.begin - layout.offsets[k], piece.size(),
                  out + (piece.begin - partition.begin),
                  expertBase(plan, *params[k], rank));
  }
}

int64_t expertBase(const Plan &plan, const PlanTensor &t, int64_t rank) {
  if (!t.expert)
    return 0;
  return commGroupShape(CommGroupKind::ExpertParallel, plan.worldSize,
                        plan.expertParallelSize)
             .indexOf(rank) *
         t.numel;
}

} // namespace zeroc::runtime
