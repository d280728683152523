// attnc 0.1.0: mode=prefill,head_dim=128,dtype=bf16,tile_q=128,tile_kv=128,mask=none,page_size=0,gqa=1,return_lse=false,target=sm_90a
// launch: threads=384 shared_bytes=229424
// The kernel with the launch arguments of 76b879b (params.cuh before the cache strides), for an A/B
//===- params.cuh - A kernel's run-time arguments ---------------*- CUDA -*-===//
//
// Everything the spec leaves to run time, in one struct passed by value to
// every kernel; the host runtime fills the same struct (this header is plain
// C++ too). Pointers travel as 64-bit integers so the layout is the same on
// both sides. Layouts (elements, row-major):
//   q, o     [total_q, num_q_heads, head_dim]; sequence b is rows
//            cu_seqlens_q[b] .. cu_seqlens_q[b + 1]
//   k, v     contiguous: [total_kv, num_kv_heads, head_dim], rows cu_seqlens_k[b]..
//            paged: [num_pages, page_size, num_kv_heads, head_dim], sequence b's
//            pages in block_table[b * block_table_stride ...], its length seq_lens_k[b]
//   lse      [total_q, num_q_heads] fp32, natural log
//   workspace  split-KV decode with num_splits > 1: partial outputs
//            [num_splits, total_q, num_q_heads, head_dim] fp32, then partial lse
//            [num_splits, total_q, num_q_heads] fp32
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_PARAMS_CUH
#define ATTN_TEMPLATES_PARAMS_CUH

namespace attn {
namespace kernel {

struct Params {
  unsigned long long q, k, v, o, lse;            ///< device pointers
  unsigned long long cu_seqlens_q;               ///< int32 [batch + 1]
  unsigned long long cu_seqlens_k;               ///< int32 [batch + 1] (contiguous KV)
  unsigned long long seq_lens_k;                 ///< int32 [batch] (paged KV)
  unsigned long long block_table;                ///< int32 [batch, block_table_stride]
  unsigned long long workspace;                  ///< fp32, split-KV decode only
  long long block_table_stride, num_pages;
  int batch, num_q_heads, num_kv_heads;
  int num_splits;                                ///< decode: KV splits per sequence (>= 1)
  float scale_log2;                              ///< softmax scale * log2(e)
};

/// How an emitted kernel is launched (the emitter fills it; AOT bundles
/// store it). Prefill: grid (ceil(max q_len / tile_q), num_q_heads, batch).
/// Decode: grid (num_splits, num_kv_heads, batch); with num_splits > 1 the
/// "<name>_merge" kernel follows on grid (max q_len, num_q_heads, batch)
/// with merge_threads threads, unless cluster_merge: then (sm_90a) the
/// runtime may launch the splits of each (sequence, KV head) as one
/// thread-block cluster that merges them itself (decode_store_cluster); with
/// pair_shared_bytes > 0 there is also "<name>_pair": 2 * threads threads
/// and pair_shared_bytes of shared memory, two splits as the two pipelines
/// of one block, grid (num_splits / 2, num_kv_heads, batch). The runtime
/// launches it instead of clusters of two splits, and for four splits as
/// clusters of its two blocks (Kernel::pairsSplits). It is a module of its
/// own: the source holds it under #ifdef kPairProgramMacro and the other
/// kernels under #else, compiled as two NVRTC programs side by side
/// (compileCuda). Dynamic shared memory: shared_bytes.
struct LaunchShape {
  int threads = 0;
  int shared_bytes = 0;
  int tile_q = 0;
  bool decode = false;
  int merge_threads = 0;
  bool cluster_merge = false;
  int pair_shared_bytes = 0; ///< decode, sm_90a: "<name>_pair" runs two splits per block of 2 * threads
};

/// A decode block's merge scratch (DecodeScratch in decode.cuh), in floats,
/// for `warps` warps and head_dim `d`: each warp's 16 rows of d at the padded
/// stride decodeScratchStride(d) with (m, l) per row, the block's (m, l), a
/// cluster's weight per row and block (up to kDecodeClusterBlocks) and its
/// (m, l). The emitter sizes the pair kernel's shared memory by it too
/// (decodePairSharedBytes). Plain C++, evaluated at compile time on both sides.
#ifdef __CUDACC__
#define ATTN_CONSTEXPR_HD __host__ __device__ constexpr
#else
#define ATTN_CONSTEXPR_HD constexpr
#endif
constexpr int kDecodeClusterBlocks = 16; ///< a cluster's blocks at most (Kernel::mergesInCluster)
ATTN_CONSTEXPR_HD int decodeScratchStride(int d) { return d + (40 - d % 32) % 32; }
ATTN_CONSTEXPR_HD int decodeScratchFloats(int warps, int d) {
  return warps * 16 * (decodeScratchStride(d) + 2) + 16 * 2 + 16 * kDecodeClusterBlocks + 16 * 2;
}

/// Defined (-D) when a decode source is compiled for its "<name>_pair" kernel
/// alone, undefined for the others (LaunchShape::pair_shared_bytes > 0).
constexpr const char kPairProgramMacro[] = "ATTN_PAIR_PROGRAM";

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_PARAMS_CUH
// Emitted from the tile-level IR of @attn_prefill_hd128_bf16_q128_kv128_nomask_p0_g1_sm90a. Each step names the attnc pass
// that put it there; the arithmetic is in the attn/*.cuh templates.
#include "attn/warpspec.cuh"

using namespace attn::kernel;

namespace {
struct Cfg {
  using Elem = __nv_bfloat16;
  static constexpr int kHeadDim = 128;
  static constexpr int kTileQ = 128;   // query rows per thread block
  static constexpr int kTileKV = 128;  // keys per KV tile
  static constexpr int kGroup = 1;   // attn-share-kv-heads: query heads per KV head
  static constexpr int kPageSize = 0; // attn-page-kv: tokens per page (0: contiguous)
  static constexpr int kMask = kMaskNone;
  static constexpr long long kWindow = 0;
  static constexpr int kThreads = 256;  // the computing warpgroups' (the block: kBlockThreads)
  static constexpr int kBlockThreads = 384;  // and one more warpgroup that copies K and V
  static constexpr int kStepKV = 128;  // keys per step of the recurrence (its scores stay in registers)
  static constexpr int kStages = 3;  // K/V tiles in shared memory: the next loads during this one
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
extern "C" __global__ void __launch_bounds__(Cfg::kBlockThreads, 1) attn_prefill_hd128_bf16_q128_kv128_nomask_p0_g1_sm90a(const Params p) {
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

  static_assert(kSteps == 1, "a warp-specialised block takes a K/V tile in one step");
  const int n = tile_hi - tile_lo; // the tiles some row of this block sees
  // The ring's two mbarriers per stage, after the stages.
  const StageRing<Cfg::kStages> ring = {smem_addr(smem_v + Cfg::kStages * Cfg::kTileKV * Cfg::kHeadDim)};
  if (threadIdx.x == 0)
    ring.init(Cfg::kBlockThreads - Cfg::kThreads, Cfg::kThreads / 32);
  __syncthreads();

  if (threadIdx.x >= Cfg::kThreads) {
    // The last warpgroup copies: tile tile_lo + i into stage i % kStages, once
    // the computing warps have freed it.
    producer_registers<Cfg>();
    const int tid = threadIdx.x - Cfg::kThreads;
    for (int i = 0; i < n; ++i) {
      const int stage = i % Cfg::kStages;
      ring.wait_free(i);
      // The K and V rows of the tile; rows past kv_len read as zero.
      TileCopy<Cfg, Cfg::kBlockThreads - Cfg::kThreads>::copy_kv(
          smem_k + stage * Cfg::kTileKV * Cfg::kHeadDim, smem_v + stage * Cfg::kTileKV * Cfg::kHeadDim, kv,
          (tile_lo + i) * Cfg::kTileKV, kv_head, tid);
      ring.copies_issued(i);
    }
    cp_async_wait<0>(); // no copy outlives its thread
    return;
  }

  // The other warpgroups compute: 64 query rows each, 16 per warp.
  consumer_registers<Cfg>();
  // attn-online-softmax: the query tile is loaded once (rows past q_len read as zero).
  load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {
    return q_start + r < q_len ? q + (q_start + r) * q_row : nullptr; }, q);
  cp_async_commit();
  cp_async_wait<0>();
  fence_async_shared(); // the copies, visible to wgmma's shared-memory reads
  computing_sync<Cfg>();
  // attn-online-softmax: m = -inf, l = 0, acc = 0 for this warp's kWarpRows rows.
  WarpState<Cfg> state;
  state.init();

  // attn-mask-tiles: the tiles in [lo, hi) (the IR's classes):
  //   [full_lo, full_hi): fully visible tiles: no mask arithmetic
  //   [full_hi, hi): partial tiles: the mask's edge and the tail past kv_len
  for (int i = 0; i < n; ++i) {
    const int j = tile_lo + i, stage = i % Cfg::kStages;
    ring.wait_filled(i); // tile j has landed in its stage
    Scores<Cfg> s;
    qk_wgmma<Cfg>(s, smem_q, warp, smem_k + stage * Cfg::kTileKV * Cfg::kHeadDim); // S = Q K^T
    // attn-mask-tiles: a partial tile: hide the keys this warp's rows may not see.
    if (j < steps.full_lo || j >= steps.full_hi)
      apply_mask<Cfg>(s, q_start + warp * Cfg::kWarpRows, j * Cfg::kStepKV, q_len, kv_len);
    // attn-online-softmax: m_new = max(m, rowmax S); alpha = exp(m - m_new); P = exp(S - m_new);
    // l = alpha l + rowsum P; acc = alpha acc, skipped while no row's max grew by more than
    // 2^8 (m then stays put; attn-safe-init guards inside, see state.cuh).
    // The scale rides in the exponent, in base 2: exp2(S * scale * log2 e - m).
    state.update(s, p.scale_log2);
    accumulate_pv_wgmma<Cfg>(state, s, smem_v + stage * Cfg::kTileKV * Cfg::kHeadDim); // acc += P V
    ring.release(i); // this warp is done with the stage
  }

  // attn-online-softmax: normalise once, at the end: out = acc / l.
  const Rows<Elem> out = {reinterpret_cast<Elem *>(p.o) + q_begin * q_row + head * Cfg::kHeadDim,
                          q_row, q_len};
  store_output<Cfg>(state, out, nullptr, 0, q_start + warp * Cfg::kWarpRows);
}
