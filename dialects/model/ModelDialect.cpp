//===- ModelDialect.cpp - The model dialect and its attributes ------------===//
//
// Dialect registration and the `#model.init<...>` attribute.
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace zeroc::model;

#include "model/ModelDialect.cpp.inc"
#include "model/ModelEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "model/ModelAttrs.cpp.inc"

void ModelDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "model/ModelOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "model/ModelAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// InitAttr: `<zeros>`, `<ones>`, `<normal(STD)>`
//===----------------------------------------------------------------------===//

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, llvm::APFloat stdValue) {
  double std = stdValue.convertToDouble();
  if (kind == InitKind::Normal) {
    if (!(std > 0.0) || !std::isfinite(std))
      return emitError() << "normal initialization needs a positive, finite "
                            "standard deviation, found "
                         << std;
  } else if (std != 0.0) {
    return emitError() << "'" << stringifyInitKind(kind)
                       << "' initialization takes no standard deviation";
  }
  return success();
}

Attribute InitAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<InitKind> kind = symbolizeInitKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "unknown initialization '" << keyword
                          << "', expected one of: zeros, ones, normal(STD)";
    return {};
  }
  double std = 0.0;
  if (*kind == InitKind::Normal &&
      (parser.parseLParen() || parser.parseFloat(std) || parser.parseRParen()))
    return {};
  if (parser.parseGreater())
    return {};
  return InitAttr::getChecked([&] { return parser.emitError(loc); },
                              parser.getContext(), *kind, llvm::APFloat(std));
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyInitKind(getKind());
  if (getKind() == InitKind::Normal) {
    printer << "(";
    printer.printFloat(getStd());
    printer << ")";
  }
  printer << ">";
}
