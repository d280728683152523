//===- Pipeline.cpp - The attnc pass pipeline -----------------------------===//

#include "attnc/Pipeline.h"
#include "attnc/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace attn {

const std::vector<std::string> &pipelinePassNames() {
  static const std::vector<std::string> names = {
      "attn-online-softmax", "attn-safe-init", "attn-mask-tiles",
      "attn-share-kv-heads", "attn-page-kv",   "attn-split-kv"};
  return names;
}

void buildAttnPipeline(OpPassManager &pm, const std::string &stopAfter) {
  OpPassManager &fn = pm.nest<func::FuncOp>();
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

void registerAttnPipeline() {
  registerAttnPasses(); // generated from Passes.td
  PassPipelineRegistration<>("attn-pipeline", "The whole attnc pipeline, textbook to tiles",
                             [](OpPassManager &pm) { buildAttnPipeline(pm); });
}

} // namespace attn
