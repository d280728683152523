//===- GpuCheck.cpp - The emitted kernels on a GPU, against fp64 attention -===//
//
//   attn-gpu-check [--quick] [--jit] [--bench [--variant FIELDS]... [--source FILE]...
//                  [--rows prefill|decode|all] [--decode-row B,HQ,HKV,LEN]...] [--spec TEXT]...
//
// For each spec: the kernel through the runtime (pipeline, emitter, NVRTC
// for this GPU), then a ragged batch of fresh random inputs (seed printed;
// paged caches shuffled, NaN in every unused slot, and each paged spec once
// more with its cache in another layout (heads before tokens, a pool per
// head, K and V pages side by side); outputs poisoned with
// NaN) launched with Kernel::launch on a stream and compared with the
// textbook reference in long double. Then the runtime's launch contract:
// a launch captured in a CUDA graph and replayed gives the same bits, bad
// arguments are refused before launching, and the checking mode finds a
// block-table entry outside the cache. --jit times the JIT through the
// kernel cache (cold NVRTC, disk hit, memory hit); --bench times the benchmark's
// prefill and paged-decode shapes, once per --variant (extra spec fields such
// as tile sizes or stages; a variant one family's specs refuse is said and
// left to the other) when given, and for each --source (a prefill or decode
// kernel printed by `attnc emit` and edited by hand) on the rows of its spec, with
// its output checked against the emitted kernel's on the same inputs (every
// source is timed; one whose output differs, e.g. a timing probe that skips
// a step, is marked OUTPUT DIFFERS and makes the exit 1); --rows takes
// only the prefill or the decode rows (e.g. under a profiler); --decode-row
// times the given decode shapes (batch, query heads, KV heads, KV length)
// instead of the benchmark's five. A launch that has not finished after 120 s
// ($ATTNC_KERNEL_TIMEOUT_S; 0 or off: no limit) stops the run with a line
// naming what it waited on (tests/reference/Watchdog.h). Every kernel is
// compiled, not taken from the driver's compute cache (CUDA_CACHE_DISABLE=1
// unless the environment sets it), so ptxas reports its registers and spills
// and a cold JIT time is a compile. Exit 0: all within
// bounds; 1: a failure; 77: SKIPPED (no GPU), which ctest reports as skipped,
// never as passed.
//
//===----------------------------------------------------------------------===//

#include "gpu/GpuCheck.h"

#include "attnc/EmitCuda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <random>
#include <string>
#include <vector>

using namespace attn;
using namespace gpucheck;

namespace {

struct Outcome {
  harness::Errors errors;
  int splits = 1;
  double compileSeconds = 0;
  int registers = -1, spills = -1;
  std::string error;
  std::string notRun; ///< why the check does not apply to this GPU (then nothing ran)
};

/// The lengths of the ragged test batch: a single token, lengths that are
/// no multiple of a tile, more queries than keys, one long sequence.
std::vector<std::pair<int64_t, int64_t>> testLengths(const Spec &spec, bool quick) {
  std::vector<std::pair<int64_t, int64_t>> l =
      spec.mode == Mode::Decode
          ? std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 77}, {1, 1000}, {2, 333}, {1, 0}}
          : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {77, 77}, {100, 40}, {333, 1000}};
  if (quick)
    l.resize(2);
  return l;
}

/// Four splits run as two blocks of two pipelines in clusters of two
/// (Kernel::pairsSplits) only where clusters of four would not all be
/// resident: more (sequence, KV head) pairs than the ragged test batch has.
/// The batch for that: 8 KV heads and one sequence more than the device
/// holds clusters of four for, of `quick` ? 1..300 : 1..3000 keys. False
/// with `why` set where this GPU holds no more clusters of two pair blocks
/// than of four blocks: its four splits never run as pairs, so there is
/// nothing to check.
bool fourPairedBatch(const Kernel &k, std::mt19937_64 &rng, bool quick, int64_t &hkv,
                     std::vector<std::pair<int64_t, int64_t>> &lengths, std::string &why) {
  hkv = 8;
  const int64_t sequences = k.maxActiveClusters(4) / hkv + 1;
  if (sequences * hkv > k.maxActivePairClusters()) {
    why = "this GPU holds " + std::to_string(k.maxActivePairClusters()) +
            " clusters of two pair blocks, no more than " + std::to_string(k.maxActiveClusters(4)) +
            " clusters of four: four splits never run as pairs here";
    return false;
  }
  std::uniform_int_distribution<int64_t> keys(1, quick ? 300 : 3000);
  lengths.clear();
  for (int64_t i = 0; i < sequences; ++i)
    lengths.push_back({1, keys(rng)});
  return true;
}

/// One spec against the fp64 reference on the ragged test batch, or with
/// `fourPaired` (a decode spec of split_kv=4) on fourPairedBatch's batch,
/// checking that its four splits did run as pair blocks in clusters; a
/// paged cache laid out as `layout` says.
Outcome check(Gpu &g, const std::string &text, std::mt19937_64 &rng, bool quick, bool fourPaired = false,
              harness::KVLayout layout = harness::KVLayout::Packed) {
  Outcome res;
  SpecResult parsed = parseSpec(text + ",target=" + name(g.rt->target()));
  if (!parsed) {
    res.error = parsed.error->message();
    return res;
  }
  const Spec spec = *parsed.spec;
  KernelLookup k = g.rt->kernel(spec); // compiled: the runtime's cache starts empty
  if (!k) {
    res.error = k.error;
    return res;
  }
  res.compileSeconds = k.binary->seconds;
  res.registers = k.binary->registers;
  res.spills = k.binary->spillStoreBytes;
  int64_t hkv = spec.mode == Mode::Decode ? 2 : 1;
  std::vector<std::pair<int64_t, int64_t>> lengths = testLengths(spec, quick);
  if (fourPaired && !fourPairedBatch(*k.kernel, rng, quick, hkv, lengths, res.notRun))
    return res;
  harness::Batch<float> batch = harness::randomBatch<float>(spec, lengths, hkv, rng);
  harness::roundInputs(batch);
  const double scale = 1.0 / std::sqrt(double(spec.head_dim));
  auto dev = harness::uploadBatch(g.cu, *k.kernel, batch, scale, 0, layout);
  if (!dev->error.empty()) {
    res.error = dev->error;
    return res;
  }
  res.splits = k.kernel->splits(dev->args);
  if (fourPaired && !(res.splits == 4 && k.kernel->pairsSplits(dev->args))) {
    res.error = std::to_string(res.splits) + " splits, " +
                (k.kernel->pairsSplits(dev->args) ? "" : "not ") + "as pair blocks: the launch checked is not the one meant";
    return res;
  }
  if (std::string bad = k.kernel->checkDeviceArguments(dev->args, g.stream); !bad.empty()) {
    res.error = "the checking mode refused good arguments: " + bad;
    return res;
  }
  if (!k.kernel->launch(dev->args, g.stream, res.error))
    return res;
  CUresult rc = sync(g, spec.str());
  if (rc != CUDA_SUCCESS) {
    res.error = g.cu->describe(rc, "the kernel");
    return res;
  }
  auto outs = harness::downloadOutputs(*dev, batch, res.error);
  if (!res.error.empty())
    return res;
  for (size_t i = 0; i < outs.size(); ++i)
    harness::compare(batch, i, scale, outs[i].out, outs[i].lse, res.errors);
  return res;
}

/// Reads all of device buffer `p` (bytes).
std::vector<char> readBack(const CudaDriver *cu, CUdeviceptr p, size_t bytes) {
  std::vector<char> v(bytes);
  cu->cuMemcpyDtoH(v.data(), p, bytes);
  return v;
}

/// The runtime's launch contract on three paged split-KV decode specs (merged in
/// clusters on sm_90a, through the merge kernel, in one block), one over a
/// contiguous cache (through the merge kernel) and one prefill spec:
/// graph capture and replay, refused arguments, the checking mode. Prints one
/// line per check; returns the number that failed.
int launchContract(Gpu &g, std::mt19937_64 &rng) {
  int failures = 0;
  auto report = [&](const std::string &what, bool ok, const std::string &detail) {
    std::printf("%-72s %s%s%s\n", what.c_str(), ok ? "ok" : "FAILED", detail.empty() ? "" : ": ",
                detail.c_str());
    failures += !ok;
  };
  // The first decode spec's splits merge in clusters on sm_90a, the second's
  // (more than a cluster holds) always through the merge kernel and its
  // workspace; the third's two splits run in one block on sm_90a; the fourth
  // reads a contiguous cache.
  for (const char *text : {"mode=decode,page_size=16,gqa=4,split_kv=3,mask=causal,return_lse=true",
                           "mode=decode,page_size=16,gqa=2,split_kv=20,dtype=f16",
                           "mode=decode,page_size=16,gqa=8,split_kv=2,return_lse=true",
                           "mode=decode,page_size=0,gqa=4,split_kv=20,mask=causal",
                           "mask=causal,head_dim=64,page_size=16,gqa=2"}) {
    SpecResult parsed = parseSpec(std::string(text) + ",target=" + name(g.rt->target()));
    KernelLookup k = g.rt->kernel(*parsed.spec);
    if (!k) {
      report(std::string(text) + ": kernel", false, k.error);
      continue;
    }
    const Spec &spec = *parsed.spec;
    harness::Batch<float> batch =
        harness::randomBatch<float>(spec, testLengths(spec, false), 2, rng);
    harness::roundInputs(batch);
    auto dev = harness::uploadBatch(g.cu, *k.kernel, batch, 0.1, 0);
    const size_t outBytes = size_t(dev->args.total_q) * dev->args.num_q_heads * spec.head_dim * 2;
    std::string error;
    bool ok = k.kernel->launch(dev->args, g.stream, error) &&
              sync(g, text) == CUDA_SUCCESS;
    const std::vector<char> direct = readBack(g.cu, dev->args.o, outBytes);

    // Captured in a graph, replayed twice into a poisoned output.
    g.cu->cuMemsetD8(dev->args.o, 0xff, outBytes);
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    CUresult rc = g.cu->cuStreamBeginCapture(g.stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    bool launched = rc == CUDA_SUCCESS && k.kernel->launch(dev->args, g.stream, error);
    if (rc == CUDA_SUCCESS)
      rc = g.cu->cuStreamEndCapture(g.stream, &graph);
    if (rc == CUDA_SUCCESS && launched)
      rc = g.cu->cuGraphInstantiateWithFlags(&exec, graph, 0);
    for (int i = 0; i < 2 && rc == CUDA_SUCCESS && launched; ++i)
      rc = g.cu->cuGraphLaunch(exec, g.stream);
    if (rc == CUDA_SUCCESS)
      rc = sync(g, text);
    const bool same = readBack(g.cu, dev->args.o, outBytes) == direct;
    report(std::string(text) + ": graph capture + 2 replays", ok && launched && rc == CUDA_SUCCESS && same,
           rc != CUDA_SUCCESS ? g.cu->describe(rc, "the graph") : !same ? "outputs differ" : error);
    if (exec)
      g.cu->cuGraphExecDestroy(exec);
    if (graph)
      g.cu->cuGraphDestroy(graph);

    // Bad arguments: refused with a reason, nothing launched.
    g.cu->cuMemsetD8(dev->args.o, 0xff, outBytes);
    std::vector<std::pair<std::string, AttentionArgs>> bad;
    AttentionArgs a = dev->args;
    a.k = 0;
    bad.push_back({"k is a null pointer", a});
    a = dev->args;
    a.q += 2;
    bad.push_back({"is not 16-byte aligned", a});
    a = dev->args;
    a.num_q_heads += 1;
    bad.push_back({"num_q_heads", a});
    if (spec.isPaged()) {
      a = dev->args;
      a.block_table_stride = 1;
      bad.push_back({"pages of 16 tokens, but block_table_stride", a});
    }
    if (spec.mode == Mode::Decode &&
        (k.kernel->mergesInCluster(dev->args) || k.kernel->pairsSplits(dev->args))) {
      // The splits merge in a block or a thread-block cluster: the launches
      // above ran with no workspace at all.
      report(std::string(text) + (k.kernel->pairsSplits(dev->args)
                                      ? ": splits as a block's two pipelines, no workspace"
                                      : ": splits merged in a cluster, no workspace"),
             dev->args.workspace == 0 && ok, error);
    } else if (spec.mode == Mode::Decode && k.kernel->workspaceBytes(dev->args) > 0) {
      a = dev->args;
      a.workspace_bytes = 16;
      bad.push_back({"KV splits need", a});
    }
    for (auto &[want, args] : bad) {
      std::string why;
      const bool refused = !k.kernel->launch(args, g.stream, why);
      sync(g, text);
      const bool untouched = readBack(g.cu, dev->args.o, outBytes) == std::vector<char>(outBytes, char(0xff));
      report(std::string(text) + ": refuses \"" + want + "\"",
             refused && why.find(want) != std::string::npos && untouched, why);
    }
    if (spec.isPaged()) {
      // The checking mode: a table entry past the cache is reported; the
      // kernel, run anyway, reads no byte outside the cache (memcheck).
      std::vector<int32_t> table(size_t(dev->args.batch * dev->args.block_table_stride));
      g.cu->cuMemcpyDtoH(table.data(), dev->args.block_table, table.size() * 4);
      std::vector<int32_t> broken = table;
      broken[0] = static_cast<int32_t>(dev->args.num_pages) + 5;
      g.cu->cuMemcpyHtoD(dev->args.block_table, broken.data(), broken.size() * 4);
      const std::string found = k.kernel->checkDeviceArguments(dev->args, g.stream);
      bool ran = k.kernel->launch(dev->args, g.stream, error) &&
                 sync(g, text) == CUDA_SUCCESS;
      report(std::string(text) + ": checking mode finds a page outside the cache",
             found.find("block_table[0][0]") != std::string::npos && ran, found);
      g.cu->cuMemcpyHtoD(dev->args.block_table, table.data(), table.size() * 4);

      // A length past max_kv_len (the last sequence's, the table's last row):
      // reported by the checking mode; the kernel, run anyway, reads it as
      // the tokens of the sequence's table row, never the table past that
      // row (memcheck), so it gives what that length gives.
      const int last = dev->args.batch - 1;
      std::vector<int32_t> lens(size_t(dev->args.batch));
      g.cu->cuMemcpyDtoH(lens.data(), dev->args.seq_lens_k, lens.size() * 4);
      auto runWithLast = [&](int32_t length, std::string &checked) {
        std::vector<int32_t> changed = lens;
        changed[size_t(last)] = length;
        g.cu->cuMemcpyHtoD(dev->args.seq_lens_k, changed.data(), changed.size() * 4);
        checked = k.kernel->checkDeviceArguments(dev->args, g.stream);
        g.cu->cuMemsetD8(dev->args.o, 0xff, outBytes);
        const bool done = k.kernel->launch(dev->args, g.stream, error) && sync(g, text) == CUDA_SUCCESS;
        return done ? readBack(g.cu, dev->args.o, outBytes) : std::vector<char>();
      };
      const int64_t rowTokens = dev->args.block_table_stride * spec.page_size;
      std::string atRow, past;
      const std::vector<char> expected =
          runWithLast(static_cast<int32_t>(std::min<int64_t>(rowTokens, INT32_MAX)), atRow);
      const std::vector<char> got = runWithLast(INT32_MAX, past);
      g.cu->cuMemcpyHtoD(dev->args.seq_lens_k, lens.data(), lens.size() * 4);
      const std::string named = "seq_lens_k[" + std::to_string(last) + "] = " + std::to_string(INT32_MAX);
      std::string why;
      if (past.find(named) == std::string::npos)
        why = "the checking mode said '" + past + "'";
      else if (expected.empty() || got.empty())
        why = error;
      else if (got != expected)
        why = "the output differs from the row's length's";
      report(std::string(text) + ": a length past the table row reads the row", why.empty(), why);
    }
  }
  return failures;
}

/// JIT latency through the kernel cache: a cold NVRTC compile, a disk hit in
/// a new cache (as a new process would see it) and a memory hit.
int jitTimings(Gpu &g, const std::vector<std::string> &specs) {
  char tmpl[] = "/tmp/attnc-jit.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  if (const std::string notice = CudaDriver::computeCacheNotice(); !notice.empty())
    std::printf("%s\n", notice.c_str());
  std::printf("%-60s %10s %10s %10s\n", "spec (JIT through the kernel cache)", "cold s", "disk ms",
              "memory us");
  int failures = 0;
  for (const std::string &text : specs) {
    SpecResult parsed = parseSpec(text + ",target=" + name(g.rt->target()));
    std::string source, error;
    CudaLaunchShape shape;
    if (!parsed || !emitCudaForSpec(*parsed.spec, source, shape, error)) {
      std::printf("%-60s ERROR %s\n", text.c_str(), parsed ? error.c_str() : parsed.error->message().c_str());
      ++failures;
      continue;
    }
    const CudaCompileOptions options = compileOptionsFor(g.rt->arch(), shape);
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

} // namespace

int main(int argc, char **argv) {
  // Every kernel here is compiled: ptxas then reports its registers and spills, and a
  // cold JIT time is a compile. The driver's compute cache would otherwise hand back a
  // cubin this machine made before (CUDA_CACHE_DISABLE=0 in the environment keeps it).
  setenv("CUDA_CACHE_DISABLE", "1", /*overwrite=*/0);
  bool quick = false, jit = false, benchOnly = false;
  std::vector<std::string> specs, variants, sourcePaths;
  std::string rows = "all";
  // The benchmark's five GQA decode rows, unless --decode-row gives others.
  std::vector<DecodeRow> decodeRows;
  const char *usage = "usage: attn-gpu-check [--quick] [--jit] [--bench [--variant FIELDS]... "
                      "[--source FILE]... [--rows prefill|decode|all] [--decode-row B,HQ,HKV,LEN]...] "
                      "[--spec TEXT]...\n";
  bool benchFlags = false; // a flag that only --bench takes
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    benchFlags |= a == "--variant" || a == "--source" || a == "--rows" || a == "--decode-row";
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (a == "--quick")
      quick = true;
    else if (a == "--jit")
      jit = true;
    else if (a == "--bench")
      benchOnly = true;
    else if (a == "--spec" && i + 1 < argc)
      specs.push_back(argv[++i]);
    else if (a == "--variant" && i + 1 < argc)
      variants.push_back(argv[++i]);
    else if (a == "--source" && i + 1 < argc)
      sourcePaths.push_back(argv[++i]);
    else if (a == "--decode-row" && i + 1 < argc) {
      std::string error;
      const std::optional<DecodeRow> row = parseDecodeRow(argv[++i], error);
      if (!row) {
        std::fprintf(stderr, "attn-gpu-check: %s\n", error.c_str());
        return 2;
      }
      decodeRows.push_back(*row);
    }
    else if (a == "--rows" && i + 1 < argc &&
             (std::strcmp(argv[i + 1], "prefill") == 0 || std::strcmp(argv[i + 1], "decode") == 0 ||
              std::strcmp(argv[i + 1], "all") == 0))
      rows = argv[++i];
    else {
      std::fputs(usage, stderr);
      return 2;
    }
  }
  if (benchFlags && !benchOnly) {
    std::fprintf(stderr, "attn-gpu-check: --variant, --source, --rows and --decode-row shape "
                         "--bench's timings: give --bench with them\n");
    return 2;
  }
  Gpu g;
  std::string error;
  g.cu = CudaDriver::get(error);
  if (g.cu) {
    char tmpl[] = "/tmp/attnc-gpu-check.XXXXXX";
    if (const char *dir = mkdtemp(tmpl)) {
      g.cacheDir = dir;
      // A kernel that never finishes stops the process; the cache goes with it.
      harness::StuckGuard::atStop([path = g.cacheDir] { std::system(("rm -rf '" + path + "'").c_str()); });
      g.rt = Runtime::create(error, dir); // a fresh cache: every kernel compiles
    } else {
      error = "cannot create a temporary kernel cache in /tmp";
    }
  }
  if (!g.rt) {
    std::printf("SKIPPED: %s\n", error.c_str());
    return 77;
  }
  g.cu->cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING);

  const bool defaults = specs.empty();
  if (defaults) {
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
    // Decode: group sizes, page sizes, masks, one / several / automatic splits.
    for (const char *dt : {"bf16", "f16"})
      for (const char *split : {"1", "3", "auto"})
        for (int gqa : {1, 4, 8, 16}) {
          const int page = gqa == 1 ? 1 : gqa == 4 ? 16 : gqa == 8 ? 19 : 64;
          const char *mask = gqa == 4 ? "causal" : gqa == 8 ? "sliding_window(100)" : "none";
          const int hd = gqa == 16 ? 256 : gqa == 1 ? 64 : 128;
          specs.push_back(std::string("mode=decode,dtype=") + dt + ",head_dim=" + std::to_string(hd) +
                          ",gqa=" + std::to_string(gqa) + ",page_size=" + std::to_string(page) +
                          ",mask=" + mask + ",split_kv=" + split + ",return_lse=true");
        }
    // Decode over a contiguous cache (page_size 0: the sequences by cu_seqlens_k,
    // each tile copied by KVTile): masks, splits, several query tokens.
    specs.push_back("mode=decode,dtype=bf16,head_dim=128,gqa=4,page_size=0,split_kv=auto,return_lse=true");
    specs.push_back("mode=decode,dtype=f16,head_dim=64,gqa=8,page_size=0,mask=sliding_window(100),"
                    "split_kv=3,return_lse=true");
    specs.push_back("mode=decode,dtype=bf16,head_dim=256,gqa=1,page_size=0,mask=causal,split_kv=1");
    specs.push_back("mode=decode,dtype=f16,head_dim=128,gqa=4,tile_q=4,page_size=0,mask=causal,split_kv=2,"
                    "return_lse=true");
    // Two splits as the two pipelines of one block (sm_90a, pages of 16: "<name>_pair").
    specs.push_back("mode=decode,dtype=bf16,head_dim=128,gqa=4,page_size=16,mask=causal,split_kv=2,"
                    "return_lse=true");
    specs.push_back("mode=decode,dtype=f16,head_dim=64,gqa=8,page_size=16,mask=sliding_window(100),"
                    "split_kv=2,return_lse=true");
    // sm_90a, head_dim 128: the head_dim 128 specs above run the warp-specialised
    // block (mma=auto's choice, 128 x 128 tiles); here its 128 x 64 tiles and
    // a ring of two stages, the same block asked for by name, and the wgmma
    // block that auto no longer picks for head_dim 128.
    if (g.rt->target() == Target::SM90a) {
      specs.push_back("dtype=f16,mask=sliding_window(100),head_dim=128,tile_kv=64,gqa=7,page_size=19,"
                      "return_lse=true");
      specs.push_back("dtype=bf16,mask=causal,head_dim=128,stages=2,gqa=2");
      specs.push_back("mma=wgmma_ws,dtype=bf16,mask=none,head_dim=128,return_lse=true");
      specs.push_back("mma=wgmma,dtype=bf16,mask=causal,head_dim=128,gqa=4,page_size=16,return_lse=true");
      specs.push_back("mma=wgmma,dtype=f16,mask=none,head_dim=128,tile_q=128,tile_kv=128");
      // head_dim 64 in the warp-specialised block of three computing warpgroups
      // (192 x 128, what the runtime takes for long prefills; 192 x 64 by name),
      // contiguous and paged, with masks and GQA.
      specs.push_back("dtype=bf16,mask=none,head_dim=64,tile_q=192,tile_kv=128,return_lse=true");
      specs.push_back("mma=wgmma_ws,dtype=f16,mask=causal,head_dim=64,gqa=4,page_size=16,return_lse=true");
      specs.push_back("mma=wgmma_ws,dtype=bf16,mask=sliding_window(100),head_dim=64,tile_kv=64,gqa=2,"
                      "page_size=19");
      // head_dim 64 in the wgmma block: the default 64 x 128 tiles without a
      // mask (the contiguous specs above), paged with GQA, and the 64 x 64
      // tiles the masked specs take, here without a mask.
      specs.push_back("dtype=bf16,mask=none,head_dim=64,gqa=4,page_size=16");
      specs.push_back("dtype=f16,mask=none,head_dim=64,tile_kv=64,return_lse=true");
    }
  }
  if (benchOnly) {
    std::vector<SourceKernel> sources(sourcePaths.size());
    for (size_t i = 0; i < sources.size(); ++i)
      if (!loadSource(g, sourcePaths[i], sources[i]))
        return 1;
    if (decodeRows.empty())
      decodeRows = {{64, 32, 8, 1024}, {64, 32, 8, 4096}, {16, 32, 8, 16384}, {128, 32, 8, 4096},
                    {8, 64, 8, 32768}};
    return bench(g, variants.empty() ? std::vector<std::string>{""} : variants, sources, rows,
                 decodeRows);
  }
  if (jit) {
    if (defaults)
      specs = {"mode=prefill,head_dim=128,gqa=4,page_size=16,mask=causal",
               "mode=decode,head_dim=128,gqa=4,page_size=16",
               "mode=prefill,head_dim=64", "mode=prefill,head_dim=256,mask=causal"};
    return jitTimings(g, specs) ? 1 : 0;
  }
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::printf("GPU %s (%s), NVRTC %d, seed %llu\n", g.rt->deviceName().c_str(),
              g.rt->arch().c_str(), nvrtcVersion(), (unsigned long long)seed);
  std::printf("%-92s %9s %9s %4s %7s %3s %5s %6s %7s %s\n", "spec", "rel err", "max abs", "NaN",
              "masked", "spl", "regs", "spill", "nvrtc s", "verdict");
  int failures = 0, unreported = 0; // unreported: rows without ptxas' report of spills
  // One row of the table; false where the check does not apply to this GPU.
  auto numerics = [&](const std::string &text, const std::string &label, bool fourPaired,
                      harness::KVLayout layout = harness::KVLayout::Packed) {
    Outcome r = check(g, text, rng, quick, fourPaired, layout);
    if (!r.notRun.empty()) {
      std::printf("%-92s not run: %s\n", label.c_str(), r.notRun.c_str());
      return false;
    }
    const harness::Errors &e = r.errors;
    // Spills count when ptxas reported them (-1: no report, e.g. under a sanitizer);
    // the total line says how many rows had none.
    bool ok = r.error.empty() && e.nan == 0 && e.fullyMaskedWrong == 0 && e.relative() < 1e-2 &&
              e.checked > 0 && r.spills <= 0;
    failures += !ok;
    unreported += r.error.empty() && r.spills < 0;
    if (!r.error.empty()) {
      std::printf("%-92s ERROR %s\n", label.c_str(), r.error.c_str());
      return true;
    }
    auto known = [](int n) { return n < 0 ? std::string("?") : std::to_string(n); };
    std::printf("%-92s %9.2e %9.2e %4lld %3lld/%-3lld %3d %5s %6s %7.3f %s\n", label.c_str(),
                e.relative(), e.maxAbs, (long long)e.nan,
                (long long)(e.fullyMaskedRows - e.fullyMaskedWrong), (long long)e.fullyMaskedRows,
                r.splits, known(r.registers).c_str(), known(r.spills).c_str(), r.compileSeconds,
                ok ? "ok" : "FAILED");
    return true;
  };
  size_t checked = 0;
  // Each paged spec runs once more with its cache in one of the other layouts
  // a serving engine gives, taken in turn (the kernels read them through the
  // launch arguments' strides; tests/gpu/RESULTS.md has a run of every paged
  // spec in all three).
  const harness::KVLayout others[] = {harness::KVLayout::HeadsFirst, harness::KVLayout::HeadPools,
                                      harness::KVLayout::SideBySide};
  size_t paged = 0;
  for (const std::string &text : specs) {
    numerics(text, text, false);
    ++checked;
    if (text.find("page_size=") != std::string::npos && text.find("page_size=0") == std::string::npos) {
      const harness::KVLayout l = others[paged++ % 3];
      checked += numerics(text, "  the same, " + std::string(harness::name(l)), false, l);
    }
  }
  if (g.rt->target() == Target::SM90a) {
    // Four splits as two blocks of two pipelines in clusters of two: a batch
    // of more (sequence, KV head) pairs than clusters of four fit (fourPairedBatch).
    const std::string text = "mode=decode,dtype=bf16,head_dim=128,gqa=8,page_size=16,split_kv=4,return_lse=true";
    checked += numerics(text, text + " (pairs)", true);
  }
  std::printf("%zu checks (the specs, and each paged one in another cache layout), %d failed "
              "(bounds: relative error < 1e-2 vs fp64, no NaN, fully masked rows 0 "
              "with lse -inf, 0 spill bytes)\n",
              checked, failures);
  if (unreported > 0)
    std::printf("(%d of them without ptxas' report, their spills not checked: a cubin from the "
                "driver's compute cache, or a run under a sanitizer)\n", unreported);
  std::printf("\nThe launch contract:\n");
  failures += launchContract(g, rng);
  return failures ? 1 : 0;
}
