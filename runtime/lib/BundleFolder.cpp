//===- BundleFolder.cpp - AOT bundle folders: the manifest, loaded at run time -===//

#include "attnc/BundleFolder.h"

#include "attn/Spec.h"
#include "attnc/Bundle.h"
#include "attnc/Cubin.h"
#include "attn/params.cuh"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

bool readRegularFile(const std::string &path, size_t most, std::vector<unsigned char> &out,
                     int &err) {
  out.clear();
  err = 0;
  // Opened without waiting (a FIFO put there would block the open), then
  // held to what was opened: a file swapped in after a check by name is not read.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    err = errno;
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0)
    err = errno;
  else if (!S_ISREG(st.st_mode))
    err = EISDIR;
  if (err) {
    close(fd);
    return false;
  }
  // Room for the file as it is now and one byte more (a manifest's size can
  // be any number: it does not size the buffer), grown if the file grows.
  out.resize(std::min(most, static_cast<size_t>(st.st_size) + 1));
  size_t got = 0;
  while (got < most) {
    if (got == out.size())
      out.resize(std::min(most, out.size() * 2));
    const ssize_t n = read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      err = n < 0 ? errno : 0;
      break;
    }
    got += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(got);
  return err == 0;
}

std::string unreadableFile(const std::string &what, int err) {
  return what + (err == ENOENT ? " is missing"
                 : err == EISDIR ? " is not a file"
                                 : " cannot be read (" + std::string(std::strerror(err)) + ")");
}

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

std::string manifestLineProblem(const std::string &line, int format) {
  auto words = [](const std::string &text) {
    std::istringstream in(text);
    std::vector<std::string> out;
    for (std::string w; in >> w;)
      out.push_back(w);
    return out;
  };
  const std::vector<std::string> fields = words(line);
  std::vector<std::string> names = words(manifestColumns(format));
  auto bracket = [](char c) { return c == '[' || c == ']'; };
  for (std::string &name : names) // "[pair_cubin", "pair_fnv1a]"
    name.erase(std::remove_if(name.begin(), name.end(), bracket), name.end());
  const size_t least = names.size() - 3; // the pair kernel's three columns are optional
  if (fields.size() == least || fields.size() == names.size())
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::string &name = names[i];
      const bool numeric = name != "arch" && name != "spec" &&
                           name.find("cubin") == std::string::npos &&
                           name.find("fnv1a") == std::string::npos;
      char *end = nullptr;
      errno = 0;
      std::strtoll(fields[i].c_str(), &end, 10);
      if (numeric && (end == fields[i].c_str() || *end != '\0'))
        return name + " = '" + fields[i] + "' is not a number";
      if (numeric && errno == ERANGE)
        return name + " = " + fields[i] + " is out of range (a 64-bit number)";
    }
  return std::to_string(fields.size()) + (fields.size() == 1 ? " column" : " columns") +
         ": line 2 names " + std::to_string(least) + ", or " + std::to_string(names.size()) +
         " with a pair kernel";
}

int manifestFormat(const std::string &secondLine) {
  const std::string marker = "# manifest ";
  if (secondLine.rfind(marker, 0) == 0) {
    char *end = nullptr;
    const long n = std::strtol(secondLine.c_str() + marker.size(), &end, 10);
    if (n < 1 || n >= INT_MAX || *end != ':')
      return 0;
    // A format this attnc writes names its columns as it writes them (format
    // 1 had no number); a later format's columns are its own.
    if (n <= kManifestFormat)
      return n == kManifestFormat && std::string(end) == ": " + manifestColumns(n) ? int(n) : 0;
    return static_cast<int>(n);
  }
  return secondLine == std::string("# ") + kColumns1 ? 1 : 0;
}

namespace {
uint64_t fnv1a(const void *bytes, size_t size, uint64_t h) {
  const auto *p = static_cast<const unsigned char *>(bytes);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull; // the 64-bit FNV prime
  }
  return h;
}
} // namespace

std::string fnv1aHex(const void *bytes, size_t size) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx",
                static_cast<unsigned long long>(fnv1a(bytes, size, 14695981039346656037ull)));
  return text;
}

bool checksumMatches(const void *bytes, size_t size, const std::string &sum) {
  if (fnv1aHex(bytes, size) == sum)
    return true;
  // The sum manifests had before it was FNV-1a's: an offset basis one digit
  // short, written without leading zeros.
  std::ostringstream legacy;
  legacy << std::hex << fnv1a(bytes, size, 1469598103934665603ull);
  return legacy.str() == sum;
}

bool readManifestHead(std::istream &in, ManifestHead &out, std::string &why) {
  out = ManifestHead();
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  manifestKernelLine(first); // its trailing CR and blanks removed
  manifestKernelLine(second);
  const std::string head = " AOT bundle '";
  const size_t at = first.find(head);
  const size_t close = at == std::string::npos ? at : first.find("': ", at + head.size());
  char *end = nullptr;
  if (first.rfind("# attnc ", 0) == 0 && close != std::string::npos &&
      close > at + head.size())
    out.kernels = std::strtoll(first.c_str() + close + 3, &end, 10);
  if (!end || end == first.c_str() + close + 3 || out.kernels < 1 ||
      (std::string(end) != " kernel" && std::string(end) != " kernels")) {
    why = "1: not the first line of a manifest `attnc aot` writes (# attnc X.Y.Z AOT bundle "
          "'NAME': N kernels)";
    return false;
  }
  out.name = first.substr(at + head.size(), close - at - head.size());
  out.format = manifestFormat(second);
  if (out.format == 0) {
    why = "2: not a manifest's column line (# manifest " + std::to_string(kManifestFormat) +
          ": " + manifestColumns() + ")";
    return false;
  }
  return true;
}

bool manifestKernelLine(std::string &line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
    line.pop_back();
  const size_t text = line.find_first_not_of(" \t");
  return text != std::string::npos && line[text] != '#';
}

std::string checkManifestLine(const ManifestLine &m, int format) {
  if (std::string why = bundledSpecProblem(m.spec, m.arch); !why.empty())
    return why;
  SpecResult spec = parseSpec(m.spec);
  // The launch shape's numbers, as a launch of the spec's kernels takes them.
  if (format >= 2 && m.cluster_merge != 0 && m.cluster_merge != 1)
    return "cluster_merge not 0 or 1";
  if (std::string why = launchShapeProblem(*spec.spec, m.threads, m.shared_bytes, m.merge_threads,
                                           m.cluster_merge == 1, m.pair_shared_bytes);
      !why.empty())
    return why;
  if (m.bytes < 1)
    return "bytes = " + std::to_string(m.bytes) + ": " + m.cubin + "'s size must be positive";
  // What NVRTC said of the kernel (a thread holds at most 255 registers).
  if (m.registers < 0 || m.registers > 255)
    return "registers = " + std::to_string(m.registers) + ": a kernel's threads hold 0 to 255";
  if (m.spill_bytes < 0)
    return "spill_bytes = " + std::to_string(m.spill_bytes) + ": a count of bytes, not below 0";
  if (!m.pair_cubin.empty() && m.pair_bytes < 1)
    return "pair_bytes = " + std::to_string(m.pair_bytes) + ": " + m.pair_cubin +
           "'s size must be positive";
  if (format >= 2) {
    if (m.params_bytes < 1)
      return "params_bytes = " + std::to_string(m.params_bytes) +
             ": the kernels' argument size must be positive";
    // A pair kernel has its own shared memory size and its own cubin, or neither.
    if ((m.pair_shared_bytes > 0) != !m.pair_cubin.empty())
      return m.pair_cubin.empty() ? "pair_shared_bytes without its pair cubin (a line cut short?)"
                                  : "a pair cubin without pair_shared_bytes";
  }
  // A checksum as attnc aot writes it: lowercase hex, 16 digits (fewer in
  // manifests written before they were padded).
  for (const auto &[sum, column] : {std::pair{&m.fnv1a, "fnv1a"}, {&m.pair_fnv1a, "pair_fnv1a"}})
    if ((column[0] == 'f' || !m.pair_cubin.empty()) &&
        (sum->empty() || sum->size() > 16 ||
         sum->find_first_not_of("0123456789abcdef") != std::string::npos))
      return std::string(column) + " = '" + *sum + "': not a checksum (16 lowercase hex digits)";
  for (const std::string *file : {&m.cubin, &m.pair_cubin}) {
    if (!file->empty() && !insideFolder(*file))
      return *file + ": a cubin must lie in the bundle folder";
    // attnc aot names them so; another word here is a column out of place.
    if (!file->empty() &&
        (file->size() < 6 || file->compare(file->size() - 6, 6, ".cubin") != 0))
      return "'" + *file + "' in the " + (file == &m.cubin ? "cubin" : "pair_cubin") +
             " column is not a .cubin file (do the line's columns match line 2's?)";
  }
  return "";
}

bool readManifestCubin(const std::string &dir, const std::string &file, long long bytes,
                       const std::string &sum, std::vector<unsigned char> &out, std::string &why) {
  // No more than one byte past the manifest's size: enough to tell a longer file.
  const size_t most = static_cast<size_t>(std::max(0LL, std::min(bytes, 1LL << 34))) + 1;
  int err = 0;
  if (!readRegularFile(dir + "/" + file, most, out, err)) {
    why = unreadableFile(file, err);
    return false;
  }
  if (static_cast<long long>(out.size()) != bytes ||
      !checksumMatches(out.data(), out.size(), sum)) {
    const std::string have = fnv1aHex(out.data(), out.size()); // hashed again on failure only
    why = file + " is corrupted (" +
          (out.size() == most ? "more than " + std::to_string(bytes) + " bytes"
                              : std::to_string(out.size()) + " bytes, checksum " + have) +
          "; the manifest says " + std::to_string(bytes) + " bytes, " + sum + ")";
    return false;
  }
  return true;
}

std::string checkCubinKernels(const ManifestLine &m, int format,
                              const std::vector<unsigned char> &cubin,
                              const std::vector<unsigned char> &pairCubin) {
  BundledLaunch launch;
  launch.fields = format == 1 ? 3 : kernel::kLaunchShapeInts;
  launch.spec = m.spec;
  launch.threads = m.threads;
  launch.shared_bytes = m.shared_bytes;
  launch.merge_threads = m.merge_threads;
  launch.cluster_merge = m.cluster_merge;
  launch.pair_shared_bytes = m.pair_shared_bytes;
  return checkBundledCubins(launch, {cubin.data(), cubin.size(), m.cubin},
                            {pairCubin.data(), m.pair_cubin.empty() ? 0 : pairCubin.size(),
                             m.pair_cubin});
}

bool loadBundleFolder(const std::string &dir, LoadedBundle &out, std::string &error) {
  out = LoadedBundle();
  if (dir.empty()) {
    error = "the bundle folder's name is empty";
    return false;
  }
  const std::string manifestPath = dir + "/manifest.txt";
  std::vector<unsigned char> bytes;
  int err = 0;
  if (!readRegularFile(manifestPath, kManifestMaxBytes + 1, bytes, err)) {
    struct stat st;
    const bool folder = ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    error = err == ENOENT || err == ENOTDIR
                ? manifestPath + ": cannot open: " +
                      (folder ? "the folder has none (not a bundle folder? `attnc aot -o DIR` "
                                "writes one)"
                              : dir + (::access(dir.c_str(), F_OK) == 0 ? " is not a folder"
                                                                         : " does not exist"))
                : unreadableFile(manifestPath, err);
    return false;
  }
  if (bytes.size() > kManifestMaxBytes) {
    error = manifestPath + " is over " + std::to_string(kManifestMaxBytes >> 20) +
            " MiB: not a manifest attnc aot writes";
    return false;
  }
  const std::string text(bytes.begin(), bytes.end());
  std::istringstream lines(text);
  std::string why;
  ManifestHead head;
  if (!readManifestHead(lines, head, why)) {
    error = manifestPath + ":" + why;
    return false;
  }
  if (head.format == 1) {
    error = manifestPath + ": written by an older attnc (manifest format 1, without the launch "
                           "shape a loaded bundle needs): rebuild the bundle with this attnc's "
                           "`attnc aot`";
    return false;
  }
  if (head.format != kManifestFormat) {
    error = manifestPath + ":2: manifest format " + std::to_string(head.format) +
            ", this attnc reads " + std::to_string(kManifestFormat) +
            ": load it with the attnc that built it";
    return false;
  }

  // Every kernel's line, and its cubins checked against their sizes and checksums.
  auto storage = std::make_unique<Storage>();
  storage->name = head.name;
  std::vector<ManifestLine> kernels;
  std::vector<int> numbers;
  std::string line;
  for (int number = 3; std::getline(lines, line); ++number) {
    if (!manifestKernelLine(line))
      continue;
    const std::string where = manifestPath + ":" + std::to_string(number) + ": ";
    ManifestLine m;
    if (!parseManifestLine(line, head.format, m)) {
      error = where + "not a manifest line (" + manifestLineProblem(line, head.format) +
              "; columns: " + manifestColumns(head.format) + ")";
      return false;
    }
    if (!(why = checkManifestLine(m, head.format)).empty()) {
      error = where + why;
      return false;
    }
    for (size_t i = 0; i < kernels.size(); ++i)
      if (kernels[i].spec == m.spec && kernels[i].arch == m.arch) {
        error = where + "the kernel of line " + std::to_string(numbers[i]) + " again";
        return false;
      }
    storage->cubins.emplace_back();
    storage->pairCubins.emplace_back();
    if (!readManifestCubin(dir, m.cubin, m.bytes, m.fnv1a, storage->cubins.back(), why) ||
        (!m.pair_cubin.empty() && !readManifestCubin(dir, m.pair_cubin, m.pair_bytes,
                                                     m.pair_fnv1a, storage->pairCubins.back(),
                                                     why)) ||
        !(why = checkCubinKernels(m, head.format, storage->cubins.back(),
                                   storage->pairCubins.back()))
             .empty()) {
      error = where + why;
      return false;
    }
    storage->specs.push_back(m.spec);
    storage->archs.push_back(m.arch);
    kernels.push_back(m);
    numbers.push_back(number);
  }
  if (static_cast<long long>(kernels.size()) != head.kernels) {
    error = manifestPath + " lists " + std::to_string(kernels.size()) + " kernel" +
            (kernels.size() == 1 ? "" : "s") + ", its first line says " +
            std::to_string(head.kernels) + " (a manifest cut short?)";
    return false;
  }

  // The entries, pointing into the storage (complete now: nothing moves).
  for (size_t i = 0; i < kernels.size(); ++i) {
    const ManifestLine &m = kernels[i];
    const std::vector<unsigned char> &pair = storage->pairCubins[i];
    // In range (checkManifestLine): the narrowing casts keep every value.
    storage->entries.push_back(BundleEntry{
        storage->specs[i].c_str(), storage->archs[i].c_str(), storage->cubins[i].data(),
        storage->cubins[i].size(), static_cast<int>(m.threads), static_cast<int>(m.shared_bytes),
        static_cast<int>(m.merge_threads), static_cast<int>(m.cluster_merge),
        static_cast<int>(m.pair_shared_bytes), pair.empty() ? nullptr : pair.data(), pair.size(),
        static_cast<size_t>(m.params_bytes)});
  }
  // Where it came from: the folder's real path, and what its manifest said
  // (the same manifest elsewhere is the same bundle; a folder rebuilt in
  // place is not the bundle loaded from it before).
  char *real = realpath(dir.c_str(), nullptr);
  std::string origin = real ? real : dir;
  std::free(real);
  // What it holds and says of it, not how its manifest is laid out: a copy
  // with CRLF line ends, a blank line or a comment more is the same bundle.
  // (In any order of the lines: each kernel is there once, and a manifest
  // sorted otherwise holds the same bundle.)
  std::vector<std::string> kernelLines;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const BundleEntry &e = storage->entries[i];
    kernelLines.push_back(std::string(e.spec) + " " + e.arch + " " +
            fnv1aHex(e.cubin, e.cubin_size) + " " +
            (e.pair_cubin ? fnv1aHex(e.pair_cubin, e.pair_cubin_size) : std::string("-")) + " " +
            std::to_string(e.threads) + " " + std::to_string(e.shared_bytes) + " " +
            std::to_string(e.merge_threads) + " " + std::to_string(e.cluster_merge) + " " +
            std::to_string(e.pair_shared_bytes) + " " + std::to_string(e.params_bytes) + " " +
            std::to_string(kernels[i].registers) + " " + std::to_string(kernels[i].spill_bytes));
  }
  std::sort(kernelLines.begin(), kernelLines.end());
  std::string held = storage->name;
  for (const std::string &line : kernelLines)
    held += "\n" + line;
  const std::string manifestSum = fnv1aHex(held.data(), held.size());
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
