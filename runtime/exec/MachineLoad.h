//===- MachineLoad.h - What else used the CPUs meanwhile --------*- C++ -*-===//
//
// A timing describes the machine as it was while it ran. On a shared
// machine other processes, and on a virtual one the hypervisor (steal
// time), take cores from it: zerorun --calibrate under a concurrent build
// priced a 150-200 ms step at 4.6 s (bench/RESULTS.md, run 16). This
// measures, over an interval, the share of the machine's CPU time that went
// elsewhere, from the kernel's counters (/proc/stat) less the CPU time of
// the processes being measured.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_MACHINELOAD_H
#define ZEROC_RUNTIME_EXEC_MACHINELOAD_H

#include <optional>
#include <string>
#include <string_view>

namespace zeroc::runtime {

/// The machine's CPU time so far, in seconds over all cores.
struct CpuTimes {
  double busy = 0;  ///< user, nice, system, irq and softirq
  double steal = 0; ///< taken by the hypervisor while runnable
};

/// The "cpu" line of /proc/stat's text (`text`), in clock ticks of `hz`;
/// nullopt when the line is missing or malformed.
std::optional<CpuTimes> parseProcStat(std::string_view text, double hz);

/// This machine's CpuTimes now; nullopt where /proc/stat cannot be read.
std::optional<CpuTimes> machineCpuTimes();

/// This process's CPU time so far (all its threads), in seconds.
double processCpuSeconds();

/// Over an interval of `wall` seconds on `cores` cores: the share of the
/// machine's CPU time (0-1) other processes used (`before`/`after`, less
/// `ownSeconds`, the measured processes' CPU time) and the hypervisor took.
struct ForeignLoad {
  double others = 0;
  double steal = 0;
};
ForeignLoad foreignLoad(const CpuTimes &before, const CpuTimes &after,
                        double ownSeconds, double wall, int cores);

/// "other processes used 45% of the 2 cores, the hypervisor took 3%".
std::string describeForeignLoad(const ForeignLoad &load, int cores);

/// Whether `load` is enough to move timings: other processes at 10% of the
/// cores or more, or steal at 5% or more.
bool disturbs(const ForeignLoad &load);

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_EXEC_MACHINELOAD_H
