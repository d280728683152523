#!/usr/bin/env bash
# The data behind split_kv = auto (chooseSplits, runtime/lib/Kernel.cpp): every
# decode pipeline depth (2, 3, 4 stages: 2, 2, 1 blocks per SM for head_dim 128)
# with the automatic split count and with fixed ones, on decode shapes from one
# sequence to 128, timed by attn-gpu-check --bench (L2 flushed before each
# launch, median). Run on the GPU machine with the packed binaries
# (tests/gpu/pack.sh); the log goes to stdout.
#
#   bash bench/split-sweep.sh [build-static/pack]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "split-sweep: unknown option '$1' (usage: bash bench/split-sweep.sh [PACK_DIR])" >&2
      exit 2 ;;
esac
[ $# -le 1 ] || { echo "split-sweep: one PACK_DIR at most (usage: bash bench/split-sweep.sh [PACK_DIR])" >&2; exit 2; }
pack=${1:-$root/build-static/pack}
[ -x "$pack/attn-gpu-check" ] || {
  echo "split-sweep: no $pack/attn-gpu-check: run tests/gpu/pack.sh on the build machine" >&2
  exit 2
}
variants=()
for stages in 2 3 4; do
  for split in auto 1 2 3 4 5 6 7 8 12 16 32; do
    variants+=(--variant "stages=$stages,split_kv=$split")
  done
done
rows=()
for row in 64,32,8,1024 64,32,8,4096 16,32,8,16384 128,32,8,4096 8,64,8,32768 \
           1,32,8,32768 2,32,8,4096 4,32,8,8192 32,32,8,2048 32,32,8,8192; do
  rows+=(--decode-row "$row")
done
exec "$pack/attn-gpu-check" --bench --rows decode "${variants[@]}" "${rows[@]}"
