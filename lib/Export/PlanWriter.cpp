//===- PlanWriter.cpp - A final sched module as a plan --------------------===//

#include "zeroc/Export/PlanWriter.h"

#include "model/ModelOps.h"
#include "sched/SchedOps.h"
#include "zeroc/Support/Collectives.h"
#include "zeroc/Support/JsonReader.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"

#include <set>

using namespace mlir;
using nlohmann::json;

namespace zeroc {

TensorRole planRole(sched::Role role) {
  switch (role) {
  case sched::Role::Param:
    return TensorRole::Param;
  case sched::Role::Grad:
    return TensorRole::Grad;
  case sched::Role::Master:
    return TensorRole::Master;
  case sched::Role::ExpAvg:
    return TensorRole::ExpAvg;
  case sched::Role::ExpAvgSq:
    return TensorRole::ExpAvgSq;
  }
  llvm_unreachable("unknown sched::Role");
}

Placement planPlacement(sched::Placement placement) {
  switch (placement) {
  case sched::Placement::Device:
    return Placement::Device;
  case sched::Placement::Host:
    return Placement::Host;
  case sched::Placement::NVMe:
    return Placement::Nvme;
  }
  llvm_unreachable("unknown sched::Placement");
}

PhaseKind planPhaseKind(sched::Phase phase) {
  switch (phase) {
  case sched::Phase::MicroStep:
    return PhaseKind::MicroStep;
  case sched::Phase::OptimizerStep:
    return PhaseKind::OptimizerStep;
  }
  llvm_unreachable("unknown sched::Phase");
}

namespace {

std::string printed(Attribute attr) {
  std::string s;
  llvm::raw_string_ostream os(s);
  attr.print(os);
  return s;
}

json attrToJson(Attribute attr) {
  if (auto b = dyn_cast<BoolAttr>(attr))
    return b.getValue();
  if (auto p = dyn_cast<sched::PlacementAttr>(attr))
    return placementName(planPlacement(p.getValue()));
  if (auto r = dyn_cast<sched::RoleAttr>(attr))
    return roleName(planRole(r.getValue()));
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return i.getInt();
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(attr))
    return s.getValue().str();
  if (auto ref = dyn_cast<FlatSymbolRefAttr>(attr))
    return ref.getValue().str();
  if (isa<UnitAttr>(attr))
    return true;
  if (auto ints = dyn_cast<DenseI64ArrayAttr>(attr))
    return json(ints.asArrayRef().vec());
  if (auto array = dyn_cast<ArrayAttr>(attr)) {
    json out = json::array();
    for (Attribute a : array)
      out.push_back(attrToJson(a));
    return out;
  }
  return printed(attr);
}

DType dtypeOf(Type element) {
  return model::toDType(element).value_or(DType::F32);
}

std::string initString(Attribute init) {
  auto attr = dyn_cast_or_null<model::InitAttr>(init);
  if (!attr)
    return "";
  std::string kind = model::stringifyInitKind(attr.getKind()).str();
  if (attr.getKind() != model::InitKind::Normal)
    return kind;
  return kind + "(" + std::to_string(attr.getStdDouble()) + ")";
}

FailureOr<PlanPhase> buildPhase(func::FuncOp func, PhaseKind kind,
                                int64_t runsPerStep,
                                SymbolTableCollection &symbols, Plan &plan) {
  PlanPhase phase;
  phase.kind = kind;
  phase.runsPerStep = runsPerStep;
  llvm::DenseMap<Value, int64_t> ids;
  llvm::DenseMap<Operation *, int64_t> opIndex;
  llvm::StringMap<int64_t> lastTouch;
  llvm::StringMap<SmallVector<StringRef>> groupMembers;
  if (auto module = func->getParentOfType<ModuleOp>())
    for (auto group : module.getOps<sched::FlatGroupOp>())
      for (auto p : group.getParams().getAsRange<FlatSymbolRefAttr>())
        groupMembers[group.getSymName()].push_back(p.getValue());
  auto define = [&](Value v) -> LogicalResult {
    if (isa<sched::TokenType>(v.getType()))
      return success();
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || !type.hasStaticShape())
      return emitError(v.getLoc())
             << "plan values must be statically shaped tensors, found "
             << v.getType();
    PlanValue pv;
    pv.id = int64_t(ids.size());
    pv.dtype = dtypeOf(type.getElementType());
    pv.shape = type.getShape().vec();
    pv.bytes = sched::bufferBytes(v);
    ids[v] = pv.id;
    phase.values.push_back(std::move(pv));
    return success();
  };
  for (BlockArgument arg : func.getArguments()) {
    if (failed(define(arg)))
      return failure();
    phase.args.push_back(ids[arg]);
  }
  for (Operation &op : func.getBody().front()) {
    // func.return is kept as an op: its input is the loss the runtime logs.
    PlanOp pop;
    pop.index = int64_t(phase.ops.size());
    // Op names are unique across the dialects a final schedule holds.
    std::optional<OpKind> kind = parseOpKind(op.getName().stripDialect());
    if (!kind)
      return op.emitOpError()
             << "has no plan op kind (zeroc/Plan/PlanOps.h): lower it before "
                "writing the plan, or give it a kind the runtime executes";
    pop.kind = *kind;
    if (auto loc = dyn_cast<NameLoc>(op.getLoc()))
      pop.where = loc.getName().str();
    if (auto s = dyn_cast<sched::StreamOpInterface>(op))
      pop.stream = s.getStreamId();
    std::set<int64_t> deps;
    for (Value operand : op.getOperands()) {
      if (Operation *def = operand.getDefiningOp())
        deps.insert(opIndex.lookup(def));
      auto it = ids.find(operand);
      if (it != ids.end())
        pop.inputs.push_back(it->second);
    }
    for (Value result : op.getResults()) {
      if (failed(define(result)))
        return failure();
      if (ids.count(result))
        pop.outputs.push_back(ids[result]);
    }
    // Ops touching the same persistent tensor keep their program order
    // across streams: each follows the last earlier op that touched any
    // tensor it names (a flat group stands for its members).
    SmallVector<StringRef> named, touched;
    sched::getNamedSymbols(&op, named);
    for (StringRef name : named) {
      touched.push_back(name);
      auto members = groupMembers.find(name);
      if (members != groupMembers.end())
        touched.append(members->second.begin(), members->second.end());
    }
    for (StringRef t : touched) {
      auto it = lastTouch.find(t);
      if (it != lastTouch.end())
        deps.insert(it->second);
    }
    for (StringRef t : touched)
      lastTouch[t] = pop.index;
    // Arena memory reused across streams (zero-plan-memory).
    if (auto after = op.getAttrOfType<DenseI64ArrayAttr>("sched.after"))
      for (int64_t i : after.asArrayRef())
        if (i >= 0 && i < pop.index)
          deps.insert(i);
    pop.deps.assign(deps.begin(), deps.end());
    // The memory plan's attributes become fields, not op attributes.
    if (auto offsets = op.getAttrOfType<DenseI64ArrayAttr>("sched.offsets"))
      for (auto [result, offset] :
           llvm::zip(op.getResults(), offsets.asArrayRef()))
        if (ids.count(result))
          phase.values[ids[result]].offset = offset;
    if (auto at = op.getAttrOfType<IntegerAttr>("sched.workspace_bytes")) {
      pop.workspaceBytes = at.getInt();
      if (auto off = op.getAttrOfType<IntegerAttr>("sched.workspace_offset"))
        pop.workspaceOffset = off.getInt();
    }
    json attrs = json::object();
    for (NamedAttribute attr : op.getAttrs()) {
      // The receive type of an all-to-all is its wait's result's.
      if (attr.getName() == "stream" || attr.getName() == "group" ||
          attr.getName() == "recv_type" ||
          attr.getName().getValue().starts_with("sched."))
        continue;
      if (attr.getName() == "model.recompute") {
        if (auto layer = dyn_cast<StringAttr>(attr.getValue()))
          pop.recompute = layer.str();
        continue;
      }
      // An I32 enum attribute is an integer of a range: told apart by name.
      if (auto kernel = dyn_cast<model::AttentionKernelAttr>(attr.getValue());
          kernel && attr.getName() == "kernel") {
        attrs["kernel"] =
            model::stringifyAttentionKernel(kernel.getValue()).str();
        continue;
      }
      if (auto purpose = dyn_cast<sched::AllToAllPurposeAttr>(attr.getValue());
          purpose && attr.getName() == "purpose") {
        attrs["purpose"] =
            sched::stringifyAllToAllPurpose(purpose.getValue()).str();
        continue;
      }
      attrs[attr.getName().str()] = attrToJson(attr.getValue());
      auto collect = [&](Attribute a) {
        if (auto ref = dyn_cast<FlatSymbolRefAttr>(a))
          pop.tensors.push_back(ref.getValue().str());
      };
      collect(attr.getValue());
      if (auto array = dyn_cast<ArrayAttr>(attr.getValue()))
        for (Attribute a : array)
          collect(a);
    }
    // The attributes as the kind's typed struct: the writer checks them by
    // the same list the runtime's reader does.
    Expected<JsonDocument> doc =
        JsonDocument::parse(attrs.dump(), "plan attributes");
    if (doc) {
      JsonFieldReader reader(*doc, "plan");
      pop.attrs =
          readOpAttrs(reader, doc->root(), JsonPath(), pop.index, pop.kind);
      if (reader.error)
        return op.emitOpError() << "internal error: its attributes do not "
                                   "match zeroc/Plan/PlanOps.h: "
                                << reader.error->message;
    }
    if (auto cost = dyn_cast<model::CostOpInterface>(op)) {
      pop.flops = cost.getForwardFlops();
      pop.bytes = cost.getForwardBytes();
    }
    if (auto coll = dyn_cast<sched::CollectiveOpInterface>(op)) {
      pop.collective = std::string(collectiveName(coll.getCollectiveKind()));
      pop.group = sched::commGroupKind(coll.getGroup());
      pop.commElements = coll.getLogicalElements(symbols);
    }
    opIndex[&op] = pop.index;
    phase.ops.push_back(std::move(pop));
  }
  if (auto args = func->getAttrOfType<DenseI64ArrayAttr>("sched.arg_offsets"))
    for (auto [arg, offset] : llvm::zip(func.getArguments(), args.asArrayRef()))
      if (ids.count(arg))
        phase.values[ids[arg]].offset = offset;
  if (auto memory = func->getAttrOfType<DictionaryAttr>("sched.memory")) {
    auto get = [&](StringRef key) -> int64_t {
      auto v = memory.getAs<IntegerAttr>(key);
      return v ? v.getInt() : 0;
    };
    phase.memory =
        PlanPhaseMemory{get("arena_bytes"),    get("peak_live_bytes"),
                        get("peak_op"),        get("activations"),
                        get("gather_buffers"), get("reduce_buckets"),
                        get("workspace"),      {}};
    if (auto live = func->getAttrOfType<DenseI64ArrayAttr>("sched.live_bytes"))
      phase.memory->liveBytes = live.asArrayRef().vec();
  }
  return phase;
}

} // namespace

FailureOr<Plan> buildPlan(ModuleOp module, const PlanSource &source) {
  Plan plan;
  plan.generator = source.generator;
  plan.model = source.model;
  plan.gradientAccumulationSteps = source.gradientAccumulationSteps;
  plan.recompute = source.recompute;
  plan.config = source.config;
  plan.worldSize = sched::getWorldSize(module);
  auto stage = module->getAttrOfType<IntegerAttr>(sched::kStageAttr);
  if (!stage)
    return module.emitError() << "not a schedule: no " << sched::kStageAttr;
  plan.stage = stage.getInt();
  plan.expertParallelSize = sched::getExpertParallelSize(module);
  // The sched dialect's streams, by id.
  for (unsigned i = 0; i <= sched::getMaxEnumValForStream(); ++i)
    plan.streams.push_back(sched::stringifyStream(sched::Stream(i)).str());

  for (auto t : module.getOps<sched::TensorOp>()) {
    PlanTensor pt;
    pt.name = t.getSymName().str();
    pt.role = planRole(t.getRole());
    if (t.getOf())
      pt.of = t.getOf()->str();
    pt.dtype = dtypeOf(t.getTensorType().getElementType());
    pt.shape = t.getTensorType().getShape().vec();
    pt.numel = t.getNumElements();
    pt.sharded = t.getSharded();
    pt.localNumel = t.getLocalNumElements(plan.worldSize);
    pt.expert = t.getExpert();
    pt.placement = planPlacement(t.getPlacement());
    pt.init = initString(t.getInitAttr());
    pt.validRows = t.getValidRows().value_or(0);
    plan.tensors.push_back(std::move(pt));
  }
  SymbolTable table(module);
  for (auto g : module.getOps<sched::FlatGroupOp>()) {
    PlanFlatGroup pg;
    pg.name = g.getSymName().str();
    int64_t offset = 0;
    for (auto p : g.getParams().getAsRange<FlatSymbolRefAttr>()) {
      pg.params.push_back(p.getValue().str());
      pg.offsets.push_back(offset);
      offset += table.lookup<sched::TensorOp>(p.getValue()).getNumElements();
    }
    pg.numel = g.getNumel();
    pg.padded = g.getPadded();
    // Over the members' group: the expert-data-parallel ranks for experts.
    auto first = table.lookup<sched::TensorOp>(
        cast<FlatSymbolRefAttr>(g.getParams()[0]).getValue());
    pg.partition = pg.padded / first.getShardGroupSize(plan.worldSize);
    plan.flatGroups.push_back(std::move(pg));
  }

  SymbolTableCollection symbols;
  for (sched::Phase p :
       {sched::Phase::MicroStep, sched::Phase::OptimizerStep}) {
    func::FuncOp func = sched::lookupPhase(module, p);
    if (!func)
      return module.emitError()
             << "not a schedule: no @" << sched::stringifyPhase(p);
    int64_t runs =
        p == sched::Phase::MicroStep ? source.gradientAccumulationSteps : 1;
    FailureOr<PlanPhase> phase =
        buildPhase(func, planPhaseKind(p), runs, symbols, plan);
    if (failed(phase))
      return failure();
    plan.phases.push_back(std::move(*phase));
  }
  accountComm(plan);
  // A hand-written model's padding must agree with its loss (zeroc gen's
  // always does): refused here as the plan reader would refuse it.
  if (auto problem = vocabPaddingProblem(plan))
    return module.emitError() << "the model's padded vocabulary does not "
                                 "agree with its loss: "
                              << problem->second;
  return plan;
}

} // namespace zeroc
