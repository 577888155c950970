//===- Replay.cpp - Replays fuzz inputs through a target, without libFuzzer
//-===//
//
// Linked with one fuzz target's source and built with the ordinary compiler:
// `zeroc-fuzz-replay-TARGET DIR|FILE...` feeds every file (directories
// recursively, in name order) to LLVMFuzzerTestOneInput, as libFuzzer
// would. ctest runs it over test/fuzz/regressions/TARGET/ and the seed
// corpus, so that every input a fuzzer once broke zeroc with stays fixed.
// A crash, a sanitizer report or a hang fails the test.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace fs = std::filesystem;

int main(int argc, char **argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto &e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path &f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    // A copy of exactly the input's size, so that a read past its end is
    // one under a sanitizer.
    std::vector<uint8_t> input(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("replay: %zu input(s) ran\n", files.size());
  return files.empty() ? 1 : 0;
}
