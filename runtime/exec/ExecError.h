//===- ExecError.h - How the executor's parts report errors -----*- C++ -*-===//
//
// Internal to runtime/exec: the executor's parts throw ExecError, and the
// Executor's API turns it into a Diagnostic. Also the small helpers every
// part uses: op-error checks, timing, 1-d slices.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_RUNTIME_EXEC_EXECERROR_H
#define ZEROC_RUNTIME_EXEC_EXECERROR_H

#include "KernelTypes.h"
#include "zeroc/Plan/Plan.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace zeroc::runtime::exec {

/// An error of the executor: thrown inside, turned into a Diagnostic at the
/// API boundary.
struct ExecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string &message) {
  throw ExecError(message);
}

/// "op 12 (linear): <what>".
[[noreturn]] inline void failOp(const PlanOp &op, const std::string &what) {
  fail("op " + std::to_string(op.index) + " (" + std::string(op.kindName()) +
       "): " + what);
}

/// A kernel's or device's Status, as an error of `op`.
inline void check(const Status &status, const PlanOp &op) {
  if (!status.ok())
    failOp(op, status.error);
}

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// A slice of a tensor as a 1-d view.
inline Tensor slice(const Tensor &t, int64_t offset, int64_t n) {
  return Tensor{static_cast<char *>(t.data) + offset * bytesPerElement(t.dtype),
                t.dtype,
                {n}};
}

} // namespace zeroc::runtime::exec

#endif // ZEROC_RUNTIME_EXEC_EXECERROR_H
