"""attnc against PyTorch SDPA (flash, cuDNN) and FlexAttention on the benchmark's shapes.

The shapes (bf16): prefill with head_dim 64 and 128, N = 1024, 4096, 16384, causal and
not, B * N = 16384 tokens, H * head_dim = 2048, contiguous K/V (12 rows); decode of one
query token, head_dim 128, on five GQA rows (B, query / KV heads, KV length): 64, 32/8,
1024; 64, 32/8, 4096; 16, 32/8, 16384; 128, 32/8, 4096; 8, 64/8, 32768, attnc reading
K/V through a block table of 16-token pages over shuffled pages, the anchors the same
cache contiguous. Decode rows also time attnc on the same K/V through four other tables,
and without one:
the slots attnc.PageAllocator gives out under a server's traffic ("PageAllocator") and
those a plain free list gives out under the same traffic ("free list"; bench/serving.py
plays it out, each cache 1.25 times the row's pages), the pages shuffled only within
windows of 2 MiB ("2 MiB windows": each sequence's pages stay in the few windows its pages
in order fill), each sequence's pages in order ("in order"), and that memory read as a
contiguous cache ([B * N, H_kv, 128], sequences by cu_seqlens_k: "contiguous"). The
ratios to the anchors are the whole-cache shuffle's; each other cache's ratio to cuDNN
follows.

    python3 bench/bench.py [--out DIR] [--rows prefill,decode,memory] [--quick] [--no-flex]
                           [--repeat N] [--profile]
    python3 bench/bench.py --redraw bench/results.json --out DIR   (the table and chart again)

Runs on the GPU machine (torch, triton): attnc through its Python module
(runtime/python/attnc: libattnc.so from $ATTNC_LIBRARY, else the module's folder, else
build/lib, build-static/lib or build-static/pack).
For every row, in one process: fresh random bf16 inputs; attnc's output is
checked against SDPA's (relative L2 < 1e-2) before anything is timed; then
attnc, SDPA flash (FlashAttention-2), SDPA cuDNN and FlexAttention are timed
with triton.testing.do_bench (warm-up, then the median; with --repeat N, N
times in rounds that take the series in turn, keeping each one's median, so
that the machine's drift during a row reaches attnc and the anchors alike). Prints the table
with TFLOP/s (prefill) or GB/s of K + V read (decode) and each anchor's
ratio, and writes DIR/results.json, DIR/results-table.md (not results.md: bench/
holds the hand-written RESULTS.md) and, with matplotlib, DIR/results.png (default DIR: bench/, for a run of every row only; a partial run or a
redraw names its --out, so the published results are not replaced).

--profile times nothing: each backend runs once more inside an NVTX range
named "profile", for a profiler that filters by it, e.g.
    ncu --nvtx --nvtx-include "profile/" python3 bench/bench.py --profile --rows decode
"""

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runtime", "python"))

try:  # the timing needs them; --redraw does not
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    import attnc
    import serving
    F = torch.nn.functional
except ImportError as missing:
    torch = None
    MISSING = missing

def experiment_start(doc):
    """The start of a script of bench/experiments/: --help prints its `doc`; it takes
    no arguments, and needs torch, triton and a GPU, as bench.py's timing does."""
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(doc.strip())
        raise SystemExit(0)
    if args:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: no arguments ({' '.join(args)}); "
                         "--help says what it runs")
    if torch is None:
        raise SystemExit(f"{os.path.basename(sys.argv[0])} needs torch and triton ({MISSING})")
    if not torch.cuda.is_available():
        raise SystemExit(f"{os.path.basename(sys.argv[0])} needs a CUDA GPU "
                         "(torch.cuda.is_available() is False)")


def experiment_rounds(default=3):
    """The rounds per row of a script of bench/experiments/ from $REPEAT (default
    `default`), into REPEAT, which timed_rounds reads; a count below 1 stops the script."""
    global REPEAT
    text = os.environ.get("REPEAT", str(default))
    try:
        REPEAT = int(text)
    except ValueError:
        REPEAT = 0
    if REPEAT < 1:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: REPEAT={text!r}: expected a count >= 1")


ANCHORS = ("flash", "cudnn", "flex")
ROW_KINDS = ("prefill", "decode", "memory")  # --rows
# Each series' legend name and colour, the same in both panels of the chart.
SERIES = {"attnc": ("attnc", "tab:blue"),
          "attnc_served": ("attnc, pages from attnc.PageAllocator (serving traffic)", "tab:olive"),
          "attnc_freelist": ("attnc, pages from a free list (serving traffic)", "tab:gray"),
          "attnc_win2mib": ("attnc, pages in 2 MiB windows", "tab:purple"),
          "attnc_in_order": ("attnc, pages in order", "tab:cyan"),
          "attnc_contiguous": ("attnc, contiguous cache", "tab:brown"),
          "flash": ("SDPA flash (FA2)", "tab:orange"), "cudnn": ("SDPA cuDNN", "tab:green"),
          "flex": ("FlexAttention", "tab:red")}
# The decode rows' other caches of the same K/V: the other tables over the same pages, then
# no table (the cache contiguous, [B * N, H_kv, 128]): series name, and its name in a ratio.
TABLES = (("attnc_served", "PageAllocator"), ("attnc_freelist", "free list"),
          ("attnc_win2mib", "2 MiB windows"), ("attnc_in_order", "in order"),
          ("attnc_contiguous", "contiguous"))
USE_FLEX = True
PROFILE = False
REPEAT = 1


def rel_err(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


def flex_prefill(causal):
    """FlexAttention compiled once per mask (the first call compiles)."""
    if not USE_FLEX:
        return None
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    compiled = torch.compile(flex_attention, dynamic=False)

    def run(q, k, v):
        mask = None
        if causal:
            n = q.shape[2]
            key = ("causal", n)
            if key not in run.masks:
                run.masks[key] = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, n, n)
            mask = run.masks[key]
        return compiled(q, k, v, block_mask=mask, enable_gqa=q.shape[1] != k.shape[1])

    run.masks = {}
    return run


def timed(fn):
    if PROFILE:  # one warm call, then the call a profiler takes
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("profile")
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        return float("nan")
    try:
        return do_bench(fn, warmup=25, rep=100)
    except Exception as e:  # a backend that refuses a shape: reported, not fatal
        print(f"    (not timed: {str(e).splitlines()[0][:80]})", flush=True)
        return float("nan")


def timed_rounds(fns):
    """Times each series of a row (name -> (callable, SDPA backend or None)) REPEAT times,
    in rounds that take the series in turn, so that a drift of the machine during the row
    reaches them alike. An SDPA backend is chosen around the whole timing, outside the
    timed calls. Returns each series' median of its rounds, and with REPEAT > 1 every
    round's time."""
    samples = {name: [] for name in fns}
    for _ in range(REPEAT):
        for name, (fn, backend) in fns.items():
            with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                samples[name].append(timed(fn))
    medians = {}
    for name, ms in samples.items():
        ok = sorted(x for x in ms if x == x)
        medians[name] = ok[len(ok) // 2] if len(ok) % 2 else (
            0.5 * (ok[len(ok) // 2 - 1] + ok[len(ok) // 2]) if ok else float("nan"))
    return medians, (samples if REPEAT > 1 else None)


def prefill_rows(quick):
    ns = (1024, 4096) if quick else (1024, 4096, 16384)
    flex = {c: flex_prefill(c) for c in (False, True)}
    rows = []
    for hd in (64, 128):
        for causal in (False, True):
            for n in ns:
                b, h = 16384 // n, 2048 // hd
                q, k, v = (torch.randn(b * n, h, hd, device="cuda", dtype=torch.bfloat16)
                           for _ in range(3))
                cu = torch.arange(0, (b + 1) * n, n, dtype=torch.int32, device="cuda")
                # plan(): the kernel and its arguments resolved once, so the timed
                # call is one ctypes launch (as SDPA's is one dispatch).
                p = attnc.plan(q, k, v, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu,
                               max_seqlen_q=n, max_seqlen_k=n)
                run, out = p.run, p.out
                run()
                q4, k4, v4 = (x.view(b, n, h, hd).transpose(1, 2) for x in (q, k, v))
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
                err = rel_err(out.view(b, n, h, hd).transpose(1, 2), ref)
                if not err < 1e-2:
                    raise SystemExit(f"hd {hd} N {n} causal={causal}: attnc differs from SDPA "
                                     f"(relative error {err:.3g}); nothing timed")
                q4, k4, v4 = (x.contiguous() for x in (q4, k4, v4))
                flops = 4 * b * h * n * n * hd * (0.5 if causal else 1.0)
                fns = {"attnc": (run, None)}
                sdpa = lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
                fns["flash"] = (sdpa, SDPBackend.FLASH_ATTENTION)
                fns["cudnn"] = (sdpa, SDPBackend.CUDNN_ATTENTION)
                if flex[causal] is not None:
                    fns["flex"] = (lambda: flex[causal](q4, k4, v4), None)
                t, samples = timed_rounds(fns)
                row = {"kind": "prefill", "hd": hd, "n": n, "causal": causal, "batch": b,
                       "heads": h, "rel_err": err, "ms": t,
                       "rate": {k_: flops / ms / 1e9 for k_, ms in t.items()}}
                if samples:
                    row["ms_rounds"] = samples
                print_row(row)
                rows.append(row)
                # This row's tensors go before the next row's are made (None, not del:
                # the lambdas above name them).
                q = k = v = q4 = k4 = v4 = out = ref = p = None
    return rows


def decode_inputs(b, hq, hkv, n, page=16):
    """One decode row's inputs, real random data: K and V contiguous ([B, H_kv, N, 128], as
    the anchors read them); the same cache as pages of `page` tokens in order ([pages, page,
    H_kv, 128], a freshly filled cache: sequence s's page i is page s * pages_per_seq + i) and
    that order's table; the query ([B, H_q, 1, 128], and as attnc's [B, H_q, 128]); attnc's
    sequence arguments (cu_k: the sequences' offsets in the same cache read contiguous,
    [B * N, H_kv, 128]); and SDPA flash's output, which every attnc output is checked against."""
    pages_per_seq = n // page
    k, v = (torch.randn(b, hkv, n, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    q = torch.randn(b, hq, 1, 128, device="cuda", dtype=torch.bfloat16)
    ko, vo = (x.permute(0, 2, 1, 3).reshape(b * pages_per_seq, page, hkv, 128).contiguous()
              for x in (k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    in_order = torch.arange(b * pages_per_seq, dtype=torch.int32, device="cuda")
    return {"b": b, "hq": hq, "n": n, "pages_per_seq": pages_per_seq, "k": k, "v": v, "q": q,
            "ko": ko, "vo": vo, "in_order": in_order.view(b, pages_per_seq),
            "qp": q.view(b, hq, 128).contiguous(),
            "cu": torch.arange(0, b + 1, dtype=torch.int32, device="cuda"),
            "cu_k": torch.arange(0, b + 1, dtype=torch.int32, device="cuda") * n,
            "lens": torch.full((b,), n, dtype=torch.int32, device="cuda"), "ref": ref}


def window_shuffle(pages, gen, window=64):
    """A permutation of `pages` page slots that moves each page only within its window of
    `window` consecutive slots (64 pages of 16 tokens: 2 MiB of K at 8 KV heads)."""
    return torch.cat([i + torch.randperm(min(window, pages - i), generator=gen)
                      for i in range(0, pages, window)])


def window_aligned(shape, like):
    """An empty tensor of `shape` with `like`'s dtype and device that starts on a 2 MiB
    boundary (the GPU's large page, serving.WINDOW_BYTES)."""
    nbytes = math.prod(shape) * like.element_size()
    raw = torch.empty(nbytes + serving.WINDOW_BYTES, dtype=torch.uint8, device=like.device)
    start = -raw.data_ptr() % serving.WINDOW_BYTES
    return raw[start:start + nbytes].view(like.dtype).view(shape)


def permuted_cache(d, perm, slots=None):
    """decode_inputs' row `d` as a paged cache of `slots` pages (default: as many as the
    row has) whose page i lies at slot perm[i] (CUDA, distinct slots): (K, V, the [B, pages
    per sequence] table). K and V are the halves of one allocation that starts on a 2 MiB
    boundary (the GPU's large page), so that the tables' windows of 64 slots are the
    GPU's pages in both."""
    ko = d["ko"]
    kp, vp = window_aligned((2, slots or ko.shape[0]) + tuple(ko.shape[1:]), ko)
    kp[perm], vp[perm] = ko, d["vo"]
    return kp, vp, perm.view(d["b"], d["pages_per_seq"]).to(torch.int32)


def decode_plan(d, kc, vc, table, label):
    """attnc's plan of decode_inputs' row `d` over the paged cache (kc, vc) through `table`
    (None: kc and vc are the cache contiguous, [B * N, H_kv, 128]), run once and checked
    against SDPA: (plan, relative error). A wrong output stops the benchmark before
    anything is timed."""
    b, hq, n = d["b"], d["hq"], d["n"]
    if table is None:
        p = attnc.plan(d["qp"], kc, vc, cu_seqlens_q=d["cu"], max_seqlen_q=1,
                       cu_seqlens_k=d["cu_k"], max_seqlen_k=n)
    else:
        p = attnc.plan(d["qp"], kc, vc, cu_seqlens_q=d["cu"], max_seqlen_q=1, block_table=table,
                       seq_lens_k=d["lens"], max_seqlen_k=n)
    p.run()
    err = rel_err(p.out.view(b, hq, 1, 128), d["ref"])
    if not err < 1e-2:
        raise SystemExit(f"decode B {b} kv {n} ({label}): attnc differs from SDPA "
                         f"(relative error {err:.3g}); nothing timed")
    return p, err


def decode_rates(d, fns):
    """The series of `fns` (name -> (callable, None)), each already checked against SDPA,
    and SDPA cuDNN on decode_inputs' row `d` contiguous, timed in interleaved rounds
    (bench/experiments/): {series: (GB/s of K + V, ratio to cuDNN)}, cuDNN's last."""
    q, k, v = d["q"], d["k"], d["v"]
    fns = dict(fns, cudnn=(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                           SDPBackend.CUDNN_ATTENTION))
    t, _ = timed_rounds(fns)
    nbytes = 2 * k.numel() * k.element_size()
    return {name: (nbytes / ms / 1e6, t["cudnn"] / ms) for name, ms in t.items()}


def rates_line(d, rates, note=None):
    """One printed line of decode_rates' `rates` for row `d`: each series' GB/s of K + V
    and its ratio to cuDNN's, then note(series) where it gives one."""
    return "B %3d kv %5d  %s" % (d["b"], d["n"], "  ".join(
        "%s %.1f (x%.3f)%s" % (s, gbs, x, (note(s) if note else "") or "")
        for s, (gbs, x) in rates.items()))


def decode_table_rates(d, caches):
    """attnc on decode_inputs' row `d` through each paged cache of `caches` (name -> (K, V,
    table)), every output checked against SDPA first, then decode_rates."""
    fns = {}
    for name, (kc, vc, table) in caches.items():
        p, _ = decode_plan(d, kc, vc, table, name)
        fns[name] = (p.run, None)
    return decode_rates(d, fns)


def decode_rows(quick):
    shapes = ((64, 32, 8, 1024), (64, 32, 8, 4096), (16, 32, 8, 16384), (128, 32, 8, 4096),
              (8, 64, 8, 32768))
    if quick:
        shapes = shapes[:2]
    flex = None
    try:
        from torch.nn.attention.flex_attention import flex_attention
        flex = torch.compile(flex_attention, dynamic=False) if USE_FLEX else None
    except ImportError:
        pass
    rows = []
    gen = torch.Generator(device="cpu").manual_seed(1)
    for b, hq, hkv, n in shapes:
        d = decode_inputs(b, hq, hkv, n)
        q, k, v, ko, vo = d["q"], d["k"], d["v"], d["ko"], d["vo"]
        # The benchmark's table: the same pages shuffled across the whole cache; sequence
        # s's page i lives at table[s, i]. Also timed shuffled within 2 MiB windows and in
        # order, to show what the shuffle costs.
        # Then the tables two allocators give out under the same serving traffic
        # (bench/serving.py): attnc.PageAllocator's and a plain free list's.
        pages = b * d["pages_per_seq"]
        slots, served, freelist = serving.tables(b, d["pages_per_seq"])
        paged = {"attnc": permuted_cache(d, torch.randperm(pages, generator=gen).to("cuda")),
                 "attnc_served": permuted_cache(d, torch.tensor(served).view(-1).cuda(), slots),
                 "attnc_freelist": permuted_cache(d, torch.tensor(freelist).view(-1).cuda(),
                                                  slots),
                 "attnc_win2mib": permuted_cache(d, window_shuffle(pages, gen).to("cuda")),
                 "attnc_in_order": (ko, vo, d["in_order"]),
                 # The same memory as the pages in order, read without a table.
                 "attnc_contiguous": (ko.view(-1, hkv, 128), vo.view(-1, hkv, 128), None)}
        nbytes = 2 * k.numel() * k.element_size()
        fns, errs, plans = {}, {}, []
        for name, (kc, vc, table) in paged.items():
            p, errs[name] = decode_plan(d, kc, vc, table, name)
            fns[name] = (p.run, None)
            plans.append(p)
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        fns["flash"] = (sdpa, SDPBackend.FLASH_ATTENTION)
        fns["cudnn"] = (sdpa, SDPBackend.CUDNN_ATTENTION)
        if flex is not None:
            fns["flex"] = (lambda: flex(q, k, v, enable_gqa=True), None)
        t, samples = timed_rounds(fns)
        del paged, kc, vc, p, plans, fns
        row = {"kind": "decode", "batch": b, "hq": hq, "hkv": hkv, "n": n,
               "rel_err": max(errs.values()),
               "ms": t, "rate": {k_: nbytes / ms / 1e6 for k_, ms in t.items()}}
        if samples:
            row["ms_rounds"] = samples
        print_row(row)
        rows.append(row)
        d = k = v = ko = vo = q = None  # before the next row's (see prefill_rows)
    return rows


def memory_rows():
    """Peak GPU memory beyond the inputs, attnc vs textbook attention (S = QK^T,
    softmax, PV in torch) vs SDPA flash: B = 1, 16 heads, head_dim 128, bf16."""
    rows = []
    h, d = 16, 128
    for n in (512, 2048, 8192):
        q, k, v = (torch.randn(n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        q4, k4, v4 = (x.view(1, n, h, d).transpose(1, 2) for x in (q, k, v))
        torch.cuda.synchronize()

        def textbook():
            s_ = torch.matmul(q4, k4.transpose(-1, -2)) * (d ** -0.5)
            return torch.matmul(torch.softmax(s_.float(), dim=-1).to(q4.dtype), v4)

        def flash():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q4, k4, v4)

        peaks = {}
        for name, fn in (("attnc", lambda: attnc.attention(q, k, v)), ("textbook", textbook),
                         ("flash", flash)):
            fn()  # kernels compiled and loaded, workspaces cached
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = fn()
            torch.cuda.synchronize()
            peaks[name] = torch.cuda.max_memory_allocated() - base
            del out
        ref = textbook()
        err = rel_err(attnc.attention(q, k, v).view(1, n, h, d).transpose(1, 2), ref)
        row = {"kind": "memory", "n": n, "heads": h, "hd": d, "peak_bytes": peaks, "rel_err": err}
        print(f"memory N {n:5d}: " + "  ".join(f"{k_} {v_ / 2**20:9.1f} MiB"
                                                 for k_, v_ in peaks.items()) +
              f"   (attnc vs textbook err {err:.1e})", flush=True)
        rows.append(row)
        q = k = v = q4 = k4 = v4 = ref = None  # before the next row's (see prefill_rows)
    return rows


def label(row):
    if row["kind"] == "prefill":
        return f"hd {row['hd']} N {row['n']} {'causal' if row['causal'] else 'full'}"
    return f"decode B {row['batch']} {row['hq']}/{row['hkv']} kv {row['n']}"


def print_row(row):
    unit = "TFLOP/s" if row["kind"] == "prefill" else "GB/s"
    r = row["rate"]
    parts = [f"{k} {v:7.1f}" for k, v in r.items()]
    ratios = [f"x{k} {r['attnc'] / v:5.2f}" for k, v in r.items() if k in ANCHORS and v == v]
    for name, short in TABLES:
        if name in r and "cudnn" in r:
            ratios.append(f"{short} xcudnn {r[name] / r['cudnn']:5.3f}")
    print(f"{label(row):34s} {unit:7s} " + "  ".join(parts) + "   " + "  ".join(ratios) +
          f"   (err {row['rel_err']:.1e})", flush=True)


def run_options(kinds, args):
    """The options of a timing run as its results name them (not --out: a folder of the
    machine that ran it)."""
    opts = [] if kinds == list(ROW_KINDS) else ["--rows", ",".join(kinds)]
    opts += ["--quick"] * args.quick + ["--no-flex"] * args.no_flex
    return " ".join(opts + (["--repeat", str(args.repeat)] if args.repeat > 1 else []))


def markdown(rows, meta):
    rounds = meta.get("repeat", 1)
    how = (f"the median of {rounds} rounds of triton do_bench medians, the series taken in turn"
           if rounds > 1 else "triton do_bench medians")
    # Results saved before the options were recorded do not say how they were run.
    options = meta.get("options")
    command = ("`python3 bench/bench.py" + (" " + options if options else "") + "`"
               if options is not None else "bench.py (its options were not recorded)")
    lines = [f"Measured {meta['date']} on {meta['gpu']}, commit {meta['commit']}, torch "
             f"{meta['torch']}: {command} "
             f"({how}; every attnc output checked against SDPA first).", ""]
    for kind, unit in (("prefill", "TFLOP/s"), ("decode", "GB/s")):
        sel = [r for r in rows if r["kind"] == kind]
        if not sel:
            continue
        names = [n for n in ("attnc",) + ANCHORS if n in sel[0]["rate"]]
        anchors = names[1:]
        tables = [(n, short) for n, short in TABLES if n in sel[0]["rate"]]
        rated = names[:1] + [n for n, _ in tables] + anchors
        table_name = dict(TABLES)
        head = (["row"] + [f"attnc {table_name[n]} {unit}" if n in table_name else f"{n} {unit}"
                           for n in rated] + [f"x {n}" for n in anchors] +
                ([f"{short} x cudnn" for _, short in tables] if "cudnn" in anchors else []))
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for r in sel:
            vals = [f"{r['rate'][n]:.1f}" for n in rated]
            rat = [f"{r['rate']['attnc'] / r['rate'][n]:.3f}" for n in anchors]
            if "cudnn" in anchors:
                rat += [f"{r['rate'][n] / r['rate']['cudnn']:.3f}" for n, _ in tables]
            lines.append("| " + " | ".join([label(r)] + vals + rat) + " |")
        lines.append("")
    mem = [r for r in rows if r["kind"] == "memory"]
    if mem:
        lines.append("Peak GPU memory beyond the inputs (B = 1, 16 heads, head_dim 128, bf16):")
        lines.append("")
        lines.append("| N | attnc | textbook (S = QK^T, softmax, PV) | SDPA flash |")
        lines.append("|---|---|---|---|")
        for r in mem:
            p_ = r["peak_bytes"]
            lines.append(f"| {r['n']} | " + " | ".join(f"{p_[n] / 2**20:.1f} MiB"
                                                      for n in ("attnc", "textbook", "flash")) +
                         " |")
        lines.append("")
    return "\n".join(lines)


def chart(rows, path, gpu):
    """A panel per kind of timed rows (prefill, decode) present; none: no chart."""
    kinds = [(kind, unit) for kind, unit in (("prefill", "TFLOP/s"), ("decode", "GB/s"))
             if any(r["kind"] == kind for r in rows)]
    if not kinds:
        print("no prefill or decode rows: no chart", flush=True)
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart", flush=True)
        return
    fig, axes = plt.subplots(len(kinds), 1, figsize=(14, 4.5 * len(kinds)), squeeze=False)
    for ax, (kind, unit) in zip(axes[:, 0], kinds):
        sel = [r for r in rows if r["kind"] == kind]
        names = [n for n in ("attnc",) + tuple(n for n, _ in TABLES) + ANCHORS if n in sel[0]["rate"]]
        width = 0.8 / len(names)
        for i, n in enumerate(names):
            name, color = SERIES[n]
            if n == "attnc" and any(t in names for t, _ in TABLES):
                name += " (pages shuffled across the cache)"
            ax.bar([x + i * width for x in range(len(sel))], [r["rate"][n] for r in sel], width,
                   label=name, color=color)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(sel))])
        ax.set_xticklabels([label(r).replace("decode ", "") for r in sel], rotation=20,
                           fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(f"{kind} (bf16, {gpu})")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}", flush=True)


def make_out(folder):
    """--out, made if it is not there; one line, not a traceback, where it cannot be."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise SystemExit(f"--out {folder}: cannot make the folder ({e.strerror})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for results.json/.md/.png (default bench/, for a run "
                                   "of every row only: it holds the published results)")
    ap.add_argument("--rows", help=f"any of {', '.join(ROW_KINDS)} (comma separated; "
                                   "default: all)")
    ap.add_argument("--quick", action="store_true", help="a few rows only (a smoke test)")
    ap.add_argument("--no-flex", action="store_true",
                    help="leave FlexAttention out (it compiles once per shape: minutes)")
    ap.add_argument("--repeat", type=int, metavar="N",
                    help="time each row's series N times, in rounds that take them in turn, "
                         "and keep each one's median (default 1)")
    ap.add_argument("--profile", action="store_true",
                    help="time nothing: run each backend once in an NVTX range named "
                         "'profile' (for ncu --nvtx --nvtx-include profile/); no FlexAttention")
    ap.add_argument("--redraw", metavar="RESULTS_JSON",
                    help="time nothing: write results-table.md and results.png into --out from a "
                         "results.json of an earlier run (needs no GPU, torch or triton)")
    args = ap.parse_args()
    # Which timing flags were given (a redraw takes none), before their defaults.
    timing = [flag for flag, given in (("--rows", args.rows is not None), ("--quick", args.quick),
                                       ("--no-flex", args.no_flex),
                                       ("--repeat", args.repeat is not None)) if given]
    args.rows = ",".join(ROW_KINDS) if args.rows is None else args.rows
    args.repeat = 1 if args.repeat is None else args.repeat
    if args.repeat < 1:
        raise SystemExit(f"--repeat {args.repeat}: the rounds per row must be at least 1")
    kinds = [k.strip() for k in args.rows.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in ROW_KINDS]
    if unknown or not kinds:
        raise SystemExit(f"--rows {args.rows}: " +
                         (f"no such rows: {', '.join(unknown)}" if unknown else "no rows named") +
                         f" (any of {', '.join(ROW_KINDS)}, comma separated)")
    partial = args.quick or kinds != list(ROW_KINDS) or args.redraw
    if args.redraw and timing:
        raise SystemExit(f"--redraw and {', '.join(timing)}: a redraw times nothing (it draws "
                         "the rows of the saved run as they are)")
    if args.redraw and args.profile:
        raise SystemExit("--redraw and --profile: give one (a redraw writes the table and chart "
                         "of a saved run, a profile times nothing and writes nothing)")
    if args.out is None:
        if partial and not args.profile:  # a profile writes nothing
            raise SystemExit("give --out DIR: the default, bench/, holds the published results "
                             "of a run of every row, which "
                             + ("a redraw" if args.redraw else "--quick or --rows") +
                             " would replace")
        args.out = HERE
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise SystemExit(f"--out {args.out}: not a folder")
    if args.redraw:
        try:
            with open(args.redraw) as f:
                saved = json.load(f)
            rows, meta = saved["rows"], saved["meta"]
            missing = [k for k in ("date", "gpu", "commit", "torch") if k not in meta]
            if missing or not isinstance(rows, list) or not rows:
                raise ValueError("its meta lacks " + ", ".join(missing) if missing
                                 else "its rows are not a list" if not isinstance(rows, list)
                                 else "it holds no rows")
            if not any(r["kind"] in ROW_KINDS for r in rows):
                raise ValueError("none of its rows is a " + ", ".join(ROW_KINDS) + " row")
            table = markdown(rows, meta)  # made before anything is written
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            what = f"no {e}" if isinstance(e, KeyError) else str(e)
            raise SystemExit(f"--redraw {args.redraw}: not a results.json of bench.py ({what})")
        make_out(args.out)
        with open(os.path.join(args.out, "results-table.md"), "w") as f:
            f.write(table + "\n")
        chart(rows, os.path.join(args.out, "results.png"), meta["gpu"])
        return
    if torch is None:
        raise SystemExit(f"bench.py needs torch and triton to time anything ({MISSING}); "
                         "--redraw needs neither")
    if not torch.cuda.is_available():
        raise SystemExit("bench.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    torch.manual_seed(0)
    make_out(args.out)  # before minutes of timing, not after
    try:
        print(f"{attnc.version()} from {attnc.library_path()}", flush=True)
    except attnc.AttncError as e:
        raise SystemExit(f"bench.py: {e}")
    rows = []
    global USE_FLEX, PROFILE, REPEAT
    USE_FLEX = not (args.no_flex or args.profile)
    PROFILE = args.profile
    REPEAT = 1 if PROFILE else args.repeat
    torch._dynamo.config.cache_size_limit = 64  # one FlexAttention compile per shape
    if "prefill" in kinds:
        rows += prefill_rows(args.quick)
    if "decode" in kinds:
        rows += decode_rows(args.quick)
    if "memory" in kinds:
        rows += memory_rows()
    if PROFILE:  # nothing was timed: no results to write
        return
    # $ATTNC_COMMIT names the commit when the checkout here is a copy whose
    # .git does not match its files; else the commit the timed library was
    # built from, where tests/gpu/pack.sh wrote it beside the library; else
    # the checkout's.
    commit = os.environ.get("ATTNC_COMMIT", "")
    packed = os.path.join(os.path.dirname(os.environ.get("ATTNC_LIBRARY", "")), "commit.txt")
    if not commit and os.environ.get("ATTNC_LIBRARY") and os.path.isfile(packed):
        with open(packed) as f:
            commit = f.read().strip()
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip() or "unknown"
        except OSError:
            commit = "unknown"
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
            "commit": commit, "torch": torch.__version__, "repeat": REPEAT,
            "options": run_options(kinds, args)}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "results-table.md"), "w") as f:
        f.write(markdown(rows, meta) + "\n")
    chart(rows, os.path.join(args.out, "results.png"), meta["gpu"])


if __name__ == "__main__":
    main()
