#!/usr/bin/env bash
# Builds attnc and runs every test: lit + FileCheck on the IR and the CLI,
# Catch2 unit tests, and a short fuzz run of the spec parser.
#   scripts/test.sh [CTEST_ARGS...]   (e.g. -R cpu: the tests whose names match)
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
cd "${ATTNC_BUILD_DIR:-$root/build}"
ctest --output-on-failure "$@"
