//===- Reference.h - Textbook attention, written plainly --------*- C++ -*-===//
//
// The reference the tests compare every backend against: the score matrix
// materialised in long double, the mask applied entry by entry, a
// two-pass softmax, times V. It shares no code with attnc (not even the
// mask rule), so a mistake in attnc cannot hide in both.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TESTS_REFERENCE_H
#define ATTNC_TESTS_REFERENCE_H

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace attn::ref {

enum class MaskKind { None, Causal, Window };

/// One sequence's problem. K and V are read through `key`/`value`, which
/// return element (kv_head, token, d): contiguous or through a block table.
struct Problem {
  int64_t numQHeads, numKVHeads, qLen, kvLen, headDim;
  MaskKind mask = MaskKind::None;
  int64_t window = 0;
  long double scale;
  std::function<long double(int64_t, int64_t, int64_t)> query; ///< (q_head, pos, d)
  std::function<long double(int64_t, int64_t, int64_t)> key;
  std::function<long double(int64_t, int64_t, int64_t)> value;
};

/// Whether query i may see key j: queries and keys aligned at the bottom right.
inline bool sees(const Problem &p, int64_t i, int64_t j) {
  int64_t pos = i + (p.kvLen - p.qLen);
  switch (p.mask) {
  case MaskKind::None:
    return true;
  case MaskKind::Causal:
    return j <= pos;
  case MaskKind::Window:
    return j <= pos && pos - j < p.window;
  }
  return false;
}

/// out [num_q_heads, q_len, head_dim] and lse [num_q_heads, q_len]. A query
/// that sees no key gets output 0 and lse -inf. With `onlyRows` (q_len
/// flags), the other query rows are skipped and left NaN.
inline void attention(const Problem &p, std::vector<long double> &out,
                      std::vector<long double> &lse,
                      const std::vector<char> *onlyRows = nullptr) {
  const int64_t group = p.numQHeads / p.numKVHeads;
  out.assign(p.numQHeads * p.qLen * p.headDim, 0.0L);
  lse.assign(p.numQHeads * p.qLen, -std::numeric_limits<long double>::infinity());
  std::vector<long double> scores(p.kvLen);
  for (int64_t h = 0; h < p.numQHeads; ++h) {
    const int64_t hk = h / group;
    for (int64_t i = 0; i < p.qLen; ++i) {
      if (onlyRows && !(*onlyRows)[i]) {
        for (int64_t d = 0; d < p.headDim; ++d)
          out[(h * p.qLen + i) * p.headDim + d] = std::numeric_limits<long double>::quiet_NaN();
        lse[h * p.qLen + i] = std::numeric_limits<long double>::quiet_NaN();
        continue;
      }
      long double max = -std::numeric_limits<long double>::infinity();
      for (int64_t j = 0; j < p.kvLen; ++j) {
        if (!sees(p, i, j)) {
          scores[j] = -std::numeric_limits<long double>::infinity();
          continue;
        }
        long double s = 0;
        for (int64_t d = 0; d < p.headDim; ++d)
          s += p.query(h, i, d) * p.key(hk, j, d);
        scores[j] = s * p.scale;
        max = std::max(max, scores[j]);
      }
      if (max == -std::numeric_limits<long double>::infinity())
        continue; // no visible key
      long double sum = 0;
      for (int64_t j = 0; j < p.kvLen; ++j)
        sum += scores[j] == -std::numeric_limits<long double>::infinity()
                   ? 0.0L
                   : std::exp(scores[j] - max);
      for (int64_t j = 0; j < p.kvLen; ++j) {
        if (scores[j] == -std::numeric_limits<long double>::infinity())
          continue;
        long double w = std::exp(scores[j] - max) / sum;
        for (int64_t d = 0; d < p.headDim; ++d)
          out[(h * p.qLen + i) * p.headDim + d] += w * p.value(hk, j, d);
      }
      lse[h * p.qLen + i] = max + std::log(sum);
    }
  }
}

} // namespace attn::ref

#endif // ATTNC_TESTS_REFERENCE_H
