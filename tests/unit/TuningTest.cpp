//===- TuningTest.cpp - The tuning table: file round trip and its effect --===//

#include "attnc/Tuning.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

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
  CHECK(parsed("mask=causal,gqa=2,mma=sync").tile_q == 128); // not tuned: built-in
  CHECK(parsed("mask=causal,gqa=4,tile_kv=32").tile_q == 128); // one tile given: built-in
  TuningTable::install(nullptr);
  CHECK(parsed("mask=causal,gqa=4,mma=sync").tile_q == 128);
  std::remove(path.c_str());
}

TEST_CASE("a tuned pipeline depth comes with its tiles, unless the spec sets its own",
          "[tuning]") {
  const std::string path = tempPath("stages.txt");
  TuningTable table;
  std::string error;
  table.set(parsed("mask=causal"), {128, 64, 1}, "one stage");
  table.set(parsed("mode=decode,page_size=16,gqa=4"), {1, 64, 4}, "");
  REQUIRE(table.save(path, error));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find(": tile_q=128,tile_kv=64,stages=1  # one stage") != std::string::npos);

  TuningTable again;
  REQUIRE(again.load(path, error));
  // The key leaves tiles and stages out: a spec that sets stages finds the entry.
  const TuningTable::Entry *e = again.find(parsed("mask=causal,stages=2"));
  REQUIRE(e);
  CHECK(e->tiles.stages == 1);
  TuningTable::install(&again);
  Spec s = parsed("mask=causal");
  CHECK(s.tile_kv == 64);
  CHECK(s.stages == 1);
  CHECK(kvStages(s) == 1);
  CHECK(parsed("mask=causal,stages=2").stages == 2);          // its own depth stays
  CHECK(parsed("mask=causal,tile_kv=32").stages == kStagesAuto); // one tile given: built-in
  CHECK(kvStages(parsed("mode=decode,page_size=16,gqa=4")) == 4);
  // A decode spec's tile_q is its query tokens (attn::attention and the C API
  // give it): its tuned tile_kv and depth apply all the same.
  const Spec fourTokens = parsed("mode=decode,page_size=16,gqa=4,tile_q=4");
  CHECK(fourTokens.tile_q == 4);
  CHECK(fourTokens.tile_kv == 64);
  CHECK(kvStages(fourTokens) == 4);
  CHECK(kvStages(parsed("mode=decode,page_size=16,gqa=4,tile_q=4,tile_kv=64")) != 4); // tile_kv given
  // A line that records another tile_q for decode (written by hand: tune records 1) does
  // not make a spec that leaves it open a step of that many tokens.
  again.set(parsed("mode=decode,page_size=16,gqa=2"), {16, 128}, "");
  const Spec oneToken = parsed("mode=decode,page_size=16,gqa=2");
  CHECK(oneToken.tile_q == 1);
  CHECK(oneToken.tile_kv == 128);
  TuningTable::install(nullptr);
  CHECK(parsed("mask=causal").stages == kStagesAuto);
  std::remove(path.c_str());

  // A depth its tiles cannot take refuses the whole table, naming the line.
  const std::string bad = tempPath("bad-stages.txt");
  std::ofstream(bad) << tuningKey(parsed("mask=causal")) << ": tile_q=64,tile_kv=64,stages=3\n";
  TuningTable refused;
  CHECK_FALSE(refused.load(bad, error));
  CHECK(error == bad + ":1: invalid spec: stages = 3: must be auto, 1 or 2 for mode = prefill");
  std::remove(bad.c_str());
}

TEST_CASE("a bad tuning table is refused with its line, and bad tiles are never used",
          "[tuning]") {
  const std::string path = tempPath("bad.txt");
  std::ofstream(path) << "# comment\n\nhead_dim=128: tile_q=64\n";
  TuningTable table;
  std::string error;
  CHECK_FALSE(table.load(path, error));
  CHECK(error == path + ":3: expected 'SPEC: tile_q=N,tile_kv=N[,stages=N]' (each field once), "
                        "got 'head_dim=128: tile_q=64'");
  CHECK(table.size() == 0);
  // A field given twice, and a spec given on two lines: which one is meant is not guessed.
  std::ofstream(path) << "head_dim=128: tile_q=64,tile_kv=64,tile_q=128\n";
  CHECK_FALSE(table.load(path, error));
  CHECK(error.rfind(path + ":1: expected 'SPEC: tile_q=N,tile_kv=N[,stages=N]' (each field once)",
                    0) == 0);
  const std::string key = tuningKey(parsed("mask=causal"));
  std::ofstream(path) << key << ": tile_q=64,tile_kv=64\n# the same again\n"
                      << key << ": tile_q=128,tile_kv=64\n";
  CHECK_FALSE(table.load(path, error));
  CHECK(error == path + ":3: the spec of line 1 again (one line per spec: which tiles are meant?)");
  CHECK(table.size() == 0);

  std::ofstream(path) << "head_dim=100: tile_q=64,tile_kv=64\n";
  CHECK_FALSE(table.load(path, error));
  CHECK(error.rfind(path + ":1: invalid spec: head_dim = 100", 0) == 0);

  // Tiles no kernel can take (tile_q = 24 on a GPU target) are skipped.
  TuningTable odd;
  odd.set(parsed("mask=causal,mma=sync"), {24, 64}, "");
  TuningTable::install(&odd);
  CHECK(parsed("mask=causal,mma=sync").tile_q == 128);
  TuningTable::install(nullptr);
  std::remove(path.c_str());
}

TEST_CASE("a tuning table saved through a link keeps the link, and a folder is no table",
          "[tuning]") {
  const std::string file = tempPath("linked.txt"), link = tempPath("link.txt");
  std::remove(file.c_str());
  std::remove(link.c_str());
  REQUIRE(::symlink(file.c_str(), link.c_str()) == 0);
  TuningTable table;
  std::string error;
  table.set(parsed("mask=causal"), {64, 64}, "");
  REQUIRE(table.save(link, error));
  char target[4096];
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target);
  REQUIRE(n > 0); // still a link, to the same file
  CHECK(std::string(target, n) == file);
  TuningTable again;
  REQUIRE(again.load(file, error));
  CHECK(again.size() == 1);

  const std::string folder = tempPath("folder");
  REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
  CHECK_FALSE(again.load(folder, error));
  CHECK(error == folder + " is not a file");
  ::rmdir(folder.c_str());
  std::remove(link.c_str());
  std::remove(file.c_str());
}

TEST_CASE("a table that cannot be read is not taken for an empty one", "[tuning]") {
  // Two links that name each other: no table can be read or written there,
  // and neither link is replaced by a file.
  const std::string a = tempPath("loop-a.txt"), b = tempPath("loop-b.txt");
  std::remove(a.c_str());
  std::remove(b.c_str());
  REQUIRE(::symlink(b.c_str(), a.c_str()) == 0);
  REQUIRE(::symlink(a.c_str(), b.c_str()) == 0);
  TuningTable table;
  std::string error;
  CHECK_FALSE(table.load(a, error));
  CHECK(error == a + " cannot be read (" + std::strerror(ELOOP) + ")");
  table.set(parsed("mask=causal"), {64, 64}, "");
  CHECK_FALSE(table.save(a, error));
  CHECK(error == "cannot write the tuning table " + a + " (" + std::strerror(ELOOP) + ")");
  CHECK_FALSE(TuningTable::record(a, parsed("mask=causal"), {64, 64}, "", error));
  struct stat st;
  REQUIRE(::lstat(a.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  std::remove(a.c_str());
  std::remove(b.c_str());
  std::remove((a + ".lock").c_str());

  // A FIFO is named, not waited on; a file far larger than any table, and a
  // binary line, are refused without the whole of either in the message.
  const std::string fifo = tempPath("fifo.txt");
  std::remove(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_FALSE(table.load(fifo, error));
  CHECK(error == fifo + " is not a file");
  std::remove(fifo.c_str());
  const std::string huge = tempPath("huge.txt");
  { std::ofstream(huge) << "x"; }
  REQUIRE(::truncate(huge.c_str(), off_t(17) << 20) == 0); // sparse: no disk taken
  CHECK_FALSE(table.load(huge, error));
  CHECK(error == huge + " is over 16 MiB: not a table attnc tune writes");
  {
    std::ofstream out(huge, std::ios::trunc | std::ios::binary);
    out << std::string("\x7f" "ELF\0\x01", 6) << std::string(300, 'a') << "\n";
  }
  CHECK_FALSE(table.load(huge, error));
  CHECK(error == huge + ":1: expected 'SPEC: tile_q=N,tile_kv=N[,stages=N]' (each field once), "
                        "got '\\x7fELF\\x00\\x01" + std::string(24, 'a') + "' ... '" +
                        std::string(60, 'a') + "' (306 bytes)");
  // A real key is long: the tiles at the end of the line are quoted.
  const std::string key = tuningKey(parsed("mask=causal"));
  std::ofstream(huge, std::ios::trunc) << key << ": tile_q=64,tile_kv=6O\n";
  CHECK_FALSE(table.load(huge, error));
  CHECK(error.find("' ... '") != std::string::npos);
  CHECK(error.find("tile_q=64,tile_kv=6O' (") != std::string::npos);
  std::remove(huge.c_str());
}

TEST_CASE("a link planted at the table's temporary name writes nothing it names", "[tuning]") {
  const std::string path = tempPath("planted.txt"), victim = tempPath("victim.txt");
  { std::ofstream(victim) << "keep me"; }
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  REQUIRE(::symlink(victim.c_str(), tmp.c_str()) == 0);
  TuningTable table;
  std::string error;
  table.set(parsed("mask=causal"), {64, 64}, "");
  REQUIRE(table.save(path, error));
  std::ifstream in(victim);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(kept == "keep me");
  TuningTable again;
  REQUIRE(again.load(path, error));
  CHECK(again.size() == 1);
  std::remove(path.c_str());
  std::remove(victim.c_str());
}

TEST_CASE("tuners recording into one table at once keep each other's entries", "[tuning]") {
  // Each process reads the table, then records its own entry: without the
  // lock and the read under it, the last writer's table would hold one entry.
  const std::string path = tempPath("shared.txt");
  std::remove(path.c_str());
  const int kProcesses = 6;
  const char *const dims[] = {"32", "64", "96", "128", "192", "256"};
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      TuningTable before;
      std::string error;
      if (!before.load(path, error))
        _exit(2);
      usleep(20000); // each has read before any records
      const bool ok = TuningTable::record(path, parsed(std::string("head_dim=") + dims[i]),
                                          {64, 64}, "", error);
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  TuningTable table;
  std::string error;
  REQUIRE(table.load(path, error));
  CHECK(table.size() == size_t(kProcesses));
  for (const char *d : dims)
    CHECK(table.find(parsed(std::string("head_dim=") + d)) != nullptr);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
}

TEST_CASE("a spec whose tiles a tuning table gave has an untuned twin with the built-in tiles",
          "[tuning]") {
  TuningTable table;
  table.set(parsed("mask=causal,gqa=4"), {64, 64, 1}, "");
  table.set(parsed("mode=decode,page_size=16,gqa=4"), {1, 128, 2}, "");
  const Spec builtInPrefill = parsed("mask=causal,gqa=4");
  const Spec builtInDecode = parsed("mode=decode,page_size=16,gqa=4,tile_q=3");
  CHECK_FALSE(untunedSpec(builtInPrefill)); // no table installed
  TuningTable::install(&table);
  const Spec tuned = parsed("mask=causal,gqa=4");
  REQUIRE(tuned.tile_kv == 64);
  REQUIRE(tuned.stages == 1);
  std::optional<Spec> twin = untunedSpec(tuned);
  REQUIRE(twin);
  CHECK(*twin == builtInPrefill);
  CHECK(twin->stages == kStagesAuto);
  // A decode spec keeps its query tokens.
  twin = untunedSpec(parsed("mode=decode,page_size=16,gqa=4,tile_q=3"));
  REQUIRE(twin);
  CHECK(*twin == builtInDecode);
  CHECK(twin->tile_q == 3);
  // Tiles other than the table's are the spec's own; the twin's own tiles
  // are no table's; a kind of spec the table lacks has none.
  CHECK_FALSE(untunedSpec(parsed("mask=causal,gqa=4,tile_q=64,tile_kv=32")));
  CHECK_FALSE(untunedSpec(builtInPrefill));
  CHECK_FALSE(untunedSpec(parsed("mask=causal,gqa=2")));
  // The table's tiles with a depth of the spec's own are what the table gives
  // a spec that sets that depth: its twin keeps the depth.
  twin = untunedSpec(parsed("mask=causal,gqa=4,tile_q=64,tile_kv=64,stages=2"));
  REQUIRE(twin);
  CHECK(*twin == parsed("mask=causal,gqa=4,stages=2,tile_q=128,tile_kv=128"));
  TuningTable::install(nullptr);
  CHECK_FALSE(untunedSpec(tuned));
}
