//===- MedianTest.cpp - Medians, figures timed in passes, steadiness ------===//

#include "zeroc/Support/Median.h"
#include "zeroc/Support/Steadiness.h"

#include <gtest/gtest.h>

#include <string>

using namespace zeroc;

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3.0}), 3.0);
  EXPECT_EQ(median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median({4.0, 1.0, 2.0, 8.0}), 3.0);
}

// A machine that runs at half speed for a spell of consecutive timings, as
// the development VM did for seconds at a time (five neighbouring GEMM
// shapes of one calibration at 0.51-0.67 of the rest). Timed once each in
// order, the spell's items come out twice as slow; in three passes, a spell
// no longer than a pass leaves every median at the item's own time.
TEST(MedianOverPasses, ASpellOfSlowTimingsReachesOnePassOfAnItem) {
  const size_t count = 12;
  auto own = [](size_t i) { return 1.0 + 0.1 * double(i); };
  for (size_t spellStart : {0, 3, 7, 11, 14, 20, 30})
    for (size_t spellLength : {1, 4, 6, 12}) {
      std::string where = "spell of " + std::to_string(spellLength) +
                          " from timing " + std::to_string(spellStart);
      size_t timing = 0;
      std::vector<std::pair<size_t, int>> calls;
      auto timeOne = [&](size_t i, int pass) {
        calls.push_back({i, pass});
        const bool slow =
            timing >= spellStart && timing < spellStart + spellLength;
        ++timing;
        return std::optional<std::vector<double>>(
            {own(i) * (slow ? 2.0 : 1.0), 10 * own(i) * (slow ? 2.0 : 1.0)});
      };
      std::vector<std::vector<double>> got =
          medianOverPasses(count, 3, timeOne);
      ASSERT_EQ(got.size(), count) << where;
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(got[i].size(), 2u) << where;
        EXPECT_DOUBLE_EQ(got[i][0], own(i)) << where << ", item " << i;
        EXPECT_DOUBLE_EQ(got[i][1], 10 * own(i)) << where << ", item " << i;
      }
      // Three passes, each in order.
      ASSERT_EQ(calls.size(), 3 * count) << where;
      for (size_t n = 0; n < 3 * count; ++n)
        EXPECT_EQ(calls[n], (std::pair<size_t, int>{n % count, int(n / count)}))
            << where;
    }
  // Timed once each (one pass), the same spell is taken for slow items.
  size_t timing = 0;
  std::vector<std::vector<double>> once =
      medianOverPasses(count, 1, [&](size_t i, int) {
        const bool slow = timing >= 3 && timing < 8;
        ++timing;
        return std::optional<std::vector<double>>(
            std::vector<double>{own(i) * (slow ? 2 : 1)});
      });
  EXPECT_DOUBLE_EQ(once[4][0], 2 * own(4));
}

TEST(MedianOverPasses, AnItemThatCannotBeTimedIsNotTimedAgain) {
  std::vector<int> timings(4, 0);
  std::vector<std::vector<double>> got =
      medianOverPasses(4, 3, [&](size_t i, int pass) {
        ++timings[i];
        // Item 2 fails in its second pass: its first figure is dropped too.
        if (i == 1 || (i == 2 && pass == 1))
          return std::optional<std::vector<double>>();
        return std::optional<std::vector<double>>(
            std::vector<double>{double(i + pass)});
      });
  EXPECT_EQ(timings, (std::vector<int>{3, 1, 2, 3}));
  EXPECT_TRUE(got[1].empty());
  EXPECT_TRUE(got[2].empty());
  EXPECT_EQ(got[0], (std::vector<double>{1.0}));
  EXPECT_EQ(got[3], (std::vector<double>{4.0}));
  EXPECT_TRUE(medianOverPasses(0, 3, [](size_t, int) {
                return std::optional<std::vector<double>>();
              }).empty());
}

// A calibration's probes: the usual time their median, a probe at 1.15x
// or more in a spell, unsteady from a tenth of them (and two). Worked by
// hand.
TEST(Steadiness, SpellsAgainstTheUsualTime) {
  auto probes = [](std::vector<double> ms) {
    std::vector<std::pair<double, double>> out;
    for (size_t i = 0; i < ms.size(); ++i)
      out.emplace_back(double(i + 1), ms[i] * 1e-3);
    return out;
  };
  Steadiness none = Steadiness::of({});
  EXPECT_EQ(none.samples, 0);
  EXPECT_EQ(none.slow, 0);
  EXPECT_FALSE(none.unsteady());
  // 20 probes, 2 ms usual: three in spells at 1.2x, 1.5x and 2x; one at
  // 1.14x is not.
  std::vector<double> ms(20, 2.0);
  ms[3] = 2.4;
  ms[9] = 3.0;
  ms[15] = 4.0;
  ms[17] = 2.28;
  Steadiness s = Steadiness::of(probes(ms));
  EXPECT_EQ(s.samples, 20);
  EXPECT_DOUBLE_EQ(s.usual, 2e-3);
  EXPECT_EQ(s.slow, 3);
  EXPECT_DOUBLE_EQ(s.slowFactor, 1.5);
  EXPECT_DOUBLE_EQ(s.worst, 2.0);
  EXPECT_TRUE(s.unsteady()); // 3 of 20.
  // The calibration's warning says so, with the figures.
  EXPECT_EQ(s.warning().rfind("zerorun --calibrate: warning: the machine's "
                              "speed moved while it measured: 3 of 20 probes "
                              "ran 1.50x their usual time (median; worst "
                              "2.00x)",
                              0),
            0u);
  // Two of 21: under a tenth.
  ms[3] = 2.0;
  ms.push_back(2.0);
  s = Steadiness::of(probes(ms));
  EXPECT_EQ(s.slow, 2);
  EXPECT_FALSE(s.unsteady());
  EXPECT_EQ(s.warning(), ""); // Steady: nothing to say.
  // One of 5: a tenth, but one probe is no spell to warn of.
  s = Steadiness::of(probes({2, 2, 2, 2, 3}));
  EXPECT_EQ(s.slow, 1);
  EXPECT_FALSE(s.unsteady());
  // Mostly slow: the usual time is the slow one (the calibration's figures
  // are medians too), and the fast probes are no spell.
  s = Steadiness::of(probes({3, 3, 3, 2, 2}));
  EXPECT_DOUBLE_EQ(s.usual, 3e-3);
  EXPECT_EQ(s.slow, 0);
  EXPECT_DOUBLE_EQ(s.worst, 1.0);
}
