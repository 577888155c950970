//===- CudaBackend.h - The CUDA backend, loaded when asked for --*- C++ -*-===//
//
// The CUDA device, the CUDA kernels and the NCCL communicator live in a
// shared library, libzerorun-cuda.so, that zerorun opens (dlopen) only for
// `--device cuda`: a CPU run or `zerorun --help` loads no CUDA library.
// The library's one entry point, zeroc_cuda_backend_v1, hands back the
// functions below; everything else it uses (Device, Communicator, the CPU
// kernels, the memory counter) it takes from the executable that loads it,
// which exports its symbols (so there is one copy of each).
//
// Where zerorun looks (first that exists): $ZERORUN_CUDA_BACKEND (a path to
// the library; set for a test or an unusual install), then
// <zerorun's directory>/../lib/libzerorun-cuda.so (the build tree and an
// install), then the dynamic loader's own search (LD_LIBRARY_PATH).
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_CUDABACKEND_H
#define ZEROC_RUNTIME_EXEC_CUDABACKEND_H

#include <memory>
#include <string>

namespace zeroc::runtime {

class Device;
class Communicator;

/// What the library hands back. `abiVersion` guards against a library of
/// another build.
struct CudaBackend {
  static constexpr int kAbiVersion = 1;
  int abiVersion = kAbiVersion;
  /// The rank's GPU (nullptr and a reason in `why` where none is usable).
  std::unique_ptr<Device> (*makeDevice)(std::string &why) = nullptr;
  /// The NCCL communicator over MPI_COMM_WORLD (NcclCommunicator::world);
  /// throws std::runtime_error on failure.
  std::unique_ptr<Communicator> (*ncclWorld)() = nullptr;
};

/// Opens the CUDA backend (once per process); nullptr and, in `why`, which
/// library could not be loaded and why (the loader's message names a
/// missing dependency such as libcublasLt.so.13).
const CudaBackend *loadCudaBackend(std::string &why);

/// The library's file name.
inline constexpr const char *kCudaBackendLibrary = "libzerorun-cuda.so";

} // namespace zeroc::runtime

/// The entry point of libzerorun-cuda.so.
extern "C" const zeroc::runtime::CudaBackend *zeroc_cuda_backend_v1();

#endif // ZEROC_RUNTIME_EXEC_CUDABACKEND_H
