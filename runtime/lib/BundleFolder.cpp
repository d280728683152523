//===- BundleFolder.cpp - AOT bundle folders: the manifest, loaded at run time -===//

#include "attnc/BundleFolder.h"

#include "attn/Spec.h"
#include "attnc/Bundle.h"

#include <climits>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

namespace attn {

namespace {
const char *const kColumns1 = "arch spec cubin threads shared_bytes merge_threads registers "
                              "spill_bytes bytes fnv1a [pair_cubin pair_bytes pair_fnv1a]";
const char *const kColumns2 =
    "arch spec cubin threads shared_bytes merge_threads cluster_merge pair_shared_bytes "
    "params_bytes registers spill_bytes bytes fnv1a [pair_cubin pair_bytes pair_fnv1a]";

/// A loaded bundle's bytes and entries, kept for the rest of the program
/// (the registry points into them).
struct Storage {
  std::string name;
  std::vector<std::string> specs, archs;
  std::vector<std::vector<unsigned char>> cubins, pairCubins;
  std::vector<BundleEntry> entries;
};

// Never destroyed: the registry points into these until the process ends,
// static destructors included.
std::mutex keptMutex;
std::vector<std::unique_ptr<Storage>> &kept() {
  static auto *storages = new std::vector<std::unique_ptr<Storage>>();
  return *storages;
}

/// A cubin path a manifest may name: inside the folder.
bool insideFolder(const std::string &path) {
  if (path.empty() || path[0] == '/')
    return false;
  std::istringstream parts(path);
  for (std::string part; std::getline(parts, part, '/');)
    if (part == "..")
      return false;
  return true;
}
} // namespace

std::string manifestColumns(int format) { return format == 1 ? kColumns1 : kColumns2; }

std::string formatManifestLine(const ManifestLine &m) {
  std::ostringstream o;
  o << m.arch << " " << m.spec << " " << m.cubin << " " << m.threads << " " << m.shared_bytes
    << " " << m.merge_threads << " " << m.cluster_merge << " " << m.pair_shared_bytes << " "
    << m.params_bytes << " " << m.registers << " " << m.spill_bytes << " " << m.bytes << " "
    << m.fnv1a;
  if (!m.pair_cubin.empty())
    o << " " << m.pair_cubin << " " << m.pair_bytes << " " << m.pair_fnv1a;
  return o.str();
}

bool parseManifestLine(const std::string &line, int format, ManifestLine &out) {
  if (format != 1 && format != 2)
    return false;
  std::istringstream fields(line);
  out = ManifestLine();
  if (!(fields >> out.arch >> out.spec >> out.cubin >> out.threads >> out.shared_bytes >>
        out.merge_threads))
    return false;
  if (format == 2 && !(fields >> out.cluster_merge >> out.pair_shared_bytes >> out.params_bytes))
    return false;
  if (!(fields >> out.registers >> out.spill_bytes >> out.bytes >> out.fnv1a))
    return false;
  if (fields >> out.pair_cubin && !(fields >> out.pair_bytes >> out.pair_fnv1a))
    return false;
  std::string extra;
  return !(fields >> extra);
}

int manifestFormat(const std::string &secondLine) {
  const std::string marker = "# manifest ";
  if (secondLine.rfind(marker, 0) == 0) {
    char *end = nullptr;
    const long n = std::strtol(secondLine.c_str() + marker.size(), &end, 10);
    return n >= 1 && n < INT_MAX && *end == ':' ? static_cast<int>(n) : 0;
  }
  return secondLine == std::string("# ") + kColumns1 ? 1 : 0;
}

std::string fnv1aHex(const void *bytes, size_t size) {
  uint64_t h = 1469598103934665603ull;
  const auto *p = static_cast<const unsigned char *>(bytes);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  std::ostringstream o;
  o << std::hex << h;
  return o.str();
}

bool loadBundleFolder(const std::string &dir, LoadedBundle &out, std::string &error) {
  out = LoadedBundle();
  if (dir.empty()) {
    error = "the bundle folder's name is empty";
    return false;
  }
  const std::string manifestPath = dir + "/manifest.txt";
  std::ifstream manifest(manifestPath);
  if (!manifest) {
    error = manifestPath + ": cannot open (not a bundle folder? `attnc aot -o DIR` writes one)";
    return false;
  }
  // Line 1 names the bundle, line 2 the format.
  std::string first, second;
  std::getline(manifest, first);
  std::getline(manifest, second);
  const std::string head = " AOT bundle '";
  const size_t at = first.find(head);
  const size_t close = at == std::string::npos ? at : first.find("':", at + head.size());
  if (first.rfind("# attnc ", 0) != 0 || close == std::string::npos ||
      close == at + head.size()) {
    error = manifestPath + ":1: not the first line of a manifest `attnc aot` writes";
    return false;
  }
  auto storage = std::make_unique<Storage>();
  storage->name = first.substr(at + head.size(), close - at - head.size());
  const int format = manifestFormat(second);
  if (format == 1) {
    error = manifestPath + ": written by an older attnc (manifest format 1, without the launch "
                           "shape a loaded bundle needs): rebuild the bundle with this attnc's "
                           "`attnc aot`";
    return false;
  }
  if (format != kManifestFormat) {
    error = manifestPath + ":2: " +
            (format == 0 ? std::string("not a manifest's column line")
                         : "manifest format " + std::to_string(format) + ", this attnc reads " +
                               std::to_string(kManifestFormat) + ": load it with the attnc that built it");
    return false;
  }

  // Every kernel's line, and its cubins checked against their sizes and checksums.
  std::vector<ManifestLine> lines;
  std::string line;
  for (int number = 3; std::getline(manifest, line); ++number) {
    if (line.empty() || line[0] == '#')
      continue;
    const std::string where = manifestPath + ":" + std::to_string(number) + ": ";
    ManifestLine m;
    if (!parseManifestLine(line, format, m)) {
      error = where + "not a manifest line (columns: " + manifestColumns(format) + ")";
      return false;
    }
    SpecResult spec = parseSpec(m.spec);
    if (!spec || !spec.spec->isGPU() || spec.spec->str() != m.spec) {
      error = where + (!spec ? spec.error->message()
                             : !spec.spec->isGPU() ? "a cpu spec in an AOT bundle"
                                                   : "the spec is not in canonical form (" +
                                                         spec.spec->str() + ")");
      return false;
    }
    // attnc aot builds each spec for its target's architecture.
    if (m.arch != name(spec.spec->target)) {
      error = where + "architecture " + m.arch + " for a spec of target " +
              name(spec.spec->target) + " (attnc aot writes the target's)";
      return false;
    }
    // The launch shape's numbers, in the ranges a launch takes.
    const char *range = m.threads < 1 || m.threads > 1024        ? "threads not in 1..1024"
                        : m.shared_bytes < 0 || m.shared_bytes > INT_MAX ? "shared_bytes out of range"
                        : m.merge_threads < 0 || m.merge_threads > 1024 ? "merge_threads not in 0..1024"
                        : m.cluster_merge != 0 && m.cluster_merge != 1 ? "cluster_merge not 0 or 1"
                        : m.pair_shared_bytes < 0 || m.pair_shared_bytes > INT_MAX
                            ? "pair_shared_bytes out of range"
                        : m.params_bytes < 1 ? "params_bytes not positive"
                        : m.bytes < 1        ? "bytes not positive"
                        : !m.pair_cubin.empty() && m.pair_bytes < 1 ? "pair_bytes not positive"
                                                                    : nullptr;
    if (range) {
      error = where + range;
      return false;
    }
    auto read = [&](const std::string &file, long long bytes, const std::string &sum,
                    std::vector<unsigned char> &cubin) {
      if (!insideFolder(file)) {
        error = where + file + ": a cubin must lie in the bundle folder";
        return false;
      }
      std::ifstream in(dir + "/" + file, std::ios::binary);
      if (!in) {
        error = where + file + " is missing";
        return false;
      }
      cubin.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      const std::string got = fnv1aHex(cubin.data(), cubin.size());
      if (static_cast<long long>(cubin.size()) != bytes || got != sum) {
        error = where + file + " is corrupted (" + std::to_string(cubin.size()) +
                " bytes, checksum " + got + "; the manifest says " + std::to_string(bytes) +
                " bytes, " + sum + ")";
        return false;
      }
      return true;
    };
    storage->cubins.emplace_back();
    storage->pairCubins.emplace_back();
    if (!read(m.cubin, m.bytes, m.fnv1a, storage->cubins.back()) ||
        (!m.pair_cubin.empty() &&
         !read(m.pair_cubin, m.pair_bytes, m.pair_fnv1a, storage->pairCubins.back())))
      return false;
    storage->specs.push_back(m.spec);
    storage->archs.push_back(m.arch);
    lines.push_back(m);
  }
  if (lines.empty()) {
    error = manifestPath + " lists no kernel";
    return false;
  }

  // The entries, pointing into the storage (complete now: nothing moves).
  for (size_t i = 0; i < lines.size(); ++i) {
    const ManifestLine &m = lines[i];
    const std::vector<unsigned char> &pair = storage->pairCubins[i];
    // In range (checked above): the narrowing casts keep every value.
    storage->entries.push_back(BundleEntry{
        storage->specs[i].c_str(), storage->archs[i].c_str(), storage->cubins[i].data(),
        storage->cubins[i].size(), static_cast<int>(m.threads), static_cast<int>(m.shared_bytes),
        static_cast<int>(m.merge_threads), static_cast<int>(m.cluster_merge),
        static_cast<int>(m.pair_shared_bytes), pair.empty() ? nullptr : pair.data(), pair.size(),
        static_cast<size_t>(m.params_bytes)});
  }
  // Where it came from: the folder's real path, and what its manifest said
  // (a folder rebuilt in place is not the bundle loaded from it before).
  char *real = realpath(dir.c_str(), nullptr);
  std::string origin = real ? real : dir;
  std::free(real);
  std::ifstream whole(manifestPath, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(whole)), std::istreambuf_iterator<char>());
  const std::string manifestSum = fnv1aHex(text.data(), text.size());
  std::lock_guard<std::mutex> lock(keptMutex);
  kept().reserve(kept().size() + 1); // kept() takes it without failing once registered
  bool loadedBefore = false;
  if (!registerLoadedBundle(storage->name.c_str(), storage->entries.data(),
                            storage->entries.size(), origin, manifestSum, error, loadedBefore)) {
    error = dir + ": " + error;
    return false;
  }
  out.name = storage->name;
  out.kernels = storage->entries.size();
  out.again = loadedBefore;
  if (!loadedBefore)
    kept().push_back(std::move(storage));
  return true;
}

} // namespace attn
