//===- Calibrate.h - zerorun --calibrate: measure this machine --*- C++ -*-===//
//
// Measures what the cost model (docs/cost-model.md) uses, through the
// executor's own kernels, scheduler and communicator, and writes a cluster
// file (docs/cluster-format.md) whose measured figures say "measured on
// HOST at DATE by zerorun --calibrate". Under mpirun every rank measures at
// once, as they run a plan (sharing cores, memory and the communicator);
// each figure is the slowest rank's. docs/zerorun.md, "Calibration".
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TOOLS_ZERORUN_CALIBRATE_H
#define ZEROC_TOOLS_ZERORUN_CALIBRATE_H

#include <string>

namespace zeroc::runtime {

class Communicator;
class Device;

/// Writes the cluster file to `output` (rank 0). `scratchDir`: where the
/// NVMe test file goes. Returns the exit status.
int calibrate(Communicator &comm, Device &device, const std::string &output,
              const std::string &scratchDir);

} // namespace zeroc::runtime

#endif // ZEROC_TOOLS_ZERORUN_CALIBRATE_H
