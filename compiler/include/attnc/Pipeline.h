//===- Pipeline.h - The attnc pass pipeline ---------------------*- C++ -*-===//

#ifndef ATTNC_PIPELINE_H
#define ATTNC_PIPELINE_H

#include "mlir/Pass/PassManager.h"

#include <string>
#include <vector>

namespace attn {

/// The pass names in pipeline order, for stage selectors and docs.
const std::vector<std::string> &pipelinePassNames();

/// Adds the attnc passes, in order, to a pass manager on `builtin.module`.
/// With `stopAfter` set to one of pipelinePassNames(), stops after it.
void buildAttnPipeline(mlir::OpPassManager &pm, const std::string &stopAfter = "");

/// Registers the passes and the named pipeline `attn-pipeline`.
void registerAttnPipeline();

} // namespace attn

#endif // ATTNC_PIPELINE_H
