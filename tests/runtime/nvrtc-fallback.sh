#!/usr/bin/env bash
# NVRTC is loaded at run time: where the loader does not find it, attnc takes
# it (and its builtins library) from $CUDA_HOME/lib64, and a libnvrtc that
# does not load is named with the loader's reason. The loader's folder is
# hidden in a private mount namespace (unshare); without one the test is
# skipped (77).
#   tests/runtime/nvrtc-fallback.sh ATTNC
set -uo pipefail
attnc=$1
cuda=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
lib=$(dirname "$(readlink -f "$cuda/lib64/libnvrtc.so.13" 2>/dev/null || echo /none/x)")
if [ ! -d "$lib" ] || [ ! -f "$cuda/include/nvrtc.h" ] || ! unshare -rm true 2>/dev/null; then
  echo "skipped: no CUDA 13 toolkit folder or no private mount namespace here"
  exit 77
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/real" "$t/moved" "$t/junk/lib64"
ln -s "$t/real" "$t/moved/lib64"
ln -s "$cuda/include" "$t/moved/include"
ln -s "$cuda/include" "$t/junk/include"
echo "not a library" > "$t/junk/lib64/libnvrtc.so.13"
printf 'mode=decode,head_dim=64,page_size=16,gqa=2\n' > "$t/specs.txt"
# The toolkit's library folder, where the loader looks, emptied; its files only under
# $CUDA_HOME/lib64.
hide="mount --bind '$lib' '$t/real' && mount -t tmpfs none '$lib'"
moved=$(unshare -rm sh -c "$hide && CUDA_HOME='$t/moved' '$attnc' aot --specs '$t/specs.txt' --arch sm_80 -o '$t/ok'" 2>&1)
junk=$(unshare -rm sh -c "mount -t tmpfs none '$lib' && CUDA_HOME='$t/junk' '$attnc' aot --specs '$t/specs.txt' --arch sm_80 -o '$t/bad'" 2>&1)
status=0
if grep -q "1 kernel compiled" <<<"$moved" && [ -f "$t/ok/manifest.txt" ]; then
  echo "moved toolkit: compiled"
else
  echo "moved toolkit: FAILED"; echo "$moved"; status=1
fi
if grep -q "no NVRTC ($t/junk/lib64/libnvrtc.so.13: " <<<"$junk" && [ ! -e "$t/bad" ]; then
  echo "unloadable libnvrtc: named"
else
  echo "unloadable libnvrtc: FAILED"; echo "$junk"; status=1
fi
exit $status
