//===- Bundle.cpp - The registry of AOT bundles, linked in or loaded -------===//

#include "attnc/Bundle.h"
#include "attnc/Cubin.h"
#include "attnc/attnc.h"

#include "attn/Printable.h"
#include "attn/Spec.h"
#include "attn/params.cuh"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <utility>

namespace attn {

namespace {
struct Registry {
  std::mutex mutex;
  std::vector<std::string> names, errors;
  std::vector<std::string> origins; ///< per name: "" for a linked bundle, else its folder
  std::vector<std::string> versions; ///< per name: a loaded folder's manifest checksum
  std::vector<std::pair<const BundleEntry *, size_t>> tables; ///< per name: its entries
  std::vector<const BundleEntry *> entries;
  std::map<std::pair<std::string, std::string>, const BundleEntry *> bySpec;
};

// A function-local static: registrations run during static initialisation,
// in whatever order the linker put the translation units.
Registry &registry() {
  static Registry r;
  return r;
}

/// Where `name` has a control character, or npos.
size_t controlCharacterAt(const char *name) {
  for (size_t i = 0; name && name[i]; ++i)
    if (isControl(name[i]))
      return i;
  return std::string::npos;
}

/// How messages name a bundle (a control character shown as \xNN; a
/// name's UTF-8 as it is).
std::string bundleLabel(const char *name) {
  if (!name || !*name)
    return "bundle (no name)";
  return "bundle " + printable(name, /*keepUtf8=*/true);
}

/// Why a bundle's entries, of `got` bytes each where it was compiled, cannot be
/// read as this attnc's of `want` bytes: none of them is used.
std::string otherLayout(const char *name, size_t got, size_t want) {
  return bundleLabel(name) + ": compiled with entries of " + std::to_string(got) +
         " bytes, this attnc's are " + std::to_string(want) +
         " (regenerate it with this attnc's `attnc aot`); its kernels are not used";
}

/// Keeps why a linked bundle was refused, for bundleErrors(), and says it on
/// stderr: a program that is not in AOT-only mode would otherwise compile
/// the bundle's kernels with NVRTC without a word. Returns `why`.
std::string keepRefusal(std::string why) {
  // One line, as the C API's messages: an entry's spec or arch may hold a
  // control character.
  why = printable(why, /*keepUtf8=*/true);
  std::fprintf(stderr, "attnc: warning: %s\n", why.c_str());
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.errors.push_back(why);
  return why;
}

/// Why a bundle's entries cannot be used (the whole bundle is refused), or "".
std::string refusal(const char *name, const BundleEntry *entries, size_t count,
                    size_t entry_bytes) {
  const std::string bundle = bundleLabel(name);
  const std::string unused = "; its kernels are not used";
  if (!name || !*name || (count && !entries))
    return bundle + ": " + (name && *name ? "its entries are a null pointer" : "no name") + unused;
  if (const size_t at = controlCharacterAt(name); at != std::string::npos)
    return bundle + ": the name has a control character (byte " + std::to_string(at) +
           "; attnc aot --name takes letters, digits and _)" + unused;
  if (entry_bytes != sizeof(BundleEntry))
    return otherLayout(name, entry_bytes, sizeof(BundleEntry));
  for (size_t i = 0; i < count; ++i)
    if (entries[i].params_bytes != sizeof(kernel::Params))
      return bundle + ": its kernels take arguments of " +
             std::to_string(entries[i].params_bytes) + " bytes, this attnc passes " +
             std::to_string(sizeof(kernel::Params)) +
             " (regenerate it with this attnc's `attnc aot`)" + unused;
  // An entry that could not be loaded is refused with the whole bundle (a
  // hand-edited or damaged source; `attnc aot` writes none).
  for (size_t i = 0; i < count; ++i) {
    const BundleEntry &e = entries[i];
    const char *why = !e.spec || !*e.spec               ? "no spec"
                      : !e.arch || !*e.arch             ? "no arch"
                      : !e.cubin || e.cubin_size == 0   ? "no cubin"
                      : e.pair_cubin_size && !e.pair_cubin ? "a pair cubin size without its bytes"
                      : e.threads < 1                   ? "threads < 1"
                      : e.shared_bytes < 0 || e.merge_threads < 0 || e.pair_shared_bytes < 0
                          ? "a negative launch size"
                          : nullptr;
    if (why)
      return bundle + ": entry " + std::to_string(i) + " has " + why + unused;
  }
  for (size_t i = 0; i < count; ++i)
    if (const std::string why = bundledSpecProblem(entries[i].spec, entries[i].arch); !why.empty())
      return bundle + ": entry " + std::to_string(i) + " (" + entries[i].spec + "): " + why +
             unused;
  // Each kernel once: a second entry of one would never be used.
  std::map<std::pair<std::string, std::string>, size_t> seen;
  for (size_t i = 0; i < count; ++i)
    if (auto [it, added] = seen.emplace(std::make_pair(entries[i].spec, entries[i].arch), i);
        !added)
      return bundle + ": entry " + std::to_string(i) + " is the kernel of entry " +
             std::to_string(it->second) + " again (" + entries[i].arch + " " + entries[i].spec +
             ")" + unused;
  // Each entry's cubins define its spec's kernels and were built for its launch shape.
  for (size_t i = 0; i < count; ++i) {
    const BundleEntry &e = entries[i];
    const std::string entry = "entry " + std::to_string(i) + " (" + e.spec + ")";
    const std::string why = checkBundledCubins(
        {e.spec, e.threads, e.shared_bytes, e.merge_threads, e.cluster_merge, e.pair_shared_bytes},
        {e.cubin, e.cubin_size, entry + "'s cubin"},
        {e.pair_cubin, e.pair_cubin_size, entry + "'s pair cubin"});
    if (!why.empty())
      return bundle + ": " + why + unused;
  }
  return "";
}

/// Adds a bundle that passed refusal(); the caller holds the lock.
void add(Registry &r, const char *name, const BundleEntry *entries, size_t count,
         const std::string &origin, const std::string &version) {
  r.names.push_back(name);
  r.origins.push_back(origin);
  r.versions.push_back(version);
  r.tables.push_back({entries, count});
  for (size_t i = 0; i < count; ++i) {
    r.entries.push_back(&entries[i]);
    // The first bundle to register a kernel keeps it.
    r.bySpec.emplace(std::make_pair(std::string(entries[i].spec), std::string(entries[i].arch)),
                     &entries[i]);
  }
}

/// Whether two tables that passed refusal() (each kernel once) hold the same
/// kernels, in any order: the same specs and architectures, launch shapes
/// and cubins' bytes.
bool sameKernels(const std::pair<const BundleEntry *, size_t> &a, const BundleEntry *b,
                 size_t count) {
  if (a.second != count)
    return false;
  auto bytes = [](const unsigned char *x, size_t xn, const unsigned char *y, size_t yn) {
    return xn == yn && (xn == 0 || std::memcmp(x, y, xn) == 0);
  };
  std::map<std::pair<std::string, std::string>, const BundleEntry *> byKernel;
  for (size_t i = 0; i < count; ++i)
    byKernel.emplace(std::make_pair(a.first[i].spec, a.first[i].arch), &a.first[i]);
  for (size_t i = 0; i < count; ++i) {
    const auto it = byKernel.find(std::make_pair(b[i].spec, b[i].arch));
    if (it == byKernel.end())
      return false;
    const BundleEntry &x = *it->second, &y = b[i];
    if (x.threads != y.threads || x.shared_bytes != y.shared_bytes ||
        x.merge_threads != y.merge_threads || x.cluster_merge != y.cluster_merge ||
        x.pair_shared_bytes != y.pair_shared_bytes || x.params_bytes != y.params_bytes ||
        !bytes(x.cubin, x.cubin_size, y.cubin, y.cubin_size) ||
        !bytes(x.pair_cubin, x.pair_cubin_size, y.pair_cubin, y.pair_cubin_size))
      return false;
  }
  return true;
}

/// Why another bundle cannot take the name of registered bundle `i`; the
/// caller holds the lock.
std::string nameTaken(const Registry &r, size_t i) {
  return "a bundle named '" + r.names[i] + "' is already registered (" +
         (r.origins[i].empty() ? "linked into the program" : "loaded from " + r.origins[i]) +
         "); build one of them with another name (attnc aot --name)";
}

/// Registers a bundle linked into the program, or keeps why it was refused
/// for bundleErrors() and returns it. `added`: whether the registry now
/// points into `entries` (not when refused, nor for the same bundle again).
std::string registerLinked(const char *name, const BundleEntry *entries, size_t count,
                           size_t entry_bytes, bool *added = nullptr) {
  std::string why;
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    why = refusal(name, entries, count, entry_bytes);
    for (size_t i = 0; why.empty() && i < r.names.size(); ++i)
      if (r.names[i] == name) {
        // The same bundle again (its bundle.cpp in two of the program's
        // libraries, or its folder loaded first): nothing new, nothing wrong.
        if (sameKernels(r.tables[i], entries, count))
          return "";
        why = bundleLabel(name) + ": " + nameTaken(r, i) + "; its kernels are not used";
      }
    if (why.empty()) {
      add(r, name, entries, count, "", "");
      if (added)
        *added = true;
      return why;
    }
  }
  return keepRefusal(why);
}
} // namespace

BundleRegistration::BundleRegistration(const char *name, const BundleEntry *entries,
                                       size_t count, size_t entry_bytes) {
  registerLinked(name, entries, count, entry_bytes);
}

bool registerLoadedBundle(const char *name, const BundleEntry *entries, size_t count,
                          const std::string &origin, const std::string &version,
                          std::string &error, bool &again) {
  again = false;
  error = refusal(name, entries, count, sizeof(BundleEntry));
  if (!error.empty())
    return false;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < r.names.size(); ++i)
    if (r.names[i] == name) {
      // The same manifest, from this folder or a copy of it, or the folder
      // of a bundle linked into the program (its kernels, byte for byte):
      // the same bundle.
      if ((!r.origins[i].empty() && r.versions[i] == version) ||
          (r.origins[i].empty() && sameKernels(r.tables[i], entries, count)))
        return again = true;
      if (r.origins[i] == origin)
        error = "bundle '" + std::string(name) + "' was loaded from this folder before and has "
                "been rebuilt since: the process keeps the kernels it loaded first (restart it "
                "to serve the new ones)";
      else
        error = nameTaken(r, i);
      return false;
    }
  add(r, name, entries, count, origin, version);
  return true;
}

std::string bundledSpecProblem(const std::string &spec, const std::string &arch) {
  SpecResult parsed = parseSpec(spec);
  if (!parsed)
    return parsed.error->message();
  if (!parsed.spec->isGPU())
    return "a cpu spec in an AOT bundle";
  const std::string target = name(parsed.spec->target);
  if (parsed.spec->str() != spec)
    return "the spec is not in canonical form (" + parsed.spec->str() + ")" +
           (arch != target ? ", and its target is not the architecture " + arch : std::string());
  if (arch != target)
    return "architecture " + arch + " for a spec of target " + target +
           " (attnc aot writes the target's)";
  return "";
}

std::string &cApiLastError() {
  thread_local std::string message;
  return message;
}

const BundleEntry *findBundledKernel(const std::string &spec, const std::string &arch) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.bySpec.find({spec, arch});
  return it == r.bySpec.end() ? nullptr : it->second;
}

std::vector<const BundleEntry *> bundledKernels() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.entries;
}

std::vector<std::string> bundleNames() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.names;
}

std::vector<std::string> bundleErrors() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.errors;
}

} // namespace attn

extern "C" attnc_status attnc_bundle_register(const char *name, const attnc_bundle_entry *entries,
                                              size_t count, size_t entry_bytes) {
  using attn::BundleEntry;
  auto status = [](const std::string &why) {
    attn::cApiLastError() = why;
    return why.empty() ? ATTNC_OK : ATTNC_ERROR_INVALID_ARGUMENT;
  };
  // Nothing is read from a table of another layout, whatever else is wrong
  // (and a caller that gives none gives the size of this one).
  if (entry_bytes != sizeof(attnc_bundle_entry))
    return status(attn::keepRefusal(attn::otherLayout(name, entry_bytes,
                                                      sizeof(attnc_bundle_entry))));
  if (entries && count > SIZE_MAX / sizeof(attnc_bundle_entry))
    return status(attn::keepRefusal(
        attn::bundleLabel(name) + ": " + std::to_string(count) +
        " entries do not fit in memory (a wrong count); its kernels are not used"));
  try {
    // In the C++ runtime's own form (attn::BundleEntry); a table the
    // registry takes is kept like the caller's until the process ends.
    // (Null entries stay null: the registration names them.)
    std::unique_ptr<BundleEntry[]> table;
    if (entries && count) {
      table = std::make_unique<BundleEntry[]>(count);
      for (size_t i = 0; i < count; ++i) {
        const attnc_bundle_entry &e = entries[i];
        table[i] = BundleEntry{e.spec,          e.arch,           e.cubin,
                               e.cubin_size,    e.threads,        e.shared_bytes,
                               e.merge_threads, e.cluster_merge,  e.pair_shared_bytes,
                               e.pair_cubin,    e.pair_cubin_size, e.params_bytes};
      }
    }
    // Kept before the registry sees it (a registration that throws part-way
    // may already point into it), and let go only when it is known unused.
    static std::mutex keptMutex;
    static auto *kept = new std::vector<std::unique_ptr<BundleEntry[]>>();
    std::lock_guard<std::mutex> lock(keptMutex);
    const BundleEntry *copy = table.get();
    if (copy)
      kept->push_back(std::move(table));
    bool added = false;
    const std::string why = attn::registerLinked(name, copy, count, sizeof(BundleEntry), &added);
    if (copy && !added)
      kept->pop_back();
    return status(why);
  } catch (const std::exception &e) { // no C++ exception crosses the C boundary
    return status(attn::keepRefusal(attn::bundleLabel(name) +
                                    ": cannot be registered (" + e.what() +
                                    "); its kernels are not used"));
  }
}
