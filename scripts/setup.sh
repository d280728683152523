#!/usr/bin/env bash
# Installs what attnc needs to build and test on Debian 12 (bookworm). Idempotent: packages
# already present are not fetched again. The CUDA 13 toolkit (NVRTC) is expected to be
# installed already under /usr/local/cuda (or $CUDA_HOME); it is not a Debian package.
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache python3 python3-numpy
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  catch2 libfmt-dev libzstd-dev
  clang-14 libclang-rt-14-dev   # libFuzzer for the spec-parser fuzz target
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "attnc setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
else
  echo "attnc setup: all packages present"
fi

cuda="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "attnc setup: warning: no CUDA toolkit at $cuda (NVRTC); set CUDA_HOME. The CPU parts still build." >&2
fi
