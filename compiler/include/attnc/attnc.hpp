//===- attnc.hpp - The C++ API of attnc: classes over the C API -*- C++ -*-===//
//
// What `find_package(attnc)` gives a C++ application: header-only classes
// over attnc.h, so the application depends on libattnc.so's stable C ABI
// alone (no C++ ABI, no MLIR), with C++ types on top: a failed call throws
// attnc::Error, which carries the status and the line that names the
// problem; handles are released by destructors.
//
//   #include <attnc/attnc.hpp>
//
//   attnc::Runtime rt;                                      // the current CUDA context
//   attnc::Kernel k = rt.kernel("mode=decode,page_size=16,gqa=4");
//   attnc_args args = attnc::makeArgs();                    // size set, the rest 0
//   args.q = ...; args.batch = ...;                         // device pointers and sizes
//   k.launch(args, stream);                                 // a CUstream, or nullptr
//
// Serving from an AOT bundle, no NVRTC at run time:
//   attnc::loadBundle("my-bundle");                         // kernels of `attnc aot -o my-bundle`
//   attnc::Runtime rt;
//   rt.setAotOnly(true);                                    // a spec not bundled throws (*)
//   attnc::Kernel k = rt.kernel(spec);                      // from the bundle
//
// In CMake: find_package(attnc) and target_link_libraries(app PRIVATE attnc::attnc).
// The header needs C++17 with exceptions, and a libattnc.so of ABI version 5 or
// later (attnc::abiVersion()). (Inside attnc's own tree, attn::Runtime in
// attnc/Runtime.h is the C++ runtime these calls reach.)
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_ATTNC_HPP
#define ATTNC_ATTNC_HPP

#include "attnc/attnc.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attnc {

/// A call that failed: status() is the C API's status, what() the call and
/// the line attnc_last_error() gave.
class Error : public std::runtime_error {
public:
  Error(attnc_status status, const std::string &what)
      : std::runtime_error(what), status_(status) {}
  attnc_status status() const noexcept { return status_; }

private:
  attnc_status status_;
};

namespace detail {
// The handles' deleters: the C functions, called from C++.
struct RuntimeDeleter {
  void operator()(attnc_runtime *rt) const noexcept { attnc_runtime_destroy(rt); }
};
struct KernelDeleter {
  void operator()(attnc_kernel *k) const noexcept { attnc_kernel_release(k); }
};
struct PagesDeleter {
  void operator()(attnc_pages *p) const noexcept { attnc_pages_destroy(p); }
};

inline void check(attnc_status status, const std::string &what) {
  if (status == ATTNC_OK)
    return;
  const char *line = attnc_last_error();
  throw Error(status, what + ": " +
                          (line && *line ? std::string(line)
                                         : "status " + std::to_string(static_cast<int>(status))));
}

/// The text a C call writes into (out, size), the buffer grown while too small.
template <typename Call> std::string text(Call call, const std::string &what) {
  std::string buffer(256, '\0');
  for (;;) {
    const attnc_status status = call(&buffer[0], buffer.size());
    if (status == ATTNC_ERROR_BUFFER_TOO_SMALL && buffer.size() < (size_t(1) << 20)) {
      buffer.resize(buffer.size() * 4);
      continue;
    }
    check(status, what);
    buffer.resize(std::strlen(buffer.c_str()));
    return buffer;
  }
}
} // namespace detail

/// "attnc X.Y.Z".
inline std::string version() { return attnc_version(); }

/// The ABI version of the libattnc.so loaded (this header needs 5 or later:
/// the one it was installed with, ATTNC_ABI_VERSION, or a newer one).
inline int abiVersion() { return attnc_abi_version(); }

/// An attnc_args with its size set and every other field 0 (0: the default
/// where a field has one).
inline attnc_args makeArgs() {
  attnc_args args;
  std::memset(&args, 0, sizeof args);
  args.size = sizeof args;
  return args;
}

/// An attnc_call with its size set, decode -1 (attnc chooses prefill or
/// decode, as attn::attention and Python do) and every other field 0
/// (dtype null: set it).
inline attnc_call makeCall() {
  attnc_call call;
  std::memset(&call, 0, sizeof call);
  call.size = sizeof call;
  call.decode = -1;
  return call;
}

/// The canonical form of a spec; throws for an invalid one (naming the field).
inline std::string canonicalSpec(const std::string &spec) {
  return detail::text(
      [&](char *out, size_t size) { return attnc_spec_canonical(spec.c_str(), out, size); },
      "spec " + spec);
}

/// The spec attnc::Runtime::kernel needs for a call of this description, as
/// attnc_attention_spec derives it, for `target`: "sm_90a", "sm_80" or a
/// GPU's architecture (Runtime::arch()). Needs no GPU.
inline std::string attentionSpec(const attnc_call &call, const std::string &target) {
  return detail::text(
      [&](char *out, size_t size) {
        return attnc_attention_spec(&call, target.c_str(), out, size);
      },
      "attention spec");
}

/// Registers the kernels of a bundle folder `attnc aot` wrote, for every
/// runtime of the process (see attnc_bundle_load); the number of kernels
/// it holds. Needs no GPU.
inline int64_t loadBundle(const std::string &dir) {
  int64_t kernels = 0;
  detail::check(attnc_bundle_load(dir.c_str(), &kernels), "loading the bundle " + dir);
  return kernels;
}

/// A spec's kernel, loaded in its runtime's CUDA context. Copies share it.
/// It stays valid after its Runtime is gone as long as that context lives
/// (a runtime bound to device 0's primary context keeps it for the process;
/// one bound to the application's own context needs it kept alive), and it
/// launches only where that context is current on the calling thread.
class Kernel {
public:
  /// The canonical spec it was built for (a GPU decode kernel serves every
  /// tile_q: its spec may differ from the one asked for in tile_q alone).
  std::string spec() const {
    return detail::text(
        [&](char *out, size_t size) { return attnc_kernel_spec(k_.get(), out, size); },
        "kernel spec");
  }
  /// Where it came from when it was got: "bundle", "memory", "disk" or "compiled".
  std::string source() const {
    return detail::text(
        [&](char *out, size_t size) { return attnc_kernel_source(k_.get(), out, size); },
        "kernel source");
  }
  /// Bytes of workspace a launch with these sizes needs (0: none).
  uint64_t workspaceBytes(const attnc_args &args) const {
    uint64_t bytes = 0;
    detail::check(attnc_kernel_workspace_bytes(k_.get(), &args, &bytes), "workspace size");
    return bytes;
  }
  /// Checks the arguments on the host and enqueues on `stream` (a CUstream;
  /// nullptr: the default stream). Never allocates or synchronises.
  void launch(const attnc_args &args, void *stream = nullptr) const {
    detail::check(attnc_launch(k_.get(), &args, stream), "launch");
  }
  /// The opt-in checking mode: synchronises `stream` and checks the offsets,
  /// lengths and block table on the device.
  void checkArguments(const attnc_args &args, void *stream = nullptr) const {
    detail::check(attnc_check_arguments(k_.get(), &args, stream), "checking the arguments");
  }
  attnc_kernel *handle() const { return k_.get(); }

private:
  friend class Runtime;
  explicit Kernel(std::unique_ptr<attnc_kernel, detail::KernelDeleter> kernel)
      : k_(std::move(kernel)) {}
  std::shared_ptr<attnc_kernel> k_;
};

/// The runtime bound to the calling thread's current CUDA context (device
/// 0's primary context when none is current): spec -> kernel, from an AOT
/// bundle, memory, the disk cache (`cacheDir`, empty: the default) or NVRTC.
/// Throws attnc::Error (ATTNC_ERROR_NO_GPU) where there is no GPU. Movable.
class Runtime {
public:
  explicit Runtime(const std::string &cacheDir = "") {
    attnc_runtime *rt = nullptr;
    detail::check(attnc_runtime_create(cacheDir.empty() ? nullptr : cacheDir.c_str(), &rt),
                  "attnc runtime");
    rt_.reset(rt);
  }
  /// The GPU's architecture: "sm_90a", "sm_80", "sm_86", ...
  std::string arch() const {
    return detail::text(
        [&](char *out, size_t size) { return attnc_runtime_arch(rt_.get(), out, size); },
        "architecture");
  }
  /// The kernel of `spec` (the GPU's target when it names none).
  Kernel kernel(const std::string &spec) {
    attnc_kernel *k = nullptr;
    detail::check(attnc_kernel_get(rt_.get(), spec.c_str(), &k), "kernel for " + spec);
    return Kernel(std::unique_ptr<attnc_kernel, detail::KernelDeleter>(k));
  }
  /// JIT at model load: the kernels of `specs`, the missing ones compiled in
  /// parallel on `threads` threads (0: one per hardware thread), in order.
  std::vector<Kernel> prepare(const std::vector<std::string> &specs, unsigned threads = 0) {
    std::vector<const char *> names;
    for (const std::string &s : specs)
      names.push_back(s.c_str());
    std::vector<attnc_kernel *> handles(specs.size(), nullptr);
    std::vector<std::unique_ptr<attnc_kernel, detail::KernelDeleter>> owned;
    std::vector<Kernel> kernels;
    owned.reserve(specs.size());
    kernels.reserve(specs.size());
    detail::check(attnc_runtime_prepare(rt_.get(), names.data(), names.size(), threads,
                                        handles.data()),
                  "preparing kernels");
    // Every handle owned at once (the room is reserved: nothing allocates), so
    // that a Kernel that cannot be made (no memory) leaks none of them.
    for (attnc_kernel *k : handles)
      owned.emplace_back(k);
    for (auto &k : owned)
      kernels.push_back(Kernel(std::move(k)));
    return kernels;
  }
  /// AOT only: a spec no bundle holds throws (ATTNC_ERROR_NOT_BUNDLED)
  /// instead of compiling; kernels already got stay usable. (*) A spec on
  /// tiles attnc would choose for it (a tuning table's, or a long head_dim 64
  /// prefill's 192 x 128) is served by the kernel of the default tiles where
  /// that one is held (Kernel::spec says which).
  void setAotOnly(bool aotOnly) {
    detail::check(attnc_runtime_set_aot_only(rt_.get(), aotOnly ? 1 : 0), "aot only");
  }
  attnc_runtime *handle() const { return rt_.get(); }

private:
  std::unique_ptr<attnc_runtime, detail::RuntimeDeleter> rt_;
};

/// Page slots of a paged KV cache for a scheduler (see attnc_pages_create):
/// each sequence's pages fill windows of consecutive slots. Not thread-safe.
class PageAllocator {
public:
  /// Slots 0 .. numPages - 1 in windows of `pagesPerWindow`, the first
  /// `firstWindowPages` long (0: a full one).
  PageAllocator(int64_t numPages, int64_t pagesPerWindow, int64_t firstWindowPages = 0) {
    attnc_pages *p = nullptr;
    detail::check(attnc_pages_create(numPages, pagesPerWindow, firstWindowPages, &p),
                  "page allocator");
    p_.reset(p);
  }
  /// Pages per window and the first window's size, for a cache at `address`
  /// with `pageBytes` per page in one of its K and V buffers.
  static std::pair<int64_t, int64_t> window(int64_t pageBytes, uint64_t address = 0) {
    int64_t perWindow = 0, first = 0;
    detail::check(attnc_pages_window(pageBytes, address, &perWindow, &first), "page window");
    return {perWindow, first};
  }
  /// `count` more pages for `sequence` (the block-table row's next entries);
  /// all or nothing.
  std::vector<int32_t> allocate(uint64_t sequence, int64_t count = 1) {
    // No more room than there are free slots: a larger count is refused by
    // the call itself before it writes anything (as is a negative one).
    std::vector<int32_t> pages(count > 0 ? static_cast<size_t>(std::min(count, freePages())) : 0);
    detail::check(attnc_pages_allocate(p_.get(), sequence, count, pages.data()),
                  "allocating pages");
    return pages;
  }
  /// Every page of `sequence` back to the free slots.
  void release(uint64_t sequence) {
    detail::check(attnc_pages_release(p_.get(), sequence), "releasing pages");
  }
  int64_t freePages() const {
    int64_t n = 0;
    detail::check(attnc_pages_free_count(p_.get(), &n), "free pages");
    return n;
  }
  /// The windows `sequence`'s pages lie in (0 for one that holds none).
  int64_t windows(uint64_t sequence) const {
    int64_t n = 0;
    detail::check(attnc_pages_windows(p_.get(), sequence, &n), "windows");
    return n;
  }

private:
  std::unique_ptr<attnc_pages, detail::PagesDeleter> p_;
};

} // namespace attnc

#endif // ATTNC_ATTNC_HPP
