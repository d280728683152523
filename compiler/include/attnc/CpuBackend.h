//===- CpuBackend.h - Run a spec's kernel on the CPU ------------*- C++ -*-===//
//
// The CPU backend takes the final tile-level IR of a spec through
// attn-lower-tiles, one-shot bufferization and the standard conversions to
// LLVM, and runs it with MLIR's ExecutionEngine. It computes exactly what the
// GPU kernel will, one tile at a time, so the algorithm is checked (and can
// be stepped through) on any machine.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_CPUBACKEND_H
#define ATTNC_CPUBACKEND_H

#include "attn/Spec.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attn {

/// The buffers of one sequence, in the layouts of buildTextbook (row-major,
/// contiguous). Element type: double for f64 specs, float for f32 specs.
struct CpuArgs {
  int64_t numQHeads = 0, qLen = 0, numKVHeads = 0;
  const void *q = nullptr;             ///< [numQHeads, qLen, head_dim]
  // Contiguous KV (page_size = 0):
  int64_t kvLen = 0;
  const void *k = nullptr, *v = nullptr; ///< [numKVHeads, kvLen, head_dim]
  // Paged KV (page_size > 0): kvLen tokens in the pages the table lists.
  int64_t numPages = 0;
  const void *kCache = nullptr, *vCache = nullptr; ///< [numPages, page_size, numKVHeads, head_dim]
  const int32_t *blockTable = nullptr;             ///< pages of this sequence, in order
  int64_t blockTableLen = 0;
  double scale = 0;
  int64_t numSplits = 1; ///< decode with split_kv = auto
  void *out = nullptr;   ///< [numQHeads, qLen, head_dim], written
  void *lse = nullptr;   ///< [numQHeads, qLen], written when return_lse
};

/// Checks `args` against `spec`: shapes, GQA ratio, block table length and
/// entries, pointers. Returns an empty string or the first problem found.
std::string checkCpuArgs(const Spec &spec, const CpuArgs &args);

/// A spec's kernel compiled to native code for this CPU. Destroy it before
/// main returns (not from a static destructor): the JIT it owns needs LLVM's
/// own statics, which exit tears down first.
class CpuKernel {
public:
  /// Lowers and JIT-compiles `spec` (target = cpu). When `loweredIR` is given
  /// it receives the LLVM-dialect module, for inspection.
  static llvm::Expected<std::unique_ptr<CpuKernel>> compile(const Spec &spec,
                                                            std::string *loweredIR = nullptr);
  ~CpuKernel();

  /// Runs the kernel on one sequence. Checks the arguments first.
  llvm::Error run(const CpuArgs &args) const;

  const Spec &spec() const { return spec_; }

private:
  struct Impl;
  CpuKernel(Spec spec, std::unique_ptr<Impl> impl);
  Spec spec_;
  std::unique_ptr<Impl> impl_;
};

} // namespace attn

#endif // ATTNC_CPUBACKEND_H
