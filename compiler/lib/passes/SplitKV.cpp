//===- SplitKV.cpp - attn-split-kv ----------------------------------------===//
//
// Decoding has one or a few query rows per sequence and a long KV cache:
// one thread block per query tile leaves most of the GPU idle. Split-KV
// cuts the KV tiles into ranges processed independently, each from a fresh
// state, and merges the partial (m, l, acc) with the rescale rule:
// m = max(m_a, m_b), and each side is scaled by exp(m_side - m).
//
//===----------------------------------------------------------------------===//

#include "attnc/Passes.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

namespace attn {
#define GEN_PASS_DEF_SPLITKV
#include "attnc/Passes.h.inc"
} // namespace attn

using namespace mlir;
using namespace attn;

/// The loop whose init args are exactly `state`, if there is one.
static scf::ForOp loopStartingFrom(ValueRange state) {
  for (Operation *user : state.front().getUsers()) {
    auto loop = dyn_cast<scf::ForOp>(user);
    if (loop && isLoopWithRole(loop, "kv_tiles") && loop.getInitArgs() == state)
      return loop;
  }
  return {};
}

/// The index constant `value` of the function's entry block, made there if
/// it has none: one %c0 and one %c1 in the IR a reader compares stage by
/// stage, not a copy per pass.
static Value entryIndexConstant(RewriterBase &rewriter, func::FuncOp func, int64_t value) {
  Block &entry = func.getBody().front();
  for (auto c : entry.getOps<arith::ConstantIndexOp>())
    if (c.value() == value)
      return c;
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointToStart(&entry);
  return arith::ConstantIndexOp::create(rewriter, unnamed(func.getLoc()), value);
}

LogicalResult attn::splitKV(RewriterBase &rewriter, StateInitOp init, Value numSplits) {
  // The chain of KV-tile loops the state flows through, in key order.
  SmallVector<scf::ForOp> chain;
  for (scf::ForOp loop = loopStartingFrom(init.getResults()); loop;
       loop = loopStartingFrom(loop.getResults()))
    chain.push_back(loop);
  if (chain.empty())
    return rewriter.notifyMatchFailure(init, "the state feeds no KV-tile loop");
  bool infSafe = false;
  chain.front().walk([&](RescaleFactorOp op) { infSafe |= op.getInfSafe(); });

  Location loc = unnamed(chain.back().getLoc());
  Value lo = chain.front().getLowerBound(), hi = chain.back().getUpperBound();
  auto func = init->getParentOfType<func::FuncOp>();
  Value c0 = entryIndexConstant(rewriter, func, 0), c1 = entryIndexConstant(rewriter, func, 1);
  rewriter.setInsertionPointAfter(chain.back());
  auto splits = scf::ForOp::create(
      rewriter, named(loc, "state"), c0, numSplits, c1, init.getResults(),
      [&](OpBuilder &b, Location, Value split, ValueRange running) {
        Location l = loc;
        auto range = SplitRangeOp::create(b, l, b.getIndexType(),
                                          b.getIndexType(), lo, hi, split, numSplits);
        // Each split starts from a fresh state over its own tiles.
        IRMapping map;
        b.clone(*init, map);
        scf::ForOp partial;
        for (scf::ForOp loop : chain) {
          // This loop's tiles that fall in the split: [max(lb, lo), min(ub, hi)),
          // named after the loop's state (%j_lo_full for %state_full's).
          StringRef state = "state";
          if (auto name = dyn_cast<NameLoc>(loop.getLoc()))
            state = name.getName().getValue();
          const std::string suffix = state.consume_front("state_") ? "_" + state.str() : "";
          Value lb = arith::MaxUIOp::create(b, named(l, "j_lo" + suffix), loop.getLowerBound(),
                                            range.getSplitLo());
          Value ub = arith::MinUIOp::create(b, l, loop.getUpperBound(), range.getSplitHi());
          ub = arith::MaxUIOp::create(b, named(l, "j_hi" + suffix), lb, ub);
          partial = cast<scf::ForOp>(b.clone(*loop, map));
          if (suffix.empty()) // the loop over splits is %state
            partial->setLoc(named(l, "state_split"));
          partial.setLowerBound(lb);
          partial.setUpperBound(ub);
        }
        // attn-split-kv: fold this split's partial state into the running one.
        auto merged = MergeOp::create(b, l, running[0].getType(),
                                      running[1].getType(), running[2].getType(),
                                      running[0], running[1],
                                      running[2], partial.getResult(0), partial.getResult(1),
                                      partial.getResult(2),
                                      infSafe ? b.getUnitAttr() : UnitAttr());
        scf::YieldOp::create(b, l, merged.getResults());
      });
  splits->setAttr(kLoopAttr, rewriter.getStringAttr("kv_splits"));
  splits.getInductionVar().setLoc(named(loc, "split"));
  const StringRef runningNames[] = {"m_run", "l_run", "acc_run"};
  for (auto [arg, name] : llvm::zip(splits.getRegionIterArgs(), runningNames))
    arg.setLoc(named(loc, name));
  rewriter.replaceAllUsesWith(chain.back().getResults(), splits.getResults());
  for (scf::ForOp loop : llvm::reverse(chain))
    rewriter.eraseOp(loop);
  return success();
}

namespace {
struct SplitKVPass : attn::impl::SplitKVBase<SplitKVPass> {
  void runOnOperation() override {
    if (failed(requireTiled(getOperation(), "attn-split-kv")))
      return signalPassFailure();
    func::FuncOp func = getOperation();
    std::optional<Spec> spec = getEnclosingSpec(func);
    if (func.isExternal() || !spec || spec->mode != Mode::Decode || spec->split_kv == 1)
      return;
    // split_kv = auto: the count is chosen at run time, the function's last
    // argument (see buildTextbook).
    Block &entry = func.getBody().front();
    const bool atRunTime = spec->split_kv == kSplitKVAuto;
    if (atRunTime &&
        (entry.getNumArguments() == 0 || !entry.getArguments().back().getType().isIndex())) {
      func.emitError("attn-split-kv: split_kv = auto needs a trailing `num_splits: index` "
                     "argument");
      return signalPassFailure();
    }
    // The states to split: not those inside a split loop, nor those that
    // already feed one (IR this pass has split: running it again changes
    // nothing).
    SmallVector<StateInitOp> inits;
    func.walk([&](StateInitOp init) {
      const bool split =
          isLoopWithRole(init->getParentOfType<scf::ForOp>(), "kv_splits") ||
          llvm::any_of(init->getUsers(), [](Operation *user) {
            return isLoopWithRole(user, "kv_splits");
          });
      if (!split)
        inits.push_back(init);
    });
    if (inits.empty())
      return;
    IRRewriter rewriter(&getContext());
    Value numSplits;
    if (atRunTime) {
      numSplits = entry.getArguments().back();
    } else {
      rewriter.setInsertionPointToStart(&entry);
      numSplits = arith::ConstantIndexOp::create(rewriter, named(func.getLoc(), "num_splits"),
                                                 spec->split_kv);
    }
    for (StateInitOp init : inits)
      if (failed(splitKV(rewriter, init, numSplits))) {
        init.emitError("attn-split-kv: this state feeds no KV-tile loop to split");
        return signalPassFailure();
      }
  }
};
} // namespace
