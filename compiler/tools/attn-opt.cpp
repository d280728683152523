//===- attn-opt.cpp - mlir-opt with the attn dialect and passes -----------===//
//
// mlir-opt's driver with the attn dialect and attnc's passes. One change to
// how it writes: an output file is written under a temporary name and
// renamed over `-o` only when the passes succeeded, so a failing run leaves
// the file that was there (even when it is the input itself) untouched.
//
//===----------------------------------------------------------------------===//

#include "OutputErrors.h"

#include "attn/AttnDialect.h"
#include "attnc/CpuPasses.h"
#include "attnc/Pipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

int main(int argc, char **argv) {
  attn::cli::installOutputErrorHandler("attn-opt");
  mlir::DialectRegistry registry;
  registry.insert<attn::AttnDialect, mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::scf::SCFDialect, mlir::tensor::TensorDialect>();
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
    return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, input, output, registry));
  llvm::StringRef folder = llvm::sys::path::parent_path(output);
  if (!folder.empty() && !llvm::sys::fs::is_directory(folder)) {
    llvm::errs() << "attn-opt: cannot write " << output << ": " << folder << " is not a folder\n";
    return 1;
  }
  const std::string pending = output + ".tmp." + std::to_string(llvm::sys::Process::getProcessId());
  if (mlir::failed(mlir::MlirOptMain(argc, argv, input, pending, registry))) {
    llvm::sys::fs::remove(pending); // (the driver removes it too, unless it never opened it)
    return 1;
  }
  if (std::error_code ec = llvm::sys::fs::rename(pending, output)) {
    llvm::errs() << "attn-opt: cannot write " << output << ": " << ec.message() << "\n";
    llvm::sys::fs::remove(pending);
    return 1;
  }
  return 0;
}
