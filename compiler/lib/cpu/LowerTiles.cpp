//===- LowerTiles.cpp - attn-lower-tiles: tile ops to linalg, tensor, scf -===//
//
// The CPU backend's first step: every tile-level attn op becomes standard
// MLIR on tensors (linalg.generic for the arithmetic, tensor slices for the
// loads and stores, scf for the guarded block-table reads), so that
// one-shot bufferization and the standard conversions take it to LLVM. Each
// lowering is the op's documented semantics written as loops, guards
// included: an op without `inf_safe` really computes exp(-inf - -inf).
//
//===----------------------------------------------------------------------===//

#include "attnc/CpuPasses.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

namespace attn {
#define GEN_PASS_DEF_LOWERTILES
#include "attnc/CpuPasses.h.inc"
} // namespace attn

using namespace mlir;
using namespace attn;

namespace {
using utils::IteratorType;
constexpr IteratorType kPar = IteratorType::parallel;
constexpr IteratorType kRed = IteratorType::reduction;

/// A builder with the small vocabulary the lowerings share.
struct Emitter {
  OpBuilder &b;
  Location loc;

  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value dim(Value t, int64_t d) { return tensor::DimOp::create(b, loc, t, d); }
  Value floatConst(Type t, double v) {
    return arith::ConstantOp::create(b, loc, t, b.getFloatAttr(t, v));
  }
  Value negInf(Type t) {
    return floatConst(t, -std::numeric_limits<double>::infinity());
  }
  /// max(lo, min(hi, v)) on signed index values.
  Value clamp(Value v, Value lo, Value hi) {
    return arith::MaxSIOp::create(b, loc, lo, arith::MinSIOp::create(b, loc, hi, v));
  }

  /// An uninitialised tensor of `type`; `dynSizes` fill its dynamic sizes.
  Value empty(RankedTensorType type, ValueRange dynSizes) {
    return tensor::EmptyOp::create(b, loc, type, dynSizes);
  }
  Value filled(RankedTensorType type, ValueRange dynSizes, double v) {
    Value init = empty(type, dynSizes);
    return linalg::FillOp::create(b, loc, ValueRange{floatConst(type.getElementType(), v)},
                                  ValueRange{init})
        .getResult(0);
  }
  /// The dynamic sizes of `like`, for a tensor of the same shape.
  SmallVector<Value> dynSizesOf(Value like) {
    SmallVector<Value> sizes;
    auto t = cast<RankedTensorType>(like.getType());
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (t.isDynamicDim(d))
        sizes.push_back(dim(like, d));
    return sizes;
  }

  /// linalg.generic over `outs`; `maps` are affine maps over `numLoops` dims.
  Value generic(ValueRange ins, Value out, ArrayRef<AffineMap> maps,
                ArrayRef<IteratorType> iters,
                function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
    auto op = linalg::GenericOp::create(
        b, loc, TypeRange{out.getType()}, ins, ValueRange{out}, maps, iters,
        [&](OpBuilder &nb, Location nl, ValueRange args) {
          linalg::YieldOp::create(nb, nl, body(nb, nl, args));
        });
    return op.getResult(0);
  }
  /// An element-wise op over tensors of one shape (the first input's).
  Value elementwise(ValueRange ins, Value out,
                    function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
    int64_t rank = cast<RankedTensorType>(out.getType()).getRank();
    SmallVector<AffineMap> maps(ins.size() + 1, b.getMultiDimIdentityMap(rank));
    SmallVector<IteratorType> iters(rank, kPar);
    return generic(ins, out, maps, iters, body);
  }
  /// Maps for (row, col) loops reading a per-row vector and a row x col tile.
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  }
};

/// Converts between float types (a no-op when they agree).
Value convertFloat(OpBuilder &b, Location loc, Value v, Type to) {
  Type from = v.getType();
  if (from == to)
    return v;
  if (from.getIntOrFloatBitWidth() == to.getIntOrFloatBitWidth()) // bf16 <-> f16: through f32
    return arith::TruncFOp::create(b, loc, to, arith::ExtFOp::create(b, loc, b.getF32Type(), v));
  if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
    return arith::ExtFOp::create(b, loc, to, v);
  return arith::TruncFOp::create(b, loc, to, v);
}

Value isNegInf(OpBuilder &b, Location loc, Value v) {
  Type t = v.getType();
  Value inf = arith::ConstantOp::create(
      b, loc, t, b.getFloatAttr(t, -std::numeric_limits<double>::infinity()));
  return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, v, inf);
}

/// exp(x - m). When `safe`, `ifEmpty` wherever `guard` is -inf: the -inf
/// guards of attn-safe-init, which keep exp(-inf - -inf) = NaN out.
Value guardedExp(OpBuilder &b, Location l, Value x, Value m, Value guard, bool safe,
                 double ifEmpty) {
  Value e = math::ExpOp::create(b, l, arith::SubFOp::create(b, l, x, m));
  if (!safe)
    return e;
  Value fallback = arith::ConstantOp::create(b, l, e.getType(), b.getFloatAttr(e.getType(), ifEmpty));
  return arith::SelectOp::create(b, l, isNegInf(b, l, guard), fallback, e);
}

//===----------------------------------------------------------------------===//
// The state and the arithmetic of the recurrence
//===----------------------------------------------------------------------===//

void lower(StateInitOp op, Emitter &e) {
  Value rows = e.dim(op.getLike(), 0);
  Value m = e.filled(op.getM().getType(), {rows}, -std::numeric_limits<double>::infinity());
  Value l = e.filled(op.getL().getType(), {rows}, 0.0);
  Value acc = e.filled(op.getAcc().getType(), {rows}, 0.0);
  op->replaceAllUsesWith(ValueRange{m, l, acc});
}

void lower(QKOp op, Emitter &e) {
  auto type = op.getScores().getType();
  Type acc = type.getElementType();
  Value init = e.filled(type, {e.dim(op.getQ(), 0)}, 0.0);
  // s[r, c] = sum_d q[r, d] * k[c, d]
  Value dot = e.generic({op.getQ(), op.getK()}, init,
                        {e.map(3, {0, 2}), e.map(3, {1, 2}), e.map(3, {0, 1})},
                        {kPar, kPar, kRed}, [&](OpBuilder &b, Location l, ValueRange a) {
                          Value q = convertFloat(b, l, a[0], acc);
                          Value k = convertFloat(b, l, a[1], acc);
                          Value qk = arith::MulFOp::create(b, l, q, k);
                          return Value(arith::AddFOp::create(b, l, a[2], qk));
                        });
  Value scale = op.getScale();
  // In place (the tile itself is the generic's output): the score tile is
  // one buffer through scale, mask and exp, as a GPU kernel's registers are.
  Value scaled = e.elementwise({}, dot, [&](OpBuilder &b, Location l, ValueRange a) {
    return Value(arith::MulFOp::create(b, l, a[0], scale));
  });
  op.getScores().replaceAllUsesWith(scaled);
}

/// Whether query row `row` (in tile coordinates) may see key column `col`.
Value visible(OpBuilder &b, Location loc, const Mask &mask, Value row, Value col,
              Value qLen, Value kvLen) {
  Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, col, kvLen);
  if (mask.kind == MaskKind::None)
    return inRange;
  // Bottom-right alignment: query `row` sits at key position row + kv_len - q_len.
  Value pos = arith::AddIOp::create(b, loc, row, arith::SubIOp::create(b, loc, kvLen, qLen));
  Value ok = arith::AndIOp::create(
      b, loc, inRange, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, col, pos));
  if (mask.kind == MaskKind::SlidingWindow) {
    Value w = arith::ConstantIndexOp::create(b, loc, mask.window);
    Value first = arith::SubIOp::create(b, loc, pos, w);
    ok = arith::AndIOp::create(
        b, loc, ok, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, col, first));
  }
  return ok;
}

void lower(MaskOp op, Emitter &e) {
  Mask mask = op.getMask().getValue();
  Value tileQ = e.index(op.getTileQ());
  // In place: bufferization copies the tile only where it is read afterwards.
  Value out = e.elementwise(
      {}, op.getScores(),
      [&](OpBuilder &b, Location l, ValueRange a) {
        Value r = linalg::IndexOp::create(b, l, 0), c = linalg::IndexOp::create(b, l, 1);
        // Row r of a (GQA-packed) tile is query q_start + r % tile_q.
        Value row = arith::AddIOp::create(b, l, op.getQStart(),
                                          arith::RemUIOp::create(b, l, r, tileQ));
        Value col = arith::AddIOp::create(b, l, op.getKvStart(), c);
        Value ok = visible(b, l, mask, row, col, op.getQLen(), op.getKvLen());
        Value inf = arith::ConstantOp::create(
            b, l, a[0].getType(),
            b.getFloatAttr(a[0].getType(), -std::numeric_limits<double>::infinity()));
        return Value(arith::SelectOp::create(b, l, ok, a[0], inf));
      });
  op.getResult().replaceAllUsesWith(out);
}

void lower(RowMaxOp op, Emitter &e) {
  // Start from a copy of m_old and fold each row's scores in.
  Value init = e.elementwise({op.getMOld()}, e.empty(op.getMOld().getType(), e.dynSizesOf(op.getMOld())),
                             [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  Value m = e.generic({op.getScores()}, init, {e.map(2, {0, 1}), e.map(2, {0})}, {kPar, kRed},
                      [](OpBuilder &b, Location l, ValueRange a) {
                        return Value(arith::MaximumFOp::create(b, l, a[0], a[1]));
                      });
  op.getMNew().replaceAllUsesWith(m);
}

void lower(RescaleFactorOp op, Emitter &e) {
  bool safe = op.getInfSafe();
  Value alpha = e.elementwise(
      {op.getMOld(), op.getMNew()}, e.empty(op.getType(), e.dynSizesOf(op.getMOld())),
      [&](OpBuilder &b, Location l, ValueRange a) {
        // attn-safe-init: no key seen yet (m_new = -inf): nothing to rescale, alpha = 1.
        return guardedExp(b, l, a[0], a[1], /*guard=*/a[1], safe, 1.0);
      });
  op.getAlpha().replaceAllUsesWith(alpha);
}

void lower(ExpOp op, Emitter &e) {
  bool safe = op.getInfSafe();
  // P overwrites the scores (row_max has read them): one tile, not two.
  Value p = e.generic(
      {op.getMNew()}, op.getScores(), {e.map(2, {0}), e.map(2, {0, 1})}, {kPar, kPar},
      [&](OpBuilder &b, Location l, ValueRange a) {
        // attn-safe-init: a row with m_new = -inf has no visible key: p = 0.
        return guardedExp(b, l, a[1], a[0], /*guard=*/a[0], safe, 0.0);
      });
  op.getP().replaceAllUsesWith(p);
}

/// alpha[r] * x[r, ...] for a row vector or a tile.
Value rescaleRows(Emitter &e, Value alpha, Value x) {
  auto type = cast<RankedTensorType>(x.getType());
  unsigned rank = type.getRank();
  SmallVector<unsigned> all;
  for (unsigned d = 0; d < rank; ++d)
    all.push_back(d);
  SmallVector<IteratorType> iters(rank, kPar);
  return e.generic({alpha, x}, e.empty(type, e.dynSizesOf(x)),
                   {e.map(rank, {0}), e.map(rank, all), e.map(rank, all)}, iters,
                   [](OpBuilder &b, Location l, ValueRange a) {
                     return Value(arith::MulFOp::create(b, l, a[0], a[1]));
                   });
}

void lower(AccumulateOp op, Emitter &e) {
  Type acc = op.getAcc().getType().getElementType();
  // l = alpha * l + sum_c p[r, c]
  Value l = e.generic({op.getP()}, rescaleRows(e, op.getAlpha(), op.getL()),
                      {e.map(2, {0, 1}), e.map(2, {0})}, {kPar, kRed},
                      [](OpBuilder &b, Location loc, ValueRange a) {
                        return Value(arith::AddFOp::create(b, loc, a[1], a[0]));
                      });
  // acc = alpha * acc + p V: loops (r, d, c)
  Value out = e.generic({op.getP(), op.getV()}, rescaleRows(e, op.getAlpha(), op.getAcc()),
                        {e.map(3, {0, 2}), e.map(3, {2, 1}), e.map(3, {0, 1})},
                        {kPar, kPar, kRed}, [&](OpBuilder &b, Location loc, ValueRange a) {
                          Value v = convertFloat(b, loc, a[1], acc);
                          Value pv = arith::MulFOp::create(b, loc, a[0], v);
                          return Value(arith::AddFOp::create(b, loc, a[2], pv));
                        });
  op->replaceAllUsesWith(ValueRange{l, out});
}

void lower(NormalizeOp op, Emitter &e) {
  bool safe = op.getInfSafe();
  Value out = e.generic(
      {op.getL(), op.getAcc()}, e.empty(op.getType(), e.dynSizesOf(op.getAcc())),
      {e.map(2, {0}), e.map(2, {0, 1}), e.map(2, {0, 1})}, {kPar, kPar},
      [&](OpBuilder &b, Location l, ValueRange a) {
        Value x = arith::DivFOp::create(b, l, a[1], a[0]);
        if (!safe)
          return x;
        // attn-safe-init: a row that saw no key has l = 0: output 0, not 0/0.
        Value zero = arith::ConstantOp::create(b, l, x.getType(), b.getFloatAttr(x.getType(), 0.0));
        Value empty = arith::CmpFOp::create(b, l, arith::CmpFPredicate::OEQ, a[0], zero);
        return Value(arith::SelectOp::create(b, l, empty, zero, x));
      });
  op.getOut().replaceAllUsesWith(out);
}

void lower(LseOp op, Emitter &e) {
  Value lse = e.elementwise({op.getM(), op.getL()}, e.empty(op.getType(), e.dynSizesOf(op.getM())),
                            [](OpBuilder &b, Location l, ValueRange a) {
                              // m + log(l); -inf + log(0) = -inf for a row with no key.
                              return Value(arith::AddFOp::create(
                                  b, l, a[0], math::LogOp::create(b, l, a[1])));
                            });
  op.getLse().replaceAllUsesWith(lse);
}

void lower(MergeOp op, Emitter &e) {
  bool safe = op.getInfSafe();
  auto rowType = op.getM().getType();
  Value m = e.elementwise({op.getMA(), op.getMB()}, e.empty(rowType, e.dynSizesOf(op.getMA())),
                          [](OpBuilder &b, Location l, ValueRange a) {
                            return Value(arith::MaximumFOp::create(b, l, a[0], a[1]));
                          });
  // The weight of each side: exp(m_side - m), 0 for a side that saw nothing.
  auto weight = [&](Value side) {
    return e.elementwise({side, m}, e.empty(rowType, e.dynSizesOf(m)),
                         [&](OpBuilder &b, Location l, ValueRange a) {
                           return guardedExp(b, l, a[0], a[1], /*guard=*/a[0], safe, 0.0);
                         });
  };
  Value wa = weight(op.getMA()), wb = weight(op.getMB());
  auto add = [&](Value x, Value y) {
    return e.elementwise({x, y}, e.empty(cast<RankedTensorType>(x.getType()), e.dynSizesOf(x)),
                         [](OpBuilder &b, Location l, ValueRange a) {
                           return Value(arith::AddFOp::create(b, l, a[0], a[1]));
                         });
  };
  Value l = add(rescaleRows(e, wa, op.getLA()), rescaleRows(e, wb, op.getLB()));
  Value acc = add(rescaleRows(e, wa, op.getAccA()), rescaleRows(e, wb, op.getAccB()));
  op->replaceAllUsesWith(ValueRange{m, l, acc});
}

//===----------------------------------------------------------------------===//
// Loads and stores
//===----------------------------------------------------------------------===//

/// Query rows of a tile at q_start that exist: clamp(q_len - q_start, 0, tile_q).
Value validRows(Emitter &e, Value len, Value start, int64_t tile) {
  return e.clamp(arith::SubIOp::create(e.b, e.loc, len, start), e.index(0), e.index(tile));
}

void lower(LoadQTileOp op, Emitter &e) {
  const int64_t tileQ = op.getTileQ(), group = op.getGroup();
  auto type = op.getType();
  const int64_t headDim = type.getDimSize(1);
  Value src = op.getSource();
  Value valid = validRows(e, e.dim(src, 1), op.getQStart(), tileQ);
  Value tile = e.filled(type, {e.index(tileQ * group)}, 0.0);
  // One loop over the group's heads (not one copy of the code per head: a
  // group of 256 would make the compile slow).
  Value tileQValue = e.index(tileQ);
  auto rowsType = RankedTensorType::get({ShapedType::kDynamic, headDim}, type.getElementType());
  auto heads = scf::ForOp::create(
      e.b, e.loc, e.index(0), e.index(group), e.index(1), ValueRange{tile},
      [&](OpBuilder &b, Location l, Value g, ValueRange iter) {
        Value head = arith::AddIOp::create(b, l, op.getHead(), g);
        Value rows = tensor::ExtractSliceOp::create(
            b, l, rowsType, src, ValueRange{head, op.getQStart()}, ValueRange{valid}, ValueRange{},
            b.getDenseI64ArrayAttr({ShapedType::kDynamic, ShapedType::kDynamic, 0}),
            b.getDenseI64ArrayAttr({1, ShapedType::kDynamic, headDim}),
            b.getDenseI64ArrayAttr({1, 1, 1}));
        Value at = arith::MulIOp::create(b, l, g, tileQValue);
        Value filled = tensor::InsertSliceOp::create(
            b, l, rows, iter[0], ValueRange{at}, ValueRange{valid}, ValueRange{},
            b.getDenseI64ArrayAttr({ShapedType::kDynamic, 0}),
            b.getDenseI64ArrayAttr({ShapedType::kDynamic, headDim}), b.getDenseI64ArrayAttr({1, 1}));
        scf::YieldOp::create(b, l, filled);
      });
  op.getResult().replaceAllUsesWith(heads.getResult(0));
}

void lower(StoreOTileOp op, Emitter &e) {
  const int64_t tileQ = op.getTileQ(), group = op.getGroup();
  auto tileType = cast<RankedTensorType>(op.getTile().getType());
  auto destType = cast<RankedTensorType>(op.getDest().getType());
  const bool isLse = tileType.getRank() == 1;
  const int64_t headDim = isLse ? 0 : tileType.getDimSize(1);
  // Convert the tile to the output's element type first.
  Value tile = op.getTile();
  if (tileType.getElementType() != destType.getElementType()) {
    auto converted = RankedTensorType::get(tileType.getShape(), destType.getElementType());
    Type to = destType.getElementType();
    tile = e.elementwise({tile}, e.empty(converted, e.dynSizesOf(tile)),
                         [&](OpBuilder &b, Location l, ValueRange a) {
                           return convertFloat(b, l, a[0], to);
                         });
  }
  Value dest = op.getDest();
  Value valid = validRows(e, e.dim(dest, 1), op.getQStart(), tileQ);
  const int64_t dyn = ShapedType::kDynamic;
  SmallVector<int64_t> rowSizes = isLse ? SmallVector<int64_t>{dyn} : SmallVector<int64_t>{dyn, headDim};
  auto rowsType = RankedTensorType::get(rowSizes, destType.getElementType());
  SmallVector<int64_t> tileOffsets = isLse ? SmallVector<int64_t>{dyn} : SmallVector<int64_t>{dyn, 0};
  SmallVector<int64_t> ones(rowSizes.size(), 1);
  SmallVector<int64_t> destOffsets = isLse ? SmallVector<int64_t>{dyn, dyn} : SmallVector<int64_t>{dyn, dyn, 0};
  SmallVector<int64_t> destSizes = isLse ? SmallVector<int64_t>{1, dyn} : SmallVector<int64_t>{1, dyn, headDim};
  SmallVector<int64_t> destStrides(destSizes.size(), 1);
  Value tileQValue = e.index(tileQ);
  // One loop over the group's heads, as in the load.
  auto heads = scf::ForOp::create(
      e.b, e.loc, e.index(0), e.index(group), e.index(1), ValueRange{dest},
      [&](OpBuilder &b, Location l, Value g, ValueRange iter) {
        Value head = arith::AddIOp::create(b, l, op.getHead(), g);
        Value at = arith::MulIOp::create(b, l, g, tileQValue);
        Value rows = tensor::ExtractSliceOp::create(
            b, l, rowsType, tile, ValueRange{at}, ValueRange{valid}, ValueRange{},
            b.getDenseI64ArrayAttr(tileOffsets), b.getDenseI64ArrayAttr(rowSizes),
            b.getDenseI64ArrayAttr(ones));
        Value stored = tensor::InsertSliceOp::create(
            b, l, rows, iter[0], ValueRange{head, op.getQStart()}, ValueRange{valid}, ValueRange{},
            b.getDenseI64ArrayAttr(destOffsets), b.getDenseI64ArrayAttr(destSizes),
            b.getDenseI64ArrayAttr(destStrides));
        scf::YieldOp::create(b, l, stored);
      });
  op.getResult().replaceAllUsesWith(heads.getResult(0));
}

void lower(LoadKVTileOp op, Emitter &e) {
  auto type = op.getType();
  const int64_t tileKV = type.getDimSize(0), headDim = type.getDimSize(1);
  Value src = op.getSource();
  Value valid = validRows(e, e.dim(src, 1), op.getKvStart(), tileKV);
  Value tile = e.filled(type, {}, 0.0); // keys past the end read as zero
  auto rowsType = RankedTensorType::get({ShapedType::kDynamic, headDim}, type.getElementType());
  Value rows = tensor::ExtractSliceOp::create(
      e.b, e.loc, rowsType, src, ValueRange{op.getHead(), op.getKvStart()}, ValueRange{valid},
      ValueRange{}, e.b.getDenseI64ArrayAttr({ShapedType::kDynamic, ShapedType::kDynamic, 0}),
      e.b.getDenseI64ArrayAttr({1, ShapedType::kDynamic, headDim}), e.b.getDenseI64ArrayAttr({1, 1, 1}));
  tile = tensor::InsertSliceOp::create(e.b, e.loc, rows, tile, ValueRange{}, ValueRange{valid},
                                       ValueRange{}, e.b.getDenseI64ArrayAttr({0, 0}),
                                       e.b.getDenseI64ArrayAttr({ShapedType::kDynamic, headDim}),
                                       e.b.getDenseI64ArrayAttr({1, 1}));
  op.getResult().replaceAllUsesWith(tile);
}

void lower(BlockTableLookupOp op, Emitter &e) {
  auto type = op.getSlots().getType();
  const int64_t pageSize = op.getPageSize();
  Value table = op.getBlockTable();
  Value out = e.generic({}, e.empty(type, {}), {e.map(1, {0})}, {kPar},
                        [&](OpBuilder &b, Location l, ValueRange) {
    Value i = linalg::IndexOp::create(b, l, 0);
    Value t = arith::AddIOp::create(b, l, op.getKvStart(), i);
    Value inside = arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, t, op.getKvLen());
    Value p = arith::ConstantIndexOp::create(b, l, pageSize);
    // Read the table only for tokens that exist: past kv_len there may be no entry.
    auto ifOp = scf::IfOp::create(
        b, l, inside,
        [&](OpBuilder &tb, Location tl) {
          Value entry = tensor::ExtractOp::create(tb, tl, table,
                                                  ValueRange{arith::DivUIOp::create(tb, tl, t, p)});
          Value page = arith::IndexCastOp::create(tb, tl, tb.getIndexType(), entry);
          Value slot = arith::AddIOp::create(tb, tl, arith::MulIOp::create(tb, tl, page, p),
                                             arith::RemUIOp::create(tb, tl, t, p));
          scf::YieldOp::create(tb, tl, slot);
        },
        [&](OpBuilder &eb, Location el) {
          scf::YieldOp::create(eb, el, Value(arith::ConstantIndexOp::create(eb, el, -1)));
        });
    return ifOp.getResult(0);
  });
  op.getSlots().replaceAllUsesWith(out);
}

void lower(LoadPagedKVTileOp op, Emitter &e) {
  auto type = op.getType();
  Value cache = op.getCache();
  const int64_t pageSize = cast<RankedTensorType>(cache.getType()).getDimSize(1);
  Type elt = type.getElementType();
  Value out = e.generic({op.getSlots()}, e.empty(type, {}), {e.map(2, {0}), e.map(2, {0, 1})},
                        {kPar, kPar}, [&](OpBuilder &b, Location l, ValueRange a) {
    Value slot = a[0];
    Value d = linalg::IndexOp::create(b, l, 1);
    Value zero = arith::ConstantIndexOp::create(b, l, 0);
    Value present = arith::CmpIOp::create(b, l, arith::CmpIPredicate::sge, slot, zero);
    Value p = arith::ConstantIndexOp::create(b, l, pageSize);
    auto ifOp = scf::IfOp::create(
        b, l, present,
        [&](OpBuilder &tb, Location tl) {
          Value page = arith::DivUIOp::create(tb, tl, slot, p);
          Value offset = arith::RemUIOp::create(tb, tl, slot, p);
          Value v = tensor::ExtractOp::create(tb, tl, cache, ValueRange{page, offset, op.getHead(), d});
          scf::YieldOp::create(tb, tl, v);
        },
        [&](OpBuilder &eb, Location el) {
          // A slot of -1 (past kv_len) reads as zero.
          scf::YieldOp::create(eb, el, Value(arith::ConstantOp::create(eb, el, elt, eb.getFloatAttr(elt, 0.0))));
        });
    return ifOp.getResult(0);
  });
  op.getResult().replaceAllUsesWith(out);
}

//===----------------------------------------------------------------------===//
// Tile ranges
//===----------------------------------------------------------------------===//

/// The same computation as attn::classifyTiles, in index arithmetic.
void lower(ClassifyTilesOp op, Emitter &e) {
  OpBuilder &b = e.b;
  Location l = e.loc;
  Mask mask = op.getMask().getValue();
  const int64_t tileQ = op.getTileQ(), tileKV = op.getTileKv();
  auto add = [&](Value x, Value y) { return Value(arith::AddIOp::create(b, l, x, y)); };
  auto sub = [&](Value x, Value y) { return Value(arith::SubIOp::create(b, l, x, y)); };
  auto max = [&](Value x, Value y) { return Value(arith::MaxSIOp::create(b, l, x, y)); };
  auto min = [&](Value x, Value y) { return Value(arith::MinSIOp::create(b, l, x, y)); };
  auto fdiv = [&](Value x, int64_t d) { return Value(arith::FloorDivSIOp::create(b, l, x, e.index(d))); };
  auto cdiv = [&](Value x, int64_t d) { return Value(arith::CeilDivSIOp::create(b, l, x, e.index(d))); };
  auto lt = [&](Value x, Value y) {
    return Value(arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, x, y));
  };
  auto select = [&](Value c, Value x, Value y) { return Value(arith::SelectOp::create(b, l, c, x, y)); };
  Value zero = e.index(0), one = e.index(1);
  Value qStart = op.getQStart(), qLen = op.getQLen(), kvLen = op.getKvLen();

  Value lastRow = sub(min(add(qStart, e.index(tileQ)), qLen), one);
  Value off = sub(kvLen, qLen);
  Value pFirst = add(qStart, off), pLast = add(lastRow, off);
  Value lastKey = sub(kvLen, one);
  auto lowCol = [&](Value p) {
    return mask.kind == MaskKind::SlidingWindow ? max(zero, add(sub(p, e.index(mask.window)), one))
                                                : zero;
  };
  auto highCol = [&](Value p) { return mask.kind == MaskKind::None ? lastKey : min(p, lastKey); };
  Value unionLo = lowCol(mask.kind == MaskKind::None ? pFirst : max(pFirst, zero));
  Value unionHi = highCol(pLast);
  Value interLo = lowCol(pLast), interHi = highCol(pFirst);
  // Nothing visible: no rows, no keys, or the union is empty.
  Value none = arith::OrIOp::create(
      b, l, arith::OrIOp::create(b, l, lt(kvLen, one), lt(lastRow, qStart)), lt(unionHi, unionLo));
  Value lo = fdiv(unionLo, tileKV);
  Value hi = add(fdiv(unionHi, tileKV), one);
  Value fullLo = cdiv(interLo, tileKV);
  Value fullHi = fdiv(add(interHi, one), tileKV);
  Value noFull = arith::OrIOp::create(b, l, lt(interHi, interLo),
                                      arith::CmpIOp::create(b, l, arith::CmpIPredicate::sle, fullHi, fullLo));
  fullLo = select(noFull, lo, fullLo);
  fullHi = select(noFull, lo, fullHi);
  op->replaceAllUsesWith(ValueRange{select(none, zero, lo), select(none, zero, fullLo),
                                    select(none, zero, fullHi), select(none, zero, hi)});
}

void lower(SplitRangeOp op, Emitter &e) {
  OpBuilder &b = e.b;
  Location l = e.loc;
  // [lo + s*n/S, lo + (s+1)*n/S) with n = hi - lo.
  Value n = arith::SubIOp::create(b, l, op.getHi(), op.getLo());
  auto bound = [&](Value s) {
    Value part = arith::DivUIOp::create(b, l, arith::MulIOp::create(b, l, s, n), op.getNumSplits());
    return Value(arith::AddIOp::create(b, l, op.getLo(), part));
  };
  Value next = arith::AddIOp::create(b, l, op.getSplit(), e.index(1));
  op->replaceAllUsesWith(ValueRange{bound(op.getSplit()), bound(next)});
}

struct LowerTilesPass : attn::impl::LowerTilesBase<LowerTilesPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<AttnDialect>(op->getDialect()))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      OpBuilder b(op);
      Emitter e{b, op->getLoc()};
      bool lowered = llvm::TypeSwitch<Operation *, bool>(op)
                         .Case<StateInitOp, QKOp, MaskOp, RowMaxOp, RescaleFactorOp, ExpOp,
                               AccumulateOp, NormalizeOp, LseOp, MergeOp, LoadQTileOp,
                               StoreOTileOp, LoadKVTileOp, BlockTableLookupOp,
                               LoadPagedKVTileOp, ClassifyTilesOp, SplitRangeOp>([&](auto typed) {
                           lower(typed, e);
                           return true;
                         })
                         .Default([](Operation *) { return false; });
      if (!lowered) {
        op->emitError() << "attn-lower-tiles: '" << op->getName()
                        << "' is textbook-level; run the attn pipeline first";
        return signalPassFailure();
      }
    }
    // Erase in reverse so that users go before the values they use.
    for (Operation *op : llvm::reverse(ops))
      op->erase();
  }
};
} // namespace
