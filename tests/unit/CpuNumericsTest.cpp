//===- CpuNumericsTest.cpp - The generated IR computes attention, on the CPU ===//
//
// Every spec here goes through the whole pipeline, attn-lower-tiles,
// bufferization and LLVM, runs on fresh random inputs (seed printed), and is
// compared with the plain textbook reference. Outputs are poisoned with NaN
// first; unused page slots and the padding past each sequence are NaN too,
// so any read of them shows up in the result.
//
//===----------------------------------------------------------------------===//

#include "attnc/CpuBackend.h"
#include "../reference/Reference.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

using namespace attn;

namespace {

uint64_t seed() {
  static const uint64_t s = [] {
    const char *env = std::getenv("ATTNC_TEST_SEED");
    uint64_t v = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("CPU numerics: seed %llu (ATTNC_TEST_SEED=%llu to replay)\n",
                (unsigned long long)v, (unsigned long long)v);
    return v;
  }();
  return s;
}

/// Kernels compiled once per spec for the whole test binary.
const CpuKernel &kernelFor(const std::string &text) {
  // Never destroyed: an ExecutionEngine must not outlive LLVM's own statics,
  // which are gone by the time function-local statics are destroyed at exit.
  static auto *kernels = new std::map<std::string, std::unique_ptr<CpuKernel>>();
  auto &slot = (*kernels)[text];
  if (!slot) {
    SpecResult spec = parseSpec(text);
    INFO(text);
    REQUIRE(spec);
    auto kernel = CpuKernel::compile(*spec.spec);
    if (!kernel)
      FAIL(llvm::toString(kernel.takeError()));
    slot = std::move(*kernel);
  }
  return *slot;
}

struct Errors {
  double maxAbs = 0, sumSqErr = 0, sumSqRef = 0;
  int64_t nan = 0, fullyMaskedRows = 0, fullyMaskedWrong = 0;
  double relative() const { return sumSqRef > 0 ? std::sqrt(sumSqErr / sumSqRef) : std::sqrt(sumSqErr); }
};

/// One sequence of a ragged batch.
struct Sequence {
  int64_t qLen, kvLen;
};

/// Runs `specText` on a ragged batch and accumulates the errors against the
/// reference. Paged specs share one cache whose pages are shuffled across
/// the batch; every slot no sequence uses holds NaN.
template <typename T>
Errors runBatch(const std::string &specText, const std::vector<Sequence> &batch,
                int64_t numKVHeads, std::mt19937_64 &rng, int64_t numSplits = 3) {
  const CpuKernel &kernel = kernelFor(specText);
  const Spec &spec = kernel.spec();
  const int64_t d = spec.head_dim, hq = numKVHeads * spec.gqa, hkv = numKVHeads;
  const int64_t page = spec.page_size;
  std::normal_distribution<double> normal(0.0, 1.0);
  const T nan = std::numeric_limits<T>::quiet_NaN();

  // A paged cache large enough for the batch, plus spare pages, all NaN.
  std::vector<int64_t> pagesOf;
  int64_t numPages = 0;
  for (const Sequence &s : batch)
    numPages += page ? (s.kvLen + page - 1) / page : 0;
  numPages += page ? 3 : 0;
  std::vector<int32_t> pool(numPages);
  for (int64_t i = 0; i < numPages; ++i)
    pool[i] = static_cast<int32_t>(i);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<T> kCache(numPages * std::max<int64_t>(page, 1) * hkv * d, nan);
  std::vector<T> vCache(kCache.size(), nan);
  size_t nextPage = 0;

  Errors errors;
  for (const Sequence &s : batch) {
    std::vector<T> q(hq * s.qLen * d), k(hkv * s.kvLen * d), v(k.size());
    for (auto *buf : {&q, &k, &v})
      for (T &x : *buf)
        x = static_cast<T>(normal(rng));
    std::vector<int32_t> table;
    if (page) {
      int64_t used = (s.kvLen + page - 1) / page;
      table.assign(pool.begin() + nextPage, pool.begin() + nextPage + used);
      nextPage += used;
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t t = 0; t < s.kvLen; ++t)
          for (int64_t x = 0; x < d; ++x) {
            int64_t at = ((table[t / page] * page + t % page) * hkv + h) * d + x;
            kCache[at] = k[(h * s.kvLen + t) * d + x];
            vCache[at] = v[(h * s.kvLen + t) * d + x];
          }
    }
    const double scale = 1.0 / std::sqrt(double(d));
    std::vector<T> out(hq * s.qLen * d, nan), lse(hq * s.qLen, nan);
    CpuArgs args;
    args.numQHeads = hq;
    args.numKVHeads = hkv;
    args.qLen = s.qLen;
    args.kvLen = s.kvLen;
    args.q = q.data();
    args.k = k.data();
    args.v = v.data();
    args.numPages = numPages;
    args.kCache = kCache.data();
    args.vCache = vCache.data();
    args.blockTable = table.data();
    args.blockTableLen = static_cast<int64_t>(table.size());
    args.scale = scale;
    args.numSplits = numSplits;
    args.out = out.data();
    args.lse = lse.data();
    if (llvm::Error err = kernel.run(args))
      FAIL(llvm::toString(std::move(err)));

    // The reference reads K and V through the block table too.
    ref::Problem p;
    p.numQHeads = hq;
    p.numKVHeads = hkv;
    p.qLen = s.qLen;
    p.kvLen = s.kvLen;
    p.headDim = d;
    p.mask = spec.mask.kind == MaskKind::None     ? ref::MaskKind::None
             : spec.mask.kind == MaskKind::Causal ? ref::MaskKind::Causal
                                                  : ref::MaskKind::Window;
    p.window = spec.mask.window;
    p.scale = scale;
    p.query = [&](int64_t h, int64_t i, int64_t x) { return (long double)q[(h * s.qLen + i) * d + x]; };
    auto kvAt = [&](const std::vector<T> &contiguous, const std::vector<T> &cache, int64_t h,
                    int64_t t, int64_t x) -> long double {
      if (!page)
        return contiguous[(h * s.kvLen + t) * d + x];
      return cache[((table[t / page] * page + t % page) * hkv + h) * d + x];
    };
    p.key = [&](int64_t h, int64_t t, int64_t x) { return kvAt(k, kCache, h, t, x); };
    p.value = [&](int64_t h, int64_t t, int64_t x) { return kvAt(v, vCache, h, t, x); };
    std::vector<long double> refOut, refLse;
    ref::attention(p, refOut, refLse);

    for (size_t i = 0; i < out.size(); ++i) {
      if (std::isnan(out[i])) {
        ++errors.nan;
        continue;
      }
      double err = std::fabs(double(out[i] - refOut[i]));
      errors.maxAbs = std::max(errors.maxAbs, err);
      errors.sumSqErr += err * err;
      errors.sumSqRef += double(refOut[i] * refOut[i]);
    }
    for (int64_t row = 0; row < hq * s.qLen; ++row) {
      if (!std::isinf(refLse[row]))
        continue;
      // A row that sees no key: exactly 0, and lse = -inf when asked for.
      ++errors.fullyMaskedRows;
      bool zero = std::all_of(out.begin() + row * d, out.begin() + (row + 1) * d,
                              [](T x) { return x == T(0); });
      bool lseOk = !spec.return_lse || (std::isinf(lse[row]) && lse[row] < 0);
      errors.fullyMaskedWrong += !(zero && lseOk);
    }
    if (spec.return_lse)
      for (int64_t row = 0; row < hq * s.qLen; ++row)
        if (!std::isinf(refLse[row]))
          errors.maxAbs = std::max(errors.maxAbs, std::fabs(double(lse[row] - refLse[row])));
  }
  return errors;
}

/// The masks, page sizes and GQA ratios of the matrix.
const char *const kMasks[] = {"none", "causal", "sliding_window(50)"};
const int kGqa[] = {1, 4, 7};

/// Ragged prefill batch: a single token, a length that is no multiple of
/// the tiles, few queries against a long cache, more queries than keys (the
/// first ones see nothing under a causal mask) and an empty cache.
const std::vector<Sequence> kPrefillBatch = {{1, 1}, {77, 77}, {5, 1000}, {100, 77}, {3, 0}};
/// Ragged decode batch: one or two query tokens per sequence.
const std::vector<Sequence> kDecodeBatch = {{1, 1}, {1, 77}, {2, 1000}, {1, 0}};

template <typename T>
void checkMatrix(const std::string &dtype, double tolerance, bool relative) {
  std::mt19937_64 rng(seed());
  int specs = 0;
  double worst = 0;
  auto check = [&](const std::string &text, const std::vector<Sequence> &batch, int64_t splits) {
    Errors e = runBatch<T>(text, batch, /*numKVHeads=*/2, rng, splits);
    double err = relative ? e.relative() : e.maxAbs;
    worst = std::max(worst, err);
    ++specs;
    INFO(text << ": max abs " << e.maxAbs << ", relative " << e.relative() << ", " << e.nan
              << " NaN, " << e.fullyMaskedWrong << " of " << e.fullyMaskedRows
              << " fully masked rows wrong");
    CHECK(e.nan == 0);
    CHECK(err < tolerance);
    CHECK(e.fullyMaskedWrong == 0);
  };
  const std::string base = "target=cpu,dtype=" + dtype + ",head_dim=32,return_lse=true";
  for (const char *mask : kMasks)
    for (int gqa : kGqa) {
      const std::string common = base + ",mask=" + mask + ",gqa=" + std::to_string(gqa);
      for (int page : {0, 1, 16, 19})
        check(common + ",tile_q=16,tile_kv=19,page_size=" + std::to_string(page), kPrefillBatch, 1);
      for (int page : {1, 16, 19})
        for (const char *split : {"1", "3", "auto"})
          check(common + ",mode=decode,tile_q=2,tile_kv=19,page_size=" + std::to_string(page) +
                    ",split_kv=" + split,
                kDecodeBatch, /*num_splits for auto=*/3);
    }
  std::printf("CPU numerics %s: %d specs, worst %s error %.3g (bound %.0e)\n", dtype.c_str(),
              specs, relative ? "relative" : "max-abs", worst, tolerance);
}

} // namespace

TEST_CASE("f64 matches textbook attention within 1e-8 for every mask, paging, GQA and split",
          "[cpu][numerics]") {
  checkMatrix<double>("f64", 1e-8, /*relative=*/false);
}

TEST_CASE("f32 matches textbook attention within 1e-5 relative for every mask, paging, GQA and split",
          "[cpu][numerics]") {
  checkMatrix<float>("f32", 1e-5, /*relative=*/true);
}

TEST_CASE("tiles of one query and one key give the same answer", "[cpu][numerics]") {
  std::mt19937_64 rng(seed());
  for (const char *mask : kMasks) {
    Errors e = runBatch<double>(std::string("target=cpu,dtype=f64,head_dim=32,tile_q=1,tile_kv=1,"
                                            "return_lse=true,page_size=19,gqa=4,mask=") + mask,
                                {{1, 1}, {77, 77}, {9, 3}}, 1, rng);
    INFO(mask << ": max abs " << e.maxAbs);
    CHECK(e.nan == 0);
    CHECK(e.maxAbs < 1e-8);
    CHECK(e.fullyMaskedWrong == 0);
  }
}

TEST_CASE("a long f64 prefill (1000 x 1000) matches the reference", "[cpu][numerics]") {
  std::mt19937_64 rng(seed());
  Errors e = runBatch<double>("target=cpu,dtype=f64,head_dim=32,mask=causal,page_size=19,gqa=4,"
                              "return_lse=true",
                              {{1000, 1000}}, 1, rng);
  INFO("max abs " << e.maxAbs);
  CHECK(e.nan == 0);
  CHECK(e.maxAbs < 1e-8);
}
