//===- MaskTiles.cpp - attn-mask-tiles ------------------------------------===//
//
// Most KV tiles of a masked query tile are either fully visible or fully
// hidden. Only the tiles a mask edge crosses (and the tail past kv_len)
// need the mask arithmetic; the hidden ones need no work at all. The loop
// over KV tiles is split into ranges by class and its bounds shrink to the
// visible tiles.
//
//===----------------------------------------------------------------------===//

#include "attnc/Passes.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace attn {
#define GEN_PASS_DEF_MASKTILES
#include "attnc/Passes.h.inc"
} // namespace attn

using namespace mlir;
using namespace attn;

/// The attn.mask op applied directly in the loop body, if there is one.
static MaskOp findMask(scf::ForOp loop) {
  for (Operation &op : loop.getBody()->without_terminator())
    if (auto mask = dyn_cast<MaskOp>(op))
      return mask;
  return {};
}

LogicalResult attn::splitLoopByTileClass(RewriterBase &rewriter, scf::ForOp loop) {
  MaskOp mask = findMask(loop);
  if (!mask)
    return rewriter.notifyMatchFailure(loop, "no attn.mask in the KV-tile loop");
  for (Value v : {mask.getQStart(), mask.getQLen(), mask.getKvLen()})
    if (!loop.isDefinedOutsideOfLoop(v))
      return rewriter.notifyMatchFailure(loop, "the query range depends on the KV tile");
  const int64_t tileKV = cast<RankedTensorType>(mask.getScores().getType()).getDimSize(1);

  Location loc = unnamed(loop.getLoc());
  rewriter.setInsertionPoint(loop);
  Type idx = rewriter.getIndexType();
  auto cls = ClassifyTilesOp::create(rewriter, loc, idx, idx, idx, idx,
                                     mask.getQStart(),
                                     mask.getQLen(), mask.getKvLen(), mask.getMaskAttr(),
                                     mask.getTileQAttr(), rewriter.getI64IntegerAttr(tileKV));

  struct Range {
    Value lb, ub;
    bool full;
    StringRef name; ///< the loop's state, as the IR prints it
  };
  SmallVector<Range> ranges;
  // Only a sliding window hides keys before the visible ones: without it,
  // lo == full_lo and the leading partial range is empty.
  if (mask.getMask().getValue().kind == MaskKind::SlidingWindow)
    ranges.push_back(Range{cls.getLo(), cls.getFullLo(), false, "state_partial_lead"});
  ranges.push_back(Range{cls.getFullLo(), cls.getFullHi(), true, "state_full"});
  ranges.push_back(Range{cls.getFullHi(), cls.getHi(), false, "state_partial"});

  ValueRange state = loop.getInitArgs();
  scf::ForOp last;
  for (const Range &r : ranges) {
    auto part = cast<scf::ForOp>(rewriter.clone(*loop));
    rewriter.modifyOpInPlace(part, [&] {
      part.setLowerBound(r.lb);
      part.setUpperBound(r.ub);
      part.getInitArgsMutable().assign(state);
      part->setAttr(kTilesAttr, rewriter.getStringAttr(r.full ? "full" : "partial"));
      part->setLoc(named(loc, r.name));
    });
    if (r.full) {
      // attn-mask-tiles: every key of a fully visible tile counts, no mask.
      MaskOp m = findMask(part);
      rewriter.replaceOp(m, m.getScores());
    }
    state = part.getResults();
    last = part;
  }
  // The old loop's bound (the tile count) is dead once no loop reads it; it
  // would only clutter the IR a reader compares with the last stage's.
  Operation *bound = loop.getUpperBound().getDefiningOp();
  rewriter.replaceOp(loop, last.getResults());
  if (bound && bound->use_empty() && isMemoryEffectFree(bound))
    rewriter.eraseOp(bound);
  return success();
}

namespace {
struct MaskTilesPass : attn::impl::MaskTilesBase<MaskTilesPass> {
  void runOnOperation() override {
    if (failed(requireTiled(getOperation(), "attn-mask-tiles")))
      return signalPassFailure();
    func::FuncOp func = getOperation();
    SmallVector<scf::ForOp> loops;
    func.walk([&](scf::ForOp loop) {
      if (isLoopWithRole(loop, "kv_tiles") && !loop->hasAttr(kTilesAttr) && findMask(loop))
        loops.push_back(loop);
    });
    IRRewriter rewriter(&getContext());
    for (scf::ForOp loop : loops) {
      // The classes replace the loop's range: it must be all the sequence's
      // tiles, from 0 (a split's range, after attn-split-kv, is not).
      auto lower = loop.getLowerBound().getDefiningOp<arith::ConstantIndexOp>();
      if (!lower || lower.value() != 0) {
        loop.emitError("attn-mask-tiles classifies a KV-tile loop over all the sequence's tiles "
                       "(from tile 0); this one starts elsewhere (attn-mask-tiles runs before "
                       "attn-split-kv: attn-opt --attn-mask-tiles --attn-split-kv, or "
                       "--attn-pipeline)");
        return signalPassFailure();
      }
      if (failed(splitLoopByTileClass(rewriter, loop))) {
        loop.emitError("attn-mask-tiles could not split this KV-tile loop");
        return signalPassFailure();
      }
    }
  }
};
} // namespace
