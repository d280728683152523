#!/usr/bin/env bash
# Installs what attnc needs to build and test on Debian 12 (bookworm). Idempotent: packages
# already present are not fetched again. The CUDA 13 toolkit (NVRTC) is expected to be
# installed already under /usr/local/cuda (or $CUDA_HOME); it is not a Debian package.
#   scripts/setup.sh [-h | --help]
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "attnc setup: unknown argument '$1' (usage: scripts/setup.sh [--help])" >&2; exit 2 ;;
esac

packages=(
  cmake ninja-build g++ ccache python3 python3-numpy
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  catch2 libfmt-dev libzstd-dev zlib1g-dev   # LLVM's static libraries link zstd and zlib
  clang-14 libclang-rt-14-dev   # libFuzzer for the spec-parser fuzz target
  git xz-utils                  # tests/gpu/pack.sh: the commit it packs, the packed attnc
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "attnc setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo > /dev/null || {
      echo "attnc setup: these packages are missing and installing them needs root (no sudo" \
           "here): ${missing[*]}" >&2
      exit 1
    }
    sudo_cmd=(sudo)
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  # env after sudo: sudo's env_reset would drop a variable set before it.
  if ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; then
    echo "attnc setup: apt-get could not install ${missing[*]}. LLVM/MLIR 22 are not in" \
         "bookworm's main archive on every mirror: add the LLVM project's apt repository for" \
         "bookworm (llvm-toolchain-bookworm-22, see apt.llvm.org) and run this again." >&2
    exit 1
  fi
else
  echo "attnc setup: all packages present"
fi

cuda="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "attnc setup: warning: no CUDA toolkit at $cuda (NVRTC); set CUDA_HOME to one. The CPU" \
       "parts still build." >&2
fi
