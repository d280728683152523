"""Serving from an AOT bundle in Python: no NVRTC compile at run time.

`attnc aot` compiles a model's kernels ahead of time into a bundle folder;
a Python server loads that folder (attnc.load_bundle), turns AOT-only mode on
(attnc.set_aot_only), and every attnc.attention call then launches a kernel
from the bundle. A call whose kernel the bundle lacks raises AttncError
instead of compiling in the middle of serving.

    build/bin/attnc aot --specs examples/aot/app-specs.txt --arch sm_80,sm_90a -o my-bundle
    python3 examples/python/aot_serving.py my-bundle

The bundle of examples/aot/app-specs.txt holds a Llama-like layer's kernels
(head_dim 128, 8 query heads over 2 KV heads, bf16, a paged cache of 16-token
pages): a causal prefill and a split-KV decode. This script runs both on
ragged random batches, checks that each kernel came from the bundle and that
its output matches an fp32 reference (relative error < 1e-2), and shows that
a call outside the bundle (head_dim 64) is refused. It serves under a tuning
table that gives the two calls other tiles than the bundle's: AOT-only, they
take the bundle's kernels, of the built-in tiles.

Exit status: 0 served and matched; 1 a mismatch, a kernel not from the
bundle (or of the table's tiles), or the head_dim 64 call served; 2 a folder that does not load (or a
bad command line); 77 skipped (no torch or no GPU here).
"""

import argparse
import atexit
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "runtime", "python"))
# The bundle of app-specs.txt holds the built-in tiles. A tuning table on the
# serving machine (`attnc tune`) gives calls other tiles, which the bundle
# lacks: in AOT-only mode such a call takes the bundle's kernel of the
# built-in tiles rather than an error (with JIT on, the tuned tiles are
# compiled). This example serves under a table like one `attnc tune` may
# leave, to show it (examples/aot/README.md).
_TUNED = """\
# tiles other than the built-in ones for this layer's two kinds of kernel
mode=prefill,head_dim=128,mask=causal,page_size=16,gqa=4,target=sm_90a: tile_q=64,tile_kv=64
mode=prefill,head_dim=128,mask=causal,page_size=16,gqa=4,target=sm_80: tile_q=64,tile_kv=64
mode=decode,head_dim=128,page_size=16,gqa=4,target=sm_90a: tile_q=1,tile_kv=128
mode=decode,head_dim=128,page_size=16,gqa=4,target=sm_80: tile_q=1,tile_kv=128
"""
_table_dir = tempfile.mkdtemp(prefix="attnc-")
_table = os.path.join(_table_dir, "tuning.txt")
with open(_table, "w") as f:
    f.write(_TUNED)
atexit.register(os.rmdir, _table_dir)
atexit.register(os.remove, _table)
os.environ["ATTNC_TUNING_FILE"] = _table
import attnc  # noqa: E402

SKIP = 77
PAGE = 16
HEADS, KV_HEADS, HEAD_DIM = 8, 2, 128


def paged(torch, lengths, dev):
    """A paged K/V cache holding sequences of `lengths` keys, its pages shuffled:
    the cache, the block table, the lengths and each sequence's contiguous K and V."""
    pages_per_seq = max((n + PAGE - 1) // PAGE for n in lengths)
    num_pages = pages_per_seq * len(lengths)
    order = torch.randperm(num_pages, device=dev).to(torch.int32)
    table = order.view(len(lengths), pages_per_seq)
    shape = (num_pages, PAGE, KV_HEADS, HEAD_DIM)
    kc = torch.randn(shape, device=dev, dtype=torch.bfloat16)
    vc = torch.randn(shape, device=dev, dtype=torch.bfloat16)
    ks, vs = [], []
    for s, n in enumerate(lengths):
        rows = table[s].long()
        ks.append(kc[rows].reshape(-1, KV_HEADS, HEAD_DIM)[:n])
        vs.append(vc[rows].reshape(-1, KV_HEADS, HEAD_DIM)[:n])
    lens = torch.tensor(lengths, device=dev, dtype=torch.int32)
    return kc, vc, table, lens, ks, vs


def reference(torch, q, k, v, causal):
    """fp32 attention of one sequence: q [nq, H, d], k and v [nk, KV, d]; the
    causal mask aligned at the bottom right, as attnc's."""
    nq, nk = q.shape[0], k.shape[0]
    group = HEADS // KV_HEADS
    qf = q.float().transpose(0, 1)
    kf = k.float().repeat_interleave(group, dim=1).transpose(0, 1)
    vf = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
    s = qf @ kf.transpose(1, 2) / HEAD_DIM ** 0.5
    if causal:
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + nk - nq, float("-inf"))
    return (s.softmax(-1) @ vf).transpose(0, 1)


def serve(torch, name, q_lens, kv_lens, causal, dev):
    """One batch through attnc.plan (the kernel from the bundle) against the
    reference; True when it came from the bundle and matched."""
    kc, vc, table, lens, ks, vs = paged(torch, kv_lens, dev)
    q = torch.randn(sum(q_lens), HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16)
    offsets = [0]
    for n in q_lens:
        offsets.append(offsets[-1] + n)
    cu = torch.tensor(offsets, device=dev, dtype=torch.int32)
    plan = attnc.plan(q, kc, vc, causal=causal, cu_seqlens_q=cu, max_seqlen_q=max(q_lens),
                      block_table=table, seq_lens_k=lens, max_seqlen_k=max(kv_lens))
    out = plan.run()
    torch.cuda.synchronize()
    ref = torch.cat([reference(torch, q[offsets[s]:offsets[s + 1]], ks[s], vs[s], causal)
                     for s in range(len(q_lens))])
    err = ((out.float() - ref).norm() / ref.norm()).item()
    good = plan.kernel.source == "bundle" and err < 1e-2
    print(f"{name}: {len(q_lens)} sequences, kernel from {plan.kernel.source} "
          f"({plan.kernel.spec.split(',target')[0]}), relative error {err:.2e}: "
          f"{'ok' if good else 'FAILED'}")
    # The call's own spec has the tuning table's tiles; the bundle's kernel the built-in ones.
    target = plan.kernel.spec.rsplit("target=", 1)[1].split(",")[0]
    asked = attnc.spec_for("bf16", HEAD_DIM, HEADS, KV_HEADS, target=target,
                           page_size=PAGE, max_q_len=max(q_lens), causal=causal)
    tuned = asked != plan.kernel.spec
    print(f"  the tuning table gave the call {asked.split(',')[3:5]}; served with "
          f"{plan.kernel.spec.split(',')[3:5]}{'' if tuned else ': the same? FAILED'}")
    return good and tuned


def main():
    parser = argparse.ArgumentParser(
        description="Serve attention from an AOT bundle folder (attnc aot -o DIR), AOT-only.",
        epilog="Exit status: 0 served and matched, 1 failed, 2 a folder that does not load, "
               "77 skipped (no torch or GPU).")
    parser.add_argument("bundle", help="the bundle folder `attnc aot --specs "
                        "examples/aot/app-specs.txt -o DIR` wrote")
    args = parser.parse_args()
    # Loading needs no GPU: a folder that does not load is said first.
    try:
        n = attnc.load_bundle(args.bundle)
    except attnc.AttncError as e:
        print(f"aot_serving: {e}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("skipped: no torch here", file=sys.stderr)
        return SKIP
    if not torch.cuda.is_available():
        print("skipped: no GPU here", file=sys.stderr)
        return SKIP
    print(f"{n} kernels registered from {args.bundle} "
          f"({torch.cuda.get_device_name()}, {attnc.version()})")
    attnc.set_aot_only(True)
    torch.manual_seed(0)
    dev = "cuda"
    ok = serve(torch, "prefill", [200, 77], [200, 500], True, dev)
    ok = serve(torch, "decode", [1, 1, 1], [300, 1000, 17], False, dev) and ok
    # A call the bundle has no kernel for: refused, nothing compiled.
    q = torch.randn(64, HEADS, 64, device=dev, dtype=torch.bfloat16)
    k = torch.randn(64, KV_HEADS, 64, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0, 64], device=dev, dtype=torch.int32)
    try:
        attnc.attention(q, k, k, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                        max_seqlen_q=64, max_seqlen_k=64)
        print("head_dim 64: served though the bundle has no such kernel: FAILED")
        ok = False
    except attnc.AttncError as e:
        refused = "is in no AOT bundle" in str(e)
        print(f"head_dim 64: {'refused, as it should be' if refused else 'FAILED'} ({e})")
        ok = ok and refused
    print("SERVED FROM THE BUNDLE" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
