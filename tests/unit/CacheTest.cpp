//===- CacheTest.cpp - The kernel cache, with real NVRTC cubins -----------===//

#include "attnc/KernelCache.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace attn;

namespace {
std::string probeSource() {
  std::ifstream in(ATTNC_TEST_DIR "/templates_probe.cu");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A fresh, empty directory removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char buf[] = "/tmp/attnc-cache-test.XXXXXX";
    path = mkdtemp(buf);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

CudaCompileOptions sm90() {
  CudaCompileOptions o;
  o.arch = "sm_90a";
  return o;
}

std::string entryPath(const KernelCache &cache) {
  auto entries = cache.list();
  REQUIRE(entries.size() == 1);
  return cache.directory() + "/" + entries[0].file;
}
} // namespace

TEST_CASE("a kernel compiles once, then comes from memory, then from disk in a new process",
          "[cache]") {
  TempDir dir;
  const std::string src = probeSource();
  KernelCache cache(dir.path);
  REQUIRE(cache.onDisk());
  CacheLookup cold = cache.get(src, "probe", sm90());
  INFO(cold.error);
  REQUIRE(cold);
  CHECK(cold.source == CacheSource::Compiled);
  CacheLookup warm = cache.get(src, "probe", sm90());
  REQUIRE(warm);
  CHECK(warm.source == CacheSource::Memory);
  CHECK(warm.binary == cold.binary);
  KernelCache fresh(dir.path); // as a new process would
  CacheLookup disk = fresh.get(src, "probe", sm90());
  REQUIRE(disk);
  CHECK(disk.source == CacheSource::Disk);
  CHECK(disk.binary->cubin == cold.binary->cubin);
  CHECK(cold.binary->registers > 0); // ptxas' report, kept with the entry
  CHECK(disk.binary->registers == cold.binary->registers);
  CHECK(disk.binary->spillStoreBytes == cold.binary->spillStoreBytes);
  std::printf("kernel cache: cold NVRTC %.3f s, disk hit %.3f ms, memory hit %.1f us\n",
              cold.seconds, disk.seconds * 1e3, warm.seconds * 1e6);
  CHECK(warm.seconds < 1e-3);
  CHECK(disk.seconds < 0.05);
  // Another architecture or another source is another entry.
  CHECK(KernelCache::key(src, "probe", sm90()) != KernelCache::key(src + " ", "probe", sm90()));
  CudaCompileOptions sm80;
  sm80.arch = "sm_80";
  CHECK(KernelCache::key(src, "probe", sm90()) != KernelCache::key(src, "probe", sm80));
}

TEST_CASE("the cache key holds the template headers the source includes", "[cache]") {
  const std::string src = probeSource();
  const uint64_t embedded = templatesDigest(templateHeaders());
  CHECK(KernelCache::key(src, "probe", sm90()) == KernelCache::key(src, "probe", sm90(), embedded));
  // One byte of one header changed: another digest, another key.
  std::vector<std::string> contents;
  for (const TemplateHeader &h : templateHeaders())
    contents.push_back(h.contents);
  REQUIRE(!contents.empty());
  contents[0].back() ^= 1;
  std::vector<TemplateHeader> edited;
  for (size_t i = 0; i < contents.size(); ++i)
    edited.push_back({templateHeaders()[i].name, contents[i].c_str()});
  const uint64_t other = templatesDigest(edited);
  CHECK(other != embedded);
  CHECK(KernelCache::key(src, "probe", sm90(), other) != KernelCache::key(src, "probe", sm90()));
  // Names count as well as contents, and so does where one header ends.
  std::vector<TemplateHeader> renamed = edited;
  renamed[0].name = "attn/renamed.cuh";
  CHECK(templatesDigest(renamed) != other);
  CHECK(templatesDigest({{"a", "bc"}}) != templatesDigest({{"ab", "c"}}));
  CHECK(templatesDigest(edited) == other);
}

TEST_CASE("a corrupted cubin in the disk cache is rebuilt", "[cache]") {
  TempDir dir;
  const std::string src = probeSource();
  std::vector<char> original;
  {
    KernelCache cache(dir.path);
    REQUIRE(cache.get(src, "probe", sm90()));
    const std::string file = entryPath(cache);
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x5a'); // one byte of the cubin changed
  }
  KernelCache cache(dir.path);
  CacheLookup again = cache.get(src, "probe", sm90());
  REQUIRE(again);
  CHECK(again.source == CacheSource::Compiled);
  CHECK(KernelCache(dir.path).get(src, "probe", sm90()).source == CacheSource::Disk);
}

TEST_CASE("a truncated entry in the disk cache is rebuilt", "[cache]") {
  TempDir dir;
  const std::string src = probeSource();
  {
    KernelCache cache(dir.path);
    REQUIRE(cache.get(src, "probe", sm90()));
    const std::string file = entryPath(cache);
    REQUIRE(truncate(file.c_str(), 200) == 0);
  }
  KernelCache cache(dir.path);
  CacheLookup again = cache.get(src, "probe", sm90());
  REQUIRE(again);
  CHECK(again.source == CacheSource::Compiled);
  CHECK(again.binary->cubin.size() > 1000);
}

TEST_CASE("what others put in the cache folder is not followed: pipes, links, planted names",
          "[cache]") {
  TempDir dir;
  const std::string src = probeSource();
  const std::string key = KernelCache::key(src, "probe", sm90());
  const std::string entry = dir.path + "/" + key + ".cubin";
  auto compiledThenOnDisk = [&] {
    KernelCache cache(dir.path);
    CacheLookup got = cache.get(src, "probe", sm90());
    INFO(got.error);
    REQUIRE(got);
    CHECK(got.source == CacheSource::Compiled);
    CHECK(KernelCache(dir.path).get(src, "probe", sm90()).source == CacheSource::Disk);
  };
  SECTION("a pipe where the entry goes is not opened (it would block), and is replaced") {
    REQUIRE(mkfifo(entry.c_str(), 0644) == 0);
    compiledThenOnDisk();
  }
  SECTION("a link to /dev/zero is not read (it would be read without end)") {
    REQUIRE(symlink("/dev/zero", entry.c_str()) == 0);
    compiledThenOnDisk();
  }
  SECTION("a link at the writer's temporary name, or at the lock's, writes nothing it names") {
    const std::string victim = dir.path + "/victim", lockVictim = dir.path + "/lock-victim";
    { std::ofstream(victim) << "keep me"; }
    std::ostringstream tmp;
    tmp << dir.path << "/." << key << ".tmp." << getpid() << "."
        << std::hash<std::thread::id>()(std::this_thread::get_id());
    REQUIRE(symlink(victim.c_str(), tmp.str().c_str()) == 0);
    REQUIRE(symlink(lockVictim.c_str(), (entry + ".lock").c_str()) == 0);
    compiledThenOnDisk();
    std::ifstream in(victim);
    std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(kept == "keep me");
    CHECK(access(lockVictim.c_str(), F_OK) != 0);
  }
}

TEST_CASE("a source with a pair kernel keeps both modules, on disk too, and a damaged one is rebuilt",
          "[cache]") {
  // As an emitted decode source: the pair kernel under kPairProgramMacro, the
  // others under #else; two NVRTC programs side by side.
  const std::string src = "#ifdef " + std::string(kernel::kPairProgramMacro) +
                          "\nextern \"C\" __global__ void k_pair(float *o) { o[0] = 2; }\n#else\n"
                          "extern \"C\" __global__ void k(float *o) { o[0] = 1; }\n#endif\n";
  CudaCompileOptions options = sm90();
  options.pairProgram = true;
  CHECK(KernelCache::key(src, "k", options) != KernelCache::key(src, "k", sm90()));
  TempDir dir;
  KernelCache cache(dir.path);
  CacheLookup cold = cache.get(src, "k", options);
  INFO(cold.error);
  REQUIRE(cold);
  auto holds = [](const std::vector<char> &cubin, const std::string &symbol) {
    return std::string(cubin.begin(), cubin.end()).find(std::string(1, '\0') + symbol + '\0') !=
           std::string::npos;
  };
  CHECK(holds(cold.binary->cubin, "k"));
  CHECK_FALSE(holds(cold.binary->cubin, "k_pair"));
  CHECK(holds(cold.binary->pairCubin, "k_pair"));
  CHECK_FALSE(holds(cold.binary->pairCubin, "k"));
  CacheLookup disk = KernelCache(dir.path).get(src, "k", options);
  REQUIRE(disk);
  CHECK(disk.source == CacheSource::Disk);
  CHECK(disk.binary->cubin == cold.binary->cubin);
  CHECK(disk.binary->pairCubin == cold.binary->pairCubin);
  CHECK(cold.binary->registers > 0); // ptxas' report of both programs, kept with the entry
  CHECK(disk.binary->registers == cold.binary->registers);
  CHECK(disk.binary->spillStoreBytes == cold.binary->spillStoreBytes);
  {
    // The pair module is the entry's last bytes.
    std::fstream f(entryPath(cache), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x5a');
  }
  CacheLookup again = KernelCache(dir.path).get(src, "k", options);
  REQUIRE(again);
  CHECK(again.source == CacheSource::Compiled);
  CHECK(again.binary->pairCubin == cold.binary->pairCubin);
  {
    // The same entry rewritten as one of a single cubin (its pair lines and
    // bytes gone): valid on its own, but not for a pair program's key.
    std::ifstream in(entryPath(cache), std::ios::binary);
    std::stringstream whole;
    whole << in.rdbuf();
    std::string text = whole.str(), kept;
    const size_t body = text.find("\n\n") + 2;
    std::istringstream header(text.substr(0, body));
    for (std::string line; std::getline(header, line);)
      if (line.rfind("pair_", 0) != 0)
        kept += line + "\n";
    in.close();
    std::ofstream out(entryPath(cache), std::ios::binary | std::ios::trunc);
    out << kept << text.substr(body, cold.binary->cubin.size());
  }
  CacheLookup single = KernelCache(dir.path).get(src, "k", options);
  REQUIRE(single);
  CHECK(single.source == CacheSource::Compiled);
  CHECK(single.binary->pairCubin == cold.binary->pairCubin);
}

TEST_CASE("8 processes asking for one kernel compile it once and leave one valid entry",
          "[cache]") {
  TempDir dir;
  const std::string src = probeSource();
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      KernelCache cache(dir.path);
      CacheLookup r = cache.get(src, "probe", sm90());
      _exit(!r ? 1 : r.source == CacheSource::Compiled ? 10 : 20);
    }
    children.push_back(pid);
  }
  int compiled = 0, fromDisk = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status));
    compiled += WEXITSTATUS(status) == 10;
    fromDisk += WEXITSTATUS(status) == 20;
  }
  CHECK(compiled == 1);
  CHECK(fromDisk == 7);
  KernelCache cache(dir.path);
  CHECK(cache.list().size() == 1);
  CHECK(cache.get(src, "probe", sm90()).source == CacheSource::Disk);
}

TEST_CASE("threads asking for one kernel wait for one compile", "[cache]") {
  TempDir dir;
  const std::string src = probeSource();
  KernelCache cache(dir.path);
  std::atomic<int> compiled{0}, ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      CacheLookup r = cache.get(src, "probe", sm90());
      ok += static_cast<bool>(r);
      compiled += r.source == CacheSource::Compiled;
    });
  for (auto &t : threads)
    t.join();
  CHECK(ok == 8);
  CHECK(compiled == 1);
}

TEST_CASE("a cache directory that cannot be written keeps kernels in memory, with one warning",
          "[cache]") {
  // Not writable even for root: a directory under /proc/self. What the
  // cache writes to stderr goes to a file meanwhile.
  std::fflush(stderr);
  TempDir dir;
  const std::string said = dir.path + "/stderr.txt";
  const int saved = dup(2), file = open(said.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  REQUIRE(file >= 0);
  dup2(file, 2);
  close(file);
  KernelCache cache("/proc/self/attnc-cache");
  const std::string src = probeSource();
  const CacheSource first = cache.get(src, "probe", sm90()).source;
  const CacheSource second = cache.get(src, "probe", sm90()).source;
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  CHECK_FALSE(cache.onDisk());
  CHECK(cache.warning().find("cannot be written") != std::string::npos);
  CHECK(cache.warning().find("memory only") != std::string::npos);
  CHECK(first == CacheSource::Compiled);
  CHECK(second == CacheSource::Memory);
  CHECK(cache.list().empty());
  // The warning was said once, as it is kept.
  std::ifstream in(said);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == cache.warning() + "\n");
}

TEST_CASE("clear empties the cache", "[cache]") {
  TempDir dir;
  KernelCache cache(dir.path);
  REQUIRE(cache.get(probeSource(), "probe", sm90()));
  // What entries leave behind, and what is not the cache's.
  const std::string key = "probe-sm_90a-0123456789abcdef0123456789abcdef";
  auto put = [&](const std::string &name, const std::string &text) {
    std::ofstream(dir.path + "/" + name, std::ios::binary) << text;
  };
  std::string magic; // an entry's first line
  std::getline(std::ifstream(entryPath(cache)), magic);
  magic += "\n";
  put(key + ".cubin.lock", "");                      // a lock whose entry never came
  put("." + key + ".tmp.999999999.7", magic + "key"); // its writer died before the rename
  put("." + key + ".tmp." + std::to_string(getpid()) + ".7", magic); // a writer still alive
  put("notes.txt", "mine");
  put("other.cubin.lock", "");                       // not a name the cache makes
  put("." + key + ".tmp.999999999.8", "not an entry"); // not what the cache writes
  CHECK(cache.clear() == 1);
  CHECK(cache.list().empty());
  auto exists = [&](const std::string &name) {
    return access((dir.path + "/" + name).c_str(), F_OK) == 0;
  };
  CHECK_FALSE(exists(key + ".cubin.lock"));
  CHECK_FALSE(exists("." + key + ".tmp.999999999.7"));
  CHECK(exists("." + key + ".tmp." + std::to_string(getpid()) + ".7"));
  CHECK(exists("notes.txt"));
  CHECK(exists("other.cubin.lock"));
  CHECK(exists("." + key + ".tmp.999999999.8"));
  CHECK(cache.get(probeSource(), "probe", sm90()).source == CacheSource::Compiled);
  // A folder that cannot be read is said, not listed as holding nothing.
  std::string error;
  CHECK(KernelCache::list(dir.path + "/missing", &error).empty());
  CHECK(error == dir.path + "/missing cannot be read: No such file or directory");
  error.clear();
  CHECK(KernelCache::clear(dir.path, &error) == 1);
  CHECK(error.empty());
}

TEST_CASE("a compile error is reported and not remembered", "[cache]") {
  TempDir dir;
  KernelCache cache(dir.path);
  CacheLookup bad = cache.get("__global__ void k() { nope(); }", "broken", sm90());
  CHECK_FALSE(bad);
  CHECK(bad.error.find("nope") != std::string::npos);
  CHECK(cache.list().empty());
  CHECK_FALSE(cache.get("__global__ void k() { nope(); }", "broken", sm90()));
}
