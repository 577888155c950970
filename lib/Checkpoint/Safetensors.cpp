//===- Safetensors.cpp - Reading and writing .safetensors files -----------===//

#include "zeroc/Checkpoint/Safetensors.h"

#include "Messages.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstring>
#include <set>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian and written raw");

using nlohmann::json;
using nlohmann::ordered_json;

namespace zeroc {

std::string_view safetensorsDTypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "F32";
  case DType::BF16:
    return "BF16";
  case DType::F16:
    return "F16";
  case DType::I32:
    return "I32";
  }
  return "?";
}

std::optional<DType> parseSafetensorsDType(std::string_view name) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::I32})
    if (name == safetensorsDTypeName(d))
      return d;
  return std::nullopt;
}

namespace {

std::string rangeString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

/// The elements of a shape and their bytes, or nullopt on overflow.
std::optional<std::pair<int64_t, uint64_t>>
sizeOf(const std::vector<int64_t> &shape, DType dtype) {
  std::optional<int64_t> n = shapeElements(shape);
  int64_t bytes = 0;
  if (!n || __builtin_mul_overflow(*n, bytesPerElement(dtype), &bytes))
    return std::nullopt;
  return std::make_pair(*n, static_cast<uint64_t>(bytes));
}

/// Parses the header text, refusing duplicate keys at any depth (the
/// format forbids them; nlohmann would keep the last silently).
Expected<json> parseHeader(const std::string &text, const std::string &path) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto callback = [&](int, json::parse_event_t event, json &parsed) {
    if (event == json::parse_event_t::object_start)
      keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty())
      keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() &&
             !keys.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json root;
  try {
    root = json::parse(text, callback);
  } catch (const json::exception &e) {
    std::string what = e.what();
    size_t colon = what.find(": ");
    return Diagnostic{
        path, 0, 0,
        "invalid JSON in the header: " +
            (colon == std::string::npos ? what : what.substr(colon + 2))};
  }
  if (!duplicate.empty())
    return Diagnostic{path, 0, 0,
                      "the header has the key \"" + duplicate +
                          "\" twice in one object"};
  return root;
}

} // namespace

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

const SafetensorsEntry *SafetensorsFile::find(const std::string &name) const {
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : &entries[it->second];
}

Expected<SafetensorsFile> SafetensorsFile::open(const std::string &path) {
  auto handle = FileHandle::openForReading(path);
  if (!handle)
    return handle.error();
  auto fileSize = handle->size();
  if (!fileSize)
    return fileSize.error();
  auto bad = [&](const std::string &message) {
    return Diagnostic{path, 0, 0, message};
  };
  if (*fileSize < 8)
    return bad("not a safetensors file: " + std::to_string(*fileSize) +
               " bytes, too short for the 8-byte header length");
  uint64_t headerBytes = 0;
  if (auto ok = handle->readAt(0, &headerBytes, 8); !ok)
    return ok.error();
  if (headerBytes > kSafetensorsMaxHeaderBytes)
    return bad("header length " + std::to_string(headerBytes) +
               " exceeds the 100 MB limit");
  if (headerBytes > *fileSize - 8)
    return bad("header length " + std::to_string(headerBytes) +
               " runs past the end of the file (" + std::to_string(*fileSize) +
               " bytes): truncated or corrupt");
  std::string text(headerBytes, '\0');
  if (auto ok = handle->readAt(8, text.data(), text.size()); !ok)
    return ok.error();
  if (text.empty() || text[0] != '{')
    return bad("the header does not start with '{'");
  auto root = parseHeader(text, path);
  if (!root)
    return root.error();

  SafetensorsFile f;
  f.start = 8 + headerBytes;
  uint64_t dataBytes = *fileSize - f.start;
  for (auto it = root->begin(); it != root->end(); ++it) {
    const std::string &name = it.key();
    const json &v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        return bad("\"__metadata__\" must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return bad("\"__metadata__\" value of \"" + m.key() +
                     "\" is not a string");
        f.meta[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto tensorError = [&](const std::string &message) {
      return bad("tensor '" + name + "': " + message);
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      return tensorError("expected an object with \"dtype\", \"shape\" and "
                         "\"data_offsets\"");
    SafetensorsEntry e;
    e.name = name;
    const json &dtype = v["dtype"];
    std::optional<DType> parsed =
        dtype.is_string() ? parseSafetensorsDType(dtype.get<std::string>())
                          : std::nullopt;
    if (!parsed)
      return tensorError("unsupported dtype " + dtype.dump() +
                         "; this reader knows F32, BF16, F16 and I32");
    e.dtype = *parsed;
    const json &shape = v["shape"];
    if (!shape.is_array())
      return tensorError("\"shape\" must be an array of integers >= 0");
    for (const json &d : shape) {
      if (!d.is_number_unsigned())
        return tensorError("\"shape\" must be an array of integers >= 0, "
                           "found " +
                           shape.dump());
      if (d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return tensorError("shape " + shape.dump() + " is too large");
      e.shape.push_back(d.get<int64_t>());
    }
    const json &offsets = v["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 ||
        !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      return tensorError("\"data_offsets\" must be two integers >= 0, found " +
                         offsets.dump());
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    if (e.begin > e.end)
      return tensorError("data_offsets " + rangeString(e.begin, e.end) +
                         " end before they begin");
    if (e.end > dataBytes)
      return tensorError("data_offsets " + rangeString(e.begin, e.end) +
                         " run past the end of the data (" +
                         std::to_string(dataBytes) +
                         " bytes): the file is truncated or corrupt");
    auto size = sizeOf(e.shape, e.dtype);
    if (!size)
      return tensorError("shape " + shapeString(e.shape) + " is too large");
    e.numel = size->first;
    if (e.end - e.begin != size->second)
      return tensorError(
          "data_offsets " + rangeString(e.begin, e.end) + " hold " +
          std::to_string(e.end - e.begin) + " bytes, but " +
          std::string(safetensorsDTypeName(e.dtype)) + " " +
          shapeString(e.shape) + " needs " + std::to_string(size->second));
    f.entries.push_back(std::move(e));
  }
  std::stable_sort(f.entries.begin(), f.entries.end(),
                   [](const SafetensorsEntry &a, const SafetensorsEntry &b) {
                     return a.begin != b.begin ? a.begin < b.begin
                                               : a.end < b.end;
                   });
  uint64_t covered = 0;
  for (size_t i = 0; i < f.entries.size(); ++i) {
    const SafetensorsEntry &e = f.entries[i];
    if (e.begin < covered)
      return bad("tensors '" + f.entries[i - 1].name + "' " +
                 rangeString(f.entries[i - 1].begin, f.entries[i - 1].end) +
                 " and '" + e.name + "' " + rangeString(e.begin, e.end) +
                 " overlap");
    if (e.begin > covered)
      return bad("data bytes [" + std::to_string(covered) + ", " +
                 std::to_string(e.begin) +
                 ") belong to no tensor (the format allows no holes)");
    covered = e.end;
    f.byName[e.name] = i;
  }
  if (covered != dataBytes)
    return bad("the data has " + std::to_string(dataBytes) +
               " bytes but the tensors end at " + std::to_string(covered) +
               ": the bytes after belong to no tensor");
  f.file = std::move(*handle);
  return f;
}

Expected<std::vector<std::byte>>
SafetensorsFile::read(const SafetensorsEntry &entry, ElementRange range) const {
  if (range.begin < 0 || range.end > entry.numel || range.begin > range.end)
    return Diagnostic{path(), 0, 0,
                      "elements [" + std::to_string(range.begin) + ", " +
                          std::to_string(range.end) + ") of '" + entry.name +
                          "' are out of range"};
  uint64_t size = static_cast<uint64_t>(bytesPerElement(entry.dtype));
  std::vector<std::byte> out(static_cast<size_t>(range.size()) * size);
  if (auto ok = file.readAt(start + entry.begin +
                                static_cast<uint64_t>(range.begin) * size,
                            out.data(), out.size());
      !ok)
    return ok.error();
  readBytes += out.size();
  return out;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

Expected<SafetensorsWriter>
SafetensorsWriter::create(const std::string &path,
                          std::vector<SafetensorsDeclaration> tensors,
                          const std::map<std::string, std::string> &metadata,
                          const WriteHooks &hooks) {
  auto bad = [&](const std::string &message) {
    return Diagnostic{path, 0, 0, message};
  };
  std::stable_sort(
      tensors.begin(), tensors.end(),
      [](const SafetensorsDeclaration &a, const SafetensorsDeclaration &b) {
        return bytesPerElement(a.dtype) > bytesPerElement(b.dtype);
      });
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto &[key, value] : metadata)
      meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const SafetensorsDeclaration &t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name))
      return bad("cannot write a tensor named \"" + t.name +
                 "\": names must be non-empty, unique and not "
                 "\"__metadata__\"");
    auto size = sizeOf(t.shape, t.dtype);
    if (!size)
      return bad("tensor '" + t.name + "': shape " + shapeString(t.shape) +
                 " is negative or too large");
    header[t.name] = {{"dtype", std::string(safetensorsDTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + size->second}}};
    offset += size->second;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception &e) {
    return bad(std::string("cannot write the header: ") + e.what());
  }
  // Spaces to a multiple of 8: the data then starts 8-byte aligned.
  text.resize((text.size() + 7) / 8 * 8, ' ');
  auto atomic = AtomicFileWriter::create(path, hooks);
  if (!atomic)
    return atomic.error();
  SafetensorsWriter w(std::move(*atomic));
  w.decls = std::move(tensors);
  uint64_t length = text.size();
  if (auto ok = w.writer.write(&length, 8); !ok)
    return ok.error();
  if (auto ok = w.writer.write(text.data(), text.size()); !ok)
    return ok.error();
  return w;
}

Expected<Done> SafetensorsWriter::write(const std::string &name,
                                        ConstBytes data) {
  auto bad = [&](const std::string &message) {
    return Diagnostic{writer.finalPath(), 0, 0, message};
  };
  if (next >= decls.size() || decls[next].name != name)
    return bad("tensor '" + name + "' written out of order: expected " +
               (next < decls.size() ? "'" + decls[next].name + "'"
                                    : std::string("no more tensors")));
  uint64_t expected = sizeOf(decls[next].shape, decls[next].dtype)->second;
  if (data.size != expected)
    return bad("tensor '" + name + "' has " + std::to_string(data.size) +
               " bytes, its dtype and shape need " + std::to_string(expected));
  ++next;
  return writer.write(data.data, data.size);
}

Expected<Done> SafetensorsWriter::commit() {
  if (next != decls.size())
    return Diagnostic{writer.finalPath(), 0, 0,
                      "commit before every tensor was written (next: '" +
                          decls[next].name + "')"};
  return writer.commit();
}

Expected<Done>
writeSafetensors(const std::string &path,
                 const std::vector<SafetensorsTensor> &tensors,
                 const std::map<std::string, std::string> &metadata,
                 const WriteHooks &hooks) {
  std::vector<SafetensorsDeclaration> decls;
  std::map<std::string, ConstBytes> data;
  for (const SafetensorsTensor &t : tensors) {
    decls.push_back({t.name, t.dtype, t.shape});
    data[t.name] = t.data;
  }
  auto writer = SafetensorsWriter::create(path, decls, metadata, hooks);
  if (!writer)
    return writer.error();
  for (const SafetensorsDeclaration &d : writer->order())
    if (auto ok = writer->write(d.name, data[d.name]); !ok)
      return ok;
  return writer->commit();
}

} // namespace zeroc
