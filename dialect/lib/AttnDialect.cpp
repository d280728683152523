//===- AttnDialect.cpp - The attn dialect and its attributes --------------===//

#include "attn/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace attn;

#include "attn/AttnOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "attn/AttnAttrs.cpp.inc"

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "attn/AttnOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "attn/AttnAttrs.cpp.inc"
      >();
}

std::optional<Spec> attn::getEnclosingSpec(Operation *op) {
  auto func = isa<func::FuncOp>(op) ? cast<func::FuncOp>(op)
                                    : op->getParentOfType<func::FuncOp>();
  if (!func)
    return std::nullopt;
  if (auto attr = func->getAttrOfType<SpecAttr>(kSpecAttrName))
    return attr.getValue();
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// `field = value` lists, shared by #attn.spec and #attn.mask
//===----------------------------------------------------------------------===//

/// Parses one value: a keyword, an integer, or `sliding_window(W)`, and
/// returns it in the spelling of the canonical text form.
static FailureOr<std::string> parseSpecValue(AsmParser &parser) {
  std::string keyword;
  if (succeeded(parser.parseOptionalKeywordOrString(&keyword))) {
    if (keyword != "sliding_window")
      return keyword;
    int64_t window;
    if (parser.parseLParen() || parser.parseInteger(window) || parser.parseRParen())
      return failure();
    return "sliding_window(" + std::to_string(window) + ")";
  }
  int64_t value;
  if (parser.parseInteger(value))
    return failure();
  return std::to_string(value);
}

/// Prints a canonical `a=b,c=d` text as `a = b, c = d`.
static void printFieldList(AsmPrinter &printer, const std::string &canonical) {
  std::string out;
  for (char c : canonical) {
    if (c == '=')
      out += " = ";
    else if (c == ',')
      out += ", ";
    else
      out += c;
  }
  printer << '<' << out << '>';
}

Attribute SpecAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  std::string text;
  auto parseField = [&]() -> ParseResult {
    std::string field;
    if (parser.parseKeywordOrString(&field) || parser.parseEqual())
      return failure();
    FailureOr<std::string> value = parseSpecValue(parser);
    if (failed(value))
      return failure();
    text += (text.empty() ? "" : ",") + field + "=" + *value;
    return success();
  };
  // `<` and `>` parsed on their own: a missing `<` must fail the parse, not
  // leave an empty list (the defaults) behind its error.
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater()) &&
      (parser.parseCommaSeparatedList(parseField) || parser.parseGreater()))
    return {};
  SpecResult result = parseSpec(text);
  if (!result) {
    parser.emitError(loc, result.error->message());
    return {};
  }
  return SpecAttr::get(parser.getContext(), *result.spec);
}

void SpecAttr::print(AsmPrinter &printer) const {
  printFieldList(printer, getValue().str());
}

Attribute MaskAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  FailureOr<std::string> value;
  if (parser.parseLess() || failed(value = parseSpecValue(parser)) ||
      parser.parseGreater())
    return {};
  // The spec parser owns the mask grammar and its rules.
  SpecResult result = parseSpec("mask=" + *value + ",target=cpu");
  if (!result) {
    parser.emitError(loc, result.error->message());
    return {};
  }
  return MaskAttr::get(parser.getContext(), result.spec->mask);
}

void MaskAttr::print(AsmPrinter &printer) const {
  printer << '<' << getValue().str() << '>';
}
