//===- CudaKernelTest.cpp - The CUDA kernels against the CPU kernels ------===//
//
// Every CUDA kernel, forward and backward, against the CPU kernel of the
// same name on the same random inputs: the inputs are made on the host
// (rounded to their dtype), copied to the device, both kernels run, the
// results come back and are compared:
// - bit for bit where the GPU does the CPU's arithmetic in the CPU's order:
//   casts, copies, add, mul, accumulate, the embeddings (sums in position
//   order), scale, unscale, clipping, Adam and LAMB's elementwise halves
//   (no fused multiply-adds), expert parallelism's row moves;
// - f32 results elsewhere within `tol * max |cpu|`, tol 1e-5 (2e-6 for the
//   elementwise kernels, 5e-5 for the backwards of the norms and attention):
//   only summation orders and the last bits of expf / tanhf differ;
// - bf16 and f16 results within two units in the last place of the element
//   plus one of the tensor's largest magnitude, plus the f32 tolerance:
//   |gpu - cpu| <= u (2 |cpu| + max |cpu|) + tol max |cpu|, with u = 2^-8
//   (bf16) or 2^-11 (f16): each side rounds a slightly different f32 value
//   once, and in attention P is rounded before it is used.
// The attention backwards take max |cpu| over dq, dk and dv together: with
// a window of 1 each row's softmax is exactly 1, dq and dk are exact zeros
// on the CPU and a residue of cancelling terms of dv's size on the GPU
// (first run on an H100: 1e-7 against 0), which only the gradients' common
// scale bounds.
// Device outputs start as all-ones bytes (NaN in every float dtype), so an
// element a kernel fails to write shows. Each test skips, saying why, where
// no CUDA GPU is usable.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "cuda/CudaKernels.h"
#include "cuda/Gemm.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

using namespace zeroc;
using runtime::Status;
using runtime::Tensor;

namespace zeroc {
// Readable test parameters in test names and failures.
void PrintTo(DType t, std::ostream *os) { *os << dtypeName(t); }
} // namespace zeroc

namespace {

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    Status status_ = (expr);                                                   \
    ASSERT_TRUE(status_.ok()) << status_.error;                                \
  } while (0)

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    cudaError_t error_ = (expr);                                               \
    ASSERT_EQ(error_, cudaSuccess)                                             \
        << #expr << ": " << cudaGetErrorString(error_);                        \
  } while (0)

// The f32 tolerances, relative to max |cpu|. Both sides compute in f32
// (u = 2^-24; cuBLAS with CUBLAS_COMPUTE_32F, no TF32) and differ in
// summation order, and in expf / tanhf (CUDA's within 2 ulp). A sum of k
// terms errs by at most k u sum |terms| (Higham, Accuracy and Stability,
// 3.1), typically by about sqrt(k) u sum |terms| (Higham and Mary, 2019).
// Here k <= 1024 and sum |terms| is within a few max |y|, so the typical
// difference is about sqrt(1024) x 2^-24 x 3 = 6e-6 of the scale:
// kF32Tolerance. Elementwise kernels take no sums, about ten roundings and
// the library functions' ulps: 32 u = 2e-6. The norms' and attention's
// backwards chain two or three such sums: 5e-5. The worst cases (2 k u sum
// |terms|) are larger. Not measured: written without a GPU.
constexpr double kF32Tolerance = 1e-5;
constexpr double kElementwiseTolerance = 2e-6;
constexpr double kBackwardTolerance = 5e-5;

/// A host tensor the test owns.
struct Host {
  std::vector<uint32_t> storage;
  Tensor view;

  explicit Host(std::vector<int64_t> shape, DType dtype = DType::F32) {
    view.dtype = dtype;
    view.shape = std::move(shape);
    storage.assign(view.bytes() / 4 + 1, 0);
    view.data = storage.data();
  }
  // `view` points into `storage`: moves keep it valid, copies would not.
  Host(Host &&) = default;
  Host(const Host &) = delete;
  Host &operator=(const Host &) = delete;
  void set(const std::vector<float> &values) {
    ASSERT_EQ(int64_t(values.size()), view.numel());
    cpu::storeF32(view, 0, view.numel(), values.data());
  }
  std::vector<float> values() const {
    std::vector<float> v(view.numel());
    cpu::loadF32(view, 0, view.numel(), v.data());
    return v;
  }
  operator const Tensor &() const { return view; }
};

Host random(std::vector<int64_t> shape, DType dtype, unsigned seed,
            float lo = -1.0f, float hi = 1.0f) {
  Host t(std::move(shape), dtype);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(t.view.numel());
  for (float &x : v)
    x = dist(gen);
  t.set(v);
  return t;
}

Host ids(std::vector<int64_t> shape, const std::vector<int32_t> &values) {
  Host t(std::move(shape), DType::I32);
  std::copy(values.begin(), values.end(), t.view.i32());
  return t;
}

Host randomIds(std::vector<int64_t> shape, int32_t bound, unsigned seed) {
  Host t(std::move(shape), DType::I32);
  std::mt19937 gen(seed);
  // Squaring a uniform draw skews it to small ids: many repeats.
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  for (int64_t i = 0; i < t.view.numel(); ++i) {
    double u = dist(gen);
    t.view.i32()[i] = std::min(bound - 1, int32_t(u * u * bound));
  }
  return t;
}

/// Device memory holding one tensor.
struct Device {
  void *ptr = nullptr;
  Tensor view;

  /// Uninitialized output of `like`'s shape and dtype: all-ones bytes.
  explicit Device(const Tensor &like) {
    view.dtype = like.dtype;
    view.shape = like.shape;
    size_t bytes = size_t(view.bytes()) + 4;
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr, 0xff, bytes), cudaSuccess);
    view.data = ptr;
  }
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  ~Device() { cudaFree(ptr); }

  static std::unique_ptr<Device> copyOf(const Host &host) {
    auto d = std::make_unique<Device>(host.view);
    EXPECT_EQ(cudaMemcpy(d->ptr, host.view.data, size_t(host.view.bytes()),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    return d;
  }
  operator const Tensor &() const { return view; }
};

std::string where(int64_t i, double gpu, double cpu) {
  std::ostringstream s;
  s << "first at element " << i << ": gpu " << gpu << ", cpu " << cpu;
  return s.str();
}

/// The tolerance rule of the file comment.
/// `minScale`: a floor under max |cpu| (the attention backwards').
void expectClose(const Host &gpu, const Host &cpu, double tol,
                 const std::string &what, double minScale = 0.0) {
  ASSERT_EQ(gpu.view.shape, cpu.view.shape) << what;
  ASSERT_EQ(gpu.view.dtype, cpu.view.dtype) << what;
  std::vector<float> g = gpu.values(), c = cpu.values();
  double scale = minScale;
  for (float x : c)
    scale = std::max(scale, double(std::abs(x)));
  double unit = cpu.view.dtype == DType::BF16  ? 0x1p-8
                : cpu.view.dtype == DType::F16 ? 0x1p-11
                                               : 0.0;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    double bound = unit * (2 * std::abs(c[i]) + scale) + tol * scale;
    if (!(std::abs(double(g[i]) - double(c[i])) <= bound)) {
      if (bad++ == 0)
        first = int64_t(i);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size()
                    << " elements out of tolerance (scale " << scale << "); "
                    << (first >= 0 ? where(first, g[first], c[first]) : "");
}

/// max |x| over the tensors.
double maxAbs(std::initializer_list<const Host *> tensors) {
  double m = 0.0;
  for (const Host *t : tensors)
    for (float x : t->values())
      m = std::max(m, double(std::abs(x)));
  return m;
}

/// Bit for bit.
void expectExact(const Host &gpu, const Host &cpu, const std::string &what) {
  ASSERT_EQ(gpu.view.shape, cpu.view.shape) << what;
  ASSERT_EQ(gpu.view.dtype, cpu.view.dtype) << what;
  int64_t size = bytesPerElement(cpu.view.dtype), bad = 0, first = -1;
  const char *g = static_cast<const char *>(gpu.view.data);
  const char *c = static_cast<const char *>(cpu.view.data);
  for (int64_t i = 0; i < cpu.view.numel(); ++i)
    if (std::memcmp(g + i * size, c + i * size, size_t(size)) != 0 &&
        bad++ == 0)
      first = i;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << cpu.view.numel()
                    << " elements differ; "
                    << (first >= 0
                            ? where(first, cpu::loadElement(gpu.view, first),
                                    cpu::loadElement(cpu.view, first))
                            : "");
}

std::string name(DType t) { return std::string(dtypeName(t)); }

class CudaKernels : public ::testing::Test {
protected:
  void SetUp() override {
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess)
      GTEST_SKIP() << "no usable CUDA GPU: " << cudaGetErrorString(error);
    if (count == 0)
      GTEST_SKIP() << "no usable CUDA GPU: no device";
    ASSERT_CUDA(cudaStreamCreate(&stream));
    ASSERT_OK(ctx.init());
  }
  void TearDown() override {
    if (stream) {
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      cudaStreamDestroy(stream);
    }
  }

  std::unique_ptr<Device> up(const Host &host) { return Device::copyOf(host); }

  /// Waits for the stream and copies `d` back.
  Host down(const Device &d) {
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    Host h(d.view.shape, d.view.dtype);
    EXPECT_EQ(cudaMemcpy(h.view.data, d.ptr, size_t(d.view.bytes()),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return h;
  }

  /// Device f32 scratch of `n` floats (statistics, scalars).
  std::unique_ptr<Device> floats(int64_t n) {
    return std::make_unique<Device>(Host({n}).view);
  }

  cudaStream_t stream = nullptr;
  cuda::KernelContext ctx;
};

//===----------------------------------------------------------------------===//
// Casts, copies, accumulation
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, CastRoundsLikeTheCpu) {
  for (DType from : {DType::F32, DType::BF16, DType::F16})
    for (DType to : {DType::F32, DType::BF16, DType::F16}) {
      std::string what = "cast " + name(from) + " -> " + name(to);
      // Large values overflow f16 (to infinity on both sides).
      float range = from == DType::F16 ? 60000.0f : 1e5f;
      Host src = random({3, 7, 5}, from, 1, -range, range);
      Host expected({105}, to);
      ASSERT_OK(cpu::castTensor(src, expected));
      auto s = up(src);
      Device dst(expected.view);
      ASSERT_OK(cuda::castTensor(*s, dst, stream));
      expectExact(down(dst), expected, what);
    }
}

TEST_F(CudaKernels, CopyElementsAccumulateAndZero) {
  Host src = random({100}, DType::F32, 2);
  Host dst = random({80}, DType::BF16, 3);
  auto s = up(src), d = up(dst);
  cpu::copyElements(src, 10, dst, 40, 30);
  ASSERT_OK(cuda::copyElements(*s, 10, *d, 40, 30, stream));
  expectExact(down(*d), dst, "copyElements f32 -> bf16");

  for (auto [accType, gType] :
       {std::pair{DType::BF16, DType::F32}, std::pair{DType::F32, DType::F16},
        std::pair{DType::F16, DType::F16}}) {
    Host acc = random({4, 25}, accType, 4), g = random({100}, gType, 5);
    auto a = up(acc), gd = up(g);
    ASSERT_OK(cpu::accumulate(acc, g));
    ASSERT_OK(cuda::accumulate(*a, *gd, stream));
    expectExact(down(*a), acc,
                "accumulate " + name(accType) + " += " + name(gType));
  }

  Host z = random({3, 33}, DType::BF16, 6);
  auto zd = up(z);
  ASSERT_OK(cpu::zeroTensor(z));
  ASSERT_OK(cuda::zeroTensor(*zd, stream));
  expectExact(down(*zd), z, "zero");
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, ActivationsMatchTheCpu) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    Host x = random({4, 33, 17}, t, 7, -4.0f, 4.0f);
    Host dy = random({4, 33, 17}, t, 8);
    auto xd = up(x), dyd = up(dy);

    auto unary = [&](const char *what, auto cpuFn, auto cudaFn) {
      Host y(x.view.shape, t);
      ASSERT_OK(cpuFn(x, y));
      Device yd(y.view);
      ASSERT_OK(cudaFn(*xd, yd, stream));
      expectClose(down(yd), y, kElementwiseTolerance, what + (" " + name(t)));
    };
    auto binary = [&](const char *what, const Host &a, const Device &ad,
                      auto cpuFn, auto cudaFn, bool exact) {
      Host out(x.view.shape, t);
      ASSERT_OK(cpuFn(a, dy, out));
      Device outd(out.view);
      ASSERT_OK(cudaFn(ad, *dyd, outd, stream));
      if (exact)
        expectExact(down(outd), out, what + (" " + name(t)));
      else
        expectClose(down(outd), out, kElementwiseTolerance,
                    what + (" " + name(t)));
    };
    unary("gelu", cpu::geluForward, cuda::geluForward);
    unary("silu", cpu::siluForward, cuda::siluForward);
    binary("gelu_backward", x, *xd, cpu::geluBackward, cuda::geluBackward,
           false);
    binary("silu_backward", x, *xd, cpu::siluBackward, cuda::siluBackward,
           false);
    binary("add", x, *xd, cpu::add, cuda::add, true);
    binary("mul", x, *xd, cpu::mul, cuda::mul, true);
  }
}

// Gemma's embedding scale and Phi-3's split and its backward: one rounding
// (or a copy), so bit for bit.
TEST_F(CudaKernels, ScaleAndSplitMatchTheCpuBitForBit) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    Host x = random({3, 5, 24}, t, 9, -4.0f, 4.0f);
    auto xd = up(x);
    Host y(x.view.shape, t);
    ASSERT_OK(cpu::scale(x, std::sqrt(3072.0), y));
    Device yd(y.view);
    ASSERT_OK(cuda::scale(*xd, std::sqrt(3072.0), yd, stream));
    expectExact(down(yd), y, "scale " + name(t));

    Host a({3, 5, 16}, t), b({3, 5, 4}, t), c({3, 5, 4}, t);
    ASSERT_OK(cpu::split(x, {a.view, b.view, c.view}));
    Device ad(a.view), bd(b.view), cd(c.view);
    ASSERT_OK(cuda::split(*xd, {ad.view, bd.view, cd.view}, stream));
    expectExact(down(ad), a, "split piece 0 " + name(t));
    expectExact(down(bd), b, "split piece 1 " + name(t));
    expectExact(down(cd), c, "split piece 2 " + name(t));
    Device back(x.view);
    ASSERT_OK(
        cuda::splitBackward({ad.view, bd.view, cd.view}, back.view, stream));
    expectExact(down(back), x, "split_backward " + name(t));
  }
}

// Gemma's RMSNorm (scale 1 + weight) against the CPU's.
TEST_F(CudaKernels, RmsNormUnitOffsetMatchesTheCpu) {
  for (DType t : {DType::F32, DType::BF16}) {
    const float eps = 1e-6f;
    Host x = random({3, 13, 300}, t, 22, -2.0f, 3.0f);
    Host w = random({300}, t, 23);
    Host dy = random({3, 13, 300}, t, 24);
    auto xd = up(x), wd = up(w), dyd = up(dy);
    Host y(x.view.shape, t), saved({39});
    ASSERT_OK(cpu::rmsNormForward(x, w, eps, true, y, saved.view.f32()));
    Device yd(y.view);
    auto savedD = floats(39);
    ASSERT_OK(cuda::rmsNormForward(*xd, *wd, eps, true, yd, savedD->view.f32(),
                                   stream));
    expectClose(down(yd), y, kF32Tolerance, "y " + name(t));
    Host dx(x.view.shape, t), dw(w.view.shape, t);
    ASSERT_OK(
        cpu::rmsNormBackward(x, w, dy, eps, true, saved.view.f32(), dx, dw));
    Device dxd(dx.view), dwd(dw.view);
    ASSERT_OK(cuda::rmsNormBackward(*xd, *wd, *dyd, eps, true,
                                    savedD->view.f32(), dxd, dwd, stream));
    expectClose(down(dxd), dx, kBackwardTolerance, "dx " + name(t));
    expectClose(down(dwd), dw, kBackwardTolerance, "dweight " + name(t));
  }
}

TEST_F(CudaKernels, ElementwiseInPlaceEqualsOutOfPlace) {
  Host x = random({5, 77}, DType::BF16, 9, -3.0f, 3.0f);
  Host dy = random({5, 77}, DType::F32, 10);
  auto a = up(x), b = up(x), dyd = up(dy);
  Device out(x.view);
  ASSERT_OK(cuda::geluForward(*a, out, stream));
  ASSERT_OK(cuda::geluForward(*b, *b, stream));
  expectExact(down(*b), down(out), "gelu in place");
  auto c = up(x);
  Device dx(x.view);
  ASSERT_OK(cuda::siluBackward(*c, *dyd, dx, stream));
  ASSERT_OK(cuda::siluBackward(*c, *dyd, *c, stream));
  expectExact(down(*c), down(dx), "silu_backward in place");
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

struct LinearCase {
  DType x, weight, bias, y;
  bool hasBias;
  int64_t batch, seq, in, out;
};

class CudaLinear : public CudaKernels {
protected:
  void check(const LinearCase &c) {
    std::ostringstream what;
    what << "linear x " << name(c.x) << " w " << name(c.weight) << " b "
         << (c.hasBias ? name(c.bias) : "none") << " y " << name(c.y) << " ["
         << c.batch << ", " << c.seq << ", " << c.in << " -> " << c.out << "]";
    SCOPED_TRACE(what.str());
    Host x = random({c.batch, c.seq, c.in}, c.x, 11);
    Host w = random({c.out, c.in}, c.weight, 12, -0.5f, 0.5f);
    Host b = random({c.out}, c.bias, 13);
    Host dy = random({c.batch, c.seq, c.out}, c.y, 14);
    auto xd = up(x), wd = up(w), bd = up(b), dyd = up(dy);
    const Tensor *bias = c.hasBias ? &b.view : nullptr;
    const Tensor *biasD = c.hasBias ? &bd->view : nullptr;

    Host y(dy.view.shape, c.y);
    ASSERT_OK(cpu::linearForward(x, w, bias, y));
    Device yd(y.view);
    ASSERT_OK(cuda::linearForward(*xd, *wd, biasD, yd, ctx, stream));
    expectClose(down(yd), y, kF32Tolerance, "y");

    Host dx(x.view.shape, c.x);
    ASSERT_OK(cpu::linearGradInput(dy, w, dx));
    Device dxd(dx.view);
    ASSERT_OK(cuda::linearGradInput(*dyd, *wd, dxd, ctx, stream));
    expectClose(down(dxd), dx, kF32Tolerance, "dx");

    Host dw(w.view.shape, c.weight);
    ASSERT_OK(cpu::linearGradWeight(dy, x, dw));
    Device dwd(dw.view);
    ASSERT_OK(cuda::linearGradWeight(*dyd, *xd, dwd, ctx, stream));
    expectClose(down(dwd), dw, kF32Tolerance, "dweight");

    Host db(b.view.shape, c.bias);
    ASSERT_OK(cpu::linearGradBias(dy, db));
    Device dbd(db.view);
    ASSERT_OK(cuda::linearGradBias(*dyd, dbd, stream));
    expectClose(down(dbd), db, kF32Tolerance, "dbias");
  }
};

TEST_F(CudaLinear, F32) {
  check({DType::F32, DType::F32, DType::F32, DType::F32, true, 2, 32, 96, 80});
  check({DType::F32, DType::F32, DType::F32, DType::F32, false, 2, 32, 96, 80});
  check({DType::F32, DType::F32, DType::F32, DType::F32, true, 1, 7, 3, 5});
}

TEST_F(CudaLinear, Bf16AndF16) {
  for (DType t : {DType::BF16, DType::F16}) {
    check({t, t, t, t, true, 2, 32, 96, 80});
    check({t, t, t, t, false, 3, 11, 64, 48});
    // Rows of 6 and 10 bytes: alignments cuBLASLt may refuse.
    check({t, t, t, t, true, 1, 7, 3, 5});
  }
}

TEST_F(CudaLinear, MixedDtypes) {
  // An f32 bias for a bf16 result (no epilogue), and operands of two dtypes.
  check(
      {DType::BF16, DType::BF16, DType::F32, DType::BF16, true, 2, 16, 64, 32});
  check(
      {DType::BF16, DType::F32, DType::F32, DType::BF16, true, 2, 16, 64, 32});
  check(
      {DType::F16, DType::BF16, DType::BF16, DType::F32, true, 2, 16, 64, 32});
}

// ZEROC_CUDA_GEMM_ROWS=staged (cuda/Gemm.h): rows of 257 and 5 elements
// (not a multiple of 16 bytes) in C (the forward), A (linear_grad_input)
// and transposed A (linear_grad_weight) through aligned staging, in chunks
// of 8 rows (a 512-byte budget) and in one; the same results as the CPU.
// Not yet run on a GPU.
TEST_F(CudaLinear, MisalignedRowsThroughStaging) {
  cuda::GemmStaging saved = cuda::gemmStaging();
  cuda::gemmStaging().staged = true;
  for (int64_t budget : {int64_t(512), int64_t(64) << 20}) {
    cuda::gemmStaging().bytes = budget;
    for (DType t : {DType::BF16, DType::F16, DType::F32}) {
      // Each check's forward, grad_input and grad_weight stage.
      int64_t before = cuda::gemmStaging().stagedProducts;
      check({t, t, t, t, true, 2, 20, 64, 257});
      check({t, t, t, t, false, 3, 11, 32, 5});
      EXPECT_EQ(cuda::gemmStaging().stagedProducts - before, 6);
    }
  }
  cuda::gemmStaging() = saved;
}

TEST_F(CudaLinear, ZeroSizedShapes) {
  check({DType::F32, DType::F32, DType::F32, DType::F32, true, 2, 3, 0, 4});
  check({DType::BF16, DType::BF16, DType::BF16, DType::BF16, true, 0, 3, 4, 5});
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

class CudaNorms : public CudaKernels,
                  public ::testing::WithParamInterface<std::pair<DType, int>> {
};

TEST_P(CudaNorms, LayerNormMatchesTheCpu) {
  auto [t, hidden] = GetParam();
  const float eps = 1e-5f;
  Host x = random({3, 13, hidden}, t, 15, -2.0f, 3.0f);
  Host w = random({hidden}, t, 16), b = random({hidden}, t, 17);
  Host dy = random({3, 13, hidden}, t, 18);
  int64_t rows = 39;
  auto xd = up(x), wd = up(w), bd = up(b), dyd = up(dy);

  Host y(x.view.shape, t), saved({2 * rows});
  ASSERT_OK(cpu::layerNormForward(x, w, b, eps, y, saved.view.f32()));
  Device yd(y.view);
  auto savedD = floats(2 * rows);
  ASSERT_OK(cuda::layerNormForward(*xd, *wd, *bd, eps, yd, savedD->view.f32(),
                                   stream));
  expectClose(down(yd), y, kF32Tolerance, "y");
  expectClose(down(*savedD), saved, kF32Tolerance, "mean and rstd");

  Host dx(x.view.shape, t), dw(w.view.shape, t), db(b.view.shape, t);
  ASSERT_OK(
      cpu::layerNormBackward(x, w, dy, eps, saved.view.f32(), dx, dw, db));
  Device dxd(dx.view), dwd(dw.view), dbd(db.view);
  ASSERT_OK(cuda::layerNormBackward(*xd, *wd, *dyd, eps, savedD->view.f32(),
                                    dxd, dwd, dbd, stream));
  Host gdx = down(dxd), gdw = down(dwd), gdb = down(dbd);
  expectClose(gdx, dx, kBackwardTolerance, "dx");
  expectClose(gdw, dw, kBackwardTolerance, "dweight");
  expectClose(gdb, db, kBackwardTolerance, "dbias");

  // Recomputed statistics, and dx written over dy: the same bits.
  auto dyInPlace = up(dy);
  Device dw2(dw.view), db2(db.view);
  ASSERT_OK(cuda::layerNormBackward(*xd, *wd, *dyInPlace, eps, nullptr,
                                    *dyInPlace, dw2, db2, stream));
  expectExact(down(*dyInPlace), gdx, "dx recomputed, in place");
  expectExact(down(dw2), gdw, "dweight recomputed");
  expectExact(down(db2), gdb, "dbias recomputed");
}

TEST_P(CudaNorms, RmsNormMatchesTheCpu) {
  auto [t, hidden] = GetParam();
  const float eps = 1e-6f;
  Host x = random({3, 13, hidden}, t, 19, -2.0f, 3.0f);
  Host w = random({hidden}, t, 20);
  Host dy = random({3, 13, hidden}, t, 21);
  int64_t rows = 39;
  auto xd = up(x), wd = up(w), dyd = up(dy);

  Host y(x.view.shape, t), saved({rows});
  ASSERT_OK(cpu::rmsNormForward(x, w, eps, y, saved.view.f32()));
  Device yd(y.view);
  auto savedD = floats(rows);
  ASSERT_OK(
      cuda::rmsNormForward(*xd, *wd, eps, yd, savedD->view.f32(), stream));
  expectClose(down(yd), y, kF32Tolerance, "y");
  expectClose(down(*savedD), saved, kF32Tolerance, "rrms");

  Host dx(x.view.shape, t), dw(w.view.shape, t);
  ASSERT_OK(cpu::rmsNormBackward(x, w, dy, eps, saved.view.f32(), dx, dw));
  Device dxd(dx.view), dwd(dw.view);
  ASSERT_OK(cuda::rmsNormBackward(*xd, *wd, *dyd, eps, savedD->view.f32(), dxd,
                                  dwd, stream));
  Host gdx = down(dxd), gdw = down(dwd);
  expectClose(gdx, dx, kBackwardTolerance, "dx");
  expectClose(gdw, dw, kBackwardTolerance, "dweight");

  auto dyInPlace = up(dy);
  Device dw2(dw.view);
  ASSERT_OK(cuda::rmsNormBackward(*xd, *wd, *dyInPlace, eps, nullptr,
                                  *dyInPlace, dw2, stream));
  expectExact(down(*dyInPlace), gdx, "dx recomputed, in place");
  expectExact(down(dw2), gdw, "dweight recomputed");
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndWidths, CudaNorms,
    ::testing::Values(std::pair{DType::F32, 300}, std::pair{DType::F32, 1024},
                      std::pair{DType::BF16, 300}, std::pair{DType::F16, 1024}),
    [](const auto &info) {
      return name(info.param.first) + "_" + std::to_string(info.param.second);
    });

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, EmbeddingMatchesTheCpuBitForBit) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    Host table = random({50, 70}, t, 22);
    Host tokens = randomIds({3, 40}, 50, 23);
    Host dy = random({3, 40, 70}, t, 24);
    auto tableD = up(table), tokensD = up(tokens), dyD = up(dy);

    Host out({3, 40, 70}, t);
    ASSERT_OK(cpu::embeddingForward(table, tokens, out));
    Device outD(out.view);
    ASSERT_OK(cuda::embeddingForward(*tableD, *tokensD, outD, stream));
    expectExact(down(outD), out, "embedding " + name(t));

    Host dtable(table.view.shape, t);
    ASSERT_OK(cpu::embeddingBackward(dy, tokens, dtable));
    Device dtableD(dtable.view);
    ASSERT_OK(cuda::embeddingBackward(*dyD, *tokensD, dtableD, stream));
    expectExact(down(dtableD), dtable, "embedding_backward " + name(t));
  }
}

TEST_F(CudaKernels, EmbeddingIdOutsideTheTable) {
  // The CPU rejects it; on the device its forward row is NaN and its
  // backward contribution is dropped.
  Host table = random({8, 5}, DType::F32, 25);
  Host bad = ids({1, 4}, {1, 8, 1, -3});
  Host dy = random({1, 4, 5}, DType::F32, 26);
  auto tableD = up(table), badD = up(bad), dyD = up(dy);
  Device out(Host({1, 4, 5}).view);
  ASSERT_OK(cuda::embeddingForward(*tableD, *badD, out, stream));
  std::vector<float> values = down(out).values();
  for (int64_t h = 0; h < 5; ++h) {
    EXPECT_EQ(values[h], table.values()[5 + h]);
    EXPECT_TRUE(std::isnan(values[5 + h]));
    EXPECT_TRUE(std::isnan(values[15 + h]));
  }
  Device dtable(table.view);
  ASSERT_OK(cuda::embeddingBackward(*dyD, *badD, dtable, stream));
  std::vector<float> grads = down(dtable).values(), rows = dy.values();
  for (int64_t v = 0; v < 8; ++v)
    for (int64_t h = 0; h < 5; ++h)
      EXPECT_EQ(grads[v * 5 + h], v == 1 ? rows[h] + rows[10 + h] : 0.0f);
}

TEST_F(CudaKernels, PositionEmbeddingMatchesTheCpuBitForBit) {
  for (DType t : {DType::F32, DType::BF16}) {
    Host table = random({20, 70}, t, 27), dy = random({3, 13, 70}, t, 28);
    auto tableD = up(table), dyD = up(dy);
    Host out({3, 13, 70}, t);
    ASSERT_OK(cpu::positionEmbeddingForward(table, out));
    Device outD(out.view);
    ASSERT_OK(cuda::positionEmbeddingForward(*tableD, outD, stream));
    expectExact(down(outD), out, "position_embedding " + name(t));
    Host dtable(table.view.shape, t);
    ASSERT_OK(cpu::positionEmbeddingBackward(dy, dtable));
    Device dtableD(dtable.view);
    ASSERT_OK(cuda::positionEmbeddingBackward(*dyD, dtableD, stream));
    expectExact(down(dtableD), dtable,
                "position_embedding_backward " + name(t));
  }
}

//===----------------------------------------------------------------------===//
// Rotary
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, RotaryMatchesTheCpu) {
  for (DType t : {DType::F32, DType::BF16}) {
    Host x = random({2, 37, 64}, t, 29);
    auto xd = up(x);
    Host y(x.view.shape, t), dx(x.view.shape, t);
    ASSERT_OK(cpu::rotaryForward(x, 16, 10000.0, y));
    ASSERT_OK(cpu::rotaryBackward(x, 16, 10000.0, dx));
    Device yd(y.view), dxd(dx.view);
    ASSERT_OK(cuda::rotaryForward(*xd, 16, 10000.0, yd, stream));
    ASSERT_OK(cuda::rotaryBackward(*xd, 16, 10000.0, dxd, stream));
    Host gy = down(yd);
    expectClose(gy, y, kElementwiseTolerance, "rotary " + name(t));
    expectClose(down(dxd), dx, kElementwiseTolerance,
                "rotary_backward " + name(t));
    ASSERT_OK(cuda::rotaryForward(*xd, 16, 10000.0, *xd, stream));
    expectExact(down(*xd), gy, "rotary in place");
  }
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

struct AttentionCase {
  DType dtype;
  int64_t batch, seq, heads, kvHeads, headDim;
  int64_t window = 0; ///< Sliding window (Mistral, Phi-3); 0: none.
};

void PrintTo(const AttentionCase &c, std::ostream *os) {
  *os << dtypeName(c.dtype) << " batch " << c.batch << " seq " << c.seq
      << " heads " << c.heads << " kv heads " << c.kvHeads << " head dim "
      << c.headDim << " window " << c.window;
}

class CudaAttention : public CudaKernels,
                      public ::testing::WithParamInterface<AttentionCase> {
protected:
  /// The flash kernels against the CPU's, with and without the saved
  /// log-sum-exp.
  void checkFlash();
};

TEST_P(CudaAttention, MatchesTheCpu) {
  const AttentionCase &c = GetParam();
  DType t = c.dtype;
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Host q = random({c.batch, c.seq, qw}, t, 30, -2.0f, 2.0f);
  Host k = random({c.batch, c.seq, kw}, t, 31, -2.0f, 2.0f);
  Host v = random({c.batch, c.seq, kw}, t, 32);
  Host dout = random({c.batch, c.seq, qw}, t, 33);
  auto qd = up(q), kd = up(k), vd = up(v), doutd = up(dout);

  Host out(q.view.shape, t), probs({c.batch, c.heads, c.seq, c.seq}, t);
  ASSERT_OK(cpu::attentionForward(q, k, v, c.heads, c.kvHeads, c.window, out,
                                  &probs.view));
  Device outd(out.view), probsd(probs.view), outNoProbs(out.view);
  ASSERT_OK(cuda::attentionForward(*qd, *kd, *vd, c.heads, c.kvHeads, c.window,
                                   outd, &probsd.view, ctx, stream));
  ASSERT_OK(cuda::attentionForward(*qd, *kd, *vd, c.heads, c.kvHeads, c.window,
                                   outNoProbs, nullptr, ctx, stream));
  Host gout = down(outd);
  expectClose(gout, out, kF32Tolerance, "out");
  expectClose(down(probsd), probs, kF32Tolerance, "probs");
  expectExact(down(outNoProbs), gout, "out without probs");

  Host dq(q.view.shape, t), dk(k.view.shape, t), dv(v.view.shape, t);
  ASSERT_OK(cpu::attentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                   c.window, &probs.view, dq, dk, dv));
  // The backward reads the GPU's own forward, as a runtime would.
  Device dqd(dq.view), dkd(dk.view), dvd(dv.view);
  ASSERT_OK(cuda::attentionBackward(*qd, *kd, *vd, outd, *doutd, c.heads,
                                    c.kvHeads, c.window, &probsd.view, dqd, dkd,
                                    dvd, ctx, stream));
  Host gdq = down(dqd), gdk = down(dkd), gdv = down(dvd);
  double gradScale = maxAbs({&dq, &dk, &dv});
  expectClose(gdq, dq, kBackwardTolerance, "dq", gradScale);
  expectClose(gdk, dk, kBackwardTolerance, "dk", gradScale);
  expectClose(gdv, dv, kBackwardTolerance, "dv", gradScale);

  Device dq2(dq.view), dk2(dk.view), dv2(dv.view);
  ASSERT_OK(cuda::attentionBackward(*qd, *kd, *vd, outd, *doutd, c.heads,
                                    c.kvHeads, c.window, nullptr, dq2, dk2, dv2,
                                    ctx, stream));
  expectExact(down(dq2), gdq, "dq recomputed");
  expectExact(down(dk2), gdk, "dk recomputed");
  expectExact(down(dv2), gdv, "dv recomputed");
}

// The flash kernels against the CPU's flash kernels (which are tested
// against the materialized ones and finite differences): outputs and the
// log-sum-exp, gradients from the saved and from a recomputed log-sum-exp.
void CudaAttention::checkFlash() {
  const AttentionCase &c = GetParam();
  DType t = c.dtype;
  int64_t qw = c.heads * c.headDim, kw = c.kvHeads * c.headDim;
  Host q = random({c.batch, c.seq, qw}, t, 40, -2.0f, 2.0f);
  Host k = random({c.batch, c.seq, kw}, t, 41, -2.0f, 2.0f);
  Host v = random({c.batch, c.seq, kw}, t, 42);
  Host dout = random({c.batch, c.seq, qw}, t, 43);
  auto qd = up(q), kd = up(k), vd = up(v), doutd = up(dout);

  Host out(q.view.shape, t), lse({c.batch, c.heads, c.seq}, DType::F32);
  ASSERT_OK(cpu::flashAttentionForward(q, k, v, c.heads, c.kvHeads, c.window,
                                       out, &lse.view));
  Device outd(out.view), lsed(lse.view), outNoLse(out.view);
  ASSERT_OK(cuda::flashAttentionForward(*qd, *kd, *vd, c.heads, c.kvHeads,
                                        c.window, outd, &lsed.view, ctx,
                                        stream));
  ASSERT_OK(cuda::flashAttentionForward(*qd, *kd, *vd, c.heads, c.kvHeads,
                                        c.window, outNoLse, nullptr, ctx,
                                        stream));
  Host gout = down(outd);
  expectClose(gout, out, kF32Tolerance, "flash out");
  expectClose(down(lsed), lse, kF32Tolerance, "flash lse");
  expectExact(down(outNoLse), gout, "flash out without lse");

  Host dq(q.view.shape, t), dk(k.view.shape, t), dv(v.view.shape, t);
  ASSERT_OK(cpu::flashAttentionBackward(q, k, v, out, dout, c.heads, c.kvHeads,
                                        c.window, &lse.view, dq, dk, dv));
  Device dqd(dq.view), dkd(dk.view), dvd(dv.view);
  ASSERT_OK(cuda::flashAttentionBackward(*qd, *kd, *vd, outd, *doutd, c.heads,
                                         c.kvHeads, c.window, &lsed.view, dqd,
                                         dkd, dvd, ctx, stream));
  Host gdq = down(dqd), gdk = down(dkd), gdv = down(dvd);
  double gradScale = maxAbs({&dq, &dk, &dv});
  expectClose(gdq, dq, kBackwardTolerance, "flash dq", gradScale);
  expectClose(gdk, dk, kBackwardTolerance, "flash dk", gradScale);
  expectClose(gdv, dv, kBackwardTolerance, "flash dv", gradScale);

  Device dq2(dq.view), dk2(dk.view), dv2(dv.view);
  ASSERT_OK(cuda::flashAttentionBackward(*qd, *kd, *vd, outd, *doutd, c.heads,
                                         c.kvHeads, c.window, nullptr, dq2, dk2,
                                         dv2, ctx, stream));
  expectExact(down(dq2), gdq, "flash dq recomputed");
  expectExact(down(dk2), gdk, "flash dk recomputed");
  expectExact(down(dv2), gdv, "flash dv recomputed");
}

TEST_P(CudaAttention, FlashMatchesTheCpu) { checkFlash(); }

// ZEROC_CUDA_FLASH=wmma: the WMMA tensor-core kernels where the register
// kernels run by default (16-bit, head_dim <= 64), the same kernels as auto
// elsewhere; the same bounds against the CPU.
TEST_P(CudaAttention, WmmaKernelsMatchTheCpu) {
  std::string saved = cuda::flashKernelChoice();
  cuda::flashKernelChoice() = "wmma";
  checkFlash();
  cuda::flashKernelChoice() = saved;
}

INSTANTIATE_TEST_SUITE_P(
    HeadsAndDtypes, CudaAttention,
    ::testing::Values(AttentionCase{DType::F32, 2, 33, 4, 4, 16},
                      AttentionCase{DType::F32, 2, 33, 4, 2, 16},
                      AttentionCase{DType::F32, 1, 20, 4, 1, 8},
                      AttentionCase{DType::F32, 3, 64, 6, 3, 32},
                      AttentionCase{DType::BF16, 2, 33, 4, 2, 16},
                      AttentionCase{DType::F16, 2, 40, 2, 2, 32},
                      // Rows longer than a softmax block (256 threads).
                      AttentionCase{DType::F32, 2, 300, 2, 1, 16},
                      // Sliding windows: shorter than the sequence, of one
                      // position, and longer than it (no window).
                      AttentionCase{DType::F32, 2, 33, 4, 2, 16, 7},
                      AttentionCase{DType::F32, 1, 20, 4, 1, 8, 1},
                      AttentionCase{DType::BF16, 2, 33, 4, 2, 16, 40},
                      AttentionCase{DType::F32, 2, 300, 2, 1, 16, 257},
                      // The tiled flash kernels' 64-row tiles: head dims of
                      // both instantiations (64, 128) and one between (96),
                      // sequences ending inside a tile, a window crossing
                      // tiles; and past 128 the warp-per-row kernels.
                      AttentionCase{DType::F32, 1, 130, 2, 1, 64},
                      AttentionCase{DType::BF16, 2, 70, 2, 2, 128, 50},
                      AttentionCase{DType::F16, 1, 65, 3, 1, 96},
                      AttentionCase{DType::F32, 1, 150, 4, 2, 64, 70},
                      AttentionCase{DType::F32, 1, 40, 1, 1, 160},
                      // The tensor-core kernels (16-bit, head_dim % 8 ==
                      // 0): both instantiations, head dims padded to a
                      // multiple of 16 (8, 72, 120), grouped queries,
                      // sequences ending inside a tile, windows crossing
                      // tiles, and 16 tiles of 64.
                      AttentionCase{DType::BF16, 2, 130, 4, 2, 64},
                      AttentionCase{DType::F16, 1, 200, 2, 2, 128, 70},
                      AttentionCase{DType::BF16, 1, 1024, 2, 1, 64},
                      AttentionCase{DType::BF16, 2, 40, 3, 3, 8},
                      AttentionCase{DType::F16, 1, 100, 2, 1, 72, 33},
                      AttentionCase{DType::BF16, 1, 64, 2, 2, 120}),
    [](const auto &info) {
      const AttentionCase &c = info.param;
      return name(c.dtype) + "_b" + std::to_string(c.batch) + "_s" +
             std::to_string(c.seq) + "_h" + std::to_string(c.heads) + "_kv" +
             std::to_string(c.kvHeads) + "_d" + std::to_string(c.headDim) +
             (c.window ? "_w" + std::to_string(c.window) : "");
    });

//===----------------------------------------------------------------------===//
// Cross-entropy and the seed
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, CrossEntropyMatchesTheCpu) {
  for (DType t : {DType::F32, DType::BF16}) {
    Host logits = random({2, 17, 1000}, t, 34, -5.0f, 5.0f);
    Host targets = randomIds({2, 17}, 1000, 35);
    auto logitsD = up(logits), targetsD = up(targets);
    Host loss({});
    ASSERT_OK(cpu::crossEntropyForward(logits, targets, loss));
    Device lossD(loss.view);
    ASSERT_OK(
        cuda::crossEntropyForward(*logitsD, *targetsD, lossD, 0.0, 0, stream));
    // Each row's log-sum-exp over 1000 logits: the sums' order moves it by
    // about sqrt(1000) u = 1.9e-6 (at worst 2 x 1000 u = 1.2e-4), then a mean
    // of 34 rows of loss about log(1000) = 7: relative 3e-7 typically, 1.7e-5
    // at worst. Not measured.
    EXPECT_NEAR(down(lossD).values()[0], loss.values()[0],
                1e-5 * std::abs(loss.values()[0]))
        << name(t);

    Host dloss({}), dlogits(logits.view.shape, t);
    dloss.set({0.5f});
    auto dlossD = up(dloss);
    ASSERT_OK(cpu::crossEntropyBackward(logits, targets, dloss, dlogits));
    Device dlogitsD(dlogits.view);
    ASSERT_OK(cuda::crossEntropyBackward(*logitsD, *targetsD, *dlossD, dlogitsD,
                                         0.0, 0, stream));
    Host g = down(dlogitsD);
    expectClose(g, dlogits, kF32Tolerance, "dlogits " + name(t));
    ASSERT_OK(cuda::crossEntropyBackward(*logitsD, *targetsD, *dlossD, *logitsD,
                                         0.0, 0, stream));
    expectExact(down(*logitsD), g, "dlogits in place " + name(t));
  }
}

TEST_F(CudaKernels, CrossEntropyTargetOutsideTheVocabularyIsNaN) {
  Host logits = random({1, 3, 4}, DType::F32, 36);
  Host targets = ids({1, 3}, {0, 4, 1});
  auto logitsD = up(logits), targetsD = up(targets);
  Device loss(Host({}).view);
  ASSERT_OK(
      cuda::crossEntropyForward(*logitsD, *targetsD, loss, 0.0, 0, stream));
  EXPECT_TRUE(std::isnan(down(loss).values()[0]));
}

// A padded vocabulary (classes 50257 of rows of 50304, GPT-2's with
// --pad-vocab-to-multiple-of 64): the CPU kernel's loss and gradient, the
// padding columns' gradient exactly 0 (in place too), and a target in the
// padding is NaN as one outside the rows.
TEST_F(CudaKernels, CrossEntropyPaddedClassesMatchTheCpu) {
  const int64_t classes = 50257, width = 50304;
  Host logits = random({1, 3, width}, DType::BF16, 38, -5.0f, 5.0f);
  // Padding that would dominate a softmax over the whole row (the loss
  // would move by about 45 - 5).
  std::vector<float> v = logits.values();
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t i = classes; i < width; ++i)
      v[size_t(row * width + i)] = 50.0f;
  logits.set(v);
  Host targets = ids({1, 3}, {50256, -100, 17});
  auto logitsD = up(logits), targetsD = up(targets);
  Host loss({});
  ASSERT_OK(cpu::crossEntropyForward(logits, targets, loss, 0.0, classes));
  Device lossD(loss.view);
  ASSERT_OK(cuda::crossEntropyForward(*logitsD, *targetsD, lossD, 0.0, classes,
                                      stream));
  // As CrossEntropyMatchesTheCpu, over 50257 logits: sqrt(50257) u = 1.3e-5
  // typically of a loss about log(50257) = 10.8.
  expectClose(down(lossD), loss, 1e-4, "loss");
  Host dloss({}), dlogits(logits.view.shape, DType::BF16);
  dloss.set({0.5f});
  auto dlossD = up(dloss);
  ASSERT_OK(
      cpu::crossEntropyBackward(logits, targets, dloss, dlogits, 0.0, classes));
  Device dlogitsD(dlogits.view);
  ASSERT_OK(cuda::crossEntropyBackward(*logitsD, *targetsD, *dlossD, dlogitsD,
                                       0.0, classes, stream));
  Host g = down(dlogitsD);
  expectClose(g, dlogits, kF32Tolerance, "dlogits");
  ASSERT_OK(cuda::crossEntropyBackward(*logitsD, *targetsD, *dlossD, *logitsD,
                                       0.0, classes, stream));
  std::vector<float> values = down(*logitsD).values();
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t i = classes; i < width; ++i)
      EXPECT_EQ(values[size_t(row * width + i)], 0.0f) << "row " << row;
  Host inPadding = ids({1, 3}, {50257, 0, 0});
  auto inPaddingD = up(inPadding), freshD = up(logits);
  ASSERT_OK(cuda::crossEntropyForward(*freshD, *inPaddingD, lossD, 0.0, classes,
                                      stream));
  EXPECT_TRUE(std::isnan(down(lossD).values()[0]));
}

// Targets -100 (ignored, --loss-mask) and the executor's divisor: the CPU
// kernel's loss and gradient, the ignored rows' gradient exactly 0; with no
// divisor both count the rows not ignored.
TEST_F(CudaKernels, CrossEntropyIgnoredTargetsMatchTheCpu) {
  Host logits = random({2, 5, 300}, DType::F32, 37, -5.0f, 5.0f);
  Host targets = ids({2, 5}, {3, -100, 299, -100, -100, 0, 7, -100, 12, 250});
  auto logitsD = up(logits), targetsD = up(targets);
  Host dloss({});
  dloss.set({0.5f});
  auto dlossD = up(dloss);
  for (double tokens : {0.0, 7.5}) {
    SCOPED_TRACE("tokens " + std::to_string(tokens));
    Host loss({});
    ASSERT_OK(cpu::crossEntropyForward(logits, targets, loss, tokens));
    Device lossD(loss.view);
    ASSERT_OK(cuda::crossEntropyForward(*logitsD, *targetsD, lossD, tokens, 0,
                                        stream));
    // As CrossEntropyMatchesTheCpu.
    expectClose(down(lossD), loss, 1e-5, "loss");
    Host dlogits(logits.view.shape, DType::F32);
    ASSERT_OK(
        cpu::crossEntropyBackward(logits, targets, dloss, dlogits, tokens));
    Device dlogitsD(dlogits.view);
    ASSERT_OK(cuda::crossEntropyBackward(*logitsD, *targetsD, *dlossD, dlogitsD,
                                         tokens, 0, stream));
    Host g = down(dlogitsD);
    expectClose(g, dlogits, kF32Tolerance, "dlogits");
    std::vector<float> values = g.values();
    for (int64_t row : {1, 3, 4, 7})
      for (int64_t i = 0; i < 300; ++i)
        EXPECT_EQ(values[size_t(row * 300 + i)], 0.0f) << "row " << row;
  }
}

// Packed-sequence document masks are CPU only: refused, naming the op.
TEST_F(CudaKernels, AttentionRefusesDocumentMasks) {
  Host q = random({1, 4, 8}, DType::F32, 38),
       k = random({1, 4, 4}, DType::F32, 39);
  auto qd = up(q), kd = up(k);
  Host docs = ids({1, 4}, {0, 0, 2, 2});
  auto docsD = up(docs);
  Device out(q.view);
  auto s = cuda::flashAttentionForward(*qd, *kd, *kd, 2, 1, 0, out, nullptr,
                                       &docsD->view, ctx, stream);
  EXPECT_NE(s.error.find("causal_attention: packed-sequence document starts "
                         "(--no-cross-doc-attention, --reset-position-ids) are "
                         "not implemented by the CUDA kernels"),
            std::string::npos)
      << s.error;
  EXPECT_FALSE(cuda::attentionForward(*qd, *kd, *kd, 2, 1, 0, out, nullptr,
                                      &docsD->view, ctx, stream)
                   .ok());
}

TEST_F(CudaKernels, BackwardSeed) {
  Host seed({});
  ASSERT_OK(cpu::backwardSeed(3, 65536.0, seed));
  Device seedD(seed.view);
  ASSERT_OK(cuda::backwardSeed(3, 65536.0, seedD, stream));
  expectExact(down(seedD), seed, "seed");
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, AdamMatchesTheCpuBitForBit) {
  const std::vector<int64_t> sizes = {10000, 1, 0, 4096, 5000};
  for (int mode = 0; mode < 3; ++mode)
    for (DType gradType : {DType::F32, DType::BF16, DType::F16})
      for (int param : {-1, int(DType::BF16), int(DType::F16)}) {
        // AdamW, Adam, and AdamW without bias correction.
        bool adamw = mode != 1, biasCorrection = mode != 2;
        SCOPED_TRACE(std::string(adamw ? "adamw" : "adam") +
                     (biasCorrection ? "" : " uncorrected") + " grad " +
                     name(gradType) + " param " +
                     (param < 0 ? "none" : name(DType(param))));
        cpu::AdamSettings settings;
        settings.lr = 3e-3;
        settings.weightDecay = 0.1;
        settings.adamw = adamw;
        settings.biasCorrection = biasCorrection;
        std::vector<Host> cpuState;
        std::vector<std::unique_ptr<Device>> gpuState;
        std::vector<cuda::AdamTensors> list;
        unsigned seed = 40;
        for (int64_t n : sizes) {
          cpuState.push_back(random({n}, gradType, seed++));
          cpuState.push_back(random({n}, DType::F32, seed++));
          cpuState.push_back(random({n}, DType::F32, seed++, -0.1f, 0.1f));
          cpuState.push_back(random({n}, DType::F32, seed++, 0.0f, 0.01f));
          cpuState.push_back(Host({n}, param < 0 ? DType::BF16 : DType(param)));
        }
        for (const Host &h : cpuState)
          gpuState.push_back(up(h));
        for (size_t i = 0; i < sizes.size(); ++i) {
          cuda::AdamTensors x{gpuState[5 * i]->view, gpuState[5 * i + 1]->view,
                              gpuState[5 * i + 2]->view,
                              gpuState[5 * i + 3]->view,
                              param < 0 ? nullptr : &gpuState[5 * i + 4]->view};
          list.push_back(x);
        }
        for (int64_t step = 1; step <= 3; ++step) {
          for (size_t i = 0; i < sizes.size(); ++i)
            ASSERT_OK(cpu::adamUpdate(
                settings, step, cpuState[5 * i], cpuState[5 * i + 1],
                cpuState[5 * i + 2], cpuState[5 * i + 3],
                param < 0 ? nullptr : &cpuState[5 * i + 4].view));
          ASSERT_OK(cuda::multiTensorAdamUpdate(settings, step, list, stream));
        }
        for (size_t i = 0; i < sizes.size(); ++i)
          for (int j = 1; j < (param < 0 ? 4 : 5); ++j)
            expectExact(down(*gpuState[5 * i + j]), cpuState[5 * i + j],
                        "tensor " + std::to_string(i) + " state " +
                            std::to_string(j));
      }
}

TEST_F(CudaKernels, AdamOverManyLaunchesAndOneTensor) {
  // 70 tensors: two launches of the multi-tensor kernel.
  cpu::AdamSettings settings;
  settings.adamw = true;
  settings.weightDecay = 0.01;
  std::vector<Host> cpuState;
  std::vector<std::unique_ptr<Device>> gpuState;
  std::vector<cuda::AdamTensors> list;
  for (unsigned i = 0; i < 70; ++i) {
    int64_t n = 3 + i % 5;
    cpuState.push_back(random({n}, DType::F32, 100 + 4 * i));
    cpuState.push_back(random({n}, DType::F32, 101 + 4 * i));
    cpuState.push_back(Host({n}));
    cpuState.push_back(Host({n}));
  }
  for (const Host &h : cpuState)
    gpuState.push_back(up(h));
  for (size_t i = 0; i < 70; ++i)
    list.push_back({gpuState[4 * i]->view, gpuState[4 * i + 1]->view,
                    gpuState[4 * i + 2]->view, gpuState[4 * i + 3]->view});
  for (size_t i = 0; i < 70; ++i)
    ASSERT_OK(cpu::adamUpdate(settings, 1, cpuState[4 * i], cpuState[4 * i + 1],
                              cpuState[4 * i + 2], cpuState[4 * i + 3],
                              nullptr));
  ASSERT_OK(cuda::multiTensorAdamUpdate(settings, 1, list, stream));
  for (size_t i = 0; i < 70; ++i)
    expectExact(down(*gpuState[4 * i + 1]), cpuState[4 * i + 1],
                "master " + std::to_string(i));

  // The single-tensor entry point, step 2 of tensor 0.
  ASSERT_OK(cpu::adamUpdate(settings, 2, cpuState[0], cpuState[1], cpuState[2],
                            cpuState[3], nullptr));
  ASSERT_OK(cuda::adamUpdate(settings, 2, *gpuState[0], *gpuState[1],
                             *gpuState[2], *gpuState[3], nullptr, stream));
  expectExact(down(*gpuState[1]), cpuState[1], "master, single tensor");
}

TEST_F(CudaKernels, LambMatchesTheCpu) {
  // Three steps of LAMB's two halves on one parameter, with the trust ratio
  // between them taken from the CPU's sums on both sides (as the executor
  // takes one ratio for every rank): the moments and the update bit for
  // bit, the two sums within the tolerance of SumOfSquaresClipAndScale.
  const int64_t n = 10000;
  for (bool biasCorrection : {true, false})
    for (DType gradType : {DType::F32, DType::BF16})
      for (int param : {-1, int(DType::BF16)}) {
        SCOPED_TRACE(std::string(biasCorrection ? "" : "uncorrected ") +
                     "grad " + name(gradType) + " param " +
                     (param < 0 ? "none" : name(DType(param))));
        cpu::AdamSettings settings;
        settings.lr = 3e-3;
        settings.weightDecay = 0.01;
        settings.biasCorrection = biasCorrection;
        Host grad = random({n}, gradType, 60);
        Host master = random({n}, DType::F32, 61);
        Host m = random({n}, DType::F32, 62, -0.1f, 0.1f);
        Host v = random({n}, DType::F32, 63, 0.0f, 0.01f);
        Host p16({n}, param < 0 ? DType::BF16 : DType(param));
        auto gradD = up(grad), masterD = up(master), mD = up(m), vD = up(v),
             p16D = up(p16);
        auto sums = floats(4); // Two device doubles.
        for (int64_t step = 1; step <= 3; ++step) {
          cpu::LambSums cpuSums;
          ASSERT_OK(cpu::lambMoments(settings, grad, master, m, v, cpuSums));
          ASSERT_CUDA(cudaMemset(sums->ptr, 0, 16));
          ASSERT_OK(cuda::lambMoments(settings, *gradD, *masterD, *mD, *vD,
                                      static_cast<double *>(sums->ptr),
                                      stream));
          double gpuSums[2] = {0, 0};
          ASSERT_CUDA(cudaStreamSynchronize(stream));
          ASSERT_CUDA(
              cudaMemcpy(gpuSums, sums->ptr, 16, cudaMemcpyDeviceToHost));
          // Squares of floats are exact in f64; 1e4 terms, summed in order
          // on the CPU and in a tree on the GPU (the reasoning of
          // SumOfSquaresClipAndScale). Not measured.
          EXPECT_NEAR(gpuSums[0], cpuSums.weight, 1e-12 * cpuSums.weight);
          EXPECT_NEAR(gpuSums[1], cpuSums.update, 1e-12 * cpuSums.update);
          expectExact(down(*mD), m, "exp_avg step " + std::to_string(step));
          expectExact(down(*vD), v, "exp_avg_sq step " + std::to_string(step));

          float ratio = cpu::lambTrustRatio(cpuSums, 10.0, 0.01);
          const Tensor *cpu16 = param < 0 ? nullptr : &p16.view;
          const Tensor *gpu16 = param < 0 ? nullptr : &p16D->view;
          ASSERT_OK(cpu::lambApply(settings, step, ratio, master, m, v, cpu16));
          ASSERT_OK(cuda::lambApply(settings, step, ratio, *masterD, *mD, *vD,
                                    gpu16, stream));
          expectExact(down(*masterD), master,
                      "master step " + std::to_string(step));
          if (param >= 0)
            expectExact(down(*p16D), p16, "param step " + std::to_string(step));
        }
      }
}

TEST_F(CudaKernels, SumOfSquaresClipAndScale) {
  Host a = random({1000}, DType::BF16, 50, -3.0f, 3.0f);
  Host b = random({123457}, DType::F32, 51);
  auto ad = up(a), bd = up(b);
  // A device double: two floats' worth, zeroed.
  auto total = floats(2);
  ASSERT_CUDA(cudaMemset(total->ptr, 0, 8));
  ASSERT_OK(cuda::sumOfSquares(*ad, static_cast<double *>(total->ptr), stream));
  ASSERT_OK(cuda::sumOfSquares(*bd, static_cast<double *>(total->ptr), stream));
  double gpuTotal = 0.0;
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  ASSERT_CUDA(cudaMemcpy(&gpuTotal, total->ptr, 8, cudaMemcpyDeviceToHost));
  double cpuTotal = cpu::sumOfSquares(a) + cpu::sumOfSquares(b);
  // Squares of floats are exact in f64. The CPU adds 124,457 of them in order
  // (u = 2^-53: at worst n u = 1.4e-11 relative, typically sqrt(n / 3) u =
  // 2.3e-14), the GPU in a tree (about log2(n) u = 2e-15). 1e-12 is 40 times
  // the typical difference, below the worst case. Not measured.
  EXPECT_NEAR(gpuTotal, cpuTotal, 1e-12 * cpuTotal);

  // The coefficient from the GPU's total on both sides: the same bits.
  ASSERT_OK(cuda::clipGradNormInPlace(
      *bd, static_cast<const double *>(total->ptr), 1.0, stream));
  ASSERT_OK(cpu::scaleInPlace(b, cpu::clipCoefficient(gpuTotal, 1.0)));
  expectExact(down(*bd), b, "clipped");

  ASSERT_OK(cuda::scaleInPlace(*ad, 0.37f, stream));
  ASSERT_OK(cpu::scaleInPlace(a, 0.37f));
  expectExact(down(*ad), a, "scaled");
}

TEST_F(CudaKernels, OnePassSumOfSquaresAndScaleOverAList) {
  // ZEROC_CUDA_CLIP=grid's kernels: 70 gradients (two launches of 64), in
  // every float dtype, empty, one element, exactly one 32 Ki chunk, one
  // more, and several chunks.
  const std::vector<int64_t> sizes = {0, 1, 32768, 32769, 100003, 7};
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16};
  std::vector<Host> cpuGrads;
  std::vector<std::unique_ptr<Device>> gpuGrads;
  std::vector<Tensor> list;
  double cpuTotal = 0.0;
  for (unsigned i = 0; i < 70; ++i) {
    cpuGrads.push_back(
        random({sizes[i % sizes.size()]}, dtypes[i % 3], 200 + i, -2.0f, 2.0f));
    cpuTotal += cpu::sumOfSquares(cpuGrads.back());
  }
  for (const Host &h : cpuGrads) {
    gpuGrads.push_back(up(h));
    list.push_back(gpuGrads.back()->view);
  }
  auto total = floats(4); // Two device doubles.
  ASSERT_CUDA(cudaMemset(total->ptr, 0, 16));
  double *sums = static_cast<double *>(total->ptr);
  ASSERT_OK(cuda::multiTensorSumOfSquares(list, sums, stream));
  ASSERT_OK(cuda::multiTensorSumOfSquares(list, sums + 1, stream));
  double gpuTotals[2] = {0.0, 0.0};
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  ASSERT_CUDA(cudaMemcpy(gpuTotals, sums, 16, cudaMemcpyDeviceToHost));
  // Squares of floats are exact in f64; 1.9 M terms, in order on the
  // CPU and in chunks of 32 Ki then a tree on the GPU (the reasoning of
  // SumOfSquaresClipAndScale): 1e-12 relative. Deterministic: the same
  // bits twice.
  EXPECT_NEAR(gpuTotals[0], cpuTotal, 1e-12 * cpuTotal);
  EXPECT_EQ(gpuTotals[0], gpuTotals[1]);

  // The scale: the CPU's bits, on every tensor.
  ASSERT_OK(cuda::multiTensorScale(list, 0.37f, stream));
  for (size_t i = 0; i < cpuGrads.size(); ++i) {
    ASSERT_OK(cpu::scaleInPlace(cpuGrads[i], 0.37f));
    expectExact(down(*gpuGrads[i]), cpuGrads[i],
                "scaled tensor " + std::to_string(i));
  }
}

TEST_F(CudaKernels, UnscaleGradsMatchesTheCpu) {
  struct Case {
    DType dtype;
    std::vector<float> values;
    double scale;
    bool overflow;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case &c :
       {Case{DType::F16, {1.0f, -2.0f, 30000.0f, 0.5f, 0.0f}, 0.5, false},
        Case{DType::F16, {1.0f, 65504.0f, 3.0f}, 0.5, true},
        Case{DType::F32, {1.0f, inf, 3.0f}, 1024.0, true},
        Case{DType::BF16, {1.0f, std::nanf(""), 3.0f}, 8.0, true},
        Case{DType::BF16, {1.0f, 7.0f, -3.0f}, 8.0, false}}) {
    Host g({int64_t(c.values.size())}, c.dtype);
    g.set(c.values);
    auto gd = up(g);
    bool cpuOverflow = false;
    ASSERT_OK(cpu::unscaleGrads(g, c.scale, cpuOverflow));
    auto flag = floats(1);
    ASSERT_CUDA(cudaMemset(flag->ptr, 0, 4));
    ASSERT_OK(cuda::unscaleGrads(*gd, c.scale, static_cast<int *>(flag->ptr),
                                 stream));
    Host gpu = down(*gd);
    int gpuOverflow = 0;
    ASSERT_CUDA(cudaMemcpy(&gpuOverflow, flag->ptr, 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(cpuOverflow, c.overflow);
    EXPECT_EQ(gpuOverflow != 0, c.overflow) << name(c.dtype);
    std::vector<float> gv = gpu.values(), cv = g.values();
    for (size_t i = 0; i < gv.size(); ++i)
      if (!std::isnan(cv[i]))
        EXPECT_EQ(gv[i], cv[i]) << name(c.dtype) << " element " << i;
      else
        EXPECT_TRUE(std::isnan(gv[i]));
  }
}

//===----------------------------------------------------------------------===//
// Determinism
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

// Each MoE kernel on the inputs the CPU kernel had (the CPU's outputs of the
// previous stage), so that a difference shows in the kernel that makes it.
// The dispatch plan and the router's indices are integers: bit for bit.
// dysorted is one product rounded once: bit for bit. combine's y and the
// experts' dx sum in the CPU's order with separately rounded products and
// sums, so they differ from the CPU only in their inputs (none for y:
// elementwise tolerance, which covers a CPU build that fuses them).
class CudaMoe : public CudaKernels,
                public ::testing::WithParamInterface<DType> {};

TEST_P(CudaMoe, MatchesTheCpu) {
  DType t = GetParam();
  const int64_t T = 37, h = 48, E = 8, I = 40, k = 2;
  for (bool normalize : {true, false}) {
    SCOPED_TRACE(normalize ? "normalized" : "unnormalized");
    Host x = random({T, h}, t, 200), gate = random({E, h}, t, 201, -2, 2);
    Host w1 = random({E, I, h}, t, 202, -0.5f, 0.5f);
    Host w3 = random({E, I, h}, t, 203, -0.5f, 0.5f);
    Host w2 = random({E, h, I}, t, 204, -0.5f, 0.5f);
    auto xd = up(x), gated = up(gate), w1d = up(w1), w3d = up(w3), w2d = up(w2);

    Host logits({T, E}), weights({T, k}), indices({T, k}, DType::I32);
    ASSERT_OK(
        cpu::moeRouterForward(x, gate, k, normalize, logits, weights, indices));
    Device logitsD(logits.view), weightsD(weights.view), indicesD(indices.view);
    ASSERT_OK(cuda::moeRouterForward(*xd, *gated, k, normalize, logitsD,
                                     weightsD, indicesD, ctx, stream));
    expectClose(down(logitsD), logits, kF32Tolerance, "logits");
    expectExact(down(indicesD), indices, "indices");
    expectClose(down(weightsD), weights, kF32Tolerance, "weights");

    Host offsets({E + 1}, DType::I32), rowToken({T * k}, DType::I32),
        rowSlot({T * k}, DType::I32);
    ASSERT_OK(cpu::moeDispatchPlan(indices, E, offsets, rowToken, rowSlot));
    auto indicesU = up(indices);
    Device offsetsD(offsets.view), rowTokenD(rowToken.view),
        rowSlotD(rowSlot.view);
    ASSERT_OK(cuda::moeDispatchPlan(*indicesU, E, offsetsD, rowTokenD, rowSlotD,
                                    stream));
    expectExact(down(offsetsD), offsets, "offsets");
    expectExact(down(rowTokenD), rowToken, "rowToken");
    expectExact(down(rowSlotD), rowSlot, "rowSlot");

    Host h1({T * k, I}, t), h3({T * k, I}, t), ys({T * k, h}, t);
    ASSERT_OK(
        cpu::moeExpertsForward(x, w1, w3, w2, offsets, rowToken, h1, h3, ys));
    auto offsetsU = up(offsets), rowTokenU = up(rowToken),
         rowSlotU = up(rowSlot);
    Device h1D(h1.view), h3D(h3.view), ysD(ys.view);
    ASSERT_OK(cuda::moeExpertsForward(*xd, *w1d, *w3d, *w2d, *offsetsU,
                                      *rowTokenU, h1D, h3D, ysD, ctx, stream));
    expectClose(down(h1D), h1, kF32Tolerance, "h1");
    expectClose(down(h3D), h3, kF32Tolerance, "h3");
    expectClose(down(ysD), ys, kF32Tolerance, "ysorted");

    Host y({T, h}, t);
    ASSERT_OK(cpu::moeCombineForward(ys, weights, rowToken, rowSlot, y));
    auto ysU = up(ys), weightsU = up(weights);
    Device yD(y.view);
    ASSERT_OK(cuda::moeCombineForward(*ysU, *weightsU, *rowTokenU, *rowSlotU,
                                      yD, stream));
    expectClose(down(yD), y, kElementwiseTolerance, "y");

    Host dy = random({T, h}, t, 205);
    Host dys({T * k, h}, t), dweights({T, k});
    ASSERT_OK(cpu::moeCombineBackward(dy, ys, weights, rowToken, rowSlot, dys,
                                      dweights));
    auto dyU = up(dy);
    Device dysD(dys.view), dweightsD(dweights.view);
    ASSERT_OK(cuda::moeCombineBackward(*dyU, *ysU, *weightsU, *rowTokenU,
                                       *rowSlotU, dysD, dweightsD, stream));
    expectExact(down(dysD), dys, "dysorted");
    expectClose(down(dweightsD), dweights, kF32Tolerance, "dweights");

    Host dx({T, h}, t), dw1({E, I, h}, t), dw3({E, I, h}, t), dw2({E, h, I}, t);
    ASSERT_OK(cpu::moeExpertsBackward(dys, x, w1, w3, w2, offsets, rowToken, h1,
                                      h3, dx, dw1, dw3, dw2));
    auto dysU = up(dys), h1U = up(h1), h3U = up(h3);
    Device dxD(dx.view), dw1D(dw1.view), dw3D(dw3.view), dw2D(dw2.view);
    ASSERT_OK(cuda::moeExpertsBackward(*dysU, *xd, *w1d, *w3d, *w2d, *offsetsU,
                                       *rowTokenU, *h1U, *h3U, dxD, dw1D, dw3D,
                                       dw2D, ctx, stream));
    expectClose(down(dxD), dx, kBackwardTolerance, "dx");
    expectClose(down(dw1D), dw1, kBackwardTolerance, "dw1");
    expectClose(down(dw3D), dw3, kBackwardTolerance, "dw3");
    expectClose(down(dw2D), dw2, kBackwardTolerance, "dw2");

    Host dlogits({T, E});
    ASSERT_OK(
        cpu::moeRouterBackward(dweights, logits, indices, normalize, dlogits));
    auto dweightsU = up(dweights), logitsU = up(logits);
    Device dlogitsD(dlogits.view);
    ASSERT_OK(cuda::moeRouterBackward(*dweightsU, *logitsU, *indicesU,
                                      normalize, dlogitsD, stream));
    expectClose(down(dlogitsD), dlogits, kF32Tolerance, "dlogits");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMoe,
                         ::testing::Values(DType::F32, DType::BF16));

// Expert parallelism's row moves against the CPU kernels, bit for bit:
// the gather is a copy (signalling-NaN payloads too, which a copy through
// f32 would quieten); the scatter-add sums each token's rows in ascending
// row order in f32 and rounds once, so the sums agree exactly, with repeated
// tokens, tokens without rows (0) and no rows at all; the received plan is
// the CPU's integers, zero counts included. The device outputs start as
// NaNs, so an element left unwritten shows.
class CudaMoeRowMoves : public CudaKernels,
                        public ::testing::WithParamInterface<DType> {};

TEST_P(CudaMoeRowMoves, GatherRowsCopiesBits) {
  DType t = GetParam();
  const int64_t T = 7, h = 33;
  Host x = random({T, h}, t, 220);
  // A signalling NaN in row 3.
  if (t == DType::BF16)
    static_cast<uint16_t *>(x.view.data)[3 * h + 5] = 0x7f81;
  else
    x.view.i32()[3 * h + 5] = 0x7f800001;
  auto xd = up(x);
  // Tokens 2, 4 and 5 have no row; 3 has three.
  for (const std::vector<int32_t> &tokens :
       {std::vector<int32_t>{3, 3, 0, 6, 3, 1}, std::vector<int32_t>{}}) {
    int64_t n = int64_t(tokens.size());
    SCOPED_TRACE(std::to_string(n) + " rows");
    Host rowToken = ids({n}, tokens), rows({n, h}, t);
    ASSERT_OK(cpu::moeGatherRows(x, rowToken, rows));
    auto rowTokenD = up(rowToken);
    Device rowsD(rows.view);
    ASSERT_OK(cuda::moeGatherRows(*xd, *rowTokenD, rowsD, stream));
    expectExact(down(rowsD), rows, "rows");
  }
}

TEST_P(CudaMoeRowMoves, ScatterAddRowsSumsLikeTheCpu) {
  DType t = GetParam();
  const int64_t h = 33;
  struct Case {
    int64_t tokens;
    Host rowToken;
    DType rowsType;
  };
  std::vector<Case> cases;
  // Tokens 2, 4 and 5 without rows, 3 with three (out of order).
  cases.push_back({7, ids({6}, {3, 3, 0, 6, 3, 1}), t});
  // Many repeats; f32 rows into y of the parameter's dtype.
  cases.push_back({50, randomIds({300}, 50, 221), DType::F32});
  // No rows: y is all zeros.
  cases.push_back({5, ids({0}, {}), t});
  for (Case &c : cases) {
    int64_t n = c.rowToken.view.numel();
    SCOPED_TRACE(std::to_string(n) + " rows onto " + std::to_string(c.tokens) +
                 " tokens");
    // Magnitudes that differ widely, so that the order and the rounding of
    // the sums show.
    Host rows = random({n, h}, c.rowsType, 222, -1e3f, 1e3f);
    for (int64_t i = 0; i < rows.view.numel(); i += 3)
      cpu::storeElement(rows.view, i, cpu::loadElement(rows.view, i) * 1e-4f);
    Host y({c.tokens, h}, t);
    ASSERT_OK(cpu::moeScatterAddRows(rows, c.rowToken, y));
    auto rowsD = up(rows), rowTokenD = up(c.rowToken);
    Device yD(y.view);
    ASSERT_OK(cuda::moeScatterAddRows(*rowsD, *rowTokenD, yD, stream));
    expectExact(down(yD), y, "y");
  }
}

TEST_P(CudaMoeRowMoves, ReceivedPlanIsTheCpus) {
  // Three sources, two local experts (counts[s * 2 + l]); zero counts, all
  // zeros, one source.
  std::vector<std::pair<int64_t, std::vector<int64_t>>> plans = {
      {2, {3, 0, 2, 4, 0, 1}},
      {2, {0, 0, 0, 0, 0, 0}},
      {1, {5}},
      {4, {1, 0, 0, 2, 0, 3, 1, 0}}};
  for (const auto &[local, counts] : plans) {
    int64_t total = 0;
    for (int64_t c : counts)
      total += c;
    SCOPED_TRACE(std::to_string(total) + " rows");
    Host offsets({local + 1}, DType::I32), rowToken({total}, DType::I32);
    ASSERT_OK(cpu::moeReceivedPlan(counts, local, offsets, rowToken));
    Device offsetsD(offsets.view), rowTokenD(rowToken.view);
    ASSERT_OK(
        cuda::moeReceivedPlan(counts, local, offsetsD, rowTokenD, stream));
    expectExact(down(offsetsD), offsets, "offsets");
    expectExact(down(rowTokenD), rowToken, "rowToken");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMoeRowMoves,
                         ::testing::Values(DType::F32, DType::BF16));

// The load-balancing loss (output_router_logits): the router statistics
// (counts exact, probability sums within the f32 rule), the loss and the
// statistics' gradient, and dlogits, against the CPU kernels, for three
// layers' routers.
TEST_F(CudaKernels, LoadBalancingLossMatchesTheCpu) {
  const int64_t T = 37, h = 48, E = 8, k = 2, L = 3;
  std::vector<Host> logits, stats;
  std::vector<std::unique_ptr<Device>> statsD;
  for (int64_t l = 0; l < L; ++l) {
    Host x = random({T, h}, DType::F32, 300 + unsigned(l));
    Host gate = random({E, h}, DType::F32, 310 + unsigned(l), -2, 2);
    Host weights({T, k}), indices({T, k}, DType::I32);
    logits.emplace_back(std::vector<int64_t>{T, E});
    ASSERT_OK(cpu::moeRouterForward(x, gate, k, true, logits.back(), weights,
                                    indices));
    stats.emplace_back(std::vector<int64_t>{2, E});
    ASSERT_OK(cpu::moeRouterStats(logits.back(), indices, stats.back()));
    // The GPU kernel turns its logits workspace into probabilities.
    auto logitsU = up(logits.back()), indicesU = up(indices);
    statsD.push_back(std::make_unique<Device>(stats.back().view));
    ASSERT_OK(
        cuda::moeRouterStats(*logitsU, *indicesU, *statsD.back(), stream));
    Host got = down(*statsD.back());
    std::vector<float> g = got.values(), c = stats.back().values();
    for (int64_t e = 0; e < E; ++e)
      EXPECT_EQ(g[size_t(e)], c[size_t(e)]) << "count of expert " << e;
    expectClose(got, stats.back(), kF32Tolerance, "probability sums");
  }
  std::vector<Tensor> cpuStats, gpuStats;
  for (size_t l = 0; l < stats.size(); ++l) {
    cpuStats.push_back(stats[l].view);
    gpuStats.push_back(statsD[l]->view);
  }
  Host loss = random({}, DType::F32, 320), result({}), dstats({2, E});
  ASSERT_OK(cpu::moeLoadBalancingLoss(loss, cpuStats, k, 0.02, result));
  auto lossU = up(loss);
  Device resultD(result.view), dstatsD(dstats.view);
  ASSERT_OK(
      cuda::moeLoadBalancingLoss(*lossU, gpuStats, k, 0.02, resultD, stream));
  expectClose(down(resultD), result, kF32Tolerance, "loss");
  ASSERT_OK(cpu::moeLoadBalancingLossBackward(loss, cpuStats, k, 0.02, dstats));
  ASSERT_OK(cuda::moeLoadBalancingLossBackward(*lossU, gpuStats, k, 0.02,
                                               dstatsD, stream));
  expectClose(down(dstatsD), dstats, kF32Tolerance, "dstats");
  Host dlogits({T, E});
  ASSERT_OK(cpu::moeRouterStatsBackward(dstats, logits[0], dlogits));
  auto dstatsU = up(dstats), logitsU = up(logits[0]);
  Device dlogitsD(dlogits.view);
  ASSERT_OK(cuda::moeRouterStatsBackward(*dstatsU, *logitsU, dlogitsD, stream));
  expectClose(down(dlogitsD), dlogits, kF32Tolerance, "dlogits");
}

// Ties (a zero gate: every probability 1/E) go to the lower experts; an
// expert without rows gets zero gradients; two runs give the same bits.
TEST_F(CudaKernels, MoeTiesEmptyExpertsAndReproducibility) {
  const int64_t T = 5, h = 16, E = 4, I = 8, k = 2;
  Host x = random({T, h}, DType::F32, 210), gate({E, h});
  gate.set(std::vector<float>(size_t(E * h), 0.0f));
  auto xd = up(x), gated = up(gate);
  Host weights({T, k}), indices({T, k}, DType::I32);
  Device logitsD(Host({T, E}).view), weightsD(weights.view),
      indicesD(indices.view);
  ASSERT_OK(cuda::moeRouterForward(*xd, *gated, k, true, logitsD, weightsD,
                                   indicesD, ctx, stream));
  Host gotIndices = down(indicesD), gotWeights = down(weightsD);
  for (int64_t i = 0; i < T * k; ++i) {
    EXPECT_EQ(gotIndices.view.i32()[i], int32_t(i % k)) << i;
    EXPECT_EQ(gotWeights.values()[size_t(i)], 0.5f) << i;
  }

  // Experts 0 and 1 have every row, 2 and 3 none.
  Host w1 = random({E, I, h}, DType::F32, 211),
       w3 = random({E, I, h}, DType::F32, 212);
  Host w2 = random({E, h, I}, DType::F32, 213);
  Host offsets({E + 1}, DType::I32), rowToken({T * k}, DType::I32),
      rowSlot({T * k}, DType::I32);
  ASSERT_OK(cpu::moeDispatchPlan(gotIndices, E, offsets, rowToken, rowSlot));
  Host h1({T * k, I}), h3({T * k, I}), ys({T * k, h});
  ASSERT_OK(
      cpu::moeExpertsForward(x, w1, w3, w2, offsets, rowToken, h1, h3, ys));
  Host dys = random({T * k, h}, DType::F32, 214);
  auto w1d = up(w1), w3d = up(w3), w2d = up(w2), offsetsU = up(offsets),
       rowTokenU = up(rowToken), h1U = up(h1), h3U = up(h3), dysU = up(dys);
  auto run = [&](std::vector<Host> &results) {
    Device dx(x.view), dw1(w1.view), dw3(w3.view), dw2(w2.view);
    ASSERT_OK(cuda::moeExpertsBackward(*dysU, *xd, *w1d, *w3d, *w2d, *offsetsU,
                                       *rowTokenU, *h1U, *h3U, dx, dw1, dw3,
                                       dw2, ctx, stream));
    for (const Device *d : {&dx, &dw1, &dw3, &dw2})
      results.push_back(down(*d));
  };
  std::vector<Host> first, second;
  run(first);
  run(second);
  for (size_t i = 0; i < first.size(); ++i)
    expectExact(second[i], first[i], "result " + std::to_string(i));
  for (size_t i = 1; i < first.size(); ++i) {
    std::vector<float> v = first[i].values();
    size_t block = v.size() / size_t(E);
    for (size_t j = 2 * block; j < v.size(); ++j)
      ASSERT_EQ(v[j], 0.0f) << "gradient " << i << " element " << j;
  }
}

TEST_F(CudaKernels, RunsAreBitReproducible) {
  Host x = random({4, 64, 256}, DType::BF16, 60);
  Host dy = random({4, 64, 256}, DType::BF16, 61);
  Host kv = random({4, 64, 128}, DType::BF16, 62);
  Host w = random({256}, DType::F32, 63), b = random({256}, DType::F32, 64);
  Host tokens = randomIds({4, 64}, 100, 65);
  auto xd = up(x), dyd = up(dy), kvd = up(kv), wd = up(w), bd = up(b);
  auto tokensD = up(tokens);
  auto run = [&](std::vector<Host> &results) {
    Device dx(x.view), dw(w.view), db(b.view), dbias(b.view);
    Device dtable(Host({100, 256}, DType::BF16).view);
    Device dq(x.view), dk(kv.view), dv(kv.view);
    ASSERT_OK(cuda::layerNormBackward(*xd, *wd, *dyd, 1e-5f, nullptr, dx, dw,
                                      db, stream));
    ASSERT_OK(cuda::linearGradBias(*dyd, dbias, stream));
    ASSERT_OK(cuda::embeddingBackward(*dyd, *tokensD, dtable, stream));
    ASSERT_OK(cuda::attentionBackward(*xd, *kvd, *kvd, *dyd, *dyd, 8, 4,
                                      nullptr, dq, dk, dv, ctx, stream));
    for (const Device *d : {&dx, &dw, &db, &dbias, &dtable, &dq, &dk, &dv})
      results.push_back(down(*d));
  };
  std::vector<Host> first, second;
  run(first);
  run(second);
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i)
    expectExact(second[i], first[i], "result " + std::to_string(i));
}

} // namespace
