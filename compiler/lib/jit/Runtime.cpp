//===- Runtime.cpp - Kernels for specs, compiled on demand -----------------===//

#include "attnc/Runtime.h"
#include "attnc/Attention.h"
#include "attnc/Bundle.h"
#include "attnc/EmitCuda.h"
#include "attnc/Tuning.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace attn {

std::unique_ptr<Runtime> Runtime::create(std::string &error, const std::string &cacheDir) {
  const CudaDriver *cu = CudaDriver::get(error);
  if (!cu)
    return nullptr;
  // The context and the GPU first. The kernel cache, and its folder, come
  // with the first JIT compile (cache()).
  CUcontext ctx = nullptr;
  CUresult rc = cu->cuCtxGetCurrent(&ctx);
  CUdevice dev = 0;
  // The device's primary context, retained when the thread has none current:
  // the runtime keeps it for the life of the process (its kernels may outlive
  // the runtime), unless the runtime is not made after all.
  bool retained = false;
  auto giveBack = [&] {
    if (retained) {
      cu->cuCtxSetCurrent(nullptr); // as the thread had it
      cu->cuDevicePrimaryCtxRelease(dev);
    }
  };
  if (rc == CUDA_SUCCESS && !ctx) {
    rc = cu->cuDeviceGet(&dev, 0);
    if (rc == CUDA_SUCCESS)
      rc = cu->cuDevicePrimaryCtxRetain(&ctx, dev);
    retained = rc == CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS)
      rc = cu->cuCtxSetCurrent(ctx);
  } else if (rc == CUDA_SUCCESS) {
    rc = cu->cuCtxGetDevice(&dev);
  }
  int major = 0, minor = 0;
  if (rc == CUDA_SUCCESS)
    rc = cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (rc == CUDA_SUCCESS)
    rc = cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (rc != CUDA_SUCCESS) {
    error = cu->describe(rc, "setting up a CUDA context");
    giveBack();
    return nullptr;
  }
  char name[256] = {0};
  cu->cuDeviceGetName(name, sizeof(name), dev);
  if (major < 8) {
    error = std::string("the GPU (") + name + ", compute capability " + std::to_string(major) +
            "." + std::to_string(minor) + ") is older than sm_80, which attnc's kernels need";
    giveBack();
    return nullptr;
  }
  // The cache's folder is settled now (the environment as it is at
  // creation), and created at the first JIT compile.
  std::unique_ptr<Runtime> rt(
      new Runtime(cacheDir.empty() ? KernelCache::defaultDirectory() : cacheDir));
  rt->cu_ = cu;
  rt->ctx_ = ctx;
  rt->name_ = name;
  rt->ccMajor_ = major;
  rt->arch_ = major == 9 ? "sm_90a" : "sm_" + std::to_string(major) + std::to_string(minor);
  return rt;
}

KernelCache &Runtime::cache() {
  std::call_once(cacheOpened_, [&] { cache_ = std::make_unique<KernelCache>(cacheDir_); });
  return *cache_;
}

namespace {
/// The spec on the default tiles of one whose tiles attnc chose for it
/// (untunedSpec, longPrefillDefaultSpec); nullopt for any other.
std::optional<Spec> defaultTilesTwin(const Spec &spec) {
  if (std::optional<Spec> untuned = untunedSpec(spec))
    return untuned;
  return longPrefillDefaultSpec(spec);
}
} // namespace

KernelLookup Runtime::kernel(const Spec &spec) {
  auto t0 = std::chrono::steady_clock::now();
  bool shared = false;
  KernelLookup found = kernels_.get(spec.str(), [&] { return build(spec); }, shared);
  if (shared) { // built (or being built) by an earlier call
    found.source = CacheSource::Memory;
    found.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // AOT only: a spec on tiles attnc would choose for it, which no bundle
  // holds, is served by the kernel of the default tiles (bundled, or got
  // before) rather than refused: tiles a tuning table on this machine gives
  // its kind (a bundle built without the table holds the built-in ones), or
  // the 192 x 128 tiles of a long head_dim 64 prefill (a bundle line that
  // leaves its tiles open holds the default ones). The runtime cannot tell
  // such tiles from the same ones given by hand: those are served alike.
  // Remembered under that spec only: with JIT on again, this one is compiled.
  if (!found && found.notBundled && aotOnly_)
    if (std::optional<Spec> twin = defaultTilesTwin(spec)) {
      KernelLookup served = kernel(*twin);
      if (served)
        return served;
      if (!served.notBundled) { // held, but it failed: that is the error to say
        served.error = "as " + twin->str() + ": " + served.error;
        return served;
      }
    }
  return found;
}

std::vector<KernelLookup> Runtime::prepare(const std::vector<Spec> &specs, unsigned threads) {
  std::vector<KernelLookup> out(specs.size());
  const unsigned n = std::max(1u, std::min<unsigned>(
      threads ? threads : std::max(1u, std::thread::hardware_concurrency()),
      static_cast<unsigned>(specs.size())));
  std::atomic<size_t> next{0};
  auto work = [&] {
    // Each thread loads into the runtime's context (kernel() restores the
    // thread's own afterwards).
    for (size_t i; (i = next++) < specs.size();)
      out[i] = kernel(specs[i]);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
  return out;
}

KernelLookup Runtime::build(const Spec &spec) {
  KernelLookup out;
  if (!spec.isGPU()) {
    out.error = "the spec's target is cpu; GPU kernels need target = sm_80 or sm_90a";
    out.wrongTarget = true;
    return out;
  }
  if (spec.target == Target::SM90a && ccMajor_ != 9) {
    out.error = "the spec targets sm_90a but the GPU (" + name_ + ") is " + arch_ +
                ": use target = sm_80";
    out.wrongTarget = true;
    return out;
  }
  std::string source;
  CudaLaunchShape shape;
  CacheLookup cubin;
  // A bundle built for this architecture, or for sm_80 on any 8.x GPU (its
  // cubins run on every minor revision of the major).
  std::vector<std::string> archs = {arch_};
  if (ccMajor_ == 8 && arch_ != "sm_80")
    archs.push_back("sm_80");
  const BundleEntry *aot = nullptr;
  for (size_t i = 0; !aot && i < archs.size(); ++i)
    aot = findBundledKernel(spec.str(), archs[i]);
  auto notBundled = [&] {
    // (kernel() then tries the spec of the default tiles.)
    out.error = spec.str() + " is in no AOT bundle built for " + arch_ +
                (archs.size() > 1 ? " or sm_80" : "") +
                (spec.mode == Mode::Decode ? ", with this or any other tile_q" : "") +
                " (AOT-only mode: no JIT)";
    if (const std::optional<Spec> untuned = untunedSpec(spec))
      out.error += "; its tiles are the tuning table's (" + TuningTable::defaultPath() +
                   "), and no bundle holds the built-in ones (" + untuned->str() + ") either";
    else if (const std::optional<Spec> shorter = longPrefillDefaultSpec(spec))
      out.error += "; its tiles are those of a long head_dim 64 prefill, and no bundle holds "
                   "the default ones (" +
                   shorter->str() + ") either";
    out.notBundled = true;
    for (const std::string &refused : bundleErrors())
      out.error += "; " + refused;
    return out;
  };
  // A GPU decode kernel's code is the same for every tile_q (its blocks take
  // 16 rows of query tokens x heads per pass, whatever the count; only the
  // names differ), so this spec shares the kernel of another tile_q: a
  // bundled one (this architecture's first), else the tile_q = 1 spec's
  // (got before, or compiled once for every token count). The kernel keeps
  // its own spec and names.
  if (!aot && spec.mode == Mode::Decode) {
    Spec sibling = spec;
    for (const std::string &arch : archs)
      for (int64_t t = 1; t <= 16; ++t) {
        sibling.tile_q = t;
        if (t != spec.tile_q && findBundledKernel(sibling.str(), arch))
          return kernel(sibling);
      }
    if (spec.tile_q != 1) {
      sibling.tile_q = 1;
      KernelLookup one = kernel(sibling);
      if (!one && one.notBundled)
        return notBundled();
      if (!one)
        one.error = "as " + sibling.str() + " (the same decode kernel): " + one.error;
      return one;
    }
  }
  if (aot) {
    // Compiled ahead of time: no pipeline, no NVRTC.
    auto binary = std::make_shared<CudaBinary>();
    binary->cubin.assign(aot->cubin, aot->cubin + aot->cubin_size);
    if (aot->pair_cubin)
      binary->pairCubin.assign(aot->pair_cubin, aot->pair_cubin + aot->pair_cubin_size);
    shape.threads = aot->threads;
    shape.shared_bytes = aot->shared_bytes;
    shape.merge_threads = aot->merge_threads;
    shape.cluster_merge = aot->cluster_merge != 0;
    shape.pair_shared_bytes = aot->pair_shared_bytes;
    shape.decode = spec.mode == Mode::Decode;
    shape.tile_q = shape.decode ? 16 : static_cast<int>(spec.tile_q);
    cubin.binary = binary;
    cubin.source = CacheSource::Bundle;
  } else if (aotOnly_) {
    return notBundled(); // an 8.x GPU looked for sm_80's kernels too
  } else {
    if (!emitCudaForSpec(spec, source, shape, out.error))
      return out;
    cubin = cache().get(source, spec.symbol(), compileOptionsFor(arch_, shape));
  }
  out.source = cubin.source;
  out.binary = cubin.binary;
  if (!cubin) {
    out.error = cubin.error;
    return out;
  }
  // Load into the runtime's context, whichever context the calling thread
  // has current; give the thread its own back afterwards.
  CUcontext current = nullptr;
  cu_->cuCtxGetCurrent(&current);
  if (current != ctx_)
    cu_->cuCtxSetCurrent(ctx_);
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Kernel> k =
      Kernel::load(spec, cubin.binary->cubin, cubin.binary->pairCubin, shape, out.error);
  if (current != ctx_)
    cu_->cuCtxSetCurrent(current);
  if (!k)
    return out;
  out.kernel = std::move(k);
  out.seconds = cubin.seconds +
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

} // namespace attn
