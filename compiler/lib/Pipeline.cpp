//===- Pipeline.cpp - The attnc pass pipeline -----------------------------===//

#include "attnc/Pipeline.h"
#include "attnc/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace attn {

const std::vector<std::string> &pipelinePassNames() {
  static const std::vector<std::string> names = {
      "attn-online-softmax", "attn-safe-init", "attn-mask-tiles",
      "attn-share-kv-heads", "attn-page-kv",   "attn-split-kv"};
  return names;
}

void buildAttnPipeline(OpPassManager &pm, const std::string &stopAfter) {
  // The passes run on functions: nested in a module's pass manager, or
  // added as they are where the pipeline already runs on func.func
  // (`--pass-pipeline='builtin.module(func.func(attn-pipeline))'`).
  OpPassManager &fn =
      pm.getOpName() == func::FuncOp::getOperationName() ? pm : pm.nest<func::FuncOp>();
  auto add = [&](std::unique_ptr<Pass> pass) {
    std::string name = pass->getArgument().str();
    fn.addPass(std::move(pass));
    return name == stopAfter;
  };
  // One FlashAttention idea per pass, in the order the story is told.
  if (add(createOnlineSoftmax()) || // tile KV, online softmax, rescale alpha
      add(createSafeInit()) ||      // no exp(-inf - -inf), no 0/0
      add(createMaskTiles()) ||     // skip hidden tiles, no mask on visible ones
      add(createShareKVHeads()) ||  // GQA: one KV tile load per head group
      add(createPageKV()) ||        // every KV tile through the block table
      add(createSplitKV()))         // decode: split the KV range, merge the states
    return;
}

namespace {
/// attn-pipeline's options, e.g. `--attn-pipeline=stop-after=attn-mask-tiles`.
/// (With no options at all, MLIR refuses `--attn-pipeline=foo=1` without a
/// word; with one, it names the option it does not know.)
struct AttnPipelineOptions : public PassPipelineOptions<AttnPipelineOptions> {
  Option<std::string> stopAfter{*this, "stop-after",
                                llvm::cl::desc("Stop after this pass of the pipeline"),
                                llvm::cl::init("")};
};

/// Stands in for the pipeline when its options name no pass of it: fails
/// with a message that lists the passes, instead of running all of them.
struct RefuseStopAfter : public PassWrapper<RefuseStopAfter, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RefuseStopAfter)
  explicit RefuseStopAfter(std::string name) : name(std::move(name)) {}
  StringRef getArgument() const override { return "attn-refuse-stop-after"; }
  void runOnOperation() override {
    // Said at the module's location, not on the module op: an op's error
    // would print the whole module after it.
    mlir::emitError(getOperation()->getLoc()) << "attn-pipeline: stop-after="
                                << (name.empty() ? "(nothing)" : name)
                                << " is not a pass of the pipeline ("
                                << llvm::join(pipelinePassNames(), ", ") << ")";
    signalPassFailure();
  }
  std::string name;
};
} // namespace

void registerAttnPipeline() {
  registerAttnPasses(); // generated from Passes.td
  PassPipelineRegistration<AttnPipelineOptions>(
      "attn-pipeline", "The whole attnc pipeline, textbook to tiles",
      [](OpPassManager &pm, const AttnPipelineOptions &options) {
        const std::string &stop = options.stopAfter;
        // `stop-after=` with no name names no pass either (not the whole pipeline).
        if ((options.stopAfter.hasValue() || !stop.empty()) &&
            !llvm::is_contained(pipelinePassNames(), stop))
          pm.addPass(std::make_unique<RefuseStopAfter>(stop));
        else
          buildAttnPipeline(pm, stop);
      });
}

} // namespace attn
