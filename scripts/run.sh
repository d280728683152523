#!/usr/bin/env bash
# Builds attnc and runs it. Without arguments: the textbook IR of a prefill
# spec (causal, paged, GQA 4, bf16, head_dim 128) becomes the FlashAttention
# recurrence, one pass at a time; then the same kernel (in f32, for the CPU)
# runs on random inputs and is checked against textbook attention, and on a
# machine with a GPU the CUDA kernel too (`attnc run --target gpu`).
# With arguments: `attnc <arguments>` (scripts/run.sh emit --help: attnc's help).
#   scripts/run.sh [-h | --help | ATTNC_ARGS...]
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" attnc >&2
attnc="${ATTNC_BUILD_DIR:-$root/build}/bin/attnc"
if [ $# -eq 0 ]; then
  spec=mode=prefill,mask=causal,page_size=16,gqa=4,head_dim=128
  "$attnc" emit --spec "$spec,dtype=bf16" --print-ir-after-all
  echo
  echo "== the same kernel on the CPU (f32), checked against textbook attention =="
  "$attnc" run --spec "$spec" --q-len 300 --batch 2 --ragged
  # On a machine with a GPU, the CUDA kernel of the spec too (bf16, the GPU's architecture).
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo
    echo "== the CUDA kernel on the GPU (bf16), checked against textbook attention =="
    exec "$attnc" run --target gpu --spec "$spec" --q-len 300 --batch 2 --ragged
  fi
  exit 0
fi
exec "$attnc" "$@"
