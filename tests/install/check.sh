#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a separate C
# and C++ project against it with find_package(attnc), one of its programs with
# an AOT bundle compiled in that the installed attnc wrote (no GPU needed).
#   tests/install/check.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
for f in bin/attnc lib/libattnc.so lib/libattnc.so.1 include/attnc/attnc.h include/attnc/attnc.hpp \
         lib/cmake/attnc/attncConfig.cmake \
         share/attnc/python/attnc/__init__.py share/attnc/python/attnc/_capi.py \
         share/attnc/python/attnc/_tensors.py; do
  [ -e "$tmp/prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
# Only what consumers use: the static libraries inside attnc and libattnc.so stay out.
if found=$(find "$tmp/prefix" -name '*.a' | head -n 3) && [ -n "$found" ]; then
  echo "static libraries installed: $found"
  exit 1
fi
echo "mode=decode,head_dim=64,page_size=16" > "$tmp/specs.txt"
"$tmp/prefix/bin/attnc" aot --specs "$tmp/specs.txt" --arch sm_80 -o "$tmp/bundle" > "$tmp/aot.log"
# Another kernel under the same bundle name, which the linked bundle's name refuses.
echo "mode=decode,head_dim=128,page_size=16" > "$tmp/other-specs.txt"
"$tmp/prefix/bin/attnc" aot --specs "$tmp/other-specs.txt" --arch sm_80 --name bundle \
  -o "$tmp/other" >> "$tmp/aot.log"
cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DATTNC_BUNDLE="$tmp/bundle" > "$tmp/configure.log"
cmake --build "$tmp/consumer" > "$tmp/build.log"
"$tmp/consumer/consumer"
"$tmp/consumer/consumer-cpp"
"$tmp/consumer/consumer-bundled" "$tmp/bundle" "$tmp/other"
# The installed Python module finds the installed library by itself.
ATTNC_LIBRARY= python3 -c "import sys; sys.path.insert(0, '$tmp/prefix/share/attnc/python'); import attnc; print(attnc.version(), attnc.library_path())"
