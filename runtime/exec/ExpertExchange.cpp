//===- ExpertExchange.cpp - Expert parallelism's token all-to-alls --------===//
//
// DeepSpeed-MoE's exchanges between the ranks of an expert-parallel group
// (docs/zerorun.md, "Expert parallelism"). moe_dispatch sorts a rank's
// routed rows by expert; the router decided how many go to each expert, so
// the dispatch all-to-all first exchanges those counts (each rank tells each
// peer how many rows it sends to each of the peer's experts; host memory,
// which NCCL stages: exchangeExpertCounts), then the rows (MPI_Alltoallv, or
// NCCL's sends and receives of device rows on the op's stream). The rows arrive
// grouped by source rank, then local expert; the local experts regroup them by
// expert and answer in arrival order, so the combine all-to-all sends each
// source its rows back with the counts reversed. Backward runs the same two
// exchanges: the combine's gradient goes to the experts as the dispatch did,
// the experts' input gradient comes back as the combine did.
//
// Each value that holds a layer's exchanged rows carries its exchange (the
// counts) through the phase: the dispatch's rows, what each all-to-all
// delivers, the local experts' outputs and input gradients, and the
// combine's backward (whose rows input is the combine's delivered rows).
//
//===----------------------------------------------------------------------===//

#include "exec/ExecutorImpl.h"

#include <numeric>

namespace zeroc::runtime {

using namespace exec;

int64_t Executor::Impl::TokenExchange::sentTo(int64_t peer) const {
  return std::accumulate(sent.begin() + peer * local,
                         sent.begin() + (peer + 1) * local, int64_t(0));
}

int64_t Executor::Impl::TokenExchange::receivedFrom(int64_t peer) const {
  return std::accumulate(received.begin() + peer * local,
                         received.begin() + (peer + 1) * local, int64_t(0));
}

std::shared_ptr<Executor::Impl::TokenExchange>
Executor::Impl::exchangeOf(const PlanOp &op, int64_t id) {
  std::lock_guard<std::mutex> lock(exchangesMutex);
  auto it = exchanges.find(id);
  if (it == exchanges.end())
    fail("op " + std::to_string(op.index) + " (" + op.kindName() +
         "): its rows (value " + std::to_string(id) +
         ") come from no moe_dispatch of this phase run: expert parallelism's "
         "ops must follow the dispatch of their layer");
  return it->second;
}

void Executor::Impl::setExchange(int64_t id, std::shared_ptr<TokenExchange> x) {
  std::lock_guard<std::mutex> lock(exchangesMutex);
  exchanges[id] = std::move(x);
}

void Executor::Impl::countDispatch(const PlanOp &op) {
  // The router's indices [..., k]: the rows each expert gets from here.
  const Tensor &indices = value(op.inputs.at(1));
  auto x = std::make_shared<TokenExchange>();
  x->experts = op.attrsAs<MoeExpertCountAttrs>().numExperts;
  x->ep = plan.expertParallelSize;
  if (x->experts % x->ep != 0)
    fail("op " + std::to_string(op.index) + ": " + std::to_string(x->experts) +
         " experts do not split over an expert-parallel group of " +
         std::to_string(x->ep));
  x->local = x->experts / x->ep;
  // The dispatch's kernels ran on this op's stream, after its waits for the
  // router's: toHost copies on that stream and waits for the copy.
  std::vector<int32_t> idx(size_t(indices.numel()));
  dev->toHost(idx.data(), indices.data, indices.bytes());
  x->sent.assign(size_t(x->experts), 0);
  for (int32_t e : idx) {
    if (e < 0 || e >= x->experts)
      fail("op " + std::to_string(op.index) + ": expert index " +
           std::to_string(e) + " is out of range [0, " +
           std::to_string(x->experts) + ")");
    ++x->sent[size_t(e)];
  }
  setExchange(op.outputs.at(0), std::move(x));
}

void Executor::Impl::startAllToAll(const PlanOp &op) {
  auto w = phase->waitOf.find(op.index);
  if (w == phase->waitOf.end())
    fail("op " + std::to_string(op.index) + " has no wait");
  const PlanOp &wait = *w->second;
  if (op.inputs.size() != 1 || wait.outputs.size() != 1)
    fail("op " + std::to_string(op.index) +
         ": an all_to_all_start sends one value and its wait yields one");
  std::shared_ptr<TokenExchange> x = exchangeOf(op, op.inputs[0]);
  Communicator &c = groupComm(op.group);
  if (c.size() != x->ep)
    fail("op " + std::to_string(op.index) + ": an all-to-all over " +
         std::to_string(c.size()) + " ranks for an expert-parallel size of " +
         std::to_string(x->ep));
  AllToAllPurpose purpose = op.attrsAs<AllToAllAttrs>().purpose;
  // Towards the experts (dispatch, the combine's gradient): dispatch-order
  // rows go out by the peers' experts. Back (combine, the experts' input
  // gradient): the received rows return to their sources.
  bool toExperts = purpose == AllToAllPurpose::Dispatch ||
                   purpose == AllToAllPurpose::CombineGrad;
  Tensor in = value(op.inputs[0]), out = value(wait.outputs[0]);
  int64_t h = in.dim(-1);
  Pending p;
  p.via = &c;
  StreamScheduler::Ticket ticket = scheduler.awaitTicket(op);
  dev->useStreamFor(c);
  CollectiveArrival *arrival = arrive(op);
  if (!x->counted) {
    // Each peer's count for each of its local experts, as the router
    // decided them here.
    std::optional<std::vector<int64_t>> received =
        exchangeExpertCounts(c, x->sent, label(op), scheduler.failedFlag());
    if (!received)
      throw ExecError("stopped: another stream failed");
    x->received = std::move(*received);
    x->counted = true;
  }
  std::vector<int64_t> sendRows(size_t(x->ep)), recvRows(size_t(x->ep));
  for (int64_t r = 0; r < x->ep; ++r) {
    sendRows[size_t(r)] = toExperts ? x->sentTo(r) : x->receivedFrom(r);
    recvRows[size_t(r)] = toExperts ? x->receivedFrom(r) : x->sentTo(r);
  }
  int64_t sending = std::accumulate(sendRows.begin(), sendRows.end(), 0LL);
  int64_t receiving = std::accumulate(recvRows.begin(), recvRows.end(), 0LL);
  if (sending > in.rows())
    fail("op " + std::to_string(op.index) + " (" +
         allToAllPurposeName(purpose) + "): sends " + std::to_string(sending) +
         " rows of a value of " + std::to_string(in.rows()));
  if (receiving > out.rows())
    fail("op " + std::to_string(op.index) + " (" +
         allToAllPurposeName(purpose) +
         (op.where.empty() ? "" : ", " + op.where) +
         "): this rank's experts receive " + std::to_string(receiving) +
         " rows this micro-step, more than the " + std::to_string(out.rows()) +
         " its receive buffer holds: the plan sizes it for the token "
         "distribution it assumes (max_expert_share); generate the model with "
         "a larger zeroc gen --expert-load (--expert-load worst holds any "
         "routing)");
  std::vector<int64_t> sendCounts(sendRows), recvCounts(recvRows);
  for (int64_t &n : sendCounts)
    n *= h;
  for (int64_t &n : recvCounts)
    n *= h;
  p.handles.push_back(c.allToAllV(in.data, sendCounts, out.data, recvCounts,
                                  in.dtype, label(op)));
  { StreamScheduler::Ticket issuedAll = std::move(ticket); }
  setExchange(wait.outputs[0], x);
  complete(p);
  arrivals.done(arrival);
}

} // namespace zeroc::runtime
