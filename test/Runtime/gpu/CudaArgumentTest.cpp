//===- CudaArgumentTest.cpp - CUDA kernels reject what the CPU rejects ----===//
//
// The CUDA kernels check their arguments with the CPU kernels' own checks,
// before any CUDA call: for bad arguments they return the CPU kernel's
// message word for word. The data pointers here are host memory that no
// kernel touches, so this runs without a GPU.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "cuda/CudaKernels.h"
#include "cuda/Gemm.h"

#include <gtest/gtest.h>

using namespace zeroc;
using runtime::Status;
using runtime::Tensor;

namespace {

/// A tensor view over a dummy buffer (never read: every call here fails its
/// checks first).
Tensor fake(std::vector<int64_t> shape, DType dtype = DType::F32) {
  static std::vector<uint32_t> buffer(1 << 16);
  return Tensor{buffer.data(), dtype, std::move(shape)};
}

void expectSameError(const Status &cuda, const Status &cpu) {
  EXPECT_FALSE(cpu.ok());
  EXPECT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.error, cpu.error);
}

class CudaArguments : public ::testing::Test {
protected:
  cuda::KernelContext ctx; // no GPU needed until a GEMM runs
  cudaStream_t stream = nullptr;
};

TEST_F(CudaArguments, Linear) {
  Tensor x = fake({2, 4}), w = fake({5, 3}), y = fake({2, 5}), b = fake({4});
  expectSameError(cuda::linearForward(x, w, nullptr, y, ctx, stream),
                  cpu::linearForward(x, w, nullptr, y));
  Tensor w2 = fake({5, 4});
  expectSameError(cuda::linearForward(x, w2, &b, y, ctx, stream),
                  cpu::linearForward(x, w2, &b, y));
  expectSameError(cuda::linearGradInput(y, w, x, ctx, stream),
                  cpu::linearGradInput(y, w, x));
  expectSameError(cuda::linearGradWeight(y, x, w, ctx, stream),
                  cpu::linearGradWeight(y, x, w));
  expectSameError(cuda::linearGradBias(y, b, stream),
                  cpu::linearGradBias(y, b));
}

TEST_F(CudaArguments, NormsAndElementwise) {
  Tensor x = fake({3, 8}), w = fake({7}), y = fake({3, 8});
  expectSameError(cuda::layerNormForward(x, w, w, 1e-5f, y, nullptr, stream),
                  cpu::layerNormForward(x, w, w, 1e-5f, y, nullptr));
  Tensor w8 = fake({8}), dx = fake({3, 9});
  expectSameError(
      cuda::layerNormBackward(x, w8, y, 1e-5f, nullptr, dx, w8, w8, stream),
      cpu::layerNormBackward(x, w8, y, 1e-5f, nullptr, dx, w8, w8));
  expectSameError(cuda::rmsNormForward(x, w, 1e-5f, y, nullptr, stream),
                  cpu::rmsNormForward(x, w, 1e-5f, y, nullptr));
  expectSameError(
      cuda::rmsNormBackward(x, w8, y, 1e-5f, nullptr, dx, w8, stream),
      cpu::rmsNormBackward(x, w8, y, 1e-5f, nullptr, dx, w8));
  expectSameError(cuda::geluForward(x, dx, stream), cpu::geluForward(x, dx));
  expectSameError(cuda::siluBackward(x, y, dx, stream),
                  cpu::siluBackward(x, y, dx));
  Tensor ints = fake({3, 8}, DType::I32);
  expectSameError(cuda::add(x, ints, y, stream), cpu::add(x, ints, y));
  expectSameError(cuda::mul(x, y, dx, stream), cpu::mul(x, y, dx));
  expectSameError(cuda::castTensor(x, dx, stream), cpu::castTensor(x, dx));
  expectSameError(cuda::accumulate(x, dx, stream), cpu::accumulate(x, dx));
  expectSameError(cuda::zeroTensor(ints, stream), cpu::zeroTensor(ints));
}

TEST_F(CudaArguments, RotaryAndAttention) {
  Tensor x = fake({1, 4, 12}), y = fake({1, 4, 12});
  expectSameError(cuda::rotaryForward(x, 5, 10000.0, y, stream),
                  cpu::rotaryForward(x, 5, 10000.0, y));
  expectSameError(cuda::rotaryBackward(x, 4, -1.0, y, stream),
                  cpu::rotaryBackward(x, 4, -1.0, y));
  Tensor q = fake({1, 4, 12}), k = fake({1, 4, 6}), out = fake({1, 4, 12});
  expectSameError(
      cuda::attentionForward(q, k, k, 4, 3, out, nullptr, ctx, stream),
      cpu::attentionForward(q, k, k, 4, 3, out, nullptr));
  Tensor probs = fake({1, 2, 4, 5});
  expectSameError(
      cuda::attentionForward(q, k, k, 2, 1, out, &probs, ctx, stream),
      cpu::attentionForward(q, k, k, 2, 1, out, &probs));
  Tensor badK = fake({1, 4, 7});
  expectSameError(cuda::attentionBackward(q, badK, badK, out, out, 2, 1,
                                          nullptr, q, badK, badK, ctx, stream),
                  cpu::attentionBackward(q, badK, badK, out, out, 2, 1, nullptr,
                                         q, badK, badK));
  Tensor lse = fake({1, 2, 5});
  expectSameError(
      cuda::flashAttentionForward(q, k, k, 2, 1, out, &lse, ctx, stream),
      cpu::flashAttentionForward(q, k, k, 2, 1, out, &lse));
  expectSameError(cuda::flashAttentionBackward(q, badK, badK, out, out, 2, 1,
                                               nullptr, q, badK, badK, ctx,
                                               stream),
                  cpu::flashAttentionBackward(q, badK, badK, out, out, 2, 1,
                                              nullptr, q, badK, badK));
}

// Which flash kernels run (a host decision, docs/gpu-kernels.md): for
// aligned 16-bit operands, head_dim % 8 == 0 and sm_80+, the register
// kernels up to head_dim 64 and the WMMA tensor-core kernels up to 128;
// the f32 tiled kernels otherwise up to head_dim 128; rows past that.
TEST(CudaFlashKernel, ChoosesTheFastestKernelThatApplies) {
  using cuda::FlashKernel;
  auto choose = [](std::string_view choice, int64_t headDim, bool sixteen,
                   int major, int64_t heads = 12) {
    FlashKernel kind = FlashKernel::Rows;
    Status s = cuda::chooseFlashKernel("causal_attention", choice, headDim,
                                       heads, heads, 8, sixteen, major, kind);
    EXPECT_TRUE(s.ok()) << s.error;
    return kind;
  };
  EXPECT_EQ(choose("", 64, true, 9), FlashKernel::Registers);
  EXPECT_EQ(choose("auto", 8, true, 8), FlashKernel::Registers);
  EXPECT_EQ(choose("registers", 64, true, 9), FlashKernel::Registers);
  EXPECT_EQ(choose("", 72, true, 9), FlashKernel::TensorCores);
  EXPECT_EQ(choose("auto", 128, true, 8), FlashKernel::TensorCores);
  // The WMMA kernels asked for where the register kernels would run.
  EXPECT_EQ(choose("wmma", 64, true, 9), FlashKernel::TensorCores);
  EXPECT_EQ(choose("wmma", 8, true, 8), FlashKernel::TensorCores);
  // f32 (or mixed, or unaligned) operands, head dims not a multiple of 8,
  // devices before sm_80, or the variable asking for it: the f32 tiles.
  EXPECT_EQ(choose("", 64, false, 9), FlashKernel::Tiled);
  EXPECT_EQ(choose("", 60, true, 9), FlashKernel::Tiled);
  EXPECT_EQ(choose("", 64, true, 7), FlashKernel::Tiled);
  EXPECT_EQ(choose("wmma", 64, false, 9), FlashKernel::Tiled);
  EXPECT_EQ(choose("tiled", 64, true, 9), FlashKernel::Tiled);
  // Past head_dim 128 or 65535 heads, or asked for: one warp a row.
  EXPECT_EQ(choose("", 136, true, 9), FlashKernel::Rows);
  EXPECT_EQ(choose("", 64, true, 9, 70000), FlashKernel::Rows);
  EXPECT_EQ(choose("rows", 64, true, 9), FlashKernel::Rows);

  FlashKernel kind;
  Status bad = cuda::chooseFlashKernel("causal_attention", "mma", 64, 12, 12, 8,
                                       true, 9, kind);
  EXPECT_EQ(bad.error, "causal_attention: ZEROC_CUDA_FLASH: expected auto, "
                       "registers, wmma, tiled or rows, found 'mma'");
}

// ZEROC_CUDA_GEMM_ROWS: direct (or unset) and staged; another value makes
// every product fail with the variable's name, before any CUDA call.
TEST_F(CudaArguments, GemmRowsChoice) {
  EXPECT_FALSE(cuda::gemmStagingFrom(nullptr).staged);
  EXPECT_FALSE(cuda::gemmStagingFrom("direct").staged);
  EXPECT_TRUE(cuda::gemmStagingFrom("staged").staged);
  EXPECT_TRUE(cuda::gemmStagingFrom("staged").error.empty());
  cuda::GemmStaging bad = cuda::gemmStagingFrom("padded");
  EXPECT_EQ(bad.error,
            "ZEROC_CUDA_GEMM_ROWS: expected direct or staged, found 'padded'");
  cuda::GemmStaging saved = cuda::gemmStaging();
  cuda::gemmStaging() = bad;
  Tensor x = fake({2, 4}), w = fake({5, 4}), y = fake({2, 5});
  Status s = cuda::linearForward(x, w, nullptr, y, ctx, stream);
  cuda::gemmStaging() = saved;
  EXPECT_EQ(s.error, "linear: ZEROC_CUDA_GEMM_ROWS: expected direct or "
                     "staged, found 'padded'");
}

TEST_F(CudaArguments, EmbeddingsAndLoss) {
  Tensor table = fake({10, 4}), ids = fake({2, 3}, DType::I32);
  Tensor out = fake({2, 3, 5});
  expectSameError(cuda::embeddingForward(table, ids, out, stream),
                  cpu::embeddingForward(table, ids, out));
  expectSameError(cuda::embeddingBackward(out, ids, table, stream),
                  cpu::embeddingBackward(out, ids, table));
  Tensor positions = fake({2, 4}), act = fake({2, 3, 4});
  expectSameError(cuda::positionEmbeddingForward(positions, act, stream),
                  cpu::positionEmbeddingForward(positions, act));
  expectSameError(cuda::positionEmbeddingBackward(act, positions, stream),
                  cpu::positionEmbeddingBackward(act, positions));

  Tensor logits = fake({2, 3, 10}), loss = fake({2});
  expectSameError(cuda::crossEntropyForward(logits, ids, loss, 0.0, 0, stream),
                  cpu::crossEntropyForward(logits, ids, loss));
  Tensor badTargets = fake({3, 2}, DType::I32), scalar = fake({});
  expectSameError(
      cuda::crossEntropyBackward(logits, badTargets, scalar, logits, 0.0, 0,
                                 stream),
      cpu::crossEntropyBackward(logits, badTargets, scalar, logits));
  expectSameError(cuda::backwardSeed(0, 1.0, scalar, stream),
                  cpu::backwardSeed(0, 1.0, scalar));
}

TEST_F(CudaArguments, MixtureOfExperts) {
  Tensor x = fake({4, 8}), gate = fake({3, 8}), logits = fake({4, 3}),
         weights = fake({4, 2}), indices = fake({4, 2}, DType::I32);
  expectSameError(
      cuda::moeRouterForward(x, gate, 4, true, logits, weights, indices, ctx,
                             stream),
      cpu::moeRouterForward(x, gate, 4, true, logits, weights, indices));
  Tensor logits44 = fake({4, 4});
  expectSameError(
      cuda::moeRouterBackward(weights, logits, indices, true, logits44, stream),
      cpu::moeRouterBackward(weights, logits, indices, true, logits44));
  Tensor offsets = fake({4}, DType::I32), rows = fake({8}, DType::I32);
  expectSameError(
      cuda::moeDispatchPlan(indices, 4, offsets, rows, rows, stream),
      cpu::moeDispatchPlan(indices, 4, offsets, rows, rows));
  Tensor w1 = fake({3, 5, 8}), badW2 = fake({3, 5, 8}), h1 = fake({8, 5}),
         ys = fake({8, 8});
  expectSameError(
      cuda::moeExpertsForward(x, w1, w1, badW2, offsets, rows, h1, h1, ys, ctx,
                              stream),
      cpu::moeExpertsForward(x, w1, w1, badW2, offsets, rows, h1, h1, ys));
  Tensor w2 = fake({3, 8, 5}), badDx = fake({4, 8}, DType::I32);
  expectSameError(cuda::moeExpertsBackward(ys, x, w1, w1, w2, offsets, rows, h1,
                                           h1, badDx, w1, w1, w2, ctx, stream),
                  cpu::moeExpertsBackward(ys, x, w1, w1, w2, offsets, rows, h1,
                                          h1, badDx, w1, w1, w2));
  Tensor y5 = fake({4, 5});
  expectSameError(cuda::moeCombineForward(ys, weights, rows, rows, y5, stream),
                  cpu::moeCombineForward(ys, weights, rows, rows, y5));
  Tensor dweights3 = fake({4, 3});
  expectSameError(
      cuda::moeCombineBackward(x, ys, weights, rows, rows, ys, dweights3,
                               stream),
      cpu::moeCombineBackward(x, ys, weights, rows, rows, ys, dweights3));
}

// Expert parallelism's row moves. The received plan's counts are host
// data: the GPU kernel checks them as the CPU kernel does, before any copy.
TEST_F(CudaArguments, RowMoves) {
  Tensor x = fake({3, 2}), tokens = fake({2}, DType::I32);
  Tensor rows16 = fake({2, 2}, DType::BF16), rows3 = fake({3, 2});
  expectSameError(cuda::moeGatherRows(x, tokens, rows16, stream),
                  cpu::moeGatherRows(x, tokens, rows16));
  expectSameError(cuda::moeGatherRows(x, tokens, rows3, stream),
                  cpu::moeGatherRows(x, tokens, rows3));
  expectSameError(
      cuda::moeGatherRows(x, fake({2, 1}, DType::I32), fake({2, 2}), stream),
      cpu::moeGatherRows(x, fake({2, 1}, DType::I32), fake({2, 2})));
  Tensor rows23 = fake({2, 3});
  expectSameError(cuda::moeScatterAddRows(rows23, tokens, x, stream),
                  cpu::moeScatterAddRows(rows23, tokens, x));
  expectSameError(cuda::moeScatterAddRows(fake({2, 2}), fake({2}), x, stream),
                  cpu::moeScatterAddRows(fake({2, 2}), fake({2}), x));
  Tensor offsets = fake({3}, DType::I32), rowToken = fake({3}, DType::I32);
  for (const std::vector<int64_t> &counts :
       {std::vector<int64_t>{1, 2, 0}, {1, -1}, {1, 1}})
    expectSameError(cuda::moeReceivedPlan(counts, 2, offsets, rowToken, stream),
                    cpu::moeReceivedPlan(counts, 2, offsets, rowToken));
  expectSameError(
      cuda::moeReceivedPlan({1, 2}, 2, fake({2}, DType::I32), rowToken, stream),
      cpu::moeReceivedPlan({1, 2}, 2, fake({2}, DType::I32), rowToken));
  expectSameError(cuda::moeReceivedPlan({1, 2}, 2, fake({3}), rowToken, stream),
                  cpu::moeReceivedPlan({1, 2}, 2, fake({3}), rowToken));
}

// The load-balancing loss: the shared checks give the CPU's message; the
// GPU kernels' own limits (f32 logits, at most kMaxLoadBalancingLayers
// routers, one kernel argument each) are errors before any launch.
TEST_F(CudaArguments, LoadBalancingLoss) {
  Tensor logits = fake({4, 3}), indices = fake({4, 2}, DType::I32),
         stats = fake({2, 3}), badStats = fake({2, 4}), loss = fake({}),
         result = fake({});
  expectSameError(cuda::moeRouterStats(logits, indices, badStats, stream),
                  cpu::moeRouterStats(logits, indices, badStats));
  expectSameError(
      cuda::moeRouterStatsBackward(badStats, logits, logits, stream),
      cpu::moeRouterStatsBackward(badStats, logits, logits));
  expectSameError(
      cuda::moeLoadBalancingLoss(loss, {stats, badStats}, 2, 0.02, result,
                                 stream),
      cpu::moeLoadBalancingLoss(loss, {stats, badStats}, 2, 0.02, result));
  expectSameError(
      cuda::moeLoadBalancingLossBackward(loss, {stats}, 2, 0.02, result,
                                         stream),
      cpu::moeLoadBalancingLossBackward(loss, {stats}, 2, 0.02, result));
  Tensor logits16 = fake({4, 3}, DType::BF16);
  EXPECT_EQ(cuda::moeRouterStats(logits16, indices, stats, stream).error,
            "moe_router_stats: the GPU kernel takes f32 logits, found [4, 3] "
            "bf16");
  EXPECT_EQ(
      cuda::moeRouterStatsBackward(stats, logits16, logits16, stream).error,
      "moe_router_stats_backward: the GPU kernel takes f32 logits, found "
      "[4, 3] bf16");
  std::vector<Tensor> many(size_t(cuda::kMaxLoadBalancingLayers + 1), stats);
  EXPECT_EQ(
      cuda::moeLoadBalancingLoss(loss, many, 2, 0.02, result, stream).error,
      "moe_load_balancing_loss: 257 routers, more than the GPU kernel's 256");
  EXPECT_EQ(
      cuda::moeLoadBalancingLossBackward(loss, many, 2, 0.02, stats, stream)
          .error,
      "moe_load_balancing_loss_backward: 257 routers, more than the GPU "
      "kernel's 256");
}

TEST_F(CudaArguments, Optimizer) {
  cpu::AdamSettings settings;
  Tensor grad = fake({8}), master = fake({8}),
         halfMaster = fake({8}, DType::BF16);
  Tensor m = fake({8}), v = fake({7}), param = fake({6}, DType::BF16);
  expectSameError(
      cuda::adamUpdate(settings, 1, grad, halfMaster, m, m, nullptr, stream),
      cpu::adamUpdate(settings, 1, grad, halfMaster, m, m, nullptr));
  expectSameError(
      cuda::adamUpdate(settings, 1, grad, master, m, v, nullptr, stream),
      cpu::adamUpdate(settings, 1, grad, master, m, v, nullptr));
  expectSameError(
      cuda::adamUpdate(settings, 1, grad, master, m, m, &param, stream),
      cpu::adamUpdate(settings, 1, grad, master, m, m, &param));
  expectSameError(
      cuda::adamUpdate(settings, 0, grad, master, m, m, nullptr, stream),
      cpu::adamUpdate(settings, 0, grad, master, m, m, nullptr));
  // The multi-tensor form names the entry.
  Status many = cuda::multiTensorAdamUpdate(
      settings, 1, {{grad, master, m, m}, {grad, master, m, v}}, stream);
  EXPECT_EQ(many.error,
            cpu::adamUpdate(settings, 1, grad, master, m, v, nullptr).error +
                " (tensor 1 of 2)");

  Tensor ints = fake({4}, DType::I32);
  expectSameError(cuda::scaleInPlace(ints, 2.0f, stream),
                  cpu::scaleInPlace(ints, 2.0f));
  // The one-pass clipping's lists (ZEROC_CUDA_CLIP=grid) name the entry,
  // before anything is launched.
  EXPECT_EQ(cuda::multiTensorScale({grad, ints}, 2.0f, stream).error,
            cpu::scaleInPlace(ints, 2.0f).error + " (tensor 1 of 2)");
  EXPECT_EQ(
      cuda::multiTensorSumOfSquares({grad, grad, ints}, nullptr, stream).error,
      "sum_of_squares: grad must be f32, bf16 or f16, found [4] i32 "
      "(tensor 2 of 3)");
  bool overflow = false;
  expectSameError(cuda::unscaleGrads(grad, -1.0, nullptr, stream),
                  cpu::unscaleGrads(grad, -1.0, overflow));
}

} // namespace
