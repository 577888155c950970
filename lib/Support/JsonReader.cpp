//===- JsonReader.cpp - Typed, checked fields of a JSON file --------------===//

#include "zeroc/Support/JsonReader.h"

#include <algorithm>
#include <cctype>

using json = nlohmann::json;

namespace zeroc {

void JsonFieldReader::fail(const JsonPath &at, const std::string &message) {
  if (!error)
    error = doc.error(at.pointer(), what + " " + name(at) + ": " + message);
}

const json *JsonFieldReader::member(const json &obj, const JsonPath &at,
                                    const std::string &key, bool optional) {
  if (error)
    return nullptr;
  if (!obj.is_object()) {
    fail(at, "expected an object, found " + describeJsonType(obj));
    return nullptr;
  }
  auto it = obj.find(key);
  if (it != obj.end())
    return &*it;
  if (!optional)
    fail(at, "missing required key '" + key + "'");
  return nullptr;
}

int64_t JsonFieldReader::integer(const json &obj, const JsonPath &at,
                                 const std::string &key, int64_t min) {
  const json *v = member(obj, at, key);
  if (v && (!v->is_number_integer() || v->get<int64_t>() < min))
    fail(at / key, "expected an integer >= " + std::to_string(min) +
                       ", found " + v->dump());
  return v && !error ? v->get<int64_t>() : 0;
}

uint64_t JsonFieldReader::unsignedInteger(const json &obj, const JsonPath &at,
                                          const std::string &key) {
  const json *v = member(obj, at, key);
  if (v && !v->is_number_unsigned())
    fail(at / key, "expected an integer >= 0, found " + v->dump());
  return v && !error ? v->get<uint64_t>() : 0;
}

double JsonFieldReader::number(const json &obj, const JsonPath &at,
                               const std::string &key) {
  const json *v = member(obj, at, key);
  if (v && !v->is_number())
    fail(at / key, "expected a number, found " + v->dump());
  return v && !error ? v->get<double>() : 0;
}

bool JsonFieldReader::boolean(const json &obj, const JsonPath &at,
                              const std::string &key) {
  const json *v = member(obj, at, key);
  if (v && !v->is_boolean())
    fail(at / key, "expected true or false, found " + v->dump());
  return v && !error && v->get<bool>();
}

std::string JsonFieldReader::string(const json &obj, const JsonPath &at,
                                    const std::string &key, bool optional) {
  const json *v = member(obj, at, key, optional);
  if (v && !v->is_string())
    fail(at / key, "expected a string, found " + v->dump());
  return v && !error ? v->get<std::string>() : "";
}

std::string
JsonFieldReader::oneOf(const json &obj, const JsonPath &at,
                       const std::string &key,
                       std::initializer_list<const char *> allowed) {
  std::string s = string(obj, at, key);
  if (error)
    return s;
  std::string list;
  for (const char *a : allowed) {
    if (s == a)
      return s;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  fail(at / key, "unknown value \"" + s + "\", expected one of " + list);
  return s;
}

DType JsonFieldReader::dtype(const json &obj, const JsonPath &at) {
  std::string s = string(obj, at, "dtype");
  std::optional<DType> t = parseDType(s);
  if (!t && !error)
    fail(at / "dtype",
         "unknown dtype \"" + s + "\", expected f32, bf16, f16 or i32");
  return t.value_or(DType::F32);
}

const json &JsonFieldReader::array(const json &obj, const JsonPath &at,
                                   const std::string &key) {
  static const json empty = json::array();
  const json *v = member(obj, at, key);
  if (v && !v->is_array())
    fail(at / key, "expected an array, found " + describeJsonType(*v));
  return v && !error ? *v : empty;
}

std::vector<int64_t> JsonFieldReader::integers(const json &obj,
                                               const JsonPath &at,
                                               const std::string &key,
                                               bool optional, int64_t min) {
  std::vector<int64_t> out;
  const json *v = member(obj, at, key, optional);
  if (!v)
    return out;
  if (!v->is_array()) {
    fail(at / key,
         "expected an array of integers, found " + describeJsonType(*v));
    return out;
  }
  for (size_t i = 0; i < v->size() && !error; ++i) {
    const json &e = (*v)[i];
    if (!e.is_number_integer() || e.get<int64_t>() < min)
      fail(at / key / std::to_string(i),
           "expected an integer >= " + std::to_string(min) + ", found " +
               e.dump());
    else
      out.push_back(e.get<int64_t>());
  }
  return out;
}

std::vector<std::string> JsonFieldReader::strings(const json &obj,
                                                  const JsonPath &at,
                                                  const std::string &key,
                                                  bool optional) {
  std::vector<std::string> out;
  const json *v = member(obj, at, key, optional);
  if (!v)
    return out;
  if (!v->is_array()) {
    fail(at / key,
         "expected an array of strings, found " + describeJsonType(*v));
    return out;
  }
  for (size_t i = 0; i < v->size() && !error; ++i) {
    if (!(*v)[i].is_string())
      fail(at / key / std::to_string(i),
           "expected a string, found " + (*v)[i].dump());
    else
      out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::string JsonFieldReader::name(const JsonPath &at) {
  std::string s;
  for (const std::string &k : at.keys()) {
    bool index = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    s += index ? "[" + k + "]" : (s.empty() ? "" : ".") + k;
  }
  return s.empty() ? "(root)" : s;
}

} // namespace zeroc
