//===- EmitPrefill.cpp - The prefill blocks, printed as CUDA ----------------===//
//
// The three prefill blocks: mma.sync (attn/block.cuh) and wgmma
// (attn/wgmma.cuh), whose warps all copy and compute, and the
// warp-specialised wgmma block (attn/warpspec.cuh), whose last warpgroup
// only copies. Each kernel's body is the recurrence as a short list of named
// steps, each with a comment naming the pass that put it there.
//
//===----------------------------------------------------------------------===//

#include "EmitCudaParts.h"

namespace attn {
namespace emit {
namespace {
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
    << "  // Prefill gives each query head blocks of its own (a tile of a group's rows would\n"
    << "  // hold fewer query tokens), so the group's blocks load the same KV tiles and the L2\n"
    << "  // serves the repeats; decode's block holds the whole group and loads each tile once.\n"
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
} // namespace

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
    << "      // 8 in base 2, a factor of 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).\n"
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
/// `auto`'s choice on sm_90a for head_dim 128 on 128-row tiles and head_dim 64
/// on 192-row tiles, `warpSpecialised` in Spec.cpp):
/// the copying warpgroup fills a ring of K/V stages while the computing
/// warpgroups (two or three) run the recurrence over them, each stage's
/// mbarriers between.
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
    << "    // The last warpgroup copies: tile tile_lo + i into stage i % kStages, once\n"
    << "    // the computing warps have freed it.\n"
    << "    producer_registers<Cfg>();\n"
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
    << "    cp_async_wait_all(); // no copy outlives its thread (they were never committed)\n"
    << "    return;\n"
    << "  }\n\n"
    << "  // The other warpgroups compute: 64 query rows each, 16 per warp.\n"
    << "  consumer_registers<Cfg>();\n"
    << "  // attn-online-softmax: the query tile is loaded once (rows past q_len read as zero).\n"
    << "  load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {\n"
    << "    return q_start + r < q_len ? q + (q_start + r) * q_row : nullptr; }, q);\n"
    << "  cp_async_commit();\n"
    << "  cp_async_wait<0>();\n"
    << "  fence_async_shared(); // the copies, visible to wgmma's shared-memory reads\n"
    << "  computing_sync<Cfg>();\n"
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
    << "    // 8 in base 2, a factor of 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).\n"
    << "    // The scale rides in the exponent, in base 2: exp2(S * scale * log2 e - m).\n"
    << "    state.update(s, p.scale_log2);\n"
    << "    accumulate_pv_wgmma<Cfg>(state, s, smem_v + stage * Cfg::kTileKV * Cfg::kHeadDim); // acc += P V\n"
    << "    ring.release(i); // this warp is done with the stage\n"
    << "  }\n";
  printPrefillStore(o, plan);
}

} // namespace emit
} // namespace attn
