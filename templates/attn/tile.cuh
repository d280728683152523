//===- tile.cuh - Tile loads: cp.async into shared memory -------*- CUDA -*-===//
//
// Global-to-shared copies in 16-byte pieces that bypass the registers
// (sm_80 cp.async). A piece past the end of a sequence is not read from
// global memory at all: its shared-memory bytes are zero-filled, so padding
// and unused page slots (NaN or anything else) never reach the math.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_TILE_CUH
#define ATTN_TEMPLATES_TILE_CUH

#include "attn/mma.cuh"

namespace attn {
namespace kernel {

/// Copies 16 bytes to a shared-memory address (smem_addr), or zero-fills
/// them when `valid` is false.
ATTN_DEVICE void cp_async_16(unsigned smem, const void *gmem, bool valid) {
  const unsigned bytes = valid ? 16u : 0u;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(bytes));
}

/// The same to a shared-memory pointer.
ATTN_DEVICE void cp_async_16(void *smem, const void *gmem, bool valid) {
  cp_async_16(smem_addr(smem), gmem, valid);
}

ATTN_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;"); }

/// Commits this thread's uncommitted copies and waits for all of them: for a
/// thread whose copies only arrive on an mbarrier (no group committed).
ATTN_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
ATTN_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
}

/// A row-major tile of kRows x kCols 16-bit elements in shared memory. When
/// a row holds a multiple of 8 16-byte chunks, the chunks are XOR-swizzled
/// within each group of 8, so that ldmatrix reads of 8 consecutive rows hit
/// 8 different bank groups; other widths are stored plainly.
template <int kRows, int kCols>
struct SmemTile {
  static_assert(kCols % 16 == 0, "head_dim must be a multiple of 16");
  static constexpr int kChunks = kCols / 8; ///< 16-byte chunks per row
  /// Element offset of chunk `chunk` of row `row`.
  ATTN_DEVICE static int offset(int row, int chunk) {
    const int swizzled = kChunks % 8 == 0 ? (chunk ^ (row % 8)) : chunk;
    return row * kCols + swizzled * 8;
  }
  /// The shared-memory address of chunk chunk0 + delta of a row, from
  /// `base`, the address of chunk chunk0 (< 8) of that row, where delta's
  /// low three bits do not overlap chunk0's: one XOR and one add, cheap
  /// enough to recompute at each use, so the compiler need not keep an
  /// address per chunk in registers. The tile must start 128-byte aligned.
  ATTN_DEVICE static unsigned step(unsigned base, int delta) {
    if (kChunks % 8 != 0)
      return base + delta * 16;
    return (base ^ ((delta % 8) * 16)) + (delta / 8) * 128;
  }
  static constexpr int kRowBytes = kCols * 2;
};

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_TILE_CUH
