// attnc 0.1.0: mode=decode,head_dim=128,dtype=bf16,tile_q=1,tile_kv=64,mask=none,page_size=16,gqa=8,return_lse=false,target=sm_90a,split_kv=2
// launch: threads=256 shared_bytes=200704 merge_threads=128 cluster_merge=1
// Emitted from the tile-level IR of @attn_decode_hd128_bf16_q1_kv64_nomask_p16_g8_sm90a_s2. Each step names the attnc pass
// that put it there; the arithmetic is in the attn/*.cuh templates.
#include "attn/decode.cuh"

using namespace attn::kernel;

namespace {
struct Cfg {
  using Elem = __nv_bfloat16;
  static constexpr int kHeadDim = 128;
  static constexpr int kTileQ = 16;   // rows per block: the group's heads x query tokens
  static constexpr int kTileKV = 64;  // keys per KV tile, 16 per warp
  static constexpr int kGroup = 8;   // attn-share-kv-heads: query heads per KV head
  static constexpr int kPageSize = 16; // attn-page-kv: tokens per page (0: contiguous)
  static constexpr int kMask = kMaskNone;
  static constexpr long long kWindow = 0;
  static constexpr int kThreads = 128;
  static constexpr int kStages = 3; // K/V tiles in shared memory: kStages - 1 load ahead
  static constexpr int kTableAhead = 2; // attn-page-kv: block-table entries read this many tiles before their copy
};
using Elem = Cfg::Elem;
} // namespace

namespace {
/// The whole block when it runs kPipes K/V pipelines of Cfg::kThreads threads.
template <int kPipes>
struct BlockCfg : Cfg {
  static constexpr int kThreads = kPipes * Cfg::kThreads;
  static constexpr int kStages = kPipes * Cfg::kStages; // the merge's scratch: every pipeline's stages
};
} // namespace

// attn-share-kv-heads: one block per KV head; its rows are the group's query heads.
// attn-split-kv: the kv_splits loop is the grid's x and the block's kPipes pipelines
// (pipe_sync). Grid: x = split / kPipes, y = KV head, z = sequence. A block of two
// pipelines holds both splits of its (sequence, KV head): the runtime launches it
// for two splits, where it would otherwise merge them in a cluster of two blocks.
template <int kPipes>
__device__ __forceinline__ void decode_block(const Params &p) {
  using Block = BlockCfg<kPipes>;
  const int pipe = kPipes == 1 ? 0 : threadIdx.x / Cfg::kThreads;
  const unsigned tid = kPipes == 1 ? threadIdx.x : threadIdx.x % Cfg::kThreads; // in the pipeline
  const int split = blockIdx.x * kPipes + pipe, kv_head = blockIdx.y, seq = blockIdx.z, warp = tid / 32;
  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);
  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin, total_q = cu_q[p.batch];
  const int rows = static_cast<int>(q_len) * Cfg::kGroup; // row r: token r / kGroup, head r % kGroup
  // attn-page-kv: this sequence's keys and values, through its block table.
  const i64 kv_len = reinterpret_cast<const int *>(p.seq_lens_k)[seq];
  const int *table = reinterpret_cast<const int *>(p.block_table) + seq * p.block_table_stride;
  using Cache = KVCache<Elem, Cfg::kPageSize, Cfg::kHeadDim>;
  const Cache kv = {reinterpret_cast<const Elem *>(p.k), reinterpret_cast<const Elem *>(p.v), table,
                    (int)p.num_pages, (int)kv_len, p.num_kv_heads * Cfg::kHeadDim};
  // attn-page-kv: the table entries of the tiles a block that starts at key 0 copies
  // first, read now, with the sequence's length rather than after it.
  const PageRuns<Cfg>::TableStart<Cfg::kStages - 1 + Cfg::kTableAhead> start(
      table, p.block_table_stride);
  const i64 q_row = (i64)p.num_q_heads * Cfg::kHeadDim;
  const i64 first_head = (i64)kv_head * Cfg::kGroup;
  const Elem *q = reinterpret_cast<const Elem *>(p.q) + q_begin * q_row + first_head * Cfg::kHeadDim;
  extern __shared__ __align__(128) unsigned char smem[];
  Elem *smem_q = reinterpret_cast<Elem *>(smem);
  // This pipeline's stages: [kStages][K, V][kTileKV][kHeadDim].
  Elem *smem_kv = smem_q + Cfg::kTileQ * Cfg::kHeadDim + pipe * (Cfg::kStages * 2 * Cfg::kTileKV * Cfg::kHeadDim);
  float *scratch = reinterpret_cast<float *>(smem_q + Cfg::kTileQ * Cfg::kHeadDim); // the warps' states, after the loop
  auto smem_k = [&](int stage) { return smem_kv + (2 * stage) * Cfg::kTileKV * Cfg::kHeadDim; };
  auto smem_v = [&](int stage) { return smem_kv + (2 * stage + 1) * Cfg::kTileKV * Cfg::kHeadDim; };
  // attn-page-kv: the K and V rows of tile j, found through the block table from
  // the entries `read` holds: one entry and one address per run of a page's
  // tokens in the tile (PageRuns), for K and V alike.
  using Copy = PageRuns<Cfg>;
  const Copy copy(kv.token_stride, kv_head, tid);
  auto load_kv = [&](int j, int stage, const Copy::Lookups &read) {
    copy.copy_kv(smem_k(stage), smem_v(stage), kv, j * Cfg::kTileKV, read);
  };
  // attn-split-kv: one split writes the output; several write partial results
  // (normalised output and lse) to the workspace for the merge kernel, unless
  // they run as one cluster (sm_90a): then they merge in shared memory.
  float *part = reinterpret_cast<float *>(p.workspace);
  const i64 part_rows = total_q * p.num_q_heads;
  const bool clustered = cluster_place().blocks > 1;
  const bool partial = p.num_splits > 1 && !clustered;
  const DecodeSink<Block> sink = {
      reinterpret_cast<Elem *>(p.o) + q_begin * q_row + first_head * Cfg::kHeadDim,
      nullptr,
      partial ? part + (blockIdx.x * total_q + q_begin) * q_row + first_head * Cfg::kHeadDim : nullptr,
      partial ? part + p.num_splits * part_rows * Cfg::kHeadDim + blockIdx.x * part_rows +
                    q_begin * p.num_q_heads + first_head : nullptr,
      q_row, p.num_q_heads};

  // The q_tiles loop: 16 rows at a time (one pass for a decode step's few tokens).
  for (int row0 = 0; row0 < rows; row0 += Cfg::kTileQ) {
    // attn-mask-tiles: the KV tiles the query tokens of these rows see, by class.
    const i64 tok0 = row0 / Cfg::kGroup, tok1 = (min(row0 + Cfg::kTileQ, rows) - 1) / Cfg::kGroup;
    const TileRange tiles = classify_tiles(Cfg::kMask, Cfg::kWindow, tok0, tok1 - tok0 + 1,
                                           Cfg::kTileKV, q_len, kv_len);
    // attn-split-kv: this block's share of them.
    const SplitTiles mine = split_range(tiles.lo, tiles.hi, split, p.num_splits * kPipes);
    load_tile<Block, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {
      const int row = row0 + r;
      return row < rows ? q + (row / Cfg::kGroup) * q_row + (row % Cfg::kGroup) * Cfg::kHeadDim : nullptr; }, q);
    cp_async_commit(); // the query rows: a cp.async group of their own
    // attn-page-kv: the block-table entries of the first kStages - 1 tiles, read
    // together (the first copies wait on the table once, not once a tile). next[i]
    // holds those of the (i + 1)-th tile still to load: each entry is read kTableAhead
    // tiles before its copy, about as long as a read takes while the K/V copies keep
    // the memory system full, so the loop's copies do not wait on the table.
    Copy::Lookups first[Cfg::kStages - 1], next[Cfg::kTableAhead];
    if (mine.lo == 0) {
      start.fill(first, next); // read at the start
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::kStages - 1; ++i)
        first[i] = Copy::Lookups(kv, (mine.lo + i) * Cfg::kTileKV);
#pragma unroll
      for (int i = 0; i < Cfg::kTableAhead; ++i)
        next[i] = Copy::Lookups(kv, (mine.lo + Cfg::kStages - 1 + i) * Cfg::kTileKV);
    }
    // The first kStages - 1 tiles start loading.
#pragma unroll
    for (int i = 0; i < Cfg::kStages - 1; ++i) {
      if (mine.lo + i < mine.hi)
        load_kv(mine.lo + i, i, first[i]);
      cp_async_commit();
    }
    // attn-online-softmax: m = -inf, l = 0, acc = 0; each warp takes 16 keys of every tile.
    DecodeState<Block> state;
    state.init();
    cp_async_wait<Cfg::kStages - 1>(); // the query rows have arrived
    __syncthreads();
    DecodeQuery<Block> query; // every warp's A operand, in registers up to head_dim 128
    query.load(smem_q);
    // Tile j's stage, and the stage tile j + kStages - 1 loads into (tile j - 1's).
    int stage = 0, free_stage = Cfg::kStages - 1;
    for (int j = mine.lo; j < mine.hi; ++j) {
      const int ahead = j + Cfg::kStages - 1;
      cp_async_wait<Cfg::kStages - 2>(); // tile j has arrived
      // One barrier per tile: tile j is visible to every warp of the pipeline, and
      // each is done with tile j - 1, whose stage the next load takes.
      pipe_sync<kPipes, Cfg::kThreads>(pipe);
      if (ahead < mine.hi)
        load_kv(ahead, free_stage, next[0]);
      cp_async_commit();
#pragma unroll
      for (int i = 0; i + 1 < Cfg::kTableAhead; ++i)
        next[i] = next[i + 1];
      next[Cfg::kTableAhead - 1] = Copy::Lookups(kv, (ahead + Cfg::kTableAhead) * Cfg::kTileKV);
      DecodeScores<Block> s;
      query.qk(s, smem_k(stage), warp); // S = Q K^T
      // attn-mask-tiles: a partial tile: hide the keys a row's token may not see.
      if (j < tiles.full_lo || j >= tiles.full_hi)
        decode_mask<Block>(s, row0, j * Cfg::kTileKV + warp * 16, q_len, kv_len);
      // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);
      // l = alpha l + rowsum P; acc = alpha acc, skipped while no row's max grew by more than
      // 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).
      state.update(s, p.scale_log2); // the scale rides in the exponent, base 2
      decode_pv<Block>(state, s, smem_v(stage), warp); // acc += P V
      free_stage = stage;
      stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    __syncthreads();
    allow_merge_launch(); // sm_90a: the merge kernel may be scheduled (it waits for this one)
    // attn-split-kv: merge the warps' states (the block's pipelines', and a cluster's
    // splits); attn-online-softmax: out = acc / l.
    if (clustered)
      decode_store_cluster<Block>(state, scratch, row0, rows, sink);
    else
      decode_store<Block>(state, scratch, row0, rows, sink);
  }
}

// __launch_bounds__(threads, 1): with no minimum of resident blocks given, ptxas may
// cap the registers low for occupancy and spill; the accumulator needs them.
// Experiment: each of the runtime's split_kv = 2 blocks runs two pipelines (4 pieces of the
// keys), and the 2 blocks of a (sequence, KV head) merge in a cluster of two.
extern "C" __global__ void __launch_bounds__(2 * Cfg::kThreads, 1) attn_decode_hd128_bf16_q1_kv64_nomask_p16_g8_sm90a_s2(const Params p) {
  decode_block<2>(p);
}

// attn-split-kv: the merge of the splits' partial results, launched after the main
// kernel when num_splits > 1. Grid: x = query token, y = query head, z = sequence.
extern "C" __global__ void __launch_bounds__(128) attn_decode_hd128_bf16_q1_kv64_nomask_p16_g8_sm90a_s2_merge(const Params p) {
  const int token = blockIdx.x, head = blockIdx.y, seq = blockIdx.z;
  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);
  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin, total_q = cu_q[p.batch];
  if (token >= q_len)
    return;
  const i64 row = (q_begin + token) * p.num_q_heads + head, part_rows = total_q * p.num_q_heads;
  // sm_90a: launched as the kernel above's dependent; its partial results are
  // complete and visible once this returns.
  wait_for_main_kernel();
  const float *part = reinterpret_cast<const float *>(p.workspace);
  merge_splits<Cfg>(part + row * Cfg::kHeadDim, part_rows * Cfg::kHeadDim,
                    part + p.num_splits * part_rows * Cfg::kHeadDim + row, part_rows, p.num_splits,
                    reinterpret_cast<Elem *>(p.o) + row * Cfg::kHeadDim, nullptr);
}
