//===- attn-opt.cpp - mlir-opt with the attn dialect and passes -----------===//
//
// mlir-opt's driver with the attn dialect and attnc's passes. One change to
// how it writes: an output file is written under a temporary name and
// renamed over `-o` only when the passes succeeded, so a failing run leaves
// the file that was there (even when it is the input itself) untouched. And
// one check before parsing: MLIR's parser recurses once per nested region,
// attribute or type, so an input nested thousands deep would overflow its
// stack; such an input is refused with its place named instead.
//
//===----------------------------------------------------------------------===//

#include "OutputErrors.h"

#include "attn/AttnDialect.h"
#include "attnc/CpuPasses.h"
#include "attnc/Pipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "mlir/Support/FileUtilities.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

namespace {
/// Brackets deeper than this are refused. The parser takes about 2 KiB of
/// stack a level (nested modules overflow an 8 MiB stack near 4000); the
/// IR attnc writes nests fewer than 20 deep.
constexpr int kMostNesting = 1000;

/// Where `text` first nests brackets ({, [, ( or <) more than kMostNesting
/// deep, outside string literals and // comments, as "line:column"; "" if
/// nowhere. A closing bracket closes the innermost open one of its kind (and
/// any left open inside it); a '>' that closes no '<' (as in "->" or ">=")
/// and any other stray closer change nothing. A line starting with
/// `splitMarker` (non-empty: --split-input-file) begins a new input.
std::string tooDeep(llvm::StringRef text, llvm::StringRef splitMarker) {
  std::vector<char> open; // the open brackets, innermost last
  int line = 1, column = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (column == 0 && !splitMarker.empty() && text.substr(i).starts_with(splitMarker))
      open.clear();
    const char c = text[i];
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
    } else if (c == '"') { // a string literal: to its closing quote
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i, ++column)
        if (text[i] == '\\')
          ++i, ++column;
      ++column;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
    } else if (c == '{' || c == '[' || c == '(' || c == '<') {
      open.push_back(c);
      if (static_cast<int>(open.size()) > kMostNesting)
        return std::to_string(line) + ":" + std::to_string(column);
    } else if (c == '>') {
      if (!open.empty() && open.back() == '<')
        open.pop_back();
    } else if (c == '}' || c == ']' || c == ')') {
      const char opener = c == '}' ? '{' : c == ']' ? '[' : '(';
      auto at = std::find(open.rbegin(), open.rend(), opener);
      if (at != open.rend())
        open.erase(std::prev(at.base()), open.end());
    }
  }
  return "";
}

/// mlir-opt's driver on `input`, written to `output` (kept only when the
/// run succeeds), after the nesting check.
bool runOpt(int argc, char **argv, const std::string &input, const std::string &output,
            mlir::DialectRegistry &registry) {
  const mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // Listings that read no input: the driver's own.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::succeeded(mlir::MlirOptMain(argc, argv, input, output, registry));
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer = mlir::openInputFile(input, &error);
  if (!buffer) {
    llvm::errs() << "attn-opt: " << error << "\n";
    return false;
  }
  // Text only: MLIR bytecode (its magic "ML\xefR") is not read by the text parser.
  const bool bytecode = buffer->getBuffer().starts_with("ML\xefR");
  if (std::string at = bytecode ? "" : tooDeep(buffer->getBuffer(), config.inputSplitMarker());
      !at.empty()) {
    llvm::errs() << (input == "-" ? "<stdin>" : input) << ":" << at
                 << ": error: brackets nest more than " << kMostNesting
                 << " deep here; attn-opt refuses such input (MLIR's parser would run out of "
                    "stack)\n";
    return false;
  }
  std::unique_ptr<llvm::ToolOutputFile> file = mlir::openOutputFile(output, &error);
  if (!file) {
    llvm::errs() << "attn-opt: " << error << "\n";
    return false;
  }
  if (mlir::failed(mlir::MlirOptMain(file->os(), std::move(buffer), registry, config)))
    return false;
  file->keep();
  return true;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  attn::cli::installOutputErrorHandler("attn-opt");
  mlir::DialectRegistry registry;
  // The dialects of the passes' outputs too (attn-lower-tiles writes linalg
  // and math ops), so that attn-opt reads back what it prints.
  registry.insert<attn::AttnDialect, mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::linalg::LinalgDialect, mlir::math::MathDialect, mlir::scf::SCFDialect,
                  mlir::tensor::TensorDialect>();
  attn::registerAttnPipeline();
  attn::registerAttnCpuPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv, "attn-opt: the attn dialect and attnc passes\n", registry);

  // Standard output, or a path that is not a regular file (/dev/null, a
  // pipe): written in place. Otherwise a temporary file beside it.
  llvm::sys::fs::file_status status;
  const bool inPlace = output == "-" || (!llvm::sys::fs::status(output, status) &&
                                         status.type() != llvm::sys::fs::file_type::regular_file);
  if (inPlace)
    return runOpt(argc, argv, input, output, registry) ? 0 : 1;
  llvm::StringRef folder = llvm::sys::path::parent_path(output);
  if (!folder.empty() && !llvm::sys::fs::is_directory(folder)) {
    llvm::errs() << "attn-opt: cannot write " << output << ": " << folder
                 << (llvm::sys::fs::exists(folder) ? " is not a folder" : " does not exist")
                 << "\n";
    return 1;
  }
  const std::string pending = output + ".tmp." + std::to_string(llvm::sys::Process::getProcessId());
  // The driver's output file removes `pending` if a signal (a closed pipe,
  // ^C) stops the run; from its end to the rename, this does.
  if (!runOpt(argc, argv, input, pending, registry)) {
    llvm::sys::fs::remove(pending); // (the driver removes it too, unless it never opened it)
    return 1;
  }
  llvm::sys::RemoveFileOnSignal(pending);
  if (std::error_code ec = llvm::sys::fs::rename(pending, output)) {
    llvm::errs() << "attn-opt: cannot write " << output << ": " << ec.message() << "\n";
    llvm::sys::fs::remove(pending);
    return 1;
  }
  llvm::sys::DontRemoveFileOnSignal(pending);
  return 0;
}
