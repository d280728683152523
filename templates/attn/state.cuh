//===- state.cuh - The online-softmax state: init, update, merge, normalise -*- CUDA -*-===//
//
// The state of FlashAttention's recurrence for the query rows one thread
// holds in an m16n8k16 accumulator: thread `lane` of a warp owns rows
// lane / 4 and lane / 4 + 8 of the warp's 16 rows, and in each 8-column
// block the columns 2 * (lane % 4) and 2 * (lane % 4) + 1. Names follow the
// IR: m (running max), l (running sum of exp), acc (unnormalised output),
// alpha = exp(m_old - m_new); on the GPU m is the max up to a slack that
// saves most rescales (update()). Scores arrive in the exp2 domain (already
// multiplied by scale * log2 e), so m is in that domain too.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEMPLATES_STATE_CUH
#define ATTN_TEMPLATES_STATE_CUH

#include "attn/math.cuh"

namespace attn {
namespace kernel {

template <int kTileKV, int kHeadDim>
struct RowState {
  static constexpr int kScoreBlocks = kTileKV / 8; ///< 8-column blocks of a score tile
  static constexpr int kAccBlocks = kHeadDim / 8;  ///< 8-column blocks of acc
  float m[2];                                       ///< exp2 domain
  float l[2];                                       ///< this thread's part of the row sums
  float acc[kAccBlocks][4];

  /// attn-online-softmax: m = -inf, l = 0, acc = 0 before the first tile.
  ATTN_DEVICE void init() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[r] = ATTN_NEG_INF;
      l[r] = 0.f;
    }
#pragma unroll
    for (int b = 0; b < kAccBlocks; ++b)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        acc[b][i] = 0.f;
  }

  /// How far (in the exp2 domain) a row's max may grow before the state is
  /// rescaled: while no row of the warp grew by more than this, m stays
  /// where it was and p = exp2(c s - m) is at most 2^8: fp32 sums and
  /// bf16/f16 probabilities keep the same relative precision there as below 1.
  static constexpr float kRescaleSlack = 8.f;

  /// Folds one tile of raw scores s = q . k into the state and turns them
  /// into the probabilities p that multiply V, with c = scale * log2 e
  /// (> 0) folded into one FFMA per score: m_new = max(m, c rowmax(s)),
  /// alpha = exp2(m - m_new), p = exp2(c s - m_new), l = alpha l + sum(p),
  /// acc = alpha acc (the caller then adds p V).
  ///
  /// The rescale is lazy: acc/l only need the same reference m, not the
  /// true max, so while no row of the warp has a max more than
  /// kRescaleSlack above its m (a warp-wide vote, so the branch is uniform),
  /// m is kept, alpha is 1 and the kHeadDim / 4 multiplications of acc are
  /// skipped. After the first tiles the max rarely moves that far, so most
  /// steps skip them; the result is the same (the final out = acc / l).
  ATTN_DEVICE void update(float (&s)[kScoreBlocks][4], float c) {
    float m_new[2];
    bool keep = true;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = ATTN_NEG_INF;
#pragma unroll
      for (int b = 0; b < kScoreBlocks; ++b)
        tile_max = fmaxf(tile_max, fmaxf(s[b][2 * r], s[b][2 * r + 1]));
      m_new[r] = fmaxf(m[r], quad_max(tile_max) * c); // c > 0: max and scale commute
      // A row still at m = -inf keeps it only while it stays -inf.
      keep = keep && m_new[r] <= m[r] + kRescaleSlack;
    }
    keep = __all_sync(0xffffffffu, keep);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_ref = keep ? m[r] : m_new[r];
      // attn-safe-init: while a row has seen no visible key its reference is
      // -inf; use 0 instead so that exp2(-inf - 0) = 0, never
      // exp2(-inf - -inf) = NaN.
      const float ref = m_ref == ATTN_NEG_INF ? 0.f : m_ref;
      float sum = 0.f;
#pragma unroll
      for (int b = 0; b < kScoreBlocks; ++b) {
        s[b][2 * r] = fast_exp2(fmaf(s[b][2 * r], c, -ref)); // a masked -inf gives 0
        s[b][2 * r + 1] = fast_exp2(fmaf(s[b][2 * r + 1], c, -ref));
        sum += s[b][2 * r] + s[b][2 * r + 1];
      }
      if (keep) {
        l[r] += sum; // alpha = 1
        continue;
      }
      // attn-safe-init: while m is still -inf nothing has been accumulated, and
      // alpha = exp2(-inf - ref) = 0 rescales nothing: never NaN.
      const float alpha = fast_exp2(m[r] - ref);
      l[r] = alpha * l[r] + sum;
#pragma unroll
      for (int b = 0; b < kAccBlocks; ++b) {
        acc[b][2 * r] *= alpha;
        acc[b][2 * r + 1] *= alpha;
      }
      m[r] = m_new[r];
    }
  }

  /// Completes the row sums across the quad and gives, per row, the factor
  /// that normalises acc (1 / l) and the natural-log lse.
  ATTN_DEVICE void finish(float (&inv_l)[2], float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(l[r]);
      // attn-safe-init: a row that saw no key has l = 0: output 0, lse -inf.
      inv_l[r] = sum > 0.f ? 1.f / sum : 0.f;
      lse[r] = sum > 0.f ? (m[r] + fast_log2(sum)) * kLn2 : ATTN_NEG_INF;
    }
  }
};

/// attn-split-kv: the lse of partial results of disjoint key ranges, each
/// given as (lse_i, normalised output o_i) with lse_i at lse[i * stride];
/// the merged output is then sum_i exp(lse_i - lse) o_i. The weights follow
/// the rescale rule; a part whose lse is -inf saw no key and weighs 0.
ATTN_DEVICE float merged_lse(const float *lse, int parts, i64 stride) {
  float top = ATTN_NEG_INF;
  for (int i = 0; i < parts; ++i)
    top = lse[i * stride] > top ? lse[i * stride] : top;
  // attn-safe-init: every part empty: the merged row saw no key either.
  if (top == ATTN_NEG_INF)
    return top;
  float sum = 0.f;
  for (int i = 0; i < parts; ++i)
    sum += expf(lse[i * stride] - top); // a part with lse = -inf adds exp(-inf) = 0
  return top + logf(sum);
}

} // namespace kernel
} // namespace attn

#endif // ATTN_TEMPLATES_STATE_CUH
