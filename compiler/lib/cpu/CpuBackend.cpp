//===- CpuBackend.cpp - Lower a spec's kernel to LLVM and run it ----------===//

#include "attnc/CpuBackend.h"
#include "attnc/CpuPasses.h"
#include "attnc/Pipeline.h"
#include "attnc/Textbook.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/TargetSelect.h"

#include <cstdio>
#include <cstring>
#include <mutex>

using namespace mlir;

namespace attn {

//===----------------------------------------------------------------------===//
// Argument checks
//===----------------------------------------------------------------------===//

std::string checkCpuArgs(const Spec &spec, const CpuArgs &a) {
  auto str = [](int64_t v) { return std::to_string(v); };
  if (spec.target != Target::CPU)
    return std::string("the CPU backend runs target = cpu specs, not target = ") + name(spec.target);
  if (a.numKVHeads < 1)
    return "num_kv_heads = " + str(a.numKVHeads) + ": need at least one KV head";
  if (a.numQHeads != a.numKVHeads * spec.gqa)
    return "num_q_heads = " + str(a.numQHeads) + " is not gqa (" + str(spec.gqa) +
           ") x num_kv_heads (" + str(a.numKVHeads) + ")";
  if (a.qLen < 0 || a.kvLen < 0)
    return "negative sequence length (q_len = " + str(a.qLen) + ", kv_len = " + str(a.kvLen) + ")";
  if (a.qLen > 0 && !a.q)
    return "q is null";
  if (a.qLen > 0 && !a.out)
    return "out is null";
  if (spec.return_lse && a.qLen > 0 && !a.lse)
    return "return_lse = true but lse is null";
  if (!std::isfinite(a.scale))
    return "scale = " + std::to_string(a.scale) + " is not finite";
  // The kernel takes the scale in its own type: an f32 kernel's must fit in f32.
  if (spec.dtype != DType::F64 && std::fabs(a.scale) > std::numeric_limits<float>::max()) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", a.scale);
    return "scale = " + std::string(text) + " does not fit in f32, the type this kernel computes in";
  }
  if (spec.mode == Mode::Decode && spec.split_kv == kSplitKVAuto &&
      (a.numSplits < 1 || a.numSplits > kMaxSplitKV))
    return "num_splits = " + str(a.numSplits) + " must be in 1.." + str(kMaxSplitKV);
  if (!spec.isPaged()) {
    if (a.kvLen > 0 && (!a.k || !a.v))
      return "k or v is null";
    return "";
  }
  const int64_t pagesNeeded = (a.kvLen + spec.page_size - 1) / spec.page_size;
  if (a.blockTableLen < pagesNeeded)
    return "kv_len = " + str(a.kvLen) + " needs " + str(pagesNeeded) + " pages of " +
           str(spec.page_size) + " tokens, the block table lists " + str(a.blockTableLen);
  if (pagesNeeded > 0 && (!a.kCache || !a.vCache || !a.blockTable))
    return "k_cache, v_cache or block_table is null";
  for (int64_t i = 0; i < pagesNeeded; ++i)
    if (a.blockTable[i] < 0 || a.blockTable[i] >= a.numPages)
      return "block_table[" + str(i) + "] = " + str(a.blockTable[i]) +
             " points outside the cache (" + str(a.numPages) + " pages)";
  return "";
}

//===----------------------------------------------------------------------===//
// Compilation
//===----------------------------------------------------------------------===//

/// Makes the outputs function arguments (destination-passing style): the
/// caller owns the output buffers and the kernel writes into them. Each
/// returned tensor comes out of the heads loop, whose iteration starts from
/// a tensor.empty; that tensor becomes a view of a new memref argument, and
/// the result is materialised into the same memref, so bufferization writes
/// the outputs in place and the function returns nothing.
static LogicalResult outputsToArguments(func::FuncOp func) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  UnitAttr unit = b.getUnitAttr();
  for (Value result : ret.getOperands()) {
    auto loop = result.getDefiningOp<scf::ForOp>();
    if (!loop)
      return func.emitError("outputs must come out of the heads loop");
    Value init = loop.getInitArgs()[cast<OpResult>(result).getResultNumber()];
    auto empty = init.getDefiningOp<tensor::EmptyOp>();
    if (!empty)
      return func.emitError("outputs must start from tensor.empty");
    auto type = empty.getType();
    auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
    BlockArgument buffer = body.addArgument(memrefType, empty.getLoc());
    b.setInsertionPoint(empty);
    Value view = bufferization::ToTensorOp::create(b, empty.getLoc(), type, buffer, unit, unit);
    empty.replaceAllUsesWith(view);
    empty.erase();
    b.setInsertionPoint(ret);
    bufferization::MaterializeInDestinationOp::create(b, ret.getLoc(), TypeRange{}, result,
                                                      buffer, unit, unit);
  }
  ret->setOperands({});
  SmallVector<Type> argTypes(body.getArgumentTypes());
  func.setType(FunctionType::get(func.getContext(), argTypes, {}));
  return success();
}

static void buildLoweringToLLVM(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createLowerTiles());
  pm.addPass(createCanonicalizerPass());
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.allowReturnAllocsFromLoops = true;
  bufferize.functionBoundaryTypeConversion = bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  pm.addPass(bufferization::createDropEquivalentBufferResultsPass());
  bufferization::buildBufferDeallocationPipeline(pm);
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

/// The strided copy that memref.copy lowers to (a call to `memrefCopy`). MLIR
/// ships one in a runtime library; ours keeps the binaries self-contained.
/// Arguments: element size, then two unranked descriptors {rank, ranked*},
/// each ranked one {allocated, aligned, offset, sizes[rank], strides[rank]}.
extern "C" void attncMemrefCopy(int64_t elemSize, const int64_t *src, const int64_t *dst) {
  const int64_t rank = src[0];
  const int64_t *s = reinterpret_cast<const int64_t *>(src[1]);
  const int64_t *d = reinterpret_cast<const int64_t *>(dst[1]);
  const char *sBase = reinterpret_cast<const char *>(s[1]) + s[2] * elemSize;
  char *dBase = reinterpret_cast<char *>(d[1]) + d[2] * elemSize;
  const int64_t *sizes = s + 3, *sStrides = s + 3 + rank, *dStrides = d + 3 + rank;
  for (int64_t i = 0; i < rank; ++i)
    if (sizes[i] == 0)
      return;
  std::vector<int64_t> index(rank, 0);
  while (true) {
    int64_t so = 0, dOff = 0;
    for (int64_t i = 0; i < rank; ++i) {
      so += index[i] * sStrides[i];
      dOff += index[i] * dStrides[i];
    }
    std::memcpy(dBase + dOff * elemSize, sBase + so * elemSize, elemSize);
    int64_t i = rank - 1;
    while (i >= 0 && ++index[i] == sizes[i])
      index[i--] = 0;
    if (i < 0)
      return;
  }
}

struct CpuKernel::Impl {
  MLIRContext context;
  std::unique_ptr<ExecutionEngine> engine;
  std::string entry;
  void (*packed)(void **) = nullptr; ///< the entry's packed wrapper, code generated
};

CpuKernel::CpuKernel(Spec spec, std::unique_ptr<Impl> impl)
    : spec_(std::move(spec)), impl_(std::move(impl)) {}
CpuKernel::~CpuKernel() = default;

static llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<std::unique_ptr<CpuKernel>> CpuKernel::compile(const Spec &spec,
                                                              std::string *loweredIR) {
  if (spec.target != Target::CPU)
    return error(std::string("the CPU backend compiles target = cpu specs, not target = ") +
                 name(spec.target));
  static std::once_flag nativeTarget;
  std::call_once(nativeTarget, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });

  auto impl = std::make_unique<Impl>();
  MLIRContext &ctx = impl->context;
  DialectRegistry registry;
  registry.insert<AttnDialect, arith::ArithDialect, bufferization::BufferizationDialect,
                  cf::ControlFlowDialect, func::FuncDialect, linalg::LinalgDialect,
                  LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
                  tensor::TensorDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  ctx.appendDialectRegistry(registry);
  ctx.loadAllAvailableDialects();

  // Collect diagnostics instead of printing them: they become the error.
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return success();
  });

  OwningOpRef<ModuleOp> module = buildTextbook(ctx, spec);
  PassManager attnPipeline(&ctx);
  buildAttnPipeline(attnPipeline);
  if (failed(attnPipeline.run(*module)))
    return error("the attn pipeline failed for " + spec.str() + ": " + diagnostics);

  auto func = *module->getOps<func::FuncOp>().begin();
  if (failed(outputsToArguments(func)))
    return error("cannot pass the outputs of " + spec.str() + " as arguments: " + diagnostics);
  func->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(), UnitAttr::get(&ctx));
  impl->entry = func.getName().str();

  PassManager lowering(&ctx);
  buildLoweringToLLVM(lowering);
  if (failed(lowering.run(*module)))
    return error("lowering " + spec.str() + " to LLVM failed: " + diagnostics);
  if (loweredIR) {
    llvm::raw_string_ostream os(*loweredIR);
    module->print(os);
  }
  // Name what the conversions left behind rather than failing in translation.
  Operation *leftover = nullptr;
  module->walk([&](Operation *op) {
    if (!leftover && !isa<ModuleOp>(op) && !isa<LLVM::LLVMDialect>(op->getDialect()))
      leftover = op;
  });
  if (leftover) {
    std::string text;
    llvm::raw_string_ostream os(text);
    leftover->print(os, OpPrintingFlags().skipRegions());
    return error("lowering " + spec.str() + " to LLVM left '" + text + "'");
  }

  ExecutionEngineOptions options;
  auto transformer = makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, nullptr);
  options.transformer = transformer;
  // No profiler or debugger hooks: the perf listener would leave a jitdump
  // folder under /tmp/.debug for every kernel compiled.
  options.enablePerfNotificationListener = false;
  options.enableGDBNotificationListener = false;
  auto engine = ExecutionEngine::create(*module, options);
  if (!engine)
    return engine.takeError();
  impl->engine = std::move(*engine);
  impl->engine->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap symbols;
    symbols[interner("memrefCopy")] = {llvm::orc::ExecutorAddr::fromPtr(&attncMemrefCopy),
                                       llvm::JITSymbolFlags::Exported};
    return symbols;
  });
  // The engine generates machine code at the first lookup: done here, so that
  // compiling includes it and a run is the kernel's time alone (the first
  // run of a small spec took 60-100 ms more than the others).
  auto packed = impl->engine->lookupPacked("_mlir_ciface_" + impl->entry);
  if (!packed)
    return packed.takeError();
  impl->packed = *packed;
  return std::unique_ptr<CpuKernel>(new CpuKernel(spec, std::move(impl)));
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

namespace {
/// A memref descriptor of any rank, laid out as the C interface expects:
/// {allocated, aligned, offset, sizes[rank], strides[rank]}, 8 bytes each.
struct Descriptor {
  std::vector<int64_t> words;
  Descriptor(const void *data, std::vector<int64_t> sizes) {
    words.push_back(reinterpret_cast<int64_t>(data));
    words.push_back(reinterpret_cast<int64_t>(data));
    words.push_back(0);
    std::vector<int64_t> strides(sizes.size(), 1);
    for (size_t i = sizes.size(); i-- > 1;)
      strides[i - 1] = strides[i] * sizes[i];
    words.insert(words.end(), sizes.begin(), sizes.end());
    words.insert(words.end(), strides.begin(), strides.end());
  }
};
} // namespace

llvm::Error CpuKernel::run(const CpuArgs &a) const {
  std::string problem = checkCpuArgs(spec_, a);
  if (!problem.empty())
    return error(problem);
  const int64_t d = spec_.head_dim;
  std::vector<Descriptor> memrefs;
  memrefs.reserve(8);
  memrefs.emplace_back(a.q, std::vector<int64_t>{a.numQHeads, a.qLen, d});
  if (spec_.isPaged()) {
    std::vector<int64_t> cache = {a.numPages, spec_.page_size, a.numKVHeads, d};
    memrefs.emplace_back(a.kCache, cache);
    memrefs.emplace_back(a.vCache, cache);
    memrefs.emplace_back(a.blockTable, std::vector<int64_t>{a.blockTableLen});
  } else {
    memrefs.emplace_back(a.k, std::vector<int64_t>{a.numKVHeads, a.kvLen, d});
    memrefs.emplace_back(a.v, std::vector<int64_t>{a.numKVHeads, a.kvLen, d});
  }
  Descriptor out(a.out, {a.numQHeads, a.qLen, d});
  Descriptor lse(a.lse, {a.numQHeads, a.qLen});

  // The C interface takes each memref as a pointer to its descriptor; the
  // packed call takes a pointer to every argument.
  std::vector<void *> descriptorPtrs;
  for (Descriptor &m : memrefs)
    descriptorPtrs.push_back(m.words.data());
  void *outPtr = out.words.data(), *lsePtr = lse.words.data();
  int64_t kvLen = a.kvLen, numSplits = a.numSplits;
  float scale32 = static_cast<float>(a.scale);
  double scale64 = a.scale;

  llvm::SmallVector<void *> args;
  for (void *&p : descriptorPtrs)
    args.push_back(&p);
  if (spec_.isPaged())
    args.push_back(&kvLen);
  args.push_back(spec_.dtype == DType::F64 ? static_cast<void *>(&scale64)
                                           : static_cast<void *>(&scale32));
  if (spec_.mode == Mode::Decode && spec_.split_kv == kSplitKVAuto)
    args.push_back(&numSplits);
  args.push_back(&outPtr);
  if (spec_.return_lse)
    args.push_back(&lsePtr);
  impl_->packed(args.data());
  return llvm::Error::success();
}

} // namespace attn
