"""attnc's paged decode over caches laid out as serving engines lay them out, read where they
are through the strides of the launch (attnc.plan takes any view of the pages whose head_dim
is contiguous), against the packed layout through the same tables and SDPA cuDNN on the same
K/V contiguous: bench.py's decode rows, inputs and timing (interleaved rounds, the medians).
Runs on the GPU machine as bench.py does:

    ATTNC_LIBRARY=build-static/pack/libattnc.so python3 bench/experiments/decode_pools.py

Layouts: packed [slots, 16, H_kv, 128] ("tok"); a pool of pages per KV head [H_kv, slots, 16,
128] ("pool"), where a run of consecutive slots in a table is one run of memory per head;
heads before tokens [slots, H_kv, 16, 128] ("hnd"). Tables: attnc.PageAllocator's under
bench/serving.py's traffic ("alloc"), the whole cache shuffled ("shuf"), in order ("order").
Every output is checked against SDPA's first. $REPEAT: the rounds per row (default 3).
"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import bench
bench.experiment_start(__doc__)
import serving  # noqa: E402
from bench import torch  # noqa: E402
bench.experiment_rounds()


def laid_out(d, perm, slots, layout):
    """decode_inputs' row `d` with page i at slot perm[i] of a cache of `slots` slots in
    `layout` ("tok", "pool" or "hnd"): (K, V, table), K and V views [slots, 16, H_kv, 128]
    of the halves of one allocation on a 2 MiB boundary."""
    if layout == "tok":
        return bench.permuted_cache(d, perm, slots)
    ko = d["ko"]
    _, page, hkv, hd = ko.shape
    kv = bench.window_aligned((2, hkv, slots, page, hd) if layout == "pool" else
                              (2, slots, hkv, page, hd), ko)
    # Both as [slots, page, hkv, hd] views of their layout.
    order = (1, 2, 0, 3) if layout == "pool" else (0, 2, 1, 3)
    kp, vp = (kv[i].permute(*order) for i in range(2))
    kp[perm], vp[perm] = ko, d["vo"]
    return kp, vp, perm.view(d["b"], d["pages_per_seq"]).to(torch.int32)


for b, hq, hkv, n in ((64, 32, 8, 1024), (64, 32, 8, 4096), (16, 32, 8, 16384),
                      (128, 32, 8, 4096), (8, 64, 8, 32768)):
    d = bench.decode_inputs(b, hq, hkv, n)
    pps = d["pages_per_seq"]
    slots, ours, _ = serving.tables(b, pps)
    gen = torch.Generator(device="cpu").manual_seed(1)
    shuffled = torch.randperm(b * pps, generator=gen).to("cuda")
    served = torch.tensor(ours).view(-1).cuda()
    in_order = torch.arange(b * pps, device="cuda")
    fns, keep = {}, []
    tables = {"alloc": (served, slots), "shuf": (shuffled, b * pps), "order": (in_order, b * pps)}
    for layout in ("tok", "pool", "hnd"):
        for table_name, (perm, nslots) in tables.items():
            if layout == "hnd" and table_name == "order":
                continue
            name = layout + "_" + table_name
            kc, vc, table = laid_out(d, perm, nslots, layout)
            p, _ = bench.decode_plan(d, kc, vc, table, name)
            fns[name] = (p.run, None)
            keep.append((kc, vc, table, p))
    print(bench.rates_line(d, bench.decode_rates(d, fns)), flush=True)
    del d, keep, fns
