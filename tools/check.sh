#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole test
# suite (POCL and, when installed, Oclgrind) with ctest.
#   ./tools/check.sh              build in build/ and run every test
#   ./tools/check.sh --sanitize   build in build-sanitize/ with -fsanitize=address,undefined
#                                 and run the host and CLI tests
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/setup.sh
source "$here/setup.sh"
cd "$CLEMBED_ROOT"
jobs="$(nproc 2>/dev/null || echo 2)"

if [ "${1:-}" = "--sanitize" ]; then
  clembed_setup build-sanitize -DCLEMBED_SANITIZE=ON
  cd build-sanitize
  # POCL's own allocations are not clembed's: leak checking stays on for
  # clembed's code through the suppression file, which names only the runtime.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
  export LSAN_OPTIONS="suppressions=$CLEMBED_ROOT/tests/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  exec ctest --output-on-failure -j "$jobs" -L "host|cli"
fi

clembed_setup build
cd build
ctest --output-on-failure -j "$jobs"
