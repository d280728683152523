//===- Memory.cpp - The memory the commands keep within --------------------===//
//
// What this process may use (the machine's memory, a control group's limit,
// ulimit -v), what it uses (/proc/self/status), and the scratch a CPU
// kernel's whole tiles take: run, trace and explain refuse work that would
// not fit before they start it.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <fstream>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace attn::cli {

namespace {
/// A number of bytes in a file such as a control group's memory.max, or -1
/// ("max", no file, not a number).
double limitInFile(const char *path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::strtod(word.c_str(), nullptr);
}

} // namespace

int64_t processMemory(const std::string &field) {
  std::ifstream status("/proc/self/status");
  const std::string key = field + ":";
  for (std::string line; std::getline(status, line);)
    if (line.rfind(key, 0) == 0)
      return std::strtoll(line.c_str() + key.size(), nullptr, 10) * 1024; // "NNN kB"
  return -1;
}

MemoryLimit usableMemory() {
  auto gib = [](double b) { return llvm::formatv("{0:f1} GiB", b / double(1ull << 30)).str(); };
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  MemoryLimit m{physical, "this machine's " + gib(physical)};
  // A control group's limit: that of the process's group and of each group
  // above it, as /proc/self/cgroup names them (v2: "0::/path", memory.max;
  // v1: "N:memory:/path", memory.limit_in_bytes, which says "no limit" with
  // a number past any machine's memory).
  std::vector<std::string> files;
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const bool v2 = line.rfind("0::", 0) == 0;
    const size_t memory = line.find(":memory:");
    if (!v2 && memory == std::string::npos)
      continue;
    const std::string base = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    const std::string file = v2 ? "/memory.max" : "/memory.limit_in_bytes";
    for (std::string path = line.substr(v2 ? 3 : memory + 8);; path.resize(path.rfind('/'))) {
      files.push_back(base + (path == "/" ? "" : path) + file);
      if (path.empty() || path == "/" || path.find('/') == std::string::npos)
        break;
    }
  }
  for (const std::string &file : files) {
    const double limit = limitInFile(file.c_str());
    if (limit > 0 && limit < m.bytes)
      m = {limit, "the " + gib(limit) + " of this process's control group (memory limit)"};
  }
  // An address-space limit (ulimit -v): what is left of it.
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const double mapped = double(std::max<int64_t>(0, processMemory("VmSize")));
    const double left = std::max(0.0, double(as.rlim_cur) - mapped);
    if (left < m.bytes)
      m = {left, "the " + gib(left) + " this process may still map (ulimit -v)"};
  }
  return m;
}

double cpuScratchBytes(const Spec &spec) {
  const double rows = double(spec.tile_q) * double(spec.gqa), keys = double(spec.tile_kv),
               d = double(spec.head_dim), element = double(bytesPerElement(spec.dtype)),
               score = spec.dtype == DType::F64 ? 8 : 4;
  return (rows + 2 * keys) * d * element + rows * keys * score + 3 * rows * d * score;
}

std::string cpuScratchFits(const Spec &spec) {
  const double need = cpuScratchBytes(spec);
  const MemoryLimit memory = usableMemory();
  if (need <= memory.bytes / 2)
    return "";
  auto gib = [](double b) { return llvm::formatv("{0:f1} GiB", b / double(1ull << 30)).str(); };
  return "the CPU kernel's tiles need " + gib(need) + " whatever the lengths (a score tile of " +
         (spec.gqa > 1 ? "gqa x tile_q = " : "tile_q = ") +
         std::to_string(spec.tile_q * spec.gqa) + " rows by tile_kv = " +
         std::to_string(spec.tile_kv) + " keys), more than half of " + memory.what +
         "; use smaller tiles";
}

} // namespace attn::cli
