//===- Safetensors.h - Reading and writing .safetensors files ---*- C++ -*-===//
//
// Hugging Face's safetensors format: an 8-byte little-endian header length
// N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin,
// end]}, ..., optional "__metadata__": {string: string}}), then the data,
// every byte of it belonging to exactly one tensor. This build knows the
// dtypes F32, BF16, F16 and I32. The reader checks the whole header against
// the file before anything is read from it; the writer pads the header with
// spaces to a multiple of 8 bytes and orders tensors largest element first,
// so every tensor starts aligned to its element size, as the Rust
// implementation does.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_CHECKPOINT_SAFETENSORS_H
#define ZEROC_CHECKPOINT_SAFETENSORS_H

#include "zeroc/Checkpoint/FileIO.h"
#include "zeroc/Support/DType.h"
#include "zeroc/Support/ShardLayout.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroc {

/// "F32", "BF16", "F16", "I32".
std::string_view safetensorsDTypeName(DType dtype);
std::optional<DType> parseSafetensorsDType(std::string_view name);

/// The reader's limit on the JSON header, as in the Rust implementation.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

/// A tensor of a file: its description and where its bytes are, relative
/// to the start of the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel = 1;
  uint64_t begin = 0, end = 0;
};

/// An open, checked safetensors file. Tensor data is read on demand, so a
/// rank reads only the part of each tensor it keeps.
class SafetensorsFile {
public:
  /// Reads and checks the header: its length against the file, the JSON
  /// (no duplicate keys), every entry's dtype, shape and data_offsets, and
  /// that the tensors tile the data exactly (no overlaps, no holes).
  static Expected<SafetensorsFile> open(const std::string &path);

  const std::string &path() const { return file.path(); }
  /// In data order.
  const std::vector<SafetensorsEntry> &tensors() const { return entries; }
  const SafetensorsEntry *find(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const { return meta; }
  /// Where the data section starts in the file: 8 + N.
  uint64_t dataStart() const { return start; }

  /// Elements [range.begin, range.end) of `entry`, raw, in its dtype.
  Expected<std::vector<std::byte>> read(const SafetensorsEntry &entry,
                                        ElementRange range) const;
  /// The whole tensor.
  Expected<std::vector<std::byte>> read(const SafetensorsEntry &entry) const {
    return read(entry, {0, entry.numel});
  }
  /// Bytes of tensor data read so far (what a rank's share costs).
  uint64_t bytesRead() const { return readBytes; }

private:
  FileHandle file;
  uint64_t start = 0;
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, size_t> byName;
  std::map<std::string, std::string> meta;
  mutable uint64_t readBytes = 0;
};

struct SafetensorsDeclaration {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// Writes a safetensors file atomically, tensor by tensor, so that a
/// whole model never has to be in memory at once.
class SafetensorsWriter {
public:
  static Expected<SafetensorsWriter>
  create(const std::string &path, std::vector<SafetensorsDeclaration> tensors,
         const std::map<std::string, std::string> &metadata = {},
         const WriteHooks &hooks = {});

  /// The order write() takes the tensors in: element size descending,
  /// declaration order within a size.
  const std::vector<SafetensorsDeclaration> &order() const { return decls; }
  /// The next tensor in order(), all of its bytes.
  Expected<Done> write(const std::string &name, ConstBytes data);
  /// After every tensor: fsync, rename, fsync the directory.
  Expected<Done> commit();

private:
  SafetensorsWriter(AtomicFileWriter writer) : writer(std::move(writer)) {}
  AtomicFileWriter writer;
  std::vector<SafetensorsDeclaration> decls;
  size_t next = 0;
};

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  ConstBytes data;
};

/// A whole file at once.
Expected<Done>
writeSafetensors(const std::string &path,
                 const std::vector<SafetensorsTensor> &tensors,
                 const std::map<std::string, std::string> &metadata = {},
                 const WriteHooks &hooks = {});

} // namespace zeroc

#endif // ZEROC_CHECKPOINT_SAFETENSORS_H
