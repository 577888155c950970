//===- Executor.cpp - Runs a plan's training steps on the CPU -------------===//

#include "exec/Executor.h"

#include "Kernels.h"
#include "exec/Device.h"
#include "exec/Dispatch.h"
#include "init/Random.h"
#include "offload/NvmeFile.h"
#include "zeroc/Support/ShardLayout.h"
#include "zeroc/Support/Workspace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <stdexcept>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace zeroc::runtime {

using cpu::Tensor;

namespace {
/// Where a MemoryTracker without a device allocates: host memory.
Device &hostDevice() {
  static std::unique_ptr<Device> cpu = makeCpuDevice();
  return *cpu;
}
} // namespace

std::shared_ptr<char> MemoryTracker::allocate(int64_t bytes, bool onDevice,
                                              int64_t alignment) {
  Device *dev = owner ? owner : &hostDevice();
  char *p = dev->allocate(bytes, onDevice, alignment);
  std::lock_guard<std::mutex> lock(mutex);
  int64_t *counter = onDevice ? &device : &host;
  *counter += bytes;
  notePeak();
  return std::shared_ptr<char>(p,
                               [this, bytes, counter, dev, onDevice](char *q) {
                                 {
                                   std::lock_guard<std::mutex> lock(mutex);
                                   *counter -= bytes;
                                 }
                                 if (dev)
                                   dev->release(q, onDevice);
                                 else
                                   std::free(q);
                               });
}

std::shared_ptr<char> MemoryTracker::allocateArena(int64_t bytes) {
  Device *dev = owner ? owner : &hostDevice();
  return std::shared_ptr<char>(dev->allocate(bytes, true),
                               [dev](char *q) { dev->release(q, true); });
}

void MemoryTracker::useArena(int64_t end) {
  std::lock_guard<std::mutex> lock(mutex);
  if (end > arenaHigh) {
    arenaHigh = end;
    notePeak();
  }
}

int64_t MemoryTracker::deviceBytes() const {
  std::lock_guard<std::mutex> lock(mutex);
  return device + arenaHigh;
}
int64_t MemoryTracker::hostBytes() const {
  std::lock_guard<std::mutex> lock(mutex);
  return host;
}
int64_t MemoryTracker::devicePeak() const {
  std::lock_guard<std::mutex> lock(mutex);
  return peak;
}

namespace {

/// An error of the executor: thrown inside, turned into a Diagnostic at the
/// API boundary.
struct ExecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string &message) { throw ExecError(message); }

void check(const cpu::Status &status, const PlanOp &op) {
  if (!status.ok())
    fail("op " + std::to_string(op.index) + " (" + std::string(op.kindName()) +
         "): " + status.error);
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// A persistent tensor: this rank's part. An `nvme` tensor lives in `file`;
/// `data` holds it only while resident (an op or checkpointing uses it).
struct Stored {
  const PlanTensor *info = nullptr;
  std::shared_ptr<char> data;
  std::unique_ptr<NvmeFile> file;
  bool dirty = false; ///< Resident and changed: to be written back.
  /// A host copy of device memory the host cannot address (a GPU's), for
  /// checkpoints; written back before the next step if `mirrorDirty`.
  std::shared_ptr<char> mirror;
  bool mirrorDirty = false;
  Tensor view() const {
    return Tensor{data.get(), info->dtype, {info->localNumel}};
  }
};

/// A slice of a tensor as a 1-d view.
Tensor slice(const Tensor &t, int64_t offset, int64_t n) {
  return Tensor{static_cast<char *>(t.data) + offset * bytesPerElement(t.dtype),
                t.dtype,
                {n}};
}


} // namespace

//===----------------------------------------------------------------------===//
// Impl
//===----------------------------------------------------------------------===//

struct Executor::Impl {
  Executor &ex;
  const Plan &plan;
  Communicator &comm;
  std::unique_ptr<Device> ownDevice; ///< The CPU device, when none is given.
  Device *dev = nullptr;
  int64_t rank, ws;
  std::map<std::string, Stored> tensors;
  std::map<std::string, const PlanFlatGroup *> groups;
  std::map<std::string, FlatGroupLayout> layouts;
  /// Each flat group's padded parameter buffer; its members are views.
  std::map<std::string, std::shared_ptr<char>> flatParams;
  /// A flat group's parameter buffer as one 1-d tensor.
  Tensor flatView(const PlanFlatGroup &g) {
    const PlanTensor &first = *tensor(g.params.at(0)).info;
    return Tensor{
        flatParams.at(g.name).get(), first.dtype, {layouts.at(g.name).padded}};
  }
  std::shared_ptr<char> arena;

  /// Collectives whose epilogue was issued in stream order (GPU): their
  /// handles and scratch live until the phase's end.
  std::mutex inflightMutex;
  std::deque<CommHandle> inflight;
  std::vector<std::shared_ptr<char>> inflightScratch;
  std::map<int64_t, int64_t> streamOf; ///< Op index -> plan stream.

  /// A started collective: its handles, and what runs once all completed.
  struct Pending {
    std::vector<CommHandle> handles;
    std::vector<std::function<void()>> after;
    std::vector<std::shared_ptr<char>> scratch; ///< Unplanned workspace.
  };

  // Per-phase run state. `values` holds every value of the phase from its
  // start (arena views), so that the streams' workers only read the map.
  const PlanPhase *phase = nullptr;
  std::map<int64_t, const PlanValue *> valueInfo;
  std::map<int64_t, Tensor> values;
  std::vector<std::shared_ptr<char>> unplanned;
  std::map<int64_t, const PlanOp *> waitOf; ///< start index -> wait op.

  // Streams: op completion, the order collectives are issued in, failure.
  std::mutex mutex;
  std::condition_variable progress;
  std::vector<char> done;              ///< By op index.
  std::map<int64_t, int64_t> ticketOf; ///< Op index -> collective number.
  int64_t issued = 0;                  ///< Collectives issued so far.
  /// Held by the thread posting a collective (its ticket) and by one
  /// draining stream-ordered handles: a communicator serves one thread at a
  /// time (MPI's waits on separate handles are the exception).
  std::mutex commAccess;
  std::atomic<bool> failed{false};
  std::string failure;
  bool streamThreads = true;

  // Step state.
  int64_t adamSteps = 0;
  cpu::LossScaleSettings lossSettings;
  cpu::LossScaleState lossState;
  bool haveLossState = false;
  std::atomic<bool> overflow{false};
  double computeSeconds = 0, waitSeconds = 0; ///< The compute stream's.
  double scalarWaitSeconds = 0; ///< Its part blocked in scalar all-reduces.
  std::thread::id computeThread;

  Impl(Executor &ex, Communicator &comm)
      : ex(ex), plan(ex.thePlan), comm(comm), rank(comm.rank()),
        ws(comm.size()) {}

  Stored &tensor(const std::string &name) {
    auto it = tensors.find(name);
    if (it == tensors.end())
      fail("no persistent tensor named '" + name + "'");
    return it->second;
  }
  const PlanFlatGroup *groupOf(const PlanTensor &t) {
    auto it = groups.find(t.of);
    return it == groups.end() ? nullptr : it->second;
  }
  Tensor &value(int64_t id) {
    auto it = values.find(id);
    if (it == values.end() || !it->second.data)
      fail("value " + std::to_string(id) + " of phase " + phase->name +
           " is used before it is defined");
    return it->second;
  }
  /// Arena memory at [offset, offset + bytes), recorded as used.
  char *arenaAt(int64_t offset, int64_t bytes) {
    ex.memory.useArena(offset + bytes);
    return arena.get() + offset;
  }
  /// `op`'s planned workspace if it holds `bytes` (Workspace.h's layout);
  /// otherwise (a plan without one) a separate allocation kept in `keep`,
  /// which the measured peak then shows above the prediction.
  char *workspace(const PlanOp &op, int64_t bytes,
                  std::vector<std::shared_ptr<char>> &keep) {
    if (bytes <= 0)
      return nullptr;
    if (op.workspaceOffset >= 0 && op.workspaceBytes >= bytes) {
      if (op.workspaceOffset + bytes > ex.arenaSize)
        fail("op " + std::to_string(op.index) +
             ": its workspace lies outside the arena");
      return arenaAt(op.workspaceOffset, bytes);
    }
    keep.push_back(ex.memory.allocate(bytes, true));
    return keep.back().get();
  }

  // NVMe offload: this rank's swap directories (removed at the end).
  std::string nvmeOverride;
  std::vector<std::string> nvmeDirs;
  ~Impl() {
    tensors.clear(); // Closes and removes the swap files first.
    for (const std::string &d : nvmeDirs)
      ::rmdir(d.c_str());
  }
  std::string nvmeDirFor(const PlanTensor &t);
  /// For a tensor in device memory the host cannot address (a GPU's): a
  /// host copy of it, made now; null where the host addresses it directly.
  char *hostMirror(Stored &s) {
    if (dev->name() == "cpu" || s.file || s.info->placement != "device")
      return nullptr;
    int64_t bytes = s.info->localNumel * bytesPerElement(s.info->dtype);
    if (s.mirror && s.mirrorDirty)
      return s.mirror.get(); // Loaded into, not yet written back.
    if (!s.mirror)
      s.mirror =
          std::shared_ptr<char>(new char[size_t(std::max<int64_t>(bytes, 1))],
                                std::default_delete<char[]>());
    dev->toHost(s.mirror.get(), s.data.get(), bytes);
    return s.mirror.get();
  }
  /// Reads an `nvme` tensor's file into a host buffer (no-op otherwise).
  void swapIn(Stored &s);
  /// Writes it back if `writeBack` and it changed, then frees the buffer.
  void swapOut(Stored &s, bool writeBack);
  /// The NVMe tensors an op uses, resident while it runs.
  struct Resident {
    Impl *impl = nullptr;
    std::vector<Stored *> held;
    bool writeBack = true;
    ~Resident() {
      if (!held.empty()) {
        try {
          impl->dev->streamSynchronize();
        } catch (const std::exception &e) {
          impl->recordFailure(e.what());
        }
      }
      for (Stored *s : held) {
        try {
          impl->swapOut(*s, writeBack);
        } catch (const std::exception &e) {
          impl->recordFailure(e.what());
        }
      }
    }
  };

  void allocate();
  void initialize(uint64_t seed);
  void runPhase(const PlanPhase &ph, const DataLoader *data, int64_t step,
                int64_t micro);
  void runStream(int64_t stream, const std::vector<const PlanOp *> &ops,
                 bool computeStream);
  /// Waits for the collectives completed in stream order so far (their
  /// --comm-timeout applies), before the host blocks on a stream.
  void drainInflight();
  void awaitDeps(const PlanOp &op);
  void markDone(const PlanOp &op);
  /// Records the first error of any stream and wakes every worker.
  void recordFailure(const std::string &message);
  /// Blocks until every collective before `op`'s has been issued; the
  /// returned guard lets the next one go when destroyed.
  struct Ticket {
    Impl *impl = nullptr;
    /// Exclusive use of the communicator while posting (NCCL's rule).
    std::unique_lock<std::mutex> access;
    Ticket() = default;
    explicit Ticket(Impl *impl) : impl(impl), access(impl->commAccess) {}
    Ticket(Ticket &&other) : impl(other.impl), access(std::move(other.access)) {
      other.impl = nullptr;
    }
    Ticket &operator=(Ticket &&) = delete;
    ~Ticket();
  };
  Ticket awaitTicket(const PlanOp &op);
  /// Waits for `p`'s collectives (giving up if another stream failed),
  /// then runs its epilogue.
  void complete(Pending &p, bool hostWait = false);
  void define(int64_t id);
  void runOp(const PlanOp &op);
  void compute(const PlanOp &op);
  void startAllGather(const PlanOp &op);
  void startReduceScatter(const PlanOp &op);
  void startAllReduce(const PlanOp &op);
  void startAllGatherUpdates(const PlanOp &op);
  void startCopy(const PlanOp &op);
  void adamUpdate(const PlanOp &op);
  void clipGradNorm(const PlanOp &op);
  void unscale(const PlanOp &op);
  double allReduceScalar(const PlanOp &op, double value, ScalarOp kind);
  OpLabel label(const PlanOp &op) {
    return OpLabel{op.index, phase->name + ", " + std::string(op.kindName()) +
                                 (op.where.empty() ? "" : ": " + op.where)};
  }
};

std::string Executor::Impl::nvmeDirFor(const PlanTensor &t) {
  const char *section =
      t.role == "param" ? "offload_param" : "offload_optimizer";
  std::string key = std::string("zero_optimization.") + section + ".nvme_path";
  std::string root = nvmeOverride;
  if (root.empty()) {
    const nlohmann::json &c = plan.config;
    auto z = c.find("zero_optimization");
    if (z != c.end() && z->is_object())
      if (auto o = z->find(section); o != z->end() && o->is_object())
        if (auto p = o->find("nvme_path"); p != o->end() && p->is_string())
          root = p->get<std::string>();
    if (root.empty())
      fail("tensor " + t.name +
           " is placed on nvme, but the plan's config has "
           "no " +
           key + " (pass --nvme-path DIR)");
  }
  struct stat st;
  if (::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("the NVMe offload directory '" + root + "' (" +
         (nvmeOverride.empty() ? key : std::string("--nvme-path")) +
         ") does not exist or is not a directory: create it, or pass "
         "--nvme-path DIR");
  std::string dir = root + "/zerorun-" + std::to_string(::getpid()) + "-rank" +
                    std::to_string(rank);
  if (std::find(nvmeDirs.begin(), nvmeDirs.end(), dir) == nvmeDirs.end()) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      fail("cannot create the NVMe swap directory " + dir + ": " +
           std::strerror(errno));
    nvmeDirs.push_back(dir);
  }
  return dir;
}

void Executor::Impl::swapIn(Stored &s) {
  if (!s.file || s.data)
    return;
  s.data = ex.memory.allocate(ioBytes(s.file->bytes()), /*device=*/false,
                              kDirectIoAlignment);
  if (auto ok = s.file->read(s.data.get()); !ok) {
    s.data.reset();
    fail(ok.error().str());
  }
  s.dirty = false;
}

void Executor::Impl::swapOut(Stored &s, bool writeBack) {
  if (!s.file || !s.data)
    return;
  if (writeBack || s.dirty)
    if (auto ok = s.file->write(s.data.get()); !ok)
      fail(ok.error().str());
  s.data.reset();
  s.dirty = false;
}

void Executor::Impl::allocate() {
  // Stages 1 and 2: a flat group's parameters are views of one padded flat
  // buffer, as in DeepSpeed, so the update gather runs in place and the
  // optimizer updates the owned partition where it lies.
  std::map<std::string, std::pair<const PlanFlatGroup *, int64_t>> memberOf;
  for (const PlanFlatGroup &g : plan.flatGroups) {
    groups[g.name] = &g;
    std::vector<int64_t> numels;
    for (size_t k = 0; k < g.params.size(); ++k) {
      const PlanTensor *p = plan.findTensor(g.params[k]);
      if (!p)
        fail("flat group " + g.name + " names no tensor " + g.params[k]);
      numels.push_back(p->numel);
      memberOf[g.params[k]] = {&g, int64_t(k)};
    }
    const FlatGroupLayout &l =
        layouts.emplace(g.name, FlatGroupLayout(numels, ws)).first->second;
    const PlanTensor &first = *plan.findTensor(g.params.at(0));
    for (const std::string &name : g.params) {
      const PlanTensor &p = *plan.findTensor(name);
      if (p.dtype != first.dtype || p.placement != first.placement ||
          p.sharded || p.localNumel != p.numel)
        fail("flat group " + g.name +
             ": its parameters must be whole and "
             "share one dtype and placement");
    }
    if (first.placement == "nvme")
      fail("flat group " + g.name +
           ": parameters on nvme (stages 1-2 keep "
           "parameters on the device)");
    int64_t bytes = l.padded * bytesPerElement(first.dtype);
    flatParams[g.name] = ex.memory.allocate(bytes, first.placement == "device");
  }
  for (const PlanTensor &t : plan.tensors) {
    Stored s;
    s.info = &t;
    bool device = t.placement == "device";
    int64_t bytes = t.localNumel * bytesPerElement(t.dtype);
    if (auto m = memberOf.find(t.name); m != memberOf.end()) {
      const std::shared_ptr<char> &flat = flatParams.at(m->second.first->name);
      int64_t at =
          layouts.at(m->second.first->name).offsets[size_t(m->second.second)];
      s.data = std::shared_ptr<char>(flat, flat.get() +
                                               at * bytesPerElement(t.dtype));
      tensors[t.name] = std::move(s);
      continue;
    }
    if (t.placement == "nvme") {
      std::string name = t.name;
      std::replace(name.begin(), name.end(), '/', '_');
      auto file = NvmeFile::create(nvmeDirFor(t), name + ".swp", bytes);
      if (!file)
        fail(file.error().str());
      s.file = std::move(*file);
      tensors[t.name] = std::move(s);
      continue;
    }
    s.data = ex.memory.allocate(bytes, device);
    tensors[t.name] = std::move(s);
  }
  for (const PlanPhase &ph : plan.phases)
    if (ph.memory)
      ex.arenaSize = std::max(ex.arenaSize, ph.memory->arenaBytes);
  // One arena serves both phases: they never run at once.
  arena = ex.memory.allocateArena(ex.arenaSize);
}

void Executor::Impl::initialize(uint64_t seed) {
  std::vector<float> buf;
  auto fill = [&](Stored &s, const PlanTensor &param, bool sharded) {
    int64_t n = s.info->localNumel;
    buf.assign(size_t(n), 0.0f);
    if (sharded)
      initShard(param, param.init, seed, ParamShardLayout{param.numel, ws},
                rank, buf.data());
    else
      initParameter(param, param.init, seed, 0, param.numel, buf.data());
    Tensor src{buf.data(), DType::F32, {n}};
    std::vector<char> cast(size_t(n * bytesPerElement(s.info->dtype)));
    Tensor dst{cast.data(), s.info->dtype, {n}};
    cpu::castTensor(src, dst);
    dev->fromHost(s.data.get(), cast.data(), int64_t(cast.size()));
  };
  for (auto &[name, s] : tensors) {
    const PlanTensor &t = *s.info;
    Resident resident{this, {}, true};
    if (s.file && (t.role == "param" || t.role == "master")) {
      swapIn(s);
      resident.held.push_back(&s);
    }
    if (t.role == "param") {
      fill(s, t, t.sharded);
    } else if (t.role == "master") {
      if (auto it = groups.find(t.of); it != groups.end()) {
        buf.assign(size_t(t.localNumel), 0.0f);
        initShard(plan, *it->second, seed, rank, buf.data());
        dev->fromHost(s.data.get(), buf.data(),
                      int64_t(buf.size() * sizeof(float)));
      } else {
        const PlanTensor &param = *tensor(t.of).info;
        fill(s, param, t.sharded);
      }
    }
  }
}

void Executor::Impl::define(int64_t id) {
  auto it = valueInfo.find(id);
  if (it == valueInfo.end())
    fail("phase " + phase->name + " has no value " + std::to_string(id));
  const PlanValue &v = *it->second;
  Tensor t{nullptr, v.dtype, v.shape};
  int64_t bytes = std::max<int64_t>(t.bytes(), v.bytes);
  if (v.offset >= 0) {
    if (v.offset + bytes > ex.arenaSize)
      fail("value " + std::to_string(id) + " at arena offset " +
           std::to_string(v.offset) + " does not fit the arena of " +
           std::to_string(ex.arenaSize) + " bytes");
    t.data = arenaAt(v.offset, bytes);
  } else {
    unplanned.push_back(ex.memory.allocate(bytes, true));
    t.data = unplanned.back().get();
  }
  values[id] = t;
}

void Executor::Impl::runPhase(const PlanPhase &ph, const DataLoader *data,
                              int64_t step, int64_t micro) {
  phase = &ph;
  valueInfo.clear();
  values.clear();
  unplanned.clear();
  waitOf.clear();
  ticketOf.clear();
  streamOf.clear();
  issued = 0;
  failure.clear();
  failed = false;
  int64_t maxIndex = -1;
  for (const PlanOp &op : ph.ops)
    maxIndex = std::max(maxIndex, op.index);
  done.assign(size_t(maxIndex + 1), 0);

  // Every value exists from the phase's start: arena views, or for values
  // `read` from persistent tensors, views set when the read runs.
  for (const PlanValue &v : ph.values)
    valueInfo[v.id] = &v;
  std::set<int64_t> views;
  for (const PlanOp &op : ph.ops)
    if (op.kind == OpKind::Read)
      views.insert(op.outputs.begin(), op.outputs.end());
  for (const PlanValue &v : ph.values)
    if (views.count(v.id))
      values[v.id] = Tensor{nullptr, v.dtype, v.shape};
    else
      define(v.id);

  // Collectives are issued in program order, whichever stream runs them.
  int64_t tickets = 0;
  std::map<int64_t, std::vector<const PlanOp *>> streams;
  for (const PlanOp &op : ph.ops) {
    if (op.kind == OpKind::Wait)
      for (int64_t d : op.deps)
        waitOf[d] = &op;
    if (op.kind == OpKind::AllGatherStart || op.kind == OpKind::ReduceScatterStart ||
        op.kind == OpKind::AllReduceStart ||
        op.kind == OpKind::AllGatherUpdatesStart ||
        ((op.kind == OpKind::ClipGradNorm || op.kind == OpKind::UnscaleGrads) && ws > 1))
      ticketOf[op.index] = tickets++;
    streams[streamThreads ? op.stream : 0].push_back(&op);
    streamOf[op.index] = streamThreads ? op.stream : 0;
  }

  if (data && ph.args.size() >= 2) {
    auto t0 = Clock::now();
    Tensor inputs = value(ph.args[0]), targets = value(ph.args[1]);
    std::vector<int32_t> hostIn(size_t(inputs.numel())),
        hostTgt(size_t(targets.numel()));
    if (auto err = data->load(step, micro, hostIn.data(), hostTgt.data()))
      fail(err->str());
    dev->fromHost(inputs.data, hostIn.data(), inputs.bytes());
    dev->fromHost(targets.data, hostTgt.data(), targets.bytes());
    computeSeconds += since(t0);
  }

  // The lowest stream (compute) runs here; every other on its own worker.
  dev->beginPhase(maxIndex + 1);
  computeThread = std::this_thread::get_id();
  std::vector<std::thread> workers;
  for (auto it = std::next(streams.begin()); it != streams.end(); ++it)
    workers.emplace_back([this, id = it->first, &ops = it->second]() {
      runStream(id, ops, false);
    });
  if (!streams.empty())
    runStream(streams.begin()->first, streams.begin()->second, true);
  for (std::thread &w : workers)
    w.join();
  // Collectives completed in stream order: waited for with their deadlines
  // first, so a rank that skipped one times out instead of hanging in a
  // device synchronization.
  if (!failed) {
    try {
      drainInflight();
      dev->synchronize();
    } catch (const std::exception &e) {
      recordFailure(e.what());
    }
  }
  if (failed)
    for (CommHandle &h : inflight)
      h.abandon();
  inflight.clear();
  inflightScratch.clear();
  if (failed)
    fail(failure);
}

void Executor::Impl::recordFailure(const std::string &message) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failed)
      failure = message;
    failed = true;
  }
  progress.notify_all();
}

void Executor::Impl::runStream(int64_t stream,
                               const std::vector<const PlanOp *> &ops,
                               bool computeStream) {
  try {
    dev->bindStream(stream);
    for (const PlanOp *op : ops) {
      auto t0 = Clock::now();
      awaitDeps(*op);
      for (int64_t d : op->deps)
        if (auto it = streamOf.find(d);
            it != streamOf.end() && it->second != streamOf.at(op->index))
          dev->waitForOp(d);
      auto t1 = Clock::now();
      double scalarWait = scalarWaitSeconds;
      runOp(*op);
      dev->opDone(op->index);
      markDone(*op);
      if (computeStream) {
        double blocked = scalarWaitSeconds - scalarWait;
        waitSeconds += std::chrono::duration<double>(t1 - t0).count() + blocked;
        computeSeconds += since(t1) - blocked;
      }
    }
  } catch (const std::exception &e) {
    recordFailure(e.what());
  }
}

void Executor::Impl::awaitDeps(const PlanOp &op) {
  std::unique_lock<std::mutex> lock(mutex);
  progress.wait(lock, [&]() {
    if (failed)
      return true;
    for (int64_t d : op.deps)
      if (d >= 0 && d < int64_t(done.size()) && !done[size_t(d)])
        return false;
    return true;
  });
  if (failed)
    throw ExecError("stopped: another stream failed");
}

void Executor::Impl::markDone(const PlanOp &op) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    done[size_t(op.index)] = 1;
  }
  progress.notify_all();
}

Executor::Impl::Ticket Executor::Impl::awaitTicket(const PlanOp &op) {
  auto it = ticketOf.find(op.index);
  if (it == ticketOf.end())
    return Ticket{};
  std::unique_lock<std::mutex> lock(mutex);
  progress.wait(lock, [&]() { return failed || issued == it->second; });
  if (failed)
    throw ExecError("stopped: another stream failed");
  // The communicator next (the previous holder may still be releasing it),
  // without blocking the other streams' progress meanwhile.
  lock.unlock();
  return Ticket(this);
}

Executor::Impl::Ticket::~Ticket() {
  if (!impl)
    return;
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    ++impl->issued;
  }
  impl->progress.notify_all();
}

void Executor::Impl::complete(Pending &p, bool hostWait) {
  if (!hostWait && dev->streamOrderedCollectives()) {
    // The epilogue follows the collective on this stream.
    for (auto &f : p.after)
      f();
    std::lock_guard<std::mutex> lock(inflightMutex);
    for (CommHandle &h : p.handles)
      inflight.push_back(std::move(h));
    for (auto &buf : p.scratch)
      inflightScratch.push_back(std::move(buf));
    return;
  }
  for (CommHandle &h : p.handles)
    if (!comm.wait(h, failed)) {
      // Another stream failed; this rank is about to abort the job, and an
      // MPI collective cannot be cancelled: leave it.
      for (CommHandle &left : p.handles)
        left.abandon();
      for (auto &buf : p.scratch)
        new std::shared_ptr<char>(buf); // Keeps its buffer alive.
      throw ExecError("stopped: another stream failed");
    }
  for (auto &f : p.after)
    f();
}

void Executor::Impl::drainInflight() {
  std::lock_guard<std::mutex> access(commAccess);
  std::vector<CommHandle *> pending;
  {
    std::lock_guard<std::mutex> lock(inflightMutex);
    for (CommHandle &h : inflight)
      if (h.pending())
        pending.push_back(&h);
  }
  // Handles are only appended (a deque keeps their addresses).
  for (CommHandle *h : pending)
    if (!comm.wait(*h, failed))
      throw ExecError("stopped: another stream failed");
}

double Executor::Impl::allReduceScalar(const PlanOp &op, double value,
                                       ScalarOp kind) {
  if (ws == 1)
    return value;
  auto t0 = Clock::now();
  Pending p;
  {
    // Held through the wait: the communicator serves one thread at a time.
    Ticket t = awaitTicket(op);
    dev->useStreamFor(comm);
    p.handles.push_back(comm.allReduceScalars(&value, 1, kind, label(op)));
    complete(p, /*hostWait=*/true);
  }
  if (std::this_thread::get_id() == computeThread)
    scalarWaitSeconds += since(t0);
  return value;
}

void Executor::Impl::runOp(const PlanOp &op) {
  const OpKind k = op.kind;
  // NVMe tensors the op reads or writes are resident while it runs; written
  // back unless it only reads them. Gathers and reductions name tensors
  // whose data they do not touch here.
  Resident resident{this, {}, k != OpKind::FetchStart};
  if (k != OpKind::AllGatherStart && k != OpKind::ReduceScatterStart && k != OpKind::Wait)
    for (const std::string &name : op.tensors) {
      auto it = tensors.find(name);
      if (it == tensors.end() || !it->second.file || it->second.data)
        continue;
      if (k == OpKind::Read)
        fail("op " + std::to_string(op.index) + " reads " + name +
             ", which is on nvme, as a value: fetch it first");
      swapIn(it->second);
      resident.held.push_back(&it->second);
    }
  if (k == OpKind::Wait) {
    // Its dependencies (the start) completed: nothing left to do.
  } else if (k == OpKind::Read) {
    // A view of a persistent tensor: no copy.
    const PlanValue &v = *valueInfo.at(op.outputs.at(0));
    Stored &s = tensor(op.tensors.at(0));
    if (v.dtype != s.info->dtype)
      fail("op " + std::to_string(op.index) + " reads " + s.info->name +
           " as a different dtype");
    values.at(v.id).data = s.data.get();
  } else if (k == OpKind::Release || k == OpKind::Return) {
    // Arena values need no freeing.
  } else if (k == OpKind::Accumulate) {
    Stored &s = tensor(op.tensors.at(0));
    Tensor g = value(op.inputs.at(0));
    Tensor acc = slice(s.view(), op.attrsAs<AccumulateAttrs>().offset, g.numel());
    check(dev->accumulate(acc, g), op);
  } else if (k == OpKind::ZeroGrads) {
    for (const std::string &name : op.tensors)
      check(dev->zeroTensor(tensor(name).view()), op);
  } else if (k == OpKind::AllGatherStart) {
    startAllGather(op);
  } else if (k == OpKind::ReduceScatterStart) {
    startReduceScatter(op);
  } else if (k == OpKind::AllReduceStart) {
    startAllReduce(op);
  } else if (k == OpKind::AllGatherUpdatesStart) {
    startAllGatherUpdates(op);
  } else if (k == OpKind::FetchStart || k == OpKind::CopyStart) {
    startCopy(op);
  } else if (k == OpKind::AdamUpdate) {
    adamUpdate(op);
  } else if (k == OpKind::ClipGradNorm) {
    clipGradNorm(op);
  } else if (k == OpKind::UnscaleGrads) {
    unscale(op);
  } else {
    compute(op);
  }
}

void Executor::Impl::compute(const PlanOp &op) {
  std::vector<Tensor> in, out;
  for (int64_t id : op.inputs)
    in.push_back(value(id));
  for (int64_t id : op.outputs)
    out.push_back(value(id));
  std::optional<cpu::Status> status = dev->modelOp(op, in, out, lossState.scale);
  if (!status)
    fail("op " + std::to_string(op.index) + ": kind '" + std::string(op.kindName()) +
         "' is not supported by the " + dev->name() + " executor");
  check(*status, op);
}

void Executor::Impl::startAllGather(const PlanOp &op) {
  // Stage 3: each input is this rank's shard of a parameter; the matching
  // wait's outputs are the gathered (unpadded) parameters, whose buffers the
  // plan sizes for the padded gather (sched::bufferBytes).
  auto w = waitOf.find(op.index);
  if (w == waitOf.end())
    fail("op " + std::to_string(op.index) + " has no wait");
  const PlanOp &wait = *w->second;
  if (wait.outputs.size() != op.inputs.size())
    fail("op " + std::to_string(op.index) + ": gathers " +
         std::to_string(op.inputs.size()) + " shards, but its wait yields " +
         std::to_string(wait.outputs.size()) + " values");
  Pending p;
  {
    Ticket t = awaitTicket(op);
    dev->useStreamFor(comm);
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      Tensor shard = value(op.inputs[i]);
      Tensor full = value(wait.outputs[i]);
      int64_t s = shard.numel();
      int64_t paddedBytes = s * ws * bytesPerElement(full.dtype);
      if (s * ws == full.numel() ||
          valueInfo.at(wait.outputs[i])->bytes >= paddedBytes) {
        p.handles.push_back(
            comm.allGather(shard.data, s, full.data, full.dtype, label(op)));
        continue;
      }
      // A plan that did not size the buffer for the padding.
      p.scratch.push_back(ex.memory.allocate(paddedBytes, true));
      Tensor padded{p.scratch.back().get(), full.dtype, {s * ws}};
      p.handles.push_back(
          comm.allGather(shard.data, s, padded.data, full.dtype, label(op)));
      p.after.push_back([this, &op, padded, full]() {
        check(dev->copyElements(padded, 0, full, 0, full.numel()), op);
      });
    }
  }
  complete(p);
}

void Executor::Impl::startReduceScatter(const PlanOp &op) {
  const std::vector<std::string> &targets =
      op.attrsAs<ReduceScatterAttrs>().targets;
  const std::vector<int64_t> &offsets =
      op.attrsAs<ReduceScatterAttrs>().offsets;
  if (targets.size() != op.inputs.size() || offsets.size() != op.inputs.size())
    fail("op " + std::to_string(op.index) +
         ": reduce_scatter needs one target and offset per input");
  // The workspace's parts, laid out as zero-plan-memory sized them: the
  // flat-group inputs' shares packed first, then each parameter's.
  std::vector<FlatShare> shares;
  std::vector<size_t> flatInputs, paramInputs;
  int64_t flatElementBytes = 0;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    Tensor g = value(op.inputs[i]);
    if (const PlanFlatGroup *grp = groupOf(*tensor(targets[i]).info)) {
      shares.push_back(
          {&layouts.at(grp->name), {offsets[i], offsets[i] + g.numel()}});
      flatInputs.push_back(i);
      if (!flatElementBytes)
        flatElementBytes = bytesPerElement(g.dtype);
      else if (flatElementBytes != bytesPerElement(g.dtype))
        fail("op " + std::to_string(op.index) +
             ": reduce_scatter of flat-group gradients of different dtypes");
    } else {
      paramInputs.push_back(i);
    }
  }
  WorkspaceLayout layout;
  std::vector<ReduceScatterParts> parts(op.inputs.size());
  std::vector<ReduceScatterParts> flat =
      reduceScatterFlatParts(layout, shares, flatElementBytes, rank);
  for (size_t k = 0; k < flatInputs.size(); ++k)
    parts[flatInputs[k]] = flat[k];
  for (size_t i : paramInputs)
    parts[i] = reduceScatterParamParts(
        layout, ParamShardLayout{tensor(targets[i]).info->numel, ws},
        bytesPerElement(value(op.inputs[i]).dtype));
  Pending p;
  char *scratch = workspace(op, layout.size(), p.scratch);
  Ticket ticket = awaitTicket(op);
  dev->useStreamFor(comm);
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    Tensor g = value(op.inputs[i]);
    Stored &target = tensor(targets[i]);
    const PlanTensor &t = *target.info;
    int64_t n = g.numel(), off = offsets[i];
    DType dt = g.dtype;
    int64_t esize = bytesPerElement(dt);
    char *recvBuf = scratch + parts[i].recv;
    Tensor dst = target.view();
    if (const PlanFlatGroup *grp = groupOf(t)) {
      const FlatGroupLayout &l = layouts.at(grp->name);
      ElementRange range{off, off + n};
      std::vector<int64_t> counts = bucketCounts(l, range);
      ElementRange mine = range.intersect(l.partition(rank));
      int64_t recvN = counts[size_t(rank)];
      p.handles.push_back(
          comm.reduceScatter(g.data, counts, recvBuf, dt, true, label(op)));
      Tensor recv{recvBuf, dt, {recvN}};
      if (t.sharded) {
        // Stage 2: accumulate the owned part into the gradient partition.
        int64_t at = mine.begin - l.partition(rank).begin;
        p.after.push_back([this, &op, recv, dst, at, recvN]() {
          if (recvN > 0)
            check(dev->accumulate(slice(dst, at, recvN), recv), op);
        });
      } else {
        // Stage 1: in place on the replicated flat buffer; keep the owned
        // partition.
        int64_t at = mine.begin;
        p.after.push_back([this, &op, recv, dst, at, recvN]() {
          if (recvN > 0)
            check(dev->copyElements(recv, 0, dst, at, recvN), op);
        });
      }
    } else {
      // Stage 3: the gradient of a whole parameter into its shard.
      ParamShardLayout l{t.numel, ws};
      int64_t s = l.shardSize();
      if (!t.sharded)
        fail("op " + std::to_string(op.index) + ": reduce_scatter into " +
             t.name + ", which is neither sharded nor in a flat group");
      if (off != 0 || n != t.numel)
        fail("op " + std::to_string(op.index) + ": reduce_scatter of " +
             std::to_string(n) + " elements at offset " + std::to_string(off) +
             " into " + t.name + " of " + std::to_string(t.numel));
      const void *send = g.data;
      if (parts[i].send >= 0) {
        // Padded with zeros to shard x world size.
        char *padded = scratch + parts[i].send;
        dev->copy(padded, g.data, n * esize);
        dev->zero(padded + n * esize, (s * ws - n) * esize);
        send = padded;
      }
      p.handles.push_back(
          comm.reduceScatter(send, std::vector<int64_t>(size_t(ws), s), recvBuf,
                             dt, true, label(op)));
      Tensor recv{recvBuf, dt, {s}};
      p.after.push_back(
          [this, &op, recv, dst]() { check(dev->accumulate(dst, recv), op); });
    }
  }
  { Ticket issuedAll = std::move(ticket); }
  complete(p);
}

void Executor::Impl::startAllReduce(const PlanOp &op) {
  if (!op.inputs.empty())
    fail("op " + std::to_string(op.index) +
         ": all_reduce of transient values (reduce_scatter: false) is not "
         "supported yet");
  const std::vector<std::string> &names = op.attrsAs<TensorListAttrs>().tensors;
  Pending p;
  {
    Ticket t = awaitTicket(op);
    dev->useStreamFor(comm);
    for (const std::string &name : names) {
      Stored &s = tensor(name);
      p.handles.push_back(comm.allReduce(s.data.get(), s.info->localNumel,
                                         s.info->dtype, true, label(op)));
    }
  }
  complete(p);
}

void Executor::Impl::startAllGatherUpdates(const PlanOp &op) {
  std::vector<std::string> targets = op.attrsAs<TargetListAttrs>().targets;
  // Every rank skips it alike after an fp16 overflow (nothing changed), but
  // still takes its turn in the collective order.
  Ticket ticket = awaitTicket(op);
  if (overflow)
    return;
  dev->useStreamFor(comm);
  WorkspaceLayout layout;
  std::vector<int64_t> at(targets.size(), -1);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (groups.count(targets[i])) {
      at[i] = -2; // In place: no workspace.
    } else if (const PlanTensor &t = *tensor(targets[i]).info; !t.sharded) {
      at[i] = gatherUpdatesParamPart(layout, ParamShardLayout{t.numel, ws},
                                     bytesPerElement(t.dtype));
    }
  }
  Pending p;
  char *scratch = workspace(op, layout.size(), p.scratch);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (at[i] == -1)
      continue; // A sharded parameter is gathered when used.
    if (auto g = groups.find(targets[i]); g != groups.end()) {
      // In place in the flat buffer: every rank sends its partition.
      const FlatGroupLayout &l = layouts.at(targets[i]);
      Tensor flat = flatView(*g->second);
      int64_t P = l.partitionSize();
      char *base = static_cast<char *>(flat.data);
      p.handles.push_back(
          comm.allGather(base + rank * P * bytesPerElement(flat.dtype), P, base,
                         flat.dtype, label(op)));
    } else {
      char *buf = scratch + at[i];
      Stored &s = tensor(targets[i]);
      const PlanTensor &t = *s.info;
      ParamShardLayout l{t.numel, ws};
      int64_t sz = l.shardSize();
      int64_t es = bytesPerElement(t.dtype);
      ElementRange own = l.ownedBy(rank);
      dev->copy(buf + rank * sz * es, s.data.get() + own.begin * es,
                own.size() * es);
      p.handles.push_back(
          comm.allGather(buf + rank * sz * es, sz, buf, t.dtype, label(op)));
      char *dst = s.data.get();
      int64_t bytes = t.numel * es;
      p.after.push_back(
          [this, dst, buf, bytes]() { dev->copy(dst, buf, bytes); });
    }
  }
  { Ticket issuedAll = std::move(ticket); }
  complete(p);
}

void Executor::Impl::startCopy(const PlanOp &op) {
  if (op.kind == OpKind::FetchStart) {
    auto w = waitOf.find(op.index);
    if (w == waitOf.end())
      fail("op " + std::to_string(op.index) + " has no wait");
    const PlanOp &wait = *w->second;
    std::vector<std::string> names = op.attrsAs<TensorListAttrs>().tensors;
    if (names.empty())
      names = op.tensors;
    if (names.size() != wait.outputs.size())
      fail("op " + std::to_string(op.index) +
           ": fetch_start and its wait disagree on the tensor count");
    for (size_t i = 0; i < names.size(); ++i)
      check(dev->castTensor(tensor(names[i]).view(), value(wait.outputs[i])),
            op);
    return;
  }
  const std::vector<std::string> &src = op.attrsAs<CopyAttrs>().sources;
  const std::vector<std::string> &dst = op.attrsAs<CopyAttrs>().destinations;
  if (src.size() != dst.size())
    fail("op " + std::to_string(op.index) +
         ": copy_start needs as many "
         "sources as destinations");
  if (overflow)
    return;
  for (size_t i = 0; i < src.size(); ++i) {
    Tensor a = tensor(src[i]).view(), b = tensor(dst[i]).view();
    if (a.numel() == b.numel())
      check(dev->castTensor(a, b), op);
    else
      fail("op " + std::to_string(op.index) + ": copy_start from " + src[i] +
           " to " + dst[i] + " of different sizes is not supported yet");
  }
}

void Executor::Impl::adamUpdate(const PlanOp &op) {
  if (overflow)
    return;
  cpu::AdamSettings set;
  set.lr = op.attrsAs<AdamAttrs>().lr;
  set.beta1 = op.attrsAs<AdamAttrs>().beta1;
  set.beta2 = op.attrsAs<AdamAttrs>().beta2;
  set.eps = op.attrsAs<AdamAttrs>().eps;
  set.weightDecay = op.attrsAs<AdamAttrs>().weightDecay;
  set.adamw = op.attrsAs<AdamAttrs>().adamw;
  std::string paramName = op.attrsAs<AdamAttrs>().param;
  Stored &m = tensor(op.attrsAs<AdamAttrs>().expAvg);
  Stored &v = tensor(op.attrsAs<AdamAttrs>().expAvgSq);
  Stored &gs = tensor(op.attrsAs<AdamAttrs>().grad);
  std::string masterName = op.attrsAs<AdamAttrs>().master.value_or("");
  int64_t n = m.info->localNumel;

  // The gradient: the whole local tensor, or (stage 1) the owned partition
  // of the replicated flat buffer.
  Tensor grad = gs.view();
  const PlanFlatGroup *grp = nullptr;
  if (auto g = groups.find(paramName); g != groups.end())
    grp = g->second;
  if (grad.numel() != n) {
    if (!grp)
      fail("op " + std::to_string(op.index) + ": gradient " + gs.info->name +
           " does not match its optimizer state");
    grad = slice(grad, layouts.at(grp->name).partition(rank).begin, n);
  }

  // This rank's part of the parameter, in its own dtype.
  Tensor param;
  std::vector<std::shared_ptr<char>> keep;
  std::function<void()> writeBack;
  WorkspaceLayout layout; // One part at most (Workspace.h).
  if (grp) {
    // The owned partition of the flat parameter buffer, in place.
    const FlatGroupLayout &l = layouts.at(grp->name);
    param = slice(flatView(*grp), l.partition(rank).begin, n);
  } else {
    Stored &ps = tensor(paramName);
    if (ps.info->localNumel == n) {
      param = ps.view();
    } else {
      // A persistent (whole) stage-3 parameter with sharded states.
      ParamShardLayout l{ps.info->numel, ws};
      ElementRange own = l.ownedBy(rank);
      DType dt = ps.info->dtype;
      int64_t at = adamPartitionPart(layout, n, bytesPerElement(dt));
      param = Tensor{workspace(op, layout.size(), keep) + at, dt, {n}};
      Tensor full = ps.view();
      if (own.size() > 0)
        check(dev->copyElements(full, own.begin, param, 0, own.size()), op);
      writeBack = [this, &op, param, full, own]() {
        if (own.size() > 0)
          check(dev->copyElements(param, 0, full, own.begin, own.size()), op);
      };
    }
  }
  Tensor master = param;
  const Tensor *param16 = nullptr;
  Tensor masterView;
  if (!masterName.empty()) {
    masterView = tensor(masterName).view();
    master = masterView;
    param16 = &param;
  } else if (param.dtype != DType::F32) {
    fail("op " + std::to_string(op.index) + ": a 16-bit parameter " +
         paramName + " without a master copy");
  }
  check(dev->adamUpdate(set, adamSteps + 1, grad, master, m.view(), v.view(),
                        param16),
        op);
  if (writeBack)
    writeBack();
}

void Executor::Impl::clipGradNorm(const PlanOp &op) {
  if (overflow) { // Every rank skips the update alike; keep the order.
    awaitTicket(op);
    return;
  }
  const std::vector<std::string> &names =
      op.attrsAs<ClipGradNormAttrs>().grads;
  drainInflight();
  // Sharded and flat-group gradients: each rank sums what it owns, then the
  // sums are all-reduced. Replicated gradients are the same on every rank.
  double shared = 0, local = 0;
  for (const std::string &name : names) {
    Stored &s = tensor(name);
    Tensor g = s.view();
    if (const PlanFlatGroup *grp = groupOf(*s.info)) {
      const FlatGroupLayout &l = layouts.at(grp->name);
      if (!s.info->sharded)
        g = slice(g, l.partition(rank).begin, l.partitionSize());
      shared += dev->sumOfSquares(g);
    } else if (s.info->sharded) {
      shared += dev->sumOfSquares(g);
    } else {
      local += dev->sumOfSquares(g);
    }
  }
  double total = allReduceScalar(op, shared, ScalarOp::Sum) + local;
  float coef = cpu::clipCoefficient(total, op.attrsAs<ClipGradNormAttrs>().maxNorm);
  if (coef != 1.0f)
    for (const std::string &name : names)
      check(dev->scaleInPlace(tensor(name).view(), coef), op);
}

void Executor::Impl::unscale(const PlanOp &op) {
  const std::vector<std::string> &names = op.attrsAs<UnscaleGradsAttrs>().grads;
  drainInflight();
  bool over = false;
  for (const std::string &name : names)
    check(dev->unscaleGrads(tensor(name).view(), lossState.scale, over), op);
  overflow = allReduceScalar(op, over ? 1.0 : 0.0, ScalarOp::Max) > 0;
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

Executor::Executor(Plan plan, Communicator &comm)
    : thePlan(std::move(plan)), comm(comm) {}
Executor::~Executor() = default;

int64_t Executor::persistentDeviceBytes() const {
  int64_t bytes = 0;
  for (const PlanTensor &t : thePlan.tensors)
    if (t.placement == "device")
      bytes += t.localNumel * bytesPerElement(t.dtype);
  return bytes;
}

int64_t Executor::predictedPeakBytes() const {
  int64_t arenaMax = 0;
  for (const PlanPhase &ph : thePlan.phases)
    if (ph.memory)
      arenaMax = std::max(arenaMax, ph.memory->arenaBytes);
  return persistentDeviceBytes() + arenaMax;
}

Expected<std::unique_ptr<Executor>>
Executor::create(Plan plan, Communicator &comm,
                 const ExecutorOptions &options) {
  if (plan.worldSize != comm.size())
    return Diagnostic{
        "", 0, 0,
        "PLAN is for " + std::to_string(plan.worldSize) +
            " ranks, but mpirun started " + std::to_string(comm.size()) +
            " (recompile it with --world-size " + std::to_string(comm.size()) +
            " or run mpirun -np " + std::to_string(plan.worldSize) + ")"};
  if (!plan.findPhase("micro_step") || !plan.findPhase("optimizer_step"))
    return Diagnostic{"", 0, 0,
                      "the plan lacks a micro_step or optimizer_step phase"};
  std::unique_ptr<Executor> ex(new Executor(std::move(plan), comm));
  ex->impl = std::make_unique<Impl>(*ex, comm);
  // The loss scale is needed by the first micro-step's backward seed.
  for (const PlanPhase &ph : ex->thePlan.phases)
    for (const PlanOp &op : ph.ops)
      if (op.kind == OpKind::UnscaleGrads && !ex->impl->haveLossState) {
        cpu::LossScaleSettings &ls = ex->impl->lossSettings;
        ls.staticLossScale = op.attrsAs<UnscaleGradsAttrs>().staticLossScale;
        ls.initialScalePower = op.attrsAs<UnscaleGradsAttrs>().initialScalePower;
        ls.lossScaleWindow = op.attrsAs<UnscaleGradsAttrs>().lossScaleWindow;
        ls.hysteresis = op.attrsAs<UnscaleGradsAttrs>().hysteresis;
        ls.minLossScale = op.attrsAs<UnscaleGradsAttrs>().minLossScale;
        ex->impl->lossState = cpu::initialLossScale(ls);
        ex->impl->haveLossState = true;
      }
  // The vocabulary: the logits' last dimension.
  const PlanPhase &micro = *ex->thePlan.findPhase("micro_step");
  for (const PlanOp &op : micro.ops)
    if (op.kind == OpKind::CrossEntropy && !op.inputs.empty())
      for (const PlanValue &v : micro.values)
        if (v.id == op.inputs[0] && !v.shape.empty())
          ex->vocab = v.shape.back();
  if (ex->vocab <= 0)
    return Diagnostic{"", 0, 0,
                      "the plan's micro_step has no cross_entropy op to take "
                      "the vocabulary size from"};
  try {
    ex->impl->streamThreads = options.streamThreads;
    if (options.device) {
      ex->impl->dev = options.device;
    } else {
      ex->impl->ownDevice = makeCpuDevice();
      ex->impl->dev = ex->impl->ownDevice.get();
    }
    ex->memory.setDevice(ex->impl->dev);
    ex->impl->nvmeOverride = options.nvmePath;
    ex->impl->allocate();
    ex->impl->initialize(options.seed);
  } catch (const std::exception &e) {
    return Diagnostic{"", 0, 0, e.what()};
  }
  return ex;
}

std::vector<ConstBytes> Executor::tensorData() {
  std::vector<ConstBytes> out;
  for (const PlanTensor &t : thePlan.tensors) {
    Stored &s = impl->tensors.at(t.name);
    impl->swapIn(s);
    if (const char *m = impl->hostMirror(s)) {
      out.push_back({reinterpret_cast<const std::byte *>(m),
                     size_t(t.localNumel * bytesPerElement(t.dtype))});
      continue;
    }
    out.push_back({reinterpret_cast<const std::byte *>(s.data.get()),
                   size_t(t.localNumel * bytesPerElement(t.dtype))});
  }
  return out;
}

std::vector<MutableBytes> Executor::mutableTensorData() {
  std::vector<MutableBytes> out;
  for (const PlanTensor &t : thePlan.tensors) {
    Stored &s = impl->tensors.at(t.name);
    impl->swapIn(s);
    s.dirty = s.file != nullptr;
    if (char *m = impl->hostMirror(s)) {
      s.mirrorDirty = true;
      out.push_back({reinterpret_cast<std::byte *>(m),
                     size_t(t.localNumel * bytesPerElement(t.dtype))});
      continue;
    }
    out.push_back({reinterpret_cast<std::byte *>(s.data.get()),
                   size_t(t.localNumel * bytesPerElement(t.dtype))});
  }
  return out;
}

NvmeStats Executor::nvmeStats() const {
  NvmeStats st;
  for (const auto &[name, s] : impl->tensors) {
    if (!s.file)
      continue;
    if (s.data)
      st.residentBytes += ioBytes(s.file->bytes());
    st.bytesRead += s.file->bytesRead();
    st.bytesWritten += s.file->bytesWritten();
  }
  return st;
}
std::string Executor::nvmeDirectory() const {
  return impl->nvmeDirs.empty() ? std::string() : impl->nvmeDirs.front();
}

int64_t Executor::samplesPerStep() const {
  return thePlan.model.microBatch * thePlan.gradientAccumulationSteps *
         comm.size();
}

TrainingState Executor::trainingState(int64_t stepsDone) const {
  const Impl &s = *impl;
  TrainingState st;
  st.step = stepsDone;
  st.lossScale = s.haveLossState ? s.lossState.scale : 1.0;
  st.lossScaleGoodSteps =
      s.haveLossState ? s.lossState.iteration - s.lossState.lastOverflow - 1
                      : 0;
  st.hysteresisLeft = s.haveLossState ? s.lossState.hysteresisLeft : 0;
  st.skippedSteps = stepsDone - s.adamSteps;
  st.dataPosition = uint64_t(stepsDone * samplesPerStep());
  st.extra = nlohmann::json::object(
      {{"adam_steps", s.adamSteps},
       {"loss_scale_iteration", s.lossState.iteration},
       {"loss_scale_last_overflow", s.lossState.lastOverflow}});
  return st;
}

Expected<Done> Executor::restoreTrainingState(const TrainingState &st) {
  Impl &s = *impl;
  auto bad = [](const std::string &m) { return Diagnostic{"", 0, 0, m}; };
  if (st.step < 0 || st.skippedSteps < 0 || st.skippedSteps > st.step)
    return bad("the checkpoint's training state is inconsistent: step " +
               std::to_string(st.step) + ", skipped steps " +
               std::to_string(st.skippedSteps));
  if (st.dataPosition != uint64_t(st.step * samplesPerStep()))
    return bad("the checkpoint's data position " +
               std::to_string(st.dataPosition) + " is not step " +
               std::to_string(st.step) + " x " +
               std::to_string(samplesPerStep()) +
               " samples per step: the global batch differs from this plan's");
  auto counter = [&](const char *key, int64_t dflt) {
    auto it = st.extra.find(key);
    return it != st.extra.end() && it->is_number_integer() ? it->get<int64_t>()
                                                           : dflt;
  };
  int64_t adamSteps = counter("adam_steps", st.step - st.skippedSteps);
  cpu::LossScaleState ls = s.lossState;
  if (s.haveLossState) {
    if (!(st.lossScale > 0))
      return bad("the checkpoint's loss scale " + std::to_string(st.lossScale) +
                 " is not positive");
    ls.scale = st.lossScale;
    ls.iteration = counter("loss_scale_iteration", st.step);
    ls.lastOverflow = counter("loss_scale_last_overflow",
                              ls.iteration - st.lossScaleGoodSteps - 1);
    ls.hysteresisLeft = st.hysteresisLeft;
  }
  s.adamSteps = adamSteps;
  s.lossState = ls;
  return Done{};
}

Expected<StepResult> Executor::runStep(const DataLoader &data, int64_t step) {
  Impl &s = *impl;
  StepResult r;
  r.step = step + 1;
  auto t0 = Clock::now();
  s.computeSeconds = s.waitSeconds = s.scalarWaitSeconds = 0;
  s.overflow = false;
  try {
    // Host copies and NVMe tensors left by checkpointing go back.
    for (auto &[name, st] : s.tensors) {
      if (st.mirror && st.mirrorDirty)
        s.dev->fromHost(st.data.get(), st.mirror.get(),
                        st.info->localNumel * bytesPerElement(st.info->dtype));
      st.mirror.reset();
      st.mirrorDirty = false;
      s.swapOut(st, false);
    }
    const PlanPhase &micro = *thePlan.findPhase("micro_step");
    const PlanPhase &opt = *thePlan.findPhase("optimizer_step");
    int64_t lossId = -1;
    for (const PlanOp &op : micro.ops)
      if (op.kind == OpKind::Return && !op.inputs.empty())
        lossId = op.inputs[0];
    double lossSum = 0;
    for (int64_t m = 0; m < thePlan.gradientAccumulationSteps; ++m) {
      s.runPhase(micro, &data, step, m);
      if (lossId >= 0)
        lossSum += s.dev->loadElement(s.value(lossId), 0);
    }
    double localMean = lossSum / double(thePlan.gradientAccumulationSteps);
    r.lossScale = s.lossState.scale;
    s.runPhase(opt, nullptr, step, 0);
    if (s.haveLossState)
      cpu::updateLossScale(s.lossSettings, s.overflow.load(), s.lossState);
    r.skipped = s.overflow;
    if (!s.overflow)
      ++s.adamSteps;
    s.overflow = false;
    auto tw = Clock::now();
    r.loss = comm.size() > 1 ? comm.allReduceScalar(localMean, ScalarOp::Sum,
                                                    OpLabel{-1, "step loss"}) /
                                   double(comm.size())
                             : localMean;
    s.waitSeconds += since(tw);
  } catch (const std::exception &e) {
    return Diagnostic{"", 0, 0, e.what()};
  }
  r.computeSeconds = s.computeSeconds;
  r.waitSeconds = s.waitSeconds;
  r.seconds = since(t0);
  r.tokens = thePlan.model.microBatch * thePlan.model.seqLen *
             thePlan.gradientAccumulationSteps * comm.size();
  return r;
}

} // namespace zeroc::runtime
