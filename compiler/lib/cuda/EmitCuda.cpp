//===- EmitCuda.cpp - Tile-level IR to readable CUDA ----------------------===//
//
// Reads the structure the passes built (the heads and query-tile loops, the
// KV-tile loops by class, the block-table lookups, the lse) and prints one
// kernel whose body is the recurrence as a short list of named steps, each
// with a comment naming the pass that put it there. The arithmetic lives in
// templates/attn/*.cuh.
//
//===----------------------------------------------------------------------===//

#include "attnc/EmitCuda.h"
#include "attnc/Passes.h"
#include "attnc/Pipeline.h"
#include "attnc/Textbook.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cstdlib>
#include <sstream>

using namespace mlir;

namespace attn {

namespace {
/// Decode: how many tiles before its copy a tile's block-table entries are
/// read. Under ncu on the H200 the kernel's largest stall was the first use
/// of entries read one tile ahead: while the K/V copies keep the memory
/// system full a read comes back after about (bytes in flight per SM) /
/// (bandwidth per SM), longer than one tile's work. With PageRuns a tile's
/// entries are a few registers; KVTile holds one per piece, so it keeps one
/// tile's worth.
constexpr int kDecodeTableAhead = 2;

bool decodeCopiesPageRuns(const Spec &spec, int threads);

/// What the emitter needs to know from the IR.
struct KernelPlan {
  std::string name;
  bool paged = false, lse = false;
  bool splits = false; ///< attn-split-kv ran: a kv_splits loop
  int64_t group = 1;
  struct KVLoop {
    std::string lower, upper; ///< fields of the TileRange
    bool masked = false;
    std::string why;
  };
  std::vector<KVLoop> loops;
  /// Whether some KV loop masks its tiles (a mask's edge, or the tail past kv_len).
  bool masked() const {
    for (const KVLoop &kv : loops)
      if (kv.masked)
        return true;
    return false;
  }
};

/// The TileRange field a KV-loop bound comes from.
std::string tileField(Value bound) {
  auto cls = bound.getDefiningOp<ClassifyTilesOp>();
  if (!cls)
    return "";
  switch (cast<OpResult>(bound).getResultNumber()) {
  case 0:
    return "lo";
  case 1:
    return "full_lo";
  case 2:
    return "full_hi";
  default:
    return "hi";
  }
}

bool readPlan(func::FuncOp func, const Spec &spec, KernelPlan &plan, std::string &error) {
  plan.name = func.getName().str();
  scf::ForOp heads, qTiles;
  func.walk([&](scf::ForOp loop) {
    if (isLoopWithRole(loop, "heads"))
      heads = loop;
    if (isLoopWithRole(loop, "q_tiles"))
      qTiles = loop;
  });
  if (!heads || !qTiles) {
    error = "the IR has no heads / q_tiles loops: run the whole attn pipeline first";
    return false;
  }
  if (auto g = heads->getAttrOfType<IntegerAttr>("attn.gqa"))
    plan.group = g.getInt();
  else if (spec.gqa != 1) {
    error = "gqa = " + std::to_string(spec.gqa) + " but attn-share-kv-heads has not run";
    return false;
  }
  qTiles.walk([&](Operation *op) {
    plan.paged |= isa<BlockTableLookupOp>(op);
    plan.lse |= isa<LseOp>(op);
    if (auto loop = dyn_cast<scf::ForOp>(op); loop && isLoopWithRole(loop, "kv_splits"))
      plan.splits = true;
    if (auto loop = dyn_cast<scf::ForOp>(op); loop && isLoopWithRole(loop, "kv_tiles")) {
      KernelPlan::KVLoop kv;
      kv.lower = tileField(loop.getLowerBound());
      kv.upper = tileField(loop.getUpperBound());
      loop.walk([&](MaskOp) { kv.masked = true; });
      auto cls = loop->getAttrOfType<StringAttr>(kTilesAttr);
      kv.why = !cls ? "every KV tile" : cls.getValue() == "full" ? "fully visible tiles: no mask arithmetic"
               : kv.lower == "lo" ? "partial tiles before the fully visible ones (the window's edge)"
                                  : "partial tiles: the mask's edge and the tail past kv_len";
      plan.loops.push_back(kv);
    }
  });
  if (plan.loops.empty()) {
    error = "the query-tile loop holds no KV-tile loop";
    return false;
  }
  // Decode blocks walk their split's tiles in one loop; prefill prints one
  // loop per class, with the bounds attn-mask-tiles computed.
  for (const auto &kv : plan.loops)
    if (spec.mode == Mode::Prefill && (kv.lower.empty() || kv.upper.empty())) {
      error = "a KV-tile loop's bounds do not come from attn.classify_tiles: run attn-mask-tiles";
      return false;
    }
  return true;
}

const char *maskCode(const Mask &m) {
  switch (m.kind) {
  case MaskKind::None:
    return "kMaskNone";
  case MaskKind::Causal:
    return "kMaskCausal";
  case MaskKind::SlidingWindow:
    return "kMaskWindow";
  }
  return "kMaskNone";
}

/// How a block spreads its work: query rows per warp, keys per step of the
/// recurrence (the scores of a step stay in registers) and K/V stages in
/// shared memory. prefillLayout and decodeLayout choose them.
struct BlockLayout {
  int64_t warpRows, stepKV, stages;
  bool wgmma = false; ///< sm_90a warpgroup MMA (attn/wgmma.cuh)
};

BlockLayout prefillLayout(const Spec &spec) {
  const int64_t headDim = spec.head_dim, tileQ = spec.tile_q, tileKV = spec.tile_kv;
  // K/V stages: kvStages (Spec.cpp), where the shared memory is counted.
  // Measured on the H200 for mma.sync against one stage: two were 5-8 %
  // faster for head_dim 128, and 1-8 % for head_dim 64 (128-key tiles,
  // 80 KiB) since the lazy rescale freed registers (before it, one stage had
  // won on the long rows); wgmma's measured depths are there too.
  BlockLayout l{16, tileKV, kvStages(spec)};
  // wgmma: a warpgroup's 64 rows, 16 per warp, against the whole K/V tile
  // (one instruction's N).
  if (usesWgmma(spec)) {
    l.wgmma = true;
    return l;
  }
  // 32 query rows per warp halve the shared-memory reads per mma when two
  // 16-row blocks' accumulators (head_dim / 2 registers each) and scores
  // (step / 2 each) fit next to the rest in 255 registers: head_dim + step
  // <= 160, the step being the whole tile or 64 or 32 of its keys. Head
  // dims that are no multiple of 64 (unswizzled tiles) measured too close
  // to the limit (ptxas spilled for head_dim 96 with 32 keys).
  for (int64_t step : {tileKV, int64_t(64), int64_t(32)})
    if (step <= tileKV && tileKV % step == 0 && headDim + step <= 160) {
      l.stepKV = step;
      break;
    }
  if (tileQ % 32 == 0 && headDim % 64 == 0 && headDim + l.stepKV <= 160)
    l.warpRows = 32;
  else
    l.stepKV = tileKV;
  return l;
}

/// A decode block: 16 rows, 16 keys per warp, kvStages stages (three while
/// two blocks fit in an SM: two tiles load while one is computed). Measured
/// on the H200: three stages read the paged cache 3-13 % faster than two for
/// head_dim 128; four (one block per SM) were 30 % slower.
BlockLayout decodeLayout(const Spec &spec) {
  return BlockLayout{16, spec.tile_kv, kvStages(spec)};
}

/// The kernel's compile-time configuration: what the spec and the IR fix.
void printConfig(std::ostringstream &o, const Spec &spec, const KernelPlan &plan, int64_t tileQ,
                 const BlockLayout &layout, const CudaLaunchShape &shape) {
  const char *elem = spec.dtype == DType::BF16 ? "__nv_bfloat16" : "__half";
  const bool decode = spec.mode == Mode::Decode;
  const int threads = shape.threads;
  o << "// attnc " << ATTNC_VERSION << ": " << spec.str() << "\n"
    << "// launch: threads=" << shape.threads << " shared_bytes=" << shape.shared_bytes;
  if (decode)
    o << " merge_threads=" << shape.merge_threads;
  if (shape.cluster_merge)
    o << " cluster_merge=1";
  if (shape.pair_shared_bytes > 0)
    o << " pair_shared_bytes=" << shape.pair_shared_bytes;
  o << "\n"
    << "// Emitted from the tile-level IR of @" << plan.name
    << ". Each step names the attnc pass\n// that put it there; the arithmetic is in the "
       "attn/*.cuh templates.\n"
    << "#include \"attn/"
    << (decode ? "decode" : warpSpecialised(spec) ? "warpspec" : layout.wgmma ? "wgmma" : "block")
    << ".cuh\"\n\n"
    << "using namespace attn::kernel;\n\n"
    << "namespace {\nstruct Cfg {\n"
    << "  using Elem = " << elem << ";\n"
    << "  static constexpr int kHeadDim = " << spec.head_dim << ";\n"
    << "  static constexpr int kTileQ = " << tileQ
    << (decode ? ";   // rows per block: the group's heads x query tokens\n"
               : ";   // query rows per thread block\n")
    << "  static constexpr int kTileKV = " << spec.tile_kv
    << (decode ? ";  // keys per KV tile, 16 per warp\n" : ";  // keys per KV tile\n")
    << "  static constexpr int kGroup = " << plan.group
    << ";   // attn-share-kv-heads: query heads per KV head\n"
    << "  static constexpr int kPageSize = " << (plan.paged ? spec.page_size : 0)
    << "; // attn-page-kv: tokens per page (0: contiguous)\n"
    << "  static constexpr int kMask = " << maskCode(spec.mask) << ";\n"
    << "  static constexpr long long kWindow = " << spec.mask.window << ";\n"
    << "  static constexpr int kThreads = " << (warpSpecialised(spec) ? kWsConsumerThreads : threads)
    << (warpSpecialised(spec) ? ";  // the computing warpgroups' (the block: kBlockThreads)\n"
                                "  static constexpr int kBlockThreads = " +
                                    std::to_string(threads) +
                                    ";  // and a third warpgroup that copies K and V\n"
                              : std::string(";\n"));
  if (!decode)
    o << "  static constexpr int kStepKV = " << layout.stepKV
      << ";  // keys per step of the recurrence (its scores stay in registers)\n"
      << "  static constexpr int kStages = " << layout.stages
      << (layout.stages > 1 ? ";  // K/V tiles in shared memory: the next loads during this one\n"
                            : ";  // K/V tiles in shared memory\n")
      << "  static constexpr int kWarpRows = " << layout.warpRows
      << ";  // query rows per warp: each K/V fragment serves them all\n"
      << "  static constexpr int kRowBlocks = kWarpRows / 16;\n";
  if (layout.wgmma)
    o << "  // Shared tiles in the 128-byte swizzle wgmma reads (attn/wgmma.cuh).\n"
      << "  template <int kRows>\n  using Tile = WgmmaTile<kRows, kHeadDim>;\n";
  if (decode)
    o << "  static constexpr int kStages = " << layout.stages
      << "; // K/V tiles in shared memory: kStages - 1 load ahead\n"
      << "  static constexpr int kTableAhead = "
      << (decodeCopiesPageRuns(spec, threads) ? kDecodeTableAhead : 1)
      << "; // attn-page-kv: block-table entries read this many tiles before their copy\n";
  o << "};\nusing Elem = Cfg::Elem;\n} // namespace\n\n";
}

/// The sequence's keys and values: contiguous rows or pages through the table.
void printKVCache(std::ostringstream &o, bool paged) {
  if (paged)
    o << "  // attn-page-kv: this sequence's keys and values, through its block table.\n"
      << "  const i64 kv_len = reinterpret_cast<const int *>(p.seq_lens_k)[seq];\n"
      << "  const int *table = reinterpret_cast<const int *>(p.block_table) + seq * p.block_table_stride;\n"
      << "  using Cache = KVCache<Elem, Cfg::kPageSize, Cfg::kHeadDim>;\n"
      << "  const Cache kv = {reinterpret_cast<const Elem *>(p.k), reinterpret_cast<const Elem *>(p.v), table,\n"
      << "                    (int)p.num_pages, (int)kv_len, p.num_kv_heads * Cfg::kHeadDim};\n";
  else
    o << "  const int *cu_k = reinterpret_cast<const int *>(p.cu_seqlens_k);\n"
      << "  const i64 kv_begin = cu_k[seq], kv_len = cu_k[seq + 1] - kv_begin;\n"
      << "  const i64 token = (i64)p.num_kv_heads * Cfg::kHeadDim;\n"
      << "  using Cache = KVCache<Elem, 0, Cfg::kHeadDim>;\n"
      << "  const Cache kv = {reinterpret_cast<const Elem *>(p.k) + kv_begin * token,\n"
      << "                    reinterpret_cast<const Elem *>(p.v) + kv_begin * token, nullptr, 0, (int)kv_len,\n"
      << "                    (int)token};\n";
}

/// A prefill kernel's start: its signature (`blockThreads`, the launch's
/// threads as Cfg names them), the block's place in the grid, the sequence's
/// query rows and K/V cache, the shared tiles and the classes of its steps.
void printPrefillStart(std::ostringstream &o, const Spec &spec, const KernelPlan &plan, bool wgmma,
                       const char *blockThreads) {
  // Under a causal or window mask a later query tile sees more keys: the grid
  // hands them out first, so the blocks that finish last are the short ones.
  const bool heavyFirst = spec.mask.kind != MaskKind::None;
  o << "// __launch_bounds__(threads, 1): with no minimum of resident blocks given, ptxas may\n"
    << "// cap the registers low for occupancy and spill; the accumulator needs them.\n"
    << "extern \"C\" __global__ void __launch_bounds__(" << blockThreads << ", 1) " << plan.name
    << "(const Params p) {\n"
    << "  // The heads and q_tiles loops are the grid: x = query tile, y = query head, z = sequence.\n"
    << "  const int head = blockIdx.y, seq = blockIdx.z, warp = threadIdx.x / 32;\n"
    << "  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);\n"
    << "  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin;\n"
    << (heavyFirst ? "  // Query tiles from the last (the most keys to see) to the first.\n"
                     "  const i64 q_start = (i64)(gridDim.x - 1 - blockIdx.x) * Cfg::kTileQ;\n"
                   : "  const i64 q_start = (i64)blockIdx.x * Cfg::kTileQ;\n")
    << "  if (q_start >= q_len)\n    return;\n"
    << "  // attn-share-kv-heads: query heads kGroup * h .. kGroup * h + kGroup - 1 read KV head h.\n"
    << "  const int kv_head = head / Cfg::kGroup;\n";
  printKVCache(o, plan.paged);
  o << "  const i64 q_row = (i64)p.num_q_heads * Cfg::kHeadDim;\n"
    << "  const Elem *q = reinterpret_cast<const Elem *>(p.q) + q_begin * q_row + head * Cfg::kHeadDim;\n"
    << (wgmma ? "  // wgmma's 128-byte swizzle repeats every 1024 bytes: the tiles start on that\n"
                "  // boundary (the dynamic shared memory does; a launch that broke it would stop here).\n"
                "  extern __shared__ __align__(1024) unsigned char smem[];\n"
                "  if (smem_addr(smem) % 1024 != 0)\n    __trap();\n"
              : "  extern __shared__ __align__(128) unsigned char smem[];\n")
    << "  Elem *smem_q = reinterpret_cast<Elem *>(smem);\n"
    << "  Elem *smem_k = smem_q + Cfg::kTileQ * Cfg::kHeadDim; // [kStages][kTileKV][kHeadDim]\n"
    << "  Elem *smem_v = smem_k + Cfg::kStages * Cfg::kTileKV * Cfg::kHeadDim;\n"
    << "  // attn-mask-tiles: which keys some query of this block sees, by class, in steps of\n"
    << "  // kStepKV keys: the IR's KV tiles, taken in the steps their scores fit in registers.\n"
    << "  const TileRange steps = classify_tiles(Cfg::kMask, Cfg::kWindow, q_start, Cfg::kTileQ,\n"
    << "                                         Cfg::kStepKV, q_len, kv_len);\n"
    << "  constexpr int kSteps = Cfg::kTileKV / Cfg::kStepKV; // steps per K/V tile\n"
    << "  const int tile_lo = steps.lo / kSteps, tile_hi = (steps.hi + kSteps - 1) / kSteps;\n\n";
}

/// A prefill kernel's end: each warp's rows normalised and stored.
void printPrefillStore(std::ostringstream &o, const KernelPlan &plan) {
  o << "\n  // attn-online-softmax: normalise once, at the end: out = acc / l"
    << (plan.lse ? ", lse = m + log l" : "") << ".\n"
    << "  const Rows<Elem> out = {reinterpret_cast<Elem *>(p.o) + q_begin * q_row + head * Cfg::kHeadDim,\n"
    << "                          q_row, q_len};\n"
    << "  store_output<Cfg>(state, out, "
    << (plan.lse ? "reinterpret_cast<float *>(p.lse) + q_begin * p.num_q_heads + head, p.num_q_heads"
                 : "nullptr, 0")
    << ", q_start + warp * Cfg::kWarpRows);\n}\n";
}

void printPrefill(std::ostringstream &o, const Spec &spec, const KernelPlan &plan,
                  const BlockLayout &layout) {
  const bool pipelined = layout.stages > 1;
  const bool wgmma = layout.wgmma;
  // What makes the tiles this thread copied visible to the block: with
  // wgmma, whose reads of shared memory go through the async proxy, a proxy
  // fence between the cp.async wait and the barrier.
  auto arrived = [&](const char *indent, const std::string &wait) {
    std::string text = std::string(indent) + wait + "\n";
    if (wgmma)
      text += std::string(indent) +
              "fence_async_shared(); // the copies, visible to wgmma's shared-memory reads\n";
    return text + indent + "__syncthreads();\n";
  };
  printPrefillStart(o, spec, plan, wgmma, "Cfg::kThreads");
  o << "  // attn-online-softmax: the query tile is loaded once (rows past q_len read as zero).\n"
    << "  load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {\n"
    << "    return q_start + r < q_len ? q + (q_start + r) * q_row : nullptr; }, q);\n"
    << "  cp_async_commit();\n";
  auto loadComment = [&](const char *indent) {
    return plan.paged ? std::string(indent) +
                            "// attn-page-kv: the K and V rows of tile j, found through the block "
                            "table\n" + indent +
                            "// (KVCache::slot) once for both; rows past kv_len read as zero.\n"
                      : std::string(indent) +
                            "// The K and V rows of tile j; rows past kv_len read as zero.\n";
  };
  if (pipelined)
    o << loadComment("  ")
      << "  auto load_kv = [&](int j, int stage) {\n"
      << "    const KVTile<Cfg, Cfg::kTileKV> rows(kv, j * Cfg::kTileKV);\n"
      << "    rows.copy_kv(smem_k + stage * Cfg::kTileKV * Cfg::kHeadDim,\n"
      << "                 smem_v + stage * Cfg::kTileKV * Cfg::kHeadDim, kv, kv_head);\n"
      << "  };\n"
      << "  // The first K/V tile loads while the query tile arrives.\n"
      << "  if (tile_lo < tile_hi)\n    load_kv(tile_lo, 0);\n"
      << "  cp_async_commit();\n"
      << arrived("  ", "cp_async_wait<1>(); // the query tile has arrived");
  else
    o << arrived("  ", "cp_async_wait<0>();");
  o
    << "  // attn-online-softmax: m = -inf, l = 0, acc = 0 for this warp's kWarpRows rows.\n"
    << "  WarpState<Cfg> state;\n  state.init();\n";
  // One loop over the tiles some row sees, the mask applied on the partial
  // steps: one copy of the loop body (a copy per class would double the
  // registers live across the loops and the compile time).
  bool masked = false;
  o << "\n  // attn-mask-tiles: the steps in [lo, hi) (the IR's classes, per step of kStepKV keys):\n";
  for (const auto &kv : plan.loops) {
    o << "  //   [" << kv.lower << ", " << kv.upper << "): " << kv.why << "\n";
    masked |= kv.masked;
  }
  o << "  for (int j = tile_lo; j < tile_hi; ++j) {\n";
  if (pipelined)
    o << "    const int stage = (j - tile_lo) % Cfg::kStages;\n"
      << "    // Tile j + 1 loads into the other stage while tile j is computed.\n"
      << "    if (j + 1 < tile_hi)\n      load_kv(j + 1, (stage + 1) % Cfg::kStages);\n"
      << "    cp_async_commit();\n"
      << arrived("    ", "cp_async_wait<1>(); // tile j has arrived");
  else
    o << "    const int stage = 0;\n"
      << loadComment("    ")
      << "    const KVTile<Cfg, Cfg::kTileKV> rows(kv, j * Cfg::kTileKV);\n"
      << "    rows.copy(smem_k, kv, kv.k, kv_head);\n"
      << "    cp_async_commit();\n"
      << "    rows.copy(smem_v, kv, kv.v, kv_head);\n"
      << "    cp_async_commit();\n"
      << arrived("    ", "cp_async_wait<1>(); // K has arrived; V keeps loading during QK^T and the softmax")
      << "    const int first = max(steps.lo - j * kSteps, 0); // the tile's first step in [lo, hi)\n";
  o << "#pragma unroll\n"
    << "    for (int h = 0; h < kSteps; ++h) {\n"
    << "      const int step = j * kSteps + h;\n"
    << "      if (step < steps.lo || step >= steps.hi)\n"
    << "        continue; // a step no row of this block sees\n"
    << "      const int row0 = (stage * Cfg::kTileKV + h * Cfg::kStepKV) * Cfg::kHeadDim;\n"
    << "      Scores<Cfg> s;\n"
    << (wgmma ? "      qk_wgmma<Cfg>(s, smem_q, warp, smem_k + row0); // S = Q K^T, the warpgroup's rows\n"
              : "      qk<Cfg>(s, smem_q, warp, smem_k + row0); // S = Q K^T\n");
  if (masked)
    o << "      // attn-mask-tiles: a partial step: hide the keys this warp's rows may not see.\n"
      << "      if (step < steps.full_lo || step >= steps.full_hi)\n"
      << "        apply_mask<Cfg>(s, q_start + warp * Cfg::kWarpRows, step * Cfg::kStepKV, q_len, kv_len);\n";
  o << "      // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);\n"
    << "      // l = alpha l + rowsum P; acc = alpha acc, skipped while no row's max grew by more than\n"
    << "      // 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).\n"
    << "      // The scale rides in the exponent, in base 2: exp2(S * scale * log2 e - m).\n"
    << "      state.update(s, p.scale_log2);\n";
  if (!pipelined)
    o << "      if (h == first) {\n"
      << arrived("        ", "cp_async_wait<0>(); // V has arrived")
      << "      }\n";
  o << (wgmma ? "      accumulate_pv_wgmma<Cfg>(state, s, smem_v + row0); // acc += P V\n"
              : "      accumulate_pv<Cfg>(state, s, smem_v + row0); // acc += P V\n")
    << "    }\n"
    << (pipelined ? "    __syncthreads(); // this stage is loaded again at the next tile\n  }\n"
                  : "    __syncthreads(); // the next tile overwrites K and V\n  }\n");
  printPrefillStore(o, plan);
}

/// A warp-specialised prefill block (attn/warpspec.cuh, `mma = wgmma_ws`, and
/// `auto`'s choice for head_dim 128 on sm_90a):
/// the copying warpgroup fills a ring of K/V stages while the two computing
/// warpgroups run the recurrence over them, each stage's mbarriers between.
void printPrefillWarpSpecialised(std::ostringstream &o, const Spec &spec, const KernelPlan &plan) {
  printPrefillStart(o, spec, plan, /*wgmma=*/true, "Cfg::kBlockThreads");
  const bool masked = plan.masked();
  o << "  static_assert(kSteps == 1, \"a warp-specialised block takes a K/V tile in one step\");\n"
    << "  const int n = tile_hi - tile_lo; // the tiles some row of this block sees\n"
    << "  // The ring's two mbarriers per stage, after the stages.\n"
    << "  const StageRing<Cfg::kStages> ring = {smem_addr(smem_v + Cfg::kStages * Cfg::kTileKV * Cfg::kHeadDim)};\n"
    << "  if (threadIdx.x == 0)\n"
    << "    ring.init(Cfg::kBlockThreads - Cfg::kThreads, Cfg::kThreads / 32);\n"
    << "  __syncthreads();\n\n"
    << "  if (threadIdx.x >= Cfg::kThreads) {\n"
    << "    // Warpgroup 2 copies: tile tile_lo + i into stage i % kStages, once the\n"
    << "    // computing warps have freed it.\n"
    << "    producer_registers();\n"
    << "    const int tid = threadIdx.x - Cfg::kThreads;\n"
    << "    for (int i = 0; i < n; ++i) {\n"
    << "      const int stage = i % Cfg::kStages;\n"
    << "      ring.wait_free(i);\n"
    << (plan.paged ? "      // attn-page-kv: the K and V rows of the tile, found through the block table\n"
                     "      // (KVCache::slot); rows past kv_len read as zero.\n"
                   : "      // The K and V rows of the tile; rows past kv_len read as zero.\n")
    << "      TileCopy<Cfg, Cfg::kBlockThreads - Cfg::kThreads>::copy_kv(\n"
    << "          smem_k + stage * Cfg::kTileKV * Cfg::kHeadDim, smem_v + stage * Cfg::kTileKV * Cfg::kHeadDim, kv,\n"
    << "          (tile_lo + i) * Cfg::kTileKV, kv_head, tid);\n"
    << "      ring.copies_issued(i);\n"
    << "    }\n"
    << "    cp_async_wait<0>(); // no copy outlives its thread\n"
    << "    return;\n"
    << "  }\n\n"
    << "  // Warpgroups 0 and 1 compute: 64 query rows each, 16 per warp.\n"
    << "  consumer_registers();\n"
    << "  // attn-online-softmax: the query tile is loaded once (rows past q_len read as zero).\n"
    << "  load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {\n"
    << "    return q_start + r < q_len ? q + (q_start + r) * q_row : nullptr; }, q);\n"
    << "  cp_async_commit();\n"
    << "  cp_async_wait<0>();\n"
    << "  fence_async_shared(); // the copies, visible to wgmma's shared-memory reads\n"
    << "  computing_sync();\n"
    << "  // attn-online-softmax: m = -inf, l = 0, acc = 0 for this warp's kWarpRows rows.\n"
    << "  WarpState<Cfg> state;\n  state.init();\n\n"
    << "  // attn-mask-tiles: the tiles in [lo, hi) (the IR's classes):\n";
  for (const auto &kv : plan.loops)
    o << "  //   [" << kv.lower << ", " << kv.upper << "): " << kv.why << "\n";
  o << "  for (int i = 0; i < n; ++i) {\n"
    << "    const int j = tile_lo + i, stage = i % Cfg::kStages;\n"
    << "    ring.wait_filled(i); // tile j has landed in its stage\n"
    << "    Scores<Cfg> s;\n"
    << "    qk_wgmma<Cfg>(s, smem_q, warp, smem_k + stage * Cfg::kTileKV * Cfg::kHeadDim); // S = Q K^T\n";
  if (masked)
    o << "    // attn-mask-tiles: a partial tile: hide the keys this warp's rows may not see.\n"
      << "    if (j < steps.full_lo || j >= steps.full_hi)\n"
      << "      apply_mask<Cfg>(s, q_start + warp * Cfg::kWarpRows, j * Cfg::kStepKV, q_len, kv_len);\n";
  o << "    // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);\n"
    << "    // l = alpha l + rowsum P; acc = alpha acc, skipped while no row's max grew by more than\n"
    << "    // 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).\n"
    << "    // The scale rides in the exponent, in base 2: exp2(S * scale * log2 e - m).\n"
    << "    state.update(s, p.scale_log2);\n"
    << "    accumulate_pv_wgmma<Cfg>(state, s, smem_v + stage * Cfg::kTileKV * Cfg::kHeadDim); // acc += P V\n"
    << "    ring.release(i); // this warp is done with the stage\n"
    << "  }\n";
  printPrefillStore(o, plan);
}

/// Whether a decode kernel's K/V tiles come in runs of one page that
/// PageRuns (attn/block.cuh) copies: the same conditions as its kApplies.
/// Each thread copies one 16-byte chunk of every (threads / chunks)-th row;
/// those rows must fall whole into the runs of min(page_size, tile_kv)
/// tokens, and step over whole swizzle periods of 8 rows (or the tile is
/// unswizzled: fewer than 8 chunks a row).
bool decodeCopiesPageRuns(const Spec &spec, int threads) {
  const int64_t chunks = spec.head_dim / 8, page = spec.page_size, tile = spec.tile_kv;
  if (page <= 0 || threads % chunks != 0)
    return false;
  const int64_t rowStep = threads / chunks, run = std::min(page, tile);
  return rowStep > 0 && run % rowStep == 0 && tile % run == 0 && page % run == 0 &&
         (rowStep % 8 == 0 || chunks % 8 != 0);
}

/// The shared memory of a decode block that runs two splits as two
/// pipelines (decode_block<2>: the query rows and each pipeline's stages), or
/// 0 where the emitter makes no such kernel: only on sm_90a (the runtime
/// launches it for two splits that would otherwise merge in a cluster of two
/// blocks, and for four as clusters of two such blocks: Kernel::pairsSplits,
/// measured in tests/gpu/RESULTS.md), with the PageRuns copy, while both pipelines' stages fit in one block and the
/// merge of all its warps fits in one pipeline's stages (DecodeScratch).
int64_t decodePairSharedBytes(const Spec &spec, int threads) {
  if (spec.mode != Mode::Decode || spec.target != Target::SM90a || !decodeCopiesPageRuns(spec, threads))
    return 0;
  const int64_t elem = bytesPerElement(spec.dtype);
  const int64_t d = spec.head_dim, stageBytes = kvStages(spec) * 2 * spec.tile_kv * d * elem;
  const int64_t bytes = 16 * d * elem + 2 * stageBytes;
  const int64_t scratchFloats = kernel::decodeScratchFloats(2 * threads / 32, static_cast<int>(d));
  if (bytes > sharedMemoryLimit(spec.target) || scratchFloats * 4 > stageBytes)
    return 0;
  return bytes;
}

void printDecode(std::ostringstream &o, const Spec &spec, const KernelPlan &plan, int threads,
                 bool pairs) {
  const bool masked = plan.masked();
  o << "namespace {\n"
    << "/// The whole block when it runs kPipes K/V pipelines of Cfg::kThreads threads.\n"
    << "template <int kPipes>\n"
    << "struct BlockCfg : Cfg {\n"
    << "  static constexpr int kThreads = kPipes * Cfg::kThreads;\n"
    << "  static constexpr int kStages = kPipes * Cfg::kStages; // the merge's scratch: every pipeline's stages\n"
    << "};\n} // namespace\n\n"
    << "// attn-share-kv-heads: one block per KV head; its rows are the group's query heads.\n"
    << "// attn-split-kv: the kv_splits loop is the grid's x and the block's kPipes pipelines\n"
    << "// (pipe_sync). Grid: x = split / kPipes, y = KV head, z = sequence. The runtime\n"
    << "// launches blocks of two pipelines for two splits, where they would otherwise merge\n"
    << "// in a cluster of two blocks, and for four as clusters of two such blocks, where\n"
    << "// clusters of four would not all fit on the device at once.\n"
    << "template <int kPipes>\n"
    << "__device__ __forceinline__ void decode_block(const Params &p) {\n"
    << "  using Block = BlockCfg<kPipes>;\n"
    << "  const int pipe = kPipes == 1 ? 0 : threadIdx.x / Cfg::kThreads;\n"
    << "  const unsigned tid = kPipes == 1 ? threadIdx.x : threadIdx.x % Cfg::kThreads; // in the pipeline\n"
    << "  const int split = blockIdx.x * kPipes + pipe, kv_head = blockIdx.y, seq = blockIdx.z, warp = tid / 32;\n"
    << "  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);\n"
    << "  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin, total_q = cu_q[p.batch];\n"
    << "  const int rows = static_cast<int>(q_len) * Cfg::kGroup; // row r: token r / kGroup, head r % kGroup\n";
  printKVCache(o, plan.paged);
  const bool pageRuns = decodeCopiesPageRuns(spec, threads);
  if (pageRuns)
    o << "  // attn-page-kv: the table entries of the tiles a block that starts at key 0 copies\n"
      << "  // first, read now, with the sequence's length rather than after it.\n"
      << "  const PageRuns<Cfg>::TableStart<Cfg::kStages - 1 + Cfg::kTableAhead> start(\n"
      << "      table, p.block_table_stride);\n";
  o << "  const i64 q_row = (i64)p.num_q_heads * Cfg::kHeadDim;\n"
    << "  const i64 first_head = (i64)kv_head * Cfg::kGroup;\n"
    << "  const Elem *q = reinterpret_cast<const Elem *>(p.q) + q_begin * q_row + first_head * Cfg::kHeadDim;\n"
    << "  extern __shared__ __align__(128) unsigned char smem[];\n"
    << "  Elem *smem_q = reinterpret_cast<Elem *>(smem);\n"
    << "  // This pipeline's stages: [kStages][K, V][kTileKV][kHeadDim].\n"
    << "  Elem *smem_kv = smem_q + Cfg::kTileQ * Cfg::kHeadDim + pipe * (Cfg::kStages * 2 * Cfg::kTileKV * Cfg::kHeadDim);\n"
    << "  float *scratch = reinterpret_cast<float *>(smem_q + Cfg::kTileQ * Cfg::kHeadDim); // the warps' states, after the loop\n"
    << "  auto smem_k = [&](int stage) { return smem_kv + (2 * stage) * Cfg::kTileKV * Cfg::kHeadDim; };\n"
    << "  auto smem_v = [&](int stage) { return smem_kv + (2 * stage + 1) * Cfg::kTileKV * Cfg::kHeadDim; };\n"
    ;
  if (pageRuns)
    o << "  // attn-page-kv: the K and V rows of tile j, found through the block table from\n"
      << "  // the entries `read` holds: one entry and one address per run of a page's\n"
      << "  // tokens in the tile (PageRuns), for K and V alike.\n"
      << "  using Copy = PageRuns<Cfg>;\n"
      << "  const Copy copy(kv.token_stride, kv_head, tid);\n"
      << "  auto load_kv = [&](int j, int stage, const Copy::Lookups &read) {\n"
      << "    copy.copy_kv(smem_k(stage), smem_v(stage), kv, j * Cfg::kTileKV, read);\n"
      << "  };\n";
  else
    o << "  // attn-page-kv: the K and V rows of tile j, found through the block table\n"
      << "  // (KVCache::slot) once for both, from the table entries `read` holds.\n"
      << "  using Copy = KVTile<Cfg, Cfg::kTileKV>;\n"
      << "  auto load_kv = [&](int j, int stage, const Copy::Lookups &read) {\n"
      << "    const Copy rows(kv, j * Cfg::kTileKV, read);\n"
      << "    rows.copy_kv(smem_k(stage), smem_v(stage), kv, kv_head);\n"
      << "  };\n";
  o
    << "  // attn-split-kv: one split writes the output; several write partial results\n"
    << "  // (normalised output and lse) to the workspace for the merge kernel, unless\n"
    << "  // they run as one cluster (sm_90a): then they merge in shared memory. A block's\n"
    << "  // pipelines always do (its blocks, if more than one, as a cluster).\n"
    << "  float *part = reinterpret_cast<float *>(p.workspace);\n"
    << "  const i64 part_rows = total_q * p.num_q_heads;\n"
    << "  const bool clustered = cluster_place().blocks > 1;\n"
    << "  const bool partial = kPipes == 1 && p.num_splits > 1 && !clustered;\n"
    << "  const DecodeSink<Block> sink = {\n"
    << "      reinterpret_cast<Elem *>(p.o) + q_begin * q_row + first_head * Cfg::kHeadDim,\n"
    << "      " << (plan.lse ? "reinterpret_cast<float *>(p.lse) + q_begin * p.num_q_heads + first_head"
                           : "nullptr")
    << ",\n"
    << "      partial ? part + (split * total_q + q_begin) * q_row + first_head * Cfg::kHeadDim : nullptr,\n"
    << "      partial ? part + p.num_splits * part_rows * Cfg::kHeadDim + split * part_rows +\n"
    << "                    q_begin * p.num_q_heads + first_head : nullptr,\n"
    << "      q_row, p.num_q_heads};\n\n"
    << "  // The q_tiles loop: 16 rows at a time (one pass for a decode step's few tokens).\n"
    << "  for (int row0 = 0; row0 < rows; row0 += Cfg::kTileQ) {\n"
    << "    // attn-mask-tiles: the KV tiles the query tokens of these rows see, by class.\n"
    << "    const i64 tok0 = row0 / Cfg::kGroup, tok1 = (min(row0 + Cfg::kTileQ, rows) - 1) / Cfg::kGroup;\n"
    << "    const TileRange tiles = classify_tiles(Cfg::kMask, Cfg::kWindow, tok0, tok1 - tok0 + 1,\n"
    << "                                           Cfg::kTileKV, q_len, kv_len);\n"
    << "    // attn-split-kv: this block's share of them.\n"
    << "    const SplitTiles mine = split_range(tiles.lo, tiles.hi, split, p.num_splits);\n"
    << "    load_tile<Block, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {\n"
    << "      const int row = row0 + r;\n"
    << "      return row < rows ? q + (row / Cfg::kGroup) * q_row + (row % Cfg::kGroup) * Cfg::kHeadDim : nullptr; }, q);\n"
    << "    cp_async_commit(); // the query rows: a cp.async group of their own\n"
    << "    // attn-page-kv: the block-table entries of the first kStages - 1 tiles, read\n"
    << "    // together (the first copies wait on the table once, not once a tile). next[i]\n"
    << "    // holds those of the (i + 1)-th tile still to load: each entry is read kTableAhead\n"
    << "    // tiles before its copy, about as long as a read takes while the K/V copies keep\n"
    << "    // the memory system full, so the loop's copies do not wait on the table.\n"
    << "    Copy::Lookups first[Cfg::kStages - 1], next[Cfg::kTableAhead];\n";
  const char *indent = pageRuns ? "  " : "";
  if (pageRuns)
    o << "    if (mine.lo == 0) {\n"
      << "      start.fill(first, next); // read at the start\n"
      << "    } else {\n";
  o << "#pragma unroll\n"
    << indent << "    for (int i = 0; i < Cfg::kStages - 1; ++i)\n"
    << indent << "      first[i] = Copy::Lookups(kv, (mine.lo + i) * Cfg::kTileKV);\n"
    << "#pragma unroll\n"
    << indent << "    for (int i = 0; i < Cfg::kTableAhead; ++i)\n"
    << indent << "      next[i] = Copy::Lookups(kv, (mine.lo + Cfg::kStages - 1 + i) * Cfg::kTileKV);\n";
  if (pageRuns)
    o << "    }\n";
  o
    << "    // The first kStages - 1 tiles start loading.\n"
    << "#pragma unroll\n"
    << "    for (int i = 0; i < Cfg::kStages - 1; ++i) {\n"
    << "      if (mine.lo + i < mine.hi)\n"
    << "        load_kv(mine.lo + i, i, first[i]);\n"
    << "      cp_async_commit();\n    }\n"
    << "    // attn-online-softmax: m = -inf, l = 0, acc = 0; each warp takes 16 keys of every tile.\n"
    << "    DecodeState<Block> state;\n    state.init();\n"
    << "    cp_async_wait<Cfg::kStages - 1>(); // the query rows have arrived\n"
    << "    __syncthreads();\n"
    << "    DecodeQuery<Block> query; // every warp's A operand, in registers up to head_dim 128\n"
    << "    query.load(smem_q);\n"
    << "    // Tile j's stage, and the stage tile j + kStages - 1 loads into (tile j - 1's).\n"
    << "    int stage = 0, free_stage = Cfg::kStages - 1;\n"
    << "    for (int j = mine.lo; j < mine.hi; ++j) {\n"
    << "      const int ahead = j + Cfg::kStages - 1;\n"
    << "      cp_async_wait<Cfg::kStages - 2>(); // tile j has arrived\n"
    << "      // One barrier per tile: tile j is visible to every warp of the pipeline, and\n"
    << "      // each is done with tile j - 1, whose stage the next load takes.\n"
    << "      pipe_sync<kPipes, Cfg::kThreads>(pipe);\n"
    << "      if (ahead < mine.hi)\n"
    << "        load_kv(ahead, free_stage, next[0]);\n"
    << "      cp_async_commit();\n"
    << "#pragma unroll\n"
    << "      for (int i = 0; i + 1 < Cfg::kTableAhead; ++i)\n"
    << "        next[i] = next[i + 1];\n"
    << "      next[Cfg::kTableAhead - 1] = Copy::Lookups(kv, (ahead + Cfg::kTableAhead) * Cfg::kTileKV);\n"
    << "      DecodeScores<Block> s;\n"
    << "      query.qk(s, smem_k(stage), warp); // S = Q K^T\n";
  if (masked)
    o << "      // attn-mask-tiles: a partial tile: hide the keys a row's token may not see.\n"
      << "      if (j < tiles.full_lo || j >= tiles.full_hi)\n"
      << "        decode_mask<Block>(s, row0, j * Cfg::kTileKV + warp * 16, q_len, kv_len);\n";
  o << "      // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);\n"
    << "      // l = alpha l + rowsum P; acc = alpha acc, skipped while no row's max grew by more than\n"
    << "      // 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).\n"
    << "      state.update(s, p.scale_log2); // the scale rides in the exponent, base 2\n"
    << "      decode_pv<Block>(state, s, smem_v(stage), warp); // acc += P V\n"
    << "      free_stage = stage;\n"
    << "      stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;\n"
    << "    }\n"
    << "    // Two pipelines: each passes its barrier as often (compute-sanitizer's racecheck\n"
    << "    // relates the accesses across the block barrier only then).\n"
    << "    pipe_sync_evenly<kPipes, Cfg::kThreads>(pipe, mine.hi - mine.lo, tiles.lo, tiles.hi,\n"
    << "                                            blockIdx.x * kPipes, p.num_splits);\n"
    << "    cp_async_wait<0>();\n"
    << "    __syncthreads();\n"
    << "    allow_merge_launch(); // sm_90a: the merge kernel may be scheduled (it waits for this one)\n"
    << "    // attn-split-kv: merge the warps' states (the block's pipelines', and a cluster's\n"
    << "    // splits); attn-online-softmax: out = acc / l" << (plan.lse ? ", lse = m + log l" : "") << ".\n"
    << "    if (clustered)\n"
    << "      decode_store_cluster<Block>(state, scratch, row0, rows, sink);\n"
    << "    else\n"
    << "      decode_store<Block>(state, scratch, row0, rows, sink);\n"
    << "  }\n}\n\n";
  if (pairs)
    o << "// attn-split-kv: splits as the two pipelines of a block (launch: pair_shared_bytes).\n"
      << "// NVRTC compiles this kernel as a program of its own (-D" << kernel::kPairProgramMacro << "),\n"
      << "// in parallel with the one of the other two: a cold compile then takes the longer\n"
      << "// of the two instead of their sum, and each kernel's code is what it is alone.\n"
      << "#ifdef " << kernel::kPairProgramMacro << "\n"
      << "extern \"C\" __global__ void __launch_bounds__(2 * Cfg::kThreads, 1) " << plan.name
      << "_pair(const Params p) {\n  decode_block<2>(p);\n}\n#else\n\n";
  o << "// __launch_bounds__(threads, 1): with no minimum of resident blocks given, ptxas may\n"
    << "// cap the registers low for occupancy and spill; the accumulator needs them.\n"
    << "extern \"C\" __global__ void __launch_bounds__(Cfg::kThreads, 1) " << plan.name
    << "(const Params p) {\n  decode_block<1>(p);\n}\n\n";

  o << "// attn-split-kv: the merge of the splits' partial results, launched after the main\n"
    << "// kernel when num_splits > 1. Grid: x = query token, y = query head, z = sequence.\n"
    << "extern \"C\" __global__ void __launch_bounds__(128) " << plan.name << "_merge(const Params p) {\n"
    << "  const int token = blockIdx.x, head = blockIdx.y, seq = blockIdx.z;\n"
    << "  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);\n"
    << "  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin, total_q = cu_q[p.batch];\n"
    << "  if (token >= q_len)\n    return;\n"
    << "  const i64 row = (q_begin + token) * p.num_q_heads + head, part_rows = total_q * p.num_q_heads;\n"
    << "  // sm_90a: launched as the kernel above's dependent; its partial results are\n"
    << "  // complete and visible once this returns.\n"
    << "  wait_for_main_kernel();\n"
    << "  const float *part = reinterpret_cast<const float *>(p.workspace);\n"
    << "  merge_splits<Cfg>(part + row * Cfg::kHeadDim, part_rows * Cfg::kHeadDim,\n"
    << "                    part + p.num_splits * part_rows * Cfg::kHeadDim + row, part_rows, p.num_splits,\n"
    << "                    reinterpret_cast<Elem *>(p.o) + row * Cfg::kHeadDim, "
    << (plan.lse ? "reinterpret_cast<float *>(p.lse) + row" : "nullptr") << ");\n}\n";
  if (pairs)
    o << "#endif // " << kernel::kPairProgramMacro << "\n";
}
} // namespace

bool emitCuda(ModuleOp module, const Spec &spec, std::string &source, CudaLaunchShape &shape,
              std::string &error) {
  if (!spec.isGPU()) {
    error = "CUDA is emitted for GPU targets (sm_80, sm_90a), not target = cpu";
    return false;
  }
  auto funcs = module.getOps<func::FuncOp>();
  if (funcs.empty()) {
    error = "the module holds no function";
    return false;
  }
  KernelPlan plan;
  if (!readPlan(*funcs.begin(), spec, plan, error))
    return false;
  const bool decode = spec.mode == Mode::Decode;
  // Prefill: 16 query rows per warp. Decode: 16 rows (the group's heads for
  // the query tokens) per block, 16 keys of each tile per warp (the spec
  // keeps tile_kv a multiple of 16 on GPU targets).
  const int64_t tileQ = decode ? 16 : spec.tile_q;
  if (tileQ % 16 != 0) {
    error = "tile_q = " + std::to_string(tileQ) + " is not a multiple of 16";
    return false;
  }
  shape.decode = decode;
  shape.tile_q = static_cast<int>(tileQ);
  const BlockLayout layout = decode ? decodeLayout(spec) : prefillLayout(spec);
  shape.threads = static_cast<int>((decode ? spec.tile_kv : tileQ) / layout.warpRows * 32);
  if (warpSpecialised(spec))
    shape.threads = kWsConsumerThreads + kWsProducerThreads; // and a copying warpgroup
  shape.shared_bytes = static_cast<int>(sharedMemoryBytes(spec));
  shape.merge_threads = decode ? 128 : 0;
  shape.cluster_merge = decode && spec.target == Target::SM90a;
  shape.pair_shared_bytes = decode ? static_cast<int>(decodePairSharedBytes(spec, shape.threads)) : 0;

  std::ostringstream o;
  printConfig(o, spec, plan, tileQ, layout, shape);
  if (decode)
    printDecode(o, spec, plan, shape.threads, shape.pair_shared_bytes > 0);
  else if (warpSpecialised(spec))
    printPrefillWarpSpecialised(o, spec, plan);
  else
    printPrefill(o, spec, plan, layout);
  source = o.str();
  return true;
}

bool readCudaHeader(const std::string &source, Spec &spec, CudaLaunchShape &shape,
                    std::string &error) {
  std::istringstream in(source);
  std::string specLine, launchLine;
  std::getline(in, specLine);
  std::getline(in, launchLine);
  const std::string specTag = "// attnc ", launchTag = "// launch: ";
  const size_t colon = specLine.find(": ");
  if (specLine.rfind(specTag, 0) != 0 || colon == std::string::npos ||
      launchLine.rfind(launchTag, 0) != 0) {
    error = "not an attnc kernel: the source does not start with the '// attnc VERSION: SPEC' "
            "and '// launch: ...' lines attnc emit prints";
    return false;
  }
  SpecResult parsed = parseSpec(specLine.substr(colon + 2));
  if (!parsed) {
    error = "the kernel's first line: " + parsed.error->message();
    return false;
  }
  spec = *parsed.spec;
  if (!spec.isGPU()) {
    error = "the kernel's spec has target = cpu";
    return false;
  }
  shape = CudaLaunchShape{};
  shape.decode = spec.mode == Mode::Decode;
  shape.tile_q = shape.decode ? 16 : static_cast<int>(spec.tile_q);
  std::istringstream fields(launchLine.substr(launchTag.size()));
  int clusterMerge = 0;
  for (std::string field; fields >> field;) {
    const size_t eq = field.find('=');
    const std::string key = field.substr(0, eq);
    int *slot = key == "threads"             ? &shape.threads
                : key == "shared_bytes"      ? &shape.shared_bytes
                : key == "merge_threads"     ? &shape.merge_threads
                : key == "cluster_merge"     ? &clusterMerge
                : key == "pair_shared_bytes" ? &shape.pair_shared_bytes
                                             : nullptr;
    char *end = nullptr;
    const long value = eq == std::string::npos ? -1 : std::strtol(field.c_str() + eq + 1, &end, 10);
    if (!slot || value < 0 || value > (1 << 20) || *end != '\0' ||
        (slot == &clusterMerge && value > 1)) {
      error = "the kernel's launch line: '" + field + "' is not threads=N, shared_bytes=N, "
              "merge_threads=N, cluster_merge=0|1 or pair_shared_bytes=N";
      return false;
    }
    *slot = static_cast<int>(value);
  }
  shape.cluster_merge = clusterMerge == 1;
  if (shape.cluster_merge && (!shape.decode || spec.target != Target::SM90a)) {
    error = "the kernel's launch line: cluster_merge=1 is for decode kernels of target sm_90a";
    return false;
  }
  if (shape.pair_shared_bytes > 0 && (!shape.decode || spec.target != Target::SM90a)) {
    error = "the kernel's launch line: pair_shared_bytes is for decode kernels of target sm_90a";
    return false;
  }
  if (shape.threads <= 0 || shape.threads > 1024 || shape.threads % 32 != 0 ||
      (shape.decode && shape.merge_threads <= 0)) {
    error = "the kernel's launch line gives no valid thread count (a multiple of 32, at most "
            "1024" + std::string(shape.decode ? ", and merge_threads for decode)" : ")");
    return false;
  }
  return true;
}

bool emitCudaForSpec(const Spec &spec, std::string &source, CudaLaunchShape &shape,
                     std::string &error) {
  MLIRContext ctx;
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = buildTextbook(ctx, spec);
  PassManager pm(&ctx);
  buildAttnPipeline(pm);
  if (failed(pm.run(*module))) {
    error = "the attn pipeline failed for " + spec.str() + ": " + diagnostics;
    return false;
  }
  return emitCuda(*module, spec, source, shape, error);
}

} // namespace attn
