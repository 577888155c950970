//===- zerorun.cpp - Runs a zeroc plan on the CPU, one process per rank ---===//
//
//   zerorun PLAN.json [--synthetic | --data FILE] [--steps N] [--seed S]
//           [--log-json PATH] [--comm-timeout SECONDS]
//
// Launched by mpirun (one process per rank) or alone for a one-rank plan.
// docs/zerorun.md.
//
//===----------------------------------------------------------------------===//

#include "comm/Communicator.h"
#include "comm/MpiCommunicator.h"
#include "data/DataLoader.h"
#include "exec/Executor.h"
#include "zeroc/Plan/Plan.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

const char *kUsage =
    R"(USAGE: zerorun PLAN.json [options]

Runs the training steps of a plan written by `zeroc MODEL.mlir --config DS.json
--world-size N -o PLAN.json`. Start N processes with `mpirun -np N zerorun ...`;
a plan for one rank also runs without mpirun.

OPTIONS:
  --synthetic             Train on deterministic random tokens (the default
                          when no --data is given)
  --data FILE             Train on a token file (docs/data-format.md)
  --steps N               Optimizer steps to run (default 10)
  --seed S                Seed of parameter init and synthetic data (default 0)
  --log-json PATH         Write one JSON object per step ({"step", "loss",
                          ...}) and a final one with "measured_peak_bytes" and
                          "predicted_peak_bytes" (rank 0)
  --comm-timeout T        Abort every rank when a collective takes longer
                          than T (seconds, or 500ms, 90s, 30m, 2h; default 30m)
  --checkpoint-dir DIR, --save-every N, --resume, --init-from FILE
                          Not implemented yet (docs/zerorun.md)
  -h, --help              Show this help
)";

struct Options {
  std::string plan;
  std::string data;
  bool synthetic = false;
  int64_t steps = 10;
  uint64_t seed = 0;
  std::string logJson;
  std::string commTimeout;
  std::string checkpointDir, initFrom;
  int64_t saveEvery = 0;
  bool resume = false;
};

[[noreturn]] void usageError(const std::string &msg) {
  std::fprintf(stderr, "zerorun: error: %s\n(run 'zerorun --help')\n",
               msg.c_str());
  std::exit(2);
}

bool parseInt(const std::string &text, int64_t &out) {
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end)
    return false;
  out = v;
  return true;
}

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string inlineValue;
    bool hasInline = false;
    if (a.rfind("--", 0) == 0) {
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        inlineValue = a.substr(eq + 1);
        a = a.substr(0, eq);
        hasInline = true;
      }
    }
    auto value = [&]() -> std::string {
      if (hasInline)
        return inlineValue;
      if (i + 1 >= argc)
        usageError(a + " needs a value");
      return argv[++i];
    };
    auto intValue = [&]() {
      int64_t v;
      std::string text = value();
      if (!parseInt(text, v) || v < 0)
        usageError(a + ": expected a non-negative integer, found '" + text +
                   "'");
      return v;
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--synthetic") {
      o.synthetic = true;
    } else if (a == "--data") {
      o.data = value();
    } else if (a == "--steps") {
      o.steps = intValue();
    } else if (a == "--seed") {
      o.seed = uint64_t(intValue());
    } else if (a == "--log-json") {
      o.logJson = value();
    } else if (a == "--comm-timeout") {
      o.commTimeout = value();
    } else if (a == "--checkpoint-dir") {
      o.checkpointDir = value();
    } else if (a == "--save-every") {
      o.saveEvery = intValue();
    } else if (a == "--resume") {
      o.resume = true;
    } else if (a == "--init-from") {
      o.initFrom = value();
    } else if (!a.empty() && a[0] == '-') {
      usageError("unknown option '" + a + "'");
    } else if (o.plan.empty()) {
      o.plan = a;
    } else {
      usageError("more than one plan: '" + o.plan + "' and '" + a + "'");
    }
  }
  if (o.plan.empty())
    usageError("no plan given");
  if (o.synthetic && !o.data.empty())
    usageError("--synthetic and --data exclude each other");
  if (o.data.empty())
    o.synthetic = true;
  if (!o.checkpointDir.empty() || o.resume || !o.initFrom.empty() ||
      o.saveEvery)
    usageError("checkpointing (--checkpoint-dir, --save-every, --resume, "
               "--init-from) is not implemented yet");
  return o;
}

/// Launched by mpirun (OpenMPI, MPICH / Hydra, Slurm's PMI)?
bool launchedByMpi() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v))
      return true;
  return false;
}

std::string formatBytes(double b) {
  char buf[64];
  if (b >= 1 << 30)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1 << 30));
  else if (b >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

int run(const Options &o, Communicator &comm) {
  bool root = comm.rank() == 0;
  auto err = [&](const std::string &msg) {
    std::fprintf(stderr, "zerorun: rank %d of %d: error: %s\n", comm.rank(),
                 comm.size(), msg.c_str());
    return 1;
  };
  if (!o.commTimeout.empty()) {
    auto t = parseCommTimeout(o.commTimeout);
    if (!t)
      return err("--comm-timeout: " + t.error().message);
    comm.setTimeout(*t);
  }
  auto plan = loadPlan(o.plan);
  if (!plan)
    return err(plan.error().str());
  ExecutorOptions eo;
  eo.seed = o.seed;
  auto ex = Executor::create(std::move(*plan), comm, eo);
  if (!ex)
    return err(ex.error().message);
  Executor &e = **ex;
  const Plan &p = e.plan();
  BatchShape shape;
  shape.worldSize = comm.size();
  shape.rank = comm.rank();
  shape.gradientAccumulation = p.gradientAccumulationSteps;
  shape.microBatch = p.model.microBatch;
  shape.seqLen = p.model.seqLen;
  auto loader = o.synthetic
                    ? DataLoader::synthetic(o.seed, shape, e.vocabSize())
                    : DataLoader::open(o.data, shape, e.vocabSize());
  if (!loader)
    return err(loader.error().str());

  std::ofstream log;
  if (root && !o.logJson.empty()) {
    log.open(o.logJson);
    if (!log)
      return err("cannot write " + o.logJson);
  }
  if (root)
    std::printf("zerorun: %s, stage %lld, %d rank(s), %lld micro-step(s) of "
                "%lld x %lld tokens per rank, %s data\n",
                p.model.name.c_str(), (long long)p.stage, comm.size(),
                (long long)p.gradientAccumulationSteps,
                (long long)p.model.microBatch, (long long)p.model.seqLen,
                o.synthetic ? "synthetic" : o.data.c_str());
  for (int64_t s = 0; s < o.steps; ++s) {
    auto r = e.runStep(*loader, s);
    if (!r)
      return err(r.error().message);
    if (root) {
      std::printf("step %lld  loss %.6f  %.0f tokens/s  compute %.3f s  "
                  "wait %.3f s  memory %s%s\n",
                  (long long)r->step, r->loss,
                  r->seconds > 0 ? double(r->tokens) / r->seconds : 0.0,
                  r->computeSeconds, r->waitSeconds,
                  formatBytes(double(e.measuredPeakBytes())).c_str(),
                  r->skipped ? "  (overflow: step skipped)" : "");
      std::fflush(stdout);
      if (log) {
        nlohmann::json j = {{"step", r->step},
                            {"loss", r->loss},
                            {"seconds", r->seconds},
                            {"compute_seconds", r->computeSeconds},
                            {"wait_seconds", r->waitSeconds},
                            {"tokens", r->tokens},
                            {"loss_scale", r->lossScale},
                            {"skipped", r->skipped},
                            {"measured_peak_bytes", e.measuredPeakBytes()}};
        log << j.dump() << "\n";
        log.flush();
      }
    }
  }
  double peakMax =
      comm.size() > 1
          ? comm.allReduceScalar(double(e.measuredPeakBytes()), ScalarOp::Max,
                                 OpLabel{-1, "peak memory"})
          : double(e.measuredPeakBytes());
  if (root) {
    std::printf("memory: measured peak %s (rank 0; max over ranks %s), "
                "predicted %s (persistent %s + arena %s)\n",
                formatBytes(double(e.measuredPeakBytes())).c_str(),
                formatBytes(peakMax).c_str(),
                formatBytes(double(e.predictedPeakBytes())).c_str(),
                formatBytes(double(e.persistentDeviceBytes())).c_str(),
                formatBytes(double(e.arenaBytes())).c_str());
    if (log) {
      nlohmann::json j = {
          {"final", true},
          {"steps", o.steps},
          {"measured_peak_bytes", e.measuredPeakBytes()},
          {"measured_peak_bytes_max_rank", int64_t(peakMax)},
          {"predicted_peak_bytes", e.predictedPeakBytes()},
          {"persistent_device_bytes", e.persistentDeviceBytes()},
          {"arena_bytes", e.arenaBytes()}};
      log << j.dump() << "\n";
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  if (!launchedByMpi()) {
    LocalCommunicator comm;
    return run(o, comm);
  }
  MpiSession session(&argc, &argv);
  int rc;
  {
    auto comm = MpiCommunicator::world();
    rc = run(o, *comm);
    if (rc != 0 && comm->size() > 1) {
      std::fflush(nullptr);
      MPI_Abort(MPI_COMM_WORLD, rc);
    }
  }
  return rc;
}
