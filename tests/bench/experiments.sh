#!/usr/bin/env bash
# bench/experiments/variants.py against this build's emitted kernels: every
# variant is written (its edits still find their places in the emitted
# sources), and a source without them is refused with the place named.
#   experiments.sh ATTNC PYTHON WORK_DIR
set -euo pipefail
attnc=$1 python=$2 work=$3
variants="$(cd "$(dirname "$0")/../.." && pwd)/bench/experiments/variants.py"
rm -rf "$work"
mkdir -p "$work"
"$attnc" emit --spec mode=prefill,head_dim=128 --stage cuda -o "$work/prefill.cu"
"$attnc" emit --spec mode=decode,page_size=16,gqa=4 --stage cuda -o "$work/decode.cu"
"$python" "$variants" prefill-ws "$work/ws"
"$python" "$variants" prefill-kv-split "$work/prefill.cu" "$work/kv-split.cu"
"$python" "$variants" decode-prefetch "$work/decode.cu" "$work/prefetch"
count=$(find "$work/ws" "$work/prefetch" "$work/kv-split.cu" -name '*.cu' | wc -l)
if [ "$count" -ne 21 ]; then
  echo "experiments.sh: expected 21 variants, found $count" >&2
  exit 1
fi
# Each variant keeps its spec line (the bench harness launches it by that spec).
for f in "$work"/ws/*.cu "$work"/prefetch/*.cu "$work/kv-split.cu"; do
  head -1 "$f" | grep -q '^// attnc .*: mode=' || { echo "experiments.sh: $f lost its spec line" >&2; exit 1; }
done
# A prefill kernel has none of the decode kernel's places: refused, the place named.
if "$python" "$variants" decode-prefetch "$work/prefill.cu" "$work/wrong" 2> "$work/err.txt"; then
  echo "experiments.sh: decode-prefetch accepted a prefill kernel" >&2
  exit 1
fi
grep -q "has no kTableAhead = 2" "$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
echo "variants: $count written, a mismatched source refused"
