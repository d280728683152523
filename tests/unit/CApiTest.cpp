//===- CApiTest.cpp - libattnc.so's C API, as a C caller sees it ----------===//
//
// Linked against the shared library only (the C header, no C++ types): the
// version, spec checks, the spec derived from a tensors' description, null
// handles, the args size rule and, on a machine
// without a GPU, the runtime's clear refusal. With a GPU the runtime binds and
// a kernel compiles and reports its spec and workspace; tests/gpu/run-on-gpu.sh
// runs this binary on the GPU machine with ATTNC_EXPECT_GPU=1, under which a
// runtime that does not bind fails the test instead of taking the refusal path.
//
//===----------------------------------------------------------------------===//

#include "attnc/attnc.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
// The built-in tiles, whatever tuning table the machine has (`attnc tune`'s,
// read once per process at the first runtime): the tests name them.
const int kNoTuningTable = setenv("ATTNC_TUNING_FILE", "/dev/null/no-table", 1);
} // namespace

TEST_CASE("the C API reports its version and checks specs", "[capi]") {
  CHECK(std::string(attnc_version()).rfind("attnc ", 0) == 0);
  CHECK(attnc_abi_version() == ATTNC_ABI_VERSION);
  char buf[512];
  REQUIRE(attnc_spec_canonical("gqa=4 , mask=causal", buf, sizeof buf) == ATTNC_OK);
  CHECK(std::string(buf).rfind("mode=prefill,head_dim=128,dtype=bf16,", 0) == 0);
  CHECK(std::string(attnc_last_error()).empty());

  CHECK(attnc_spec_canonical("head_dim=100", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("invalid spec: head_dim = 100", 0) == 0);
  CHECK(attnc_spec_canonical("gqa=4", buf, 10) == ATTNC_ERROR_BUFFER_TOO_SMALL);
  CHECK(std::string(attnc_last_error()).find("the buffer has 10") != std::string::npos);
  CHECK(attnc_spec_canonical(nullptr, buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "spec is a null pointer");
}

TEST_CASE("ATTNC_STRING_MAX holds the longest canonical specs", "[capi]") {
  // Every number the parser takes has at most 9 digits; these specs take the
  // longest value of every field that can be given together.
  for (const char *spec :
       {"mode=decode,head_dim=256,dtype=bf16,tile_q=8,tile_kv=32,mask=sliding_window(999999999),"
        "page_size=65536,gqa=16,return_lse=true,target=sm_90a,split_kv=1024,stages=2",
        "mode=prefill,head_dim=128,tile_q=128,tile_kv=64,mma=wgmma_ws,stages=2,"
        "mask=sliding_window(999999999),page_size=65536,gqa=256,return_lse=true",
        "target=cpu,dtype=f64,tile_q=4096,tile_kv=4096,mask=sliding_window(999999999),"
        "page_size=65536,gqa=256"}) {
    char buf[ATTNC_STRING_MAX];
    INFO(spec);
    REQUIRE(attnc_spec_canonical(spec, buf, sizeof buf) == ATTNC_OK);
    // With room to spare for fields to come.
    CHECK(std::strlen(buf) < ATTNC_STRING_MAX / 2);
  }
}

TEST_CASE("the C API derives a spec from the tensors' description", "[capi]") {
  attnc_call c;
  std::memset(&c, 0, sizeof c);
  c.size = sizeof c;
  c.dtype = "bf16";
  c.head_dim = 128;
  c.num_q_heads = 32;
  c.num_kv_heads = 8;
  c.page_size = 16;
  c.max_q_len = 1;
  c.decode = -1;
  char buf[512];
  // A paged cache and one query token: the decode kernel, the group packed.
  REQUIRE(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_OK);
  std::string spec = buf;
  CHECK(spec.rfind("mode=decode,head_dim=128,dtype=bf16,tile_q=1,", 0) == 0);
  CHECK(spec.find(",mask=none,page_size=16,gqa=4,return_lse=false,target=sm_90a,split_kv=auto") !=
        std::string::npos);
  // No query token (an empty step) is no decode step: prefill, as attn::attention takes it.
  c.max_q_len = 0;
  REQUIRE(attnc_attention_spec(&c, "sm_80", buf, sizeof buf) == ATTNC_OK);
  CHECK(std::string(buf).rfind("mode=prefill,", 0) == 0);
  // Contiguous prefill with a window, lse and explicit tiles: every field fixed.
  c.page_size = 0;
  c.max_q_len = 4096;
  c.window = 512;
  c.return_lse = 1;
  c.tile_q = 64;
  c.tile_kv = 64;
  REQUIRE(attnc_attention_spec(&c, "sm_80", buf, sizeof buf) == ATTNC_OK);
  CHECK(std::string(buf) == "mode=prefill,head_dim=128,dtype=bf16,tile_q=64,tile_kv=64,"
                            "mask=sliding_window(512),page_size=0,gqa=4,return_lse=true,"
                            "target=sm_80");
  // Forced decode with 3 splits.
  c.page_size = 16;
  c.max_q_len = 2;
  c.decode = 1;
  c.split_kv = 3;
  c.window = 0;
  c.causal = 1;
  REQUIRE(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_OK);
  CHECK(std::string(buf).find("mode=decode,head_dim=128,dtype=bf16,tile_q=2,") == 0);
  CHECK(std::string(buf).find(",mask=causal,") != std::string::npos);
  CHECK(std::string(buf).find("split_kv=3") != std::string::npos);

  // What cannot be derived is named.
  c.num_q_heads = 30;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "30 query heads are not a multiple of 8 KV heads (GQA)");
  c.num_q_heads = 0; // not "0 query heads are not a multiple of 8"
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "num_q_heads = 0 must be >= 1");
  c.num_q_heads = 32;
  c.num_kv_heads = -8;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "num_kv_heads = -8 must be >= 1");
  c.num_kv_heads = 8;
  // The calls' tensors are bf16 or f16: no CPU kernel takes them.
  CHECK(attnc_attention_spec(&c, "cpu", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("target = cpu: attention calls take GPU kernels") == 0);
  c.dtype = "f32";
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("bf16 or f16") != std::string::npos);
  c.dtype = nullptr;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "call->dtype is NULL: the kernels take \"bf16\" or \"f16\"");
  c.dtype = "bf\n16";
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "call->dtype = 'bf\\x0a16': the kernels take bf16 or f16");
  c.dtype = "f16";
  CHECK(attnc_attention_spec(&c, "sm_9\r0a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("target = 'sm_9\\x0d0a': expected", 0) == 0);
  c.head_dim = 100;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("the tensors imply invalid spec: head_dim = 100") == 0);
  c.head_dim = 128;
  CHECK(attnc_attention_spec(&c, "sm_75", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error())
            .rfind("target = 'sm_75': expected a GPU architecture from sm_80 on", 0) == 0);
  // A GPU's architecture as attnc_runtime_arch gives it names its target.
  for (auto [arch, target] : {std::pair{"sm_86", "target=sm_80"}, {"sm_89", "target=sm_80"},
                              {"sm_90", "target=sm_90a"}, {"sm_90a", "target=sm_90a"}}) {
    INFO(arch);
    REQUIRE(attnc_attention_spec(&c, arch, buf, sizeof buf) == ATTNC_OK);
    CHECK(std::string(buf).find(target) != std::string::npos);
  }
  for (auto [arch, target] : {std::pair{"sm_100", "target=sm_80"},
                              {"sm_120a", "target=sm_80"},
                              {"sm_100f", "target=sm_80"},
                              {"sm_99", "target=sm_90a"}}) {
    INFO(arch);
    REQUIRE(attnc_attention_spec(&c, arch, buf, sizeof buf) == ATTNC_OK);
    CHECK(std::string(buf).find(target) != std::string::npos);
  }
  // Names of no GPU: an "a" before sm_90a, an "f" before sm_100, a
  // three-digit number past sm_19x, leading zeros, and not a number at all.
  for (const char *bad :
       {"sm_86x", "sm_+90", "sm_8", "sm_999999999999", "sm_80a", "sm_89a", "sm_90f", "sm_100af",
        "sm_900", "sm_990", "sm_0800", "sm_080", "sm_1000", "sm_200", "sm_90aa", "sm_", "sm_a"}) {
    INFO(bad);
    CHECK(attnc_attention_spec(&c, bad, buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(attnc_last_error())
              .rfind(std::string("target = '") + bad + "': expected a GPU architecture", 0) == 0);
  }
  CHECK(attnc_attention_spec(&c, nullptr, buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attnc_attention_spec(nullptr, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  c.size = 3;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("sizeof(attnc_call)") != std::string::npos);
  c.size = sizeof c;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, 8) == ATTNC_ERROR_BUFFER_TOO_SMALL);
  // A size that ends inside a field (here half of tile_q) is refused; the size
  // before tile_q and tile_kv existed is not.
  c.size = offsetof(attnc_call, tile_q) + 4;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("ends inside a field of attnc_call") !=
        std::string::npos);
  c.size = offsetof(attnc_call, tile_q);
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_OK);
  c.size = sizeof c;
  {
    // A later header's larger struct: read while its new fields are 0, refused
    // once one asks for something this attnc cannot do.
    struct Later {
      attnc_call known;
      int64_t future;
    } later;
    std::memset(&later, 0, sizeof later);
    later.known = c;
    later.known.size = sizeof later;
    REQUIRE(attnc_attention_spec(&later.known, "sm_90a", buf, sizeof buf) == ATTNC_OK);
    const std::string same = buf;
    REQUIRE(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_OK);
    CHECK(same == buf);
    later.future = 1;
    CHECK(attnc_attention_spec(&later.known, "sm_90a", buf, sizeof buf) ==
          ATTNC_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(attnc_last_error()) ==
          "call->size = " + std::to_string(sizeof later) + ", and byte " +
              std::to_string(sizeof(attnc_call)) + " is not 0: it lies past the " +
              std::to_string(sizeof(attnc_call)) + " bytes of an attnc_call this attnc (ABI " +
              "version " + std::to_string(ATTNC_ABI_VERSION) +
              ") knows, in a field of a later version that it cannot honour (leave that field "
              "0, or use a later attnc)");
  }
  // The target is a target name, not a spec whose other fields would be dropped.
  CHECK(attnc_attention_spec(&c, "sm_90a,tile_q=128", buf, sizeof buf) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) ==
        "target = 'sm_90a,tile_q=128': expected sm_80 or sm_90a alone");
  // Negative sizes the header rules out are refused, not read as their defaults.
  c.split_kv = -3;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "call->split_kv = -3: must not be negative (0: auto)");
  c.split_kv = 0;
  c.window = -3;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) ==
        "call->window = -3: must not be negative (0: no window)");
  c.window = 0;
  c.max_q_len = -1;
  CHECK(attnc_attention_spec(&c, "sm_90a", buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) ==
        "call->max_q_len = -1: must not be negative (0: an empty step, as prefill)");
}

TEST_CASE("the C API refuses null handles and foreign args", "[capi]") {
  attnc_kernel *kernel = reinterpret_cast<attnc_kernel *>(&kernel); // stale, not null
  CHECK(attnc_kernel_get(nullptr, "gqa=4", &kernel) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "runtime is a null pointer");
  CHECK(kernel == nullptr); // NULL on every failure
  CHECK(attnc_launch(nullptr, nullptr, nullptr) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "kernel is a null pointer");
  const char *specs[] = {"gqa=4"};
  attnc_kernel *kernels[1] = {reinterpret_cast<attnc_kernel *>(&kernel)}; // stale, not null
  CHECK(attnc_runtime_prepare(nullptr, specs, 1, 0, kernels) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "runtime is a null pointer");
  CHECK(kernels[0] == nullptr); // out[i] is null on every failure
  // A count no call means (n - 1 of 0): refused, and nothing past out[0] written.
  kernels[0] = reinterpret_cast<attnc_kernel *>(&kernel);
  CHECK(attnc_runtime_prepare(nullptr, specs, SIZE_MAX, 0, kernels) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("count = " + std::to_string(SIZE_MAX) + " specs: " +
                                                  "more than one call prepares (1048576",
                                              0) == 0);
  CHECK(kernels[0] == reinterpret_cast<attnc_kernel *>(&kernel));
  CHECK(attnc_runtime_prepare(nullptr, specs, ATTNC_PREPARE_MAX + 1, 0, kernels) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  kernels[0] = nullptr;
  char buf[64];
  CHECK(attnc_runtime_arch(nullptr, buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attnc_kernel_source(nullptr, buf, sizeof buf) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attnc_runtime_set_aot_only(nullptr, 1) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "runtime is a null pointer");
  attnc_runtime_destroy(nullptr); // no-ops
  attnc_kernel_release(nullptr);
}

TEST_CASE("the C API names what it cannot load as a bundle folder", "[capi]") {
  int64_t kernels = 7;
  CHECK(attnc_bundle_load(nullptr, &kernels) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "dir is a null pointer");
  CHECK(kernels == 0);
  CHECK(attnc_bundle_load("/nonexistent/bundle", nullptr) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("/nonexistent/bundle/manifest.txt: cannot open", 0) ==
        0);
  // The error is one line whatever the path holds: its control characters
  // are written as \xNN, its UTF-8 kept.
  CHECK(attnc_bundle_load("/nonexistent/a\nb\x1b[31m\xc3\xa9", nullptr) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error())
            .rfind("/nonexistent/a\\x0ab\\x1b[31m\xc3\xa9/manifest.txt: cannot open", 0) == 0);
}

TEST_CASE("the C API registers a bundle compiled into the program or names why not", "[capi]") {
  const attnc_bundle_entry blank{};
  CHECK(attnc_bundle_register("capi-stale", &blank, 1, sizeof blank - 8) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) ==
        "bundle capi-stale: compiled with entries of " + std::to_string(sizeof blank - 8) +
            " bytes, this attnc's are " + std::to_string(sizeof blank) +
            " (regenerate it with this attnc's `attnc aot`); its kernels are not used");
  CHECK(attnc_bundle_register("capi-blank", &blank, 1, sizeof blank) ==
        ATTNC_ERROR_INVALID_ARGUMENT);
  const std::string blankError = attnc_last_error();
  const std::string passes = "bundle capi-blank: its kernels take arguments of 0 bytes, this attnc passes ";
  REQUIRE(blankError.rfind(passes, 0) == 0);
  // An entry's spec is quoted on one line, its control characters as \xNN.
  const unsigned char byte = 0;
  attnc_bundle_entry odd{};
  odd.spec = "head_dim=6\n4";
  odd.arch = "sm_80";
  odd.cubin = &byte;
  odd.cubin_size = 1;
  odd.threads = 128;
  odd.params_bytes = std::stoul(blankError.substr(passes.size()));
  CHECK(attnc_bundle_register("capi-odd", &odd, 1, sizeof odd) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("bundle capi-odd: entry 0 (head_dim=6\\x0a4): ", 0) ==
        0);
  // A bundle of no kernels registers, and registering it again (the same
  // kernels: none) is the same bundle, not a clash; a failed call before it
  // leaves no stale message.
  CHECK(attnc_bundle_register("capi-none", &blank, 0, sizeof blank) == ATTNC_OK);
  CHECK(std::string(attnc_last_error()).empty());
  CHECK(attnc_bundle_register("capi-none", nullptr, 0, 3) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attnc_bundle_register("capi-none", &blank, 0, sizeof blank) == ATTNC_OK);
  CHECK(std::string(attnc_last_error()).empty());
}

TEST_CASE("the C API runtime binds to a GPU or says why not", "[capi]") {
  attnc_runtime *rt = nullptr;
  const attnc_status status = attnc_runtime_create(nullptr, &rt);
  if (status != ATTNC_OK) {
    // tests/gpu/run-on-gpu.sh sets ATTNC_EXPECT_GPU: there a refusal is a failure.
    const char *expect = std::getenv("ATTNC_EXPECT_GPU");
    if (expect && *expect && std::string(expect) != "0")
      FAIL("ATTNC_EXPECT_GPU is set, but the runtime did not bind: " << attnc_last_error());
    // No GPU here: a clear refusal, no handle.
    CHECK(status == ATTNC_ERROR_NO_GPU);
    CHECK(rt == nullptr);
    const std::string why = attnc_last_error();
    INFO(why);
    CHECK((why.find("CUDA driver") != std::string::npos ||
           why.find("device") != std::string::npos));
    return;
  }
  char arch[32];
  REQUIRE(attnc_runtime_arch(rt, arch, sizeof arch) == ATTNC_OK);
  attnc_kernel *kernel = nullptr;
  REQUIRE(attnc_kernel_get(rt, "mode=decode,page_size=16,gqa=4,split_kv=3", &kernel) == ATTNC_OK);
  char spec[512];
  REQUIRE(attnc_kernel_spec(kernel, spec, sizeof spec) == ATTNC_OK);
  // The spec target of the GPU: sm_90a on 9.x, sm_80 on every 8.x.
  const std::string target = std::string(arch) == "sm_90a" ? "sm_90a" : "sm_80";
  CHECK(std::string(spec).find("target=" + target) != std::string::npos);
  attnc_args args;
  std::memset(&args, 0, sizeof args);
  args.size = 4; // not an attnc_args
  uint64_t bytes = 0;
  CHECK(attnc_kernel_workspace_bytes(kernel, &args, &bytes) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("args->size = 4", 0) == 0);
  args.size = offsetof(attnc_args, scale) + 4; // half of scale
  CHECK(attnc_kernel_workspace_bytes(kernel, &args, &bytes) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("ends inside a field of attnc_args") !=
        std::string::npos);
  args.size = sizeof args;
  args.batch = 2;
  args.num_q_heads = 8;
  args.num_kv_heads = 2;
  args.total_q = 2;
  args.max_q_len = 1;
  args.max_kv_len = 100;
  // Asked before any device pointer exists. 3 splits: on sm_90a they merge in a
  // thread-block cluster (no workspace); on sm_80 through the merge kernel, from
  // fp32 partial outputs and lse: splits x total_q x heads x (head_dim + 1) floats.
  REQUIRE(attnc_kernel_workspace_bytes(kernel, &args, &bytes) == ATTNC_OK);
  CHECK(bytes == (target == "sm_90a" ? 0u : 3u * 2 * 8 * 129 * 4));
  // 20 splits are more than a cluster takes (16 at most): the merge kernel's workspace.
  args.num_splits = 20;
  REQUIRE(attnc_kernel_workspace_bytes(kernel, &args, &bytes) == ATTNC_OK);
  CHECK(bytes == 20u * 2 * 8 * 129 * 4);
  args.num_splits = 0;
  // Missing pointers: refused before anything is launched.
  CHECK(attnc_launch(kernel, &args, nullptr) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("null pointer") != std::string::npos);
  attnc_kernel_release(kernel);
  // Model load: two kernels at once; a bad spec names its index.
  const char *model[] = {"mode=prefill,page_size=16,gqa=4,mask=causal",
                         "mode=decode,page_size=16,gqa=4"};
  attnc_kernel *loaded[2] = {nullptr, nullptr};
  REQUIRE(attnc_runtime_prepare(rt, model, 2, 2, loaded) == ATTNC_OK);
  CHECK(loaded[0] != nullptr);
  CHECK(loaded[1] != nullptr);
  // Where each came from: this process compiled it or read it from the disk cache.
  char source[16];
  REQUIRE(attnc_kernel_source(loaded[0], source, sizeof source) == ATTNC_OK);
  CHECK((std::string(source) == "compiled" || std::string(source) == "disk"));
  attnc_kernel_release(loaded[0]);
  attnc_kernel_release(loaded[1]);
  // AOT only: a spec no bundle holds is refused as such; one got before is still served.
  REQUIRE(attnc_runtime_set_aot_only(rt, 1) == ATTNC_OK);
  attnc_kernel *unbundled = reinterpret_cast<attnc_kernel *>(arch); // not null
  CHECK(attnc_kernel_get(rt, "mode=decode,head_dim=96,page_size=16,gqa=4", &unbundled) ==
        ATTNC_ERROR_NOT_BUNDLED);
  CHECK(std::string(attnc_last_error()).find("is in no AOT bundle built for " + std::string(arch)) !=
        std::string::npos);
  CHECK(unbundled == nullptr);
  REQUIRE(attnc_kernel_get(rt, model[1], &unbundled) == ATTNC_OK);
  REQUIRE(attnc_kernel_source(unbundled, source, sizeof source) == ATTNC_OK);
  CHECK(std::string(source) == "memory");
  attnc_kernel_release(unbundled);
  if (std::string(arch) == "sm_90a") {
    // A long head_dim 64 prefill's 192 x 128 tiles, held by no bundle: served
    // by the kernel of the default tiles (got before, as a bundled one is).
    const char *shortTiles = "mode=prefill,head_dim=64,mask=causal";
    const char *longTiles = "mode=prefill,head_dim=64,mask=causal,tile_q=192,tile_kv=128";
    REQUIRE(attnc_runtime_set_aot_only(rt, 0) == ATTNC_OK);
    attnc_kernel *got = nullptr;
    REQUIRE(attnc_kernel_get(rt, shortTiles, &got) == ATTNC_OK);
    attnc_kernel_release(got);
    REQUIRE(attnc_runtime_set_aot_only(rt, 1) == ATTNC_OK);
    got = nullptr;
    REQUIRE(attnc_kernel_get(rt, longTiles, &got) == ATTNC_OK);
    char served[512];
    REQUIRE(attnc_kernel_spec(got, served, sizeof served) == ATTNC_OK);
    CHECK(std::string(served).find("tile_q=64,tile_kv=64") != std::string::npos);
    attnc_kernel_release(got);
    // Nor the default tiles got: refused, and the error names both.
    got = nullptr;
    CHECK(attnc_kernel_get(rt, "mode=prefill,head_dim=64,page_size=16,tile_q=192,tile_kv=128",
                           &got) == ATTNC_ERROR_NOT_BUNDLED);
    CHECK(std::string(attnc_last_error())
              .find("those of a long head_dim 64 prefill, and no bundle holds the default ones") !=
          std::string::npos);
    CHECK(got == nullptr);
    // A window mask keeps its tiles: refused, not served by other ones.
    got = nullptr;
    CHECK(attnc_kernel_get(rt, "mode=prefill,head_dim=64,mask=sliding_window(64),tile_q=192,"
                               "tile_kv=128",
                           &got) == ATTNC_ERROR_NOT_BUNDLED);
    CHECK(got == nullptr);
  }
  REQUIRE(attnc_runtime_set_aot_only(rt, 0) == ATTNC_OK);
  const char *bad[] = {"gqa=4", "head_dim=7"};
  // On failure every out[i] is null, whatever it held before.
  attnc_kernel *const stale = reinterpret_cast<attnc_kernel *>(arch); // any non-null value
  loaded[0] = loaded[1] = stale;
  CHECK(attnc_runtime_prepare(rt, bad, 2, 0, loaded) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("specs[1]: invalid spec: head_dim = 7", 0) == 0);
  CHECK(loaded[0] == nullptr);
  CHECK(loaded[1] == nullptr);
  // A spec this GPU cannot run is a bad argument, not a failed compile.
  attnc_kernel *cpu = nullptr;
  CHECK(attnc_kernel_get(rt, "target=cpu,dtype=f32", &cpu) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("target is cpu") != std::string::npos);
  CHECK(cpu == nullptr);
  attnc_runtime_destroy(rt);
}

TEST_CASE("the C API hands out KV-cache pages a window at a time", "[capi]") {
  int64_t perWindow = 0, first = 0;
  REQUIRE(attnc_pages_window(32768, 0, &perWindow, &first) == ATTNC_OK);
  CHECK(perWindow == 64);
  CHECK(first == 64);
  CHECK(attnc_pages_window(0, 0, &perWindow, &first) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("a page of 0 bytes", 0) == 0);
  CHECK(attnc_pages_window(32768, 0, nullptr, &first) == ATTNC_ERROR_INVALID_ARGUMENT);

  attnc_pages *pages = nullptr;
  CHECK(attnc_pages_create(0, 64, 0, &pages) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).rfind("num_pages = 0", 0) == 0);
  CHECK(pages == nullptr);
  CHECK(attnc_pages_create(128, 64, 0, nullptr) == ATTNC_ERROR_INVALID_ARGUMENT);
  REQUIRE(attnc_pages_create(128, 64, 0, &pages) == ATTNC_OK);
  int32_t rows[2][3];
  for (int i = 0; i < 3; ++i) // two sequences, one page each in turn
    for (int s = 0; s < 2; ++s)
      REQUIRE(attnc_pages_allocate(pages, 7 + s, 1, &rows[s][i]) == ATTNC_OK);
  CHECK(rows[0][0] == 0); // each in a window of its own: 0-63 and 64-127
  CHECK(rows[0][2] == 2);
  CHECK(rows[1][0] == 64);
  CHECK(rows[1][2] == 66);
  int32_t row[200];
  int64_t n = -1;
  REQUIRE(attnc_pages_windows(pages, 7, &n) == ATTNC_OK);
  CHECK(n == 1);
  REQUIRE(attnc_pages_free_count(pages, &n) == ATTNC_OK);
  CHECK(n == 122);
  CHECK(attnc_pages_allocate(pages, 9, 200, row) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()).find("only 122 of the cache's 128") != std::string::npos);
  CHECK(attnc_pages_release(pages, 7) == ATTNC_OK);
  CHECK(attnc_pages_release(pages, 7) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnc_last_error()) == "sequence 7 holds no pages");
  CHECK(attnc_pages_allocate(nullptr, 1, 1, row) == ATTNC_ERROR_INVALID_ARGUMENT);
  CHECK(attnc_pages_free_count(nullptr, &n) == ATTNC_ERROR_INVALID_ARGUMENT);
  attnc_pages_destroy(pages);
  attnc_pages_destroy(nullptr);
}
