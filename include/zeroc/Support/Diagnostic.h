//===- Diagnostic.h - Errors that point into the user's file ----*- C++ -*-===//
//
// The error currency of zeroc's MLIR-free code (config readers, model
// generators, the runtime's plan reader): a message with the file, line and
// column it concerns, and a small Expected<T> to carry either. A reader that
// finds several independent errors in one file returns them together: the
// first is the Diagnostic itself, the others are in `moreErrors`.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_DIAGNOSTIC_H
#define ZEROC_SUPPORT_DIAGNOSTIC_H

#include <cassert>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace zeroc {

struct Diagnostic {
  std::string file;    ///< Empty when the input has no file.
  int line = 0;        ///< 1-based; 0 when unknown.
  int column = 0;      ///< 1-based; 0 when unknown.
  std::string message; ///< What is wrong and what was expected.
  /// Further errors of the same input, each located by itself; empty when
  /// there is only this one.
  std::vector<Diagnostic> moreErrors = {};

  /// "file:line:col: error: message", dropping the parts that are unknown;
  /// one such line per error, `moreErrors` included.
  std::string str() const;
  /// How many errors this stands for: 1 + moreErrors.size().
  size_t count() const { return 1 + moreErrors.size(); }

  /// The first of `errors` carrying the others; `errors` must not be empty.
  static Diagnostic combine(std::vector<Diagnostic> errors);
};

/// Either a value or the diagnostic explaining why there is none.
template <typename T> class Expected {
public:
  Expected(T value) : state(std::move(value)) {}
  Expected(Diagnostic error) : state(std::move(error)) {}

  explicit operator bool() const { return state.index() == 0; }
  T &operator*() { return std::get<0>(state); }
  const T &operator*() const { return std::get<0>(state); }
  T *operator->() { return &std::get<0>(state); }
  const T *operator->() const { return &std::get<0>(state); }
  const Diagnostic &error() const { return std::get<1>(state); }

private:
  std::variant<T, Diagnostic> state;
};

} // namespace zeroc

#endif // ZEROC_SUPPORT_DIAGNOSTIC_H
