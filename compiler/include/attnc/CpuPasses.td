//===- CpuPasses.td - The CPU backend's passes ------------*- tablegen -*-===//

#ifndef ATTNC_CPUPASSES_TD
#define ATTNC_CPUPASSES_TD

include "mlir/Pass/PassBase.td"

def LowerTiles : Pass<"attn-lower-tiles", "::mlir::func::FuncOp"> {
  let summary = "CPU backend: lower the tile-level ops to linalg, tensor, scf and math";
  let description = [{
    Writes each tile-level attn op as standard MLIR on tensors, following the
    op's documented semantics: `linalg.generic` for the arithmetic (scores,
    masks, max, exp, accumulation, merge), `tensor.extract_slice` /
    `tensor.insert_slice` for the query and contiguous KV loads and the
    stores (rows past the end read as zero, are dropped on store),
    guarded `tensor.extract` for the block table and the paged cache, and
    index arithmetic for `classify_tiles` and `split_range`. Ops marked
    `inf_safe` get their guards as `arith.select`; unmarked ones compute the
    plain formula, NaN included, so the CPU shows what attn-safe-init buys.

    Invariants after this pass: no attn op is left; the function is ready for
    one-shot bufferization. Textbook ops (`attn.standard_attention`,
    `attn.gather_pages`) are an error: run the attn pipeline first.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::linalg::LinalgDialect",
                           "::mlir::math::MathDialect", "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

#endif // ATTNC_CPUPASSES_TD
