//===- Calibrate.cpp - zerorun --calibrate: measure this machine ----------===//

#include "Calibrate.h"

#include "comm/Communicator.h"
#include "cpu/Optimizer.h"
#include "cpu/Threads.h"
#include "exec/Device.h"
#include "exec/ExecError.h"
#include "exec/MachineLoad.h"
#include "exec/PreparedPhase.h"
#include "exec/StreamScheduler.h"
#include "memory/MemoryCounter.h"
#include "zeroc/Config/Cluster.h"
#include "zeroc/Cost/CostModel.h"
#include "zeroc/Plan/AttentionFlops.h"
#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/Json.h"
#include "zeroc/Support/Median.h"
#include "zeroc/Support/Steadiness.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace zeroc::runtime {

namespace {

using Clock = std::chrono::steady_clock;

/// What each further piece of a piece-wise run adds: `split` timed `pieces`
/// pieces where `whole` timed their sum as one (never below 0).
double furtherPieceTime(double whole, double split, int64_t pieces) {
  return std::max(0.0, (split - whole) / double(pieces - 1));
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// How many sets of `setBytes` a pool of twice the last-level cache (`llc`
/// bytes) holds, at least two: each call's operands the next set, as a
/// step's come from memory.
size_t coldPoolSets(double setBytes, int64_t llc) {
  return size_t(std::max(2.0, std::ceil(2.0 * double(llc) / setBytes)));
}

/// Passes over the plans' own shapes (--shapes; Support/Median.h): each
/// figure the median of its passes.
constexpr int kShapePasses = 3;

class Calibrator {
public:
  Calibrator(Communicator &comm, Device &dev) : comm(comm), dev(dev) {}

  /// The median seconds of one call of `fn` (after a warm-up call), over
  /// batches of calls lasting at least `minBatch` seconds each; the slowest
  /// rank's. Every rank makes the same number of calls at the same time
  /// (the count the slowest rank needs), so that no rank measures while
  /// another, done early, spins in the communicator's wait on a shared
  /// core.
  double time(const std::function<void()> &fn, double minBatch = 0.02,
              int batches = 5) {
    return timeCollective(
        [&] {
          fn();
          dev.synchronize();
        },
        minBatch, batches);
  }

  /// time() without the device synchronization: for collectives, which
  /// need every rank to make the same calls anyway.
  double timeCollective(const std::function<void()> &fn, double minBatch,
                        int batches) {
    barrier();
    fn();
    auto t0 = Clock::now();
    fn();
    double once = slowest(seconds(t0, Clock::now()));
    int calls =
        int(std::min(1000.0, std::ceil(minBatch / std::max(once, 1e-7))));
    calls = int(slowest(double(std::max(calls, 1))));
    std::vector<double> perCall;
    for (int b = 0; b < batches; ++b) {
      barrier();
      auto start = Clock::now();
      for (int i = 0; i < calls; ++i)
        fn();
      perCall.push_back(seconds(start, Clock::now()) / calls);
    }
    std::sort(perCall.begin(), perCall.end());
    return slowest(perCall[perCall.size() / 2]);
  }

  double slowest(double v) {
    return comm.size() > 1 ? comm.allReduceScalar(v, ScalarOp::Max,
                                                  OpLabel{-1, "calibrate"})
                           : v;
  }

  /// `v` summed over the ranks.
  double sum(double v) {
    return comm.size() > 1 ? comm.allReduceScalar(v, ScalarOp::Sum,
                                                  OpLabel{-1, "calibrate"})
                           : v;
  }

  void barrier() {
    if (comm.size() > 1) {
      CommHandle h = comm.barrier(OpLabel{-1, "calibrate"});
      comm.wait(h);
    }
  }

  /// A device buffer of `n` elements of `dtype` filled from `fill` (f32
  /// values, converted by the device's cast).
  Tensor buffer(std::vector<int64_t> shape, DType dtype,
                const std::function<float(std::mt19937 &)> &fill) {
    Tensor t{nullptr, dtype, std::move(shape)};
    int64_t n = t.numel();
    std::vector<float> host(static_cast<size_t>(n));
    // Past 4M elements the first 4M repeat: a plan's logits (GPT-2's
    // 8192 x 50257) would take seconds of the generator per buffer, and a
    // GEMM's speed does not depend on which values repeat.
    const size_t drawn = std::min<size_t>(host.size(), size_t(1) << 22);
    for (size_t i = 0; i < drawn; ++i)
      host[i] = fill(rng);
    for (size_t i = drawn; i < host.size(); ++i)
      host[i] = host[i - drawn];
    Tensor f32{dev.allocate(n * 4, true), DType::F32, t.shape};
    keep.push_back({static_cast<char *>(f32.data), true});
    dev.fromHost(f32.data, host.data(), n * 4);
    if (dtype == DType::F32)
      return f32;
    t.data = dev.allocate(t.bytes(), true);
    keep.push_back({static_cast<char *>(t.data), true});
    Status s = dev.castTensor(f32, t);
    // The f32 staging goes at once (a plan's logits in bf16 would hold 3x
    // their bytes otherwise).
    dev.synchronize();
    dev.release(static_cast<char *>(f32.data), true);
    keep.erase(keep.end() - 2);
    if (!s.ok())
      t.data = nullptr;
    return t;
  }

  /// A device copy of `bytes` at `src`, kept until released.
  char *copyOf(const void *src, int64_t bytes) {
    auto *copy = static_cast<char *>(dev.allocate(bytes, true));
    keep.push_back({copy, true});
    dev.copy(copy, src, bytes);
    return copy;
  }

  /// Releases the buffers made since keep.size() was `mark`.
  void releaseSince(size_t mark) {
    while (keep.size() > mark) {
      dev.release(keep.back().first, keep.back().second);
      keep.pop_back();
    }
  }

  ~Calibrator() { releaseSince(0); }

  Communicator &comm;
  Device &dev;
  std::mt19937 rng{12345};
  std::vector<std::pair<char *, bool>> keep;
};

/// The seconds a thread takes more to read a chunk another thread
/// (another core, with `threads` busy threads on as many cores) just
/// wrote than a chunk it wrote itself, and the bytes read so, over
/// `duration` seconds of rounds: each round every thread writes its own
/// 256 KiB chunk (an L2-sized operand), reads its neighbour's, then writes
/// and reads its own.
std::pair<double, double> handoffSample(int threads, double duration) {
  constexpr size_t kFloats = 64 * 1024;
  const size_t n = static_cast<size_t>(threads);
  std::vector<std::vector<float>> chunks(n, std::vector<float>(kFloats));
  std::atomic<int> arrived{0}, generation{0};
  std::atomic<bool> stop{false};
  auto barrier = [&] {
    int g = generation.load();
    if (arrived.fetch_add(1) + 1 == threads) {
      arrived.store(0);
      generation.fetch_add(1);
    } else {
      while (generation.load() == g)
        std::this_thread::yield();
    }
  };
  auto write = [](std::vector<float> &c, float v) {
    for (size_t i = 0; i < c.size(); ++i)
      c[i] = v + float(i & 1023);
  };
  auto read = [](const std::vector<float> &c) {
    float acc[8] = {};
    for (size_t i = 0; i < c.size(); i += 8)
      for (size_t j = 0; j < 8; ++j)
        acc[j] += c[i + j];
    float sum = 0;
    for (float a : acc)
      sum += a;
    return sum;
  };
  std::vector<double> remote(n, 0.0), local(n, 0.0);
  std::vector<float> sink(n, 0.0f);
  std::atomic<int64_t> rounds{0};
  const auto start = Clock::now();
  auto body = [&](int t) {
    for (int round = 0;; ++round) {
      barrier();
      if (stop.load())
        return;
      write(chunks[size_t(t)], float(round));
      barrier();
      auto a = Clock::now();
      sink[size_t(t)] += read(chunks[size_t((t + 1) % threads)]);
      auto b = Clock::now();
      barrier();
      write(chunks[size_t(t)], float(round) + 0.5f);
      auto c = Clock::now();
      sink[size_t(t)] += read(chunks[size_t(t)]);
      auto d = Clock::now();
      remote[size_t(t)] += seconds(a, b);
      local[size_t(t)] += seconds(c, d);
      if (t == 0) {
        rounds.fetch_add(1);
        if (seconds(start, d) >= duration)
          stop.store(true);
      }
    }
  };
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t)
    others.emplace_back(body, t);
  body(0);
  for (std::thread &t : others)
    t.join();
  double extra = 0;
  for (int t = 0; t < threads; ++t)
    extra += remote[size_t(t)] - local[size_t(t)];
  double bytes = double(rounds.load()) * threads * kFloats * sizeof(float);
  volatile float keep = 0;
  for (float v : sink)
    keep = keep + v;
  return {extra, bytes};
}

PlanOp modelOp(OpKind kind, size_t inputs, size_t outputs) {
  PlanOp op;
  op.kind = kind;
  op.attrs = defaultAttrs(kind);
  for (size_t i = 0; i < inputs; ++i)
    op.inputs.push_back(int64_t(i));
  for (size_t i = 0; i < outputs; ++i)
    op.outputs.push_back(int64_t(inputs + i));
  return op;
}

float normal(std::mt19937 &r) {
  return std::normal_distribution<float>(0.0f, 1.0f)(r);
}
/// The last-level cache's size in bytes (sysfs, then sysconf); 32 MiB
/// where neither says.
int64_t lastLevelCacheBytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" +
                    std::to_string(i) + "/size");
    std::string text;
    if (!(f >> text) || text.empty())
      continue;
    int64_t v = std::strtoll(text.c_str(), nullptr, 10);
    char unit = text.back();
    v *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
    best = std::max(best, v);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best <= 0)
    best = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  return best > 0 ? best : int64_t(32) << 20;
}

float activation(std::mt19937 &r) {
  return std::normal_distribution<float>(0.0f, 0.25f)(r);
}
float small(std::mt19937 &r) {
  return std::normal_distribution<float>(0.0f, 0.02f)(r);
}

/// t = a + x / B fitted to (x, t) by least squares on the relative error
/// (weights 1 / t^2), so that the small sizes fix the fixed time and the
/// large ones the bandwidth; B <= 0 when the fit does not increase.
std::pair<double, double> fitLine(const std::vector<double> &x,
                                  const std::vector<double> &t) {
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double w = 1.0 / (t[i] * t[i]);
    sw += w;
    sx += w * x[i];
    st += w * t[i];
    sxx += w * x[i] * x[i];
    sxt += w * x[i] * t[i];
  }
  double slope = (sw * sxt - sx * st) / (sw * sxx - sx * sx);
  double a = (st - slope * sx) / sw;
  return {std::max(a, 0.0), slope > 0 ? 1.0 / slope : 0.0};
}

/// What each further gradient of a packed stage-3 reduce-scatter adds
/// beyond its bytes, over `n` ranks, as the executor runs one
/// (exec/Collectives.cpp): the gradients packed into the ranks' blocks, one
/// averaged reduce-scatter, each gradient's shard accumulated. 32 gradients
/// of 1024 f32 elements against 2 of 16K, over 30.
double packedGradientTime(Calibrator &cal, int64_t n) {
  const int64_t total = 32 * 1024;
  auto layoutOf = [&](int64_t parts) {
    std::vector<ParamGradient> params(size_t(parts),
                                      ParamGradient{{total / parts, n}, 4});
    WorkspaceLayout ws;
    ParamReduceScatterParts p = reduceScatterParamParts(ws, params);
    return std::make_tuple(params, p, ws.size());
  };
  auto [params2, parts2, bytes2] = layoutOf(2);
  auto [params32, parts32, bytes32] = layoutOf(32);
  Tensor grads = cal.buffer({total}, DType::F32, small);
  Tensor shards = cal.buffer({total}, DType::F32, small);
  Tensor scratch =
      cal.buffer({std::max(bytes2, bytes32) / 4 + 1}, DType::F32, small);
  char *ws = static_cast<char *>(scratch.data);
  auto bucket = [&](const std::vector<ParamGradient> &params,
                    const ParamReduceScatterParts &parts) {
    std::vector<const void *> from;
    int64_t each = params.front().layout.numel;
    for (size_t i = 0; i < params.size(); ++i)
      from.push_back(static_cast<char *>(grads.data) + int64_t(i) * each * 4);
    packParamGradients(cal.dev, ws + parts.send, parts, params, from);
    CommHandle h = cal.comm.reduceScatter(
        ws + parts.send, std::vector<int64_t>(size_t(n), parts.blockElements),
        ws + parts.parts.front().recv, DType::F32, true,
        OpLabel{-1, "calibrate"});
    cal.comm.wait(h);
    int64_t s = params.front().layout.shardSize();
    for (size_t i = 0; i < params.size(); ++i)
      (void)cal.dev.accumulate(
          exec::slice(shards, int64_t(i) * s, s),
          Tensor{ws + parts.parts[i].recv, DType::F32, {s}});
  };
  double whole = cal.timeCollective([&] { bucket(params2, parts2); }, 0.01, 3);
  double split =
      cal.timeCollective([&] { bucket(params32, parts32); }, 0.01, 3);
  return std::max(0.0, (split - whole) / 30.0);
}

} // namespace

std::vector<PlanGemm> planGemms(const Plan &plan) {
  std::set<PlanGemm> found;
  for (const PlanPhase &phase : plan.phases) {
    std::map<int64_t, const PlanValue *> values;
    for (const PlanValue &v : phase.values)
      values[v.id] = &v;
    auto valueOf = [&](int64_t id) -> const PlanValue * {
      auto it = values.find(id);
      return it == values.end() ? nullptr : it->second;
    };
    for (const PlanOp &op : phase.ops) {
      if (op.inputs.size() < 2 || op.outputs.empty())
        continue;
      const PlanValue *a = valueOf(op.inputs[0]), *b = valueOf(op.inputs[1]),
                      *y = valueOf(op.outputs[0]);
      if (!a || !b || !y)
        continue;
      if (std::optional<LinearGeometry> g =
              linearGeometry(op.kind, a->shape, y->shape))
        found.insert({op.kind, *g, a->dtype, b->dtype, y->dtype});
    }
  }
  return {found.begin(), found.end()};
}

std::vector<PlanAttention> planAttentions(const Plan &plan) {
  std::set<PlanAttention> found;
  for (const PlanPhase &phase : plan.phases)
    for (const PlanOp &op : phase.ops) {
      const auto *attrs = std::get_if<AttentionAttrs>(&op.attrs);
      if (op.kind != OpKind::CausalAttention || !attrs ||
          attrs->kernel != AttentionKernel::Flash || op.inputs.empty())
        continue;
      const PlanValue *q = phase.findValue(op.inputs[0]);
      if (!q)
        continue;
      if (std::optional<AttentionGeometry> g = attentionGeometry(
              q->shape, attrs->numHeads, attrs->numKvHeads, attrs->window))
        found.insert({*g, q->dtype});
    }
  return {found.begin(), found.end()};
}

int calibrate(Communicator &comm, Device &dev, const std::string &output,
              const std::string &scratchDir, const std::vector<PlanGemm> &gemms,
              const std::string &gemmsFrom,
              const std::vector<PlanAttention> &attentions) {
  bool root = comm.rank() == 0;
  auto say = [&](const char *fmt, auto... args) {
    if (root) {
      std::printf(fmt, args...);
      std::fflush(stdout);
    }
  };
  Calibrator cal(comm, dev);
  Cluster c;
  ClusterCalibration &k = c.calibration;
  // calibration.handoff_gb_per_s: CPU ranks of several kernel threads.
  struct {
    double extra = 0, bytes = 0;
    int samples = 0;
  } handoff;
  auto sampleHandoff = [&] {
    if (dev.name() != "cpu" || cpu::threads() < 2)
      return;
    cal.barrier();
    auto [extra, bytes] = handoffSample(cpu::threads(), 0.15);
    handoff.extra += extra;
    handoff.bytes += bytes;
    ++handoff.samples;
  };
  char host[256] = "unknown-host";
  gethostname(host, sizeof host - 1);
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string measured =
      std::string("measured on ") + host + " at " + date +
      " by zerorun --calibrate (" + std::to_string(comm.size()) + " rank" +
      (comm.size() == 1 ? "" : "s") + " at once, " + dev.name() + ")";
  auto source = [&](const std::string &key, const std::string &what) {
    c.sources[key] = measured + ": " + what;
  };
  say("zerorun --calibrate: %d rank(s) on %s (%s)\n", comm.size(), host,
      dev.name().c_str());
  // What else runs on the machine meanwhile (below, before the file is
  // written): the figures describe the machine under that load.
  const std::optional<CpuTimes> cpuBefore = machineCpuTimes();
  const double ownBefore = processCpuSeconds();
  const auto wallBefore = Clock::now();

  // A warm-up before the first figure: GEMMs for a quarter of a second,
  // untimed. The first class timed without it (f32 small, 2 ranks of a
  // 2-core machine) measured 52 GFLOP/s in one run and 90 in the next,
  // and 92-100 in three runs after it (clock ramp, first touches, the
  // ranks' start-up).
  {
    const int64_t n = 256;
    Tensor a =
        cal.buffer({n, n}, DType::F32, [](std::mt19937 &) { return 0.01f; });
    Tensor y =
        cal.buffer({n, n}, DType::F32, [](std::mt19937 &) { return 0.0f; });
    PlanOp op = modelOp(OpKind::Linear, 2, 1);
    std::vector<Tensor> in = {a, a}, out = {y};
    auto until = Clock::now() + std::chrono::milliseconds(250);
    while (Clock::now() < until)
      (void)dev.modelOp(op, in, out, StepContext{}, nullptr);
    dev.synchronize();
    cal.barrier();
  }

  // calibration.steadiness: a probe of about 2 ms (GEMMs every rank runs
  // at once) timed again and again through the calibration, at the same
  // points on every rank (the timing is collective). Every other figure is
  // a median of repeats: the probes say how often and by how much the
  // machine ran slower than that meanwhile.
  struct {
    Tensor a, y;
    PlanOp op = modelOp(OpKind::Linear, 2, 1);
    int calls = 0;
  } probe;
  {
    const int64_t n = dev.hostAddressable() ? 128 : 1024;
    probe.a =
        cal.buffer({n, n}, DType::F32, [](std::mt19937 &) { return 0.01f; });
    probe.y =
        cal.buffer({n, n}, DType::F32, [](std::mt19937 &) { return 0.0f; });
  }
  auto probeCall = [&] {
    std::vector<Tensor> in = {probe.a, probe.a}, out = {probe.y};
    (void)dev.modelOp(probe.op, in, out, StepContext{}, nullptr);
  };
  probe.calls = int(cal.slowest(double(
      std::max(1L, std::lround(2e-3 / std::max(cal.time(probeCall), 1e-9))))));
  // At most one probe every kProbeEvery seconds: the call sites below come
  // thick in some sections (each collective size) and thin in others
  // (each GEMM class, each kernel); spaced in time, the probes that ran in
  // a spell are the share of the calibration's time that did. Every rank
  // decides alike, on the latest rank's clock. `always`: the first and
  // the last.
  constexpr double kProbeEvery = 0.5;
  double lastProbe = 0;
  auto sampleSteadiness = [&](bool always = false) {
    if (!always && cal.slowest(seconds(wallBefore, Clock::now()) - lastProbe) <
                       kProbeEvery)
      return;
    cal.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < probe.calls; ++i)
      probeCall();
    dev.synchronize();
    const double t = cal.slowest(seconds(t0, Clock::now()));
    lastProbe = seconds(wallBefore, Clock::now());
    k.steadiness.emplace_back(lastProbe, t);
  };

  sampleSteadiness(true);
  sampleHandoff();
  // GEMMs: linear, linear_grad_input and linear_grad_weight on square
  // [n, n] operands, each size class, each dtype the kernels take.
  const auto &dtypeNames = ClusterCalibration::kMatmulDTypeNames;
  const DType dtypes[3] = {DType::F32, DType::BF16, DType::F16};
  const char *classNames[ClusterCalibration::kMatmulClasses] = {
      "small", "medium", "large", "xlarge"};
  // A GPU also gets the 4096 class (a CPU would take minutes on it); its
  // memory-bound kernels get inputs large enough that a launch and the
  // synchronization after it are a small part of the time.
  const bool gpu = !dev.hostAddressable();
  const int64_t llc = lastLevelCacheBytes();
  const int classes = gpu ? ClusterCalibration::kMatmulClasses : 3;
  double best[3] = {0, 0, 0};
  for (int d = 0; d < 3; ++d) {
    sampleSteadiness();
    sampleHandoff();
    for (int s = 0; s < classes; ++s) {
      sampleSteadiness();
      int64_t n = int64_t(
          std::lround(std::cbrt(ClusterCalibration::kMatmulClassFlops[s] / 2)));
      Tensor a = cal.buffer({n, n}, dtypes[d], small);
      Tensor w = cal.buffer({n, n}, dtypes[d], small);
      Tensor y = cal.buffer({n, n}, dtypes[d], small);
      if (!a.data || !w.data || !y.data)
        break;
      // The three kinds in ClusterCalibration::matmulKind's order.
      using C = ClusterCalibration;
      double total = 0, each[C::kMatmulKinds] = {};
      bool ok = true;
      for (int i = 0; i < C::kMatmulKinds && ok; ++i) {
        const OpKind kind = *parseOpKind(C::kMatmulKindNames[i]);
        PlanOp op = modelOp(kind, 2, 1);
        std::vector<Tensor> in = {a, w}, out = {y};
        if (kind == OpKind::LinearGradWeight)
          in = {a, a}, out = {w};
        std::optional<Status> st =
            dev.modelOp(op, in, out, StepContext{}, nullptr);
        if (!st || !st->ok()) {
          ok = false;
          break;
        }
        each[i] = cal.time(
            [&] { (void)dev.modelOp(op, in, out, StepContext{}, nullptr); },
            s >= 2 ? 0.05 : 0.02, s >= 2 ? 3 : 5);
        total += each[i];
      }
      if (!ok)
        break;
      const double flops = 2.0 * double(n) * double(n) * double(n);
      double rate = 3 * flops / total;
      k.matmul[d][s] = rate;
      // Each kind's own rate (the forward's epilogue weighs on small sizes).
      for (int i = 0; i < C::kMatmulKinds; ++i) {
        const std::string kind(C::kMatmulKindNames[i]);
        k.matmulKind[d][i][s] = flops / each[i];
        source(std::string("calibration.matmul_kind_tflops.") + dtypeNames[d] +
                   "." + kind + "." + classNames[s],
               kind + " alone on [" + std::to_string(n) + ", " +
                   std::to_string(n) + "] operands");
      }
      best[d] = std::max(best[d], rate);
      source(std::string("calibration.matmul_tflops.") + dtypeNames[d] + "." +
                 classNames[s],
             "linear, linear_grad_input, linear_grad_weight on [" +
                 std::to_string(n) + ", " + std::to_string(n) + "] operands");
      say("  matmul %-4s %-6s %8.2f GFLOP/s\n", dtypeNames[d], classNames[s],
          rate / 1e9);
    }
    // The largest class measured again with an output width of n - 1:
    // rows whose byte length is not a multiple of 16 (GPT-2's logits).
    int top = classes - 1;
    while (top >= 0 && k.matmul[d][top] <= 0)
      --top;
    if (top < 0)
      continue;
    const int64_t n = int64_t(
        std::lround(std::cbrt(ClusterCalibration::kMatmulClassFlops[top] / 2)));
    Tensor x = cal.buffer({n, n}, dtypes[d], small);
    Tensor w = cal.buffer({n - 1, n}, dtypes[d], small);
    Tensor y = cal.buffer({n, n - 1}, dtypes[d], small);
    if (!x.data || !w.data || !y.data)
      continue;
    double total = 0;
    for (OpKind kind :
         {OpKind::Linear, OpKind::LinearGradInput, OpKind::LinearGradWeight}) {
      PlanOp op = modelOp(kind, 2, 1);
      // linear: x [n, n] w^T -> y [n, n - 1]; grad_input: dy [n, n - 1] w
      // -> dx [n, n]; grad_weight: dy^T x -> dw [n - 1, n].
      std::vector<Tensor> in = {x, w}, out = {y};
      if (kind == OpKind::LinearGradInput)
        in = {y, w}, out = {x};
      else if (kind == OpKind::LinearGradWeight)
        in = {y, x}, out = {w};
      std::optional<Status> st =
          dev.modelOp(op, in, out, StepContext{}, nullptr);
      if (!st || !st->ok()) {
        total = 0;
        break;
      }
      total += cal.time(
          [&] { (void)dev.modelOp(op, in, out, StepContext{}, nullptr); }, 0.05,
          3);
    }
    if (total <= 0)
      continue;
    k.matmulMisaligned[d] =
        3 * 2.0 * double(n) * double(n) * double(n - 1) / total;
    source(std::string("calibration.matmul_tflops.") + dtypeNames[d] +
               ".misaligned",
           "linear, linear_grad_input, linear_grad_weight on [" +
               std::to_string(n) + ", " + std::to_string(n) + "] x [" +
               std::to_string(n - 1) + ", " + std::to_string(n) +
               "] operands (rows of " + std::to_string(n - 1) +
               " elements: not a multiple of 16 bytes)");
    say("  matmul %-4s %-6s %8.2f GFLOP/s (%.2f of %s)\n", dtypeNames[d], "odd",
        k.matmulMisaligned[d] / 1e9, k.matmulMisaligned[d] / k.matmul[d][top],
        classNames[top]);
  }

  // The plans' own GEMMs (--shapes), each kind alone on its operands as
  // the op has them: linear x [rows, in] W^T -> y [rows, out];
  // linear_grad_input dy [rows, out] W -> dx [rows, in]; linear_grad_weight
  // dy^T x -> dW [out, in]. The classes above interpolate between squares;
  // a model's products are not square (GPT-2 350M's MLP: 8192 x 1024 x
  // 4096 ran faster than that interpolation on an H100).
  //
  // In kShapePasses passes over the shapes, each in the same order, each
  // figure the median of its passes (Support/Median.h): the development
  // VM's vCPUs ran 1.3-2x slower for seconds at a time, from outside the
  // VM, and a calibration that timed each shape once, shape after shape,
  // took a run of neighbours at half speed (five small linear_grad_weight
  // shapes at 0.51-0.67 of the others in run 45's third two-rank
  // calibration, four linear_grad_input at half in run 44's second;
  // bench/RESULTS.md, "Run 46"). A pass lasts longer than such a spell.
  if (!gemms.empty())
    say("  GEMMs of %s:\n", gemmsFrom.c_str());
  auto gemmDims = [](const LinearGeometry &s) {
    return std::to_string(s.rows) + " x " + std::to_string(s.in) + " -> " +
           std::to_string(s.out);
  };
  // Every rank times the same GEMMs in the same order (the votes and the
  // timings are collective).
  auto timeGemm = [&](size_t gi,
                      int pass) -> std::optional<std::vector<double>> {
    const PlanGemm &g = gemms[gi];
    if (gi % 4 == 0)
      sampleSteadiness();
    if (pass == 0 && gi % 8 == 0)
      sampleHandoff();
    using C = ClusterCalibration;
    const LinearGeometry &s = g.geometry;
    const size_t mark = cal.keep.size();
    auto operand = [&](std::vector<int64_t> shape, DType dtype) {
      return cal.buffer(std::move(shape), dtype, small);
    };
    const char *kindName = opKindName(g.kind);
    const std::string dims = gemmDims(s);
    std::vector<Tensor> in, out;
    PlanOp op = modelOp(g.kind, 2, 1);
    std::string why; // Why this rank cannot time it; empty: it can.
    try {
      switch (g.kind) {
      case OpKind::Linear:
        in = {operand({s.rows, s.in}, g.first),
              operand({s.out, s.in}, g.second)};
        out = {operand({s.rows, s.out}, g.result)};
        break;
      case OpKind::LinearGradInput:
        in = {operand({s.rows, s.out}, g.first),
              operand({s.out, s.in}, g.second)};
        out = {operand({s.rows, s.in}, g.result)};
        break;
      default: // linear_grad_weight
        in = {operand({s.rows, s.out}, g.first),
              operand({s.rows, s.in}, g.second)};
        out = {operand({s.out, s.in}, g.result)};
        break;
      }
      for (const std::vector<Tensor> *ts : {&in, &out})
        for (const Tensor &t : *ts)
          if (!t.data && why.empty())
            why = "the device could not convert an operand to " +
                  std::string(dtypeName(t.dtype));
      if (why.empty()) {
        std::optional<Status> st =
            dev.modelOp(op, in, out, StepContext{}, nullptr);
        if (!st)
          why = "the device has no such kernel";
        else if (!st->ok())
          why = st->error;
      }
    } catch (const std::exception &e) { // Allocation failures throw.
      why = e.what();
    }
    // Every rank times it or none does (the timing's calls are collective).
    if (cal.slowest(why.empty() ? 0.0 : 1.0) > 0) {
      say("  gemm %-18s %-4s %s: not timed (%s)\n", kindName,
          dtypeName(g.result).data(), dims.c_str(),
          why.empty() ? "another rank could not run it" : why.c_str());
      cal.releaseSince(mark);
      return std::nullopt;
    }
    // Per pass one batch of 50 ms for a large GEMM, the median of three of
    // 20 ms for the others (before the passes: three and five).
    const bool large = s.flops() >= C::kMatmulClassFlops[2];
    std::vector<double> figures = {cal.time(
        [&] { (void)dev.modelOp(op, in, out, StepContext{}, nullptr); },
        large ? 0.05 : 0.02, large ? 1 : 3)};
    // On a CPU again from memory: every call's operands the next set of a
    // pool of twice the last-level cache (copies of the first), as a
    // step's weights come, touched last a whole pass before.
    if (!gpu) {
      double setBytes = 0;
      for (const std::vector<Tensor> *ts : {&in, &out})
        for (const Tensor &t : *ts)
          setBytes += double(t.bytes());
      const size_t sets = coldPoolSets(setBytes, llc);
      std::vector<std::vector<Tensor>> ins(sets, in), outs(sets, out);
      for (size_t i = 1; i < sets; ++i)
        for (auto *ts : {&ins[i], &outs[i]})
          for (Tensor &t : *ts)
            t.data = cal.copyOf(t.data, t.bytes());
      size_t next = 0;
      figures.push_back(cal.time(
          [&] {
            const size_t i = next++ % sets;
            (void)dev.modelOp(op, ins[i], outs[i], StepContext{}, nullptr);
          },
          large ? 0.05 : 0.02, large ? 1 : 3));
    }
    cal.releaseSince(mark);
    return figures;
  };
  const std::vector<std::vector<double>> gemmSeconds =
      medianOverPasses(gemms.size(), kShapePasses, timeGemm);
  for (size_t gi = 0; gi < gemms.size(); ++gi) {
    if (gemmSeconds[gi].empty())
      continue; // Not timed (said above).
    using C = ClusterCalibration;
    const PlanGemm &g = gemms[gi];
    const LinearGeometry &s = g.geometry;
    const std::string dims = gemmDims(s);
    const double seconds = gemmSeconds[gi][0];
    const double coldSeconds =
        gemmSeconds[gi].size() > 1 ? gemmSeconds[gi][1] : 0.0;
    const double rate = s.flops() / seconds;
    const C::MatmulShapeKey key{C::matmulIndex(g.result),
                                C::matmulKindIndex(opKindName(g.kind)), s};
    k.matmulShape[key] = rate;
    if (coldSeconds > 0)
      k.matmulShapeCold[key] = s.flops() / coldSeconds;
    say("  gemm %-18s %-4s %s: %8.2f GFLOP/s, %8.2f from memory (classes: "
        "%.2f)\n",
        opKindName(g.kind), dtypeName(g.result).data(), dims.c_str(),
        rate / 1e9, coldSeconds > 0 ? s.flops() / coldSeconds / 1e9 : 0.0,
        calibratedMatmulRate(k, g.result, s.flops(), g.kind) / 1e9);
  }
  if (!k.matmulShape.empty())
    c.sources["calibration.matmul_shapes"] =
        measured + ": each linear-class GEMM of " + gemmsFrom +
        " alone on its own shapes, each figure the median of " +
        std::to_string(kShapePasses) + " passes over the shapes" +
        (k.matmulShapeCold.empty()
             ? std::string()
             : "; tflops on the same operands call after call (in cache), "
               "cold_tflops on the next set of a pool of twice the " +
                   std::to_string(llc >> 20) +
                   " MiB last-level cache each call (from memory)");

  // The flash forward and backward on `g` in `dt`: their FLOP rates (as
  // the plans count the FLOPs), or why no rank times them.
  struct AttentionRates {
    double forward = 0, backward = 0;
    std::string why;
  };
  auto timeAttention = [&](const AttentionGeometry &g, DType dt,
                           int batches = 5) {
    AttentionRates r;
    const size_t mark = cal.keep.size();
    const std::vector<int64_t> qShape = {g.batch, g.seq, g.heads * g.headDim},
                               kvShape = {g.batch, g.seq,
                                          g.kvHeads * g.headDim};
    AttentionAttrs attrs;
    attrs.numHeads = g.heads;
    attrs.numKvHeads = g.kvHeads;
    attrs.window = g.window;
    attrs.kernel = AttentionKernel::Flash;
    PlanOp fwd = modelOp(OpKind::CausalAttention, 3, 2);
    fwd.attrs = attrs;
    PlanOp bwd = modelOp(OpKind::CausalAttentionBackward, 6, 3);
    bwd.attrs = attrs;
    std::vector<Tensor> fin, fout, bin, bout;
    // Only the allocations and a first run can fail on one rank: the vote
    // and the timing below are collective, and every rank makes them.
    try {
      Tensor q = cal.buffer(qShape, dt, normal),
             kk = cal.buffer(kvShape, dt, normal),
             v = cal.buffer(kvShape, dt, normal),
             o = cal.buffer(qShape, dt, normal),
             dout = cal.buffer(qShape, dt, small),
             lse = cal.buffer({g.batch, g.heads, g.seq}, DType::F32, small),
             dq = cal.buffer(qShape, dt, small),
             dk = cal.buffer(kvShape, dt, small),
             dv = cal.buffer(kvShape, dt, small);
      fin = {q, kk, v};
      fout = {o, lse};
      bin = {q, kk, v, o, dout, lse};
      bout = {dq, dk, dv};
      for (const Tensor &t : {q, kk, v, o, dout, lse, dq, dk, dv})
        if (!t.data && r.why.empty())
          r.why = "the device could not convert an operand to " +
                  std::string(dtypeName(t.dtype));
      std::optional<Status> st;
      if (r.why.empty())
        st = dev.modelOp(fwd, fin, fout, StepContext{}, nullptr);
      if (r.why.empty() && st && st->ok())
        st = dev.modelOp(bwd, bin, bout, StepContext{}, nullptr);
      if (r.why.empty())
        r.why = !st         ? "the device has no such kernel"
                : !st->ok() ? st->error
                            : "";
    } catch (const std::exception &e) { // Allocation failures throw.
      r.why = e.what();
    }
    // Every rank times it or none does.
    if (cal.slowest(r.why.empty() ? 0.0 : 1.0) > 0) {
      if (r.why.empty())
        r.why = "another rank could not run it";
      cal.releaseSince(mark);
      return r;
    }
    // Each direction timed on its own: the forward's fixed costs per item
    // weigh more against its FLOPs than the backward's (tiny Llama at 2
    // ranks: the forward took twice the combined rate's price, the
    // backward 0.94 of it; bench/RESULTS.md, run 22).
    double tf = cal.time(
        [&] { (void)dev.modelOp(fwd, fin, fout, StepContext{}, nullptr); },
        0.02, batches);
    double tb = cal.time(
        [&] { (void)dev.modelOp(bwd, bin, bout, StepContext{}, nullptr); },
        0.02, batches);
    int64_t scores = attentionScores(g.batch, g.seq, g.heads, g.window);
    r.forward = double(attentionForwardFlops(scores, g.headDim)) / tf;
    r.backward = double(attentionBackwardFlops(scores, g.headDim, true)) / tb;
    cal.releaseSince(mark);
    return r;
  };
  // The flash forward and backward at two classes
  // (ClusterCalibration::attentionShape), the FLOPs counted as the plans
  // count them (Plan/AttentionFlops.h): a GPT-2-like head layout (head_dim
  // 64; sequence 256, 4 heads, f32 on a CPU; batch 4, sequence 1024, 12
  // heads, bf16 on a GPU) and a small one, where the kernel's fixed costs
  // per item weigh more.
  auto attention = [&](bool smallClass) {
    const AttentionGeometry g =
        ClusterCalibration::attentionShape(gpu, smallClass);
    AttentionRates r = timeAttention(g, gpu ? DType::BF16 : DType::F32);
    if (!r.why.empty()) {
      say("  %-20s not timed (%s)\n",
          smallClass ? "attention small" : "attention", r.why.c_str());
      return;
    }
    (smallClass ? k.attentionSmall : k.attention) = r.forward;
    (smallClass ? k.attentionBackwardSmall : k.attentionBackward) = r.backward;
    const std::string what =
        "[" + std::to_string(g.batch) + ", " + std::to_string(g.seq) +
        "] tokens, " + std::to_string(g.heads) + " heads of " +
        std::to_string(g.headDim) + ", " + (gpu ? "bf16" : "f32") +
        "; FLOPs as the plans count them (the full score square)";
    const std::string cls = smallClass ? "_small" : "";
    source("calibration.attention" + cls + "_tflops",
           "flash causal_attention (the forward alone), " + what);
    source("calibration.attention_backward" + cls + "_tflops",
           "flash causal_attention_backward alone, " + what);
    say("  %-20s %8.2f GFLOP/s forward, %8.2f backward\n",
        smallClass ? "attention small" : "attention", r.forward / 1e9,
        r.backward / 1e9);
  };
  attention(false);
  attention(true);
  // The plans' own attention (--shapes), each direction on its shapes, in
  // passes as the GEMMs' (the median of three batches a pass).
  if (!attentions.empty())
    say("  attention of %s:\n", gemmsFrom.c_str());
  std::vector<std::string> attentionNotTimed(attentions.size());
  const std::vector<std::vector<double>> attentionRates = medianOverPasses(
      attentions.size(), kShapePasses,
      [&](size_t ai, int) -> std::optional<std::vector<double>> {
        if (ai % 4 == 0)
          sampleSteadiness();
        AttentionRates r =
            timeAttention(attentions[ai].geometry, attentions[ai].dtype, 3);
        if (!r.why.empty()) {
          attentionNotTimed[ai] = r.why;
          return std::nullopt;
        }
        return std::vector<double>{r.forward, r.backward};
      });
  for (size_t ai = 0; ai < attentions.size(); ++ai) {
    const PlanAttention &a = attentions[ai];
    const AttentionGeometry &g = a.geometry;
    std::string dims = "[" + std::to_string(g.batch) + ", " +
                       std::to_string(g.seq) + "] tokens, " +
                       std::to_string(g.heads) + " heads (" +
                       std::to_string(g.kvHeads) + " for keys and values) of " +
                       std::to_string(g.headDim) +
                       (g.window ? ", window " + std::to_string(g.window) : "");
    if (attentionRates[ai].empty()) {
      say("  attention %-4s %s: not timed (%s)\n", dtypeName(a.dtype).data(),
          dims.c_str(), attentionNotTimed[ai].c_str());
      continue;
    }
    AttentionRates r;
    r.forward = attentionRates[ai][0];
    r.backward = attentionRates[ai][1];
    int d = ClusterCalibration::matmulIndex(a.dtype);
    k.attentionByShape[{d, false, g}] = r.forward;
    k.attentionByShape[{d, true, g}] = r.backward;
    say("  attention %-4s %s: %8.2f GFLOP/s forward, %8.2f backward "
        "(classes: %.2f, %.2f)\n",
        dtypeName(a.dtype).data(), dims.c_str(), r.forward / 1e9,
        r.backward / 1e9, calibratedAttentionRate(k, g.itemWork(), false) / 1e9,
        calibratedAttentionRate(k, g.itemWork(), true) / 1e9);
  }
  if (!k.attentionByShape.empty())
    c.sources["calibration.attention_shapes"] =
        measured + ": each flash causal_attention of " + gemmsFrom +
        " on its own shapes, the forward and the backward alone, each "
        "figure the median of " +
        std::to_string(kShapePasses) + " passes over the shapes";

  // Memory-bound kernels on activation-like inputs, [64, 1024] f32 drawn
  // ([16384, 1024] on a GPU) from N(0, 0.25), the activations of layers
  // initialised with std 0.02 (GELU's and SiLU's speed depended on the
  // magnitude of their inputs while the CPU kernels called libm's tanh and
  // exp; cpu/VectorMath.h's are branch-free). On a CPU a [64, 1024] operand
  // (256 KiB) would stay in the core's L2 from one call to the next, which a
  // step's operands do not (its other ops pass many megabytes through the
  // caches in between): each call there takes its inputs from a pool of twice
  // the last-level cache and writes into another, in turn (rotate() below). On
  // a GPU one operand is already larger than the L2.
  // Which table a memory-bound kernel's rate goes to: operands from a pool
  // of twice the last-level cache, below the parallel threshold (one
  // thread, in cache), or in the last-level cache (a pool of four, reused).
  enum class Table { Pooled, Serial, Hot };
  // A memory-bound kernel's rate (its bytes over `t`) in `table`.
  auto recordRate = [&](Table table, const char *name, double bytes, double t,
                        const std::string &what) {
    sampleSteadiness();
    if (t <= 0)
      return;
    (table == Table::Serial ? k.serialKernelBandwidth
     : table == Table::Hot  ? k.kernelHotBandwidth
                            : k.kernelBandwidth)[name] = bytes / t;
    source(std::string(
               table == Table::Serial ? "calibration.serial_kernel_gb_per_s."
               : table == Table::Hot  ? "calibration.kernel_hot_gb_per_s."
                                      : "calibration.kernel_gb_per_s.") +
               name,
           what);
    say("  %-20s %8.2f GB/s%s\n", name, bytes / t / 1e9,
        table == Table::Serial ? " (one thread)"
        : table == Table::Hot  ? " (in cache)"
                               : "");
  };
  // `actRows` rows of 1024 into `table`.
  auto memoryBound = [&](const int64_t actRows, const Table table) {
    const bool serial = table == Table::Serial, hot = table == Table::Hot;
    const std::vector<int64_t> act = {actRows, 1024};
    const double actBytes = double(actRows) * 1024 * 4;
    const size_t poolSize =
        gpu || serial || hot
            ? 4
            : size_t(std::max<int64_t>(4, 2 * llc / int64_t(actBytes)));
    std::vector<Tensor> inPool, outPool;
    for (size_t i = 0; i < poolSize; ++i) {
      inPool.push_back(cal.buffer(act, DType::F32, activation));
      outPool.push_back(cal.buffer(act, DType::F32, activation));
    }
    size_t nextIn = 0, nextOut = 0;
    // The next `ins` inputs and `outs` outputs of the pools.
    auto rotate = [&](size_t ins, size_t outs, std::vector<Tensor> &in,
                      std::vector<Tensor> &out) {
      in.clear();
      out.clear();
      for (size_t i = 0; i < ins; ++i)
        in.push_back(inPool[nextIn++ % poolSize]);
      for (size_t i = 0; i < outs; ++i)
        out.push_back(outPool[nextOut++ % poolSize]);
    };
    const std::string actShape =
        "[" + std::to_string(actRows) + ", 1024] f32" +
        (gpu      ? std::string()
         : serial ? ": " + std::to_string(actRows * 1024) +
                        " elements, below the kernels' parallel threshold of " +
                        std::to_string(cpu::kParallelMinWork) +
                        " (one thread), in cache"
         : hot ? ", each call's operands the next of a pool of 4 (" +
                     std::to_string(int64_t(8 * actBytes) >> 10) +
                     " KiB in all: in the " + std::to_string(llc >> 20) +
                     " MiB last-level cache)"
               : ", each call's operands the next of a pool of " +
                     std::to_string(poolSize) + " (twice the " +
                     std::to_string(llc >> 20) + " MiB last-level cache)");
    // Times `op` on operands from the pools: `ins` activations and `outs`
    // activations, then `arrange(in, out)` places them among the op's
    // fixed operands.
    using Arrange =
        std::function<void(std::vector<Tensor> &, std::vector<Tensor> &)>;
    auto timeOp = [&](const PlanOp &op, size_t ins, size_t outs,
                      const Arrange &arrange) -> double {
      std::vector<Tensor> in, out;
      auto operands = [&] {
        rotate(ins, outs, in, out);
        if (arrange)
          arrange(in, out);
      };
      operands();
      std::optional<Status> st =
          dev.modelOp(op, in, out, StepContext{}, nullptr);
      if (!st || !st->ok())
        return 0;
      return cal.time([&] {
        operands();
        (void)dev.modelOp(op, in, out, StepContext{}, nullptr);
      });
    };
    auto record = [&](const char *name, double bytes, double t,
                      const std::string &what) {
      recordRate(table, name, bytes, t, what);
    };
    auto kernel = [&](const char *name, OpKind kind, size_t inputs,
                      double passes) {
      record(name, passes * actBytes,
             timeOp(modelOp(kind, inputs, 1), inputs, 1, nullptr),
             actShape + ", inputs drawn from N(0, 0.25)");
    };
    kernel("gelu", OpKind::Gelu, 1, 2);
    kernel("gelu_backward", OpKind::GeluBackward, 2, 3);
    kernel("silu", OpKind::Silu, 1, 2);
    kernel("silu_backward", OpKind::SiluBackward, 2, 3);
    kernel("add", OpKind::Add, 2, 3);
    kernel("mul", OpKind::Mul, 2, 3);
    {
      // Bytes as the plan counts them: every operand and result once.
      Tensor g = cal.buffer({1024}, DType::F32, activation),
             b = cal.buffer({1024}, DType::F32, activation),
             dg = cal.buffer({1024}, DType::F32, activation),
             db = cal.buffer({1024}, DType::F32, activation),
             saved = cal.buffer({2 * actRows}, DType::F32,
                                [](std::mt19937 &) { return 1.0f; });
      PlanOp fwd = modelOp(OpKind::LayerNorm, 3, 1);
      fwd.attrs = NormAttrs{1e-5};
      record("layernorm", 2 * actBytes + 2 * 1024 * 4,
             timeOp(fwd, 1, 1,
                    [&](std::vector<Tensor> &in, std::vector<Tensor> &) {
                      in.push_back(g);
                      in.push_back(b);
                    }),
             actShape + ", inputs drawn from N(0, 0.25)");
      // x, weight, dy and the saved mean and rstd; dx, dweight, dbias. The
      // pool's first input is x, its second dy.
      PlanOp bwd = modelOp(OpKind::LayerNormBackward, 4, 3);
      bwd.attrs = NormAttrs{1e-5};
      record("layernorm_backward",
             3 * actBytes + 3 * 1024 * 4 + 2 * double(actRows) * 4,
             timeOp(bwd, 2, 1,
                    [&](std::vector<Tensor> &in, std::vector<Tensor> &out) {
                      in = {in[0], g, in[1], saved};
                      out.push_back(dg);
                      out.push_back(db);
                    }),
             actShape + ", inputs drawn from N(0, 0.25)");
      PlanOp bias = modelOp(OpKind::LinearGradBias, 1, 1);
      record("linear_grad_bias", actBytes + 1024 * 4,
             timeOp(bias, 1, 0,
                    [&](std::vector<Tensor> &, std::vector<Tensor> &out) {
                      out.push_back(db);
                    }),
             actShape + ", the bias [1024]");
      // RMSNorm (Llama's): x and weight; y (the saved rstd not counted, as
      // in the plan). Its backward: x, weight, dy and the saved rstd; dx
      // and dweight.
      PlanOp rms = modelOp(OpKind::RMSNorm, 2, 1);
      rms.attrs = RMSNormAttrs{1e-5, false};
      record("rmsnorm", 2 * actBytes + 1024 * 4,
             timeOp(rms, 1, 1,
                    [&](std::vector<Tensor> &in, std::vector<Tensor> &) {
                      in.push_back(g);
                    }),
             actShape + ", inputs drawn from N(0, 0.25)");
      PlanOp rmsBwd = modelOp(OpKind::RMSNormBackward, 4, 2);
      rmsBwd.attrs = RMSNormAttrs{1e-5, false};
      record("rmsnorm_backward", 3 * actBytes + 2 * 1024 * 4,
             timeOp(rmsBwd, 2, 1,
                    [&](std::vector<Tensor> &in, std::vector<Tensor> &out) {
                      in = {in[0], g, in[1], saved};
                      out.push_back(dg);
                    }),
             actShape + ", inputs drawn from N(0, 0.25)");
      // Rotary embeddings (a sine and a cosine per pair): the operands
      // seen as [2, rows / 2, 1024], heads of 64.
      auto asSequence = [&](std::vector<Tensor> &in, std::vector<Tensor> &out) {
        for (std::vector<Tensor> *ts : {&in, &out})
          for (Tensor &t : *ts)
            t.shape = {2, actRows / 2, 1024};
      };
      for (OpKind kind : {OpKind::Rotary, OpKind::RotaryBackward}) {
        PlanOp rope = modelOp(kind, 1, 1);
        rope.attrs = RotaryAttrs{64, 10000.0};
        record(kind == OpKind::Rotary ? "rotary" : "rotary_backward",
               2 * actBytes, timeOp(rope, 1, 1, asSequence),
               actShape + " as [2, " + std::to_string(actRows / 2) +
                   ", 1024], heads of 64, theta 10000");
      }
    }
    // (Accumulates and zeroing stream gradients: not timed in cache here.
    // The cache curve below is an accumulate's own, in cache and not.)
    if (!hot) {
      std::vector<Tensor> in, out;
      double t = cal.time([&] {
        rotate(1, 1, in, out);
        (void)dev.accumulate(out[0], in[0]);
      });
      record("accumulate", 3 * actBytes, t, actShape);
      t = cal.time([&] {
        rotate(0, 1, in, out);
        (void)dev.zeroTensor(out[0]);
      });
      record("zero_grads", actBytes, t, actShape);
    }
  };
  sampleSteadiness();
  sampleHandoff();
  memoryBound(gpu ? 16384 : 64, Table::Pooled);
  // On a CPU also in cache: a step's element-wise ops read what the op
  // before just wrote, and the cost model prices each op between the two
  // rates by the share of its operands still in cache (CostModel's
  // residency). A GPU's L2 holds little of one [16384, 1024] operand.
  if (!gpu) {
    memoryBound(64, Table::Hot);
    k.cacheBytes = double(llc);
    source("calibration.cache_mib",
           "the last-level cache (sysfs), which the cost model's residency "
           "shares among a node's ranks");
    // How well the cache holds an operand by the bytes touched since: an
    // accumulate (out += in, [64, 1024] f32) over a pool of in and out
    // operands reused in turn, from the hot table's pool (2 MiB; a quarter
    // of this rank's share of the cache where that is less, so that the
    // first pool is in cache) to the first at least twice the share,
    // doubling.
    const int64_t act = 64 * 1024 * 4;
    const int64_t share = llc / std::max<int64_t>(1, comm.size());
    std::string points;
    for (int64_t pairs = std::clamp<int64_t>(share / 4 / (2 * act), 1, 4);;
         pairs *= 2) {
      const size_t mark = cal.keep.size();
      std::vector<Tensor> ins, outs;
      bool allocated = true;
      for (int64_t i = 0; i < pairs; ++i) {
        ins.push_back(cal.buffer({64, 1024}, DType::F32, activation));
        outs.push_back(cal.buffer({64, 1024}, DType::F32, activation));
        allocated = allocated && ins.back().data && outs.back().data;
      }
      size_t next = 0;
      // Every rank skips, or none (cal.time is collective).
      const bool failed = cal.slowest(allocated ? 0.0 : 1.0) > 0;
      double t = failed ? 0 : cal.time([&] {
        (void)dev.accumulate(outs[next], ins[next]);
        next = (next + 1) % size_t(pairs);
      });
      cal.releaseSince(mark);
      if (t <= 0) {
        k.cacheReuse.clear(); // A curve with a hole says nothing.
        break;
      }
      const double bytes = double(2 * pairs * act), rate = 3.0 * act / t;
      k.cacheReuse.emplace_back(bytes, rate);
      char point[64];
      std::snprintf(point, sizeof point, "%s%g MiB %.1f GB/s",
                    points.empty() ? "" : ", ", bytes / (1 << 20), rate / 1e9);
      points += point;
      say("  %-20s %8.2f GB/s (a pool of %g MiB)\n", "cache reuse", rate / 1e9,
          bytes / (1 << 20));
      if (2 * pairs * act >= 2 * share)
        break;
    }
    if (k.cacheReuse.size() >= 2)
      source("calibration.cache_reuse",
             "accumulate (out += in) over [64, 1024] f32 operands, each "
             "call's pair the next of a pool reused in turn, " +
                 std::to_string(comm.size()) +
                 " rank(s) at once with pools of their own (" + points +
                 "): the cost model's residency counts an operand touched "
                 "that many bytes ago as in cache by where its rate falls "
                 "between the first and the last");
    else
      k.cacheReuse.clear();
  }
  // On a CPU whose ranks run several threads, ops below the kernels'
  // parallel threshold (cpu::kParallelMinWork element operations) run on
  // one: [8, 1024] operands, in cache. With one thread a rank the rates
  // above already are one thread's.
  if (!gpu && cpu::threads() > 1) {
    memoryBound(8, Table::Serial);
    k.serialKernelElements = double(cpu::kParallelMinWork);
    source("calibration.serial_kernel_elements",
           "the CPU kernels' parallel threshold (cpu::kParallelMinWork)");
  }
  sampleSteadiness();
  sampleHandoff();
  // Cross-entropy over a [2, 32, 4096] vocabulary ([2, 2048, 4096] on a
  // GPU; an exp per logit): bytes as the plan counts them, the logits read
  // (and their gradient written). On a CPU whose ranks run several threads,
  // also 8 rows of 1024 (8192 logits, below the kernels' parallel
  // threshold: one thread) for the serial table.
  auto crossEntropy = [&](const int64_t ceRows, const int64_t vocab,
                          const bool serial) {
    const std::string ceShape = "[2, " + std::to_string(ceRows / 2) + ", " +
                                std::to_string(vocab) + "] f32 logits" +
                                (serial ? " (one thread, in cache)" : "");
    Tensor logits = cal.buffer({2, ceRows / 2, vocab}, DType::F32, activation);
    Tensor dlogits = cal.buffer({2, ceRows / 2, vocab}, DType::F32, activation);
    Tensor loss = cal.buffer({}, DType::F32, activation);
    Tensor dloss =
        cal.buffer({}, DType::F32, [](std::mt19937 &) { return 1.0f; });
    Tensor targets{dev.allocate(ceRows * 4, true), DType::I32, {2, ceRows / 2}};
    cal.keep.push_back({static_cast<char *>(targets.data), true});
    std::vector<int32_t> ids(static_cast<size_t>(ceRows));
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = int32_t((int64_t(i) * 977) % vocab);
    dev.fromHost(targets.data, ids.data(), ceRows * 4);
    double logitBytes = double(ceRows) * double(vocab) * 4;
    PlanOp fwd = modelOp(OpKind::CrossEntropy, 2, 1);
    std::vector<Tensor> in = {logits, targets}, out = {loss};
    std::optional<Status> st =
        dev.modelOp(fwd, in, out, StepContext{}, nullptr);
    if (st && st->ok())
      recordRate(serial ? Table::Serial : Table::Pooled, "cross_entropy",
                 logitBytes, cal.time([&] {
                   (void)dev.modelOp(fwd, in, out, StepContext{}, nullptr);
                 }),
                 ceShape + ", the logits' bytes");
    PlanOp bwd = modelOp(OpKind::CrossEntropyBackward, 3, 1);
    std::vector<Tensor> bin = {logits, targets, dloss}, bout = {dlogits};
    st = dev.modelOp(bwd, bin, bout, StepContext{}, nullptr);
    if (st && st->ok())
      recordRate(serial ? Table::Serial : Table::Pooled,
                 "cross_entropy_backward", 2 * logitBytes, cal.time([&] {
                   (void)dev.modelOp(bwd, bin, bout, StepContext{}, nullptr);
                 }),
                 ceShape + ", the logits read and their gradient written");
  };
  crossEntropy(gpu ? 4096 : 64, 4096, false);
  if (!gpu && cpu::threads() > 1)
    crossEntropy(8, 1024, true);

  // The kinds not measured (embeddings, scale, split, ...) are streaming
  // kernels without transcendental functions: add's rate.
  if (auto add = k.kernelBandwidth.find("add");
      add != k.kernelBandwidth.end()) {
    k.kernelBandwidth["default"] = add->second;
    source("calibration.kernel_gb_per_s.default",
           "add's rate, for the streaming kernels not measured");
  }
  if (auto add = k.kernelHotBandwidth.find("add");
      add != k.kernelHotBandwidth.end()) {
    k.kernelHotBandwidth["default"] = add->second;
    source("calibration.kernel_hot_gb_per_s.default",
           "add's rate in cache, for the streaming kernels not measured");
  }

  sampleSteadiness();
  // Adam (f32 parameter as its own master) and clipping over a model's
  // worth of elements: its four tensors four times the last-level cache on
  // a CPU (at least 1M elements; an optimizer step streams every parameter
  // once, from memory), 64M on a GPU.
  int64_t adamN = int64_t(1) << 26;
  if (!gpu) {
    adamN = int64_t(1) << 20;
    while (adamN * 16 < 4 * llc)
      adamN *= 2;
  }
  const std::string adamCount = std::to_string(adamN >> 20) + "M";
  {
    Tensor grad = cal.buffer({adamN}, DType::F32, small),
           param = cal.buffer({adamN}, DType::F32, small),
           m = cal.buffer({adamN}, DType::F32, small),
           v = cal.buffer({adamN}, DType::F32,
                          [](std::mt19937 &) { return 1e-4f; });
    cpu::AdamSettings settings;
    settings.adamw = true;
    int64_t step = 1;
    double t = cal.time([&] {
      (void)dev.adamUpdate(settings, step++, grad, param, m, v, nullptr);
    });
    // Bytes as the cost model counts them: the gradient read, both moments
    // read and written, the parameter read and written.
    k.adamBandwidth = 28.0 * double(adamN) / t;
    source("calibration.adam_gb_per_s",
           "adam_update of " + adamCount + " f32 elements (28 bytes each)");
    if (!gpu) {
      c.host.memoryBandwidth = k.adamBandwidth * comm.size();
      source("host.memory_gb_per_s",
             "Adam's bytes per second on the host, all ranks together");
    } else {
      // On a GPU the Adam above ran on the device; an offloaded optimizer
      // runs the CPU kernel on host memory, timed here on its own.
      const int64_t hostN = int64_t(1) << 24;
      std::vector<float> hg(size_t(hostN), 1e-3f), hp(size_t(hostN), 0.5f),
          hm(size_t(hostN), 0.0f), hv(size_t(hostN), 0.0f);
      auto host = [&](std::vector<float> &x) {
        return Tensor{x.data(), DType::F32, {hostN}};
      };
      Tensor tg = host(hg), tp = host(hp), tm = host(hm), tv = host(hv);
      int64_t hostStep = 1;
      double th = cal.time([&] {
        (void)cpu::adamUpdate(settings, hostStep++, tg, tp, tm, tv, nullptr);
      });
      c.host.memoryBandwidth = 28.0 * double(hostN) / th * comm.size();
      source("host.memory_gb_per_s",
             "the CPU adam_update of 16M f32 elements in host memory (an "
             "offloaded optimizer's kernel), all ranks together");
      say("  %-20s %8.2f GB/s\n", "host adam", c.host.memoryBandwidth / 1e9);
    }
    t = cal.time([&] {
      double s = dev.sumOfSquares(grad);
      (void)dev.scaleInPlace(grad, float(1.0 / (1.0 + 1e-12 * s)));
    });
    k.clipBandwidth = 4.0 * double(adamN) / t;
    source("calibration.clip_gb_per_s",
           "the norm and the scale of " + adamCount + " f32 gradient elements");

    // Each call's and each tensor's fixed time: a stage-0 plan updates
    // every parameter with its own adam_update and clips a list of every
    // gradient (tiny GPT-2: 36 of them, 64 to 16K elements; their update
    // took 1.7x its price by bytes alone, bench/RESULTS.md, run 24). 32
    // pieces of 1024 elements, in cache, against one piece of their 32K.
    const int64_t pieces = 32, each = 1024;
    auto adamPieces = [&](int64_t parts) {
      int64_t n = pieces * each / parts;
      for (int64_t i = 0; i < parts; ++i)
        (void)dev.adamUpdate(settings, step++, exec::slice(grad, i * n, n),
                             exec::slice(param, i * n, n),
                             exec::slice(m, i * n, n), exec::slice(v, i * n, n),
                             nullptr);
    };
    // Timed in this order on every rank (cal.time synchronizes them).
    double whole = cal.time([&] { adamPieces(1); });
    double split = cal.time([&] { adamPieces(pieces); });
    k.adamCall = furtherPieceTime(whole, split, pieces);
    source("calibration.adam_call_us",
           "32 adam_update calls of 1024 f32 elements against one of their "
           "32K, over 31");
    auto clipPieces = [&](int64_t parts) {
      int64_t n = pieces * each / parts;
      std::vector<Tensor> list;
      for (int64_t i = 0; i < parts; ++i)
        list.push_back(exec::slice(grad, i * n, n));
      double s = dev.sumOfSquaresOf(list);
      (void)dev.scaleAll(list, float(1.0 / (1.0 + 1e-12 * s)));
    };
    whole = cal.time([&] { clipPieces(1); });
    split = cal.time([&] { clipPieces(pieces); });
    k.clipPerTensor = furtherPieceTime(whole, split, pieces);
    source("calibration.clip_per_tensor_us",
           "the norm and the scale of a list of 32 gradients of 1024 f32 "
           "elements against a list of one of their 32K, over 31");
    say("  %-20s %8.2f us\n  %-20s %8.2f us\n", "adam call", k.adamCall * 1e6,
        "clip per tensor", k.clipPerTensor * 1e6);
    say("  %-20s %8.2f GB/s\n  %-20s %8.2f GB/s\n", "adam",
        k.adamBandwidth / 1e9, "clip", k.clipBandwidth / 1e9);
  }

  sampleSteadiness();
  // Copies: device memory (read + write) and host <-> device.
  {
    const int64_t bytes = 64 << 20;
    char *a = dev.allocate(bytes, true), *b = dev.allocate(bytes, true);
    double t = cal.time([&] { dev.copy(b, a, bytes); });
    c.gpu.hbmBandwidth = 2.0 * double(bytes) / t;
    source("gpu.hbm_gb_per_s", "a 64 MiB copy, bytes read and written");
    // From and to host memory as zerorun allocates it (pinned on a GPU:
    // its offloaded tensors and staging). A pageable buffer measured 7.2
    // GB/s on an H100 where the offloaded gradients crossed at 26
    // (bench/gpu-RESULTS.md, third lease).
    char *h = dev.allocate(bytes, false);
    double in = cal.time([&] { dev.fromHost(a, h, bytes); });
    double out = cal.time([&] { dev.toHost(h, a, bytes); });
    c.host.pcieBandwidth = 2.0 * double(bytes) / (in + out);
    source("host.pcie_gb_per_s",
           "64 MiB copied to the device and back from host memory as zerorun "
           "allocates it (pinned on a GPU), both ways' bytes over their time");
    dev.release(h, false);
    dev.release(a, true);
    dev.release(b, true);
    say("  %-20s %8.2f GB/s\n  %-20s %8.2f GB/s\n", "device copy",
        c.gpu.hbmBandwidth / 1e9, "host <-> device",
        c.host.pcieBandwidth / 1e9);
  }

  sampleSteadiness();
  // NVMe: write a file, sync, drop it from the page cache, read it back.
  {
    const size_t bytes = 64 << 20;
    std::string path = scratchDir + "/zerorun-calibrate-" +
                       std::to_string(comm.rank()) + ".bin";
    std::vector<char> data(bytes, 7);
    cal.barrier();
    auto t0 = Clock::now();
    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    bool ok = fd >= 0 && ::write(fd, data.data(), bytes) == ssize_t(bytes) &&
              ::fsync(fd) == 0;
    if (fd >= 0) {
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    auto t1 = Clock::now();
    fd = ok ? ::open(path.c_str(), O_RDONLY) : -1;
    ok = fd >= 0 && ::read(fd, data.data(), bytes) == ssize_t(bytes);
    if (fd >= 0)
      ::close(fd);
    auto t2 = Clock::now();
    ::unlink(path.c_str());
    double t = cal.slowest(ok ? seconds(t0, t2) : -1);
    if (ok && t > 0) {
      c.host.nvmeBandwidth = 2.0 * double(bytes) / t * comm.size();
      source("host.nvme_gb_per_s",
             "a 64 MiB file written with fsync and read back, under " +
                 scratchDir + ", all ranks together");
      say("  %-20s %8.2f GB/s\n", "nvme", c.host.nvmeBandwidth / 1e9);
      (void)t1;
    } else {
      c.host.nvmeBandwidth = c.host.pcieBandwidth;
      c.sources["host.nvme_gb_per_s"] =
          "not measured (could not write " + path + "): the copy rate";
    }
  }

  sampleSteadiness();
  // The executor's own overhead: the scheduler running phases of ops that
  // do nothing, on four streams, and a kernel call on one element.
  {
    auto phaseOf = [](int64_t ops) {
      PlanPhase ph;
      ph.kind = PhaseKind::MicroStep;
      for (int64_t i = 0; i < ops; ++i) {
        PlanOp op;
        op.index = i;
        op.kind = OpKind::Release;
        op.stream = i < 4 ? i : 0;
        ph.ops.push_back(op);
      }
      return ph;
    };
    PlanPhase few = phaseOf(4), many = phaseOf(404);
    exec::PreparedPhase pf =
        exec::PreparedPhase::prepare(few, nullptr, 0, comm.size(), false);
    exec::PreparedPhase pm =
        exec::PreparedPhase::prepare(many, nullptr, 0, comm.size(), false);
    exec::StreamScheduler scheduler(dev);
    auto nothing = [](const PlanOp &) {};
    double tFew = cal.time([&] { scheduler.run(pf, nothing); });
    double tMany = cal.time([&] { scheduler.run(pm, nothing); });
    double perOp = std::max(0.0, (tMany - tFew) / 400.0);
    Tensor one = cal.buffer({1}, DType::F32, normal),
           two = cal.buffer({1}, DType::F32, normal),
           out = cal.buffer({1}, DType::F32, normal);
    PlanOp add = modelOp(OpKind::Add, 2, 1);
    std::vector<Tensor> in = {one, two}, res = {out};
    double call = cal.time(
        [&] { (void)dev.modelOp(add, in, res, StepContext{}, nullptr); });
    k.opOverhead = perOp + call;
    k.phaseOverhead = std::max(0.0, tFew - 4 * perOp);
    source("calibration.op_overhead_us",
           "the scheduler's time per op plus a one-element kernel call");
    source("calibration.phase_overhead_us",
           "a phase run of four ops on four streams, less their per-op time");
    say("  %-20s %8.2f us\n  %-20s %8.2f us\n", "op overhead",
        k.opOverhead * 1e6, "phase overhead", k.phaseOverhead * 1e6);
  }

  // Meetings. Every rank runs the same work for 1, 4 and 16 ms, then they
  // meet, 48 times per length (16 had given the 1 ms share anywhere from
  // 0.008 to 0.045 from one calibration to the next on this VM, where the
  // hypervisor takes a vCPU away for milliseconds at a time: a rank's step
  // came out 1.8 times the other's in one launch; bench/RESULTS.md, run
  // 43); the average rank waits the latest time less
  // the mean (a collective starts at the latest arrival). The figure: the
  // waits over the mean times, per length, averaged over the three. Once
  // with GEMMs (128^3 f32), once with add streaming [256, 1024] f32
  // operands from a pool of twice the last-level cache: on this 2-core VM
  // the first came out near 0.002 and the second near 0.05-0.10 (two ranks
  // streaming memory at once do not progress alike; bench/RESULTS.md,
  // run 21).
  if (comm.size() > 1) {
    constexpr int kMeetings = 48;
    const int64_t n = 128, rows = gpu ? 16384 : 256;
    Tensor a = cal.buffer({n, n}, DType::F32, small);
    Tensor y = cal.buffer({n, n}, DType::F32, small);
    PlanOp gemm = modelOp(OpKind::Linear, 2, 1),
           add = modelOp(OpKind::Add, 2, 1);
    const size_t poolSize =
        gpu ? 3 : size_t(std::max<int64_t>(3, 2 * llc / (rows * 1024 * 4)));
    std::vector<Tensor> pool;
    for (size_t i = 0; i < poolSize; ++i)
      pool.push_back(cal.buffer({rows, 1024}, DType::F32, activation));
    size_t next = 0;
    auto gemmCall = [&] {
      std::vector<Tensor> in = {a, a}, out = {y};
      (void)dev.modelOp(gemm, in, out, StepContext{}, nullptr);
    };
    auto addCall = [&] {
      std::vector<Tensor> in = {pool[next % poolSize],
                                pool[(next + 1) % poolSize]},
                          out = {pool[(next + 2) % poolSize]};
      next += 3;
      (void)dev.modelOp(add, in, out, StepContext{}, nullptr);
    };
    const char *names[2] = {"compute", "memory"};
    const std::string what[2] = {
        "128^3 f32 GEMMs",
        "add over [" + std::to_string(rows) + ", 1024] f32 operands" +
            (gpu ? std::string()
                 : " from a pool of twice the last-level cache")};
    for (int w = 0; w < 2; ++w) {
      const std::function<void()> call = w == 0
                                             ? std::function<void()>(gemmCall)
                                             : std::function<void()>(addCall);
      const double once = cal.time(call);
      double share = 0;
      std::string each;
      for (double length : {1e-3, 4e-3, 16e-3}) {
        sampleSteadiness();
        const int calls = int(cal.slowest(
            double(std::max<int64_t>(1, std::llround(length / once)))));
        double waited = 0, took = 0;
        for (int meeting = 0; meeting < kMeetings; ++meeting) {
          cal.barrier();
          auto t0 = Clock::now();
          for (int i = 0; i < calls; ++i)
            call();
          dev.synchronize();
          const double d = seconds(t0, Clock::now());
          const double mean = cal.sum(d) / double(comm.size());
          waited += cal.slowest(d) - mean;
          took += mean;
        }
        const double r = took > 0 ? waited / took : 0;
        share += r / 3;
        char text[64];
        std::snprintf(text, sizeof text, "%s%g ms: %.4f",
                      each.empty() ? "" : ", ", length * 1e3, r);
        each += text;
      }
      k.meetingWait[w] = share;
      source(std::string("calibration.meeting_wait.") + names[w],
             "every rank running " + what[w] +
                 " for 1, 4 and 16 ms, then meeting, " +
                 std::to_string(kMeetings) +
                 " times each: the "
                 "latest arrival less the mean over the mean time (" +
                 each + "), averaged over the lengths");
      say("  %-20s %8.4f of the time between meetings (%s)\n",
          (std::string("meeting wait ") + names[w]).c_str(), share,
          each.c_str());
    }
  }

  // Collectives: fixed time and bus bandwidth per kind, fitted over sizes
  // (nccl-tests' busbw: bytes x (n-1)/n, 2(n-1)/n for all-reduce; for
  // all-to-all, expert parallelism's token exchange, equal blocks to every
  // rank: bytes x (n-1)/n, as nccl-tests' alltoall).
  if (comm.size() > 1) {
    int64_t n = comm.size();
    const int kinds = ClusterCalibration::kCollectiveKinds;
    // On the CPU, each collective again while a thread of every rank runs
    // `add` kernels without pause: what a gather or reduce stream's
    // collective meets while the compute stream computes on the same cores
    // (bench/RESULTS.md, run 6). A GPU's compute takes no host core.
    bool contend = dev.name() == "cpu";
    Tensor loadA = cal.buffer({64, 1024}, DType::F32, normal),
           loadB = cal.buffer({64, 1024}, DType::F32, normal),
           loadOut = cal.buffer({64, 1024}, DType::F32, normal);
    PlanOp loadOp = modelOp(OpKind::Add, 2, 1);
    for (int pass = 0; pass < (contend ? 2 : 1); ++pass)
      for (int kind = 0; kind < kinds; ++kind) {
        bool contended = pass == 1;
        std::atomic<bool> stop{false};
        std::thread load;
        if (contended)
          load = std::thread([&] {
            std::vector<Tensor> in = {loadA, loadB}, res = {loadOut};
            while (!stop.load(std::memory_order_relaxed))
              (void)dev.modelOp(loadOp, in, res, StepContext{}, nullptr);
          });
        // One collective of `kind` over `per` elements of each rank, from
        // `send` into `recv` (each `per` x n long). `average`: a gradient
        // reduce-scatter's or all-reduce's mean, as the executor asks for
        // it.
        auto start = [&](char *send, char *recv, int64_t per, bool average) {
          std::vector<int64_t> counts(size_t(n), per);
          if (kind == int(CollectiveKind::AllGather))
            return comm.allGather(send, per, recv, DType::F32,
                                  OpLabel{-1, "calibrate"});
          if (kind == int(CollectiveKind::ReduceScatter))
            return comm.reduceScatter(send, counts, recv, DType::F32, average,
                                      OpLabel{-1, "calibrate"});
          if (kind == int(CollectiveKind::AllReduce))
            return comm.allReduce(send, per * n, DType::F32, average,
                                  OpLabel{-1, "calibrate"});
          return comm.allToAllV(send, counts, recv, counts, DType::F32,
                                OpLabel{-1, "calibrate"});
        };
        // Gradients' collectives average as the executor asks
        // (Collectives.cpp): a reduce-scatter's and an all-reduce's result
        // divided by the ranks, as the step runs them.
        const bool average = kind == int(CollectiveKind::ReduceScatter) ||
                             kind == int(CollectiveKind::AllReduce);
        // The sizes: 4 KiB to 32 MiB of f32, each measured point kept (a
        // line does not fit a CPU node's collectives once their buffers
        // leave the cache); beside compute, five of them for the fit.
        std::vector<int64_t> sizes =
            contended
                ? std::vector<int64_t>{10, 14, 18, 20, 22}
                : std::vector<int64_t>{10, 12, 14, 16, 18, 19, 20, 21, 22, 23};
        std::vector<std::pair<double, double>> points; // (bytes, seconds)
        // On a CPU, alone, each size again from memory: every call's
        // buffers the next set of a pool of twice the last-level cache
        // (copies of the first), as a step's gradients come to their
        // collective once the backward has passed its other tensors through
        // the cache. Back to back on one buffer a collective of a few MiB
        // stays in the cache (bench/RESULTS.md, run 46).
        const bool cold = !gpu && !contended;
        std::vector<std::pair<double, double>> coldPoints;
        for (int64_t log2 : sizes) {
          // At least an element a rank; past 1024 ranks the small sizes
          // meet, and each is timed once.
          int64_t per = std::max<int64_t>(1, (int64_t(1) << log2) / n);
          if (!points.empty() && double(per * n) * 4 <= points.back().first)
            continue;
          if (!contended)
            sampleSteadiness();
          const size_t mark = cal.keep.size();
          Tensor buf = cal.buffer({per * n}, DType::F32, small);
          Tensor recv = cal.buffer({per * n}, DType::F32, small);
          double t = cal.timeCollective(
              [&] {
                CommHandle h =
                    start(static_cast<char *>(buf.data),
                          static_cast<char *>(recv.data), per, average);
                comm.wait(h);
              },
              0.01, 3);
          points.emplace_back(double(per * n) * 4, t);
          if (cold) {
            // What a call reads and writes: a gather's block and its
            // output, a reduce-scatter's input and its block, an
            // all-reduce's buffer in place, an all-to-all's two buffers.
            const double block = double(per) * 4, whole = block * double(n);
            const double setBytes =
                kind == int(CollectiveKind::AllGather)       ? block + whole
                : kind == int(CollectiveKind::ReduceScatter) ? whole + block
                : kind == int(CollectiveKind::AllReduce)     ? whole
                                                             : 2 * whole;
            const size_t sets = coldPoolSets(setBytes, llc);
            std::vector<std::pair<char *, char *>> pool = {
                {static_cast<char *>(buf.data),
                 static_cast<char *>(recv.data)}};
            for (size_t i = 1; i < sets; ++i)
              pool.emplace_back(cal.copyOf(buf.data, buf.bytes()),
                                cal.copyOf(recv.data, recv.bytes()));
            size_t next = 0;
            coldPoints.emplace_back(double(per * n) * 4,
                                    cal.timeCollective(
                                        [&] {
                                          const auto &[a, b] =
                                              pool[next++ % sets];
                                          CommHandle h =
                                              start(a, b, per, average);
                                          comm.wait(h);
                                        },
                                        0.01, 3));
          }
          cal.releaseSince(mark);
        }
        if (contended) {
          stop.store(true);
          load.join();
        }
        // The line in bus bytes; the sizes measured, as text.
        std::vector<double> xs, ts;
        std::string measuredSizes;
        for (const auto &[bytes, t] : points) {
          xs.push_back(bytes *
                       commElementsPerRank(CollectiveKind(kind), 1.0, n));
          ts.push_back(t);
          char text[32];
          std::snprintf(text, sizeof text, "%s%g %s",
                        measuredSizes.empty() ? "" : ", ",
                        bytes < (1 << 20) ? bytes / 1024 : bytes / (1 << 20),
                        bytes < (1 << 20) ? "KiB" : "MiB");
          measuredSizes += text;
        }
        const std::string fitted =
            "fitted over " + measuredSizes + " of f32" +
            (contended ? " while a thread of every rank runs add kernels" : "");
        const std::string sizesSource =
            "each size's median of three batches (10 ms or 1000 calls "
            "each) of back-to-back collectives at " +
            measuredSizes + " of f32" +
            (contended ? " while a thread of every rank runs add kernels"
                       : "") +
            (average ? ", averaged as the executor averages gradients" : "");
        auto [latency, bus] = fitLine(xs, ts);
        if (bus <= 0)
          bus = xs.back() / ts.back();
        const std::string name(collectiveName(CollectiveKind(kind)));
        std::string key = "calibration." + name;
        if (contended) {
          k.contended[kind] = {latency, bus, 0, points};
          source(key + ".contended_latency_us", fitted);
          source(key + ".contended_bus_gb_per_s",
                 fitted + " (nccl-tests' busbw)");
          source(key + ".contended_by_size", sizesSource);
          say("  %-20s %8.2f us + busbw %8.2f GB/s (beside compute)\n",
              name.c_str(), latency * 1e6, bus / 1e9);
          continue;
        }
        // A bucket: zerorun starts one collective per tensor of an op, all
        // of them before it waits, and a gradient reduce-scatter then adds
        // each tensor's averaged part into its shard (an accumulate kernel
        // each). 32 of 1024 elements each against one of their 32K: what
        // each further tensor adds.
        const int64_t tensors = 32, each = 1024;
        Tensor bsend = cal.buffer({tensors * each * n}, DType::F32, small),
               brecv = cal.buffer({tensors * each * n}, DType::F32, small),
               shard = cal.buffer({tensors * each}, DType::F32, small);
        const bool gradients = kind == int(CollectiveKind::ReduceScatter);
        auto bucket = [&](int64_t parts) {
          int64_t per = tensors * each / parts;
          std::vector<CommHandle> hs;
          for (int64_t i = 0; i < parts; ++i) {
            size_t at = size_t(i * per * n) * 4;
            hs.push_back(start(static_cast<char *>(bsend.data) + at,
                               static_cast<char *>(brecv.data) + at, per,
                               average));
          }
          // As the executor completes an op: every collective, then each
          // tensor's epilogue.
          const std::atomic<bool> never{false};
          comm.waitAll(hs, never);
          if (gradients)
            for (int64_t i = 0; i < parts; ++i)
              (void)dev.accumulate(exec::slice(shard, i * per, per),
                                   exec::slice(brecv, i * per * n, per));
        };
        double whole = cal.timeCollective([&] { bucket(1); }, 0.01, 3);
        double split = cal.timeCollective([&] { bucket(tensors); }, 0.01, 3);
        double perTensor = furtherPieceTime(whole, split, tensors);
        k.collective[kind] = {latency, bus, perTensor, points, coldPoints};
        source(key + ".by_size", sizesSource);
        if (!coldPoints.empty())
          source(key + ".cold_by_size",
                 sizesSource +
                     ", each call's buffers the next set of a pool "
                     "of twice the " +
                     std::to_string(llc >> 20) +
                     " MiB last-level cache (from memory)");
        if (gradients) {
          k.packedGradient = packedGradientTime(cal, n);
          source("calibration.packed_gradient_us",
                 "a stage-3 bucket packed as the executor packs it (32 "
                 "gradients of 1024 f32 elements into the ranks' blocks, one "
                 "reduce-scatter, an accumulate each) against 2 of 16K, over "
                 "30");
          say("  %-20s %8.2f us a further gradient\n", "packed reduce-scatter",
              k.packedGradient * 1e6);
        }
        source(key + ".per_tensor_us",
               std::string("32 collectives of 1024 f32 elements a rank "
                           "started together") +
                   (gradients ? ", each averaged and accumulated into a "
                                "shard as the executor does,"
                    : average ? ", each averaged as the executor does,"
                              : "") +
                   " less one of their 32K, over 31");
        source(key + ".latency_us", fitted);
        source(key + ".bus_gb_per_s", fitted + " (nccl-tests' busbw)");
        say("  %-20s %8.2f us + busbw %8.2f GB/s, %6.2f us a further "
            "tensor\n",
            name.c_str(), latency * 1e6, bus / 1e9, perTensor * 1e6);
      }
    c.intraNode = {k.collective[0].busBandwidth, 0};
    c.collectiveLatency = k.collective[0].latency;
    source("intra_node.bus_gb_per_s", "the all-gather's fit");
    source("intra_node.latency_us", "folded into collective_latency_us");
    source("collective_latency_us", "the all-gather's fit");
  } else {
    c.intraNode = {c.gpu.hbmBandwidth, 0};
    c.sources["intra_node.bus_gb_per_s"] =
        "not measured: one rank runs no collective (the copy rate)";
    c.sources["intra_node.latency_us"] = "not measured: one rank";
    c.collectiveLatency = 0;
    c.sources["collective_latency_us"] = "not measured: one rank";
  }

  // The rest of the file: the machine's shape and datasheet-free peaks.
  c.name = std::string("calibrated-") + host;
  c.description = measured;
  {
    // The ranks share one node: their CPU time together is what this
    // calibration used of it.
    double own = cal.sum(processCpuSeconds() - ownBefore);
    std::optional<CpuTimes> cpuAfter = machineCpuTimes();
    if (cpuBefore && cpuAfter) {
      int cores = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
      ForeignLoad load = foreignLoad(*cpuBefore, *cpuAfter, own,
                                     seconds(wallBefore, Clock::now()), cores);
      std::string what = describeForeignLoad(load, cores);
      c.description += "; while it measured, " + what;
      if (root && disturbs(load))
        std::fprintf(stderr,
                     "zerorun --calibrate: warning: while it measured, %s: "
                     "its figures describe the machine under that load, not "
                     "an idle one (calibrate again when it is idle)\n",
                     what.c_str());
    }
  }
  sampleSteadiness(true);
  sampleHandoff();
  // What a kernel thread's operands cost when another core wrote them (a
  // step's handoffs, which the GEMMs' calibration above does not see):
  // samples spread over the whole calibration, as the VM moves its vCPUs
  // between sharing a last-level cache and not (for seconds to minutes).
  if (handoff.samples > 0) {
    double perByte =
        cal.slowest(handoff.bytes > 0 ? handoff.extra / handoff.bytes : 0);
    if (perByte > 0) {
      k.handoffBandwidth = 1 / perByte;
      source("calibration.handoff_gb_per_s",
             "each of " + std::to_string(cpu::threads()) +
                 " threads reading a 256 KiB chunk another thread just "
                 "wrote against one it wrote itself, " +
                 std::to_string(handoff.samples) +
                 " samples of 0.15 s through the calibration: bytes over "
                 "the extra time");
      say("  handoff %15.2f GB/s (a core's read of what another wrote, "
          "beyond a local read; %d samples)\n",
          k.handoffBandwidth / 1e9, handoff.samples);
    }
  }
  {
    const Steadiness st = Steadiness::of(k.steadiness);
    char probeText[160];
    std::snprintf(
        probeText, sizeof probeText,
        "%d calls of a %lld^3 f32 GEMM on every rank at once (about 2 "
        "ms), %d times through the calibration: the slowest rank's "
        "time",
        probe.calls, (long long)probe.a.shape[0], st.samples);
    source("calibration.steadiness", probeText);
    say("  %-20s %d of %d probes at %.2fx their usual %.3f ms or more",
        "steadiness", st.slow, st.samples, Steadiness::kSpellFactor,
        st.usual * 1e3);
    if (st.slow > 0)
      say(" (median %.2fx, worst %.2fx)", st.slowFactor, st.worst);
    say("\n");
    if (const std::string warning = st.warning(); root && !warning.empty())
      std::fprintf(stderr, "%s\n", warning.c_str());
  }
  c.nodes = 1;
  c.gpusPerNode = comm.size();
  c.sources["nodes"] = "the ranks of the calibration run share one node";
  c.sources["gpus_per_node"] = "the ranks of the calibration run";
  k.ranks = double(comm.size());
  source("calibration.ranks", "the ranks that measured at once");
  k.device = dev.name();
  if (k.device == "cpu") {
    k.threadsPerRank = double(cpu::threads());
    source("calibration.threads_per_rank",
           "the CPU kernels' threads per rank (cpu::threads())");
  }
  c.gpu.model = dev.name() == "cpu" ? std::string("CPU rank on ") + host
                                    : std::string("GPU on ") + host;
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  double memory = pages > 0 && pageSize > 0 ? double(pages) * pageSize : 0;
  c.host.memoryBytes = memory > 0 ? memory : 1.0 * (1ull << 30);
  c.sources["host.memory_gib"] = "sysconf(_SC_PHYS_PAGES)";
  c.host.reserveBytes = std::min(c.host.reserveBytes, c.host.memoryBytes / 4);
  c.sources["host.reserve_gib"] = "a quarter of the host's memory at most";
  // A GPU's memory as the driver reports it, and what the device holds
  // beyond zerorun's tensors once the kernels, cuBLAS and the communicator
  // are set up: the runtime reserve a plan's peak must leave free.
  // The kernels' scratch that the stream-ordered pool keeps goes back
  // first: its size is the calibration's shapes', not a plan's.
  dev.releaseCachedMemory();
  int64_t capacity = dev.memoryCapacity();
  int64_t inUse = dev.memoryInUse();
  if (dev.name() == "cpu" || capacity <= 0 || inUse < 0) {
    c.gpu.memoryBytes = c.host.memoryBytes / double(comm.size());
    c.sources["gpu.memory_gib"] = "the host's memory shared by the ranks";
    c.gpu.runtimeReserveBytes = 0;
    c.sources["gpu.runtime_reserve_gib"] =
        "none on the CPU device (the host reserve holds it)";
  } else {
    c.gpu.memoryBytes = double(capacity);
    c.sources["gpu.memory_gib"] =
        "cudaMemGetInfo's total (the datasheet's figure is not known here)";
    c.gpu.usableMemoryBytes = double(capacity);
    c.sources["gpu.usable_memory_gib"] =
        "cudaMemGetInfo's total (what PyTorch reports as the total capacity)";
    MemoryCounts counted = deviceMemory().counts();
    int64_t ours = counted.total() - counted.of(MemoryUse::DeviceRuntime);
    c.gpu.runtimeReserveBytes = double(std::max<int64_t>(0, inUse - ours));
    c.sources["gpu.runtime_reserve_gib"] =
        "cudaMemGetInfo's memory in use after the calibration, its cached "
        "scratch returned, less zerorun's tensors: the CUDA context, "
        "cuBLAS, the communicator at " +
        std::to_string(comm.size()) +
        " ranks, zerorun's own workspaces and any other process's memory "
        "(NCCL's buffers grow with ranks and channels)";
  }
  double f32 = best[0] > 0 ? best[0] : 1e9;
  c.gpu.peak.f32 = f32;
  c.gpu.peak.tf32 = f32;
  c.gpu.peak.bf16 = best[1] > 0 ? best[1] : f32;
  c.gpu.peak.f16 = best[2] > 0 ? best[2] : f32;
  for (const char *d : {"f32", "tf32", "bf16", "f16"})
    source(std::string("gpu.peak_tflops.") + d,
           "the fastest GEMM class measured in that dtype (f32's where none)");
  c.computeEfficiency = 1.0;
  c.sources["compute_efficiency"] =
      "1: the peaks are measured GEMM rates; ops without a calibrated rate "
      "run at them";

  if (!root)
    return 0;
  // The file must be one that --cluster accepts: a figure left at 0 (a
  // measurement that did not run on this device) is refused here, naming
  // it, rather than written for zeroc to refuse later (a GPU calibration
  // once wrote host.memory_gb_per_s 0).
  std::string text = toJson(c).dump(2);
  Expected<JsonDocument> doc = JsonDocument::parse(text, output);
  if (!doc) {
    std::fprintf(stderr, "zerorun: error: --calibrate: %s\n",
                 doc.error().str().c_str());
    return 1;
  }
  if (Expected<Cluster> back = readCluster(*doc); !back) {
    std::fprintf(stderr,
                 "zerorun: error: --calibrate: the measured cluster is not "
                 "one zeroc accepts, not written: %s\n",
                 back.error().str().c_str());
    return 1;
  }
  std::ofstream out(output);
  out << text << "\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "zerorun: error: --calibrate: cannot write %s\n",
                 output.c_str());
    return 1;
  }
  std::printf("zerorun: calibration written to %s (use it as zeroc inspect "
              "PLAN --cluster %s)\n",
              output.c_str(), output.c_str());
  return 0;
}

} // namespace zeroc::runtime
