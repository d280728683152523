/*===- attnc.h - The C API of attnc: a stable ABI over the runtime -*- C -*-===*
 *
 * Spec in, kernel out, launch on a stream: the C++ runtime (AOT bundles,
 * the kernel cache, the JIT: attn::Runtime, attn::Kernel) behind opaque handles and plain C types, for
 * other languages (the Python module in runtime/python calls it through
 * ctypes) and for applications that must not depend on a C++ ABI.
 *
 * ABI rules: functions are only added, never changed; attnc_args starts
 * with its own size, so a caller built against an older header passes a
 * shorter struct and new fields read as 0. Every function that can fail
 * returns an attnc_status (the version queries, attnc_last_error and the
 * destroy/release functions cannot); on failure attnc_last_error() gives
 * a line naming the problem (thread-local, valid until the thread's next
 * attnc call; a kernel NVRTC could not compile adds the compiler's log on
 * the lines after it).
 * A call that fails its checks launches nothing. The one exception is a
 * split-KV decode whose merge kernel fails to launch after its main kernel
 * did: ATTNC_ERROR_LAUNCH, with the main kernel enqueued and the output
 * not written (a launch failure usually means the context is unusable).
 *
 * Device memory is given as CUdeviceptr values (uint64_t); layouts are the
 * packed ones of templates/attn/params.cuh: q and o [total_q, num_q_heads,
 * head_dim], contiguous k and v [total_kv, num_kv_heads, head_dim], paged k
 * and v [num_pages, page_size, num_kv_heads, head_dim] unless the args give
 * other strides (kv_page_stride...), lse fp32 [total_q, num_q_heads]. Query
 * head h reads KV head h / (num_q_heads / num_kv_heads) (GQA).
 *
 *===----------------------------------------------------------------------===*/

#ifndef ATTNC_ATTNC_H
#define ATTNC_ATTNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ATTNC_API __attribute__((visibility("default")))
#else
#define ATTNC_API
#endif

/** The ABI version: raised only when functions or fields are added. */
#define ATTNC_ABI_VERSION 6

typedef enum attnc_status {
  ATTNC_OK = 0,
  ATTNC_ERROR_INVALID_ARGUMENT = 1, /**< a bad spec (or one this GPU cannot run: target cpu,
                                         sm_90a on another GPU), null handle or launch argument,
                                         or a bundle folder that does not load */
  ATTNC_ERROR_NO_GPU = 2,           /**< no CUDA driver or device */
  ATTNC_ERROR_COMPILE = 3,          /**< the pipeline, the emitter or NVRTC failed */
  ATTNC_ERROR_LAUNCH = 4,           /**< the driver refused the launch */
  ATTNC_ERROR_BUFFER_TOO_SMALL = 5, /**< an output string did not fit (ATTNC_STRING_MAX
                                         always does) */
  ATTNC_ERROR_NOT_BUNDLED = 6       /**< AOT-only mode, and no AOT bundle holds the spec
                                         (added in ABI version 5) */
} attnc_status;

/** A buffer of this many bytes holds every string the functions below write
 *  (a canonical spec, an architecture, a kernel's source), with its NUL: the
 *  longest canonical spec is under 200 bytes. */
#define ATTNC_STRING_MAX 512

typedef struct attnc_runtime attnc_runtime;
typedef struct attnc_kernel attnc_kernel;
typedef struct attnc_pages attnc_pages;

/** One launch's device memory and sizes (see attn::AttentionArgs). */
typedef struct attnc_args {
  uint32_t size; /**< sizeof(attnc_args) as the caller knows it (a later, larger
                      version's: its fields past this struct must be 0) */
  uint64_t q, k, v, o;
  uint64_t lse;          /**< fp32 [total_q, num_q_heads]; return_lse specs only */
  uint64_t cu_seqlens_q; /**< int32 [batch + 1] */
  uint64_t cu_seqlens_k; /**< int32 [batch + 1]; contiguous KV */
  uint64_t seq_lens_k;   /**< int32 [batch]; paged KV */
  uint64_t block_table;  /**< int32 [batch, block_table_stride]; paged KV */
  uint64_t workspace;    /**< split-KV decode: attnc_kernel_workspace_bytes bytes */
  uint64_t workspace_bytes;
  int32_t batch, num_q_heads, num_kv_heads;
  int32_t num_splits; /**< decode: 0 = the spec's split_kv */
  int64_t total_q, total_kv, num_pages, block_table_stride;
  int64_t max_q_len, max_kv_len;
  double scale; /**< 0: 1 / sqrt(head_dim) */
  /** Paged k and v: the row of KV head h of the token in place s of page p
   *  at p * kv_page_stride + s * kv_token_stride + h * kv_head_stride
   *  elements; 0 takes the packed layout's stride. Multiples of 8. Added in
   *  ABI version 4. */
  int64_t kv_page_stride, kv_token_stride, kv_head_stride;
} attnc_args;

/** What attnc_attention_spec derives a spec from (see attn::AttentionShape):
 *  the tensors' description, no device memory. Starts with its size, like
 *  attnc_args. Added in ABI version 2. */
typedef struct attnc_call {
  uint32_t size;          /**< sizeof(attnc_call) as the caller knows it (a later,
                               larger version's: its fields past this struct must be 0) */
  const char *dtype;      /**< "bf16" or "f16" */
  int64_t head_dim;
  int64_t num_q_heads, num_kv_heads;
  int64_t page_size;      /**< 0: contiguous k and v */
  int64_t max_q_len;      /**< the longest sequence's query tokens */
  int32_t causal;         /**< nonzero: causal mask (aligned at the bottom right) */
  int32_t return_lse;     /**< nonzero: the kernel writes lse */
  int64_t window;         /**< > 0: a causal sliding window of this many keys */
  int32_t decode;         /**< -1: attnc's choice, 0: prefill, 1: decode kernels */
  int32_t split_kv;       /**< decode: 0 = auto, else the number of splits (a call that
                               takes a prefill kernel refuses a number, except an empty
                               step, max_q_len = 0 with decode = -1 and no tile_q: it
                               launches nothing, and its prefill spec keeps no count) */
  int64_t tile_q, tile_kv; /**< 0: the defaults (tile_q is prefill's: a call that gives
                                it takes the prefill kernels unless decode = 1) */
} attnc_call;

/** "attnc X.Y.Z". */
ATTNC_API const char *attnc_version(void);
ATTNC_API int attnc_abi_version(void);
/** The calling thread's last error, "" after a success. */
ATTNC_API const char *attnc_last_error(void);

/** Checks a spec (`field=value,...`) and writes its canonical form. */
ATTNC_API attnc_status attnc_spec_canonical(const char *spec, char *out, size_t out_size);

/** The canonical spec of the kernel that attention over such tensors takes
 *  on `target` ("sm_90a", "sm_80", or a GPU's architecture as
 *  attnc_runtime_arch gives it: sm_9x takes sm_90a, any other from sm_80
 *  takes sm_80): the same rules as the C++ attn::attention (decode kernels, over
 *  a paged or a contiguous cache, for 1..16 query tokens and max_q_len x gqa <= 128,
 *  unless call->decode says, or the call gives tile_q (prefill tiles) or a tile_kv
 *  the decode block cannot hold; decode = 1 takes tile_q = max_q_len; on sm_90a
 *  a head_dim 64 prefill from 4096 query rows, with no mask or a causal one,
 *  takes 192 x 128 tiles in the warp-specialised block: see
 *  attn::longPrefillTiles). Needs no GPU. Added in ABI version 2. */
ATTNC_API attnc_status attnc_attention_spec(const attnc_call *call, const char *target, char *out,
                                            size_t out_size);

/** AOT bundles at run time: registers the kernels of a bundle folder that
 *  `attnc aot` wrote (its manifest.txt and the cubins it lists; bundle.cpp
 *  is not read) for every runtime of the process, each cubin checked
 *  against the manifest's size and checksum and for the kernels its spec
 *  names. All or nothing: a folder that is not a bundle, a missing or
 *  corrupted cubin, one built for another spec, a bundle built by an attnc
 *  whose kernels take other arguments, or a bundle name already registered
 *  with another manifest (linked in, loaded from another folder, or this
 *  folder rebuilt since) is ATTNC_ERROR_INVALID_ARGUMENT and registers
 *  nothing. Loading the same bundle again (this folder, a copy, the folder
 *  renamed, its manifest's lines in another order, or the folder of a bundle
 *  linked into the program, whose kernels it holds byte for byte) succeeds
 *  and registers nothing new. A kernel another bundle
 *  registered first keeps serving. *kernels (may be NULL) receives the
 *  number of kernels the folder holds, all architectures counted. Needs no
 *  GPU. Added in ABI version 5. */
ATTNC_API attnc_status attnc_bundle_load(const char *dir, int64_t *kernels);

/** One kernel of an AOT bundle compiled into the program: `attnc aot` writes
 *  a table of these into the bundle folder's bundle.cpp, one per line of its
 *  manifest.txt, whose columns the fields are. Plain data. Added in ABI
 *  version 6. */
typedef struct attnc_bundle_entry {
  const char *spec;           /**< canonical spec, whose target is `arch` */
  const char *arch;           /**< what the cubin was built for: "sm_80", "sm_90a", ... */
  const unsigned char *cubin; /**< the kernel's module */
  size_t cubin_size;
  int threads, shared_bytes, merge_threads; /**< the launch shape */
  int cluster_merge;                        /**< 1: the split merge runs as a cluster */
  int pair_shared_bytes;                    /**< the pair kernel's (0: none) */
  const unsigned char *pair_cubin;          /**< the pair kernel's module, or NULL */
  size_t pair_cubin_size;
  size_t params_bytes; /**< the size of the kernels' arguments where they were built */
} attnc_bundle_entry;

/** Registers the kernels of a bundle compiled into the program, for every
 *  runtime of the process: bundle.cpp calls it at start-up, so that a
 *  program linked with libattnc.so (or a build tree's C++ runtime, which
 *  defines it too: a program takes attnc one way, not both) launches them
 *  with no NVRTC compile. `entries` must live until the process ends.
 *  `entry_bytes` is sizeof(attnc_bundle_entry) where the table was compiled,
 *  and must be this header's: a table of another layout is refused unread
 *  (unlike attnc_args and attnc_call, this struct is not extended by size).
 *  The same checks as attnc_bundle_load (each entry's spec canonical and of
 *  its architecture's target, each cubin defining its spec's kernels, built
 *  for this attnc's kernel arguments), all or nothing; a name (not empty, no
 *  control character: shown escaped in messages) registered before, linked in or loaded, is refused too, unless that
 *  bundle holds the same kernels byte for byte, in any order: the same bundle again (its
 *  bundle.cpp in two libraries of the program) registers nothing new. A refused
 *  bundle is ATTNC_ERROR_INVALID_ARGUMENT, and its reason is said on stderr
 *  ("attnc: warning: bundle NAME: ...", since bundle.cpp's call at start-up
 *  has no caller to tell) and in the error of every spec that AOT-only mode
 *  then finds in no bundle. Needs no GPU. Added in ABI version 6. */
ATTNC_API attnc_status attnc_bundle_register(const char *name, const attnc_bundle_entry *entries,
                                             size_t count, size_t entry_bytes);

/** Binds to the calling thread's current CUDA context (device 0's primary
 *  context when none is current). cache_dir NULL or "": the default. */
ATTNC_API attnc_status attnc_runtime_create(const char *cache_dir, attnc_runtime **out);
ATTNC_API void attnc_runtime_destroy(attnc_runtime *runtime);
/** The GPU's architecture ("sm_90a", "sm_80", "sm_86", ...) into `out`. */
ATTNC_API attnc_status attnc_runtime_arch(const attnc_runtime *runtime, char *out, size_t out_size);

/** AOT only (aot_only nonzero): a spec no AOT bundle holds is
 *  ATTNC_ERROR_NOT_BUNDLED instead of a JIT compile; kernels already got
 *  stay usable. A spec on tiles attnc would choose for it (a tuning
 *  table's, or a long head_dim 64 prefill's 192 x 128), whoever gave them,
 *  is served by the kernel of the default tiles (bundled, or got before)
 *  where no bundle holds its own (attnc_kernel_spec says which). Added in
 *  ABI version 5. */
ATTNC_API attnc_status attnc_runtime_set_aot_only(attnc_runtime *runtime, int aot_only);

/** The kernel of a spec: from an AOT bundle (linked into the process, or
 *  loaded by attnc_bundle_load) built for this GPU, else memory, the disk
 *  cache or NVRTC. A spec without a target gets the GPU's. The kernel stays valid until released (the runtime keeps
 *  its own reference while it lives); *out is NULL on failure. */
ATTNC_API attnc_status attnc_kernel_get(attnc_runtime *runtime, const char *spec,
                                        attnc_kernel **out);
ATTNC_API void attnc_kernel_release(attnc_kernel *kernel);
/** JIT at model load: the kernels of `count` specs, those not yet loaded
 *  compiled in parallel on `threads` threads (0: one per hardware thread).
 *  out[i] receives spec i's kernel (release each); on failure every out[i]
 *  is NULL and the error names the first spec that failed. A count over
 *  ATTNC_PREPARE_MAX (a wrong count: no model has that many kernels) is
 *  refused before out is touched. */
#define ATTNC_PREPARE_MAX ((size_t)1 << 20)
ATTNC_API attnc_status attnc_runtime_prepare(attnc_runtime *runtime, const char *const *specs,
                                             size_t count, unsigned threads,
                                             attnc_kernel **out);
/** Where the kernel came from when it was got: "bundle" (an AOT bundle),
 *  "memory" (got before), "disk" (the disk cache) or "compiled" (NVRTC).
 *  Added in ABI version 5. */
ATTNC_API attnc_status attnc_kernel_source(const attnc_kernel *kernel, char *out, size_t out_size);
/** The kernel's canonical spec. For a GPU decode spec it may differ from the
 *  spec asked for in tile_q: one decode kernel, whose code is the same for
 *  every tile_q, serves every query-token count (from a bundle, or compiled
 *  once as the tile_q = 1 spec's). */
ATTNC_API attnc_status attnc_kernel_spec(const attnc_kernel *kernel, char *out, size_t out_size);
/** Bytes of workspace a launch with these arguments needs (0: none). Reads
 *  the sizes alone (batch, heads, total_q, total_kv, max_q_len, max_kv_len,
 *  num_splits), so it may be asked before the device pointers exist, and
 *  refuses those a launch would refuse; the other arguments (pointers, the
 *  paged cache's pages, table stride and strides, scale) are checked by the
 *  launch. */
ATTNC_API attnc_status attnc_kernel_workspace_bytes(const attnc_kernel *kernel,
                                                    const attnc_args *args, uint64_t *bytes);
/** Checks the arguments on the host, then enqueues on `stream` (a
 *  CUstream; NULL: the default stream). Never allocates or synchronises. */
ATTNC_API attnc_status attnc_launch(const attnc_kernel *kernel, const attnc_args *args,
                                    void *stream);
/** The opt-in checking mode: synchronises `stream`, reads the offsets,
 *  lengths and block table back and checks them. */
ATTNC_API attnc_status attnc_check_arguments(const attnc_kernel *kernel, const attnc_args *args,
                                             void *stream);

/* Page slots of a paged KV cache for a scheduler to give its sequences
 * (attn::PageAllocator): each sequence's pages fill windows of
 * `pages_per_window` consecutive slots (2 MiB of one of K and V, the GPU's
 * large page), which the decode kernels read faster than pages scattered
 * over the whole cache. Not thread-safe. Added in ABI version 3. */

/** The windows of a cache at `address` with `page_bytes` per page in one
 *  of the K and V buffers: pages per window and the first window's size. */
ATTNC_API attnc_status attnc_pages_window(int64_t page_bytes, uint64_t address,
                                          int64_t *pages_per_window,
                                          int64_t *first_window_pages);
/** An allocator of slots 0 .. num_pages - 1; first_window_pages 0 means a
 *  full first window. */
ATTNC_API attnc_status attnc_pages_create(int64_t num_pages, int64_t pages_per_window,
                                          int64_t first_window_pages, attnc_pages **out);
ATTNC_API void attnc_pages_destroy(attnc_pages *pages);
/** `count` more pages for `sequence`, written to out_pages (int32, the
 *  block-table row's next entries). All or nothing: when fewer are free the
 *  call fails and takes none. */
ATTNC_API attnc_status attnc_pages_allocate(attnc_pages *pages, uint64_t sequence,
                                            int64_t count, int32_t *out_pages);
/** Every page of `sequence` back to the free slots. */
ATTNC_API attnc_status attnc_pages_release(attnc_pages *pages, uint64_t sequence);
/** Free slots now. */
ATTNC_API attnc_status attnc_pages_free_count(const attnc_pages *pages, int64_t *out);
/** The windows `sequence`'s pages lie in (0 for one that holds none). */
ATTNC_API attnc_status attnc_pages_windows(const attnc_pages *pages, uint64_t sequence,
                                           int64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* ATTNC_ATTNC_H */
