//===- JsonReader.h - Typed, checked fields of a JSON file ------*- C++ -*-===//
//
// One reader for the JSON file formats that both the compiler and the
// runtime read (the plan, the checkpoint manifest). Each accessor checks a
// field's presence and type; the first failure is kept as a Diagnostic with
// the file, line and column of the value, and the message
// "<what> <path>: <problem>", the path written as `phases[0].ops[3].kind`.
// After a failure the accessors return defaults, so a reader can go on and
// test `error` once at the end. MLIR-free.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_JSONREADER_H
#define ZEROC_SUPPORT_JSONREADER_H

#include "zeroc/Support/DType.h"
#include "zeroc/Support/Diagnostic.h"
#include "zeroc/Support/Json.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace zeroc {

class JsonFieldReader {
public:
  /// `what` names the format in messages: "plan", "manifest".
  JsonFieldReader(const JsonDocument &doc, std::string what)
      : doc(doc), what(std::move(what)) {}

  /// The first failure.
  std::optional<Diagnostic> error;

  /// Records a failure at `at` (kept only if it is the first).
  void fail(const JsonPath &at, const std::string &message);

  /// The member `key` of the object at `at`; null (and a failure unless
  /// `optional`) when it is missing, or after an earlier failure.
  const nlohmann::json *member(const nlohmann::json &obj, const JsonPath &at,
                               const std::string &key, bool optional = false);
  int64_t integer(const nlohmann::json &obj, const JsonPath &at,
                  const std::string &key, int64_t min = 0);
  uint64_t unsignedInteger(const nlohmann::json &obj, const JsonPath &at,
                           const std::string &key);
  double number(const nlohmann::json &obj, const JsonPath &at,
                const std::string &key);
  bool boolean(const nlohmann::json &obj, const JsonPath &at,
               const std::string &key);
  /// "" when `optional` and missing.
  std::string string(const nlohmann::json &obj, const JsonPath &at,
                     const std::string &key, bool optional = false);
  /// A string that must be one of `allowed`.
  std::string oneOf(const nlohmann::json &obj, const JsonPath &at,
                    const std::string &key,
                    std::initializer_list<const char *> allowed);
  /// A string naming one of `all` (an enum's values, spelled by `name`);
  /// `all[0]` after a failure.
  template <typename E, size_t N>
  E enumOf(const nlohmann::json &obj, const JsonPath &at,
           const std::string &key, const E (&all)[N], const char *(*name)(E)) {
    std::string s = string(obj, at, key);
    std::string list;
    for (E e : all) {
      if (!error && s == name(e))
        return e;
      list += (list.empty() ? "" : ", ") + std::string(name(e));
    }
    if (!error)
      fail(at / key, "unknown value \"" + s + "\", expected one of " + list);
    return all[0];
  }
  /// The member "dtype": f32, bf16, f16 or i32.
  DType dtype(const nlohmann::json &obj, const JsonPath &at);
  /// An array (an empty one after a failure).
  const nlohmann::json &array(const nlohmann::json &obj, const JsonPath &at,
                              const std::string &key);
  /// Arrays of integers (each at least `min`) and of strings; empty when
  /// `optional` and missing.
  std::vector<int64_t> integers(const nlohmann::json &obj, const JsonPath &at,
                                const std::string &key, bool optional = false,
                                int64_t min = 0);
  std::vector<std::string> strings(const nlohmann::json &obj,
                                   const JsonPath &at, const std::string &key,
                                   bool optional = false);

  /// `at` as messages write it: "tensors[3].dtype", "(root)".
  static std::string name(const JsonPath &at);

private:
  const JsonDocument &doc;
  std::string what;
};

} // namespace zeroc

#endif // ZEROC_SUPPORT_JSONREADER_H
