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
#include "reference/Harness.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
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

using harness::Errors;

/// One sequence of a ragged batch: (q_len, kv_len).
using Sequence = std::pair<int64_t, int64_t>;

/// Runs `specText` on a ragged batch of fresh random inputs, outputs
/// poisoned with NaN, and accumulates the errors against the reference.
template <typename T>
Errors runBatch(const std::string &specText, const std::vector<Sequence> &lengths,
                int64_t numKVHeads, std::mt19937_64 &rng, int64_t numSplits = 3) {
  const CpuKernel &kernel = kernelFor(specText);
  auto batch = harness::randomBatch<T>(kernel.spec(), lengths, numKVHeads, rng);
  const double scale = 1.0 / std::sqrt(double(kernel.spec().head_dim));
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Errors errors;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const auto &s = batch.sequences[i];
    std::vector<T> out(batch.numQHeads() * s.qLen * kernel.spec().head_dim, nan);
    std::vector<T> lse(batch.numQHeads() * s.qLen, nan);
    if (llvm::Error err =
            kernel.run(harness::argsFor(batch, i, scale, numSplits, out.data(), lse.data())))
      FAIL(llvm::toString(std::move(err)));
    harness::compare(batch, i, scale, out, lse, errors);
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
      for (int page : {0, 1, 16, 19})
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

TEST_CASE("a 4096 x 4096 head of 128 in f32 runs in seconds", "[cpu][numerics][speed]") {
  std::mt19937_64 rng(seed());
  const std::string text = "target=cpu,dtype=f32,head_dim=128";
  const CpuKernel &kernel = kernelFor(text);
  auto batch = harness::randomBatch<float>(kernel.spec(), {{4096, 4096}}, 1, rng);
  std::vector<float> out(4096 * 128, std::numeric_limits<float>::quiet_NaN()), lse(4096);
  const double scale = 1.0 / std::sqrt(128.0);
  auto t0 = std::chrono::steady_clock::now();
  if (llvm::Error err = kernel.run(harness::argsFor(batch, 0, scale, 1, out.data(), lse.data())))
    FAIL(llvm::toString(std::move(err)));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("CPU 4096 x 4096, head_dim 128, f32: %.2f s\n", seconds);
  CHECK(seconds < 30.0);
  // The reference on 64 rows spread over the sequence.
  std::vector<char> rows(4096, 0);
  for (int i = 0; i < 64; ++i)
    rows[i * 64 + 63 - i % 64] = 1;
  harness::Errors e;
  harness::compare(batch, 0, scale, out, lse, e, &rows);
  INFO("relative " << e.relative());
  CHECK(e.checked == 64);
  CHECK(e.nan == 0);
  CHECK(e.relative() < 1e-5);
}

TEST_CASE("the harness's relative error holds outputs near f64's largest", "[cpu][numerics]") {
  // Plain sums of squares overflow here: 1e300 errors against values near
  // 1e308 square to inf / inf = NaN, and so did an inf error against them.
  harness::Errors e;
  for (int i = 0; i < 4; ++i) {
    e.ref.add(1e308);
    e.err.add(1e300);
  }
  CHECK(e.relative() == Approx(1e-8).epsilon(1e-12));
  e.err.add(INFINITY);
  CHECK(std::isinf(e.relative()));
  e.err.add(1.0); // after inf, still inf
  CHECK(std::isinf(e.relative()));

  harness::Errors withNan; // a NaN makes the norm NaN, as a plain sum would
  withNan.ref.add(1.0);
  withNan.err.add(0.5);
  withNan.err.add(NAN);
  withNan.err.add(2.0);
  CHECK(std::isnan(withNan.relative()));

  harness::Errors small; // the ordinary case: sqrt(sum err^2 / sum ref^2)
  for (double x : {3.0, 4.0})
    small.ref.add(x);
  small.err.add(0.5);
  CHECK(small.relative() == Approx(0.1).epsilon(1e-12));
  harness::Errors zeroRef; // a reference of zeros: the error's own norm
  zeroRef.err.add(3.0);
  zeroRef.err.add(4.0);
  CHECK(zeroRef.relative() == Approx(5.0).epsilon(1e-12));
}
