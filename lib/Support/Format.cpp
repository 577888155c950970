//===- Format.cpp - Numbers as people read them ---------------------------===//

#include "zeroc/Support/Format.h"

#include <cmath>
#include <cstdio>

namespace zeroc {

std::string groupDigits(int64_t value) {
  uint64_t magnitude = static_cast<uint64_t>(value);
  if (value < 0)
    magnitude = 0 - magnitude;
  std::string digits = std::to_string(magnitude);
  std::string out;
  int count = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (count && count % 3 == 0)
      out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++count;
  }
  return value < 0 ? "-" + out : out;
}

static std::string scaled(double value, double base, const char *const *units,
                          int numUnits, bool integerFirst) {
  int unit = 0;
  double v = std::fabs(value);
  while (v >= base && unit + 1 < numUnits) {
    v /= base;
    ++unit;
  }
  char buffer[64];
  if (unit == 0 && integerFirst)
    std::snprintf(buffer, sizeof buffer, "%.0f %s", value, units[0]);
  else
    std::snprintf(buffer, sizeof buffer, "%.2f %s", value < 0 ? -v : v,
                  units[unit]);
  std::string s = buffer;
  if (!s.empty() && s.back() == ' ')
    s.pop_back();
  return s;
}

std::string humanBytes(double bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return scaled(bytes, 1024.0, units, 6, true);
}

std::string humanCount(double count) {
  static const char *const units[] = {"", "K", "M", "G", "T", "P", "E"};
  return scaled(count, 1000.0, units, 7, true);
}

std::string humanSeconds(double seconds) {
  char text[48];
  if (seconds >= 1)
    std::snprintf(text, sizeof text, "%.3f s", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  else if (seconds > 0)
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  else
    return "0 s";
  return text;
}

} // namespace zeroc
