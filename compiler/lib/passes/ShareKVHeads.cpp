//===- ShareKVHeads.cpp - attn-share-kv-heads -----------------------------===//
//
// Grouped-query attention: gqa query heads read one KV head. Processed head
// by head, each K and V tile is loaded gqa times. Packing the group's query
// tiles into one taller tile loads it once for all of them: the loop over
// query heads becomes a loop over KV heads.
//
//===----------------------------------------------------------------------===//

#include "attnc/Passes.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"

namespace attn {
#define GEN_PASS_DEF_SHAREKVHEADS
#include "attnc/Passes.h.inc"
} // namespace attn

using namespace mlir;
using namespace attn;

/// Whether `op` is `arith.divui %iv, gqa`: the textbook query-to-KV head map.
static bool isHeadMap(Operation *op, Value iv, int64_t gqa) {
  auto div = dyn_cast<arith::DivUIOp>(op);
  APInt divisor;
  return div && div.getLhs() == iv && matchPattern(div.getRhs(), m_ConstantInt(&divisor)) &&
         divisor.getSExtValue() == gqa;
}

LogicalResult attn::shareKVHeads(RewriterBase &rewriter, scf::ForOp headsLoop, int64_t gqa) {
  Value iv = headsLoop.getInductionVar();
  SmallVector<Operation *> headMaps, tiles;
  for (Operation *user : iv.getUsers()) {
    if (isHeadMap(user, iv, gqa))
      headMaps.push_back(user);
    else if (isa<LoadQTileOp, StoreOTileOp>(user))
      tiles.push_back(user);
    else
      return rewriter.notifyMatchFailure(user, "unexpected use of the query head");
  }
  if (headMaps.empty())
    return rewriter.notifyMatchFailure(headsLoop, "no query-to-KV head map in the heads loop");

  Location loc = unnamed(headsLoop.getLoc());
  rewriter.setInsertionPoint(headsLoop);
  // The group size: the head map's own constant where it is defined outside
  // the loop (the textbook's %c<gqa>), not a copy of it.
  Value groupSize = cast<arith::DivUIOp>(headMaps.front()).getRhs();
  if (Operation *def = groupSize.getDefiningOp(); !def || headsLoop->isAncestor(def))
    groupSize = arith::ConstantIndexOp::create(rewriter, loc, gqa);
  Value numKVHeads = arith::DivUIOp::create(rewriter, named(loc, "kv_heads"),
                                            headsLoop.getUpperBound(), groupSize);
  rewriter.setInsertionPointToStart(headsLoop.getBody());
  // The induction variable now counts KV heads; the group's first query head:
  Value firstQHead = arith::MulIOp::create(rewriter, named(loc, "q_head"), iv, groupSize);

  auto groupAttr = rewriter.getI64IntegerAttr(gqa);
  for (Operation *op : headMaps)
    rewriter.replaceOp(op, iv);
  for (Operation *op : tiles) {
    rewriter.modifyOpInPlace(op, [&] {
      // attn-share-kv-heads: one tile now holds the rows of the gqa heads.
      op->replaceUsesOfWith(iv, firstQHead);
      op->setAttr("group", groupAttr);
    });
  }
  rewriter.modifyOpInPlace(headsLoop, [&] {
    headsLoop.setUpperBound(numKVHeads);
    headsLoop->setAttr("attn.gqa", groupAttr);
    iv.setLoc(named(loc, "kv_head"));
  });
  return success();
}

namespace {
struct ShareKVHeadsPass : attn::impl::ShareKVHeadsBase<ShareKVHeadsPass> {
  void runOnOperation() override {
    if (failed(requireTiled(getOperation(), "attn-share-kv-heads")))
      return signalPassFailure();
    func::FuncOp func = getOperation();
    std::optional<Spec> spec = getEnclosingSpec(func);
    if (!spec || spec->gqa == 1)
      return;
    SmallVector<scf::ForOp> loops;
    func.walk([&](scf::ForOp loop) {
      if (isLoopWithRole(loop, "heads") && !loop->hasAttr("attn.gqa"))
        loops.push_back(loop);
    });
    IRRewriter rewriter(&getContext());
    for (scf::ForOp loop : loops)
      if (failed(shareKVHeads(rewriter, loop, spec->gqa))) {
        loop.emitError() << "attn-share-kv-heads: this heads loop does not map query head h "
                            "to KV head h / "
                         << spec->gqa;
        return signalPassFailure();
      }
  }
};
} // namespace
