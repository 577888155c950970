//===- CudaLoader.cpp - Opens libzerorun-cuda.so for --device cuda --------===//

#include "exec/CudaBackend.h"
#include "exec/Device.h"

#include <cstdlib>
#include <dlfcn.h>
#include <limits.h>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace zeroc::runtime {

namespace {

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// <directory of the running executable>/../lib/libzerorun-cuda.so, or ""
/// where /proc/self/exe cannot be read.
std::string besideExecutable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return "";
  std::string exe(buf, size_t(n));
  size_t slash = exe.rfind('/');
  if (slash == std::string::npos)
    return "";
  return exe.substr(0, slash) + "/../lib/" + kCudaBackendLibrary;
}

struct Loaded {
  const CudaBackend *backend = nullptr;
  std::string why;
};

Loaded open() {
  Loaded l;
#ifndef ZEROC_CUDA_BACKEND_BUILT
  l.why = "this zerorun was built without the CUDA backend (no CUDA toolkit "
          "with cuBLASLt and NCCL was found at configure time)";
  return l;
#else
  std::string path;
  if (const char *env = std::getenv("ZERORUN_CUDA_BACKEND"); env && *env) {
    path = env;
  } else {
    path = besideExecutable();
    if (path.empty() || !exists(path))
      path = kCudaBackendLibrary; // the loader's search path
  }
  void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = ::dlerror();
    l.why = "cannot load the CUDA backend " + path + ": " +
            (e ? e : "unknown error") +
            " (it needs the CUDA runtime, cuBLAS, cuBLASLt and NCCL "
            "libraries on the loader's path; ZERORUN_CUDA_BACKEND names "
            "another copy of " +
            kCudaBackendLibrary + ")";
    return l;
  }
  using Entry = const CudaBackend *(*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(h, "zeroc_cuda_backend_v1"));
  if (!entry) {
    l.why = "cannot load the CUDA backend " + path +
            ": it has no zeroc_cuda_backend_v1 (not a zerorun CUDA backend)";
    ::dlclose(h);
    return l;
  }
  const CudaBackend *b = entry();
  if (!b || b->abiVersion != CudaBackend::kAbiVersion || !b->makeDevice ||
      !b->ncclWorld) {
    l.why = "cannot load the CUDA backend " + path + ": ABI version " +
            std::to_string(b ? b->abiVersion : 0) + ", this zerorun needs " +
            std::to_string(CudaBackend::kAbiVersion) +
            " (a library of another build)";
    return l; // left open: it may hold state
  }
  l.backend = b;
  return l;
#endif
}

} // namespace

const CudaBackend *loadCudaBackend(std::string &why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = open(); });
  if (!loaded.backend)
    why = loaded.why;
  return loaded.backend;
}

std::unique_ptr<Device> makeCudaDevice(std::string &why) {
  const CudaBackend *b = loadCudaBackend(why);
  if (!b)
    return nullptr;
  return b->makeDevice(why);
}

} // namespace zeroc::runtime
