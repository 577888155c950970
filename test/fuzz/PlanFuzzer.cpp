//===- PlanFuzzer.cpp - The plan reader and its semantic checks -----------===//
//
// What `zeroc inspect` and `zerorun` do with a plan file: readPlan (every
// field, op references, value ids, sizes, offsets inside the arena), then
// the inspector's and the memory summary's views of it.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Plan/Plan.h"
#include "zeroc/Plan/PlanInspect.h"
#include "zeroc/Plan/PlanMemory.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto doc = zeroc::JsonDocument::parse(
      std::string(reinterpret_cast<const char *>(data), size), "plan.json");
  if (!doc)
    return 0;
  auto plan = zeroc::readPlan(*doc);
  if (!plan)
    return 0;
  (void)zeroc::inspectText(*plan);
  (void)zeroc::inspectJson(*plan).dump();
  (void)zeroc::memoryText(zeroc::summarizeMemory(*plan));
  (void)zeroc::toJson(*plan).dump();
  return 0;
}
