//===- PlanInspect.cpp - What `zeroc inspect` reports about a plan --------===//

#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Plan/PlanMemory.h"

#include "zeroc/Config/DeepSpeedConfig.h" // OptimizerConfig::oneBitType, inline
#include "zeroc/Support/Format.h"
#include "zeroc/Support/Memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <unordered_map>

using nlohmann::json;

namespace zeroc {

static constexpr CollectiveKind kCollectiveKinds[] = {
    CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce, CollectiveKind::AllToAll};

std::optional<CollectiveKind> parseCollectiveKind(const std::string &name) {
  for (CollectiveKind kind : kCollectiveKinds)
    if (name == collectiveName(kind))
      return kind;
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Persistent state
//===----------------------------------------------------------------------===//

int64_t PersistentBytes::role(TensorRole role) const {
  int64_t sum = 0;
  for (Placement p : kAllPlacements)
    sum += at(role, p);
  return sum;
}

int64_t PersistentBytes::placement(Placement placement) const {
  int64_t sum = placement == Placement::Device ? oneBitState : 0;
  for (TensorRole r : kAllTensorRoles)
    sum += at(r, placement);
  return sum;
}

int64_t PersistentBytes::total() const {
  int64_t sum = oneBitState;
  for (TensorRole r : kAllTensorRoles)
    sum += role(r);
  return sum;
}

PersistentBytes persistentBytesPerRank(const Plan &plan) {
  PersistentBytes out;
  for (const PlanTensor &t : plan.tensors) {
    out.byRole[size_t(t.role)][size_t(t.placement)] +=
        localBytes(t.localNumel, t.dtype);
    out.hasRole[size_t(t.role)] = true;
  }
  out.oneBitState = oneBitStateBytes(plan);
  return out;
}

std::string planOptimizerType(const Plan &plan) {
  auto block = plan.config.find("optimizer");
  if (block == plan.config.end() || !block->is_object())
    return "";
  auto type = block->find("type");
  return type != block->end() && type->is_string() ? type->get<std::string>()
                                                   : "";
}

int64_t oneBitStateBytes(const Plan &plan) {
  std::string type = planOptimizerType(plan);
  if (!OptimizerConfig::oneBitType(type))
    return 0;
  int64_t w = std::max<int64_t>(1, plan.worldSize);
  int64_t unit = w * (w * 8 / std::gcd(w, int64_t(8)));
  bool perElementState = type == "ZeroOneAdam" || type == "OneBitLamb";
  int64_t bytes = 0;
  for (const PlanTensor &t : plan.tensors) {
    if (t.role != TensorRole::Param)
      continue;
    int64_t padded = (t.numel + unit - 1) / unit * unit;
    bytes += 4 * (padded + padded / w + (perElementState ? t.numel : 0));
  }
  return bytes;
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

CommKindVolume CommPerStep::total() const {
  CommKindVolume sum;
  for (const CommKindVolume &v : byKind) {
    sum.elements += v.elements;
    sum.collectives += v.collectives;
    if (sum.bytes && v.bytes)
      *sum.bytes += *v.bytes;
    else
      sum.bytes.reset();
  }
  return sum;
}

CollectiveDTypes::CollectiveDTypes(const Plan &plan) {
  for (const PlanTensor &t : plan.tensors)
    tensors[t.name] = &t;
  for (const PlanFlatGroup &g : plan.flatGroups)
    groups[g.name] = &g;
}

std::optional<DType>
CollectiveDTypes::of(const std::unordered_map<int64_t, DType> &values,
                     const PlanOp &op) const {
  std::optional<DType> found;
  bool agree = true;
  auto see = [&](DType t) {
    if (found && *found != t)
      agree = false;
    found = t;
  };
  if (!op.inputs.empty()) {
    for (int64_t id : op.inputs)
      if (auto v = values.find(id); v != values.end())
        see(v->second);
  } else {
    for (const std::string &name : op.tensors) {
      if (auto t = tensors.find(name); t != tensors.end()) {
        see(t->second->dtype);
      } else if (auto g = groups.find(name); g != groups.end()) {
        for (const std::string &param : g->second->params)
          if (auto p = tensors.find(param); p != tensors.end())
            see(p->second->dtype);
      }
    }
  }
  return agree ? found : std::nullopt;
}

CommPerStep commPerRankPerStep(const Plan &plan) {
  CommPerStep out;
  CollectiveDTypes dtypes(plan);
  for (const PlanPhase &phase : plan.phases) {
    std::unordered_map<int64_t, DType> values;
    for (const PlanValue &v : phase.values)
      values[v.id] = v.dtype;
    for (const PlanOp &op : phase.ops) {
      std::optional<CollectiveKind> kind = parseCollectiveKind(op.collective);
      if (!kind)
        continue;
      double elements = commElementsPerRank(*kind, double(op.commElements),
                                            plan.groupSize(op.group)) *
                        double(phase.runsPerStep);
      std::optional<DType> dtype = dtypes.of(values, op);
      for (CommKindVolume *v :
           {&out.byKind[static_cast<size_t>(*kind)],
            &out.byGroup[op.group][static_cast<size_t>(*kind)]}) {
        v->elements += elements;
        v->collectives += phase.runsPerStep;
        if (v->bytes && dtype)
          *v->bytes += elements * double(bytesPerElement(*dtype));
        else
          v->bytes.reset();
      }
    }
  }
  return out;
}

double zeroPaperCommElements(int64_t stage, int64_t params, int64_t worldSize) {
  // Stages 0-2: gradients reduced and parameters gathered once each, an
  // all-reduce's worth. Stage 3 gathers the parameters again for backward.
  double elements =
      commElementsPerRank(CollectiveKind::AllReduce, double(params), worldSize);
  if (stage == 3)
    elements += commElementsPerRank(CollectiveKind::AllGather, double(params),
                                    worldSize);
  return elements;
}

static const char *zeroPaperFormula(int64_t stage) {
  return stage == 3 ? "3 psi (n-1)/n" : "2 psi (n-1)/n";
}

namespace {
/// The ZeRO paper's figure for a plan, and what of the plan it covers. With
/// expert parallelism ZeRO runs twice, as DeepSpeed's MoE parameter groups
/// do: over the world for the non-expert parameters and over the
/// expert-data-parallel group for this rank's experts (the stored `numel`
/// of an expert parameter is its slice); the tokens' all-to-alls are no
/// part of ZeRO and are left out of the comparison.
struct ZeroPaperFigure {
  double expected = 0;
  double planElements = 0;
  std::string formula;
};

ZeroPaperFigure zeroPaperFigure(const Plan &plan, const CommPerStep &comm) {
  ZeroPaperFigure f;
  f.planElements = comm.total().elements;
  if (plan.expertParallelSize <= 1) {
    f.expected =
        zeroPaperCommElements(plan.stage, plan.model.params, plan.worldSize);
    f.formula = zeroPaperFormula(plan.stage);
    return f;
  }
  int64_t psiWorld = 0, psiExperts = 0;
  for (const PlanTensor &t : plan.tensors)
    if (t.role == TensorRole::Param)
      (t.expert ? psiExperts : psiWorld) += t.numel;
  f.expected =
      zeroPaperCommElements(plan.stage, psiWorld, plan.worldSize) +
      zeroPaperCommElements(plan.stage, psiExperts,
                            plan.groupSize(CommGroupKind::ExpertDataParallel));
  f.planElements -= comm[CollectiveKind::AllToAll].elements;
  std::string k = plan.stage == 3 ? "3" : "2";
  f.formula = k + " psi (n-1)/n + " + k +
              " psi_e (m-1)/m (psi_e this rank's experts, m = n / ep; "
              "all-to-alls excluded)";
  return f;
}
} // namespace

//===----------------------------------------------------------------------===//
// Formatting helpers
//===----------------------------------------------------------------------===//

namespace {

/// A whole number as a JSON integer, anything else as a double: element
/// counts are fractional only when (n-1)/n makes them so.
json number(double value) {
  if (std::isfinite(value) && value == std::floor(value) &&
      std::fabs(value) < 9.0e15)
    return int64_t(value);
  return value;
}

/// A count of elements, rounded, with digit grouping.
std::string elementsText(double value) {
  return groupDigits(int64_t(std::llround(value)));
}

/// Columns sized to their widest cell; the first left-aligned, the others
/// right-aligned, like `zeroc stats`.
class Table {
public:
  explicit Table(std::vector<std::string> header) {
    rows.push_back(std::move(header));
  }
  void row(std::vector<std::string> cells) { rows.push_back(std::move(cells)); }

  std::string str() const {
    std::vector<size_t> widths;
    for (const auto &cells : rows)
      for (size_t c = 0; c < cells.size(); ++c) {
        if (widths.size() <= c)
          widths.push_back(0);
        widths[c] = std::max(widths[c], cells[c].size());
      }
    std::string out;
    for (const auto &cells : rows) {
      std::string line = "  ";
      for (size_t c = 0; c < cells.size(); ++c) {
        std::string pad(widths[c] - cells[c].size(), ' ');
        line += (c == 0 ? cells[c] + pad : "   " + pad + cells[c]);
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      out += line + "\n";
    }
    return out;
  }

private:
  std::vector<std::vector<std::string>> rows;
};

/// "  label                          value\n"
void addField(std::string &out, const char *label, const std::string &value) {
  char line[256];
  std::snprintf(line, sizeof line, "  %-30s ", label);
  out += line + value + "\n";
}

//===----------------------------------------------------------------------===//
// Sections
//===----------------------------------------------------------------------===//

/// One part of the report, in JSON and as text. A new analysis of the plan
/// (memory planning, the cost model) is one more entry in kSections.
struct Section {
  void (*addJson)(const Plan &plan, const InspectOptions &options, json &out);
  void (*addText)(const Plan &plan, const InspectOptions &options,
                  std::string &out);
};

void summaryJson(const Plan &plan, const InspectOptions &, json &out) {
  out["generator"] = plan.generator;
  out["model"] = {{"name", plan.model.name},
                  {"dtype", std::string(dtypeName(plan.model.dtype))},
                  {"micro_batch", plan.model.microBatch},
                  {"seq_len", plan.model.seqLen}};
  out["params"] = plan.model.params;
  out["world_size"] = plan.worldSize;
  out["stage"] = plan.stage;
  out["gradient_accumulation_steps"] = plan.gradientAccumulationSteps;
  out["recompute"] = {{"mode", recomputeModeName(plan.recompute.mode)},
                      {"every", plan.recompute.every}};
  out["streams"] = plan.streams;
  json ops = json::object();
  json runs = json::object();
  for (const PlanPhase &phase : plan.phases) {
    ops[phaseName(phase.kind)] = phase.ops.size();
    runs[phaseName(phase.kind)] = phase.runsPerStep;
  }
  out["ops_per_phase"] = std::move(ops);
  out["runs_per_step"] = std::move(runs);
}

void summaryText(const Plan &plan, const InspectOptions &, std::string &out) {
  const PlanModel &m = plan.model;
  out += "plan " + m.name;
  if (!plan.generator.empty())
    out += " (" + plan.generator + ")";
  out += "\n";
  addField(out, "parameters",
           groupDigits(m.params) + " (" + humanCount(double(m.params)) + ")");
  addField(out, "model dtype", std::string(dtypeName(m.dtype)));
  addField(out, "ZeRO stage", std::to_string(plan.stage));
  addField(out, "world size", std::to_string(plan.worldSize));
  addField(out, "gradient accumulation steps",
           std::to_string(plan.gradientAccumulationSteps));
  addField(out, "micro-batch x sequence",
           std::to_string(m.microBatch) + " x " + std::to_string(m.seqLen) +
               " = " + groupDigits(m.microBatch * m.seqLen) + " tokens");
  addField(out, "recompute", plan.recompute.describe());
  std::string streams;
  for (const std::string &s : plan.streams)
    streams += (streams.empty() ? "" : ", ") + s;
  addField(out, "streams", streams.empty() ? "(none)" : streams);
  for (const PlanPhase &phase : plan.phases)
    addField(out, ("phase " + std::string(phaseName(phase.kind))).c_str(),
             groupDigits(int64_t(phase.ops.size())) +
                 (phase.ops.size() == 1 ? " op, " : " ops, ") +
                 std::to_string(phase.runsPerStep) + " run" +
                 (phase.runsPerStep == 1 ? "" : "s") + " per step");
}

void persistentJson(const Plan &plan, const InspectOptions &, json &out) {
  PersistentBytes bytes = persistentBytesPerRank(plan);
  json byRole = json::object();
  for (TensorRole role : kAllTensorRoles) {
    if (!bytes.hasRole[size_t(role)])
      continue;
    json row = json::object();
    for (Placement p : kAllPlacements)
      row[placementName(p)] = bytes.at(role, p);
    row["total"] = bytes.role(role);
    byRole[roleName(role)] = std::move(row);
  }
  if (bytes.oneBitState)
    byRole["one_bit_state"] = {{"device", bytes.oneBitState},
                               {"host", 0},
                               {"nvme", 0},
                               {"total", bytes.oneBitState}};
  json byPlacement = json::object();
  for (Placement p : kAllPlacements)
    byPlacement[placementName(p)] = bytes.placement(p);
  out["persistent_bytes_per_rank"] = {{"by_role", std::move(byRole)},
                                      {"by_placement", std::move(byPlacement)},
                                      {"total", bytes.total()}};
}

void persistentText(const Plan &plan, const InspectOptions &,
                    std::string &out) {
  PersistentBytes bytes = persistentBytesPerRank(plan);
  out += "\npersistent state per rank\n";
  Table table({"role", "device", "host", "nvme", "total", "bytes"});
  for (TensorRole role : kAllTensorRoles) {
    if (!bytes.hasRole[size_t(role)])
      continue;
    std::vector<std::string> row = {roleName(role)};
    for (Placement p : kAllPlacements)
      row.push_back(humanBytes(double(bytes.at(role, p))));
    row.push_back(humanBytes(double(bytes.role(role))));
    row.push_back(groupDigits(bytes.role(role)));
    table.row(row);
  }
  if (bytes.oneBitState)
    table.row({"1-bit state", humanBytes(double(bytes.oneBitState)),
               humanBytes(0), humanBytes(0),
               humanBytes(double(bytes.oneBitState)),
               groupDigits(bytes.oneBitState)});
  std::vector<std::string> total = {"total"};
  for (Placement p : kAllPlacements)
    total.push_back(humanBytes(double(bytes.placement(p))));
  total.push_back(humanBytes(double(bytes.total())));
  total.push_back(groupDigits(bytes.total()));
  table.row(total);
  out += table.str();
}

void commJson(const Plan &plan, const InspectOptions &, json &out) {
  CommPerStep comm = commPerRankPerStep(plan);
  CommKindVolume total = comm.total();
  json elements = json::object(), bytes = json::object(),
       collectives = json::object();
  for (CollectiveKind kind : kCollectiveKinds) {
    std::string name(collectiveName(kind));
    elements[name] = number(comm[kind].elements);
    if (comm[kind].bytes)
      bytes[name] = number(*comm[kind].bytes);
    collectives[name] = comm[kind].collectives;
  }
  elements["total"] = number(total.elements);
  if (total.bytes)
    bytes["total"] = number(*total.bytes);
  collectives["total"] = total.collectives;
  out["comm_elements_per_rank_per_step"] = std::move(elements);
  if (!bytes.empty())
    out["comm_bytes_per_rank_per_step"] = std::move(bytes);
  out["collectives_per_step"] = std::move(collectives);
  // Per communicator group: with expert parallelism, tokens over the
  // expert-parallel group, expert state over the expert-data-parallel one.
  json byGroup = json::object();
  for (const auto &[group, kinds] : comm.byGroup) {
    json row = json::object();
    for (CollectiveKind kind : kCollectiveKinds) {
      const CommKindVolume &v = kinds[static_cast<size_t>(kind)];
      if (!v.collectives)
        continue;
      row[std::string(collectiveName(kind))] = {
          {"elements", number(v.elements)},
          {"bytes", v.bytes ? json(number(*v.bytes)) : json()},
          {"collectives", v.collectives}};
    }
    byGroup[commGroupName(group)] = {{"ranks", plan.groupSize(group)},
                                     {"by_collective", std::move(row)}};
  }
  out["comm_per_group"] = std::move(byGroup);

  ZeroPaperFigure paper = zeroPaperFigure(plan, comm);
  out["zero_paper"] = {
      {"formula", paper.formula},
      {"comm_elements_per_rank_per_step", number(paper.expected)},
      {"ratio", paper.expected > 0 ? json(paper.planElements / paper.expected)
                                   : json()}};
}

void commText(const Plan &plan, const InspectOptions &, std::string &out) {
  CommPerStep comm = commPerRankPerStep(plan);
  CommKindVolume total = comm.total();
  out += "\ncommunication per rank per step (elements before bucket "
         "padding)\n";
  Table table({"collective", "elements", "bytes", "collectives"});
  auto row = [&](const std::string &name, const CommKindVolume &v) {
    table.row({name, elementsText(v.elements),
               v.bytes ? humanBytes(*v.bytes) : "-",
               groupDigits(v.collectives)});
  };
  for (CollectiveKind kind : kCollectiveKinds)
    if (kind != CollectiveKind::AllToAll || comm[kind].collectives)
      row(std::string(collectiveName(kind)), comm[kind]);
  row("total", total);
  out += table.str();
  if (plan.expertParallelSize > 1) {
    // Expert parallelism: who talks with whom.
    out += "\ncommunication per group (expert parallelism, ep " +
           std::to_string(plan.expertParallelSize) + ")\n";
    Table groups(
        {"group", "ranks", "collective", "elements", "bytes", "collectives"});
    for (const auto &[group, kinds] : comm.byGroup)
      for (CollectiveKind kind : kCollectiveKinds) {
        const CommKindVolume &v = kinds[static_cast<size_t>(kind)];
        if (!v.collectives)
          continue;
        groups.row({commGroupName(group), std::to_string(plan.groupSize(group)),
                    std::string(collectiveName(kind)), elementsText(v.elements),
                    v.bytes ? humanBytes(*v.bytes) : "-",
                    groupDigits(v.collectives)});
      }
    out += groups.str();
  }

  ZeroPaperFigure paper = zeroPaperFigure(plan, comm);
  std::string line = "ZeRO paper, " + paper.formula + ": " +
                     elementsText(paper.expected) + " elements";
  if (paper.expected > 0) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f",
                  paper.planElements / paper.expected);
    line += "; plan / paper = " + std::string(ratio);
  }
  out += "  " + line + "\n";
  if (plan.gradientAccumulationSteps > 1)
    out += "  (the paper assumes one micro-batch per step; this plan runs " +
           std::to_string(plan.gradientAccumulationSteps) + ")\n";
}

std::string percentText(double part, double whole) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%",
                whole > 0 ? 100 * part / whole : 0.0);
  return text;
}

void timeJson(const Plan &, const InspectOptions &options, json &out) {
  if (!options.time)
    return;
  const StepTimeReport &t = *options.time;
  out["cluster"] = t.cluster;
  out["predicted_step_time_s"] = t.stepSeconds;
  json phases = json::object();
  for (const StepTimeReport::Phase &p : t.phases)
    phases[p.name] = {{"seconds_per_run", p.seconds},
                      {"runs_per_step", p.runsPerStep}};
  out["phase_time_s"] = std::move(phases);
  out["exposed_comm_s"] = t.exposedCommSeconds;
  out["exposed_offload_s"] = t.exposedOffloadSeconds;
  out["host_wait_s"] = t.hostWaitSeconds;
  out["misaligned_rows_s"] = t.misalignedSeconds;
  out["misaligned_rows_ops"] = t.misalignedOps;
  out["misaligned_vocab"] = t.misalignedVocab;
  out["offload_bytes_per_rank_per_step"] = {
      {"pcie_to_device", t.offload.pcieToDevice},
      {"pcie_to_host", t.offload.pcieToHost},
      {"nvme_read", t.offload.nvmeRead},
      {"nvme_write", t.offload.nvmeWrite}};
  json busy = json::object();
  for (const auto &[stream, seconds] : t.streamBusySeconds)
    busy[stream] = seconds;
  out["stream_busy_s"] = std::move(busy);
  out["flops_per_gpu_per_step"] = t.flopsPerStep;
  out["achieved_tflops_per_gpu"] = t.achievedTflopsPerGpu;
  out["model_flops_per_gpu_per_step"] = t.modelFlopsPerStep;
  out["mfu"] = t.mfu;
  out["hfu"] = t.hfu;
  out["tokens_per_s"] = t.tokensPerSecond;
  json exposed = json::array();
  for (const StepTimeReport::ExposedCollective &e : t.mostExposed) {
    json row = {{"phase", e.phase}, {"op", e.op}, {"kind", e.kind}};
    if (!e.collective.empty()) {
      row["collective"] = e.collective;
      row["comm_elements"] = e.commElements;
    }
    if (!e.subject.empty())
      row["tensors"] = e.subject;
    row["exposed_s"] = e.seconds;
    exposed.push_back(std::move(row));
  }
  out["most_exposed_collectives"] = std::move(exposed);
  if (const Steadiness &st = t.steadiness; st.samples > 0)
    out["calibration_steadiness"] = {{"probes", st.samples},
                                     {"slow_probes", st.slow},
                                     {"slow_factor", st.slowFactor},
                                     {"worst_factor", st.worst},
                                     {"unsteady", st.unsteady()}};
}

void timeText(const Plan &plan, const InspectOptions &options,
              std::string &out) {
  if (!options.time)
    return;
  const StepTimeReport &t = *options.time;
  out += "\npredicted time per step on " + t.cluster;
  if (!t.clusterGpus.empty())
    out += " (" + t.clusterGpus + ")";
  out += "\n";
  addField(out, "step time", humanSeconds(t.stepSeconds));
  for (const StepTimeReport::Phase &p : t.phases)
    addField(out, p.name.c_str(),
             humanSeconds(p.seconds) + " x " + std::to_string(p.runsPerStep));
  addField(out, "exposed communication",
           humanSeconds(t.exposedCommSeconds) + " (" +
               percentText(t.exposedCommSeconds, t.stepSeconds) +
               " of the step)");
  addField(out, "exposed offload copies",
           humanSeconds(t.exposedOffloadSeconds) + " (" +
               percentText(t.exposedOffloadSeconds, t.stepSeconds) +
               " of the step)");
  if (t.hostAhead)
    addField(out, "waiting for the host",
             humanSeconds(t.hostWaitSeconds) + " (" +
                 percentText(t.hostWaitSeconds, t.stepSeconds) +
                 " of the step: the GPU idle until its next op is issued)");
  if (t.misalignedSeconds > 0)
    addField(out, "misaligned rows",
             humanSeconds(t.misalignedSeconds) + " of compute in " +
                 std::to_string(t.misalignedOps) +
                 " matrix products whose rows are not 16-byte aligned" +
                 (t.misalignedVocab
                      ? "; the logits' among them (vocabulary " +
                            std::to_string(t.misalignedVocab) +
                            "): `zeroc gen --pad-vocab-to-multiple-of 64` "
                            "aligns them, the same training"
                      : std::string()));
  const StepTimeReport::Offload &o = t.offload;
  if (o.pcieToDevice > 0 || o.pcieToHost > 0)
    addField(out, "PCIe per rank",
             humanBytes(o.pcieToDevice) + " to the GPU, " +
                 humanBytes(o.pcieToHost) + " to the host");
  if (o.nvmeRead > 0 || o.nvmeWrite > 0)
    addField(out, "NVMe per rank",
             humanBytes(o.nvmeRead) + " read, " + humanBytes(o.nvmeWrite) +
                 " written");
  char line[160];
  std::snprintf(line, sizeof line,
                "%.1f TFLOP/s (MFU %s, HFU %s of the %s peak)",
                t.achievedTflopsPerGpu, percentText(t.mfu, 1).c_str(),
                percentText(t.hfu, 1).c_str(),
                std::string(dtypeName(plan.model.dtype)).c_str());
  addField(out, "achieved per GPU", line);
  addField(out, "tokens per second",
           groupDigits(int64_t(std::llround(t.tokensPerSecond))));
  if (const Steadiness &st = t.steadiness; st.unsteady()) {
    char spell[320];
    std::snprintf(spell, sizeof spell,
                  "unsteady: %d of its %d probes ran %.2fx their usual time "
                  "(worst %.2fx); steps that run in such a spell take about "
                  "%s",
                  st.slow, st.samples, st.slowFactor, st.worst,
                  humanSeconds(t.stepSeconds * st.slowFactor).c_str());
    addField(out, "calibrating machine", spell);
  }

  out += "\nstream busy time per step\n";
  Table busy({"stream", "busy", "share of step"});
  for (const auto &[stream, seconds] : t.streamBusySeconds)
    busy.row(
        {stream, humanSeconds(seconds), percentText(seconds, t.stepSeconds)});
  out += busy.str();

  if (t.mostExposed.empty())
    return;
  out += "\nmost exposed collectives (compute stream blocked, per step)\n";
  Table exposed({"phase", "op", "kind", "elements", "exposed", "tensors"});
  for (const StepTimeReport::ExposedCollective &e : t.mostExposed)
    exposed.row({e.phase, std::to_string(e.op), e.kind,
                 e.collective.empty() ? "-" : groupDigits(e.commElements),
                 humanSeconds(e.seconds), e.subject.empty() ? "-" : e.subject});
  out += exposed.str();
}

// The memory plan: the peak, where it occurs and what is live there
// (zeroc/Plan/PlanMemory.h).
void memoryJsonSection(const Plan &plan, const InspectOptions &, json &out) {
  out.update(memoryJson(summarizeMemory(plan)));
}

void memoryTextSection(const Plan &plan, const InspectOptions &,
                       std::string &out) {
  out += "\n" + memoryText(summarizeMemory(plan));
}

/// The mixture-of-experts layers of a plan (model.moe_experts ops of the
/// micro-step), the planning assumption on the token distribution they
/// carry, and the experts' share of the parameters.
struct MoeSummary {
  int64_t layers = 0, experts = 0, topK = 0, routedRows = 0;
  double assumedShare = 0;
  /// The stacked expert tensors (the only rank-3 parameters) and all.
  int64_t expertParams = 0;
};

MoeSummary moeSummary(const Plan &plan) {
  MoeSummary m;
  for (const PlanPhase &phase : plan.phases) {
    if (phase.kind != PhaseKind::MicroStep)
      continue;
    std::unordered_map<int64_t, const PlanValue *> values;
    for (const PlanValue &v : phase.values)
      values[v.id] = &v;
    for (const PlanOp &op : phase.ops) {
      // A recomputed forward op is the same layer again.
      if (op.kind != OpKind::MoeExperts || op.inputs.size() < 6 ||
          !op.recompute.empty())
        continue;
      const PlanValue *weights = values[op.inputs[1]];
      const PlanValue *w1 = values[op.inputs[3]];
      if (!weights || !w1 || weights->shape.empty() || w1->shape.empty())
        continue;
      ++m.layers;
      m.topK = weights->shape.back();
      m.experts = w1->shape.front();
      int64_t tokens = 1;
      for (size_t i = 0; i + 1 < weights->shape.size(); ++i)
        tokens *= weights->shape[i];
      m.routedRows = tokens * m.topK;
      const auto &share = op.attrsAs<MoeExpertsAttrs>().maxExpertShare;
      m.assumedShare =
          std::max(m.assumedShare, share ? *share : 1.0 / double(m.experts));
    }
  }
  if (m.layers)
    for (const PlanTensor &t : plan.tensors)
      if (t.role == TensorRole::Param && t.shape.size() == 3)
        m.expertParams += t.numel;
  return m;
}

const char *kMoeNote =
    "memory is exact whatever the distribution (token-sorted dispatch: "
    "[tokens * top_k, .] buffers); the assumption matters for per-expert "
    "time and expert parallelism (not planned: every rank holds every "
    "expert)";

int64_t ceilRows(double share, int64_t rows) {
  return int64_t(std::ceil(share * double(rows) - 1e-9));
}

void moeJson(const Plan &plan, const InspectOptions &, json &out) {
  MoeSummary m = moeSummary(plan);
  if (!m.layers)
    return;
  out["moe"] = {{"layers", m.layers},
                {"experts", m.experts},
                {"top_k", m.topK},
                {"routed_rows_per_layer", m.routedRows},
                {"expert_params", m.expertParams},
                {"non_expert_params", plan.model.params - m.expertParams},
                {"token_distribution",
                 {{"max_expert_share", m.assumedShare},
                  {"max_expert_rows", ceilRows(m.assumedShare, m.routedRows)},
                  {"worst_case_max_expert_share", 1.0 / double(m.topK)},
                  {"worst_case_max_expert_rows", m.routedRows / m.topK},
                  {"note", kMoeNote}}}};
}

void moeText(const Plan &plan, const InspectOptions &, std::string &out) {
  MoeSummary m = moeSummary(plan);
  if (!m.layers)
    return;
  out += "\nmixture of experts\n";
  addField(out, "layers x experts, top-k",
           std::to_string(m.layers) + " x " + std::to_string(m.experts) +
               ", top-" + std::to_string(m.topK) + ": " +
               groupDigits(m.routedRows) + " routed rows per layer");
  addField(out, "expert parameters",
           groupDigits(m.expertParams) + " of " +
               groupDigits(plan.model.params) +
               " (a data-parallel group like the others: no expert "
               "parallelism)");
  bool uniform = m.assumedShare * double(m.experts) <= 1.0 + 1e-9;
  char share[32];
  std::snprintf(share, sizeof share, "%.4g", m.assumedShare);
  addField(out, "token distribution (assumption)",
           std::string(uniform ? "uniform"
                               : "max expert share " + std::string(share)) +
               ": busiest expert " +
               groupDigits(ceilRows(m.assumedShare, m.routedRows)) +
               " rows; worst case " + groupDigits(m.routedRows / m.topK) +
               " rows (every token to one expert)");
  out += std::string("  (") + kMoeNote + ")\n";
}

const Section kSections[] = {
    {summaryJson, summaryText},
    {moeJson, moeText},
    {persistentJson, persistentText},
    {memoryJsonSection, memoryTextSection},
    {commJson, commText},
    {timeJson, timeText},
};

} // namespace

json inspectJson(const Plan &plan, const InspectOptions &options) {
  json out = json::object();
  for (const Section &section : kSections)
    section.addJson(plan, options, out);
  return out;
}

std::string inspectText(const Plan &plan, const InspectOptions &options) {
  std::string out;
  for (const Section &section : kSections)
    section.addText(plan, options, out);
  return out;
}

} // namespace zeroc
