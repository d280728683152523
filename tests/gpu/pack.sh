#!/usr/bin/env bash
# Builds the portable binaries for the GPU machine (MLIR and LLVM linked
# statically) and packs them small enough to copy: build-static/pack/ holds
# attn-gpu-check (stripped), attnc.xz (stripped, xz: the CPU JIT inside
# attnc makes it ~58 MB otherwise), libattnc.so (the C API, for the Python
# module and bench/bench.py) and the two C++ examples that need a GPU to do
# their work (examples/aot's application with its bundle, examples/jit-at-load),
# and the C API's and attnc.hpp's unit tests (attn-capi-tests, over libattnc.so).
# tests/gpu/run-on-gpu.sh unpacks attnc.
#   tests/gpu/pack.sh [-h | --help]
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "pack: unknown argument '$1' (usage: tests/gpu/pack.sh [--help])" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
"$root/scripts/build.sh" --static attn-gpu-check attnc attnc_c \
  attn-aot-example attn-jit-at-load-example attn-capi-tests
pack="$root/build-static/pack"
mkdir -p "$pack"
strip -o "$pack/attn-gpu-check" "$root/build-static/bin/attn-gpu-check"
strip -o "$pack/attnc" "$root/build-static/bin/attnc"
strip -o "$pack/libattnc.so" "$root/build-static/lib/libattnc.so"
for example in attn-aot-example attn-jit-at-load-example; do
  strip -o "$pack/$example" "$root/build-static/examples/$example"
done
strip -o "$pack/attn-capi-tests" "$root/build-static/tests/unit/attn-capi-tests"
xz -T2 -6 -f "$pack/attnc"
# The commit the binaries were built from (the results name it).
git -C "$root" describe --always --dirty > "$pack/commit.txt"
ls -la "$pack"
