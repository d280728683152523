//===- CApi.cpp - The C API over attn::Runtime and attn::Kernel -----------===//
//
// Each entry point converts its arguments, calls the C++ runtime, and turns
// the outcome into an attnc_status plus the thread's last-error line. No
// C++ exception crosses the C boundary.
//
//===----------------------------------------------------------------------===//

#include "attnc/attnc.h"

#include "attn/Printable.h"
#include "attnc/Attention.h"
#include "attnc/Bundle.h"
#include "attnc/BundleFolder.h"
#include "attnc/PageAllocator.h"
#include "attnc/Runtime.h"
#include "attnc/Tuning.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

using namespace attn;

struct attnc_runtime {
  std::unique_ptr<Runtime> runtime;
};

struct attnc_kernel {
  std::shared_ptr<const Kernel> kernel;
  const char *source; ///< where it came from when it was got (attnc_kernel_source)
};

struct attnc_pages {
  std::unique_ptr<PageAllocator> allocator;
};

namespace {

attnc_status fail(attnc_status status, std::string message) {
  // One line, whatever the strings it quotes held (a path, a dtype, a
  // manifest's field): a line end would split it, an escape sequence reach
  // the terminal, and a NUL end the C string early, so control characters
  // are written as \xNN (UTF-8 is kept). The one message of more lines is a
  // compile failure's: the compiler's log follows its first line.
  const size_t lineEnd = status == ATTNC_ERROR_COMPILE ? message.find('\n') : std::string::npos;
  cApiLastError() = lineEnd == std::string::npos
                        ? printable(message, /*keepUtf8=*/true)
                        : printable(std::string_view(message).substr(0, lineEnd), true) +
                              message.substr(lineEnd);
  return status;
}

attnc_status ok() {
  cApiLastError().clear();
  return ATTNC_OK;
}

/// The status of a failed kernel lookup.
attnc_status lookupStatus(const KernelLookup &found) {
  return found.wrongTarget  ? ATTNC_ERROR_INVALID_ARGUMENT
         : found.notBundled ? ATTNC_ERROR_NOT_BUNDLED
                            : ATTNC_ERROR_COMPILE;
}

/// attnc_kernel_source's words for where a kernel came from.
const char *sourceName(CacheSource source) {
  return source == CacheSource::Bundle ? "bundle" : name(source);
}

attnc_status copyOut(const std::string &text, char *out, size_t outSize, const char *what) {
  if (!out)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string(what) + ": the output buffer is null");
  if (text.size() + 1 > outSize)
    return fail(ATTNC_ERROR_BUFFER_TOO_SMALL, std::string(what) + " needs " +
                                                  std::to_string(text.size() + 1) +
                                                  " bytes, the buffer has " +
                                                  std::to_string(outSize));
  std::memcpy(out, text.c_str(), text.size() + 1);
  return ok();
}

/// A caller's size-prefixed struct (attnc_args, attnc_call), however long
/// its version is: fields past in->size read as 0, and a later version's
/// fields past this attnc's struct must be 0 (a request this attnc cannot
/// honour is refused, not dropped). `least`: the bytes every version has;
/// `older`: the size of the one earlier version (a size between it and this
/// version's ends inside a field, and would read half of it).
template <typename T>
bool readSized(const T *in, size_t least, size_t older, const char *name, const char *type,
               T &out, std::string &error) {
  if (!in) {
    error = std::string(name) + " is a null pointer";
    return false;
  }
  const size_t size = in->size;
  if (size < least || size > (1u << 16)) {
    error = std::string(name) + "->size = " + std::to_string(size) + " is not the size of an " +
            type + " (set it to sizeof(" + type + "))";
    return false;
  }
  if (size != older && size < sizeof(T)) {
    error = std::string(name) + "->size = " + std::to_string(size) + " ends inside a field of " +
            type + " (set it to sizeof(" + type + "))";
    return false;
  }
  const auto *bytes = reinterpret_cast<const unsigned char *>(in);
  for (size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0) {
      error = std::string(name) + "->size = " + std::to_string(size) + ", and byte " +
              std::to_string(i) + " is not 0: it lies past the " + std::to_string(sizeof(T)) +
              " bytes of an " + type + " this attnc (ABI version " +
              std::to_string(ATTNC_ABI_VERSION) +
              ") knows, in a field of a later version that it cannot honour (leave that "
              "field 0, or use a later attnc)";
      return false;
    }
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, in, std::min(size, sizeof out));
  return true;
}

/// The caller's attnc_args as the runtime's AttentionArgs.
bool readArgs(const attnc_args *in, AttentionArgs &out, std::string &error) {
  // The two sizes there have been (before the paged strides of ABI version
  // 4, and now) or a later, larger one.
  attnc_args a;
  if (!readSized(in, offsetof(attnc_args, q) + sizeof(uint64_t),
                 offsetof(attnc_args, kv_page_stride), "args", "attnc_args", a, error))
    return false;
  out.q = a.q;
  out.k = a.k;
  out.v = a.v;
  out.o = a.o;
  out.lse = a.lse;
  out.cu_seqlens_q = a.cu_seqlens_q;
  out.cu_seqlens_k = a.cu_seqlens_k;
  out.seq_lens_k = a.seq_lens_k;
  out.block_table = a.block_table;
  out.workspace = a.workspace;
  out.workspace_bytes = a.workspace_bytes;
  out.batch = a.batch;
  out.num_q_heads = a.num_q_heads;
  out.num_kv_heads = a.num_kv_heads;
  out.num_splits = a.num_splits;
  out.total_q = a.total_q;
  out.total_kv = a.total_kv;
  out.num_pages = a.num_pages;
  out.block_table_stride = a.block_table_stride;
  out.max_q_len = a.max_q_len;
  out.max_kv_len = a.max_kv_len;
  out.scale = a.scale;
  out.kv_page_stride = a.kv_page_stride;
  out.kv_token_stride = a.kv_token_stride;
  out.kv_head_stride = a.kv_head_stride;
  return true;
}

/// A spec's text with the GPU's target added when it names none (an empty
/// spec: the defaults on that target).
std::string withTarget(const std::string &spec, const std::string &target) {
  if (spec.find("target") != std::string::npos)
    return spec;
  return (spec.find_first_not_of(' ') == std::string::npos ? "" : spec + ",") + "target=" + target;
}

template <typename F>
attnc_status guarded(F body) {
  try {
    return body();
  } catch (const std::exception &e) {
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "internal error");
  }
}

/// The kernel calls' shared prologue: a kernel handle and readable args,
/// then `body` with the C++ arguments.
template <typename F>
attnc_status withArgs(const attnc_kernel *kernel, const attnc_args *args, F body) {
  return guarded([&] {
    if (!kernel)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "kernel is a null pointer");
    AttentionArgs a;
    std::string error;
    if (!readArgs(args, a, error))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    return body(a);
  });
}

} // namespace

extern "C" {

const char *attnc_version(void) { return "attnc " ATTNC_VERSION; }

int attnc_abi_version(void) { return ATTNC_ABI_VERSION; }

// (The calling thread's message is kept by the runtime, which defines
// attnc_bundle_register: attnc/Bundle.h.)
const char *attnc_last_error(void) { return cApiLastError().c_str(); }

attnc_status attnc_spec_canonical(const char *spec, char *out, size_t outSize) {
  return guarded([&] {
    if (!spec)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "spec is a null pointer");
    // The same defaults as the other calls that make specs: the tuning table's.
    TuningTable::installDefault();
    SpecResult parsed = parseSpec(spec);
    if (!parsed)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, parsed.error->message());
    return copyOut(parsed.spec->str(), out, outSize, "the canonical spec");
  });
}

attnc_status attnc_attention_spec(const attnc_call *call, const char *target, char *out,
                                  size_t outSize) {
  return guarded([&] {
    attnc_call c;
    std::string error;
    // The two sizes there have been (before tile_q and tile_kv, and now) or a
    // later, larger one.
    if (!readSized(call, offsetof(attnc_call, tile_q), offsetof(attnc_call, tile_q), "call",
                   "attnc_call", c, error))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    if (!target || !*target)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  "target is needed (attnc_runtime_arch gives the GPU's)");
    // A target name alone: "sm_90a,tile_q=128" would be parsed as a spec and
    // its other fields dropped.
    if (std::strpbrk(target, ",= \t\n\v\f\r") != nullptr)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("target = '") + target +
                                                    "': expected sm_80 or sm_90a alone");
    auto notATarget = [&] {
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  std::string("target = '") + target +
                      "': expected a GPU architecture from sm_80 on (sm_80, sm_86, sm_89, "
                      "sm_90a, sm_100, ...: sm_9x takes sm_90a's kernels, the others sm_80's)");
    };
    // A GPU's architecture (attnc_runtime_arch: sm_86, sm_89, ...) names the
    // target its kernels are built for, as attn::Runtime::target does
    // (gpuTarget).
    std::string targetName = target;
    if (std::strncmp(target, "sm_", 3) == 0) {
      const char *digits = target + 3, *end = digits;
      while (*end >= '0' && *end <= '9' && end - digits < 4)
        ++end;
      // A compute capability as its major and minor digits: 80..99 or
      // 100..199 (sm_100, sm_120, ...), so no leading zero ("sm_0800") and
      // no name of a GPU there is not ("sm_900"). The "a" of an
      // architecture's own features came with sm_90a: "sm_80a" is no name;
      // the "f" of a family's (sm_100f, sm_120f) with sm_100.
      const int cc = std::atoi(std::string(digits, end).c_str());
      const bool number = (end - digits == 2 && cc >= 80) ||
                          (end - digits == 3 && cc >= 100 && cc < 200);
      const bool suffix = *end == '\0' || (*end == 'a' && end[1] == '\0' && cc >= 90) ||
                          (*end == 'f' && end[1] == '\0' && cc >= 100);
      if (!number || !suffix)
        return notATarget();
      targetName = name(gpuTarget(cc / 10));
    }
    SpecResult where = parseSpec("target=" + targetName);
    if (!where)
      return notATarget();
    if (!where.spec->isGPU()) // the calls' tensors are bf16 or f16, which the CPU does not take
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  "target = cpu: attention calls take GPU kernels (sm_80 or sm_90a); a CPU "
                  "spec comes from attnc_spec_canonical");
    for (auto [name, value, zero] : {std::tuple<const char *, int64_t, const char *>{
                                         "max_q_len", c.max_q_len, "an empty step, as prefill"},
                                     {"window", c.window, "no window"},
                                     {"split_kv", c.split_kv, "auto"},
                                     {"tile_q", c.tile_q, "the default"},
                                     {"tile_kv", c.tile_kv, "the default"}})
      if (value < 0)
        return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("call->") + name + " = " +
                                                      std::to_string(value) +
                                                      ": must not be negative (0: " + zero + ")");
    if (!c.dtype)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  "call->dtype is NULL: the kernels take \"bf16\" or \"f16\"");
    const std::string dtype = c.dtype;
    if (dtype != "bf16" && dtype != "f16")
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  "call->dtype = '" + dtype + "': the kernels take bf16 or f16");
    if (c.decode < -1 || c.decode > 1)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "call->decode = " + std::to_string(c.decode) +
                                                    ": -1 (attnc's choice), 0 or 1");
    AttentionShape shape;
    shape.dtype = dtype == "bf16" ? DType::BF16 : DType::F16;
    shape.head_dim = c.head_dim;
    shape.num_q_heads = c.num_q_heads;
    shape.num_kv_heads = c.num_kv_heads;
    shape.page_size = c.page_size;
    shape.max_q_len = c.max_q_len;
    shape.causal = c.causal != 0;
    shape.return_lse = c.return_lse != 0;
    shape.window = c.window;
    if (c.decode >= 0)
      shape.decode = c.decode == 1;
    if (c.split_kv > 0)
      shape.split_kv = c.split_kv;
    shape.tile_q = c.tile_q;
    shape.tile_kv = c.tile_kv;
    // The tiles `attnc tune` recorded are the defaults here as in the runtime.
    TuningTable::installDefault();
    std::optional<Spec> spec = attentionSpec(shape, where.spec->target, error);
    if (!spec)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    return copyOut(spec->str(), out, outSize, "the spec");
  });
}

attnc_status attnc_bundle_load(const char *dir, int64_t *kernels) {
  return guarded([&] {
    if (kernels)
      *kernels = 0;
    if (!dir)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "dir is a null pointer");
    LoadedBundle loaded;
    std::string error;
    if (!loadBundleFolder(dir, loaded, error))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    if (kernels)
      *kernels = static_cast<int64_t>(loaded.kernels);
    return ok();
  });
}

attnc_status attnc_runtime_create(const char *cacheDir, attnc_runtime **out) {
  return guarded([&] {
    if (!out)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "out is a null pointer");
    *out = nullptr;
    std::string error;
    // Tile sizes `attnc tune` recorded become the defaults of their specs; a
    // table that cannot be read leaves the built-in defaults.
    TuningTable::installDefault();
    std::unique_ptr<Runtime> rt = Runtime::create(error, cacheDir ? cacheDir : "");
    if (!rt)
      return fail(ATTNC_ERROR_NO_GPU, error);
    *out = new attnc_runtime{std::move(rt)};
    return ok();
  });
}

void attnc_runtime_destroy(attnc_runtime *runtime) { delete runtime; }

attnc_status attnc_runtime_set_aot_only(attnc_runtime *runtime, int aotOnly) {
  return guarded([&] {
    if (!runtime)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "runtime is a null pointer");
    runtime->runtime->setAotOnly(aotOnly != 0);
    return ok();
  });
}

attnc_status attnc_runtime_arch(const attnc_runtime *runtime, char *out, size_t outSize) {
  return guarded([&] {
    if (!runtime)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "runtime is a null pointer");
    return copyOut(runtime->runtime->arch(), out, outSize, "the architecture");
  });
}

attnc_status attnc_kernel_get(attnc_runtime *runtime, const char *spec, attnc_kernel **out) {
  return guarded([&] {
    if (out)
      *out = nullptr; // NULL on every failure
    if (!runtime || !spec || !out)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  std::string(!runtime ? "runtime" : !spec ? "spec" : "out") + " is a null pointer");
    SpecResult parsed = parseSpec(withTarget(spec, name(runtime->runtime->target())));
    if (!parsed)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, parsed.error->message());
    KernelLookup found = runtime->runtime->kernel(*parsed.spec);
    if (!found)
      return fail(lookupStatus(found), found.error);
    *out = new attnc_kernel{found.kernel, sourceName(found.source)};
    return ok();
  });
}

void attnc_kernel_release(attnc_kernel *kernel) { delete kernel; }

attnc_status attnc_runtime_prepare(attnc_runtime *runtime, const char *const *specs, size_t count,
                                   unsigned threads, attnc_kernel **out) {
  return guarded([&] {
    // A count no call means (an n - 1 of 0, say) is refused before out is
    // written: clearing that many pointers would write past any array.
    if (count > ATTNC_PREPARE_MAX)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  "count = " + std::to_string(count) + " specs: more than one call prepares (" +
                      std::to_string(ATTNC_PREPARE_MAX) + "; a wrong count?)");
    // Every out[i] is null on failure, as the header says: cleared first.
    if (out)
      std::fill(out, out + count, nullptr);
    if (!runtime || (count && (!specs || !out)))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  std::string(!runtime ? "runtime" : !specs ? "specs" : "out") +
                      " is a null pointer");
    std::vector<Spec> parsed;
    for (size_t i = 0; i < count; ++i) {
      if (!specs[i])
        return fail(ATTNC_ERROR_INVALID_ARGUMENT, "specs[" + std::to_string(i) + "] is a null pointer");
      SpecResult r = parseSpec(withTarget(specs[i], name(runtime->runtime->target())));
      if (!r)
        return fail(ATTNC_ERROR_INVALID_ARGUMENT, "specs[" + std::to_string(i) + "]: " +
                                                      r.error->message());
      parsed.push_back(*r.spec);
    }
    std::vector<KernelLookup> found = runtime->runtime->prepare(parsed, threads);
    for (size_t i = 0; i < count; ++i)
      if (!found[i])
        return fail(lookupStatus(found[i]), parsed[i].str() + ": " + found[i].error);
    for (size_t i = 0; i < count; ++i)
      out[i] = new attnc_kernel{found[i].kernel, sourceName(found[i].source)};
    return ok();
  });
}

attnc_status attnc_kernel_source(const attnc_kernel *kernel, char *out, size_t outSize) {
  return guarded([&] {
    if (!kernel)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "kernel is a null pointer");
    return copyOut(kernel->source, out, outSize, "the kernel's source");
  });
}

attnc_status attnc_kernel_spec(const attnc_kernel *kernel, char *out, size_t outSize) {
  return guarded([&] {
    if (!kernel)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "kernel is a null pointer");
    return copyOut(kernel->kernel->spec().str(), out, outSize, "the kernel's spec");
  });
}

attnc_status attnc_kernel_workspace_bytes(const attnc_kernel *kernel, const attnc_args *args,
                                          uint64_t *bytes) {
  return withArgs(kernel, args, [&](const AttentionArgs &a) {
    if (!bytes)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "bytes is a null pointer");
    // Only sizes a launch would take have a workspace size (that of nonsense
    // ones could wrap, or mean nothing); the device pointers need not exist yet.
    if (std::string bad = kernel->kernel->checkSizes(a); !bad.empty())
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, bad);
    *bytes = kernel->kernel->workspaceBytes(a);
    return ok();
  });
}

attnc_status attnc_launch(const attnc_kernel *kernel, const attnc_args *args, void *stream) {
  return withArgs(kernel, args, [&](const AttentionArgs &a) {
    std::string error;
    if (!kernel->kernel->launch(a, static_cast<CUstream>(stream), error))
      // Argument checks come first and launch nothing; a driver failure
      // reads "... failed: <driver message>".
      return fail(error.find(" failed: ") != std::string::npos ? ATTNC_ERROR_LAUNCH
                                                            : ATTNC_ERROR_INVALID_ARGUMENT,
                  error);
    return ok();
  });
}

attnc_status attnc_check_arguments(const attnc_kernel *kernel, const attnc_args *args,
                                   void *stream) {
  return withArgs(kernel, args, [&](const AttentionArgs &a) {
    const std::string error =
        kernel->kernel->checkDeviceArguments(a, static_cast<CUstream>(stream));
    return error.empty() ? ok() : fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
  });
}

attnc_status attnc_pages_window(int64_t pageBytes, uint64_t address, int64_t *pagesPerWindow,
                                int64_t *firstWindowPages) {
  return guarded([&] {
    if (!pagesPerWindow || !firstWindowPages)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "pages_per_window or first_window_pages is a "
                                                "null pointer");
    std::string error;
    if (!PageAllocator::windowFor(pageBytes, address, *pagesPerWindow, *firstWindowPages, error))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    return ok();
  });
}

attnc_status attnc_pages_create(int64_t numPages, int64_t pagesPerWindow,
                                int64_t firstWindowPages, attnc_pages **out) {
  return guarded([&] {
    if (!out)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "out is a null pointer");
    *out = nullptr;
    std::string error;
    auto allocator = PageAllocator::create(numPages, pagesPerWindow, firstWindowPages, error);
    if (!allocator)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    *out = new attnc_pages{std::move(allocator)};
    return ok();
  });
}

void attnc_pages_destroy(attnc_pages *pages) { delete pages; }

attnc_status attnc_pages_allocate(attnc_pages *pages, uint64_t sequence, int64_t count,
                                  int32_t *outPages) {
  return guarded([&] {
    if (!pages)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "pages is a null pointer");
    std::string error;
    if (!pages->allocator->allocate(sequence, count, outPages, error))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    return ok();
  });
}

attnc_status attnc_pages_release(attnc_pages *pages, uint64_t sequence) {
  return guarded([&] {
    if (!pages)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "pages is a null pointer");
    std::string error;
    if (!pages->allocator->release(sequence, error))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, error);
    return ok();
  });
}

attnc_status attnc_pages_free_count(const attnc_pages *pages, int64_t *out) {
  return guarded([&] {
    if (!pages || !out)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "pages or out is a null pointer");
    *out = pages->allocator->freePages();
    return ok();
  });
}

attnc_status attnc_pages_windows(const attnc_pages *pages, uint64_t sequence, int64_t *out) {
  return guarded([&] {
    if (!pages || !out)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "pages or out is a null pointer");
    *out = pages->allocator->windowsOf(sequence);
    return ok();
  });
}

} // extern "C"
