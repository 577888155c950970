//===- NvmeFile.h - A tensor's bytes in a file on an NVMe path --*- C++ -*-===//
//
// ZeRO-Infinity's NVMe offload: a persistent tensor placed on `nvme` lives in
// a file under the DeepSpeed config's `nvme_path`, and is read into a host
// buffer only while an op uses it (then written back if the op changed it).
// Files are read and written whole with direct I/O (O_DIRECT: no page-cache
// copy, 4 KiB-aligned buffers, offsets and sizes) where the filesystem
// allows it, and with buffered I/O where it does not (tmpfs, some network
// filesystems). Errors name the file and the system error.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_OFFLOAD_NVMEFILE_H
#define ZEROC_RUNTIME_OFFLOAD_NVMEFILE_H

#include "zeroc/Checkpoint/FileIO.h"
#include "zeroc/Plan/PlanOps.h"
#include "zeroc/Support/Diagnostic.h"

#include <cstdint>
#include <memory>
#include <string>

namespace zeroc::runtime {

/// Alignment of direct-I/O buffers, offsets and sizes.
inline constexpr int64_t kDirectIoAlignment = kNvmeBlockBytes;

/// A host buffer suitable for NvmeFile::read/write: kDirectIoAlignment
/// aligned, its size rounded up to a multiple of it, zero-filled.
std::shared_ptr<char> allocateIoBuffer(int64_t bytes);
/// `bytes` rounded up to the direct-I/O alignment.
inline int64_t ioBytes(int64_t bytes) { return nvmeBlockBytes(bytes); }

class NvmeFile {
public:
  /// Creates (truncating) `dir/name` holding `bytes` zero bytes. `dir` must
  /// exist. The file is removed when the NvmeFile is destroyed. With
  /// `tryDirect` false, buffered I/O only (what a filesystem refusing
  /// O_DIRECT gets).
  static Expected<std::unique_ptr<NvmeFile>> create(const std::string &dir,
                                                    const std::string &name,
                                                    int64_t bytes,
                                                    bool tryDirect = true);
  ~NvmeFile();
  NvmeFile(const NvmeFile &) = delete;
  NvmeFile &operator=(const NvmeFile &) = delete;

  /// The whole tensor into / from `buffer` (from allocateIoBuffer(bytes())).
  Expected<Done> read(void *buffer) const;
  Expected<Done> write(const void *buffer);

  int64_t bytes() const { return size; }
  const std::string &path() const { return filePath; }
  /// Whether the file is accessed with O_DIRECT.
  bool direct() const { return isDirect; }
  /// Bytes moved so far.
  int64_t bytesRead() const { return readTotal; }
  int64_t bytesWritten() const { return writeTotal; }

private:
  NvmeFile() = default;
  std::string filePath;
  int fd = -1;
  int64_t size = 0;
  bool isDirect = false;
  mutable int64_t readTotal = 0;
  int64_t writeTotal = 0;
};

} // namespace zeroc::runtime

#endif // ZEROC_RUNTIME_OFFLOAD_NVMEFILE_H
