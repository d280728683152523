//===- BundleTest.cpp - The AOT bundle registry --------------------------===//

#include "attnc/Bundle.h"

#include <catch2/catch.hpp>

namespace {
const unsigned char fake[] = {1, 2, 3};
const attn::BundleEntry entries[] = {
    {"mode=prefill,head_dim=64,target=sm_80", "sm_80", fake, sizeof fake, 128, 4096, 0},
    {"mode=prefill,head_dim=64,target=sm_90a", "sm_90a", fake, sizeof fake, 256, 8192, 0},
};
const attn::BundleEntry later[] = {
    {"mode=prefill,head_dim=64,target=sm_80", "sm_80", fake, 1, 64, 0, 0},
};
const attn::BundleRegistration first("first", entries, 2);
const attn::BundleRegistration second("second", later, 1);
// As a bundle compiled against a header whose BundleEntry had one int less.
const attn::BundleEntry stale[] = {
    {"mode=prefill,head_dim=128,target=sm_90a", "sm_90a", fake, sizeof fake, 128, 4096, 0},
};
const attn::BundleRegistration third("stale", stale, 1, sizeof(attn::BundleEntry) - sizeof(int));
} // namespace

TEST_CASE("bundles register their kernels at start-up; the first one registered wins",
          "[bundle]") {
  CHECK(attn::bundleNames() == std::vector<std::string>{"first", "second"});
  CHECK(attn::bundledKernels().size() == 3);
  const attn::BundleEntry *e = attn::findBundledKernel("mode=prefill,head_dim=64,target=sm_90a",
                                                       "sm_90a");
  REQUIRE(e);
  CHECK(e->threads == 256);
  CHECK(e->shared_bytes == 8192);
  const attn::BundleEntry *f = attn::findBundledKernel("mode=prefill,head_dim=64,target=sm_80",
                                                       "sm_80");
  REQUIRE(f);
  CHECK(f->cubin_size == 3); // "first", not "second"
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=64,target=sm_80", "sm_90a"));
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=128,target=sm_80", "sm_80"));
}

TEST_CASE("a bundle compiled against another layout of its entries is refused, with the reason",
          "[bundle]") {
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=128,target=sm_90a", "sm_90a"));
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("bundle stale") != std::string::npos);
  CHECK(errors[0].find(std::to_string(sizeof(attn::BundleEntry))) != std::string::npos);
  CHECK(errors[0].find("attnc aot") != std::string::npos);
}
