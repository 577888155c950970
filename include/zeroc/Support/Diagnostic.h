//===- Diagnostic.h - Errors that point into the user's file ----*- C++ -*-===//
//
// The error currency of zeroc's MLIR-free code (config readers, model
// generators, the runtime's plan reader): a message with the file, line and
// column it concerns, and a small Expected<T> to carry either.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_DIAGNOSTIC_H
#define ZEROC_SUPPORT_DIAGNOSTIC_H

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace zeroc {

struct Diagnostic {
  std::string file;    ///< Empty when the input has no file.
  int line = 0;        ///< 1-based; 0 when unknown.
  int column = 0;      ///< 1-based; 0 when unknown.
  std::string message; ///< What is wrong and what was expected.

  /// "file:line:col: error: message", dropping the parts that are unknown.
  std::string str() const;
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
