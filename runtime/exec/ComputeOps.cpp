//===- ComputeOps.cpp - Model ops, reads, accumulation, copies ------------===//
//
// The ops that are neither collectives nor optimizer steps: model ops
// (forward and backward) through the device's kernels (exec/Dispatch.h),
// with the state a forward op saves for its backward op; views of
// persistent tensors; gradient accumulation and zeroing; copies between
// placements (fetches of offloaded parameters, copies of updated masters).
//
//===----------------------------------------------------------------------===//

#include "exec/ExecutorImpl.h"

namespace zeroc::runtime {

using namespace exec;

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

// A forward op's saved state (statistics, probabilities) is one of its
// outputs and its backward op's last input: plain values of the plan.
void Executor::Impl::compute(const PlanOp &op) {
  std::vector<Tensor> in, out;
  for (int64_t id : op.inputs)
    in.push_back(value(id));
  for (int64_t id : op.outputs)
    out.push_back(value(id));
  StepContext step;
  step.lossScale = lossState.scale;
  step.lossTokens = lossTokens;
  step.documents = documents.data && documentAttention ? &documents : nullptr;
  step.positions = documents.data && documentPositions ? &documents : nullptr;
  // Expert parallelism: the local experts work on the rows their dispatch
  // exchange delivered; the exchange's counts follow the rows (ExpertExchange).
  std::shared_ptr<TokenExchange> exchange;
  if (op.kind == OpKind::MoeLocalExperts ||
      op.kind == OpKind::MoeLocalExpertsBackward) {
    exchange = exchangeOf(op, op.inputs.at(0));
    if (!exchange->counted)
      fail("op " + std::to_string(op.index) +
           ": its rows were not exchanged by a dispatch all-to-all");
    step.expertRows = &exchange->received;
  } else if (op.kind == OpKind::MoeCombineBackward) {
    exchange = exchangeOf(op, op.inputs.at(1));
  }
  // Intermediates of a composite op (the mixture of experts): its planned
  // workspace, or tracked unplanned memory where the plan has none.
  std::vector<std::shared_ptr<char>> unplanned;
  char *scratch = workspace(op, modelOpScratchBytes(op, in, out), unplanned);
  std::optional<Status> status = dev->modelOp(op, in, out, step, scratch);
  if (!unplanned.empty()) {
    // Kernels may still run on the device's stream: kept to the phase's end.
    std::lock_guard<std::mutex> lock(inflightMutex);
    for (auto &p : unplanned)
      inflightScratch.push_back(std::move(p));
  }
  if (!status)
    fail("op " + std::to_string(op.index) + ": kind '" + op.kindName() +
         "' is not supported by the " + dev->name() + " executor");
  check(*status, op);
  if (op.kind == OpKind::MoeDispatch)
    countDispatch(op);
  else if (exchange)
    setExchange(op.outputs.at(0), std::move(exchange));
}

//===----------------------------------------------------------------------===//
// Persistent tensors as values, gradients
//===----------------------------------------------------------------------===//

void Executor::Impl::read(const PlanOp &op) {
  // A view of a persistent tensor: no copy.
  const PlanValue &v = *phase->valueInfo.at(op.outputs.at(0));
  Stored &s = tensor(op.tensors.at(0));
  if (v.dtype != s.info->dtype)
    fail("op " + std::to_string(op.index) + " reads " + s.info->name +
         " as a different dtype");
  phase->values.at(v.id).data = s.data.get();
}

void Executor::Impl::accumulate(const PlanOp &op) {
  Stored &s = tensor(op.tensors.at(0));
  Tensor g = value(op.inputs.at(0));
  Tensor acc = slice(s.view(), op.attrsAs<AccumulateAttrs>().offset, g.numel());
  check(dev->accumulate(acc, g), op);
}

void Executor::Impl::zeroGrads(const PlanOp &op) {
  for (const std::string &name : op.tensors)
    check(dev->zeroTensor(tensor(name).view()), op);
}

//===----------------------------------------------------------------------===//
// Copies between placements
//===----------------------------------------------------------------------===//

void Executor::Impl::startCopy(const PlanOp &op) {
  if (op.kind == OpKind::FetchStart) {
    auto w = phase->waitOf.find(op.index);
    if (w == phase->waitOf.end())
      fail("op " + std::to_string(op.index) + " has no wait");
    const PlanOp &wait = *w->second;
    const std::vector<std::string> &names =
        op.attrsAs<TensorListAttrs>().tensors;
    if (names.size() != wait.outputs.size())
      fail("op " + std::to_string(op.index) +
           ": fetch_start and its wait disagree on the tensor count");
    for (size_t i = 0; i < names.size(); ++i)
      check(dev->castTensor(tensor(names[i]).view(), value(wait.outputs[i])),
            op);
    return;
  }
  const std::vector<std::string> &src = op.attrsAs<CopyAttrs>().sources;
  const std::vector<std::string> &dst = op.attrsAs<CopyAttrs>().destinations;
  if (src.size() != dst.size())
    fail("op " + std::to_string(op.index) +
         ": copy_start needs as many "
         "sources as destinations");
  if (overflow)
    return;
  for (size_t i = 0; i < src.size(); ++i) {
    Tensor a = tensor(src[i]).view(), b = tensor(dst[i]).view();
    if (a.numel() == b.numel())
      check(dev->castTensor(a, b), op);
    else
      fail("op " + std::to_string(op.index) + ": copy_start from " + src[i] +
           " to " + dst[i] + " of different sizes is not supported yet");
  }
}

} // namespace zeroc::runtime
