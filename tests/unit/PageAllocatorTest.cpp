//===- PageAllocatorTest.cpp - KV-cache pages that keep a sequence together -===//

#include "attnc/PageAllocator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <set>

using namespace attn;

namespace {

std::unique_ptr<PageAllocator> made(int64_t numPages, int64_t perWindow, int64_t first = 0) {
  std::string error;
  auto a = PageAllocator::create(numPages, perWindow, first, error);
  INFO(error);
  REQUIRE(a);
  return a;
}

std::vector<int32_t> take(PageAllocator &a, uint64_t sequence, int64_t count) {
  std::vector<int32_t> pages(count);
  std::string error;
  const bool ok = a.allocate(sequence, count, pages.data(), error);
  INFO(error);
  REQUIRE(ok);
  return pages;
}

/// A plain free list, as a server without PageAllocator keeps one: pages
/// taken from the front, given back at the end.
struct FreeList {
  std::deque<int32_t> free;
  std::map<uint64_t, std::vector<int32_t>> held;
  explicit FreeList(int32_t n) {
    for (int32_t p = 0; p < n; ++p)
      free.push_back(p);
  }
  void allocate(uint64_t s, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      held[s].push_back(free.front());
      free.pop_front();
    }
  }
  void release(uint64_t s) {
    for (int32_t p : held[s])
      free.push_back(p);
    held.erase(s);
  }
  int64_t windows(uint64_t s, int64_t perWindow) const {
    std::set<int32_t> w;
    for (int32_t p : held.at(s))
      w.insert(p / static_cast<int32_t>(perWindow));
    return static_cast<int64_t>(w.size());
  }
};

} // namespace

TEST_CASE("sequences that grow together each fill a window of their own", "[pages]") {
  auto a = made(32, 8);
  std::map<uint64_t, std::vector<int32_t>> rows;
  for (int step = 0; step < 8; ++step)
    for (uint64_t s = 0; s < 4; ++s)
      rows[s].push_back(take(*a, s, 1)[0]); // one page each in turn, as decode grows them
  for (uint64_t s = 0; s < 4; ++s) {
    INFO("sequence " << s);
    CHECK(a->windowsOf(s) == 1);
    CHECK(*a->pagesOf(s) == rows[s]);
    CHECK(std::is_sorted(rows[s].begin(), rows[s].end())); // lowest free slot first
  }
  CHECK(a->freePages() == 0);
  // A free list would have dealt them out in turn: sequence 0 gets 0, 4, 8, ...
  FreeList list(32);
  for (int step = 0; step < 8; ++step)
    for (uint64_t s = 0; s < 4; ++s)
      list.allocate(s, 1);
  CHECK(list.windows(0, 8) == 4);
}

TEST_CASE("a new sequence starts in the window with the most free slots", "[pages]") {
  auto a = made(40, 10);
  take(*a, 1, 10);                          // window 0
  take(*a, 2, 3);                           // window 1, 7 left
  CHECK(take(*a, 3, 1)[0] == 20);           // window 2: empty, and the lowest of those
  std::string error;
  REQUIRE(a->release(1, error));            // window 0 empty again
  CHECK(take(*a, 4, 12) == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 30, 31});
  CHECK(a->windowsOf(4) == 2);              // window 0 full, then window 3 (10 free)
  CHECK(a->windowsOf(99) == 0);
  CHECK(a->pagesOf(99) == nullptr);
}

TEST_CASE("a full cache still gives every free slot", "[pages]") {
  auto a = made(20, 8, 4); // windows: 0-3, 4-11, 12-19
  std::set<int32_t> seen;
  for (uint64_t s = 0; s < 20; ++s)
    for (int32_t p : take(*a, s % 3, 1))
      CHECK(seen.insert(p).second);
  CHECK(seen.size() == 20);
  CHECK(a->freePages() == 0);
  std::string error;
  int32_t page = -1;
  CHECK_FALSE(a->allocate(7, 1, &page, error));
  CHECK(error == "sequence 7 asks for 1 pages, but only 0 of the cache's 20 are free "
                 "(nothing was taken)");
}

TEST_CASE("a request larger than the free slots takes nothing", "[pages]") {
  auto a = made(16, 4);
  take(*a, 1, 10);
  std::vector<int32_t> pages(7, -1);
  std::string error;
  CHECK_FALSE(a->allocate(1, 7, pages.data(), error));
  CHECK(error.find("asks for 7 pages, but only 6") != std::string::npos);
  CHECK(a->freePages() == 6);
  CHECK(a->pagesOf(1)->size() == 10);
  CHECK(pages == std::vector<int32_t>(7, -1));
  CHECK_FALSE(a->allocate(2, 7, pages.data(), error));
  CHECK(a->pagesOf(2) == nullptr); // a refused new sequence is not registered
}

TEST_CASE("a sequence that grows a page at a time is not copied at every page", "[pages]") {
  // A server grows each sequence by one page every page_size tokens: its
  // table must grow geometrically, or each page costs a copy of all the
  // sequence holds (a sequence of 2^20 pages took 1 ms a page).
  auto a = made(1 << 16, 512);
  std::vector<int32_t> page(1);
  std::string error;
  size_t regrown = 0, capacity = 0;
  for (int i = 0; i < (1 << 16); ++i) {
    REQUIRE(a->allocate(7, 1, page.data(), error));
    const size_t now = a->pagesOf(7)->capacity();
    regrown += now != capacity;
    capacity = now;
  }
  CHECK(a->pagesOf(7)->size() == size_t(1) << 16);
  CHECK(a->freePages() == 0);
  CHECK(regrown < 40); // growing by half each time: about 27
}

TEST_CASE("bad sizes and unknown sequences are refused by name", "[pages]") {
  std::string error;
  CHECK_FALSE(PageAllocator::create(0, 64, 0, error));
  CHECK(error.find("num_pages = 0") == 0);
  CHECK_FALSE(PageAllocator::create(int64_t(1) << 31, 64, 0, error));
  CHECK(error.find("int32") != std::string::npos);
  CHECK_FALSE(PageAllocator::create(100, 0, 0, error));
  CHECK(error.find("pages_per_window = 0") == 0);
  CHECK_FALSE(PageAllocator::create(100, 8, 9, error));
  CHECK(error.find("first_window_pages = 9") == 0);
  CHECK_FALSE(PageAllocator::create(100, 8, -1, error));
  CHECK_FALSE(PageAllocator::create(std::numeric_limits<int32_t>::max(), 1, 0, error));
  CHECK(error.find("makes 2147483647 windows: at most 4194304 (make the windows larger)") !=
        std::string::npos);

  auto a = made(100, 8);
  int32_t page;
  CHECK_FALSE(a->allocate(1, -1, &page, error));
  CHECK(error.find("count = -1") == 0);
  CHECK_FALSE(a->allocate(1, 2, nullptr, error));
  CHECK(error.find("null pointer") != std::string::npos);
  CHECK_FALSE(a->allocate(1, 200, nullptr, error)); // too many first, then the pointer
  CHECK(error.find("asks for 200 pages, but only 100") != std::string::npos);
  CHECK(a->allocate(1, 0, nullptr, error)); // nothing asked, nothing taken
  CHECK(a->pagesOf(1) == nullptr);
  CHECK_FALSE(a->release(5, error));
  CHECK(error == "sequence 5 holds no pages");
  CHECK(a->freePages() == 100);
}

TEST_CASE("a window larger than the cache is the whole cache", "[pages]") {
  auto a = made(10, std::numeric_limits<int64_t>::max());
  CHECK(take(*a, 1, 4) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(take(*a, 2, 6) == std::vector<int32_t>{4, 5, 6, 7, 8, 9});
  CHECK(a->windowsOf(2) == 1);
  auto b = made(10, std::numeric_limits<int64_t>::max(), 3); // slots 0-2, then 3-9
  CHECK(take(*b, 1, 5) == std::vector<int32_t>{3, 4, 5, 6, 7});
}

TEST_CASE("windows line up with the cache's 2 MiB boundaries", "[pages]") {
  int64_t perWindow = 0, first = 0;
  std::string error;
  const int64_t page = 16 * 8 * 128 * 2; // 16 tokens, 8 KV heads, head_dim 128, bf16
  REQUIRE(PageAllocator::windowFor(page, 0, perWindow, first, error));
  CHECK(perWindow == 64);
  CHECK(first == 64);
  REQUIRE(PageAllocator::windowFor(page, (2 << 20) * 5 - 3 * page, perWindow, first, error));
  CHECK(first == 3);
  REQUIRE(PageAllocator::windowFor(page, (2 << 20) + 512, perWindow, first, error));
  CHECK(first == 63); // 2 MiB - 512 bytes before the boundary: 63 whole pages
  REQUIRE(PageAllocator::windowFor(3 << 20, 4096, perWindow, first, error));
  CHECK(perWindow == 1);
  CHECK(first == 1);
  CHECK_FALSE(PageAllocator::windowFor(0, 0, perWindow, first, error));
  CHECK(error.find("a page of 0 bytes") == 0);
}

TEST_CASE("under a server's churn no slot is handed out twice and sequences stay together",
          "[pages]") {
  // Rounds of 16 decode steps: each running sequence grows by a page, some
  // end, new ones arrive with a prompt of 1-64 pages while the cache has
  // room, the youngest is preempted when it has none.
  const unsigned seed = GENERATE(1u, 2u, 3u);
  INFO("seed " << seed);
  constexpr int64_t kPages = 4096, kPerWindow = 64;
  auto a = made(kPages, kPerWindow);
  FreeList list(kPages);
  std::mt19937 rng(seed);
  std::vector<uint64_t> running;
  uint64_t next = 0;
  std::string error;
  for (int round = 0; round < 400; ++round) {
    for (size_t i = 0; i < running.size();)
      if (std::uniform_int_distribution<int>(0, 39)(rng) == 0) {
        REQUIRE(a->release(running[i], error));
        list.release(running[i]);
        running.erase(running.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    for (;;) {
      const int64_t prompt = std::uniform_int_distribution<int64_t>(1, 64)(rng);
      if (a->freePages() < prompt + static_cast<int64_t>(running.size()) + 256)
        break;
      take(*a, next, prompt);
      list.allocate(next, prompt);
      running.push_back(next++);
    }
    while (a->freePages() < static_cast<int64_t>(running.size())) {
      REQUIRE(a->release(running.back(), error));
      list.release(running.back());
      running.pop_back();
    }
    for (uint64_t s : running) {
      take(*a, s, 1);
      list.allocate(s, 1);
    }
    // Every held slot once, and the free count the rest.
    // And each sequence's windows counted as a set of them would count them.
    std::set<int32_t> held;
    int64_t count = 0;
    for (uint64_t s : running) {
      std::set<int32_t> windows;
      for (int32_t p : *a->pagesOf(s)) {
        ++count;
        held.insert(p);
        windows.insert(p / static_cast<int32_t>(kPerWindow));
      }
      REQUIRE(a->windowsOf(s) == static_cast<int64_t>(windows.size()));
    }
    REQUIRE(static_cast<int64_t>(held.size()) == count);
    REQUIRE(a->freePages() == kPages - count);
  }
  // Pages per window a sequence's pages lie in (at most 64): the higher, the
  // fewer address translations its reads need.
  double ours = 0, theirs = 0;
  for (uint64_t s : running) {
    const double pages = static_cast<double>(a->pagesOf(s)->size());
    ours += pages / a->windowsOf(s);
    theirs += pages / list.windows(s, kPerWindow);
  }
  ours /= running.size();
  theirs /= running.size();
  INFO("pages per window: PageAllocator " << ours << ", free list " << theirs << " ("
                                          << running.size() << " sequences)");
  CHECK(running.size() > 20);
  CHECK(ours > 8); // 11-13 with these seeds, at about 92 % of the cache in use
  CHECK(ours > 4 * theirs);
}

TEST_CASE("a window gives its lowest free slots, after slots below those it gave come back",
          "[pages]") {
  // Windows of 200 slots from slot 40 (0-39, 40-239, 240-439, 440-499): each
  // spans words of the free bitmap that it shares with its neighbours. Pages
  // are taken 1-4 at a time and given back at random; each page taken must be
  // the lowest free slot of its window, as a scan from the window's start
  // would find it (take() starts from the first word that may hold one).
  const unsigned seed = GENERATE(1u, 2u);
  INFO("seed " << seed);
  constexpr int32_t kPages = 500, kFirst = 40, kPerWindow = 200;
  auto a = made(kPages, kPerWindow, kFirst);
  auto windowOf = [](int32_t p) { return p < kFirst ? 0 : 1 + (p - kFirst) / kPerWindow; };
  std::set<int32_t> free;
  for (int32_t p = 0; p < kPages; ++p)
    free.insert(p);
  std::mt19937 rng(seed);
  std::vector<uint64_t> held;
  std::string error;
  for (int step = 0; step < 4000; ++step) {
    const bool give = free.empty() || (!held.empty() && rng() % 3 == 0);
    if (give) {
      const size_t i = rng() % held.size();
      for (int32_t p : *a->pagesOf(held[i]))
        free.insert(p);
      REQUIRE(a->release(held[i], error));
      held.erase(held.begin() + static_cast<long>(i));
      continue;
    }
    // A new sequence or one held already grows by 1-4 pages (a request may
    // take the rest of one window and go on in another): each page, in the
    // order given, the lowest free slot of its window.
    const uint64_t s =
        held.empty() || rng() % 2 ? uint64_t(step) + 1000 : held[rng() % held.size()];
    const int64_t count = std::min<int64_t>(1 + rng() % 4, static_cast<int64_t>(free.size()));
    for (int32_t page : take(*a, s, count)) {
      REQUIRE(free.count(page) == 1);
      for (int32_t lower : free) {
        if (lower >= page)
          break;
        INFO("took " << page << " while " << lower << " of the same window was free");
        REQUIRE(windowOf(lower) != windowOf(page));
      }
      free.erase(page);
    }
    if (std::find(held.begin(), held.end(), s) == held.end())
      held.push_back(s);
  }
  CHECK(a->freePages() == static_cast<int64_t>(free.size()));
}
