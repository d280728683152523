//===- GpuCheck.cpp - The emitted kernels on a GPU, against fp64 attention -===//
//
//   attn-gpu-check [--quick] [--jit] [--bench] [--spec TEXT]...
//
// For each spec: the textbook IR through the attn pipeline, the CUDA
// emitter, NVRTC for this GPU, then a ragged batch of fresh random inputs
// (seed printed; paged caches shuffled, NaN in every unused slot; outputs
// poisoned with NaN) and a comparison with the textbook reference in long
// double. Prints one row per spec. --jit instead times the JIT through the
// kernel cache (cold NVRTC, disk hit, memory hit). Exit 0: all within bounds; 1: a failure;
// 77: SKIPPED (no GPU), which ctest reports as skipped, never as passed.
//
//===----------------------------------------------------------------------===//

#include "attn/params.cuh"
#include "attnc/Driver.h"
#include "attnc/EmitCuda.h"
#include "attnc/KernelCache.h"
#include "attnc/Nvrtc.h"
#include "reference/Harness.h"


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace attn;

namespace {

/// float <-> bf16 / f16 bits on the host (round to nearest even).
uint16_t toBits(float x, DType t) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (t == DType::BF16) {
    if (std::isnan(x))
      return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);
    return static_cast<uint16_t>(u >> 16);
  }
  // IEEE half.
  if (std::isnan(x))
    return 0x7e00;
  const uint32_t sign = (u >> 16) & 0x8000;
  int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (exp >= 31)
    return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
    ++half;
  return static_cast<uint16_t>(sign | half);
}

double fromBits(uint16_t b, DType t) {
  if (t == DType::BF16) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int exp = (b >> 10) & 0x1f, mant = b & 0x3ff, sign = b & 0x8000 ? -1 : 1;
  if (exp == 31)
    return mant ? NAN : sign * INFINITY;
  if (exp == 0)
    return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

struct Device {
  const CudaDriver *cu = nullptr;
  CUdevice dev = 0;
  std::string arch, name;
};

/// Device memory freed at scope end.
struct Buffer {
  const CudaDriver *cu;
  CUdeviceptr ptr = 0;
  Buffer(const CudaDriver *cu, const void *host, size_t bytes) : cu(cu) {
    cu->cuMemAlloc(&ptr, bytes ? bytes : 16);
    if (host && bytes)
      cu->cuMemcpyHtoD(ptr, host, bytes);
  }
  ~Buffer() { cu->cuMemFree(ptr); }
};

struct Outcome {
  double relative = 0, maxAbs = 0;
  long nan = 0, maskedRows = 0, maskedWrong = 0;
  double compileSeconds = 0;
  int registers = -1, spills = -1;
  std::string error;
};

/// A spec's kernel compiled for this GPU and loaded, ready to launch.
struct LoadedKernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  CudaLaunchShape shape;
  CudaBinary binary;
  std::string error;
};

LoadedKernel loadKernel(const Device &d, const Spec &spec) {
  LoadedKernel k;
  std::string source;
  if (!emitCudaForSpec(spec, source, k.shape, k.error))
    return k;
  CudaCompileOptions options;
  options.arch = d.arch;
  k.binary = compileCuda(source, spec.symbol() + ".cu", options);
  if (!k.binary) {
    k.error = k.binary.error;
    return k;
  }
  const CudaDriver *cu = d.cu;
  CUresult rc = cu->cuModuleLoadData(&k.module, k.binary.cubin.data());
  if (rc == CUDA_SUCCESS)
    rc = cu->cuModuleGetFunction(&k.function, k.module, spec.symbol().c_str());
  if (rc == CUDA_SUCCESS)
    rc = cu->cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                k.shape.sharedBytes);
  if (rc != CUDA_SUCCESS)
    k.error = cu->describe(rc, "loading the kernel");
  return k;
}

Outcome check(const Device &d, const std::string &text, std::mt19937_64 &rng, bool quick) {
  Outcome res;
  SpecResult parsed = parseSpec(text + ",target=" + d.arch);
  if (!parsed) {
    res.error = parsed.error->message();
    return res;
  }
  const Spec spec = *parsed.spec;
  LoadedKernel kernel = loadKernel(d, spec);
  res.compileSeconds = kernel.binary.seconds;
  res.registers = kernel.binary.registers;
  res.spills = kernel.binary.spillStoreBytes;
  if (!kernel.error.empty()) {
    res.error = kernel.error;
    return res;
  }
  const CudaDriver *cu = d.cu;
  const CudaLaunchShape &shape = kernel.shape;

  // A ragged batch: a single token, lengths that are no multiple of a tile,
  // more queries than keys, one long sequence.
  const bool decode = spec.mode == Mode::Decode;
  std::vector<std::pair<int, int>> lengths =
      decode ? std::vector<std::pair<int, int>>{{1, 1}, {1, 77}, {1, 1000}, {2, 333}}
             : std::vector<std::pair<int, int>>{{1, 1}, {77, 77}, {100, 40}, {333, 1000}};
  if (quick)
    lengths.resize(2);
  const int hkv = decode ? 2 : 1, hq = hkv * static_cast<int>(spec.gqa), dh = static_cast<int>(spec.head_dim);
  const int page = static_cast<int>(spec.page_size), batch = static_cast<int>(lengths.size());
  std::normal_distribution<float> normal(0.f, 1.f);
  const uint16_t nanBits = toBits(NAN, spec.dtype);

  std::vector<int> cuQ = {0}, cuK = {0}, seqLens;
  for (auto [ql, kl] : lengths) {
    cuQ.push_back(cuQ.back() + ql);
    cuK.push_back(cuK.back() + kl);
    seqLens.push_back(kl);
  }
  const int totalQ = cuQ.back(), totalK = cuK.back();
  std::vector<uint16_t> q(size_t(totalQ) * hq * dh), k(size_t(totalK) * hkv * dh), v(k.size());
  for (auto *buf : {&q, &k, &v})
    for (uint16_t &x : *buf)
      x = toBits(normal(rng), spec.dtype);
  // Paged: each sequence's tokens go to pages handed out shuffled; NaN elsewhere.
  int maxPages = 0, numPages = 3;
  for (int kl : seqLens) {
    maxPages = std::max(maxPages, page ? (kl + page - 1) / page : 0);
    numPages += page ? (kl + page - 1) / page : 0;
  }
  std::vector<int> pool(numPages), table(std::max(1, batch * maxPages), -1);
  for (int i = 0; i < numPages; ++i)
    pool[i] = i;
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<uint16_t> kc, vc;
  if (page) {
    kc.assign(size_t(numPages) * page * hkv * dh, nanBits);
    vc.assign(kc.size(), nanBits);
    int next = 0;
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < seqLens[b]; ++t) {
        if (t % page == 0)
          table[b * maxPages + t / page] = pool[next++];
        for (int h = 0; h < hkv; ++h)
          for (int x = 0; x < dh; ++x) {
            size_t at = ((size_t(table[b * maxPages + t / page]) * page + t % page) * hkv + h) * dh + x;
            size_t from = (size_t(cuK[b] + t) * hkv + h) * dh + x;
            kc[at] = k[from];
            vc[at] = v[from];
          }
      }
  }
  const double scale = 1.0 / std::sqrt(double(dh));

  Buffer dq(cu, q.data(), q.size() * 2), dk(cu, page ? kc.data() : k.data(), (page ? kc : k).size() * 2),
      dv(cu, page ? vc.data() : v.data(), (page ? vc : v).size() * 2), dout(cu, nullptr, q.size() * 2),
      dlse(cu, nullptr, size_t(totalQ) * hq * 4), dcuq(cu, cuQ.data(), cuQ.size() * 4),
      dcuk(cu, cuK.data(), cuK.size() * 4), dlens(cu, seqLens.data(), seqLens.size() * 4),
      dtable(cu, table.data(), table.size() * 4);
  cu->cuMemsetD8(dout.ptr, 0xff, q.size() * 2); // NaN: every output must be written
  cu->cuMemsetD8(dlse.ptr, 0xff, size_t(totalQ) * hq * 4);
  kernel::Params p{};
  p.q = dq.ptr;
  p.k = dk.ptr;
  p.v = dv.ptr;
  p.o = dout.ptr;
  p.lse = dlse.ptr;
  p.cu_seqlens_q = dcuq.ptr;
  p.cu_seqlens_k = dcuk.ptr;
  p.seq_lens_k = dlens.ptr;
  p.block_table = dtable.ptr;
  p.block_table_stride = maxPages;
  p.num_pages = numPages;
  p.batch = batch;
  p.num_q_heads = hq;
  p.num_kv_heads = hkv;
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  int maxQ = 0;
  for (auto [ql, kl] : lengths)
    maxQ = std::max(maxQ, ql);
  void *args[] = {&p};
  CUresult rc = cu->cuLaunchKernel(kernel.function, (maxQ + shape.tileQ - 1) / shape.tileQ, hq, batch, shape.threads, 1, 1,
                          shape.sharedBytes, nullptr, args, nullptr);
  if (rc == CUDA_SUCCESS)
    rc = cu->cuCtxSynchronize();
  if (rc != CUDA_SUCCESS) {
    res.error = cu->describe(rc, "the kernel");
    return res;
  }
  std::vector<uint16_t> out(q.size());
  std::vector<float> lse(size_t(totalQ) * hq);
  cu->cuMemcpyDtoH(out.data(), dout.ptr, out.size() * 2);
  cu->cuMemcpyDtoH(lse.data(), dlse.ptr, lse.size() * 4);
  cu->cuModuleUnload(kernel.module);

  double sumSqErr = 0, sumSqRef = 0;
  for (int b = 0; b < batch; ++b) {
    ref::Problem pr;
    pr.numQHeads = hq;
    pr.numKVHeads = hkv;
    pr.qLen = lengths[b].first;
    pr.kvLen = lengths[b].second;
    pr.headDim = dh;
    pr.mask = harness::refMask(spec.mask);
    pr.window = spec.mask.window;
    pr.scale = scale;
    pr.query = [&](int64_t h, int64_t i, int64_t x) -> long double {
      return fromBits(q[(size_t(cuQ[b] + i) * hq + h) * dh + x], spec.dtype);
    };
    pr.key = [&](int64_t h, int64_t t, int64_t x) -> long double {
      return fromBits(k[(size_t(cuK[b] + t) * hkv + h) * dh + x], spec.dtype);
    };
    pr.value = [&](int64_t h, int64_t t, int64_t x) -> long double {
      return fromBits(v[(size_t(cuK[b] + t) * hkv + h) * dh + x], spec.dtype);
    };
    std::vector<long double> ro, rl;
    ref::attention(pr, ro, rl);
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < pr.qLen; ++i) {
        const size_t row = size_t(cuQ[b] + i) * hq + h;
        const size_t refRow = size_t(h) * pr.qLen + i;
        bool allZero = true;
        for (int x = 0; x < dh; ++x) {
          const double got = fromBits(out[row * dh + x], spec.dtype);
          const double want = double(ro[refRow * dh + x]);
          if (std::isnan(got)) {
            ++res.nan;
            continue;
          }
          allZero &= got == 0.0;
          sumSqErr += (got - want) * (got - want);
          sumSqRef += want * want;
          res.maxAbs = std::max(res.maxAbs, std::fabs(got - want));
        }
        if (std::isinf(rl[refRow])) {
          ++res.maskedRows;
          bool lseOk = !spec.return_lse || (std::isinf(lse[row]) && lse[row] < 0);
          res.maskedWrong += !(allZero && lseOk);
        } else if (spec.return_lse) {
          if (std::isnan(lse[row]))
            ++res.nan;
          else
            res.maxAbs = std::max(res.maxAbs, std::fabs(double(lse[row]) - double(rl[refRow])));
        }
      }
  }
  res.relative = sumSqRef > 0 ? std::sqrt(sumSqErr / sumSqRef) : std::sqrt(sumSqErr);
  return res;
}

/// JIT latency through the kernel cache: a cold NVRTC compile, a disk hit in
/// a new cache (as a new process would see it) and a memory hit.
int jitTimings(const Device &d, const std::vector<std::string> &specs) {
  char tmpl[] = "/tmp/attnc-jit.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::printf("%-60s %10s %10s %10s\n", "spec (JIT through the kernel cache)", "cold s", "disk ms",
              "memory us");
  int failures = 0;
  for (const std::string &text : specs) {
    SpecResult parsed = parseSpec(text + ",target=" + d.arch);
    if (!parsed) {
      std::printf("%-60s ERROR %s\n", text.c_str(), parsed.error->message().c_str());
      ++failures;
      continue;
    }
    std::string source, error;
    CudaLaunchShape shape;
    if (!emitCudaForSpec(*parsed.spec, source, shape, error)) {
      std::printf("%-60s ERROR %s\n", text.c_str(), error.c_str());
      ++failures;
      continue;
    }
    CudaCompileOptions options;
    options.arch = d.arch;
    KernelCache first(dir);
    CacheLookup cold = first.get(source, parsed.spec->symbol(), options);
    CacheLookup memory = first.get(source, parsed.spec->symbol(), options);
    KernelCache second(dir);
    CacheLookup disk = second.get(source, parsed.spec->symbol(), options);
    const bool ok = cold && memory && disk && cold.source == CacheSource::Compiled &&
                    memory.source == CacheSource::Memory && disk.source == CacheSource::Disk;
    failures += !ok;
    std::printf("%-60s %10.3f %10.3f %10.1f%s\n", text.c_str(), cold.seconds, disk.seconds * 1e3,
                memory.seconds * 1e6, ok ? "" : "  FAILED");
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  return failures;
}

/// Prefill throughput on PERF.md's shapes (batch * seqlen = 16384,
/// heads * head_dim = 2048, bf16): CUDA-event timing, 3 warm-up launches,
/// median of 10, TFLOP/s with FLOPs = 4 B H N^2 d (halved when causal).
int bench(const Device &d) {
  const CudaDriver *cu = d.cu;
  std::printf("%-44s %10s %10s\n", "prefill (bf16, contiguous, B*N = 16384)", "ms", "TFLOP/s");
  for (int hd : {64, 128})
    for (bool causal : {false, true})
      for (int n : {1024, 4096, 16384}) {
        const int heads = 2048 / hd, batch = 16384 / n;
        const std::string text = "dtype=bf16,head_dim=" + std::to_string(hd) +
                                 (causal ? ",mask=causal" : "") + ",target=" + d.arch;
        SpecResult parsed = parseSpec(text);
        LoadedKernel kernel = parsed ? loadKernel(d, *parsed.spec) : LoadedKernel{};
        if (!parsed || !kernel.error.empty()) {
          std::printf("%s: cannot load: %s\n", text.c_str(),
                      parsed ? kernel.error.c_str() : parsed.error->message().c_str());
          return 1;
        }
        const CudaLaunchShape &shape = kernel.shape;
        const size_t elems = size_t(16384) * heads * hd;
        std::vector<uint16_t> host(elems);
        std::mt19937_64 rng(1);
        std::normal_distribution<float> normal(0.f, 1.f);
        for (uint16_t &x : host)
          x = toBits(normal(rng), DType::BF16);
        std::vector<int> cu_seq(batch + 1);
        for (int b = 0; b <= batch; ++b)
          cu_seq[b] = b * n;
        Buffer q(cu, host.data(), elems * 2), k(cu, host.data(), elems * 2),
            v(cu, host.data(), elems * 2), o(cu, nullptr, elems * 2),
            cs(cu, cu_seq.data(), cu_seq.size() * 4);
        kernel::Params p{};
        p.q = q.ptr;
        p.k = k.ptr;
        p.v = v.ptr;
        p.o = o.ptr;
        p.cu_seqlens_q = p.cu_seqlens_k = cs.ptr;
        p.batch = batch;
        p.num_q_heads = p.num_kv_heads = heads;
        p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(double(hd)));
        void *args[] = {&p};
        CUevent start, stop;
        cu->cuEventCreate(&start, 0);
        cu->cuEventCreate(&stop, 0);
        std::vector<float> times;
        for (int it = 0; it < 13; ++it) {
          cu->cuEventRecord(start, nullptr);
          cu->cuLaunchKernel(kernel.function, n / shape.tileQ, heads, batch, shape.threads, 1, 1,
                             shape.sharedBytes, nullptr, args, nullptr);
          cu->cuEventRecord(stop, nullptr);
          cu->cuEventSynchronize(stop);
          float ms = 0;
          cu->cuEventElapsedTime(&ms, start, stop);
          if (it >= 3)
            times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        const double ms = times[times.size() / 2];
        const double flops = 4.0 * batch * heads * double(n) * n * hd * (causal ? 0.5 : 1.0);
        std::printf("hd %3d  N %5d  %-8s  B %2d  H %2d            %10.3f %10.1f\n", hd, n,
                    causal ? "causal" : "full", batch, heads, ms, flops / ms / 1e9);
        cu->cuEventDestroy(start);
        cu->cuEventDestroy(stop);
        cu->cuModuleUnload(kernel.module);
      }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  bool quick = false, jit = false, benchOnly = false;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--jit")
      jit = true;
    else if (a == "--bench")
      benchOnly = true;
    else if (a == "--spec" && i + 1 < argc)
      specs.push_back(argv[++i]);
    else {
      std::fprintf(stderr, "usage: attn-gpu-check [--quick] [--jit] [--bench] [--spec TEXT]...\n");
      return 2;
    }
  }
  Device d;
  std::string error;
  d.cu = CudaDriver::get(error);
  if (!d.cu) {
    std::printf("SKIPPED: %s\n", error.c_str());
    return 77;
  }
  int major = 0, minor = 0;
  d.cu->cuDeviceGet(&d.dev, 0);
  d.cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.dev);
  d.cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.dev);
  char name[256] = {0};
  d.cu->cuDeviceGetName(name, sizeof(name), d.dev);
  d.arch = major >= 9 ? "sm_90a" : "sm_80";
  CUcontext ctx;
  d.cu->cuDevicePrimaryCtxRetain(&ctx, d.dev);
  d.cu->cuCtxSetCurrent(ctx);

  if (specs.empty()) {
    for (const char *dt : {"bf16", "f16"})
      for (const char *mask : {"none", "causal", "sliding_window(100)"})
        for (int hd : {64, 128, 256}) {
          const int gqa = hd == 64 ? 1 : hd == 128 ? 4 : 7;
          const int page = hd == 64 ? 0 : hd == 128 ? 16 : 19;
          specs.push_back(std::string("dtype=") + dt + ",mask=" + mask + ",head_dim=" +
                          std::to_string(hd) + ",gqa=" + std::to_string(gqa) +
                          ",page_size=" + std::to_string(page) + ",return_lse=true");
        }
    // Head dims that are multiples of 16 but not of 64 (no shared-memory swizzle).
    specs.push_back("dtype=bf16,mask=causal,head_dim=96,gqa=2,page_size=16,return_lse=true");
    specs.push_back("dtype=f16,mask=sliding_window(50),head_dim=80");
    specs.push_back("mode=decode,page_size=16,gqa=8,split_kv=1,return_lse=true");
    specs.push_back("mode=decode,page_size=19,gqa=4,split_kv=1,mask=causal,dtype=f16");
  }
  if (benchOnly)
    return bench(d);
  if (jit) {
    if (specs.empty())
      specs = {"mode=prefill,head_dim=128,gqa=4,page_size=16,mask=causal",
               "mode=decode,head_dim=128,gqa=4,page_size=16,split_kv=1",
               "mode=prefill,head_dim=64", "mode=prefill,head_dim=256,mask=causal"};
    return jitTimings(d, specs) ? 1 : 0;
  }
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::printf("GPU %s (%s), NVRTC %d, seed %llu\n", name, d.arch.c_str(), nvrtcVersion(),
              (unsigned long long)seed);
  std::printf("%-80s %9s %9s %4s %7s %5s %6s %7s %s\n", "spec", "rel err", "max abs", "NaN",
              "masked", "regs", "spill", "nvrtc s", "verdict");
  int failures = 0;
  for (const std::string &text : specs) {
    Outcome r = check(d, text, rng, quick);
    // Spills count when ptxas reported them (-1: no report, e.g. under a sanitizer).
    bool ok = r.error.empty() && r.nan == 0 && r.maskedWrong == 0 && r.relative < 1e-2 &&
              r.spills <= 0;
    failures += !ok;
    if (!r.error.empty()) {
      std::printf("%-80s ERROR %s\n", text.c_str(), r.error.c_str());
      continue;
    }
    std::printf("%-80s %9.2e %9.2e %4ld %3ld/%-3ld %5d %6d %7.3f %s\n", text.c_str(), r.relative,
                r.maxAbs, r.nan, r.maskedRows - r.maskedWrong, r.maskedRows, r.registers, r.spills,
                r.compileSeconds, ok ? "ok" : "FAILED");
  }
  std::printf("%zu specs, %d failed (bounds: relative error < 1e-2 vs fp64, no NaN, fully masked rows 0 "
              "with lse -inf, 0 spill bytes)\n",
              specs.size(), failures);
  return failures ? 1 : 0;
}
