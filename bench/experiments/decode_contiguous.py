"""attnc's decode over a contiguous cache ([B * N, H_kv, 128], sequences by cu_seqlens_k: the
decode kernels, which attnc takes for 1..16 query tokens), against the prefill kernels on the
same call (decode=False: what attnc took for a contiguous cache before), attnc's paged decode
over the same memory through a table in order, and SDPA cuDNN on the same K/V as [B, H_kv, N,
128]: bench.py's decode rows, inputs and timing (interleaved rounds, the medians). Runs on the
GPU machine as bench.py does:

    ATTNC_LIBRARY=build-static/pack/libattnc.so python3 bench/experiments/decode_contiguous.py

Every output is checked against SDPA's first. $REPEAT: the rounds per row (default 3).
"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench
bench.experiment_start(__doc__)
import attnc  # noqa: E402
bench.experiment_rounds()

for b, hq, hkv, n in ((64, 32, 8, 1024), (64, 32, 8, 4096), (16, 32, 8, 16384),
                      (128, 32, 8, 4096), (8, 64, 8, 32768)):
    d = bench.decode_inputs(b, hq, hkv, n)
    kc, vc = d["ko"].view(-1, hkv, 128), d["vo"].view(-1, hkv, 128)
    fns, keep, specs = {}, [], {}
    for name, decode in (("contig_decode", None), ("contig_prefill", False)):
        p = attnc.plan(d["qp"], kc, vc, cu_seqlens_q=d["cu"], max_seqlen_q=1,
                       cu_seqlens_k=d["cu_k"], max_seqlen_k=n, decode=decode)
        p.run()
        err = bench.rel_err(p.out.view(b, hq, 1, 128), d["ref"])
        if not err < 1e-2:
            raise SystemExit(f"B {b} kv {n} ({name}): attnc differs from SDPA "
                             f"(relative error {err:.3g}); nothing timed")
        fns[name] = (p.run, None)
        specs[name] = p.kernel.spec
        keep.append(p)
    p, _ = bench.decode_plan(d, d["ko"], d["vo"], d["in_order"], "paged in order")
    fns["paged_in_order"] = (p.run, None)
    keep.append(p)
    print(bench.rates_line(d, bench.decode_rates(d, fns)), flush=True)
    print("   " + "  ".join(f"{s}: {spec}" for s, spec in specs.items()), flush=True)
    del d, keep, fns, kc, vc
