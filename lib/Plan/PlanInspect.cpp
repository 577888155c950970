//===- PlanInspect.cpp - What `zeroc inspect` reports about a plan --------===//

#include "zeroc/Plan/PlanInspect.h"

#include "zeroc/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

using nlohmann::json;

namespace zeroc {

static constexpr CollectiveKind kCollectiveKinds[] = {
    CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
    CollectiveKind::AllReduce};

/// Roles and placements in the order tables list them; readPlan accepts no
/// others.
static const char *const kRoles[] = {"param", "grad", "master", "exp_avg",
                                     "exp_avg_sq"};
static const char *const kPlacements[] = {"device", "host", "nvme"};

std::optional<CollectiveKind> parseCollectiveKind(const std::string &name) {
  for (CollectiveKind kind : kCollectiveKinds)
    if (name == collectiveName(kind))
      return kind;
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Persistent state
//===----------------------------------------------------------------------===//

int64_t PersistentBytes::role(const std::string &role) const {
  int64_t sum = 0;
  auto it = byRole.find(role);
  if (it != byRole.end())
    for (const auto &[placement, bytes] : it->second)
      sum += bytes;
  return sum;
}

int64_t PersistentBytes::placement(const std::string &placement) const {
  int64_t sum = 0;
  for (const auto &[role, placements] : byRole) {
    auto it = placements.find(placement);
    if (it != placements.end())
      sum += it->second;
  }
  return sum;
}

int64_t PersistentBytes::total() const {
  int64_t sum = 0;
  for (const auto &[role, placements] : byRole)
    for (const auto &[placement, bytes] : placements)
      sum += bytes;
  return sum;
}

PersistentBytes persistentBytesPerRank(const Plan &plan) {
  PersistentBytes out;
  for (const PlanTensor &t : plan.tensors)
    out.byRole[t.role][t.placement] += t.localNumel * bytesPerElement(t.dtype);
  return out;
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

namespace {

/// Finds the element type of a collective: that of the values it sends (its
/// inputs), else that of the persistent tensors it names (a flat group
/// standing for its parameters). Nothing when they disagree or are absent.
class CollectiveDTypes {
public:
  explicit CollectiveDTypes(const Plan &plan) {
    for (const PlanTensor &t : plan.tensors)
      tensors[t.name] = &t;
    for (const PlanFlatGroup &g : plan.flatGroups)
      groups[g.name] = &g;
  }

  /// `values`: the dtype of each value id of the op's phase.
  std::optional<DType> of(const std::unordered_map<int64_t, DType> &values,
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

private:
  std::unordered_map<std::string, const PlanTensor *> tensors;
  std::unordered_map<std::string, const PlanFlatGroup *> groups;
};

} // namespace

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
      CommKindVolume &v = out.byKind[static_cast<size_t>(*kind)];
      double elements =
          commElementsPerRank(*kind, double(op.commElements), plan.worldSize) *
          double(phase.runsPerStep);
      v.elements += elements;
      v.collectives += phase.runsPerStep;
      std::optional<DType> dtype = dtypes.of(values, op);
      if (v.bytes && dtype)
        *v.bytes += elements * double(bytesPerElement(*dtype));
      else
        v.bytes.reset();
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
  void (*addJson)(const Plan &plan, json &out);
  void (*addText)(const Plan &plan, std::string &out);
};

void summaryJson(const Plan &plan, json &out) {
  out["generator"] = plan.generator;
  out["model"] = {{"name", plan.model.name},
                  {"dtype", std::string(dtypeName(plan.model.dtype))},
                  {"micro_batch", plan.model.microBatch},
                  {"seq_len", plan.model.seqLen}};
  out["params"] = plan.model.params;
  out["world_size"] = plan.worldSize;
  out["stage"] = plan.stage;
  out["gradient_accumulation_steps"] = plan.gradientAccumulationSteps;
  out["streams"] = plan.streams;
  json ops = json::object();
  json runs = json::object();
  for (const PlanPhase &phase : plan.phases) {
    ops[phase.name] = phase.ops.size();
    runs[phase.name] = phase.runsPerStep;
  }
  out["ops_per_phase"] = std::move(ops);
  out["runs_per_step"] = std::move(runs);
}

void summaryText(const Plan &plan, std::string &out) {
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
  std::string streams;
  for (const std::string &s : plan.streams)
    streams += (streams.empty() ? "" : ", ") + s;
  addField(out, "streams", streams.empty() ? "(none)" : streams);
  for (const PlanPhase &phase : plan.phases)
    addField(out, ("phase " + phase.name).c_str(),
             groupDigits(int64_t(phase.ops.size())) +
                 (phase.ops.size() == 1 ? " op, " : " ops, ") +
                 std::to_string(phase.runsPerStep) + " run" +
                 (phase.runsPerStep == 1 ? "" : "s") + " per step");
}

void persistentJson(const Plan &plan, json &out) {
  PersistentBytes bytes = persistentBytesPerRank(plan);
  json byRole = json::object();
  for (const auto &[role, placements] : bytes.byRole) {
    json row = json::object();
    for (const char *p : kPlacements) {
      auto it = placements.find(p);
      row[p] = it == placements.end() ? 0 : it->second;
    }
    row["total"] = bytes.role(role);
    byRole[role] = std::move(row);
  }
  json byPlacement = json::object();
  for (const char *p : kPlacements)
    byPlacement[p] = bytes.placement(p);
  out["persistent_bytes_per_rank"] = {{"by_role", std::move(byRole)},
                                      {"by_placement", std::move(byPlacement)},
                                      {"total", bytes.total()}};
}

void persistentText(const Plan &plan, std::string &out) {
  PersistentBytes bytes = persistentBytesPerRank(plan);
  out += "\npersistent state per rank\n";
  Table table({"role", "device", "host", "nvme", "total", "bytes"});
  auto cell = [&](const std::string &role, const char *placement) {
    auto r = bytes.byRole.find(role);
    if (r == bytes.byRole.end())
      return humanBytes(0);
    auto p = r->second.find(placement);
    return humanBytes(p == r->second.end() ? 0.0 : double(p->second));
  };
  // The known roles in their usual order, then any others a hand-built plan
  // may hold.
  std::vector<std::string> roles;
  for (const char *role : kRoles)
    if (bytes.byRole.count(role))
      roles.push_back(role);
  for (const auto &[role, placements] : bytes.byRole)
    if (std::find(roles.begin(), roles.end(), role) == roles.end())
      roles.push_back(role);
  for (const std::string &role : roles) {
    table.row({role, cell(role, "device"), cell(role, "host"),
               cell(role, "nvme"), humanBytes(double(bytes.role(role))),
               groupDigits(bytes.role(role))});
  }
  table.row({"total", humanBytes(double(bytes.placement("device"))),
             humanBytes(double(bytes.placement("host"))),
             humanBytes(double(bytes.placement("nvme"))),
             humanBytes(double(bytes.total())), groupDigits(bytes.total())});
  out += table.str();
}

void commJson(const Plan &plan, json &out) {
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

  double expected =
      zeroPaperCommElements(plan.stage, plan.model.params, plan.worldSize);
  out["zero_paper"] = {
      {"formula", zeroPaperFormula(plan.stage)},
      {"comm_elements_per_rank_per_step", number(expected)},
      {"ratio", expected > 0 ? json(total.elements / expected) : json()}};
}

void commText(const Plan &plan, std::string &out) {
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
    row(std::string(collectiveName(kind)), comm[kind]);
  row("total", total);
  out += table.str();

  double expected =
      zeroPaperCommElements(plan.stage, plan.model.params, plan.worldSize);
  std::string line = "ZeRO paper, " +
                     std::string(zeroPaperFormula(plan.stage)) + ": " +
                     elementsText(expected) + " elements";
  if (expected > 0) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", total.elements / expected);
    line += "; plan / paper = " + std::string(ratio);
  }
  out += "  " + line + "\n";
  if (plan.gradientAccumulationSteps > 1)
    out += "  (the paper assumes one micro-batch per step; this plan runs " +
           std::to_string(plan.gradientAccumulationSteps) + ")\n";
}

const Section kSections[] = {
    {summaryJson, summaryText},
    {persistentJson, persistentText},
    {commJson, commText},
};

} // namespace

json inspectJson(const Plan &plan) {
  json out = json::object();
  for (const Section &section : kSections)
    section.addJson(plan, out);
  return out;
}

std::string inspectText(const Plan &plan) {
  std::string out;
  for (const Section &section : kSections)
    section.addText(plan, out);
  return out;
}

} // namespace zeroc
