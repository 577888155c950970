//===- Consolidate.cpp - Sharded checkpoint <-> whole safetensors ---------===//
//
// Both directions use one mapping: where a parameter's elements lie in the
// local part, on a given rank, of the tensor that holds them (the
// parameter, its master copy, or its flat group's master copy), computed
// from ShardLayout.h alone.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Checkpoint/Consolidate.h"

#include "zeroc/Checkpoint/HFCheckpoint.h"
#include "zeroc/Checkpoint/Safetensors.h"

#include "Messages.h"
#include "zeroc/Support/Float16.h"
#include "zeroc/Support/Format.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

namespace zeroc {

namespace {

/// Elements `params` of a parameter lie in the holder's local part on some
/// rank, starting at element `localBegin`.
struct Piece {
  ElementRange params;
  int64_t localBegin = 0;
};

/// The tensors and flat groups of a plan or a manifest. With expert
/// parallelism an `expert` tensor holds one expert-parallel rank's experts
/// (zeroc/Support/ExpertParallel.h): the whole parameter is the `ep` ranks'
/// tensors one after another (element i of expert-parallel index j's
/// tensor is element j x numel + i), each sharded over its
/// expert-data-parallel group. Pieces are in the whole parameter's
/// elements.
class ModelLayout {
public:
  ModelLayout(int64_t worldSize, int64_t ep, std::vector<PlanTensor> tensors,
              const std::vector<PlanFlatGroup> &groups)
      : worldSize(worldSize), ep(std::max<int64_t>(ep, 1)),
        tensors(std::move(tensors)), groups(groups) {
    for (size_t i = 0; i < this->tensors.size(); ++i)
      byName.emplace(this->tensors[i].name, i);
  }

  /// `t` as the whole model has it: an expert tensor with every
  /// expert-parallel rank's experts.
  PlanTensor whole(const PlanTensor &t) const {
    if (!t.expert)
      return t;
    PlanTensor w = t;
    if (!w.shape.empty())
      w.shape[0] *= ep;
    w.numel *= ep;
    w.localNumel = w.numel;
    w.sharded = false;
    w.expert = false;
    return w;
  }
  std::vector<PlanTensor> wholeTensors() const {
    std::vector<PlanTensor> out;
    for (const PlanTensor &t : tensors)
      out.push_back(whole(t));
    return out;
  }
  /// The ranks whose parts of `holder` make up its whole: all of them for
  /// a sharded holder, one per expert-parallel index for a replicated
  /// expert tensor, rank 0 otherwise.
  int64_t holderRanks(const PlanTensor &holder) const {
    return holder.sharded ? worldSize : holder.expert ? ep : 1;
  }

  const PlanTensor *find(const std::string &name) const {
    auto it = byName.find(name);
    return it == byName.end() ? nullptr : &tensors[it->second];
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

  /// Computed once per group: a model's groups hold hundreds of
  /// parameters, each of which asks.
  const FlatGroupLayout &layoutOf(const PlanFlatGroup &g) const {
    auto it = layouts.find(g.name);
    if (it != layouts.end())
      return it->second;
    std::vector<int64_t> numels;
    for (const std::string &p : g.params)
      numels.push_back(find(p)->numel);
    const PlanTensor *first = find(g.params.at(0));
    return layouts.emplace(g.name, FlatGroupLayout(numels, shardRanks(*first)))
        .first->second;
  }

  /// The ranks a sharded `t` is split over: its expert-data-parallel group
  /// for expert state, the world otherwise.
  int64_t shardRanks(const PlanTensor &t) const {
    return t.expert ? worldSize / ep : worldSize;
  }

  /// The part of `param` that `holder` keeps on `rank`. A replicated
  /// holder keeps all of it on every rank (an expert one, its ranks'
  /// experts).
  std::optional<Piece> pieceOn(const PlanTensor &holder,
                               const PlanTensor &param, int64_t rank) const {
    // An expert tensor: its expert-parallel index's experts, sharded over
    // the expert-data-parallel group at the rank's place in it.
    int64_t base = 0, r = rank;
    if (holder.expert) {
      CommGroupShape edp =
          commGroupShape(CommGroupKind::ExpertDataParallel, worldSize, ep);
      base = commGroupShape(CommGroupKind::ExpertParallel, worldSize, ep)
                 .indexOf(rank) *
             param.numel;
      r = edp.indexOf(rank);
    }
    auto shifted = [&](ElementRange params, int64_t localBegin) {
      return Piece{{params.begin + base, params.end + base}, localBegin};
    };
    if (const PlanFlatGroup *g = group(holder.of)) {
      const FlatGroupLayout &layout = layoutOf(*g);
      size_t k = static_cast<size_t>(
          std::find(g->params.begin(), g->params.end(), param.name) -
          g->params.begin());
      ElementRange window =
          holder.sharded ? layout.partition(r) : ElementRange{0, layout.padded};
      ElementRange owned = layout.param(k).intersect(window);
      if (owned.empty())
        return std::nullopt;
      return shifted(
          {owned.begin - layout.offsets[k], owned.end - layout.offsets[k]},
          owned.begin - window.begin);
    }
    if (!holder.sharded)
      return shifted({0, param.numel}, 0);
    ElementRange owned =
        ParamShardLayout{param.numel, shardRanks(holder)}.ownedBy(r);
    if (owned.empty())
      return std::nullopt;
    return shifted(owned, 0);
  }

  int64_t worldSize;
  int64_t ep;
  std::vector<PlanTensor> tensors;
  const std::vector<PlanFlatGroup> &groups;

private:
  std::map<std::string, size_t> byName;
  mutable std::map<std::string, FlatGroupLayout> layouts;
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

/// Elements `range` of parameter `name`, in `dtype`, from the f32 copy
/// that holds it (ModelLayout::sourceOf), reassembled from the ranks'
/// shards that hold them.
Expected<std::vector<std::byte>>
parameterElements(const std::string &dir, const CheckpointManifest &manifest,
                  const ModelLayout &model, const std::string &name,
                  ElementRange range, DType dtype) {
  const PlanTensor &param = *model.find(name);
  const PlanTensor &source = model.sourceOf(param);
  const CheckpointTensor &stored = *manifest.findTensor(source.name);
  std::vector<std::byte> out(byteCount(range.size(), dtype));
  // A replicated holder is whole on rank 0 (an expert one, on ranks 0 to
  // ep - 1); a sharded one is spread.
  for (int64_t rank = 0; rank < model.holderRanks(source); ++rank) {
    std::optional<Piece> piece = model.pieceOn(source, param, rank);
    if (!piece)
      continue;
    ElementRange wanted = piece->params.intersect(range);
    if (wanted.empty())
      continue;
    int64_t local = piece->localBegin + (wanted.begin - piece->params.begin);
    auto bytes = readShardElements(dir, manifest, rank, stored,
                                   {local, local + wanted.size()});
    if (!bytes)
      return bytes.error();
    if (!convertElements(source.dtype, bytes->data(), dtype,
                         out.data() +
                             byteCount(wanted.begin - range.begin, dtype),
                         static_cast<size_t>(wanted.size())))
      return Diagnostic{dir, 0, 0,
                        "cannot convert '" + name + "' from " +
                            std::string(dtypeName(source.dtype)) + " to " +
                            std::string(dtypeName(dtype))};
  }
  return out;
}

/// Parameter `name` whole, in `dtype`.
Expected<std::vector<std::byte>>
wholeParameter(const std::string &dir, const CheckpointManifest &manifest,
               const ModelLayout &model, const std::string &name, DType dtype) {
  return parameterElements(dir, manifest, model, name,
                           {0, model.whole(*model.find(name)).numel}, dtype);
}

/// The tag `tagOrLatest` names and its manifest.
struct TaggedManifest {
  std::string tag;
  CheckpointManifest manifest;
};
Expected<TaggedManifest> openTag(const std::string &dir,
                                 const std::string &tagOrLatest) {
  auto tag = resolveCheckpointTag(dir, tagOrLatest);
  if (!tag)
    return tag.error();
  auto manifest = readCheckpointManifest(dir, *tag);
  if (!manifest)
    return manifest.error();
  return TaggedManifest{*tag, std::move(*manifest)};
}

} // namespace

//===----------------------------------------------------------------------===//
// Checkpoint -> safetensors
//===----------------------------------------------------------------------===//

Expected<ConsolidateResult>
consolidateCheckpoint(const std::string &dir, const std::string &tagOrLatest,
                      const std::string &outputPath, const WriteHooks &hooks) {
  auto opened = openTag(dir, tagOrLatest);
  if (!opened)
    return opened.error();
  const std::string *tag = &opened->tag;
  CheckpointManifest *manifest = &opened->manifest;
  for (int64_t rank = 0; rank < manifest->worldSize; ++rank)
    if (auto ok = verifyShardFile(dir, *manifest, rank); !ok)
      return ok.error();

  ModelLayout model(manifest->worldSize, manifest->expertParallelSize,
                    manifest->planTensors(), manifest->flatGroups);
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
    decls.push_back({p.name, out, model.whole(p).shape});
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
    auto whole = wholeParameter(dir, *manifest, model, d.name, d.dtype);
    if (!whole)
      return whole.error();
    if (auto ok = writer->write(d.name, constBytesOf(*whole)); !ok)
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

namespace {

/// Where some of a parameter's elements are in a file: its elements
/// [paramBegin, paramBegin + numel) in HF tensor `entry` as an HFPart puts
/// them, or the whole entry. A parameter has one source per part.
struct ParamSource {
  const SafetensorsFile *file = nullptr;
  const SafetensorsEntry *entry = nullptr;
  int64_t paramBegin = 0;
  int64_t numel = 0;
  bool transposed = false;
  int64_t hfBegin = 0; ///< Not transposed: the entry's element of paramBegin.
  int64_t offset = 0;  ///< Transposed: the parameter's first column.
  int64_t inner = 1; ///< Transposed: elements per output row of the parameter.
  int64_t columns = 0; ///< Transposed: the file tensor's second dimension.
};

bool isFloat(DType t) { return t != DType::I32; }

/// Elements `range` of the parameter, converted to `to`, from the sources
/// that hold them. A transposed source is read one run of output columns
/// per input row, so that only the elements asked for are read.
Expected<std::vector<std::byte>>
readParam(const std::vector<ParamSource> &sources, ElementRange range,
          DType to) {
  size_t size = static_cast<size_t>(bytesPerElement(to));
  std::vector<std::byte> out(static_cast<size_t>(range.size()) * size);
  if (range.empty())
    return out;
  for (const ParamSource &s : sources) {
    ElementRange mine = range.intersect({s.paramBegin, s.paramBegin + s.numel});
    if (mine.empty())
      continue;
    std::byte *dest =
        out.data() + static_cast<size_t>(mine.begin - range.begin) * size;
    if (!s.transposed) {
      int64_t base = s.hfBegin - s.paramBegin;
      auto raw = s.file->read(*s.entry, {base + mine.begin, base + mine.end});
      if (!raw)
        return raw.error();
      convertElements(s.entry->dtype, raw->data(), to, dest,
                      static_cast<size_t>(mine.size()));
      continue;
    }
    // A transposed source is a whole parameter (paramBegin 0).
    int64_t in = s.inner;
    std::vector<std::byte> run;
    for (int64_t i = 0; i < in && i < mine.end; ++i) {
      // Parameter element o * in + i is file element i * columns + offset +
      // o.
      int64_t oLo = mine.begin <= i ? 0 : (mine.begin - i + in - 1) / in;
      int64_t oHi = (mine.end - 1 - i) / in + 1;
      if (oLo >= oHi)
        continue;
      int64_t at = i * s.columns + s.offset;
      auto raw = s.file->read(*s.entry, {at + oLo, at + oHi});
      if (!raw)
        return raw.error();
      run.resize(static_cast<size_t>(oHi - oLo) * size);
      convertElements(s.entry->dtype, raw->data(), to, run.data(),
                      static_cast<size_t>(oHi - oLo));
      for (int64_t o = oLo; o < oHi; ++o)
        std::memcpy(dest + static_cast<size_t>(o * in + i - mine.begin) * size,
                    run.data() + static_cast<size_t>(o - oLo) * size, size);
    }
  }
  return out;
}

int64_t innerOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d)
    n *= shape[d];
  return n;
}

std::string dtypeProblem(const std::string &name, const std::string &file,
                         DType found, DType want) {
  if (isFloat(found) == isFloat(want))
    return "";
  return "'" + name + "' in " + file + " is " +
         std::string(safetensorsDTypeName(found)) + ", the plan's " +
         std::string(dtypeName(want)) + " parameter cannot be read from it";
}

/// The sources of every parameter under zeroc's own names; an error lists
/// every missing, extra and mis-shaped tensor.
using Sources = std::map<std::string, std::vector<ParamSource>>;

Expected<Sources> zerocSources(const SafetensorsSet &set, const Plan &plan,
                               const std::string &hint) {
  Sources sources;
  std::vector<std::string> missing, extra, wrong;
  for (const PlanTensor &t : plan.tensors) {
    if (t.role != TensorRole::Param)
      continue;
    const SafetensorsSet::Located *at = set.find(t.name);
    if (!at) {
      missing.push_back(t.name);
      continue;
    }
    const SafetensorsEntry &e = *at->entry;
    // A padded table is read whole or as its valid rows (the unpadded
    // model's); the padding rows are then zero.
    std::vector<int64_t> unpadded = t.shape;
    if (t.validRows)
      unpadded[0] = t.validRows;
    if (e.shape != t.shape && e.shape != unpadded)
      wrong.push_back("'" + t.name + "' has shape " + shapeString(e.shape) +
                      " in " + at->file->path() + ", " + shapeString(t.shape) +
                      " in the plan" +
                      (t.validRows ? " (or its " + std::to_string(t.validRows) +
                                         " rows without the padding, " +
                                         shapeString(unpadded) + ")"
                                   : std::string()));
    else if (std::string d =
                 dtypeProblem(t.name, at->file->path(), e.dtype, t.dtype);
             !d.empty())
      wrong.push_back(d);
    else
      sources[t.name] = {
          {at->file, &e, 0, e.shape == t.shape ? t.numel : t.validNumel()}};
  }
  for (const auto &[name, at] : set.tensors()) {
    const PlanTensor *t = plan.findTensor(name);
    if (!t || t->role != TensorRole::Param)
      extra.push_back(name);
  }
  Differences problems;
  problems.addNames("the plan's parameters ", missing, " are missing");
  problems.addNames("", extra, " are not parameters of the plan");
  for (const std::string &w : wrong)
    problems.add(w);
  if (!problems.empty())
    return Diagnostic{set.path(), 0, 0,
                      "does not fit the plan: " + problems.str() + hint};
  return sources;
}

/// A part's parameter as errors name it: `experts.w1[3]` for a slice.
std::string partName(const Plan &plan, const HFPart &part) {
  const PlanTensor *p = plan.findTensor(part.param);
  if (part.numel == p->numel)
    return part.param;
  return part.param + "[" + std::to_string(part.paramBegin / part.numel) + "]";
}

/// The sources of every parameter under the Hugging Face names of
/// `mapping`.
Expected<Sources> hfSources(const SafetensorsSet &set, const Plan &plan,
                            const HFMapping &mapping) {
  Sources sources;
  // Mis-shaped first, then extra (which tell a file of another model at a
  // glance), then missing.
  std::vector<std::string> shapes, extra, missing;
  for (const HFTensor &t : mapping.tensors) {
    const SafetensorsSet::Located *at = set.find(t.name);
    const SafetensorsSet::Located *bare = set.find(t.bareName);
    std::string partNames;
    for (const HFPart &p : t.parts)
      partNames += (partNames.empty() ? "" : ", ") + partName(plan, p);
    if (at && bare && at != bare) {
      shapes.push_back("'" + t.name + "' is in the file both as '" + t.name +
                       "' and as '" + t.bareName + "'");
      continue;
    }
    if (!at)
      at = bare;
    if (!at) {
      missing.push_back("'" + t.name + "' " + shapeString(t.shape) + " (for " +
                        partNames + ") is missing");
      continue;
    }
    const SafetensorsEntry &e = *at->entry;
    if (e.shape != t.shape) {
      shapes.push_back(
          "'" + e.name + "' in " + at->file->path() + " has shape " +
          shapeString(e.shape) + ", the plan needs " + shapeString(t.shape) +
          " (for " + partNames +
          (t.parts.front().transposed ? ", stored as Conv1D [in, out]" : "") +
          ")");
      continue;
    }
    for (const HFPart &part : t.parts) {
      const PlanTensor &p = *plan.findTensor(part.param);
      if (std::string d =
              dtypeProblem(e.name, at->file->path(), e.dtype, p.dtype);
          !d.empty()) {
        shapes.push_back(d);
        break;
      }
      ParamSource source{at->file,
                         &e,
                         part.paramBegin,
                         part.numel,
                         part.transposed,
                         part.hfBegin,
                         part.offset,
                         innerOf(p.shape),
                         0};
      if (part.transposed)
        source.columns = t.shape[1];
      sources[p.name].push_back(source);
    }
  }
  for (const auto &[name, at] : set.tensors()) {
    if (mapping.find(name) || mapping.isBuffer(name))
      continue;
    std::string why = "'" + name + "' in " + at.file->path() +
                      " is not a tensor of the plan's " + mapping.modelType +
                      " model";
    if (mapping.find("lm_head.weight") == nullptr && (name == "lm_head.weight"))
      why += " (the plan ties the output layer to the token embedding: "
             "tie_word_embeddings)";
    if (endsWith(name, ".mlp.experts.gate_up_proj") ||
        endsWith(name, ".mlp.experts.down_proj"))
      why += " (transformers 5's fused in-memory experts, from a state_dict() "
             "saved as it is: save_pretrained writes the files' one tensor "
             "per expert, block_sparse_moe.experts.E.w1.weight)";
    extra.push_back(why);
  }
  size_t count = shapes.size() + extra.size() + missing.size();
  if (count == 0)
    return sources;
  Differences problems;
  for (const auto *list : {&shapes, &extra, &missing})
    for (const std::string &p : *list)
      problems.add(p);
  std::string counts =
      count <= 8 ? ""
                 : "; " + std::to_string(shapes.size()) + " mis-shaped, " +
                       std::to_string(extra.size()) + " not of the plan, " +
                       std::to_string(missing.size()) + " missing";
  return Diagnostic{set.path(), 0, 0,
                    "does not fit the plan (Hugging Face " + mapping.modelType +
                        " names" + counts + "): " + problems.str()};
}

} // namespace

Expected<InitialTensors> loadSafetensorsShard(const std::string &path,
                                              const Plan &plan, int64_t rank) {
  if (rank < 0 || rank >= plan.worldSize)
    return Diagnostic{"", 0, 0,
                      "rank " + std::to_string(rank) +
                          " is out of range for a plan of world size " +
                          std::to_string(plan.worldSize)};
  auto set = SafetensorsSet::open(path);
  if (!set)
    return set.error();
  ModelLayout model(plan.worldSize, plan.expertParallelSize, plan.tensors,
                    plan.flatGroups);
  // The file holds whole parameters: expert tensors with every
  // expert-parallel rank's experts.
  Plan wholePlan;
  wholePlan.model = plan.model;
  wholePlan.tensors = model.wholeTensors();

  // Which names the file has: zeroc's, or Hugging Face's for the plan's
  // architecture, whichever more of its tensors match (Hugging Face's when
  // none is zeroc's, so that a wrong model is reported in its names).
  auto mapping = hfMapping(plan.model.hfConfig, wholePlan.tensors);
  size_t zerocNames = 0, hfNames = 0;
  for (const auto &[name, at] : set->tensors()) {
    const PlanTensor *t = wholePlan.findTensor(name);
    zerocNames += t && t->role == TensorRole::Param;
    hfNames += mapping && (mapping->find(name) || mapping->isBuffer(name));
  }
  InitialTensors out;
  Expected<Sources> sources = Sources();
  if (mapping && (hfNames > zerocNames || zerocNames == 0)) {
    out.naming = mapping->modelType;
    sources = hfSources(*set, wholePlan, *mapping);
  } else {
    out.naming = "zeroc";
    sources = zerocSources(
        *set, wholePlan,
        mapping || zerocNames == set->tensors().size()
            ? std::string()
            : "; the names are not zeroc's, and Hugging Face names cannot "
              "be mapped: " +
                  mapping.error().message);
  }
  if (!sources)
    return sources.error();

  // Every holder (a parameter, or the master copy of a parameter or a flat
  // group) starts zero; each parameter is read once, over the hull of the
  // elements its holders keep on this rank.
  out.tensors.resize(plan.tensors.size());
  std::map<std::string, std::vector<size_t>> holdersOf;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlanTensor &holder = plan.tensors[i];
    std::vector<std::string> params;
    if (holder.role == TensorRole::Param) {
      params.push_back(holder.name);
    } else if (holder.role == TensorRole::Master) {
      if (const PlanFlatGroup *g = model.group(holder.of))
        params = g->params;
      else if (plan.findTensor(holder.of))
        params.push_back(holder.of);
    }
    if (params.empty())
      continue;
    for (const std::string &p : params)
      holdersOf[p].push_back(i);
    out.tensors[i].assign(byteCount(holder.localNumel, holder.dtype),
                          std::byte{0});
    out.initialized.push_back(holder.name);
  }
  for (const PlanTensor &param : plan.tensors) {
    if (param.role != TensorRole::Param)
      continue;
    std::vector<std::pair<size_t, Piece>> pieces;
    ElementRange hull{0, 0};
    for (size_t i : holdersOf[param.name])
      if (std::optional<Piece> piece =
              model.pieceOn(plan.tensors[i], param, rank)) {
        hull = hull.empty()
                   ? piece->params
                   : ElementRange{std::min(hull.begin, piece->params.begin),
                                  std::max(hull.end, piece->params.end)};
        pieces.push_back({i, *piece});
      }
    if (hull.empty())
      continue;
    DType via = isFloat(param.dtype) ? DType::F32 : DType::I32;
    auto values = readParam(sources->at(param.name), hull, via);
    if (!values)
      return values.error();
    // A padded table's padding rows start at zero (they are never trained
    // and no checkpoint keeps them): a file whose padding holds values is
    // another model's table, refused rather than trained on or dropped.
    if (param.validRows && via == DType::F32) {
      const float *f = reinterpret_cast<const float *>(values->data());
      for (int64_t k = std::max(param.validNumel(), hull.begin); k < hull.end;
           ++k)
        if (f[k - hull.begin] != 0.0f)
          return Diagnostic{
              set->path(), 0, 0,
              "'" + param.name + "' holds " +
                  std::to_string(f[k - hull.begin]) + " at element " +
                  std::to_string(k) + ", in row " +
                  std::to_string(k / innerOf(param.shape)) +
                  " of its padding (rows " + std::to_string(param.validRows) +
                  " to " + std::to_string(param.shape[0] - 1) +
                  "); the plan's padding rows are zero: give the table's " +
                  std::to_string(param.validRows) +
                  " valid rows, or zeros past them"};
    }
    for (const auto &[i, piece] : pieces) {
      const PlanTensor &holder = plan.tensors[i];
      convertElements(
          via, values->data() + byteCount(piece.params.begin - hull.begin, via),
          holder.dtype,
          out.tensors[i].data() + byteCount(piece.localBegin, holder.dtype),
          static_cast<size_t>(piece.params.size()));
    }
  }
  out.bytesRead = set->bytesRead();
  return out;
}

Expected<std::vector<std::string>>
loadSafetensorsInto(const std::string &path, const Plan &plan, int64_t rank,
                    const std::vector<MutableBytes> &out, std::string *naming) {
  if (auto ok = checkLocalBuffers(plan, out, "loadSafetensorsInto"); !ok)
    return ok.error();
  auto loaded = loadSafetensorsShard(path, plan, rank);
  if (!loaded)
    return loaded.error();
  if (naming)
    *naming = loaded->naming;
  for (size_t i = 0; i < out.size(); ++i)
    if (!loaded->tensors[i].empty())
      std::memcpy(out[i].data, loaded->tensors[i].data(), out[i].size);
  return loaded->initialized;
}

//===----------------------------------------------------------------------===//
// Checkpoint -> Hugging Face safetensors and config.json
//===----------------------------------------------------------------------===//

namespace {

const char *hfDTypeName(DType t) {
  switch (t) {
  case DType::BF16:
    return "bfloat16";
  case DType::F16:
    return "float16";
  case DType::I32:
    return "int32";
  default:
    return "float32";
  }
}

/// Puts a part's elements (`elements`, in the tensor's dtype) where `part`
/// says they lie in the HF tensor `data` of shape `shape`.
void placePart(const HFPart &part, const PlanTensor &param,
               const std::vector<int64_t> &shape,
               const std::vector<std::byte> &elements, size_t size,
               std::vector<std::byte> &data) {
  if (!part.transposed) {
    std::memcpy(data.data() + static_cast<size_t>(part.hfBegin) * size,
                elements.data(), elements.size());
    return;
  }
  int64_t outs = param.shape[0], in = param.shape[1], columns = shape[1];
  for (int64_t o = 0; o < outs; ++o)
    for (int64_t i = 0; i < in; ++i)
      std::memcpy(data.data() +
                      static_cast<size_t>(i * columns + part.offset + o) * size,
                  elements.data() + static_cast<size_t>(o * in + i) * size,
                  size);
}

} // namespace

Expected<HFExportResult> consolidateToHF(const std::string &dir,
                                         const std::string &tagOrLatest,
                                         const std::string &outDir,
                                         const HFExportOptions &options) {
  auto opened = openTag(dir, tagOrLatest);
  if (!opened)
    return opened.error();
  const std::string *tag = &opened->tag;
  CheckpointManifest *manifest = &opened->manifest;
  ModelLayout model(manifest->worldSize, manifest->expertParallelSize,
                    manifest->planTensors(), manifest->flatGroups);
  std::vector<PlanTensor> wholes = model.wholeTensors();
  auto mapping = hfMapping(manifest->hfConfig, wholes);
  if (!mapping)
    return Diagnostic{dir, 0, 0,
                      "checkpoint '" + *tag +
                          "' cannot be written with Hugging Face names: " +
                          mapping.error().message};
  if (options.dtype && !isFloat(*options.dtype))
    return Diagnostic{"", 0, 0, "--dtype must be f32, bf16 or f16"};
  if (options.maxShardBytes == 0)
    return Diagnostic{"", 0, 0, "--max-shard-size must be at least 1 byte"};
  for (int64_t rank = 0; rank < manifest->worldSize; ++rank)
    if (auto ok = verifyShardFile(dir, *manifest, rank); !ok)
      return ok.error();

  // The tensors, their dtype (the training dtype, or --dtype) and shards.
  struct Out {
    const HFTensor *tensor;
    DType dtype;
    uint64_t bytes;
  };
  std::vector<std::vector<Out>> shards(1);
  uint64_t shardBytes = 0, total = 0;
  std::optional<DType> written;
  for (const HFTensor &t : mapping->tensors) {
    DType own = model.find(t.parts.front().param)->dtype;
    DType dtype = options.dtype && isFloat(own) ? *options.dtype : own;
    if (isFloat(dtype))
      written = written.value_or(dtype);
    int64_t numel = 1;
    for (int64_t d : t.shape)
      numel *= d;
    uint64_t bytes = byteCount(numel, dtype);
    if (!shards.back().empty() && shardBytes + bytes > options.maxShardBytes) {
      shards.emplace_back();
      shardBytes = 0;
    }
    shards.back().push_back({&t, dtype, bytes});
    shardBytes += bytes;
    total += bytes;
  }
  std::vector<std::string> names;
  if (shards.size() == 1) {
    names.push_back("model.safetensors");
  } else {
    auto number = [](size_t n) {
      std::string s = std::to_string(n);
      return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
    };
    for (size_t k = 0; k < shards.size(); ++k)
      names.push_back("model-" + number(k + 1) + "-of-" +
                      number(shards.size()) + ".safetensors");
  }

  if (auto ok = makeDirectories(outDir); !ok)
    return ok.error();
  // A weights file of another export would be read alongside these.
  std::set<std::string> ours(names.begin(), names.end());
  ours.insert("model.safetensors.index.json");
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(outDir, ec)) {
    std::string f = e.path().filename().string();
    bool weights = f.rfind("model", 0) == 0 &&
                   f.find(".safetensors") != std::string::npos &&
                   f.find(".tmp") == std::string::npos;
    if (weights && !ours.count(f))
      return Diagnostic{joinPath(outDir, f), 0, 0,
                        "is in the output directory but not part of this "
                        "export (" +
                            std::to_string(names.size()) +
                            " file(s)); remove it or write elsewhere"};
  }
  if (shards.size() == 1 &&
      pathExists(joinPath(outDir, "model.safetensors.index.json")))
    return Diagnostic{joinPath(outDir, "model.safetensors.index.json"), 0, 0,
                      "is in the output directory but this export writes a "
                      "single file; remove it or write elsewhere"};

  HFExportResult result;
  result.tag = *tag;
  result.step = manifest->state.step;
  nlohmann::json weightMap = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    std::vector<SafetensorsDeclaration> decls;
    std::map<std::string, const Out *> byName;
    for (const Out &o : shards[k]) {
      decls.push_back({o.tensor->name, o.dtype, o.tensor->shape});
      byName[o.tensor->name] = &o;
      weightMap[o.tensor->name] = names[k];
    }
    std::string path = joinPath(outDir, names[k]);
    auto writer = SafetensorsWriter::create(path, decls, {{"format", "pt"}});
    if (!writer)
      return writer.error();
    for (const SafetensorsDeclaration &d : writer->order()) {
      const Out &o = *byName.at(d.name);
      std::vector<std::byte> data(static_cast<size_t>(o.bytes));
      size_t size = static_cast<size_t>(bytesPerElement(o.dtype));
      for (const HFPart &part : o.tensor->parts) {
        auto elements = parameterElements(
            dir, *manifest, model, part.param,
            {part.paramBegin, part.paramBegin + part.numel}, o.dtype);
        if (!elements)
          return elements.error();
        placePart(part, model.whole(*model.find(part.param)), o.tensor->shape,
                  *elements, size, data);
      }
      if (auto ok = writer->write(d.name, constBytesOf(data)); !ok)
        return ok.error();
      ++result.tensors;
    }
    if (auto ok = writer->commit(); !ok)
      return ok.error();
    result.files.push_back(path);
    ++result.shards;
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}},
                            {"weight_map", weightMap}};
    std::string path = joinPath(outDir, "model.safetensors.index.json");
    if (auto ok = writeFileAtomically(path, index.dump(2) + "\n"); !ok)
      return ok.error();
    result.files.push_back(path);
  }
  nlohmann::json config = manifest->hfConfig;
  // transformers 5 writes `dtype` where 4.x wrote `torch_dtype`.
  const char *key = config.contains("dtype") && !config.contains("torch_dtype")
                        ? "dtype"
                        : "torch_dtype";
  config[key] = hfDTypeName(written.value_or(DType::F32));
  std::string path = joinPath(outDir, "config.json");
  if (auto ok = writeFileAtomically(path, config.dump(2) + "\n"); !ok)
    return ok.error();
  result.files.push_back(path);
  return result;
}

} // namespace zeroc
