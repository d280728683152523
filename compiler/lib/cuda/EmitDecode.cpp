//===- EmitDecode.cpp - The decode block, printed as CUDA -------------------===//
//
// The decode kernel (attn/decode.cuh): a block per (split, KV head,
// sequence) streams its K/V tiles through the block table (or, page_size 0,
// from a contiguous cache, sequences by cu_seqlens_k); the merge of the
// splits' partial results; and on sm_90a the pair kernel, two splits as the
// two pipelines of one block.
//
//===----------------------------------------------------------------------===//

#include "EmitCudaParts.h"

#include "attn/params.cuh"

namespace attn {
namespace emit {

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
    << "// (pipe_sync). Grid: x = split / kPipes, y = KV head, z = sequence.";
  if (pairs)
    o << " The runtime\n"
      << "// launches blocks of two pipelines for two splits, where they would otherwise merge\n"
      << "// in a cluster of two blocks, and for four as clusters of two such blocks, where\n"
      << "// clusters of four would not all fit on the device at once.\n";
  else
    o << " This kernel's\n"
      << "// blocks run one pipeline each (kPipes = 1).\n";
  o
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
      << "  const Copy copy(kv, kv_head, tid);\n"
      << "  auto load_kv = [&](int j, int stage, const Copy::Lookups &read) {\n"
      << "    copy.copy_kv(smem_k(stage), smem_v(stage), kv, j * Cfg::kTileKV, read);\n"
      << "  };\n";
  else
    o << (plan.paged
              ? "  // attn-page-kv: the K and V rows of tile j, found through the block table\n"
                "  // (KVCache::slot) once for both, from the table entries `read` holds.\n"
              : "  // The K and V rows of tile j in a contiguous cache: token t's row at t times\n"
                "  // the token stride (KVCache::slot is t itself), once for both; `read` holds\n"
                "  // each row's token (a contiguous cache has no table to read).\n")
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
    << "  // The q_tiles loop: 16 rows at a time, one pass over the block's keys each (one pass\n"
    << "  // while query tokens x the group's heads are at most 16; more read the keys again).\n"
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
    << "    cp_async_commit(); // the query rows: a cp.async group of their own\n";
  if (plan.paged)
    o << "    // attn-page-kv: the block-table entries of the first kStages - 1 tiles, read\n"
      << "    // together (the first copies wait on the table once, not once a tile). next[i]\n"
      << "    // holds those of the (i + 1)-th tile still to load: each entry is read kTableAhead\n"
      << "    // tiles before its copy, about as long as a read takes while the K/V copies keep\n"
      << "    // the memory system full, so the loop's copies do not wait on the table.\n";
  else
    o << "    // The rows of the first kStages - 1 tiles and of the next: a contiguous cache's\n"
      << "    // Lookups only name each row's token (no memory is read for them).\n";
  o << "    Copy::Lookups first[Cfg::kStages - 1], next[Cfg::kTableAhead];\n";
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
    << "      // 8 in base 2, a factor of 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).\n"
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
    << "    decode_store_rows<Block>(state, scratch, row0, rows, sink, clustered);\n"
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

} // namespace emit
} // namespace attn
