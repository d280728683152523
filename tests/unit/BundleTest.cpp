//===- BundleTest.cpp - The AOT bundle registry --------------------------===//

#include "attnc/Bundle.h"

#include "attn/params.cuh"

#include <catch2/catch.hpp>

namespace {
const unsigned char fake[] = {1, 2, 3};
constexpr size_t kParams = sizeof(attn::kernel::Params);
const attn::BundleEntry entries[] = {
    {"mode=prefill,head_dim=64,target=sm_80", "sm_80", fake, sizeof fake, 128, 4096, 0, 0, 0,
     nullptr, 0, kParams},
    {"mode=prefill,head_dim=64,target=sm_90a", "sm_90a", fake, sizeof fake, 256, 8192, 0, 0, 0,
     nullptr, 0, kParams},
};
const attn::BundleEntry later[] = {
    {"mode=prefill,head_dim=64,target=sm_80", "sm_80", fake, 1, 64, 0, 0, 0, 0, nullptr, 0,
     kParams},
};
const attn::BundleRegistration first("first", entries, 2);
const attn::BundleRegistration second("second", later, 1);
// As a bundle compiled against a header whose BundleEntry had one int less.
const attn::BundleEntry stale[] = {
    {"mode=prefill,head_dim=128,target=sm_90a", "sm_90a", fake, sizeof fake, 128, 4096, 0},
};
const attn::BundleRegistration third("stale", stale, 1, sizeof(attn::BundleEntry) - sizeof(int));
// As a bundle whose kernels were built for other kernel arguments (an
// attnc whose Params had a field less).
const attn::BundleEntry older[] = {
    {"mode=decode,head_dim=128,page_size=16,target=sm_90a", "sm_90a", fake, sizeof fake, 128,
     4096, 0, 0, 0, nullptr, 0, kParams - 8},
};
const attn::BundleRegistration fourth("older", older, 1);
// Damaged: an entry whose cubin is missing though its size is not, and a
// bundle whose entries are a null pointer.
const attn::BundleEntry damaged[] = {
    {"mode=prefill,head_dim=32,target=sm_80", "sm_80", fake, sizeof fake, 128, 4096, 0, 0, 0,
     nullptr, 0, kParams},
    {"mode=prefill,head_dim=48,target=sm_80", "sm_80", nullptr, 1 << 20, 128, 4096, 0, 0, 0,
     nullptr, 0, kParams},
};
const attn::BundleRegistration fifth("damaged", damaged, 2);
const attn::BundleRegistration sixth("empty", nullptr, 2);
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
  REQUIRE(errors.size() == 4);
  CHECK(errors[0].find("bundle stale") != std::string::npos);
  CHECK(errors[0].find(std::to_string(sizeof(attn::BundleEntry))) != std::string::npos);
  CHECK(errors[0].find("attnc aot") != std::string::npos);
}

TEST_CASE("a bundle whose kernels take other arguments than this runtime passes is refused",
          "[bundle]") {
  CHECK_FALSE(attn::findBundledKernel("mode=decode,head_dim=128,page_size=16,target=sm_90a",
                                      "sm_90a"));
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() == 4);
  CHECK(errors[1].find("bundle older") != std::string::npos);
  CHECK(errors[1].find(std::to_string(kParams - 8) + " bytes") != std::string::npos);
  CHECK(errors[1].find(std::to_string(kParams)) != std::string::npos);
  CHECK(errors[1].find("attnc aot") != std::string::npos);
  CHECK(attn::bundleNames() == std::vector<std::string>{"first", "second"});
}

TEST_CASE("a bundle with an entry that could not be loaded is refused whole", "[bundle]") {
  // Not even its good entry is used: the bundle is damaged.
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=32,target=sm_80", "sm_80"));
  CHECK_FALSE(attn::findBundledKernel("mode=prefill,head_dim=48,target=sm_80", "sm_80"));
  const std::vector<std::string> errors = attn::bundleErrors();
  REQUIRE(errors.size() == 4);
  CHECK(errors[2] == "bundle damaged: entry 1 has no cubin; its kernels are not used");
  CHECK(errors[3] == "bundle empty: its entries are a null pointer; its kernels are not used");
  CHECK(attn::bundleNames() == std::vector<std::string>{"first", "second"});
  CHECK(attn::bundledKernels().size() == 3);
}
