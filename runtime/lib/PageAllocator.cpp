//===- PageAllocator.cpp - KV-cache pages that keep a sequence together ---===//

#include "attnc/PageAllocator.h"

#include <algorithm>
#include <limits>

namespace attn {

bool PageAllocator::windowFor(int64_t pageBytes, uint64_t address, int64_t &pagesPerWindow,
                              int64_t &firstWindowPages, std::string &error) {
  if (pageBytes <= 0) {
    error = "a page of " + std::to_string(pageBytes) + " bytes: it must be at least 1";
    return false;
  }
  // A page larger than a window is a window of its own.
  pagesPerWindow = std::max<int64_t>(1, kWindowBytes / pageBytes);
  // The slots before the cache's first 2 MiB boundary make a window of
  // their own, so that the next one starts on it. Later windows start on
  // boundaries too when a page's bytes divide 2 MiB and the cache starts a
  // whole number of pages before one; otherwise a window (at most 2 MiB)
  // may reach into two of the GPU's pages.
  const uint64_t toBoundary = (kWindowBytes - address % kWindowBytes) % kWindowBytes;
  const int64_t before = static_cast<int64_t>(toBoundary) / pageBytes;
  firstWindowPages = before > 0 && before < pagesPerWindow ? before : pagesPerWindow;
  return true;
}

std::unique_ptr<PageAllocator> PageAllocator::create(int64_t numPages, int64_t pagesPerWindow,
                                                     int64_t firstWindowPages,
                                                     std::string &error) {
  // The block table holds int32 slots.
  constexpr int64_t kMaxPages = std::numeric_limits<int32_t>::max();
  if (numPages < 1 || numPages > kMaxPages) {
    error = "num_pages = " + std::to_string(numPages) + ": expected 1 .. " +
            std::to_string(kMaxPages) + " (block-table entries are int32)";
    return nullptr;
  }
  if (pagesPerWindow < 1) {
    error = "pages_per_window = " + std::to_string(pagesPerWindow) + ": expected at least 1";
    return nullptr;
  }
  if (firstWindowPages < 0 || firstWindowPages > pagesPerWindow) {
    error = "first_window_pages = " + std::to_string(firstWindowPages) + ": expected 0 .. " +
            std::to_string(pagesPerWindow) + " (0: a full window)";
    return nullptr;
  }
  if (firstWindowPages == 0)
    firstWindowPages = pagesPerWindow;
  // A window larger than the cache is the cache (and keeps the arithmetic in range).
  pagesPerWindow = std::min(pagesPerWindow, numPages);
  firstWindowPages = std::min(firstWindowPages, numPages);
  // Each window costs about 90 bytes of bookkeeping; 2^22 of them (some 360
  // MiB) cover 8 TiB in windows of 2 MiB.
  constexpr int64_t kMaxWindows = int64_t(1) << 22;
  const int64_t windows =
      1 + (numPages - firstWindowPages + pagesPerWindow - 1) / pagesPerWindow;
  if (windows > kMaxWindows) {
    error = "num_pages = " + std::to_string(numPages) + " in windows of " +
            std::to_string(pagesPerWindow) + " pages makes " + std::to_string(windows) +
            " windows: at most " + std::to_string(kMaxWindows) + " (make the windows larger)";
    return nullptr;
  }
  return std::unique_ptr<PageAllocator>(
      new PageAllocator(numPages, pagesPerWindow, firstWindowPages));
}

PageAllocator::PageAllocator(int64_t numPages, int64_t pagesPerWindow, int64_t firstWindowPages)
    : numPages_(numPages), pagesPerWindow_(pagesPerWindow), firstWindowPages_(firstWindowPages),
      freePages_(numPages) {
  freeBits_.assign((numPages + 63) / 64, ~uint64_t(0));
  const int64_t windows = windowOf(static_cast<int32_t>(numPages - 1)) + 1;
  freeInWindow_.resize(windows);
  growing_.assign(windows, 0);
  firstFreeWord_.resize(windows);
  for (int64_t w = 0; w < windows; ++w) {
    firstFreeWord_[w] = windowBegin(w) / 64;
    freeInWindow_[w] = windowEnd(w) - windowBegin(w);
    byFree_.insert(rank(w));
  }
}

int64_t PageAllocator::windowOf(int32_t page) const {
  return page < firstWindowPages_ ? 0 : 1 + (page - firstWindowPages_) / pagesPerWindow_;
}

int32_t PageAllocator::windowBegin(int64_t window) const {
  return static_cast<int32_t>(window == 0 ? 0 : firstWindowPages_ + (window - 1) * pagesPerWindow_);
}

int32_t PageAllocator::windowEnd(int64_t window) const {
  const int64_t end = firstWindowPages_ + window * pagesPerWindow_;
  return static_cast<int32_t>(std::min(end, numPages_));
}

std::tuple<bool, int64_t, int64_t> PageAllocator::rank(int64_t window) const {
  return {growing_[window] > 0, -freeInWindow_[window], window};
}

// A window's rank changes by moving its node in byFree_ (extract, rewrite,
// insert the same node): no allocation, so nothing can throw half-way and
// leave a window out of the set.
void PageAllocator::setFree(int64_t window, int64_t count) {
  auto node = byFree_.extract(rank(window));
  freeInWindow_[window] = count;
  node.value() = rank(window);
  byFree_.insert(std::move(node));
}

void PageAllocator::setGrowing(int64_t window, int64_t delta) {
  auto node = byFree_.extract(rank(window));
  growing_[window] += delta;
  node.value() = rank(window);
  byFree_.insert(std::move(node));
}

int64_t PageAllocator::take(int64_t window, int64_t count, int32_t *pages) {
  // The window's bits, a word at a time from the first that may hold a free
  // slot; the first word and the last may hold other windows' slots, masked
  // off. The lowest free slots are taken, as a scan from the window's start
  // would take them, and the window's rank moves once for them all.
  const int64_t begin = windowBegin(window), end = windowEnd(window);
  count = std::min(count, freeInWindow_[window]);
  int64_t taken = 0;
  for (int64_t word = firstFreeWord_[window]; taken < count && word * 64 < end; ++word) {
    uint64_t bits = freeBits_[word];
    if (word * 64 < begin)
      bits &= ~uint64_t(0) << (begin - word * 64);
    if (end - word * 64 < 64)
      bits &= (uint64_t(1) << (end - word * 64)) - 1;
    firstFreeWord_[window] = word;
    for (; bits && taken < count; bits &= bits - 1) {
      const int32_t page = static_cast<int32_t>(word * 64 + __builtin_ctzll(bits));
      freeBits_[word] &= ~(uint64_t(1) << (page % 64));
      pages[taken++] = page;
    }
  }
  setFree(window, freeInWindow_[window] - taken);
  freePages_ -= taken;
  return taken;
}

bool PageAllocator::allocate(uint64_t sequence, int64_t count, int32_t *pages,
                             std::string &error) {
  if (count < 0) {
    error = "count = " + std::to_string(count) + ": expected 0 or more pages";
    return false;
  }
  if (count > freePages_) {
    error = "sequence " + std::to_string(sequence) + " asks for " + std::to_string(count) +
            " pages, but only " + std::to_string(freePages_) + " of the cache's " +
            std::to_string(numPages_) + " are free (nothing was taken)";
    return false;
  }
  if (count > 0 && !pages) {
    error = "the output for " + std::to_string(count) + " pages is a null pointer";
    return false;
  }
  if (count == 0)
    return true;
  auto [entry, added] = sequences_.try_emplace(sequence);
  Sequence &s = entry->second;
  try {
    // Nothing below can fail once a slot is taken. The room grows by at least
    // half each time: reserving the exact size would copy every page a
    // sequence holds on each page it grows by (quadratic over its life).
    const size_t need = s.pages.size() + static_cast<size_t>(count);
    if (need > s.pages.capacity())
      s.pages.reserve(std::max(need, s.pages.capacity() + s.pages.capacity() / 2));
  } catch (...) {
    if (added) // all or nothing: a new sequence that got no page is not kept
      sequences_.erase(entry);
    throw;
  }
  for (int64_t i = 0; i < count;) {
    // Where its last page came from, while that window has room; else the
    // window with the most room among those no other sequence grows in, or
    // any window once none of those has room.
    if (s.window < 0 || freeInWindow_[s.window] == 0) {
      if (s.window >= 0)
        setGrowing(s.window, -1);
      auto best = byFree_.begin();
      if (std::get<1>(*best) == 0) // no window without a growing sequence has room
        best = byFree_.lower_bound({true, std::numeric_limits<int64_t>::min(), 0});
      s.window = std::get<2>(*best);
      setGrowing(s.window, +1);
    }
    const int64_t taken = take(s.window, count - i, pages + i);
    s.pages.insert(s.pages.end(), pages + i, pages + i + taken);
    i += taken;
  }
  return true;
}

bool PageAllocator::release(uint64_t sequence, std::string &error) {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) {
    error = "sequence " + std::to_string(sequence) + " holds no pages";
    return false;
  }
  // A sequence's pages come in runs from one window: each run moves its
  // window's rank once, not once a page.
  const std::vector<int32_t> &pages = it->second.pages;
  for (size_t i = 0; i < pages.size();) {
    const int64_t w = windowOf(pages[i]);
    int64_t freed = 0;
    for (; i < pages.size() && windowOf(pages[i]) == w; ++i, ++freed) {
      freeBits_[pages[i] / 64] |= uint64_t(1) << (pages[i] % 64);
      firstFreeWord_[w] = std::min<int64_t>(firstFreeWord_[w], pages[i] / 64);
    }
    setFree(w, freeInWindow_[w] + freed);
  }
  freePages_ += static_cast<int64_t>(it->second.pages.size());
  if (it->second.window >= 0)
    setGrowing(it->second.window, -1);
  sequences_.erase(it);
  return true;
}

int64_t PageAllocator::windowsOf(uint64_t sequence) const {
  const std::vector<int32_t> *pages = pagesOf(sequence);
  if (!pages)
    return 0;
  // One entry per run of pages from one window (a sequence's pages mostly
  // come so), then the distinct ones.
  std::vector<int64_t> windows;
  for (int32_t page : *pages)
    if (windows.empty() || windows.back() != windowOf(page))
      windows.push_back(windowOf(page));
  std::sort(windows.begin(), windows.end());
  return std::unique(windows.begin(), windows.end()) - windows.begin();
}

const std::vector<int32_t> *PageAllocator::pagesOf(uint64_t sequence) const {
  auto it = sequences_.find(sequence);
  return it == sequences_.end() ? nullptr : &it->second.pages;
}

} // namespace attn
