//===- SafeInit.cpp - attn-safe-init --------------------------------------===//
//
// m starts at -inf. Until a row has seen a visible key, m_new stays -inf and
// exp(m_old - m_new) = exp(-inf - -inf) = NaN; a row that never sees a key
// ends with 0 / 0. The guarded forms of the four ops where this can happen
// give alpha = 1, p = 0, out = 0 and a merge that ignores the empty side.
//
//===----------------------------------------------------------------------===//

#include "attnc/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace attn {
#define GEN_PASS_DEF_SAFEINIT
#include "attnc/Passes.h.inc"
} // namespace attn

using namespace mlir;
using namespace attn;

namespace {
/// Sets `inf_safe` on one op that has the attribute and lacks it.
template <typename OpTy>
struct MarkInfSafe : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &rewriter) const override {
    if (op.getInfSafe())
      return rewriter.notifyMatchFailure(op, "already inf_safe");
    rewriter.modifyOpInPlace(op, [&] { op.setInfSafe(true); });
    return success();
  }
};

struct SafeInitPass : attn::impl::SafeInitBase<SafeInitPass> {
  void runOnOperation() override {
    if (failed(requireTiled(getOperation(), "attn-safe-init")))
      return signalPassFailure();
    RewritePatternSet patterns(&getContext());
    populateSafeInitPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace

void attn::populateSafeInitPatterns(RewritePatternSet &patterns) {
  patterns.add<MarkInfSafe<RescaleFactorOp>, MarkInfSafe<ExpOp>, MarkInfSafe<NormalizeOp>,
               MarkInfSafe<MergeOp>>(patterns.getContext());
}
