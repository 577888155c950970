//===- ModelMlirFuzzer.cpp - model.mlir through parse and verify ----------===//
//
// What every zeroc subcommand does with a model file: parse it with the
// model, sched and func dialects loaded, verify it, and (`zeroc stats`,
// `zeroc advise`, compile) compute its statistics. Diagnostics are dropped.
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"
#include "sched/SchedOps.h"
#include "zeroc/Analysis/ModelStats.h"
#include "zeroc/Support/Limits.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdint>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // One context for the process, as the parser's own fuzzers do; threading
  // off so that a run is deterministic.
  static MLIRContext *context = [] {
    auto *c = new MLIRContext(MLIRContext::Threading::DISABLED);
    c->loadDialect<zeroc::model::ModelDialect, zeroc::sched::SchedDialect,
                   func::FuncDialect>();
    return c;
  }();
  ScopedDiagnosticHandler quiet(context,
                                [](Diagnostic &) { return success(); });
  // As zeroc reads a model file (openInputFile, then parseSourceFile on a
  // SourceMgr): MLIR's lexer expects the buffer to end in a NUL, as
  // MemoryBuffer's file buffers do.
  // And as zeroc, refuse brackets nested deeper than MLIR's parser can
  // recurse (regressions/model_mlir/deep-function-type-stack-overflow.mlir).
  if (zeroc::checkModelNesting(
          llvm::StringRef(reinterpret_cast<const char *>(data), size)))
    return 0;
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "model.mlir"),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sources, context);
  if (!module || failed(verify(*module)))
    return 0;
  (void)zeroc::computeModelStats(*module);
  return 0;
}
