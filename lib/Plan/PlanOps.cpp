//===- PlanOps.cpp - Op kinds and typed attributes of a plan --------------===//

#include "zeroc/Plan/PlanOps.h"
#include "zeroc/Plan/Plan.h"

#include "zeroc/Support/JsonReader.h"

#include <set>

using nlohmann::json;

namespace zeroc {

const char *opKindName(OpKind kind) {
  switch (kind) {
#define ZEROC_PLAN_OP_NAME(e, name, attrs)                                     \
  case OpKind::e:                                                              \
    return name;
    ZEROC_PLAN_OPS(ZEROC_PLAN_OP_NAME)
#undef ZEROC_PLAN_OP_NAME
  }
  return "?";
}

std::optional<OpKind> parseOpKind(std::string_view name) {
  for (OpKind kind : kAllOpKinds)
    if (name == opKindName(kind))
      return kind;
  return std::nullopt;
}

bool isModelOp(OpKind kind) {
  switch (kind) {
#define ZEROC_PLAN_OP_MODEL(e, name, attrs) case OpKind::e:
    ZEROC_PLAN_MODEL_OPS(ZEROC_PLAN_OP_MODEL)
#undef ZEROC_PLAN_OP_MODEL
    return true;
  default:
    return false;
  }
}

bool isAsyncStart(OpKind kind) {
  switch (kind) {
  case OpKind::AllGatherStart:
  case OpKind::ReduceScatterStart:
  case OpKind::AllReduceStart:
  case OpKind::AllGatherUpdatesStart:
  case OpKind::AllToAllStart:
  case OpKind::FetchStart:
  case OpKind::CopyStart:
    return true;
  default:
    return false;
  }
}

const char *allToAllPurposeName(AllToAllPurpose purpose) {
  switch (purpose) {
  case AllToAllPurpose::Dispatch:
    return "dispatch";
  case AllToAllPurpose::Combine:
    return "combine";
  case AllToAllPurpose::CombineGrad:
    return "combine_grad";
  case AllToAllPurpose::DispatchGrad:
    return "dispatch_grad";
  }
  return "?";
}

std::optional<AllToAllPurpose> parseAllToAllPurpose(std::string_view name) {
  for (AllToAllPurpose p : kAllAllToAllPurposes)
    if (name == allToAllPurposeName(p))
      return p;
  return std::nullopt;
}

const char *placementName(Placement placement) {
  switch (placement) {
  case Placement::Device:
    return "device";
  case Placement::Host:
    return "host";
  case Placement::Nvme:
    return "nvme";
  }
  return "?";
}

std::optional<Placement> parsePlacement(std::string_view name) {
  for (Placement p : kAllPlacements)
    if (name == placementName(p))
      return p;
  return std::nullopt;
}

const char *roleName(TensorRole role) {
  switch (role) {
  case TensorRole::Param:
    return "param";
  case TensorRole::Grad:
    return "grad";
  case TensorRole::Master:
    return "master";
  case TensorRole::ExpAvg:
    return "exp_avg";
  case TensorRole::ExpAvgSq:
    return "exp_avg_sq";
  }
  return "?";
}

std::optional<TensorRole> parseRole(std::string_view name) {
  for (TensorRole r : kAllTensorRoles)
    if (name == roleName(r))
      return r;
  return std::nullopt;
}

const char *phaseName(PhaseKind phase) {
  switch (phase) {
  case PhaseKind::MicroStep:
    return "micro_step";
  case PhaseKind::OptimizerStep:
    return "optimizer_step";
  }
  return "?";
}

std::optional<PhaseKind> parsePhase(std::string_view name) {
  for (PhaseKind p : kAllPhaseKinds)
    if (name == phaseName(p))
      return p;
  return std::nullopt;
}

PlanOpAttrs defaultAttrs(OpKind kind) {
  switch (kind) {
#define ZEROC_PLAN_OP_ATTRS(e, name, attrs)                                    \
  case OpKind::e:                                                              \
    return attrs{};
    ZEROC_PLAN_OPS(ZEROC_PLAN_OP_ATTRS)
#undef ZEROC_PLAN_OP_ATTRS
  }
  return NoAttrs{};
}

namespace {

/// Writes each field of a typed attribute struct into a JSON object.
struct AttrWriter {
  json &out;
  void operator()(const char *name, double v) { out[name] = v; }
  void operator()(const char *name, int64_t v) { out[name] = v; }
  void operator()(const char *name, bool v) {
    if (v)
      out[name] = true;
  }
  void operator()(const char *name, const std::string &v) { out[name] = v; }
  void operator()(const char *name, const std::optional<std::string> &v) {
    if (v)
      out[name] = *v;
  }
  void operator()(const char *name, const std::optional<double> &v) {
    if (v)
      out[name] = *v;
  }
  void operator()(const char *name, const std::optional<int64_t> &v) {
    if (v)
      out[name] = *v;
  }
  void operator()(const char *name, const std::vector<std::string> &v) {
    out[name] = v;
  }
  void operator()(const char *name, const std::vector<int64_t> &v) {
    out[name] = v;
  }
  void operator()(const char *name, Placement v) {
    out[name] = placementName(v);
  }
  void operator()(const char *name, AttentionKernel v) {
    out[name] = attentionKernelName(v);
  }
  void operator()(const char *name, AllToAllPurpose v) {
    out[name] = allToAllPurposeName(v);
  }
};

/// Reads and checks each field of a typed attribute struct from the op's
/// `attrs` object; errors name the op's index, its kind and the field.
struct AttrReader {
  JsonFieldReader &r;
  const json &attrs;
  const JsonPath &at; ///< The op's `attrs`.
  std::string op;     ///< "op 12 (causal_attention)".
  std::set<std::string> seen;

  const json *find(const char *name, bool optional) {
    seen.insert(name);
    if (r.error)
      return nullptr;
    auto it = attrs.find(name);
    if (it != attrs.end())
      return &*it;
    if (!optional)
      r.fail(at, op + ": missing attribute '" + std::string(name) + "'");
    return nullptr;
  }
  void wrong(const char *name, const json &v, const char *expected) {
    r.fail(at / name, op + ": attribute '" + std::string(name) + "' must be " +
                          expected + ", found " + v.dump());
  }

  void operator()(const char *name, double &out) {
    if (const json *v = find(name, false)) {
      if (!v->is_number())
        return wrong(name, *v, "a number");
      out = v->get<double>();
    }
  }
  void operator()(const char *name, int64_t &out) {
    if (const json *v = find(name, false)) {
      if (!v->is_number_integer())
        return wrong(name, *v, "an integer");
      out = v->get<int64_t>();
    }
  }
  void operator()(const char *name, bool &out) {
    if (const json *v = find(name, true)) {
      if (!v->is_boolean() || !v->get<bool>())
        return wrong(name, *v, "true (a unit attribute, absent when unset)");
      out = true;
    }
  }
  void operator()(const char *name, std::string &out) {
    if (const json *v = find(name, false)) {
      if (!v->is_string())
        return wrong(name, *v, "a tensor name (a string)");
      out = v->get<std::string>();
    }
  }
  void operator()(const char *name, std::optional<std::string> &out) {
    if (const json *v = find(name, true)) {
      if (!v->is_string())
        return wrong(name, *v, "a tensor name (a string)");
      out = v->get<std::string>();
    }
  }
  /// Optional counts are positive.
  void operator()(const char *name, std::optional<int64_t> &out) {
    if (const json *v = find(name, true)) {
      if (!v->is_number_integer() || v->get<int64_t>() < 1)
        return wrong(name, *v, "a positive integer");
      out = v->get<int64_t>();
    }
  }
  void operator()(const char *name, std::optional<double> &out) {
    if (const json *v = find(name, true)) {
      if (!v->is_number())
        return wrong(name, *v, "a number");
      out = v->get<double>();
    }
  }
  void operator()(const char *name, std::vector<std::string> &out) {
    if (const json *v = find(name, false)) {
      bool ok = v->is_array();
      for (size_t i = 0; ok && i < v->size(); ++i)
        ok = (*v)[i].is_string();
      if (!ok)
        return wrong(name, *v, "an array of tensor names");
      out = v->get<std::vector<std::string>>();
    }
  }
  void operator()(const char *name, std::vector<int64_t> &out) {
    if (const json *v = find(name, false)) {
      bool ok = v->is_array();
      for (size_t i = 0; ok && i < v->size(); ++i)
        ok = (*v)[i].is_number_integer();
      if (!ok)
        return wrong(name, *v, "an array of integers");
      out = v->get<std::vector<int64_t>>();
    }
  }
  void operator()(const char *name, Placement &out) {
    if (const json *v = find(name, false)) {
      std::optional<Placement> p =
          v->is_string() ? parsePlacement(v->get<std::string>()) : std::nullopt;
      if (!p)
        return wrong(name, *v, "device, host or nvme");
      out = *p;
    }
  }
  void operator()(const char *name, AttentionKernel &out) {
    if (const json *v = find(name, false)) {
      std::optional<AttentionKernel> k =
          v->is_string() ? parseAttentionKernel(v->get<std::string>())
                         : std::nullopt;
      if (!k)
        return wrong(name, *v, "flash or materialized");
      out = *k;
    }
  }
  void operator()(const char *name, AllToAllPurpose &out) {
    if (const json *v = find(name, false)) {
      std::optional<AllToAllPurpose> p =
          v->is_string() ? parseAllToAllPurpose(v->get<std::string>())
                         : std::nullopt;
      if (!p)
        return wrong(name, *v,
                     "dispatch, combine, combine_grad or dispatch_grad");
      out = *p;
    }
  }

  /// Attributes the kind does not have.
  void rejectExtra() {
    if (r.error)
      return;
    for (auto it = attrs.begin(); it != attrs.end(); ++it)
      if (!seen.count(it.key())) {
        std::string known;
        for (const std::string &s : seen)
          known += (known.empty() ? "" : ", ") + s;
        r.fail(at / it.key(), op + ": unknown attribute '" + it.key() +
                                  "' (expected " +
                                  (known.empty() ? "none" : known) + ")");
        return;
      }
  }
};

} // namespace

json attrsToJson(const PlanOpAttrs &attrs) {
  json out = json::object();
  std::visit(
      [&](const auto &typed) {
        // fields() is non-const: it also serves the reader.
        auto copy = typed;
        copy.fields(AttrWriter{out});
      },
      attrs);
  return out;
}

PlanOpAttrs readOpAttrs(JsonFieldReader &r, const json &attrs,
                        const JsonPath &at, int64_t index, OpKind kind) {
  PlanOpAttrs typed = defaultAttrs(kind);
  if (!attrs.is_object()) {
    r.fail(at, "expected an object, found " + describeJsonType(attrs));
    return typed;
  }
  AttrReader reader{r,
                    attrs,
                    at,
                    "op " + std::to_string(index) + " (" + opKindName(kind) +
                        ")",
                    {}};
  std::visit([&](auto &fields) { fields.fields(reader); }, typed);
  reader.rejectExtra();
  return typed;
}

} // namespace zeroc
