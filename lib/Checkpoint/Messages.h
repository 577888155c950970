//===- Messages.h - Pieces of checkpoint error messages ---------*- C++ -*-===//
//
// Private to ZerocCheckpoint: how its diagnostics print shapes and lists of
// tensor names, in one place.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CHECKPOINT_MESSAGES_H
#define ZEROC_CHECKPOINT_MESSAGES_H

#include "zeroc/Support/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zeroc {

/// "'a', 'b' and 3 more": the first eight names, quoted.
inline std::string quotedNames(const std::vector<std::string> &names) {
  constexpr size_t kShown = 8;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i)
    s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > kShown)
    s += " and " + std::to_string(names.size() - kShown) + " more";
  return s;
}

/// What differs between two lists of tensors, joined with "; " into one
/// message; after eight problems, only how many more there are.
class Differences {
public:
  void add(const std::string &problem) {
    if (++count <= 8)
      text += (text.empty() ? "" : "; ") + problem;
  }
  /// prefix + "'a', 'b'" + suffix, when `names` is not empty.
  void addNames(const std::string &prefix,
                const std::vector<std::string> &names,
                const std::string &suffix) {
    if (!names.empty())
      add(prefix + quotedNames(names) + suffix);
  }
  bool empty() const { return count == 0; }
  std::string str() const {
    return count <= 8 ? text
                      : text + "; and " + std::to_string(count - 8) + " more";
  }

private:
  std::string text;
  size_t count = 0;
};

} // namespace zeroc

#endif // ZEROC_CHECKPOINT_MESSAGES_H
