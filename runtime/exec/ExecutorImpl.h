//===- ExecutorImpl.h - The executor's parts, put together ------*- C++ -*-===//
//
// Internal to runtime/exec. Executor::Impl holds the parts (persistent
// state, prepared phases, the stream scheduler, the device) and runs a
// phase's ops; its op methods are defined by concern:
//
//   Executor.cpp       the step: phases in order, data, the op dispatch
//   ComputeOps.cpp     model ops (kernels and the state a forward op saves
//                      for its backward op), reads, accumulation, copies
//   Collectives.cpp    gathers, reductions and their epilogues
//   OptimizerOps.cpp   Adam, gradient clipping, loss scaling
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_EXECUTORIMPL_H
#define ZEROC_RUNTIME_EXEC_EXECUTORIMPL_H

#include "Kernels.h"
#include "exec/Device.h"
#include "exec/ExecError.h"
#include "exec/Executor.h"
#include "exec/PersistentState.h"
#include "exec/PreparedPhase.h"
#include "exec/Profiler.h"
#include "exec/StreamScheduler.h"

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zeroc::runtime {

struct Executor::Impl {
  /// On `options.device`, else a CPU device of its own.
  Impl(Executor &ex, Communicator &comm, const ExecutorOptions &options);

  Executor &ex;
  const Plan &plan;
  Communicator &comm;
  /// With expert parallelism, the communicators of its groups
  /// (ExpertParallel.h), split from `comm` as the executor is made.
  std::unique_ptr<Communicator> expertParallelComm, expertDataParallelComm;
  /// The communicator of group `g`: `comm` for the world.
  Communicator &groupComm(CommGroupKind g);
  std::unique_ptr<Device> ownDevice; ///< The CPU device, when none is given.
  Device *dev = nullptr;
  int64_t rank, ws;
  bool streamThreads = true;
  bool joinLocalCollectiveStreams = true;
  exec::PersistentState state;
  exec::StreamScheduler scheduler;
  Profiler *profiler = nullptr;
  /// One arena serves both phases: they never run at once.
  std::shared_ptr<char> arena;
  /// Each phase, prepared on its first run.
  std::map<const PlanPhase *, exec::PreparedPhase> prepared;

  //===--------------------------------------------------------------------===//
  // The step (Executor.cpp)
  //===--------------------------------------------------------------------===//

  /// Runs `ph` once: micro-step `micro` of optimizer step `step` with its
  /// inputs from `data`, or (null `data`) the optimizer step.
  void runPhase(const PlanPhase &ph, const DataLoader *data, int64_t step,
                int64_t micro);
  void runOp(const PlanOp &op);
  /// The micro-steps of optimizer step `step`: this rank's mean loss.
  double runMicroSteps(const DataLoader &data, int64_t step);

  // The phase being run. Its `values` map is complete from the phase's
  // start, so that the streams only read it.
  exec::PreparedPhase *phase = nullptr;
  std::vector<std::shared_ptr<char>> unplanned;
  Tensor &value(int64_t id);
  /// Arena memory at [offset, offset + bytes), recorded as used.
  char *arenaAt(int64_t offset, int64_t bytes);
  /// `op`'s planned workspace if it holds `bytes` (Workspace.h's layout);
  /// otherwise (a plan without one) a separate allocation kept in `keep`,
  /// which the measured peak then shows above the prediction.
  char *workspace(const PlanOp &op, int64_t bytes,
                  std::vector<std::shared_ptr<char>> &keep);
  exec::Stored &tensor(const std::string &name) { return state.tensor(name); }
  OpLabel label(const PlanOp &op) const;

  /// The NVMe tensors an op uses, resident while it runs.
  struct Resident {
    Impl *impl = nullptr;
    std::vector<exec::Stored *> held;
    bool writeBack = true;
    /// Held without being read (PersistentState::swapIn): written back only
    /// if the op wrote it (Stored::dirty), not after a failure or a skip.
    exec::Stored *unread = nullptr;
    ~Resident();
  };

  //===--------------------------------------------------------------------===//
  // Compute ops (ComputeOps.cpp)
  //===--------------------------------------------------------------------===//

  /// A model op (forward or backward) through the device's kernels.
  void compute(const PlanOp &op);
  void read(const PlanOp &op);
  void accumulate(const PlanOp &op);
  void zeroGrads(const PlanOp &op);
  /// fetch_start (persistent tensors into the values of its wait) and
  /// copy_start (between persistent tensors).
  void startCopy(const PlanOp &op);

  //===--------------------------------------------------------------------===//
  // Collectives (Collectives.cpp)
  //===--------------------------------------------------------------------===//

  /// A started collective: its handles, and what runs once all completed.
  struct Pending {
    Communicator *via = nullptr; ///< What started the handles; null: comm.
    std::vector<CommHandle> handles;
    std::vector<std::function<void()>> after;
    std::vector<std::shared_ptr<char>> scratch; ///< Unplanned workspace.
  };
  void startAllGather(const PlanOp &op);
  void startReduceScatter(const PlanOp &op);
  void startAllReduce(const PlanOp &op);
  void startAllGatherUpdates(const PlanOp &op);
  /// Waits for `p`'s collectives (giving up if another stream failed),
  /// then runs its epilogue; where the device orders collectives on its
  /// streams (and not `hostWait`), issues the epilogue at once instead.
  void complete(Pending &p, bool hostWait = false);
  /// Waits for the collectives completed in stream order so far (their
  /// --comm-timeout applies), before the host blocks on a stream.
  void drainInflight();
  /// After a phase's ops: the stream-ordered collectives waited for (or,
  /// after a failure, abandoned) and the device synchronized.
  void finishCollectives();
  double allReduceScalar(const PlanOp &op, double value, ScalarOp kind);
  /// allReduceScalar on several values at once, in place, over `group`.
  void allReduceScalars(const PlanOp &op, std::vector<double> &values,
                        ScalarOp kind,
                        CommGroupKind group = CommGroupKind::World);
  /// An expert gradient reduced over the expert-data-parallel group is the
  /// sum of world / ep ranks' gradients, each of which covers every token
  /// of its expert-parallel group's ep ranks: the world's mean, as without
  /// expert parallelism, is that sum over the world size. The communicator
  /// averages over its own ranks; this scales what it returns by the rest,
  /// 1 / ep. Nothing for non-expert state.
  void scaleExpertGradient(const PlanOp &op, const Tensor &reduced);

  //===--------------------------------------------------------------------===//
  // Expert parallelism's token exchanges (ExpertExchange.cpp)
  //===--------------------------------------------------------------------===//

  /// The rows of one MoE layer's exchange between the ranks of an
  /// expert-parallel group, as the router decided them this micro-step:
  /// `sent[e]` the dispatch-order rows this rank sends to global expert e,
  /// and once the dispatch exchanged the counts, `received[s * local + l]`
  /// the rows rank s of the group sends to this rank's local expert l.
  struct TokenExchange {
    int64_t experts = 0, local = 0, ep = 1;
    std::vector<int64_t> sent, received;
    bool counted = false;
    int64_t sentTo(int64_t peer) const;
    int64_t receivedFrom(int64_t peer) const;
  };
  /// Each value of the running phase that holds one layer's exchanged rows
  /// (the dispatch's rows, what the all-to-alls deliver, the local experts'
  /// outputs and gradients), with its exchange. Cleared at each phase run.
  std::map<int64_t, std::shared_ptr<TokenExchange>> exchanges;
  std::mutex exchangesMutex;
  std::shared_ptr<TokenExchange> exchangeOf(const PlanOp &op, int64_t value);
  void setExchange(int64_t value, std::shared_ptr<TokenExchange> x);
  /// moe_dispatch: counts the rows per expert of the router's indices.
  void countDispatch(const PlanOp &op);
  /// all_to_all_start: the count exchange (at a dispatch), then the rows.
  void startAllToAll(const PlanOp &op);
  /// The step's collectives as this rank reached them (ArrivalSkew.h), and
  /// the phase run being run, for their notes.
  ArrivalLog arrivals;
  SkewMethod skewMethod = SkewMethod::Arrival;
  PhaseKind runningPhase = PhaseKind::MicroStep;
  int64_t runningRun = 0;
  /// Notes that this rank posts `op`'s collective now (called holding its
  /// ticket); null when not measuring.
  CollectiveArrival *arrive(const PlanOp &op) {
    return arrivals.arrive(runningPhase, runningRun, op.index,
                           profiler ? profiler->currentRun() : -1);
  }
  /// Collectives whose epilogue was issued in stream order (GPU): their
  /// handles and scratch live until the phase's end.
  std::mutex inflightMutex;
  std::deque<CommHandle> inflight;
  std::vector<std::shared_ptr<char>> inflightScratch;

  //===--------------------------------------------------------------------===//
  // Optimizer ops (OptimizerOps.cpp)
  //===--------------------------------------------------------------------===//

  void adamUpdate(const PlanOp &op);
  /// adam_update with `lamb`: the trust ratio per parameter, its norms
  /// summed over the ranks when the states are sharded.
  void lambUpdate(const PlanOp &op, const cpu::AdamSettings &settings,
                  const Tensor &grad, const Tensor &master, const Tensor &m,
                  const Tensor &v, const Tensor *param16);
  void clipGradNorm(const PlanOp &op);
  void unscale(const PlanOp &op);
  /// adam_update ops deferred for one fused call (Device::fusesAdam): those
  /// issued one after another on one stream with the same settings.
  struct PendingAdam {
    cpu::AdamSettings settings;
    int64_t step = 0;
    int64_t stream = -1;
    std::vector<const PlanOp *> ops;
    std::vector<Device::AdamPart> parts;
  };
  PendingAdam pendingAdam;
  /// Issues the deferred adam_update ops (one Device::adamUpdates on their
  /// stream) and records their completion again, after the fused kernel,
  /// for the ops of other streams that wait on them.
  /// `ownSpan`: issued between ops (beforeIssue), not inside another
  /// adam_update's span: on a device clock (Profiler::deviceClock) the
  /// fused launch then becomes the first deferred op's span (the others',
  /// bracketed when they were deferred, stay empty).
  void flushAdam(bool ownSpan = false);
  /// The scheduler's hook before it issues `next` on `stream` (null at the
  /// phase's end): flushes unless `next` is an adam_update of the same
  /// stream, which may join the deferred ones.
  void beforeIssue(const PlanOp *next, int64_t stream);
  /// The loss-scale settings of the plan's unscale_grads, if it has one.
  void initLossScale();
  /// After the optimizer step: the loss scale moves, the Adam step counts.
  void finishOptimizerStep();
  int64_t adamSteps = 0;
  cpu::LossScaleSettings lossSettings;
  cpu::LossScaleState lossState;
  bool haveLossState = false;
  /// The cross-entropy's divisor this step: the global batch's counted
  /// targets per micro-step (runMicroSteps; the micro-step's rows without
  /// a loss mask). One value for every rank and micro-step, so that the
  /// loss and gradient are the mean over the global batch's counted tokens.
  double lossTokens = 0;
  /// --no-cross-doc-attention / --reset-position-ids: the micro-step's
  /// document starts, i32 [micro_batch, seq] in `documentStarts` (host
  /// memory: CPU only), filled by runPhase; no data otherwise. The flags say
  /// which kernels take it (StepContext).
  std::vector<int32_t> documentStarts;
  Tensor documents;
  bool documentAttention = false, documentPositions = false;
  /// Set by unscale_grads when a gradient overflowed (fp16): every rank
  /// skips the update alike.
  std::atomic<bool> overflow{false};
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_EXECUTORIMPL_H
