//===- Optimizer.cu - Adam, clipping and loss scaling on the GPU ----------===//

#include "cuda/Optimizer.h"

#include "cuda/Device.cuh"

namespace zeroc::cuda {

namespace {

constexpr int kAdamTensorsPerLaunch = 64;
constexpr int64_t kAdamChunk = 4096;
constexpr int kSumThreads = 1024;
constexpr int64_t kMaxSumBlocks = 1024;
// The multi-tensor sum of squares and scale (ZEROC_CUDA_CLIP=grid): fixed
// chunks of kListChunk elements, one block each.
constexpr int kListTensors = 64;
constexpr int64_t kListChunk = int64_t(1) << 15;
constexpr unsigned kMaxListBlocks = 4096;

// The tensors of one launch, passed by value as the kernel's parameter
// (under the classic 4 KiB limit). Tensor t owns chunks [firstChunk[t],
// firstChunk[t + 1]) of kAdamChunk elements.
struct AdamLaunch {
  const void *grad[kAdamTensorsPerLaunch];
  float *master[kAdamTensorsPerLaunch];
  float *expAvg[kAdamTensorsPerLaunch];
  float *expAvgSq[kAdamTensorsPerLaunch];
  void *param16[kAdamTensorsPerLaunch];
  int64_t numel[kAdamTensorsPerLaunch];
  int64_t firstChunk[kAdamTensorsPerLaunch + 1];
  DType gradType[kAdamTensorsPerLaunch];
  DType paramType[kAdamTensorsPerLaunch];
  int count;
};
static_assert(sizeof(AdamLaunch) + sizeof(cpu::AdamStepConstants) <= 4096,
              "Adam kernel parameters exceed 4 KiB");

// cpu::adamElement with each operation rounded on its own: no contraction
// into fused multiply-adds, so the result is the CPU's.
__device__ __forceinline__ void
adamElementOnDevice(const cpu::AdamStepConstants &c, float g, float &p,
                    float &m, float &v) {
  if (c.adamw)
    p = __fsub_rn(p, __fmul_rn(__fmul_rn(c.lr, c.decay), p));
  else
    g = __fadd_rn(g, __fmul_rn(c.decay, p));
  m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.oneMinusBeta1, g));
  v = __fadd_rn(__fmul_rn(c.beta2, v),
                __fmul_rn(__fmul_rn(c.oneMinusBeta2, g), g));
  float denominator =
      __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.rootCorrection2), c.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(c.stepSize, m), denominator));
}

__global__ void adamKernel(AdamLaunch launch, cpu::AdamStepConstants c) {
  int64_t chunks = launch.firstChunk[launch.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    // The last tensor whose first chunk is at most `chunk` (empty tensors
    // own no chunk and are passed over).
    int lo = 0, hi = launch.count - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (launch.firstChunk[mid] <= chunk)
        lo = mid;
      else
        hi = mid - 1;
    }
    int t = lo;
    int64_t begin = (chunk - launch.firstChunk[t]) * kAdamChunk;
    int64_t end = launch.numel[t] < begin + kAdamChunk ? launch.numel[t]
                                                       : begin + kAdamChunk;
    float *master = launch.master[t], *m = launch.expAvg[t],
          *v = launch.expAvgSq[t];
    for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
      float p = master[e], mv = m[e], vv = v[e];
      adamElementOnDevice(c, loadAsFloat(launch.grad[t], launch.gradType[t], e),
                          p, mv, vv);
      master[e] = p;
      m[e] = mv;
      v[e] = vv;
      if (launch.param16[t])
        storeFromFloat(launch.param16[t], launch.paramType[t], e, p);
    }
  }
}

Status launchAdam(const cpu::AdamSettings &settings, int64_t step,
                  const std::vector<AdamTensors> &tensors,
                  cudaStream_t stream) {
  cpu::AdamStepConstants c = cpu::adamStepConstants(settings, step);
  for (size_t first = 0; first < tensors.size();
       first += kAdamTensorsPerLaunch) {
    AdamLaunch launch = {};
    launch.count =
        int(std::min<size_t>(kAdamTensorsPerLaunch, tensors.size() - first));
    for (int t = 0; t < launch.count; ++t) {
      const AdamTensors &x = tensors[first + t];
      launch.grad[t] = x.grad.data;
      launch.gradType[t] = x.grad.dtype;
      launch.master[t] = x.master.f32();
      launch.expAvg[t] = x.expAvg.f32();
      launch.expAvgSq[t] = x.expAvgSq.f32();
      launch.param16[t] = x.param16 ? x.param16->data : nullptr;
      launch.paramType[t] = x.param16 ? x.param16->dtype : DType::F32;
      launch.numel[t] = x.grad.numel();
      launch.firstChunk[t + 1] =
          launch.firstChunk[t] +
          (launch.numel[t] + kAdamChunk - 1) / kAdamChunk;
    }
    int64_t chunks = launch.firstChunk[launch.count];
    if (chunks == 0)
      continue;
    adamKernel<<<gridFor(chunks, 1), kThreads, 0, stream>>>(launch, c);
    ZEROC_RETURN_IF_ERROR(launchStatus("adam_update"));
  }
  return {};
}

// FusedLamb's part 1: the moments, and per block the sums of p^2 and u^2.
__global__ void lambMomentsKernel(const void *g, DType type, float *p, float *m,
                                  float *v, int64_t n, cpu::AdamStepConstants c,
                                  double *partials) {
  double weight = 0.0, update = 0.0;
  for (int64_t e = globalThread(); e < n; e += globalThreads()) {
    float x = loadAsFloat(g, type, e);
    float me =
        __fadd_rn(__fmul_rn(c.beta1, m[e]), __fmul_rn(c.oneMinusBeta1, x));
    float ve = __fadd_rn(__fmul_rn(c.beta2, v[e]),
                         __fmul_rn(__fmul_rn(c.oneMinusBeta2, x), x));
    m[e] = me;
    v[e] = ve;
    float u = __fadd_rn(__fdiv_rn(me, __fadd_rn(__fsqrt_rn(ve), c.eps)),
                        __fmul_rn(c.decay, p[e]));
    weight += double(p[e]) * double(p[e]);
    update += double(u) * double(u);
  }
  weight = blockSum(weight);
  update = blockSum(update);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = weight;
    partials[2 * blockIdx.x + 1] = update;
  }
}

__global__ void addPairsKernel(const double *partials, int64_t count,
                               double *sums) {
  double weight = 0.0, update = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    weight += partials[2 * i];
    update += partials[2 * i + 1];
  }
  weight = blockSum(weight);
  update = blockSum(update);
  if (threadIdx.x == 0) {
    sums[0] += weight;
    sums[1] += update;
  }
}

// FusedLamb's part 3: p -= (step size x trust ratio) u.
__global__ void lambApplyKernel(float *p, const float *m, const float *v,
                                int64_t n, float decay, float eps, float scale,
                                void *param16, DType paramType) {
  for (int64_t e = globalThread(); e < n; e += globalThreads()) {
    float u = __fadd_rn(__fdiv_rn(m[e], __fadd_rn(__fsqrt_rn(v[e]), eps)),
                        __fmul_rn(decay, p[e]));
    float pe = __fsub_rn(p[e], __fmul_rn(scale, u));
    p[e] = pe;
    if (param16)
      storeFromFloat(param16, paramType, e, pe);
  }
}

__global__ void squaresKernel(const void *g, DType type, int64_t n,
                              double *partials) {
  double sum = 0.0;
  for (int64_t e = globalThread(); e < n; e += globalThreads()) {
    double x = loadAsFloat(g, type, e);
    sum += x * x;
  }
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = sum;
}

__global__ void addPartialsKernel(const double *partials, int64_t count,
                                  double *total) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    sum += partials[i];
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    *total += sum;
}

__global__ void clipKernel(void *g, DType type, int64_t n,
                           const double *totalSumOfSquares, double maxNorm) {
  double norm = sqrt(*totalSumOfSquares);
  float coefficient = isnan(norm) ? __int_as_float(0x7fc00000)
                                  : float(maxNorm / fmax(norm, maxNorm));
  for (int64_t e = globalThread(); e < n; e += globalThreads())
    storeFromFloat(g, type, e, loadAsFloat(g, type, e) * coefficient);
}

__global__ void scaleKernel(void *t, DType type, int64_t n, float factor) {
  for (int64_t e = globalThread(); e < n; e += globalThreads())
    storeFromFloat(t, type, e, loadAsFloat(t, type, e) * factor);
}

__global__ void unscaleKernel(void *g, DType type, int64_t n, float scale,
                              int *overflow) {
  bool bad = false;
  for (int64_t e = globalThread(); e < n; e += globalThreads()) {
    float x = loadAsFloat(g, type, e) / scale;
    storeFromFloat(g, type, e, x);
    bad |= !isfinite(roundToStorage(x, type));
  }
  if (bad)
    *overflow = 1;
}

// The tensors of one multi-tensor launch: tensor t owns chunks
// [firstChunk[t], firstChunk[t + 1]) of kListChunk elements.
struct TensorList {
  void *data[kListTensors];
  int64_t numel[kListTensors];
  int64_t firstChunk[kListTensors + 1];
  DType dtype[kListTensors];
  int count;
};
static_assert(sizeof(TensorList) + 64 <= 4096,
              "tensor list kernel parameters exceed 4 KiB");

// The tensor that owns `chunk` and the chunk's elements [begin, end) in it.
__device__ __forceinline__ int findChunk(const TensorList &list, int64_t chunk,
                                         int64_t &begin, int64_t &end) {
  int lo = 0, hi = list.count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (list.firstChunk[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  begin = (chunk - list.firstChunk[lo]) * kListChunk;
  end =
      list.numel[lo] < begin + kListChunk ? list.numel[lo] : begin + kListChunk;
  return lo;
}

// partials[c] = the sum of g^2 over chunk c, each chunk by one block in a
// fixed order (thread i takes elements i, i + blockDim.x, ...; then the
// block reduction): the same bits whatever the grid.
__global__ void listSquaresKernel(TensorList list, double *partials) {
  int64_t chunks = list.firstChunk[list.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int64_t begin, end;
    int t = findChunk(list, chunk, begin, end);
    double sum = 0.0;
    for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
      double x = loadAsFloat(list.data[t], list.dtype[t], e);
      sum += x * x;
    }
    sum = blockSum(sum);
    if (threadIdx.x == 0)
      partials[chunk] = sum;
  }
}

// scaleKernel on every tensor of the list: the same bits.
__global__ void listScaleKernel(TensorList list, float factor) {
  int64_t chunks = list.firstChunk[list.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int64_t begin, end;
    int t = findChunk(list, chunk, begin, end);
    for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x)
      storeFromFloat(list.data[t], list.dtype[t], e,
                     loadAsFloat(list.data[t], list.dtype[t], e) * factor);
  }
}

// The launches of a tensor list, kListTensors at a time: each list and the
// index of its first chunk among all the lists' chunks.
std::vector<std::pair<TensorList, int64_t>>
tensorLists(const std::vector<Tensor> &tensors, int64_t &chunks) {
  std::vector<std::pair<TensorList, int64_t>> lists;
  chunks = 0;
  for (size_t first = 0; first < tensors.size(); first += kListTensors) {
    TensorList list = {};
    list.count = int(std::min<size_t>(kListTensors, tensors.size() - first));
    for (int t = 0; t < list.count; ++t) {
      const Tensor &x = tensors[first + t];
      list.data[t] = x.data;
      list.dtype[t] = x.dtype;
      list.numel[t] = x.numel();
      list.firstChunk[t + 1] =
          list.firstChunk[t] + (list.numel[t] + kListChunk - 1) / kListChunk;
    }
    if (list.firstChunk[list.count] == 0)
      continue;
    lists.push_back({list, chunks});
    chunks += list.firstChunk[list.count];
  }
  return lists;
}

unsigned listBlocks(const TensorList &list) {
  return unsigned(
      std::min<int64_t>(list.firstChunk[list.count], kMaxListBlocks));
}
} // namespace

Status adamUpdate(const cpu::AdamSettings &settings, int64_t step,
                  const Tensor &grad, const Tensor &master,
                  const Tensor &expAvg, const Tensor &expAvgSq,
                  const Tensor *param16, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(
      cpu::checkAdamUpdate(step, grad, master, expAvg, expAvgSq, param16));
  return launchAdam(settings, step, {{grad, master, expAvg, expAvgSq, param16}},
                    stream);
}

Status multiTensorAdamUpdate(const cpu::AdamSettings &settings, int64_t step,
                             const std::vector<AdamTensors> &tensors,
                             cudaStream_t stream) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamTensors &x = tensors[i];
    if (Status s = cpu::checkAdamUpdate(step, x.grad, x.master, x.expAvg,
                                        x.expAvgSq, x.param16);
        !s.ok())
      return {s.error + " (tensor " + std::to_string(i) + " of " +
              std::to_string(tensors.size()) + ")"};
  }
  return launchAdam(settings, step, tensors, stream);
}

Status lambMoments(const cpu::AdamSettings &settings, const Tensor &grad,
                   const Tensor &master, const Tensor &expAvg,
                   const Tensor &expAvgSq, double *sums, cudaStream_t stream) {
  const char *op = "lamb_moments";
  ZEROC_RETURN_IF_ERROR(
      cpu::checkAdamUpdate(1, grad, master, expAvg, expAvgSq, nullptr));
  int64_t n = grad.numel();
  if (n == 0)
    return {};
  unsigned blocks = gridFor(n, kThreads * 16, kMaxSumBlocks);
  Scratch partials;
  ZEROC_RETURN_IF_ERROR(partials.allocate(op, size_t(blocks) * 16, stream));
  lambMomentsKernel<<<blocks, kThreads, 0, stream>>>(
      grad.data, grad.dtype, master.f32(), expAvg.f32(), expAvgSq.f32(), n,
      cpu::adamStepConstants(settings, 1), partials.get<double>());
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  addPairsKernel<<<1, kSumThreads, 0, stream>>>(partials.get<double>(), blocks,
                                                sums);
  return launchStatus(op);
}

Status lambApply(const cpu::AdamSettings &settings, int64_t step,
                 float trustRatio, const Tensor &master, const Tensor &expAvg,
                 const Tensor &expAvgSq, const Tensor *param16,
                 cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(
      cpu::checkAdamUpdate(step, master, master, expAvg, expAvgSq, param16));
  int64_t n = master.numel();
  if (n == 0)
    return {};
  cpu::AdamStepConstants c = cpu::adamStepConstants(settings, step);
  float scale = cpu::lambStepSize(settings, step) * trustRatio;
  lambApplyKernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(
      master.f32(), expAvg.f32(), expAvgSq.f32(), n, c.decay, c.eps, scale,
      param16 ? param16->data : nullptr, param16 ? param16->dtype : DType::F32);
  return launchStatus("lamb_apply");
}

Status sumOfSquares(const Tensor &grad, double *sum, cudaStream_t stream) {
  const char *op = "sum_of_squares";
  ZEROC_RETURN_IF_ERROR(cpu::firstError({cpu::checkFloat(op, "grad", grad)}));
  int64_t n = grad.numel();
  if (n == 0)
    return {};
  // The block count depends on n only: the same order for the same shape.
  unsigned blocks = gridFor(n, kThreads * 16, kMaxSumBlocks);
  Scratch partials;
  ZEROC_RETURN_IF_ERROR(partials.allocate(op, size_t(blocks) * 8, stream));
  squaresKernel<<<blocks, kThreads, 0, stream>>>(grad.data, grad.dtype, n,
                                                 partials.get<double>());
  ZEROC_RETURN_IF_ERROR(launchStatus(op));
  addPartialsKernel<<<1, kSumThreads, 0, stream>>>(partials.get<double>(),
                                                   blocks, sum);
  return launchStatus(op);
}

Status multiTensorSumOfSquares(const std::vector<Tensor> &grads, double *sum,
                               cudaStream_t stream) {
  const char *op = "sum_of_squares";
  for (size_t i = 0; i < grads.size(); ++i)
    if (Status s = cpu::firstError({cpu::checkFloat(op, "grad", grads[i])});
        !s.ok())
      return {s.error + " (tensor " + std::to_string(i) + " of " +
              std::to_string(grads.size()) + ")"};
  int64_t chunks = 0;
  auto lists = tensorLists(grads, chunks);
  if (chunks == 0)
    return {};
  Scratch partials;
  ZEROC_RETURN_IF_ERROR(partials.allocate(op, size_t(chunks) * 8, stream));
  for (const auto &[list, at] : lists) {
    listSquaresKernel<<<listBlocks(list), kThreads, 0, stream>>>(
        list, partials.get<double>() + at);
    ZEROC_RETURN_IF_ERROR(launchStatus(op));
  }
  addPartialsKernel<<<1, kSumThreads, 0, stream>>>(partials.get<double>(),
                                                   chunks, sum);
  return launchStatus(op);
}

Status multiTensorScale(const std::vector<Tensor> &tensors, float factor,
                        cudaStream_t stream) {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (Status s = cpu::checkScaleInPlace(tensors[i]); !s.ok())
      return {s.error + " (tensor " + std::to_string(i) + " of " +
              std::to_string(tensors.size()) + ")"};
  int64_t chunks = 0;
  for (const auto &[list, at] : tensorLists(tensors, chunks)) {
    (void)at;
    listScaleKernel<<<listBlocks(list), kThreads, 0, stream>>>(list, factor);
    ZEROC_RETURN_IF_ERROR(launchStatus("scale"));
  }
  return {};
}

Status clipGradNormInPlace(const Tensor &grad, const double *totalSumOfSquares,
                           double maxNorm, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkScaleInPlace(grad));
  int64_t n = grad.numel();
  if (n == 0)
    return {};
  clipKernel<<<gridFor(n), kThreads, 0, stream>>>(grad.data, grad.dtype, n,
                                                  totalSumOfSquares, maxNorm);
  return launchStatus("clip_grad_norm");
}

Status scaleInPlace(const Tensor &t, float factor, cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkScaleInPlace(t));
  int64_t n = t.numel();
  if (n == 0)
    return {};
  scaleKernel<<<gridFor(n), kThreads, 0, stream>>>(t.data, t.dtype, n, factor);
  return launchStatus("scale");
}

Status unscaleGrads(const Tensor &grad, double lossScale, int *overflow,
                    cudaStream_t stream) {
  ZEROC_RETURN_IF_ERROR(cpu::checkUnscaleGrads(grad, lossScale));
  int64_t n = grad.numel();
  if (n == 0)
    return {};
  unscaleKernel<<<gridFor(n), kThreads, 0, stream>>>(
      grad.data, grad.dtype, n, float(lossScale), overflow);
  return launchStatus("unscale_grads");
}

} // namespace zeroc::cuda
