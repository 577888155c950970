//===- GradientDump.cpp - A step's gradients as a safetensors file --------===//

#include "exec/GradientDump.h"

#include "zeroc/Checkpoint/Safetensors.h"

#include <cstdio>

namespace zeroc::runtime {

std::string gradientDumpRefusal(const Plan &plan) {
  if (plan.stage != 0 || plan.worldSize != 1)
    return "--dump-grads needs a stage-0 plan for one rank, where every "
           "gradient is whole on its rank; this plan is stage " +
           std::to_string(plan.stage) + " for " +
           std::to_string(plan.worldSize) +
           " rank(s) (compile the model with zero_optimization.stage 0 and "
           "--world-size 1)";
  if (const PlanPhase *micro = plan.findPhase(PhaseKind::MicroStep))
    for (const PlanOp &op : micro->ops)
      if (op.kind == OpKind::BackwardSeed &&
          op.attrsAs<BackwardSeedAttrs>().lossScaling)
        return "--dump-grads needs unscaled gradients, but this plan scales "
               "the loss (fp16); compile it for f32 or bf16";
  return {};
}

Expected<DumpedGradients> dumpGradients(Executor &e, const DataLoader &data,
                                        int64_t step, const std::string &path) {
  const Plan &plan = e.plan();
  if (std::string why = gradientDumpRefusal(plan); !why.empty())
    return Diagnostic{"", 0, 0, why};
  auto loss = e.runMicroSteps(data, step);
  if (!loss)
    return loss.error();
  std::vector<ConstBytes> local = e.tensorData();
  std::vector<SafetensorsTensor> grads;
  DumpedGradients out;
  out.loss = *loss;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlanTensor &t = plan.tensors[i];
    if (t.role != TensorRole::Grad)
      continue;
    // Stage 0 on one rank: local_numel == numel, no flat groups.
    grads.push_back({t.of, t.dtype, t.shape, local[i]});
    out.parameters.push_back(t.of);
  }
  char lossText[32];
  std::snprintf(lossText, sizeof lossText, "%.17g", out.loss);
  auto ok = writeSafetensors(path, grads,
                             {{"format", "pt"},
                              {"zeroc_loss", lossText},
                              {"zeroc_step", std::to_string(step + 1)}});
  if (!ok)
    return ok.error();
  return out;
}

} // namespace zeroc::runtime
