//===- DsConfigFuzzer.cpp - The DeepSpeed config reader -------------------===//
//
// What `zeroc MODEL --config ds.json --world-size 4` does with the file: read
// and resolve it against a GPT-2-sized model, then write the resolved config
// as the plan does. The writer's promise (DeepSpeedConfig.h: reading its
// output back gives an equal config) is checked too.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Config/DeepSpeedConfig.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto doc = zeroc::JsonDocument::parse(
      std::string(reinterpret_cast<const char *>(data), size), "ds.json");
  if (!doc)
    return 0;
  zeroc::ConfigContext ctx;
  ctx.worldSize = 4;
  ctx.hiddenSize = 768;
  ctx.modelBatch = 2;
  auto cfg = zeroc::readDeepSpeedConfig(*doc, ctx);
  if (!cfg)
    return 0;
  nlohmann::json written = zeroc::toDeepSpeedJson(*cfg);
  auto again = zeroc::JsonDocument::parse(written.dump(2), "resolved.json");
  if (!again)
    std::abort();
  auto back = zeroc::readDeepSpeedConfig(*again, ctx);
  if (!back || *back != *cfg) {
    std::fprintf(stderr,
                 "the resolved config does not read back equal:\n%s\n%s\n",
                 written.dump(2).c_str(),
                 back ? "(differs)" : back.error().str().c_str());
    std::abort();
  }
  return 0;
}
