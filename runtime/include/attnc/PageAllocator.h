//===- PageAllocator.h - KV-cache pages that keep a sequence together -*- C++ -*-===//
//
// A paged KV cache ([num_pages, page_size, num_kv_heads, head_dim]) may give
// a sequence any page slots: the block table names them and the kernels read
// them wherever they lie. How fast they read them depends on where: the GPU
// maps memory in large pages (2 MiB on the H200), and a sequence whose
// pages of 16 tokens are scattered over the whole cache reaches a different
// one for almost every page, where pages within a few 2 MiB windows share
// them. On the H200 the paged decode kernel reads pages shuffled across a
// 0.1-2 GiB cache up to 1.6 % slower (0.7-1 % on most rows) than the same
// pages shuffled only within 2 MiB windows, which read about as fast as
// pages in order (bench/RESULTS.md). A plain free list, as a server uses
// it, gives the scattered kind: sequences that grow together take turns at
// the list, so each one's consecutive pages lie apart, and after a while of
// sequences ending the list is in no order at all.
//
// PageAllocator hands out slots so that each sequence's pages fill windows
// of `pagesPerWindow` consecutive slots (2 MiB divided by a page's bytes in
// one of the K and V buffers; windowFor computes it from the cache's
// address): a sequence takes its next page from the window it took its last
// one from, lowest free slot first. When that window is full it moves on:
// to the window with the most free slots among those no other sequence is
// growing in (the lowest-numbered of those), so that a fresh sequence
// starts in an empty window while there is one and two growing sequences
// do not interleave their pages; only when every such window is full does
// it join a window another sequence grows in. A sequence of P pages then
// lies in about P / pagesPerWindow windows while the cache has room; as it
// fills, sequences share windows and take what is left, and no request
// that fits is refused.
//
// Not thread-safe: one scheduler owns it, as it owns the block table.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_PAGEALLOCATOR_H
#define ATTNC_PAGEALLOCATOR_H

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <tuple>
#include <utility>
#include <vector>

namespace attn {

class PageAllocator {
public:
  /// The bytes a window covers: the H200's large page.
  static constexpr int64_t kWindowBytes = int64_t(2) << 20;

  /// Windows for a cache at `address` whose pages take `pageBytes` each in
  /// one of the K and V buffers: the pages per window (2 MiB / pageBytes,
  /// at least 1) and the first window's size (the pages before the first
  /// 2 MiB boundary, or a full window when the cache starts on one). Every
  /// window is then one of the GPU's 2 MiB pages when pageBytes divides
  /// 2 MiB and the cache starts a whole number of pages before a boundary;
  /// otherwise a window may reach into two. False, with `error`, for a page
  /// size of 0 or less.
  static bool windowFor(int64_t pageBytes, uint64_t address, int64_t &pagesPerWindow,
                        int64_t &firstWindowPages, std::string &error);

  /// An allocator of slots 0 .. numPages - 1: window 0 holds the first
  /// `firstWindowPages` (0: pagesPerWindow), each later one pagesPerWindow.
  /// Null, with `error` naming the value, for sizes out of range (more than
  /// 2^31 - 1 pages, or more than 2^22 windows).
  static std::unique_ptr<PageAllocator> create(int64_t numPages, int64_t pagesPerWindow,
                                               int64_t firstWindowPages, std::string &error);

  /// `count` more pages for `sequence` (a new one or one that holds pages),
  /// written to pages[0 .. count). All or nothing: when fewer than `count`
  /// slots are free, false with `error` saying so, and nothing is taken.
  bool allocate(uint64_t sequence, int64_t count, int32_t *pages, std::string &error);

  /// Every page of `sequence` back to the free slots. False, with `error`,
  /// for a sequence that holds none.
  bool release(uint64_t sequence, std::string &error);

  int64_t numPages() const { return numPages_; }
  int64_t freePages() const { return freePages_; }
  /// The windows the pages of `sequence` lie in (0 for one that holds none).
  int64_t windowsOf(uint64_t sequence) const;
  /// The pages of `sequence` in the order it got them (its block-table row),
  /// or null for one that holds none.
  const std::vector<int32_t> *pagesOf(uint64_t sequence) const;

private:
  PageAllocator(int64_t numPages, int64_t pagesPerWindow, int64_t firstWindowPages);

  int64_t windowOf(int32_t page) const;
  int32_t windowBegin(int64_t window) const;
  int32_t windowEnd(int64_t window) const;
  /// The lowest free slots of `window`, up to `count` of them (it has at
  /// least one), marked taken and written to `pages`; how many.
  int64_t take(int64_t window, int64_t count, int32_t *pages);
  /// The window's key in byFree_.
  std::tuple<bool, int64_t, int64_t> rank(int64_t window) const;
  void setFree(int64_t window, int64_t count);
  void setGrowing(int64_t window, int64_t delta);

  struct Sequence {
    std::vector<int32_t> pages;
    int64_t window = -1; ///< where its next page comes from, while it has room
  };

  int64_t numPages_, pagesPerWindow_, firstWindowPages_, freePages_;
  std::vector<uint64_t> freeBits_;     ///< bit p: slot p is free
  std::vector<int64_t> freeInWindow_;  ///< free slots per window
  std::vector<int64_t> growing_;       ///< sequences whose next page comes from the window
  /// per window: the first word of freeBits_ that may hold one of its free
  /// slots (the words before it hold none), so that take() does not scan
  /// again what it emptied
  std::vector<int64_t> firstFreeWord_;
  /// The windows with no sequence growing in them first, then by free
  /// slots, most first, then by number.
  std::set<std::tuple<bool, int64_t, int64_t>> byFree_; // (growing, -free, window)
  std::unordered_map<uint64_t, Sequence> sequences_;
};

} // namespace attn

#endif // ATTNC_PAGEALLOCATOR_H
