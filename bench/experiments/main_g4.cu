// attnc 0.1.0: mode=decode,head_dim=128,dtype=bf16,tile_q=1,tile_kv=64,mask=none,page_size=16,gqa=4,return_lse=false,target=sm_90a,split_kv=auto
// launch: threads=128 shared_bytes=102400 merge_threads=128
// Experiment: the decode kernel of commit 3d553fb (main), with its PageRuns copy inlined,
// for a same-run comparison against the kernel emitted now.
// Emitted from the tile-level IR of @attn_decode_hd128_bf16_q1_kv64_nomask_p16_g4_sm90a_sauto. Each step names the attnc pass
// that put it there; the arithmetic is in the attn/*.cuh templates.
#include "attn/decode.cuh"

using namespace attn::kernel;

namespace {
struct Cfg {
  using Elem = __nv_bfloat16;
  static constexpr int kHeadDim = 128;
  static constexpr int kTileQ = 16;   // rows per block: the group's heads x query tokens
  static constexpr int kTileKV = 64;  // keys per KV tile, 16 per warp
  static constexpr int kGroup = 4;   // attn-share-kv-heads: query heads per KV head
  static constexpr int kPageSize = 16; // attn-page-kv: tokens per page (0: contiguous)
  static constexpr int kMask = kMaskNone;
  static constexpr long long kWindow = 0;
  static constexpr int kThreads = 128;
  static constexpr int kStages = 3; // K/V tiles in shared memory: kStages - 1 load ahead
};
using Elem = Cfg::Elem;
} // namespace

namespace {
template <class Cfg>
struct PageRunsMain {
  using Elem = typename Cfg::Elem;
  using Tile = SmemTile<Cfg::kTileKV, Cfg::kHeadDim>;
  static constexpr int kChunks = Cfg::kHeadDim / 8;
  static constexpr int kRowStep = Cfg::kThreads / kChunks; ///< token rows between a thread's pieces
  static constexpr int kPage = Cfg::kPageSize > 0 ? Cfg::kPageSize : 1;
  static constexpr int kRun = kPage < Cfg::kTileKV ? kPage : Cfg::kTileKV;
  static constexpr int kRuns = Cfg::kTileKV / kRun; ///< table entries per tile
  static constexpr bool kApplies =
      Cfg::kPageSize > 0 && Cfg::kThreads % kChunks == 0 && kRowStep > 0 &&
      kRun % kRowStep == 0 && Cfg::kTileKV % kRun == 0 && kPage % kRun == 0 &&
      (kRowStep % 8 == 0 || kChunks % 8 != 0);

  /// The table entries of one tile's runs (KVCache::lookup of each run's
  /// first token), read a tile before the copy that needs them.
  struct Lookups {
    int entry[kRuns];
    Lookups() = default;
    template <class Cache>
    ATTN_DEVICE Lookups(const Cache &kv, int t0) {
#pragma unroll
      for (int run = 0; run < kRuns; ++run)
        entry[run] = kv.lookup(t0 + run * kRun);
    }
  };

  int first_row; ///< this thread's first row of a run: threadIdx.x / kChunks
  int offset;    ///< elements from a run's first row of K (or V) to this thread's first piece
  int row_step;  ///< elements between a thread's rows of one run: kRowStep token rows
  unsigned dst;  ///< byte offset of the thread's first piece in a shared tile

  /// For KV head h of a cache with token_stride elements between tokens.
  ATTN_DEVICE PageRunsMain(int token_stride, int h)
      : first_row(threadIdx.x / kChunks),
        offset((threadIdx.x / kChunks) * token_stride + h * Cfg::kHeadDim + (threadIdx.x % kChunks) * 8),
        row_step(kRowStep * token_stride),
        dst(Tile::offset(threadIdx.x / kChunks, threadIdx.x % kChunks) * sizeof(Elem)) {
    static_assert(kApplies, "PageRuns: the tile's rows must come in runs a thread's rows divide");
  }

  /// K and V of tokens [t0, t0 + kTileKV) into shared tiles (one cp.async
  /// group for the two); rows past kv_len or on a page outside the cache are
  /// zero-filled without a read.
  template <class Cache>
  ATTN_DEVICE void copy_kv(Elem *smem_k, Elem *smem_v, const Cache &kv, int t0,
                           const Lookups &read) const {
    const unsigned k_dst = smem_addr(smem_k) + dst, v_dst = smem_addr(smem_v) + dst;
#pragma unroll
    for (int run = 0; run < kRuns; ++run) {
      const int slot = kv.slot(t0 + run * kRun, read.entry[run]); // the run's first token
      // The thread's rows i * kRowStep < rows_left of the run are before kv_len.
      const int rows_left = kv.kv_len - (t0 + run * kRun + first_row);
      const i64 at = (i64)slot * kv.token_stride + offset;
#pragma unroll
      for (int i = 0; i < kRun / kRowStep; ++i) {
        const bool valid = slot >= 0 && i * kRowStep < rows_left;
        const unsigned row_bytes = (run * kRun + i * kRowStep) * Cfg::kHeadDim * sizeof(Elem);
        cp_async_16(k_dst + row_bytes, valid ? kv.k + at + i * row_step : kv.k, valid);
        cp_async_16(v_dst + row_bytes, valid ? kv.v + at + i * row_step : kv.v, valid);
      }
    }
  }
};
} // namespace

// __launch_bounds__(threads, 1): with no minimum of resident blocks given, ptxas may
// cap the registers low for occupancy and spill; the accumulator needs them.
extern "C" __global__ void __launch_bounds__(Cfg::kThreads, 1) attn_decode_hd128_bf16_q1_kv64_nomask_p16_g4_sm90a_sauto(const Params p) {
  // attn-share-kv-heads: one block per KV head; its rows are the group's query heads.
  // attn-split-kv: the kv_splits loop is the grid's x. Grid: x = split, y = KV head,
  // z = sequence.
  const int split = blockIdx.x, kv_head = blockIdx.y, seq = blockIdx.z, warp = threadIdx.x / 32;
  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);
  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin, total_q = cu_q[p.batch];
  const int rows = static_cast<int>(q_len) * Cfg::kGroup; // row r: token r / kGroup, head r % kGroup
  // attn-page-kv: this sequence's keys and values, through its block table.
  const i64 kv_len = reinterpret_cast<const int *>(p.seq_lens_k)[seq];
  const int *table = reinterpret_cast<const int *>(p.block_table) + seq * p.block_table_stride;
  using Cache = KVCache<Elem, Cfg::kPageSize, Cfg::kHeadDim>;
  const Cache kv = {reinterpret_cast<const Elem *>(p.k), reinterpret_cast<const Elem *>(p.v), table,
                    (int)p.num_pages, (int)kv_len, p.num_kv_heads * Cfg::kHeadDim};
  const i64 q_row = (i64)p.num_q_heads * Cfg::kHeadDim;
  const i64 first_head = (i64)kv_head * Cfg::kGroup;
  const Elem *q = reinterpret_cast<const Elem *>(p.q) + q_begin * q_row + first_head * Cfg::kHeadDim;
  extern __shared__ __align__(128) unsigned char smem[];
  Elem *smem_q = reinterpret_cast<Elem *>(smem);
  Elem *smem_kv = smem_q + Cfg::kTileQ * Cfg::kHeadDim; // [kStages][K, V][kTileKV][kHeadDim]
  float *scratch = reinterpret_cast<float *>(smem_kv);   // the warps' states, after the loop
  auto smem_k = [&](int stage) { return smem_kv + (2 * stage) * Cfg::kTileKV * Cfg::kHeadDim; };
  auto smem_v = [&](int stage) { return smem_kv + (2 * stage + 1) * Cfg::kTileKV * Cfg::kHeadDim; };
  // attn-page-kv: the K and V rows of tile j, found through the block table from
  // the entries `read` holds: one entry and one address per run of a page's
  // tokens in the tile (PageRuns), for K and V alike.
  using Copy = PageRunsMain<Cfg>;
  const Copy copy(kv.token_stride, kv_head);
  auto load_kv = [&](int j, int stage, const Copy::Lookups &read) {
    copy.copy_kv(smem_k(stage), smem_v(stage), kv, j * Cfg::kTileKV, read);
  };
  // attn-split-kv: one split writes the output; several write partial results
  // (normalised output and lse) to the workspace for the merge kernel.
  float *part = reinterpret_cast<float *>(p.workspace);
  const i64 part_rows = total_q * p.num_q_heads;
  const bool partial = p.num_splits > 1;
  const DecodeSink<Cfg> sink = {
      reinterpret_cast<Elem *>(p.o) + q_begin * q_row + first_head * Cfg::kHeadDim,
      nullptr,
      partial ? part + (split * total_q + q_begin) * q_row + first_head * Cfg::kHeadDim : nullptr,
      partial ? part + p.num_splits * part_rows * Cfg::kHeadDim + split * part_rows +
                    q_begin * p.num_q_heads + first_head : nullptr,
      q_row, p.num_q_heads};

  // The q_tiles loop: 16 rows at a time (one pass for a decode step's few tokens).
  for (int row0 = 0; row0 < rows; row0 += Cfg::kTileQ) {
    // attn-mask-tiles: the KV tiles the query tokens of these rows see, by class.
    const i64 tok0 = row0 / Cfg::kGroup, tok1 = (min(row0 + Cfg::kTileQ, rows) - 1) / Cfg::kGroup;
    const TileRange tiles = classify_tiles(Cfg::kMask, Cfg::kWindow, tok0, tok1 - tok0 + 1,
                                           Cfg::kTileKV, q_len, kv_len);
    // attn-split-kv: this block's share of them.
    const SplitTiles mine = split_range(tiles.lo, tiles.hi, split, p.num_splits);
    load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {
      const int row = row0 + r;
      return row < rows ? q + (row / Cfg::kGroup) * q_row + (row % Cfg::kGroup) * Cfg::kHeadDim : nullptr; }, q);
    cp_async_commit(); // the query rows: a cp.async group of their own
    // attn-page-kv: the block-table entries of the first kStages tiles, read together
    // (the first copies wait on the table once, not once a tile); `next` holds those
    // of the next tile to load, a tile early: the loop's copies never wait on it.
    Copy::Lookups first[Cfg::kStages - 1];
#pragma unroll
    for (int i = 0; i < Cfg::kStages - 1; ++i)
      first[i] = Copy::Lookups(kv, (mine.lo + i) * Cfg::kTileKV);
    Copy::Lookups next(kv, (mine.lo + Cfg::kStages - 1) * Cfg::kTileKV);
    // The first kStages - 1 tiles start loading.
#pragma unroll
    for (int i = 0; i < Cfg::kStages - 1; ++i) {
      if (mine.lo + i < mine.hi)
        load_kv(mine.lo + i, i, first[i]);
      cp_async_commit();
    }
    // attn-online-softmax: m = -inf, l = 0, acc = 0; each warp takes 16 keys of every tile.
    DecodeState<Cfg> state;
    state.init();
    cp_async_wait<Cfg::kStages - 1>(); // the query rows have arrived
    __syncthreads();
    DecodeQuery<Cfg> query; // every warp's A operand, in registers up to head_dim 128
    query.load(smem_q);
    for (int j = mine.lo; j < mine.hi; ++j) {
      const int stage = (j - mine.lo) % Cfg::kStages, ahead = j + Cfg::kStages - 1;
      cp_async_wait<Cfg::kStages - 2>(); // tile j has arrived
      // One barrier per tile: tile j is visible to every warp, and every warp is
      // done with tile j - 1, whose stage the next load takes.
      __syncthreads();
      if (ahead < mine.hi)
        load_kv(ahead, (ahead - mine.lo) % Cfg::kStages, next);
      cp_async_commit();
      next = Copy::Lookups(kv, (ahead + 1) * Cfg::kTileKV); // used at the next tile
      DecodeScores<Cfg> s;
      query.qk(s, smem_k(stage), warp); // S = Q K^T
      // attn-mask-tiles: a partial tile: hide the keys a row's token may not see.
      if (j < tiles.full_lo || j >= tiles.full_hi)
        decode_mask<Cfg>(s, row0, j * Cfg::kTileKV + warp * 16, q_len, kv_len);
      // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);
      // l = alpha l + rowsum P; acc = alpha acc, skipped while no row's max grew by more than
      // 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).
      state.update(s, p.scale_log2); // the scale rides in the exponent, base 2
      decode_pv<Cfg>(state, s, smem_v(stage), warp); // acc += P V
    }
    cp_async_wait<0>();
    __syncthreads();
    allow_merge_launch(); // sm_90a: the merge kernel may be scheduled (it waits for this one)
    // attn-split-kv: merge the warps' states; attn-online-softmax: out = acc / l.
    decode_store<Cfg>(state, scratch, row0, rows, sink);
  }
}

// attn-split-kv: the merge of the splits' partial results, launched after the kernel
// above when num_splits > 1. Grid: x = query token, y = query head, z = sequence.
extern "C" __global__ void __launch_bounds__(128) attn_decode_hd128_bf16_q1_kv64_nomask_p16_g4_sm90a_sauto_merge(const Params p) {
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
