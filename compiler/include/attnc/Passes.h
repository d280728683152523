//===- Passes.h - The attnc passes ------------------------------*- C++ -*-===//

#ifndef ATTNC_PASSES_H
#define ATTNC_PASSES_H

#include "attn/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace attn {

#define GEN_PASS_DECL
#include "attnc/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "attnc/Passes.h.inc"

/// Loop markers the passes leave on scf.for ops, readable in the IR.
constexpr llvm::StringLiteral kLoopAttr = "attn.loop";
constexpr llvm::StringLiteral kTilesAttr = "attn.tiles";

/// Whether `op` is a loop the passes marked with `attn.loop = role`
/// ("heads", "q_tiles", "kv_tiles" or "kv_splits"); false for null.
inline bool isLoopWithRole(mlir::Operation *op, llvm::StringRef role) {
  auto attr = op ? op->getAttrOfType<mlir::StringAttr>(kLoopAttr) : mlir::StringAttr();
  return attr && attr.getValue() == role;
}

/// attn-online-softmax: rewrites one textbook op into the tiled recurrence.
mlir::FailureOr<mlir::scf::ForOp>
insertOnlineSoftmax(mlir::RewriterBase &rewriter, StandardAttentionOp op, const Spec &spec);
void populateOnlineSoftmaxPatterns(mlir::RewritePatternSet &patterns);

/// The passes after attn-online-softmax rewrite its tiled recurrence: on a
/// function that still holds a textbook op they would find nothing to do, so
/// they call this first. It reports the op ("`pass` runs after
/// attn-online-softmax ...") and fails where there is one.
mlir::LogicalResult requireTiled(mlir::func::FuncOp func, llvm::StringRef pass);

/// attn-safe-init: marks the ops that could compute exp(-inf - -inf) or 0/0.
void populateSafeInitPatterns(mlir::RewritePatternSet &patterns);

/// attn-mask-tiles: splits one KV-tile loop by tile class.
mlir::LogicalResult splitLoopByTileClass(mlir::RewriterBase &rewriter, mlir::scf::ForOp loop);

/// attn-share-kv-heads: turns one query-heads loop into a KV-heads loop.
mlir::LogicalResult shareKVHeads(mlir::RewriterBase &rewriter, mlir::scf::ForOp headsLoop,
                                 int64_t gqa);

/// attn-page-kv: reads one KV tile load through the block table.
void populatePageKVPatterns(mlir::RewritePatternSet &patterns);

/// attn-split-kv: wraps the KV-tile loops of one query tile into splits.
mlir::LogicalResult splitKV(mlir::RewriterBase &rewriter, StateInitOp init, mlir::Value numSplits);

} // namespace attn

#endif // ATTNC_PASSES_H
