//===- TuningTest.cpp - The tuning table: file round trip and its effect --===//

#include "attnc/Tuning.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace attn;

namespace {
Spec parsed(const std::string &text) {
  SpecResult r = parseSpec(text);
  INFO(text);
  REQUIRE(r);
  return *r.spec;
}
std::string tempPath(const char *name) {
  return "/tmp/attnc-tuning-test-" + std::to_string(getpid()) + "-" + name;
}
} // namespace

TEST_CASE("a tuning table round-trips and becomes the defaults of its specs", "[tuning]") {
  const std::string path = tempPath("table.txt");
  TuningTable table;
  std::string error;
  REQUIRE(table.load(path, error)); // no file yet: empty
  CHECK(table.size() == 0);
  table.set(parsed("mask=causal,gqa=4"), {64, 64}, "1.05x");
  table.set(parsed("mode=decode,page_size=16,gqa=8"), {1, 128}, "");
  REQUIRE(table.save(path, error));

  TuningTable again;
  REQUIRE(again.load(path, error));
  CHECK(again.size() == 2);
  const TuningTable::Entry *e = again.find(parsed("mask=causal,gqa=4,tile_kv=128"));
  REQUIRE(e); // the key leaves the tiles out
  CHECK(e->tiles.tile_q == 64);
  CHECK(e->note == "1.05x");

  TuningTable::install(&again);
  CHECK(parsed("mask=causal,gqa=4").tile_kv == 64);
  CHECK(parsed("mask=causal,gqa=4").tile_q == 64);
  CHECK(parsed("mode=decode,page_size=16,gqa=8").tile_kv == 128);
  CHECK(parsed("mask=causal,gqa=2").tile_q == 128); // not tuned: built-in
  CHECK(parsed("mask=causal,gqa=4,tile_kv=32").tile_q == 128); // one tile given: built-in
  TuningTable::install(nullptr);
  CHECK(parsed("mask=causal,gqa=4").tile_q == 128);
  std::remove(path.c_str());
}

TEST_CASE("a bad tuning table is refused with its line, and bad tiles are never used",
          "[tuning]") {
  const std::string path = tempPath("bad.txt");
  std::ofstream(path) << "# comment\n\nhead_dim=128: tile_q=64\n";
  TuningTable table;
  std::string error;
  CHECK_FALSE(table.load(path, error));
  CHECK(error == path + ":3: expected 'SPEC: tile_q=N,tile_kv=N', got 'head_dim=128: tile_q=64'");
  CHECK(table.size() == 0);

  std::ofstream(path) << "head_dim=100: tile_q=64,tile_kv=64\n";
  CHECK_FALSE(table.load(path, error));
  CHECK(error.rfind(path + ":1: invalid spec: head_dim = 100", 0) == 0);

  // Tiles no kernel can take (tile_q = 24 on a GPU target) are skipped.
  TuningTable odd;
  odd.set(parsed("mask=causal"), {24, 64}, "");
  TuningTable::install(&odd);
  CHECK(parsed("mask=causal").tile_q == 128);
  TuningTable::install(nullptr);
  std::remove(path.c_str());
}
