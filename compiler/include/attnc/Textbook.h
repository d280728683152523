//===- Textbook.h - A spec's textbook attention as IR -----------*- C++ -*-===//

#ifndef ATTNC_TEXTBOOK_H
#define ATTNC_TEXTBOOK_H

#include "attn/Spec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace attn {

/// The accumulation type: f64 for f64 inputs, else f32.
mlir::Type accumulatorType(mlir::MLIRContext &ctx, DType dtype);

/// A location that prints as `%name` with --mlir-use-nameloc-as-prefix.
mlir::Location named(mlir::Location loc, llvm::StringRef name);
/// `loc` without the name `named` gave it, for ops that should not inherit it.
mlir::Location unnamed(mlir::Location loc);

/// Builds the textbook form of `spec`: one function, named by spec.symbol()
/// and carrying `attn.spec`, whose body is `attn.standard_attention`
/// (preceded by `attn.gather_pages` for a paged cache). Arguments, in order:
///   q [q_heads, q_len, head_dim];
///   contiguous: k, v [kv_heads, kv_len, head_dim];
///   paged: k_cache, v_cache [num_pages, page_size, kv_heads, head_dim],
///          block_table [pages of this sequence] (i32), kv_len (index);
///   scale (the accumulator type);
///   decode with split_kv = auto: num_splits (index).
/// Results: out [q_heads, q_len, head_dim], and lse [q_heads, q_len] when
/// return_lse is set.
mlir::OwningOpRef<mlir::ModuleOp> buildTextbook(mlir::MLIRContext &ctx, const Spec &spec);

} // namespace attn

#endif // ATTNC_TEXTBOOK_H
