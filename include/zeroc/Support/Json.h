//===- Json.h - JSON documents that remember where things are ---*- C++ -*-===//
//
// nlohmann::json values keep no source positions, yet a user who mistyped a
// key wants "ds_config.json:14:5". A JsonDocument keeps the text beside the
// parsed value and finds the line and column of any JSON pointer on demand.
// MLIR-free; used by the config readers and the runtime's plan reader.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_JSON_H
#define ZEROC_SUPPORT_JSON_H

#include "zeroc/Support/Diagnostic.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace zeroc {

/// The deepest nesting of arrays and objects JsonDocument::parse accepts.
/// zeroc's formats need a handful of levels; the checks and writers that
/// walk a document recurse, so a deeper one (a hostile file) is refused,
/// located, instead of exhausting the stack.
inline constexpr int kMaxJsonDepth = 256;

class JsonDocument {
public:
  /// Reads and parses a file. A syntax error reports file:line:col.
  static Expected<JsonDocument> load(const std::string &path);
  /// Parses text; `name` stands for the file in diagnostics.
  static Expected<JsonDocument> parse(std::string text, std::string name);

  const nlohmann::json &root() const { return value; }
  const std::string &name() const { return file; }

  /// A diagnostic at the value named by `pointer` (RFC 6901, e.g.
  /// "/zero_optimization/stage"). When the pointer names a member that does
  /// not exist, the closest enclosing value that does exists is used.
  Diagnostic error(const std::string &pointer, std::string message) const;

  /// 1-based line and column of the value at `pointer`, if it is in the text.
  std::optional<std::pair<int, int>> locate(const std::string &pointer) const;

  /// The value at `pointer` as the text spells it ("18446744073709551615",
  /// "5e8"), so that a message can quote a number exactly as written rather
  /// than as it was parsed; nullopt when the pointer does not resolve.
  std::optional<std::string> spelling(const std::string &pointer) const;

  /// Keys repeated within one object, each located at its repetition
  /// (parsing keeps the last value silently; DeepSpeed refuses a config
  /// that repeats a key).
  std::vector<Diagnostic> duplicateKeys() const;

private:
  /// Byte offset of the value at `pointer`, when the whole pointer resolves.
  std::optional<size_t> valueOffset(const std::string &pointer) const;

  std::string file;
  std::string text;
  nlohmann::json value;
};

/// Where a value is in a document: a JSON pointer to find its line and
/// column, a dotted path to name it in messages
/// ("zero_optimization.offload_param.device").
class JsonPath {
public:
  JsonPath() = default;
  /// "gpu.peak_tflops.bf16" -> {"gpu", "peak_tflops", "bf16"}.
  static JsonPath fromDotted(const std::string &dotted);

  JsonPath operator/(const std::string &key) const {
    JsonPath child = *this;
    child.parts.push_back(key);
    return child;
  }
  /// RFC 6901, for JsonDocument::error and locate.
  std::string pointer() const;
  std::string dotted() const;
  /// The dotted path in quotes, for messages.
  std::string quoted() const { return "'" + dotted() + "'"; }
  const std::vector<std::string> &keys() const { return parts; }

private:
  std::vector<std::string> parts;
};

/// The JSON type name of a value as a user would say it: "an integer",
/// "a string", "null", ...
std::string describeJsonType(const nlohmann::json &value);

/// The candidate closest to `word` by edit distance, if any is close enough
/// to be a plausible typo ("did you mean ...?").
std::optional<std::string>
closestMatch(const std::string &word,
             const std::vector<std::string> &candidates);

} // namespace zeroc

#endif // ZEROC_SUPPORT_JSON_H
