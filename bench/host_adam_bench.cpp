//===- host_adam_bench.cpp - The host Adam's loops side by side -----------===//
//
// A benchmark, not a test: cpu::adamUpdate (the CPU backend's Adam and the
// offloaded optimizer's host step) with each element loop this CPU has, at
// each thread count, interleaved in one run (repeat r: every thread count,
// every loop), on one state of N elements: the gradient and the 16-bit
// copy in bf16 (mixed precision, what ZeRO-Offload steps) or f32 and none.
// Prints per loop and thread count the median milliseconds per step, the
// elements per second, the bytes per second (the gradient read, master and
// both moments read and written, the copy written: 28 bytes an element for
// bf16/bf16), and "before/this": the median of the AVX2 loop with chunked
// conversions (the default before the fused AVX2 and AVX-512 loops) over
// each loop's. It first checks that every loop gives the portable loop's
// bits on a 1 Mi-element copy of the state.
//
//   zeroc-host-adam-bench [--elements N] [--threads 1,2] [--repeats R]
//                         [--dtype bf16|f32]
//
//===----------------------------------------------------------------------===//

#include "cpu/Optimizer.h"
#include "cpu/Threads.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace zeroc;
using runtime::Tensor;

namespace {

struct State {
  int64_t n;
  DType dtype;
  std::vector<uint16_t> grad16, copy16;
  std::vector<float> grad32, master, m, v;

  State(int64_t n, DType dtype, unsigned seed) : n(n), dtype(dtype) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    master.resize(size_t(n));
    m.assign(size_t(n), 0.0f);
    v.assign(size_t(n), 0.0f);
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      master[size_t(i)] = unit(gen);
      g[size_t(i)] = 1e-3f * unit(gen);
    }
    if (dtype == DType::BF16) {
      grad16.resize(size_t(n));
      copy16.resize(size_t(n));
      cpu::storeF32(Tensor{grad16.data(), DType::BF16, {n}}, 0, n, g.data());
    } else {
      grad32 = std::move(g);
    }
  }
  Tensor grad() {
    return dtype == DType::BF16 ? Tensor{grad16.data(), DType::BF16, {n}}
                                : Tensor{grad32.data(), DType::F32, {n}};
  }
  Tensor f32(std::vector<float> &x) {
    return Tensor{x.data(), DType::F32, {n}};
  }
  bool step(int64_t t, const cpu::AdamOptions &options) {
    cpu::AdamSettings s;
    s.adamw = true;
    s.weightDecay = 0.01;
    Tensor copy{copy16.data(), DType::BF16, {n}};
    runtime::Status st =
        cpu::adamUpdate(s, t, grad(), f32(master), f32(m), f32(v),
                        dtype == DType::BF16 ? &copy : nullptr, options);
    if (!st.ok())
      std::fprintf(stderr, "adam_update: %s\n", st.error.c_str());
    return st.ok();
  }
  bool sameBits(const State &o) const {
    return master == o.master && m == o.m && v == o.v && copy16 == o.copy16;
  }
};

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  size_t k = x.size() / 2;
  return x.size() % 2 ? x[k] : 0.5 * (x[k - 1] + x[k]);
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = int64_t(1) << 24;
  std::vector<int> threadCounts = {1, 2};
  int repeats = 7;
  DType dtype = DType::BF16;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--elements") {
      n = std::atoll(next().c_str());
    } else if (a == "--threads") {
      threadCounts.clear();
      std::string list = next();
      for (size_t at = 0; at <= list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos)
          comma = list.size();
        threadCounts.push_back(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    } else if (a == "--repeats") {
      repeats = std::atoi(next().c_str());
    } else if (a == "--dtype") {
      std::string d = next();
      if (d != "bf16" && d != "f32") {
        std::fprintf(stderr, "--dtype: bf16 or f32, found %s\n", d.c_str());
        return 2;
      }
      dtype = d == "bf16" ? DType::BF16 : DType::F32;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--elements N] [--threads 1,2] [--repeats R] "
                   "[--dtype bf16|f32]\n",
                   argv[0]);
      return 2;
    }
  }
  if (n < 1 || repeats < 1 || threadCounts.empty() ||
      *std::min_element(threadCounts.begin(), threadCounts.end()) < 1) {
    std::fprintf(stderr, "--elements, --repeats and --threads must be >= 1\n");
    return 2;
  }

  std::vector<cpu::AdamLoop> loops;
  for (cpu::AdamLoop l : {cpu::AdamLoop::Portable, cpu::AdamLoop::Avx2Chunked,
                          cpu::AdamLoop::Avx2, cpu::AdamLoop::Avx512})
    if (cpu::adamLoopFor(l) == l)
      loops.push_back(l);

  // Every loop and thread count gives the portable loop's bits.
  {
    int64_t small = std::min<int64_t>(n, int64_t(1) << 20);
    State reference(small, dtype, 1);
    for (int64_t t = 1; t <= 2; ++t)
      if (!reference.step(t, {1, cpu::AdamLoop::Portable}))
        return 1;
    for (cpu::AdamLoop l : loops)
      for (int th : threadCounts) {
        State s(small, dtype, 1);
        for (int64_t t = 1; t <= 2; ++t)
          if (!s.step(t, {unsigned(th), l}))
            return 1;
        if (!s.sameBits(reference)) {
          std::fprintf(stderr, "loop %s at %d threads: not the portable bits\n",
                       cpu::adamLoopName(l), th);
          return 1;
        }
      }
  }

  State s(n, dtype, 2);
  std::vector<std::vector<std::vector<double>>> ms(
      threadCounts.size(), std::vector<std::vector<double>>(loops.size()));
  int64_t t = 1;
  for (size_t k = 0; k < threadCounts.size(); ++k) // warm-up: pages, pool
    for (cpu::AdamLoop l : loops)
      s.step(t++, {unsigned(threadCounts[k]), l});
  for (int r = 0; r < repeats; ++r)
    for (size_t k = 0; k < threadCounts.size(); ++k)
      for (size_t j = 0; j < loops.size(); ++j) {
        auto start = std::chrono::steady_clock::now();
        if (!s.step(t++, {unsigned(threadCounts[k]), loops[j]}))
          return 1;
        ms[k][j].push_back(std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count());
      }

  const double bytes = 28.0; // bf16: 2 + 24 + 2; f32: 4 + 24
  std::printf("host adam_update (AdamW), %lld elements, gradient and copy "
              "%s, %d repeats, %d cores available\n",
              (long long)n, dtype == DType::BF16 ? "bf16" : "f32 / none",
              repeats, cpu::availableCores());
  std::printf("%-8s %-13s %10s %10s %9s %12s\n", "threads", "loop", "median ms",
              "M elem/s", "GB/s", "before/this");
  for (size_t k = 0; k < threadCounts.size(); ++k) {
    double before = 0;
    for (size_t j = 0; j < loops.size(); ++j)
      if (loops[j] == cpu::AdamLoop::Avx2Chunked)
        before = median(ms[k][j]);
    for (size_t j = 0; j < loops.size(); ++j) {
      double med = median(ms[k][j]);
      std::printf("%-8d %-13s %10.2f %10.1f %9.2f", threadCounts[k],
                  cpu::adamLoopName(loops[j]), med, double(n) / med / 1e3,
                  bytes * double(n) / med / 1e6);
      if (before > 0)
        std::printf(" %12.2f", before / med);
      std::printf("\n");
    }
  }
  return 0;
}
