//===- zerorun.cpp - Runs a zeroc plan, one process per rank --------------===//
//
//   zerorun PLAN.json [--synthetic | --data FILE] [--steps N] [--seed S]
//           [--log-json PATH] [--comm-timeout SECONDS]
//           [--checkpoint-dir DIR [--save-every N] [--resume]]
//           [--init-from MODEL.safetensors] [--dump-grads GRADS.safetensors]
//
// Launched by mpirun (one process per rank) or alone for a one-rank plan;
// on CPU ranks or (--device cuda) one GPU per rank. Options, the progress
// display and the run loop live here; the executor, the checkpoint
// protocol and the devices are in runtime/. docs/zerorun.md.
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"
#include "checkpoint/TrainingCheckpoint.h"
#include "comm/Communicator.h"
#include "comm/MpiCommunicator.h"
#include "data/DataLoader.h"
#include "exec/CudaBackend.h"
#include "exec/Device.h"
#include "exec/Executor.h"
#include "exec/GradientDump.h"
#include "exec/Profiler.h"
#include "zeroc/Checkpoint/Crc32c.h"
#include "zeroc/Checkpoint/FileIO.h"
#include "zeroc/Cost/CostModel.h"
#include "zeroc/Plan/Plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <time.h>
#include <unistd.h>

using namespace zeroc;
using namespace zeroc::runtime;

namespace {

/// Seconds since this process started (exec), from /proc (clock-tick
/// resolution); -1 where /proc cannot tell.
double secondsSinceProcessStart() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren == std::string::npos)
    return -1;
  // Fields after the command: state is field 3, starttime field 22.
  const char *p = text.c_str() + paren + 2;
  for (int field = 3; field < 22 && *p; ++field) {
    p = std::strchr(p, ' ');
    if (!p)
      return -1;
    ++p;
  }
  double startTicks = std::strtod(p, nullptr);
  struct timespec now;
  if (::clock_gettime(CLOCK_BOOTTIME, &now) != 0)
    return -1;
  double ticks = double(::sysconf(_SC_CLK_TCK));
  return double(now.tv_sec) + double(now.tv_nsec) * 1e-9 - startTicks / ticks;
}

const char *kUsage =
    R"(USAGE: zerorun PLAN.json [options]
       zerorun --calibrate -o CLUSTER.json [--device cpu|cuda]
               [--shapes PLAN]...

Runs the training steps of a plan written by `zeroc MODEL.mlir --config DS.json
--world-size N -o PLAN.json`. Start N processes with `mpirun -np N zerorun ...`;
a plan for one rank also runs without mpirun.

OPTIONS:
  --synthetic             Train on deterministic random tokens (the default
                          when no --data is given)
  --data FILE             Train on a token file: ZTOK, llm.c .bin, nanoGPT
                          .bin, Megatron PREFIX(.bin|.idx), *.u16, *.u32,
                          told apart by content (docs/data-format.md);
                          repeat it, or give a quoted glob ('shard_*.bin',
                          matches in byte order), to read several files
                          back to back as one stream
  --loss-mask             Count in the loss only the targets whose byte in
                          FILE.mask (beside each token file, one byte 0/1
                          per token) is 1, or whose label in FILE.labels
                          (Hugging Face's, int32) is not -100; the loss is
                          the mean over the global batch's counted targets
  --no-cross-doc-loss     Do not count a target that starts a document
                          (Megatron's document index, each file's start)
  --no-cross-doc-attention
                          No token attends to a token of an earlier
                          document in its sequence (a packed-sequence
                          mask in the attention kernels; CPU only)
  --reset-position-ids    Count each document's positions from 0 (GPT-2's
                          learned positions, RoPE; CPU only)
  --steps N               Optimizer steps to run (default 10)
  --seed S                Seed of parameter init and synthetic data (default 0)
  --log-json PATH         Write one JSON object per step ({"step", "loss",
                          ...}) and a final one with the measured memory
                          ("measured_peak_bytes", the counting allocator's),
                          "predicted_peak_bytes" and the measured traffic
                          ("measured_comm_elements_per_rank_per_step"); on
                          more than one rank each step's "arrival_skew" and
                          the final "straggler" (rank 0; docs/zerorun.md)
  --comm-timeout T        Abort every rank when a collective takes longer
                          than T (seconds, or 500ms, 90s, 30m, 2h; default 30m)
  --checkpoint-dir DIR    Save checkpoints to DIR (tag step<N>; DIR/latest
                          names the newest complete one), after the last step
                          and every --save-every steps
  --save-every N          Also save every N steps (needs --checkpoint-dir)
  --resume                Continue from DIR/latest: tensors, step, loss-scale
                          state and data position; --steps stays the total
  --init-from PATH        Initialize parameters and master copies from a
                          whole-model safetensors checkpoint instead of
                          random init: zeroc's names (`zeroc consolidate`)
                          or Hugging Face's for the plan's architecture; a
                          file, a model.safetensors.index.json of shards,
                          or a directory holding either
  --dump-grads FILE       Run the first step's micro-steps (forward and
                          backward, no optimizer step) and write every
                          parameter's gradient, under the parameter's name,
                          to FILE (safetensors; the loss in its metadata);
                          needs a stage-0 plan for one rank
  --nvme-path DIR          Keep tensors the plan places on nvme in files under
                          DIR (default: the config's nvme_path)
  --device cpu|cuda       Where to train: CPU ranks (BLAS, MPI; the default)
                          or one GPU per rank (CUDA kernels, cuBLAS, NCCL;
                          needs a zerorun built with the CUDA backend)
  --profile TRACE.json    Record every op's start and end on every rank and
                          stream; rank 0 writes them as one Chrome trace with
                          the names of `zeroc inspect --trace`, for `zeroc
                          inspect PLAN --cluster C --compare TRACE.json`;
                          on --device cuda the spans are the GPU's own
                          (CUDA events around each op on its stream), so
                          copies and collectives beside kernels show as
                          they overlap
  --profile-sync          With --profile on --device cuda: synchronize each
                          op's stream and take host times instead (each
                          op alone, no overlap; steps run slower)
  --plain                 One plain line per step even on a terminal (the
                          default there is a progress bar)
  --single-thread         Run every op on one thread in program order
                          (the default on a CPU rank with one core to
                          itself: its streams' threads would only take
                          turns on it, MPI's polling beside the kernels)
  --stream-threads        A worker thread per plan stream, so collectives
                          overlap compute as the plan says (the default
                          with two or more cores a rank, and on GPUs)
  --calibrate             Measure this machine instead of running a plan
                          (GEMMs by size and dtype, kernels, Adam, clipping,
                          copies, NVMe, the executor's overhead, and under
                          mpirun the collectives) and write a cluster file
                          for zeroc inspect --cluster (docs/zerorun.md)
  -o, --output FILE       Where --calibrate writes the cluster file
  --shapes PLAN           With --calibrate, also time each linear GEMM and
                          each flash attention of PLAN on its own shapes
                          (repeatable): the cost model then prices those
                          ops at their measured rates rather than between
                          the size classes
  --threads N             Threads per rank for the CPU kernels and BLAS
                          (default: this machine's cores / the ranks on it,
                          at least 1). More than cores / ranks is refused
                          (ranks x threads <= cores) unless --oversubscribe
  --oversubscribe         Accept --threads N with ranks x N > cores
  -h, --help              Show this help
)";

struct Options {
  std::string plan;
  std::vector<std::string> data;
  bool synthetic = false;
  DataOptions dataOptions;
  int64_t steps = 10;
  uint64_t seed = 0;
  std::string logJson;
  std::string commTimeout;
  bool singleThread = false;
  bool streamThreads = false; ///< --stream-threads, asked for.
  bool profileSync = false;
  std::string nvmePath;
  std::string device = "cpu";
  bool plainLog = false;
  std::string checkpointDir, initFrom, dumpGrads;
  std::string profile;
  bool calibrate = false;
  std::string output;
  std::vector<std::string> shapes; ///< --shapes PLAN, for --calibrate.
  int64_t saveEvery = 0;
  bool resume = false;
  int64_t threads = 0; ///< 0: cores / ranks on the node.
  bool oversubscribe = false;
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
    } else if (a == "--plain") {
      o.plainLog = true;
    } else if (a == "--device") {
      o.device = value();
      if (o.device != "cpu" && o.device != "cuda")
        usageError("--device: expected cpu or cuda, found '" + o.device + "'");
    } else if (a == "--nvme-path") {
      o.nvmePath = value();
    } else if (a == "--single-thread") {
      o.singleThread = true;
    } else if (a == "--stream-threads") {
      o.streamThreads = true;
    } else if (a == "--profile-sync") {
      o.profileSync = true;
    } else if (a == "--loss-mask") {
      o.dataOptions.lossMask = true;
    } else if (a == "--no-cross-doc-loss") {
      o.dataOptions.noCrossDocLoss = true;
    } else if (a == "--no-cross-doc-attention") {
      o.dataOptions.noCrossDocAttention = true;
    } else if (a == "--reset-position-ids") {
      o.dataOptions.resetPositionIds = true;
    } else if (a == "--threads") {
      o.threads = intValue();
      if (o.threads < 1)
        usageError("--threads: expected at least 1");
    } else if (a == "--oversubscribe") {
      o.oversubscribe = true;
    } else if (a == "--data") {
      o.data.push_back(value());
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
    } else if (a == "--dump-grads") {
      o.dumpGrads = value();
    } else if (a == "--profile") {
      o.profile = value();
    } else if (a == "--calibrate") {
      o.calibrate = true;
    } else if (a == "-o" || a == "--output") {
      o.output = value();
    } else if (a == "--shapes") {
      o.shapes.push_back(value());
    } else if (!a.empty() && a[0] == '-') {
      usageError("unknown option '" + a + "'");
    } else if (o.plan.empty()) {
      o.plan = a;
    } else {
      usageError("more than one plan: '" + o.plan + "' and '" + a + "'");
    }
  }
  if (o.calibrate) {
    if (!o.plan.empty())
      usageError("--calibrate measures the machine: it takes no plan ('" +
                 o.plan + "')");
    if (o.output.empty())
      usageError("--calibrate needs -o CLUSTER.json");
    return o;
  }
  if (!o.output.empty())
    usageError("-o is for --calibrate");
  if (!o.shapes.empty())
    usageError("--shapes is for --calibrate (it times a plan's GEMMs and "
               "attention; to run "
               "'" +
               o.shapes.front() + "', give it without --shapes)");
  if (o.plan.empty())
    usageError("no plan given");
  if (o.synthetic && !o.data.empty())
    usageError("--synthetic and --data exclude each other");
  if (o.profileSync && (o.profile.empty() || o.device != "cuda"))
    usageError("--profile-sync is for --profile on --device cuda (CPU ranks "
               "time their ops on the host anyway)");
  if (o.data.empty() &&
      (o.dataOptions.lossMask || o.dataOptions.noCrossDocLoss ||
       o.dataOptions.noCrossDocAttention || o.dataOptions.resetPositionIds))
    usageError("--loss-mask, --no-cross-doc-loss, --no-cross-doc-attention "
               "and --reset-position-ids need --data");
  if ((o.dataOptions.noCrossDocAttention || o.dataOptions.resetPositionIds) &&
      o.device == "cuda")
    usageError(std::string(o.dataOptions.noCrossDocAttention
                               ? "--no-cross-doc-attention"
                               : "--reset-position-ids") +
               ": the CUDA kernels do not implement packed-sequence document "
               "starts yet (run on --device cpu)");
  if (o.data.empty())
    o.synthetic = true;
  if (o.saveEvery && o.checkpointDir.empty())
    usageError("--save-every needs --checkpoint-dir");
  if (o.resume && o.checkpointDir.empty())
    usageError("--resume needs --checkpoint-dir");
  if (o.resume && !o.initFrom.empty())
    usageError("--resume and --init-from exclude each other");
  if (o.singleThread && o.streamThreads)
    usageError("--single-thread and --stream-threads exclude each other");
  if (!o.dumpGrads.empty() && !o.checkpointDir.empty())
    usageError("--dump-grads runs no optimizer step: it saves no checkpoint "
               "(--checkpoint-dir)");
  return o;
}

/// Launched by mpirun (OpenMPI, MPICH / Hydra, Slurm's PMI)?
bool launchedByMpi() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v))
      return true;
  return false;
}

/// "0:07", "12:34", "1:02:03".
std::string formatSeconds(double seconds) {
  long t = long(seconds + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60,
                  t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
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

/// Reads and checks the plan at `path` into `out`; "" or the error. Each
/// rank reads it for itself: a plan that changed on disk while they read
/// it (or differs between their file systems) would desynchronise them, so
/// the ranks compare what they read before using it.
std::string readPlanOnEveryRank(Communicator &comm, const std::string &path,
                                std::optional<Plan> &out) {
  auto text = readWholeFile(path);
  if (!text)
    return text.error().str();
  if (auto differs = checkSameOnEveryRank(
          comm, crc32c(0, text->data(), text->size()), path))
    return *differs;
  auto doc = JsonDocument::parse(std::move(*text), path);
  if (!doc)
    return doc.error().str();
  auto plan = readPlan(*doc);
  if (!plan)
    return plan.error().str();
  out = std::move(*plan);
  return "";
}

/// The steps' NVMe and PCIe traffic per step on rank 0 (totals over
/// `steps` steps), each pair beside the plan's figure
/// (offloadTrafficPerStep): "the plan's" where they are equal to the byte.
std::string offloadLines(const std::optional<NvmeStats> &nvme,
                         const std::optional<HostTraffic> &pcie,
                         const OffloadTraffic &plan, int64_t steps,
                         int64_t saves) {
  auto pair = [&](const char *what, const char *a, double measuredA,
                  double planA, const char *b, double measuredB, double planB) {
    measuredA /= double(steps);
    measuredB /= double(steps);
    std::string line = std::string(what) +
                       " per step: " + formatBytes(measuredA) + " " + a + ", " +
                       formatBytes(measuredB) + " " + b + " (rank 0; ";
    if (saves > 0)
      line += "with " + std::to_string(saves) +
              " checkpoint(s) saved between the steps; ";
    if (measuredA == planA && measuredB == planB)
      return line + "the plan's to the byte)\n";
    char ratio[128];
    std::snprintf(ratio, sizeof ratio, "measured / plan %.3f and %.3f",
                  planA > 0 ? measuredA / planA : 0.0,
                  planB > 0 ? measuredB / planB : 0.0);
    return line + "the plan: " + formatBytes(planA) + " and " +
           formatBytes(planB) + ", " + ratio + ")\n";
  };
  std::string out;
  if (nvme)
    out += pair("nvme", "read", double(nvme->bytesRead), plan.nvmeRead,
                "written", double(nvme->bytesWritten), plan.nvmeWrite);
  if (pcie)
    out += pair("pcie", "to the GPU", double(pcie->toDevice), plan.toDevice,
                "to the host", double(pcie->toHost), plan.toHost);
  return out;
}

/// Runs the plan; nonzero on failure. `agreedFailure` is set when every rank
/// ZERORUN_TEST_DELAY_RANK=R:SECONDS (tests only, docs/zerorun.md,
/// "Stragglers"): rank R sleeps SECONDS before each step, a straggler the
/// arrival-skew report must name. Nothing when unset.
struct TestDelay {
  int rank = -1;
  double seconds = 0;
};
Expected<TestDelay> testDelay(int worldSize) {
  const char *text = std::getenv("ZERORUN_TEST_DELAY_RANK");
  if (!text)
    return TestDelay{};
  std::string spec = text;
  auto bad = [&](const std::string &why) {
    return Diagnostic{"", 0, 0,
                      "ZERORUN_TEST_DELAY_RANK='" + spec + "': " + why +
                          " (expected RANK:SECONDS, e.g. 1:0.2; for tests "
                          "only)"};
  };
  size_t colon = spec.find(':');
  if (colon == std::string::npos)
    return bad("no ':'");
  char *end = nullptr;
  std::string rankText = spec.substr(0, colon),
              secondsText = spec.substr(colon + 1);
  long rank = std::strtol(rankText.c_str(), &end, 10);
  if (rankText.empty() || *end != '\0' || rank < 0)
    return bad("the rank must be a number >= 0");
  if (rank >= worldSize)
    return bad("rank " + rankText + " is not a rank of this " +
               std::to_string(worldSize) + "-rank run");
  double seconds = std::strtod(secondsText.c_str(), &end);
  if (secondsText.empty() || *end != '\0' || !(seconds >= 0) ||
      !std::isfinite(seconds))
    return bad("the delay must be a number of seconds >= 0");
  return TestDelay{int(rank), seconds};
}

/// "rank 1 (host node7)".
std::string rankOnHost(int rank, const std::vector<std::string> &hosts) {
  std::string out = "rank " + std::to_string(rank);
  if (size_t(rank) < hosts.size())
    out += " (host " + hosts[size_t(rank)] + ")";
  return out;
}

/// fails together (they agreed on it through a collective), so that main
/// ends the job normally rather than with MPI_Abort, which can kill a rank
/// before its own, more specific, message reaches the launcher. `failure`
/// receives the error this rank printed (main announces it to the other
/// ranks when they did not agree on it).
int run(const Options &o, Communicator &comm, Device *device,
        bool *agreedFailure = nullptr, std::string *failure = nullptr) {
  bool root = comm.rank() == 0;
  auto err = [&](const std::string &msg) {
    std::fprintf(stderr, "zerorun: rank %d of %d: error: %s\n", comm.rank(),
                 comm.size(), msg.c_str());
    if (failure && failure->empty())
      *failure = msg;
    return 1;
  };
  if (!o.commTimeout.empty()) {
    auto t = parseCommTimeout(o.commTimeout);
    if (!t)
      return err("--comm-timeout: " + t.error().message);
    comm.setTimeout(*t);
  }
  // Threads per rank: ranks x threads <= cores (docs/zerorun.md, "Threads").
  // A rank the launcher bound to some cores (mpirun --bind-to) has those
  // to itself; an unbound one shares the node's with the node's ranks.
  int cores = cpu::availableCores();
  int ranksHere = 1;
  try {
    ranksHere = nodeRank(worldIfRunning()).size;
  } catch (const std::exception &e) {
    return err(std::string("cannot count the ranks on this node: ") + e.what());
  }
  if (cores < cpu::onlineCores())
    ranksHere = 1; // bound: `cores` are this rank's
  int fits = std::max(1, cores / ranksHere);
  int threads = o.threads ? int(o.threads) : fits;
  if (o.threads && int64_t(ranksHere) * o.threads > cores && !o.oversubscribe)
    return err("--threads " + std::to_string(o.threads) + " with " +
               std::to_string(ranksHere) + " rank(s) on " +
               std::to_string(cores) + " core(s) needs " +
               std::to_string(int64_t(ranksHere) * o.threads) +
               " (ranks x threads <= cores; --threads " + std::to_string(fits) +
               " fits, --oversubscribe runs anyway)");
  cpu::setThreads(threads);
  // A CPU rank with one core: its streams' threads would take turns on it,
  // MPI polling beside the kernels; in program order on one thread tiny
  // GPT-2 and Llama at stage 3 on 2 ranks of this 2-core VM stepped
  // 0.75-0.85x the time, the other stages 0.87-1.08x (bench/RESULTS.md,
  // run 36), as the cost model prices a rank of one core.
  const bool singleThread =
      o.singleThread || (!device && fits == 1 && !o.streamThreads);

  if (o.calibrate) {
    std::unique_ptr<Device> cpu = device ? nullptr : makeCpuDevice();
    const char *tmp = std::getenv("TMPDIR");
    std::string scratch = !o.nvmePath.empty() ? o.nvmePath : tmp ? tmp : "/tmp";
    // --shapes: every plan's GEMMs, read as a run reads its plan, so that
    // the ranks time the same list.
    std::set<PlanGemm> gemms;
    std::set<PlanAttention> attentions;
    std::string from;
    for (const std::string &path : o.shapes) {
      std::optional<Plan> plan;
      if (std::string why = readPlanOnEveryRank(comm, path, plan); !why.empty())
        return err("--shapes: " + why);
      std::vector<PlanGemm> mine = planGemms(*plan);
      if (mine.empty())
        return err("--shapes: " + path +
                   " has no linear, linear_grad_input or linear_grad_weight "
                   "op to time");
      gemms.insert(mine.begin(), mine.end());
      std::vector<PlanAttention> theirs = planAttentions(*plan);
      attentions.insert(theirs.begin(), theirs.end());
      from += (from.empty() ? "" : ", ") + path;
    }
    try {
      return calibrate(comm, device ? *device : *cpu, o.output, scratch,
                       {gemms.begin(), gemms.end()}, from,
                       {attentions.begin(), attentions.end()});
    } catch (const std::exception &e) {
      return err(std::string("--calibrate: ") + e.what());
    }
  }
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto planStart = Clock::now();
  std::optional<Plan> plan;
  if (std::string why = readPlanOnEveryRank(comm, o.plan, plan); !why.empty())
    return err(why);
  double planSeconds = since(planStart);
  if (!o.dumpGrads.empty())
    if (std::string why = gradientDumpRefusal(*plan); !why.empty())
      return err(why);
  auto delay = testDelay(comm.size());
  if (!delay)
    return err(delay.error().message);
  // The hosts, for the straggler report; arrival times are comparable only
  // on one host (exec/ArrivalSkew.h).
  char hostName[256] = "";
  ::gethostname(hostName, sizeof hostName - 1);
  std::vector<std::string> hosts = allGatherText(comm, hostName, "host names");
  bool oneHost =
      ranksHere == comm.size() ||
      std::all_of(hosts.begin(), hosts.end(),
                  [&](const std::string &h) { return h == hosts[0]; });
  Profiler profiler;
  ExecutorOptions eo;
  eo.skewMethod = oneHost ? SkewMethod::Arrival : SkewMethod::Wait;
  // Tests only: the across-hosts method on one host.
  if (const char *method = std::getenv("ZERORUN_TEST_SKEW_METHOD")) {
    if (std::string(method) == "wait")
      eo.skewMethod = SkewMethod::Wait;
    else if (std::string(method) != "arrival")
      return err(std::string("ZERORUN_TEST_SKEW_METHOD='") + method +
                 "': expected arrival or wait (for tests only)");
  }
  eo.profiler = o.profile.empty() ? nullptr : &profiler;
  profiler.synchronizeOps = o.device == "cuda" && o.profileSync;
  if (eo.profiler && device && !o.profileSync)
    profiler.useDeviceClock(*device);
  if (eo.profiler && profiler.synchronizeOps && root)
    std::cerr << "zerorun: --profile-sync synchronizes each op's stream to "
                 "time it: steps run slower and streams overlap less than "
                 "without it\n";
  eo.seed = o.seed;
  eo.streamThreads = !singleThread;
  eo.nvmePath = o.nvmePath;
  eo.device = device;
  // A checkpoint or a safetensors file overwrites every parameter and
  // master copy (or the run stops with an error): no random init first.
  eo.randomInit = !o.resume && o.initFrom.empty();
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
  auto loader =
      o.synthetic
          ? DataLoader::synthetic(o.seed, shape, e.vocabSize())
          : DataLoader::open(o.data, shape, e.vocabSize(), o.dataOptions);
  if (!loader)
    return err(loader.error().str());

  // Where the weights come from: a checkpoint, a safetensors file, or the
  // random init Executor::create did. Both loaders read and verify
  // everything in scratch memory before writing a byte of the tensors.
  int64_t firstStep = 0;
  auto weightsStart = Clock::now();
  if (o.resume) {
    auto resumed = resumeTraining(e, comm, o.checkpointDir);
    if (!resumed) {
      // resumeTraining's ranks agree on failure: every rank is here.
      if (agreedFailure)
        *agreedFailure = true;
      return err("--resume from " + o.checkpointDir + ": " +
                 resumed.error().message);
    }
    firstStep = resumed->step;
    if (root)
      std::printf("zerorun: resumed from %s at step %lld\n",
                  resumed->checkpoint.c_str(), (long long)firstStep);
  } else if (!o.initFrom.empty()) {
    std::string naming;
    auto names = initFromSafetensors(e, comm, o.initFrom, &naming);
    if (!names)
      return err("--init-from: " + names.error().message);
    if (root)
      std::printf("zerorun: initialized %zu tensor(s) from %s (%s names)\n",
                  names->size(), o.initFrom.c_str(),
                  naming == "zeroc" ? "zeroc"
                                    : ("Hugging Face " + naming).c_str());
  }
  double weightsSeconds = since(weightsStart);

  if (!o.dumpGrads.empty()) {
    auto dumped = dumpGradients(e, *loader, firstStep, o.dumpGrads);
    if (!dumped)
      return err("--dump-grads: " + dumped.error().str());
    std::printf("zerorun: step %lld  loss %.9g: the gradients of %zu "
                "parameter(s) written to %s\n",
                (long long)firstStep + 1, dumped->loss,
                dumped->parameters.size(), o.dumpGrads.c_str());
    return 0;
  }

  std::ofstream profileOut;
  if (!o.profile.empty()) {
    if (root) {
      profileOut.open(o.profile);
      if (!profileOut)
        return err("--profile: cannot write " + o.profile);
    }
    // One time origin for every rank (one host's clock; across hosts,
    // within the barrier's skew).
    if (comm.size() > 1) {
      CommHandle b = comm.barrier(OpLabel{-1, "profile start"});
      comm.wait(b);
    }
    profiler.setOrigin(Profiler::Clock::now());
  }
  std::ofstream log;
  if (root && !o.logJson.empty()) {
    log.open(o.logJson);
    if (!log)
      return err("cannot write " + o.logJson);
  }
  const StartupSeconds &startup = e.startupSeconds();
  double readySeconds = secondsSinceProcessStart();
  if (root) {
    std::printf("zerorun: %s, stage %lld, %d rank(s), %lld micro-step(s) of "
                "%lld x %lld tokens per rank, %s data, %d thread(s) per "
                "rank%s\n",
                p.model.name.c_str(), (long long)p.stage, comm.size(),
                (long long)p.gradientAccumulationSteps,
                (long long)p.model.microBatch, (long long)p.model.seqLen,
                o.synthetic ? "synthetic" : loader->source().name().c_str(),
                threads,
                singleThread ? ", ops on one thread in program order" : "");
    std::printf("zerorun: ready %.2f s after start (plan %.2f s, allocate "
                "%.2f s, %s %.2f s)\n",
                readySeconds, planSeconds, startup.allocate,
                o.resume              ? "resume"
                : !o.initFrom.empty() ? "init-from"
                                      : "random init",
                o.resume || !o.initFrom.empty() ? weightsSeconds
                                                : startup.init);
  }
  // The step of the newest checkpoint this run has (-1: none yet).
  int64_t lastSaved = o.resume ? firstStep : -1;
  // On a terminal: a progress bar redrawn every step; otherwise (a pipe, a
  // file, CI) one plain line per step.
  bool bar = root && !o.plainLog && ::isatty(::fileno(stdout));
  auto save = [&](int64_t done) -> bool {
    if (auto ok = saveTrainingCheckpoint(e, comm, o.checkpointDir, done); !ok) {
      err(ok.error().message);
      return false;
    }
    lastSaved = done;
    if (root) {
      std::printf("%szerorun: saved checkpoint %s\n", bar ? "\r\033[K" : "",
                  checkpointTagDir(o.checkpointDir, stepTag(done)).c_str());
      std::fflush(stdout);
    }
    return true;
  };
  double elapsed = 0;
  // The steps' traffic: what the communicators move from here on.
  const CommTraffic trafficBefore = e.commTraffic();
  // And what crosses to and from NVMe and PCIe (after allocation and
  // initialization, which write the files and fill the device).
  const NvmeStats nvmeBefore = e.nvmeStats();
  const std::optional<HostTraffic> pcieBefore =
      device ? device->hostTraffic() : std::nullopt;
  const int64_t stepsRun = std::max<int64_t>(o.steps - firstStep, 0);
  // Checkpoints saved between the steps (--save-every): their bytes are in
  // the offload counts, and the NVMe tensors they read stay resident until
  // the next step.
  int64_t savesBetweenSteps = 0;
  // Who the others waited for, over the steps after the warm-up.
  StragglerTally stragglers;
  // From one step's end to the next's: the same on every rank (the steps
  // end in a collective), whichever rank was late, and the delay of
  // ZERORUN_TEST_DELAY_RANK included.
  Clock::time_point lastStepEnd = Clock::now();
  for (int64_t s = firstStep; s < o.steps; ++s) {
    if (delay->rank == comm.rank() && delay->seconds > 0)
      std::this_thread::sleep_for(
          std::chrono::duration<double>(delay->seconds));
    auto r = e.runStep(*loader, s);
    if (r && !o.profile.empty())
      profiler.resolveDeviceTimes(); // The device's marks, reused per step.
    if (!r) {
      // Every rank is about to be aborted; collectives this rank posted
      // may still use the executor's memory, so it is not torn down.
      if (comm.size() > 1)
        (void)(*ex).release();
      return err(r.error().message);
    }
    double stepPeriod = since(lastStepEnd);
    lastStepEnd = Clock::now();
    nlohmann::json skewJson;
    if (r->skew) {
      const StepSkew &k = *r->skew;
      if (s != firstStep)
        stragglers.add(k, stepPeriod);
      int slow = k.slowestRank;
      skewJson = {{"method", skewMethodName(k.method)},
                  {"collectives", k.collectives},
                  {"slowest_rank", slow},
                  {"slowest_host", hosts[size_t(slow)]},
                  {"slowest_cost_s", k.cost[size_t(slow)]},
                  {"cost_s", k.cost},
                  {"wait_for_last_s", k.waitForLast},
                  {"last_at", k.lastAt}};
      if (!o.profile.empty())
        profiler.markStep(s, "slowest: " + rankOnHost(slow, hosts), skewJson);
    }
    if (root) {
      // The first step of a process is a warm-up: its memory is touched
      // (and zero-filled by the kernel) for the first time, BLAS sets up
      // its buffers and threads. It says so, with its time, not a rate.
      bool warmUp = s == firstStep;
      double tokensPerSecond =
          r->seconds > 0 ? double(r->tokens) / r->seconds : 0.0;
      char rate[96];
      if (warmUp)
        std::snprintf(rate, sizeof rate,
                      "warm-up %.2f s (first touch of memory)", r->seconds);
      else
        std::snprintf(rate, sizeof rate, "%.0f %s", tokensPerSecond,
                      bar ? "tok/s" : "tokens/s");
      if (bar) {
        int64_t done = s + 1 - firstStep, total = o.steps - firstStep;
        // The ETA from the steps after the warm-up.
        if (!warmUp)
          elapsed += r->seconds;
        std::string eta = done > 1 ? formatSeconds(elapsed / double(done - 1) *
                                                   double(total - done))
                                   : (total > done ? "?" : formatSeconds(0));
        constexpr int kWidth = 24;
        int filled = int(kWidth * (s + 1) / std::max<int64_t>(o.steps, 1));
        std::printf("\r[%s%s] %lld/%lld  loss %.4f  %s  compute %.3f s"
                    "  wait %.3f s  mem %s  eta %s%s\033[K",
                    std::string(size_t(filled), '#').c_str(),
                    std::string(size_t(kWidth - filled), '.').c_str(),
                    (long long)r->step, (long long)o.steps, r->loss, rate,
                    r->computeSeconds, r->waitSeconds,
                    formatBytes(double(e.allocatedMemory().tensorPeak)).c_str(),
                    eta.c_str(), r->skipped ? "  (overflow: skipped)" : "");
      } else {
        std::printf("step %lld  loss %.6f  %s  compute %.3f s  "
                    "wait %.3f s  memory %s%s\n",
                    (long long)r->step, r->loss, rate, r->computeSeconds,
                    r->waitSeconds,
                    formatBytes(double(e.allocatedMemory().tensorPeak)).c_str(),
                    r->skipped ? "  (overflow: step skipped)" : "");
      }
      std::fflush(stdout);
      if (log) {
        nlohmann::json j = {
            {"step", r->step},
            {"loss", r->loss},
            {"seconds", r->seconds},
            {"compute_seconds", r->computeSeconds},
            {"wait_seconds", r->waitSeconds},
            {"tokens", r->tokens},
            {"loss_scale", r->lossScale},
            {"skipped", r->skipped},
            {"warm_up", warmUp},
            {"measured_peak_bytes", e.allocatedMemory().tensorPeak}};
        if (!skewJson.is_null())
          j["arrival_skew"] = skewJson;
        log << j.dump() << "\n";
        log.flush();
      }
    }
    if (o.saveEvery && (s + 1) % o.saveEvery == 0 && !o.checkpointDir.empty()) {
      if (!save(s + 1))
        return 1;
      savesBetweenSteps += s + 1 < o.steps;
    }
  }
  // Offload traffic of the steps, measured (before the last checkpoint,
  // which reads every NVMe file and copies the device's tensors out) and,
  // below, as the plan has it.
  std::optional<NvmeStats> nvmeMeasured;
  if (!e.nvmeDirectory().empty()) {
    NvmeStats now = e.nvmeStats();
    nvmeMeasured =
        NvmeStats{now.residentBytes, now.bytesRead - nvmeBefore.bytesRead,
                  now.bytesWritten - nvmeBefore.bytesWritten};
  }
  std::optional<HostTraffic> pcieMeasured;
  if (std::optional<HostTraffic> now =
          device ? device->hostTraffic() : std::nullopt;
      now && pcieBefore)
    pcieMeasured = HostTraffic{now->toDevice - pcieBefore->toDevice,
                               now->toHost - pcieBefore->toHost};
  if (bar && o.steps > firstStep)
    std::printf("\n");
  // After the last step (also with --steps 0: the initial weights).
  int64_t done = std::max(firstStep, o.steps);
  if (!o.checkpointDir.empty() && lastSaved != done && !save(done))
    return 1;
  if (!o.profile.empty()) {
    profiler.resolveDeviceTimes();
    nlohmann::json trace = profiler.gatherTrace(
        p, comm, device ? device->name() : std::string("cpu"));
    if (root) {
      profileOut << trace.dump() << "\n";
      profileOut.close();
      if (!profileOut)
        return err("--profile: writing " + o.profile + " failed");
      std::printf("zerorun: profile of %lld step(s) written to %s\n",
                  (long long)(o.steps - firstStep), o.profile.c_str());
    }
  }
  // Traffic per step (this process's steps), and every rank's memory.
  const CommTraffic traffic = e.commTraffic().since(trafficBefore);
  const OffloadTraffic planTraffic =
      offloadTrafficPerStep(e.plan(), pcieMeasured.has_value());
  // A measured total's mean per step (0 where nothing was measured).
  auto meanPerStep = [&](const auto &measured, auto field) {
    return measured && stepsRun ? double((*measured).*field) / double(stepsRun)
                                : 0.0;
  };
  const MemoryCounts allocated = e.allocatedMemory();
  auto overRanks = [&](double value, ScalarOp op, const char *what) {
    return comm.size() > 1 ? comm.allReduceScalar(value, op, OpLabel{-1, what})
                           : value;
  };
  double peakMax = overRanks(double(allocated.tensorPeak), ScalarOp::Max,
                             "peak memory (max)");
  double peakMin = -overRanks(-double(allocated.tensorPeak), ScalarOp::Max,
                              "peak memory (min)");
  double trackerMax = overRanks(double(e.measuredPeakBytes()), ScalarOp::Max,
                                "tracker peak memory");
  // What the device holds beyond the counting allocator (GPU:
  // cudaMemGetInfo before and after, less what the allocator holds now).
  int64_t inUse = device ? device->memoryInUse() : -1;
  int64_t inUseAtStart = device ? device->memoryInUseAtStart() : -1;
  int64_t outsideAllocator = inUse >= 0 && inUseAtStart >= 0
                                 ? inUse - inUseAtStart - allocated.total()
                                 : -1;
  if (root) {
    std::printf("memory: allocator peak %s (rank 0; max over ranks %s, min "
                "%s), predicted %s (persistent %s + arena %s), tracker %s "
                "(max over ranks)\n",
                formatBytes(double(allocated.tensorPeak)).c_str(),
                formatBytes(peakMax).c_str(), formatBytes(peakMin).c_str(),
                formatBytes(double(e.predictedPeakBytes())).c_str(),
                formatBytes(double(e.persistentDeviceBytes())).c_str(),
                formatBytes(double(e.arenaBytes())).c_str(),
                formatBytes(trackerMax).c_str());
    std::string outside;
    for (size_t i = 1; i < kMemoryUses; ++i)
      outside += std::string(i > 1 ? ", " : "") +
                 std::string(memoryUseName(MemoryUse(i))) + " " +
                 formatBytes(double(allocated.peak[i]));
    std::printf(
        "memory outside the plan (rank 0, peaks): %s; all counted "
        "together peak at %s%s\n",
        outside.c_str(), formatBytes(double(allocated.totalPeak)).c_str(),
        outsideAllocator >= 0 ? ("; device memory outside the allocator " +
                                 formatBytes(double(outsideAllocator)))
                                    .c_str()
                              : "");
    if (stepsRun > 0) {
      CommTraffic::Volume total = traffic.total();
      // Expert parallelism's token exchanges: rank 0's, as its router chose.
      const CommTraffic::Volume &a2a = traffic[CollectiveKind::AllToAll];
      std::string allToAll =
          a2a.collectives ? ", all_to_all " +
                                std::to_string(std::llround(
                                    a2a.elementsPerRank / double(stepsRun))) +
                                " (rank 0)"
                          : "";
      std::printf(
          "traffic per rank per step: all_gather %.0f, "
          "reduce_scatter %.0f, all_reduce %.0f%s, total %.0f "
          "elements (%s)\n",
          traffic[CollectiveKind::AllGather].elementsPerRank / double(stepsRun),
          traffic[CollectiveKind::ReduceScatter].elementsPerRank /
              double(stepsRun),
          traffic[CollectiveKind::AllReduce].elementsPerRank / double(stepsRun),
          allToAll.c_str(), total.elementsPerRank / double(stepsRun),
          formatBytes(total.bytesPerRank / double(stepsRun)).c_str());
    }
    if (comm.size() > 1) {
      StragglerVerdict v = stragglers.slowest();
      if (v.rank < 0) {
        std::printf("stragglers: not measured (%s)\n",
                    stepsRun < 2 ? "no step after the warm-up"
                                 : "the device's collectives are not waited "
                                   "for on the host");
      } else {
        char line[512];
        std::snprintf(
            line, sizeof line,
            "%s was the slowest to reach the collectives in %lld of %lld "
            "step(s) after the warm-up, costing the others %.1f ms per step "
            "(%.1f%% of the step; %s times)",
            rankOnHost(v.rank, hosts).c_str(), (long long)v.slowestSteps,
            (long long)v.steps, 1e3 * v.costPerStep,
            v.stepSeconds > 0 ? 100 * v.costPerStep / v.stepSeconds : 0.0,
            skewMethodName(eo.skewMethod));
        std::printf("%s: %s\n",
                    stragglers.isStraggler(v) ? "straggler" : "no straggler",
                    line);
      }
    }
    if (!e.nvmeDirectory().empty())
      std::printf("nvme: %s read, %s written in %s (rank 0)\n",
                  formatBytes(double(e.nvmeStats().bytesRead)).c_str(),
                  formatBytes(double(e.nvmeStats().bytesWritten)).c_str(),
                  e.nvmeDirectory().c_str());
    if (stepsRun > 0 && (nvmeMeasured || pcieMeasured))
      std::printf("%s", offloadLines(nvmeMeasured, pcieMeasured, planTraffic,
                                     stepsRun, savesBetweenSteps)
                            .c_str());
    if (log) {
      nlohmann::json outsidePlan = nlohmann::json::object();
      for (size_t i = 1; i < kMemoryUses; ++i)
        outsidePlan[std::string(memoryUseName(MemoryUse(i)))] =
            allocated.peak[i];
      auto perStep = [&](auto field) {
        nlohmann::json j = nlohmann::json::object();
        for (CollectiveKind kind :
             {CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
              CollectiveKind::AllReduce, CollectiveKind::AllToAll})
          j[std::string(collectiveName(kind))] =
              stepsRun ? field(traffic[kind]) / double(stepsRun) : 0.0;
        j["total"] = stepsRun ? field(traffic.total()) / double(stepsRun) : 0.0;
        return j;
      };
      auto control = [](const CommTraffic::Volume &v) {
        return nlohmann::json{{"collectives", v.collectives},
                              {"elements", v.elements}};
      };
      nlohmann::json j = {
          {"final", true},
          {"nvme_bytes_read", e.nvmeStats().bytesRead},
          {"nvme_bytes_written", e.nvmeStats().bytesWritten},
          {"measured_offload_bytes_per_step",
           {{"nvme_read", meanPerStep(nvmeMeasured, &NvmeStats::bytesRead)},
            {"nvme_write", meanPerStep(nvmeMeasured, &NvmeStats::bytesWritten)},
            {"pcie_to_device",
             meanPerStep(pcieMeasured, &HostTraffic::toDevice)},
            {"pcie_to_host", meanPerStep(pcieMeasured, &HostTraffic::toHost)},
            {"pcie_counted", pcieMeasured.has_value()},
            {"checkpoints_between_steps", savesBetweenSteps}}},
          {"plan_offload_bytes_per_step",
           {{"nvme_read", planTraffic.nvmeRead},
            {"nvme_write", planTraffic.nvmeWrite},
            {"pcie_to_device", planTraffic.toDevice},
            {"pcie_to_host", planTraffic.toHost}}},
          {"steps", o.steps},
          {"measured_peak_bytes", allocated.tensorPeak},
          {"measured_peak_bytes_max_rank", int64_t(peakMax)},
          {"measured_peak_bytes_min_rank", int64_t(peakMin)},
          {"measured_total_peak_bytes", allocated.totalPeak},
          {"outside_plan_peak_bytes", outsidePlan},
          {"tracker_peak_bytes", e.measuredPeakBytes()},
          {"tracker_peak_bytes_max_rank", int64_t(trackerMax)},
          {"predicted_peak_bytes", e.predictedPeakBytes()},
          {"device", device ? device->name() : std::string("cpu")},
          {"device_memory_in_use_bytes", inUse},
          {"device_memory_in_use_at_start_bytes", inUseAtStart},
          {"device_memory_outside_allocator_bytes", outsideAllocator},
          {"persistent_device_bytes", e.persistentDeviceBytes()},
          {"arena_bytes", e.arenaBytes()},
          {"measured_steps", stepsRun},
          {"threads_per_rank", threads},
          {"startup_seconds",
           {{"process_to_ready", readySeconds},
            {"plan_load", planSeconds},
            {"allocate", startup.allocate},
            {"random_init", startup.init},
            {"weights_load", weightsSeconds}}},
          {"measured_comm_elements_per_rank_per_step",
           perStep(
               [](const CommTraffic::Volume &v) { return v.elementsPerRank; })},
          {"measured_comm_bytes_per_rank_per_step",
           perStep(
               [](const CommTraffic::Volume &v) { return v.bytesPerRank; })},
          {"measured_collectives_per_step",
           perStep([](const CommTraffic::Volume &v) {
             return double(v.collectives);
           })},
          {"measured_control_collectives",
           {{"scalar_all_reduce", control(traffic.scalarAllReduce)},
            {"broadcast", control(traffic.broadcast)},
            {"barrier", control(traffic.barrier)}}}};
      if (comm.size() > 1) {
        StragglerVerdict v = stragglers.slowest();
        nlohmann::json skew = {{"method", skewMethodName(eo.skewMethod)},
                               {"steps", v.steps},
                               {"thresholds",
                                {{"slowest_in_step_share", kStragglerStepShare},
                                 {"cost_share_of_step", kStragglerCostShare}}}};
        if (v.rank >= 0) {
          skew["slowest_rank"] = v.rank;
          skew["slowest_host"] = hosts[size_t(v.rank)];
          skew["slowest_in_steps"] = v.slowestSteps;
          skew["cost_per_step_s"] = v.costPerStep;
          skew["step_seconds"] = v.stepSeconds;
        }
        j["arrival_skew"] = skew;
        j["straggler"] =
            stragglers.isStraggler(v)
                ? nlohmann::json{{"rank", v.rank},
                                 {"host", hosts[size_t(v.rank)]},
                                 {"cost_per_step_s", v.costPerStep},
                                 {"slowest_in_steps", v.slowestSteps},
                                 {"steps", v.steps}}
                : nlohmann::json(nullptr);
      }
      log << j.dump() << "\n";
    }
  }
  return 0;
}

} // namespace

/// `--device cuda`: the CUDA device and NCCL, from libzerorun-cuda.so
/// (exec/CudaBackend.h; MPI only to bootstrap NCCL and to pick each rank's
/// GPU on its node).
static int runCuda(Options &o, int &argc, char **&argv) {
  std::optional<MpiSession> session;
  if (launchedByMpi())
    session.emplace(&argc, &argv);
  std::string why;
  const CudaBackend *backend = loadCudaBackend(why);
  std::unique_ptr<Device> device;
  if (backend)
    device = backend->makeDevice(why);
  if (!device) {
    std::fprintf(stderr, "zerorun: error: --device cuda: %s\n", why.c_str());
    return 1;
  }
  int rc;
  try {
    auto comm = backend->ncclWorld();
    bool agreedFailure = false;
    std::string failure;
    rc = run(o, *comm, device.get(), &agreedFailure, &failure);
    if (rc != 0 && comm->size() > 1 && session) {
      std::fflush(nullptr);
      // As over MPI (main): the other ranks print this rank's error.
      if (!agreedFailure)
        comm->announceFailure(failure.empty() ? "an error (see its output)"
                                              : failure);
      MPI_Abort(MPI_COMM_WORLD, rc);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "zerorun: error: --device cuda: %s\n", e.what());
    std::fflush(nullptr);
    if (session)
      MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  return rc;
}

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  if (o.device == "cuda")
    return runCuda(o, argc, argv);
  if (!launchedByMpi()) {
    LocalCommunicator comm;
    return run(o, comm, nullptr);
  }
  MpiSession session(&argc, &argv);
  // The streams' workers call MPI concurrently.
  if (session.threadLevel() < MPI_THREAD_MULTIPLE && !o.singleThread) {
    std::fprintf(stderr, "zerorun: this MPI does not provide "
                         "MPI_THREAD_MULTIPLE; running --single-thread\n");
    o.singleThread = true;
  }
  int rc;
  {
    auto comm = MpiCommunicator::world();
    bool agreedFailure = false;
    std::string failure;
    rc = run(o, *comm, nullptr, &agreedFailure, &failure);
    if (rc != 0 && comm->size() > 1 && !agreedFailure) {
      std::fflush(nullptr);
      // The other ranks wait in a collective this rank will not start:
      // each prints this rank's error (naming the file) before the abort.
      comm->announceFailure(failure.empty() ? "an error (see its output)"
                                            : failure);
      MPI_Abort(MPI_COMM_WORLD, rc);
    }
  }
  return rc;
}
