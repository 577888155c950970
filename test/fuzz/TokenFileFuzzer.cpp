//===- TokenFileFuzzer.cpp - The token-file reader and the data loader ----===//
//
// What `zerorun --data FILE` does with a token file: DataLoader::open (the
// header or the headerless *.u16 / *.u32 naming, the size) and load the
// first micro-steps. The first input byte picks the file name's form and
// the batch shape, so each format is fuzzed.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "data/DataLoader.h"

#include <cstdint>
#include <vector>

using namespace zeroc::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  static const char *const names[] = {"tokens.bin", "tokens.u16", "tokens.u32",
                                      "tokens"};
  uint8_t pick = data[0];
  std::string path =
      zeroc::fuzz::writeScratch(names[pick & 3], data + 1, size - 1);
  BatchShape shape;
  shape.worldSize = 1 + (pick >> 2 & 1);
  shape.rank = shape.worldSize - 1;
  shape.gradientAccumulation = 1 + (pick >> 3 & 1);
  shape.microBatch = 1 + (pick >> 4 & 1);
  shape.seqLen = 1 + (pick >> 5);
  auto loader = DataLoader::open(path, shape, 1000);
  if (!loader)
    return 0;
  size_t n = size_t(shape.microBatch * shape.seqLen);
  std::vector<int32_t> inputs(n), targets(n);
  for (int64_t step = 0; step < 3; ++step)
    for (int64_t micro = 0; micro < shape.gradientAccumulation; ++micro)
      (void)loader->load(step, micro, inputs.data(), targets.data());
  return 0;
}
