"""PyTorch SDPA anchors on the benchmark's shapes (bench/bench.py), in the same run as attnc.

    python3 sdpa_anchor.py        prints ms and TFLOP/s (prefill) or GB/s (decode)
                                  for the flash and cuDNN backends
"""
import sys

if len(sys.argv) > 1:
    if sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    sys.exit(f"sdpa_anchor.py takes no arguments (got {' '.join(sys.argv[1:])})")
try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench
except ImportError as e:
    raise SystemExit(f"sdpa_anchor.py needs torch and triton: {e}")
if not torch.cuda.is_available():
    raise SystemExit("sdpa_anchor.py needs a CUDA GPU (torch.cuda.is_available() is False)")

BACKENDS = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))


def timed(call, amount, unit):
    """Each backend's part of a row: its time and `amount` per ms in `unit`, or
    "n/a (why)" where it cannot run the shape."""
    row = ""
    for name, backend in BACKENDS:
        try:
            with sdpa_kernel(backend):
                ms = do_bench(call)
            row += f"  {name} {ms:8.3f} ms {amount / ms:7.1f} {unit}"
        except RuntimeError as e:
            row += f"  {name} n/a ({str(e).splitlines()[0][:40]})"
    return row


for hd in (64, 128):
    for causal in (False, True):
        for n in (1024, 4096, 16384):
            b, h = 16384 // n, 2048 // hd
            q, k, v = (torch.randn(b, h, n, hd, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            flops = 4 * b * h * n * n * hd * (0.5 if causal else 1.0)
            row = f"hd {hd:3d}  N {n:5d}  {'causal' if causal else 'full':8s}"
            row += timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                         flops / 1e9, "TFLOP/s")
            print(row, flush=True)
            q = k = v = None  # freed before the next shape

# Decode: one query token, a contiguous KV cache, GQA; GB/s of K + V bytes read.
for b, hq, hkv, n in ((64, 32, 8, 1024), (64, 32, 8, 4096), (16, 32, 8, 16384),
                      (128, 32, 8, 4096), (8, 64, 8, 32768)):
    q = torch.randn(b, hq, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, n, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    nbytes = 2 * k.numel() * k.element_size()
    row = f"B {b:3d}  heads {hq:2d}/{hkv}  kv {n:5d}"
    row += timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                 nbytes / 1e6, "GB/s")
    print(row, flush=True)
    q = k = v = None  # freed before the next shape
