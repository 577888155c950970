//===- SafetensorsFuzzer.cpp - The safetensors reader ---------------------===//
//
// What `zerorun --init-from` and the consolidator's round trip do with a
// safetensors file: open it (header length, JSON, dtypes, shapes,
// data_offsets tiling the data), then read every tensor, whole and in part.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "zeroc/Checkpoint/Safetensors.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = zeroc::fuzz::writeScratch("model.safetensors", data, size);
  auto file = zeroc::SafetensorsFile::open(path);
  if (!file)
    return 0;
  for (const zeroc::SafetensorsEntry &e : file->tensors()) {
    if (e.numel > (int64_t(1) << 20))
      continue; // the data must be in the file, so this is a large input
    (void)file->read(e);
    (void)file->read(e, {e.numel / 2, e.numel});
  }
  return 0;
}
