//===- block.cuh - The steps of one query tile, for a thread block -*- CUDA -*-===//
//
// The named steps an emitted prefill kernel calls, in the order of the
// recurrence. A thread block holds kTileQ query rows of one query head,
// kRowBlocks blocks of 16 rows per warp, in mma fragments; K and V tiles of
// kTileKV keys pass through shared memory, and each step of the recurrence
// takes kStepKV of their keys (the scores of a step live in registers).
// Cfg provides: Elem, kHeadDim, kTileQ, kTileKV, kStepKV, kRowBlocks,
// kPageSize, kMask, kWindow, kThreads.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_BLOCK_CUH
#define ATTN_TEMPLATES_BLOCK_CUH

#include "attn/mask.cuh"
#include "attn/paged.cuh"
#include "attn/params.cuh"
#include "attn/state.cuh"
#include "attn/tile.cuh"

namespace attn {
namespace kernel {

/// The rows of one sequence for one head: row(i) is query/output row i.
template <typename Elem>
struct Rows {
  Elem *base;
  long long row_stride;
  long long len;
  ATTN_DEVICE Elem *row(long long i) const { return base + i * row_stride; }
};

/// The layout of a kernel's shared tiles of kRows rows: Cfg's `Tile<kRows>`
/// when it names one (wgmma kernels: WgmmaTile), else SmemTile.
template <class...>
struct VoidOf {
  using type = void;
};
template <class Cfg, int kRows, class = void>
struct SharedTile {
  using type = SmemTile<kRows, Cfg::kHeadDim>;
};
template <class Cfg, int kRows>
struct SharedTile<Cfg, kRows, typename VoidOf<typename Cfg::template Tile<kRows>>::type> {
  using type = typename Cfg::template Tile<kRows>;
};

/// This thread's 16-byte pieces of a tile of kRows rows of kHeadDim
/// elements: the pieces are spread over the block's threads, kSteps per
/// thread, in an order fixed at compile time (so the copy loops unroll into
/// straight-line code).
template <class Cfg, int kRows>
struct TilePieces {
  using Tile = typename SharedTile<Cfg, kRows>::type;
  static constexpr unsigned kChunks = Cfg::kHeadDim / 8, kPieces = kRows * kChunks;
  static constexpr unsigned kSteps = (kPieces + Cfg::kThreads - 1) / Cfg::kThreads;
  /// False for the last step's pieces past the tile (when the block's
  /// threads do not divide the pieces evenly).
  ATTN_DEVICE static bool exists(unsigned step) {
    return kPieces % Cfg::kThreads == 0 || threadIdx.x + step * Cfg::kThreads < kPieces;
  }
  ATTN_DEVICE static int row(unsigned step) {
    return static_cast<int>((threadIdx.x + step * Cfg::kThreads) / kChunks);
  }
  ATTN_DEVICE static int chunk(unsigned step) {
    return static_cast<int>((threadIdx.x + step * Cfg::kThreads) % kChunks);
  }
};

/// Copies kRows rows into a swizzled shared tile; rows for which `row_ptr`
/// gives null are zero-filled without reading global memory (`any_valid`
/// is only an address for the instruction).
template <class Cfg, int kRows, class RowPtr>
ATTN_DEVICE void load_tile(typename Cfg::Elem *smem, RowPtr row_ptr,
                           const typename Cfg::Elem *any_valid) {
  using P = TilePieces<Cfg, kRows>;
#pragma unroll
  for (unsigned step = 0; step < P::kSteps; ++step) {
    if (!P::exists(step))
      break;
    const int r = P::row(step), chunk = P::chunk(step);
    const typename Cfg::Elem *src = row_ptr(r);
    cp_async_16(smem + P::Tile::offset(r, chunk), src ? src + chunk * 8 : any_valid, src != nullptr);
  }
}

/// Where this thread's pieces of KV tokens [t0, t0 + kRows) lie: the cache
/// slot of each piece's row, found once for the K tile and the V tile alike
/// (KVCache::slot: one block-table read per piece, so each of a row's pieces'
/// threads reads the row's entry; PageRuns reads one per run of a page).
/// copy() issues the cp.async copies of one of them; rows without a slot are
/// zero-filled.
template <class Cfg, int kRows>
struct KVTile {
  using P = TilePieces<Cfg, kRows>;
  int slot[P::kSteps]; ///< -1: zeros

  /// This thread's block-table entries for the tile (KVCache::lookup): a
  /// kernel may read them a tile early and keep them in registers, so the
  /// copy does not wait on the table.
  struct Lookups {
    int entry[P::kSteps];
    Lookups() = default;
    template <class Cache>
    ATTN_DEVICE Lookups(const Cache &kv, int t0) {
#pragma unroll
      for (unsigned step = 0; step < P::kSteps; ++step)
        entry[step] = kv.lookup(t0 + P::row(step));
    }
  };

  /// The slots from entries read earlier for the same t0.
  template <class Cache>
  ATTN_DEVICE KVTile(const Cache &kv, int t0, const Lookups &read) {
#pragma unroll
    for (unsigned step = 0; step < P::kSteps; ++step)
      slot[step] = kv.slot(t0 + P::row(step), read.entry[step]);
  }
  /// The slots, reading the entries now.
  template <class Cache>
  ATTN_DEVICE KVTile(const Cache &kv, int t0) : KVTile(kv, t0, Lookups(kv, t0)) {}

  /// K and V of KV head h into their shared tiles, each piece's address
  /// computed once for both (one cp.async group for the two).
  template <class Cache>
  ATTN_DEVICE void copy_kv(typename Cfg::Elem *smem_k, typename Cfg::Elem *smem_v, const Cache &kv,
                           int h) const {
    const typename Cfg::Elem *k = kv.k + kv.head(h), *v = kv.v + kv.head(h);
#pragma unroll
    for (unsigned step = 0; step < P::kSteps; ++step) {
      if (!P::exists(step))
        break;
      const i64 at = kv.row(slot[step], h) + P::chunk(step) * 8;
      const int dst = P::Tile::offset(P::row(step), P::chunk(step));
      cp_async_16(smem_k + dst, slot[step] < 0 ? k : k + at, slot[step] >= 0);
      cp_async_16(smem_v + dst, slot[step] < 0 ? v : v + at, slot[step] >= 0);
    }
  }

  /// K (base kv.k) or V (base kv.v) of KV head h into a shared tile: when
  /// the two must be separate cp.async groups.
  template <class Cache>
  ATTN_DEVICE void copy(typename Cfg::Elem *smem, const Cache &kv, const typename Cfg::Elem *base,
                        int h) const {
    const typename Cfg::Elem *head = base + kv.head(h);
#pragma unroll
    for (unsigned step = 0; step < P::kSteps; ++step) {
      if (!P::exists(step))
        break;
      const typename Cfg::Elem *src = head + kv.row(slot[step], h) + P::chunk(step) * 8;
      cp_async_16(smem + P::Tile::offset(P::row(step), P::chunk(step)), slot[step] < 0 ? head : src,
                  slot[step] >= 0);
    }
  }
};

/// attn-page-kv, the copy of a K/V tile whose rows come in runs of one
/// page: kRun = min(kPageSize, kTileKV) consecutive tokens share a
/// block-table entry. Thread t copies the 16-byte chunk t % kChunks of rows
/// t / kChunks + kRowStep i; when kRowStep divides kRun, each run's rows of a
/// thread hang off one table entry and one 64-bit address (a step of
/// kRowStep token rows apart), and their shared-memory offsets are
/// compile-time steps from the thread's first (kRowStep a multiple of the
/// swizzle period, 8 rows). Against KVTile, which finds the slot and
/// address of every piece, this is a few instructions per run instead of
/// per piece. kApplies says whether the tile's shape allows it (the
/// emitter then uses it; KVTile serves the others).
template <class Cfg>
struct PageRuns {
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

  /// The entries of a sequence's first kTiles tiles, read straight from its
  /// table row at the kernel's start, together with the sequence's length
  /// rather than after it, so that a block whose keys start at 0 does not
  /// wait on two reads in a row before its first copies. Entries past the
  /// row's `stride` are -1; an entry of a run past kv_len is never read
  /// through (copy_kv's rows_left).
  template <int kTiles>
  struct TableStart {
    Lookups tile[kTiles];
    ATTN_DEVICE TableStart(const int *table, int stride) {
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int run = 0; run < kRuns; ++run) {
          const int i = (t * Cfg::kTileKV + run * kRun) / kPage;
          tile[t].entry[run] = i < stride ? __ldg(table + i) : -1;
        }
    }
    /// The loop's rings of a block that starts at tile 0: its first tiles'
    /// entries, then those of the tiles after them.
    template <int kFirst, int kNext>
    ATTN_DEVICE void fill(Lookups (&first)[kFirst], Lookups (&next)[kNext]) const {
      static_assert(kFirst + kNext == kTiles, "TableStart: one entry set per tile of the rings");
#pragma unroll
      for (int t = 0; t < kFirst; ++t)
        first[t] = tile[t];
#pragma unroll
      for (int t = 0; t < kNext; ++t)
        next[t] = tile[kFirst + t];
    }
  };

  int first_row; ///< this thread's first row of a run: tid / kChunks (tid: in its pipeline)
  i64 offset;    ///< elements from a run's first row of K (or V) to this thread's first piece
  int row_step;  ///< elements between a thread's rows of one run: kRowStep token rows
  unsigned dst;  ///< byte offset of the thread's first piece in a shared tile

  /// For KV head h of the paged cache `kv` (its strides); `tid` is the
  /// thread's place among the Cfg::kThreads threads that copy the tile
  /// (threadIdx.x, unless a block runs several pipelines).
  template <class Cache>
  ATTN_DEVICE PageRuns(const Cache &kv, int h, unsigned tid)
      : first_row(tid / kChunks),
        offset((i64)(tid / kChunks) * kv.token_stride + h * kv.head_stride + (tid % kChunks) * 8),
        row_step(kRowStep * kv.token_stride),
        dst(Tile::offset(tid / kChunks, tid % kChunks) * sizeof(Elem)) {
    static_assert(kApplies, "PageRuns: the tile's rows must come in runs a thread's rows divide");
  }
  template <class Cache>
  ATTN_DEVICE PageRuns(const Cache &kv, int h) : PageRuns(kv, h, threadIdx.x) {}

  /// K and V of tokens [t0, t0 + kTileKV) into shared tiles (one cp.async
  /// group for the two); rows past kv_len or on a page outside the cache are
  /// zero-filled without a read. Branch-free: a run whose entry is not a
  /// page of the cache (-1 past kv_len, or a bad table entry) is addressed
  /// at page 0 with a source size of 0, so every address stays inside the
  /// cache and no byte of it is read.
  template <class Cache>
  ATTN_DEVICE void copy_kv(Elem *smem_k, Elem *smem_v, const Cache &kv, int t0,
                           const Lookups &read) const {
    const unsigned k_dst = smem_addr(smem_k) + dst, v_dst = smem_addr(smem_v) + dst;
#pragma unroll
    for (int run = 0; run < kRuns; ++run) {
      const int t = t0 + run * kRun, entry = read.entry[run]; // the run's first token
      const bool in_cache = static_cast<unsigned>(entry) < static_cast<unsigned>(kv.num_pages);
      // The thread's rows i * kRowStep < rows_left of the run are before kv_len.
      const int rows_left = in_cache ? kv.kv_len - (t + first_row) : 0;
      const i64 at = (i64)(in_cache ? entry : 0) * kv.page_stride + (t % kPage) * kv.token_stride + offset;
      const Elem *k = kv.k + at, *v = kv.v + at;
#pragma unroll
      for (int i = 0; i < kRun / kRowStep; ++i) {
        const bool valid = i * kRowStep < rows_left;
        const unsigned row_bytes = (run * kRun + i * kRowStep) * Cfg::kHeadDim * sizeof(Elem);
        cp_async_16(k_dst + row_bytes, k + (i64)i * row_step, valid);
        cp_async_16(v_dst + row_bytes, v + (i64)i * row_step, valid);
      }
    }
  }
};

/// The online-softmax state of one warp's rows: kRowBlocks blocks of 16.
template <class Cfg>
struct WarpState {
  RowState<Cfg::kStepKV, Cfg::kHeadDim> rows[Cfg::kRowBlocks];
  ATTN_DEVICE void init() {
#pragma unroll
    for (int r = 0; r < Cfg::kRowBlocks; ++r)
      rows[r].init();
  }
  /// c = softmax scale * log2 e (see RowState::update).
  ATTN_DEVICE void update(float (&s)[Cfg::kRowBlocks][Cfg::kStepKV / 8][4], float c) {
#pragma unroll
    for (int r = 0; r < Cfg::kRowBlocks; ++r)
      rows[r].update(s[r], c);
  }
};

/// A warp's scores for one step: 16 x kStepKV per row block.
template <class Cfg>
using Scores = float[Cfg::kRowBlocks][Cfg::kStepKV / 8][4];

/// S = Q K^T for this warp's kRowBlocks * 16 rows and a step's kStepKV keys
/// (from `smem_k`, the step's first key row in the shared tile; raw:
/// the softmax scale is applied inside the exponent). Each K fragment read from shared memory serves every row
/// block of the warp (more rows per warp: less shared-memory traffic per
/// mma). The Q fragments are re-read from shared memory for each 16 columns
/// of head_dim rather than held in registers for the whole loop: the
/// registers go to acc.
template <class Cfg>
ATTN_DEVICE void qk(Scores<Cfg> &s, const typename Cfg::Elem *smem_q, int warp,
                    const typename Cfg::Elem *smem_k) {
  using QTile = SmemTile<Cfg::kTileQ, Cfg::kHeadDim>;
  using KTile = SmemTile<Cfg::kTileKV, Cfg::kHeadDim>;
  constexpr int R = Cfg::kRowBlocks, NB = Cfg::kStepKV / 8;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
      s[r][nb][0] = s[r][nb][1] = s[r][nb][2] = s[r][nb][3] = 0.f;
  // This lane's row addresses at the first 16 columns; the others by SmemTile::step.
  unsigned q_base[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    q_base[r] = smem_addr(smem_q + QTile::offset((warp * R + r) * 16 + lane % 16, lane / 16));
  // Lanes 0-15 address key block nb, lanes 16-31 block nb + 1.
  const unsigned k_base = smem_addr(smem_k + KTile::offset((lane / 16) * 8 + lane % 8, (lane / 8) % 2));
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
    unsigned a[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
      ldmatrix_x4(a[r], QTile::step(q_base[r], 2 * kk));
#pragma unroll
    for (int nb = 0; nb < NB; nb += 2) {
      unsigned b[4]; // keys nb * 8 .. nb * 8 + 15
      ldmatrix_x4(b, KTile::step(k_base, 2 * kk) + nb * 8 * KTile::kRowBytes);
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (int r = 0; r < R; ++r) {
        Mma<typename Cfg::Elem>::run(s[r][nb], a[r], b0);
        Mma<typename Cfg::Elem>::run(s[r][nb + 1], a[r], b1);
      }
    }
  }
}

/// Hides the keys this warp's rows may not see (and keys past kv_len): -inf.
/// Positions within one sequence fit in 32 bits; 64-bit arithmetic here
/// would cost registers the accumulator needs.
template <class Cfg>
ATTN_DEVICE void apply_mask(Scores<Cfg> &s, i64 q_row0, i64 key0, i64 q_len, i64 kv_len) {
  const int lane = threadIdx.x % 32;
  const int col0 = static_cast<int>(key0) + (lane % 4) * 2;
#pragma unroll
  for (int r = 0; r < Cfg::kRowBlocks; ++r) {
    const int row0 = static_cast<int>(q_row0) + r * 16 + lane / 4;
#pragma unroll
    for (int nb = 0; nb < Cfg::kStepKV / 8; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (!is_visible<int>(Cfg::kMask, static_cast<int>(Cfg::kWindow), row0 + (i / 2) * 8,
                             col0 + nb * 8 + i % 2, static_cast<int>(q_len),
                             static_cast<int>(kv_len)))
          s[r][nb][i] = ATTN_NEG_INF;
  }
}

/// P's keys 16 kk .. 16 kk + 15 of one 16-row block (`p`: its scores in the
/// m16n8k16 accumulator layout) as the A operand of a 16-bit mma or wgmma:
/// the accumulator of two 8-key blocks is the A fragment of their 16 keys.
template <typename Elem, int kScoreBlocks>
ATTN_DEVICE void p_fragment(unsigned (&a)[4], const float (&p)[kScoreBlocks][4], int kk) {
  using M = Mma<Elem>;
  a[0] = M::pack(p[2 * kk][0], p[2 * kk][1]);
  a[1] = M::pack(p[2 * kk][2], p[2 * kk][3]);
  a[2] = M::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]);
  a[3] = M::pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
}

/// acc += P V for a step's keys (`smem_v`: the step's first value row): the
/// probabilities stay in registers as the A operand; each V fragment serves
/// every row block of the warp.
template <class Cfg>
ATTN_DEVICE void accumulate_pv(WarpState<Cfg> &state, const Scores<Cfg> &p,
                               const typename Cfg::Elem *smem_v) {
  using Tile = SmemTile<Cfg::kTileKV, Cfg::kHeadDim>;
  using M = Mma<typename Cfg::Elem>;
  constexpr int R = Cfg::kRowBlocks;
  const int lane = threadIdx.x % 32;
  // Lanes 0-15 address output columns nb * 8.., lanes 16-31 (nb + 1) * 8..
  const unsigned v_base = smem_addr(smem_v + Tile::offset(lane % 16, lane / 16));
#pragma unroll
  for (int kk = 0; kk < Cfg::kStepKV / 16; ++kk) {
    unsigned a[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
      p_fragment<typename Cfg::Elem>(a[r], p[r], kk);
#pragma unroll
    for (int nb = 0; nb < Cfg::kHeadDim / 8; nb += 2) {
      unsigned b[4]; // output columns nb * 8 .. nb * 8 + 15
      ldmatrix_x4_trans(b, Tile::step(v_base, nb) + kk * 16 * Tile::kRowBytes);
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (int r = 0; r < R; ++r) {
        M::run(state.rows[r].acc[nb], a[r], b0);
        M::run(state.rows[r].acc[nb + 1], a[r], b1);
      }
    }
  }
}

/// out = acc / l for this warp's rows that exist; lse when asked for.
template <class Cfg>
ATTN_DEVICE void store_output(WarpState<Cfg> &state, Rows<typename Cfg::Elem> out, float *lse,
                              long long lse_stride, i64 row0) {
  using M = Mma<typename Cfg::Elem>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int rb = 0; rb < Cfg::kRowBlocks; ++rb) {
    RowState<Cfg::kStepKV, Cfg::kHeadDim> &rows = state.rows[rb];
    float inv_l[2], row_lse[2];
    rows.finish(inv_l, row_lse);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const i64 row = row0 + rb * 16 + lane / 4 + r * 8;
      if (row >= out.len)
        continue; // rows past q_len are dropped
      typename Cfg::Elem *dst = out.row(row);
#pragma unroll
      for (int nb = 0; nb < Cfg::kHeadDim / 8; ++nb) {
        const unsigned packed = M::pack(rows.acc[nb][2 * r] * inv_l[r], rows.acc[nb][2 * r + 1] * inv_l[r]);
        *reinterpret_cast<unsigned *>(dst + nb * 8 + (lane % 4) * 2) = packed;
      }
      if (lse && lane % 4 == 0)
        lse[row * lse_stride] = row_lse[r];
    }
  }
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_BLOCK_CUH
