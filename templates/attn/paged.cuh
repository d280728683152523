//===- paged.cuh - The KV cache accessor: contiguous or through a block table -*- CUDA -*-===//
//
// attn-page-kv: every KV row the kernel reads goes through `KVCache::row`,
// the only place the block table is read. Token t of a paged sequence lives
// in page block_table[t / page_size] at slot t % page_size. A token past
// kv_len, or a table entry outside [0, num_pages), gives a null row, which
// the tile loads read as zeros: the kernel never reads outside the cache,
// whatever the table holds (the runtime's checking mode reports such
// entries as errors).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_PAGED_CUH
#define ATTN_TEMPLATES_PAGED_CUH

#include "attn/config.cuh"

namespace attn {
namespace kernel {

/// One sequence's keys or values. kPageSize = 0: contiguous rows
/// base[t * token_stride + h * kHeadDim]; otherwise pages
/// base[(page * kPageSize + slot) * token_stride + h * kHeadDim]. Sizes are
/// 32-bit (the runtime checks they fit): this struct lives in registers
/// through the whole KV loop, next to the accumulator.
template <typename T, int kPageSize, int kHeadDim>
struct KVCache {
  const T *base;
  const int *block_table; ///< this sequence's pages, in order (paged only)
  int num_pages;          ///< pages in the whole cache (paged only)
  int kv_len;
  int token_stride;       ///< elements between tokens: num_kv_heads * head_dim

  ATTN_DEVICE const T *row(int t, int h) const {
    if (t < 0 || t >= kv_len)
      return nullptr;
    if (kPageSize == 0)
      return base + (i64)t * token_stride + h * kHeadDim;
    const int page = block_table[t / kPageSize];
    if (page < 0 || page >= num_pages)
      return nullptr; // never read outside the cache
    return base + ((i64)page * kPageSize + t % kPageSize) * token_stride + h * kHeadDim;
  }
};

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_PAGED_CUH
