#!/usr/bin/env bash
# Builds attnc and runs every test: lit + FileCheck on the IR and the CLI,
# Catch2 unit tests, and a short fuzz run of the spec parser.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
cd "${ATTNC_BUILD_DIR:-$root/build}"
ctest --output-on-failure "$@"
