//===- CppApiTest.cpp - attnc.hpp: the C++ classes over the C API ---------===//
//
// Linked against libattnc.so alone, as an application that found the
// installed package is. Without a GPU the runtime's refusal is checked; on
// the GPU machine (ATTNC_EXPECT_GPU=1, tests/gpu/run-on-gpu.sh) the kernels.
//
//===----------------------------------------------------------------------===//

#include "attnc/attnc.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {
bool expectGpu() {
  const char *expect = std::getenv("ATTNC_EXPECT_GPU");
  return expect && *expect && std::string(expect) != "0";
}

/// The status an attnc::Error carries, and that its message holds `text`.
template <typename Call> attnc_status thrown(Call call, const std::string &text) {
  try {
    call();
  } catch (const attnc::Error &e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(text) != std::string::npos);
    return e.status();
  }
  FAIL("no attnc::Error thrown (expected one saying: " << text << ")");
  return ATTNC_OK;
}
} // namespace

TEST_CASE("attnc.hpp gives specs and throws attnc::Error naming a bad one", "[cpp]") {
  CHECK(attnc::version().rfind("attnc ", 0) == 0);
  CHECK(attnc::abiVersion() >= 5);
  const std::string spec = attnc::canonicalSpec("gqa=4, mask=causal");
  CHECK(spec.rfind("mode=prefill,head_dim=128,dtype=bf16,", 0) == 0);
  CHECK(thrown([] { attnc::canonicalSpec("head_dim=100"); },
               "spec head_dim=100: invalid spec: head_dim = 100") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  attnc_call call = attnc::makeCall();
  call.dtype = "bf16";
  call.head_dim = 128;
  call.num_q_heads = 32;
  call.num_kv_heads = 8;
  call.page_size = 16;
  call.max_q_len = 1; // decode left to attnc (makeCall's -1): one token of a paged cache
  CHECK(attnc::attentionSpec(call, "sm_90a").rfind("mode=decode,head_dim=128,", 0) == 0);
  CHECK(attnc::attentionSpec(call, "sm_86").find("target=sm_80") != std::string::npos);
  CHECK(thrown([&] { attnc::attentionSpec(call, ""); }, "target is needed") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  call.size = 4; // not an attnc_call
  CHECK(thrown([&] { attnc::attentionSpec(call, "sm_90a"); }, "call->size = 4") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(thrown([] { attnc::loadBundle("/nonexistent/bundle"); },
               "loading the bundle /nonexistent/bundle: /nonexistent/bundle/manifest.txt: "
               "cannot open") == ATTNC_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("attnc.hpp reads a text of any length, growing its buffer", "[cpp]") {
  const std::string longText(1000, 'x');
  int calls = 0;
  auto writes = [&](const std::string &text) {
    return [&, text](char *out, size_t size) {
      ++calls;
      if (text.size() + 1 > size)
        return ATTNC_ERROR_BUFFER_TOO_SMALL;
      std::memcpy(out, text.c_str(), text.size() + 1);
      return ATTNC_OK;
    };
  };
  CHECK(attnc::detail::text(writes(longText), "long") == longText);
  CHECK(calls == 2); // 256 bytes, then 1024: the 1001 fit
  // A text that never fits stops at 1 MiB with the call's status, not a loop.
  calls = 0;
  CHECK(thrown([&] { attnc::detail::text([&](char *, size_t) { ++calls; return ATTNC_ERROR_BUFFER_TOO_SMALL; }, "endless"); },
               "endless: ") == ATTNC_ERROR_BUFFER_TOO_SMALL);
  CHECK(calls == 7); // 256 bytes x 4 each time, up to 1 MiB
}

TEST_CASE("attnc.hpp's page allocator hands out windows and refuses by name", "[cpp]") {
  attnc::PageAllocator pages(8, 4);
  CHECK(pages.allocate(1, 3) == std::vector<int32_t>{0, 1, 2});
  CHECK(pages.allocate(2).size() == 1);
  CHECK(pages.freePages() == 4);
  CHECK(pages.windows(1) == 1);
  // More than are free: refused whole, nothing taken.
  CHECK(thrown([&] { pages.allocate(3, 5); }, "asks for 5 pages, but only 4") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(thrown([&] { pages.allocate(3, -1); }, "count = -1") == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(pages.freePages() == 4);
  pages.release(1);
  CHECK(pages.freePages() == 7);
  CHECK(thrown([] { attnc::PageAllocator(0, 4); }, "page allocator: ") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  const std::pair<int64_t, int64_t> w = attnc::PageAllocator::window(32768);
  CHECK(w.first == 64); // 2 MiB of 32 KiB pages
  CHECK(w.second == 64);
}

TEST_CASE("attnc.hpp's runtime gets kernels, or throws saying there is no GPU", "[cpp]") {
  std::unique_ptr<attnc::Runtime> rt;
  try {
    rt = std::make_unique<attnc::Runtime>();
  } catch (const attnc::Error &e) {
    if (expectGpu())
      FAIL("ATTNC_EXPECT_GPU is set, but the runtime did not bind: " << e.what());
    CHECK(e.status() == ATTNC_ERROR_NO_GPU);
    CHECK(std::string(e.what()).rfind("attnc runtime: ", 0) == 0);
    return;
  }
  const std::string arch = rt->arch();
  CHECK(arch.rfind("sm_", 0) == 0);
  attnc::Kernel k = rt->kernel("mode=decode,page_size=16,gqa=4,split_kv=3");
  CHECK(k.spec().find("split_kv=3") != std::string::npos);
  CHECK((k.source() == "compiled" || k.source() == "disk"));
  attnc_args args = attnc::makeArgs();
  args.batch = 2;
  args.num_q_heads = 8;
  args.num_kv_heads = 2;
  args.total_q = 2;
  args.max_q_len = 1;
  args.max_kv_len = 100;
  args.num_splits = 20; // more than a cluster merges: the merge kernel's workspace
  CHECK(k.workspaceBytes(args) == 20u * 2 * 8 * 129 * 4);
  args.num_splits = 0;
  // No device pointers: refused by name before anything is launched.
  CHECK(thrown([&] { k.launch(args); }, "launch: ") == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(thrown([&] { k.launch(args); }, "null pointer") == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(thrown([&] { k.checkArguments(args); }, "checking the arguments: ") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  std::vector<attnc::Kernel> model =
      rt->prepare({"mode=prefill,page_size=16,gqa=4,mask=causal", "mode=decode,page_size=16,gqa=4"});
  REQUIRE(model.size() == 2);
  CHECK(model[0].spec().find("mode=prefill") == 0);
  CHECK(thrown([&] { rt->prepare({"gqa=4", "head_dim=7"}); },
               "preparing kernels: specs[1]: invalid spec: head_dim = 7") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  // AOT only: refused as not bundled; a kernel got before is served from memory.
  rt->setAotOnly(true);
  CHECK(thrown([&] { rt->kernel("mode=decode,head_dim=96,page_size=16,gqa=4"); },
               "is in no AOT bundle built for " + arch) == ATTNC_ERROR_NOT_BUNDLED);
  CHECK(rt->kernel("mode=decode,page_size=16,gqa=4").source() == "memory");
  // A kernel outlives its runtime (bound to the primary context, kept for the process).
  rt.reset();
  CHECK(k.spec().find("mode=decode") == 0);
  CHECK(k.workspaceBytes(args) == 3u * 2 * 8 * 129 * 4 * (arch == "sm_90a" ? 0 : 1));
  CHECK(thrown([&] { k.launch(args); }, "null pointer") == ATTNC_ERROR_INVALID_ARGUMENT);
  // A moved-from runtime refuses by name rather than crash.
  attnc::Runtime moved;
  attnc::Runtime taken = std::move(moved);
  CHECK(thrown([&] { moved.arch(); }, "runtime is a null pointer") ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(taken.arch() == arch);
}
