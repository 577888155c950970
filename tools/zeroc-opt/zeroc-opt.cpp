//===- zeroc-opt.cpp - mlir-opt with zeroc's dialects and passes ----------===//
//
// The driver of the lit tests: parses, verifies, runs passes and prints IR
// of the zeroc dialects.
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"
#include "sched/SchedOps.h"
#include "zeroc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  zeroc::registerZerocPasses();

  mlir::DialectRegistry registry;
  registry.insert<zeroc::model::ModelDialect, zeroc::sched::SchedDialect,
                  mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "zeroc optimizer driver\n", registry));
}
