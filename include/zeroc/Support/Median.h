//===- Median.h - Medians; figures timed in passes --------------*- C++ -*-===//
//
// Items timed in passes, each pass in the same order: a slow spell no
// longer than a pass reaches one of an item's timings, and its median over
// three or more passes sets the spell aside. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_MEDIAN_H
#define ZEROC_SUPPORT_MEDIAN_H

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

namespace zeroc {

/// The median of `v` (the mean of the middle two of an even count); 0 when
/// `v` is empty.
inline double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Times `count` items in `passes` passes over them, each in index order
/// (reversed every other pass, the items at the turn would be timed twice
/// in a row). A calibration times many items whose figures are compared:
/// timed once each, one after another, a spell of slow seconds on a shared
/// machine slows a run of neighbours (bench/RESULTS.md, run 46).
/// `timeOne(i, pass)` times item i once and returns
/// its figures (the same number every pass), or std::nullopt where it cannot
/// be timed: it is not timed again. The result holds, per item, each
/// figure's median over its passes; empty for an item not timed.
template <typename TimeOne>
std::vector<std::vector<double>> medianOverPasses(size_t count, int passes,
                                                  TimeOne &&timeOne) {
  std::vector<std::vector<std::vector<double>>> samples(count);
  std::vector<char> skipped(count, 0);
  for (int pass = 0; pass < passes; ++pass)
    for (size_t i = 0; i < count; ++i) {
      if (skipped[i])
        continue;
      std::optional<std::vector<double>> figures = timeOne(i, pass);
      if (!figures) {
        skipped[i] = 1;
        samples[i].clear();
        continue;
      }
      samples[i].resize(std::max(samples[i].size(), figures->size()));
      for (size_t f = 0; f < figures->size(); ++f)
        samples[i][f].push_back((*figures)[f]);
    }
  std::vector<std::vector<double>> out(count);
  for (size_t i = 0; i < count; ++i)
    for (const std::vector<double> &figure : samples[i])
      out[i].push_back(median(figure));
  return out;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_MEDIAN_H
