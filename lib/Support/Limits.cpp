//===- Limits.cpp - The machine's physical memory -------------------------===//

#include "zeroc/Support/Limits.h"

#include <unistd.h>

namespace zeroc {

uint64_t physicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long pageSize = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || pageSize <= 0)
    return 0;
  return uint64_t(pages) * uint64_t(pageSize);
}

std::optional<NestingError> checkModelNesting(std::string_view text) {
  int depth = 0;
  unsigned line = 1, column = 1;
  for (size_t i = 0; i < text.size(); ++i, ++column) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      column = 0;
    } else if (c == '"') {
      // A string literal: to its closing quote or the line's end.
      for (++i, ++column; i < text.size() && text[i] != '"' && text[i] != '\n';
           ++i, ++column)
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
          ++i;
          ++column;
        }
      if (i < text.size() && text[i] == '\n') {
        ++line;
        column = 0;
      }
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > limits::kMaxModelNesting)
        return NestingError{
            line, column,
            "brackets nested more than " +
                std::to_string(limits::kMaxModelNesting) +
                " deep (a model nests a handful; MLIR's parser would "
                "overflow its stack)"};
    } else if (c == ')' || c == ']' || c == '}' ||
               (c == '>' && !(i > 0 && text[i - 1] == '-'))) {
      // `->` is an arrow, not a bracket.
      depth = depth > 0 ? depth - 1 : 0;
    }
  }
  return std::nullopt;
}

} // namespace zeroc
