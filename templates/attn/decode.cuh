//===- decode.cuh - Decode: a GQA group in one block, split-KV, merge -*- CUDA -*-===//
//
// The steps an emitted decode kernel calls. A thread block serves one KV
// head of one sequence: its 16 "rows" are the query heads of the GQA group
// for the sequence's few query tokens (row r = token r / kGroup, head
// kv_head * kGroup + r % kGroup), so each K/V tile is read once for the
// whole group. The block's warps split each KV tile between them (16 keys
// per warp), each keeping its own online-softmax state; the states are
// merged at the end through shared memory. With split-KV, blocks take
// disjoint ranges of tiles and write partial results (normalised output and
// lse, fp32) that a second kernel merges.
//
// Cfg provides: Elem, kHeadDim, kTileQ, kTileKV (16 keys per warp), kGroup,
// kMask, kWindow, kThreads (= kTileKV / 16 * 32), kStages, kPageSize and
// kTableAhead (the paged copies: PageRuns, KVCache).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_DECODE_CUH
#define ATTN_TEMPLATES_DECODE_CUH

#include "attn/block.cuh"

namespace attn {
namespace kernel {

/// The view of a decode block that one warp's steps take: its 16 rows
/// against the warp's 16 keys of the tile.
template <class Cfg>
struct WarpSlice {
  using Elem = typename Cfg::Elem;
  static constexpr int kHeadDim = Cfg::kHeadDim;
  static constexpr int kTileQ = 16;
  static constexpr int kTileKV = 16;
  static constexpr int kStepKV = 16;
  static constexpr int kRowBlocks = 1;
};

template <class Cfg>
using DecodeState = WarpState<WarpSlice<Cfg>>;
template <class Cfg>
using DecodeScores = Scores<WarpSlice<Cfg>>;

/// The block's 16 query rows as the A operand of S = Q K^T. Every warp
/// multiplies the same rows by each tile's keys, so up to head_dim 128 each
/// warp keeps Q's fragments in registers (head_dim / 4 of them) for the
/// whole KV loop instead of reading them from shared memory at every tile;
/// wider heads read them from smem_q each time (their accumulator needs the
/// registers).
template <class Cfg, bool kInRegisters = (Cfg::kHeadDim <= 128)>
struct DecodeQuery {
  using QTile = SmemTile<16, Cfg::kHeadDim>;
  using KTile = SmemTile<16, Cfg::kHeadDim>; // a warp's 16 keys: rows 16 * warp ..
  static constexpr int kSteps = Cfg::kHeadDim / 16;
  unsigned frag[kInRegisters ? kSteps : 1][4];
  unsigned q_base; ///< this lane's ldmatrix address in smem_q (first 16 columns)

  /// After smem_q holds the rows (and a barrier made them visible).
  ATTN_DEVICE void load(const typename Cfg::Elem *smem_q) {
    const int lane = threadIdx.x % 32;
    q_base = smem_addr(smem_q + QTile::offset(lane % 16, lane / 16));
    if (kInRegisters)
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk)
        ldmatrix_x4(frag[kInRegisters ? kk : 0], QTile::step(q_base, 2 * kk));
  }

  /// S = Q K^T (raw) for this warp's 16 keys of the tile in shared memory
  /// (rows 16 * warp .. of a swizzled tile start a swizzle period: the
  /// warp's keys are a 16-row tile of their own).
  ATTN_DEVICE void qk(DecodeScores<Cfg> &s, const typename Cfg::Elem *smem_k, int warp) const {
    using M = Mma<typename Cfg::Elem>;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
      s[0][nb][0] = s[0][nb][1] = s[0][nb][2] = s[0][nb][3] = 0.f;
    // Lanes 0-15 address keys 0-7, lanes 16-31 keys 8-15.
    const unsigned k_base =
        smem_addr(smem_k + warp * 16 * Cfg::kHeadDim + KTile::offset((lane / 16) * 8 + lane % 8, (lane / 8) % 2));
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      unsigned a[4], b[4];
      if (kInRegisters) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          a[i] = frag[kInRegisters ? kk : 0][i];
      } else {
        ldmatrix_x4(a, QTile::step(q_base, 2 * kk));
      }
      ldmatrix_x4(b, KTile::step(k_base, 2 * kk));
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      M::run(s[0][0], a, b0);
      M::run(s[0][1], a, b1);
    }
  }
};

/// acc += P V for this warp's 16 keys.
template <class Cfg>
ATTN_DEVICE void decode_pv(DecodeState<Cfg> &state, const DecodeScores<Cfg> &p,
                           const typename Cfg::Elem *smem_v, int warp) {
  accumulate_pv<WarpSlice<Cfg>>(state, p, smem_v + warp * 16 * Cfg::kHeadDim);
}

/// Hides the keys a row's query token may not see (and keys past kv_len).
/// Rows past the group's rows are never stored and need no mask.
template <class Cfg>
ATTN_DEVICE void decode_mask(DecodeScores<Cfg> &s, int row0, i64 key0, i64 q_len, i64 kv_len) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nb = 0; nb < 2; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = row0 + lane / 4 + (i / 2) * 8;
      const int key = static_cast<int>(key0) + nb * 8 + (lane % 4) * 2 + i % 2;
      if (!is_visible<int>(Cfg::kMask, static_cast<int>(Cfg::kWindow), row / Cfg::kGroup, key,
                           static_cast<int>(q_len), static_cast<int>(kv_len)))
        s[0][nb][i] = ATTN_NEG_INF;
    }
}

/// Where the merged rows go: the output (and lse) when the block saw all of
/// the sequence's keys, or the split's slot of the workspace.
template <class Cfg>
struct DecodeSink {
  typename Cfg::Elem *out; ///< the sequence's first output row, at head kv_head * kGroup
  float *lse;              ///< likewise, or null
  float *part_out;         ///< split-KV: the split's partial outputs, or null
  float *part_lse;
  i64 q_row;               ///< elements between query tokens in out / part_out
  int num_q_heads;         ///< lse entries between query tokens
};

/// attn-split-kv: the rescale rule over parts that saw disjoint keys of a
/// row (the warps of a block, or the blocks of a cluster), part i given by
/// `m_of(i)`, its max (exp2 domain; asked twice, as the max needs them all
/// first), and `l_of(i)`, its row sum relative to that max: m = max m_i and
/// l = sum exp2(m_i - m) l_i. A part's values relative to its own max then
/// weigh exp2(m_i - m) / l in the row's normalised output (share());
/// `on_part(i, w)`, where given, sees each part's w = exp2(m_i - m) l_i as
/// it is summed. attn-safe-init: a part that saw no visible key has m_i = -inf and weighs
/// exp2(-inf) = 0; when no part saw one, m = -inf, l = 0 and every share is 0.
struct RowMerge {
  float m, l;
  float ref; ///< m, or 0 while m = -inf: exp2(-inf - 0) = 0, never exp2(-inf - -inf) = NaN
  ATTN_DEVICE float share(float m_i) const { return l > 0.f ? fast_exp2(m_i - ref) / l : 0.f; }
};
template <class PartM, class PartL, class OnPart>
ATTN_DEVICE RowMerge merge_parts(int parts, PartM m_of, PartL l_of, OnPart on_part) {
  RowMerge all = {ATTN_NEG_INF, 0.f, 0.f};
  for (int i = 0; i < parts; ++i)
    all.m = fmaxf(all.m, m_of(i));
  all.ref = all.m == ATTN_NEG_INF ? 0.f : all.m;
  for (int i = 0; i < parts; ++i) {
    const float w = fast_exp2(m_of(i) - all.ref) * l_of(i); // part i's exp2(m_i - m) l_i
    on_part(i, w);
    all.l += w;
  }
  return all;
}
template <class PartM, class PartL>
ATTN_DEVICE RowMerge merge_parts(int parts, PartM m_of, PartL l_of) {
  return merge_parts(parts, m_of, l_of, [](int, float) {});
}

/// The shared-memory scratch of the block's merge, in the K/V stages (the
/// caller has finished with them): each warp's share of the output rows
/// (padded to a stride of 8 (mod 32) floats: the quad's float2 stores of 4
/// rows then fall in different banks), each warp's (m, l) per row, the
/// block's merged (m, l) per row, and for a cluster's merge each block's
/// weight per row and the cluster's merged (m, l) per row. A cluster's
/// reading merge (decode_store_cluster_reading) puts the block's output rows
/// where warp 0's share was, for the other blocks to read: the thread that
/// sums an element is the only one of its block that reads it.
template <class Cfg>
struct DecodeScratch {
  static constexpr int kWarps = Cfg::kThreads / 32, kD = Cfg::kHeadDim;
  static constexpr int kStride = decodeScratchStride(kD);
  static constexpr int kMaxBlocks = kDecodeClusterBlocks; ///< a cluster's blocks at most
  static constexpr int kFloats = decodeScratchFloats(kWarps, kD); // (params.cuh)
  /// The floats the K/V stages hold, where the scratch lives after the loop.
  static constexpr int kStageFloats =
      Cfg::kStages * 2 * Cfg::kTileKV * kD * static_cast<int>(sizeof(typename Cfg::Elem)) / 4;
  static_assert(kFloats <= kStageFloats, "the merge's scratch fits in the K/V stages' shared memory");
  float *acc;        ///< [kWarps][16][kStride]: each warp's share; then warp 0's rows hold the block's o
  float *ml;         ///< [kWarps][16][2]: m, l
  float *block_ml;   ///< [16][2]: the block's merged m, l
  float *weight;     ///< [16][kMaxBlocks]: a cluster's merge: block b's weight in row r
  float *cluster_ml; ///< [16][2]: the cluster's merged m, l
  ATTN_DEVICE explicit DecodeScratch(float *base)
      : acc(base), ml(base + kWarps * 16 * kStride), block_ml(ml + kWarps * 16 * 2),
        weight(block_ml + 16 * 2), cluster_ml(weight + 16 * kMaxBlocks) {}

  /// attn-split-kv: the warps saw disjoint keys of every row; they merge by
  /// the rescale rule (merge_parts), once per row. Each warp publishes its
  /// (m, l); after a barrier it scales its own acc in registers by its share
  /// exp2(m_w - m) / l and writes that, so that an element of the block's
  /// normalised output is the plain sum of the warps' values (block_sum).
  /// Rows at or past `rows` (the group's heads times the query tokens,
  /// counted from the first of these 16) are never stored and are skipped
  /// where a whole half of the warp's rows is past it. Ends with a barrier.
  ATTN_DEVICE void put_warp_shares(DecodeState<Cfg> &warp_state, int rows) const {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    RowState<16, kD> &state = warp_state.rows[0];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = lane / 4 + r * 8;
      const float l = quad_sum(state.l[r]);
      if (lane % 4 == 0) {
        ml[(warp * 16 + row) * 2] = state.m[r];
        ml[(warp * 16 + row) * 2 + 1] = l;
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (r * 8 >= rows)
        break; // rows 8..15 are past the group's rows: nothing reads them
      const int row = lane / 4 + r * 8;
      const RowMerge all = merge_parts(
          kWarps, [&](int w) { return ml[(w * 16 + row) * 2]; },
          [&](int w) { return ml[(w * 16 + row) * 2 + 1]; });
      const float share = all.share(state.m[r]); // this warp's acc is relative to its m
#pragma unroll
      for (int nb = 0; nb < kD / 8; ++nb) {
        const int col = nb * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2 *>(&acc[(warp * 16 + row) * kStride + col]) =
            make_float2(state.acc[nb][2 * r] * share, state.acc[nb][2 * r + 1] * share);
      }
      if (warp == 0 && lane % 4 == 0) {
        block_ml[row * 2] = all.m;
        block_ml[row * 2 + 1] = all.l;
      }
    }
    __syncthreads();
  }

  /// The block's normalised output of elements (row, col) and (row, col + 1).
  ATTN_DEVICE float2 block_sum(int row, int col) const {
    float2 o = make_float2(0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float2 x = *reinterpret_cast<const float2 *>(&acc[(w * 16 + row) * kStride + col]);
      o.x += x.x;
      o.y += x.y;
    }
    return o;
  }

  /// attn-split-kv: the rescale rule over the blocks of a cluster
  /// (merge_parts), once for a row, from `m_of(b)` and `l_of(b)`, block b's
  /// merged (m, l): block b's rows are normalised by its own l_b, so they
  /// weigh exp2(m_b - m) l_b / l. The weights go to `weight`, the row's
  /// (m, l) to `cluster_ml`. Its loops over the blocks, here and in the
  /// cluster's store, stay loops (`#pragma unroll 1`): they run once per
  /// block, and unrolled they made ptxas take a sixth longer over the
  /// decode module.
  template <class BlockM, class BlockL>
  ATTN_DEVICE void weigh_blocks(int row, int blocks, BlockM m_of, BlockL l_of) const {
    const RowMerge all =
        merge_parts(blocks, m_of, l_of, [&](int b, float w) { weight[row * kMaxBlocks + b] = w; });
#pragma unroll 1
    for (int b = 0; b < blocks; ++b)
      weight[row * kMaxBlocks + b] = all.l > 0.f ? weight[row * kMaxBlocks + b] / all.l : 0.f;
    cluster_ml[row * 2] = all.m;
    cluster_ml[row * 2 + 1] = all.l;
  }

  /// A pair of a row's elements merged over the cluster's blocks, from
  /// `pair(b)`, block b's normalised values (after weigh_blocks and a barrier).
  template <class BlockPair>
  ATTN_DEVICE float2 weighted_sum(int row, int blocks, BlockPair pair) const {
    float2 o = make_float2(0.f, 0.f);
#pragma unroll 1
    for (int b = 0; b < blocks; ++b) {
      const float2 x = pair(b);
      const float w = weight[row * kMaxBlocks + b];
      o.x += w * x.x;
      o.y += w * x.y;
    }
    return o;
  }
};

/// Writes elements (row, col) and (row, col + 1) of the rows, col even,
/// already normalised (and the row's lse = m + log l with column 0): to the
/// output or, for a split that is merged later, to its slot of the
/// workspace (with its lse). attn-safe-init: a row that saw no visible key
/// has l = 0: output 0 (its o), lse -inf.
template <class Cfg>
ATTN_DEVICE void store_row_pair(float2 o, float m, float l, int row, int col, const DecodeSink<Cfg> &sink) {
  const int token = row / Cfg::kGroup, head = row % Cfg::kGroup;
  const i64 at = token * sink.q_row + head * Cfg::kHeadDim + col;
  const i64 lse_at = (i64)token * sink.num_q_heads + head;
  const float lse = l > 0.f ? (m + fast_log2(l)) * kLn2 : ATTN_NEG_INF;
  if (sink.part_out) {
    *reinterpret_cast<float2 *>(sink.part_out + at) = o; // 8-byte aligned: col and the strides are even
    if (col == 0)
      sink.part_lse[lse_at] = lse;
  } else {
    *reinterpret_cast<unsigned *>(sink.out + at) = Mma<typename Cfg::Elem>::pack(o.x, o.y);
    if (sink.lse && col == 0)
      sink.lse[lse_at] = lse;
  }
}

/// The block's rows once its warps' shares are in `merge`
/// (DecodeScratch::put_warp_shares): each element the sum of the shares.
template <class Cfg>
ATTN_DEVICE void store_block_rows(const DecodeScratch<Cfg> &merge, int row0, int rows,
                                  const DecodeSink<Cfg> &sink) {
  constexpr int kPairs = Cfg::kHeadDim / 2;
  for (int e = threadIdx.x; e < 16 * kPairs; e += Cfg::kThreads) {
    const int row = e / kPairs, col = 2 * (e % kPairs);
    if (row0 + row < rows)
      store_row_pair<Cfg>(merge.block_sum(row, col), merge.block_ml[row * 2], merge.block_ml[row * 2 + 1],
                          row0 + row, col, sink);
  }
}

/// Merges the warps' states (each saw different keys of every tile) and
/// writes the block's rows (DecodeScratch::put_warp_shares). `scratch` is
/// the shared memory of the K/V stages; the caller has finished with it.
/// decode_store_rows takes it where a cluster's merge cannot gather.
template <class Cfg>
ATTN_DEVICE void decode_store(DecodeState<Cfg> &warp_state, float *scratch, int row0, int rows,
                              const DecodeSink<Cfg> &sink) {
  const DecodeScratch<Cfg> merge(scratch);
  merge.put_warp_shares(warp_state, rows - row0);
  store_block_rows<Cfg>(merge, row0, rows, sink);
  if (row0 + Cfg::kTileQ < rows)
    __syncthreads(); // the scratch is reused by the next rows
}

/// attn-split-kv on sm_90a: the runtime may launch the splits of one
/// (sequence, KV head) as one thread-block cluster (grid x = the splits =
/// the cluster). Then no partial result goes through global memory and no
/// merge kernel runs: each block merges its warps into its own shared
/// memory, and after a cluster barrier each block merges a share of the
/// rows' elements across the cluster's blocks, reading theirs through
/// distributed shared memory, and writes the output. Outside a cluster (and
/// before sm_90) a block is the only one of its cluster: blocks = 1, rank 0.
struct ClusterPlace {
  unsigned blocks; ///< the cluster's blocks
  unsigned rank;   ///< this block's rank among them
};
ATTN_DEVICE ClusterPlace cluster_place() {
  ClusterPlace at = {1, 0};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n\tmov.u32 %1, %%cluster_ctarank;"
               : "=r"(at.blocks), "=r"(at.rank));
#endif
  return at;
}

/// The two halves of cluster_sync, for work in between: after arrive() a
/// thread may not touch what the other blocks may write once every thread
/// of the cluster has arrived; after wait() it sees the writes they made
/// before their arrive().
ATTN_DEVICE void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
ATTN_DEVICE void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

/// Every thread of every block of the cluster arrives; the writes to shared
/// memory before it are visible to the cluster's blocks after it.
ATTN_DEVICE void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/// The shared::cluster address of the place of `local` in block `rank` of
/// the cluster.
ATTN_DEVICE unsigned cluster_addr(const void *local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  return remote;
}
#endif

/// The float at the same shared-memory place as `local` in block `rank` of
/// the cluster.
ATTN_DEVICE float load_from_block(const float *local, unsigned rank) {
  float v = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_addr(local, rank)) : "memory");
#else
  (void)rank; // no clusters before sm_90: the only block is this one
  v = *local;
#endif
  return v;
}

/// Two adjacent floats at the same shared-memory place as `local` in block
/// `rank` of the cluster (8-byte aligned).
ATTN_DEVICE float2 load2_from_block(const float *local, unsigned rank) {
  float2 v = make_float2(0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
               : "=f"(v.x), "=f"(v.y)
               : "r"(cluster_addr(local, rank))
               : "memory");
#else
  (void)rank;
  v = *reinterpret_cast<const float2 *>(local);
#endif
  return v;
}

/// A cluster's merge (decode_store_rows) for K/V stages too small for ClusterGather: each
/// block merges its warps into its own shared memory (its normalised rows
/// and their (m, l)); after a cluster barrier, attn-split-kv: the rescale
/// rule over the blocks, once per row: the block's weight in row r is
/// exp2(m_b - m) l_b / l with m = max m_b and l = sum exp2(m_b - m) l_b
/// (attn-safe-init: a block that saw no visible key weighs 0; no block: the
/// row is 0), and each block writes a share of the rows' elements as the
/// weighted sum of the blocks' values, read through distributed shared memory.
template <class Cfg>
ATTN_DEVICE void decode_store_cluster_reading(DecodeState<Cfg> &warp_state, float *scratch,
                                              int row0, int rows, const DecodeSink<Cfg> &sink) {
  constexpr int kPairs = Cfg::kHeadDim / 2, kStride = DecodeScratch<Cfg>::kStride;
  constexpr int kMaxBlocks = DecodeScratch<Cfg>::kMaxBlocks;
  const DecodeScratch<Cfg> merge(scratch);
  merge.put_warp_shares(warp_state, rows - row0);
  for (int e = threadIdx.x; e < 16 * kPairs; e += Cfg::kThreads) {
    const int row = e / kPairs, col = 2 * (e % kPairs);
    if (row0 + row < rows) // warp 0's share of the element: read only by this thread
      *reinterpret_cast<float2 *>(&merge.acc[row * kStride + col]) = merge.block_sum(row, col);
  }
  cluster_sync(); // every block's merged rows are in its shared memory
  const ClusterPlace cluster = cluster_place();
  const int blocks = min(static_cast<int>(cluster.blocks), kMaxBlocks); // the runtime keeps it <= 16
  if (threadIdx.x < 16 && row0 + static_cast<int>(threadIdx.x) < rows) {
    const int row = threadIdx.x;
    merge.weigh_blocks(
        row, blocks, [&](int b) { return load_from_block(&merge.block_ml[row * 2], b); },
        [&](int b) { return load_from_block(&merge.block_ml[row * 2 + 1], b); });
  }
  __syncthreads(); // the rows' weights
  for (int e = cluster.rank * Cfg::kThreads + threadIdx.x; e < 16 * kPairs;
       e += Cfg::kThreads * blocks) {
    const int row = e / kPairs, col = 2 * (e % kPairs);
    if (row0 + row >= rows)
      continue;
    const float2 o = merge.weighted_sum(
        row, blocks, [&](int b) { return load2_from_block(&merge.acc[row * kStride + col], b); });
    store_row_pair<Cfg>(o, merge.cluster_ml[row * 2], merge.cluster_ml[row * 2 + 1], row0 + row, col, sink);
  }
  cluster_sync(); // no block reuses or leaves its shared memory while another reads it
}

/// Stores two floats at the same shared-memory place as `local` in block
/// `rank` of the cluster (8-byte aligned; the block itself included).
ATTN_DEVICE void store2_to_block(float *local, unsigned rank, float2 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(cluster_addr(local, rank)), "f"(v.x),
               "f"(v.y)
               : "memory");
#else
  (void)rank; // no clusters before sm_90: the only block is this one
  *reinterpret_cast<float2 *>(local) = v;
#endif
}

/// Where a cluster's merge gathers the blocks' rows, in the K/V stages after
/// DecodeScratch: the rows' elements come in chunks of kThreads pairs (a
/// thread's pair of chunk c is pair c * kThreads + threadIdx.x); block r of
/// `blocks` owns chunks r, r + blocks, ..., and every block stores its
/// normalised values of them, and its (m, l) per row, in the owner's region.
template <class Cfg>
struct ClusterGather {
  using Scratch = DecodeScratch<Cfg>;
  static constexpr int kPairs = Cfg::kHeadDim / 2;
  static constexpr int kChunks = (16 * kPairs + Cfg::kThreads - 1) / Cfg::kThreads;
  static constexpr int kMaxBlocks = Scratch::kMaxBlocks;
  /// pairs a block may own, summed over its sources: blocks * ceil(kChunks / blocks) * kThreads
  static constexpr int kMaxSlots = (kChunks + kMaxBlocks - 1) * Cfg::kThreads;
  static constexpr int kFloats = kMaxBlocks * 16 * 2 + kMaxSlots * 2;
  /// When the block's K/V stages (head_dim x tile_kv x stages) cannot hold
  /// this scratch, the blocks merge by reading the other blocks' rows instead
  /// (decode_store_cluster_reading).
  static constexpr bool kFits = Scratch::kFloats + kFloats <= Scratch::kStageFloats;
  float *ml;    ///< [kMaxBlocks][16][2]: each block's merged m, l per row
  float *pairs; ///< [blocks][owned pairs][2]: each block's values of the owned pairs
  int owned;    ///< pairs a block owns at most: ceil(kChunks / blocks) * kThreads
  ATTN_DEVICE ClusterGather(float *scratch, int blocks)
      : ml(scratch + Scratch::kFloats), pairs(ml + kMaxBlocks * 16 * 2),
        owned((kChunks + blocks - 1) / blocks * Cfg::kThreads) {}
};

/// The rows of a block of a cluster of splits (see cluster_place), once its
/// warps' shares are in `merge` (DecodeScratch::put_warp_shares) and every
/// block of the cluster is past its KV loop (the caller's cluster_wait).
/// attn-split-kv: the rescale rule over the blocks, once per row: block b's
/// weight in row r is exp2(m_b - m) l_b / l with m = max m_b and
/// l = sum exp2(m_b - m) l_b (attn-safe-init: a block that saw no visible
/// key weighs 0; when none did, the row is 0). Every block sends its
/// normalised values of each chunk of the rows, and its (m, l) per row, to
/// the block that owns the chunk (ClusterGather, through distributed shared
/// memory), and each block writes its own chunks as the weighted sum of what
/// it gathered. After the cluster barrier that makes those rows visible, no
/// block reads another's shared memory, so a block may leave as soon as it
/// has written its chunks.
template <class Cfg>
ATTN_DEVICE void store_cluster_rows(const DecodeScratch<Cfg> &merge, float *scratch, int row0, int rows,
                                    const DecodeSink<Cfg> &sink) {
  using Gather = ClusterGather<Cfg>;
  constexpr int kPairs = Gather::kPairs, kChunks = Gather::kChunks, kMaxBlocks = Gather::kMaxBlocks;
  const ClusterPlace cluster = cluster_place();
  const int blocks = min(static_cast<int>(cluster.blocks), kMaxBlocks); // the runtime keeps it <= 16
  const Gather gather(scratch, blocks);
  const int rank = static_cast<int>(cluster.rank);
  // Not unrolled: this runs once per block, and unrolled it took a tenth of
  // the decode module's NVRTC compile.
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c) { // this thread's pair of every chunk, to the chunk's owner
    const int e = c * Cfg::kThreads + threadIdx.x, row = e / kPairs;
    if (e < 16 * kPairs && row0 + row < rows)
      store2_to_block(&gather.pairs[(rank * gather.owned + c / blocks * Cfg::kThreads + threadIdx.x) * 2],
                      c % blocks, merge.block_sum(row, 2 * (e % kPairs)));
  }
  if (threadIdx.x < 16 && row0 + static_cast<int>(threadIdx.x) < rows) {
    const int row = threadIdx.x;
    const float2 ml = make_float2(merge.block_ml[row * 2], merge.block_ml[row * 2 + 1]);
#pragma unroll 1
    for (int b = 0; b < blocks; ++b)
      store2_to_block(&gather.ml[(rank * 16 + row) * 2], b, ml);
  }
  cluster_sync(); // every block's rows are in their owners' shared memory
  if (threadIdx.x < 16 && row0 + static_cast<int>(threadIdx.x) < rows) {
    const int row = threadIdx.x;
    merge.weigh_blocks(
        row, blocks, [&](int b) { return gather.ml[(b * 16 + row) * 2]; },
        [&](int b) { return gather.ml[(b * 16 + row) * 2 + 1]; });
  }
  __syncthreads(); // the rows' weights
  for (int c = rank, slot = threadIdx.x; c < kChunks; c += blocks, slot += Cfg::kThreads) {
    const int e = c * Cfg::kThreads + threadIdx.x, row = e / kPairs;
    if (e >= 16 * kPairs || row0 + row >= rows)
      continue;
    const float2 o = merge.weighted_sum(row, blocks, [&](int b) {
      return *reinterpret_cast<const float2 *>(&gather.pairs[(b * gather.owned + slot) * 2]);
    });
    store_row_pair<Cfg>(o, merge.cluster_ml[row * 2], merge.cluster_ml[row * 2 + 1], row0 + row,
                        2 * (e % kPairs), sink);
  }
}

/// The end of a decode block's rows: its warps merge (put_warp_shares) and
/// it writes them (store_block_rows) or, as a block of a cluster of splits
/// (`clustered`), merges them with the cluster's other blocks first
/// (store_cluster_rows; decode_store_cluster_reading where the K/V stages
/// are too small for ClusterGather). The warps' merge is one piece of code
/// for both ends, which keeps the kernel's NVRTC compile shorter. Two
/// cluster barriers: the first (arrived on at once, waited on after the
/// block's own merge) frees every block's K/V stages for the others' rows,
/// the second (in store_cluster_rows) makes those rows visible.
template <class Cfg>
ATTN_DEVICE void decode_store_rows(DecodeState<Cfg> &warp_state, float *scratch, int row0, int rows,
                                   const DecodeSink<Cfg> &sink, bool clustered) {
  if constexpr (!ClusterGather<Cfg>::kFits) {
    if (clustered)
      decode_store_cluster_reading<Cfg>(warp_state, scratch, row0, rows, sink);
    else
      decode_store<Cfg>(warp_state, scratch, row0, rows, sink);
  } else {
    const DecodeScratch<Cfg> merge(scratch);
    if (clustered)
      cluster_arrive(); // this block is past its KV loop (the caller's barrier): its stages are free
    merge.put_warp_shares(warp_state, rows - row0);
    if (clustered) {
      cluster_wait(); // every block is past its KV loop: their stages may take this block's rows
      store_cluster_rows<Cfg>(merge, scratch, row0, rows, sink);
    } else {
      store_block_rows<Cfg>(merge, row0, rows, sink);
    }
    if (row0 + Cfg::kTileQ < rows)
      __syncthreads(); // the scratch is reused by the next rows (no other block touches it now)
  }
}

/// attn-split-kv: a decode block may run kPipes K/V pipelines of
/// Cfg::kThreads threads each, pipeline i taking split blockIdx.x * kPipes + i
/// with its own K/V stages: then each pipeline waits on its own named
/// barrier (1 + pipe) between tiles, and the whole block only before the
/// loop and after it, where the pipelines' warps merge by the rescale rule
/// like the warps of one (DecodeScratch over all of them). With one
/// pipeline this is the block barrier.
template <int kPipes, int kPipeThreads>
ATTN_DEVICE void pipe_sync(int pipe) {
  if (kPipes == 1) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + pipe), "n"(kPipeThreads) : "memory");
  }
}

/// After the KV loop of a block of kPipes > 1 pipelines: a pipeline with
/// fewer tiles than the block's busiest (split_range's pieces differ by one
/// at most) waits on its barrier the difference more, so that every thread
/// of the block has passed as many barriers when they meet at the block
/// barrier. The hardware needs none of it (each pipeline's barrier is its
/// own), but compute-sanitizer's racecheck pairs the block's barriers by
/// their count: without it, it reports hazards between writes before
/// __syncthreads and reads after it (tests/gpu/racecheck_pipes.cu shows it
/// on a kernel of twenty lines). It costs a pipeline that is done anyway a
/// barrier or two, against keeping the race checker's verdict meaningful.
template <int kPipes, int kPipeThreads>
ATTN_DEVICE void pipe_sync_evenly(int pipe, int passed, int lo, int hi, int first_split, int splits) {
  if (kPipes == 1)
    return;
  int most = 0;
#pragma unroll
  for (int i = 0; i < kPipes; ++i) {
    const SplitTiles piece = split_range(lo, hi, first_split + i, splits);
    most = max(most, piece.hi - piece.lo);
  }
  for (int k = passed; k < most; ++k)
    pipe_sync<kPipes, kPipeThreads>(pipe);
}

/// attn-split-kv on sm_90a: the merge kernel is launched as a programmatic
/// dependent of the main kernel (the runtime's Kernel::launch). A main block
/// calls allow_merge_launch() once its KV loop is done, so the merge's blocks
/// may be scheduled while the last main blocks finish; the merge kernel
/// calls wait_for_main_kernel() before it reads anything, which returns once
/// the main kernel has completed and its writes are visible. Before sm_90
/// both are no-ops and the launches are ordinary stream order.
ATTN_DEVICE void allow_merge_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
ATTN_DEVICE void wait_for_main_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// attn-split-kv, the merge kernel's step: one output row from the splits'
/// partial outputs and lse values (fp32; split s's row at s * split_stride
/// elements of part_out and s * lse_stride of part_lse).
template <class Cfg>
ATTN_DEVICE void merge_splits(const float *part_out, i64 split_stride, const float *part_lse,
                              i64 lse_stride, int splits, typename Cfg::Elem *out, float *lse) {
  const float merged = merged_lse(part_lse, splits, lse_stride);
  for (int col = threadIdx.x; col < Cfg::kHeadDim; col += blockDim.x) {
    float o = 0.f;
    // attn-safe-init: every split empty: merged = -inf and the row is 0.
    if (merged != ATTN_NEG_INF)
      for (int s = 0; s < splits; ++s)
        o += expf(part_lse[s * lse_stride] - merged) * part_out[s * split_stride + col];
    out[col] = Mma<typename Cfg::Elem>::from_float(o);
  }
  if (lse && threadIdx.x == 0)
    *lse = merged;
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_DECODE_CUH
