//===- Harness.h - Random batches, CPU runs and their errors ----*- C++ -*-===//
//
// What the CPU numerics tests and `attnc run --target cpu` share: a ragged
// batch of sequences with random inputs (paged ones in one shared cache
// whose pages are shuffled and whose unused slots hold NaN), the arguments
// of one sequence for the CPU kernel, and the comparison of its outputs with
// the textbook reference.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNC_TESTS_HARNESS_H
#define ATTNC_TESTS_HARNESS_H

#include "Reference.h"
#include "attn/Spec.h"
#include "attnc/CpuBackend.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace attn::harness {

/// One sequence: its lengths, its queries [num_q_heads, q_len, head_dim],
/// its keys and values [num_kv_heads, kv_len, head_dim] (contiguous specs)
/// and, for paged specs, its pages in order.
template <typename T>
struct Sequence {
  int64_t qLen = 0, kvLen = 0;
  std::vector<T> q, k, v;
  std::vector<int32_t> table;
};

/// A batch for one spec. Paged specs keep K and V only in the shared cache
/// [num_pages, page_size, num_kv_heads, head_dim].
template <typename T>
struct Batch {
  Spec spec;
  int64_t numKVHeads = 1, numPages = 0;
  std::vector<Sequence<T>> sequences;
  std::vector<T> kCache, vCache;
  int64_t numQHeads() const { return numKVHeads * spec.gqa; }
};

/// A 2-norm summed without overflow: the sum of squares is kept against the
/// largest |x| so far (values near f64's largest would square to inf, and
/// their relative error would read inf / inf = NaN).
struct Norm2 {
  double scale = 0, sumSq = 1; ///< the norm is scale x sqrt(sumSq); NaN once a NaN is added
  void add(double x) {
    x = std::fabs(x);
    if (std::isnan(x)) { // NaN from here on, as a plain sum would be
      scale = x;
      return;
    }
    if (x == 0 || std::isnan(scale) || std::isinf(scale))
      return;
    if (std::isinf(x)) { // the norm is inf from here on
      scale = x;
      sumSq = 1;
      return;
    }
    if (x > scale) {
      sumSq = 1 + (scale == 0 ? 0 : sumSq * (scale / x) * (scale / x));
      scale = x;
    } else {
      sumSq += (x / scale) * (x / scale);
    }
  }
  double value() const { return scale == 0 ? 0 : scale * std::sqrt(sumSq); }
};

/// Errors of a run against the reference, accumulated over sequences.
struct Errors {
  double maxAbs = 0;                             ///< outputs and lse alike
  Norm2 err, ref;                                ///< the outputs' errors and their values
  double maxAbsOut = 0, maxRefOut = 0;           ///< the outputs' alone, and their largest |value|
  double maxAbsLse = 0, maxRefLse = 0;           ///< lse's alone (finite rows), and its largest |value|
  int64_t checked = 0, nan = 0, fullyMaskedRows = 0, fullyMaskedWrong = 0;
  /// ||out - ref|| / ||ref|| (||out - ref|| where ref is 0); inf where an
  /// output overflowed.
  double relative() const {
    if (ref.scale == 0)
      return err.value();
    // Each norm's scale apart: both values can pass f64's largest.
    return err.scale / ref.scale * std::sqrt(err.sumSq / ref.sumSq);
  }
  /// The largest error against the largest value where that is above 1
  /// (values of a few units: the absolute error), of the outputs and of lse.
  double scaledOut() const { return maxAbsOut / std::max(1.0, maxRefOut); }
  double scaledLse() const { return maxAbsLse / std::max(1.0, maxRefLse); }
};

/// The reference's name for a spec's mask.
inline ref::MaskKind refMask(const Mask &m) {
  return m.kind == MaskKind::None     ? ref::MaskKind::None
         : m.kind == MaskKind::Causal ? ref::MaskKind::Causal
                                      : ref::MaskKind::Window;
}

/// Random inputs (standard normal) for sequences of the given lengths.
template <typename T>
Batch<T> randomBatch(const Spec &spec, const std::vector<std::pair<int64_t, int64_t>> &lengths,
                     int64_t numKVHeads, std::mt19937_64 &rng) {
  Batch<T> batch;
  batch.spec = spec;
  batch.numKVHeads = numKVHeads;
  const int64_t d = spec.head_dim, page = spec.page_size, hq = batch.numQHeads();
  std::normal_distribution<double> normal(0.0, 1.0);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (auto [qLen, kvLen] : lengths) {
    Sequence<T> s;
    s.qLen = qLen;
    s.kvLen = kvLen;
    s.q.resize(hq * qLen * d);
    s.k.resize(numKVHeads * kvLen * d);
    s.v.resize(s.k.size());
    for (auto *buf : {&s.q, &s.k, &s.v})
      for (T &x : *buf)
        x = static_cast<T>(normal(rng));
    batch.sequences.push_back(std::move(s));
    if (page)
      batch.numPages += (kvLen + page - 1) / page;
  }
  if (!page)
    return batch;
  // One cache for the batch, three spare pages, pages handed out shuffled,
  // every slot NaN until a token is written to it.
  batch.numPages += 3;
  std::vector<int32_t> pool(batch.numPages);
  for (int64_t i = 0; i < batch.numPages; ++i)
    pool[i] = static_cast<int32_t>(i);
  std::shuffle(pool.begin(), pool.end(), rng);
  batch.kCache.assign(batch.numPages * page * numKVHeads * d, nan);
  batch.vCache.assign(batch.kCache.size(), nan);
  size_t next = 0;
  for (Sequence<T> &s : batch.sequences) {
    int64_t used = (s.kvLen + page - 1) / page;
    s.table.assign(pool.begin() + next, pool.begin() + next + used);
    next += used;
    for (int64_t h = 0; h < numKVHeads; ++h)
      for (int64_t t = 0; t < s.kvLen; ++t)
        for (int64_t x = 0; x < d; ++x) {
          int64_t at = ((s.table[t / page] * page + t % page) * numKVHeads + h) * d + x;
          batch.kCache[at] = s.k[(h * s.kvLen + t) * d + x];
          batch.vCache[at] = s.v[(h * s.kvLen + t) * d + x];
        }
    s.k.clear();
    s.v.clear();
  }
  return batch;
}

/// The CPU kernel's arguments for sequence `i`, writing into out and lse.
template <typename T>
CpuArgs argsFor(const Batch<T> &batch, size_t i, double scale, int64_t numSplits, T *out, T *lse) {
  const Sequence<T> &s = batch.sequences[i];
  CpuArgs a;
  a.numQHeads = batch.numQHeads();
  a.numKVHeads = batch.numKVHeads;
  a.qLen = s.qLen;
  a.kvLen = s.kvLen;
  a.q = s.q.data();
  a.k = s.k.data();
  a.v = s.v.data();
  a.numPages = batch.numPages;
  a.kCache = batch.kCache.data();
  a.vCache = batch.vCache.data();
  a.blockTable = s.table.data();
  a.blockTableLen = static_cast<int64_t>(s.table.size());
  a.scale = scale;
  a.numSplits = numSplits;
  a.out = out;
  a.lse = lse;
  return a;
}

/// Compares sequence `i`'s outputs with the reference; with `onlyRows`, only
/// those query rows (q_len flags) are computed and compared.
template <typename T>
void compare(const Batch<T> &batch, size_t i, double scale, const std::vector<T> &out,
             const std::vector<T> &lse, Errors &errors,
             const std::vector<char> *onlyRows = nullptr) {
  const Sequence<T> &s = batch.sequences[i];
  const Spec &spec = batch.spec;
  const int64_t d = spec.head_dim, page = spec.page_size, hkv = batch.numKVHeads;
  ref::Problem p;
  p.numQHeads = batch.numQHeads();
  p.numKVHeads = hkv;
  p.qLen = s.qLen;
  p.kvLen = s.kvLen;
  p.headDim = d;
  p.mask = refMask(spec.mask);
  p.window = spec.mask.window;
  p.scale = scale;
  p.query = [&](int64_t h, int64_t t, int64_t x) -> long double {
    return s.q[(h * s.qLen + t) * d + x];
  };
  // The reference reads paged K and V through the block table as well.
  auto kv = [&](const std::vector<T> &contiguous, const std::vector<T> &cache, int64_t h,
                int64_t t, int64_t x) -> long double {
    if (!page)
      return contiguous[(h * s.kvLen + t) * d + x];
    return cache[((s.table[t / page] * page + t % page) * hkv + h) * d + x];
  };
  p.key = [&](int64_t h, int64_t t, int64_t x) { return kv(s.k, batch.kCache, h, t, x); };
  p.value = [&](int64_t h, int64_t t, int64_t x) { return kv(s.v, batch.vCache, h, t, x); };
  std::vector<long double> refOut, refLse;
  ref::attention(p, refOut, refLse, onlyRows);

  for (int64_t row = 0; row < p.numQHeads * s.qLen; ++row) {
    if (onlyRows && !(*onlyRows)[row % s.qLen])
      continue;
    ++errors.checked;
    for (int64_t x = 0; x < d; ++x) {
      const T got = out[row * d + x];
      const long double want = refOut[row * d + x];
      if (std::isnan(got)) {
        ++errors.nan;
        continue;
      }
      double err = std::fabs(double(got - want));
      errors.maxAbs = std::max(errors.maxAbs, err);
      errors.maxAbsOut = std::max(errors.maxAbsOut, err);
      errors.maxRefOut = std::max(errors.maxRefOut, double(std::fabs(want)));
      errors.err.add(err);
      errors.ref.add(double(want));
    }
    if (std::isinf(refLse[row])) {
      // A row that sees no key: exactly 0, and lse = -inf when asked for.
      ++errors.fullyMaskedRows;
      bool zero = std::all_of(out.begin() + row * d, out.begin() + (row + 1) * d,
                              [](T x) { return x == T(0); });
      bool lseOk = !spec.return_lse || (std::isinf(lse[row]) && lse[row] < 0);
      errors.fullyMaskedWrong += !(zero && lseOk);
    } else if (spec.return_lse) {
      if (std::isnan(lse[row]))
        ++errors.nan;
      else {
        const double err = std::fabs(double(lse[row] - refLse[row]));
        errors.maxAbs = std::max(errors.maxAbs, err);
        errors.maxAbsLse = std::max(errors.maxAbsLse, err);
        errors.maxRefLse = std::max(errors.maxRefLse, double(std::fabs(refLse[row])));
      }
    }
  }
}

} // namespace attn::harness

#endif // ATTNC_TESTS_HARNESS_H
