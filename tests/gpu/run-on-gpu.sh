#!/usr/bin/env bash
# Runs the GPU checks from prebuilt portable binaries (scripts/build.sh --static
# attn-gpu-check) on a machine with a GPU, writing logs to a folder.
#   tests/gpu/run-on-gpu.sh [LOG_DIR]      (default: $OUT, else ./gpu-logs)
# 1. attn-gpu-check: the emitted kernels against the fp64 reference, every spec.
# 2. JIT latency through the kernel cache: cold NVRTC, disk hit, memory hit.
# 3. compute-sanitizer memcheck and racecheck on a small case of each family.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
logs="${1:-${OUT:-$root/gpu-logs}}"
mkdir -p "$logs"
bin="${ATTNC_BUILD_DIR:-$root/build-static}/bin/attn-gpu-check"
[ -x "$bin" ] || { echo "no $bin: build it with scripts/build.sh --static attn-gpu-check" >&2; exit 2; }
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
status=0
"$bin" 2>&1 | tee "$logs/gpu-check.log" || status=1
"$bin" --jit 2>&1 | tee "$logs/jit.log" || status=1
small=(--quick --spec "dtype=bf16,mask=causal,head_dim=128,gqa=4,page_size=16,return_lse=true"
       --spec "dtype=f16,mask=sliding_window(100),head_dim=64"
       --spec "mode=decode,page_size=19,gqa=4,split_kv=1,mask=causal,dtype=f16")
for tool in memcheck racecheck; do
  compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin" "${small[@]}" > "$logs/$tool.log" 2>&1 || status=1
  tail -n 1 "$logs/$tool.log"
done
exit $status
