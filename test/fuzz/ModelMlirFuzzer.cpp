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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

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
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  ParserConfig config(context);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, config);
  if (!module || failed(verify(*module)))
    return 0;
  (void)zeroc::computeModelStats(*module);
  return 0;
}
