//===- Consolidate.cpp - Sharded checkpoint <-> whole safetensors ---------===//
//
// Both directions use one mapping: where a parameter's elements lie in the
// local part, on a given rank, of the tensor that holds them (the
// parameter, its master copy, or its flat group's master copy), computed
// from ShardLayout.h alone.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Checkpoint/Consolidate.h"

#include "zeroc/Checkpoint/Safetensors.h"

#include "Messages.h"
#include "zeroc/Support/Float16.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace zeroc {

namespace {

/// Elements `params` of a parameter lie in the holder's local part on some
/// rank, starting at element `localBegin`.
struct Piece {
  ElementRange params;
  int64_t localBegin = 0;
};

/// The tensors and flat groups of a plan or a manifest.
class ModelLayout {
public:
  ModelLayout(int64_t worldSize, std::vector<PlanTensor> tensors,
              const std::vector<PlanFlatGroup> &groups)
      : worldSize(worldSize), tensors(std::move(tensors)), groups(groups) {}

  const PlanTensor *find(const std::string &name) const {
    for (const PlanTensor &t : tensors)
      if (t.name == name)
        return &t;
    return nullptr;
  }

  const PlanFlatGroup *group(const std::string &name) const {
    for (const PlanFlatGroup &g : groups)
      if (g.name == name)
        return &g;
    return nullptr;
  }

  /// The master copy of a parameter or flat group, if any.
  const PlanTensor *masterOf(const std::string &owner) const {
    for (const PlanTensor &t : tensors)
      if (t.role == TensorRole::Master && t.of == owner)
        return &t;
    return nullptr;
  }

  /// The flat group holding `param`, and the parameter's index there.
  std::pair<const PlanFlatGroup *, size_t>
  groupOf(const std::string &param) const {
    for (const PlanFlatGroup &g : groups)
      for (size_t k = 0; k < g.params.size(); ++k)
        if (g.params[k] == param)
          return {&g, k};
    return {nullptr, 0};
  }

  /// Where the f32 (or only) copy of `param` is: its master, its group's
  /// master, or the parameter itself.
  const PlanTensor &sourceOf(const PlanTensor &param) const {
    if (const PlanTensor *m = masterOf(param.name))
      return *m;
    if (const PlanFlatGroup *g = groupOf(param.name).first)
      if (const PlanTensor *m = masterOf(g->name))
        return *m;
    return param;
  }

  FlatGroupLayout layoutOf(const PlanFlatGroup &g) const {
    std::vector<int64_t> numels;
    for (const std::string &p : g.params)
      numels.push_back(find(p)->numel);
    return FlatGroupLayout(numels, worldSize);
  }

  /// The part of `param` that `holder` keeps on `rank`. A replicated
  /// holder keeps all of it on every rank.
  std::optional<Piece> pieceOn(const PlanTensor &holder,
                               const PlanTensor &param, int64_t rank) const {
    if (const PlanFlatGroup *g = group(holder.of)) {
      FlatGroupLayout layout = layoutOf(*g);
      size_t k = static_cast<size_t>(
          std::find(g->params.begin(), g->params.end(), param.name) -
          g->params.begin());
      ElementRange window = holder.sharded ? layout.partition(rank)
                                           : ElementRange{0, layout.padded};
      ElementRange owned = layout.param(k).intersect(window);
      if (owned.empty())
        return std::nullopt;
      return Piece{
          {owned.begin - layout.offsets[k], owned.end - layout.offsets[k]},
          owned.begin - window.begin};
    }
    if (!holder.sharded)
      return Piece{{0, param.numel}, 0};
    ElementRange owned = ParamShardLayout{param.numel, worldSize}.ownedBy(rank);
    if (owned.empty())
      return std::nullopt;
    return Piece{owned, 0};
  }

  int64_t worldSize;
  std::vector<PlanTensor> tensors;
  const std::vector<PlanFlatGroup> &groups;
};

size_t byteCount(int64_t elements, DType dtype) {
  return static_cast<size_t>(elements * bytesPerElement(dtype));
}

/// Converts `n` elements between the float dtypes, widening exactly and
/// narrowing to nearest even (zeroc/Support/Float16.h); I32 only to I32.
bool convertElements(DType from, const std::byte *in, DType to, std::byte *out,
                     size_t n) {

  if (from == to) {
    std::memcpy(out, in, byteCount(static_cast<int64_t>(n), from));
    return true;
  }
  if (from == DType::I32 || to == DType::I32)
    return false;
  for (size_t i = 0; i < n; ++i) {
    float value;
    uint16_t half;
    if (from == DType::F32) {
      std::memcpy(&value, in + 4 * i, 4);
    } else {
      std::memcpy(&half, in + 2 * i, 2);
      value = from == DType::BF16 ? bf16ToFloat(half) : f16ToFloat(half);
    }
    if (to == DType::F32) {
      std::memcpy(out + 4 * i, &value, 4);
    } else {
      half = to == DType::BF16 ? floatToBf16(value) : floatToF16(value);
      std::memcpy(out + 2 * i, &half, 2);
    }
  }
  return true;
}

} // namespace

//===----------------------------------------------------------------------===//
// Checkpoint -> safetensors
//===----------------------------------------------------------------------===//

Expected<ConsolidateResult>
consolidateCheckpoint(const std::string &dir, const std::string &tagOrLatest,
                      const std::string &outputPath, const WriteHooks &hooks) {
  auto tag = resolveCheckpointTag(dir, tagOrLatest);
  if (!tag)
    return tag.error();
  auto manifest = readCheckpointManifest(dir, *tag);
  if (!manifest)
    return manifest.error();
  for (int64_t rank = 0; rank < manifest->worldSize; ++rank)
    if (auto ok = verifyShardFile(dir, *manifest, rank); !ok)
      return ok.error();

  ModelLayout model(manifest->worldSize, manifest->planTensors(),
                    manifest->flatGroups);
  std::vector<SafetensorsDeclaration> decls;
  for (const PlanTensor &p : model.tensors) {
    if (p.role != TensorRole::Param)
      continue;
    const PlanTensor &source = model.sourceOf(p);
    if (&source != &p && !model.group(source.of) && source.numel != p.numel)
      return Diagnostic{dir, 0, 0,
                        "checkpoint '" + *tag + "': the master copy '" +
                            source.name + "' has " +
                            std::to_string(source.numel) +
                            " elements, its "
                            "parameter '" +
                            p.name + "' " + std::to_string(p.numel)};
    DType out = source.dtype == DType::I32 ? DType::I32 : DType::F32;
    decls.push_back({p.name, out, p.shape});
  }
  auto writer = SafetensorsWriter::create(
      outputPath, decls,
      {{"format", "pt"},
       {"zeroc_tag", *tag},
       {"zeroc_step", std::to_string(manifest->state.step)}},
      hooks);
  if (!writer)
    return writer.error();

  ConsolidateResult result;
  result.tag = *tag;
  result.step = manifest->state.step;
  for (const SafetensorsDeclaration &d : writer->order()) {
    const PlanTensor &param = *model.find(d.name);
    const PlanTensor &source = model.sourceOf(param);
    const CheckpointTensor &stored = *manifest->findTensor(source.name);
    std::vector<std::byte> whole(byteCount(param.numel, d.dtype));
    // A replicated holder is whole on rank 0; a sharded one is spread.
    int64_t ranks = source.sharded ? manifest->worldSize : 1;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      std::optional<Piece> piece = model.pieceOn(source, param, rank);
      if (!piece)
        continue;
      auto bytes = readShardElements(
          dir, *manifest, rank, stored,
          {piece->localBegin, piece->localBegin + piece->params.size()});
      if (!bytes)
        return bytes.error();
      convertElements(source.dtype, bytes->data(), d.dtype,
                      whole.data() + byteCount(piece->params.begin, d.dtype),
                      static_cast<size_t>(piece->params.size()));
    }
    if (auto ok = writer->write(d.name, constBytesOf(whole)); !ok)
      return ok.error();
    result.parameters.push_back(d.name);
  }
  if (auto ok = writer->commit(); !ok)
    return ok.error();
  return result;
}

//===----------------------------------------------------------------------===//
// safetensors -> one rank's tensors
//===----------------------------------------------------------------------===//

Expected<InitialTensors> loadSafetensorsShard(const std::string &path,
                                              const Plan &plan, int64_t rank) {
  if (rank < 0 || rank >= plan.worldSize)
    return Diagnostic{"", 0, 0,
                      "rank " + std::to_string(rank) +
                          " is out of range for a plan of world size " +
                          std::to_string(plan.worldSize)};
  auto file = SafetensorsFile::open(path);
  if (!file)
    return file.error();
  ModelLayout model(plan.worldSize, plan.tensors, plan.flatGroups);

  std::vector<std::string> missing, extra, wrong;
  for (const PlanTensor &t : plan.tensors) {
    if (t.role != TensorRole::Param)
      continue;
    const SafetensorsEntry *e = file->find(t.name);
    if (!e) {
      missing.push_back(t.name);
      continue;
    }
    std::string fileType(safetensorsDTypeName(e->dtype));
    if (e->shape != t.shape)
      wrong.push_back("'" + t.name + "' has shape " + shapeString(e->shape) +
                      " in the file, " + shapeString(t.shape) + " in the plan");
    else if (e->dtype != t.dtype && e->dtype != DType::F32)
      wrong.push_back("'" + t.name + "' is " + fileType +
                      " in the file; the plan's parameter is " +
                      std::string(dtypeName(t.dtype)) +
                      ", which reads F32 or " +
                      std::string(safetensorsDTypeName(t.dtype)));
    else if (t.dtype == DType::I32 && e->dtype != DType::I32)
      wrong.push_back("'" + t.name + "' is " + fileType +
                      " in the file; the plan's parameter is i32");
  }
  for (const SafetensorsEntry &e : file->tensors()) {
    const PlanTensor *t = plan.findTensor(e.name);
    if (!t || t->role != TensorRole::Param)
      extra.push_back(e.name);
  }
  Differences problems;
  problems.addNames("the plan's parameters ", missing, " are missing");
  problems.addNames("", extra, " are not parameters of the plan");
  for (const std::string &w : wrong)
    problems.add(w);
  if (!problems.empty())
    return Diagnostic{path, 0, 0, "does not fit the plan: " + problems.str()};

  InitialTensors out;
  out.tensors.resize(plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlanTensor &holder = plan.tensors[i];
    std::vector<const PlanTensor *> params;
    if (holder.role == TensorRole::Param) {
      params.push_back(&holder);
    } else if (holder.role == TensorRole::Master) {
      if (const PlanFlatGroup *g = model.group(holder.of))
        for (const std::string &p : g->params)
          params.push_back(plan.findTensor(p));
      else if (const PlanTensor *p = plan.findTensor(holder.of))
        params.push_back(p);
    }
    if (params.empty())
      continue;
    std::vector<std::byte> &local = out.tensors[i];
    local.assign(byteCount(holder.localNumel, holder.dtype), std::byte{0});
    for (const PlanTensor *param : params) {
      std::optional<Piece> piece = model.pieceOn(holder, *param, rank);
      if (!piece)
        continue;
      const SafetensorsEntry &entry = *file->find(param->name);
      auto bytes = file->read(entry, piece->params);
      if (!bytes)
        return bytes.error();
      if (!convertElements(entry.dtype, bytes->data(), holder.dtype,
                           local.data() +
                               byteCount(piece->localBegin, holder.dtype),
                           static_cast<size_t>(piece->params.size())))
        return Diagnostic{path, 0, 0,
                          "cannot convert '" + param->name + "' from " +
                              std::string(safetensorsDTypeName(entry.dtype)) +
                              " to " + std::string(dtypeName(holder.dtype)) +
                              " for '" + holder.name + "'"};
    }
    out.initialized.push_back(holder.name);
  }
  return out;
}

Expected<std::vector<std::string>>
loadSafetensorsInto(const std::string &path, const Plan &plan, int64_t rank,
                    const std::vector<MutableBytes> &out) {
  if (auto ok = checkLocalBuffers(plan, out, "loadSafetensorsInto"); !ok)
    return ok.error();
  auto loaded = loadSafetensorsShard(path, plan, rank);
  if (!loaded)
    return loaded.error();
  for (size_t i = 0; i < out.size(); ++i)
    if (!loaded->tensors[i].empty())
      std::memcpy(out[i].data, loaded->tensors[i].data(), out[i].size);
  return loaded->initialized;
}

} // namespace zeroc
