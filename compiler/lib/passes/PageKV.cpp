//===- PageKV.cpp - attn-page-kv ------------------------------------------===//
//
// A paged KV cache stores each sequence in fixed-size pages scattered over
// one pool; the block table lists a sequence's pages in order. Textbook
// attention first gathers them into a contiguous copy. The kernel instead
// reads each KV tile in place: one block-table lookup per tile gives the
// slot of every token, and both the K and the V loads of the tile use it.
//
//===----------------------------------------------------------------------===//

#include "attnc/Passes.h"
#include "attnc/Textbook.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace attn {
#define GEN_PASS_DEF_PAGEKV
#include "attnc/Passes.h.inc"
} // namespace attn

using namespace mlir;
using namespace attn;

namespace {
/// load_kv_tile(gather_pages(cache, bt)) -> load_paged_kv_tile(cache, lookup(bt)).
struct PageKVTileLoad : OpRewritePattern<LoadKVTileOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LoadKVTileOp load, PatternRewriter &rewriter) const override {
    auto gather = load.getSource().getDefiningOp<GatherPagesOp>();
    if (!gather)
      return rewriter.notifyMatchFailure(load, "the KV source is not a paged cache");
    auto cacheType = cast<RankedTensorType>(gather.getCache().getType());
    const int64_t pageSize = cacheType.getDimSize(1);
    const int64_t tileKV = cast<RankedTensorType>(load.getType()).getDimSize(0);
    auto slotsType = RankedTensorType::get({tileKV}, rewriter.getIndexType());

    // The K and V loads of one tile share its lookup: the block table is
    // read once per tile, in one place, right where the tile's start is known.
    Value kvStart = load.getKvStart();
    BlockTableLookupOp lookup;
    for (Operation *user : kvStart.getUsers()) {
      auto candidate = dyn_cast<BlockTableLookupOp>(user);
      if (candidate && candidate.getKvStart() == kvStart &&
          candidate.getBlockTable() == gather.getBlockTable() &&
          candidate.getKvLen() == gather.getKvLen() && candidate.getType() == slotsType &&
          static_cast<int64_t>(candidate.getPageSize()) == pageSize)
        lookup = candidate;
    }
    if (!lookup) {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointAfterValue(kvStart);
      lookup = BlockTableLookupOp::create(rewriter, named(load.getLoc(), "slots"), slotsType,
                                          gather.getBlockTable(), kvStart, gather.getKvLen(),
                                          rewriter.getI64IntegerAttr(pageSize));
    }
    rewriter.replaceOpWithNewOp<LoadPagedKVTileOp>(load, load.getType(), gather.getCache(),
                                                   lookup.getSlots(), load.getHead());
    return success();
  }
};

struct PageKVPass : attn::impl::PageKVBase<PageKVPass> {
  void runOnOperation() override {
    if (failed(requireTiled(getOperation(), "attn-page-kv")))
      return signalPassFailure();
    RewritePatternSet patterns(&getContext());
    populatePageKVPatterns(patterns);
    // The greedy driver also erases the gathers once nothing reads them.
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](GatherPagesOp gather) {
      gather.emitError("attn-page-kv: the gathered cache is still read outside a KV-tile load");
      signalPassFailure();
    });
  }
};
} // namespace

void attn::populatePageKVPatterns(RewritePatternSet &patterns) {
  patterns.add<PageKVTileLoad>(patterns.getContext());
}
