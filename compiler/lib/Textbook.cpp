//===- Textbook.cpp - A spec's textbook attention as IR -------------------===//

#include "attnc/Textbook.h"

#include "attn/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace attn {

Type accumulatorType(MLIRContext &ctx, DType dtype) {
  Builder b(&ctx);
  return dtype == DType::F64 ? Type(b.getF64Type()) : Type(b.getF32Type());
}

Location unnamed(Location loc) {
  while (auto name = dyn_cast<NameLoc>(loc))
    loc = name.getChildLoc();
  return loc;
}

Location named(Location loc, StringRef name) {
  return NameLoc::get(StringAttr::get(loc.getContext(), name), unnamed(loc));
}

OwningOpRef<ModuleOp> buildTextbook(MLIRContext &ctx, const Spec &spec) {
  ctx.loadDialect<AttnDialect, func::FuncDialect>();
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);

  const int64_t dyn = ShapedType::kDynamic;
  Type elt = elementType(ctx, spec.dtype), acc = accumulatorType(ctx, spec.dtype);
  auto heads = RankedTensorType::get({dyn, dyn, spec.head_dim}, elt);
  auto lseType = RankedTensorType::get({dyn, dyn}, acc);

  SmallVector<Type> args = {heads};
  SmallVector<StringRef> argNames = {"q"};
  if (spec.isPaged()) {
    auto cache = RankedTensorType::get({dyn, spec.page_size, dyn, spec.head_dim}, elt);
    args.append({cache, cache, RankedTensorType::get({dyn}, b.getI32Type()),
                 b.getIndexType()});
    argNames.append({"k_cache", "v_cache", "block_table", "kv_len"});
  } else {
    args.append({heads, heads});
    argNames.append({"k", "v"});
  }
  args.push_back(acc);
  argNames.push_back("scale");
  if (spec.mode == Mode::Decode && spec.split_kv == kSplitKVAuto) {
    args.push_back(b.getIndexType());
    argNames.push_back("num_splits");
  }
  SmallVector<Type> results = {heads};
  if (spec.return_lse)
    results.push_back(lseType);

  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, loc, spec.symbol(), b.getFunctionType(args, results));
  func->setAttr(kSpecAttrName, SpecAttr::get(&ctx, spec));
  Block *body = func.addEntryBlock();
  for (auto [arg, name] : llvm::zip(body->getArguments(), argNames))
    arg.setLoc(named(loc, name));
  b.setInsertionPointToStart(body);

  auto arg = [&](StringRef name) -> Value {
    return body->getArgument(llvm::find(argNames, name) - argNames.begin());
  };
  Value k, v;
  if (spec.isPaged()) {
    k = GatherPagesOp::create(b, named(loc, "k"), heads, arg("k_cache"), arg("block_table"),
                              arg("kv_len"));
    v = GatherPagesOp::create(b, named(loc, "v"), heads, arg("v_cache"), arg("block_table"),
                              arg("kv_len"));
  } else {
    k = arg("k");
    v = arg("v");
  }
  auto attention = StandardAttentionOp::create(
      b, loc, heads, lseType, arg("q"), k, v, arg("scale"), // results: %out, %lse
      MaskAttr::get(&ctx, spec.mask), b.getI64IntegerAttr(spec.gqa));
  SmallVector<Value> returned = {attention.getOut()};
  if (spec.return_lse)
    returned.push_back(attention.getLse());
  func::ReturnOp::create(b, loc, returned);
  return module;
}

} // namespace attn
