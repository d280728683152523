//===- MaskTest.cpp - Unit tests for masks and KV-tile classification -----===//
//
// isVisible defines which keys a query sees; classifyTiles must agree with a
// brute-force scan of it for every mask, tile size and length.
//
//===----------------------------------------------------------------------===//

#include "attn/Spec.h"
#include "attn/mask.cuh"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace attn;

namespace {

/// The seed for the randomized tests: $ATTN_SPEC_TEST_SEED if set (to replay
/// a failure), else a fresh one, printed once either way.
uint64_t testSeed() {
  static const uint64_t seed = [] {
    uint64_t s;
    if (const char *env = std::getenv("ATTN_SPEC_TEST_SEED"))
      s = std::strtoull(env, nullptr, 10);
    else
      s = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("attn-spec-tests: random seed %llu "
                "(set ATTN_SPEC_TEST_SEED to replay)\n",
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

/// A readable name for a mask in failure messages.
std::string maskName(const Mask &m) { return m.str(); }

/// Compares classifyTiles for query rows [qStart, qStart + tileQ) with a
/// brute-force scan of isVisible. Returns a description of the first
/// discrepancy, or an empty string if there is none.
std::string checkTileRange(const Mask &mask, int64_t qStart, int64_t tileQ,
                           int64_t tileKV, int64_t qLen, int64_t kvLen) {
  std::ostringstream where;
  where << "mask=" << maskName(mask) << " qStart=" << qStart
        << " tileQ=" << tileQ << " tileKV=" << tileKV << " qLen=" << qLen
        << " kvLen=" << kvLen;
  TileRange r = classifyTiles(mask, qStart, tileQ, tileKV, qLen, kvLen);
  std::ostringstream got;
  got << " -> lo=" << r.lo << " fullLo=" << r.fullLo << " fullHi=" << r.fullHi
      << " hi=" << r.hi;

  const int64_t numTiles = (kvLen + tileKV - 1) / tileKV;
  if (!(0 <= r.lo && r.lo <= r.fullLo && r.fullLo <= r.fullHi &&
        r.fullHi <= r.hi && r.hi <= numTiles))
    return where.str() + got.str() +
           ": expected 0 <= lo <= fullLo <= fullHi <= hi <= " +
           std::to_string(numTiles);

  const int64_t rowEnd = std::min(qStart + tileQ, qLen);
  for (int64_t j = 0; j < numTiles; ++j) {
    const int64_t colBegin = j * tileKV, colEnd = colBegin + tileKV;
    bool any = false;
    bool full = colEnd <= kvLen; // The tail tile is never full.
    for (int64_t row = qStart; row < rowEnd; ++row) {
      for (int64_t col = colBegin; col < std::min(colEnd, kvLen); ++col) {
        if (isVisible(mask, row, col, qLen, kvLen))
          any = true;
        else
          full = false;
      }
    }
    const bool inFull = r.fullLo <= j && j < r.fullHi;
    const bool inPartial =
        (r.lo <= j && j < r.fullLo) || (r.fullHi <= j && j < r.hi);
    std::string tile = ": KV tile " + std::to_string(j);
    if (inFull && !full)
      return where.str() + got.str() + tile + " is classified full but is not";
    if (inPartial && !(any && !full))
      return where.str() + got.str() + tile +
             (full ? " is classified partial but is full"
                   : " is classified partial but nothing in it is visible");
    if (!inFull && !inPartial && any)
      return where.str() + got.str() + tile +
             " is classified masked but some keys are visible" +
             (full ? " (all of them)" : "");
  }
  return "";
}

/// Checks every query tile (qStart a multiple of tileQ below qLen).
std::string checkAllQueryTiles(const Mask &mask, int64_t tileQ, int64_t tileKV,
                               int64_t qLen, int64_t kvLen) {
  for (int64_t qStart = 0; qStart < qLen; qStart += tileQ) {
    std::string problem = checkTileRange(mask, qStart, tileQ, tileKV, qLen, kvLen);
    if (!problem.empty())
      return problem;
  }
  return "";
}

} // namespace

//===----------------------------------------------------------------------===//
// Masks
//===----------------------------------------------------------------------===//

TEST_CASE("masks align queries and keys at the bottom right", "[spec][mask]") {
  const Mask causal{MaskKind::Causal, 0};
  SECTION("two queries over five keys") {
    // Query 0 sits at key position 3, query 1 at key position 4.
    for (int64_t col = 0; col < 5; ++col) {
      INFO("col " << col);
      CHECK(isVisible(causal, 0, col, 2, 5) == (col <= 3));
      CHECK(isVisible(causal, 1, col, 2, 5));
    }
  }
  SECTION("more queries than keys leaves the first rows fully masked") {
    // q_len 5, kv_len 2: query i sits at key position i - 3.
    for (int64_t row = 0; row < 3; ++row)
      for (int64_t col = 0; col < 2; ++col)
        CHECK_FALSE(isVisible(causal, row, col, 5, 2));
    CHECK(isVisible(causal, 3, 0, 5, 2));
    CHECK_FALSE(isVisible(causal, 3, 1, 5, 2));
    CHECK(isVisible(causal, 4, 0, 5, 2));
    CHECK(isVisible(causal, 4, 1, 5, 2));
  }
  SECTION("a square causal mask is lower triangular") {
    for (int64_t row = 0; row < 6; ++row)
      for (int64_t col = 0; col < 6; ++col)
        CHECK(isVisible(causal, row, col, 6, 6) == (col <= row));
  }
  SECTION("a sliding window sees the last W keys up to its own position") {
    const Mask sw{MaskKind::SlidingWindow, 2};
    // Square, q_len = kv_len = 4: row r sees r-1 and r.
    CHECK(isVisible(sw, 2, 1, 4, 4));
    CHECK(isVisible(sw, 2, 2, 4, 4));
    CHECK_FALSE(isVisible(sw, 2, 0, 4, 4));
    CHECK_FALSE(isVisible(sw, 2, 3, 4, 4));
    CHECK(isVisible(sw, 0, 0, 4, 4));
    // One query over ten keys sits at position 9: sees 8 and 9.
    for (int64_t col = 0; col < 10; ++col)
      CHECK(isVisible(sw, 0, col, 1, 10) == (col >= 8));
    // A window of one key is the diagonal.
    const Mask diag{MaskKind::SlidingWindow, 1};
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t col = 0; col < 4; ++col)
        CHECK(isVisible(diag, row, col, 4, 4) == (row == col));
  }
  SECTION("no mask sees every key, and nothing outside the keys is visible") {
    const Mask none;
    for (int64_t row = 0; row < 5; ++row)
      for (int64_t col = 0; col < 2; ++col)
        CHECK(isVisible(none, row, col, 5, 2));
    for (const Mask &m : {none, causal, Mask{MaskKind::SlidingWindow, 3}}) {
      CHECK_FALSE(isVisible(m, 1, -1, 2, 2));
      CHECK_FALSE(isVisible(m, 1, 2, 2, 2));
      CHECK_FALSE(isVisible(m, 0, 0, 0, 0));
    }
  }
}

TEST_CASE("classifyTiles splits a causal square into full and partial tiles",
          "[spec][mask]") {
  const Mask causal{MaskKind::Causal, 0};
  // 8 x 8 causal, 4 x 4 tiles: the first query tile sees a triangle of tile 0.
  CHECK(classifyTiles(causal, 0, 4, 4, 8, 8) == TileRange{0, 0, 0, 1});
  // The second sees tile 0 fully and a triangle of tile 1.
  CHECK(classifyTiles(causal, 4, 4, 4, 8, 8) == TileRange{0, 0, 1, 2});
  // No mask: every tile full but the ragged tail.
  CHECK(classifyTiles(Mask{}, 0, 4, 4, 8, 10) == TileRange{0, 0, 2, 3});
  // No keys at all.
  CHECK(classifyTiles(Mask{}, 0, 4, 4, 8, 0) == TileRange{});
  // Rows that sit before the first key under a causal mask see nothing.
  CHECK(classifyTiles(causal, 0, 2, 4, 8, 4) == TileRange{});
}

TEST_CASE("classifyTiles matches a brute-force scan of small masks exhaustively",
          "[spec][mask]") {
  std::vector<Mask> masks = {Mask{}, Mask{MaskKind::Causal, 0}};
  for (int64_t w = 1; w <= 7; ++w)
    masks.push_back({MaskKind::SlidingWindow, w});
  int64_t configs = 0;
  for (const Mask &mask : masks)
    for (int64_t tileQ = 1; tileQ <= 5; ++tileQ)
      for (int64_t tileKV = 1; tileKV <= 5; ++tileKV)
        for (int64_t qLen = 1; qLen <= 12; ++qLen)
          for (int64_t kvLen = 0; kvLen <= 12; ++kvLen) {
            ++configs;
            REQUIRE(checkAllQueryTiles(mask, tileQ, tileKV, qLen, kvLen) == "");
          }
  CHECK(configs == 9 * 5 * 5 * 12 * 13);
}

TEST_CASE("classifyTiles matches a brute-force scan of random masks",
          "[spec][mask]") {
  const uint64_t seed = testSeed();
  INFO("seed " << seed << " (set ATTN_SPEC_TEST_SEED to replay)");
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int iter = 0; iter < 100000; ++iter) {
    // None, causal or a sliding window (the order of MaskKind).
    Mask mask{static_cast<MaskKind>(uniform(0, 2)), 0};
    if (mask.kind == MaskKind::SlidingWindow)
      mask.window = uniform(1, 40);
    const int64_t tileQ = uniform(1, 9), tileKV = uniform(1, 9);
    const int64_t qLen = uniform(1, 40), kvLen = uniform(0, 40);
    REQUIRE(checkAllQueryTiles(mask, tileQ, tileKV, qLen, kvLen) == "");
  }
}

TEST_CASE("split_range cuts a tile range into consecutive, near-equal splits",
          "[spec][split]") {
  // The rule the decode kernels use (templates/attn/mask.cuh), which must
  // match attn.split_range in the IR: every tile in exactly one split, in
  // order, split sizes differing by at most one.
  for (int64_t lo = 0; lo < 4; ++lo)
    for (int64_t n = 0; n <= 70; ++n)
      for (int splits = 1; splits <= 17; ++splits) {
        INFO("lo " << lo << ", " << n << " tiles, " << splits << " splits");
        int64_t next = lo, smallest = n, largest = 0;
        for (int split = 0; split < splits; ++split) {
          const kernel::SplitTiles r = kernel::split_range(lo, lo + n, split, splits);
          REQUIRE(r.lo == next);
          REQUIRE(r.hi >= r.lo);
          smallest = std::min<int64_t>(smallest, r.hi - r.lo);
          largest = std::max<int64_t>(largest, r.hi - r.lo);
          next = r.hi;
        }
        CHECK(next == lo + n);
        CHECK(largest - smallest <= 1);
      }
}
