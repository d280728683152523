//===- warpspec.cuh - A warp-specialised wgmma prefill block -*- CUDA -*-===//
//
// The steps of an sm_90a prefill block whose warps do different work
// (`mma = wgmma_ws`): the first warpgroups (two for head_dim 128, three for
// head_dim 64) compute 64 query rows each with wgmma (attn/wgmma.cuh),
// reading every K/V tile from shared memory; the last one only copies the
// tiles, with cp.async, into a ring of kStages stages. Two mbarriers per
// stage tell the two sides apart in time: `filled` completes once every
// copying thread's copies of the stage have landed, `freed` once every
// computing warp is done reading it. So the copies of the next tiles run
// during the wgmmas of this one, with no block barrier in the loop.
//
// The copying warpgroup needs few registers and the computing ones many: at
// the start the first gives some back (setmaxnreg.dec) and the others take
// them (setmaxnreg.inc), within what the launch allots (WsRegisters: 384
// threads get 168 registers each, 512 get 128), or the increase waits
// forever. Measured on the H200 (tests/gpu/RESULTS.md): with
// one copying warp the block was at the mercy of that warp's instruction
// schedule (30-45 % slower with 72 registers, where NVRTC spilled); with
// all four copying, 56 registers each, it ran 5-8 % faster than the
// one-stage 64-row block on most rows.
//
// Cfg provides what wgmma.cuh's steps take (kTileQ for the block, kThreads =
// its computing threads, 2 * kTileQ), kBlockThreads (with the copying
// warpgroup's 128) and kStages.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_WARPSPEC_CUH
#define ATTN_TEMPLATES_WARPSPEC_CUH

#include "attn/wgmma.cuh"

namespace attn {
namespace kernel {

/// The registers each side of a block of kBlockThreads threads keeps: the
/// launch gives every thread 65536 / kBlockThreads (a multiple of 8), the
/// copying warpgroup keeps kProducer of them and the computing threads take
/// the rest: 224 for 256 computing threads (head_dim 128: the copying
/// warpgroup keeps 56), 160 for 384 (head_dim 64: it keeps 32 and its copy
/// loop is unrolled 4 times instead of 8; with 56 registers there, ptxas
/// spilled 8 bytes of the computing side's 152).
template <class Cfg>
struct WsRegisters {
  static constexpr int kLaunch = 65536 / Cfg::kBlockThreads / 8 * 8;
  static constexpr bool kThree = Cfg::kThreads > 256; ///< three computing warpgroups
  static constexpr int kProducer = kThree ? 32 : 56;
  static constexpr int kCopyUnroll = kThree ? 4 : 8; ///< TileCopy's pieces unrolled
  static constexpr int kConsumer =
      (kLaunch * Cfg::kBlockThreads - (Cfg::kBlockThreads - Cfg::kThreads) * kProducer) /
      Cfg::kThreads / 8 * 8;
  static_assert(kConsumer <= 256 && kConsumer >= kLaunch,
                "setmaxnreg takes 24..256 registers, and the computing side gains");
  static_assert((Cfg::kBlockThreads - Cfg::kThreads) * kProducer + Cfg::kThreads * kConsumer <=
                    kLaunch * Cfg::kBlockThreads,
                "the registers the warpgroups take fit in what the launch gives");
};

/// The copying warpgroup gives registers back; the computing ones take them.
template <class Cfg>
ATTN_DEVICE void producer_registers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(WsRegisters<Cfg>::kProducer));
#endif
}
template <class Cfg>
ATTN_DEVICE void consumer_registers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(WsRegisters<Cfg>::kConsumer));
#endif
}

/// The computing warpgroups' barrier (named barrier 1, their Cfg::kThreads
/// threads): the copying warpgroup never waits on it.
template <class Cfg>
ATTN_DEVICE void computing_sync() { asm volatile("bar.sync 1, %0;" ::"n"(Cfg::kThreads) : "memory"); }

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
    const typename Cfg::Elem *k = kv.k + kv.head(h), *v = kv.v + kv.head(h);
#pragma unroll(WsRegisters<Cfg>::kCopyUnroll)
    for (int c = tid; c < kPieces; c += kCopyThreads) {
      const int row = c / kChunks, chunk = c % kChunks, slot = kv.slot(t0 + row);
      const i64 at = kv.row(slot, h) + chunk * 8;
      const int dst = Tile::offset(row, chunk);
      cp_async_16(smem_k + dst, slot < 0 ? k : k + at, slot >= 0);
      cp_async_16(smem_v + dst, slot < 0 ? v : v + at, slot >= 0);
    }
  }
};

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_WARPSPEC_CUH
