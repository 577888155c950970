//===- ClusterFuzzer.cpp - The cluster file reader ------------------------===//
//
// What `zeroc advise --cluster FILE` and `zeroc inspect --cluster FILE` do
// with the file: read it, write it back (`toJson`), and check a world size
// against it.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Config/Cluster.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto doc = zeroc::JsonDocument::parse(
      std::string(reinterpret_cast<const char *>(data), size), "cluster.json");
  if (!doc)
    return 0;
  auto cluster = zeroc::readCluster(*doc);
  if (!cluster)
    return 0;
  (void)zeroc::toJson(*cluster).dump();
  (void)zeroc::checkFits(*cluster, 8);
  (void)zeroc::withNodes(*cluster, 2);
  return 0;
}
