//===- mask.cuh - Which keys a query sees, and which tiles to visit -*- CUDA -*-===//
//
// One implementation for the host (the spec library, the CPU tests) and the
// GPU kernels. Queries and keys are aligned at the bottom right: with q_len
// queries and kv_len keys, query `row` sits at key position
// row + kv_len - q_len.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_MASK_CUH
#define ATTN_TEMPLATES_MASK_CUH

#include "attn/config.cuh"

namespace attn {
namespace kernel {

enum MaskCode { kMaskNone = 0, kMaskCausal = 1, kMaskWindow = 2 };

/// Whether query `row` may see key `col` (keys at or past kv_len never).
/// I is the integer type: 64-bit on the host, 32-bit inside a kernel's
/// inner loop, where positions within one sequence fit and registers count.
template <typename I>
ATTN_HD bool is_visible(int mask, I window, I row, I col, I q_len, I kv_len) {
  if (col < 0 || col >= kv_len)
    return false;
  const I pos = row + (kv_len - q_len);
  if (mask == kMaskNone)
    return true;
  if (mask == kMaskCausal)
    return col <= pos;
  return col <= pos && col > pos - window;
}

/// The KV tiles of one query tile: [full_lo, full_hi) fully visible (no mask
/// arithmetic), [lo, full_lo) and [full_hi, hi) partial, the rest fully
/// masked and never visited. lo <= full_lo <= full_hi <= hi. Tile indices
/// are 32-bit (kv_len is): the KV loop's counters live next to the
/// accumulator.
struct TileRange {
  int lo, full_lo, full_hi, hi;
};

ATTN_HD i64 floor_div(i64 a, i64 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
ATTN_HD i64 max_i64(i64 a, i64 b) { return a > b ? a : b; }
ATTN_HD i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

/// Classifies the KV tiles seen by query rows [q_start, q_start + tile_q).
ATTN_HD TileRange classify_tiles(int mask, i64 window, i64 q_start, i64 tile_q, i64 tile_kv,
                                 i64 q_len, i64 kv_len) {
  TileRange none = {0, 0, 0, 0};
  const i64 last_row = min_i64(q_start + tile_q, q_len) - 1;
  if (kv_len <= 0 || last_row < q_start)
    return none;
  const i64 off = kv_len - q_len;
  const i64 p_first = q_start + off, p_last = last_row + off;
  // Row p sees the keys [low(p), high(p)]; both ends grow with p.
  const i64 low_first = mask == kMaskWindow ? max_i64(0, max_i64(p_first, 0) - window + 1) : 0;
  const i64 low_last = mask == kMaskWindow ? max_i64(0, p_last - window + 1) : 0;
  const i64 high_first = mask == kMaskNone ? kv_len - 1 : min_i64(p_first, kv_len - 1);
  const i64 high_last = mask == kMaskNone ? kv_len - 1 : min_i64(p_last, kv_len - 1);
  // Union over the rows (rows with p < 0 see nothing under a causal mask).
  const i64 union_lo = low_first, union_hi = high_last;
  if (union_hi < union_lo)
    return none;
  TileRange r;
  r.lo = static_cast<int>(union_lo / tile_kv);
  r.hi = static_cast<int>(union_hi / tile_kv + 1);
  // Intersection over the rows: the keys every row sees.
  const i64 inter_lo = low_last, inter_hi = high_first;
  const i64 full_lo = (inter_lo + tile_kv - 1) / tile_kv;
  const i64 full_hi = floor_div(inter_hi + 1, tile_kv);
  if (inter_hi < inter_lo || full_hi <= full_lo) {
    r.full_lo = r.full_hi = r.lo;
  } else {
    r.full_lo = static_cast<int>(full_lo);
    r.full_hi = static_cast<int>(full_hi);
  }
  return r;
}

/// attn-split-kv: split `split` of `splits` takes the tiles
/// [lo + split n / splits, lo + (split + 1) n / splits) with n = hi - lo,
/// the rule attn.split_range gives in the IR: consecutive, disjoint ranges
/// that cover [lo, hi) and differ in size by at most one tile.
struct SplitTiles {
  int lo, hi;
};
ATTN_HD SplitTiles split_range(int lo, int hi, int split, int splits) {
  const i64 n = hi - lo;
  return {static_cast<int>(lo + split * n / splits), static_cast<int>(lo + (split + 1) * n / splits)};
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_MASK_CUH
