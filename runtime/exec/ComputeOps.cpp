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
using dispatch::attrI;

//===----------------------------------------------------------------------===//
// Model ops and their saved state
//===----------------------------------------------------------------------===//

void Executor::Impl::compute(const PlanOp &op) {
  const std::string &k = op.kind;
  // Saved state is found again by the backward op of the same module: the
  // forward op's kind and `where` (its location) are the link.
  std::string savedKey = (k.size() > 9 && k.substr(k.size() - 9) == "_backward"
                              ? k.substr(0, k.size() - 9)
                              : k) +
                         "@" + op.where;
  SavedState st;
  if (op.savedOffset >= 0 && op.savedBytes > 0) {
    if (op.savedOffset + op.savedBytes > ex.arenaSize)
      fail("op " + std::to_string(op.index) +
           ": saved state outside the arena");
    st.mine = reinterpret_cast<float *>(arenaAt(op.savedOffset, op.savedBytes));
    st.mineBytes = op.savedBytes;
  }
  if (!op.where.empty())
    if (auto it = saved.find(savedKey); it != saved.end())
      st.forward = it->second;
  std::vector<Tensor> in, out;
  for (int64_t id : op.inputs)
    in.push_back(value(id));
  for (int64_t id : op.outputs)
    out.push_back(value(id));
  std::optional<Status> status = dev->modelOp(op, in, out, st, lossState.scale);
  if (!status)
    fail("op " + std::to_string(op.index) + ": kind '" + k +
         "' is not supported by the " + dev->name() + " executor");
  check(*status, op);
  if (st.kept && !op.where.empty())
    saved[savedKey] = st.mine;
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
  Tensor acc = slice(s.view(), attrI(op, "offset", 0), g.numel());
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
  if (op.kind == "fetch_start") {
    auto w = phase->waitOf.find(op.index);
    if (w == phase->waitOf.end())
      fail("op " + std::to_string(op.index) + " has no wait");
    const PlanOp &wait = *w->second;
    std::vector<std::string> names = tensorList(op, "tensors");
    if (names.size() != wait.outputs.size())
      fail("op " + std::to_string(op.index) +
           ": fetch_start and its wait disagree on the tensor count");
    for (size_t i = 0; i < names.size(); ++i)
      check(dev->castTensor(tensor(names[i]).view(), value(wait.outputs[i])),
            op);
    return;
  }
  std::vector<std::string> src = attrSList(op, "sources");
  std::vector<std::string> dst = attrSList(op, "destinations");
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
