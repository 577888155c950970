//===- ManifestFuzzer.cpp - The checkpoint manifest reader ----------------===//
//
// What `zerorun --resume` and `zeroc consolidate` do with a checkpoint's
// manifest.json: readCheckpointManifest on <dir>/<tag>/manifest.json.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "zeroc/Checkpoint/Checkpoint.h"

#include <cstdint>
#include <string>

#include <sys/stat.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string dir = [] {
    std::string d = zeroc::fuzz::scratchDir() + "/ckpt";
    ::mkdir(d.c_str(), 0700);
    ::mkdir((d + "/step1").c_str(), 0700);
    return d;
  }();
  zeroc::fuzz::writeScratch("ckpt/step1/manifest.json", data, size);
  auto manifest = zeroc::readCheckpointManifest(dir, "step1");
  (void)manifest;
  return 0;
}
