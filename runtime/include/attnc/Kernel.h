//===- Kernel.h - A compiled kernel: argument checks and launches -*- C++ -*-===//
//
// A spec's kernel loaded into a CUDA context. `launch` checks the arguments
// on the host, then enqueues the kernel (and, for split-KV decode, the merge
// kernel) on the caller's stream: it allocates nothing and never
// synchronises, so launches can be captured in a CUDA graph. What only
// device memory can show (sequence offsets, block-table entries) is checked
// by `checkDeviceArguments`, an opt-in mode that copies those arrays back.
// Whatever a block table and the paged lengths hold, the kernel itself never
// reads outside the KV cache nor past a sequence's table row (attn/paged.cuh).
//
// Layouts are the packed ones of templates/attn/params.cuh.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_KERNEL_H
#define ATTNC_KERNEL_H

#include "attn/Spec.h"
#include "attn/params.cuh"
#include "attnc/Driver.h"

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attn {

/// One launch's device memory and sizes. Lengths are the host's knowledge
/// of the batch (as FlashAttention's max_seqlen arguments): the kernels read
/// the exact per-sequence lengths from device memory.
struct AttentionArgs {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0; ///< 16-byte aligned
  CUdeviceptr lse = 0;                    ///< fp32 [total_q, num_q_heads]; return_lse only
  CUdeviceptr cu_seqlens_q = 0;           ///< int32 [batch + 1]
  CUdeviceptr cu_seqlens_k = 0;           ///< int32 [batch + 1]; contiguous KV
  CUdeviceptr seq_lens_k = 0;             ///< int32 [batch]; paged KV
  CUdeviceptr block_table = 0;            ///< int32 [batch, block_table_stride]; paged KV
  CUdeviceptr workspace = 0;              ///< split-KV decode: workspaceBytes() bytes
  size_t workspace_bytes = 0;
  int batch = 0, num_q_heads = 0, num_kv_heads = 0;
  int64_t total_q = 0;                    ///< rows of q and o
  int64_t total_kv = 0;                   ///< contiguous: rows of k and v
  int64_t num_pages = 0;                  ///< paged: pages in the cache
  int64_t block_table_stride = 0;         ///< paged: entries per sequence in block_table
  int64_t max_q_len = 0, max_kv_len = 0;  ///< the longest sequence's lengths
  double scale = 0;                       ///< softmax scale; 0: 1 / sqrt(head_dim)
  int num_splits = 0;                     ///< decode: 0 = the spec's split_kv
  /// Paged: where the row of KV head h of the token in place s of page p
  /// lies, p * kv_page_stride + s * kv_token_stride + h * kv_head_stride
  /// elements from k (and from v: the two share a layout). 0 takes the
  /// stride of [num_pages, page_size, num_kv_heads, head_dim]: page_size *
  /// num_kv_heads * head_dim, num_kv_heads * head_dim, head_dim. Multiples of
  /// 8 elements (16 bytes); the page stride and page_size times the token
  /// stride below 2^31. The kernels read the rows of pages 0..num_pages - 1
  /// at these strides: the caller's allocation must hold them. So a
  /// cache laid out [num_pages, num_kv_heads, page_size, head_dim], or one
  /// pool of pages per KV head, or K and V pages side by side in one
  /// allocation, is read where it is.
  int64_t kv_page_stride = 0, kv_token_stride = 0, kv_head_stride = 0;
};

/// AttentionArgs' cache strides with the defaults filled in (all 0 for a
/// contiguous cache, whose layout is fixed).
struct KVStrides {
  int64_t page = 0, token = 0, head = 0;
};
KVStrides kvStrides(const Spec &spec, const AttentionArgs &args);

/// The number of KV splits a decode launch uses: args.num_splits when set,
/// else the spec's split_kv, else (split_kv = auto) the count that finishes
/// soonest by a model of the launch: blocks run in waves of
/// sm_count * blocks_per_sm, each block costs its share of the longest
/// sequence's KV tiles plus about one tile of fixed work (Q, the merge of
/// its warps, the partial write); a wave keeps HBM busy once every SM has a
/// block, so one with fewer blocks takes as long as one with sm_count, and
/// SMs holding a lone block stream kLoneBlockSlowdown slower
/// (kLoneBlockSlowdownOneTile with two stages); splits that go
/// through the merge kernel cost kMergeKernelTiles more, those that merge in
/// a thread-block cluster (`merges_in_cluster(splits)`, when given) nothing.
/// 1 for prefill.
int chooseSplits(const Spec &spec, const AttentionArgs &args, int sm_count, int blocks_per_sm,
                 const std::function<bool(int splits)> &merges_in_cluster = {});

/// chooseSplits' constants, fitted to 11 split counts (1 to 32) on ten
/// decode shapes from 1 to 128 sequences on the H200, at each pipeline depth
/// (tests/gpu/RESULTS.md, "split_kv = auto with HBM's saturation"). An SM
/// with a single block streams about 6 % slower than one with two while the
/// block keeps two or more tiles in flight (16 sequences of 16384 keys, 128
/// unsplit blocks: 5.8 % below 256 in clusters of two), and about 20 % with
/// one (two stages). The merge kernel costs about two tiles of one block's
/// KV loop: its launch and its pass over the partial results. With these,
/// the model took the fastest measured count, or one within 1 %, on all ten
/// shapes at two, three (the default) and four stages.
inline constexpr double kLoneBlockSlowdown = 0.06;
inline constexpr double kLoneBlockSlowdownOneTile = 0.2;
inline constexpr double kMergeKernelTiles = 2.0;

/// Bytes of workspace a launch with `splits` splits needs when they merge
/// through the merge kernel (0 for one split).
size_t workspaceBytes(const Spec &spec, const AttentionArgs &args, int splits);

/// The host-side checks of a launch: "" when the arguments fit the spec,
/// else one line naming the argument and the problem. Splits that merge in
/// a thread-block cluster or a block (`without_workspace`) need no workspace.
/// validateArgs makes every check; validateSizes only those of the sizes the
/// split count and the workspace depend on (batch, heads, totals, the longest
/// sequences, the splits): no pointer, no cache geometry, no workspace given.
std::string validateArgs(const Spec &spec, const AttentionArgs &args, int splits,
                         bool without_workspace = false);
std::string validateSizes(const Spec &spec, const AttentionArgs &args, int splits,
                          bool without_workspace = false);

/// The checks that need the contents of the index arrays (host copies):
/// offsets ascending and within total_q / total_kv, lengths within the
/// max_* given, every block-table entry a sequence uses inside the cache.
/// `cu_k` is empty for paged specs, `seq_lens` and `table` for contiguous ones.
std::string checkSequenceArrays(const Spec &spec, const AttentionArgs &args,
                                const std::vector<int32_t> &cu_q, const std::vector<int32_t> &cu_k,
                                const std::vector<int32_t> &seq_lens,
                                const std::vector<int32_t> &table);

/// The Params a launch passes (pointers, sizes, scale * log2 e).
kernel::Params makeParams(const Spec &spec, const AttentionArgs &args, int splits);

class Kernel {
public:
  /// Loads `cubin` (which holds the kernels named spec.symbol() and, for
  /// decode, spec.symbol() + "_merge") into the current context, and
  /// `pair_cubin`, the module of spec.symbol() + "_pair", where
  /// shape.pair_shared_bytes > 0 (CudaBinary::pairCubin; else unused; empty:
  /// `cubin` holds that kernel too, as in bundles generated before the pair
  /// kernel had a module of its own).
  static std::unique_ptr<Kernel> load(const Spec &spec, const std::vector<char> &cubin,
                                      const std::vector<char> &pair_cubin,
                                      const kernel::LaunchShape &shape, std::string &error);
  ~Kernel();
  Kernel(const Kernel &) = delete;
  Kernel &operator=(const Kernel &) = delete;

  const Spec &spec() const { return spec_; }
  const kernel::LaunchShape &shape() const { return shape_; }
  int splits(const AttentionArgs &args) const {
    return chooseSplits(spec_, args, smCount_, blocksPerSm_,
                        [&](int n) { return mergesInCluster(args, n); });
  }
  /// The workspace a launch with these arguments needs: none when its
  /// splits merge in clusters or in a block (mergesInCluster, pairsSplits).
  size_t workspaceBytes(const AttentionArgs &args) const {
    const int n = splits(args);
    return mergesWithoutWorkspace(args, n) ? 0 : attn::workspaceBytes(spec_, args, n);
  }
  /// validateSizes for this kernel's split count: what a workspace query
  /// checks, before the device pointers need exist.
  std::string checkSizes(const AttentionArgs &args) const {
    const int n = splits(args);
    return validateSizes(spec_, args, n, mergesWithoutWorkspace(args, n));
  }

  /// Whether a decode launch with these arguments merges its splits inside
  /// thread-block clusters (sm_90a, 2..8 splits, up to kMaxClusterSplits where
  /// the device takes non-portable cluster sizes and clusters of 8 would keep
  /// at most a quarter of its block slots busy, and all of the grid's clusters
  /// resident at once) rather than through the merge kernel.
  bool mergesInCluster(const AttentionArgs &args) const;
  /// How many clusters of `splits` blocks the device holds at once; 0 where
  /// the kernel does not merge in clusters or none fit.
  int maxActiveClusters(int splits) const;
  /// Whether a decode launch with these arguments runs its splits as the two
  /// pipelines of a block ("<name>_pair", LaunchShape::pair_shared_bytes): two
  /// splits in one block where they would otherwise merge in clusters of two;
  /// four as two such blocks in clusters of two, where clusters of four would
  /// not all be resident (they would go through the merge kernel) and these are.
  bool pairsSplits(const AttentionArgs &args) const;
  /// How many clusters of two pair blocks the device holds at once.
  int maxActivePairClusters() const;

  /// Checks the arguments, then enqueues the kernel(s) on `stream`. No
  /// allocation, no synchronisation. False with `error` set on bad
  /// arguments (nothing is launched) or a launch failure.
  bool launch(const AttentionArgs &args, CUstream stream, std::string &error) const;

  /// The opt-in checking mode: copies the index arrays back from the
  /// device (after synchronising `stream`) and checks them. "" when fine.
  std::string checkDeviceArguments(const AttentionArgs &args, CUstream stream) const;

private:
  Kernel() = default;
  /// mergesInCluster and pairsSplits for the split count the launch has
  /// already chosen.
  bool mergesInCluster(const AttentionArgs &args, int splits) const;
  bool pairsSplits(const AttentionArgs &args, int splits) const;
  /// Either: the splits merge with no workspace and no merge kernel.
  bool mergesWithoutWorkspace(const AttentionArgs &args, int splits) const {
    return mergesInCluster(args, splits) || pairsSplits(args, splits);
  }
  /// How many clusters of `blocks` blocks of `fn` the device holds at once,
  /// asked of the driver once and kept in `known` (the answer plus one; 0:
  /// not asked yet, or the question failed and is asked again).
  int activeClusters(std::atomic<int> &known, CUfunction fn, int blocks, int threads,
                     int shared_bytes) const;
  /// The largest cluster of splits: 8 is the portable cluster size; up to 16
  /// where the device allows non-portable sizes (sm_90a: the H100 and H200).
  static constexpr int kMaxPortableClusterSplits = 8, kMaxClusterSplits = 16;
  const CudaDriver *cu_ = nullptr;
  Spec spec_;
  kernel::LaunchShape shape_;
  CUmodule module_ = nullptr, pairModule_ = nullptr;
  CUfunction main_ = nullptr, merge_ = nullptr, pair_ = nullptr;
  int smCount_ = 1, blocksPerSm_ = 1;
  bool nonPortableClusters_ = false; ///< clusters of 9..kMaxClusterSplits splits allowed
  /// maxActiveClusters' answer per split count plus one; 0: not asked yet.
  mutable std::atomic<int> maxClusters_[kMaxClusterSplits + 1] = {};
  /// maxActivePairClusters' answer plus one; 0: not asked yet.
  mutable std::atomic<int> maxPairClusters_{0};
};

} // namespace attn

#endif // ATTNC_KERNEL_H
