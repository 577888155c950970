//===- Checkpoint.cpp - Per-rank checkpoints: save, finalize, load --------===//
//
// The shard file is a 64-byte header and then every tensor's local part at
// a 64-byte aligned offset, in plan order, the gaps zero. The header holds
// the CRC-32C of everything after it, so rank 0 finalizes a checkpoint by
// reading 64 bytes of each rank's file, not the whole of it.
//
//===----------------------------------------------------------------------===//

#include "zeroc/Checkpoint/Checkpoint.h"

#include "Messages.h"
#include "zeroc/Checkpoint/Crc32c.h"
#include "zeroc/Support/JsonReader.h"
#include "zeroc/Support/Limits.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <unistd.h>

using nlohmann::json;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint files are little-endian and written raw");

namespace zeroc {

namespace {

constexpr char kShardMagic[8] = {'Z', 'E', 'R', 'O', 'C', 'S', 'H', 'D'};
constexpr uint32_t kShardVersion = 1;
constexpr uint64_t kShardHeaderBytes = 64;
constexpr uint64_t kShardAlignment = 64;
constexpr const char *kManifestName = "manifest.json";

//===----------------------------------------------------------------------===//
// The shard file
//===----------------------------------------------------------------------===//

/// The 64-byte header, little-endian:
///   0 magic "ZEROCSHD"    8 u32 version     12 u32 header bytes (64)
///  16 u64 rank           24 u64 world size  32 u64 tensor count
///  40 u64 step           48 u64 data bytes (file size - 64)
///  56 u32 CRC-32C of the data               60 u32 CRC-32C of bytes 0..59
struct ShardHeader {
  int64_t rank = 0;
  int64_t worldSize = 0;
  int64_t tensorCount = 0;
  int64_t step = 0;
  uint64_t dataBytes = 0;
  uint32_t dataCrc = 0;
};

using HeaderBytes = std::array<std::byte, kShardHeaderBytes>;

template <typename T> void put(HeaderBytes &b, size_t at, T value) {
  std::memcpy(b.data() + at, &value, sizeof(T));
}
template <typename T> T get(const HeaderBytes &b, size_t at) {
  T value;
  std::memcpy(&value, b.data() + at, sizeof(T));
  return value;
}

HeaderBytes encodeHeader(const ShardHeader &h) {
  HeaderBytes b{};
  std::memcpy(b.data(), kShardMagic, 8);
  put<uint32_t>(b, 8, kShardVersion);
  put<uint32_t>(b, 12, static_cast<uint32_t>(kShardHeaderBytes));
  put<uint64_t>(b, 16, static_cast<uint64_t>(h.rank));
  put<uint64_t>(b, 24, static_cast<uint64_t>(h.worldSize));
  put<uint64_t>(b, 32, static_cast<uint64_t>(h.tensorCount));
  put<uint64_t>(b, 40, static_cast<uint64_t>(h.step));
  put<uint64_t>(b, 48, h.dataBytes);
  put<uint32_t>(b, 56, h.dataCrc);
  put<uint32_t>(b, 60, crc32c(0, b.data(), 60));
  return b;
}

Expected<ShardHeader> decodeHeader(const HeaderBytes &b,
                                   const std::string &path) {
  auto bad = [&](const std::string &message) {
    return Diagnostic{path, 0, 0, message};
  };
  if (std::memcmp(b.data(), kShardMagic, 8) != 0)
    return bad("not a zeroc checkpoint shard file (its first 8 bytes are not "
               "\"ZEROCSHD\")");
  uint32_t storedCrc = get<uint32_t>(b, 60), crc = crc32c(0, b.data(), 60);
  if (storedCrc != crc)
    return bad("the shard header is corrupt: its checksum is " +
               crc32cHex(storedCrc) + " but its bytes sum to " +
               crc32cHex(crc));
  if (uint32_t v = get<uint32_t>(b, 8); v != kShardVersion)
    return bad("shard file version " + std::to_string(v) +
               " is not supported by this build, which reads version " +
               std::to_string(kShardVersion));
  if (get<uint32_t>(b, 12) != kShardHeaderBytes)
    return bad("unexpected shard header size " +
               std::to_string(get<uint32_t>(b, 12)));
  ShardHeader h;
  h.rank = static_cast<int64_t>(get<uint64_t>(b, 16));
  h.worldSize = static_cast<int64_t>(get<uint64_t>(b, 24));
  h.tensorCount = static_cast<int64_t>(get<uint64_t>(b, 32));
  h.step = static_cast<int64_t>(get<uint64_t>(b, 40));
  h.dataBytes = get<uint64_t>(b, 48);
  h.dataCrc = get<uint32_t>(b, 56);
  return h;
}

Expected<ShardHeader> readHeader(const FileHandle &file) {
  HeaderBytes b;
  if (auto ok = file.readAt(0, b.data(), b.size()); !ok)
    return Diagnostic{file.path(), 0, 0,
                      "truncated: the file is shorter than the 64-byte "
                      "shard header"};
  return decodeHeader(b, file.path());
}

uint64_t alignUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

/// Where each tensor's local part starts in a shard file, and the size of
/// the file: tensors in order, each at a 64-byte boundary.
struct ShardFileLayout {
  std::vector<uint64_t> offsets;
  uint64_t fileBytes = kShardHeaderBytes;
};

ShardFileLayout layoutShardFile(const std::vector<PlanTensor> &tensors) {
  ShardFileLayout layout;
  for (const PlanTensor &t : tensors) {
    uint64_t offset = alignUp(layout.fileBytes, kShardAlignment);
    layout.offsets.push_back(offset);
    layout.fileBytes = offset + localBytes(t);
  }
  return layout;
}

//===----------------------------------------------------------------------===//
// Tags and paths
//===----------------------------------------------------------------------===//

Expected<Done> checkTag(const std::string &tag) {
  bool ok =
      !tag.empty() && tag.size() <= 200 && tag[0] != '.' && tag != kLatestTag;
  for (char c : tag)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                c == '_' || c == '-');
  if (ok)
    return Done{};
  return Diagnostic{"", 0, 0,
                    "invalid checkpoint tag \"" + tag +
                        "\": a tag is a directory name of letters, digits, "
                        "'.', '_' and '-', not starting with '.', and not "
                        "\"latest\""};
}

Expected<Done> checkRank(const Plan &plan, int64_t rank) {
  if (rank >= 0 && rank < plan.worldSize)
    return Done{};
  return Diagnostic{"", 0, 0,
                    "rank " + std::to_string(rank) +
                        " is out of range for a plan of world size " +
                        std::to_string(plan.worldSize)};
}

/// "master f32 [4, 3] sharded of 'w'": what must agree between a plan and
/// a checkpoint.
std::string describe(const PlanTensor &t) {
  std::string s = std::string(roleName(t.role)) + " " +
                  std::string(dtypeName(t.dtype)) + " " + shapeString(t.shape) +
                  (t.sharded ? " sharded" : " replicated");
  if (!t.of.empty())
    s += " of '" + t.of + "'";
  if (t.validRows)
    s += " with " + std::to_string(t.validRows) + " valid rows";
  return s;
}

//===----------------------------------------------------------------------===//
// The manifest
//===----------------------------------------------------------------------===//

json tensorJson(const CheckpointTensor &ct) {
  json j = tensorFieldsJson(ct.tensor, /*planFields=*/false);
  j["offset"] = ct.offset;
  j["bytes"] = ct.bytes;
  return j;
}

json manifestJson(const CheckpointManifest &m) {
  json tensors = json::array();
  for (const CheckpointTensor &t : m.tensors)
    tensors.push_back(tensorJson(t));
  json groups = json::array();
  for (const PlanFlatGroup &g : m.flatGroups)
    groups.push_back(flatGroupFieldsJson(g));
  json shards = json::array();
  for (const ShardRecord &s : m.shards)
    shards.push_back({{"rank", s.rank},
                      {"file", s.file},
                      {"bytes", s.bytes},
                      {"crc32c", crc32cHex(s.crc32c)}});
  const TrainingState &st = m.state;
  return {{"format", kCheckpointFormat},
          {"version", kCheckpointVersion},
          {"tag", m.tag},
          {"model", m.model},
          {"hf_config", m.hfConfig},
          {"world_size", m.worldSize},
          {"expert_parallel_size", m.expertParallelSize},
          {"stage", m.stage},
          {"training_state",
           {{"step", st.step},
            {"loss_scale", st.lossScale},
            {"loss_scale_good_steps", st.lossScaleGoodSteps},
            {"hysteresis_left", st.hysteresisLeft},
            {"skipped_steps", st.skippedSteps},
            {"data_position", st.dataPosition},
            {"extra", st.extra}}},
          {"shard_header_bytes", kShardHeaderBytes},
          {"shard_alignment", kShardAlignment},
          {"tensors", std::move(tensors)},
          {"flat_groups", std::move(groups)},
          {"shards", std::move(shards)}};
}

/// The manifest as people read it: keys in a fixed order, one tensor,
/// flat group or shard per line.
std::string manifestText(const json &m) {
  static const char *order[] = {"format",
                                "version",
                                "tag",
                                "model",
                                "hf_config",
                                "world_size",
                                "expert_parallel_size",
                                "stage",
                                "training_state",
                                "shard_header_bytes",
                                "shard_alignment",
                                "tensors",
                                "flat_groups",
                                "shards"};
  std::string text = "{";
  for (const char *key : order) {
    const json &value = m.at(key);
    text += std::string(text.size() > 1 ? ",\n" : "\n") + " \"" + key + "\": ";
    if (!value.is_array() || value.empty()) {
      text += value.dump();
      continue;
    }
    text += "[";
    for (size_t i = 0; i < value.size(); ++i)
      text += (i ? ",\n  " : "\n  ") + value[i].dump();
    text += "\n ]";
  }
  return text + "\n}\n";
}

/// Reads typed members of the manifest, keeping the first error, which
/// points at the member's line and column.

void readTrainingState(JsonFieldReader &r, const json &root,
                       TrainingState &st) {
  JsonPath at = JsonPath() / "training_state";
  const json *j = r.member(root, JsonPath(), "training_state");
  if (!j)
    return;
  st.step = r.integer(*j, at, "step");
  st.lossScale = r.number(*j, at, "loss_scale");
  if (!r.error && !(std::isfinite(st.lossScale) && st.lossScale > 0))
    r.fail(at / "loss_scale", "expected a finite number > 0");
  st.lossScaleGoodSteps = r.integer(*j, at, "loss_scale_good_steps");
  st.hysteresisLeft = r.integer(*j, at, "hysteresis_left");
  st.skippedSteps = r.integer(*j, at, "skipped_steps");
  st.dataPosition = r.unsignedInteger(*j, at, "data_position");
  if (const json *extra = r.member(*j, at, "extra", /*optional=*/true)) {
    if (!extra->is_object())
      r.fail(at / "extra",
             "expected an object, found " + describeJsonType(*extra));
    else
      st.extra = *extra;
  }
}

void readTensors(JsonFieldReader &r, const json &root, CheckpointManifest &m) {
  const json &tensors = r.array(root, JsonPath(), "tensors");
  std::set<std::string> names;
  int64_t fileBytes = 0;
  for (size_t i = 0; i < tensors.size() && !r.error; ++i) {
    const json &j = tensors[i];
    JsonPath at = JsonPath() / "tensors" / std::to_string(i);
    CheckpointTensor ct;
    PlanTensor &t = ct.tensor;
    readTensorFields(r, j, at, m.worldSize, /*planFields=*/false, t,
                     m.expertParallelSize);
    ct.offset = r.unsignedInteger(j, at, "offset");
    ct.bytes = r.unsignedInteger(j, at, "bytes");
    if (r.error)
      return;
    if (!r.error && ct.bytes != localBytes(t))
      r.fail(at / "bytes",
             "expected " + std::to_string(localBytes(t)) + " (local_numel x " +
                 std::to_string(bytesPerElement(t.dtype)) + " bytes)");
    if (!r.error && !names.insert(t.name).second)
      r.fail(at / "name", "duplicate tensor name \"" + t.name + "\"");
    // The shard file's layout sums the tensors' bytes (Limits.h).
    fileBytes = checkedAdd(fileBytes, int64_t(ct.bytes + kShardAlignment))
                    .value_or(limits::kMaxCount + 1);
    if (!r.error && fileBytes > limits::kMaxCount)
      r.fail(at / "bytes", "the tensors of a shard file come to more than "
                           "2^62 bytes here");
    m.tensors.push_back(std::move(ct));
  }
  if (r.error)
    return;
  ShardFileLayout layout = layoutShardFile(m.planTensors());
  for (size_t i = 0; i < m.tensors.size() && !r.error; ++i)
    if (m.tensors[i].offset != layout.offsets[i])
      r.fail(JsonPath() / "tensors" / std::to_string(i) / "offset",
             "expected " + std::to_string(layout.offsets[i]) +
                 " (tensors in order, each at a 64-byte boundary after the "
                 "64-byte header)");
}

void readFlatGroups(JsonFieldReader &r, const json &root,
                    CheckpointManifest &m) {
  const json &groups = r.array(root, JsonPath(), "flat_groups");
  for (size_t i = 0; i < groups.size() && !r.error; ++i) {
    const json &j = groups[i];
    JsonPath at = JsonPath() / "flat_groups" / std::to_string(i);
    PlanFlatGroup g;
    readFlatGroupFields(r, j, at, g);
    std::vector<int64_t> numels;
    bool expert = false; // Expert parameters: over their group's ranks.
    for (size_t k = 0; k < g.params.size() && !r.error; ++k) {
      const CheckpointTensor *p = m.findTensor(g.params[k]);
      if (!p || p->tensor.role != TensorRole::Param) {
        r.fail(at / "params" / std::to_string(k),
               "\"" + g.params[k] + "\" is not a parameter of the manifest");
      } else {
        numels.push_back(p->tensor.numel);
        expert = expert || p->tensor.expert;
      }
    }
    if (!r.error && g.offsets.size() != g.params.size())
      r.fail(at / "offsets", "expected one offset per parameter");
    if (r.error)
      return;
    int64_t ranks = expert ? m.worldSize / m.expertParallelSize : m.worldSize;
    FlatGroupLayout layout(numels, ranks);
    if (g.offsets != layout.offsets || g.numel != layout.numel ||
        g.padded != layout.padded || g.partition != layout.partitionSize())
      r.fail(at, "the offsets, numel, padded and partition do not follow the "
                 "flat-group layout of its parameters over " +
                     std::to_string(ranks) +
                     (expert ? " expert-data-parallel" : "") +
                     " ranks (padded " + std::to_string(layout.padded) +
                     ", partition " + std::to_string(layout.partitionSize()) +
                     ")");
    m.flatGroups.push_back(std::move(g));
  }
  for (size_t i = 0; i < m.tensors.size() && !r.error; ++i) {
    const std::string &of = m.tensors[i].tensor.of;
    bool group =
        std::any_of(m.flatGroups.begin(), m.flatGroups.end(),
                    [&](const PlanFlatGroup &g) { return g.name == of; });
    if (!of.empty() && !group && !m.findTensor(of))
      r.fail(JsonPath() / "tensors" / std::to_string(i) / "of",
             "unknown owner \"" + of + "\"");
  }
}

void readShards(JsonFieldReader &r, const json &root, CheckpointManifest &m) {
  const json &shards = r.array(root, JsonPath(), "shards");
  if (!r.error && static_cast<int64_t>(shards.size()) != m.worldSize)
    r.fail(JsonPath() / "shards",
           "expected one shard per rank (" + std::to_string(m.worldSize) +
               "), found " + std::to_string(shards.size()));
  uint64_t fileBytes = layoutShardFile(m.planTensors()).fileBytes;
  for (size_t i = 0; i < shards.size() && !r.error; ++i) {
    const json &j = shards[i];
    JsonPath at = JsonPath() / "shards" / std::to_string(i);
    ShardRecord s;
    s.rank = r.integer(j, at, "rank");
    s.file = r.string(j, at, "file");
    s.bytes = r.unsignedInteger(j, at, "bytes");
    std::string crc = r.string(j, at, "crc32c");
    if (r.error)
      return;
    if (s.rank != static_cast<int64_t>(i))
      r.fail(at / "rank", "expected " + std::to_string(i) +
                              ": shards are listed in rank order");
    else if (s.file != shardFileName(s.rank))
      r.fail(at / "file", "expected \"" + shardFileName(s.rank) + "\"");
    else if (s.bytes != fileBytes)
      r.fail(at / "bytes", "expected " + std::to_string(fileBytes) +
                               ", the size the tensor list gives a shard "
                               "file");
    bool hex = crc.size() == 10 && crc.compare(0, 2, "0x") == 0 &&
               std::all_of(crc.begin() + 2, crc.end(), [](char c) {
                 return std::isxdigit(static_cast<unsigned char>(c));
               });
    if (!r.error && !hex)
      r.fail(at / "crc32c",
             "expected \"0x\" and 8 hex digits, found \"" + crc + "\"");
    if (hex)
      s.crc32c =
          static_cast<uint32_t>(std::strtoul(crc.c_str() + 2, nullptr, 16));
    m.shards.push_back(std::move(s));
  }
}

Expected<CheckpointManifest> parseManifest(const JsonDocument &doc) {
  const json &root = doc.root();
  JsonFieldReader r(doc, "manifest");
  CheckpointManifest m;
  std::string format = r.string(root, JsonPath(), "format");
  if (!r.error && format != kCheckpointFormat)
    return doc.error("/format", "not a zeroc checkpoint manifest: format is "
                                "\"" +
                                    format + "\", expected \"" +
                                    kCheckpointFormat + "\"");
  int64_t version = r.integer(root, JsonPath(), "version");
  if (!r.error && version != kCheckpointVersion)
    return doc.error("/version", "checkpoint format version " +
                                     std::to_string(version) +
                                     " is not supported by this build, which "
                                     "reads version " +
                                     std::to_string(kCheckpointVersion));
  m.tag = r.string(root, JsonPath(), "tag");
  m.model = r.string(root, JsonPath(), "model");
  if (const json *hf = r.member(root, JsonPath(), "hf_config")) {
    if (!hf->is_null() && !hf->is_object())
      r.fail(JsonPath() / "hf_config",
             "expected a Hugging Face config object or null");
    else
      m.hfConfig = *hf;
  }
  m.worldSize = r.integer(root, JsonPath(), "world_size", 1);
  if (!r.error && m.worldSize > limits::kMaxWorldSize)
    r.fail(JsonPath() / "world_size",
           "expected at most 2147483647 ranks (MPI and NCCL number ranks "
           "with 32-bit ints)");
  // Absent before expert parallelism: 1.
  m.expertParallelSize = 1;
  if (r.member(root, JsonPath(), "expert_parallel_size", /*optional=*/true))
    m.expertParallelSize =
        r.integer(root, JsonPath(), "expert_parallel_size", 1);
  if (!r.error && m.worldSize % m.expertParallelSize != 0)
    r.fail(JsonPath() / "expert_parallel_size",
           "expected a divisor of world_size " + std::to_string(m.worldSize) +
               ", found " + std::to_string(m.expertParallelSize));
  m.stage = r.integer(root, JsonPath(), "stage");
  if (!r.error && m.stage > 3)
    r.fail(JsonPath() / "stage", "expected 0, 1, 2 or 3");
  if (!r.error && r.integer(root, JsonPath(), "shard_header_bytes") !=
                      static_cast<int64_t>(kShardHeaderBytes))
    r.fail(JsonPath() / "shard_header_bytes", "expected 64");
  if (!r.error && r.integer(root, JsonPath(), "shard_alignment") !=
                      static_cast<int64_t>(kShardAlignment))
    r.fail(JsonPath() / "shard_alignment", "expected 64");
  readTrainingState(r, root, m.state);
  readTensors(r, root, m);
  readFlatGroups(r, root, m);
  readShards(r, root, m);
  if (r.error)
    return *r.error;
  return m;
}

std::string manifestPath(const std::string &dir, const std::string &tag) {
  return joinPath(checkpointTagDir(dir, tag), kManifestName);
}

//===----------------------------------------------------------------------===//
// Reading a shard file
//===----------------------------------------------------------------------===//

/// Opens rank `rank`'s shard file and checks its size and header against
/// the manifest.
Expected<FileHandle> openShard(const std::string &dir,
                               const CheckpointManifest &m, int64_t rank) {
  const ShardRecord &record = m.shards[static_cast<size_t>(rank)];
  std::string path = joinPath(checkpointTagDir(dir, m.tag), record.file);
  auto file = FileHandle::openForReading(path);
  if (!file)
    return file.error();
  auto size = file->size();
  if (!size)
    return size.error();
  if (*size != record.bytes)
    return Diagnostic{
        path, 0, 0,
        std::string(*size < record.bytes ? "truncated" : "too long") +
            ": the manifest records " + std::to_string(record.bytes) +
            " bytes, the file has " + std::to_string(*size)};
  auto header = readHeader(*file);
  if (!header)
    return header.error();
  auto bad = [&](const std::string &message) {
    return Diagnostic{path, 0, 0, message};
  };
  if (header->rank != rank || header->worldSize != m.worldSize)
    return bad("holds rank " + std::to_string(header->rank) + " of " +
               std::to_string(header->worldSize) + ", expected rank " +
               std::to_string(rank) + " of " + std::to_string(m.worldSize));
  if (header->tensorCount != static_cast<int64_t>(m.tensors.size()) ||
      header->dataBytes + kShardHeaderBytes != record.bytes)
    return bad("its header describes " + std::to_string(header->tensorCount) +
               " tensors in " + std::to_string(header->dataBytes) +
               " bytes, the manifest " + std::to_string(m.tensors.size()) +
               " tensors in " +
               std::to_string(record.bytes - kShardHeaderBytes) + " bytes");
  if (header->dataCrc != record.crc32c)
    return bad("written by a different save than the manifest describes: "
               "its header records checksum " +
               crc32cHex(header->dataCrc) + ", the manifest " +
               crc32cHex(record.crc32c));
  return std::move(*file);
}

/// Reads everything after the header once, checking its CRC-32C against
/// the manifest; with `keep`, each tensor's bytes land in (*keep)[i].
Expected<Done> readShardData(const std::string &dir,
                             const CheckpointManifest &m, int64_t rank,
                             std::vector<std::vector<std::byte>> *keep) {
  auto file = openShard(dir, m, rank);
  if (!file)
    return file.error();
  constexpr uint64_t kChunk = 8u << 20;
  std::vector<std::byte> chunk;
  uint32_t crc = 0;
  // Streams [pos, end) through `chunk` into the checksum.
  auto stream = [&](uint64_t pos, uint64_t end) -> Expected<Done> {
    while (pos < end) {
      size_t n = static_cast<size_t>(std::min(kChunk, end - pos));
      chunk.resize(n);
      if (auto ok = file->readAt(pos, chunk.data(), n); !ok)
        return ok;
      crc = crc32c(crc, chunk.data(), n);
      pos += n;
    }
    return Done{};
  };
  uint64_t pos = kShardHeaderBytes;
  if (keep) {
    keep->resize(m.tensors.size());
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      const CheckpointTensor &t = m.tensors[i];
      if (auto ok = stream(pos, t.offset); !ok) // the zeros between
        return ok;
      std::vector<std::byte> &bytes = (*keep)[i];
      bytes.resize(t.bytes);
      if (auto ok = file->readAt(t.offset, bytes.data(), bytes.size()); !ok)
        return ok;
      crc = crc32c(crc, bytes.data(), bytes.size());
      pos = t.offset + t.bytes;
    }
  }
  if (auto ok = stream(pos, m.shards[static_cast<size_t>(rank)].bytes); !ok)
    return ok;
  if (crc != m.shards[static_cast<size_t>(rank)].crc32c)
    return Diagnostic{
        file->path(), 0, 0,
        "checksum mismatch: the manifest records CRC-32C " +
            crc32cHex(m.shards[static_cast<size_t>(rank)].crc32c) +
            ", the file's data sums to " + crc32cHex(crc) +
            ": the file is corrupt"};
  return Done{};
}

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

const CheckpointTensor *
CheckpointManifest::findTensor(const std::string &name) const {
  for (const CheckpointTensor &t : tensors)
    if (t.tensor.name == name)
      return &t;
  return nullptr;
}

uint64_t localBytes(const PlanTensor &t) {
  return static_cast<uint64_t>(t.localNumel) *
         static_cast<uint64_t>(bytesPerElement(t.dtype));
}

static Expected<Done> checkLocalSizes(const Plan &plan,
                                      const std::vector<size_t> &sizes,
                                      const std::string &caller) {
  if (sizes.size() != plan.tensors.size())
    return Diagnostic{"", 0, 0,
                      caller + ": got " + std::to_string(sizes.size()) +
                          " buffers, the plan has " +
                          std::to_string(plan.tensors.size()) + " tensors"};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const PlanTensor &t = plan.tensors[i];
    if (sizes[i] != localBytes(t))
      return Diagnostic{"", 0, 0,
                        caller + ": the buffer of '" + t.name + "' (tensor " +
                            std::to_string(i) + ") has " +
                            std::to_string(sizes[i]) + " bytes, expected " +
                            std::to_string(localBytes(t)) + " (local_numel " +
                            std::to_string(t.localNumel) + " x " +
                            std::to_string(bytesPerElement(t.dtype)) + ")"};
  }
  return Done{};
}

Expected<Done> checkLocalBuffers(const Plan &plan,
                                 const std::vector<ConstBytes> &buffers,
                                 const std::string &caller) {
  std::vector<size_t> sizes;
  for (const ConstBytes &b : buffers)
    sizes.push_back(b.size);
  return checkLocalSizes(plan, sizes, caller);
}

Expected<Done> checkLocalBuffers(const Plan &plan,
                                 const std::vector<MutableBytes> &buffers,
                                 const std::string &caller) {
  std::vector<size_t> sizes;
  for (const MutableBytes &b : buffers)
    sizes.push_back(b.size);
  return checkLocalSizes(plan, sizes, caller);
}

std::vector<PlanTensor> CheckpointManifest::planTensors() const {
  std::vector<PlanTensor> out;
  for (const CheckpointTensor &t : tensors)
    out.push_back(t.tensor);
  return out;
}

std::string checkpointTagDir(const std::string &dir, const std::string &tag) {
  return joinPath(dir, tag);
}

std::string shardFileName(int64_t rank) {
  return "rank" + std::to_string(rank) + ".shard";
}

Expected<std::string> resolveCheckpointTag(const std::string &dir,
                                           const std::string &tagOrLatest) {
  if (tagOrLatest != kLatestTag) {
    if (auto ok = checkTag(tagOrLatest); !ok)
      return ok.error();
    return tagOrLatest;
  }
  std::string path = joinPath(dir, kLatestTag);
  if (!pathExists(path))
    return Diagnostic{path, 0, 0,
                      "no checkpoint to load: the file naming the latest "
                      "complete checkpoint does not exist"};
  auto text = readWholeFile(path);
  if (!text)
    return text.error();
  std::string tag = *text;
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back())))
    tag.pop_back();
  if (auto ok = checkTag(tag); !ok)
    return Diagnostic{path, 0, 0, ok.error().message};
  return tag;
}

Expected<CheckpointManifest> readCheckpointManifest(const std::string &dir,
                                                    const std::string &tag) {
  std::string path = manifestPath(dir, tag);
  if (!pathExists(path))
    return Diagnostic{path, 0, 0,
                      "checkpoint '" + tag +
                          "' is incomplete or missing: it has no manifest "
                          "(rank 0 writes it in finalizeCheckpoint, after "
                          "every rank saved its shard)"};
  auto doc = JsonDocument::load(path);
  if (!doc)
    return doc.error();
  try {
    auto m = parseManifest(*doc);
    if (m)
      m->tag = tag; // the directory's name, should it have been renamed
    return m;
  } catch (const json::exception &e) {
    return Diagnostic{path, 0, 0,
                      std::string("malformed manifest: ") + e.what()};
  }
}

Expected<Done> checkManifestMatchesPlan(const CheckpointManifest &m,
                                        const Plan &plan,
                                        const std::string &path) {
  auto differ = [&](const std::string &message) {
    return Diagnostic{path, 0, 0,
                      "checkpoint '" + m.tag +
                          "' does not fit the plan: " + message};
  };
  if (m.worldSize != plan.worldSize)
    return differ("it was saved on " + std::to_string(m.worldSize) +
                  " ranks, the plan runs on " + std::to_string(plan.worldSize) +
                  "; a checkpoint resumes only on its own world size (to "
                  "change it, consolidate the checkpoint to safetensors and "
                  "start from that with zerorun --init-from)");
  if (m.expertParallelSize != plan.expertParallelSize)
    return differ("it was saved with expert_parallel_size " +
                  std::to_string(m.expertParallelSize) + ", the plan's is " +
                  std::to_string(plan.expertParallelSize) +
                  " (consolidate it and start from that with zerorun "
                  "--init-from)");
  if (m.stage != plan.stage)
    return differ("it was saved by a ZeRO stage " + std::to_string(m.stage) +
                  " plan, the plan is stage " + std::to_string(plan.stage));
  std::vector<std::string> missing, extra, changed;
  for (const PlanTensor &t : plan.tensors) {
    const CheckpointTensor *ct = m.findTensor(t.name);
    if (!ct)
      missing.push_back(t.name);
    else if (describe(ct->tensor) != describe(t) ||
             ct->tensor.localNumel != t.localNumel)
      changed.push_back("'" + t.name + "' is " + describe(ct->tensor) +
                        " in the checkpoint, " + describe(t) + " in the plan");
  }
  for (const CheckpointTensor &ct : m.tensors)
    if (!plan.findTensor(ct.tensor.name))
      extra.push_back(ct.tensor.name);
  Differences problems;
  problems.addNames("the plan's ", missing, " not in the checkpoint");
  problems.addNames("the checkpoint's ", extra, " not in the plan");
  for (const std::string &c : changed)
    problems.add(c);
  if (!problems.empty())
    return differ("the tensor lists differ: " + problems.str());
  if (m.flatGroups.size() != plan.flatGroups.size())
    return differ("it has " + std::to_string(m.flatGroups.size()) +
                  " flat groups, the plan " +
                  std::to_string(plan.flatGroups.size()));
  for (size_t i = 0; i < m.flatGroups.size(); ++i) {
    const PlanFlatGroup &a = m.flatGroups[i], &b = plan.flatGroups[i];
    if (a.name != b.name || a.params != b.params || a.offsets != b.offsets ||
        a.padded != b.padded)
      return differ("flat group '" + b.name +
                    "' holds other parameters or lays them out differently");
  }
  return Done{};
}

Expected<ShardRecord>
saveCheckpoint(const std::string &dir, const std::string &tag, const Plan &plan,
               int64_t rank, const std::vector<ConstBytes> &tensorData,
               const TrainingState &state, const WriteHooks &hooks) {
  if (auto ok = checkTag(tag); !ok)
    return ok.error();
  if (auto ok = checkRank(plan, rank); !ok)
    return ok.error();
  if (auto ok = checkLocalBuffers(plan, tensorData, "saveCheckpoint"); !ok)
    return ok.error();
  std::string latest = joinPath(dir, kLatestTag);
  if (pathExists(latest)) {
    auto current = resolveCheckpointTag(dir, kLatestTag);
    if (current && *current == tag)
      return Diagnostic{checkpointTagDir(dir, tag), 0, 0,
                        "is the latest complete checkpoint; overwriting it "
                        "would leave none if this save failed: save under "
                        "a new tag (e.g. one per step)"};
  }
  std::string tagDir = checkpointTagDir(dir, tag);
  if (auto ok = makeDirectories(tagDir); !ok)
    return ok.error();
  // An older save under this tag is being replaced: its manifest goes
  // first, so that no manifest ever describes a mix of the two saves'
  // files. (Only rank 0 touches it; finalize comes after every rank's save.)
  std::string manifest = joinPath(tagDir, kManifestName);
  if (rank == 0 && pathExists(manifest)) {
    if (::unlink(manifest.c_str()) != 0)
      return fileError(manifest, "cannot remove the stale manifest", errno);
    if (auto ok = syncDirectory(tagDir); !ok)
      return ok.error();
  }

  ShardFileLayout layout = layoutShardFile(plan.tensors);
  auto writer =
      AtomicFileWriter::create(joinPath(tagDir, shardFileName(rank)), hooks);
  if (!writer)
    return writer.error();
  static const std::array<std::byte, kShardAlignment> zeros{};
  HeaderBytes placeholder{};
  if (auto ok = writer->write(placeholder.data(), placeholder.size()); !ok)
    return ok.error();
  uint32_t crc = 0;
  uint64_t pos = kShardHeaderBytes;
  for (size_t i = 0; i < tensorData.size(); ++i) {
    size_t gap = static_cast<size_t>(layout.offsets[i] - pos);
    crc = crc32c(crc, zeros.data(), gap);
    if (auto ok = writer->write(zeros.data(), gap); !ok)
      return ok.error();
    crc = crc32c(crc, tensorData[i].data, tensorData[i].size);
    if (auto ok = writer->write(tensorData[i].data, tensorData[i].size); !ok)
      return ok.error();
    pos = layout.offsets[i] + tensorData[i].size;
  }
  ShardHeader header;
  header.rank = rank;
  header.worldSize = plan.worldSize;
  header.tensorCount = static_cast<int64_t>(plan.tensors.size());
  header.step = state.step;
  header.dataBytes = layout.fileBytes - kShardHeaderBytes;
  header.dataCrc = crc;
  HeaderBytes encoded = encodeHeader(header);
  if (auto ok = writer->writeAt(0, encoded.data(), encoded.size()); !ok)
    return ok.error();
  if (auto ok = writer->commit(); !ok)
    return ok.error();
  return ShardRecord{rank, shardFileName(rank), layout.fileBytes, crc};
}

Expected<CheckpointManifest> finalizeCheckpoint(const std::string &dir,
                                                const std::string &tag,
                                                const Plan &plan,
                                                const TrainingState &state,
                                                const WriteHooks &hooks) {
  if (auto ok = checkTag(tag); !ok)
    return ok.error();
  if (!(std::isfinite(state.lossScale) && state.lossScale > 0))
    return Diagnostic{"", 0, 0,
                      "finalizeCheckpoint: the loss scale must be a finite "
                      "number > 0, found " +
                          std::to_string(state.lossScale)};
  std::string tagDir = checkpointTagDir(dir, tag);
  ShardFileLayout layout = layoutShardFile(plan.tensors);
  CheckpointManifest m;
  m.tag = tag;
  m.model = plan.model.name;
  m.hfConfig = plan.model.hfConfig;
  m.worldSize = plan.worldSize;
  m.expertParallelSize = plan.expertParallelSize;
  m.stage = plan.stage;
  m.state = state;
  for (size_t i = 0; i < plan.tensors.size(); ++i)
    m.tensors.push_back(
        {plan.tensors[i], layout.offsets[i], localBytes(plan.tensors[i])});
  m.flatGroups = plan.flatGroups;
  for (int64_t rank = 0; rank < plan.worldSize; ++rank) {
    std::string path = joinPath(tagDir, shardFileName(rank));
    if (!pathExists(path))
      return Diagnostic{path, 0, 0,
                        "rank " + std::to_string(rank) +
                            "'s shard is missing: every rank must finish "
                            "saveCheckpoint before rank 0 finalizes (a "
                            "barrier between the two)"};
    auto file = FileHandle::openForReading(path);
    if (!file)
      return file.error();
    auto size = file->size();
    if (!size)
      return size.error();
    auto header = readHeader(*file);
    if (!header)
      return header.error();
    auto bad = [&](const std::string &message) {
      return Diagnostic{path, 0, 0, message};
    };
    if (header->rank != rank || header->worldSize != plan.worldSize ||
        header->tensorCount != static_cast<int64_t>(plan.tensors.size()))
      return bad("holds rank " + std::to_string(header->rank) + " of " +
                 std::to_string(header->worldSize) + " with " +
                 std::to_string(header->tensorCount) +
                 " tensors, expected rank " + std::to_string(rank) + " of " +
                 std::to_string(plan.worldSize) + " with " +
                 std::to_string(plan.tensors.size()));
    if (header->step != state.step)
      return bad("was saved at step " + std::to_string(header->step) +
                 ", the checkpoint being finalized is step " +
                 std::to_string(state.step) +
                 ": this rank's save is stale or missing");
    if (*size != layout.fileBytes ||
        header->dataBytes + kShardHeaderBytes != layout.fileBytes)
      return bad("has " + std::to_string(*size) + " bytes, expected " +
                 std::to_string(layout.fileBytes));
    m.shards.push_back({rank, shardFileName(rank), *size, header->dataCrc});
  }
  std::string text;
  try {
    text = manifestText(manifestJson(m));
  } catch (const json::exception &e) { // e.g. a name that is not UTF-8
    return Diagnostic{joinPath(tagDir, kManifestName), 0, 0,
                      std::string("cannot write the manifest: ") + e.what()};
  }
  if (auto ok =
          writeFileAtomically(joinPath(tagDir, kManifestName), text, hooks);
      !ok)
    return ok.error();
  // Last: only now is the checkpoint complete.
  if (auto ok =
          writeFileAtomically(joinPath(dir, kLatestTag), tag + "\n", hooks);
      !ok)
    return ok.error();
  return m;
}

Expected<Done> verifyShardFile(const std::string &dir,
                               const CheckpointManifest &manifest,
                               int64_t rank) {
  if (rank < 0 || rank >= manifest.worldSize)
    return Diagnostic{"", 0, 0,
                      "rank " + std::to_string(rank) + " is out of range"};
  return readShardData(dir, manifest, rank, nullptr);
}

Expected<std::vector<std::byte>>
readShardElements(const std::string &dir, const CheckpointManifest &manifest,
                  int64_t rank, const CheckpointTensor &tensor,
                  ElementRange range) {
  int64_t size = bytesPerElement(tensor.tensor.dtype);
  if (rank < 0 || rank >= manifest.worldSize || range.begin < 0 ||
      range.end > tensor.tensor.localNumel)
    return Diagnostic{"", 0, 0,
                      "readShardElements: rank " + std::to_string(rank) +
                          ", elements [" + std::to_string(range.begin) + ", " +
                          std::to_string(range.end) + ") of '" +
                          tensor.tensor.name + "' are out of range"};
  std::string path = joinPath(checkpointTagDir(dir, manifest.tag),
                              manifest.shards[static_cast<size_t>(rank)].file);
  auto file = FileHandle::openForReading(path);
  if (!file)
    return file.error();
  std::vector<std::byte> out(static_cast<size_t>(range.size() * size));
  if (auto ok = file->readAt(tensor.offset + range.begin * size, out.data(),
                             out.size());
      !ok)
    return ok.error();
  return out;
}

Expected<LoadedShard> loadCheckpoint(const std::string &dir,
                                     const std::string &tagOrLatest,
                                     const Plan &plan, int64_t rank) {
  if (auto ok = checkRank(plan, rank); !ok)
    return ok.error();
  auto tag = resolveCheckpointTag(dir, tagOrLatest);
  if (!tag)
    return tag.error();
  auto manifest = readCheckpointManifest(dir, *tag);
  if (!manifest)
    return manifest.error();
  if (auto ok =
          checkManifestMatchesPlan(*manifest, plan, manifestPath(dir, *tag));
      !ok)
    return ok.error();
  std::vector<std::vector<std::byte>> data;
  if (auto ok = readShardData(dir, *manifest, rank, &data); !ok)
    return ok.error();
  // The manifest's order may differ from the plan's: match by name.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < manifest->tensors.size(); ++i)
    index[manifest->tensors[i].tensor.name] = i;
  LoadedShard out;
  out.tag = *tag;
  out.state = manifest->state;
  for (const PlanTensor &t : plan.tensors)
    out.tensors.push_back(std::move(data[index.at(t.name)]));
  return out;
}

Expected<TrainingState>
loadCheckpointInto(const std::string &dir, const std::string &tagOrLatest,
                   const Plan &plan, int64_t rank,
                   const std::vector<MutableBytes> &out) {
  if (auto ok = checkLocalBuffers(plan, out, "loadCheckpointInto"); !ok)
    return ok.error();
  auto loaded = loadCheckpoint(dir, tagOrLatest, plan, rank);
  if (!loaded)
    return loaded.error();
  // Everything is verified: commit.
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].size)
      std::memcpy(out[i].data, loaded->tensors[i].data(), out[i].size);
  return loaded->state;
}

} // namespace zeroc
