//===- Runtime.h - Kernels for specs, compiled on demand --------*- C++ -*-===//
//
// The JIT path from a spec to a launchable kernel: the attn pipeline and the
// CUDA emitter, then the kernel cache (memory, disk, NVRTC), then the module
// loaded into the runtime's CUDA context. Thread-safe: threads asking for
// one spec wait for one compile; different specs compile in parallel.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_RUNTIME_H
#define ATTNC_RUNTIME_H

#include "attnc/Kernel.h"
#include "attnc/KernelCache.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace attn {

/// Where a kernel came from, and how long getting it took.
struct KernelLookup {
  std::shared_ptr<const Kernel> kernel; ///< null on failure
  std::shared_ptr<const CudaBinary> binary; ///< the cubin, with ptxas' report when compiled
  std::string error;
  bool wrongTarget = false; ///< the error: the spec's target cannot run on this GPU (no compile ran)
  bool notBundled = false;  ///< the error: AOT-only mode, and no bundle holds the spec
  CacheSource source = CacheSource::Compiled; ///< of the cubin (Memory: also already loaded)
  double seconds = 0;
  explicit operator bool() const { return kernel != nullptr; }
};

class Runtime {
public:
  /// Binds to the calling thread's current CUDA context, or to device 0's
  /// primary context when none is current. `cacheDir` empty: the default
  /// (KernelCache::defaultDirectory(), read now); the folder is created at
  /// the first JIT compile, not here.
  static std::unique_ptr<Runtime> create(std::string &error, const std::string &cacheDir = "");

  /// The kernel of `spec`: from an AOT bundle (linked, or a folder loaded
  /// with loadBundleFolder) built for this GPU's architecture, else the
  /// kernel cache, else NVRTC. A decode kernel's code is the same for every
  /// tile_q (only its names differ): a decode spec is also served by a
  /// bundled decode kernel that differs from it only in tile_q, and where it
  /// is compiled, it is the tile_q = 1 spec's kernel that is compiled and
  /// shared by every token count (the kernel keeps its own spec and names).
  /// In AOT-only mode, a spec on tiles attnc would choose for it (whoever
  /// gave them), which no bundle holds, is served by the kernel of the
  /// default tiles (bundled, or got before) instead of refused: tiles the
  /// tuning table gives its kind (untunedSpec), or a long head_dim 64
  /// prefill's 192 x 128 (longPrefillDefaultSpec). The kernel keeps its own
  /// spec, so Kernel::spec() says which it is. An sm_90a spec runs on
  /// compute capability 9.x only (wgmma and the cluster merge are sm_90a's
  /// own), an sm_80 one on any GPU from 8.0; the
  /// cubin is built for the GPU's own architecture and loaded into
  /// context(), which must be current on the thread that launches it.
  KernelLookup kernel(const Spec &spec);

  /// JIT at model load: the kernels of all `specs` (a model's prefill and
  /// decode kernels, say), those not yet in memory compiled in parallel on
  /// `threads` threads (0: one per hardware thread). One result per spec, in
  /// order; later kernel() calls for them are memory hits.
  std::vector<KernelLookup> prepare(const std::vector<Spec> &specs, unsigned threads = 0);

  /// AOT only: a spec missing from every bundle, linked (attnc/Bundle.h) or
  /// loaded (attnc/BundleFolder.h), is an error instead of a JIT compile.
  /// Kernels already got stay usable.
  void setAotOnly(bool aotOnly) { aotOnly_ = aotOnly; }
  bool aotOnly() const { return aotOnly_; }

  const std::string &arch() const { return arch_; } ///< "sm_90a", "sm_80", "sm_86", ...
  /// The spec target for this GPU: sm_90a on 9.x, sm_80 on every 8.x.
  Target target() const { return gpuTarget(ccMajor_); }
  const std::string &deviceName() const { return name_; }
  /// The kernel cache of JIT compiles, opened (its folder created) at the
  /// first compile or call here: a runtime that serves only bundled kernels
  /// never creates it.
  KernelCache &cache();
  CUcontext context() const { return ctx_; }

private:
  explicit Runtime(const std::string &cacheDir) : cacheDir_(cacheDir) {}
  KernelLookup build(const Spec &spec);

  const CudaDriver *cu_ = nullptr;
  CUcontext ctx_ = nullptr;
  std::string arch_, name_;
  int ccMajor_ = 0;
  std::atomic<bool> aotOnly_{false};
  std::string cacheDir_;
  std::once_flag cacheOpened_;
  std::unique_ptr<KernelCache> cache_;
  SingleFlight<KernelLookup> kernels_;
};

} // namespace attn

#endif // ATTNC_RUNTIME_H
