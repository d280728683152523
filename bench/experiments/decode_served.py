"""attnc's paged decode through the tables attnc.PageAllocator and a plain free list give
out under bench/serving.py's traffic, in caches of 1.05, 1.25 (bench.py's) and 2 times the
row's pages, against SDPA cuDNN on the same K/V contiguous: bench.py's decode rows, inputs
and timing (three interleaved rounds, the medians). Runs on the GPU machine as bench.py does:

    ATTNC_LIBRARY=build-static/pack/libattnc.so python3 bench/experiments/decode_served.py

Prints each table's pages per 2 MiB window (bench/serving.py's measure) with its rate.
Every attnc output is checked against SDPA's before anything is timed.
"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench
bench.experiment_start(__doc__)
import serving  # noqa: E402
from bench import torch  # noqa: E402
bench.REPEAT = 3
for b, hq, hkv, n in ((64, 32, 8, 1024), (64, 32, 8, 4096), (16, 32, 8, 16384), (128, 32, 8, 4096), (8, 64, 8, 32768)):
    d = bench.decode_inputs(b, hq, hkv, n)
    pps = d["pages_per_seq"]
    caches, locality = {}, {}
    for spare in (1.05, 1.25, 2.0):
        slots, ours, theirs = serving.tables(b, pps, spare=spare)
        for name, rows in (("alloc", ours), ("freelist", theirs)):
            key = "%s%.2f" % (name, spare)
            caches[key] = bench.permuted_cache(d, torch.tensor(rows).view(-1).cuda(), slots)
            locality[key] = serving.pages_per_window(rows)
    rates = bench.decode_table_rates(d, caches)
    # GB/s of K + V per series, its ratio to cuDNN's, and [pages per window]
    print(bench.rates_line(d, rates, lambda s: " [%.1f]" % locality[s] if s in locality else ""),
          flush=True)
    del d, caches
