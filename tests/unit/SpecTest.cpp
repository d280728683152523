//===- SpecTest.cpp - Unit tests for the attention spec library -----------===//
//
// Covers the spec's defaults and its canonical text form and symbol; the
// rules that reject a spec are in SpecErrorsTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "SpecTestUtil.h"
#include "attn/Spec.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace attn;

using namespace attn::spectest;


//===----------------------------------------------------------------------===//
// Defaults
//===----------------------------------------------------------------------===//

TEST_CASE("an empty spec is a bf16 prefill kernel for sm_90a with default tiles",
          "[spec][defaults]") {
  for (const char *text : {"", "   ", "\t \n"}) {
    INFO("spec text: \"" << text << "\"");
    Spec s = parseValid(text);
    CHECK(s.mode == Mode::Prefill);
    CHECK(s.head_dim == 128);
    CHECK(s.dtype == DType::BF16);
    CHECK(s.target == Target::SM90a);
    CHECK(s.tile_q == 128); // the warp-specialised block's tiles (warpSpecialised)
    CHECK(s.tile_kv == 128);
    CHECK(warpSpecialised(s));
    CHECK(s.mask == Mask{});
    CHECK(s.page_size == 0);
    CHECK(s.gqa == 1);
    CHECK_FALSE(s.return_lse);
    CHECK(s.split_kv == kSplitKVAuto);
    CHECK_FALSE(s == Spec{}); // Spec{} leaves the tiles at 0.
  }
}

TEST_CASE("GPU prefill tile defaults follow head_dim", "[spec][defaults]") {
  struct Case {
    int headDim, tileQ, tileKV;
  };
  // mma.sync kernels: sm_80, and sm_90a's head dims wgmma does not take (or
  // mma=sync); sm_90a's head_dim 64 runs wgmma on 64 x 128 tiles without a
  // mask (64 x 64 under one), head_dim 128 the warp-specialised block on
  // 128 x 128 (and under mma=wgmma, the wgmma block on 64 x 64).
  for (const char *target : {"sm_80", "sm_90a", "sm_90a,mma=sync"}) {
    const bool wgmma = std::string(target) == "sm_90a";
    for (Case c : {Case{32, 128, 128}, Case{64, 128, 128}, Case{96, 128, 64},
                   Case{112, 128, 32}, Case{128, 128, 32}, Case{160, 64, 64}, Case{224, 64, 64},
                   Case{240, 64, 32}, Case{256, 64, 64}}) {
      Spec s = parseValid("target=" + std::string(target) +
                          ",head_dim=" + std::to_string(c.headDim));
      INFO("target=" << target << " head_dim=" << c.headDim);
      const bool wg = wgmma && (c.headDim == 64 || c.headDim == 128);
      const bool ws = wgmma && c.headDim == 128;
      CHECK(s.tile_q == (ws ? 128 : wg ? 64 : c.tileQ));
      CHECK(s.tile_kv == (ws ? 128 : wg ? (c.headDim == 64 ? 128 : 64) : c.tileKV));
      CHECK(usesWgmma(s) == wg);
      CHECK(warpSpecialised(s) == ws);
      CHECK(s.dtype == DType::BF16);
    }
  }
  const Spec wg = parseValid("head_dim=128,mma=wgmma");
  CHECK((wg.tile_q == 64 && wg.tile_kv == 64 && usesWgmma(wg) && !warpSpecialised(wg)));
  // sm_90a, head_dim 64: 64 x 128 (two stages) only without a mask and with
  // tile_q left at 64; masks and tile_q 128 keep 64-key tiles.
  CHECK(kvStages(parseValid("target=sm_90a,head_dim=64")) == 2);
  const Spec masked = parseValid("target=sm_90a,head_dim=64,mask=causal");
  CHECK((usesWgmma(masked) && masked.tile_q == 64 && masked.tile_kv == 64));
  CHECK(parseValid("target=sm_90a,head_dim=64,mask=sliding_window(64)").tile_kv == 64);
  CHECK(parseValid("target=sm_90a,head_dim=64,tile_q=128").tile_kv == 64);
}

TEST_CASE("target=cpu defaults to f32 and 64x64 tiles", "[spec][defaults]") {
  for (int hd : {32, 64, 128, 256}) {
    Spec s = parseValid("target=cpu,head_dim=" + std::to_string(hd));
    INFO("head_dim=" << hd);
    CHECK(s.target == Target::CPU);
    CHECK(s.dtype == DType::F32);
    CHECK(s.tile_q == 64);
    CHECK(s.tile_kv == 64);
  }
  CHECK(parseValid("target=cpu,dtype=f64").dtype == DType::F64);
}

TEST_CASE("decode defaults to one query token per tile and automatic split-KV",
          "[spec][defaults]") {
  for (const char *target : {"sm_80", "sm_90a", "cpu"}) {
    INFO("target=" << target);
    Spec s = parseValid("mode=decode,page_size=16,target=" + std::string(target));
    CHECK(s.mode == Mode::Decode);
    CHECK(s.tile_q == 1);
    CHECK(s.tile_kv == 64);
    CHECK(s.split_kv == kSplitKVAuto);
    CHECK(s.page_size == 16);
  }
  CHECK(parseValid("mode=decode,page_size=16,split_kv=auto").split_kv ==
        kSplitKVAuto);
  CHECK(parseValid("mode=decode,page_size=16,split_kv=12").split_kv == 12);
}

TEST_CASE("explicit tile sizes and dtype override the defaults",
          "[spec][defaults]") {
  Spec s = parseValid("tile_q=64,tile_kv=128,dtype=f16,head_dim=64");
  CHECK(s.tile_q == 64);
  CHECK(s.tile_kv == 128);
  CHECK(s.dtype == DType::F16);
  // Only the tile left out is filled in.
  Spec t = parseValid("tile_kv=32,target=sm_80");
  CHECK(t.tile_q == 128);
  CHECK(t.tile_kv == 32);
}

TEST_CASE("applyDefaultTiles fills only the tiles left at zero",
          "[spec][defaults]") {
  Spec s;
  s.target = Target::SM80;
  applyDefaultTiles(s);
  CHECK(s.tile_q == 128);
  CHECK(s.tile_kv == 32);

  Spec d;
  d.mode = Mode::Decode;
  d.tile_kv = 32;
  applyDefaultTiles(d);
  CHECK(d.tile_q == 1);
  CHECK(d.tile_kv == 32);

  Spec c;
  c.target = Target::CPU;
  c.tile_q = 7;
  applyDefaultTiles(c);
  CHECK(c.tile_q == 7);
  CHECK(c.tile_kv == 64);
}

TEST_CASE("names, element sizes and field names are the documented spellings",
          "[spec]") {
  CHECK(std::string(name(Mode::Prefill)) == "prefill");
  CHECK(std::string(name(Mode::Decode)) == "decode");
  CHECK(std::string(name(DType::F16)) == "f16");
  CHECK(std::string(name(DType::BF16)) == "bf16");
  CHECK(std::string(name(DType::F32)) == "f32");
  CHECK(std::string(name(DType::F64)) == "f64");
  CHECK(std::string(name(Target::SM80)) == "sm_80");
  CHECK(std::string(name(Target::SM90a)) == "sm_90a");
  CHECK(std::string(name(Target::CPU)) == "cpu");
  CHECK(bytesPerElement(DType::F16) == 2);
  CHECK(bytesPerElement(DType::BF16) == 2);
  CHECK(bytesPerElement(DType::F32) == 4);
  CHECK(bytesPerElement(DType::F64) == 8);
  CHECK(specFieldNames() ==
        std::vector<std::string>{"mode", "head_dim", "dtype", "tile_q",
                                 "tile_kv", "mask", "page_size", "gqa",
                                 "return_lse", "target", "split_kv", "stages", "mma"});
  CHECK(Mask{}.str() == "none");
  CHECK(Mask{MaskKind::Causal, 0}.str() == "causal");
  CHECK(Mask{MaskKind::SlidingWindow, 256}.str() == "sliding_window(256)");
}

//===----------------------------------------------------------------------===//
// Canonical form and symbol

//===----------------------------------------------------------------------===//

TEST_CASE("the canonical form lists every field in a fixed order",
          "[spec][canonical]") {
  CHECK(parseValid("").str() ==
        "mode=prefill,head_dim=128,dtype=bf16,tile_q=128,tile_kv=128,mask=none,"
        "page_size=0,gqa=1,return_lse=false,target=sm_90a");
  CHECK(parseValid("target=cpu,mode=decode,page_size=32,mask=sliding_window(9),"
                   "return_lse=true,split_kv=4,gqa=2,head_dim=40")
            .str() ==
        "mode=decode,head_dim=40,dtype=f32,tile_q=1,tile_kv=64,"
        "mask=sliding_window(9),page_size=32,gqa=2,return_lse=true,target=cpu,"
        "split_kv=4");
  CHECK(parseValid("mode=decode,page_size=16").str() ==
        "mode=decode,head_dim=128,dtype=bf16,tile_q=1,tile_kv=64,mask=none,"
        "page_size=16,gqa=1,return_lse=false,target=sm_90a,split_kv=auto");
}

TEST_CASE("the symbol spells out every field", "[spec][canonical]") {
  CHECK(parseValid("mask=causal,page_size=16,gqa=4").symbol() ==
        "attn_prefill_hd128_bf16_q128_kv128_causal_p16_g4_sm90a");
  CHECK(parseValid("").symbol() ==
        "attn_prefill_hd128_bf16_q128_kv128_nomask_p0_g1_sm90a");
  CHECK(parseValid("mode=decode,page_size=16,mask=sliding_window(512),"
                   "return_lse=true,target=sm_80,dtype=f16,split_kv=8")
            .symbol() ==
        "attn_decode_hd128_f16_q1_kv64_sw512_p16_g1_lse_sm80_s8");
  CHECK(parseValid("mode=decode,page_size=1,target=cpu").symbol() ==
        "attn_decode_hd128_f32_q1_kv64_nomask_p1_g1_cpu_sauto");
}

TEST_CASE("the canonical form round-trips through the parser",
          "[spec][canonical]") {
  const std::vector<std::string> grid = specGrid();
  INFO("grid size " << grid.size());
  REQUIRE(grid.size() > 10000);

  std::set<std::string> canonical;
  for (const std::string &text : grid) {
    Spec s = parseValid(text);
    const std::string str = s.str();
    INFO("spec text: \"" << text << "\" canonical: \"" << str << "\"");
    canonical.insert(str);

    // parse(s.str()) == s, and printing again gives the same text.
    Spec again = parseValid(str);
    REQUIRE(again == s);
    REQUIRE(again.str() == str);
    REQUIRE(str == s.str());
    // Spaces around tokens and the order of the fields do not matter.
    REQUIRE(parseValid(spaced(str)) == s);
    REQUIRE(parseValid(reversedFields(str)) == s);
    // A parsed spec passes validation on its own.
    REQUIRE_FALSE(validateSpec(s).has_value());
  }
  // Distinct texts in the grid give distinct specs.
  REQUIRE(canonical.size() == grid.size());
}

TEST_CASE("spaces around tokens are accepted", "[spec][canonical]") {
  Spec s = parseValid("  mode = decode ,page_size= 16,  mask =sliding_window( 7 ) "
                      ", split_kv =\tauto , return_lse = true  ");
  CHECK(s.mode == Mode::Decode);
  CHECK(s.page_size == 16);
  CHECK(s.mask == Mask{MaskKind::SlidingWindow, 7});
  CHECK(s.split_kv == kSplitKVAuto);
  CHECK(s.return_lse);
}

TEST_CASE("symbols are C identifiers and distinct across the spec grid",
          "[spec][canonical]") {
  const std::vector<std::string> grid = specGrid();
  std::set<std::string> symbols;
  for (const std::string &text : grid) {
    Spec s = parseValid(text);
    const std::string sym = s.symbol();
    INFO("spec: " << s.str() << " symbol: " << sym);
    REQUIRE(isCIdentifier(sym));
    REQUIRE(sym.rfind("attn_", 0) == 0);
    symbols.insert(sym);
  }
  REQUIRE(symbols.size() == grid.size());
}

TEST_CASE("split_kv is ignored when comparing prefill specs",
          "[spec][canonical]") {
  Spec a = parseValid("");
  Spec b = a;
  b.split_kv = 7;
  CHECK(a == b);
  CHECK(a.str() == b.str());
  a.mode = b.mode = Mode::Decode;
  CHECK(a != b);
}
