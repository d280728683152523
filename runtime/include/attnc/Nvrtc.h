//===- Nvrtc.h - CUDA source to cubin, in the process -----------*- C++ -*-===//
//
// Compiles a CUDA source that includes the attnc templates (handed to NVRTC
// as named headers, from the copies embedded in the library) for one GPU
// architecture, and reads ptxas' report (registers, spills) from the log.
// Needs libnvrtc (loaded on first use: libnvrtc.so.<CUDA major>, else
// libnvrtc.so; a process that only takes kernels from AOT bundles never loads
// it) and the CUDA
// toolkit's include folder (found at run time: $CUDA_HOME, $CUDA_PATH,
// /usr/local/cuda), no GPU.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_NVRTC_H
#define ATTNC_NVRTC_H

#include "attn/params.cuh"

#include <string>
#include <vector>

namespace attn {

struct CudaCompileOptions {
  std::string arch = "sm_90a"; ///< sm_80, sm_90a, ...
  bool lineInfo = true;
  /// The source holds a decode "<name>_pair" kernel under #ifdef
  /// kernel::kPairProgramMacro (LaunchShape::pair_shared_bytes > 0): compile
  /// it as a second program, on a second thread, into CudaBinary::pairCubin.
  bool pairProgram = false;
  std::vector<std::string> extra;
};

/// A compiled kernel module, or the reason there is none.
struct CudaBinary {
  std::string error;        ///< empty on success; else what failed, with the NVRTC log
  std::vector<char> cubin;
  std::vector<char> pairCubin; ///< the "<name>_pair" kernel's module (CudaCompileOptions::pairProgram)
  std::string log;          ///< NVRTC's log, ptxas' report included
  int registers = -1;       ///< per thread, from ptxas (largest over the kernels)
  int spillStoreBytes = -1; ///< largest over the kernels
  int spillLoadBytes = -1;
  double seconds = 0;       ///< wall time of the compile (both programs: they run side by side)
  explicit operator bool() const { return error.empty(); }
};

/// Compiles `source` (named `name` in diagnostics) for `options.arch`; with
/// options.pairProgram, as two NVRTC programs at once (the pair kernel, and
/// the rest), so that the cold compile takes the longer of the two.
CudaBinary compileCuda(const std::string &source, const std::string &name,
                       const CudaCompileOptions &options);

/// The options an emitted source of this launch shape compiles with for
/// `arch` (a second program for a pair kernel).
CudaCompileOptions compileOptionsFor(const std::string &arch, const kernel::LaunchShape &shape);

/// The CUDA toolkit's include folder (holding cuda_bf16.h), or "" if none.
std::string findCudaInclude();

/// NVRTC's version as major * 1000 + minor * 10 (e.g. 13000), or -1 where
/// NVRTC cannot be loaded.
int nvrtcVersion();

} // namespace attn

#endif // ATTNC_NVRTC_H
