//===- Nvrtc.h - CUDA source to cubin, in the process -----------*- C++ -*-===//
//
// Compiles a CUDA source that includes the attnc templates (handed to NVRTC
// as named headers, from the copies embedded in the library) for one GPU
// architecture, and reads ptxas' report (registers, spills) from the log.
// Needs libnvrtc and the CUDA toolkit's include folder (found at run time:
// $CUDA_HOME, $CUDA_PATH, /usr/local/cuda), no GPU.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_NVRTC_H
#define ATTNC_NVRTC_H

#include <string>
#include <vector>

namespace attn {

struct CudaCompileOptions {
  std::string arch = "sm_90a"; ///< sm_80, sm_90a, ...
  bool lineInfo = true;
  std::vector<std::string> extra;
};

/// A compiled kernel module, or the reason there is none.
struct CudaBinary {
  std::string error;        ///< empty on success; else what failed, with the NVRTC log
  std::vector<char> cubin;
  std::string log;          ///< NVRTC's log, ptxas' report included
  int registers = -1;       ///< per thread, from ptxas (largest over the kernels)
  int spillStoreBytes = -1; ///< largest over the kernels
  int spillLoadBytes = -1;
  double seconds = 0;       ///< wall time of the compile
  explicit operator bool() const { return error.empty(); }
};

/// Compiles `source` (named `name` in diagnostics) for `options.arch`.
CudaBinary compileCuda(const std::string &source, const std::string &name,
                       const CudaCompileOptions &options);

/// The CUDA toolkit's include folder (holding cuda_bf16.h), or "" if none.
std::string findCudaInclude();

/// NVRTC's version as major * 1000 + minor * 10 (e.g. 13000), or -1.
int nvrtcVersion();

} // namespace attn

#endif // ATTNC_NVRTC_H
