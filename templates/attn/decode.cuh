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
// Cfg provides: Elem, kHeadDim, kTileKV (16 keys per warp), kGroup, kMask,
// kWindow, kThreads (= kTileKV / 16 * 32), kStages.
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

/// One row element's share of the softmax from a part of the keys (a warp's
/// keys of every tile, or a split's range): its running max m (exp2 domain),
/// its row sum l and its output o, both relative to m.
struct RowPart {
  float m, l, o;
};

/// attn-split-kv: the rescale rule over parts that saw disjoint keys of a
/// row (the warps of a block, or the blocks of a cluster): m = max m_i,
/// l = sum exp2(m_i - m) l_i, o = sum exp2(m_i - m) o_i. `part(i)` gives
/// part i (asked twice: for the max, then for the sums; holding the parts
/// in registers instead costs the decode kernel 24 more of them).
/// attn-safe-init: a part that saw no visible key has m_i = -inf and weighs
/// exp2(-inf) = 0; when no part saw one, m = -inf and l = 0.
template <class Part>
ATTN_DEVICE RowPart combine_parts(int parts, Part part) {
  float m = ATTN_NEG_INF;
  for (int i = 0; i < parts; ++i)
    m = fmaxf(m, part(i).m);
  const float ref = m == ATTN_NEG_INF ? 0.f : m;
  RowPart all = {m, 0.f, 0.f};
  for (int i = 0; i < parts; ++i) {
    const RowPart p = part(i);
    const float weight = fast_exp2(p.m - ref);
    all.l += weight * p.l;
    all.o += weight * p.o;
  }
  return all;
}

/// Writes one element of the block's rows: out = o / l (and lse = m + log l
/// from column 0), to the output or, for a split that is merged later, to
/// its slot of the workspace (normalised, with its lse).
template <class Cfg>
ATTN_DEVICE void store_row_element(const RowPart &c, int row, int col, const DecodeSink<Cfg> &sink) {
  // attn-safe-init: no part saw a visible key: l = 0, output 0, lse -inf.
  const float o = c.l > 0.f ? c.o / c.l : 0.f;
  const float lse = c.l > 0.f ? (c.m + fast_log2(c.l)) * kLn2 : ATTN_NEG_INF;
  const int token = row / Cfg::kGroup, head = row % Cfg::kGroup;
  const i64 at = token * sink.q_row + head * Cfg::kHeadDim + col;
  const i64 lse_at = (i64)token * sink.num_q_heads + head;
  if (sink.part_out) {
    sink.part_out[at] = o;
    if (col == 0)
      sink.part_lse[lse_at] = lse;
  } else {
    sink.out[at] = Mma<typename Cfg::Elem>::from_float(o);
    if (sink.lse && col == 0)
      sink.lse[lse_at] = lse;
  }
}

/// The shared-memory scratch of the block's merge, in the K/V stages (the
/// caller has finished with them): each warp's acc rows (padded to a stride
/// of 8 (mod 32) floats: the quad's float2 stores of 4 rows then fall in
/// different banks) and (m, l) per row, then the block's merged (m, l) per
/// row for a cluster's merge. The block's merged o of an element goes where
/// warp 0's acc of it was: the thread that merges an element is the only
/// one that reads it.
template <class Cfg>
struct DecodeScratch {
  static constexpr int kWarps = Cfg::kThreads / 32, kD = Cfg::kHeadDim;
  static constexpr int kStride = kD + (40 - kD % 32) % 32;
  static constexpr int kFloats = kWarps * 16 * (kStride + 2) + 16 * 2;
  static_assert(kFloats * 4 <= Cfg::kStages * 2 * Cfg::kTileKV * kD *
                                   static_cast<int>(sizeof(typename Cfg::Elem)),
                "the merge's scratch fits in the K/V stages' shared memory");
  float *acc;      ///< [kWarps][16][kStride]; a cluster's merge: warp 0's rows hold the block's o
  float *ml;       ///< [kWarps][16][2]: m, l
  float *block_ml; ///< [16][2]: the block's merged m, l (cluster merge)
  ATTN_DEVICE explicit DecodeScratch(float *base)
      : acc(base), ml(base + kWarps * 16 * kStride), block_ml(ml + kWarps * 16 * 2) {}

  /// Each warp's state (rows of 16) into the scratch, then a barrier.
  ATTN_DEVICE void put_warps(const DecodeState<Cfg> &warp_state) const {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const RowState<16, kD> &state = warp_state.rows[0];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = lane / 4 + r * 8;
      const float l = quad_sum(state.l[r]);
      if (lane % 4 == 0) {
        ml[(warp * 16 + row) * 2] = state.m[r];
        ml[(warp * 16 + row) * 2 + 1] = l;
      }
#pragma unroll
      for (int nb = 0; nb < kD / 8; ++nb) {
        const int col = nb * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2 *>(&acc[(warp * 16 + row) * kStride + col]) =
            make_float2(state.acc[nb][2 * r], state.acc[nb][2 * r + 1]);
      }
    }
    __syncthreads();
  }

  /// The block's element (row, col) merged over its warps.
  ATTN_DEVICE RowPart warps_merged(int row, int col) const {
    return combine_parts(kWarps, [&](int w) {
      return RowPart{ml[(w * 16 + row) * 2], ml[(w * 16 + row) * 2 + 1],
                     acc[(w * 16 + row) * kStride + col]};
    });
  }
};

/// Merges the warps' states (each saw different keys of every tile) and
/// writes the block's rows. `scratch` is the shared memory of the K/V
/// stages; the caller has finished with it. attn-split-kv: the same rescale
/// rule as between splits (combine_parts).
template <class Cfg>
ATTN_DEVICE void decode_store(const DecodeState<Cfg> &warp_state, float *scratch, int row0, int rows,
                              const DecodeSink<Cfg> &sink) {
  const DecodeScratch<Cfg> merge(scratch);
  merge.put_warps(warp_state);
  for (int e = threadIdx.x; e < 16 * Cfg::kHeadDim; e += Cfg::kThreads) {
    const int row = e / Cfg::kHeadDim, col = e % Cfg::kHeadDim;
    if (row0 + row < rows)
      store_row_element<Cfg>(merge.warps_merged(row, col), row0 + row, col, sink);
  }
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

/// Every thread of every block of the cluster arrives; the writes to shared
/// memory before it are visible to the cluster's blocks after it.
ATTN_DEVICE void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

/// The float at the same shared-memory place as `local` in block `rank` of
/// the cluster.
ATTN_DEVICE float load_from_block(const float *local, unsigned rank) {
  float v = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
#else
  (void)rank; // no clusters before sm_90: the only block is this one
  v = *local;
#endif
  return v;
}

/// decode_store for a block of a cluster of splits (see cluster_place).
template <class Cfg>
ATTN_DEVICE void decode_store_cluster(const DecodeState<Cfg> &warp_state, float *scratch, int row0,
                                      int rows, const DecodeSink<Cfg> &sink) {
  constexpr int kD = Cfg::kHeadDim;
  const DecodeScratch<Cfg> merge(scratch);
  merge.put_warps(warp_state);
  for (int e = threadIdx.x; e < 16 * kD; e += Cfg::kThreads) {
    const int row = e / kD, col = e % kD;
    if (row0 + row >= rows)
      continue;
    const RowPart mine = merge.warps_merged(row, col);
    merge.acc[row * DecodeScratch<Cfg>::kStride + col] = mine.o; // warp 0's slot of the element
    if (col == 0) {
      merge.block_ml[row * 2] = mine.m;
      merge.block_ml[row * 2 + 1] = mine.l;
    }
  }
  cluster_sync(); // every block's merged rows are in its shared memory
  const ClusterPlace cluster = cluster_place();
  for (int e = cluster.rank * Cfg::kThreads + threadIdx.x; e < 16 * kD;
       e += Cfg::kThreads * cluster.blocks) {
    const int row = e / kD, col = e % kD;
    if (row0 + row >= rows)
      continue;
    const RowPart all = combine_parts(static_cast<int>(cluster.blocks), [&](int b) {
      return RowPart{load_from_block(&merge.block_ml[row * 2], b),
                     load_from_block(&merge.block_ml[row * 2 + 1], b),
                     load_from_block(&merge.acc[row * DecodeScratch<Cfg>::kStride + col], b)};
    });
    store_row_element<Cfg>(all, row0 + row, col, sink);
  }
  cluster_sync(); // no block reuses or leaves its shared memory while another reads it
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
