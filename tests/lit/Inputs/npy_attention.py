"""Inputs for `attnc run --q ... --k ... --v ...` and a numpy check of its outputs.

    npy_attention.py make DIR KIND [options]   write q/k/v (and block table) .npy files
    npy_attention.py check DIR MASK [WINDOW]   compare DIR/o.npy and DIR/lse.npy with numpy

KIND is `contiguous` or `paged`. The numpy reference is written independently of
attnc: materialised scores, bottom-right aligned masks, softmax, times V.
"""
import sys

import numpy as np


def make(out, kind, gqa=2, kv_heads=2, q_len=37, kv_len=53, head_dim=32, page=16,
         dtype=np.float64, seed=0, v_scale=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((kv_heads * gqa, q_len, head_dim)).astype(dtype)
    k = rng.standard_normal((kv_heads, kv_len, head_dim)).astype(dtype)
    v = (rng.standard_normal((kv_heads, kv_len, head_dim)) * v_scale).astype(dtype)
    np.save(f"{out}/q.npy", q)
    np.save(f"{out}/k_logical.npy", k)
    np.save(f"{out}/v_logical.npy", v)
    if kind == "contiguous":
        np.save(f"{out}/k.npy", k)
        np.save(f"{out}/v.npy", v)
        return
    # Paged: the sequence's pages shuffled among spare ones; unused slots are NaN.
    pages = -(-kv_len // page)
    num_pages = pages + 3
    table = rng.permutation(num_pages)[:pages].astype(np.int32)
    kc = np.full((num_pages, page, kv_heads, head_dim), np.nan, dtype)
    vc = np.full_like(kc, np.nan)
    for t in range(kv_len):
        kc[table[t // page], t % page] = k[:, t]
        vc[table[t // page], t % page] = v[:, t]
    np.save(f"{out}/k.npy", kc)
    np.save(f"{out}/v.npy", vc)
    np.save(f"{out}/block_table.npy", table)


def reference(q, k, v, mask, window):
    heads, q_len, d = q.shape
    kv_heads, kv_len, _ = k.shape
    group = heads // kv_heads
    pos = np.arange(q_len)[:, None] + (kv_len - q_len)
    key = np.arange(kv_len)[None, :]
    visible = np.ones((q_len, kv_len), bool)
    if mask in ("causal", "window"):
        visible &= key <= pos
    if mask == "window":
        visible &= key > pos - window
    out = np.zeros_like(q)
    lse = np.full((heads, q_len), -np.inf)
    for h in range(heads):
        s = q[h] @ k[h // group].T / np.sqrt(d)
        s = np.where(visible, s, -np.inf)
        m = s.max(axis=1, keepdims=True)
        seen = np.isfinite(m[:, 0])
        p = np.where(visible, np.exp(s - np.where(np.isfinite(m), m, 0)), 0.0)
        l = p.sum(axis=1, keepdims=True)
        out[h][seen] = (p @ v[h // group])[seen] / l[seen]
        lse[h][seen] = (m + np.log(l))[seen, 0]
    return out, lse


def check(out, mask, window=0):
    q = np.load(f"{out}/q.npy")
    k = np.load(f"{out}/k_logical.npy")
    v = np.load(f"{out}/v_logical.npy")
    o = np.load(f"{out}/o.npy")
    lse = np.load(f"{out}/lse.npy")
    want_o, want_lse = reference(q, k, v, mask, window)
    err = np.abs(o - want_o).max()
    finite = np.isfinite(want_lse)
    lse_err = np.abs(lse[finite] - want_lse[finite]).max() if finite.any() else 0.0
    masked_ok = np.all(o[~finite] == 0) and np.all(np.isneginf(lse[~finite]))
    print(f"numpy: max abs error {max(err, lse_err):.3g}, "
          f"{(~finite).sum()} fully masked rows {'ok' if masked_ok else 'WRONG'}")
    if not (err < 1e-10 and lse_err < 1e-10 and masked_ok and not np.isnan(o).any()):
        print("numpy: MISMATCH")
        sys.exit(1)
    print("numpy: attnc agrees")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        kind = sys.argv[3]
        extra = dict(arg.split("=") for arg in sys.argv[4:])
        dtype = np.float32 if extra.pop("dtype", "f64") == "f32" else np.float64
        make(sys.argv[2], kind, dtype=dtype, **{key: int(val) for key, val in extra.items()})
    else:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
