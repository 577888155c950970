//===- Steadiness.h - How steady a machine's speed was ----------*- C++ -*-===//
//
// A calibration times a fixed probe again and again while it measures
// (calibration.steadiness): how often, and by how much, the machine ran
// slower than its usual speed meanwhile. The calibration warns with it and
// `zeroc inspect` reports it beside the predicted step. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_STEADINESS_H
#define ZEROC_SUPPORT_STEADINESS_H

#include "zeroc/Support/Median.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace zeroc {

struct Steadiness {
  /// A probe this many times its usual (median) time or more ran in a
  /// spell.
  static constexpr double kSpellFactor = 1.15;
  int samples = 0;
  /// The probes that ran in a spell.
  int slow = 0;
  /// The median over the probes: the usual time (seconds).
  double usual = 0;
  /// The median over the slow probes of their time over the usual (0
  /// without any), and the slowest probe's.
  double slowFactor = 0;
  double worst = 0;

  /// A tenth of the probes or more (and at least two) in spells: the
  /// calibration's figures are the usual speed's, and steps will often not
  /// run at it.
  bool unsteady() const { return slow >= 2 && slow * 10 >= samples; }

  /// What zerorun --calibrate says on stderr when unsteady(); empty
  /// otherwise.
  std::string warning() const {
    if (!unsteady())
      return {};
    char text[640];
    std::snprintf(
        text, sizeof text,
        "zerorun --calibrate: warning: the machine's speed moved while it "
        "measured: %d of %d probes ran %.2fx their usual time (median; "
        "worst %.2fx), from something this calibration does not see "
        "(another VM on the host, a throttled CPU): its figures are the "
        "usual speed's (each the median of its repeats), and steps that "
        "run in such a spell will take longer than zeroc inspect "
        "predicts (calibrate again when the machine is steady)",
        slow, samples, slowFactor, worst);
    return text;
  }

  /// The summary of `probes`, (seconds since the calibration started, the
  /// probe's seconds) pairs.
  static Steadiness of(const std::vector<std::pair<double, double>> &probes) {
    Steadiness out;
    out.samples = int(probes.size());
    std::vector<double> times;
    for (const auto &[at, t] : probes)
      times.push_back(t);
    out.usual = median(times);
    if (!(out.usual > 0))
      return out;
    std::vector<double> slow;
    for (double t : times) {
      const double factor = t / out.usual;
      out.worst = std::max(out.worst, factor);
      if (factor >= kSpellFactor)
        slow.push_back(factor);
    }
    out.slow = int(slow.size());
    out.slowFactor = median(slow);
    return out;
  }
};

} // namespace zeroc

#endif // ZEROC_SUPPORT_STEADINESS_H
