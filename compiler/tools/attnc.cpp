//===- attnc.cpp - The attnc command line ---------------------------------===//
//
//   attnc emit [--spec TEXT] [--stage STAGE] [--print-ir-after-all] [-o FILE]
//   attnc spec [--spec TEXT]
//
// `emit` builds the textbook IR of a spec and runs the pipeline up to a
// stage, like Toy's `toyc -emit=`: a reader can watch the textbook op
// become the FlashAttention recurrence one pass at a time.
//
//===----------------------------------------------------------------------===//

#include "attn/AttnDialect.h"
#include "attnc/Pipeline.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Config/llvm-config.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory attncCategory("attnc options");

static cl::SubCommand emitCmd("emit", "Print the IR of a spec after a stage of the pipeline");
static cl::SubCommand specCmd("spec", "Check a spec; print its canonical form and symbol");

static cl::opt<std::string>
    specText("spec", cl::desc("The attention spec, field=value pairs separated by commas; "
                              "unset fields take their defaults (see `attnc --help`)"),
             cl::value_desc("spec"), cl::init(""), cl::sub(emitCmd), cl::sub(specCmd),
             cl::cat(attncCategory));

static cl::opt<std::string>
    stage("stage",
          cl::desc("Where to stop: `textbook` (before any pass), a pass name "
                   "(attn-online-softmax, attn-safe-init, attn-mask-tiles, "
                   "attn-share-kv-heads, attn-page-kv, attn-split-kv: the IR after it), "
                   "or `final` (the tile-level IR the backends consume)"),
          cl::value_desc("stage"), cl::init("final"), cl::sub(emitCmd), cl::cat(attncCategory));

static cl::opt<bool> printAfterAll("print-ir-after-all",
                                   cl::desc("Print the IR after every pass, up to --stage"),
                                   cl::init(false), cl::sub(emitCmd), cl::cat(attncCategory));

static cl::opt<bool> plainNames("plain-names",
                                cl::desc("Number SSA values (%0, %1) instead of naming them "
                                         "after the algorithm (%m_new, %alpha)"),
                                cl::init(false), cl::sub(emitCmd), cl::cat(attncCategory));

static cl::opt<std::string> outputFile("o", cl::desc("Write the final IR to <file>"),
                                       cl::value_desc("file"), cl::init("-"), cl::sub(emitCmd),
                                       cl::cat(attncCategory));

static const char *kOverview = R"(attnc: a compiler for FlashAttention-family kernels

Commands:
  attnc emit   print the IR of a spec after a stage of the pipeline
  attnc spec   check a spec and print its canonical form
Run `attnc <command> --help` for a command's flags.

A spec is a comma-separated list of field=value pairs; unset fields take defaults:
  mode        prefill | decode                                  (prefill)
  head_dim    32..256, a multiple of 16 on GPU targets          (128)
  dtype       f16 | bf16 on sm_80/sm_90a, f32 | f64 on cpu      (bf16; f32 on cpu)
  tile_q      query rows per tile                               (target default)
  tile_kv     keys per KV tile                                  (target default)
  mask        none | causal | sliding_window(W)                 (none)
  page_size   0 = contiguous KV, else tokens per page (decode needs >= 1)  (0)
  gqa         num_q_heads / num_kv_heads, >= 1                  (1)
  return_lse  true | false                                      (false)
  target      sm_80 | sm_90a | cpu                              (sm_90a)
  split_kv    decode only: auto | number of splits              (auto)
Example:
  attnc emit --spec mode=prefill,mask=causal,page_size=16,gqa=4,head_dim=128 --print-ir-after-all
)";

/// Reads --spec, printing the error and returning nothing when it is invalid.
static std::optional<attn::Spec> readSpec() {
  attn::SpecResult result = attn::parseSpec(specText);
  if (!result) {
    llvm::errs() << "attnc: " << result.error->message() << "\n";
    return std::nullopt;
  }
  return result.spec;
}

static int runSpec() {
  std::optional<attn::Spec> spec = readSpec();
  if (!spec)
    return 1;
  llvm::outs() << "canonical: " << spec->str() << "\n"
               << "symbol:    " << spec->symbol() << "\n";
  if (spec->isGPU())
    llvm::outs() << "shared memory: " << attn::sharedMemoryBytes(*spec) << " of "
                 << attn::sharedMemoryLimit(spec->target) << " bytes per block\n";
  return 0;
}

static int runEmit() {
  std::optional<attn::Spec> spec = readSpec();
  if (!spec)
    return 1;
  const auto &passes = attn::pipelinePassNames();
  const bool knownStage = stage == "textbook" || stage == "final" ||
                          llvm::is_contained(passes, stage.getValue());
  if (!knownStage) {
    llvm::errs() << "attnc: unknown --stage '" << stage << "': expected textbook, final or one of";
    for (const auto &p : passes)
      llvm::errs() << " " << p;
    llvm::errs() << "\n";
    return 1;
  }

  MLIRContext ctx;
  ctx.disableMultithreading(); // IR printing at module scope needs it.
  OwningOpRef<ModuleOp> module = attn::buildTextbook(ctx, *spec);
  OpPrintingFlags flags;
  if (!plainNames)
    flags.printNameLocAsPrefix();

  std::string error;
  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << "attnc: cannot write " << outputFile << ": " << error << "\n";
    return 1;
  }
  if (printAfterAll) {
    llvm::outs() << "// -----// textbook: " << spec->str() << " //----- //\n";
    module->print(llvm::outs(), flags);
    llvm::outs() << "\n";
  }
  if (stage != "textbook") {
    PassManager pm(&ctx);
    attn::buildAttnPipeline(pm, stage == "final" ? "" : stage.getValue());
    if (printAfterAll)
      pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                          [](Pass *, Operation *) { return true; },
                          /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
                          /*printAfterOnlyOnFailure=*/false, llvm::outs(), flags);
    if (failed(pm.run(*module))) {
      llvm::errs() << "attnc: the pipeline failed on " << spec->str() << "\n";
      return 1;
    }
  }
  if (!printAfterAll || outputFile != "-") {
    module->print(output->os(), flags);
    output->os() << "\n";
  }
  output->keep();
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(attncCategory);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "attnc " << ATTNC_VERSION << " (MLIR " << LLVM_VERSION_STRING << ")\n";
  });
  cl::ParseCommandLineOptions(argc, argv, kOverview);
  if (emitCmd)
    return runEmit();
  if (specCmd)
    return runSpec();
  llvm::errs() << "attnc: expected a command (emit, spec); see `attnc --help`\n";
  return 1;
}
