//===- Bundle.cpp - The registry of linked AOT bundles ---------------------===//

#include "attnc/Bundle.h"

#include "attn/params.cuh"

#include <map>
#include <string>
#include <mutex>
#include <utility>

namespace attn {

namespace {
struct Registry {
  std::mutex mutex;
  std::vector<std::string> names, errors;
  std::vector<const BundleEntry *> entries;
  std::map<std::pair<std::string, std::string>, const BundleEntry *> bySpec;
};

// A function-local static: registrations run during static initialisation,
// in whatever order the linker put the translation units.
Registry &registry() {
  static Registry r;
  return r;
}
} // namespace

BundleRegistration::BundleRegistration(const char *name, const BundleEntry *entries,
                                       size_t count, size_t entry_bytes) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string bundle = "bundle " + std::string(name ? name : "(no name)");
  if (!name || (count && !entries)) {
    r.errors.push_back(bundle + ": " + (name ? "its entries are a null pointer" : "no name") +
                       "; its kernels are not used");
    return;
  }
  if (entry_bytes != sizeof(BundleEntry)) {
    // Its entries cannot be read with this layout: none of them is used.
    r.errors.push_back("bundle " + std::string(name) + ": compiled with entries of " +
                       std::to_string(entry_bytes) + " bytes, this attnc's are " +
                       std::to_string(sizeof(BundleEntry)) +
                       " (regenerate it with this attnc's `attnc aot`); its kernels are not used");
    return;
  }
  for (size_t i = 0; i < count; ++i)
    if (entries[i].params_bytes != sizeof(kernel::Params)) {
      r.errors.push_back("bundle " + std::string(name) + ": its kernels take arguments of " +
                         std::to_string(entries[i].params_bytes) + " bytes, this attnc passes " +
                         std::to_string(sizeof(kernel::Params)) +
                         " (regenerate it with this attnc's `attnc aot`); its kernels are not used");
      return;
    }
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
    if (why) {
      r.errors.push_back(bundle + ": entry " + std::to_string(i) + " has " + why +
                         "; its kernels are not used");
      return;
    }
  }
  r.names.push_back(name);
  for (size_t i = 0; i < count; ++i) {
    r.entries.push_back(&entries[i]);
    // The first bundle to register a kernel keeps it.
    r.bySpec.emplace(std::make_pair(std::string(entries[i].spec), std::string(entries[i].arch)),
                     &entries[i]);
  }
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
