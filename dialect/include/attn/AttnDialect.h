//===- AttnDialect.h - The attn dialect, attributes and ops -----*- C++ -*-===//

#ifndef ATTN_ATTNDIALECT_H
#define ATTN_ATTNDIALECT_H

#include "attn/Spec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/Hashing.h"

namespace attn {
/// Specs and masks are attribute parameters: MLIR uniques them by hash.
inline llvm::hash_code hash_value(const Spec &s) { return llvm::hash_value(s.str()); }
inline llvm::hash_code hash_value(const Mask &m) {
  return llvm::hash_combine(static_cast<int>(m.kind), m.window);
}
} // namespace attn

#include "attn/AttnOpsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "attn/AttnAttrs.h.inc"

#define GET_OP_CLASSES
#include "attn/AttnOps.h.inc"

namespace attn {
/// The name of the function attribute that carries a kernel's spec.
constexpr llvm::StringLiteral kSpecAttrName = "attn.spec";
/// Reads the spec of the function enclosing `op`, if there is one.
std::optional<Spec> getEnclosingSpec(mlir::Operation *op);
/// The element type of a spec's inputs (f16, bf16, f32, f64).
mlir::Type elementType(mlir::MLIRContext &ctx, DType dtype);
} // namespace attn

#endif // ATTN_ATTNDIALECT_H
