//===- ExecError.h - How the executor's parts report errors -----*- C++ -*-===//
//
// Internal to runtime/exec: the executor's parts throw ExecError, and the
// Executor's API turns it into a Diagnostic. Also the small helpers every
// part uses: op-error checks, timing, 1-d slices, the op attributes that
// Dispatch.h's attrF/attrI do not read.
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
  fail("op " + std::to_string(op.index) + " (" + op.kind + "): " + what);
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

inline std::string attrS(const PlanOp &op, const char *name) {
  auto it = op.attrs.find(name);
  if (it == op.attrs.end() || !it->is_string())
    return {};
  return it->get<std::string>();
}
inline std::vector<std::string> attrSList(const PlanOp &op, const char *name) {
  std::vector<std::string> out;
  auto it = op.attrs.find(name);
  if (it != op.attrs.end() && it->is_array())
    for (auto &e : *it)
      if (e.is_string())
        out.push_back(e.get<std::string>());
  return out;
}
inline std::vector<int64_t> attrIList(const PlanOp &op, const char *name) {
  std::vector<int64_t> out;
  auto it = op.attrs.find(name);
  if (it != op.attrs.end() && it->is_array())
    for (auto &e : *it)
      out.push_back(e.get<int64_t>());
  return out;
}
/// A list of persistent tensor names: attribute `name`, else the op's
/// `tensors`.
inline std::vector<std::string> tensorList(const PlanOp &op, const char *name) {
  std::vector<std::string> out = attrSList(op, name);
  return out.empty() ? op.tensors : out;
}

} // namespace zeroc::runtime::exec

#endif // ZEROC_RUNTIME_EXEC_EXECERROR_H
