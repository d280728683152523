"""The ratio tables: attnc's timings (attn-gpu-check --bench) against the SDPA
anchors of the same run (sdpa_anchor.py), and a summary of a whole GPU run.

    python3 tests/gpu/ratios.py bench.log sdpa.log    prints the Markdown tables
    python3 tests/gpu/ratios.py --summary LOG_DIR     prints a short summary of the logs
                                                      run-on-gpu.sh wrote and saves it,
                                                      with every row, as LOG_DIR/results.json
"""
import json
import math
import os
import re
import sys

# attnc rows; "[fields]" marks a --variant of the spec, or a --source file, whose rows
# end with a verdict on its output ("ok", "OUTPUT DIFFERS ...").
VERDICT = r"(?:\s+[A-Za-z].*)?$"
PREFILL = re.compile(r"hd\s+(\d+)\s+N\s+(\d+)\s+(\w+)\s+B\s+\d+\s+H\s+\d+\s+(?:\[([^\]]*)\])?\s*([\d.]+)\s+([\d.]+)" + VERDICT)
# The split count: a number, "2p" (the two pipelines of a block) or "8c" (a cluster).
DECODE = re.compile(r"B\s+(\d+)\s+heads\s+(\d+)/(\d+)\s+kv\s+(\d+)\s+(?:\[([^\]]*)\])?\s*([\d.]+)\s+([\d.]+)\s+(\d+[pc]?)" + VERDICT)
# sdpa_anchor.py's rows: the shape, then each backend's time and rate, or "n/a (why)".
SDPA_PREFILL = re.compile(r"hd\s+(\d+)\s+N\s+(\d+)\s+(\w+)\s")
SDPA_DECODE = re.compile(r"B\s+(\d+)\s+heads\s+(\d+)/(\d+)\s+kv\s+(\d+)\s")


def backend_rate(line, name):
    """A backend's TFLOP/s or GB/s on an sdpa_anchor.py row; nan where it said n/a."""
    m = re.search(rf"\b{name}\s+[\d.]+ ms\s+([\d.]+) (?:TFLOP|GB)/s", line)
    return float(m.group(1)) if m else math.nan


def rows(bench_lines, sdpa_lines):
    """The prefill and decode rows of a run, each with its anchors and ratios."""
    anchors = {}
    for line in sdpa_lines:
        rates = (backend_rate(line, "flash"), backend_rate(line, "cudnn"))
        m = SDPA_PREFILL.match(line)
        if m:
            anchors[("p",) + m.groups()] = rates
        m = SDPA_DECODE.match(line)
        if m:
            anchors[("d",) + m.groups()] = rates
    nan = (math.nan, math.nan)
    prefill, decode = [], []
    for line in bench_lines:
        m = PREFILL.match(line)
        if m:
            hd, n, mask, variant, _, tf = m.groups()
            fa2, cudnn = anchors.get(("p", hd, n, mask), nan)
            tf = float(tf)
            prefill.append(dict(head_dim=int(hd), n=int(n), mask=mask, variant=variant or "",
                                tflops=tf, fa2=fa2, cudnn=cudnn, x_fa2=tf / fa2, x_cudnn=tf / cudnn))
        m = DECODE.match(line)
        if m:
            b, hq, hkv, n, variant, _, gbs, splits = m.groups()
            flash, cudnn = anchors.get(("d", b, hq, hkv, n), nan)
            gbs = float(gbs)
            decode.append(dict(batch=int(b), q_heads=int(hq), kv_heads=int(hkv), kv_len=int(n),
                               variant=variant or "", splits=splits, gbs=gbs, flash=flash,
                               cudnn=cudnn, x_flash=gbs / flash, x_cudnn=gbs / cudnn))
    return prefill, decode


def print_tables(prefill, decode):
    variants = any(r["variant"] for r in prefill + decode)
    col = lambda r: f" {r['variant'] or 'defaults'} |" if variants else ""
    vhead, vrule = (" variant |", "---|") if variants else ("", "")
    print(f"| prefill: hd | N | mask |{vhead} attnc TFLOP/s | SDPA flash (FA2) | SDPA cuDNN | x FA2 | x cuDNN |")
    print(f"|---|---|---|{vrule}---|---|---|---|---|")
    for r in prefill:
        print(f"| {r['head_dim']} | {r['n']} | {r['mask']} |{col(r)} {r['tflops']:.1f} | {r['fa2']:.1f} | "
              f"{r['cudnn']:.1f} | {r['x_fa2']:.2f} | {r['x_cudnn']:.2f} |")
    print()
    print(f"| decode: batch | heads q/kv | kv len |{vhead} splits | attnc GB/s | SDPA flash | SDPA cuDNN | x flash | x cuDNN |")
    print(f"|---|---|---|{vrule}---|---|---|---|---|---|")
    for r in decode:
        print(f"| {r['batch']} | {r['q_heads']}/{r['kv_heads']} | {r['kv_len']} |{col(r)} {r['splits']} | "
              f"{r['gbs']:.0f} | {r['flash']:.0f} | {r['cudnn']:.0f} | {r['x_flash']:.2f} | {r['x_cudnn']:.2f} |")


def strict(value):
    """value with every NaN as None: JSON has no NaN (a missing anchor is null)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strict(v) for v in value]
    return value


def read(path):
    """A log's lines ([] if there is none); bytes that are not UTF-8 read as U+FFFD."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


LOGS = ("gpu-check.log", "capi-tests.log", "jit.log", "memcheck.log", "racecheck.log", "bench.log",
        "sdpa.log")


def summary(log_dir):
    """A short summary of run-on-gpu.sh's logs; every row goes to results.json."""
    if not os.path.isdir(log_dir):
        sys.exit(f"ratios.py: {log_dir} is not a folder")
    if not any(os.path.exists(os.path.join(log_dir, name)) for name in LOGS):
        sys.exit(f"ratios.py: {log_dir} holds none of run-on-gpu.sh's logs ({', '.join(LOGS)})")
    check = read(os.path.join(log_dir, "gpu-check.log"))
    result = {
        "gpu": next((l for l in check if l.startswith("GPU ")), ""),
        # "N checks (...), M failed (...)"; before the layouts were checked too, "N specs, M failed"
        "numerics": next((l for l in check if re.match(r"^\d+ (specs|checks)\b.*, \d+ failed", l)),
                         "no total line in gpu-check.log" if check else "no numerics log"),
        "launch_contract": check[check.index("The launch contract:") + 1:]
        if "The launch contract:" in check else [],
        "sanitizers": {t: (read(os.path.join(log_dir, t + ".log")) or ["not run"])[-1].strip("= ")
                       for t in ("memcheck", "racecheck")},
        "jit": read(os.path.join(log_dir, "jit.log")),
        # Catch2's last line: "All tests passed (...)" or "test cases: ... failed"
        "capi_tests": next((l for l in reversed(read(os.path.join(log_dir, "capi-tests.log")))
                            if l.strip()), "not run"),
        # run-on-gpu.sh's verdict line: "examples: attn-aot-example ok, ..."
        "examples": next((l[len("examples: "):] for l in reversed(read(os.path.join(log_dir, "examples.log")))
                          if l.startswith("examples: ")), "not run"),
    }
    prefill, decode = rows(read(os.path.join(log_dir, "bench.log")), read(os.path.join(log_dir, "sdpa.log")))
    result["prefill"], result["decode"] = prefill, decode
    with open(os.path.join(log_dir, "results.json"), "w") as f:
        json.dump(strict(result), f, indent=1)
    contract = result["launch_contract"]
    print(result["gpu"])
    print("numerics:", result["numerics"])
    ok = sum(bool(re.search(r"\sok(: |$)", l)) for l in contract)
    print(f"launch contract: {ok} of {len(contract)} checks ok" if contract
          else "launch contract: not run")
    print("C API unit tests:", result["capi_tests"])
    print("examples:", result["examples"])
    for tool, line in result["sanitizers"].items():
        print(f"{tool}: {line}")
    for line in result["jit"]:
        print(line)
    if prefill or decode:
        print_tables(prefill, decode)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2])
    elif len(sys.argv) == 3:
        for path in sys.argv[1:]:
            if os.path.isdir(path):
                sys.exit(f"ratios.py: {path}: a folder, not a log (--summary takes a folder)")
            if not os.path.isfile(path):
                sys.exit(f"ratios.py: {path}: no such file")
        prefill, decode = rows(read(sys.argv[1]), read(sys.argv[2]))
        if not prefill and not decode:
            sys.exit(f"ratios.py: {sys.argv[1]} holds no attn-gpu-check --bench rows")
        print_tables(prefill, decode)
    else:
        sys.exit(__doc__)
