#!/usr/bin/env bash
# Configures and builds attnc (after installing what is missing).
#   scripts/build.sh [--static] [NINJA_ARGS...]
#   scripts/build.sh            build/        MLIR static archives + libLLVM.so (development)
#   scripts/build.sh --static   build-static/ MLIR and LLVM fully static: portable binaries
# Arguments after the mode go to ninja (e.g. a target name, -j2). The CUDA toolkit (NVRTC)
# is taken from $CUDA_HOME, else $CUDA_PATH, else /usr/local/cuda; a build folder configured
# before that toolkit was there is configured again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: scripts/build.sh [--static] [NINJA_ARGS...]"
static=0
case "${1:-}" in
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --static) static=1; shift ;;
esac
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --static) echo "attnc build: --static comes first ($usage)" >&2; exit 2 ;;
    --verbose|--quiet) ;; # ninja's own
    --*) echo "attnc build: unknown option '$arg' ($usage)" >&2; exit 2 ;;
  esac
done
"$root/scripts/setup.sh"

dir="$root/build"
flags=()
if ((static)); then
  dir="$root/build-static"
  flags+=(-DATTNC_FULL_STATIC=ON)
else
  flags+=(-DATTNC_FULL_STATIC=OFF)
fi
dir="${ATTNC_BUILD_DIR:-$dir}"
cuda="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
[ -f "$cuda/include/nvrtc.h" ] && flags+=(-DCUDAToolkit_ROOT="$cuda")

configure=0
[ -f "$dir/build.ninja" ] || configure=1
# A folder configured without NVRTC, now that a toolkit is there (or with
# the other --static setting): configure it again.
if ((!configure)) && [ -f "$cuda/include/nvrtc.h" ] &&
   ! grep -q '^CUDAToolkit_NVCC_EXECUTABLE:FILEPATH=/' "$dir/CMakeCache.txt" 2>/dev/null; then
  configure=1
fi
if ((!configure)) && ! grep -q "^ATTNC_FULL_STATIC:BOOL=$( ((static)) && echo ON || echo OFF)\$" \
     "$dir/CMakeCache.txt" 2>/dev/null; then
  configure=1
fi
if ((configure)); then
  cmake -G Ninja -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit "${flags[@]}"
fi
ninja -C "$dir" "$@"
