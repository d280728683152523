#!/usr/bin/env bash
# Builds the portable binaries for the GPU machine (MLIR and LLVM linked
# statically) and packs them small enough to copy: build-static/pack/ holds
# attn-gpu-check (stripped) and attnc.xz (stripped, xz: the CPU JIT inside
# attnc makes it ~58 MB otherwise). tests/gpu/run-on-gpu.sh unpacks attnc.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
"$root/scripts/build.sh" --static attn-gpu-check attnc
pack="$root/build-static/pack"
mkdir -p "$pack"
strip -o "$pack/attn-gpu-check" "$root/build-static/bin/attn-gpu-check"
strip -o "$pack/attnc" "$root/build-static/bin/attnc"
xz -T2 -6 -f "$pack/attnc"
ls -la "$pack"
