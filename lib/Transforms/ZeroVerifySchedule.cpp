//===- ZeroVerifySchedule.cpp - Prove a schedule's invariants -------------===//
//
// The checks that make a plan safe to launch on a thousand ranks: nothing
// left unlowered, one collective order, every gather released, every
// gradient reduced once, no read of data still in flight.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Transforms/Passes.h"

#include "sched/SchedOps.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

namespace zeroc {
#define GEN_PASS_DEF_ZEROVERIFYSCHEDULE
#include "zeroc/Transforms/Passes.h.inc"
} // namespace zeroc

using namespace mlir;
using namespace zeroc;
using sched::Role;

namespace {

int64_t streamOf(Operation *op) {
  if (auto s = dyn_cast<sched::StreamOpInterface>(op))
    return s.getStreamId();
  return 0;
}

class ScheduleVerifier {
public:
  explicit ScheduleVerifier(ModuleOp module) : module(module), symbols(module) {
    for (auto group : module.getOps<sched::FlatGroupOp>())
      for (auto p : group.getParams().getAsRange<FlatSymbolRefAttr>())
        groupMembers[group.getSymName()].push_back(p.getValue());
  }

  LogicalResult run() {
    func::FuncOp micro = sched::lookupPhase(module, sched::Phase::MicroStep);
    func::FuncOp optimizer =
        sched::lookupPhase(module, sched::Phase::OptimizerStep);
    if (!micro || !optimizer)
      return module.emitError()
             << "a schedule needs the functions @micro_step and "
                "@optimizer_step";
    if (failed(checkStates()) || failed(checkExpertState()))
      return failure();
    for (func::FuncOp f : {micro, optimizer})
      if (failed(checkStructure(f)) || failed(checkGroups(f)) ||
          failed(checkTokenExchanges(f)) || failed(checkReleases(f)) ||
          failed(checkStreams(f)) || failed(checkInFlight(f)))
        return failure();
    return checkReductions(micro, optimizer);
  }

private:
  /// Each parameter or flat group has at most one tensor of each role:
  /// passes find state by owner and role (sched::StateTable).
  LogicalResult checkStates() {
    llvm::DenseMap<std::pair<StringRef, Role>, sched::TensorOp> seen;
    for (auto t : module.getOps<sched::TensorOp>()) {
      StringRef owner = t.getOf() ? *t.getOf() : t.getSymName();
      auto [it, inserted] = seen.try_emplace({owner, t.getRole()}, t);
      if (!inserted)
        return t.emitOpError()
               << "is a second " << sched::stringifyRole(t.getRole()) << " of @"
               << owner << ", after @" << it->second.getSymName();
    }
    return success();
  }

  /// Expert state is declared only with expert parallelism, the state of an
  /// expert parameter is expert state too, and a flat group holds expert
  /// parameters only or none: each is data-parallel over one group.
  LogicalResult checkExpertState() {
    int64_t ep = sched::getExpertParallelSize(module);
    int64_t world = sched::getWorldSize(module);
    if (world % ep != 0)
      return module.emitError()
             << sched::kExpertParallelSizeAttr << " " << ep
             << " does not divide the world size " << world
             << ": the expert-parallel groups must partition the ranks";
    for (auto t : module.getOps<sched::TensorOp>()) {
      if (t.getExpert() && ep < 2)
        return t.emitOpError()
               << "is expert state, but the schedule has no expert "
                  "parallelism ("
               << sched::kExpertParallelSizeAttr << " is " << ep << ")";
      if (!t.getOf())
        continue;
      if (isExpert(*t.getOf()) != t.getExpert())
        return t.emitOpError()
               << "is " << (t.getExpert() ? "" : "not ")
               << "expert state, but what it belongs to, @" << *t.getOf()
               << ", is " << (t.getExpert() ? "not" : "expert state");
    }
    for (auto &[group, members] : groupMembers)
      for (StringRef p : members)
        if (isExpert(p) != isExpert(members.front()))
          return symbols.lookup(group)->emitOpError()
                 << "flattens expert parameters with others (@"
                 << members.front() << ", @" << p
                 << "): they are data-parallel over different groups";
    return success();
  }

  /// A tensor's, or a flat group's members', expert marking.
  bool isExpert(StringRef name) {
    if (auto t = symbols.lookup<sched::TensorOp>(name))
      return t.getExpert();
    auto members = groupMembers.find(name);
    return members != groupMembers.end() && !members->second.empty() &&
           isExpert(members->second.front());
  }

  /// The same-order proof over communicator groups. checkStructure makes
  /// every rank run one block without control flow, so every rank issues
  /// the same collectives in the same order. With expert parallelism a rank
  /// issues each on its own group of that kind; the members of one group
  /// then issue the same sequence on it if a collective's group does not
  /// depend on the rank: it follows from what the collective names (expert
  /// state over the expert-data-parallel group, other state over the world,
  /// tokens over the expert-parallel group), never two groups at once.
  LogicalResult checkGroups(func::FuncOp f) {
    int64_t ep = sched::getExpertParallelSize(module);
    for (Operation &op : f.getBody().front()) {
      auto collective = dyn_cast<sched::CollectiveOpInterface>(op);
      if (!collective)
        continue;
      sched::CommGroup group = collective.getGroup();
      StringRef groupName = sched::stringifyCommGroup(group);
      if (group != sched::CommGroup::World && ep < 2)
        return op.emitOpError()
               << "runs over the " << groupName
               << " group, but the schedule has no expert parallelism ("
               << sched::kExpertParallelSizeAttr << " is " << ep << ")";
      if (isa<sched::AllToAllStartOp>(op))
        continue; // Its own verifier holds it to the expert-parallel group.
      if (group == sched::CommGroup::ExpertParallel)
        return op.emitOpError()
               << "runs over the expert_parallel group, where only the "
                  "token all-to-alls run: ZeRO's collectives on state run "
                  "over the world or the expert_data_parallel group";
      SmallVector<StringRef> named;
      sched::getNamedSymbols(&op, named);
      if (named.empty())
        continue;
      for (StringRef n : named)
        if (isExpert(n) != isExpert(named.front()))
          return op.emitOpError()
                 << "mixes expert state (@" << (isExpert(n) ? n : named.front())
                 << ") with other state (@" << (isExpert(n) ? named.front() : n)
                 << "): one collective runs over one group, and the "
                    "expert-data-parallel group is not the world";
      bool expert = isExpert(named.front());
      sched::CommGroup expected = expert ? sched::CommGroup::ExpertDataParallel
                                         : sched::CommGroup::World;
      if (group != expected)
        return op.emitOpError()
               << "acts on " << (expert ? "expert" : "non-expert")
               << " state (@" << named.front() << ") over the " << groupName
               << " group; it belongs on the "
               << sched::stringifyCommGroup(expected) << " group"
               << (expert ? ", the ranks that hold the same experts"
                          : ", every rank holding it");
    }
    return success();
  }

  /// The all-to-all a value comes from (through its wait), if any.
  static std::optional<sched::AllToAllPurpose> exchangedBy(Value v) {
    auto wait = v.getDefiningOp<sched::WaitOp>();
    auto start = wait ? wait.getToken().getDefiningOp<sched::AllToAllStartOp>()
                      : nullptr;
    if (!start)
      return std::nullopt;
    return start.getPurpose();
  }

  /// Whether `v` is sent by an all-to-all of `purpose`, and by nothing else.
  static bool sentOnlyBy(Value v, sched::AllToAllPurpose purpose) {
    return !v.use_empty() && llvm::all_of(v.getUsers(), [&](Operation *user) {
      auto start = dyn_cast<sched::AllToAllStartOp>(user);
      return start && start.getPurpose() == purpose;
    });
  }

  /// Under expert parallelism a rank's experts see only the rows sent to
  /// them: the local experts read what the dispatch exchange received and
  /// their result goes back by the combine exchange; their backward reads
  /// the combine's gradient and sends its input gradient back by the
  /// dispatch's. Anything else would run the experts on another rank's
  /// layout of the rows.
  LogicalResult checkTokenExchanges(func::FuncOp f) {
    using sched::AllToAllPurpose;
    auto name = [](AllToAllPurpose p) {
      return sched::stringifyAllToAllPurpose(p);
    };
    for (Operation &op : f.getBody().front()) {
      if (auto local = dyn_cast<model::MoeLocalExpertsOp>(op)) {
        if (exchangedBy(local.getRows()) != AllToAllPurpose::Dispatch)
          return op.emitOpError()
                 << "reads rows that no " << name(AllToAllPurpose::Dispatch)
                 << " all-to-all received: this rank's experts run on the "
                    "rows sent to them (run zero-insert-collectives)";
        if (!sentOnlyBy(local.getResult(), AllToAllPurpose::Combine))
          return op.emitOpError()
                 << "result must go back to the tokens' ranks by a "
                 << name(AllToAllPurpose::Combine) << " all-to-all, and only "
                 << "by it";
      } else if (auto back = dyn_cast<model::MoeLocalExpertsBackwardOp>(op)) {
        if (exchangedBy(back.getDout()) != AllToAllPurpose::CombineGrad)
          return op.emitOpError() << "reads an output gradient that no "
                                  << name(AllToAllPurpose::CombineGrad)
                                  << " all-to-all received";
        if (exchangedBy(back.getRows()) != AllToAllPurpose::Dispatch)
          return op.emitOpError()
                 << "reads rows that no " << name(AllToAllPurpose::Dispatch)
                 << " all-to-all received";
        if (!sentOnlyBy(back.getDrows(), AllToAllPurpose::DispatchGrad))
          return op.emitOpError() << "input gradient must go back by a "
                                  << name(AllToAllPurpose::DispatchGrad)
                                  << " all-to-all, and only by it";
      }
    }
    return success();
  }

  /// One block, no nested regions, nothing logical left.
  LogicalResult checkStructure(func::FuncOp f) {
    if (!f.getBody().hasOneBlock())
      return f.emitError() << "@" << f.getSymName()
                           << " must be a single block: branches could make "
                              "ranks issue different collectives";
    for (Operation &op : f.getBody().front()) {
      if (op.getNumRegions())
        return op.emitOpError()
               << "has regions: control flow inside a schedule could make "
                  "ranks issue different collectives";
      if (op.hasTrait<model::MustLowerBeforePlan>())
        return op.emitOpError() << "was not lowered to the schedule (run "
                                   "zero-insert-collectives)";
      if (auto start = dyn_cast<sched::AsyncStartOpInterface>(op)) {
        Value token = start.getToken();
        if (!token.hasOneUse() ||
            !isa<sched::WaitOp>(*token.getUsers().begin()))
          return op.emitOpError() << "must be waited on exactly once";
      }
    }
    return success();
  }

  /// Gathered and fetched buffers are released once, and not used after.
  LogicalResult checkReleases(func::FuncOp f) {
    for (auto wait : f.getOps<sched::WaitOp>()) {
      Operation *start = wait.getToken().getDefiningOp();
      if (!isa<sched::AllGatherStartOp, sched::FetchStartOp>(start))
        continue;
      for (Value buffer : wait.getResults()) {
        Operation *release = nullptr;
        for (Operation *user : buffer.getUsers()) {
          if (!isa<sched::ReleaseOp>(user))
            continue;
          if (release) {
            // Point at the second release in program order.
            Operation *second = release->isBeforeInBlock(user) ? user : release;
            return second->emitOpError() << "releases a buffer twice";
          }
          release = user;
        }
        if (!release)
          return wait.emitOpError() << "yields a " << start->getName()
                                    << " buffer that is never released";
        for (Operation *user : buffer.getUsers())
          if (user != release && release->isBeforeInBlock(user))
            return user->emitOpError() << "uses a buffer after its release";
      }
    }
    for (auto release : f.getOps<sched::ReleaseOp>())
      for (Value v : release.getValues()) {
        auto wait = v.getDefiningOp<sched::WaitOp>();
        if (!wait || !isa<sched::AllGatherStartOp, sched::FetchStartOp>(
                         wait.getToken().getDefiningOp()))
          return release.emitOpError()
                 << "releases a value that is not a gathered or fetched "
                    "buffer";
      }
    return success();
  }

  /// A value crosses streams only through a wait on the reading stream.
  /// Starts synchronize with the producers of their inputs themselves.
  LogicalResult checkStreams(func::FuncOp f) {
    for (Operation &op : f.getBody().front()) {
      if (isa<sched::AsyncStartOpInterface>(op))
        continue;
      int64_t stream = streamOf(&op);
      for (Value operand : op.getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer || isa<sched::TokenType>(operand.getType()))
          continue;
        int64_t from = streamOf(producer);
        if (from != stream)
          return op.emitOpError()
                 << "on stream " << stream << " reads a value produced on "
                 << "stream " << from << " without a wait on stream " << stream;
      }
    }
    return success();
  }

  /// The persistent tensors an op names, and those it writes; a flat group
  /// stands for its members too.
  void accesses(Operation *op, SmallVectorImpl<StringRef> &touched,
                SmallVectorImpl<StringRef> &written) {
    auto expand = [&](StringRef name, SmallVectorImpl<StringRef> &into) {
      into.push_back(name);
      auto it = groupMembers.find(name);
      if (it != groupMembers.end())
        into.append(it->second.begin(), it->second.end());
    };
    SmallVector<StringRef> named;
    sched::getNamedSymbols(op, named);
    for (StringRef n : named)
      expand(n, touched);
    auto writeAll = [&](ArrayAttr list) {
      for (auto ref : list.getAsRange<FlatSymbolRefAttr>())
        expand(ref.getValue(), written);
    };
    if (auto rs = dyn_cast<sched::ReduceScatterStartOp>(op))
      writeAll(rs.getTargets());
    else if (auto ar = dyn_cast<sched::AllReduceStartOp>(op))
      writeAll(ar.getTensors());
    else if (auto ag = dyn_cast<sched::AllGatherUpdatesStartOp>(op))
      writeAll(ag.getTargets());
    else if (auto copy = dyn_cast<sched::CopyStartOp>(op))
      writeAll(copy.getDestinations());
    else if (isa<sched::AccumulateOp, sched::AdamUpdateOp, sched::ZeroGradsOp,
                 sched::ClipGradNormOp, sched::UnscaleGradsOp>(op))
      written.append(touched.begin(), touched.end());
  }

  /// No op writes a persistent tensor an in-flight operation reads, or
  /// touches one it writes, between the operation's start and its wait.
  LogicalResult checkInFlight(func::FuncOp f) {
    struct Access {
      SmallVector<StringRef> touched, written;
    };
    llvm::MapVector<Operation *, Access> inFlight;
    for (Operation &op : f.getBody().front()) {
      if (auto wait = dyn_cast<sched::WaitOp>(op)) {
        inFlight.erase(wait.getToken().getDefiningOp());
        continue;
      }
      Access mine;
      accesses(&op, mine.touched, mine.written);
      for (auto &[start, busy] : inFlight) {
        auto clash = [&](ArrayRef<StringRef> xs,
                         ArrayRef<StringRef> ys) -> std::optional<StringRef> {
          for (StringRef x : xs)
            if (llvm::is_contained(ys, x))
              return x;
          return std::nullopt;
        };
        std::optional<StringRef> name = clash(busy.written, mine.touched);
        if (!name)
          name = clash(mine.written, busy.touched);
        if (name)
          return op.emitOpError() << "touches @" << *name << " while '"
                                  << start->getName() << "' on it is in flight";
      }
      if (isa<sched::AsyncStartOpInterface>(op))
        inFlight[&op] = std::move(mine);
    }
    return success();
  }

  /// Each parameter's gradient is reduced exactly once per step.
  LogicalResult checkReductions(func::FuncOp micro, func::FuncOp optimizer) {
    // Which parameter owns each (gradient tensor, offset) pair.
    llvm::DenseMap<std::pair<StringRef, int64_t>, StringRef> ownerAt;
    SmallVector<StringRef> params;
    for (auto t : module.getOps<sched::TensorOp>()) {
      if (t.getRole() == Role::Param)
        params.push_back(t.getSymName());
      if (t.getRole() != Role::Grad || !t.getOf())
        continue;
      auto members = groupMembers.find(*t.getOf());
      if (members == groupMembers.end()) {
        ownerAt[{t.getSymName(), 0}] = *t.getOf();
        continue;
      }
      int64_t offset = 0;
      for (StringRef p : members->second) {
        ownerAt[{t.getSymName(), offset}] = p;
        offset += symbols.lookup<sched::TensorOp>(p).getNumElements();
      }
    }

    llvm::StringMap<int> reduced, accumulated;
    llvm::StringMap<Operation *> accumulatedInto;
    auto owner = [&](Operation *op, StringRef tensor,
                     int64_t offset) -> FailureOr<StringRef> {
      auto it = ownerAt.find({tensor, offset});
      if (it == ownerAt.end())
        return op->emitOpError()
               << "writes @" << tensor << " at offset " << offset
               << ", where no parameter's gradient starts";
      return it->second;
    };
    for (Operation &op : micro.getBody().front()) {
      if (auto acc = dyn_cast<sched::AccumulateOp>(op)) {
        FailureOr<StringRef> p = owner(&op, acc.getTensor(), acc.getOffset());
        if (failed(p))
          return failure();
        ++accumulated[*p];
        accumulatedInto[*p] = &op;
      } else if (auto rs = dyn_cast<sched::ReduceScatterStartOp>(op)) {
        for (auto [target, offset] :
             llvm::zip(rs.getTargets().getAsRange<FlatSymbolRefAttr>(),
                       rs.getOffsets())) {
          FailureOr<StringRef> p = owner(&op, target.getValue(), offset);
          if (failed(p))
            return failure();
          ++reduced[*p];
        }
      }
    }
    // Boundary reductions act on whole accumulators.
    llvm::StringMap<int> boundary;
    for (Operation &op : optimizer.getBody().front()) {
      SmallVector<StringRef> tensors;
      if (auto ar = dyn_cast<sched::AllReduceStartOp>(op))
        for (auto t : ar.getTensors().getAsRange<FlatSymbolRefAttr>())
          tensors.push_back(t.getValue());
      else if (auto rs = dyn_cast<sched::ReduceScatterStartOp>(op))
        for (auto t : rs.getTargets().getAsRange<FlatSymbolRefAttr>())
          tensors.push_back(t.getValue());
      for (StringRef t : tensors)
        for (auto &[key, p] : ownerAt)
          if (key.first == t)
            ++boundary[p];
    }
    for (StringRef p : params) {
      int local = accumulated.lookup(p), inStep = reduced.lookup(p);
      int atBoundary = boundary.lookup(p);
      if (local + inStep != 1)
        return micro.emitError()
               << "the gradient of @" << p << " is accumulated or reduced "
               << local + inStep << " times per micro-step, expected once";
      int total = inStep + atBoundary;
      if (total != 1)
        return (local ? accumulatedInto[p] : micro.getOperation())->emitError()
               << "the gradient of @" << p << " is reduced " << total
               << " times per step, expected exactly once";
    }
    return success();
  }

  ModuleOp module;
  SymbolTable symbols;
  llvm::StringMap<SmallVector<StringRef>> groupMembers;
};

struct ZeroVerifySchedule
    : zeroc::impl::ZeroVerifyScheduleBase<ZeroVerifySchedule> {
  void runOnOperation() override {
    if (failed(ScheduleVerifier(getOperation()).run()))
      signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace
