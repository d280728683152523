//===- GpuCheck.h - What attn-gpu-check's parts share ----------*- C++ -*-===//
//
// The GPU, its stream and runtime, for the checks (GpuCheck.cpp) and the
// timings of --bench (GpuBench.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TESTS_GPU_GPUCHECK_H
#define ATTNC_TESTS_GPU_GPUCHECK_H

#include "attnc/Runtime.h"
#include "reference/GpuHarness.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpucheck {

struct Gpu {
  const attn::CudaDriver *cu = nullptr;
  std::unique_ptr<attn::Runtime> rt;
  CUstream stream = nullptr;
  std::string cacheDir; ///< the runtime's fresh cache, removed at exit
  ~Gpu() {
    if (!cacheDir.empty())
      std::system(("rm -rf '" + cacheDir + "'").c_str());
  }
};

/// Waits for the check's stream; a kernel that never finishes ends the
/// process with a line naming `what` (harness::StuckGuard).
inline CUresult sync(Gpu &g, const std::string &what) {
  return attn::harness::guarded(what, [&] { return g.cu->cuStreamSynchronize(g.stream); });
}

/// A kernel compiled from a CUDA source given on the command line: one
/// printed by `attnc emit` and edited (its first two lines name the spec
/// and the launch shape), to time an idea against the emitted kernel.
struct SourceKernel {
  std::string label; ///< the file's name
  attn::Spec spec;
  std::shared_ptr<const attn::Kernel> kernel;
};

/// Compiles and loads the kernel source at `path` (prints its registers and
/// spills); false, with a line naming the file and the problem, if it cannot.
bool loadSource(Gpu &g, const std::string &path, SourceKernel &out);

/// A decode shape of --bench: batch, query heads, KV heads, KV length.
struct DecodeRow {
  int batch, hq, hkv, len;
};

/// "B,HQ,HKV,LEN" as a DecodeRow, or an error that names what is wrong.
std::optional<DecodeRow> parseDecodeRow(const std::string &text, std::string &error);

/// --bench: every variant on `rows` ("prefill", "decode" or "all"), then each
/// source on the rows of its spec. 1 if a source's output differed.
int bench(Gpu &g, const std::vector<std::string> &variants, const std::vector<SourceKernel> &sources,
          const std::string &rows, const std::vector<DecodeRow> &decodeRows);

} // namespace gpucheck

#endif // ATTNC_TESTS_GPU_GPUCHECK_H
