//===- GpuBench.cpp - attn-gpu-check --bench: the benchmark's shapes -----===//
//
// The emitted kernels timed on bench/bench.py's prefill and paged-decode
// shapes, once per --variant, and kernel sources edited by hand (--source)
// on the rows of their spec, each output checked against the emitted
// kernel's on the same inputs. GpuCheck.cpp parses the command line.
//
//===----------------------------------------------------------------------===//

#include "gpu/GpuCheck.h"

#include "attnc/EmitCuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <random>

using namespace attn;

namespace gpucheck {

namespace {
/// Median milliseconds of `launch` on the check's stream (harness::medianMs).
template <typename Launch>
double medianMs(Gpu &g, const std::string &what, Launch launch) {
  return harness::medianMs(g.cu, g.stream, launch, what);
}

/// ||a - b|| / ||b|| over two device outputs of `elems` bf16 values.
double relativeDifference(Gpu &g, CUdeviceptr a, CUdeviceptr b, size_t elems) {
  std::vector<uint16_t> x(elems), y(elems);
  if (g.cu->cuMemcpyDtoH(x.data(), a, elems * 2) != CUDA_SUCCESS ||
      g.cu->cuMemcpyDtoH(y.data(), b, elems * 2) != CUDA_SUCCESS)
    return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < elems; ++i) {
    const double u = harness::fromBits(x[i], DType::BF16), v = harness::fromBits(y[i], DType::BF16);
    num += (u - v) * (u - v);
    den += v * v;
  }
  return std::isfinite(num) && den > 0 ? std::sqrt(num / den) : INFINITY;
}

/// A decode launch's split count for the bench table, "p" added where its
/// splits run as the two pipelines of a block (Kernel::pairsSplits; four of
/// them as clusters of two such blocks), "c" where the splits merge in a
/// thread-block cluster rather than through the merge kernel.
std::string splitsText(const Kernel &k, const AttentionArgs &a) {
  return std::to_string(k.splits(a)) + (k.pairsSplits(a) ? "p" : k.mergesInCluster(a) ? "c" : "");
}

} // namespace

bool loadSource(Gpu &g, const std::string &path, SourceKernel &out) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string error;
  CudaLaunchShape shape;
  if (!in) {
    error = "cannot read the file";
  } else if (readCudaHeader(text.str(), out.spec, shape, error)) {
    const CudaCompileOptions options = compileOptionsFor(g.rt->arch(), shape);
    CacheLookup cubin = g.rt->cache().get(text.str(), out.spec.symbol(), options);
    if (!cubin)
      error = cubin.error;
    else if (cubin.binary->registers < 0)
      std::printf("%s: %s, no ptxas report (registers and spills unknown)\n", path.c_str(),
                  out.spec.str().c_str());
    else
      std::printf("%s: %s, %d registers, %d bytes spilled\n", path.c_str(),
                  out.spec.str().c_str(), cubin.binary->registers, cubin.binary->spillStoreBytes);
    if (cubin)
      out.kernel = Kernel::load(out.spec, cubin.binary->cubin, cubin.binary->pairCubin, shape, error);
  }
  if (!out.kernel) {
    std::printf("%s: cannot load: %s\n", path.c_str(), error.c_str());
    return false;
  }
  out.label = path.substr(path.find_last_of('/') + 1);
  return true;
}

/// "B,HQ,HKV,LEN" as a DecodeRow, or an error that names what is wrong.
std::optional<DecodeRow> parseDecodeRow(const std::string &text, std::string &error) {
  std::vector<long long> v;
  std::stringstream in(text);
  for (std::string field; std::getline(in, field, ',');) {
    char *end = nullptr;
    const long long n = std::strtoll(field.c_str(), &end, 10);
    if (field.empty() || *end != '\0' || n < 1 || n > (1 << 24)) {
      error = "--decode-row " + text + ": '" + field + "' is not a whole number in 1.." +
              std::to_string(1 << 24);
      return std::nullopt;
    }
    v.push_back(n);
  }
  if (v.size() != 4) {
    error = "--decode-row " + text + ": give four numbers, B,HQ,HKV,LEN";
    return std::nullopt;
  }
  if (v[1] % v[2] != 0) {
    error = "--decode-row " + text + ": " + std::to_string(v[1]) + " query heads are not a multiple of " +
            std::to_string(v[2]) + " KV heads";
    return std::nullopt;
  }
  // K and V in bf16, head_dim 128, made on the host first: keep them to 32 GiB.
  const double gib = 2.0 * v[0] * v[3] * v[2] * 128 * 2 / double(1 << 30);
  if (gib > 32) {
    char size[32];
    std::snprintf(size, sizeof(size), "%.0f", gib);
    error = "--decode-row " + text + ": its K and V would take " + size + " GiB; at most 32";
    return std::nullopt;
  }
  return DecodeRow{int(v[0]), int(v[1]), int(v[2]), int(v[3])};
}

/// The benchmark's shapes (bench/bench.py): prefill (bf16, contiguous, batch * seqlen = 16384,
/// heads * head_dim = 2048; TFLOP/s with FLOPs = 4 B H N^2 d, halved when
/// causal) and decode (bf16, hd 128, one query token, a page-16 block
/// table with shuffled pages; GB/s of K + V bytes read).
/// Each variant (extra spec fields, e.g. "tile_q=64,tile_kv=64"; "" for the
/// defaults) is timed on every row, marked [variant] in the output.
int bench(Gpu &g, const std::vector<std::string> &variants,
          const std::vector<SourceKernel> &sources, const std::string &rows,
          const std::vector<DecodeRow> &decodeRows) {
  std::mt19937_64 rng(1);
  bool differed = false;
  auto load = [&](const Spec &spec) -> std::shared_ptr<const Kernel> {
    KernelLookup k = g.rt->kernel(spec);
    if (!k)
      std::printf("%s: cannot load: %s\n", spec.str().c_str(), k.error.c_str());
    return k.kernel;
  };
  auto with = [](const std::string &variant) { return variant.empty() ? "" : "," + variant; };
  // A variant whose fields one family's spec refuses (split_kv for prefill,
  // stages=1 for decode, ...) is said once and left to the other family.
  std::vector<std::string> said;
  auto specOf = [&](const std::string &text, const std::string &variant) {
    SpecResult r = parseSpec(text + ",target=" + name(g.rt->target()));
    if (!r && std::find(said.begin(), said.end(), text) == said.end()) {
      said.push_back(text);
      std::printf("[%s] skipped for %s: %s\n", variant.c_str(), text.c_str(),
                  r.error->message().c_str());
    }
    return r.spec;
  };
  // A hand-edited kernel on a row's inputs, with its own output (and
  // workspace): its median time, its split count, and its output against the
  // emitted kernel's (ok: no launch error and relative difference < 1e-2).
  struct SourceRun {
    double ms = 0;
    std::string splits;
    bool ok = false;
    std::string verdict;
  };
  auto runSource = [&](const SourceKernel &src, harness::DeviceBatch &d, size_t outElems) {
    AttentionArgs b = d.args;
    b.o = d.upload(nullptr, outElems * 2);
    b.workspace_bytes = src.kernel->workspaceBytes(b);
    b.workspace = b.workspace_bytes ? d.upload(nullptr, b.workspace_bytes) : 0;
    std::string error;
    SourceRun run;
    run.ms = medianMs(g, src.label, [&] { src.kernel->launch(b, g.stream, error); });
    run.splits = splitsText(*src.kernel, b);
    const double diff = relativeDifference(g, b.o, d.args.o, outElems);
    run.ok = error.empty() && diff < 1e-2;
    run.verdict = !error.empty() ? error
                  : run.ok       ? "(output matches)"
                                 : "OUTPUT DIFFERS: " + std::to_string(diff);
    return run;
  };
  auto mark = [](const std::string &variant) {
    return variant.empty() ? std::string() : "[" + variant + "]";
  };
  if (rows != "decode") {
    std::printf("%-52s %10s %10s\n", "prefill (bf16, contiguous, B*N = 16384)", "ms", "TFLOP/s");
    for (int hd : {64, 128})
      for (bool causal : {false, true})
        for (int n : {1024, 4096, 16384}) {
          // The row's inputs, made once for all its variants (the random
          // numbers of the large rows take the host seconds).
          std::unique_ptr<harness::DeviceBatch> dev;
          for (const std::string &variant : variants) {
            const std::string text = "dtype=bf16,head_dim=" + std::to_string(hd) +
                                     (causal ? ",mask=causal" : "") + with(variant);
            const std::optional<Spec> spec = specOf(text, variant);
            if (!spec)
              continue; // e.g. split_kv or a decode depth: the decode rows take it
            const int heads = 2048 / hd, batch = 16384 / n;
            auto kernel = load(*spec);
            if (!kernel)
              return 1;
            const size_t elems = size_t(16384) * heads * hd;
            if (!dev)
              dev = harness::benchBatch(g.cu, kernel->spec(), batch, n, n, heads, rng);
            harness::DeviceBatch &d = *dev;
            AttentionArgs &a = d.args;
            std::string error;
            const double ms = medianMs(g, kernel->spec().str(), [&] { kernel->launch(a, g.stream, error); });
            if (!error.empty() || !d.error.empty()) {
              std::printf("launch failed: %s%s\n", error.c_str(), d.error.c_str());
              return 1;
            }
            const double flops = 4.0 * batch * heads * double(n) * n * hd * (causal ? 0.5 : 1.0);
            std::printf("hd %3d  N %5d  %-8s  B %2d  H %2d  %-18s %10.3f %10.1f\n", hd, n,
                        causal ? "causal" : "full", batch, heads, mark(variant).c_str(), ms,
                        flops / ms / 1e9);
            if (variant != variants.back())
              continue;
            // Hand-edited kernels of this row's spec: same inputs, own output.
            for (const SourceKernel &src : sources) {
              const Spec &sp = src.spec;
              if (sp.mode != Mode::Prefill || sp.head_dim != hd || sp.dtype != DType::BF16 ||
                  sp.isPaged() || sp.gqa != 1 ||
                  sp.mask.kind != (causal ? MaskKind::Causal : MaskKind::None))
                continue;
              const SourceRun run = runSource(src, d, elems);
              std::printf("hd %3d  N %5d  %-8s  B %2d  H %2d  %-18s %10.3f %10.1f  %s\n", hd, n,
                          causal ? "causal" : "full", batch, heads, ("[" + src.label + "]").c_str(),
                          run.ms, flops / run.ms / 1e9, run.verdict.c_str());
              if (!run.ok)
                differed = true;
            }
          }
        }
  }
  if (rows != "prefill") {
    std::printf("%-52s %10s %10s %6s\n", "decode (bf16, hd 128, paged, page 16)", "ms", "GB/s",
                "splits");
    // Decode takes a variant's tile_kv, split_kv and stages (tile_q is
    // prefill's), each distinct combination once.
    std::vector<std::string> decodeVariants;
    for (const std::string &variant : variants) {
      std::string fields;
      for (const char *field : {"tile_kv=", "split_kv=", "stages="})
        if (size_t at = variant.find(field); at != std::string::npos)
          fields += "," + variant.substr(at, variant.find(',', at) - at);
      if (std::find(decodeVariants.begin(), decodeVariants.end(), fields) == decodeVariants.end())
        decodeVariants.push_back(fields);
    }
    for (const DecodeRow &r : decodeRows) {
      std::unique_ptr<harness::DeviceBatch> dev; // the row's inputs, for all its variants
      for (const std::string &fields : decodeVariants) {
        const std::string text = "mode=decode,dtype=bf16,head_dim=128,page_size=16,gqa=" +
                                 std::to_string(r.hq / r.hkv) + fields;
        const std::optional<Spec> spec = specOf(text, fields.empty() ? "" : fields.substr(1));
        if (!spec)
          continue; // e.g. stages=1: the prefill rows take it
        auto kernel = load(*spec);
        if (!kernel)
          return 1;
        const size_t kvElems = size_t(r.batch) * r.len * r.hkv * 128;
        if (!dev)
          dev = harness::benchBatch(g.cu, kernel->spec(), r.batch, 1, r.len, r.hkv, rng);
        harness::DeviceBatch &d = *dev;
        AttentionArgs &a = d.args; // this variant's workspace (its split count's)
        a.workspace_bytes = kernel->workspaceBytes(a);
        a.workspace = a.workspace_bytes ? d.upload(nullptr, a.workspace_bytes) : 0;
        std::string error;
        const double ms = medianMs(g, kernel->spec().str(), [&] { kernel->launch(a, g.stream, error); });
        if (!error.empty() || !d.error.empty()) {
          std::printf("launch failed: %s%s\n", error.c_str(), d.error.c_str());
          return 1;
        }
        const double bytes = 2.0 * kvElems * 2;
        std::printf("B %3d  heads %2d/%d  kv %5d  %-25s %10.3f %10.1f %6s\n", r.batch, r.hq, r.hkv,
                    r.len, mark(fields.empty() ? "" : fields.substr(1)).c_str(), ms,
                    bytes / ms / 1e6, splitsText(*kernel, a).c_str());
        if (fields != decodeVariants.back())
          continue;
        // Hand-edited decode kernels of this row's GQA group: same inputs.
        for (const SourceKernel &src : sources) {
          const Spec &sp = src.spec;
          if (sp.mode != Mode::Decode || sp.head_dim != 128 || sp.dtype != DType::BF16 ||
              sp.page_size != 16 || sp.gqa != r.hq / r.hkv || sp.mask.kind != MaskKind::None)
            continue;
          const SourceRun run = runSource(src, d, size_t(r.batch) * r.hq * 128);
          std::printf("B %3d  heads %2d/%d  kv %5d  %-25s %10.3f %10.1f %6s  %s\n", r.batch, r.hq,
                      r.hkv, r.len, ("[" + src.label + "]").c_str(), run.ms, bytes / run.ms / 1e6,
                      run.splits.c_str(), run.verdict.c_str());
          if (!run.ok)
            differed = true; // the other sources are still timed (timing probes differ on purpose)
        }
      }
    }
  }
  return differed ? 1 : 0;
}

} // namespace gpucheck
