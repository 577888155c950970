//===- MachineLoad.cpp - What else used the machine's CPUs meanwhile ------===//

#include "exec/MachineLoad.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

namespace zeroc::runtime {

std::optional<CpuTimes> parseProcStat(std::string_view text, double hz) {
  if (!(hz > 0))
    return std::nullopt;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    if (!(fields >> name) || name != "cpu")
      continue;
    // user nice system idle iowait irq softirq steal (Linux >= 2.6.11).
    double v[8];
    for (double &x : v)
      if (!(fields >> x) || x < 0)
        return std::nullopt;
    return CpuTimes{(v[0] + v[1] + v[2] + v[5] + v[6]) / hz, v[7] / hz};
  }
  return std::nullopt;
}

std::optional<CpuTimes> machineCpuTimes() {
  std::ifstream f("/proc/stat");
  if (!f)
    return std::nullopt;
  std::string first;
  std::getline(f, first);
  return parseProcStat(first, double(sysconf(_SC_CLK_TCK)));
}

double processCpuSeconds() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0)
    return 0;
  auto s = [](const timeval &t) { return double(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

ForeignLoad foreignLoad(const CpuTimes &before, const CpuTimes &after,
                        double ownSeconds, double wall, int cores) {
  if (!(wall > 0) || cores < 1)
    return {};
  double capacity = wall * double(cores);
  double others = (after.busy - before.busy) - ownSeconds;
  double steal = after.steal - before.steal;
  auto share = [&](double s) { return std::clamp(s / capacity, 0.0, 1.0); };
  return {share(others), share(steal)};
}

std::string describeForeignLoad(const ForeignLoad &load, int cores) {
  auto percent = [](double s) {
    return std::to_string(int(std::lround(s * 100))) + "%";
  };
  return "other processes used " + percent(load.others) + " of the " +
         std::to_string(cores) + " core" + (cores == 1 ? "" : "s") +
         ", the hypervisor took " + percent(load.steal);
}

bool disturbs(const ForeignLoad &load) {
  return load.others >= 0.10 || load.steal >= 0.05;
}

} // namespace zeroc::runtime
