//===- AttnOps.cpp - Verifiers of the attn ops ----------------------------===//
//
// Each verifier names the operand that is wrong and the rule it breaks.
// Dynamic sizes are not checked; static ones must agree.
//
//===----------------------------------------------------------------------===//

#include "attn/AttnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace attn;

#define GET_OP_CLASSES
#include "attn/AttnOps.cpp.inc"

/// Checks that dimension `da` of `a` and `db` of `b` agree when both are
/// static, e.g. "head_dim of k (64) does not match head_dim of q (128)".
static LogicalResult sameDim(Operation *op, Value a, int64_t da, StringRef what,
                             StringRef aName, Value b, int64_t db, StringRef bName) {
  auto ta = cast<RankedTensorType>(a.getType());
  auto tb = cast<RankedTensorType>(b.getType());
  int64_t x = ta.getDimSize(da), y = tb.getDimSize(db);
  if (!ShapedType::isDynamic(x) && !ShapedType::isDynamic(y) && x != y)
    return op->emitOpError() << what << " of " << aName << " (" << x
                             << ") does not match " << what << " of " << bName
                             << " (" << y << ")";
  return success();
}

static LogicalResult sameElementType(Operation *op, Value a, StringRef aName,
                                     Value b, StringRef bName) {
  Type x = getElementTypeOrSelf(a.getType()), y = getElementTypeOrSelf(b.getType());
  if (x != y)
    return op->emitOpError() << "element type of " << aName << " (" << x
                             << ") does not match " << bName << " (" << y << ")";
  return success();
}

static LogicalResult positive(Operation *op, StringRef name, int64_t value) {
  if (value < 1)
    return op->emitOpError() << name << " must be >= 1, got " << value;
  return success();
}

static int64_t dim(Value v, int64_t d) {
  return cast<RankedTensorType>(v.getType()).getDimSize(d);
}

/// A static size that must hold something: a tile of 0 keys or a head_dim of
/// 0 is no attention (the lowering would slice nothing out of nothing).
static LogicalResult nonEmpty(Operation *op, Value v, int64_t d, StringRef what) {
  const int64_t x = dim(v, d);
  if (!ShapedType::isDynamic(x) && x < 1)
    return op->emitOpError() << what << " must be >= 1, got " << x;
  return success();
}

LogicalResult StandardAttentionOp::verify() {
  if (failed(positive(*this, "gqa", getGqa())))
    return failure();
  // The scale's type is the accumulator's (the state m, l, acc): f32, or f64.
  if (!getScale().getType().isF32() && !getScale().getType().isF64())
    return emitOpError() << "scale must be f32 or f64 (the accumulator's type), got "
                         << getScale().getType();
  if (ShapedType::isDynamic(dim(getQ(), 2)))
    return emitOpError("head_dim (dimension 2 of q) must be static");
  if (failed(nonEmpty(*this, getQ(), 2, "head_dim (dimension 2 of q)")))
    return failure();
  if (getK().getType() != getV().getType())
    return emitOpError("k and v must have the same type");
  if (failed(sameDim(*this, getK(), 2, "head_dim", "k", getQ(), 2, "q")) ||
      failed(sameElementType(*this, getK(), "k", getQ(), "q")))
    return failure();
  if (getOut().getType() != getQ().getType())
    return emitOpError("out must have the type of q");
  const int64_t hq = dim(getQ(), 0), hkv = dim(getK(), 0);
  const int64_t gqa = static_cast<int64_t>(getGqa());
  if (!ShapedType::isDynamic(hq) && !ShapedType::isDynamic(hkv) && hq != hkv * gqa)
    return emitOpError() << "gqa = " << gqa << " needs " << hkv * gqa
                         << " query heads for " << hkv << " KV heads, q has " << hq;
  if (failed(sameDim(*this, getLse(), 0, "heads", "lse", getQ(), 0, "q")) ||
      failed(sameDim(*this, getLse(), 1, "q_len", "lse", getQ(), 1, "q")))
    return failure();
  // The pipeline takes head counts and lengths at run time, as the kernels do.
  for (auto [value, name] : {std::pair{getQ(), "q"}, {getK(), "k"}, {getLse(), "lse"}})
    for (int64_t d : {0, 1})
      if (!ShapedType::isDynamic(dim(value, d)))
        return emitOpError() << "dimension " << d << " of " << name << " ("
                             << (d == 0 ? "heads" : "tokens")
                             << ") must be dynamic: the kernels take it at run time";
  return success();
}

LogicalResult GatherPagesOp::verify() {
  if (ShapedType::isDynamic(dim(getCache(), 1)))
    return emitOpError("page size (dimension 1 of the cache) must be static");
  if (failed(positive(*this, "page size (dimension 1 of the cache)", dim(getCache(), 1))))
    return failure();
  if (failed(sameDim(*this, getResult(), 0, "kv_heads", "result", getCache(), 2, "cache")) ||
      failed(sameDim(*this, getResult(), 2, "head_dim", "result", getCache(), 3, "cache")))
    return failure();
  return sameElementType(*this, getResult(), "result", getCache(), "cache");
}

LogicalResult LoadQTileOp::verify() {
  if (failed(positive(*this, "tile_q", getTileQ())) ||
      failed(positive(*this, "group", getGroup())))
    return failure();
  const int64_t rows = dim(getResult(), 0);
  int64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<int64_t>(getTileQ()), static_cast<int64_t>(getGroup()),
                             &expected) ||
      expected > (int64_t(1) << 31))
    return emitOpError() << "tile_q * group = " << getTileQ() << " * " << getGroup()
                         << " is larger than 2^31 rows";
  if (!ShapedType::isDynamic(rows))
    return emitOpError() << "the result's rows (dimension 0) must be dynamic: up to tile_q * "
                            "group = "
                         << expected << ", fewer in a sequence's last tile";
  if (failed(nonEmpty(*this, getResult(), 1, "head_dim (dimension 1 of the result)")) ||
      failed(sameDim(*this, getResult(), 1, "head_dim", "result", getSource(), 2, "source")))
    return failure();
  return sameElementType(*this, getResult(), "result", getSource(), "source");
}

LogicalResult StoreOTileOp::verify() {
  if (failed(positive(*this, "tile_q", getTileQ())) ||
      failed(positive(*this, "group", getGroup())))
    return failure();
  auto tile = cast<RankedTensorType>(getTile().getType());
  auto dest = cast<RankedTensorType>(getDest().getType());
  if (!isa<FloatType>(tile.getElementType()) || !isa<FloatType>(dest.getElementType()))
    return emitOpError() << "tile and dest must hold floats, got " << tile.getElementType()
                         << " into " << dest.getElementType();
  if (tile.getRank() < 1 || tile.getRank() > 2 || dest.getRank() != tile.getRank() + 1)
    return emitOpError() << "expected a rank-2 tile into a rank-3 output or a rank-1 "
                            "tile into a rank-2 lse, got rank "
                         << tile.getRank() << " into rank " << dest.getRank();
  if (!ShapedType::isDynamic(tile.getDimSize(0)))
    return emitOpError("the tile's rows (dimension 0) must be dynamic: fewer in a sequence's "
                       "last tile");
  if (tile.getRank() == 2 && ShapedType::isDynamic(tile.getDimSize(1)))
    return emitOpError("head_dim (dimension 1 of the tile) must be static");
  if (tile.getRank() == 2 &&
      failed(nonEmpty(*this, getTile(), 1, "head_dim (dimension 1 of the tile)")))
    return failure();
  if (tile.getRank() == 2)
    return sameDim(*this, getTile(), 1, "head_dim", "tile", getDest(), 2, "dest");
  return success();
}

LogicalResult LoadKVTileOp::verify() {
  if (ShapedType::isDynamic(dim(getResult(), 0)))
    return emitOpError("the tile size (dimension 0 of the result) must be static");
  if (ShapedType::isDynamic(dim(getResult(), 1)))
    return emitOpError("head_dim (dimension 1 of the result) must be static");
  if (failed(nonEmpty(*this, getResult(), 0, "the tile size (dimension 0 of the result)")) ||
      failed(nonEmpty(*this, getResult(), 1, "head_dim (dimension 1 of the result)")) ||
      failed(sameDim(*this, getResult(), 1, "head_dim", "result", getSource(), 2, "source")))
    return failure();
  return sameElementType(*this, getResult(), "result", getSource(), "source");
}

LogicalResult BlockTableLookupOp::verify() {
  if (failed(positive(*this, "page_size", getPageSize())))
    return failure();
  if (ShapedType::isDynamic(dim(getSlots(), 0)))
    return emitOpError("the tile size (size of the slots) must be static");
  return success();
}

LogicalResult LoadPagedKVTileOp::verify() {
  // The lowering divides slots by the page size: it must be known.
  if (ShapedType::isDynamic(dim(getCache(), 1)))
    return emitOpError("page size (dimension 1 of the cache) must be static");
  if (failed(positive(*this, "page size (dimension 1 of the cache)", dim(getCache(), 1))))
    return failure();
  if (failed(sameDim(*this, getResult(), 0, "tile size", "result", getSlots(), 0, "slots")) ||
      failed(sameDim(*this, getResult(), 1, "head_dim", "result", getCache(), 3, "cache")))
    return failure();
  if (ShapedType::isDynamic(dim(getResult(), 0)))
    return emitOpError("the tile size (dimension 0 of the result) must be static");
  return sameElementType(*this, getResult(), "result", getCache(), "cache");
}

/// The accumulator type of the state (f32 or f64), shared by m, l and acc.
static LogicalResult sameStateType(Operation *op, Value m, Value l, Value acc) {
  if (m.getType() != l.getType())
    return op->emitOpError("m and l must have the same type");
  if (failed(sameElementType(op, acc, "acc", m, "m")) ||
      failed(sameDim(op, acc, 0, "rows", "acc", m, 0, "m")))
    return failure();
  return success();
}

LogicalResult StateInitOp::verify() {
  if (ShapedType::isDynamic(dim(getLike(), 1)))
    return emitOpError("head_dim (dimension 1 of the query tile) must be static");
  if (failed(nonEmpty(*this, getLike(), 1, "head_dim (dimension 1 of the query tile)")))
    return failure();
  if (!ShapedType::isDynamic(dim(getLike(), 0)))
    return emitOpError("the query tile's rows (dimension 0) must be dynamic: fewer in a "
                       "sequence's last tile");
  if (failed(sameStateType(*this, getM(), getL(), getAcc())) ||
      failed(sameDim(*this, getAcc(), 1, "head_dim", "acc", getLike(), 1, "the query tile")) ||
      failed(sameDim(*this, getAcc(), 0, "rows", "acc", getLike(), 0, "the query tile")))
    return failure();
  return success();
}

LogicalResult QKOp::verify() {
  if (!ShapedType::isDynamic(dim(getQ(), 0)) || !ShapedType::isDynamic(dim(getScores(), 0)))
    return emitOpError("the rows of q and scores (dimension 0) must be dynamic: fewer in a "
                       "sequence's last tile");
  if (ShapedType::isDynamic(dim(getK(), 0)))
    return emitOpError("the key tile (dimension 0 of k) must be static");
  if (ShapedType::isDynamic(dim(getK(), 1)))
    return emitOpError("head_dim (dimension 1 of k) must be static");
  if (failed(sameDim(*this, getK(), 1, "head_dim", "k", getQ(), 1, "q")) ||
      failed(sameElementType(*this, getK(), "k", getQ(), "q")) ||
      failed(sameDim(*this, getScores(), 0, "rows", "scores", getQ(), 0, "q")) ||
      failed(sameDim(*this, getScores(), 1, "columns", "scores", getK(), 0, "rows of k")))
    return failure();
  if (getElementTypeOrSelf(getScores().getType()) != getScale().getType())
    return emitOpError() << "scores must have the element type of scale ("
                         << getScale().getType() << ")";
  return success();
}

LogicalResult MaskOp::verify() { return positive(*this, "tile_q", getTileQ()); }

LogicalResult RowMaxOp::verify() {
  if (failed(sameDim(*this, getMOld(), 0, "rows", "m_old", getScores(), 0, "scores")))
    return failure();
  return sameElementType(*this, getMOld(), "m_old", getScores(), "scores");
}

LogicalResult ExpOp::verify() {
  if (failed(sameDim(*this, getMNew(), 0, "rows", "m_new", getScores(), 0, "scores")))
    return failure();
  return sameElementType(*this, getMNew(), "m_new", getScores(), "scores");
}

LogicalResult AccumulateOp::verify() {
  if (failed(sameStateType(*this, getAlpha(), getL(), getAcc())) ||
      failed(sameDim(*this, getP(), 0, "rows", "p", getAcc(), 0, "acc")) ||
      failed(sameDim(*this, getP(), 1, "columns", "p", getV(), 0, "rows of v")) ||
      failed(sameDim(*this, getV(), 1, "head_dim", "v", getAcc(), 1, "acc")) ||
      failed(sameElementType(*this, getP(), "p", getAcc(), "acc")))
    return failure();
  return success();
}

LogicalResult NormalizeOp::verify() {
  if (failed(sameElementType(*this, getL(), "l", getAcc(), "acc")) ||
      failed(sameDim(*this, getAcc(), 0, "rows", "acc", getL(), 0, "l")))
    return failure();
  return success();
}

LogicalResult MergeOp::verify() {
  return sameStateType(*this, getMA(), getLA(), getAccA());
}

LogicalResult ClassifyTilesOp::verify() {
  if (failed(positive(*this, "tile_q", getTileQ())) ||
      failed(positive(*this, "tile_kv", getTileKv())))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Result names: the IR uses the algorithm's names (m, l, acc, ...)
//===----------------------------------------------------------------------===//

static void nameResults(Operation *op, OpAsmSetValueNameFn setName,
                        std::initializer_list<const char *> names) {
  for (auto [result, name] : llvm::zip(op->getResults(), names))
    setName(result, name);
}

void StandardAttentionOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  nameResults(*this, setName, {"out", "lse"});
}
void StateInitOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  // attn-split-kv's loop over splits starts each split from a state of its own.
  Operation *parent = (*this)->getParentOp();
  auto role = parent ? parent->getAttrOfType<StringAttr>("attn.loop") : StringAttr();
  if (role && role.getValue() == "kv_splits")
    nameResults(*this, setName, {"m_split", "l_split", "acc_split"});
  else
    nameResults(*this, setName, {"m", "l", "acc"});
}
void AccumulateOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  nameResults(*this, setName, {"l_new", "acc_new"});
}
void MergeOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  nameResults(*this, setName, {"m_merged", "l_merged", "acc_merged"});
}
void ClassifyTilesOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  nameResults(*this, setName, {"lo", "full_lo", "full_hi", "hi"});
}
void SplitRangeOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  nameResults(*this, setName, {"split_lo", "split_hi"});
}
