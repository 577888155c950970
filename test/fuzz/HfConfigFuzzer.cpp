//===- HfConfigFuzzer.cpp - The Hugging Face config reader ----------------===//
//
// What `zeroc gen config.json` does with the file before it builds the IR:
// read it, then apply the batch shape (which checks the scale limits).
//
//===----------------------------------------------------------------------===//

#include "zeroc/Models/ModelSpec.h"

#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto doc = zeroc::JsonDocument::parse(
      std::string(reinterpret_cast<const char *>(data), size), "config.json");
  if (!doc)
    return 0;
  std::vector<std::string> notes;
  auto spec = zeroc::readHFConfig(*doc, &notes);
  if (!spec)
    return 0;
  auto shaped =
      zeroc::withBatchShape(*spec, std::nullopt, std::nullopt, std::nullopt);
  if (shaped)
    (void)shaped->parameterCount();
  return 0;
}
