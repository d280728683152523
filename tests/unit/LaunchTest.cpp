//===- LaunchTest.cpp - The runtime's argument checks, without a GPU ------===//
//
// Kernel::launch refuses arguments that do not fit the spec before anything
// is enqueued; these are the checks it runs (host side) and the checking
// mode's (on host copies of the index arrays), with their messages.
//
//===----------------------------------------------------------------------===//

#include "attnc/Kernel.h"

#include <limits>

#include <catch2/catch.hpp>

using namespace attn;

namespace {
Spec spec(const std::string &text) {
  SpecResult r = parseSpec(text);
  REQUIRE(r);
  return *r.spec;
}

/// Good arguments for a paged decode batch of 4 sequences (lengths up to
/// 1000, 8 query heads over 2 KV heads) at made-up aligned addresses.
AttentionArgs pagedDecode() {
  AttentionArgs a;
  a.q = 0x10000;
  a.k = 0x20000;
  a.v = 0x30000;
  a.o = 0x40000;
  a.lse = 0x50000;
  a.cu_seqlens_q = 0x60000;
  a.seq_lens_k = 0x70000;
  a.block_table = 0x80000;
  a.batch = 4;
  a.num_q_heads = 8;
  a.num_kv_heads = 2;
  a.total_q = 4;
  a.max_q_len = 1;
  a.max_kv_len = 1000;
  a.num_pages = 300;
  a.block_table_stride = 63;
  return a;
}

std::string check(const Spec &s, const AttentionArgs &a) {
  return validateArgs(s, a, chooseSplits(s, a, 132, 3));
}
} // namespace

TEST_CASE("a paged cache's strides default to the packed layout and take any other",
          "[launch]") {
  const Spec s = spec("mode=decode,page_size=16,gqa=4,head_dim=128,split_kv=1");
  AttentionArgs a = pagedDecode(); // 2 KV heads
  KVStrides st = kvStrides(s, a);
  CHECK((st.page == 16 * 2 * 128 && st.token == 2 * 128 && st.head == 128));
  kernel::Params p = makeParams(s, a, 1);
  CHECK((p.kv_page_stride == st.page && p.kv_token_stride == st.token && p.kv_head_stride == st.head));
  // Heads before tokens, one given stride at a time: the others keep their defaults.
  a.kv_token_stride = 128;
  a.kv_head_stride = 16 * 128;
  st = kvStrides(s, a);
  CHECK((st.page == 16 * 2 * 128 && st.token == 128 && st.head == 16 * 128));
  CHECK(check(s, a) == "");
  // A pool per head far apart: the head stride may pass 2^31 elements.
  a.kv_page_stride = 16 * 128;
  a.kv_head_stride = int64_t(3) << 31;
  CHECK(check(s, a) == "");
  CHECK(makeParams(s, a, 1).kv_head_stride == int64_t(3) << 31);
  // A contiguous cache has one layout.
  AttentionArgs c = pagedDecode();
  c.cu_seqlens_k = 0x90000;
  c.total_kv = 4000;
  c.kv_token_stride = 512;
  CHECK(check(spec("gqa=4,head_dim=64"), c).rfind("kv_page_stride, kv_token_stride and "
                                                  "kv_head_stride are for paged caches", 0) == 0);
  c.kv_token_stride = 0;
  CHECK(kvStrides(spec("gqa=4,head_dim=64"), c).token == 0);
}

TEST_CASE("a workspace too large to count is refused, not counted as none", "[launch]") {
  // 1024 splits of 2^31 - 1 queries of 65532 heads of 129 floats: past 2^64 bytes.
  const Spec s = spec("mode=decode,page_size=16,gqa=4,head_dim=128");
  AttentionArgs a = pagedDecode();
  a.num_kv_heads = 16383;
  a.num_q_heads = 4 * 16383;
  a.total_q = (int64_t(1) << 31) - 1;
  a.max_q_len = 1; // 2^31 - 1 one-token sequences' worth of rows
  a.batch = 1;
  a.num_splits = 1024;
  CHECK(workspaceBytes(s, a, 1024) == SIZE_MAX);
  CHECK(validateArgs(s, a, 1024) == "1024 KV splits of total_q = 2147483647 queries would need a "
                                    "workspace of 2^63 bytes or more");
  // Between 2^63 and 2^64 bytes the count fits a size_t but not the int64 a
  // workspace size is returned as: refused too. 8192 heads: 9.3e18 bytes.
  a.num_kv_heads = 2048;
  a.num_q_heads = 4 * 2048;
  const size_t bytes = workspaceBytes(s, a, 1024);
  CHECK(bytes != SIZE_MAX);
  CHECK(bytes > size_t(std::numeric_limits<int64_t>::max()));
  CHECK(validateArgs(s, a, 1024) == "1024 KV splits of total_q = 2147483647 queries would need a "
                                    "workspace of 2^63 bytes or more");
}

TEST_CASE("negative totals and lengths are named", "[launch]") {
  AttentionArgs c = pagedDecode();
  c.cu_seqlens_k = 0x90000;
  c.total_kv = -5; // not "max_kv_len = ... is more than total_kv = -5"
  CHECK(check(spec("gqa=4,head_dim=64"), c) ==
        "total_q, total_kv, max_q_len and max_kv_len must be >= 0");
}

TEST_CASE("good arguments pass the launch checks", "[launch]") {
  const Spec s = spec("mode=decode,page_size=16,gqa=4,split_kv=1,return_lse=true");
  CHECK(check(s, pagedDecode()) == "");
  AttentionArgs contiguous = pagedDecode();
  contiguous.cu_seqlens_k = 0x90000;
  contiguous.total_kv = 4000;
  CHECK(check(spec("gqa=4,head_dim=64"), contiguous) == "");
}

TEST_CASE("bad arguments are refused with a message naming the argument", "[launch]") {
  const Spec s = spec("mode=decode,page_size=16,gqa=4,split_kv=1,return_lse=true");
  struct Case {
    const char *want;
    void (*edit)(AttentionArgs &);
  };
  const Case cases[] = {
      {"q is a null pointer", [](AttentionArgs &a) { a.q = 0; }},
      {"o is a null pointer", [](AttentionArgs &a) { a.o = 0; }},
      {"k = 0x20008 is not 16-byte aligned", [](AttentionArgs &a) { a.k += 8; }},
      {"cu_seqlens_q = 0x60002 is not 4-byte aligned", [](AttentionArgs &a) { a.cu_seqlens_q += 2; }},
      {"lse is a null pointer, and the spec has return_lse = true", [](AttentionArgs &a) { a.lse = 0; }},
      {"block_table is a null pointer", [](AttentionArgs &a) { a.block_table = 0; }},
      {"num_q_heads = 9 but the spec's gqa = 4 with num_kv_heads = 2 needs 8",
       [](AttentionArgs &a) { a.num_q_heads = 9; }},
      {"num_kv_heads = 0 must be >= 1", [](AttentionArgs &a) { a.num_kv_heads = 0; }},
      {"max_kv_len = 1000 needs 63 pages of 16 tokens, but block_table_stride = 62",
       [](AttentionArgs &a) { a.block_table_stride = 62; }},
      {"num_pages = 0", [](AttentionArgs &a) { a.num_pages = 0; }},
      {"num_pages = 134217728: a paged cache of 16-token pages needs 1..134217727 pages",
       [](AttentionArgs &a) { a.num_pages = int64_t(1) << 27; }},
      {"max_q_len = 5 is more than total_q = 4", [](AttentionArgs &a) { a.max_q_len = 5; }},
      {"batch = 70000 is over the grid limit", [](AttentionArgs &a) { a.batch = 70000; }},
      {"scale = nan", [](AttentionArgs &a) { a.scale = std::nan(""); }},
      {"scale = 3e+38 is too large: scale x log2(e) must fit in f32",
       [](AttentionArgs &a) { a.scale = 3e38; }},
      {"scale = 1e-39 is too small: scale x log2(e) must be a normal f32",
       [](AttentionArgs &a) { a.scale = 1e-39; }},
      // Sizes past what the int32 offsets and rows can hold, and forgotten fields.
      {"total_q = 4611686018427387904, total_kv = 0: the int32 offsets (cu_seqlens) take totals "
       "below 2^31",
       [](AttentionArgs &a) { a.total_q = int64_t(1) << 62; }},
      {"max_q_len = 0 but total_q = 4: max_q_len is the longest sequence's query tokens",
       [](AttentionArgs &a) { a.max_q_len = 0; }},
      {"num_splits = -3 is negative (0: the spec's split_kv)",
       [](AttentionArgs &a) { a.num_splits = -3; }},
      {"block_table_stride = 4611686018427387904 is more than the 134217728 pages of 16 tokens",
       [](AttentionArgs &a) { a.block_table_stride = int64_t(1) << 62; }},
      {"max_q_len = 1073741824 query tokens of gqa = 4 heads each make more than 2^31 - 1 rows",
       [](AttentionArgs &a) { a.total_q = a.max_q_len = int64_t(1) << 30; }},
      {"num_splits = 2000 must be in 1..1024", [](AttentionArgs &a) { a.num_splits = 2000; }},
      {"kv_head_stride = 100 elements is not a multiple of 8",
       [](AttentionArgs &a) { a.kv_head_stride = 100; }},
      {"kv_page_stride = -8 is negative", [](AttentionArgs &a) { a.kv_page_stride = -8; }},
      {"kv_page_stride = 2147483648, kv_token_stride = 256: the kernels need the page stride and "
       "page_size (16) times the token stride below 2^31",
       [](AttentionArgs &a) { a.kv_page_stride = int64_t(1) << 31; }},
      {"kv_page_stride = 4096, kv_token_stride = 134217728: the kernels need",
       [](AttentionArgs &a) { a.kv_token_stride = int64_t(1) << 27; }},
      {"workspace is a null pointer: 3 KV splits need 4 * 8 * 129 * 4 bytes",
       [](AttentionArgs &a) { a.num_splits = 3; }},
  };
  for (const Case &c : cases) {
    AttentionArgs a = pagedDecode();
    c.edit(a);
    const std::string got = check(s, a);
    INFO(c.want << " <- " << got);
    // The workspace message gives the computed size.
    if (std::string(c.want).rfind("workspace", 0) == 0)
      CHECK(got == "workspace is a null pointer: 3 KV splits need " +
                       std::to_string(3 * 4 * 8 * 129 * 4) + " bytes");
    else
      CHECK(got.rfind(c.want, 0) == 0);
  }
  AttentionArgs a = pagedDecode();
  a.num_splits = 3;
  a.workspace = 0xa0000;
  a.workspace_bytes = 100;
  CHECK(check(s, a) == "workspace_bytes = 100 but 3 KV splits need " +
                           std::to_string(3 * 4 * 8 * 129 * 4));
  a.workspace_bytes = workspaceBytes(s, a, 3);
  CHECK(check(s, a) == "");
  // Splits that merge in a cluster write no partial results: no workspace.
  a.workspace = 0;
  a.workspace_bytes = 0;
  CHECK(validateArgs(s, a, 3, /*without_workspace=*/true) == "");
  CHECK(validateArgs(s, a, 3).rfind("workspace is a null pointer: 3 KV splits need", 0) == 0);
  // The sizes alone, as a workspace query checks them: no pointer, no cache geometry.
  AttentionArgs sizes = pagedDecode();
  sizes.q = sizes.k = sizes.v = sizes.o = sizes.lse = sizes.cu_seqlens_q = sizes.seq_lens_k =
      sizes.block_table = 0;
  sizes.num_pages = sizes.block_table_stride = 0;
  CHECK(validateSizes(s, sizes, 3) == "");
  CHECK(validateArgs(s, sizes, 3) == "q is a null pointer");
  sizes.max_q_len = 0;
  CHECK(validateSizes(s, sizes, 3).rfind("max_q_len = 0 but total_q = 4", 0) == 0);
  sizes.max_q_len = 1;
  CHECK(validateSizes(s, sizes, 0) == "num_splits = 0 must be in 1..1024");
  // A contiguous cache needs its offsets; prefill never splits.
  AttentionArgs c = pagedDecode();
  CHECK(check(spec("gqa=4"), c) == "cu_seqlens_k is a null pointer (a contiguous KV cache needs it)");
  c.cu_seqlens_k = 0x90000;
  c.total_kv = 999;
  CHECK(check(spec("gqa=4"), c) == "max_kv_len = 1000 is more than total_kv = 999");
  c.total_kv = 1000;
  c.num_splits = 2;
  CHECK(check(spec("gqa=4"), c) == "num_splits = 2: prefill kernels do not split the KV range");
  CHECK(check(spec("target=cpu,gqa=4"), pagedDecode()).find("target is cpu") != std::string::npos);

  // Decode over a contiguous cache: the offsets as for prefill, the splits' workspace as
  // for paged decode, and no table or page strides.
  const Spec contiguous = spec("mode=decode,gqa=4,return_lse=true");
  AttentionArgs d = pagedDecode();
  d.seq_lens_k = d.block_table = 0;
  d.num_pages = d.block_table_stride = 0;
  d.num_splits = 1;
  CHECK(check(contiguous, d) == "cu_seqlens_k is a null pointer (a contiguous KV cache needs it)");
  d.cu_seqlens_k = 0x90000;
  d.total_kv = 4000;
  CHECK(check(contiguous, d) == "");
  d.num_splits = 3;
  CHECK(check(contiguous, d) == "workspace is a null pointer: 3 KV splits need " +
                                    std::to_string(3 * 4 * 8 * 129 * 4) + " bytes");
  d.workspace = 0xa0000;
  d.workspace_bytes = workspaceBytes(contiguous, d, 3);
  CHECK(check(contiguous, d) == "");
  d.kv_token_stride = 1024;
  CHECK(check(contiguous, d).rfind("kv_page_stride, kv_token_stride and kv_head_stride are for "
                                   "paged caches", 0) == 0);
  d.kv_token_stride = 0;
  d.total_kv = 999;
  CHECK(check(contiguous, d) == "max_kv_len = 1000 is more than total_kv = 999");
}

TEST_CASE("split_kv = auto fills the GPU in whole waves, keeps splits long enough and counts the merge",
          "[launch]") {
  const Spec autoSplit = spec("mode=decode,page_size=16,gqa=4");
  AttentionArgs a = pagedDecode();
  // 8 x 8 = 64 blocks, 512 tiles of 64 keys; 132 SMs x 3 blocks = 396 at once.
  // 2 splits (128 blocks) leave SMs idle and the rest with a lone block; 3 (192)
  // still leave 72 SMs with one; 4 (256) give nearly every SM two, worth more
  // than the merge kernel (measured at two blocks per SM: 4 splits 1.8 % faster
  // than 3 merged in clusters).
  a.batch = 8;
  a.num_kv_heads = 8;
  a.max_kv_len = 32768;
  CHECK(chooseSplits(autoSplit, a, 132, 3) == 4);
  CHECK(chooseSplits(autoSplit, a, 132, 2, [](int n) { return n <= 3; }) == 4);
  // One sequence: 8 blocks of 512 tiles, 264 at once. Through the merge kernel
  // 32 splits (256 blocks of 17 tiles) beat 16 (128 lone blocks of 33); merged in
  // clusters of up to 16, with no merge kernel, 16 win: measured 2.9 % faster.
  a.batch = 1;
  CHECK(chooseSplits(autoSplit, a, 132, 2) == 32);
  CHECK(chooseSplits(autoSplit, a, 132, 2, [](int n) { return n <= 16; }) == 16);
  // With two stages a lone block has one tile in flight and streams about 20 %
  // slower: 32 through the merge kernel win (measured: 2673 GB/s against 2444).
  CHECK(chooseSplits(spec("mode=decode,page_size=16,gqa=4,stages=2"), a, 132, 2,
                     [](int n) { return n <= 16; }) == 32);
  // 512 blocks of 16 tiles, 396 at once: unsplit, one full wave (17 tiles of
  // time) and 116 lone blocks (5.9); 2 splits, two full waves of 9 tiles and 232
  // blocks (23.4), plus the merge kernel: measured slower on the H200.
  a.batch = 64;
  a.max_kv_len = 1024;
  CHECK(chooseSplits(autoSplit, a, 132, 3) == 1);
  // 2 x 8 = 16 blocks of 64 tiles, 264 at once: 8 splits (128 lone blocks of 9
  // tiles, half a wave's time) beat 16 (256 blocks of 5), merged either way.
  a.batch = 2;
  a.max_kv_len = 4096;
  CHECK(chooseSplits(autoSplit, a, 132, 2) == 8);
  CHECK(chooseSplits(autoSplit, a, 132, 2, [](int n) { return n <= 8; }) == 8);
  // With one block per SM (four stages) 16 splits take two waves of 5 tiles, 8
  // one of 9: 8 win (measured on the H200: 1564 GB/s against 1294).
  CHECK(chooseSplits(autoSplit, a, 132, 1) == 8);
  CHECK(chooseSplits(autoSplit, a, 132, 1, [](int) { return false; }) == 8);
  // Enough blocks for many full waves: no split.
  a.batch = 64 * 33;
  CHECK(chooseSplits(autoSplit, a, 132, 1) == 1);
  a.batch = 8;
  a.max_kv_len = 100; // 2 tiles: too short to split
  CHECK(chooseSplits(autoSplit, a, 132, 3) == 1);
  CHECK(chooseSplits(spec("mode=decode,page_size=16,split_kv=5"), a, 132, 3) == 5);
  a.num_splits = 2; // the caller's choice wins
  CHECK(chooseSplits(autoSplit, a, 132, 3) == 2);
  CHECK(chooseSplits(spec("gqa=4"), a, 132, 3) == 1);
}

TEST_CASE("the checking mode reads offsets, lengths and block-table entries", "[launch]") {
  const Spec s = spec("mode=decode,page_size=16,gqa=4,split_kv=1,return_lse=true");
  AttentionArgs a = pagedDecode();
  a.block_table_stride = 63;
  std::vector<int32_t> cuQ = {0, 1, 2, 3, 4}, lens = {1, 16, 17, 1000};
  std::vector<int32_t> table(4 * 63, -1); // unused entries may hold anything
  table[0] = 5;
  table[63] = 6;
  table[126] = 7;
  table[127] = 8;
  for (int i = 0; i < 63; ++i)
    table[189 + i] = 100 + i;
  CHECK(checkSequenceArrays(s, a, cuQ, {}, lens, table) == "");

  auto broken = table;
  broken[127] = 300;
  CHECK(checkSequenceArrays(s, a, cuQ, {}, lens, broken) ==
        "block_table[2][1] = 300 is outside the cache's 300 pages");
  broken = table;
  broken[189 + 62] = -1;
  CHECK(checkSequenceArrays(s, a, cuQ, {}, lens, broken) ==
        "block_table[3][62] = -1 is outside the cache's 300 pages");
  auto longer = lens;
  longer[1] = 1001;
  CHECK(checkSequenceArrays(s, a, cuQ, {}, longer, table) ==
        "seq_lens_k[1] = 1001 is outside 0..1000 (max_kv_len)");
  CHECK(checkSequenceArrays(s, a, {0, 1, 0, 3, 4}, {}, lens, table) ==
        "cu_seqlens_q is not ascending: [1] = 1, [2] = 0");
  CHECK(checkSequenceArrays(s, a, {0, 1, 2, 3, 5}, {}, lens, table) ==
        "sequence 3 has 2 tokens by cu_seqlens_q, more than the max given (1)");
  a.max_q_len = 2;
  CHECK(checkSequenceArrays(s, a, {0, 1, 2, 3, 5}, {}, lens, table) ==
        "cu_seqlens_q[batch] = 5 is past the 4 rows given");
}
