//===- warpspec.cuh - A warp-specialised wgmma prefill block -*- CUDA -*-===//
//
// The steps of an sm_90a prefill block whose warps do different work
// (`mma = wgmma_ws`): warpgroups 0 and 1 compute 64 query rows each with
// wgmma (attn/wgmma.cuh), reading every K/V tile from shared memory;
// warpgroup 2 only copies the tiles, with cp.async, into a ring of kStages
// stages. Two mbarriers per stage tell the two sides apart in time: `filled`
// completes once every copying thread's copies of the stage have landed,
// `freed` once every computing warp is done reading it. So the copies of
// the next tiles run during the wgmmas of this one, with no block barrier
// in the loop.
//
// The copying warpgroup needs few registers and the computing ones many: at
// the start the first gives some back (setmaxnreg.dec) and the others take
// them (setmaxnreg.inc). Within 384 threads * 168 registers (what the launch
// allots): 128 * kProducerRegs + 256 * kConsumerRegs <= 64512, or the
// increase waits forever. Measured on the H200 (tests/gpu/RESULTS.md): with
// one copying warp the block was at the mercy of that warp's instruction
// schedule (30-45 % slower with 72 registers, where NVRTC spilled); with
// all four copying, 56 registers each, it ran 5-8 % faster than the
// one-stage 64-row block on most rows.
//
// Cfg provides what wgmma.cuh's steps take (kTileQ = 128 for the block,
// kThreads = the 256 computing threads) and kStages.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_WARPSPEC_CUH
#define ATTN_TEMPLATES_WARPSPEC_CUH

#include "attn/wgmma.cuh"

namespace attn {
namespace kernel {

constexpr int kWsProducerRegs = 56, kWsConsumerRegs = 224;
static_assert(128 * kWsProducerRegs + 256 * kWsConsumerRegs <= 384 * 168,
              "the registers the warpgroups take fit in what 384 threads are given");

/// The copying warpgroup gives registers back; the computing ones take them.
ATTN_DEVICE void producer_registers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kWsProducerRegs));
#endif
}
ATTN_DEVICE void consumer_registers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kWsConsumerRegs));
#endif
}

/// The computing warpgroups' barrier (named barrier 1, their 256 threads):
/// the copying warpgroup never waits on it.
ATTN_DEVICE void computing_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

/// The ring's mbarriers: stage s's `filled` at base + 8 s, its `freed` at
/// base + 8 (kStages + s), in shared memory. Use i of a stage (tile i of the
/// block, stage i % kStages) waits for phase (i / kStages) % 2.
template <int kStages>
struct StageRing {
  unsigned base;

  /// One thread, before the block barrier that publishes the ring.
  ATTN_DEVICE void init(int copying_threads, int computing_warps) const {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(filled(s)), "r"(copying_threads)
                   : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(freed(s)), "r"(computing_warps)
                   : "memory");
    }
  }
  ATTN_DEVICE unsigned filled(int s) const { return base + 8 * s; }
  ATTN_DEVICE unsigned freed(int s) const { return base + 8 * (kStages + s); }

  static ATTN_DEVICE void wait(unsigned bar, unsigned phase) {
    asm volatile("{\n.reg .pred done;\nWS_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WS_WAIT;\n}" ::"r"(bar),
                 "r"(phase)
                 : "memory");
  }

  /// Copying side: tile i's stage may be written (its use i - kStages is done).
  ATTN_DEVICE void wait_free(int i) const {
    if (i >= kStages)
      wait(freed(i % kStages), ((i / kStages) & 1) ^ 1);
  }
  /// Copying side: this thread's copies of tile i count once they land.
  ATTN_DEVICE void copies_issued(int i) const {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(filled(i % kStages))
                 : "memory");
  }
  /// Computing side: tile i has landed, visible to wgmma's reads.
  ATTN_DEVICE void wait_filled(int i) const {
    wait(filled(i % kStages), (i / kStages) & 1);
    fence_async_shared();
  }
  /// Computing side, each warp: its wgmmas that read tile i are done.
  ATTN_DEVICE void release(int i) const {
    __syncwarp();
    if (threadIdx.x % 32 == 0)
      asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(
                       freed(i % kStages))
                   : "memory");
  }
};

/// attn-page-kv: the copying warpgroup's share of a K/V tile: thread `tid`
/// (0..kCopyThreads - 1) copies the 16-byte pieces tid, tid + kCopyThreads,
/// ... of tokens [t0, t0 + kTileKV), each found through KVCache::slot (rows
/// past kv_len, or on a page outside the cache, are zero-filled without a
/// read), into the stage's swizzled K and V tiles.
template <class Cfg, int kCopyThreads>
struct TileCopy {
  using Tile = WgmmaTile<Cfg::kTileKV, Cfg::kHeadDim>;
  static constexpr int kChunks = Cfg::kHeadDim / 8, kPieces = Cfg::kTileKV * kChunks;
  static_assert(kPieces % kCopyThreads == 0, "every copying thread takes as many pieces");

  template <class Cache>
  static ATTN_DEVICE void copy_kv(typename Cfg::Elem *smem_k, typename Cfg::Elem *smem_v,
                                  const Cache &kv, int t0, int h, int tid) {
#pragma unroll 8
    for (int c = tid; c < kPieces; c += kCopyThreads) {
      const int row = c / kChunks, chunk = c % kChunks, slot = kv.slot(t0 + row);
      const i64 at = kv.at(slot, h) + chunk * 8;
      const int dst = Tile::offset(row, chunk);
      cp_async_16(smem_k + dst, slot < 0 ? kv.k : kv.k + at, slot >= 0);
      cp_async_16(smem_v + dst, slot < 0 ? kv.v : kv.v + at, slot >= 0);
    }
  }
};

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_WARPSPEC_CUH
