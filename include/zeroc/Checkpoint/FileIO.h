//===- FileIO.h - Durable file writes and checked reads ---------*- C++ -*-===//
//
// The POSIX file handling under checkpoints and safetensors: a file is
// written beside its final name, fsynced, renamed over it, and its directory
// fsynced, so a crash leaves either the old file or the new one, never half
// of one. Tests inject crashes between those steps through WriteHooks.
// Errors are Diagnostics naming the file and the system's reason.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CHECKPOINT_FILEIO_H
#define ZEROC_CHECKPOINT_FILEIO_H

#include "zeroc/Support/Diagnostic.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zeroc {

/// The value of an Expected that succeeds with nothing to return.
struct Done {};

/// Bytes the caller owns, read-only (C++17 has no std::span).
struct ConstBytes {
  const std::byte *data = nullptr;
  size_t size = 0;
};
/// Bytes the caller owns, to be filled.
struct MutableBytes {
  std::byte *data = nullptr;
  size_t size = 0;
};
template <typename T> ConstBytes constBytesOf(const std::vector<T> &v) {
  return {reinterpret_cast<const std::byte *>(v.data()), v.size() * sizeof(T)};
}
template <typename T> MutableBytes mutableBytesOf(std::vector<T> &v) {
  return {reinterpret_cast<std::byte *>(v.data()), v.size() * sizeof(T)};
}

/// The steps of an atomic write, in order, where a test may crash it.
enum class WriteStep {
  TempPartlyWritten, ///< The temporary file holds half its bytes.
  TempWritten,       ///< The temporary file is complete, not yet fsynced.
  TempSynced,        ///< Fsynced, not yet renamed over the final name.
  Renamed,           ///< Renamed, the directory not yet fsynced.
};
const char *writeStepName(WriteStep step);

/// Crash injection for tests. When `crashAt(finalPath, step)` returns true
/// the write stops there, leaving the disk as a killed process would (the
/// temporary file stays), and reports an error.
struct WriteHooks {
  std::function<bool(const std::string &finalPath, WriteStep step)> crashAt;
};

/// "path: error: <what>: <strerror(err)>".
Diagnostic fileError(const std::string &path, const std::string &what, int err);

/// An open file descriptor, closed when it goes out of scope.
class FileHandle {
public:
  FileHandle() = default;
  explicit FileHandle(int fd, std::string path)
      : fd(fd), filePath(std::move(path)) {}
  FileHandle(FileHandle &&other) noexcept { *this = std::move(other); }
  FileHandle &operator=(FileHandle &&other) noexcept;
  FileHandle(const FileHandle &) = delete;
  FileHandle &operator=(const FileHandle &) = delete;
  ~FileHandle() { close(); }

  static Expected<FileHandle> openForReading(const std::string &path);
  Expected<uint64_t> size() const;
  /// Reads exactly `n` bytes at `offset`; a short file is an error that
  /// says how far the file reaches.
  Expected<Done> readAt(uint64_t offset, void *out, size_t n) const;

  const std::string &path() const { return filePath; }
  int descriptor() const { return fd; }
  void close();

private:
  int fd = -1;
  std::string filePath;
};

/// Writes a file by the atomic protocol: a temporary file `<final>.tmp` in
/// the same directory, then commit() fsyncs it, renames it over `<final>`
/// and fsyncs the directory. Destroyed uncommitted, it removes the
/// temporary file (unless a hook crashed it).
class AtomicFileWriter {
public:
  static Expected<AtomicFileWriter> create(const std::string &finalPath,
                                           const WriteHooks &hooks);
  AtomicFileWriter(AtomicFileWriter &&other) noexcept {
    *this = std::move(other);
  }
  AtomicFileWriter &operator=(AtomicFileWriter &&other) noexcept;
  ~AtomicFileWriter();

  /// Appends bytes.
  Expected<Done> write(const void *data, size_t n);
  /// Overwrites bytes already written (a header patched at the end).
  Expected<Done> writeAt(uint64_t offset, const void *data, size_t n);
  Expected<Done> commit();

  const std::string &finalPath() const { return target; }

private:
  AtomicFileWriter() = default;
  Expected<Done> crashIf(WriteStep step);

  FileHandle file;
  std::string target, temp;
  WriteHooks hooks;
  uint64_t written = 0;
  bool finished = false; ///< Committed, or crashed by a hook.
};

/// A small file (manifest, `latest`) by the atomic protocol.
Expected<Done> writeFileAtomically(const std::string &path,
                                   const std::string &content,
                                   const WriteHooks &hooks = {});
Expected<std::string> readWholeFile(const std::string &path);

/// mkdir -p; each directory created is made durable in its parent.
Expected<Done> makeDirectories(const std::string &path);
/// Fsyncs a directory so that renames and creations in it survive a crash.
Expected<Done> syncDirectory(const std::string &path);
bool pathExists(const std::string &path);
/// "a/b" + "c" -> "a/b/c".
std::string joinPath(const std::string &dir, const std::string &name);

} // namespace zeroc

#endif // ZEROC_CHECKPOINT_FILEIO_H
