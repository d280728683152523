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
/// base[t * token_stride + h * head_stride]; otherwise pages
/// base[page * page_stride + slot * token_stride + h * head_stride].
template <typename T, int kPageSize>
struct KVCache {
  const T *base;
  const int *block_table; ///< this sequence's pages, in order (paged only)
  i64 num_pages;          ///< pages in the whole cache (paged only)
  i64 kv_len;
  i64 token_stride, head_stride, page_stride; ///< in elements

  ATTN_DEVICE const T *row(i64 t, int h) const {
    if (t < 0 || t >= kv_len)
      return nullptr;
    if (kPageSize == 0)
      return base + t * token_stride + h * head_stride;
    const i64 page = block_table[t / kPageSize];
    if (page < 0 || page >= num_pages)
      return nullptr; // never read outside the cache
    return base + page * page_stride + (t % kPageSize) * token_stride + h * head_stride;
  }
};

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_PAGED_CUH
