//===- AotVerify.cpp - attnc aot --verify: a bundle folder against its manifest -===//
//
// Checks a bundle folder that `attnc aot` wrote, as it travelled: each kernel
// line against the checks a run-time load makes, its cubins against their
// sizes, checksums and kernels, its launch shape against the one this attnc
// gives the spec (a note where they differ), and bundle.cpp, when there is
// one, against the manifest entry by entry.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#ifdef ATTNC_HAVE_NVRTC
#include "attnc/BundleFolder.h"
#include "attnc/EmitCuda.h"
#include "attn/params.cuh"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <sys/stat.h>
#include <string>
#include <vector>

namespace attn::cli {

namespace {
int fail(const std::string &message) { return commandError("aot", message); }

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

/// The two forms of bundle.cpp: through the C API (ABI 6 on), and the C++
/// runtime's of earlier attnc's. An entry's line is the same in both.
struct SourceForm {
  const char *entries;      ///< the entries' type
  const char *registers;    ///< the name of what registers them
  const char *include;      ///< the one preprocessor line
  const char *list;         ///< the line that opens entries[]
  const char *registration; ///< how the registration's line starts, before the name
  const char *tail;         ///< and how it ends after it: all of entries[]
  /// The lines after entries[] (indent, blank lines and comments aside),
  /// "@" for the registration's, then null.
  const char *after[7];
};
const SourceForm kSourceForms[] = {
    {"attnc_bundle_entry",
     "attnc_bundle_register",
     "#include \"attnc/attnc.h\"",
     "const attnc_bundle_entry entries[] = {",
     "attnc_bundle_register(\"",
     "\", entries, sizeof entries / sizeof entries[0], sizeof entries[0]);",
     {"struct Registration {", "Registration() {", "@", "}", "} registration;", "} // namespace",
      nullptr}},
    {"attn::BundleEntry",
     "BundleRegistration",
     "#include \"attnc/Bundle.h\"",
     "const attn::BundleEntry entries[] = {",
     "const attn::BundleRegistration registration(\"",
     "\", entries, sizeof entries / sizeof entries[0]);",
     {"@", "} // namespace", nullptr}}};

/// bundle.cpp's entries[] (`source` with LF line ends), its form and the
/// number of the line that closes it, its lines that are not entries in
/// `bad`; "" or why there is no whole entries[] list.
std::string sourceEntries(const std::string &source, std::vector<SourceEntry> &entries,
                          std::vector<int> &bad, const SourceForm *&form, int &listEnd) {
  std::istringstream in(source);
  bool inEntries = false;
  int number = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    if (!inEntries) {
      for (const SourceForm &f : kSourceForms)
        if (text == f.list)
          form = &f;
      inEntries = form != nullptr;
      continue;
    }
    if (text == "};") {
      listEnd = number;
      return "";
    }
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

/// What in bundle.cpp (`source`, LF line ends) around its entries[] is not
/// what `attnc aot` writes for bundle `name`, as (line, problem) pairs (line
/// 0: the file): one registration of all of entries[] in the entries' form
/// (`form`, null where there is no whole list), no preprocessor line but the
/// include, and the lines after entries[] (which closes at `listEnd`) as
/// written, none missing (a file cut short) and none added.
std::vector<std::pair<int, std::string>> sourceFrame(const std::string &source,
                                                     const SourceForm *form, int listEnd,
                                                     const std::string &name) {
  std::vector<std::pair<int, std::string>> problems;
  struct Line {
    int number;
    std::string text; ///< its indent dropped
  };
  std::vector<Line> code, calls; // lines that are not blank or comments; registrations
  const SourceForm *callForm = nullptr;
  {
    std::istringstream in(source);
    int number = 0;
    for (std::string text; std::getline(in, text);) {
      ++number;
      text.erase(0, text.find_first_not_of(" \t"));
      if (text.empty() || text.rfind("//", 0) == 0)
        continue;
      code.push_back({number, text});
      // A registration is a line that starts as attnc aot writes one; the
      // name of what registers anywhere else is another registration.
      for (const SourceForm &f : kSourceForms)
        if (text.rfind(f.registration, 0) == 0) {
          calls.push_back(code.back());
          callForm = callForm ? callForm : &f;
        } else if (text.find(f.registers) != std::string::npos) {
          problems.push_back({number, std::string("a call of ") + f.registers +
                                          " that attnc aot does not write (it writes one, on a "
                                          "line of its own): " + text});
        }
      // The include of the entries' form (of either, where there is no whole list).
      const bool included = form ? text == form->include
                                 : text == kSourceForms[0].include ||
                                       text == kSourceForms[1].include;
      if (text[0] == '#' && !included)
        problems.push_back({number, "a preprocessor line attnc aot does not write: " + text});
    }
  }
  if (calls.empty()) {
    problems.push_back({0, "has no bundle registration (a line `attnc_bundle_register(\"NAME\", "
                           "entries, ...);`)"});
    return problems;
  }
  for (size_t i = 1; i < calls.size(); ++i)
    problems.push_back({calls[i].number, "a second registration (line " +
                                             std::to_string(calls[0].number) +
                                             " registers the bundle): " + calls[i].text});
  const Line &call = calls[0];
  const size_t open = std::strlen(callForm->registration);
  const std::string registered = call.text.substr(open, call.text.find('"', open) - open);
  if (registered != name)
    problems.push_back({0, "registers the bundle '" + registered + "', the manifest names it '" +
                               name + "'"});
  else if (call.text != callForm->registration + registered + callForm->tail)
    problems.push_back({0, "registers other than all of entries[]: " + call.text});
  if (!form)
    return problems;
  if (callForm != form) {
    problems.push_back({0, std::string("lists its entries as ") + form->entries +
                               " but registers them as " + callForm->entries +
                               " entries (mixed forms: it does not compile)"});
    return problems;
  }
  // The lines after entries[], as written.
  size_t at = 0;
  while (at < code.size() && code[at].number <= listEnd)
    ++at;
  const char *const *expected = form->after;
  for (; *expected && at < code.size(); ++expected, ++at) {
    const std::string want = std::string(*expected) == "@" ? call.text : *expected;
    if (code[at].text != want) {
      problems.push_back({code[at].number, "'" + code[at].text + "' where attnc aot writes '" +
                                               want + "'"});
      return problems;
    }
  }
  if (*expected)
    problems.push_back({0, std::string("ends before its line '") + *expected + "' (cut short?)"});
  else if (at < code.size())
    problems.push_back({code[at].number, "'" + code[at].text + "' after the end attnc aot writes"});
  return problems;
}

} // namespace

/// `attnc aot --verify DIR`: every kernel line of the manifest passes the
/// checks a run-time load makes, every cubin it lists is in the folder with
/// its size and checksum and defines the kernels its line's spec names, and
/// bundle.cpp (when there is one) registers the manifest's bundle and exactly
/// its kernels, each with the manifest's bytes and launch shape, which must
/// be the one the cubins say (checkCubinKernels). A launch shape the cubins
/// say, but other than the one this attnc gives the spec, is a note (a
/// bundle of another attnc has its own, which goes with its cubins).
int verifyBundle(const std::string &dir) {
  const std::string manifestPath = dir + "/manifest.txt";
  if (!llvm::sys::fs::is_directory(dir))
    return fail(dir + (llvm::sys::fs::exists(dir) ? " is not a folder" : " does not exist") +
                ": --verify takes the bundle folder `attnc aot -o` wrote");
  // Read as the loader reads it (a regular file only, not waited on).
  std::vector<unsigned char> manifestBytes;
  int err = 0;
  if (!readRegularFile(manifestPath, kManifestMaxBytes + 1, manifestBytes, err)) {
    struct stat st;
    return fail(manifestPath + ": cannot open: " +
                (err == ENOENT && ::lstat(manifestPath.c_str(), &st) != 0
                     ? "the folder has none (not a bundle folder?)"
                 : err == ENOENT ? "it is a link to nothing"
                 : err == EISDIR ? "it is not a file"
                                 : std::strerror(err)));
  }
  if (manifestBytes.size() > kManifestMaxBytes)
    return fail(manifestPath + " is over " + std::to_string(kManifestMaxBytes >> 20) +
                " MiB: not a manifest attnc aot writes");
  std::istringstream manifest(std::string(manifestBytes.begin(), manifestBytes.end()));
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
    ErrorLine("attnc aot: ") << where << what << "\n";
    ++problems;
  };
  auto note = [&](const std::string &where, const std::string &what) {
    ErrorLine("attnc aot: ") << "note: " << where << what << "\n";
    ++notes;
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
  struct stat sourceStat;
  const bool hasSource = ::lstat(sourcePath.c_str(), &sourceStat) == 0; // a link to nothing too
  bool linkable = false; // bundle.cpp read, its entries[] found: compared line by line
  std::string source;
  std::vector<SourceEntry> entries;
  std::vector<unsigned char> sourceBytes;
  constexpr size_t kSourceMaxBytes = size_t(1) << 31; // 2 GiB: no compiler takes more
  if (hasSource && !readRegularFile(sourcePath, kSourceMaxBytes + 1, sourceBytes, err)) {
    problem(sourcePath, err == ENOENT ? " is a link to nothing" : unreadableFile("", err));
  } else if (hasSource && sourceBytes.size() > kSourceMaxBytes) {
    problem(sourcePath, " is over 2 GiB: not a bundle.cpp attnc aot writes");
  } else if (hasSource) {
    // CRLF line ends (a checkout that converts them) compile the same: read as LF.
    source.reserve(sourceBytes.size());
    for (unsigned char c : sourceBytes)
      if (c != '\r')
        source += static_cast<char>(c);
    std::vector<unsigned char>().swap(sourceBytes);
    // Its entries[], then what is around them: one registration of the
    // manifest's bundle, in the entries' form, the file's end as written.
    std::vector<int> bad;
    const SourceForm *form = nullptr;
    int listEnd = 0;
    const std::string why = sourceEntries(source, entries, bad, form, listEnd);
    if (!why.empty())
      problem(sourcePath, why);
    const auto frame = sourceFrame(source, why.empty() ? form : nullptr, listEnd, head.name);
    for (const auto &[number, what] : frame)
      problem(sourcePath + (number ? ":" + std::to_string(number) + ": " : " "), what);
    linkable = why.empty(); // (the entries are compared whatever is around them)
    if (form == &kSourceForms[1] &&
        source.find(std::string("\n") + kSourceForms[1].registration) != std::string::npos)
      note(sourcePath, " is of an attnc before ABI version 6: it registers through the C++ "
                       "runtime's attn::BundleRegistration, so it links with a build tree's "
                       "runtime only, not with libattnc.so (attnc aot writes one that links "
                       "with both)");
    for (int number : bad)
      problem(sourcePath + ":" + std::to_string(number), ": not an entry attnc aot writes");
  }

  std::vector<std::pair<std::string, int>> seen; // "arch spec", line
  bool allRead = true; // every line sound: an entry that no line lists is named
  for (const auto &[number, text] : lines) {
    const std::string where = manifestPath + ":" + std::to_string(number) + ": ";
    ManifestLine m;
    if (!parseManifestLine(text, head.format, m)) {
      problem(where, "not a manifest line of format " + std::to_string(head.format) + " (" +
                         manifestLineProblem(text, head.format) + ")");
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
      // The file read whole (again: `bytes` stops one past the manifest's
      // size) only where it is a regular file of the array's size.
      std::vector<char> embedded;
      std::vector<unsigned char> whole;
      int readErr = 0;
      const bool agree =
          entry && !array.empty() && embeddedArray(source, array, embedded) &&
          !embedded.empty() &&
          readRegularFile(dir + "/" + file, embedded.size() + 1, whole, readErr) &&
          std::equal(whole.begin(), whole.end(), embedded.begin(), embedded.end(),
                     [](unsigned char w, char e) { return w == static_cast<unsigned char>(e); });
      if (agree) {
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
    if (readMain && readPair &&
        !(why = checkCubinKernels(m, head.format, cubin, pairCubin)).empty()) {
      problem(where, why);
      allRead = false;
      continue;
    }
    // The launch shape this attnc gives the spec (checkManifestLine parsed it).
    CudaLaunchShape shape;
    std::string emitted;
    if (!emitCudaForSpec(*parseSpec(m.spec).spec, emitted, shape, why)) {
      note(where, "this attnc does not emit the spec's kernel (" + why +
                      "): its launch shape is not compared");
    } else {
      const LaunchColumns emits =
          launchColumns(shape.threads, shape.shared_bytes, shape.merge_threads,
                        shape.cluster_merge ? 1 : 0, shape.pair_shared_bytes, head.format);
      for (size_t i = 0; i < says.size(); ++i)
        if (says[i].second != emits[i].second)
          note(where, std::string(says[i].first) + " = " + std::to_string(says[i].second) +
                          ", this attnc gives the spec's kernel " +
                          std::to_string(emits[i].second) +
                          " (the shape its cubins say: a bundle of another attnc; rebuild it to "
                          "be sure)");
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
  // A sound bundle with files of the user's beside it: `aot --force` would
  // not replace this folder, which is worth knowing before a rebuild.
  if (std::string why; !holdsOnlyBundleFiles(dir, why, /*complete=*/true))
    note(dir + ": ", why + " (attnc aot --force will not replace this folder)");
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

} // namespace attn::cli

#endif // ATTNC_HAVE_NVRTC
