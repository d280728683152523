"""The ratio table: attnc's timings (attn-gpu-check --bench) against the SDPA
anchors of the same run (sdpa_anchor.py).

    python3 tests/gpu/ratios.py bench.log sdpa.log      prints a Markdown table
"""
import re
import sys


def main(bench_path, sdpa_path):
    bench = open(bench_path).read().splitlines()
    sdpa = open(sdpa_path).read().splitlines()
    # attnc rows; "[fields]" marks a --variant of the spec.
    pre = re.compile(r"hd\s+(\d+)\s+N\s+(\d+)\s+(\w+)\s+B\s+\d+\s+H\s+\d+\s+(?:\[([^\]]*)\])?\s*([\d.]+)\s+([\d.]+)$")
    dec = re.compile(r"B\s+(\d+)\s+heads\s+(\d+)/(\d+)\s+kv\s+(\d+)\s+(?:\[([^\]]*)\])?\s*([\d.]+)\s+([\d.]+)\s+(\d+)$")
    anchors = {}
    for line in sdpa:
        m = re.match(r"hd\s+(\d+)\s+N\s+(\d+)\s+(\w+)\s+flash\s+[\d.]+ ms\s+([\d.]+) TFLOP/s\s+cudnn\s+[\d.]+ ms\s+([\d.]+)", line)
        if m:
            anchors[("p",) + m.groups()[:3]] = (float(m.group(4)), float(m.group(5)))
        m = re.match(r"B\s+(\d+)\s+heads\s+(\d+)/(\d+)\s+kv\s+(\d+)\s+flash\s+[\d.]+ ms\s+([\d.]+) GB/s\s+cudnn\s+[\d.]+ ms\s+([\d.]+)", line)
        if m:
            anchors[("d",) + m.groups()[:4]] = (float(m.group(5)), float(m.group(6)))
    pre_rows = [m.groups() for m in map(pre.match, bench) if m]
    dec_rows = [m.groups() for m in map(dec.match, bench) if m]
    variants = any(r[3] for r in pre_rows) or any(r[4] for r in dec_rows)
    col = lambda v: f" {v or 'defaults'} |" if variants else ""
    vhead, vrule = (" variant |", "---|") if variants else ("", "")
    print(f"| prefill: hd | N | mask |{vhead} attnc TFLOP/s | SDPA flash (FA2) | SDPA cuDNN | x FA2 | x cuDNN |")
    print(f"|---|---|---|{vrule}---|---|---|---|---|")
    for hd, n, mask, variant, _, tf in pre_rows:
        fa2, cudnn = anchors.get(("p", hd, n, mask), (float("nan"), float("nan")))
        tf = float(tf)
        print(f"| {hd} | {n} | {mask} |{col(variant)} {tf:.1f} | {fa2:.1f} | {cudnn:.1f} | {tf / fa2:.2f} | {tf / cudnn:.2f} |")
    print()
    print(f"| decode: batch | heads q/kv | kv len |{vhead} splits | attnc GB/s | SDPA flash | SDPA cuDNN | x flash | x cuDNN |")
    print(f"|---|---|---|{vrule}---|---|---|---|---|---|")
    for b, hq, hkv, n, variant, _, gbs, splits in dec_rows:
        fl, cudnn = anchors.get(("d", b, hq, hkv, n), (float("nan"), float("nan")))
        gbs = float(gbs)
        print(f"| {b} | {hq}/{hkv} | {n} |{col(variant)} {splits} | {gbs:.0f} | {fl:.0f} | {cudnn:.0f} | {gbs / fl:.2f} | {gbs / cudnn:.2f} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
