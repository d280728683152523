#!/usr/bin/env python3
"""Writes the hand-made kernel variants of bench/experiments/README.md.

  variants.py prefill-ws OUTDIR
      the warp-specialised prefill block (prefill_ws.cu.in), head_dim 128,
      no mask and causal, in the configurations the README's table names
  variants.py prefill-kv-split EMITTED.cu OUT.cu
      an emitted one-stage wgmma prefill kernel (`attnc emit --spec
      mode=prefill,head_dim=128 --stage cuda`) whose next K tile loads once
      every warp's S = Q K^T is done and whose next V tile once P V is
  variants.py decode-prefetch EMITTED.cu OUTDIR
      an emitted paged decode kernel (`attnc emit --spec
      mode=decode,page_size=16,gqa=4 --stage cuda`) that also prefetches K/V
      tiles into L2 ahead of their shared-memory copies

Each output is a --source for `attn-gpu-check --bench` (tests/gpu/GpuCheck.cpp),
which checks its output against the emitted kernel's before timing it. The
edits find their places by text in the emitted source of the commit named in
the README; an anchor that is not there stops the script with its name.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def replace_once(text, anchor, new, what):
    if anchor not in text:
        sys.exit("variants.py: the emitted source has no %s; was it emitted by another attnc?" % what)
    return text.replace(anchor, new, 1)


def prefill_ws(outdir):
    template = open(os.path.join(HERE, "prefill_ws.cu.in")).read()
    os.makedirs(outdir, exist_ok=True)
    # (name, tile_kv, stages, WS_REGS, WS_OVERLAP)
    configs = [("ws288_kv64_s2", 64, 2, 0, 0), ("ws288_kv64_s4", 64, 4, 0, 0),
               ("ws288_kv128_s2", 128, 2, 0, 0), ("ws288_kv128_s3", 128, 3, 0, 0),
               ("ws384_kv64_s4", 64, 4, 1, 0), ("ws384_kv128_s3", 128, 3, 1, 0),
               ("ws384_overlap_kv64_s4", 64, 4, 1, 1)]
    for mask, kmask, sym in [("none", "kMaskNone", "nomask"), ("causal", "kMaskCausal", "causal")]:
        for name, tkv, stages, regs, overlap in configs:
            threads = 384 if regs else 288
            smem = 128 * 128 * 2 + stages * 2 * tkv * 128 * 2 + 16 * stages
            text = template
            for key, value in [("@TKV@", tkv), ("@MASKSYM@", sym), ("@MASK@", mask), ("@KMASK@", kmask),
                               ("@STAGES@", stages), ("@SMEM@", smem), ("@THREADS@", threads),
                               ("@REGS@", regs), ("@OVERLAP@", overlap)]:
                text = text.replace(key, str(value))
            with open(os.path.join(outdir, "%s_%s.cu" % (name, sym)), "w") as f:
                f.write(text)


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


def prefill_kv_split(emitted, out):
    text = open(emitted).read()
    start = "  // attn-online-softmax: the query tile is loaded once"
    end = "  // attn-online-softmax: normalise once"
    if start not in text or end not in text:
        sys.exit("variants.py: %s is not a one-stage wgmma prefill kernel of this attnc" % emitted)
    a, b = text.index(start), text.index(end)
    with open(out, "w") as f:
        f.write(text[:a] + KV_SPLIT_LOOP + text[b:])


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
                    (i64)(e * Cfg::kPageSize + row % Cfg::kPageSize) * kv.token_stride + kv_head * Cfg::kHeadDim;
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
    src = open(emitted).read()
    os.makedirs(outdir, exist_ok=True)
    # (name, tiles prefetched beyond the shared-memory copies, bulk, only the last N blocks)
    configs = [("table3", 0, 0, 0), ("pf1", 1, 0, 0), ("pf1_bulk", 1, 1, 0), ("pf2_bulk", 2, 1, 0),
               ("pf1_bulk_last264", 1, 1, 264), ("pf2_bulk_last264", 2, 1, 264)]
    for name, ahead, bulk, tail in configs:
        s = replace_once(src, "static constexpr int kTableAhead = 2;",
                         "static constexpr int kTableAhead = %d;" % (ahead + 2 if ahead else 3), "kTableAhead = 2")
        s = replace_once(s, '#include "attn/decode.cuh"\n', '#include "attn/decode.cuh"\n#define PF_AHEAD %d\n'
                         "#define PF_BULK %d\n#define PF_LAST %d\n" % (ahead, bulk, tail), "decode.cuh include")
        s = replace_once(s, "namespace {\n/// The whole block", PREFETCH_HELPER + "\nnamespace {\n/// The whole block",
                         "BlockCfg")
        s = replace_once(s, "  using Copy = PageRuns<Cfg>;\n", "  using Copy = PageRuns<Cfg>;\n"
                         "  const unsigned pf_block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
                         "  const bool pf_on = PF_AHEAD > 0 &&\n"
                         "                     (PF_LAST == 0 || pf_block + PF_LAST >= gridDim.x * gridDim.y * gridDim.z);\n",
                         "PageRuns copy")
        start = "    // attn-online-softmax: m = -inf, l = 0, acc = 0; each warp takes 16 keys of every tile.\n"
        s = replace_once(s, start, "#if PF_AHEAD > 0\n    if (pf_on) // the tiles after the first copies\n"
                         "#pragma unroll\n      for (int i = 0; i < PF_AHEAD; ++i)\n"
                         "        if (mine.lo + Cfg::kStages - 1 + i < mine.hi)\n"
                         "          prefetch_tile(kv, mine.lo + Cfg::kStages - 1 + i, next[i], tid, kv_head);\n#endif\n"
                         + start, "the state's initialisation")
        shift = "      next[Cfg::kTableAhead - 1] = Copy::Lookups(kv, (ahead + Cfg::kTableAhead) * Cfg::kTileKV);\n"
        s = replace_once(s, shift, shift + "#if PF_AHEAD > 0\n      if (pf_on && ahead + PF_AHEAD < mine.hi)\n"
                         "        prefetch_tile(kv, ahead + PF_AHEAD, next[PF_AHEAD - 1], tid, kv_head);\n#endif\n",
                         "the table ring's shift")
        with open(os.path.join(outdir, "decode_%s.cu" % name), "w") as f:
            f.write(s)


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) == 3 and argv[1] == "prefill-ws":
        prefill_ws(argv[2])
    elif len(argv) == 4 and argv[1] == "prefill-kv-split":
        prefill_kv_split(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "decode-prefetch":
        decode_prefetch(argv[2], argv[3])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
