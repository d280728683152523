#!/usr/bin/env bash
# Builds the portable binaries (MLIR and LLVM linked statically) and checks
# that they need no MLIR or LLVM shared library and still work.
#   scripts/check-static.sh [-h | --help]
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "check-static: unknown argument '$1' (usage: scripts/check-static.sh [--help])" >&2
     exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" --static attnc attn-opt
bin="${ATTNC_BUILD_DIR:-$root/build-static}/bin"
for tool in attnc attn-opt; do
  if ldd "$bin/$tool" | grep -E 'lib(MLIR|LLVM)'; then
    echo "check-static: $tool still loads a shared MLIR/LLVM library" >&2
    exit 1
  fi
done
# Each output is read whole before it is searched: `tool | grep -q` would let
# grep exit at the first match and the tool die of SIGPIPE, which pipefail
# reports as a failure.
out=$("$bin/attnc" emit --spec mode=decode,page_size=16,gqa=4)
grep -q 'attn.merge' <<<"$out"
out=$("$bin/attn-opt" "$root/tests/lit/pipeline.mlir" --attn-pipeline)
grep -q 'attn.block_table_lookup' <<<"$out"
out=$("$bin/attnc" run --spec dtype=f64,mask=causal,page_size=7,gqa=3 --q-len 50)
grep -q '^OK$' <<<"$out"
echo "check-static: $bin/attnc and attn-opt are portable (no shared MLIR/LLVM) and work"
