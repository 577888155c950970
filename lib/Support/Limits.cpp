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

} // namespace zeroc
