//===- wgmma.cuh - Prefill steps on Hopper's warpgroup MMA (sm_90a) -*- CUDA -*-===//
//
// wgmma.mma_async: a warpgroup (4 warps, 128 threads) multiplies a 64 x 16 A
// by a 16 x N B into a 64 x N fp32 accumulator in one instruction, reading
// its shared-memory operands itself through 64-bit descriptors: no ldmatrix,
// and an instruction per 64 x N x 16 instead of per 16 x 8 x 16. Warp w of a
// group holds rows 16 (w % 4) .. 16 (w % 4) + 15 of the group's 64 in the
// layout of the m16n8k16 accumulator, so the online-softmax state
// (state.cuh), the masks and the epilogue are those of the mma.sync
// kernels (block.cuh); only S = Q K^T and acc += P V change.
//
// The shared tiles Q, K and V are stored as wgmma's 128-byte swizzle wants
// them (WgmmaTile): per 64 columns a [rows][64] block of 128-byte rows,
// the 16-byte chunks of row r XORed with r % 8 (so the 8 rows of a core
// matrix sit in 8 different bank groups). Each tile starts on a 1024-byte
// boundary, where that pattern repeats.
//
// The cp.async copies write shared memory through the generic proxy, wgmma
// reads it through the async proxy: fence_async_shared() between the two.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_WGMMA_CUH
#define ATTN_TEMPLATES_WGMMA_CUH

#include "attn/block.cuh"

namespace attn {
namespace kernel {

/// A tile of kRows x kCols 16-bit elements in the 128-byte swizzle: column
/// block c (64 columns) at c * kRows * 64 elements, row r's 16-byte chunk k
/// of that block at r * 64 + (k ^ (r % 8)) * 8.
template <int kRows, int kCols>
struct WgmmaTile {
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "wgmma tiles: 64-column blocks of 8-row groups");
  static constexpr int kChunks = kCols / 8; ///< 16-byte chunks per row
  /// Element offset of chunk `chunk` of row `row`.
  ATTN_DEVICE static int offset(int row, int chunk) {
    return (chunk / 8) * kRows * 64 + row * 64 + ((chunk % 8) ^ (row % 8)) * 8;
  }
  static constexpr unsigned kBlockBytes = kRows * 128; ///< one 64-column block
};

/// The descriptor of a 128-byte-swizzled operand at shared address `addr`:
/// `lbo` bytes between 64-column blocks (read for operands whose rows are
/// the K dimension: V), `sbo` bytes between groups of 8 rows.
ATTN_DEVICE unsigned long long wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4) |
         static_cast<unsigned long long>((lbo >> 4) & 0x3FFFu) << 16 |
         static_cast<unsigned long long>((sbo >> 4) & 0x3FFFu) << 32 |
         1ull << 62; // 128-byte swizzle
}

/// Orders this thread's earlier shared-memory writes (cp.async included)
/// before later async-proxy reads (wgmma); a barrier then publishes them.
ATTN_DEVICE void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/// Registers the next wgmma reads or writes were last written by ordinary
/// instructions (acc rescaled, P packed): required before it.
ATTN_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
ATTN_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
/// Waits until at most kPending committed groups of wgmma are in flight.
template <int kPending>
ATTN_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
/// Keeps the compiler from moving reads or writes of an accumulator across
/// the asynchronous wgmma that owns it until wgmma_wait.
template <int kBlocks>
ATTN_DEVICE void wgmma_hold(float (&d)[kBlocks][4]) {
#pragma unroll
  for (int b = 0; b < kBlocks; ++b)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      asm volatile("" : "+f"(d[b][i])::"memory");
}

/// wgmma.mma_async m64nNk16 with fp32 accumulation: ss() reads A and B from
/// shared memory (both K-major: rows of Q and of K), rs() takes A from
/// registers (P, in the m16n8k16 A layout of each warp) and B from shared
/// memory MN-major (V, whose rows are the K dimension). `accumulate` false:
/// d = A B.
template <typename T, int N>
struct Wgmma;

// The accumulator operands of m64nNk16 (N / 2 fp32 registers per thread,
// d[b][i] in the m16n8k16 order) and their place holders %0 .. %(N/2 - 1);
// the operands after them are numbered from N / 2.
#define ATTN_ACC4(b) "+f"(d[b][0]), "+f"(d[b][1]), "+f"(d[b][2]), "+f"(d[b][3])
#define ATTN_ACC_N64 ATTN_ACC4(0), ATTN_ACC4(1), ATTN_ACC4(2), ATTN_ACC4(3), ATTN_ACC4(4), ATTN_ACC4(5), ATTN_ACC4(6), ATTN_ACC4(7)
#define ATTN_ACC_N128 ATTN_ACC_N64, ATTN_ACC4(8), ATTN_ACC4(9), ATTN_ACC4(10), ATTN_ACC4(11), ATTN_ACC4(12), ATTN_ACC4(13), ATTN_ACC4(14), ATTN_ACC4(15)
#define ATTN_REGS_N64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ATTN_REGS_N128 ATTN_REGS_N64 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// Wgmma<T, N>: PTX is the element type's name in the instruction; A, B, P,
// A0 .. A3 and RB, RP the numbers of the operands after the accumulator
// (ss: descriptors A and B, the accumulate flag P; rs: A's four registers,
// B's descriptor, the flag).
#define ATTN_WGMMA(T, PTX, N, A, B, P, A0, A1, A2, A3, RB, RP)                                    \
  template <>                                                                                      \
  struct Wgmma<T, N> {                                                                             \
    ATTN_DEVICE static void ss(float (&d)[N / 8][4], unsigned long long a, unsigned long long b,   \
                               bool accumulate) {                                                  \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\n"                                \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " "              \
                   "{" ATTN_REGS_N##N "}, %" A ", %" B ", p, 1, 1, 0, 0;\n}\n"                     \
                   : ATTN_ACC_N##N                                                                 \
                   : "l"(a), "l"(b), "r"(int(accumulate)));                                        \
    }                                                                                              \
    ATTN_DEVICE static void rs(float (&d)[N / 8][4], const unsigned (&a)[4], unsigned long long b, \
                               bool accumulate) {                                                  \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" RP ", 0;\n"                               \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " "              \
                   "{" ATTN_REGS_N##N "}, {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" RB            \
                   ", p, 1, 1, 1;\n}\n"                                                            \
                   : ATTN_ACC_N##N                                                                 \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));  \
    }                                                                                              \
  };

ATTN_WGMMA(__nv_bfloat16, "bf16", 64, "32", "33", "34", "32", "33", "34", "35", "36", "37")
ATTN_WGMMA(__half, "f16", 64, "32", "33", "34", "32", "33", "34", "35", "36", "37")
ATTN_WGMMA(__nv_bfloat16, "bf16", 128, "64", "65", "66", "64", "65", "66", "67", "68", "69")
ATTN_WGMMA(__half, "f16", 128, "64", "65", "66", "64", "65", "66", "67", "68", "69")

#undef ATTN_WGMMA
#undef ATTN_REGS_N128
#undef ATTN_REGS_N64
#undef ATTN_ACC_N128
#undef ATTN_ACC_N64
#undef ATTN_ACC4

/// S = Q K^T (raw) for this warp's 16 rows and the whole K tile at
/// `smem_k`: one wgmma per 16 columns of head_dim for the warpgroup's 64 rows.
template <class Cfg>
ATTN_DEVICE void qk_wgmma(Scores<Cfg> &s, const typename Cfg::Elem *smem_q, int warp,
                          const typename Cfg::Elem *smem_k) {
  static_assert(Cfg::kRowBlocks == 1 && Cfg::kStepKV == Cfg::kTileKV,
                "a wgmma warp holds 16 rows against the whole tile");
  using QTile = WgmmaTile<Cfg::kTileQ, Cfg::kHeadDim>;
  using KTile = WgmmaTile<Cfg::kTileKV, Cfg::kHeadDim>;
  using W = Wgmma<typename Cfg::Elem, Cfg::kTileKV>;
  // The warpgroup's 64 rows: 8 groups of 8 rows, 1024 bytes each.
  const unsigned q = smem_addr(smem_q) + (warp / 4) * 64 * 128, k = smem_addr(smem_k);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
    // Columns 16 kk..: 32 bytes into a 128-byte row of column block kk / 4
    // (the hardware applies the swizzle to the address it computes).
    const unsigned col = (kk % 4) * 32;
    W::ss(s[0], wgmma_desc(q + (kk / 4) * QTile::kBlockBytes + col, 16, 1024),
          wgmma_desc(k + (kk / 4) * KTile::kBlockBytes + col, 16, 1024), kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_hold(s[0]);
}

/// acc += P V for the whole V tile at `smem_v`: P stays in registers as the
/// A operand (packed to 16 bits as for mma.sync), one wgmma per 16 keys.
template <class Cfg>
ATTN_DEVICE void accumulate_pv_wgmma(WarpState<Cfg> &state, const Scores<Cfg> &p,
                                     const typename Cfg::Elem *smem_v) {
  using VTile = WgmmaTile<Cfg::kTileKV, Cfg::kHeadDim>;
  using W = Wgmma<typename Cfg::Elem, Cfg::kHeadDim>;
  unsigned a[Cfg::kTileKV / 16][4];
#pragma unroll
  for (int kk = 0; kk < Cfg::kTileKV / 16; ++kk)
    p_fragment<typename Cfg::Elem>(a[kk], p[0], kk);
  const unsigned v = smem_addr(smem_v);
  float(&acc)[Cfg::kHeadDim / 8][4] = state.rows[0].acc;
  wgmma_hold(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kTileKV / 16; ++kk) // keys 16 kk..: 16 rows of 128 bytes
    W::rs(acc, a[kk], wgmma_desc(v + kk * 16 * 128, VTile::kBlockBytes, 1024), true);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_hold(acc);
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_WGMMA_CUH
