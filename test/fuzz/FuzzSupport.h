//===- FuzzSupport.h - What the fuzz targets share -------------*- C++ -*-===//
//
// The readers that take a path (checkpoints, safetensors, token files) are
// fuzzed through that path, as the tools call them: the input is written to
// a scratch file of this process first. The file is under $TMPDIR (or
// /tmp), one directory per process, removed at exit.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_TEST_FUZZ_FUZZSUPPORT_H
#define ZEROC_TEST_FUZZ_FUZZSUPPORT_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

namespace zeroc::fuzz {

/// A per-process scratch directory, created on first use and removed when
/// the process exits normally.
inline const std::string &scratchDir() {
  struct Scratch {
    std::string dir;
    Scratch() {
      const char *tmp = std::getenv("TMPDIR");
      dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/zeroc-fuzz-" +
            std::to_string(::getpid());
      ::mkdir(dir.c_str(), 0700);
    }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

/// Writes `data` to `<scratchDir>/<name>` and returns the path.
inline std::string writeScratch(const std::string &name, const uint8_t *data,
                                size_t size) {
  std::string path = scratchDir() + "/" + name;
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    std::abort(); // the scratch directory must be writable
  if (size && std::fwrite(data, 1, size, f) != size)
    std::abort();
  std::fclose(f);
  return path;
}

} // namespace zeroc::fuzz

#endif // ZEROC_TEST_FUZZ_FUZZSUPPORT_H
