//===- Format.h - Numbers as people read them -------------------*- C++ -*-===//
//
// Digit grouping, binary/decimal units and durations for the tables that zeroc
// prints, and the small string tests they need. MLIR-free; shared by every
// tool and the runtime's logs.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_FORMAT_H
#define ZEROC_SUPPORT_FORMAT_H

#include <cstdint>
#include <string>
#include <string_view>

namespace zeroc {

/// 124439808 -> "124,439,808".
std::string groupDigits(int64_t value);

/// Bytes in binary units: 1536 -> "1.50 KiB", 3 -> "3 B".
std::string humanBytes(double bytes);

/// Counts in decimal units: 124439808 -> "124.44 M", 6.7e12 -> "6.70 T".
std::string humanCount(double count);

/// Seconds as the inspect tables print them: "1.234 s", "12.35 ms",
/// "3.4 us", "0 s".
std::string humanSeconds(double seconds);

/// Whether `s` ends with `suffix` (C++17 has no std::string::ends_with).
inline bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

} // namespace zeroc

#endif // ZEROC_SUPPORT_FORMAT_H
