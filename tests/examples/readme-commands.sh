#!/usr/bin/env bash
# Runs the shell blocks of the examples' READMEs that need no GPU and no input
# files, with the build's attnc, so the docs keep matching the code.
#   tests/examples/readme-commands.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ran=0
for readme in examples/inspect-ir/README.md examples/cpu/README.md examples/gpu/README.md; do
  # Each ```sh block becomes a script of its own.
  awk -v dir="$tmp" -v name="$(echo "$readme" | tr / _)" \
    '/^```sh/{n++; f=1; next} /^```/{f=0} f {print > (dir "/" name "." n ".sh")}' "$root/$readme"
done
for block in "$tmp"/*.sh; do
  if grep -qE -- '--target gpu|\.npy' "$block"; then
    echo "skip (needs a GPU or input files): $(basename "$block")"
    continue
  fi
  sed -i -e "s|build/bin/|$build/bin/|g" -e 's/| less$/| cat/' "$block"
  if ! (cd "$tmp" && bash -e -o pipefail "$block" > "$block.out" 2>&1); then
    echo "FAILED: $(basename "$block")"; cat "$block"; tail -5 "$block.out"; exit 1
  fi
  [ -s "$block.out" ] || { echo "no output: $(basename "$block")"; exit 1; }
  echo "ok: $(basename "$block") ($(wc -l < "$block.out") lines)"
  ran=$((ran + 1))
done
[ "$ran" -gt 0 ] || { echo "no README block ran"; exit 1; }
echo "$ran README blocks ran"
