"""attnc's paged decode over a cache whose pages are shuffled singly, in runs of 2 and of 4
consecutive pages, only within windows of 2 MiB, and in order, against SDPA cuDNN on the same
cache contiguous: bench.py's decode rows, inputs and timing (three interleaved rounds, the medians). Runs on the GPU
machine as bench.py does:

    ATTNC_LIBRARY=build-static/pack/libattnc.so python3 bench/experiments/decode_runs.py

Every attnc output is checked against SDPA's before anything is timed.
"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench
bench.experiment_start(__doc__)
from bench import torch  # noqa: E402
bench.REPEAT = 3
gen = torch.Generator(device="cpu").manual_seed(1)
for b, hq, hkv, n in ((64, 32, 8, 1024), (64, 32, 8, 4096), (16, 32, 8, 16384), (128, 32, 8, 4096), (8, 64, 8, 32768)):
    d = bench.decode_inputs(b, hq, hkv, n)
    ko, vo, pps = d["ko"], d["vo"], d["pages_per_seq"]
    tables = {}
    for r in (1, 2, 4):
        g = torch.randperm(b * pps // r, generator=gen)
        perm = (g.view(-1, 1) * r + torch.arange(r).view(1, -1)).reshape(-1).to("cuda")
        tables["runs%d" % r] = bench.permuted_cache(d, perm)
    # Shuffled only within windows of 64 pages (2 MiB of K, 2 MiB of V at 8 KV heads): each
    # sequence's pages stay in the few windows its pages in order would fill.
    tables["win2MiB"] = bench.permuted_cache(d, bench.window_shuffle(b * pps, gen).to("cuda"))
    tables["in_order"] = (ko, vo, d["in_order"])
    rates = bench.decode_table_rates(d, tables)
    print(bench.rates_line(d, rates), flush=True)
    del d, tables
