//===- load.cpp - JIT at model load: a model's kernels compiled in parallel -===//
//
// A Llama-like layer (head_dim 128, GQA 4, bf16, a paged KV cache of 16-token
// pages) needs a few kernels: prefill (causal, and with lse for chunked
// prefill), decode, a sliding-window variant. Runtime::prepare gets them all
// at load time, compiling the missing ones in parallel, and prints three
// timings: cold (an empty kernel cache: pipeline + NVRTC), disk-warm (a new
// runtime over the same cache, as a restarted server) and memory-warm. With
// a CUDA driver, NVRTC's output also goes through the driver's compute cache
// (~/.nv/ComputeCache): cold is a full compile only the first time this
// machine sees these kernels, or with CUDA_CACHE_DISABLE=1.
//
//   attn-jit-at-load-example [--threads N]
//
//===----------------------------------------------------------------------===//

#include "attnc/Runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace {
const char *kModel[] = {
    "mode=prefill,head_dim=128,dtype=bf16,mask=causal,page_size=16,gqa=4",
    "mode=prefill,head_dim=128,dtype=bf16,mask=causal,page_size=16,gqa=4,return_lse=true",
    "mode=prefill,head_dim=128,dtype=bf16,mask=sliding_window(4096),page_size=16,gqa=4",
    "mode=decode,head_dim=128,dtype=bf16,page_size=16,gqa=4",
    "mode=decode,head_dim=128,dtype=bf16,mask=sliding_window(4096),page_size=16,gqa=4",
};
} // namespace

int main(int argc, char **argv) {
  unsigned threads = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      char *end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      if (*argv[i] == '\0' || *end != '\0' || n < 0 || n > 1024) {
        std::fprintf(stderr, "--threads '%s': expected a number of threads in 0..1024 (0: one "
                             "per hardware thread)\n", argv[i]);
        return 2;
      }
      threads = static_cast<unsigned>(n);
    } else {
      std::fprintf(stderr, "usage: attn-jit-at-load-example [--threads N]\n");
      return 2;
    }
  }
  char dir[] = "/tmp/attnc-load-example.XXXXXX";
  if (!mkdtemp(dir)) {
    std::fprintf(stderr, "cannot create a temporary kernel cache\n");
    return 1;
  }
  const std::string cacheDir = dir;
  std::string error;
  std::unique_ptr<attn::Runtime> rt = attn::Runtime::create(error, cacheDir);
  if (!rt) {
    std::printf("SKIPPED: no GPU here (%s): nothing to load\n", error.c_str());
    std::system(("rm -rf '" + cacheDir + "'").c_str());
    return 77; // ctest reports it as skipped, never as passed
  }
  std::vector<attn::Spec> specs;
  for (const char *text : kModel) {
    attn::SpecResult r = attn::parseSpec(std::string(text) + ",target=" + attn::name(rt->target()));
    if (!r) {
      std::printf("%s: %s\n", text, r.error->message().c_str());
      return 1;
    }
    specs.push_back(*r.spec);
  }
  auto timed = [&](attn::Runtime &runtime, const char *what) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<attn::KernelLookup> got = runtime.prepare(specs, threads);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const attn::KernelLookup &k : got)
      if (!k) {
        std::printf("%s: %s\n", what, k.error.c_str());
        return false;
      }
    std::printf("%-12s %zu kernels in %9.3f ms (first from %s)\n", what, got.size(), s * 1e3,
                attn::name(got[0].source));
    return true;
  };
  std::printf("%s (%s), kernel cache %s\n", rt->deviceName().c_str(), rt->arch().c_str(),
              cacheDir.c_str());
  if (const std::string notice = attn::CudaDriver::computeCacheNotice(); !notice.empty())
    std::printf("%s\n", notice.c_str());
  bool ok = timed(*rt, "cold") && timed(*rt, "memory-warm");
  std::unique_ptr<attn::Runtime> restarted = attn::Runtime::create(error, cacheDir);
  ok = ok && restarted && timed(*restarted, "disk-warm");
  std::system(("rm -rf '" + cacheDir + "'").c_str());
  return ok ? 0 : 1;
}
