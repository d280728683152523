#!/usr/bin/env bash
# Configures and builds attnc (after installing what is missing).
#   scripts/build.sh            build/        MLIR static archives + libLLVM.so (development)
#   scripts/build.sh --static   build-static/ MLIR and LLVM fully static: portable binaries
# Extra arguments after the mode go to ninja (e.g. a target name).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"

dir="$root/build"
flags=()
if [ "${1:-}" = "--static" ]; then
  shift
  dir="$root/build-static"
  flags+=(-DATTNC_FULL_STATIC=ON)
fi
dir="${ATTNC_BUILD_DIR:-$dir}"

if [ ! -f "$dir/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit "${flags[@]}"
fi
ninja -C "$dir" "$@"
