//===- Attention.cpp - Spec from tensors, kernel, launch -------------------===//

#include "attnc/Attention.h"

namespace attn {

namespace {
std::string shapeText(const std::vector<int64_t> &s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i)
    t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}
} // namespace

std::optional<Spec> attentionSpec(const AttentionShape &s, Target target, std::string &error) {
  if (s.num_q_heads < 1 || s.num_kv_heads < 1) {
    error = std::string(s.num_q_heads < 1 ? "num_q_heads = " + std::to_string(s.num_q_heads)
                                          : "num_kv_heads = " + std::to_string(s.num_kv_heads)) +
            " must be >= 1";
    return std::nullopt;
  }
  if (s.num_q_heads % s.num_kv_heads != 0) {
    error = std::to_string(s.num_q_heads) + " query heads are not a multiple of " +
            std::to_string(s.num_kv_heads) + " KV heads (GQA)";
    return std::nullopt;
  }
  const int64_t group = s.num_q_heads / s.num_kv_heads;
  std::string text = std::string("head_dim=") + std::to_string(s.head_dim) +
                     ",dtype=" + name(s.dtype) + ",gqa=" + std::to_string(group) +
                     ",page_size=" + std::to_string(s.page_size) +
                     ",return_lse=" + (s.return_lse ? "true" : "false") + ",target=" + name(target);
  text += s.window > 0 ? ",mask=sliding_window(" + std::to_string(s.window) + ")"
          : s.causal   ? ",mask=causal"
                       : ",mask=none";
  // Decode kernels put a GQA group's heads for a few query tokens in one block
  // (each K/V tile read once for the group), over a paged or a contiguous cache.
  // attnc's choice leaves them to a call that sizes prefill tiles (tile_q), and
  // to one whose tile_kv does not fit the decode block's stages.
  const bool few = s.max_q_len >= 1 && s.max_q_len <= 16 && s.max_q_len * group <= 128;
  const std::string kvTile = s.tile_kv ? ",tile_kv=" + std::to_string(s.tile_kv) : "";
  auto decodeText = [&](bool withSplits) {
    std::string t = text + ",mode=decode,tile_q=" + std::to_string(std::max<int64_t>(1, s.max_q_len));
    if (withSplits && s.split_kv)
      t += ",split_kv=" + std::to_string(*s.split_kv);
    return t + kvTile;
  };
  bool decode = s.decode.value_or(few && !s.tile_q);
  if (s.decode.value_or(false) && s.max_q_len >= 1 && !few) {
    // Asked for decode kernels, the call's own sizes say why they do not fit
    // (the spec's tile_q and gqa are derived from them).
    error = "decode = true, but max_q_len = " + std::to_string(s.max_q_len) +
            (s.max_q_len > 16 ? ": the decode kernels take 1..16 query tokens"
                              : " query tokens x a GQA group of " + std::to_string(group) +
                                    " = " + std::to_string(s.max_q_len * group) +
                                    " rows: a decode block takes at most 128");
    return std::nullopt;
  }
  std::string decodeRefused; // why the decode kernels were left, when they were
  if (!s.decode && decode && s.tile_kv != 0)
    if (SpecResult tried = parseSpec(decodeText(false)); !tried) {
      decode = false;
      decodeRefused = tried.error->message();
    }
  if (!decode && s.split_kv && (s.max_q_len != 0 || s.decode || s.tile_q)) {
    // Only decode kernels split the keys: a split count asked of a prefill
    // kernel is refused rather than dropped, as the spec parser refuses it.
    // (An empty step, no query token, launches nothing: a decode server's
    // fixed count is no mistake there, unless the call also asks for
    // prefill kernels, decode = false or tile_q.)
    std::string why =
        s.decode                 ? "decode = false"
        : s.tile_q               ? "tile_q = " + std::to_string(s.tile_q) + " is given"
        : !decodeRefused.empty() ? "the decode kernels refuse it: " + decodeRefused
                                 : "max_q_len = " + std::to_string(s.max_q_len) +
                                       " with a GQA group of " + std::to_string(group) +
                                       " (decode takes 1..16 query tokens, at most 128 rows)";
    error = "split_kv = " + std::to_string(*s.split_kv) +
            ": only decode kernels split the keys, and these tensors take a prefill kernel (" +
            why + ")";
    return std::nullopt;
  }
  if (decode)
    text = decodeText(true);
  else
    text += (s.tile_q ? ",tile_q=" + std::to_string(s.tile_q) : "") + kvTile;
  SpecResult parsed = parseSpec(text);
  if (!parsed) {
    error = "the tensors imply " +
            (decodeRefused.empty() ? parsed.error->message()
                                   : "decode kernels, but " + decodeRefused +
                                         "; nor do the prefill kernels take it: " +
                                         parsed.error->message());
    return std::nullopt;
  }
  if (!decode && !s.tile_q && !s.tile_kv && longPrefillTiles(*parsed.spec, s.max_q_len)) {
    SpecResult along =
        parseSpec(text + ",tile_q=" + std::to_string(kWsTileQ64) + ",tile_kv=128");
    if (along)
      return along.spec;
  }
  return parsed.spec;
}

bool longPrefillTiles(const Spec &spec, int64_t max_q_len) {
  if (spec.mode != Mode::Prefill || spec.target != Target::SM90a || spec.head_dim != 64 ||
      spec.mma != MmaKind::Auto || hasTunedTiles(spec))
    return false;
  const bool otherMask = spec.mask.kind != MaskKind::None && spec.mask.kind != MaskKind::Causal;
  return !otherMask && max_q_len >= kLongPrefillRows;
}

std::optional<Spec> longPrefillDefaultSpec(const Spec &spec) {
  if (spec.tile_q != kWsTileQ64 || spec.tile_kv != 128 || spec.stages != kStagesAuto)
    return std::nullopt;
  Spec open = spec;
  open.tile_q = open.tile_kv = 0;
  if (!longPrefillTiles(open, kLongPrefillRows))
    return std::nullopt;
  applyDefaultTiles(open);
  if (open == spec || validateSpec(open))
    return std::nullopt;
  return open;
}

bool deriveAttention(const AttentionCall &c, Target target, Spec &spec, AttentionArgs &a,
                     std::string &error) {
  auto bad = [&](const std::string &m) {
    error = m;
    return false;
  };
  if (c.q.shape.size() != 3)
    return bad("q has shape " + shapeText(c.q.shape) + ": expected [total_q, heads, head_dim]");
  const bool paged = c.k.shape.size() == 4;
  if (c.k.shape.size() != 3 && !paged)
    return bad("k has shape " + shapeText(c.k.shape) +
               ": expected [total_kv, kv_heads, head_dim] or [pages, page_size, kv_heads, head_dim]");
  if (c.v.shape != c.k.shape)
    return bad("v has shape " + shapeText(c.v.shape) + " but k has " + shapeText(c.k.shape));
  if (c.out.shape != c.q.shape)
    return bad("out has shape " + shapeText(c.out.shape) + " but q has " + shapeText(c.q.shape));
  for (const auto &[t, n] : {std::pair<const TensorRef *, const char *>{&c.k, "k"},
                             {&c.v, "v"},
                             {&c.out, "out"}})
    if (t->dtype != c.q.dtype)
      return bad(std::string(n) + " is " + name(t->dtype) + " but q is " + name(c.q.dtype));
  const int64_t hq = c.q.shape[1], d = c.q.shape[2], hkv = c.k.shape[c.k.shape.size() - 2];
  if (c.k.shape.back() != d)
    return bad("k has head_dim " + std::to_string(c.k.shape.back()) + " but q has " +
               std::to_string(d));
  if (hkv < 1 || hq % hkv != 0)
    return bad("q has " + std::to_string(hq) + " heads, not a multiple of k's " +
               std::to_string(hkv) + " (GQA)");
  if (c.lse.data && (c.lse.dtype != DType::F32 ||
                     c.lse.shape != std::vector<int64_t>{c.q.shape[0], hq}))
    return bad("lse must be f32 [total_q, heads] = " + shapeText({c.q.shape[0], hq}) + ", got " +
               name(c.lse.dtype) + " " + shapeText(c.lse.shape));

  AttentionShape shape;
  shape.dtype = c.q.dtype;
  shape.head_dim = d;
  shape.num_q_heads = hq;
  shape.num_kv_heads = hkv;
  shape.page_size = paged ? c.k.shape[1] : 0;
  shape.max_q_len = c.max_q_len;
  shape.causal = c.causal;
  shape.window = c.window;
  shape.return_lse = c.lse.data != 0;
  shape.decode = c.decode;
  shape.split_kv = c.split_kv;
  std::optional<Spec> derived = attentionSpec(shape, target, error);
  if (!derived)
    return false;
  spec = *derived;

  a = AttentionArgs{};
  a.q = c.q.data;
  a.k = c.k.data;
  a.v = c.v.data;
  a.o = c.out.data;
  a.lse = c.lse.data;
  a.cu_seqlens_q = c.cu_seqlens_q;
  a.cu_seqlens_k = c.cu_seqlens_k;
  a.seq_lens_k = c.seq_lens_k;
  a.block_table = c.block_table;
  a.workspace = c.workspace;
  a.workspace_bytes = c.workspace_bytes;
  a.batch = c.batch;
  a.num_q_heads = static_cast<int>(hq);
  a.num_kv_heads = static_cast<int>(hkv);
  a.total_q = c.q.shape[0];
  a.total_kv = paged ? 0 : c.k.shape[0];
  a.num_pages = paged ? c.k.shape[0] : 0;
  a.block_table_stride = c.block_table_stride;
  a.max_q_len = c.max_q_len;
  a.max_kv_len = c.max_kv_len;
  a.scale = c.scale;
  a.kv_page_stride = c.kv_page_stride;
  a.kv_token_stride = c.kv_token_stride;
  a.kv_head_stride = c.kv_head_stride;
  return true;
}

int64_t attentionWorkspaceBytes(Runtime &runtime, const AttentionCall &call, std::string &error) {
  Spec spec;
  AttentionArgs args;
  if (!deriveAttention(call, runtime.target(), spec, args, error))
    return -1;
  KernelLookup k = runtime.kernel(spec);
  if (!k) {
    error = k.error;
    return -1;
  }
  // Sizes a launch would refuse have no workspace size (an overflowing one
  // would come back as -1 with no error).
  if (std::string bad = k.kernel->checkSizes(args); !bad.empty()) {
    error = bad;
    return -1;
  }
  return static_cast<int64_t>(k.kernel->workspaceBytes(args));
}

bool unsplitWithoutWorkspace(const AttentionCall &call, size_t need, AttentionArgs &args) {
  if (need == 0 || call.workspace || call.split_kv || args.num_splits > 0)
    return false;
  args.num_splits = 1;
  return true;
}

bool attention(Runtime &runtime, const AttentionCall &call, CUstream stream, std::string &error) {
  Spec spec;
  AttentionArgs args;
  if (!deriveAttention(call, runtime.target(), spec, args, error))
    return false;
  KernelLookup k = runtime.kernel(spec);
  if (!k) {
    error = k.error;
    return false;
  }
  if (k.kernel->checkSizes(args).empty())
    unsplitWithoutWorkspace(call, k.kernel->workspaceBytes(args), args);
  return k.kernel->launch(args, stream, error);
}

} // namespace attn
