//===- attn-opt.cpp - mlir-opt with the attn dialect and passes -----------===//
//
// mlir-opt's driver with the attn dialect and attnc's passes. One change to
// how it writes: `-o` is written only when the passes succeeded, and as
// `attnc emit -o` writes it (whole or not at all: a file beside it renamed
// onto it; through a link, the link's file), so a failing run leaves the
// file that was there (even when it is the input itself) untouched. And
// one check before parsing: MLIR's parser recurses once per nested region,
// attribute or type, so an input nested thousands deep would overflow its
// stack; such an input is refused with its place named instead. The driver
// runs on a thread of a large stack, for what the parser recurses through
// that the check does not see (an affine expression's long chain of
// operators).
//
//===----------------------------------------------------------------------===//

#include "Npy.h"
#include "OutputErrors.h"

#include "attn/AttnDialect.h"
#include "attn/Printable.h"
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

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <iterator>
#include <pthread.h>
#include <string>
#include <vector>

namespace {
/// Brackets (and unary minus signs) deeper than this are refused. The parser
/// takes about 2 KiB of stack a level (nested modules overflow an 8 MiB stack
/// near 4000); the IR attnc writes nests fewer than 20 deep.
constexpr int kMostNesting = 1000;
/// The stack the driver runs on (reserved, and taken only as it is used).
constexpr size_t kParserStackBytes = size_t(1) << 30;

/// Where `text` first nests brackets ({, [, ( or <) more than kMostNesting
/// deep, outside string literals and // comments, as "line:column"; "" if
/// nowhere. A closing bracket closes the innermost open one of its kind (and
/// any left open inside it); the '>' of "->" or ">=" closes nothing, nor
/// does any other stray closer. A run of '-' signs (each a unary minus the
/// parser recurses into; spaces and comments between them) nests as deep as
/// it is long. A line starting with `splitMarker` (non-empty:
/// --split-input-file) begins a new input.
std::string tooDeep(llvm::StringRef text, llvm::StringRef splitMarker) {
  std::vector<char> open; // the open brackets, innermost last
  int minuses = 0;        // the '-' signs in a row (spaces between them allowed)
  int line = 1, column = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (column == 0 && !splitMarker.empty() && text.substr(i).starts_with(splitMarker))
      open.clear();
    const char c = text[i];
    ++column;
    if (c == '-') { // a unary minus (in an affine expression) nests too
      if (++minuses + static_cast<int>(open.size()) > kMostNesting)
        return std::to_string(line) + ":" + std::to_string(column);
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') { // a comment, to its line's end
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
      continue; // (between minus signs, as a space: the lexer skips it)
    }
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
      minuses = 0;
    if (c == '\n') {
      ++line;
      column = 0;
    } else if (c == '"') { // a string literal: to its closing quote
      for (++i; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i, ++column)
        if (text[i] == '\\')
          ++i, ++column;
      ++column;
    } else if (c == '{' || c == '[' || c == '(' || c == '<') {
      open.push_back(c);
      if (static_cast<int>(open.size()) > kMostNesting)
        return std::to_string(line) + ":" + std::to_string(column);
    } else if (c == '>') {
      // The '>' of "->" or ">=" closes nothing, even inside a '<'.
      const bool arrowOrCompare =
          (i > 0 && text[i - 1] == '-') || (i + 1 < text.size() && text[i + 1] == '=');
      if (!arrowOrCompare && !open.empty() && open.back() == '<')
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

/// mlir-opt's driver on `input` after the nesting check, written to
/// `output`: standard output ("-") as it is printed, a file only when the
/// run succeeds.
bool runOpt(int argc, char **argv, const std::string &input, const std::string &output,
            mlir::DialectRegistry &registry) {
  const mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // Listings that read no input: the driver's own.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::succeeded(mlir::MlirOptMain(argc, argv, input, output, registry));
  // A file that cannot be written is said before anything is read or run.
  if (output.empty()) {
    llvm::errs() << "attn-opt: -o is empty: it needs a file (or - for standard output)\n";
    return false;
  }
  if (output != "-")
    if (std::string why = attn::npy::writable(output); !why.empty()) {
      llvm::errs() << "attn-opt: " << attn::printable(output + ": " + why, /*keepUtf8=*/true)
                   << "\n";
      return false;
    }
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer = mlir::openInputFile(input, &error);
  if (!buffer) {
    llvm::errs() << "attn-opt: " << attn::printable(error, /*keepUtf8=*/true) << "\n";
    return false;
  }
  // Text only: MLIR bytecode (its magic "ML\xefR") is not read by the text parser.
  const bool bytecode = buffer->getBuffer().starts_with("ML\xefR");
  if (std::string at = bytecode ? "" : tooDeep(buffer->getBuffer(), config.inputSplitMarker());
      !at.empty()) {
    llvm::errs() << (input == "-" ? "<stdin>" : attn::printable(input, /*keepUtf8=*/true)) << ":"
                 << at << ": error: brackets or minus signs nest more than " << kMostNesting
                 << " deep here; attn-opt refuses such input (MLIR's parser would run out of "
                    "stack)\n";
    return false;
  }
  if (output == "-") {
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
  std::string text;
  llvm::raw_string_ostream os(text);
  if (mlir::failed(mlir::MlirOptMain(os, std::move(buffer), registry, config)))
    return false;
  if (!attn::npy::writeFile(output, text, error)) {
    llvm::errs() << "attn-opt: " << attn::printable(error, /*keepUtf8=*/true) << "\n";
    return false;
  }
  return true;
}
/// Runs `work` on a thread of `stackBytes` of stack and waits for it, or on
/// this thread where the system gives no such thread (a limit on memory).
void onLargeStack(size_t stackBytes, llvm::function_ref<void()> work) {
  pthread_attr_t attributes;
  if (pthread_attr_init(&attributes) != 0) {
    work();
    return;
  }
  pthread_t thread;
  const bool started = pthread_attr_setstacksize(&attributes, stackBytes) == 0 &&
                       pthread_create(
                           &thread, &attributes,
                           [](void *job) -> void * {
                             (*static_cast<llvm::function_ref<void()> *>(job))();
                             return nullptr;
                           },
                           &work) == 0;
  pthread_attr_destroy(&attributes);
  if (started)
    pthread_join(thread, nullptr);
  else
    work();
}
} // namespace

int main(int argc, char **argv) {
  const attn::cli::CallerSignals caller; // (before InitLLVM handles them)
  llvm::InitLLVM init(argc, argv);
  attn::cli::installOutputErrorHandler("attn-opt", caller);
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

  // On a thread of a large stack: MLIR's parser also recurses through an
  // affine expression's chain of operators (d0 + d0 + ...), which no nesting
  // check sees; 8 MiB ends near 50,000 of them.
  bool succeeded = false;
  onLargeStack(kParserStackBytes, [&] { succeeded = runOpt(argc, argv, input, output, registry); });
  return succeeded ? 0 : 1;
}
