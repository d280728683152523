//===- AttnDialect.td - The attn dialect --------------------*- tablegen -*-===//

#ifndef ATTN_DIALECT_TD
#define ATTN_DIALECT_TD

include "mlir/IR/OpBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let cppNamespace = "::attn";
  let summary = "FlashAttention, one idea at a time";
  let description = [{
    The `attn` dialect describes attention at two levels. At the textbook
    level, `attn.standard_attention` materialises the score matrix
    S = Q Kᵀ · scale, takes its row softmax and multiplies by V. At the tile
    level, ops name the steps of the FlashAttention recurrence over KV tiles:
    the running max `m`, the running sum `l`, the unnormalised output `acc`
    and the rescale factor `alpha = exp(m_old - m_new)`. The attnc passes
    rewrite the first level into the second, one idea per pass.

    Row tensors (`m`, `l`, the rows of `acc` and of a score tile) have a
    dynamic leading size: one row per query of the tile, times the query
    heads that share a KV head once GQA packing is applied.
  }];
  let useDefaultAttributePrinterParser = 1;
  // `attn.spec` on a function is checked against the attn ops inside it.
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::tensor::TensorDialect"];
}

#endif // ATTN_DIALECT_TD
