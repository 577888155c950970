//===- MedianTest.cpp - Medians, and figures timed in passes --------------===//

#include "zeroc/Support/Median.h"

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
