#!/usr/bin/env python3
"""Writes the hand-made kernel variants of bench/experiments/README.md.

  variants.py prefill-ws OUTDIR
      the warp-specialised prefill block (prefill_ws.cu.in), head_dim 128,
      no mask and causal, in the configurations the README's table names
  variants.py prefill-kv-split EMITTED.cu OUTDIR
      an emitted one-stage wgmma prefill kernel (`attnc emit --spec
      mode=prefill,head_dim=128,mma=wgmma --stage cuda`) whose next K tile loads once
      every warp's S = Q K^T is done and whose next V tile once P V is; as
      emitted (kv_split.cu) and held to three blocks per SM (kv_split_3_blocks.cu)
  variants.py decode-prefetch EMITTED.cu OUTDIR
      an emitted paged decode kernel (`attnc emit --spec
      mode=decode,page_size=16,gqa=4 --stage cuda`) that also prefetches K/V
      tiles into L2 ahead of their shared-memory copies
  variants.py decode-cache-policy EMITTED.cu OUTDIR
      the same emitted decode kernel whose K/V copies carry an L2 cache
      policy (createpolicy + cp.async ... L2::cache_hint): evict_first on all
      or half of them, evict_normal, and two policies given as constant
      encodings: evict_first's and 0x10F0000000000000, which runs as the
      unhinted copy does (the control of the hinted form)
  variants.py decode-heads-in-step EMITTED.cu OUTDIR
      the same emitted decode kernel launched in thread-block clusters of 2,
      4 or 8 of a sequence's KV heads (__cluster_dims__), whose blocks wait
      at a cluster barrier once a tile so that none runs more than a tile
      ahead of the others; and clusters of 8 without the barrier (the cost
      of the clusters alone)
  variants.py decode-keys-as-m EMITTED.cu OUTDIR
      the same emitted decode kernel (or its GQA 8 twin) with the keys as the
      MMA's M dimension: S^T = K Q^T and O^T += V^T P^T, 8 query rows a pass
      (decode_keys_as_m.cuh.in): half the mma instructions and half the
      accumulator of the emitted block, which pads its rows to 16; blocks of
      a cluster keep the emitted code
  variants.py decode-cols EMITTED.cu OUTDIR
      the same emitted decode kernel whose warps split the output's columns
      instead of the tile's keys (decode_cols.cuh.in): every warp computes
      S = Q K^T and the softmax for all the tile's keys, and P V for its
      head_dim / 4 columns, so no merge of the warps' states ends the block;
      blocks of a cluster keep the emitted code
  variants.py decode-delay EMITTED.cu OUTDIR
      the same emitted decode kernel with a fixed delay per block (a clock64
      spin of 2000 or 8000 cycles), at its start or between its KV loop and
      its epilogue: how much of a block's fixed cost the other blocks hide,
      row by row
  variants.py decode-persistent EMITTED.cu OUTDIR
      the same emitted decode kernel whose unsplit launches run a persistent
      block (decode_persistent.cuh.in): it claims (sequence, KV head) items
      from a counter and streams the next item's tiles while it finishes the
      current one; decode_persistent_workers.cu keeps two blocks per SM at
      work and ends the grid's others at once, decode_persistent_all.cu lets
      every block of the grid claim until the items run out
  variants.py decode-kv-release EMITTED.cu OUTDIR
      an emitted two-stage decode kernel (`attnc emit --spec
      mode=decode,page_size=16,gqa=4,stages=2,split_kv=1 --stage cuda`):
      held to three blocks per SM (decode_st2_3_blocks.cu); with a tile's K
      stage given to tile j + 2's K as soon as every warp has S = Q K^T and
      its V stage at the next tile's barrier (decode_kv_release.cu, a tile
      and a half in flight while a tile is computed); and both
      (decode_kv_release_3_blocks.cu)

  variants.py decode-successor EMITTED.cu OUTDIR
      the same emitted decode kernel whose unsplit blocks, a few tiles before
      their end, warm the L2 for the block that will take their place on the
      SM (the block 2 x SMs later in launch order): its block-table line
      alone (decode_succ_table3.cu, 3 tiles before the end), or also its
      first two K/V tiles, the table entries read 3 or 5 tiles before the
      end and the rows prefetched a tile later (decode_succ_tiles3.cu,
      decode_succ_tiles5.cu): whether a block's start, two reads in a row
      (table entries, then K/V), costs the launch what the grid cannot hide
  variants.py decode-bulk EMITTED.cu OUTDIR
      the same emitted decode kernel whose K/V rows are copied by sm_90's
      copy engine (decode_bulk.cuh.in): each thread hands one K or V row of
      the tile to cp.async.bulk and every thread waits for its stage on an
      mbarrier that counts the bytes in, instead of 16 cp.async of 16 bytes
      per thread and cp.async.wait_group; the stages' rows are padded to
      head_dim + 8 elements instead of swizzled, since a bulk copy writes a
      row as it lies (decode_bulk.cu, its launch line's shared memory grown
      to match)
  variants.py prefill-params EMITTED.cu OUTDIR
      an emitted prefill kernel over a contiguous cache as emitted
      (new_params.cu), and with the kernel arguments as they were before the
      paged cache's strides were added (old_params.cu: templates/attn/
      params.cuh of this checkout without its kv_*_stride member, placed
      ahead of the kernel so that the embedded one is skipped): what the
      larger Params alone does to ptxas' code. The runtime's Params starts as
      the old one did, so the old kernel reads its arguments right

Each output is a --source for `attn-gpu-check --bench` (tests/gpu/GpuBench.cpp),
which times it on its spec's rows and checks its output against the emitted
kernel's on the same inputs. The edits find their places by text in the
emitted source of the commit named in the README; a source without one of
them is refused with the place named, and nothing is written.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


PAIR_COMMENT = "// attn-split-kv: splits as the two pipelines of a block (launch: pair_shared_bytes)."


class Refused(Exception):
    """Bad input: the message says what, and nothing has been written."""


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise Refused("cannot read %s: %s" % (path, e.strerror))


def write_all(outdir, files):
    """Writes {name: text} into outdir (made if missing)."""
    try:
        os.makedirs(outdir, exist_ok=True)
        for name, text in files.items():
            with open(os.path.join(outdir, name), "w") as f:
                f.write(text)
    except OSError as e:
        raise Refused("cannot write into %s: %s" % (outdir, e.strerror))


def require(text, anchor, what, path):
    """Refuses a source without `anchor` (the place named `what`)."""
    if anchor not in text:
        raise Refused("%s has no %s: not the kernel this command edits, or emitted by another attnc" % (path, what))


def replace_once(text, anchor, new, what, path):
    require(text, anchor, what, path)
    return text.replace(anchor, new, 1)


def prefill_ws(outdir):
    template = read(os.path.join(HERE, "prefill_ws.cu.in"))
    # (name, tile_kv, stages, threads, registers of the producer and the consumers
    # (none: no setmaxnreg), WS_OVERLAP). With 384 threads the counts must keep
    # 128 * producer + 256 * consumers <= 384 * 168; below 80 the producer's loop spills.
    configs = [("ws288_kv64_s2", 64, 2, 288, None, 0), ("ws288_kv64_s4", 64, 4, 288, None, 0),
               ("ws288_kv128_s2", 128, 2, 288, None, 0), ("ws288_kv128_s3", 128, 3, 288, None, 0),
               ("ws384_r56_kv64_s4", 64, 4, 384, (56, 224), 0), ("ws384_r56_kv128_s3", 128, 3, 384, (56, 224), 0),
               ("ws384_r56_overlap_kv64_s4", 64, 4, 384, (56, 224), 1),
               ("ws384_r72_kv64_s4", 64, 4, 384, (72, 216), 0), ("ws384_r72_kv128_s3", 128, 3, 384, (72, 216), 0),
               ("ws384_r72_overlap_kv64_s4", 64, 4, 384, (72, 216), 1),
               ("ws384_noregs_kv64_s4", 64, 4, 384, None, 0),
               ("ws384_r80_kv64_s4", 64, 4, 384, (80, 208), 0), ("ws384_r80_overlap_kv64_s4", 64, 4, 384, (80, 208), 1),
               ("ws384_r96_kv64_s4", 64, 4, 384, (96, 200), 0), ("ws384_r96_overlap_kv64_s4", 64, 4, 384, (96, 200), 1),
               ("ws384_r96_kv128_s3", 128, 3, 384, (96, 200), 0)]
    # The same with all four warps of the third warpgroup copying (WS_PRODUCER_WARPS = 4).
    # (With 40 / 232 registers the producers spill, and kv 128 overlapped is serialised.)
    configs4 = [("ws384_4p_r56_kv128_s3", 128, 3, 384, (56, 224), 0),
                ("ws384_4p_r56_kv64_s4", 64, 4, 384, (56, 224), 0),
                ("ws384_4p_r56_overlap_kv64_s4", 64, 4, 384, (56, 224), 1)]
    # The same two consumer warpgroups taking turns on the tensor cores (WS_PINGPONG = 1).
    configs_pp = [("ws288_pp_kv128_s3", 128, 3, 288, None, 0),
                  ("ws384_pp_r96_kv128_s3", 128, 3, 384, (96, 200), 0),
                  ("ws384_pp_4p_r56_kv128_s3", 128, 3, 384, (56, 224), 0),
                  ("ws384_pp_4p_r56_overlap_kv64_s4", 64, 4, 384, (56, 224), 1)]
    files = {}
    for mask, kmask, sym in [("none", "kMaskNone", "nomask"), ("causal", "kMaskCausal", "causal")]:
        for name, tkv, stages, threads, regs, overlap in configs + configs4 + configs_pp:
            smem = 128 * 128 * 2 + stages * 2 * tkv * 128 * 2 + 16 * stages
            producer, consumers = regs or (0, 0)
            text = template
            for key, value in [("@TKV@", tkv), ("@MASKSYM@", sym), ("@MASK@", mask), ("@KMASK@", kmask),
                               ("@STAGES@", stages), ("@SMEM@", smem), ("@THREADS@", threads),
                               ("@REGS@", 1 if regs else 0), ("@PRODUCER_REGS@", producer),
                               ("@CONSUMER_REGS@", consumers), ("@OVERLAP@", overlap),
                               ("@PRODUCER_WARPS@", 4 if "_4p_" in name else 1),
                               ("@PINGPONG@", 1 if "_pp_" in name else 0)]:
                text = text.replace(key, str(value))
            files["%s_%s.cu" % (name, sym)] = text
    write_all(outdir, files)


KV_SPLIT_LOOP = r'''  // bench/experiments: the next tile's K loads once every warp's S = Q K^T of this one
  // is done, its V once P V is (one stage each, four barriers a tile).
  load_tile<Cfg, Cfg::kTileQ>(smem_q, [&](int r) -> const Elem * {
    return q_start + r < q_len ? q + (q_start + r) * q_row : nullptr; }, q);
  cp_async_commit();
  static_assert(kSteps == 1, "one step per tile");
  auto copy = [&](int j, bool v) {
    if (j < tile_hi) {
      const KVTile<Cfg, Cfg::kTileKV> rows(kv, j * Cfg::kTileKV);
      rows.copy(v ? smem_v : smem_k, kv, v ? kv.v : kv.k, kv_head);
    }
    cp_async_commit();
  };
  copy(tile_lo, false);
  copy(tile_lo, true);
  WarpState<Cfg> state;
  state.init();
  for (int j = tile_lo; j < tile_hi; ++j) {
    cp_async_wait<1>(); // (Q and) K of tile j
    fence_async_shared();
    __syncthreads();
    Scores<Cfg> s;
    qk_wgmma<Cfg>(s, smem_q, warp, smem_k);
    __syncthreads(); // every warp is done with K of tile j
    copy(j + 1, false);
    if (j < steps.full_lo || j >= steps.full_hi)
      apply_mask<Cfg>(s, q_start + warp * Cfg::kWarpRows, j * Cfg::kStepKV, q_len, kv_len);
    state.update(s, p.scale_log2);
    cp_async_wait<1>(); // V of tile j
    fence_async_shared();
    __syncthreads();
    accumulate_pv_wgmma<Cfg>(state, s, smem_v);
    __syncthreads(); // every warp is done with V of tile j
    copy(j + 1, true);
  }

'''


def prefill_kv_split(emitted, outdir):
    text = read(emitted)
    start = "  // attn-online-softmax: the query tile is loaded once"
    end = "  // attn-online-softmax: normalise once"
    bounds = "__launch_bounds__(Cfg::kThreads, 1)"
    for anchor, what in [(start, "query tile's load"), (end, "normalisation"), (bounds, "launch bounds")]:
        replace_once(text, anchor, anchor, what, emitted)
    a, b = text.index(start), text.index(end)
    if b < a:
        raise Refused("%s: its normalisation comes before the query tile's load" % emitted)
    if "kStages = 1;" not in text:
        raise Refused("%s is not a one-stage kernel (the edit keeps one stage of K and one of V)" % emitted)
    split = text[:a] + KV_SPLIT_LOOP + text[b:]
    write_all(outdir, {"kv_split.cu": split,
                       "kv_split_3_blocks.cu": split.replace(bounds, "__launch_bounds__(Cfg::kThreads, 3)")})


PREFETCH_HELPER = r'''
// bench/experiments: K/V tile `tile` into L2 (one 256-byte row per thread: K rows by
// threads 0-63, V rows by 64-127), from its block-table entries `lk`.
template <class Cache, class L>
__device__ __forceinline__ void prefetch_tile(const Cache &kv, int tile, const L &lk, unsigned tid, int kv_head) {
  const int row = tid % Cfg::kTileKV, run = row / Cfg::kPageSize;
  int e = lk.entry[0];
#pragma unroll
  for (int r = 1; r < Cfg::kTileKV / Cfg::kPageSize; ++r)
    if (run == r)
      e = lk.entry[r]; // no dynamic index into the entries (they stay in registers)
  const int t = tile * Cfg::kTileKV + row;
  if (static_cast<unsigned>(e) < static_cast<unsigned>(kv.num_pages) && t < kv.kv_len) {
    const Elem *a = (tid < Cfg::kTileKV ? kv.k : kv.v) +
                    kv.at(e * Cfg::kPageSize + row % Cfg::kPageSize, kv_head);
#if PF_BULK
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 256;" ::"l"(a) : "memory");
#else
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a + 64));
#endif
  }
}
'''


def decode_prefetch(emitted, outdir):
    src = read(emitted)
    files = {}
    # (name, tiles prefetched beyond the shared-memory copies, bulk, only the last N blocks)
    configs = [("table3", 0, 0, 0), ("pf1", 1, 0, 0), ("pf1_bulk", 1, 1, 0), ("pf2_bulk", 2, 1, 0),
               ("pf1_bulk_last264", 1, 1, 264), ("pf2_bulk_last264", 2, 1, 264)]
    for name, ahead, bulk, tail in configs:
        s = replace_once(src, "static constexpr int kTableAhead = 2;",
                         "static constexpr int kTableAhead = %d;" % (ahead + 2 if ahead else 3), "kTableAhead = 2", emitted)
        s = replace_once(s, '#include "attn/decode.cuh"\n', '#include "attn/decode.cuh"\n#define PF_AHEAD %d\n'
                         "#define PF_BULK %d\n#define PF_LAST %d\n" % (ahead, bulk, tail), "decode.cuh include", emitted)
        s = replace_once(s, "namespace {\n/// The whole block", PREFETCH_HELPER + "\nnamespace {\n/// The whole block",
                         "BlockCfg", emitted)
        s = replace_once(s, "  using Copy = PageRuns<Cfg>;\n", "  using Copy = PageRuns<Cfg>;\n"
                         "  const unsigned pf_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
                         "  const bool pf_on = PF_AHEAD > 0 &&\n"
                         "                     (PF_LAST == 0 || pf_block + PF_LAST >= gridDim.x * gridDim.y * gridDim.z);\n",
                         "PageRuns copy", emitted)
        start = "    // attn-online-softmax: m = -inf, l = 0, acc = 0; each warp takes 16 keys of every tile.\n"
        s = replace_once(s, start, "#if PF_AHEAD > 0\n    if (pf_on) // the tiles after the first copies\n"
                         "#pragma unroll\n      for (int i = 0; i < PF_AHEAD; ++i)\n"
                         "        if (mine.lo + Cfg::kStages - 1 + i < mine.hi)\n"
                         "          prefetch_tile(kv, mine.lo + Cfg::kStages - 1 + i, next[i], tid, kv_head);\n#endif\n"
                         + start, "the state's initialisation", emitted)
        shift = "      next[Cfg::kTableAhead - 1] = Copy::Lookups(kv, (ahead + Cfg::kTableAhead) * Cfg::kTileKV);\n"
        s = replace_once(s, shift, shift + "#if PF_AHEAD > 0\n      if (pf_on && ahead + PF_AHEAD < mine.hi)\n"
                         "        prefetch_tile(kv, ahead + PF_AHEAD, next[PF_AHEAD - 1], tid, kv_head);\n#endif\n",
                         "the table ring's shift", emitted)
        files["decode_%s.cu" % name] = s
    write_all(outdir, files)


POLICY_COPY = r'''
// bench/experiments: PageRuns whose cp.async copies carry an L2 cache policy:
// POLICY_CONST where nonzero (a policy's 64-bit encoding), else POLICY (a
// createpolicy.fractional qualifier and fraction), made once per thread.
// copy_kv is PageRuns::copy_kv (attn/block.cuh) with copy16 for cp_async_16:
// the templates' copy takes no cache policy.
template <class C>
struct PageRunsPolicy : PageRuns<C> {
  using Base = PageRuns<C>;
  using E = typename C::Elem;
  unsigned long long policy;
  template <class Cache>
  __device__ __forceinline__ PageRunsPolicy(const Cache &kv, int h, unsigned tid) : Base(kv, h, tid) {
    if (POLICY_CONST)
      policy = POLICY_CONST;
    else
      asm volatile("createpolicy.fractional.L2::" POLICY ";" : "=l"(policy));
  }
  __device__ __forceinline__ void copy16(unsigned smem, const void *gmem, bool valid) const {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;"
                 ::"r"(smem), "l"(gmem), "r"(valid ? 16u : 0u),
                 "l"(POLICY_CONST ? static_cast<unsigned long long>(POLICY_CONST) : policy));
  }
  template <class Cache>
  __device__ __forceinline__ void copy_kv(E *smem_k, E *smem_v, const Cache &kv, int t0,
                                          const typename Base::Lookups &read) const {
    const unsigned k_dst = smem_addr(smem_k) + this->dst, v_dst = smem_addr(smem_v) + this->dst;
#pragma unroll
    for (int run = 0; run < Base::kRuns; ++run) {
      const int t = t0 + run * Base::kRun, entry = read.entry[run];
      const bool in_cache = static_cast<unsigned>(entry) < static_cast<unsigned>(kv.num_pages);
      const int rows_left = in_cache ? kv.kv_len - (t + this->first_row) : 0;
      const i64 at = (i64)(in_cache ? entry : 0) * kv.page_stride + (t % Base::kPage) * kv.token_stride + this->offset;
      const E *k = kv.k + at, *v = kv.v + at;
#pragma unroll
      for (int i = 0; i < Base::kRun / Base::kRowStep; ++i) {
        const bool valid = i * Base::kRowStep < rows_left;
        const unsigned row_bytes = (run * Base::kRun + i * Base::kRowStep) * C::kHeadDim * sizeof(E);
        copy16(k_dst + row_bytes, k + (i64)i * this->row_step, valid);
        copy16(v_dst + row_bytes, v + (i64)i * this->row_step, valid);
      }
    }
  }
};
'''


def decode_cache_policy(emitted, outdir):
    src = read(emitted)
    files = {}
    # (name, createpolicy qualifiers and operands after "createpolicy.fractional.L2::",
    # or the policy's encoding as a constant: that of evict_first or evict_normal, 1.0)
    configs = [("evict_first", "evict_first.b64 %0, 1.0", 0),
               ("evict_first_half", "evict_first.L2::evict_unchanged.b64 %0, 0.5", 0),
               ("evict_normal", "evict_normal.b64 %0, 1.0", 0),
               ("evict_first_const", "", 0x12F0000000000000),
               ("evict_normal_const", "", 0x10F0000000000000)]
    for name, policy, const in configs:
        s = replace_once(src, '#include "attn/decode.cuh"\n', '#include "attn/decode.cuh"\n#define POLICY "%s"\n'
                         "#define POLICY_CONST 0x%xull\n" % (policy, const), "decode.cuh include", emitted)
        s = replace_once(s, "namespace {\n/// The whole block", POLICY_COPY + "\nnamespace {\n/// The whole block",
                         "BlockCfg", emitted)
        s = replace_once(s, "  using Copy = PageRuns<Cfg>;\n", "  using Copy = PageRunsPolicy<Cfg>;\n",
                         "PageRuns copy", emitted)
        files["decode_%s.cu" % name] = s
    write_all(outdir, files)


def decode_heads_in_step(emitted, outdir):
    src = read(emitted)
    files = {}
    loop = "    for (int j = mine.lo; j < mine.hi; ++j) {\n"
    issued = "      cp_async_commit();\n#pragma unroll\n      for (int i = 0; i + 1 < Cfg::kTableAhead; ++i)"
    after = "    pipe_sync_evenly<kPipes"
    arrive = '    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");\n'
    wait = '    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");\n'
    for blocks, in_step in ((8, True), (4, True), (2, True), (8, False)):
        s = src
        # the main kernel only: the pair kernel's lines sit under ATTN_PAIR_PROGRAM
        marker = "extern \"C\" __global__ void __launch_bounds__(Cfg::kThreads, 1) "
        s = replace_once(s, marker, "extern \"C\" __global__ void __cluster_dims__(1, %d, 1) "
                         "__launch_bounds__(Cfg::kThreads, 1) " % blocks, "main kernel", emitted)
        s = replace_once(s, "  const bool clustered = cluster_place().blocks > 1;\n",
                         "  const bool clustered = false; // the cluster holds KV heads here, not splits\n",
                         "decode cluster test", emitted)
        if in_step:
            s = replace_once(s, loop, arrive + loop, "the KV loop", emitted)
            s = replace_once(s, issued, "      cp_async_commit();\n"
                             "      // no KV head of the cluster more than a tile ahead of the others\n  "
                             + wait + "  " + arrive
                             + "#pragma unroll\n      for (int i = 0; i + 1 < Cfg::kTableAhead; ++i)",
                             "the copy after the barrier", emitted)
            s = replace_once(s, after, wait + after, "the loop's end", emitted)
        files["decode_heads_c%d%s.cu" % (blocks, "" if in_step else "_free")] = s
    write_all(outdir, files)


def edited_decode_block(emitted, name, edits, helpers_file):
    """The emitted source with a copy of its decode_block named `name`, edited
    by `edits` ((anchor, new text, what) each), after the emitted one, and
    the helpers of `helpers_file` after the decode.cuh include."""
    src = read(emitted)
    start = "template <int kPipes>\n__device__ __forceinline__ void decode_block(const Params &p) {\n"
    end = "\n}\n\n// attn-split-kv: splits as the two pipelines"
    if start not in src or end not in src[src.find(start):]:
        raise Refused("%s has no decode_block: not the kernel this command edits, or emitted by another "
                      "attnc" % emitted)
    body = src[src.find(start):src.find(end, src.find(start)) + 3]
    t = body.replace("void decode_block(", "void %s(" % name, 1)
    for anchor, new, what in edits:
        t = replace_once(t, anchor, new, what, emitted)
    helpers = read(os.path.join(HERE, helpers_file))
    s = replace_once(src, '#include "attn/decode.cuh"\n', '#include "attn/decode.cuh"\n' + helpers,
                     "decode.cuh include", emitted)
    return replace_once(s, end, end.replace("\n}\n\n", "\n}\n\n" + t + "\n\n", 1), "the end of decode_block",
                        emitted)


def decode_keys_as_m(emitted, outdir):
    edits = (
        ("row0 += Cfg::kTileQ)", "row0 += 8)", "the q_tiles loop"),
        ("min(row0 + Cfg::kTileQ, rows)", "min(row0 + 8, rows)", "the rows of a pass"),
        ("    DecodeState<Block> state;\n", "    KeysAsMState<Block> state;\n", "the warp state"),
        ("    DecodeQuery<Block> query;", "    KeysAsMQuery<Block> query;", "the query fragments"),
        ("      DecodeScores<Block> s;\n", "      float s[4]; // S^T: this warp's 16 keys x 8 rows\n",
         "the scores"),
        ("        decode_mask<Block>(s,", "        keys_as_m_mask<Block>(s,", "the mask"),
        ("      decode_pv<Block>(state, s, smem_v(stage), warp);",
         "      keys_as_m_pv<Block>(state, s, smem_v(stage), warp);", "P V"),
        # the cluster's merge stays the emitted kernel's: clustered blocks take decode_block
        ("    decode_store_rows<Block>(state, scratch, row0, rows, sink, clustered);",
         "    keys_as_m_store<Block>(state, scratch, row0, rows, sink);", "the store"),
    )
    s = edited_decode_block(emitted, "decode_block_keys_as_m", edits, "decode_keys_as_m.cuh.in")
    # with the emitted block for clusters, and (only) without it: a cluster's
    # blocks then store nothing, and the check against the emitted kernel says so
    body_call = "  decode_block<1>(p);\n"
    files = {
        "decode_keys_as_m.cu": replace_once(
            s, body_call, "  if (cluster_place().blocks > 1)\n    decode_block<1>(p);\n"
            "  else\n    decode_block_keys_as_m<1>(p);\n", "the main kernel's body", emitted),
        "decode_keys_as_m_only.cu": replace_once(
            s, body_call, "  if (cluster_place().blocks == 1)\n    decode_block_keys_as_m<1>(p);\n",
            "the main kernel's body", emitted)}
    write_all(outdir, files)


def decode_cols(emitted, outdir):
    edits = (
        ("    DecodeState<Block> state;\n", "    ColsState<Block> state;\n", "the warp state"),
        ("  float *scratch = ", "  [[maybe_unused]] float *scratch = ", "the merge's scratch"),
        ("      DecodeScores<Block> s;\n", "      float s[Cfg::kTileKV / 8][4]; // S: the whole tile\n",
         "the scores"),
        ("      query.qk(s, smem_k(stage), warp);", "      cols_qk<Block>(query, s, smem_k(stage));", "S = Q K^T"),
        ("        decode_mask<Block>(s, row0, j * Cfg::kTileKV + warp * 16,",
         "        cols_mask<Block>(s, row0, j * Cfg::kTileKV,", "the mask"),
        ("      decode_pv<Block>(state, s, smem_v(stage), warp);",
         "      cols_pv<Block>(state, s, smem_v(stage), warp);", "P V"),
        ("    cp_async_wait<0>();\n    __syncthreads();\n",
         "    cp_async_wait<0>();\n    if (row0 + Cfg::kTileQ < rows)\n      __syncthreads(); // the next rows reuse "
         "the stages\n", "the barrier after the loop"),
        ("    decode_store_rows<Block>(state, scratch, row0, rows, sink, clustered);\n",
         "    cols_store<Block>(state, row0, rows, sink, warp);\n", "the store"),
    )
    s = edited_decode_block(emitted, "decode_block_cols", edits, "decode_cols.cuh.in")
    # a cluster's blocks merge their splits: they keep the emitted block
    files = {"decode_cols.cu": replace_once(
        s, "  decode_block<1>(p);\n", "  if (cluster_place().blocks > 1)\n    decode_block<1>(p);\n"
        "  else\n    decode_block_cols<1>(p);\n", "the main kernel's body", emitted)}
    write_all(outdir, files)


def decode_delay(emitted, outdir):
    src = read(emitted)
    files = {}
    end = "    cp_async_wait<0>();\n    __syncthreads();\n    allow_merge_launch();"
    start = "warp = tid / 32;\n  const int *cu_q"
    for cycles in (2000, 8000):
        spin = ("{ const long long t0 = clock64(); while (clock64() - t0 < %d) { } } "
                "// a fixed delay, all threads\n" % cycles)
        files["decode_delay_end%d.cu" % cycles] = replace_once(src, end, "    " + spin + end,
                                                               "the end of the KV loop", emitted)
        files["decode_delay_start%d.cu" % cycles] = replace_once(
            src, start, "warp = tid / 32;\n  " + spin + "  const int *cu_q", "the block's start", emitted)
    write_all(outdir, files)


def decode_persistent(emitted, outdir):
    src = read(emitted)
    helpers = read(os.path.join(HERE, "decode_persistent.cuh.in"))
    s = replace_once(src, PAIR_COMMENT, helpers + "\n" + PAIR_COMMENT, "the pair kernel's comment", emitted)
    body = "  decode_block<1>(p);\n}\n\n// attn-split-kv: the merge"
    files = {}
    for name, workers in (("workers", "true"), ("all", "false")):
        files["decode_persistent_%s.cu" % name] = replace_once(
            s, body, "  if (p.num_splits == 1 && cluster_place().blocks == 1)\n    decode_persistent<%s>(p);\n"
            "  else\n    decode_block<1>(p);\n}\n\n// attn-split-kv: the merge" % workers,
            "the main kernel's body", emitted)
    write_all(outdir, files)


def decode_kv_release(emitted, outdir):
    src = read(emitted)
    require(src, "static constexpr int kStages = 2;", "kStages = 2", emitted)  # a two-stage kernel only
    bounds = "extern \"C\" __global__ void __launch_bounds__(Cfg::kThreads, 1) attn_decode"
    three = bounds.replace("(Cfg::kThreads, 1)", "(Cfg::kThreads, 3)")
    start = "    // The first kStages - 1 tiles start loading.\n"
    end = "    // Two pipelines: each passes its barrier as often"
    require(src, start, "the first copies", emitted)
    require(src, end, "the loop's end", emitted)
    loop = read(os.path.join(HERE, "decode_kv_release_loop.cu.in"))
    released = src[:src.index(start)] + loop + src[src.index(end):]
    block_cfg = "namespace {\n/// The whole block when it runs kPipes K/V pipelines"
    released = replace_once(released, block_cfg, read(os.path.join(HERE, "decode_kv_release.cuh.in")) + "\n" +
                            block_cfg, "BlockCfg", emitted)
    write_all(outdir, {"decode_st2_3_blocks.cu": replace_once(src, bounds, three, "the main kernel", emitted),
                       "decode_kv_release.cu": released,
                       "decode_kv_release_3_blocks.cu": replace_once(released, bounds, three, "the main kernel",
                                                                     emitted)})


SUCCESSOR_STATE = r'''
    // bench/experiments decode-successor: the block that takes this one's place
    // on its SM when it ends, taken to be the one SUCC_PER_SM x SMs later in
    // launch order (unsplit launches, where grid x is 1: y = KV head, z = sequence).
    unsigned succ_sms;
    asm("mov.u32 %0, %%nsmid;" : "=r"(succ_sms));
    const unsigned succ_block = blockIdx.y + gridDim.y * blockIdx.z + SUCC_PER_SM * succ_sms;
    const bool succ_on = kPipes == 1 && gridDim.x == 1 && !clustered && succ_block < gridDim.y * gridDim.z;
    const int succ_head = succ_block % gridDim.y, succ_seq = succ_block / gridDim.y;
    const int *succ_table = reinterpret_cast<const int *>(p.block_table) + (i64)succ_seq * p.block_table_stride;
    int succ_entry = -1; // SUCC_TILES: the page of the successor's first tiles this thread warms
'''

SUCCESSOR_LOOP = r'''#if SUCC_TILES
      // the successor's first two tiles: thread t warms token t % 16 of page t / 16
      // (4 pages a tile), K and V, its head's 256-byte row (two lines each)
      if (succ_on && j == mine.hi - SUCC_AT) {
        const int i = tid / 16;
        succ_entry = i < p.block_table_stride ? __ldg(succ_table + i) : -1;
      }
      if (succ_on && j == mine.hi - SUCC_AT + 1 && static_cast<unsigned>(succ_entry) < static_cast<unsigned>(kv.num_pages)) {
        const i64 at = (i64)succ_entry * kv.page_stride + (tid % 16) * kv.token_stride + succ_head * kv.head_stride;
        const char *k = reinterpret_cast<const char *>(kv.k + at), *v = reinterpret_cast<const char *>(kv.v + at);
        asm volatile("prefetch.global.L2 [%0];" ::"l"(k));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(k + 128));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(v));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(v + 128));
      }
#else
      if (succ_on && j == mine.hi - SUCC_AT && tid == 0) // the successor's first table entries
        asm volatile("prefetch.global.L2 [%0];" ::"l"(succ_table));
#endif
'''


def decode_successor(emitted, outdir):
    src = read(emitted)
    files = {}
    # (name, also the first two tiles, tiles before the end the table is read at)
    for name, tiles, at in (("table3", 0, 3), ("tiles3", 1, 3), ("tiles5", 1, 5)):
        s = replace_once(src, '#include "attn/decode.cuh"\n', '#include "attn/decode.cuh"\n#define SUCC_PER_SM 2\n'
                         "#define SUCC_TILES %d\n#define SUCC_AT %d\n" % (tiles, at), "decode.cuh include", emitted)
        loop = "    int stage = 0, free_stage = Cfg::kStages - 1;\n"
        s = replace_once(s, loop, loop + SUCCESSOR_STATE, "the loop's stages", emitted)
        shift = "      next[Cfg::kTableAhead - 1] = Copy::Lookups(kv, (ahead + Cfg::kTableAhead) * Cfg::kTileKV);\n"
        s = replace_once(s, shift, shift + SUCCESSOR_LOOP, "the table ring's shift", emitted)
        files["decode_succ_%s.cu" % name] = s
    write_all(outdir, files)


def prefill_params(emitted, outdir):
    src = read(emitted)
    require(src, "using Cache = KVCache<Elem, 0, Cfg::kHeadDim>;", "contiguous cache", emitted)
    if "p.kv_" in src:
        raise Refused("%s reads the cache strides (p.kv_*): not a kernel the old arguments serve" % emitted)
    params_path = os.path.join(HERE, "..", "..", "templates", "attn", "params.cuh")
    params = read(params_path)
    strides = "  long long kv_page_stride, kv_token_stride, kv_head_stride;"
    lines = [line for line in params.split("\n") if not line.startswith(strides)]
    if len(lines) != params.count("\n") or not params.rstrip().endswith("#endif // ATTN_TEMPLATES_PARAMS_CUH"):
        raise Refused("%s has no one kv_*_stride member line: not the Params this command edits" % params_path)
    head, rest = src.split("\n", 2)[:2], src.split("\n", 2)[2]
    old = "\n".join(head) + "\n// Params without the cache strides (bench/experiments/variants.py prefill-params)\n" + \
        "\n".join(lines) + "\n" + rest
    write_all(outdir, {"new_params.cu": src, "old_params.cu": old})


def decode_bulk(emitted, outdir):
    src = read(emitted)
    require(src, "__device__ __forceinline__ void decode_block(", "decode_block", emitted)
    consts = {}
    for name in ("kHeadDim", "kTileKV", "kStages", "kTileQ"):
        m = re.search(r"static constexpr int %s = (\d+);" % name, src)
        if not m:
            raise Refused("%s has no %s: not the kernel this command edits, or emitted by another attnc" %
                          (emitted, name))
        consts[name] = int(m.group(1))
    hd, tile, stages = consts["kHeadDim"], consts["kTileKV"], consts["kStages"]
    stage_elems = "BulkTile<Cfg>::kStageElems"
    edits = (
        ("pipe * (Cfg::kStages * 2 * Cfg::kTileKV * Cfg::kHeadDim);",
         "pipe * (Cfg::kStages * %s);\n"
         "  // decode-bulk: each pipeline's stage mbarriers, after every pipeline's stages\n"
         "  unsigned long long *bars = reinterpret_cast<unsigned long long *>(\n"
         "      smem_q + Cfg::kTileQ * Cfg::kHeadDim + kPipes * Cfg::kStages * %s) + pipe * Cfg::kStages;\n"
         "  unsigned phases = 0; // bit s: the parity of stage s's next use" % (stage_elems, stage_elems),
         "the pipeline's stages"),
        ("return smem_kv + (2 * stage) * Cfg::kTileKV * Cfg::kHeadDim; };",
         "return smem_kv + stage * %s; };" % stage_elems, "smem_k"),
        ("return smem_kv + (2 * stage + 1) * Cfg::kTileKV * Cfg::kHeadDim; };",
         "return smem_kv + stage * %s + Cfg::kTileKV * BulkTile<Cfg>::kRow; };" % stage_elems, "smem_v"),
        ("    copy.copy_kv(smem_k(stage), smem_v(stage), kv, j * Cfg::kTileKV, read);",
         "    bulk_copy_kv<Cfg>(smem_k(stage), smem_v(stage), kv, kv_head, j * Cfg::kTileKV, read, bars + stage, tid);",
         "the K/V copy"),
        ("    // The first kStages - 1 tiles start loading.\n",
         "    if (row0 == 0 && tid == 0)\n      bulk_init<Cfg>(bars);\n    bulk_fence_proxy();\n"
         "    __syncthreads(); // the mbarriers are set before any copy signals them\n"
         "    // The first kStages - 1 tiles start loading.\n", "the first copies"),
        ("    cp_async_wait<Cfg::kStages - 1>(); // the query rows have arrived",
         "    cp_async_wait<0>(); // the query rows have arrived (the only cp.async group)", "the query's wait"),
        ("      cp_async_wait<Cfg::kStages - 2>(); // tile j has arrived",
         "      bulk_wait(bars + stage, phases, stage); // tile j has arrived", "the tile's wait"),
        ("      query.qk(s, smem_k(stage), warp);", "      bulk_qk<Block>(query, s, smem_k(stage), warp);", "S = Q K^T"),
        ("      decode_pv<Block>(state, s, smem_v(stage), warp);",
         "      bulk_pv<Block>(state, s, smem_v(stage), warp);", "P V"),
    )
    s = edited_decode_block(emitted, "decode_block_bulk", edits, "decode_bulk.cuh.in")
    s = replace_once(s, "  decode_block<1>(p);\n", "  decode_block_bulk<1>(p);\n", "the main kernel's body", emitted)
    s = replace_once(s, "  decode_block<2>(p);\n", "  decode_block_bulk<2>(p);\n", "the pair kernel's body", emitted)
    # The launch line: the padded stages and the mbarriers (8 bytes a stage).
    q_bytes = consts["kTileQ"] * hd * 2
    stage_bytes = 2 * tile * (hd + 8) * 2
    shared = q_bytes + stages * (stage_bytes + 8)
    pair = q_bytes + 2 * stages * (stage_bytes + 8)
    m = re.search(r"shared_bytes=(\d+)", src)
    mp = re.search(r"pair_shared_bytes=(\d+)", src)
    if not m or not mp:
        raise Refused("%s has no launch line with shared_bytes and pair_shared_bytes" % emitted)
    line = src.splitlines()[1]
    new_line = line.replace(" shared_bytes=%s" % m.group(1), " shared_bytes=%d" % shared, 1)
    new_line = new_line.replace("pair_shared_bytes=%s" % mp.group(1), "pair_shared_bytes=%d" % pair, 1)
    s = replace_once(s, line, new_line, "the launch line", emitted)
    write_all(outdir, {"decode_bulk.cu": s})


USAGE = ("usage: variants.py prefill-ws OUTDIR | prefill-kv-split EMITTED.cu OUTDIR |"
         " decode-prefetch EMITTED.cu OUTDIR | decode-cache-policy EMITTED.cu OUTDIR |"
         " decode-heads-in-step EMITTED.cu OUTDIR | decode-keys-as-m EMITTED.cu OUTDIR |"
         " decode-cols EMITTED.cu OUTDIR | decode-delay EMITTED.cu OUTDIR |"
         " decode-persistent EMITTED.cu OUTDIR | decode-kv-release EMITTED.cu OUTDIR |"
         " decode-successor EMITTED.cu OUTDIR | decode-bulk EMITTED.cu OUTDIR |"
         " prefill-params EMITTED.cu OUTDIR (--help for more)")
COMMANDS = {"prefill-ws": (prefill_ws, 1), "prefill-kv-split": (prefill_kv_split, 2),
            "decode-prefetch": (decode_prefetch, 2), "decode-cache-policy": (decode_cache_policy, 2),
            "decode-heads-in-step": (decode_heads_in_step, 2), "decode-keys-as-m": (decode_keys_as_m, 2),
            "decode-cols": (decode_cols, 2), "decode-delay": (decode_delay, 2),
            "decode-persistent": (decode_persistent, 2), "decode-kv-release": (decode_kv_release, 2),
            "decode-successor": (decode_successor, 2), "decode-bulk": (decode_bulk, 2),
            "prefill-params": (prefill_params, 2)}


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) < 2 or argv[1] not in COMMANDS:
        what = "no command" if len(argv) < 2 else "'%s' is not a command" % argv[1]
        sys.stderr.write("variants.py: %s\n%s\n" % (what, USAGE))
        return 2
    command, nargs = COMMANDS[argv[1]]
    if len(argv) != 2 + nargs:
        sys.stderr.write("variants.py %s takes %d argument%s\n%s\n" % (argv[1], nargs, "s" if nargs > 1 else "", USAGE))
        return 2
    try:
        command(*argv[2:])
    except Refused as e:
        sys.stderr.write("variants.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
