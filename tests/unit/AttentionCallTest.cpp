//===- AttentionCallTest.cpp - The spec a call's tensors imply (no GPU) ---===//

#include "attnc/Attention.h"

#include <catch2/catch.hpp>

using namespace attn;

namespace {
AttentionCall pagedDecode() {
  AttentionCall c;
  c.q = {0x1000, {4, 32, 128}, DType::BF16};
  c.out = {0x2000, {4, 32, 128}, DType::BF16};
  c.k = {0x3000, {256, 16, 8, 128}, DType::BF16};
  c.v = {0x4000, {256, 16, 8, 128}, DType::BF16};
  c.cu_seqlens_q = 0x5000;
  c.seq_lens_k = 0x6000;
  c.block_table = 0x7000;
  c.batch = 4;
  c.block_table_stride = 64;
  c.max_q_len = 1;
  c.max_kv_len = 1024;
  return c;
}

/// A Llama-like layer's shape: head_dim 128, 32 query heads over 8 KV heads.
AttentionShape llamaShape(int64_t maxQLen) {
  AttentionShape s;
  s.head_dim = 128;
  s.num_q_heads = 32;
  s.num_kv_heads = 8;
  s.max_q_len = maxQLen;
  return s;
}
} // namespace

TEST_CASE("a call's tensors give the spec: paged decode, contiguous prefill", "[attention]") {
  Spec spec;
  AttentionArgs args;
  std::string error;
  REQUIRE(deriveAttention(pagedDecode(), Target::SM90a, spec, args, error));
  CHECK(spec.str() == "mode=decode,head_dim=128,dtype=bf16,tile_q=1,tile_kv=64,mask=none,"
                      "page_size=16,gqa=4,return_lse=false,target=sm_90a,split_kv=auto");
  CHECK(args.num_pages == 256);
  CHECK(args.num_q_heads == 32);
  CHECK(args.num_kv_heads == 8);
  CHECK(args.total_q == 4);
  CHECK((args.kv_page_stride == 0 && args.kv_token_stride == 0 && args.kv_head_stride == 0));
  // A cache of K and V pages side by side: its strides reach the launch.
  AttentionCall sideBySide = pagedDecode();
  sideBySide.kv_page_stride = 2 * 16 * 8 * 128;
  sideBySide.kv_token_stride = 8 * 128;
  sideBySide.kv_head_stride = 128;
  REQUIRE(deriveAttention(sideBySide, Target::SM90a, spec, args, error));
  CHECK((args.kv_page_stride == 2 * 16 * 8 * 128 && args.kv_token_stride == 8 * 128 &&
         args.kv_head_stride == 128));

  AttentionCall p;
  p.q = p.out = {0x1000, {8192, 16, 64}, DType::F16};
  p.k = p.v = {0x2000, {8192, 16, 64}, DType::F16};
  p.lse = {0x3000, {8192, 16}, DType::F32};
  p.cu_seqlens_q = p.cu_seqlens_k = 0x4000;
  p.batch = 2;
  p.max_q_len = p.max_kv_len = 4096;
  p.causal = true;
  REQUIRE(deriveAttention(p, Target::SM80, spec, args, error));
  CHECK(spec.mode == Mode::Prefill);
  CHECK(spec.dtype == DType::F16);
  CHECK(spec.head_dim == 64);
  CHECK(spec.mask.kind == MaskKind::Causal);
  CHECK(spec.return_lse);
  CHECK(spec.target == Target::SM80);
  CHECK(args.total_kv == 8192);
  p.window = 256;
  REQUIRE(deriveAttention(p, Target::SM80, spec, args, error));
  CHECK(spec.mask.str() == "sliding_window(256)");
}

TEST_CASE("a few query tokens over a contiguous cache take the decode kernels", "[attention]") {
  AttentionCall c;
  c.q = c.out = {0x1000, {4, 32, 128}, DType::BF16};
  c.k = c.v = {0x2000, {4 * 4096, 8, 128}, DType::BF16};
  c.cu_seqlens_q = 0x3000;
  c.cu_seqlens_k = 0x4000;
  c.batch = 4;
  c.max_q_len = 1;
  c.max_kv_len = 4096;
  Spec spec;
  AttentionArgs args;
  std::string error;
  REQUIRE(deriveAttention(c, Target::SM90a, spec, args, error));
  CHECK(spec.str() == "mode=decode,head_dim=128,dtype=bf16,tile_q=1,tile_kv=64,mask=none,"
                      "page_size=0,gqa=4,return_lse=false,target=sm_90a,split_kv=auto");
  CHECK(args.total_kv == 4 * 4096);
  CHECK(args.block_table == 0);
  // Up to 16 query tokens and 128 rows a block (tokens x the group's heads);
  // past either, and when the call asks, the prefill kernels.
  c.max_q_len = 16;
  c.q = c.out = {0x1000, {64, 32, 128}, DType::BF16};
  c.causal = true;
  REQUIRE(deriveAttention(c, Target::SM90a, spec, args, error));
  CHECK(spec.mode == Mode::Decode);
  CHECK(spec.tile_q == 16);
  c.max_q_len = 17;
  c.q = c.out = {0x1000, {68, 32, 128}, DType::BF16};
  REQUIRE(deriveAttention(c, Target::SM90a, spec, args, error));
  CHECK(spec.mode == Mode::Prefill);
  c.max_q_len = 1;
  c.q = c.out = {0x1000, {4, 32, 128}, DType::BF16};
  c.decode = false;
  REQUIRE(deriveAttention(c, Target::SM90a, spec, args, error));
  CHECK(spec.mode == Mode::Prefill);
}

TEST_CASE("attnc's decode choice yields to prefill tiles and to a tile_kv decode cannot hold",
          "[attention]") {
  AttentionShape s = llamaShape(2);
  std::string error;
  auto mode = [&](const AttentionShape &shape) {
    const std::optional<Spec> spec = attentionSpec(shape, Target::SM90a, error);
    INFO(error);
    REQUIRE(spec);
    return std::string(spec->mode == Mode::Decode ? "decode" : "prefill") + " " +
           std::to_string(spec->tile_q) + "x" + std::to_string(spec->tile_kv);
  };
  CHECK(mode(s) == "decode 2x64");
  AttentionShape tiled = s;
  tiled.tile_q = 64; // prefill tiles asked for
  CHECK(mode(tiled) == "prefill 64x64");
  AttentionShape wide = s;
  wide.tile_kv = 256; // three decode stages of 256 keys do not fit; one prefill stage does
  CHECK(mode(wide) == "prefill 128x256");
  wide.tile_kv = 128; // they do
  CHECK(mode(wide) == "decode 2x128");
  // Asked for decode, a tile_kv that does not fit is refused by name.
  wide.tile_kv = 256;
  wide.decode = true;
  CHECK(!attentionSpec(wide, Target::SM90a, error));
  CHECK(error.find("tile_kv = 256") != std::string::npos);
  tiled.decode = true;
  CHECK(mode(tiled) == "decode 2x64");
  // A tile_kv that neither block holds: the error names both refusals.
  AttentionShape neither = s;
  neither.head_dim = 256;
  neither.tile_kv = 256;
  CHECK(!attentionSpec(neither, Target::SM90a, error));
  CHECK(error.rfind("the tensors imply decode kernels, but invalid spec: tile_kv = 256", 0) == 0);
  CHECK(error.find("; nor do the prefill kernels take it: invalid spec: tile_kv = 256") !=
        std::string::npos);
}

TEST_CASE("a split count asked of a call that takes a prefill kernel is refused, not dropped",
          "[attention]") {
  AttentionShape s = llamaShape(1);
  s.split_kv = 4;
  std::string error;
  const std::optional<Spec> decode = attentionSpec(s, Target::SM90a, error);
  REQUIRE(decode);
  CHECK(decode->split_kv == 4);
  auto refusal = [&](const AttentionShape &shape) {
    error.clear();
    CHECK(!attentionSpec(shape, Target::SM90a, error));
    CHECK(error.rfind("split_kv = 4: only decode kernels split the keys, and these tensors take "
                      "a prefill kernel (",
                      0) == 0);
    return error;
  };
  AttentionShape many = s;
  many.max_q_len = 64;
  CHECK(refusal(many).find("max_q_len = 64 with a GQA group of 4") != std::string::npos);
  AttentionShape tiled = s;
  tiled.tile_q = 64;
  CHECK(refusal(tiled).find("tile_q = 64 is given") != std::string::npos);
  AttentionShape prefill = s;
  prefill.decode = false;
  CHECK(refusal(prefill).find("(decode = false)") != std::string::npos);
  AttentionShape wide = s;
  wide.tile_kv = 256; // no decode block holds it, so the call takes prefill
  CHECK(refusal(wide).find("the decode kernels refuse it: invalid spec: tile_kv = 256") !=
        std::string::npos);
  // Asked for decode kernels that cannot take the call, the call's sizes are named.
  AttentionShape forced = s;
  forced.split_kv.reset();
  forced.decode = true;
  forced.max_q_len = 17;
  CHECK(!attentionSpec(forced, Target::SM90a, error));
  CHECK(error == "decode = true, but max_q_len = 17: the decode kernels take 1..16 query tokens");
  forced.max_q_len = 16;
  forced.num_q_heads = 80; // a group of 10
  CHECK(!attentionSpec(forced, Target::SM90a, error));
  CHECK(error == "decode = true, but max_q_len = 16 query tokens x a GQA group of 10 = 160 rows: "
                 "a decode block takes at most 128");
  // An empty step (no query token) takes the prefill kernel, which launches
  // nothing, whatever split count a decode server passes.
  AttentionShape emptyStep = s;
  emptyStep.max_q_len = 0;
  REQUIRE(attentionSpec(emptyStep, Target::SM90a, error));
  // Unless the call asks for prefill kernels itself: the count is then refused.
  emptyStep.decode = false;
  CHECK(!attentionSpec(emptyStep, Target::SM90a, error));
  CHECK(error.rfind("split_kv = ", 0) == 0);
  CHECK(error.find("(decode = false)") != std::string::npos);
  emptyStep.decode.reset();
  emptyStep.tile_q = 64;
  CHECK(!attentionSpec(emptyStep, Target::SM90a, error));
  CHECK(error.find("(tile_q = 64 is given)") != std::string::npos);
  // Without a split count the same tensors take the prefill kernel as before.
  many.split_kv.reset();
  REQUIRE(attentionSpec(many, Target::SM90a, error));
}

TEST_CASE("without a workspace, a decode launch whose splits attnc chooses runs unsplit",
          "[attention]") {
  AttentionCall c;
  AttentionArgs a;
  CHECK(unsplitWithoutWorkspace(c, 4096, a));
  CHECK(a.num_splits == 1);
  a = {};
  CHECK(!unsplitWithoutWorkspace(c, 0, a)); // no workspace needed: attnc's count
  CHECK(a.num_splits == 0);
  c.workspace = 0x1000; // given: the splits merge through it
  CHECK(!unsplitWithoutWorkspace(c, 4096, a));
  CHECK(a.num_splits == 0);
  c.workspace = 0;
  c.split_kv = 3; // the call's own count: the launch refuses the missing workspace
  CHECK(!unsplitWithoutWorkspace(c, 4096, a));
  CHECK(a.num_splits == 0);
}

TEST_CASE("a long head_dim 64 prefill on sm_90a takes the warp-specialised 192 x 128 block",
          "[attention]") {
  auto specFor = [](int64_t maxQLen, bool causal, Target target = Target::SM90a) {
    AttentionShape s;
    s.head_dim = 64;
    s.num_q_heads = s.num_kv_heads = 16;
    s.max_q_len = maxQLen;
    s.causal = causal;
    std::string error;
    const std::optional<Spec> spec = attentionSpec(s, target, error);
    REQUIRE(spec);
    return *spec;
  };
  auto tiles = [](const Spec &s) { return std::to_string(s.tile_q) + "x" + std::to_string(s.tile_kv); };
  // From kLongPrefillRows, without a mask and under a causal one.
  CHECK(tiles(specFor(kLongPrefillRows - 1, false)) == "64x128");
  CHECK(tiles(specFor(kLongPrefillRows, false)) == "192x128");
  CHECK(warpSpecialised(specFor(kLongPrefillRows, false)));
  CHECK(tiles(specFor(kLongPrefillRows - 1, true)) == "64x64");
  CHECK(tiles(specFor(kLongPrefillRows, true)) == "192x128");
  CHECK(specFor(kLongPrefillRows, true).mma == MmaKind::Auto);
  // Other targets, head dims, masks, named blocks and given tiles keep the spec's rule.
  CHECK(tiles(specFor(1 << 20, false, Target::SM80)) != "192x128");
  Spec s = specFor(kLongPrefillRows, false);
  s.mask = Mask{MaskKind::SlidingWindow, 512};
  CHECK(!longPrefillTiles(s, 1 << 20));
  s = specFor(kLongPrefillRows, false);
  s.mma = MmaKind::Wgmma;
  CHECK(!longPrefillTiles(s, 1 << 20));
  s.mma = MmaKind::Auto;
  s.head_dim = 128;
  CHECK(!longPrefillTiles(s, 1 << 20));
  AttentionShape given;
  given.head_dim = 64;
  given.num_q_heads = given.num_kv_heads = 4;
  given.max_q_len = 1 << 16;
  given.tile_kv = 64;
  std::string error;
  const std::optional<Spec> kept = attentionSpec(given, Target::SM90a, error);
  REQUIRE(kept);
  CHECK(tiles(*kept) == "64x64");
  // Tiles tuned for the spec (`attnc tune`) win over the rule.
  setTileTuner([](const Spec &) -> std::optional<TunedTiles> { return TunedTiles{128, 128, 2}; });
  const Spec tuned = specFor(1 << 16, false);
  setTileTuner(nullptr);
  CHECK(tiles(tuned) == "128x128");
}

TEST_CASE("a long head_dim 64 prefill's tiles have the default ones as a twin", "[attention]") {
  auto spec = [](const std::string &text) {
    SpecResult r = parseSpec(text);
    REQUIRE(r);
    return *r.spec;
  };
  // The default tiles of what attentionSpec gives a long prompt, mask by mask.
  std::optional<Spec> twin =
      longPrefillDefaultSpec(spec("head_dim=64,target=sm_90a,tile_q=192,tile_kv=128"));
  REQUIRE(twin);
  CHECK(twin->str() == spec("head_dim=64,target=sm_90a").str());
  CHECK(twin->tile_q == 64);
  CHECK(twin->tile_kv == 128);
  twin = longPrefillDefaultSpec(
      spec("head_dim=64,mask=causal,page_size=16,gqa=4,target=sm_90a,tile_q=192,tile_kv=128"));
  REQUIRE(twin);
  CHECK(twin->str() == spec("head_dim=64,mask=causal,page_size=16,gqa=4,target=sm_90a").str());
  // Not tiles attentionSpec chooses: other tiles, a depth given, a named
  // block, a window mask, another head_dim or target; the default tiles.
  for (const char *other : {"head_dim=64,target=sm_90a,tile_q=192,tile_kv=64",
                            "head_dim=64,target=sm_90a,tile_q=192,tile_kv=128,stages=2",
                            "head_dim=64,target=sm_90a,tile_q=192,tile_kv=128,mma=wgmma_ws",
                            "head_dim=64,target=sm_90a,tile_q=192,tile_kv=128,"
                            "mask=sliding_window(100)",
                            "head_dim=64,target=sm_80,tile_q=192,tile_kv=128",
                            "head_dim=64,target=sm_90a"})
    CHECK_FALSE(longPrefillDefaultSpec(spec(other)));
  // Under a tuning table for the kind, attentionSpec takes its tiles instead.
  setTileTuner([](const Spec &) -> std::optional<TunedTiles> { return TunedTiles{128, 128, 2}; });
  const bool twinWhileTuned =
      longPrefillDefaultSpec(spec("head_dim=64,target=sm_90a,tile_q=192,tile_kv=128")).has_value();
  setTileTuner(nullptr);
  CHECK_FALSE(twinWhileTuned);
}

TEST_CASE("tensors that do not fit together are refused by name", "[attention]") {
  struct Case {
    const char *want;
    void (*edit)(AttentionCall &);
  };
  const Case cases[] = {
      {"q has shape [4, 32]: expected [total_q, heads, head_dim]",
       [](AttentionCall &c) { c.q.shape = {4, 32}; }},
      {"v has shape [256, 16, 8, 64] but k has [256, 16, 8, 128]",
       [](AttentionCall &c) { c.v.shape = {256, 16, 8, 64}; }},
      {"out has shape [4, 32, 64] but q has [4, 32, 128]",
       [](AttentionCall &c) { c.out.shape = {4, 32, 64}; }},
      {"k is f16 but q is bf16", [](AttentionCall &c) { c.k.dtype = DType::F16; }},
      {"q has 30 heads, not a multiple of k's 8 (GQA)",
       [](AttentionCall &c) { c.q.shape = c.out.shape = {4, 30, 128}; }},
      {"lse must be f32 [total_q, heads] = [4, 32], got f32 [4, 8]",
       [](AttentionCall &c) { c.lse = {0x8000, {4, 8}, DType::F32}; }},
      {"the tensors imply invalid spec: head_dim = 100",
       [](AttentionCall &c) {
         c.q.shape = c.out.shape = {4, 32, 100};
         c.k.shape = c.v.shape = {256, 16, 8, 100};
       }},
  };
  for (const Case &c : cases) {
    AttentionCall call = pagedDecode();
    c.edit(call);
    Spec spec;
    AttentionArgs args;
    std::string error;
    INFO(c.want);
    CHECK_FALSE(deriveAttention(call, Target::SM90a, spec, args, error));
    CHECK(error.rfind(c.want, 0) == 0);
  }
}
