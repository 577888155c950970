//===- ShardLayoutTest.cpp - DeepSpeed-compatible shard layouts -----------===//

#include "zeroc/Support/ShardLayout.h"
#include "zeroc/Support/Memory.h"
#include "zeroc/Support/Workspace.h"

#include <gtest/gtest.h>

using namespace zeroc;

TEST(ParamShardLayout, PadsToAMultipleOfTheWorldSize) {
  ParamShardLayout layout{10, 4};
  EXPECT_EQ(layout.shardSize(), 3);
  EXPECT_EQ(layout.paddedNumel(), 12);
  EXPECT_EQ(layout.ownedBy(0), (ElementRange{0, 3}));
  EXPECT_EQ(layout.ownedBy(3), (ElementRange{9, 10}));
  // More ranks than elements: the tail ranks hold only padding.
  ParamShardLayout tiny{3, 8};
  EXPECT_EQ(tiny.shardSize(), 1);
  EXPECT_EQ(tiny.paddedNumel(), 8);
  EXPECT_TRUE(tiny.ownedBy(5).empty());
}

TEST(ParamShardLayout, RanksCoverEveryElementOnce) {
  for (int64_t ws : {1, 2, 3, 7, 8, 1024})
    for (int64_t numel : {1, 5, 768, 589824, 50257 * 768}) {
      ParamShardLayout layout{numel, ws};
      int64_t covered = 0;
      for (int64_t r = 0; r < ws; ++r) {
        ElementRange owned = layout.ownedBy(r);
        if (!owned.empty()) {
          EXPECT_EQ(owned.begin, covered);
        }
        covered += owned.size();
      }
      EXPECT_EQ(covered, numel);
    }
}

TEST(FlatGroupLayout, AlignsToTwiceTheWorldSize) {
  FlatGroupLayout layout({5, 7, 3}, 4);
  EXPECT_EQ(layout.numel, 15);
  EXPECT_EQ(layout.padded, 16);
  EXPECT_EQ(layout.partitionSize(), 4);
  EXPECT_EQ(layout.param(1), (ElementRange{5, 12}));
  // Parameter 1 straddles ranks 1 and 2.
  EXPECT_EQ(layout.ownedBy(1, 1), (ElementRange{5, 8}));
  EXPECT_EQ(layout.ownedBy(1, 2), (ElementRange{8, 12}));
  EXPECT_TRUE(layout.ownedBy(2, 0).empty());
  FlatGroupLayout wide({17}, 3);
  EXPECT_EQ(wide.padded, 18);
  EXPECT_EQ(wide.partitionSize(), 6);
}

TEST(FlatGroupLayout, ReceiveCountsAreTheOwnedPartsOfABucket) {
  FlatGroupLayout layout({5, 7, 3}, 4);
  // Parameter 1, elements [5, 12), lands on ranks 1 and 2.
  EXPECT_EQ(layout.receiveCounts(layout.param(1)),
            (std::vector<int64_t>{0, 3, 4, 0}));
  EXPECT_EQ(layout.receiveCount(layout.param(1), 2), 4);
  // The whole buffer: every rank its partition.
  EXPECT_EQ(layout.receiveCounts({0, layout.padded}),
            (std::vector<int64_t>(4, layout.partitionSize())));
}

TEST(Memory, ArenaBuffersAndWorkspacePartsShareTheAlignment) {
  EXPECT_EQ(arenaAligned(0), 0);
  EXPECT_EQ(arenaAligned(1), kArenaAlignment);
  EXPECT_EQ(arenaAligned(kArenaAlignment), kArenaAlignment);
  EXPECT_EQ(arenaAligned(kArenaAlignment + 1), 2 * kArenaAlignment);
  WorkspaceLayout ws;
  EXPECT_EQ(ws.take(10), 0);
  EXPECT_EQ(ws.take(10), arenaAligned(10));
  EXPECT_EQ(localBytes(6, DType::BF16), 12);
  EXPECT_EQ(phaseTransientBytes(512, 300), 512);
  EXPECT_EQ(predictedPeakBytes(1000, 512), 1512);
}

TEST(Workspace, SmallStageThreeGradientsArePackedWhereThereAreSeveral) {
  // 9 and 4 f32 over 2 ranks: shards of 5 and 2, each in a 64-byte slot
  // (16 f32) of each rank's block; 20,000 f32 (80 KB, over
  // kPackedGradientMaxBytes) go alone after the packed blocks.
  std::vector<ParamGradient> three = {
      {{9, 2}, 4}, {{20000, 2}, 4}, {{4, 2}, 4}};
  WorkspaceLayout ws;
  ParamReduceScatterParts p = reduceScatterParamParts(ws, three);
  ASSERT_TRUE(p.packed());
  EXPECT_EQ(p.packedCount, 2);
  EXPECT_EQ(p.slots, (std::vector<int64_t>{0, -1, 16}));
  EXPECT_EQ(p.slotElements, (std::vector<int64_t>{16, 0, 16}));
  EXPECT_EQ(p.blockElements, 32);
  EXPECT_EQ(p.recv, 0);
  EXPECT_EQ(p.parts[0].recv, 0);
  EXPECT_EQ(p.parts[2].recv, 16 * 4);
  EXPECT_EQ(p.send, kArenaAlignment); // after the 128-byte receive block
  EXPECT_EQ(p.parts[0].send, -1);
  // The large one: its shard after the send blocks (256 bytes), divisible,
  // sent as it is.
  EXPECT_EQ(p.parts[1].recv, 2 * kArenaAlignment);
  EXPECT_EQ(p.parts[1].send, -1);
  EXPECT_EQ(ws.size(), 2 * kArenaAlignment + 10000 * 4);

  // bf16: 32 elements a slot; a shard of 40 takes two.
  std::vector<ParamGradient> bf16 = {{{80, 2}, 2}, {{3, 2}, 2}};
  WorkspaceLayout ws16;
  ParamReduceScatterParts q = reduceScatterParamParts(ws16, bf16);
  EXPECT_EQ(q.slots, (std::vector<int64_t>{0, 64}));
  EXPECT_EQ(q.blockElements, 96);
}

TEST(Workspace, StageThreeGradientsGoAloneWherePackingGainsNothing) {
  // One rank reduces nothing: the gradients themselves are the shards'
  // addends, no workspace.
  {
    std::vector<ParamGradient> one = {{{9, 1}, 4}, {{4, 1}, 4}};
    EXPECT_EQ(packedParamGradients(one), std::vector<bool>(2, false));
    WorkspaceLayout ws;
    ParamReduceScatterParts p = reduceScatterParamParts(ws, one);
    EXPECT_FALSE(p.packed());
    ASSERT_EQ(p.parts.size(), 2u);
    for (const ReduceScatterParts &part : p.parts) {
      EXPECT_EQ(part.recv, -1);
      EXPECT_EQ(part.send, -1);
    }
    EXPECT_EQ(ws.size(), 0);
  }
  // One small gradient, two dtypes, or one small gradient beside a large
  // one: one collective each, a padded send copy only where the parameter
  // does not divide.
  for (const std::vector<ParamGradient> &params :
       {std::vector<ParamGradient>{{{9, 2}, 4}},
        std::vector<ParamGradient>{{{9, 2}, 4}, {{4, 2}, 2}},
        std::vector<ParamGradient>{{{9, 2}, 4}, {{20000, 2}, 4}}}) {
    EXPECT_EQ(packedParamGradients(params),
              std::vector<bool>(params.size(), false));
    WorkspaceLayout ws;
    ParamReduceScatterParts p = reduceScatterParamParts(ws, params);
    EXPECT_FALSE(p.packed());
    ASSERT_EQ(p.parts.size(), params.size());
    EXPECT_EQ(p.parts[0].recv, 0);
    bool padded = params[0].layout.worldSize == 2;
    EXPECT_EQ(p.parts[0].send, padded ? kArenaAlignment : -1);
  }
}

TEST(Workspace, FlatGradientsTilingARangeGoOutAsOne) {
  // A group of 8 + 6 + 10 elements (24, partitions of 6 at world size 4),
  // its gradients in backward order: c [14, 24), b [8, 14), a [0, 8). They
  // tile [0, 24): one unit, its receive part the largest rank's 6 elements,
  // then the staging range of 24.
  FlatGroupLayout g({8, 6, 10}, 4);
  ASSERT_EQ(g.partitionSize(), 6);
  std::vector<FlatShare> backward = {
      {&g, {14, 24}}, {&g, {8, 14}}, {&g, {0, 8}}};
  WorkspaceLayout ws;
  std::vector<FlatUnit> units = reduceScatterFlatParts(ws, backward, 4, 1);
  ASSERT_EQ(units.size(), 1u);
  EXPECT_EQ(units[0].range.begin, 0);
  EXPECT_EQ(units[0].range.end, 24);
  EXPECT_EQ(units[0].inputs, (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(units[0].recv, 0);
  EXPECT_EQ(units[0].send, kArenaAlignment);
  EXPECT_EQ(ws.size(), kArenaAlignment + 24 * 4);

  // A gap ([0, 8) and [10, 14)), or a gradient over kPackedGradientMaxBytes
  // between them: each input its own unit, in input order, sent as it is;
  // rank 1's receive parts follow rank 1's shares in input order.
  FlatGroupLayout big({8, 20000, 10}, 2);
  for (const std::vector<FlatShare> &apart :
       {std::vector<FlatShare>{{&g, {0, 8}}, {&g, {10, 14}}},
        std::vector<FlatShare>{
            {&big, {0, 8}}, {&big, {8, 20008}}, {&big, {20008, 20018}}}}) {
    WorkspaceLayout w;
    std::vector<FlatUnit> u = reduceScatterFlatParts(w, apart, 4, 1);
    ASSERT_EQ(u.size(), apart.size());
    int64_t at = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      EXPECT_EQ(u[i].inputs, std::vector<size_t>{i});
      EXPECT_EQ(u[i].send, -1);
      EXPECT_EQ(u[i].recv, at);
      at += apart[i].layout->receiveCount(apart[i].range, 1) * 4;
    }
  }

  // A group of one rank: nothing to reduce, each unit the input itself.
  FlatGroupLayout solo({8, 6, 10}, 1);
  WorkspaceLayout w1;
  std::vector<FlatUnit> u1 = reduceScatterFlatParts(
      w1, {{&solo, {14, 24}}, {&solo, {8, 14}}, {&solo, {0, 8}}}, 4, 0);
  ASSERT_EQ(u1.size(), 3u);
  for (size_t i = 0; i < u1.size(); ++i) {
    EXPECT_EQ(u1[i].inputs, std::vector<size_t>{i});
    EXPECT_EQ(u1[i].recv, -1);
    EXPECT_EQ(u1[i].send, -1);
  }
  EXPECT_EQ(w1.size(), 0);

  // Two groups: runs never cross them.
  FlatGroupLayout h({8, 6, 10}, 4);
  std::vector<FlatShare> two = {{&g, {8, 14}}, {&h, {14, 24}}, {&g, {0, 8}}};
  WorkspaceLayout w2;
  std::vector<FlatUnit> u2 = reduceScatterFlatParts(w2, two, 4, 0);
  ASSERT_EQ(u2.size(), 2u);
  EXPECT_EQ(u2[0].inputs, (std::vector<size_t>{2, 0}));
  EXPECT_EQ(u2[1].inputs, std::vector<size_t>{1});
}
