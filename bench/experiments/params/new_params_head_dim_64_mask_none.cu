// attnc 0.1.0: mode=prefill,head_dim=64,dtype=bf16,tile_q=64,tile_kv=128,mask=none,page_size=0,gqa=1,return_lse=false,target=sm_90a
// launch: threads=128 shared_bytes=73728
// Emitted from the tile-level IR of @attn_prefill_hd64_bf16_q64_kv128_nomask_p0_g1_sm90a. Each step names the attnc pass
// that put it there; the arithmetic is in the attn/*.cuh templates.
#include "attn/wgmma.cuh"

using namespace attn::kernel;

namespace {
struct Cfg {
  using Elem = __nv_bfloat16;
  static constexpr int kHeadDim = 64;
  static constexpr int kTileQ = 64;   // query rows per thread block
  static constexpr int kTileKV = 128;  // keys per KV tile
  static constexpr int kGroup = 1;   // attn-share-kv-heads: query heads per KV head
  static constexpr int kPageSize = 0; // attn-page-kv: tokens per page (0: contiguous)
  static constexpr int kMask = kMaskNone;
  static constexpr long long kWindow = 0;
  static constexpr int kThreads = 128;
  static constexpr int kStepKV = 128;  // keys per step of the recurrence (its scores stay in registers)
  static constexpr int kStages = 2;  // K/V tiles in shared memory: the next loads during this one
  static constexpr int kWarpRows = 16;  // query rows per warp: each K/V fragment serves them all
  static constexpr int kRowBlocks = kWarpRows / 16;
  // Shared tiles in the 128-byte swizzle wgmma reads (attn/wgmma.cuh).
  template <int kRows>
  using Tile = WgmmaTile<kRows, kHeadDim>;
};
using Elem = Cfg::Elem;
} // namespace

// __launch_bounds__(threads, 1): with no minimum of resident blocks given, ptxas may
// cap the registers low for occupancy and spill; the accumulator needs them.
extern "C" __global__ void __launch_bounds__(Cfg::kThreads, 1) attn_prefill_hd64_bf16_q64_kv128_nomask_p0_g1_sm90a(const Params p) {
  // The heads and q_tiles loops are the grid: x = query tile, y = query head, z = sequence.
  const int head = blockIdx.y, seq = blockIdx.z, warp = threadIdx.x / 32;
  const int *cu_q = reinterpret_cast<const int *>(p.cu_seqlens_q);
  const i64 q_begin = cu_q[seq], q_len = cu_q[seq + 1] - q_begin;
  const i64 q_start = (i64)blockIdx.x * Cfg::kTileQ;
  if (q_start >= q_len)
    return;
  // attn-share-kv-heads: query heads kGroup * h .. kGroup * h + kGroup - 1 read KV head h.
  const int kv_head = head / Cfg::kGroup;
  const int *cu_k = reinterpret_cast<const int *>(p.cu_seqlens_k);
  const i64 kv_begin = cu_k[seq], kv_len = cu_k[seq + 1] - kv_begin;
  const i64 token = (i64)p.num_kv_heads * Cfg::kHeadDim;
  using Cache = KVCache<Elem, 0, Cfg::kHeadDim>;
  const Cache kv = {reinterpret_cast<const Elem *>(p.k) + kv_begin * token,
                    reinterpret_cast<const Elem *>(p.v) + kv_begin * token, nullptr, 0, (int)kv_len,
                    (int)token, 0, 0};
  const i64 q_row = (i64)p.num_q_heads * Cfg::kHeadDim;
  const Elem *q = reinterpret_cast<const Elem *>(p.q) + q_begin * q_row + head * Cfg::kHeadDim;
  // wgmma's 128-byte swizzle repeats every 1024 bytes: the tiles start on that
  // boundary (the dynamic shared memory does; a launch that broke it would stop here).
  extern __shared__ __align__(1024) unsigned char smem[];
  if (smem_addr(smem) % 1024 != 0)
    __trap();
  Elem *smem_q = reinterpret_cast<Elem *>(smem);
  Elem *smem_k = smem_q + Cfg::kTileQ * Cfg::kHeadDim; // [kStages][kTileKV][kHeadDim]
  Elem *smem_v = smem_k + Cfg::kStages * Cfg::kTileKV * Cfg::kHeadDim;
  // attn-mask-tiles: which keys some query of this block sees, by class, in steps of
  // kStepKV keys: the IR's KV tiles, taken in the steps their scores fit in registers.
  const TileRange steps = classify_tiles(Cfg::kMask, Cfg::kWindow, q_start, Cfg::kTileQ,
                                         Cfg::kStepKV, q_len, kv_len);
  constexpr int kSteps = Cfg::kTileKV / Cfg::kStepKV; // steps per K/V tile
  const int tile_lo = steps.lo / kSteps, tile_hi = (steps.hi + kSteps - 1) / kSteps;

  // attn-online-softmax: the query tile is loaded once (rows past q_len read as zero).
  load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {
    return q_start + r < q_len ? q + (q_start + r) * q_row : nullptr; }, q);
  cp_async_commit();
  // The K and V rows of tile j; rows past kv_len read as zero.
  auto load_kv = [&](int j, int stage) {
    const KVTile<Cfg, Cfg::kTileKV> rows(kv, j * Cfg::kTileKV);
    rows.copy_kv(smem_k + stage * Cfg::kTileKV * Cfg::kHeadDim,
                 smem_v + stage * Cfg::kTileKV * Cfg::kHeadDim, kv, kv_head);
  };
  // The first K/V tile loads while the query tile arrives.
  if (tile_lo < tile_hi)
    load_kv(tile_lo, 0);
  cp_async_commit();
  cp_async_wait<1>(); // the query tile has arrived
  fence_async_shared(); // the copies, visible to wgmma's shared-memory reads
  __syncthreads();
  // attn-online-softmax: m = -inf, l = 0, acc = 0 for this warp's kWarpRows rows.
  WarpState<Cfg> state;
  state.init();

  // attn-mask-tiles: the steps in [lo, hi) (the IR's classes, per step of kStepKV keys):
  //   [full_lo, full_hi): fully visible tiles: no mask arithmetic
  //   [full_hi, hi): partial tiles: the mask's edge and the tail past kv_len
  for (int j = tile_lo; j < tile_hi; ++j) {
    const int stage = (j - tile_lo) % Cfg::kStages;
    // Tile j + 1 loads into the other stage while tile j is computed.
    if (j + 1 < tile_hi)
      load_kv(j + 1, (stage + 1) % Cfg::kStages);
    cp_async_commit();
    cp_async_wait<1>(); // tile j has arrived
    fence_async_shared(); // the copies, visible to wgmma's shared-memory reads
    __syncthreads();
#pragma unroll
    for (int h = 0; h < kSteps; ++h) {
      const int step = j * kSteps + h;
      if (step < steps.lo || step >= steps.hi)
        continue; // a step no row of this block sees
      const int row0 = (stage * Cfg::kTileKV + h * Cfg::kStepKV) * Cfg::kHeadDim;
      Scores<Cfg> s;
      qk_wgmma<Cfg>(s, smem_q, warp, smem_k + row0); // S = Q K^T, the warpgroup's rows
      // attn-mask-tiles: a partial step: hide the keys this warp's rows may not see.
      if (step < steps.full_lo || step >= steps.full_hi)
        apply_mask<Cfg>(s, q_start + warp * Cfg::kWarpRows, step * Cfg::kStepKV, q_len, kv_len);
      // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);
      // l = alpha l + rowsum P; acc = alpha acc, skipped while no row's max grew by more than
      // 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).
      // The scale rides in the exponent, in base 2: exp2(S * scale * log2 e - m).
      state.update(s, p.scale_log2);
      accumulate_pv_wgmma<Cfg>(state, s, smem_v + row0); // acc += P V
    }
    __syncthreads(); // this stage is loaded again at the next tile
  }

  // attn-online-softmax: normalise once, at the end: out = acc / l.
  const Rows<Elem> out = {reinterpret_cast<Elem *>(p.o) + q_begin * q_row + head * Cfg::kHeadDim,
                          q_row, q_len};
  store_output<Cfg>(state, out, nullptr, 0, q_start + warp * Cfg::kWarpRows);
}
