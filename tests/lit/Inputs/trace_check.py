"""Checks `attnc trace --save-inputs DIR`'s files with numpy: the traced row's
softmax(q k^T * scale) v under the mask, against the kernel's output row.

    trace_check.py DIR ROW MASK [WINDOW]     MASK: none, causal or window
"""
import sys

import numpy as np


def main():
    out, row, mask = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    window = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    q, k, v, o = (np.load(f"{out}/{name}.npy") for name in ("q", "k", "v", "o"))
    q_len, d = q.shape
    n = k.shape[0]
    pos = row + n - q_len  # bottom-right aligned
    s = q[row] @ k.T / np.sqrt(d)
    keys = np.arange(n)
    hidden = np.zeros(n, bool)
    if mask in ("causal", "window"):
        hidden |= keys > pos
    if mask == "window":
        hidden |= keys <= pos - window
    s[hidden] = -np.inf
    p = np.exp(s - s.max())
    err = np.abs(p / p.sum() @ v - o).max()
    print(f"numpy: row {row} of q {q.shape}, k {k.shape}: max abs error {err:.3g}")
    print("numpy: the trace's inputs give its output" if err < 1e-12 else "numpy: MISMATCH")
    return 0 if err < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
