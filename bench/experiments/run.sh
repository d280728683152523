#!/usr/bin/env bash
# The check and the same-run comparison of this branch's decode kernels, in one
# call on the H200 (about 6 minutes), with the binaries of `bash tests/gpu/pack.sh`
# carried as build-static/pack. Logs go to $OUT (default ./experiment-logs).
#   1. the 44-spec numerics matrix (its split decode specs take the cluster merge);
#   2. split decode both ways: 3 splits (a cluster) and 12 (the merge kernel);
#   3. attn-gpu-check --bench --rows decode with every source here (README.md);
#   4. bench.py's decode rows against cuDNN (if torch is there);
#   5. memcheck and racecheck on the split decode specs (last: the slowest, each
#      stopped after 150 s).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
P=${P:-$root/build-static/pack}
E=$root/bench/experiments
O=${OUT:-$root/experiment-logs}
mkdir -p "$O"
check=$P/attn-gpu-check
step() { printf '== %s (%s)\n' "$1" "$(date +%T)"; }

step "numerics matrix"
"$check" > "$O/matrix.log" 2>&1
echo "matrix: rc=$? $(grep -c FAIL "$O/matrix.log") FAIL lines; $(tail -n 1 "$O/matrix.log")"

step "split decode: a cluster of 3, and 12 splits through the merge kernel"
splits=(--quick --spec "mode=decode,page_size=16,gqa=8,split_kv=3,return_lse=true"
        --spec "mode=decode,page_size=16,gqa=4,split_kv=12,return_lse=true"
        --spec "mode=decode,page_size=19,gqa=4,split_kv=5,mask=causal,dtype=f16"
        --spec "mode=decode,page_size=128,gqa=2,split_kv=2,mask=sliding_window(100)")
"$check" "${splits[@]}" > "$O/splits.log" 2>&1
echo "splits: rc=$? $(tail -n 1 "$O/splits.log")"

step "same-run comparison"
sources=()
for name in main nocluster ahead1 ahead3 early tablesm; do
  sources+=(--source "$E/${name}_g4.cu" --source "$E/${name}_g8.cu")
done
"$check" --bench --rows decode "${sources[@]}" > "$O/ab.log" 2>&1
echo "ab: rc=$?"
grep -A40 '^decode' "$O/ab.log"

step "bench.py decode rows"
if python3 -c 'import torch' 2> /dev/null; then
  ATTNC_LIBRARY=$P/libattnc.so ATTNC_COMMIT=$(cat "$P/commit.txt") \
    python3 "$root/bench/bench.py" --rows decode --no-flex --out "$O/bench-py" > "$O/bench-py.log" 2>&1
  echo "bench.py: rc=$?"
  grep -i "decode" "$O/bench-py.log" | tail -n 6
fi
step "sanitizers"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 3 "$check" "${splits[@]}" > "$O/$tool.log" 2>&1
  echo "$tool: rc=$? $(tail -n 1 "$O/$tool.log")"
done

step "done"
