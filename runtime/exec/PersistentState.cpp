//===- PersistentState.cpp - A rank's persistent tensors ------------------===//

#include "exec/PersistentState.h"

#include "exec/Device.h"
#include "exec/ExecError.h"
#include "init/Random.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace zeroc::runtime::exec {

PersistentState::PersistentState(const Plan &plan, MemoryTracker &memory,
                                 Device &device, int64_t rank,
                                 int64_t worldSize, std::string nvmeOverride)
    : plan(plan), memory(memory), dev(device), rank(rank), ws(worldSize),
      nvmeOverride(std::move(nvmeOverride)) {}

PersistentState::~PersistentState() {
  tensors.clear(); // Closes and removes the swap files first.
  for (const std::string &d : nvmeDirs)
    ::rmdir(d.c_str());
}

Stored &PersistentState::tensor(const std::string &name) {
  auto it = byName.find(name);
  if (it == byName.end())
    fail("no persistent tensor named '" + name + "'");
  return *it->second;
}

const PlanFlatGroup *PersistentState::group(const std::string &name) const {
  auto it = groups.find(name);
  return it == groups.end() ? nullptr : it->second;
}

ShardGroup PersistentState::shardGroup(const PlanTensor &t) const {
  CommGroupShape shape = commGroupShape(
      t.expert ? CommGroupKind::ExpertDataParallel : CommGroupKind::World, ws,
      plan.expertParallelSize);
  return {shape.indexOf(rank), shape.size};
}

ShardGroup PersistentState::shardGroup(const PlanFlatGroup &g) const {
  const PlanTensor *first = plan.findTensor(g.params.at(0));
  if (!first)
    fail("flat group " + g.name + " names no tensor " + g.params.at(0));
  return shardGroup(*first);
}

Tensor PersistentState::flatView(const PlanFlatGroup &g) {
  const PlanTensor &first = *tensor(g.params.at(0)).info;
  return Tensor{
      flatParams.at(g.name).get(), first.dtype, {layouts.at(g.name).padded}};
}

//===----------------------------------------------------------------------===//
// Allocation and initialization
//===----------------------------------------------------------------------===//

void PersistentState::allocate() {
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
        layouts.emplace(g.name, FlatGroupLayout(numels, shardGroup(g).size))
            .first->second;
    const PlanTensor &first = *plan.findTensor(g.params.at(0));
    for (const std::string &name : g.params) {
      const PlanTensor &p = *plan.findTensor(name);
      if (p.dtype != first.dtype || p.placement != first.placement ||
          p.sharded || p.localNumel != p.numel)
        fail("flat group " + g.name +
             ": its parameters must be whole and "
             "share one dtype and placement");
    }
    if (first.placement == Placement::Nvme)
      fail("flat group " + g.name +
           ": parameters on nvme (stages 1-2 keep "
           "parameters on the device)");
    int64_t bytes = l.padded * bytesPerElement(first.dtype);
    flatParams[g.name] =
        memory.allocate(bytes, first.placement == Placement::Device);
  }
  for (const PlanTensor &t : plan.tensors) {
    Stored s;
    s.info = &t;
    bool device = t.placement == Placement::Device;
    int64_t bytes = s.bytes();
    if (auto m = memberOf.find(t.name); m != memberOf.end()) {
      const std::shared_ptr<char> &flat = flatParams.at(m->second.first->name);
      int64_t at =
          layouts.at(m->second.first->name).offsets[size_t(m->second.second)];
      s.data = std::shared_ptr<char>(flat, flat.get() +
                                               at * bytesPerElement(t.dtype));
      tensors[t.name] = std::move(s);
      continue;
    }
    if (t.placement == Placement::Nvme) {
      std::string name = t.name;
      std::replace(name.begin(), name.end(), '/', '_');
      auto file = NvmeFile::create(nvmeDirFor(t), name + ".swp", bytes);
      if (!file)
        fail(file.error().str());
      s.file = std::move(*file);
      tensors[t.name] = std::move(s);
      continue;
    }
    s.data = memory.allocate(bytes, device);
    tensors[t.name] = std::move(s);
  }
  byName.clear();
  byName.reserve(tensors.size());
  for (auto &[name, s] : tensors)
    byName.emplace(name, &s);
}

void PersistentState::initialize(uint64_t seed) {
  // Values are written straight into an f32 tensor the host addresses (the
  // CPU device); otherwise through an f32 buffer, a cast and a copy. No
  // buffer is zeroed first: init writes every element, padding included.
  std::unique_ptr<float[]> buf;
  int64_t bufSize = 0;
  auto target = [&](Stored &s, int64_t n) -> float * {
    if (s.info->dtype == DType::F32 && dev.hostAddressable() && s.data)
      return reinterpret_cast<float *>(s.data.get());
    if (n > bufSize) {
      buf.reset(new float[size_t(n)]);
      bufSize = n;
    }
    return buf.get();
  };
  auto store = [&](Stored &s, float *values, int64_t n) {
    if (values == reinterpret_cast<float *>(s.data.get()))
      return;
    if (s.info->dtype == DType::F32) {
      dev.fromHost(s.data.get(), values, n * int64_t(sizeof(float)));
      return;
    }
    Tensor src{values, DType::F32, {n}};
    std::vector<char> cast(size_t(n * bytesPerElement(s.info->dtype)));
    Tensor dst{cast.data(), s.info->dtype, {n}};
    cpu::castTensor(src, dst);
    dev.fromHost(s.data.get(), cast.data(), int64_t(cast.size()));
  };
  auto fill = [&](Stored &s, const PlanTensor &param, bool sharded) {
    int64_t n = s.info->localNumel;
    float *out = target(s, n);
    int64_t base = expertBase(plan, param, rank);
    if (sharded) {
      ShardGroup g = shardGroup(param);
      initShard(param, param.init, seed, ParamShardLayout{param.numel, g.size},
                g.rank, out, base);
    } else {
      initParameter(param, param.init, seed, 0, param.numel, out, base);
    }
    store(s, out, n);
  };
  for (auto &[name, s] : tensors) {
    const PlanTensor &t = *s.info;
    if (t.role != TensorRole::Param && t.role != TensorRole::Master)
      continue;
    bool swapped = s.file && !s.data;
    swapIn(s);
    if (t.role == TensorRole::Param) {
      fill(s, t, t.sharded);
    } else if (const PlanFlatGroup *g = group(t.of)) {
      float *out = target(s, t.localNumel);
      initShard(plan, *g, seed, rank, out);
      store(s, out, t.localNumel);
    } else {
      fill(s, *tensor(t.of).info, t.sharded);
    }
    if (swapped) {
      dev.streamSynchronize();
      swapOut(s, true);
    }
  }
}

//===----------------------------------------------------------------------===//
// NVMe residency
//===----------------------------------------------------------------------===//

std::string PersistentState::nvmeDirFor(const PlanTensor &t) {
  const char *section =
      t.role == TensorRole::Param ? "offload_param" : "offload_optimizer";
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

void PersistentState::swapIn(Stored &s, bool read) {
  if (!s.file || s.data)
    return;
  s.data = memory.allocate(ioBytes(s.file->bytes()), /*device=*/false,
                           kDirectIoAlignment);
  if (!read)
    return; // Zeros, not dirty: the op that overwrites it marks it.
  if (auto ok = s.file->read(s.data.get()); !ok) {
    s.data.reset();
    fail(ok.error().str());
  }
  s.dirty = false;
}

void PersistentState::swapOut(Stored &s, bool writeBack) {
  if (!s.file || !s.data)
    return;
  if (writeBack || s.dirty)
    if (auto ok = s.file->write(s.data.get()); !ok)
      fail(ok.error().str());
  s.data.reset();
  s.dirty = false;
}

NvmeCounters PersistentState::nvmeCounters() const {
  NvmeCounters c;
  for (const auto &[name, s] : tensors) {
    if (!s.file)
      continue;
    if (s.data)
      c.residentBytes += ioBytes(s.file->bytes());
    c.bytesRead += s.file->bytesRead();
    c.bytesWritten += s.file->bytesWritten();
  }
  return c;
}

//===----------------------------------------------------------------------===//
// Host views for checkpoints
//===----------------------------------------------------------------------===//

char *PersistentState::hostMirror(Stored &s) {
  if (dev.hostAddressable() || s.file || s.info->placement != Placement::Device)
    return nullptr;
  if (s.mirror && s.mirrorDirty)
    return s.mirror.get(); // Loaded into, not yet written back.
  if (!s.mirror)
    s.mirror =
        std::shared_ptr<char>(new char[size_t(std::max<int64_t>(s.bytes(), 1))],
                              std::default_delete<char[]>());
  dev.toHost(s.mirror.get(), s.data.get(), s.bytes());
  return s.mirror.get();
}

std::vector<MutableBytes> PersistentState::hostViews(bool changes) {
  std::vector<MutableBytes> out;
  for (const PlanTensor &t : plan.tensors) {
    Stored &s = tensors.at(t.name);
    swapIn(s);
    if (changes)
      s.dirty = s.file != nullptr;
    char *p = hostMirror(s);
    if (p && changes)
      s.mirrorDirty = true;
    out.push_back({reinterpret_cast<std::byte *>(p ? p : s.data.get()),
                   size_t(s.bytes())});
  }
  return out;
}

void PersistentState::prepareForStep() {
  for (auto &[name, s] : tensors) {
    if (s.mirror && s.mirrorDirty)
      dev.fromHost(s.data.get(), s.mirror.get(), s.bytes());
    s.mirror.reset();
    s.mirrorDirty = false;
    swapOut(s, false);
  }
}

} // namespace zeroc::runtime::exec
