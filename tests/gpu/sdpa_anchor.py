"""PyTorch SDPA anchors on PERF.md's prefill shapes, in the same run as attnc.

    python3 sdpa_anchor.py        prints ms and TFLOP/s for the flash and cuDNN backends
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

for hd in (64, 128):
    for causal in (False, True):
        for n in (1024, 4096, 16384):
            b, h = 16384 // n, 2048 // hd
            q, k, v = (torch.randn(b, h, n, hd, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            flops = 4 * b * h * n * n * hd * (0.5 if causal else 1.0)
            row = f"hd {hd:3d}  N {n:5d}  {'causal' if causal else 'full':8s}"
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                with sdpa_kernel(backend):
                    ms = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
                row += f"  {name} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s"
            print(row, flush=True)
