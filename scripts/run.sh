#!/usr/bin/env bash
# Builds attnc and runs it. Without arguments: the textbook IR of a prefill
# spec (causal, paged, GQA 4, bf16, head_dim 128) becomes the FlashAttention
# recurrence, one pass at a time. With arguments: `attnc <arguments>`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" attnc >&2
attnc="${ATTNC_BUILD_DIR:-$root/build}/bin/attnc"
if [ $# -eq 0 ]; then
  set -- emit --spec mode=prefill,mask=causal,page_size=16,gqa=4,dtype=bf16,head_dim=128 --print-ir-after-all
fi
exec "$attnc" "$@"
