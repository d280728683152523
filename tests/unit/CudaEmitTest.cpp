//===- CudaEmitTest.cpp - Every emitted kernel compiles, without spills ----===//
//
// The whole pipeline and the CUDA emitter for a matrix of specs, then NVRTC
// for sm_80 and sm_90a: no GPU needed. ptxas must report 0 spill bytes for
// the default tile sizes.
//
//===----------------------------------------------------------------------===//

#include "attnc/EmitCuda.h"
#include "attnc/Nvrtc.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>

using namespace attn;

namespace {
/// Tries to emit the kernel of `text` after the whole attn pipeline.
bool tryEmit(const std::string &text, std::string &source, CudaLaunchShape &shape,
             std::string &error) {
  SpecResult spec = parseSpec(text);
  INFO(text);
  REQUIRE(spec);
  return emitCudaForSpec(*spec.spec, source, shape, error);
}

/// Emits the kernel of `text`; fails the test with the reason otherwise.
std::string emit(const std::string &text, CudaLaunchShape &shape) {
  std::string source, error;
  bool ok = tryEmit(text, source, shape, error);
  INFO(text << ": " << error);
  REQUIRE(ok);
  return source;
}

/// Emits and compiles the kernel of `text` for `arch`, checking ptxas'
/// report: no spill stores or loads. Returns the compile's seconds.
double compileWithoutSpills(const std::string &text, const char *arch) {
  CudaLaunchShape shape;
  std::string source = emit(text, shape);
  CudaBinary bin = compileCuda(source, "kernel.cu", compileOptionsFor(arch, shape));
  INFO(text << "\n" << bin.error << "\n" << bin.log);
  REQUIRE(bin);
  // ptxas' report covers the pair kernel's program too.
  CHECK(bin.pairCubin.empty() == (shape.pair_shared_bytes == 0));
  CHECK(bin.spillStoreBytes == 0);
  CHECK(bin.spillLoadBytes == 0);
  CHECK(bin.registers <= 255);
  // ptxas runs wgmmas one after another (C7514), or waits for them where the
  // source does not (C7517), when other instructions touch their registers
  // while they run: a kernel that loses its overlap without failing.
  CHECK(bin.log.find("C7514") == std::string::npos);
  CHECK(bin.log.find("C7517") == std::string::npos);
  return bin.seconds;
}
} // namespace

TEST_CASE("the emitted kernel names each pass's step", "[cuda]") {
  CudaLaunchShape shape;
  std::string src = emit("mask=causal,page_size=16,gqa=4,return_lse=true,mma=sync", shape);
  for (const char *step : {"attn-online-softmax: m = -inf, l = 0, acc = 0",
                           "[full_lo, full_hi): fully visible tiles: no mask arithmetic",
                           "[full_hi, hi): partial tiles", "apply_mask<Cfg>",
                           "attn-page-kv: the K and V rows of tile j, found through the block table",
                           "attn-share-kv-heads", "kGroup = 4", "state.update(s, p.scale_log2)",
                           "accumulate_pv<Cfg>", "lse = m + log l"})
    CHECK(src.find(step) != std::string::npos);
  // Fully visible steps skip the mask arithmetic.
  CHECK(src.find("if (step < steps.full_lo || step >= steps.full_hi)\n        apply_mask<Cfg>") !=
        std::string::npos);
  // head_dim 128, causal: 64-key tiles in two steps of 32 keys, 32 rows per
  // warp, 4 warps for 128 rows, two K/V stages; the last query tile first.
  CHECK(src.find("kTileKV = 64") != std::string::npos);
  CHECK(src.find("kWarpRows = 32") != std::string::npos);
  CHECK(src.find("kStepKV = 32") != std::string::npos);
  CHECK(src.find("kStages = 2") != std::string::npos);
  CHECK(src.find("load_kv(j + 1, (stage + 1) % Cfg::kStages)") != std::string::npos);
  CHECK(src.find("(gridDim.x - 1 - blockIdx.x) * Cfg::kTileQ") != std::string::npos);
  CHECK(shape.threads == 128);
  CHECK(shape.shared_bytes == (128 + 2 * 2 * 64) * 128 * 2);
  // Without a mask: 32-key tiles, one step each, query tiles in grid order.
  src = emit("head_dim=128,mma=sync", shape);
  CHECK(src.find("kTileKV = 32") != std::string::npos);
  CHECK(src.find("const i64 q_start = (i64)blockIdx.x * Cfg::kTileQ") != std::string::npos);
  CHECK(shape.shared_bytes == (128 + 2 * 2 * 32) * 128 * 2);
  // head_dim 64 with 128-key tiles: two steps of 64 keys, two stages.
  src = emit("head_dim=64,mask=causal,mma=sync", shape);
  CHECK(src.find("kTileKV = 128") != std::string::npos);
  CHECK(src.find("kStepKV = 64") != std::string::npos);
  CHECK(src.find("kStages = 2") != std::string::npos);
  CHECK(shape.shared_bytes == (128 + 2 * 2 * 128) * 64 * 2);
  // head_dim 256 (64-key tiles): two stages would not leave room for two
  // blocks per SM, so one; the V wait comes before the tile's first P V.
  src = emit("head_dim=256,mask=causal", shape);
  CHECK(src.find("kStages = 1") != std::string::npos);
  CHECK(src.find("if (h == first) {\n        cp_async_wait<0>(); // V has arrived") !=
        std::string::npos);
  CHECK(shape.shared_bytes == (64 + 2 * 64) * 256 * 2);
  // head_dim 256: 16 rows per warp, the whole tile in one step.
  src = emit("head_dim=256", shape);
  CHECK(src.find("kWarpRows = 16") != std::string::npos);
  CHECK(src.find("kStepKV = 64") != std::string::npos);
}

TEST_CASE("the launch's shared memory is what the kernel lays out, and what attnc spec says",
          "[cuda]") {
  // The kernel lays out kTileQ query rows (16 in decode), then kStages stages
  // of a K and a V tile, in 2-byte elements; the launch shape must give that,
  // and sharedMemoryBytes (what `attnc spec` prints and validation checks)
  // must agree.
  auto field = [](const std::string &src, const char *name) {
    std::smatch m;
    REQUIRE(std::regex_search(src, m, std::regex(std::string(name) + " = (\\d+);")));
    return std::stoll(m[1]);
  };
  for (const char *text :
       {"head_dim=64", "head_dim=64,mask=causal,page_size=16,gqa=2", "head_dim=128",
        "head_dim=128,mask=causal", "head_dim=256,mask=causal", "head_dim=32",
        "head_dim=96,gqa=2,page_size=16", "head_dim=128,tile_q=256,tile_kv=256",
        "mode=decode,page_size=16,gqa=4", "mode=decode,page_size=16,gqa=16,head_dim=256",
        "mode=decode,page_size=16,gqa=8,tile_kv=128", "mode=decode,page_size=1,head_dim=64",
        "head_dim=128,stages=1", "head_dim=64,mask=causal,stages=1",
        "mode=decode,page_size=16,gqa=4,stages=2", "mode=decode,page_size=16,gqa=4,stages=4",
        "mode=decode,gqa=4", "mode=decode,gqa=8,tile_q=4,head_dim=256",
        "head_dim=128,tile_q=128,tile_kv=128,mma=wgmma",
        "head_dim=64,tile_q=64,tile_kv=64,mma=wgmma,stages=1", "head_dim=128,mma=wgmma_ws",
        "head_dim=128,tile_kv=64,mma=wgmma_ws,mask=causal"}) {
    INFO(text);
    CudaLaunchShape shape;
    const std::string src = emit(text, shape);
    const int64_t rows = field(src, "kTileQ"), kv = field(src, "kTileKV"),
                  stages = field(src, "kStages"), hd = field(src, "kHeadDim");
    const Spec spec = *parseSpec(text).spec;
    // A warp-specialised block's ring adds two 8-byte mbarriers per stage.
    CHECK(shape.shared_bytes == (rows + 2 * stages * kv) * hd * 2 + (warpSpecialised(spec) ? 16 * stages : 0));
    CHECK(shape.shared_bytes == sharedMemoryBytes(spec));
    CHECK(stages == kvStages(spec));
  }
}

TEST_CASE("emitting CUDA for a CPU spec is refused with a reason", "[cuda]") {
  std::string source, error;
  CudaLaunchShape shape;
  CHECK_FALSE(tryEmit("target=cpu", source, shape, error));
  CHECK(error.find("CUDA is emitted for GPU targets") != std::string::npos);
}

TEST_CASE("the decode kernel packs the GQA group, splits the KV range and merges", "[cuda]") {
  CudaLaunchShape shape;
  std::string src = emit("mode=decode,page_size=16,gqa=8,mask=causal,split_kv=auto,return_lse=true", shape);
  for (const char *step : {"attn-share-kv-heads: one block per KV head",
                           "kGroup = 8", "attn-split-kv: this block's share of them",
                           "split_range(tiles.lo, tiles.hi, split, p.num_splits)",
                           "decode_mask<Block>", "decode_store_rows<Block>", "_merge(const Params p)",
                           "merge_splits<Cfg>", "attn-page-kv: the K and V rows of tile j, found through the block table"})
    CHECK(src.find(step) != std::string::npos);
  CHECK(shape.decode);
  CHECK(shape.threads == 64 / 16 * 32);
  // Three K/V stages (two tiles loading ahead) while two blocks fit in an SM.
  CHECK(shape.shared_bytes == (16 + 2 * 3 * 64) * 128 * 2);
  CHECK(src.find("kStages = 3") != std::string::npos);
  CHECK(src.find("cp_async_wait<Cfg::kStages - 1>()") != std::string::npos);
  CHECK(shape.merge_threads > 0);
  // The merge is the main kernel's programmatic dependent on sm_90a: it waits
  // for the main kernel before it reads a partial result.
  const size_t wait = src.find("wait_for_main_kernel();"), read = src.find("const float *part =");
  CHECK(src.find("allow_merge_launch();") != std::string::npos);
  REQUIRE(wait != std::string::npos);
  REQUIRE(read != std::string::npos);
  CHECK(wait < read);
  // A cluster of the splits (sm_90a, the runtime's choice) merges them in
  // shared memory and writes no partial result; otherwise the workspace and
  // the merge kernel.
  // Splits may also run as the two pipelines of a block (decode_block<2>,
  // "<name>_pair"), which merges them itself, and whose blocks, where more than
  // one, merge as a cluster: the scratch then spans both pipelines' stages.
  CHECK(src.find("const bool clustered = cluster_place().blocks > 1;") != std::string::npos);
  CHECK(src.find("static constexpr int kStages = kPipes * Cfg::kStages;") != std::string::npos);
  // Both pipelines pass their barrier as often before the block barrier.
  const size_t evenly = src.find("pipe_sync_evenly<kPipes, Cfg::kThreads>(pipe, mine.hi - mine.lo,");
  const size_t blockBarrier = src.find("cp_async_wait<0>();\n    __syncthreads();\n    allow_merge_launch();");
  REQUIRE(evenly != std::string::npos);
  REQUIRE(blockBarrier != std::string::npos);
  CHECK(evenly < blockBarrier);
  CHECK(src.find("const bool partial = kPipes == 1 && p.num_splits > 1 && !clustered;") !=
        std::string::npos);
  CHECK(src.find("decode_store_rows<Block>(state, scratch, row0, rows, sink, clustered);") !=
        std::string::npos);
  CHECK(src.find("_pair(const Params p) {\n  decode_block<2>(p);\n}") != std::string::npos);
  // ... compiled as a program of its own: the source holds it, and the other
  // two kernels, on either side of one #ifdef.
  const size_t ifdef = src.find("#ifdef ATTN_PAIR_PROGRAM\n"), pairKernel = src.find("_pair(const Params p)"),
               orElse = src.find("#else\n"), mainKernel = src.find("(const Params p) {\n  decode_block<1>(p);"),
               mergeKernel = src.find("_merge(const Params p)"), endif = src.find("#endif // ATTN_PAIR_PROGRAM\n");
  CHECK(ifdef < pairKernel);
  CHECK(pairKernel < orElse);
  CHECK(orElse < mainKernel);
  CHECK(mainKernel < mergeKernel);
  CHECK(mergeKernel < endif);
  REQUIRE(endif != std::string::npos);
  CHECK(src.find("const int split = blockIdx.x * kPipes + pipe,") != std::string::npos);
  // Mask arithmetic only on partial tiles (without a mask: the tail past kv_len).
  src = emit("mode=decode,page_size=16,gqa=4", shape);
  CHECK(src.find("if (j < tiles.full_lo || j >= tiles.full_hi)\n        decode_mask<Block>") !=
        std::string::npos);
}

TEST_CASE("a decode kernel's KV loop: one barrier per tile, Q in registers, page runs",
          "[cuda]") {
  CudaLaunchShape shape;
  const std::string src = emit("mode=decode,page_size=16,gqa=4", shape);
  const size_t loop = src.find("for (int j = mine.lo; j < mine.hi; ++j)");
  const size_t end = src.find("cp_async_wait<0>();", loop);
  REQUIRE(loop != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string body = src.substr(loop, end - loop);
  // (Per pipeline: with one pipeline pipe_sync is the block barrier.)
  size_t barriers = 0;
  for (size_t at = body.find("pipe_sync<kPipes, Cfg::kThreads>(pipe);"); at != std::string::npos;
       at = body.find("pipe_sync<kPipes, Cfg::kThreads>(pipe);", at + 1))
    ++barriers;
  CHECK(barriers == 1);
  CHECK(body.find("__syncthreads()") == std::string::npos);
  // The wait before it leaves the tiles after j in flight; the load after it
  // reuses tile j - 1's stage, which every warp has left.
  CHECK(body.find("cp_async_wait<Cfg::kStages - 2>(); // tile j has arrived\n      // One barrier") !=
        std::string::npos);
  CHECK(body.find("pipe_sync<kPipes, Cfg::kThreads>(pipe);\n      if (ahead < mine.hi)\n"
                  "        load_kv(ahead") != std::string::npos);
  CHECK(body.find("query.qk(s, smem_k(stage), warp)") != std::string::npos);
  CHECK(src.find("DecodeQuery<Block> query;") < loop);
  // The stages rotate without a division, and the table entries of a tile
  // are read kTableAhead (> 1) tiles before its copy, through a ring.
  CHECK(body.find("%") == std::string::npos);
  CHECK(body.find("load_kv(ahead, free_stage, next[0]);") != std::string::npos);
  CHECK(body.find("next[Cfg::kTableAhead - 1] = Copy::Lookups(kv, (ahead + Cfg::kTableAhead) * "
                  "Cfg::kTileKV);") != std::string::npos);
  const size_t ahead = src.find("static constexpr int kTableAhead = ");
  REQUIRE(ahead != std::string::npos);
  CHECK(std::atoi(src.c_str() + ahead + std::strlen("static constexpr int kTableAhead = ")) > 1);
  // Pages of 16 tokens: whole runs per thread (128 threads, 16 chunks a row:
  // a thread's rows are 8 apart). Pages of 19 do not divide them: KVTile.
  CHECK(src.find("using Copy = PageRuns<Cfg>;") != std::string::npos);
  // The entries of the first tiles are read at the start, next to kv_len, and
  // fill both rings of a block that starts at key 0; other blocks read them.
  const size_t start = src.find("const PageRuns<Cfg>::TableStart<Cfg::kStages - 1 + Cfg::kTableAhead> start(");
  REQUIRE(start != std::string::npos);
  CHECK(start < src.find("for (int row0 = 0;"));
  CHECK(src.find("    if (mine.lo == 0) {\n      start.fill(first, next);") < loop);
  CHECK(src.find("first[i] = Copy::Lookups(kv, (mine.lo + i) * Cfg::kTileKV);") < loop);
  for (const char *spec : {"mode=decode,page_size=19,gqa=4", "mode=decode,page_size=16,tile_kv=32",
                           "mode=decode,page_size=16,head_dim=256"}) {
    const std::string other = emit(spec, shape);
    CHECK(other.find("using Copy = KVTile<Cfg, Cfg::kTileKV>;") != std::string::npos);
    CHECK(other.find("PageRuns") == std::string::npos);
    CHECK(other.find("start.fill") == std::string::npos);
  }
  // Pages longer than a tile (a tile is one run), head_dim 64 (rows 16 apart).
  for (const char *spec : {"mode=decode,page_size=128,gqa=2", "mode=decode,head_dim=64,page_size=32,tile_kv=128"})
    CHECK(emit(spec, shape).find("using Copy = PageRuns<Cfg>;") != std::string::npos);
}

TEST_CASE("the emitter picks PageRuns exactly where its kApplies holds", "[cuda][nvrtc]") {
  // One source: each spec's Cfg in a namespace of its own, with a
  // static_assert that PageRuns<Cfg>::kApplies is what the emitter decided.
  std::string probe = "#include \"attn/decode.cuh\"\nusing namespace attn::kernel;\n";
  int specs = 0, runs = 0;
  for (int hd : {32, 64, 128, 256})
    for (int page : {1, 8, 16, 19, 32, 64, 128})
      for (int tile : {32, 64, 128}) {
        const std::string text = "mode=decode,head_dim=" + std::to_string(hd) +
                                 ",page_size=" + std::to_string(page) +
                                 ",tile_kv=" + std::to_string(tile);
        SpecResult spec = parseSpec(text);
        if (!spec)
          continue; // e.g. head_dim 256 with 128-key tiles: more shared memory than an SM has
        std::string source, error;
        CudaLaunchShape shape;
        INFO(text << ": " << error);
        REQUIRE(emitCudaForSpec(*spec.spec, source, shape, error));
        const size_t begin = source.find("struct Cfg {"), end = source.find("};\n", begin);
        REQUIRE(begin != std::string::npos);
        REQUIRE(end != std::string::npos);
        const bool picked = source.find("using Copy = PageRuns<Cfg>;") != std::string::npos;
        probe += "namespace spec" + std::to_string(specs++) + " {\n" +
                 source.substr(begin, end + 3 - begin) + "static_assert(PageRuns<Cfg>::kApplies == " +
                 (picked ? "true" : "false") + ", \"" + text + "\");\n}\n";
        runs += picked;
      }
  CudaCompileOptions options;
  options.arch = "sm_90a";
  CudaBinary bin = compileCuda(probe, "page_runs_probe.cu", options);
  INFO(bin.error << "\n" << bin.log);
  CHECK(bin);
  // Both kinds of tiles occur in the matrix.
  CHECK(specs > 40);
  CHECK(runs > 10);
  CHECK(runs < specs);
}

TEST_CASE("NVRTC compiles decode kernels that copy page runs, with 0 spill bytes", "[cuda][nvrtc]") {
  // On sm_90a the last spec's stages are too small for a cluster's merge to
  // gather in (ClusterGather::kFits): it takes the reading merge instead.
  for (const char *spec : {"page_size=128,gqa=2,mask=causal", "head_dim=64,page_size=32,tile_kv=128",
                           "head_dim=32,page_size=32,dtype=f16,stages=4",
                           "page_size=32,tile_kv=128,mask=sliding_window(40),return_lse=true",
                           "head_dim=64,page_size=16,tile_kv=32,stages=2,gqa=8"})
    for (const char *arch : {"sm_80", "sm_90a"}) {
      const std::string text = std::string("mode=decode,target=") + arch + "," + spec;
      CudaLaunchShape shape;
      CHECK(emit(text, shape).find("PageRuns<Cfg>") != std::string::npos);
      compileWithoutSpills(text, arch);
    }
}

TEST_CASE("NVRTC compiles the prefill spec matrix for sm_80 and sm_90a with 0 spill bytes",
          "[cuda][nvrtc]") {
  int compiled = 0;
  double slowest = 0;
  for (const char *arch : {"sm_80", "sm_90a"})
    for (const char *dtype : {"bf16", "f16"})
      for (int hd : {64, 128, 256})
        for (const char *mask : {"none", "causal", "sliding_window(128)"}) {
          // Paging, GQA and lse vary along with head_dim.
          const std::string text = std::string("target=") + arch + ",dtype=" + dtype +
                                   ",head_dim=" + std::to_string(hd) + ",mask=" + mask +
                                   (hd == 64 ? "" : hd == 128 ? ",page_size=16,gqa=4" : ",page_size=19,gqa=7,return_lse=true");
          slowest = std::max(slowest, compileWithoutSpills(text, arch));
          ++compiled;
        }
  // Every other head dim a GPU spec takes, on its default tiles (head_dim
  // 240's 64-key tiles spilled: it defaults to 32).
  for (int hd = 32; hd <= 256; hd += 16)
    if (hd != 64 && hd != 128 && hd != 256)
      for (const char *mask : {"none", "causal"}) {
        compileWithoutSpills(std::string("mask=") + mask + ",page_size=16,gqa=2,head_dim=" +
                                 std::to_string(hd),
                             "sm_90a");
        ++compiled;
      }
  std::printf("NVRTC: %d prefill kernels compiled, 0 spills, slowest %.2f s\n", compiled, slowest);
}

TEST_CASE("a wgmma prefill kernel runs warpgroups of 64 rows on the mma.sync kernel's steps",
          "[cuda]") {
  CudaLaunchShape shape;
  const std::string src = emit("head_dim=128,tile_q=128,tile_kv=64,mma=wgmma,mask=causal", shape);
  for (const char *step : {"#include \"attn/wgmma.cuh\"", "using Tile = WgmmaTile<kRows, kHeadDim>;",
                           "kWarpRows = 16", "kStepKV = 64", "__align__(1024)",
                           "fence_async_shared();", "qk_wgmma<Cfg>(s, smem_q, warp, smem_k + row0)",
                           "accumulate_pv_wgmma<Cfg>(state, s, smem_v + row0)", "apply_mask<Cfg>",
                           "state.update(s, p.scale_log2)", "store_output<Cfg>"})
    CHECK(src.find(step) != std::string::npos);
  CHECK(src.find("qk<Cfg>(") == std::string::npos);
  CHECK(shape.threads == 128 / 16 * 32);
  // The same spec on mma.sync: 32 rows per warp, ldmatrix steps.
  const std::string sync = emit("head_dim=128,tile_q=128,tile_kv=64,mma=sync,mask=causal", shape);
  CHECK(sync.find("qk<Cfg>(s, smem_q, warp, smem_k + row0)") != std::string::npos);
  CHECK(sync.find("wgmma") == std::string::npos);
  CHECK(shape.threads == 128);
}

TEST_CASE("NVRTC compiles the wgmma prefill kernels for sm_90a with 0 spill bytes",
          "[cuda][nvrtc]") {
  int compiled = 0;
  for (const char *dtype : {"bf16", "f16"})
    for (int hd : {64, 128})
      for (const char *tiles : {"tile_q=128,tile_kv=128", "tile_q=128,tile_kv=64",
                                "tile_q=64,tile_kv=128", "tile_q=64,tile_kv=64"})
        for (const char *mask : {"none", "causal", "sliding_window(128)"}) {
          // Paging, GQA, lse and the one-stage loop vary along with the mask.
          const std::string text = std::string("mma=wgmma,dtype=") + dtype +
                                   ",head_dim=" + std::to_string(hd) + "," + tiles + ",mask=" + mask +
                                   (mask[0] == 'n' ? "" : mask[0] == 'c' ? ",page_size=16,gqa=4"
                                                  : ",page_size=19,gqa=7,return_lse=true,stages=1");
          compileWithoutSpills(text, "sm_90a");
          ++compiled;
        }
  std::printf("NVRTC: %d wgmma prefill kernels compiled, 0 spills\n", compiled);
}

TEST_CASE("a warp-specialised prefill block: a copying warpgroup fills the ring, two or three compute",
          "[cuda]") {
  CudaLaunchShape shape;
  const std::string src =
      emit("head_dim=128,mma=wgmma_ws,mask=causal,page_size=16,gqa=4,return_lse=true", shape);
  for (const char *step :
       {"#include \"attn/warpspec.cuh\"", "kThreads = 256;", "kBlockThreads = 384;", "kStages = 3;",
        "__launch_bounds__(Cfg::kBlockThreads, 1)", "ring.init(Cfg::kBlockThreads - Cfg::kThreads",
        "producer_registers<Cfg>();", "ring.wait_free(i);", "TileCopy<Cfg, Cfg::kBlockThreads - Cfg::kThreads>",
        "ring.copies_issued(i);", "cp_async_wait_all();", "consumer_registers<Cfg>();", "computing_sync<Cfg>();", "ring.wait_filled(i);",
        "qk_wgmma<Cfg>(s, smem_q, warp,", "apply_mask<Cfg>", "state.update(s, p.scale_log2)",
        "accumulate_pv_wgmma<Cfg>(state, s,", "ring.release(i);", "attn-page-kv",
        "store_output<Cfg>(state, out, reinterpret_cast<float *>(p.lse)"})
    CHECK(src.find(step) != std::string::npos);
  // No block barrier inside the loop: the ring's mbarriers order the two sides.
  const size_t loop = src.find("for (int i = 0; i < n; ++i) {\n    const int j");
  REQUIRE(loop != std::string::npos);
  CHECK(src.find("__syncthreads()", loop) == std::string::npos);
  CHECK(shape.threads == 384);
  CHECK(shape.tile_q == 128);
  // The mask arithmetic only on the partial tiles (the mask's edge, the tail past kv_len).
  CHECK(src.find("if (j < steps.full_lo || j >= steps.full_hi)\n      apply_mask<Cfg>") != std::string::npos);
  // head_dim 64: three computing warpgroups (192 query rows) and the copying one.
  const std::string hd64 = emit("head_dim=64,mma=wgmma_ws,mask=causal", shape);
  for (const char *step : {"kTileQ = 192;", "kThreads = 384;", "kBlockThreads = 512;",
                           "computing_sync<Cfg>();", "qk_wgmma<Cfg>(s, smem_q, warp,"})
    CHECK(hd64.find(step) != std::string::npos);
  CHECK(shape.threads == 512);
  CHECK(shape.tile_q == 192);
}

TEST_CASE("NVRTC compiles the warp-specialised prefill kernels with 0 spill bytes", "[cuda][nvrtc]") {
  int compiled = 0;
  for (const char *dtype : {"bf16", "f16"})
    for (const char *tiles : {"tile_kv=128", "tile_kv=64"})
      for (const char *mask : {"none", "causal", "sliding_window(128)"})
        for (const char *block : {"head_dim=128,tile_q=128", "head_dim=64,tile_q=192"}) {
          const std::string text = std::string("mma=wgmma_ws,") + block + ",dtype=" + dtype + "," +
                                   tiles + ",mask=" + mask +
                                   (mask[0] == 'n' ? "" : mask[0] == 'c' ? ",page_size=16,gqa=4"
                                                                        : ",page_size=19,gqa=7,return_lse=true");
          compileWithoutSpills(text, "sm_90a");
          ++compiled;
        }
  // mma = auto's choice where tile_q 192 is given for head_dim 64 (the runtime's
  // long prefills), as the runtime derives it.
  for (const char *text : {"head_dim=64,tile_q=192", "head_dim=64,tile_q=192,mask=causal,gqa=2,page_size=16"}) {
    compileWithoutSpills(text, "sm_90a");
    ++compiled;
  }
  std::printf("NVRTC: %d warp-specialised prefill kernels compiled, 0 spills\n", compiled);
}

TEST_CASE("NVRTC compiles the decode spec matrix for sm_80 and sm_90a with 0 spill bytes",
          "[cuda][nvrtc]") {
  int compiled = 0;
  for (const char *arch : {"sm_80", "sm_90a"})
    for (const char *dtype : {"bf16", "f16"})
      for (int hd : {64, 128, 256})
        for (const char *mask : {"none", "causal", "sliding_window(128)"}) {
          // Group sizes, page sizes, splits and lse vary along with head_dim.
          const std::string text = std::string("mode=decode,target=") + arch + ",dtype=" + dtype +
                                   ",head_dim=" + std::to_string(hd) + ",mask=" + mask +
                                   (hd == 64 ? ",page_size=1,gqa=1,split_kv=1"
                                    : hd == 128 ? ",page_size=16,gqa=8,split_kv=auto,return_lse=true"
                                                : ",page_size=19,gqa=16,split_kv=5");
          compileWithoutSpills(text, arch);
          ++compiled;
        }
  // A contiguous cache (page_size 0): the KVTile copy, sequences by cu_seqlens_k.
  for (const char *arch : {"sm_80", "sm_90a"})
    for (const char *shape : {"head_dim=128,gqa=4,tile_q=4,mask=causal,return_lse=true",
                              "head_dim=64,gqa=8,dtype=f16,mask=sliding_window(100),split_kv=3",
                              "head_dim=256,gqa=1,split_kv=1"}) {
      compileWithoutSpills(std::string("mode=decode,page_size=0,target=") + arch + "," + shape, arch);
      ++compiled;
    }
  // The smallest K/V stages the merge's scratch reuses: one warp, two stages
  // of 16 keys (the scratch's static_assert must hold for them too).
  for (const char *arch : {"sm_80", "sm_90a"})
    for (const char *shape : {"head_dim=32,tile_kv=16,stages=2,page_size=16,split_kv=2",
                              "head_dim=256,tile_kv=16,stages=2,page_size=7,split_kv=3"}) {
      compileWithoutSpills(std::string("mode=decode,target=") + arch + "," + shape, arch);
      ++compiled;
    }
  std::printf("NVRTC: %d decode kernels compiled, 0 spills\n", compiled);
}

TEST_CASE("decode over a contiguous cache reads its sequences by cu_seqlens_k, with no table",
          "[cuda]") {
  for (const char *target : {"sm_80", "sm_90a"}) {
    const std::string text = std::string("mode=decode,gqa=4,split_kv=2,target=") + target;
    INFO(text);
    CudaLaunchShape shape;
    const std::string src = emit(text, shape);
    CHECK(shape.decode);
    CHECK(shape.pair_shared_bytes == 0); // the pair kernel needs PageRuns' pages
    CHECK(src.find("KVCache<Elem, 0, Cfg::kHeadDim>") != std::string::npos);
    CHECK(src.find("cu_seqlens_k") != std::string::npos);
    CHECK(src.find("using Copy = KVTile<Cfg, Cfg::kTileKV>;") != std::string::npos);
    CHECK(src.find("PageRuns") == std::string::npos);
    CHECK(src.find("block_table") == std::string::npos);
    CHECK(src.find("block table") == std::string::npos);
    CHECK(src.find("_pair(") == std::string::npos);
  }
}

TEST_CASE("a GPU decode kernel's code is the same for every tile_q but its names", "[cuda]") {
  // The runtime serves a decode spec from the kernel of the same spec with
  // another tile_q (a bundle's, or the JIT's tile_q = 1 compile): that holds
  // only while the emitted source differs in the kernels' names and spec line.
  for (const char *base :
       {"mode=decode,page_size=16,gqa=4,mask=causal", "mode=decode,gqa=8,head_dim=64,split_kv=3",
        "mode=decode,page_size=1,gqa=1,head_dim=256,dtype=f16,return_lse=true,mask=sliding_window(100)",
        "mode=decode,page_size=16,gqa=8,split_kv=1,target=sm_80",
        "mode=decode,page_size=19,gqa=7,target=sm_80"}) {
    CudaLaunchShape one, other;
    const std::string a = emit(std::string(base) + ",tile_q=1", one);
    for (int t : {2, 7, 16}) {
      std::string b = emit(std::string(base) + ",tile_q=" + std::to_string(t), other);
      INFO(base << ", tile_q=" << t);
      const std::string q = "_q" + std::to_string(t) + "_", field = "tile_q=" + std::to_string(t) + ",";
      for (size_t at; (at = b.find(q)) != std::string::npos;)
        b.replace(at, q.size(), "_q1_");
      for (size_t at; (at = b.find(field)) != std::string::npos;)
        b.replace(at, field.size(), "tile_q=1,");
      CHECK(b == a);
      CHECK(other.threads == one.threads);
      CHECK(other.shared_bytes == one.shared_bytes);
      CHECK(other.merge_threads == one.merge_threads);
      CHECK(other.cluster_merge == one.cluster_merge);
      CHECK(other.pair_shared_bytes == one.pair_shared_bytes);
    }
  }
}

TEST_CASE("an emitted kernel's first lines give back its spec and launch shape", "[cuda]") {
  for (const char *text : {"mask=causal,page_size=16,gqa=4,head_dim=64",
                           "mode=decode,page_size=16,gqa=8,split_kv=3,target=sm_80",
                           "mode=decode,page_size=16,gqa=8,split_kv=3"}) {
    CudaLaunchShape shape, read;
    const std::string source = emit(text, shape);
    Spec spec;
    std::string error;
    INFO(text);
    REQUIRE(readCudaHeader(source, spec, read, error));
    CHECK(spec == *parseSpec(text).spec);
    CHECK(read.threads == shape.threads);
    CHECK(read.shared_bytes == shape.shared_bytes);
    CHECK(read.tile_q == shape.tile_q);
    CHECK(read.decode == shape.decode);
    CHECK(read.merge_threads == shape.merge_threads);
    // Only sm_90a decode kernels can merge their splits as a cluster.
    CHECK(read.cluster_merge == shape.cluster_merge);
    CHECK(shape.cluster_merge == (shape.decode && spec.target == Target::SM90a));
    CHECK((source.find(" cluster_merge=1") != std::string::npos) == shape.cluster_merge);
    // The kernel of two splits in one block: sm_90a decode with pages whose
    // runs PageRuns copies, and the two pipelines' stages in one block.
    CHECK(read.pair_shared_bytes == shape.pair_shared_bytes);
    CHECK((source.find("_pair(const Params p)") != std::string::npos) ==
          (shape.pair_shared_bytes > 0));
  }
  {
    CudaLaunchShape shape;
    // 16 query rows and 2 x 3 stages of 64 keys, K and V, head_dim 128, bf16.
    const std::string source = emit("mode=decode,page_size=16,gqa=4", shape);
    CHECK(source.find(" pair_shared_bytes=200704\n") != std::string::npos);
    CHECK(shape.pair_shared_bytes == 16 * 128 * 2 + 2 * 3 * 2 * 64 * 128 * 2);
    emit("mode=decode,page_size=16,gqa=4,target=sm_80", shape);
    CHECK(shape.pair_shared_bytes == 0); // no clusters to replace
    emit("mode=decode,page_size=19,gqa=4", shape);
    CHECK(shape.pair_shared_bytes == 0); // rows copied one by one (KVTile)
    emit("mode=decode,page_size=16,gqa=4,head_dim=256", shape);
    CHECK(shape.pair_shared_bytes == 0); // 2 x 192 KiB of stages
    emit("mode=decode,page_size=16,gqa=4,stages=4", shape);
    CHECK(shape.pair_shared_bytes == 0);
  }
  // Edited or foreign sources are refused with the reason.
  const std::string body = "\n#include \"attn/block.cuh\"\n";
  struct Case {
    std::string source, want;
  };
  for (const Case &c : std::vector<Case>{
           {"// a kernel\n" + body, "not an attnc kernel"},
           {"// attnc 0.1.0: head_dim=100\n// launch: threads=128 shared_bytes=0" + body,
            "the kernel's first line: invalid spec: head_dim = 100"},
           {"// attnc 0.1.0: head_dim=64\n// launch: threads=100 shared_bytes=0" + body,
            "the kernel's launch line: threads = 100: not a multiple of 32 in 32..1024"},
           {"// attnc 0.1.0: head_dim=64\n// launch: threads=128 shared_bytes=232449" + body,
            "the kernel's launch line: shared_bytes = 232449: not in 0..232448 (the most a "
            "thread block of sm_90a gets)"},
           {"// attnc 0.1.0: head_dim=64\n// launch: threads=128 smem=5" + body,
            "the kernel's launch line: 'smem=5' is not"},
           {"// attnc 0.1.0: mode=decode,page_size=1\n// launch: threads=128 shared_bytes=0" + body,
            "the kernel's launch line: merge_threads = 0: a decode kernel's merge takes 1..1024 "
            "threads"},
           {"// attnc 0.1.0: target=cpu\n// launch: threads=128 shared_bytes=0" + body,
            "the kernel's spec has target = cpu"},
           {"// attnc 0.1.0: mode=decode,page_size=16\n// launch: threads=128 shared_bytes=0 "
            "merge_threads=128 cluster_merge=2" + body,
            "the kernel's launch line: 'cluster_merge=2' is not"},
           {"// attnc 0.1.0: mode=decode,page_size=16,target=sm_80\n// launch: threads=128 "
            "shared_bytes=0 merge_threads=128 cluster_merge=1" + body,
            "the kernel's launch line: cluster_merge = 1 is for decode kernels of target sm_90a"},
           {"// attnc 0.1.0: head_dim=64\n// launch: threads=128 shared_bytes=0 cluster_merge=1" + body,
            "the kernel's launch line: cluster_merge = 1 is for decode kernels of target sm_90a"},
           {"// attnc 0.1.0: mode=decode,page_size=16,target=sm_80\n// launch: threads=128 "
            "shared_bytes=0 merge_threads=128 pair_shared_bytes=4096" + body,
            "the kernel's launch line: pair_shared_bytes = 4096 is for decode kernels of target sm_90a"}}) {
    Spec spec;
    CudaLaunchShape shape;
    std::string error;
    INFO(c.source);
    CHECK_FALSE(readCudaHeader(c.source, spec, shape, error));
    CHECK(error.rfind(c.want, 0) == 0);
  }
}
