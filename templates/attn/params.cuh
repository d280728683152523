//===- params.cuh - A kernel's run-time arguments ---------------*- CUDA -*-===//
//
// Everything the spec leaves to run time, in one struct passed by value to
// every kernel; the host runtime fills the same struct (this header is plain
// C++ too). Pointers travel as 64-bit integers so the layout is the same on
// both sides. Layouts (elements, row-major):
//   q, o     [total_q, num_q_heads, head_dim]; sequence b is rows
//            cu_seqlens_q[b] .. cu_seqlens_q[b + 1]; query head h reads KV
//            head h / (num_q_heads / num_kv_heads) (GQA)
//   k, v     contiguous: [total_kv, num_kv_heads, head_dim], rows cu_seqlens_k[b]..
//            paged: pages of page_size tokens, sequence b's pages in
//            block_table[b * block_table_stride ...], its length seq_lens_k[b]; the
//            row of KV head h of the token in place s of page p at p * kv_page_stride
//            + s * kv_token_stride + h * kv_head_stride (the runtime fills the
//            strides of [num_pages, page_size, num_kv_heads, head_dim] by default)
//   lse      [total_q, num_q_heads] fp32, natural log
//   workspace  split-KV decode with num_splits > 1: partial outputs
//            [num_splits, total_q, num_q_heads, head_dim] fp32, then partial lse
//            [num_splits, total_q, num_q_heads] fp32
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_PARAMS_CUH
#define ATTN_TEMPLATES_PARAMS_CUH

namespace attn {
namespace kernel {

struct Params {
  unsigned long long q, k, v, o, lse;            ///< device pointers
  unsigned long long cu_seqlens_q;               ///< int32 [batch + 1]
  unsigned long long cu_seqlens_k;               ///< int32 [batch + 1] (contiguous KV)
  unsigned long long seq_lens_k;                 ///< int32 [batch] (paged KV)
  unsigned long long block_table;                ///< int32 [batch, block_table_stride]
  unsigned long long workspace;                  ///< fp32, split-KV decode only
  long long block_table_stride, num_pages;
  int batch, num_q_heads, num_kv_heads;
  int num_splits;                                ///< decode: KV splits per sequence (>= 1)
  float scale_log2;                              ///< softmax scale * log2(e)
  long long kv_page_stride, kv_token_stride, kv_head_stride; ///< paged: elements (k and v alike)
};

/// How an emitted kernel is launched (the emitter fills it; AOT bundles
/// store it). Prefill: grid (ceil(max q_len / tile_q), num_q_heads, batch).
/// Decode: grid (num_splits, num_kv_heads, batch); with num_splits > 1 the
/// "<name>_merge" kernel follows on grid (max q_len, num_q_heads, batch)
/// with merge_threads threads, unless cluster_merge: then (sm_90a) the
/// runtime may launch the splits of each (sequence, KV head) as one
/// thread-block cluster that merges them itself (decode_store_rows); with
/// pair_shared_bytes > 0 there is also "<name>_pair": 2 * threads threads
/// and pair_shared_bytes of shared memory, two splits as the two pipelines
/// of one block, grid (num_splits / 2, num_kv_heads, batch). The runtime
/// launches it instead of clusters of two splits, and for four splits as
/// clusters of its two blocks (Kernel::pairsSplits). It is a module of its
/// own: the source holds it under #ifdef kPairProgramMacro and the other
/// kernels under #else, compiled as two NVRTC programs side by side
/// (compileCuda). Dynamic shared memory: shared_bytes.
struct LaunchShape {
  int threads = 0;
  int shared_bytes = 0;
  int tile_q = 0;
  bool decode = false;
  int merge_threads = 0;
  bool cluster_merge = false;
  int pair_shared_bytes = 0; ///< decode, sm_90a: "<name>_pair" runs two splits per block of 2 * threads
};

/// A decode block's merge scratch (DecodeScratch in decode.cuh), in floats,
/// for `warps` warps and head_dim `d`: each warp's 16 rows of d at the padded
/// stride decodeScratchStride(d) with (m, l) per row, the block's (m, l), a
/// cluster's weight per row and block (up to kDecodeClusterBlocks) and its
/// (m, l). The emitter sizes the pair kernel's shared memory by it too
/// (decodePairSharedBytes). Plain C++, evaluated at compile time on both sides.
#ifdef __CUDACC__
#define ATTN_CONSTEXPR_HD __host__ __device__ constexpr
#else
#define ATTN_CONSTEXPR_HD constexpr
#endif
constexpr int kDecodeClusterBlocks = 16; ///< a cluster's blocks at most (Kernel::mergesInCluster)
ATTN_CONSTEXPR_HD int decodeScratchStride(int d) { return d + (40 - d % 32) % 32; }
ATTN_CONSTEXPR_HD int decodeScratchFloats(int warps, int d) {
  return warps * 16 * (decodeScratchStride(d) + 2) + 16 * 2 + 16 * kDecodeClusterBlocks + 16 * 2;
}

/// Defined (-D) when a decode source is compiled for its "<name>_pair" kernel
/// alone, undefined for the others (LaunchShape::pair_shared_bytes > 0).
constexpr const char kPairProgramMacro[] = "ATTN_PAIR_PROGRAM";

/// Each module (the pair kernel's too) defines "<name>" + kLaunchShapeSuffix:
/// kLaunchShapeInts ints, the launch shape its kernels were emitted for
/// (threads, shared_bytes, merge_threads, cluster_merge, pair_shared_bytes),
/// so that a cubin says how it must be launched and a bundle's manifest line
/// or entry can be held to it.
constexpr const char kLaunchShapeSuffix[] = "_launch";
constexpr int kLaunchShapeInts = 5;

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_PARAMS_CUH
