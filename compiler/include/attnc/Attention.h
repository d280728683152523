//===- Attention.h - One call: tensors in, spec derived, kernel launched -*- C++ -*-===//
//
// Like PyTorch's scaled_dot_product_attention: the caller describes its
// tensors (device pointers, shapes, dtypes) and the mask; attnc derives the
// spec from them (head_dim, dtype, GQA ratio, paging, lse, prefill or
// decode), gets the kernel (an AOT bundle, the cache or the JIT) and
// launches it on the caller's stream.
//
//   attn::AttentionCall c;
//   c.q = {q_ptr, {total_q, 32, 128}, attn::DType::BF16};
//   c.k = {k_ptr, {num_pages, 16, 8, 128}, attn::DType::BF16};   // paged
//   c.v = {v_ptr, {num_pages, 16, 8, 128}, attn::DType::BF16};
//   c.out = {o_ptr, {total_q, 32, 128}, attn::DType::BF16};
//   c.cu_seqlens_q = cu_q; c.seq_lens_k = lens; c.block_table = table;
//   c.batch = 4; c.block_table_stride = 64; c.max_q_len = 1; c.max_kv_len = 1024;
//   std::string error;
//   // Split-KV decode merges its splits' partial states in a workspace:
//   const int64_t bytes = attn::attentionWorkspaceBytes(runtime, c, error);
//   if (bytes < 0) ...
//   c.workspace = workspace_of_at_least(bytes); c.workspace_bytes = bytes;
//   if (!attn::attention(runtime, c, stream, error)) ...
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_ATTENTION_H
#define ATTNC_ATTENTION_H

#include "attnc/Runtime.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn {

/// A device tensor as the call sees it: contiguous, row-major (a paged k and
/// v may give other strides, AttentionCall::kv_page_stride).
struct TensorRef {
  CUdeviceptr data = 0;
  std::vector<int64_t> shape;
  DType dtype = DType::BF16;
};

struct AttentionCall {
  TensorRef q, k, v, out; ///< q, out [total_q, Hq, D]; k, v [total_kv, Hkv, D] or paged
                          ///< [num_pages, page_size, Hkv, D]
  TensorRef lse;          ///< f32 [total_q, Hq]; data = 0: no lse
  CUdeviceptr cu_seqlens_q = 0, cu_seqlens_k = 0; ///< int32 offsets [batch + 1]
  CUdeviceptr seq_lens_k = 0, block_table = 0;    ///< paged: int32 [batch], [batch, stride]
  int batch = 1;
  int64_t block_table_stride = 0;
  int64_t max_q_len = 0, max_kv_len = 0; ///< the longest sequence's lengths
  bool causal = false;
  int64_t window = 0;              ///< > 0: a causal sliding window of this many keys
  double scale = 0;                ///< 0: 1 / sqrt(head_dim)
  /// unset: decode (paged or contiguous cache) for 1..16 query tokens and max_q_len x gqa <= 128
  std::optional<bool> decode;
  std::optional<int64_t> split_kv; ///< decode: unset = auto (prefill refuses a count)
  CUdeviceptr workspace = 0;       ///< split-KV decode: workspaceBytes() bytes
  size_t workspace_bytes = 0;
  /// Paged k and v laid out otherwise than packed (AttentionArgs::kv_page_stride
  /// and the others, in elements; 0 keeps the packed layout's); their shapes
  /// stay [num_pages, page_size, Hkv, D].
  int64_t kv_page_stride = 0, kv_token_stride = 0, kv_head_stride = 0;
};

/// What a spec is derived from: the tensors' description without their
/// memory (the C API and the Python module derive through this too).
struct AttentionShape {
  DType dtype = DType::BF16;
  int64_t head_dim = 0, num_q_heads = 0, num_kv_heads = 0;
  int64_t page_size = 0; ///< 0: contiguous K/V
  int64_t max_q_len = 0; ///< the longest sequence's query tokens
  bool causal = false;
  int64_t window = 0; ///< > 0: a causal sliding window of this many keys
  bool return_lse = false;
  /// unset: decode (paged or contiguous cache) for 1..16 query tokens and max_q_len x gqa <= 128
  std::optional<bool> decode;
  std::optional<int64_t> split_kv; ///< decode: unset = auto (prefill refuses a count)
  /// 0: the defaults. tile_q is prefill's: a shape that gives it takes the
  /// prefill kernels unless `decode` says otherwise.
  int64_t tile_q = 0, tile_kv = 0;
};

/// The spec attention() launches for such tensors on `target`; nullopt with
/// `error` naming the problem (a head count that is no GQA ratio, a field
/// the spec rules refuse). It depends on max_q_len twice: decode kernels for
/// 1..16 query tokens (max_q_len x gqa <= 128), paged or contiguous, unless
/// the shape gives tile_q (prefill tiles) or a tile_kv the decode block
/// cannot hold, or `decode` says otherwise; and longPrefillTiles.
std::optional<Spec> attentionSpec(const AttentionShape &shape, Target target, std::string &error);

/// Query rows from which attentionSpec gives a head_dim 64 prefill on
/// sm_90a, without a mask or under a causal one, the warp-specialised block
/// of three computing warpgroups on 192 x 128 tiles instead of the spec's
/// default (the wgmma block on 64 x 128 without a mask, 64 x 64 under one):
/// measured on the H200 (tests/gpu/RESULTS.md) 13-20 % faster at 4096
/// and 16384 query rows without a mask, under a causal one 3-4 % faster at
/// 4096 (two timings; bench.py's row from 0.91x to 0.97-0.98x FlexAttention)
/// and 17-19 % at 16384; 7 % and 25 % slower at 1024. Other masks keep the
/// default.
constexpr int64_t kLongPrefillRows = 4096;
/// Whether a call whose longest sequence has max_q_len query tokens takes
/// those tiles: a prefill spec of head_dim 64 on sm_90a with mma = auto,
/// tiles left to the defaults (the caller's part) and none tuned for it.
bool longPrefillTiles(const Spec &spec, int64_t max_q_len);
/// For a spec on exactly the tiles longPrefillTiles gives (192 x 128, the
/// depth left open, a spec that takes them), the same spec on its default
/// tiles; nullopt for any other. The runtime serves such a spec in AOT-only
/// mode with a bundle's default-tile kernel when no bundle holds the long
/// tiles: the same attention, a little slower on long prompts.
std::optional<Spec> longPrefillDefaultSpec(const Spec &spec);

/// The spec the call's tensors and mask imply, for `target` (a GPU
/// architecture name), and the launch arguments; false with `error` naming
/// the tensor and the problem when shapes or dtypes do not fit together.
bool deriveAttention(const AttentionCall &call, Target target, Spec &spec, AttentionArgs &args,
                     std::string &error);

/// deriveAttention, then the kernel from `runtime` (bundle, cache or JIT),
/// then the launch on `stream`. No allocation, no synchronisation. Split-KV
/// decode merges through call.workspace (attentionWorkspaceBytes says how
/// much); without one, a decode launch whose split count attnc chooses runs
/// unsplit instead (unsplitWithoutWorkspace), correct but slower where few
/// sequences leave the GPU idle; a call that sets split_kv gets a refusal.
bool attention(Runtime &runtime, const AttentionCall &call, CUstream stream, std::string &error);

/// What attention() does to a launch whose splits need `need` bytes of
/// workspace when the call gives none and leaves the split count to attnc:
/// one split, which needs none (true); otherwise nothing (false).
bool unsplitWithoutWorkspace(const AttentionCall &call, size_t need, AttentionArgs &args);

/// Bytes of workspace the call needs (0 for most), or -1 with `error`.
int64_t attentionWorkspaceBytes(Runtime &runtime, const AttentionCall &call, std::string &error);

} // namespace attn

#endif // ATTNC_ATTENTION_H
