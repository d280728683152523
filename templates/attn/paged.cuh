//===- paged.cuh - The KV cache accessor: contiguous or through a block table -*- CUDA -*-===//
//
// attn-page-kv: every KV row the kernel reads is located by
// `KVCache::slot`, the only place the block table is read. Token t of a
// paged sequence lives in page block_table[t / page_size] at slot
// t % page_size. A token past kv_len, or a table entry outside
// [0, num_pages), has no slot (-1), and the tile loads read such a row as
// zeros: the kernel never reads outside the cache, whatever the table holds
// (the runtime's checking mode reports such entries as errors).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_PAGED_CUH
#define ATTN_TEMPLATES_PAGED_CUH

#include "attn/config.cuh"

namespace attn {
namespace kernel {

/// One sequence's keys and values, which share one layout: K and V rows of
/// a token sit at the same element offset from `k` and `v`. kPageSize = 0:
/// contiguous rows at t * token_stride + h * kHeadDim; otherwise pages, at
/// (page * kPageSize + slot) * token_stride + h * kHeadDim. Sizes are 32-bit
/// (the runtime checks they fit): this struct lives in registers through
/// the whole KV loop, next to the accumulator.
template <typename T, int kPageSize, int kHeadDim>
struct KVCache {
  const T *k, *v;
  const int *block_table; ///< this sequence's pages, in order (paged only)
  int num_pages;          ///< pages in the whole cache (paged only)
  int kv_len;
  int token_stride;       ///< elements between tokens: num_kv_heads * head_dim

  /// The block-table entry of token t's page (-1 past kv_len; t itself when
  /// contiguous): the one global read behind slot(), made apart from it so
  /// that a kernel can issue it tiles ahead of the copy that needs it.
  ATTN_DEVICE int lookup(int t) const {
    if (kPageSize == 0)
      return t;
    if (static_cast<unsigned>(t) >= static_cast<unsigned>(kv_len))
      return -1; // past kv_len (or negative): no page to read
    constexpr int kPage = kPageSize > 0 ? kPageSize : 1; // (this branch is paged only)
    return __ldg(block_table + t / kPage);
  }
  /// The cache slot of token t given its lookup(t) (the row index among all
  /// the cache's tokens: t itself when contiguous, page * kPageSize +
  /// t % kPageSize when paged), or -1 for a row that must read as zeros.
  /// The runtime keeps every slot below 2^31.
  ATTN_DEVICE int slot(int t, int entry) const {
    if (static_cast<unsigned>(t) >= static_cast<unsigned>(kv_len))
      return -1; // past kv_len (or negative)
    if (kPageSize == 0)
      return t;
    constexpr int kPage = kPageSize > 0 ? kPageSize : 1;
    if (static_cast<unsigned>(entry) >= static_cast<unsigned>(num_pages))
      return -1; // never read outside the cache
    return entry * kPage + t % kPage;
  }
  ATTN_DEVICE int slot(int t) const { return slot(t, lookup(t)); }
  /// The element offset of a slot's row for KV head h, in k and v alike.
  ATTN_DEVICE i64 at(int slot, int h) const { return (i64)slot * token_stride + h * kHeadDim; }
};

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_PAGED_CUH
