//===- GradientDump.h - A step's gradients as a safetensors file -*- C++
//-*-===//
//
// `zerorun --dump-grads`: the gradient of the first step's loss with
// respect to every parameter, as the plan's compiled backward and the
// runtime's kernels compute it, written under the parameters' names, so
// that an independent implementation can check it (test/Runtime's
// grad-check scenario against finite differences of a float64 reference
// forward). Only for stage-0 plans on one rank, where every `grad` tensor
// holds its parameter's whole gradient once the micro-steps have run.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_GRADIENTDUMP_H
#define ZEROC_RUNTIME_EXEC_GRADIENTDUMP_H

#include "data/DataLoader.h"
#include "exec/Executor.h"

#include <string>
#include <vector>

namespace zeroc::runtime {

struct DumpedGradients {
  double loss = 0; ///< The step's loss (mean over its micro-steps).
  std::vector<std::string> parameters; ///< Written, in plan order.
};

/// Why `plan` cannot dump its gradients (empty: it can). The gradients must
/// be whole (stage 0, one rank) and unscaled (no fp16 loss scaling).
std::string gradientDumpRefusal(const Plan &plan);

/// Runs the micro-steps of step `step` (no optimizer step) and writes every
/// parameter's gradient, in the gradient's dtype, to `path` (atomically),
/// with metadata {"zeroc_loss", "zeroc_step"}; the loss is printed with 17
/// significant digits.
Expected<DumpedGradients> dumpGradients(Executor &executor,
                                        const DataLoader &data, int64_t step,
                                        const std::string &path);

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_GRADIENTDUMP_H
