#!/usr/bin/env bash
# bench/experiments/variants.py against this build's emitted kernels: every
# variant is written (its edits still find their places in the emitted
# sources) and, given attn-compile-sources, compiles as attn-gpu-check
# --source compiles it; a source without those places is refused with the
# place named.
#   experiments.sh ATTNC PYTHON WORK_DIR [ATTN_COMPILE_SOURCES]
set -euo pipefail
attnc=$1 python=$2 work=$3
shift 3
root="$(cd "$(dirname "$0")/../.." && pwd)"
variants="$root/bench/experiments/variants.py"
rm -rf "$work"
mkdir -p "$work"
"$attnc" emit --spec mode=prefill,head_dim=128,mma=wgmma --stage cuda -o "$work/prefill.cu"
"$attnc" emit --spec mode=decode,page_size=16,gqa=4 --stage cuda -o "$work/decode.cu"
"$attnc" emit --spec mode=decode,page_size=16,gqa=4,stages=2,split_kv=1 --stage cuda -o "$work/decode2.cu"
"$python" "$variants" prefill-ws "$work/ws"
"$python" "$variants" prefill-kv-split "$work/prefill.cu" "$work/kv-split"
"$python" "$variants" decode-prefetch "$work/decode.cu" "$work/prefetch"
"$python" "$variants" decode-cache-policy "$work/decode.cu" "$work/policy"
"$python" "$variants" decode-heads-in-step "$work/decode.cu" "$work/heads"
"$python" "$variants" decode-keys-as-m "$work/decode.cu" "$work/keys-as-m"
"$python" "$variants" decode-cols "$work/decode.cu" "$work/cols"
"$python" "$variants" decode-delay "$work/decode.cu" "$work/delay"
"$python" "$variants" decode-persistent "$work/decode.cu" "$work/persistent"
"$python" "$variants" decode-kv-release "$work/decode2.cu" "$work/kv-release"
"$python" "$variants" decode-successor "$work/decode.cu" "$work/successor"
"$python" "$variants" decode-bulk "$work/decode.cu" "$work/bulk"
"$python" "$variants" prefill-params "$work/prefill.cu" "$work/params"
variants_written=("$work"/ws/*.cu "$work"/prefetch/*.cu "$work"/kv-split/*.cu "$work"/policy/*.cu "$work"/heads/*.cu
                  "$work"/keys-as-m/*.cu "$work"/cols/*.cu "$work"/delay/*.cu
                  "$work"/persistent/*.cu "$work"/kv-release/*.cu "$work"/successor/*.cu "$work"/bulk/*.cu "$work"/params/*.cu)
count=${#variants_written[@]}
if [ "$count" -ne 81 ]; then
  echo "experiments.sh: expected 81 variants, found $count" >&2
  exit 1
fi
# Each variant keeps its spec line (the bench harness launches it by that spec).
for f in "${variants_written[@]}"; do
  head -1 "$f" | grep -q '^// attnc .*: mode=' || { echo "experiments.sh: $f lost its spec line" >&2; exit 1; }
done
# A prefill kernel has none of the decode kernel's places: refused, the place
# named, nothing written.
refused() { # COMMAND PLACE
  if "$python" "$variants" "$1" "$work/prefill.cu" "$work/wrong" 2> "$work/err.txt"; then
    echo "experiments.sh: $1 accepted a prefill kernel" >&2
    exit 1
  fi
  grep -q "has no $2" "$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
  [ ! -e "$work/wrong" ] || { echo "experiments.sh: a refused $1 wrote $work/wrong" >&2; exit 1; }
}
refused decode-prefetch "kTableAhead = 2"
refused decode-cache-policy "decode.cuh include"
refused decode-heads-in-step "decode cluster test"
refused decode-keys-as-m "decode_block"
refused decode-cols "decode_block"
refused decode-delay "the end of the KV loop"
refused decode-persistent "the pair kernel's comment"
refused decode-kv-release "kStages = 2"
refused decode-successor "decode.cuh include"
refused decode-bulk "decode_block"
# prefill-params takes a kernel over a contiguous cache: a paged decode kernel is refused.
if "$python" "$variants" prefill-params "$work/decode.cu" "$work/wrong" 2> "$work/err.txt" ||
   ! grep -q "has no contiguous cache" "$work/err.txt" || [ -e "$work/wrong" ]; then
  echo "experiments.sh: prefill-params did not refuse a paged decode kernel" >&2
  exit 1
fi
compiled=""
if [ $# -ge 1 ]; then
  "$1" "${variants_written[@]}"
  compiled=", all compiled"
fi
echo "variants: $count written$compiled, mismatched sources refused"
