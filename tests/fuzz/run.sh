#!/usr/bin/env bash
#===- run.sh - Build and run the spec parser fuzzer ------------------------===#
#
# Usage: tests/fuzz/run.sh [SECONDS]   (default 20)
#
# Builds spec_fuzzer with clang++-14 and libFuzzer + ASan + UBSan, straight
# from the spec sources (no CMake, no MLIR), into $ATTNC_FUZZ_BUILD (default
# <repo>/build/fuzz), then fuzzes for SECONDS starting from a copy of the seed
# corpus in a temporary directory. Exits non-zero if the fuzzer finds a crash.
#
#===------------------------------------------------------------------------===#

set -euo pipefail

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '4,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
secs="${1:-20}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [[ "$secs" -lt 1 ]]; then
  echo "usage: $0 [SECONDS]  (SECONDS a positive integer, default 20)" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${ATTNC_FUZZ_BUILD:-$repo/build/fuzz}"

cxx="${ATTNC_FUZZ_CXX:-clang++-14}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "error: $cxx not found; the spec fuzzer needs clang 14 with libFuzzer" \
       "(Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi

mkdir -p "$build"
fuzzer="$build/spec_fuzzer"
echo "building $fuzzer"
"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined \
  -I"$repo/dialect/include" -I"$repo/templates" \
  "$repo/dialect/lib/Spec.cpp" "$repo/dialect/lib/Printable.cpp" "$here/spec_fuzzer.cpp" \
  -o "$fuzzer"

# Work on a copy of the seeds so new inputs never land in the repository;
# crash reproducers go to the build directory.
work="$(mktemp -d "${TMPDIR:-/tmp}/spec-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build/artifacts"
cp "$here"/corpus/* "$work/corpus/"
log="$work/fuzz.log"

echo "fuzzing for ${secs}s from $(ls "$work/corpus" | wc -l) seeds"
status=0
"$fuzzer" "$work/corpus" -max_total_time="$secs" -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/" >"$log" 2>&1 || status=$?

# Show the crash report in full, or just the last status line and the stats.
if [[ "$status" -ne 0 ]]; then
  tail -n 80 "$log"
else
  grep -E '^#[0-9]+[[:space:]]+DONE|^Done |^stat::' "$log" || tail -n 20 "$log"
fi

runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
corpus="$(ls "$work/corpus" | wc -l)"
if [[ "$status" -ne 0 ]]; then
  echo "spec-fuzz: FAILED after ${runs:-?} executions: the fuzzer exited with" \
       "$status; reproducers are in $build/artifacts/" >&2
  exit "$status"
fi
echo "spec-fuzz: ${runs:-?} executions in ${secs}s, corpus of $corpus inputs, 0 crashes"
