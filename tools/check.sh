#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole test
# suite (POCL and, when installed, Oclgrind and Mesa's rusticl) with ctest;
# always with the tests configured ON, and a run of no test fails.
#   ./tools/check.sh              build in build/ and run every test; with CI=true
#                                 (as .ci/run does) then also --sanitize and --fuzz
#   ./tools/check.sh --sanitize   build in build-sanitize/ with -fsanitize=address,undefined
#                                 and run the host, CLI, leak and hostile-input tests
#                                 (labels host, cli, leaks, robust; LeakSanitizer on)
#   ./tools/check.sh --fuzz       build the libFuzzer targets with clang in build-fuzz/ and
#                                 run them for CLEMBED_FUZZ_SECONDS in all (default 60),
#                                 seeded with tests/npy_corpus (installs clang and its
#                                 libFuzzer runtime when missing)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/setup.sh
source "$here/setup.sh"
cd "$CLEMBED_ROOT"
jobs="$(nproc 2>/dev/null || echo 2)"

# clang can build and link a libFuzzer target
have_libfuzzer() {
  command -v clang >/dev/null 2>&1 || return 1
  local d ok=1
  d="$(mktemp -d)"
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$d/t.c"
  if clang -fsanitize=fuzzer,address,undefined "$d/t.c" -o "$d/t" >/dev/null 2>&1; then ok=0; fi
  rm -rf "$d"
  return "$ok"
}

# clang, then its libFuzzer runtime (Debian packages it apart: libclang-rt-N-dev)
fuzz_tools() {
  if have_libfuzzer; then return 0; fi
  CLEMBED_PACKAGES+=(clang)
  clembed_install_packages
  if have_libfuzzer; then return 0; fi
  local major
  major="$(clang -dumpversion | cut -d. -f1)"
  CLEMBED_PACKAGES+=("libclang-rt-${major}-dev")
  clembed_install_packages
  if ! have_libfuzzer; then
    echo "check: clang cannot link -fsanitize=fuzzer (libFuzzer runtime missing)" >&2
    return 1
  fi
}

case "${1:-}" in
  --sanitize)
    clembed_setup build-sanitize -DCLEMBED_SANITIZE=ON -DCLEMBED_BUILD_TESTS=ON -DCLEMBED_BUILD_TOOLS=ON
    cd build-sanitize
    # The OpenCL runtimes' own allocations are not clembed's: leak checking stays
    # on for clembed's code through the suppression file, which names only the
    # runtimes. Full unwinding, so that a leak inside a runtime built without
    # frame pointers (Mesa's rusticl, loaded by the ICD loader) shows its library.
    # intercept_tls_get_addr=0: the sanitizer runtimes of GCC up to 13 and LLVM up
    # to 16 take a dynamic TLS block that happens to start 16 bytes into a page
    # for an old glibc's header and read the words before it; with POCL's
    # in-process compiler such a block turns up (test_faults' forward build
    # failure, every run), and LeakSanitizer's tracer dies at exit with
    # "Tracer caught signal 11" before checking anything. Leaks are still found.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0:intercept_tls_get_addr=0"
    export LSAN_OPTIONS="suppressions=$CLEMBED_ROOT/tests/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    exec ctest --no-tests=error --output-on-failure -j "$jobs" -L "host|cli|leaks|robust"
    ;;
  --fuzz)
    clembed_install_packages
    fuzz_tools
    cmake -S "$CLEMBED_ROOT" -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
      -DCLEMBED_FUZZ=ON
    cmake --build build-fuzz -j "$jobs" --target clembed_fuzzers
    exec bash "$CLEMBED_ROOT/tests/run_fuzz.sh" build-fuzz "${CLEMBED_FUZZ_SECONDS:-60}"
    ;;
  "") ;;
  *)
    echo "usage: $0 [--sanitize | --fuzz]" >&2
    exit 2
    ;;
esac

# Tests ON whatever the cache holds (quickstart.sh configures build/ with them
# OFF); a run that executes no test is a failure.
# The Python package's tests (label python) need NumPy and pytest; pyopencl and
# matplotlib for its interop and plot tests.
CLEMBED_OPTIONAL_PACKAGES+=(python3-numpy python3-pytest python3-pyopencl python3-matplotlib)
# libclembed_mpi and its tests under mpirun (label mpi): Open MPI.
CLEMBED_OPTIONAL_PACKAGES+=(libopenmpi-dev openmpi-bin)
clembed_setup build -DCLEMBED_BUILD_TESTS=ON -DCLEMBED_BUILD_TOOLS=ON
status=0
(cd build && ctest --no-tests=error --output-on-failure -j "$jobs") || status=1
if [ "${CI:-}" = true ]; then
  # Each in its own process, so that a failure in one still lets the other run.
  echo "check: CI: the sanitizer build's host, CLI, leak and hostile-input tests"
  bash "$here/check.sh" --sanitize || status=1
  echo "check: CI: a short fuzz run"
  bash "$here/check.sh" --fuzz || status=1
fi
exit "$status"
