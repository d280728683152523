//===- paged.cuh - The KV cache accessor: contiguous or through a block table -*- CUDA -*-===//
//
// attn-page-kv: every KV row the kernel reads is located by
// `KVCache::slot`. The block table is read here (`KVCache::lookup`) and by
// the decode copy's `PageRuns` (block.cuh), which reads a sequence's first
// entries at the kernel's start; every entry read goes through `slot`,
// which refuses one outside the cache. Token t of a
// paged sequence lives in page block_table[t / page_size] at slot
// t % page_size. A token past kv_len, or a table entry outside
// [0, num_pages), has no slot (-1), and the tile loads read such a row as
// zeros; a length past the tokens of the sequence's table row is read as
// the row's (pagedLength): the kernel reads neither outside the cache nor
// past the row, whatever the table and the lengths hold (the runtime's
// checking mode reports such entries and lengths as errors).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_PAGED_CUH
#define ATTN_TEMPLATES_PAGED_CUH

#include "attn/config.cuh"

namespace attn {
namespace kernel {

/// Sequence b's length as the paged kernels read it: seq_lens_k[b] within 0
/// and the tokens its block-table row can hold (row_entries pages), so that
/// no length makes lookup() read the table past the row.
ATTN_DEVICE int pagedLength(int given, long long row_entries, int page_size) {
  const long long row_tokens = row_entries * page_size;
  return given < 0 ? 0 : given > row_tokens ? static_cast<int>(row_tokens) : given;
}

/// One sequence's keys and values, which share one layout: K and V rows of
/// a token sit at the same element offset from `k` and `v`. kPageSize = 0:
/// contiguous rows, token t's row of KV head h at t * token_stride + h *
/// kHeadDim. Otherwise pages: the row of the token in place s of page p at
/// p * page_stride + s * token_stride + h * head_stride, so that any layout
/// of a page's tokens and heads can be read ([pages, page_size, heads,
/// head_dim] by default; heads before tokens; a pool of pages per head; K
/// and V pages interleaved in one allocation). Sizes but the head stride are
/// 32-bit (the runtime checks they fit): this struct lives in registers
/// through the whole KV loop, next to the accumulator.
template <typename T, int kPageSize, int kHeadDim>
struct KVCache {
  const T *k, *v;
  const int *block_table; ///< this sequence's pages, in order (paged only)
  int num_pages;          ///< pages in the whole cache (paged only)
  int kv_len;
  int token_stride;       ///< elements between tokens (of a page, when paged)
  int page_stride;        ///< paged: elements between pages
  i64 head_stride;        ///< paged: elements between KV heads

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
  /// The element offset of a slot's row for KV head h, in k and v alike,
  /// in two parts: at = head(h) + row(slot, h). A copy adds head(h) to k
  /// and v once and row() per row: the paged head offset, a run-time
  /// stride, is then not carried through its loop; contiguous rows keep
  /// their compile-time head offset in row().
  ATTN_DEVICE i64 head(int h) const { return kPageSize == 0 ? 0 : h * head_stride; }
  ATTN_DEVICE i64 row(int slot, int h) const {
    if (kPageSize == 0)
      return (i64)slot * token_stride + h * kHeadDim;
    constexpr int kPage = kPageSize > 0 ? kPageSize : 1;
    return (i64)(slot / kPage) * page_stride + (slot % kPage) * token_stride;
  }
  ATTN_DEVICE i64 at(int slot, int h) const { return head(h) + row(slot, h); }
};

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_PAGED_CUH
