//===- AotCommand.cpp - attnc aot: a bundle of kernels compiled ahead of time -===//
//
// Reads a file of specs (one per line), compiles each for each architecture
// in parallel (pipeline, emitter, NVRTC: no GPU needed), and writes a bundle
// folder: the cubins, a manifest, and bundle.cpp, a C++ source that embeds
// the cubins and registers them with the runtime (attnc/Bundle.h). The
// folder is written under a temporary name and renamed when complete.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#ifdef ATTNC_HAVE_NVRTC
#include "attnc/BundleFolder.h"
#include "attnc/EmitCuda.h"
#include "attnc/KernelCache.h"
#include "attnc/Nvrtc.h"
#include "attn/params.cuh"
#endif

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

namespace attn::cli {

namespace {
int fail(const std::string &message) { return commandError("aot", message); }
} // namespace

#ifdef ATTNC_HAVE_NVRTC
namespace {
struct Job {
  Spec spec;
  std::string arch;
  int line = 0;
  // Results.
  CudaBinary binary;
  CudaLaunchShape shape;
  std::string error;
};

std::string trim(const std::string &s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string identifier(std::string name) {
  for (char &c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  return name;
}

bool writeFile(const std::string &path, const std::string &bytes, std::string &error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) {
    error = "cannot write " + path;
    return false;
  }
  return true;
}

/// Whether `dir` holds nothing but what attnc aot writes there:
/// manifest.txt, bundle.cpp and cubins/ of .cubin files.
bool holdsOnlyBundleFiles(const std::string &dir, std::string &why) {
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    const std::string name = llvm::sys::path::filename(it->path()).str();
    if (name != "manifest.txt" && name != "bundle.cpp" && name != "cubins") {
      why = "it holds " + name + ", which attnc aot does not write";
      return false;
    }
  }
  if (ec) {
    why = "it cannot be listed (" + ec.message() + ")";
    return false;
  }
  const std::string cubins = dir + "/cubins";
  if (!llvm::sys::fs::exists(cubins))
    return true;
  if (!llvm::sys::fs::is_directory(cubins)) {
    why = "its cubins is not a folder";
    return false;
  }
  for (llvm::sys::fs::directory_iterator it(cubins, ec), end; it != end && !ec; it.increment(ec)) {
    const std::string name = llvm::sys::path::filename(it->path()).str();
    if (!llvm::StringRef(name).ends_with(".cubin") || !llvm::sys::fs::is_regular_file(it->path())) {
      why = "its cubins/ holds " + name + ", which attnc aot does not write";
      return false;
    }
  }
  if (ec) {
    why = "its cubins/ cannot be listed (" + ec.message() + ")";
    return false;
  }
  return true;
}

/// Whether `dir` is a folder `attnc aot` wrote (its manifest's first line is
/// ours, and it holds only the bundle's files) or an empty one (as a build
/// system makes for its outputs). Only such a folder is replaced by --force;
/// anything else is the user's.
bool isBundleFolder(const std::string &dir, std::string &why) {
  if (!llvm::sys::fs::is_directory(dir)) {
    why = "it is not a folder";
    return false;
  }
  std::error_code listed;
  if (llvm::sys::fs::directory_iterator(dir, listed) == llvm::sys::fs::directory_iterator() &&
      !listed)
    return true; // empty
  std::ifstream manifest(dir + "/manifest.txt");
  std::string first;
  if (!manifest || !std::getline(manifest, first) || first.rfind("# attnc ", 0) != 0 ||
      first.find(" AOT bundle '") == std::string::npos) {
    why = "it has no manifest.txt written by attnc aot";
    return false;
  }
  return holdsOnlyBundleFiles(dir, why);
}

/// A run stopped while it compiled (Ctrl-C, a killed build) leaves its
/// temporary folder "<output>.tmp.<pid>" beside the output. Such folders of
/// processes that are gone, holding only the bundle's files, are removed.
void removeStoppedRunsFolders(const std::string &output) {
  llvm::StringRef parent = llvm::sys::path::parent_path(output);
  const std::string folder = parent.empty() ? "." : parent.str();
  const std::string prefix = llvm::sys::path::filename(output).str() + ".tmp.";
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(folder, ec), end; it != end && !ec; it.increment(ec)) {
    const std::string name = llvm::sys::path::filename(it->path()).str();
    if (name.rfind(prefix, 0) != 0)
      continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    std::string why;
    if (pid == getpid() || !processGone(pid) ||
        !llvm::sys::fs::is_directory(it->path()) || !holdsOnlyBundleFiles(it->path(), why))
      continue; // its writer may still run, or it is not ours
    if (!llvm::sys::fs::remove_directories(it->path()))
      llvm::errs() << "attnc aot: removed " << it->path() << ", left by a run that was stopped\n";
  }
}

/// bundle.cpp: the cubins as byte arrays and one registration.
std::string bundleSource(const std::string &name, const std::vector<Job> &jobs) {
  std::ostringstream o;
  o << "// Generated by `attnc aot` (attnc " << ATTNC_VERSION << "): bundle '" << name << "', "
    << counted(int64_t(jobs.size()), "kernel") << ".\n"
    << "// Compile it into the application (an object file, not a static library: its\n"
    << "// registration runs at start-up and nothing else refers to it) and link the attnc\n"
    << "// runtime; attn::Runtime then launches these kernels with no NVRTC compile.\n"
    << "#include \"attnc/Bundle.h\"\n\nnamespace {\n";
  auto array = [&](const std::string &name, const std::vector<char> &c) {
    o << "alignas(16) const unsigned char " << name << "[] = {";
    for (size_t b = 0; b < c.size(); ++b)
      o << (b % 24 == 0 ? "\n  " : "") << static_cast<int>(static_cast<unsigned char>(c[b]))
        << ",";
    o << "\n};\n";
  };
  for (size_t i = 0; i < jobs.size(); ++i) {
    o << "// " << jobs[i].arch << " " << jobs[i].spec.str() << "\n";
    array("cubin" + std::to_string(i), jobs[i].binary.cubin);
    if (!jobs[i].binary.pairCubin.empty())
      array("pair_cubin" + std::to_string(i), jobs[i].binary.pairCubin);
  }
  o << "\nconst attn::BundleEntry entries[] = {\n";
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string pair = "pair_cubin" + std::to_string(i);
    o << "    {\"" << jobs[i].spec.str() << "\", \"" << jobs[i].arch << "\", cubin" << i
      << ", sizeof cubin" << i << ", " << jobs[i].shape.threads << ", "
      << jobs[i].shape.shared_bytes << ", " << jobs[i].shape.merge_threads << ", "
      << (jobs[i].shape.cluster_merge ? 1 : 0) << ", " << jobs[i].shape.pair_shared_bytes << ", "
      << (jobs[i].binary.pairCubin.empty() ? "nullptr, 0" : pair + ", sizeof " + pair)
      << ", " << sizeof(attn::kernel::Params) << "},\n";
  }
  o << "};\n\nconst attn::BundleRegistration registration(\"" << name
    << "\", entries, sizeof entries / sizeof entries[0]);\n} // namespace\n";
  return o.str();
}
} // namespace

/// The bytes of bundle.cpp's array `name` (as bundleSource writes it), or
/// false when there is no such array or it does not parse.
bool embeddedArray(const std::string &source, const std::string &name, std::vector<char> &bytes) {
  const std::string head = "const unsigned char " + name + "[] = {";
  size_t at = source.find(head);
  if (at == std::string::npos)
    return false;
  const size_t end = source.find("};", at);
  if (end == std::string::npos)
    return false;
  bytes.clear();
  for (at += head.size(); at < end;) {
    at = source.find_first_not_of(" \n,", at);
    if (at >= end)
      break;
    char *stop = nullptr;
    const long v = std::strtol(source.c_str() + at, &stop, 10);
    if (stop == source.c_str() + at || v < 0 || v > 255)
      return false;
    bytes.push_back(static_cast<char>(v));
    at = stop - source.c_str();
  }
  return true;
}

/// One entry of bundle.cpp's entries[] (one line, as bundleSource writes it).
struct SourceEntry {
  int line = 0; ///< in bundle.cpp
  std::string spec, arch, cubin, pairCubin; ///< the arrays' names; pairCubin "" for none
  long long threads = 0, shared_bytes = 0, merge_threads = 0, cluster_merge = 0,
            pair_shared_bytes = 0, params_bytes = 0;
  bool listed = false; ///< a manifest line names its kernel
};

/// Parses one entry line ("    {\"SPEC\", \"ARCH\", cubin0, sizeof cubin0, 128, ...},"): the
/// entries of bundles of manifest format 1 end before params_bytes (then -1).
bool parseSourceEntry(std::string text, SourceEntry &e) {
  if (text.size() < 8 || text.compare(0, 6, "    {\"") != 0 ||
      text.compare(text.size() - 2, 2, "},") != 0)
    return false;
  text = text.substr(5, text.size() - 7);
  std::vector<std::string> f;
  for (size_t at = 0;;) {
    const size_t comma = text.find(", ", at);
    f.push_back(text.substr(at, comma - at));
    if (comma == std::string::npos)
      break;
    at = comma + 2;
  }
  if (f.size() != 11 && f.size() != 12)
    return false;
  auto quoted = [](const std::string &s, std::string &out) {
    if (s.size() < 2 || s.front() != '"' || s.back() != '"')
      return false;
    out = s.substr(1, s.size() - 2);
    return true;
  };
  auto number = [](const std::string &s, long long &out) {
    char *end = nullptr;
    out = std::strtoll(s.c_str(), &end, 10);
    return !s.empty() && s[0] != ' ' && *end == '\0';
  };
  e.cubin = f[2];
  if (f[9] != "nullptr")
    e.pairCubin = f[9];
  long long pairSize = 0;
  return quoted(f[0], e.spec) && quoted(f[1], e.arch) && f[3] == "sizeof " + e.cubin &&
         number(f[4], e.threads) && number(f[5], e.shared_bytes) &&
         number(f[6], e.merge_threads) && number(f[7], e.cluster_merge) &&
         number(f[8], e.pair_shared_bytes) &&
         (e.pairCubin.empty() ? number(f[10], pairSize) && pairSize == 0
                              : f[10] == "sizeof " + e.pairCubin) &&
         (f.size() == 11 ? (e.params_bytes = -1, true) : number(f[11], e.params_bytes));
}

/// A launch shape's columns by name, as a manifest of `format` has them
/// (format 1: the first three).
using LaunchColumns = std::vector<std::pair<const char *, long long>>;
LaunchColumns launchColumns(long long threads, long long sharedBytes, long long mergeThreads,
                            long long clusterMerge, long long pairSharedBytes, int format) {
  LaunchColumns c = {
      {"threads", threads}, {"shared_bytes", sharedBytes}, {"merge_threads", mergeThreads}};
  if (format >= 2)
    c.insert(c.end(), {{"cluster_merge", clusterMerge}, {"pair_shared_bytes", pairSharedBytes}});
  return c;
}

/// bundle.cpp's entries[] (`source` with LF line ends), its lines that are
/// not entries in `bad`; "" or why there is no whole entries[] list.
std::string sourceEntries(const std::string &source, std::vector<SourceEntry> &entries,
                          std::vector<int> &bad) {
  std::istringstream in(source);
  bool inEntries = false;
  int number = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    if (!inEntries) {
      inEntries = text == "const attn::BundleEntry entries[] = {";
      continue;
    }
    if (text == "};")
      return "";
    SourceEntry e;
    e.line = number;
    if (parseSourceEntry(text, e))
      entries.push_back(e);
    else
      bad.push_back(number);
  }
  return inEntries ? " ends inside its entries[] list (cut short?)"
                   : " has no entries[] list of kernels";
}

/// `attnc aot --verify DIR`: every kernel line of the manifest passes the
/// checks a run-time load makes, every cubin it lists is in the folder with
/// its size and checksum and defines the kernels its line's spec names, and
/// bundle.cpp (when there is one) registers the manifest's bundle and exactly
/// its kernels, each with the manifest's bytes and launch shape. A launch
/// shape other than the one this attnc gives the spec is a note (a bundle of
/// an earlier attnc has its own, which goes with its cubins).
int verify(const std::string &dir) {
  const std::string manifestPath = dir + "/manifest.txt";
  // A regular file only: a FIFO would block the read.
  std::ifstream manifest;
  if (llvm::sys::fs::is_regular_file(manifestPath))
    manifest.open(manifestPath, std::ios::binary);
  if (!manifest.is_open() || !manifest)
    return fail(manifestPath + ": cannot open (not a bundle folder?)");
  std::string why;
  ManifestHead head;
  if (!readManifestHead(manifest, head, why))
    return fail(manifestPath + ":" + why);
  if (head.format > kManifestFormat)
    return fail(manifestPath + ":2: manifest format " + std::to_string(head.format) +
                ", this attnc reads up to " + std::to_string(kManifestFormat) +
                ": verify it with the attnc that built it");
  int problems = 0, notes = 0;
  auto problem = [&](const std::string &where, const std::string &what) {
    llvm::errs() << "attnc aot: " << where << what << "\n";
    ++problems;
  };
  // The kernel lines with their numbers; how many there are is said first
  // (a line lost or repeated explains what follows).
  std::vector<std::pair<int, std::string>> lines;
  std::string line;
  for (int number = 3; std::getline(manifest, line); ++number)
    if (manifestKernelLine(line))
      lines.push_back({number, line});
  const int kernels = static_cast<int>(lines.size());
  if (kernels == 0)
    problem(manifestPath, " lists no kernel");
  else if (kernels != head.kernels)
    problem(manifestPath, " lists " + counted(kernels, "kernel") + ", its first line says " +
                              std::to_string(head.kernels) + " (a line lost or repeated?)");

  // bundle.cpp is what an application links; a folder that is only loaded needs none.
  const std::string sourcePath = dir + "/bundle.cpp";
  const bool hasSource = llvm::sys::fs::exists(sourcePath);
  bool linkable = false; // bundle.cpp read, its entries[] found: compared line by line
  std::string source;
  std::vector<SourceEntry> entries;
  if (hasSource && !llvm::sys::fs::is_regular_file(sourcePath)) {
    problem(sourcePath, " is not a file");
  } else if (hasSource) {
    std::ifstream in(sourcePath, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    // CRLF line ends (a checkout that converts them) compile the same: read as LF.
    for (char c : text.str())
      if (c != '\r')
        source += c;
    // Its registration, at the start of a line: the manifest's bundle, all of entries[].
    const std::string reg = "\nconst attn::BundleRegistration registration(\"";
    const size_t at = source.find(reg);
    const size_t close = at == std::string::npos ? at : source.find('"', at + reg.size());
    const size_t end = close == std::string::npos ? close : source.find('\n', close);
    const std::string registered =
        close == std::string::npos ? "" : source.substr(at + reg.size(), close - at - reg.size());
    const std::string whole = "\", entries, sizeof entries / sizeof entries[0]);";
    if (close == std::string::npos)
      problem(sourcePath, " has no bundle registration (const attn::BundleRegistration "
                          "registration(...) at the start of a line)");
    else if (registered != head.name)
      problem(sourcePath, " registers the bundle '" + registered + "', the manifest names it '" +
                              head.name + "'");
    else if (source.compare(close, end - close, whole) != 0)
      problem(sourcePath, " registers other than all of entries[]: " +
                              source.substr(at + 1, end - at - 1));
    std::vector<int> bad;
    if (std::string why = sourceEntries(source, entries, bad); !why.empty())
      problem(sourcePath, why);
    else
      linkable = true;
    for (int number : bad)
      problem(sourcePath + ":" + std::to_string(number), ": not an entry attnc aot writes");
  }

  std::vector<std::pair<std::string, int>> seen; // "arch spec", line
  bool allRead = true; // every line sound: an entry that no line lists is named
  for (const auto &[number, text] : lines) {
    const std::string where = manifestPath + ":" + std::to_string(number) + ": ";
    ManifestLine m;
    if (!parseManifestLine(text, head.format, m)) {
      std::istringstream words(text);
      const auto columns = std::distance(std::istream_iterator<std::string>(words),
                                         std::istream_iterator<std::string>());
      const int least = head.format == 1 ? 10 : 13;
      problem(where, "not a manifest line of format " + std::to_string(head.format) + " (" +
                         counted(columns, "column") + ": line 2 names " + std::to_string(least) +
                         ", or " + std::to_string(least + 3) +
                         " with a pair kernel, a number where one belongs)");
      allRead = false;
      continue;
    }
    const std::string kernel = m.arch + " " + m.spec;
    std::vector<SourceEntry *> registering; // bundle.cpp's entries of this kernel
    for (SourceEntry &e : entries)
      if (e.spec == m.spec && e.arch == m.arch) {
        registering.push_back(&e);
        e.listed = true;
      }
    if (!(why = checkManifestLine(m, head.format)).empty()) {
      problem(where, why);
      allRead = false;
      continue;
    }
    // The kernels' arguments: what this attnc's runtime passes (format 2 records it).
    if (head.format >= 2 && m.params_bytes != static_cast<long long>(sizeof(kernel::Params)))
      problem(where, "its kernel takes arguments of " + std::to_string(m.params_bytes) +
                         " bytes, this attnc passes " + std::to_string(sizeof(kernel::Params)) +
                         " (rebuild the bundle with this attnc's `attnc aot`)");
    bool again = false;
    for (const auto &[other, at] : seen)
      if (other == kernel) {
        problem(where, "the kernel of line " + std::to_string(at) + " again");
        again = true;
      }
    seen.push_back({kernel, number});
    const LaunchColumns says = launchColumns(m.threads, m.shared_bytes, m.merge_threads,
                                             m.cluster_merge, m.pair_shared_bytes, head.format);
    // The cubins in the folder: their sizes and checksums, then their kernels' names.
    // Where a file and bundle.cpp's array agree with each other but not with the
    // manifest, the manifest's columns are what changed: one problem says so.
    const SourceEntry *entry = linkable && registering.size() == 1 ? registering[0] : nullptr;
    std::vector<std::string> manifestEdited; // bundle.cpp's arrays already accounted for
    auto readCubin = [&](const std::string &file, long long size, const std::string &sum,
                         const std::string &array, std::vector<unsigned char> &bytes) {
      if (readManifestCubin(dir, file, size, sum, bytes, why))
        return true;
      // The file read whole only where it is a regular file of the array's size.
      std::vector<char> embedded, whole;
      uint64_t fileSize = 0;
      if (entry && !array.empty() && embeddedArray(source, array, embedded) &&
          !embedded.empty() && llvm::sys::fs::is_regular_file(dir + "/" + file) &&
          !llvm::sys::fs::file_size(dir + "/" + file, fileSize) && fileSize == embedded.size()) {
        std::ifstream in(dir + "/" + file, std::ios::binary);
        whole.resize(embedded.size());
        if (!in.read(whole.data(), static_cast<std::streamsize>(whole.size())))
          whole.clear();
      }
      if (!whole.empty() && embedded == whole) {
        problem(where, "the manifest says " + std::to_string(size) + " bytes, " + sum + " for " +
                           file + ", but the file and bundle.cpp's " + array + " agree on " +
                           std::to_string(whole.size()) + " bytes, " +
                           fnv1aHex(whole.data(), whole.size()) +
                           " (the manifest line was edited, or both were replaced)");
        manifestEdited.push_back(array);
      } else {
        problem(where, why);
      }
      return false;
    };
    std::vector<unsigned char> cubin, pairCubin;
    const bool readMain =
        readCubin(m.cubin, m.bytes, m.fnv1a, entry ? entry->cubin : "", cubin);
    const bool listsPair = !m.pair_cubin.empty();
    const bool readPair = !listsPair || readCubin(m.pair_cubin, m.pair_bytes, m.pair_fnv1a,
                                                  entry ? entry->pairCubin : "", pairCubin);
    // The cubins define the kernels the line's spec names (the loader looks them up by name).
    // Where they do not, the line's spec or its cubins changed: bundle.cpp, registered by
    // spec, says nothing more.
    if (readMain && readPair && !(why = checkCubinKernels(m, cubin, pairCubin)).empty()) {
      problem(where, why);
      allRead = false;
      continue;
    }
    // The launch shape this attnc gives the spec (checkManifestLine parsed it).
    CudaLaunchShape shape;
    std::string emitted;
    if (!emitCudaForSpec(*parseSpec(m.spec).spec, emitted, shape, why)) {
      llvm::errs() << "attnc aot: note: " << where << "this attnc does not emit the spec's kernel ("
                   << why << "): its launch shape is not compared\n";
      ++notes;
    } else {
      const LaunchColumns emits =
          launchColumns(shape.threads, shape.shared_bytes, shape.merge_threads,
                        shape.cluster_merge ? 1 : 0, shape.pair_shared_bytes, head.format);
      for (size_t i = 0; i < says.size(); ++i)
        if (says[i].second != emits[i].second) {
          llvm::errs() << "attnc aot: note: " << where << says[i].first << " = " << says[i].second
                       << ", this attnc gives the spec's kernel " << emits[i].second
                       << " (an edited line, or a bundle of an earlier attnc: rebuild it to be "
                          "sure)\n";
          ++notes;
        }
    }
    if (!linkable || again)
      continue;

    // bundle.cpp's entry of this kernel: its arrays hold the manifest's bytes,
    // its launch shape is the manifest's.
    if (registering.empty()) {
      problem(where, "bundle.cpp does not register " + kernel);
      continue;
    }
    const SourceEntry &e = *registering[0];
    if (registering.size() > 1)
      problem(where, "bundle.cpp registers " + kernel + " twice (lines " + std::to_string(e.line) +
                         " and " + std::to_string(registering[1]->line) + ")");
    const std::string entryAt = "bundle.cpp:" + std::to_string(e.line) + " registers " + kernel;
    auto sameBytes = [&](const std::string &array, long long size, const std::string &sum,
                         bool fileMatches) {
      std::vector<char> embedded;
      if (std::find(manifestEdited.begin(), manifestEdited.end(), array) != manifestEdited.end())
        return;
      if (!embeddedArray(source, array, embedded))
        problem(where, entryAt + " with " + array + ", an array bundle.cpp does not hold");
      else if (static_cast<long long>(embedded.size()) != size ||
               !checksumMatches(embedded.data(), embedded.size(), sum))
        // Where the file matches the manifest, bundle.cpp is the odd one out;
        // where neither does, the manifest line may be what was edited.
        problem(where, entryAt + " with " + array + ", whose bytes are not the manifest's (" +
                           std::to_string(embedded.size()) + " bytes, checksum " +
                           fnv1aHex(embedded.data(), embedded.size()) + "; the manifest says " +
                           std::to_string(size) + " bytes, " + sum + ")" +
                           (fileMatches ? "" : ": the manifest line may be what changed"));
    };
    sameBytes(e.cubin, m.bytes, m.fnv1a, readMain);
    if (listsPair != !e.pairCubin.empty())
      problem(where, entryAt + (listsPair ? " without" : " with") +
                         " a pair kernel's cubin, the manifest " +
                         (listsPair ? "lists one" : "does not list one"));
    else if (listsPair)
      sameBytes(e.pairCubin, m.pair_bytes, m.pair_fnv1a, readPair);
    LaunchColumns registers = launchColumns(e.threads, e.shared_bytes, e.merge_threads,
                                            e.cluster_merge, e.pair_shared_bytes, head.format);
    LaunchColumns manifestSays = says;
    if (head.format >= 2 && e.params_bytes >= 0) {
      registers.push_back({"params_bytes", e.params_bytes});
      manifestSays.push_back({"params_bytes", m.params_bytes});
    }
    for (size_t i = 0; i < registers.size(); ++i)
      if (registers[i].second != manifestSays[i].second)
        problem(where, entryAt + " with " + registers[i].first + " " +
                           std::to_string(registers[i].second) + ", the manifest says " +
                           std::to_string(manifestSays[i].second));
  }
  // bundle.cpp registers no kernel the manifest does not list.
  for (const SourceEntry &e : entries)
    if (allRead && !e.listed)
      problem(sourcePath + ":" + std::to_string(e.line),
              ": registers " + e.arch + " " + e.spec + ", which no manifest line lists");
  if (problems)
    return fail(counted(problems, "problem") + " in " + dir);
  llvm::outs() << dir << ": " << counted(kernels, "kernel")
               << (hasSource ? ", cubins and bundle.cpp match the manifest"
                             : ", cubins match the manifest (no bundle.cpp: a folder to load at "
                               "run time, not to link)")
               << (notes ? " (" + counted(notes, "note") + " above)" : "")
               << (head.format < kManifestFormat
                       ? " (manifest format " + std::to_string(head.format) +
                             ": it cannot be loaded at run time; rebuild it to load it)\n"
                       : std::string("\n"));
  return 0;
}

int aot(const AotOptions &o) {
  if (!o.verify.empty())
    return verify(o.verify);
  if (o.output.size() > 1 && o.output.back() == '/') {
    // "dir/" is "dir": the temporary and the set-aside names go beside it, not in it.
    AotOptions trimmed = o;
    while (trimmed.output.size() > 1 && trimmed.output.back() == '/')
      trimmed.output.pop_back();
    return aot(trimmed);
  }
  if (o.specsFile.empty() || o.output.empty())
    return fail("--specs FILE and -o DIR are required");
  std::vector<std::string> archs;
  {
    std::istringstream in(o.archs);
    const std::string emptyName =
        "--arch '" + o.archs + "': an empty name in the list (write sm_80,sm_90a)";
    for (std::string a; std::getline(in, a, ',');) {
      if ((a = trim(a)).empty())
        return fail(emptyName);
      if (a != "sm_80" && a != "sm_90a")
        return fail("--arch " + a + ": the architectures are sm_80 and sm_90a");
      if (std::find(archs.begin(), archs.end(), a) == archs.end())
        archs.push_back(a);
    }
    const std::string all = trim(o.archs);
    if (!all.empty() && all.back() == ',') // getline drops a last empty name
      return fail(emptyName);
  }
  if (archs.empty())
    return fail("--arch names no architecture");
  if (llvm::sys::fs::is_directory(o.specsFile))
    return fail("--specs " + o.specsFile + " is a folder: it takes a file of specs, one per line");
  std::ifstream in(o.specsFile);
  if (!in)
    return fail(o.specsFile + ": cannot open");

  // Every line checked first; bad lines are listed with their numbers.
  std::vector<Job> jobs;
  std::vector<std::string> bad; // one message per bad build
  int badLines = 0;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (size_t hash = line.find('#'); hash != std::string::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (line.empty())
      continue;
    const bool named = mentions(line, "target");
    const std::string where = o.specsFile + ":" + std::to_string(number) + ": ";
    // A line may be bad for one architecture only (mma=wgmma on sm_80): each
    // such build is reported with its architecture, and --skip-bad keeps the
    // others; a line bad for all of them alike is reported once.
    std::vector<std::pair<std::string, std::string>> failed; // arch, message
    for (const std::string &arch : archs) {
      SpecResult r = parseSpec(named ? line : line + ",target=" + arch);
      if (!r) {
        failed.push_back({arch, r.error->message()});
        if (named)
          break;
        continue;
      }
      if (!r.spec->isGPU()) {
        failed.push_back({arch, "target = cpu: a bundle holds GPU kernels"});
        break;
      }
      Job job;
      job.spec = *r.spec;
      job.arch = name(r.spec->target);
      job.line = number;
      if (named && o.archsGiven && std::find(archs.begin(), archs.end(), job.arch) == archs.end())
        llvm::errs() << "attnc aot: " << where << "note: the line names target = " << job.arch
                     << ", not in --arch " << o.archs << ": built for " << job.arch
                     << ", as the line says\n";
      const bool dup = std::any_of(jobs.begin(), jobs.end(), [&](const Job &j) {
        return j.spec == job.spec && j.arch == job.arch;
      });
      // Decode kernels of another tile_q are the same code (the runtime serves
      // every token count from one): said, and built as the line asks.
      for (const Job &j : jobs) {
        Spec other = j.spec;
        other.tile_q = job.spec.tile_q;
        if (!dup && job.spec.mode == Mode::Decode && j.arch == job.arch && other == job.spec) {
          llvm::errs() << "attnc aot: " << where << "note: for " << job.arch << ", line "
                       << j.line << "'s decode kernel with tile_q = " << job.spec.tile_q
                       << ": the same code, which the runtime serves for every tile_q from "
                       << "either (one line suffices)\n";
          break;
        }
      }
      if (!dup)
        jobs.push_back(std::move(job));
      if (named)
        break; // the line chose its architecture
    }
    const bool alike = std::all_of(failed.begin(), failed.end(), [&](const auto &f) {
      return f.second == failed.front().second;
    });
    badLines += !failed.empty();
    if (!failed.empty() && alike && (named || failed.size() == archs.size()))
      bad.push_back(where + failed.front().second);
    else
      for (const auto &[arch, message] : failed)
        bad.push_back(where + "for " + arch + ": " + message);
  }
  for (const std::string &b : bad)
    llvm::errs() << (o.skipBad ? "attnc aot: skipped: " : "attnc aot: ") << b << "\n";
  if (!bad.empty() && !o.skipBad)
    return fail(counted(badLines, "bad line") + "; nothing compiled or written (--skip-bad compiles the others)");
  if (jobs.empty())
    return fail(o.specsFile + " holds no spec");
  if (llvm::sys::fs::exists(o.output)) {
    if (!o.force)
      return fail(o.output + " exists (--force replaces it)");
    std::string why;
    if (!isBundleFolder(o.output, why))
      return fail(o.output + " exists and is not a bundle folder (" + why +
                  "): --force replaces only a bundle folder; nothing written");
  }
  // Everything is written under a temporary name, then renamed: made now, so
  // that an output that cannot be written is said before any compile.
  removeStoppedRunsFolders(o.output);
  const std::string tmp = o.output + ".tmp." + std::to_string(getpid());
  llvm::sys::fs::remove_directories(tmp);
  if (std::error_code ec = llvm::sys::fs::create_directories(tmp + "/cubins"))
    return fail("cannot write " + o.output + " (" + ec.message() + " for " + tmp +
                "); nothing compiled");

  // Compile in parallel: one job at a time per worker, progress as they end.
  const unsigned workers = std::max(1u, std::min<unsigned>(
      o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency()), jobs.size()));
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex printing;
  auto t0 = std::chrono::steady_clock::now();
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      Job &j = jobs[i];
      std::string source;
      if (emitCudaForSpec(j.spec, source, j.shape, j.error)) {
        CudaCompileOptions options = compileOptionsFor(j.arch, j.shape);
        options.lineInfo = false; // shipped code: no source-line tables
        j.binary = compileCuda(source, j.spec.symbol() + ".cu", options);
        if (!j.binary)
          j.error = j.binary.error;
      }
      std::lock_guard<std::mutex> lock(printing);
      llvm::outs() << llvm::format("[%2d/%zu] %-7s ", ++done, jobs.size(), j.arch.c_str())
                   << j.spec.symbol();
      if (j.error.empty())
        llvm::outs() << llvm::format("  %.2f s, %d registers, %d spill bytes\n",
                                     j.binary.seconds, j.binary.registers,
                                     j.binary.spillStoreBytes);
      else
        llvm::outs() << "  FAILED\n";
      llvm::outs().flush();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back(work);
  for (std::thread &t : pool)
    t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int failed = 0;
  for (const Job &j : jobs)
    if (!j.error.empty()) {
      llvm::errs() << "attnc aot: " << o.specsFile << ":" << j.line << " (" << j.arch
                   << "): " << j.error << "\n";
      ++failed;
    }
  if (failed) {
    llvm::sys::fs::remove_directories(tmp);
    return fail(counted(failed, "kernel") + " failed; nothing written");
  }

  // Write everything under a temporary name, then rename.
  std::string bundleName = o.name;
  if (bundleName.empty()) {
    std::string base = o.output;
    while (!base.empty() && base.back() == '/')
      base.pop_back();
    bundleName = base.substr(base.find_last_of('/') + 1);
  }
  bundleName = identifier(bundleName);
  std::string error;
  std::ostringstream manifest;
  manifest << "# attnc " << ATTNC_VERSION << " AOT bundle '" << bundleName << "': "
           << counted(int64_t(jobs.size()), "kernel") << "\n# manifest " << kManifestFormat
           << ": " << manifestColumns() << "\n";
  bool ok = true;
  for (const Job &j : jobs) {
    ManifestLine m;
    m.arch = j.arch;
    m.spec = j.spec.str();
    m.cubin = "cubins/" + j.spec.symbol() + ".cubin";
    m.threads = j.shape.threads;
    m.shared_bytes = j.shape.shared_bytes;
    m.merge_threads = j.shape.merge_threads;
    m.cluster_merge = j.shape.cluster_merge ? 1 : 0;
    m.pair_shared_bytes = j.shape.pair_shared_bytes;
    m.params_bytes = sizeof(attn::kernel::Params);
    m.registers = j.binary.registers;
    m.spill_bytes = j.binary.spillStoreBytes;
    m.bytes = static_cast<long long>(j.binary.cubin.size());
    m.fnv1a = fnv1aHex(j.binary.cubin.data(), j.binary.cubin.size());
    ok = ok && writeFile(tmp + "/" + m.cubin,
                         std::string(j.binary.cubin.begin(), j.binary.cubin.end()), error);
    if (!j.binary.pairCubin.empty()) {
      m.pair_cubin = "cubins/" + j.spec.symbol() + "_pair.cubin";
      m.pair_bytes = static_cast<long long>(j.binary.pairCubin.size());
      m.pair_fnv1a = fnv1aHex(j.binary.pairCubin.data(), j.binary.pairCubin.size());
      ok = ok && writeFile(tmp + "/" + m.pair_cubin,
                           std::string(j.binary.pairCubin.begin(), j.binary.pairCubin.end()),
                           error);
    }
    manifest << formatManifestLine(m) << "\n";
  }
  ok = ok && writeFile(tmp + "/manifest.txt", manifest.str(), error) &&
       writeFile(tmp + "/bundle.cpp", bundleSource(bundleName, jobs), error);
  // An old bundle (checked above) steps aside first and is removed only once
  // the new one is in place; if the rename fails it comes back.
  const std::string old = o.output + ".old." + std::to_string(getpid());
  const bool replacing = ok && llvm::sys::fs::exists(o.output);
  if (replacing && llvm::sys::fs::rename(o.output, old)) {
    error = "cannot move the old bundle " + o.output + " aside";
    ok = false;
  }
  if (ok && llvm::sys::fs::rename(tmp, o.output)) {
    error = "cannot rename " + tmp + " to " + o.output;
    ok = false;
    if (replacing)
      llvm::sys::fs::rename(old, o.output);
  }
  if (!ok) {
    llvm::sys::fs::remove_directories(tmp);
    return fail(error + "; nothing written");
  }
  if (replacing)
    llvm::sys::fs::remove_directories(old);
  llvm::outs() << "bundle '" << bundleName << "': " << counted(int64_t(jobs.size()), "kernel")
               << " compiled in " << llvm::format("%.1f", seconds) << " s with "
               << counted(workers, "worker") << " -> "
               << o.output << "/{bundle.cpp,manifest.txt,cubins/}\n";
  return 0;
}
#else
int aot(const AotOptions &) {
  return fail("this build has no NVRTC (it was not found when it was configured)");
}
#endif

} // namespace attn::cli
