//===- AttnDialect.cpp - The attn dialect and its attributes --------------===//

#include "attn/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
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
// The `attn.spec` function attribute against the IR it describes
//===----------------------------------------------------------------------===//

Type attn::elementType(MLIRContext &ctx, DType dtype) {
  Builder b(&ctx);
  switch (dtype) {
  case DType::F16:
    return b.getF16Type();
  case DType::BF16:
    return b.getBF16Type();
  case DType::F32:
    return b.getF32Type();
  case DType::F64:
    return b.getF64Type();
  }
  return {};
}

/// Checks a tensor operand's element type and static head_dim (its last
/// dimension) against the spec. Other shapes are the op verifier's to name.
static LogicalResult matchesSpec(Operation *op, Value value, StringRef what, const Spec &spec) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() == 0)
    return success();
  if (type.getElementType() != elementType(*op->getContext(), spec.dtype))
    return op->emitError() << what << " holds " << type.getElementType()
                           << " but the function's attn.spec says dtype = " << attn::name(spec.dtype);
  const int64_t headDim = type.getShape().back();
  if (!ShapedType::isDynamic(headDim) && headDim != spec.head_dim)
    return op->emitError() << what << " has head_dim " << headDim
                           << " but the function's attn.spec says head_dim = " << spec.head_dim;
  return success();
}

/// The spec checks below read the ops' operands and attributes, which are
/// there only once the op verifies; MLIR verifies a function's attributes
/// before the ops inside it, so each attn op is verified here first (its own
/// error is the one said).
static bool verifiesItself(Operation *op) {
  return !isa_and_nonnull<AttnDialect>(op->getDialect()) ||
         succeeded(op->getName().verifyInvariants(op));
}

/// Whether dimension `dim` of `value`'s ranked tensor type is `want` or
/// dynamic (a size the IR leaves to run time says nothing against the spec).
static bool dimAgrees(Value value, unsigned dim, int64_t want) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return !type || type.getRank() <= dim || ShapedType::isDynamic(type.getDimSize(dim)) ||
         type.getDimSize(dim) == want;
}

namespace {
/// One function's ops against its attn.spec, in one walk (SpecChecks::op).
/// The passes read the tile sizes, mask, group, page size and mode from the
/// spec and the shapes from the IR; where the two disagree they would build
/// a kernel for neither. So every textbook op must say what the spec says.
/// The tile-level ops carry the sizes the passes took from the spec (tile_q,
/// the group, the mask, page_size) and tiles of tile_kv keys; the backends
/// lower them from the ops, so an op edited to say otherwise would index
/// pages or rows that are not there: each must say what the spec says too,
/// the query/output tile ops grouping 1 query head (before
/// attn-share-kv-heads) or the spec's gqa, all of them alike.
class SpecChecks {
public:
  explicit SpecChecks(const Spec &spec) : spec(spec) {}

  /// False (with the error said) where `op` disagrees with the spec.
  bool op(Operation *op) {
    if (!verifiesItself(op))
      return false;
    if (auto attention = dyn_cast<StandardAttentionOp>(op))
      return textbook(attention);
    if (auto gather = dyn_cast<GatherPagesOp>(op)) {
      if (spec.page_size == 0) {
        op->emitError("attn.gather_pages reads the cache through a block table but the "
                      "function's attn.spec says page_size = 0 (a contiguous cache)");
        return false;
      }
      return succeeded(matchesSpec(op, gather.getResult(), "the gathered cache", spec)) &&
             pagesOf(op, gather.getCache());
    }
    if (auto load = dyn_cast<LoadQTileOp>(op))
      return qoTile(op, load.getTileQ(), load.getGroup());
    if (auto store = dyn_cast<StoreOTileOp>(op))
      return qoTile(op, store.getTileQ(), store.getGroup());
    if (auto mask = dyn_cast<MaskOp>(op))
      return maskIs(op, mask.getMask().getValue()) &&
             says(op, "tile_q", mask.getTileQ(), spec.tile_q) &&
             tileOf(op, mask.getScores(), 1, "the score tile");
    if (auto classify = dyn_cast<ClassifyTilesOp>(op))
      return maskIs(op, classify.getMask().getValue()) &&
             says(op, "tile_q", classify.getTileQ(), spec.tile_q) &&
             says(op, "tile_kv", classify.getTileKv(), spec.tile_kv);
    if (auto qk = dyn_cast<QKOp>(op))
      return tileOf(op, qk.getK(), 0, "the key tile") &&
             tileOf(op, qk.getScores(), 1, "the score tile");
    if (auto kv = dyn_cast<LoadKVTileOp>(op))
      return tileOf(op, kv.getResult(), 0, "the tile");
    if (auto lookup = dyn_cast<BlockTableLookupOp>(op))
      return says(op, "page_size", lookup.getPageSize(), spec.page_size) &&
             tileOf(op, lookup.getSlots(), 0, "the slot vector");
    if (auto paged = dyn_cast<LoadPagedKVTileOp>(op))
      return tileOf(op, paged.getSlots(), 0, "the slot vector") &&
             tileOf(op, paged.getResult(), 0, "the tile") && pagesOf(op, paged.getCache());
    return true;
  }

private:
  const Spec &spec;
  std::optional<int64_t> group; ///< what the first query/output tile op said

  bool textbook(StandardAttentionOp attention) {
    Operation *op = attention;
    if (failed(matchesSpec(op, attention.getQ(), "q", spec)) ||
        failed(matchesSpec(op, attention.getK(), "k", spec)) ||
        failed(matchesSpec(op, attention.getV(), "v", spec)) ||
        !maskIs(op, attention.getMask().getValue()))
      return false;
    Builder b(op->getContext());
    const Type acc = spec.dtype == DType::F64 ? Type(b.getF64Type()) : Type(b.getF32Type());
    if (attention.getScale().getType() != acc) {
      op->emitError() << "the scale is " << attention.getScale().getType()
                      << " but the function's attn.spec (dtype = " << attn::name(spec.dtype)
                      << ") accumulates in " << acc;
      return false;
    }
    if (!says(op, "gqa", static_cast<int64_t>(attention.getGqa()), spec.gqa))
      return false;
    // A paged kernel reads K and V through attn.gather_pages (which says
    // when the spec is not paged).
    for (auto [value, what] : {std::pair{attention.getK(), "k"}, {attention.getV(), "v"}})
      if (spec.page_size > 0 && !value.getDefiningOp<GatherPagesOp>()) {
        op->emitError() << what << " is not read through a block table (attn.gather_pages) "
                        << "but the function's attn.spec says page_size = " << spec.page_size;
        return false;
      }
    return true;
  }
  bool says(Operation *op, const char *field, int64_t value, int64_t want) {
    if (value == want)
      return true;
    op->emitError() << "the op says " << field << " " << value
                    << " but the function's attn.spec says " << field << " = " << want;
    return false;
  }
  bool maskIs(Operation *op, const Mask &mask) {
    if (mask == spec.mask)
      return true;
    op->emitError() << "the op's mask is " << mask.str()
                    << " but the function's attn.spec says mask = " << spec.mask.str();
    return false;
  }
  bool tileOf(Operation *op, Value value, unsigned dim, const char *what) {
    if (dimAgrees(value, dim, spec.tile_kv))
      return true;
    op->emitError() << what << " has " << cast<RankedTensorType>(value.getType()).getDimSize(dim)
                    << " keys but the function's attn.spec says tile_kv = " << spec.tile_kv;
    return false;
  }
  bool pagesOf(Operation *op, Value cache) {
    if (dimAgrees(cache, 1, spec.page_size))
      return true;
    op->emitError() << "the cache has pages of "
                    << cast<RankedTensorType>(cache.getType()).getDimSize(1)
                    << " tokens but the function's attn.spec says page_size = " << spec.page_size;
    return false;
  }
  bool qoTile(Operation *op, int64_t tileQ, int64_t opGroup) {
    if (!says(op, "tile_q", tileQ, spec.tile_q) ||
        (opGroup != 1 && !says(op, "group", opGroup, spec.gqa)))
      return false;
    if (group && *group != opGroup) {
      op->emitError() << "the op says group " << opGroup << " but another query/output tile op of "
                      << "the function says group " << *group;
      return false;
    }
    group = opGroup;
    return true;
  }
};
} // namespace

static LogicalResult verifySpecAgainstBody(Operation *func, const Spec &spec) {
  SpecChecks checks(spec);
  WalkResult walk = func->walk(
      [&](Operation *op) { return checks.op(op) ? WalkResult::advance() : WalkResult::interrupt(); });
  return failure(walk.wasInterrupted());
}

LogicalResult AttnDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() != kSpecAttrName)
    return success(); // the passes' own markers (attn.loop, attn.gqa, ...)
  auto spec = dyn_cast<SpecAttr>(attr.getValue());
  if (!spec)
    return op->emitError() << "attn.spec must be an #attn.spec<...> attribute, got "
                           << attr.getValue();
  // A function: func.func, or what lowering makes of it (llvm.func keeps the
  // attribute).
  if (!isa<FunctionOpInterface>(op))
    return op->emitError("attn.spec belongs on the function of the kernel it describes");
  return verifySpecAgainstBody(op, spec.getValue());
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
