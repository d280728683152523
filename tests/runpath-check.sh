#!/bin/sh
# Every binary named: readelf reads it, and each entry of its run path
# (RUNPATH or RPATH) is an absolute folder or starts with $ORIGIN. An empty
# entry, '.', or a relative one makes the loader search the working folder
# for libnvrtc.so.13 and libcuda.so.1, which attnc opens by name.
#   tests/runpath-check.sh BINARY...
[ $# -gt 0 ] || { echo "usage: tests/runpath-check.sh BINARY..." >&2; exit 2; }
for f in "$@"; do
  dynamic=$(readelf -d "$f" 2>&1) || { echo "$f: readelf failed: $dynamic"; exit 1; }
  line=$(printf '%s\n' "$dynamic" | grep -E '\((RUNPATH|RPATH)\)')
  [ -n "$line" ] || continue # no run path: only the system's folders
  path=$(printf '%s\n' "$line" | sed -n 's/.*\[\(.*\)\].*/\1/p' | head -n 1)
  # Each entry, the empty ones included (a leading, trailing or doubled ':').
  rest="$path:"
  while [ -n "$rest" ]; do
    entry=${rest%%:*}
    rest=${rest#*:}
    case "$entry" in
      /*|'$ORIGIN'|'$ORIGIN'/*) ;;
      *) echo "$f: run path '$path' has the entry '$entry', which is not an absolute folder (the loader would search relative to the working folder)"; exit 1 ;;
    esac
  done
done
echo "every run path entry is absolute"
