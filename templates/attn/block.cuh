//===- block.cuh - The steps of one query tile, for a thread block -*- CUDA -*-===//
//
// The named steps an emitted prefill kernel calls, in the order of the
// recurrence. A thread block holds kTileQ query rows of one query head,
// 16 rows per warp, in mma fragments; K and V tiles pass through shared
// memory. Cfg provides: Elem, kHeadDim, kTileQ, kTileKV, kPageSize, kMask,
// kWindow, kThreads.
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

/// Copies kRows rows into a swizzled shared tile, 16 bytes per thread and
/// step; rows for which `row_ptr` gives null are zero-filled without reading
/// global memory (`any_valid` is only an address for the instruction).
template <class Cfg, int kRows, class RowPtr>
ATTN_DEVICE void load_tile(typename Cfg::Elem *smem, RowPtr row_ptr,
                           const typename Cfg::Elem *any_valid) {
  using Tile = SmemTile<kRows, Cfg::kHeadDim>;
  constexpr int kChunks = Cfg::kHeadDim / 8;
  for (int c = threadIdx.x; c < kRows * kChunks; c += Cfg::kThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    const typename Cfg::Elem *src = row_ptr(r);
    cp_async_16(smem + Tile::offset(r, chunk), src ? src + chunk * 8 : any_valid, src != nullptr);
  }
}

/// S = Q K^T for this warp's 16 rows and the tile's keys, times
/// scale * log2 e. The Q fragments are re-read from shared memory for each
/// 16 columns of head_dim rather than held in registers for the whole loop:
/// the registers go to acc, which large head dims need.
template <class Cfg>
ATTN_DEVICE void qk(float (&s)[Cfg::kTileKV / 8][4], const typename Cfg::Elem *smem_q, int warp,
                    const typename Cfg::Elem *smem_k, float scale_log2) {
  using QTile = SmemTile<Cfg::kTileQ, Cfg::kHeadDim>;
  using KTile = SmemTile<Cfg::kTileKV, Cfg::kHeadDim>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nb = 0; nb < Cfg::kTileKV / 8; ++nb)
    s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
    unsigned a[4];
    ldmatrix_x4(a, smem_q + QTile::offset(warp * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
    for (int nb = 0; nb < Cfg::kTileKV / 8; ++nb) {
      unsigned b[2];
      ldmatrix_x2(b, smem_k + KTile::offset(nb * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
      Mma<typename Cfg::Elem>::run(s[nb], a, b);
    }
  }
#pragma unroll
  for (int nb = 0; nb < Cfg::kTileKV / 8; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      s[nb][i] *= scale_log2;
}

/// Hides the keys this warp's rows may not see (and keys past kv_len): -inf.
/// Positions within one sequence fit in 32 bits; 64-bit arithmetic here
/// would cost registers the accumulator needs.
template <class Cfg>
ATTN_DEVICE void apply_mask(float (&s)[Cfg::kTileKV / 8][4], i64 q_row0, i64 key0, i64 q_len,
                            i64 kv_len) {
  const int lane = threadIdx.x % 32;
  const int row0 = static_cast<int>(q_row0) + lane / 4;
  const int col0 = static_cast<int>(key0) + (lane % 4) * 2;
#pragma unroll
  for (int nb = 0; nb < Cfg::kTileKV / 8; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (!is_visible<int>(Cfg::kMask, static_cast<int>(Cfg::kWindow), row0 + (i / 2) * 8,
                           col0 + nb * 8 + i % 2, static_cast<int>(q_len),
                           static_cast<int>(kv_len)))
        s[nb][i] = ATTN_NEG_INF;
}

/// acc += P V: the probabilities stay in registers as the A operand.
template <class Cfg>
ATTN_DEVICE void accumulate_pv(RowState<Cfg::kTileKV, Cfg::kHeadDim> &state,
                               const float (&p)[Cfg::kTileKV / 8][4],
                               const typename Cfg::Elem *smem_v) {
  using Tile = SmemTile<Cfg::kTileKV, Cfg::kHeadDim>;
  using M = Mma<typename Cfg::Elem>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < Cfg::kTileKV / 16; ++kk) {
    unsigned a[4] = {M::pack(p[2 * kk][0], p[2 * kk][1]), M::pack(p[2 * kk][2], p[2 * kk][3]),
                     M::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                     M::pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int nb = 0; nb < Cfg::kHeadDim / 8; ++nb) {
      unsigned b[2];
      const int key = kk * 16 + lane % 16;
      ldmatrix_x2_trans(b, smem_v + Tile::offset(key, nb));
      M::run(state.acc[nb], a, b);
    }
  }
}

/// out = acc / l for this warp's rows that exist; lse when asked for.
template <class Cfg>
ATTN_DEVICE void store_output(RowState<Cfg::kTileKV, Cfg::kHeadDim> &state,
                              Rows<typename Cfg::Elem> out, float *lse, long long lse_stride,
                              i64 row0) {
  using M = Mma<typename Cfg::Elem>;
  const int lane = threadIdx.x % 32;
  float inv_l[2], row_lse[2];
  state.finish(inv_l, row_lse);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const i64 row = row0 + lane / 4 + r * 8;
    if (row >= out.len)
      continue; // rows past q_len are dropped
    typename Cfg::Elem *dst = out.row(row);
#pragma unroll
    for (int nb = 0; nb < Cfg::kHeadDim / 8; ++nb) {
      const unsigned packed = M::pack(state.acc[nb][2 * r] * inv_l[r], state.acc[nb][2 * r + 1] * inv_l[r]);
      *reinterpret_cast<unsigned *>(dst + nb * 8 + (lane % 4) * 2) = packed;
    }
    if (lse && lane % 4 == 0)
      lse[row * lse_stride] = row_lse[r];
  }
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_BLOCK_CUH
