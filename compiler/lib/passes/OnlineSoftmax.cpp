//===- OnlineSoftmax.cpp - attn-online-softmax ----------------------------===//
//
// Textbook attention needs the whole score row before it can normalise it.
// The online softmax does not: it walks the keys tile by tile, keeping per
// row a running max m, a running sum l of exp(s - m) and an unnormalised
// output acc. When a tile raises m, the past is rescaled by
// alpha = exp(m_old - m_new). Only one score tile ever exists.
//
//===----------------------------------------------------------------------===//

#include "attnc/Passes.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace attn {
#define GEN_PASS_DEF_ONLINESOFTMAX
#include "attnc/Passes.h.inc"
} // namespace attn

using namespace mlir;
using namespace attn;

/// Marks a loop with the role it plays, so that later passes (and readers)
/// can find it, and names its induction variable and iteration arguments.
static scf::ForOp markLoop(scf::ForOp loop, StringRef role, StringRef iv,
                           ArrayRef<StringRef> iterArgs) {
  loop->setAttr(kLoopAttr, StringAttr::get(loop.getContext(), role));
  loop.getInductionVar().setLoc(named(loop.getLoc(), iv));
  for (auto [arg, name] : llvm::zip(loop.getRegionIterArgs(), iterArgs))
    arg.setLoc(named(loop.getLoc(), name));
  return loop;
}

FailureOr<scf::ForOp> attn::insertOnlineSoftmax(RewriterBase &rewriter, StandardAttentionOp op,
                                                const Spec &spec) {
  Location loc = unnamed(op.getLoc());
  rewriter.setInsertionPoint(op);
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };

  Value q = op.getQ(), k = op.getK(), v = op.getV(), scale = op.getScale();
  const int64_t tileQ = spec.tile_q, tileKV = spec.tile_kv, gqa = op.getGqa();
  auto qType = cast<RankedTensorType>(q.getType());
  const int64_t headDim = qType.getDimSize(2);
  const int64_t dyn = ShapedType::kDynamic;
  Type elt = qType.getElementType(), acc = scale.getType();

  auto qTileType = RankedTensorType::get({dyn, headDim}, elt);
  auto kvTileType = RankedTensorType::get({tileKV, headDim}, elt);
  auto rowType = RankedTensorType::get({dyn}, acc);
  auto accType = RankedTensorType::get({dyn, headDim}, acc);
  auto scoreType = RankedTensorType::get({dyn, tileKV}, acc);

  Value c0 = index(0), c1 = index(1);
  Value numQHeads = tensor::DimOp::create(rewriter, named(loc, "q_heads"), q, 0);
  Value qLen = tensor::DimOp::create(rewriter, named(loc, "q_len"), q, 1);
  // A gathered paged cache knows its length without a tensor to ask.
  Value kvLen;
  if (auto gather = k.getDefiningOp<GatherPagesOp>())
    kvLen = gather.getKvLen();
  else
    kvLen = tensor::DimOp::create(rewriter, named(loc, "kv_len"), k, 1);
  Value numQTiles =
      arith::CeilDivUIOp::create(rewriter, named(loc, "num_q_tiles"), qLen, index(tileQ));
  Value numKVTiles =
      arith::CeilDivUIOp::create(rewriter, named(loc, "num_kv_tiles"), kvLen, index(tileKV));
  Value outInit = tensor::EmptyOp::create(rewriter, named(loc, "out_init"), op.getOut().getType(),
                                          ValueRange{numQHeads, qLen});
  // The loops carry the lse only where the function returns it.
  const bool wantLse = !op.getLse().use_empty();
  SmallVector<Value> outsInit = {outInit};
  if (wantLse)
    outsInit.push_back(tensor::EmptyOp::create(rewriter, named(loc, "lse_init"),
                                               op.getLse().getType(), ValueRange{numQHeads, qLen}));
  auto carried = [&](StringRef out, StringRef lse) {
    SmallVector<StringRef, 2> names = {out};
    if (wantLse)
      names.push_back(lse);
    return names;
  };
  auto tileQAttr = rewriter.getI64IntegerAttr(tileQ);
  auto groupAttr = rewriter.getI64IntegerAttr(1);

  // The loop over KV tiles: the recurrence itself.
  auto kvBody = [&](OpBuilder &b, Location named_l, Value j, ValueRange state, Value qTile,
                    Value qStart, Value kvHead) {
    Location l = unnamed(named_l);
    Value m = state[0], sum = state[1], out = state[2];
    Value kvStart = arith::MulIOp::create(b, named(l, "kv_start"), j, index(tileKV));
    Value kt = LoadKVTileOp::create(b, named(l, "k_tile"), kvTileType, k, kvHead, kvStart);
    Value vt = LoadKVTileOp::create(b, named(l, "v_tile"), kvTileType, v, kvHead, kvStart);
    Value s = QKOp::create(b, named(l, "s"), scoreType, qTile, kt, scale);
    s = MaskOp::create(b, named(l, "s_masked"), scoreType, s, qStart, kvStart, qLen, kvLen,
                       op.getMaskAttr(), tileQAttr);
    Value mNew = RowMaxOp::create(b, named(l, "m_new"), rowType, s, m);
    Value alpha = RescaleFactorOp::create(b, named(l, "alpha"), rowType, m, mNew, UnitAttr());
    Value p = ExpOp::create(b, named(l, "p"), scoreType, s, mNew, UnitAttr());
    auto next = AccumulateOp::create(b, l, rowType, accType, sum, out, alpha, p, vt);
    scf::YieldOp::create(b, l, {mNew, next.getLNew(), next.getAccNew()});
  };

  // The loop over query tiles of one head.
  auto qBody = [&](OpBuilder &b, Location named_l, Value i, ValueRange outs, Value head,
                   Value kvHead) {
    Location l = unnamed(named_l);
    Value qStart = arith::MulIOp::create(b, named(l, "q_start"), i, index(tileQ));
    Value qTile = LoadQTileOp::create(b, named(l, "q_tile"), qTileType, q, head, qStart,
                                      tileQAttr, groupAttr);
    auto init = StateInitOp::create(b, l, rowType, rowType, accType, qTile);
    auto kvLoop = markLoop(
        scf::ForOp::create(b, named(l, "state"), c0, numKVTiles, c1, init.getResults(),
                           [&](OpBuilder &bb, Location ll, Value j, ValueRange st) {
                             kvBody(bb, ll, j, st, qTile, qStart, kvHead);
                           }),
        "kv_tiles", "j", {"m_old", "l_old", "acc_old"});
    Value m = kvLoop.getResult(0), sum = kvLoop.getResult(1), acc = kvLoop.getResult(2);
    Value outTile = NormalizeOp::create(b, named(l, "o_tile"), accType, sum, acc, UnitAttr());
    SmallVector<Value> yielded = {StoreOTileOp::create(b, l, outs[0].getType(), outTile, outs[0], head, qStart,
                                                       tileQAttr, groupAttr)};
    if (wantLse) {
      Value lse = LseOp::create(b, named(l, "lse_tile"), rowType, m, sum);
      yielded.push_back(
          StoreOTileOp::create(b, l, outs[1].getType(), lse, outs[1], head, qStart, tileQAttr, groupAttr));
    }
    scf::YieldOp::create(b, l, yielded);
  };

  // The loop over query heads; head h reads KV head h / gqa.
  auto headsLoop = markLoop(
      scf::ForOp::create(
          rewriter, named(loc, "out"), c0, numQHeads, c1, outsInit,
          [&](OpBuilder &b, Location, Value h, ValueRange outs) {
            Location l = loc;
            Value kvHead = h;
            if (gqa > 1)
              kvHead = arith::DivUIOp::create(b, named(l, "kv_head"), h, index(gqa));
            auto qLoop = markLoop(
                scf::ForOp::create(b, named(l, "out_tiles"), c0, numQTiles, c1, outs,
                                   [&](OpBuilder &bb, Location ll, Value i, ValueRange o) {
                                     qBody(bb, ll, i, o, h, kvHead);
                                   }),
                "q_tiles", "i", carried("out_i", "lse_i"));
            scf::YieldOp::create(b, l, qLoop.getResults());
          }),
      "heads", "h", carried("out_h", "lse_h"));
  if (wantLse) {
    rewriter.replaceOp(op, headsLoop.getResults());
  } else { // the op's lse has no use, and the loops carry none
    rewriter.replaceAllUsesWith(op.getOut(), headsLoop.getResult(0));
    rewriter.eraseOp(op);
  }
  return headsLoop;
}

namespace {
struct OnlineSoftmaxPattern : OpRewritePattern<StandardAttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(StandardAttentionOp op,
                                PatternRewriter &rewriter) const override {
    std::optional<Spec> spec = getEnclosingSpec(op);
    if (!spec)
      return rewriter.notifyMatchFailure(op, "the enclosing function has no attn.spec");
    if (failed(insertOnlineSoftmax(rewriter, op, *spec)))
      return failure();
    return success();
  }
};

struct OnlineSoftmaxPass : attn::impl::OnlineSoftmaxBase<OnlineSoftmaxPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!getEnclosingSpec(func)) {
      // Nothing to tile without tile sizes; say so if there was work to do.
      func.walk([&](StandardAttentionOp op) {
        op.emitError("attn-online-softmax needs the tile sizes of an `attn.spec` "
                     "attribute on the enclosing function");
        signalPassFailure();
      });
      return;
    }
    // The op and the spec agree on the group, mask, dtype and head_dim: the
    // verifier of the attn.spec attribute checked them (AttnDialect.cpp).
    RewritePatternSet patterns(&getContext());
    populateOnlineSoftmaxPatterns(patterns);
    if (failed(applyPatternsGreedily(func, std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace

void attn::populateOnlineSoftmaxPatterns(RewritePatternSet &patterns) {
  patterns.add<OnlineSoftmaxPattern>(patterns.getContext());
}

LogicalResult attn::requireTiled(func::FuncOp func, StringRef pass) {
  LogicalResult result = success();
  func.walk([&](StandardAttentionOp op) {
    op.emitError() << pass
                   << " runs after attn-online-softmax, on its tiled recurrence; this textbook op "
                      "has none yet (attn-opt --attn-online-softmax --"
                   << pass << ", or --attn-pipeline)";
    result = failure();
    return WalkResult::interrupt();
  });
  return result;
}
