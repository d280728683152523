//===- Bundle.h - AOT bundles: kernels compiled ahead of time, linked in -*- C++ -*-===//
//
// `attnc aot` compiles a list of specs for a list of architectures and
// writes a C++ source that embeds the cubins and registers them here at
// static-initialisation time (through attnc_bundle_register, the C API's
// form of BundleRegistration). attn::Runtime looks a spec up in the
// registered bundles before its cache and NVRTC, so an application that
// links a bundle launches those kernels with no NVRTC compile; in AOT-only
// mode (Runtime::setAotOnly) a spec missing from every bundle is an error
// instead of a JIT compile. A program that does not compile bundle.cpp in
// loads the bundle's folder at run time instead (attnc/BundleFolder.h).
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_BUNDLE_H
#define ATTNC_BUNDLE_H

#include <cstddef>
#include <string>
#include <vector>

namespace attn {

/// One kernel of a bundle. Plain data, so a generated source can list them.
struct BundleEntry {
  const char *spec;   ///< canonical spec, whose target is `arch`
  const char *arch;   ///< what the cubin was built for: "sm_80", "sm_90a", ...
  const unsigned char *cubin;
  size_t cubin_size;
  int threads, shared_bytes, merge_threads; ///< the launch shape (templates/attn/params.cuh)
  int cluster_merge;                        ///< LaunchShape::cluster_merge (0 in older bundles)
  int pair_shared_bytes;                    ///< LaunchShape::pair_shared_bytes (0: no pair kernel)
  const unsigned char *pair_cubin;          ///< the pair kernel's module (CudaBinary::pairCubin), or null
  size_t pair_cubin_size;
  /// sizeof(attn::kernel::Params) where the cubins were built: a bundle
  /// whose kernels take other arguments than this runtime passes is refused
  /// like one of another BundleEntry layout.
  size_t params_bytes;
};

/// Registers a bundle's entries (called by the generated source's static
/// initialiser). The entries must live for the whole program. `entry_bytes`
/// is sizeof(BundleEntry) as the bundle's source saw it: a bundle compiled
/// against another layout of BundleEntry (an older attnc's header), or
/// whose entries' params_bytes is not this runtime's, or whose name a bundle
/// registered before has, is refused, its kernels left out, and named by
/// bundleErrors(). (`attnc aot` of ABI version 6 on writes a bundle.cpp that
/// calls the C form, attnc_bundle_register, instead.) (An object
/// compiled before this argument existed does not link at all.)
struct BundleRegistration {
  BundleRegistration(const char *name, const BundleEntry *entries, size_t count,
                     size_t entry_bytes = sizeof(BundleEntry));
};

/// Registers the entries of a bundle loaded at run time (attnc/BundleFolder.h)
/// from `origin`, its folder's real path, whose manifest had checksum
/// `version`. Refused as BundleRegistration refuses, with the reason in
/// `error` rather than bundleErrors(); a name registered before is refused
/// too, unless it was loaded with the same version (the same manifest, from
/// this folder or a copy) or was linked in with the same kernels, byte for
/// byte: then `again` is set and nothing is registered. The entries must live for the
/// whole program.
bool registerLoadedBundle(const char *name, const BundleEntry *entries, size_t count,
                          const std::string &origin, const std::string &version,
                          std::string &error, bool &again);

/// The C form of BundleRegistration, attnc_bundle_register (attnc/attnc.h), is
/// defined by this runtime too, so that one bundle.cpp links with a build
/// tree's C++ runtime as with libattnc.so; this is the calling thread's
/// message for attnc_last_error(), which it and the C API set.
std::string &cApiLastError();

/// Why a bundled kernel of `spec` built for `arch` could never be found, or
/// "": the runtime looks a kernel up by its canonical GPU spec and its
/// target's architecture, as `attnc aot` writes them. Both a linked
/// bundle's entries and a loaded folder's manifest lines are held to it.
std::string bundledSpecProblem(const std::string &spec, const std::string &arch);

/// The entry of `spec` (canonical form) built for `arch`, or null.
const BundleEntry *findBundledKernel(const std::string &spec, const std::string &arch);

/// Every registered entry, in registration order (for listings and tests).
std::vector<const BundleEntry *> bundledKernels();

/// The registered bundles' names.
std::vector<std::string> bundleNames();

/// One line per refused bundle: its name and why.
std::vector<std::string> bundleErrors();

} // namespace attn

#endif // ATTNC_BUNDLE_H
