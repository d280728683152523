//===- SpecErrorsTest.cpp - Every rule that rejects a spec ----------------===//
//
// Each rule of the spec library with the exact one-line message a user sees.
//
//===----------------------------------------------------------------------===//

#include "SpecTestUtil.h"
#include "attn/Printable.h"
#include "attn/Spec.h"

#include <catch2/catch.hpp>

#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::spectest;

//===----------------------------------------------------------------------===//
// Parser errors
//===----------------------------------------------------------------------===//

TEST_CASE("an unknown field is rejected with the list of known fields",
          "[spec][errors]") {
  const std::string known =
      "unknown field (known fields: mode, head_dim, dtype, tile_q, tile_kv, "
      "mask, page_size, gqa, return_lse, target, split_kv, stages, mma)";
  CHECK(parseError("heads=8") == "invalid spec: 'heads' = '8': " + known);
  CHECK(parseError("mode=prefill, Mode=decode") ==
        "invalid spec: 'Mode' = 'decode': " + known);
  CHECK(parseError("=5") == "invalid spec: '' = '5': " + known);
  CHECK(parseError("a=b=c") == "invalid spec: 'a' = 'b=c': " + known);
  // Long or unprintable text is shortened and escaped in the message.
  CHECK(parseError(std::string(50, 'x') + "=1") ==
        "invalid spec: '" + std::string(40, 'x') + "...' = '1': " + known);
  CHECK(parseError("fi\x01ld=1") == "invalid spec: 'fi\\x01ld' = '1': " + known);
  // A non-ASCII byte is shown as what it is, not as a '?' that reads as the
  // user's own character.
  CHECK(parseError("mode=d\xc3\xa9" "code") ==
        "invalid spec: mode = 'd\\xc3\\xa9code': expected prefill or decode");
  CHECK(parseError("mode=de\x1b" "code") ==
        "invalid spec: mode = 'de\\x1bcode': expected prefill or decode");
}

TEST_CASE("messages quote the bytes that do not print in hex", "[spec][errors]") {
  CHECK(printable("plain text, 1.0") == "plain text, 1.0");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("line\r\nend\t\x7f") == "line\\x0d\\x0aend\\x09\\x7f");
  CHECK(printable("\x1b[31mred") == "\\x1b[31mred");
  // Bytes from 0x80: escaped in ASCII text, kept in a UTF-8 name.
  CHECK(printable("mod\xc3\xa8le") == "mod\\xc3\\xa8le");
  CHECK(printable("mod\xc3\xa8le\n", /*keepUtf8=*/true) == "mod\xc3\xa8le\\x0a");
  // Kept: well-formed UTF-8 only (here 3 and 4 bytes long)...
  CHECK(printable("\xe2\x82\xac \xf0\x9f\x98\x80", true) == "\xe2\x82\xac \xf0\x9f\x98\x80");
  // ...and never a C1 control, which a terminal may act on (U+009B is CSI), a
  // stray or cut-off byte, an overlong form or a surrogate.
  CHECK(printable("a\xc2\x9b" "31m", true) == "a\\xc2\\x9b31m");
  CHECK(printable("\x9b" "31m", true) == "\\x9b31m");
  CHECK(printable("end\xc3", true) == "end\\xc3");
  CHECK(printable("\xc0\xaf", true) == "\\xc0\\xaf");
  CHECK(printable("\xed\xa0\x80", true) == "\\xed\\xa0\\x80");
  CHECK(printable("\xf4\x90\x80\x80", true) == "\\xf4\\x90\\x80\\x80");
}

TEST_CASE("malformed field lists are rejected", "[spec][errors]") {
  checkErrors({
      {"mode=prefill,mode=decode",
       "invalid spec: mode = 'decode': field given twice"},
      {"gqa=4, gqa = 4", "invalid spec: gqa = '4': field given twice"},
      {"gqa=4,gqa=", "invalid spec: gqa = '': field given twice"},
      {"head_dim=", "invalid spec: head_dim = '': missing value"},
      {"mode=decode,mask=  ", "invalid spec: mask = '': missing value"},
      {"head_dim", "invalid spec: spec = 'head_dim': expected field=value"},
      {"causal", "invalid spec: spec = 'causal': expected field=value"},
      {"mode=prefill,", "invalid spec: spec = '': an empty field=value between commas (a stray comma?)"},
      {",mode=prefill", "invalid spec: spec = '': an empty field=value between commas (a stray comma?)"},
      {"mode=prefill,,gqa=2", "invalid spec: spec = '': an empty field=value between commas (a stray comma?)"},
      {"mode=prefill;gqa=2",
       "invalid spec: mode = 'prefill;gqa=2': expected prefill or decode"},
  });
}

TEST_CASE("bad enumerated values are rejected", "[spec][errors]") {
  checkErrors({
      {"mode=train", "invalid spec: mode = 'train': expected prefill or decode"},
      {"mode=Decode", "invalid spec: mode = 'Decode': expected prefill or decode"},
      {"mode=pre\x01" "fill",
       "invalid spec: mode = 'pre\\x01fill': expected prefill or decode"},
      {"dtype=fp8", "invalid spec: dtype = 'fp8': expected f16, bf16, f32 or f64"},
      {"dtype=float32",
       "invalid spec: dtype = 'float32': expected f16, bf16, f32 or f64"},
      {"target=sm_100",
       "invalid spec: target = 'sm_100': expected sm_80, sm_90a or cpu"},
      {"target=sm_90",
       "invalid spec: target = 'sm_90': expected sm_80, sm_90a or cpu"},
      {"return_lse=yes", "invalid spec: return_lse = 'yes': expected true or false"},
      {"return_lse=1", "invalid spec: return_lse = '1': expected true or false"},
      {"mask=full",
       "invalid spec: mask = 'full': expected none, causal or sliding_window(W)"},
      {"mask=Causal",
       "invalid spec: mask = 'Causal': expected none, causal or sliding_window(W)"},
      {"mask=sliding_window(7",
       "invalid spec: mask = 'sliding_window(7': expected none, causal or "
       "sliding_window(W)"},
      {"mask=sliding_window (7)",
       "invalid spec: mask = 'sliding_window (7)': expected none, causal or "
       "sliding_window(W)"},
      {"mask=sliding_window(x)",
       "invalid spec: mask = 'sliding_window(x)': the window of "
       "sliding_window(W) must be an integer >= 1"},
      {"mask=sliding_window()",
       "invalid spec: mask = 'sliding_window()': the window of "
       "sliding_window(W) must be an integer >= 1"},
      {"mask=sliding_window(-3)",
       "invalid spec: mask = 'sliding_window(-3)': the window of "
       "sliding_window(W) must be an integer >= 1"},
      {"mask=sliding_window(1234567890)",
       "invalid spec: mask = 'sliding_window(1234567890)': the window of "
       "sliding_window(W) has more than 9 digits (numbers in a spec stop below 10^9)"},
  });
}

TEST_CASE("numbers must be non-negative decimal integers", "[spec][errors]") {
  checkErrors({
      {"head_dim=12x",
       "invalid spec: head_dim = '12x': expected a non-negative integer"},
      {"head_dim=-64",
       "invalid spec: head_dim = '-64': expected a non-negative integer"},
      {"head_dim=+64",
       "invalid spec: head_dim = '+64': expected a non-negative integer"},
      {"head_dim=6 4",
       "invalid spec: head_dim = '6 4': expected a non-negative integer"},
      {"head_dim=1234567890",
       "invalid spec: head_dim = '1234567890': more than 9 digits (numbers in a spec stop below "
       "10^9)"},
      {"split_kv=99999999999,mode=decode,page_size=16",
       "invalid spec: split_kv = '99999999999': more than 9 digits (numbers in a spec stop below "
       "10^9)"},
      {"mask=sliding_window(1073741824)",
       "invalid spec: mask = 'sliding_window(1073741824)': the window of sliding_window(W) has "
       "more than 9 digits (numbers in a spec stop below 10^9)"},
      {"head_dim=0x40",
       "invalid spec: head_dim = '0x40': expected a non-negative integer"},
      {"tile_q=1.5", "invalid spec: tile_q = '1.5': expected a non-negative integer"},
      {"tile_kv=big",
       "invalid spec: tile_kv = 'big': expected a non-negative integer"},
      {"page_size=16k",
       "invalid spec: page_size = '16k': expected a non-negative integer"},
      {"gqa=-1", "invalid spec: gqa = '-1': expected a non-negative integer"},
      {"tile_q=0",
       "invalid spec: tile_q = '0': must be >= 1 (leave it out for the target's "
       "default)"},
      {"tile_kv=000",
       "invalid spec: tile_kv = '000': must be >= 1 (leave it out for the "
       "target's default)"},
  });
}

TEST_CASE("split_kv applies to decode only and must be auto or a count",
          "[spec][errors]") {
  checkErrors({
      {"split_kv=4", "invalid spec: split_kv = 4: applies to mode = decode only"},
      {"mode=prefill,split_kv=auto",
       "invalid spec: split_kv = auto: applies to mode = decode only"},
      {"split_kv=auto,mode=prefill,page_size=16",
       "invalid spec: split_kv = auto: applies to mode = decode only"},
      {"mode=decode,page_size=16,split_kv=0",
       "invalid spec: split_kv = '0': expected auto or a number of splits >= 1"},
      {"mode=decode,page_size=16,split_kv=many",
       "invalid spec: split_kv = 'many': expected auto or a number of splits >= 1"},
      {"mode=decode,page_size=16,split_kv=Auto",
       "invalid spec: split_kv = 'Auto': expected auto or a number of splits >= 1"},
      {"mode=decode,page_size=16,split_kv=-2",
       "invalid spec: split_kv = '-2': expected auto or a number of splits >= 1"},
      {"mode=decode,page_size=16,split_kv=1025",
       "invalid spec: split_kv = 1025: must be auto or a number of splits in "
       "1..1024"},
  });
  CHECK(parseValid("mode=decode,page_size=16,split_kv=1024").split_kv == 1024);
}

TEST_CASE("the first error in the text wins", "[spec][errors]") {
  // Parse errors come in the order written, before any validation rule.
  CHECK(parseError("mode=train,dtype=fp8") ==
        "invalid spec: mode = 'train': expected prefill or decode");
  CHECK(parseError("head_dim=16,mode=bogus") ==
        "invalid spec: mode = 'bogus': expected prefill or decode");
  // Among validation rules, head_dim is checked before dtype and tiles.
  CHECK(parseError("head_dim=8,dtype=f32,tile_q=7") ==
        "invalid spec: head_dim = 8: must be in 32..256");
}

//===----------------------------------------------------------------------===//
// Validation errors
//===----------------------------------------------------------------------===//

TEST_CASE("head_dim must be in 32..256 and a multiple of 16 on a GPU",
          "[spec][errors]") {
  checkErrors({
      {"head_dim=0", "invalid spec: head_dim = 0: must be in 32..256"},
      {"head_dim=16", "invalid spec: head_dim = 16: must be in 32..256"},
      {"head_dim=31", "invalid spec: head_dim = 31: must be in 32..256"},
      {"head_dim=272", "invalid spec: head_dim = 272: must be in 32..256"},
      {"head_dim=257,target=cpu",
       "invalid spec: head_dim = 257: must be in 32..256"},
      {"head_dim=40",
       "invalid spec: head_dim = 40: must be a multiple of 16 on target = sm_90a"},
      {"head_dim=40,target=sm_80",
       "invalid spec: head_dim = 40: must be a multiple of 16 on target = sm_80"},
      {"head_dim=33,mode=decode,page_size=8",
       "invalid spec: head_dim = 33: must be a multiple of 16 on target = sm_90a"},
  });
  // The CPU takes any head_dim in range.
  for (int hd : {32, 33, 40, 100, 255, 256}) {
    INFO("head_dim=" << hd);
    CHECK(parseValid("target=cpu,head_dim=" + std::to_string(hd)).head_dim == hd);
  }
}

TEST_CASE("each target accepts only its own dtypes", "[spec][errors]") {
  checkErrors({
      {"dtype=f32",
       "invalid spec: dtype = f32: target = sm_90a supports f16 and bf16 (f32 "
       "and f64 run on target = cpu)"},
      {"dtype=f64,target=sm_80",
       "invalid spec: dtype = f64: target = sm_80 supports f16 and bf16 (f32 "
       "and f64 run on target = cpu)"},
      {"target=cpu,dtype=bf16",
       "invalid spec: dtype = bf16: target = cpu supports f32 and f64 (f16 and "
       "bf16 run on sm_80 and sm_90a)"},
      {"dtype=f16,target=cpu",
       "invalid spec: dtype = f16: target = cpu supports f32 and f64 (f16 and "
       "bf16 run on sm_80 and sm_90a)"},
  });
}

TEST_CASE("gqa must be in 1..256", "[spec][errors]") {
  checkErrors({
      {"gqa=0",
       "invalid spec: gqa = 0: must be in 1..256 (num_q_heads / num_kv_heads)"},
      {"gqa=257",
       "invalid spec: gqa = 257: must be in 1..256 (num_q_heads / num_kv_heads)"},
      {"gqa=1000,target=cpu",
       "invalid spec: gqa = 1000: must be in 1..256 (num_q_heads / "
       "num_kv_heads)"},
  });
  CHECK(parseValid("gqa=256").gqa == 256);
  CHECK(parseValid("gqa=256,target=cpu,mode=decode,page_size=4").gqa == 256);
}

TEST_CASE("page_size must be 0 or 1..65536, for prefill and decode alike",
          "[spec][errors]") {
  checkErrors({
      {"page_size=65537",
       "invalid spec: page_size = 65537: must be 0 (contiguous KV) or a number "
       "of tokens per page in 1..65536"},
      {"page_size=999999999,target=cpu",
       "invalid spec: page_size = 999999999: must be 0 (contiguous KV) or a "
       "number of tokens per page in 1..65536"},
      {"mode=decode,page_size=70000",
       "invalid spec: page_size = 70000: must be 0 (contiguous KV) or a number "
       "of tokens per page in 1..65536"},
  });
  CHECK(parseValid("page_size=65536").page_size == 65536);
  // Decode reads a contiguous cache (page_size 0, the default) or a paged one.
  CHECK(parseValid("mode=decode").page_size == 0);
  CHECK(parseValid("mode=decode,page_size=0,target=cpu").mode == Mode::Decode);
  CHECK(parseValid("mode=decode,page_size=65536,gqa=8").page_size == 65536);
}

TEST_CASE("a sliding window must hold at least one key", "[spec][errors]") {
  checkErrors({
      {"mask=sliding_window(0)",
       "invalid spec: mask = sliding_window(0): the window must be >= 1 key"},
      {"mask=sliding_window(000),target=cpu",
       "invalid spec: mask = sliding_window(0): the window must be >= 1 key"},
  });
  CHECK(parseValid("mask=sliding_window(1)").mask ==
        Mask{MaskKind::SlidingWindow, 1});
}

TEST_CASE("CPU tiles must be in 1..4096", "[spec][errors]") {
  checkErrors({
      {"target=cpu,tile_q=4097",
       "invalid spec: tile_q = 4097: must be in 1..4096 on target = cpu"},
      {"target=cpu,tile_kv=5000",
       "invalid spec: tile_kv = 5000: must be in 1..4096 on target = cpu"},
      {"target=cpu,mode=decode,page_size=1,tile_q=4097",
       "invalid spec: tile_q = 4097: must be in 1..4096 on target = cpu"},
  });
  Spec s = parseValid("target=cpu,tile_q=4096,tile_kv=1");
  CHECK(s.tile_q == 4096);
  CHECK(s.tile_kv == 1);
}

TEST_CASE("GPU prefill tiles must be multiples of 16 in 16..256",
          "[spec][errors]") {
  checkErrors({
      {"tile_q=8",
       "invalid spec: tile_q = 8: must be a multiple of 16 in 16..256 for mode "
       "= prefill on a GPU target"},
      {"tile_q=24",
       "invalid spec: tile_q = 24: must be a multiple of 16 in 16..256 for "
       "mode = prefill on a GPU target"},
      {"tile_q=272,head_dim=32",
       "invalid spec: tile_q = 272: must be a multiple of 16 in 16..256 for "
       "mode = prefill on a GPU target"},
      {"tile_kv=8",
       "invalid spec: tile_kv = 8: must be a multiple of 16 in 16..256 on a GPU "
       "target"},
      {"tile_kv=40,target=sm_80",
       "invalid spec: tile_kv = 40: must be a multiple of 16 in 16..256 on a "
       "GPU target"},
      {"tile_kv=512,head_dim=32",
       "invalid spec: tile_kv = 512: must be a multiple of 16 in 16..256 on a "
       "GPU target"},
  });
}

TEST_CASE("GPU decode tiles take 1..16 query tokens and at most 128 query rows",
          "[spec][errors]") {
  checkErrors({
      {"mode=decode,page_size=16,tile_q=17",
       "invalid spec: tile_q = 17: must be in 1..16 query tokens for mode = "
       "decode on a GPU target"},
      {"mode=decode,page_size=16,tile_kv=24",
       "invalid spec: tile_kv = 24: must be a multiple of 16 in 16..256 on a "
       "GPU target"},
      {"mode=decode,page_size=16,tile_kv=272",
       "invalid spec: tile_kv = 272: must be a multiple of 16 in 16..256 on a "
       "GPU target"},
      {"mode=decode,page_size=16,tile_q=16,gqa=16",
       "invalid spec: gqa = 16: tile_q * gqa = 256 query rows exceed 128 per "
       "thread block in mode = decode"},
      {"mode=decode,page_size=16,gqa=129",
       "invalid spec: gqa = 129: tile_q * gqa = 129 query rows exceed 128 per "
       "thread block in mode = decode"},
      {"mode=decode,page_size=16,tile_q=3,gqa=43,target=sm_80",
       "invalid spec: gqa = 43: tile_q * gqa = 129 query rows exceed 128 per "
       "thread block in mode = decode"},
  });
  // Odd decode tile_q is fine, and 128 rows exactly is the limit.
  CHECK(parseValid("mode=decode,page_size=16,tile_q=3").tile_q == 3);
  CHECK(parseValid("mode=decode,page_size=16,tile_q=16,gqa=8").gqa == 8);
  CHECK(parseValid("mode=decode,page_size=16,gqa=128").gqa == 128);
  // The row limit is a GPU rule: the CPU takes any group size.
  CHECK(parseValid("mode=decode,page_size=16,tile_q=16,gqa=256,target=cpu").gqa ==
        256);
}

TEST_CASE("stages sets the pipeline depth within what the loops take", "[spec]") {
  // Auto: the measured choice, not printed; set: printed, in the symbol, and
  // what kvStages (and so the emitter and the shared memory) uses.
  Spec s = parseValid("head_dim=128");
  CHECK(s.stages == kStagesAuto);
  CHECK(s.str().find("stages") == std::string::npos);
  s = parseValid("head_dim=128,stages=1");
  CHECK(kvStages(s) == 1);
  CHECK(sharedMemoryBytes(s) == (64 + 2 * 64) * 128 * 2);
  CHECK(s.str() == "mode=prefill,head_dim=128,dtype=bf16,tile_q=64,tile_kv=64,mask=none,"
                   "page_size=0,gqa=1,return_lse=false,target=sm_90a,stages=1");
  CHECK(s.symbol() == "attn_prefill_hd128_bf16_q64_kv64_nomask_p0_g1_sm90a_st1");
  CHECK(parseValid(s.str()) == s);
  CHECK(parseValid("head_dim=128,stages=auto") == parseValid("head_dim=128"));
  CHECK(parseValid("head_dim=128,stages=1") != parseValid("head_dim=128"));
  Spec d = parseValid("mode=decode,page_size=16,gqa=4,stages=4");
  CHECK(kvStages(d) == 4);
  CHECK(d.str().find(",split_kv=auto,stages=4") != std::string::npos);
  CHECK(d.symbol().find("_sauto_st4") != std::string::npos);
  checkErrors({
      {"head_dim=64,stages=3", "invalid spec: stages = 3: must be auto, 1 or 2 for mode = prefill"},
      {"head_dim=128,mma=wgmma,stages=3",
       "invalid spec: stages = 3: must be auto, 1 or 2 for mode = prefill"},
      {"head_dim=128,stages=9",
       "invalid spec: stages = 9: must be auto or 2..8 in the warp-specialised block (sm_90a "
       "prefill: head_dim 128 on tiles 128 x 64 or 128 x 128, head_dim 64 on 192 x 64 or 192 x "
       "128)"},
      {"mode=decode,page_size=16,stages=1",
       "invalid spec: stages = 1: must be auto or 2..4 for mode = decode"},
      {"mode=decode,page_size=16,stages=5",
       "invalid spec: stages = 5: must be auto or 2..4 for mode = decode"},
      {"target=cpu,stages=2",
       "invalid spec: stages = 2: applies to GPU targets only (the CPU has no shared memory)"},
      {"stages=0", "invalid spec: stages = '0': expected auto or a number of K/V stages >= 1"},
      {"stages=two", "invalid spec: stages = 'two': expected auto or a number of K/V stages >= 1"},
      // More stages take more shared memory: 2 of these tiles do not fit.
      {"head_dim=256,tile_q=128,tile_kv=128,stages=2",
       "invalid spec: stages = 2: tiles do not fit: the Q tile and 2 stages of K and V tiles of "
       "128 keys need 327680 bytes of shared memory, target = sm_90a has 232448 per block"},
      // A depth given by hand is named, not the default tile_kv the user never set.
      {"stages=8",
       "invalid spec: stages = 8: tiles do not fit: the Q tile and 8 stages of K and V tiles of "
       "128 keys need 557184 bytes of shared memory, target = sm_90a has 232448 per block"},
  });
}

TEST_CASE("mma picks wgmma or mma.sync for sm_90a prefill within the shapes it takes",
          "[spec]") {
  // Auto: the measured choice, not printed; set: printed, in the symbol, and
  // what usesWgmma (and so the emitter and the stages) follows.
  Spec s = parseValid("head_dim=128,tile_q=128,tile_kv=128");
  CHECK(s.mma == MmaKind::Auto);
  CHECK(s.str().find("mma") == std::string::npos);
  s = parseValid("head_dim=128,tile_q=128,tile_kv=128,mma=wgmma");
  CHECK(usesWgmma(s));
  CHECK(s.str() == "mode=prefill,head_dim=128,dtype=bf16,tile_q=128,tile_kv=128,mask=none,"
                   "page_size=0,gqa=1,return_lse=false,target=sm_90a,mma=wgmma");
  CHECK(s.symbol() == "attn_prefill_hd128_bf16_q128_kv128_nomask_p0_g1_sm90a_wg");
  CHECK(parseValid(s.str()) == s);
  // wgmma's measured depths: one stage for head_dim 128, two for head_dim 64
  // while two blocks fit in an SM.
  CHECK(kvStages(s) == 1);
  CHECK(sharedMemoryBytes(s) == (128 + 2 * 128) * 128 * 2);
  CHECK(kvStages(parseValid("head_dim=128,mma=wgmma")) == 1);
  CHECK(kvStages(parseValid("head_dim=64")) == 2);
  CHECK(kvStages(parseValid("head_dim=64,tile_q=128,tile_kv=128,mma=wgmma")) == 2);
  CHECK(kvStages(parseValid("head_dim=128,stages=2")) == 2);
  Spec sync = parseValid("head_dim=128,tile_q=128,tile_kv=128,mma=sync");
  CHECK(!usesWgmma(sync));
  CHECK(sync.symbol().find("_sm90a_sync") != std::string::npos);
  CHECK(sync != s);
  CHECK(parseValid("head_dim=64,tile_q=64,tile_kv=64,mma=auto") ==
        parseValid("head_dim=64,tile_q=64,tile_kv=64"));
  checkErrors({
      {"mma=tensor", "invalid spec: mma = 'tensor': expected auto, sync, wgmma or wgmma_ws"},
      {"head_dim=128,tile_q=128,tile_kv=128,mma=wgmma,target=sm_80",
       "invalid spec: mma = wgmma: needs target = sm_90a, not sm_80"},
      {"target=cpu,mma=sync", "invalid spec: mma = sync: applies to GPU prefill kernels only"},
      {"mode=decode,page_size=16,mma=wgmma",
       "invalid spec: mma = wgmma: applies to GPU prefill kernels only"},
      {"head_dim=96,tile_q=128,tile_kv=64,mma=wgmma",
       "invalid spec: mma = wgmma: takes head_dim 64 or 128 with tile_q and tile_kv of 64 or "
       "128 (here 96, 128 x 64)"},
      {"head_dim=128,tile_q=128,tile_kv=32,mma=wgmma",
       "invalid spec: mma = wgmma: takes head_dim 64 or 128 with tile_q and tile_kv of 64 or "
       "128 (here 128, 128 x 32)"},
  });
}

TEST_CASE("mma = wgmma_ws: a warp-specialised block of 128 x 128 or 128 x 64 tiles, head_dim 128",
          "[spec]") {
  // Tiles left open take the measured 128 x 128; the stages' default is
  // three of 128 keys (four of 64), and the shared memory counts each
  // stage's two mbarriers (8 bytes each) after the tiles.
  Spec s = parseValid("head_dim=128,mma=wgmma_ws");
  CHECK(warpSpecialised(s));
  CHECK(usesWgmma(s));
  CHECK(s.tile_q == 128);
  CHECK(s.tile_kv == 128);
  CHECK(kvStages(s) == 3);
  CHECK(sharedMemoryBytes(s) == (128 + 2 * 3 * 128) * 128 * 2 + 3 * 16);
  CHECK(s.str() == "mode=prefill,head_dim=128,dtype=bf16,tile_q=128,tile_kv=128,mask=none,"
                   "page_size=0,gqa=1,return_lse=false,target=sm_90a,mma=wgmma_ws");
  CHECK(s.symbol() == "attn_prefill_hd128_bf16_q128_kv128_nomask_p0_g1_sm90a_ws");
  CHECK(parseValid(s.str()) == s);
  const Spec kv64 = parseValid("head_dim=128,tile_q=128,tile_kv=64,mma=wgmma_ws,mask=causal");
  CHECK(kvStages(kv64) == 4);
  CHECK(kvStages(parseValid("head_dim=128,mma=wgmma_ws,stages=2")) == 2);
  CHECK(!warpSpecialised(parseValid("head_dim=128,tile_q=128,tile_kv=128,mma=wgmma")));
  // mma = auto picks the block (measured faster on every head_dim 128 row)
  // wherever it takes the tiles and the stages; elsewhere the wgmma block's
  // tiles (64 x 64; head_dim 64 without a mask 64 x 128) stay the default.
  const Spec a = parseValid("head_dim=128");
  CHECK((warpSpecialised(a) && a.mma == MmaKind::Auto && a.tile_q == 128 && a.tile_kv == 128));
  CHECK(sharedMemoryBytes(a) == sharedMemoryBytes(s));
  CHECK(kvStages(parseValid("head_dim=128,tile_kv=64")) == 4);
  CHECK(warpSpecialised(parseValid("head_dim=128,tile_q=128,tile_kv=64,stages=2")));
  for (const char *text : {"head_dim=128,stages=1", "head_dim=128,tile_q=64"}) {
    INFO(text);
    const Spec wg = parseValid(text);
    CHECK((!warpSpecialised(wg) && usesWgmma(wg) && wg.tile_q == 64 && wg.tile_kv == 64));
  }
  for (const char *text : {"head_dim=128,tile_q=128,tile_kv=32", "head_dim=64", "head_dim=128,target=sm_80",
                           "head_dim=128,mma=sync", "mode=decode,page_size=16", "head_dim=64,tile_q=128",
                           "head_dim=128,tile_q=192", "head_dim=64,tile_q=192,mma=wgmma"}) {
    INFO(text);
    const SpecResult r = parseSpec(text);
    CHECK((!r || !warpSpecialised(*r.spec)));
  }
  checkErrors({
      {"head_dim=64,tile_q=128,mma=wgmma_ws",
       "invalid spec: mma = wgmma_ws: takes head_dim 128 with tile_q 128, or head_dim 64 with "
       "tile_q 192, and tile_kv 64 or 128 (here 64, 128 x 128)"},
      // A shape the block does not take is said before its depth.
      {"head_dim=80,mma=wgmma_ws,stages=1",
       "invalid spec: mma = wgmma_ws: takes head_dim 128 with tile_q 128, or head_dim 64 with "
       "tile_q 192, and tile_kv 64 or 128 (here 80, 128 x 128)"},
      {"target=sm_80,mma=wgmma_ws,stages=1", "invalid spec: mma = wgmma_ws: needs target = sm_90a, not sm_80"},
      {"head_dim=128,tile_q=64,tile_kv=64,mma=wgmma_ws",
       "invalid spec: mma = wgmma_ws: takes head_dim 128 with tile_q 128, or head_dim 64 with "
       "tile_q 192, and tile_kv 64 or 128 (here 128, 64 x 64)"},
      {"head_dim=128,tile_q=192,tile_kv=64,mma=wgmma_ws",
       "invalid spec: mma = wgmma_ws: takes head_dim 128 with tile_q 128, or head_dim 64 with "
       "tile_q 192, and tile_kv 64 or 128 (here 128, 192 x 64)"},
      {"head_dim=128,mma=wgmma_ws,target=sm_80",
       "invalid spec: mma = wgmma_ws: needs target = sm_90a, not sm_80"},
      {"mode=decode,page_size=16,mma=wgmma_ws",
       "invalid spec: mma = wgmma_ws: applies to GPU prefill kernels only"},
      {"head_dim=128,mma=wgmma_ws,stages=1",
       "invalid spec: stages = 1: must be auto or 2..8 in the warp-specialised block (sm_90a "
       "prefill: head_dim 128 on tiles 128 x 64 or 128 x 128, head_dim 64 on 192 x 64 or 192 x "
       "128)"},
      {"head_dim=128,mma=wgmma_ws,stages=4",
       "invalid spec: stages = 4: tiles do not fit: the Q tile and 4 stages of K and V tiles of "
       "128 keys need 294976 bytes of shared memory, target = sm_90a has 232448 per block"},
  });
}

TEST_CASE("mma = wgmma_ws for head_dim 64: three computing warpgroups, 192 x 128 or 192 x 64 tiles",
          "[spec]") {
  // By name the tiles default to 192 x 128 (three stages; four of 64 keys);
  // mma = auto takes the block where tile_q 192 is given (no other sm_90a
  // block takes it) and keeps the wgmma block's tiles otherwise (64 x 128
  // without a mask).
  const Spec s = parseValid("head_dim=64,mma=wgmma_ws");
  CHECK((warpSpecialised(s) && usesWgmma(s) && s.tile_q == 192 && s.tile_kv == 128));
  CHECK(wsComputingThreads(s) == 384);
  CHECK(kvStages(s) == 3);
  CHECK(sharedMemoryBytes(s) == (192 + 2 * 3 * 128) * 64 * 2 + 3 * 16);
  CHECK(s.symbol() == "attn_prefill_hd64_bf16_q192_kv128_nomask_p0_g1_sm90a_ws");
  CHECK(parseValid(s.str()) == s);
  const Spec kv64 = parseValid("head_dim=64,tile_kv=64,mma=wgmma_ws,mask=causal");
  CHECK((kv64.tile_q == 192 && kv64.tile_kv == 64 && kvStages(kv64) == 4));
  const Spec a = parseValid("head_dim=64,tile_q=192");
  CHECK((warpSpecialised(a) && usesWgmma(a) && a.mma == MmaKind::Auto && a.tile_kv == 128));
  CHECK(wsComputingThreads(parseValid("head_dim=128")) == 256);
  const Spec d = parseValid("head_dim=64");
  CHECK((!warpSpecialised(d) && usesWgmma(d) && d.tile_q == 64 && d.tile_kv == 128));
}

TEST_CASE("GPU tiles must fit in shared memory", "[spec][errors]") {
  // (Q rows + 2 (K and V) * stages * tile_kv) * head_dim * bytes per element,
  // with as many stages as leave room for two blocks per SM (112 KiB): prefill
  // 2 (1 under head_dim 64 or when 2 do not fit), decode 3 (else 2), decode
  // keeping 16 Q rows.
  const int64_t sm90aLimit = 227 * 1024, sm80Limit = 163 * 1024;
  CHECK(sharedMemoryLimit(Target::SM90a) == sm90aLimit);
  CHECK(sharedMemoryLimit(Target::SM80) == sm80Limit);
  CHECK(sharedMemoryLimit(Target::CPU) == 0);

  // The defaults: two blocks per SM (mma.sync's tiles; wgmma's 64 x 64, and
  // 64 x 128 for head_dim 64 without a mask: three).
  CHECK(kvStages(parseValid("head_dim=128,mma=sync")) == 2);
  CHECK(sharedMemoryBytes(parseValid("head_dim=128,mma=sync")) == (128 + 2 * 2 * 32) * 128 * 2);
  CHECK(kvStages(parseValid("head_dim=64,mask=causal,mma=sync")) == 2);
  CHECK(sharedMemoryBytes(parseValid("head_dim=64,mma=sync")) == (128 + 2 * 2 * 128) * 64 * 2);
  CHECK(sharedMemoryBytes(parseValid("head_dim=128,mma=wgmma")) == (64 + 2 * 64) * 128 * 2);
  CHECK(sharedMemoryBytes(parseValid("head_dim=64")) == (64 + 2 * 2 * 128) * 64 * 2);
  CHECK(sharedMemoryBytes(parseValid("head_dim=64,mask=causal")) == (64 + 2 * 2 * 64) * 64 * 2);
  CHECK(kvStages(parseValid("head_dim=32")) == 1);
  CHECK(kvStages(parseValid("mode=decode,page_size=16,gqa=4")) == 3);
  CHECK(sharedMemoryBytes(parseValid("mode=decode,page_size=16,gqa=4")) ==
        (16 + 2 * 3 * 64) * 128 * 2);
  // Decode keeps 16 Q rows whatever the group: it takes them 16 at a time.
  CHECK(sharedMemoryBytes(parseValid("mode=decode,page_size=16,gqa=32")) ==
        (16 + 2 * 3 * 64) * 128 * 2);
  // Tiles too large for two blocks: the fewest stages the loop takes.
  Spec s = parseValid("head_dim=256");
  CHECK(kvStages(s) == 1);
  CHECK(sharedMemoryBytes(s) == (64 + 2 * 64) * 256 * 2);
  s = parseValid("mode=decode,page_size=16,head_dim=256");
  CHECK(kvStages(s) == 2);
  CHECK(sharedMemoryBytes(s) == (16 + 2 * 2 * 64) * 256 * 2);
  s = parseValid("head_dim=128,tile_q=256,tile_kv=256");
  CHECK(kvStages(s) == 1);
  CHECK(sharedMemoryBytes(s) == (256 + 2 * 256) * 128 * 2);
  CHECK(sharedMemoryBytes(s) <= sm90aLimit);

  checkErrors({
      {"head_dim=256,tile_q=256,tile_kv=256",
       "invalid spec: tile_kv = 256: tiles do not fit: the Q tile and 1 stage "
       "of K and V tiles of 256 keys need 393216 bytes of shared memory, target = sm_90a "
       "has 232448 per block"},
      // sm_80 has less: head_dim 256 with 128 x 128 tiles fits sm_90a only.
      {"head_dim=256,tile_q=128,tile_kv=128,target=sm_80",
       "invalid spec: tile_kv = 128: tiles do not fit: the Q tile and 1 stage "
       "of K and V tiles of 128 keys need 196608 bytes of shared memory, target = sm_80 has "
       "166912 per block"},
      // Decode never goes under two stages.
      {"mode=decode,page_size=16,head_dim=256,tile_kv=256,gqa=32",
       "invalid spec: tile_kv = 256: tiles do not fit: the Q tile and 2 stages "
       "of K and V tiles of 256 keys need 532480 bytes of shared memory, target = sm_90a "
       "has 232448 per block"},
      {"mode=decode,page_size=16,head_dim=128,tile_kv=224,gqa=8",
       "invalid spec: tile_kv = 224: tiles do not fit: the Q tile and 2 stages "
       "of K and V tiles of 224 keys need 233472 bytes of shared memory, target = sm_90a "
       "has 232448 per block"},
  });
  CHECK((256 + 2 * 256) * 256 * 2 == 393216);
  CHECK((128 + 2 * 128) * 256 * 2 == 196608);
  CHECK((16 + 2 * 2 * 256) * 256 * 2 == 532480);
  CHECK((16 + 2 * 2 * 224) * 128 * 2 == 233472);
  CHECK(parseValid("head_dim=256,tile_q=128,tile_kv=128").head_dim == 256); // fits sm_90a
  // The CPU has no shared-memory rule.
  CHECK(parseValid("target=cpu,head_dim=256,tile_q=4096,tile_kv=4096").tile_q ==
        4096);
}

TEST_CASE("validateSpec rejects hand-built specs the parser cannot produce",
          "[spec][errors]") {
  Spec s;
  applyDefaultTiles(s);
  REQUIRE_FALSE(validateSpec(s).has_value());

  SECTION("tiles left at zero on a GPU") {
    Spec t;
    REQUIRE(validateSpec(t).has_value());
    CHECK(validateSpec(t)->message() ==
          "invalid spec: tile_q = 0: must be a multiple of 16 in 16..256 for "
          "mode = prefill on a GPU target");
  }
  SECTION("tiles left at zero on the CPU") {
    Spec t;
    t.target = Target::CPU;
    t.dtype = DType::F32;
    REQUIRE(validateSpec(t).has_value());
    CHECK(validateSpec(t)->message() ==
          "invalid spec: tile_q = 0: must be in 1..4096 on target = cpu");
    t.tile_q = 1;
    CHECK(validateSpec(t)->message() ==
          "invalid spec: tile_kv = 0: must be in 1..4096 on target = cpu");
  }
  SECTION("decode with a zero tile_q on a GPU") {
    Spec t = s;
    t.mode = Mode::Decode;
    t.page_size = 16;
    t.tile_q = 0;
    CHECK(validateSpec(t)->message() ==
          "invalid spec: tile_q = 0: must be in 1..16 query tokens for mode = "
          "decode on a GPU target");
  }
  SECTION("a negative page size or split count") {
    Spec t = s;
    t.page_size = -1;
    CHECK(validateSpec(t)->message() ==
          "invalid spec: page_size = -1: must be 0 (contiguous KV) or a number "
          "of tokens per page in 1..65536");
    Spec u = s;
    u.mode = Mode::Decode;
    u.page_size = 16;
    u.tile_q = 1;
    u.split_kv = -1;
    CHECK(validateSpec(u)->message() ==
          "invalid spec: split_kv = -1: must be auto or a number of splits in "
          "1..1024");
  }
  SECTION("a sliding window of zero keys") {
    Spec t = s;
    t.mask = {MaskKind::SlidingWindow, 0};
    CHECK(validateSpec(t)->message() ==
          "invalid spec: mask = sliding_window(0): the window must be >= 1 key");
  }
}
