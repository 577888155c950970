//===- Json.cpp - JSON documents that remember where things are -----------===//

#include "zeroc/Support/Json.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

using nlohmann::json;

namespace zeroc {

std::string Diagnostic::str() const {
  std::string s;
  if (!file.empty()) {
    s += file;
    if (line > 0) {
      s += ":" + std::to_string(line);
      if (column > 0)
        s += ":" + std::to_string(column);
    }
    s += ": ";
  }
  s += "error: " + message;
  for (const Diagnostic &more : moreErrors)
    s += "\n" + more.str();
  return s;
}

Diagnostic Diagnostic::combine(std::vector<Diagnostic> errors) {
  assert(!errors.empty() && "no error to combine");
  Diagnostic first = std::move(errors.front());
  for (size_t i = 1; i < errors.size(); ++i) {
    Diagnostic &more = errors[i];
    std::vector<Diagnostic> nested = std::move(more.moreErrors);
    more.moreErrors.clear();
    first.moreErrors.push_back(std::move(more));
    for (Diagnostic &n : nested)
      first.moreErrors.push_back(std::move(n));
  }
  return first;
}

namespace {

/// 1-based line and column of a byte offset.
std::pair<int, int> lineColumn(const std::string &text, size_t offset) {
  offset = std::min(offset, text.size());
  int line = 1;
  size_t lineStart = 0;
  for (size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') {
      ++line;
      lineStart = i + 1;
    }
  return {line, static_cast<int>(offset - lineStart) + 1};
}

/// Finds the first syntax error in text that nlohmann rejected and says
/// what is missing, at the place a reader would fix it: a missing ',' where
/// the comma belongs, a trailing ',' at the comma, an unterminated string at
/// its opening quote. nlohmann reports only where it gave up.
class SyntaxChecker {
public:
  struct Error {
    size_t offset;
    std::string message;
  };

  explicit SyntaxChecker(const std::string &text) : text(text) {}

  /// A key that an object repeats: where the repetition is, and the key as
  /// written (quotes included). Filled by check().
  struct Duplicate {
    size_t offset;
    std::string key;
  };
  std::vector<Duplicate> duplicates;

  /// The first error; nullopt when this checker finds none (nlohmann's
  /// message is used then, e.g. for a number out of range).
  std::optional<Error> check() {
    skipSpace();
    if (atEnd())
      return Error{pos, "the document is empty; expected a JSON value"};
    if (value("a JSON value")) {
      skipSpace();
      if (!atEnd())
        fail(pos, "unexpected " + found() + " after the end of the document");
    }
    return error;
  }

private:
  bool atEnd() const { return pos >= text.size(); }
  char peek() const { return atEnd() ? '\0' : text[pos]; }

  void skipSpace() {
    while (!atEnd() && std::strchr(" \t\r\n", text[pos]))
      ++pos;
  }

  bool fail(size_t at, std::string message) {
    if (!error)
      error = Error{at, std::move(message)};
    return false;
  }

  /// The character at `pos` as a message names it.
  std::string found() const {
    if (atEnd())
      return "the end of the file";
    return std::string("'") + text[pos] + "'";
  }

  std::string where(size_t offset) const {
    auto [line, column] = lineColumn(text, offset);
    return std::to_string(line) + ":" + std::to_string(column);
  }

  bool commentAt() const {
    return peek() == '/' && pos + 1 < text.size() &&
           (text[pos + 1] == '/' || text[pos + 1] == '*');
  }

  bool startsValue(char c) const {
    return c == '"' || c == '{' || c == '[' || c == '-' ||
           std::isdigit(static_cast<unsigned char>(c)) ||
           std::isalpha(static_cast<unsigned char>(c)) || c == '\'';
  }

  /// A value at `pos`; `what` names it when none is there.
  bool value(const std::string &what) {
    skipSpace();
    if (++depth > 10000)
      return false; // Too deep to diagnose; nlohmann's message stands.
    bool ok = valueAtPos(what);
    --depth;
    return ok;
  }

  bool valueAtPos(const std::string &what) {
    char c = peek();
    if (c == '{')
      return object();
    if (c == '[')
      return array();
    if (c == '"')
      return string();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c)))
      return number();
    if (commentAt())
      return fail(pos, "comments are not allowed in JSON");
    if (c == '\'')
      return fail(pos, "strings need double quotes, not single quotes");
    if (std::isalpha(static_cast<unsigned char>(c))) {
      size_t start = pos;
      while (!atEnd() && std::isalnum(static_cast<unsigned char>(peek())))
        ++pos;
      std::string word = text.substr(start, pos - start);
      if (word == "true" || word == "false" || word == "null")
        return true;
      if (word == "NaN" || word == "Infinity")
        return fail(start, word + " is not a JSON number");
      return fail(start, "unexpected '" + word + "'; expected " + what +
                             " (JSON's words are true, false and null; a "
                             "string needs double quotes)");
    }
    return fail(pos, "expected " + what + ", found " + found());
  }

  bool string() {
    size_t open = pos++;
    while (true) {
      if (atEnd() || peek() == '\n')
        return fail(open, "unterminated string: missing closing '\"'");
      char c = text[pos];
      if (c == '"') {
        ++pos;
        return true;
      }
      if (c == '\\') {
        char e = pos + 1 < text.size() ? text[pos + 1] : '\0';
        if (!std::strchr("\"\\/bfnrtu", e) || e == '\0')
          return fail(pos,
                      std::string("invalid escape '\\") + e + "' in a string");
        if (e == 'u') {
          for (size_t i = 2; i < 6; ++i)
            if (pos + i >= text.size() ||
                !std::isxdigit(static_cast<unsigned char>(text[pos + i])))
              return fail(pos, "invalid escape: '\\u' needs four hex digits");
          pos += 6;
        } else {
          pos += 2;
        }
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20)
        return fail(pos, "control character in a string; write it as an "
                         "escape such as \\t");
      ++pos;
    }
  }

  bool number() {
    size_t start = pos;
    auto digits = [&] {
      size_t from = pos;
      while (!atEnd() && std::isdigit(static_cast<unsigned char>(peek())))
        ++pos;
      return pos > from;
    };
    if (peek() == '-')
      ++pos;
    if (peek() == '0' && pos + 1 < text.size() &&
        std::isdigit(static_cast<unsigned char>(text[pos + 1])))
      return fail(start, "a number cannot start with 0");
    if (!digits())
      return fail(start, "invalid number: expected a digit after '-'");
    if (peek() == '.') {
      ++pos;
      if (!digits())
        return fail(start, "invalid number: expected a digit after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos;
      if (peek() == '+' || peek() == '-')
        ++pos;
      if (!digits())
        return fail(start, "invalid number: expected a digit in the "
                           "exponent");
    }
    return true;
  }

  /// An object or an array: `close` ends it, members are `key: value`
  /// when `isObject`.
  bool container(bool isObject) {
    size_t open = pos++;
    const char close = isObject ? '}' : ']';
    const std::string kind = isObject ? "object" : "array";
    const std::string items = isObject ? "members" : "elements";
    auto unclosed = [&](size_t at) {
      return fail(at, std::string("missing closing '") + close + "' for the " +
                          kind + " opened at " + where(open));
    };
    skipSpace();
    if (peek() == close) {
      ++pos;
      return true;
    }
    std::set<std::string> keys;
    while (true) {
      skipSpace();
      if (atEnd())
        return unclosed(pos);
      std::string key;
      if (isObject) {
        if (peek() != '"') {
          if (commentAt())
            return fail(pos, "comments are not allowed in JSON");
          if (peek() == '\'')
            return fail(pos, "keys need double quotes, not single quotes");
          if (std::isalpha(static_cast<unsigned char>(peek())))
            return fail(pos, "keys need double quotes");
          return fail(pos, "expected a key in double quotes, found " + found());
        }
        size_t keyStart = pos;
        if (!string())
          return false;
        key = text.substr(keyStart, pos - keyStart);
        if (!keys.insert(key).second)
          duplicates.push_back({keyStart, key});
        skipSpace();
        if (peek() != ':')
          return fail(pos, "missing ':' after the key " + key);
        ++pos;
        skipSpace();
        if (atEnd() || peek() == ',' || peek() == '}' || peek() == ']')
          return fail(pos, "missing the value of " + key);
      }
      if (!value(isObject ? "the value of " + key : "an element"))
        return false;
      size_t valueEnd = pos;
      skipSpace();
      if (atEnd())
        return unclosed(valueEnd);
      char c = peek();
      if (c == close) {
        ++pos;
        return true;
      }
      if (c == ',') {
        size_t comma = pos++;
        skipSpace();
        if (peek() == close)
          return fail(comma,
                      std::string("trailing ',' before '") + close + "'");
        continue;
      }
      if (c == '}' || c == ']')
        return unclosed(valueEnd);
      if (commentAt())
        return fail(pos, "comments are not allowed in JSON");
      if (isObject ? c == '"' : startsValue(c)) {
        if (!isObject)
          return fail(valueEnd, "missing ',' between elements");
        size_t next = pos;
        std::string nextKey;
        if (string())
          nextKey = " and " + text.substr(next, pos - next);
        error.reset();
        return fail(valueEnd, "missing ',' between members " + key + nextKey);
      }
      return fail(pos, std::string("expected ',' or '") + close + "' after " +
                           (isObject ? "the member " + key
                                     : std::string("an element")) +
                           ", found " + found());
    }
  }

  bool object() { return container(true); }
  bool array() { return container(false); }

  const std::string &text;
  size_t pos = 0;
  int depth = 0;
  std::optional<Error> error;
};

/// Walks well-formed JSON text (the parser has accepted it already) to find
/// where a value starts. Positions only; values are never built.
class Scanner {
public:
  explicit Scanner(const std::string &text) : text(text) {}

  void skipSpace() {
    while (pos < text.size() &&
           std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }

  /// Reads a string token at `pos` and returns its unescaped content.
  std::string readString() {
    std::string out;
    ++pos; // opening quote
    while (pos < text.size() && text[pos] != '"') {
      if (text[pos] == '\\' && pos + 1 < text.size()) {
        char c = text[pos + 1];
        switch (c) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u':
          out += '?';
          pos += 4;
          break; // keys with \u are rare
        default:
          out += c;
        }
        pos += 2;
        continue;
      }
      out += text[pos++];
    }
    ++pos; // closing quote
    return out;
  }

  /// Skips the value starting at `pos`.
  void skipValue() {
    skipSpace();
    if (pos >= text.size())
      return;
    char c = text[pos];
    if (c == '"') {
      readString();
      return;
    }
    if (c == '{' || c == '[') {
      int depth = 0;
      while (pos < text.size()) {
        char d = text[pos];
        if (d == '"') {
          readString();
          continue;
        }
        if (d == '{' || d == '[')
          ++depth;
        else if (d == '}' || d == ']') {
          if (--depth == 0) {
            ++pos;
            return;
          }
        }
        ++pos;
      }
      return;
    }
    while (pos < text.size() && text[pos] != ',' && text[pos] != '}' &&
           text[pos] != ']' &&
           !std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }

  /// Moves to member `key` of the object at `pos`. On success `pos` is at
  /// the member's value and `keyPos` at its key.
  bool enterMember(const std::string &key, size_t &keyPos) {
    skipSpace();
    if (pos >= text.size() || text[pos] != '{')
      return false;
    ++pos;
    while (true) {
      skipSpace();
      if (pos >= text.size() || text[pos] != '"')
        return false;
      size_t start = pos;
      std::string name = readString();
      skipSpace();
      ++pos; // ':'
      skipSpace();
      if (name == key) {
        keyPos = start;
        return true;
      }
      skipValue();
      skipSpace();
      if (pos >= text.size() || text[pos] != ',')
        return false;
      ++pos;
    }
  }

  /// Moves to element `index` of the array at `pos`.
  bool enterElement(size_t index) {
    skipSpace();
    if (pos >= text.size() || text[pos] != '[')
      return false;
    ++pos;
    for (size_t i = 0; i < index; ++i) {
      skipValue();
      skipSpace();
      if (pos >= text.size() || text[pos] != ',')
        return false;
      ++pos;
    }
    skipSpace();
    return pos < text.size() && text[pos] != ']';
  }

  size_t pos = 0;

private:
  const std::string &text;
};

/// Splits an RFC 6901 pointer into unescaped tokens.
std::vector<std::string> pointerTokens(const std::string &pointer) {
  std::vector<std::string> tokens;
  size_t i = 0;
  while (i < pointer.size()) {
    if (pointer[i] != '/')
      break;
    size_t next = pointer.find('/', i + 1);
    std::string token = pointer.substr(
        i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
    std::string unescaped;
    for (size_t j = 0; j < token.size(); ++j) {
      if (token[j] == '~' && j + 1 < token.size()) {
        unescaped += token[j + 1] == '1' ? '/' : '~';
        ++j;
      } else {
        unescaped += token[j];
      }
    }
    tokens.push_back(unescaped);
    if (next == std::string::npos)
      break;
    i = next;
  }
  return tokens;
}

} // namespace

Expected<JsonDocument> JsonDocument::load(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Diagnostic{path, 0, 0, "cannot open file"};
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), path);
}

std::vector<Diagnostic> JsonDocument::duplicateKeys() const {
  SyntaxChecker checker(text);
  checker.check();
  std::vector<Diagnostic> out;
  for (const SyntaxChecker::Duplicate &d : checker.duplicates) {
    auto [line, column] = lineColumn(text, d.offset);
    out.push_back(Diagnostic{file, line, column,
                             "duplicate key " + d.key +
                                 " in one object (JSON keeps only the last)"});
  }
  return out;
}

/// Where `text` first opens more than kMaxJsonDepth arrays and objects, if
/// it does (strings skipped); a linear scan, before anything recurses.
static std::optional<size_t> tooDeep(const std::string &text) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

Expected<JsonDocument> JsonDocument::parse(std::string text, std::string name) {
  JsonDocument doc;
  doc.file = std::move(name);
  doc.text = std::move(text);
  if (std::optional<size_t> at = tooDeep(doc.text)) {
    auto [line, column] = lineColumn(doc.text, *at);
    return Diagnostic{doc.file, line, column,
                      "invalid JSON: arrays and objects nested more than " +
                          std::to_string(kMaxJsonDepth) +
                          " deep (zeroc's formats need a handful of levels)"};
  }
  try {
    doc.value = json::parse(doc.text);
  } catch (const json::parse_error &e) {
    if (std::optional<SyntaxChecker::Error> found =
            SyntaxChecker(doc.text).check()) {
      auto [line, column] = lineColumn(doc.text, found->offset);
      return Diagnostic{doc.file, line, column,
                        "invalid JSON: " + found->message};
    }
    // nlohmann reports the last byte of the offending token; point at its
    // start, where a reader looks.
    size_t offset = e.byte > 0 ? std::min(e.byte - 1, doc.text.size()) : 0;
    if (offset < doc.text.size() && doc.text[offset] == '"') {
      while (offset > 0 && !(doc.text[offset - 1] == '"' &&
                             (offset < 2 || doc.text[offset - 2] != '\\')))
        --offset;
      if (offset > 0)
        --offset;
    } else {
      while (offset > 0 &&
             (std::isalnum(static_cast<unsigned char>(doc.text[offset - 1])) ||
              std::strchr("+-.", doc.text[offset - 1])))
        --offset;
    }
    auto [line, column] = lineColumn(doc.text, offset);
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line
    // 3, column 5: " prefix; the position is already in the diagnostic.
    size_t colon = what.find(": ");
    std::string detail =
        colon == std::string::npos ? what : what.substr(colon + 2);
    return Diagnostic{doc.file, line, column, "invalid JSON: " + detail};
  } catch (const json::out_of_range &e) {
    // A number too large for a double ("number overflow parsing '1e999'"):
    // nlohmann gives no position, so find the number as written.
    std::string what = e.what();
    size_t open = what.find('\'');
    size_t close = what.rfind('\'');
    std::string number = open != std::string::npos && close > open
                             ? what.substr(open + 1, close - open - 1)
                             : "";
    size_t offset = number.empty() ? std::string::npos : doc.text.find(number);
    if (offset == std::string::npos)
      return Diagnostic{doc.file, 0, 0, "invalid JSON: a number is too large"};
    auto [line, column] = lineColumn(doc.text, offset);
    return Diagnostic{doc.file, line, column,
                      "invalid JSON: the number " + number +
                          " is too large for a double"};
  }
  return doc;
}

std::optional<std::pair<int, int>>
JsonDocument::locate(const std::string &pointer) const {
  Scanner scanner(text);
  scanner.skipSpace();
  size_t best = scanner.pos;
  const json *node = &value;
  for (const std::string &token : pointerTokens(pointer)) {
    if (node->is_object()) {
      auto it = node->find(token);
      size_t keyPos = 0;
      if (it == node->end() || !scanner.enterMember(token, keyPos))
        break;
      node = &*it;
      best = keyPos;
    } else if (node->is_array()) {
      char *end = nullptr;
      unsigned long index = std::strtoul(token.c_str(), &end, 10);
      if (token.empty() || *end != '\0' || index >= node->size() ||
          !scanner.enterElement(index))
        break;
      node = &(*node)[index];
      best = scanner.pos;
    } else {
      break;
    }
  }
  if (text.empty())
    return std::nullopt;
  return lineColumn(text, best);
}

std::optional<size_t>
JsonDocument::valueOffset(const std::string &pointer) const {
  Scanner scanner(text);
  scanner.skipSpace();
  const json *node = &value;
  for (const std::string &token : pointerTokens(pointer)) {
    if (node->is_object()) {
      auto it = node->find(token);
      size_t keyPos = 0;
      if (it == node->end() || !scanner.enterMember(token, keyPos))
        return std::nullopt;
      node = &*it;
    } else if (node->is_array()) {
      char *end = nullptr;
      unsigned long index = std::strtoul(token.c_str(), &end, 10);
      if (token.empty() || *end != '\0' || index >= node->size() ||
          !scanner.enterElement(index))
        return std::nullopt;
      node = &(*node)[index];
    } else {
      return std::nullopt;
    }
  }
  scanner.skipSpace();
  return scanner.pos;
}

std::optional<std::string>
JsonDocument::spelling(const std::string &pointer) const {
  std::optional<size_t> start = valueOffset(pointer);
  if (!start || *start >= text.size())
    return std::nullopt;
  Scanner scanner(text);
  scanner.pos = *start;
  scanner.skipValue();
  return text.substr(*start, scanner.pos - *start);
}

Diagnostic JsonDocument::error(const std::string &pointer,
                               std::string message) const {
  Diagnostic diag{file, 0, 0, std::move(message)};
  if (auto where = locate(pointer)) {
    diag.line = where->first;
    diag.column = where->second;
  }
  return diag;
}

JsonPath JsonPath::fromDotted(const std::string &dotted) {
  JsonPath path;
  size_t start = 0;
  while (start < dotted.size()) {
    size_t dot = dotted.find('.', start);
    path.parts.push_back(dotted.substr(start, dot - start));
    if (dot == std::string::npos)
      break;
    start = dot + 1;
  }
  return path;
}

std::string JsonPath::pointer() const {
  std::string out;
  for (const std::string &key : parts) {
    out += '/';
    for (char c : key)
      out += c == '~'   ? std::string("~0")
             : c == '/' ? std::string("~1")
                        : std::string(1, c);
  }
  return out;
}

std::string JsonPath::dotted() const {
  std::string out;
  for (const std::string &key : parts)
    out += (out.empty() ? "" : ".") + key;
  return out;
}

std::string describeJsonType(const json &v) {
  switch (v.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return "a boolean";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
    return "an integer";
  case json::value_t::number_float:
    return "a number with a fraction";
  case json::value_t::string:
    return "a string";
  case json::value_t::array:
    return "an array";
  case json::value_t::object:
    return "an object";
  default:
    return "an unsupported value";
  }
}

static size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      size_t cost = std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + cost});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::optional<std::string>
closestMatch(const std::string &word,
             const std::vector<std::string> &candidates) {
  std::optional<std::string> best;
  size_t bestDistance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string &c : candidates) {
    size_t d = editDistance(word, c);
    // A key that differs only by a prefix such as "stage3_" is close too.
    if (c.size() > word.size() &&
        c.compare(c.size() - word.size(), word.size(), word) == 0)
      d = std::min(d, size_t(1));
    if (d < bestDistance) {
      bestDistance = d;
      best = c;
    }
  }
  return best;
}

} // namespace zeroc
