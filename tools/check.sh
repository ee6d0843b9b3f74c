#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole test
# suite (POCL and, when installed, Oclgrind and Mesa's rusticl) with ctest;
# always with the tests configured ON, and a run of no test fails.
#   ./tools/check.sh              build in build/ and run every test; with CI=true
#                                 (as .ci/run does) then also --sanitize and --fuzz
#   ./tools/check.sh --quick      the edit-test loop: build in build/ and run the tests on
#                                 the default device (POCL where there is no GPU) alone:
#                                 no Oclgrind, rusticl, install, set-up script or large
#                                 tests, and the device tests at the reduced sizes of their
#                                 Oclgrind runs (CLEMBED_TEST_SMALL=1)
#   ./tools/check.sh --sanitize   build in build-sanitize/ with -fsanitize=address,undefined
#                                 and run the host, CLI, leak and hostile-input tests
#                                 (labels host, cli, leaks, robust; LeakSanitizer on)
#   ./tools/check.sh --fuzz       build the libFuzzer targets with clang in build-fuzz/ and
#                                 run them for CLEMBED_FUZZ_SECONDS in all (default 60),
#                                 seeded with tests/npy_corpus (installs clang and its
#                                 libFuzzer runtime when missing)
# Every ctest run prints, every CLEMBED_PROGRESS_SECONDS (default 60), how many
# tests are done and which are still running (a long test prints nothing until
# it ends), and ends with a summary: how many tests ran, passed and failed, and
# what did not run and why (a suite CMake did not configure, and the reason it
# gave; optional packages that could not be installed; tests skipped at run time,
# pytest's own skips included; the labels --quick leaves out; the sanitizer and
# fuzz runs a plain run leaves to CI=true). A run that executes no test fails.
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

# The labels --quick leaves out (a later label with "slow" in its name too).
CLEMBED_QUICK_EXCLUDE="oclgrind|rusticl|large|install|scripts|mpi|exhaustive|slow"

# What the tests need beyond the build, in every mode (--quick runs the Python
# suite too): the Python package's tests (label python) need NumPy and pytest;
# pyopencl and matplotlib its interop and plot tests; tools/python_setup.sh's
# recipe, tested offline (python_setup), a venv that builds a wheel; PyTorch the
# clembed.torch modules' tests (Debian's 1.13). (Open MPI, for the label mpi, is in
# setup.sh's list.)
CLEMBED_OPTIONAL_PACKAGES+=(python3-numpy python3-pytest python3-pyopencl python3-matplotlib python3-torch)
CLEMBED_OPTIONAL_PACKAGES+=(python3-venv python3-pip python3-wheel python3-setuptools)

# The last ctest run's output (clembed_ctest keeps it here for the summary).
CLEMBED_CTEST_LOG="$(mktemp)"
trap 'rm -f "$CLEMBED_CTEST_LOG"' EXIT

# ctest "$@" in the current directory, with a progress line on stderr every
# CLEMBED_PROGRESS_SECONDS while it runs: the time so far, the tests done of
# all, and the tests started and not yet done. Returns ctest's status.
clembed_ctest() {
  local log hb status
  log="$(mktemp)"
  (
    period="${CLEMBED_PROGRESS_SECONDS:-60}"
    start=$SECONDS
    while sleep "$period"; do
      awk -v t=$((SECONDS - start)) '
        /^ *Start +[0-9]+: / { started[$NF] = 1; order[++n] = $NF }
        / Test +#[0-9]+: / { for (i = 1; i < NF; i++) if ($i ~ /^#[0-9]+:$/) done[$(i + 1)] = 1
                             split($1, f, "/"); total = f[2]; ndone++ }
        END { running = ""
              for (k = 1; k <= n; k++) if (!(order[k] in done)) running = running " " order[k]
              printf "check: %d min %02d s: %d of %s tests done; running:%s\n", t / 60, t % 60, ndone,
                     total ? total : "?", running ? running : " -" }' "$log" >&2
    done
  ) &
  hb=$!
  set +e
  ctest "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  kill "$hb" 2>/dev/null
  wait "$hb" 2>/dev/null
  cp "$log" "$CLEMBED_CTEST_LOG"
  rm -f "$log"
  return "$status"
}

# Why a Python has no `python` tests: the modules it lacks, for each interpreter
# CMake tries (tests/CMakeLists.txt: CLEMBED_PYTHON, python3 on PATH, /usr/bin/python3).
python_reasons() {
  local py m missing seen=""
  for py in ${CLEMBED_PYTHON:-} "$(command -v python3 2>/dev/null || true)" /usr/bin/python3; do
    [ -n "$py" ] && [ -x "$py" ] || continue
    case " $seen " in *" $py "*) continue ;; esac
    seen="$seen $py"
    missing=""
    for m in numpy pytest; do "$py" -c "import $m" >/dev/null 2>&1 || missing="$missing $m"; done
    echo "check:     $py lacks:${missing:- nothing (it is found now: the cache may predate it)}"
  done
  echo "check:     (Debian: apt-get install python3-numpy python3-pytest, which check.sh does as root)"
}

# The summary at the end of a run. The numbers are ctest's own (its "N% tests
# passed, F tests failed out of T" and its lists of tests that failed or did not
# run); what was not configured is CMake's configure output (every "-- ...: no
# ..." line) and the labels with no test. Returns 1 when tests were counted and
# none ran (all skipped).
#   clembed_summary BUILD_DIR MODE [LINE...]   (MODE: full, quick, sanitize; a LINE is printed
#   after the counts, or, when it starts with "not run: ", among what did not run)
clembed_summary() {
  local build="$1" mode="$2" line total="" failed="" skipped=0 ran="" label n status=0
  shift 2
  echo "check: ---------------------------------------------------------------- summary"
  line="$(grep -Eo "[0-9]+ tests? failed out of [0-9]+" "$CLEMBED_CTEST_LOG" | tail -n 1 || true)"
  if [ -n "$line" ]; then
    failed="${line%% *}"
    total="${line##* }"
    skipped="$(awk '/^The following tests did not run:/ { on = 1; next } on && /^[ \t]+[0-9]+ - / { n++; next } { on = 0 }
                    END { print n + 0 }' "$CLEMBED_CTEST_LOG")"
    ran=$((total - skipped))
    echo "check: ctest ($mode run, $build): $total tests: $((ran - failed)) passed, $failed failed, $skipped skipped"
    awk '/^The following tests (FAILED|did not run):/ { on = 1; print "check:   " $0; next }
         on && /^[ \t]+[0-9]+ - / { sub(/^[ \t]+/, ""); print "check:     " $0; next } { on = 0 }' "$CLEMBED_CTEST_LOG"
    if [ "$ran" -le 0 ]; then
      echo "check: no test ran (every test was skipped): this run checked nothing" >&2
      status=1
    fi
  else
    echo "check: ctest ($mode run, $build) printed no count of its tests"
  fi
  for line in "$@"; do
    case "$line" in "not run: "*) ;; *) echo "check: $line" ;; esac
  done
  # pytest's own skips inside the `python` test (-rs), from ctest's full log
  if [ -f "$build/Testing/Temporary/LastTest.log" ] && grep -q "^SKIPPED \[" "$build/Testing/Temporary/LastTest.log"; then
    echo "check:   skipped inside the python test (pytest):"
    grep "^SKIPPED \[" "$build/Testing/Temporary/LastTest.log" | sed 's/^/check:     /'
  fi
  echo "check: not run, and why:"
  local none=1
  if [ -f "$build/clembed-configure.log" ]; then
    while IFS= read -r line; do
      echo "check:   not configured: ${line#-- }"
      none=0
      case "$line" in *'`python`'*) python_reasons ;; esac
    done < <(grep -E '^-- .*: no ' "$build/clembed-configure.log" || true)
  fi
  for label in python oclgrind rusticl mpi install; do
    n="$(cd "$build" && ctest -N -L "^$label\$" 2>/dev/null | sed -n 's/^Total Tests: //p' || true)"
    if [ "${n:-}" = 0 ]; then
      echo "check:   no test labelled $label is configured"
      none=0
    fi
  done
  if [ "${#CLEMBED_NOT_INSTALLED[@]}" -gt 0 ]; then
    echo "check:   optional packages not installed: $(printf '%s\n' "${CLEMBED_NOT_INSTALLED[@]}" | sort -u | paste -sd' ')"
    none=0
  fi
  if [ "$mode" = quick ]; then
    n="$(cd "$build" && ctest -N -L "$CLEMBED_QUICK_EXCLUDE" 2>/dev/null | sed -n 's/^Total Tests: //p' || true)"
    echo "check:   left out by --quick: ${n:-the} tests labelled $CLEMBED_QUICK_EXCLUDE, and the device tests at" \
      "full size (./tools/check.sh runs them)"
    none=0
  fi
  for line in "$@"; do
    case "$line" in "not run: "*) echo "check:   ${line#not run: }"; none=0 ;; esac
  done
  [ "$none" = 0 ] || echo "check:   nothing: every suite was configured and run"
  return "$status"
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
    status=0
    clembed_ctest --no-tests=error --output-on-failure -j "$jobs" -L "host|cli|leaks|robust" || status=1
    cd "$CLEMBED_ROOT"
    clembed_summary build-sanitize sanitize \
      "not run: this build runs the labels host, cli, leaks and robust only (the others run in ./tools/check.sh)" ||
      status=1
    exit "$status"
    ;;
  --quick)
    clembed_setup build -DCLEMBED_BUILD_TESTS=ON -DCLEMBED_BUILD_TOOLS=ON
    cd build
    status=0
    CLEMBED_TEST_SMALL=1 clembed_ctest --no-tests=error --output-on-failure -j "$jobs" \
      -LE "$CLEMBED_QUICK_EXCLUDE" || status=1
    cd "$CLEMBED_ROOT"
    clembed_summary build quick || status=1
    exit "$status"
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
    echo "usage: $0 [--quick | --sanitize | --fuzz]" >&2
    exit 2
    ;;
esac

# Tests ON whatever the cache holds (quickstart.sh configures build/ with them
# OFF); a run that executes no test is a failure.
clembed_setup build -DCLEMBED_BUILD_TESTS=ON -DCLEMBED_BUILD_TOOLS=ON
status=0
(cd build && clembed_ctest --no-tests=error --output-on-failure -j "$jobs") || status=1
extra=()
if [ "${CI:-}" = true ]; then
  # Each in its own process, so that a failure in one still lets the other run.
  main_log="$(mktemp)"
  cp "$CLEMBED_CTEST_LOG" "$main_log"
  echo "check: CI: the sanitizer build's host, CLI, leak and hostile-input tests"
  if bash "$here/check.sh" --sanitize; then extra+=("CI: the sanitizer run (--sanitize) passed; its summary is above")
  else extra+=("CI: the sanitizer run (--sanitize) FAILED; its summary is above"); status=1; fi
  echo "check: CI: a short fuzz run"
  if bash "$here/check.sh" --fuzz; then extra+=("CI: the fuzz run (--fuzz) passed")
  else extra+=("CI: the fuzz run (--fuzz) FAILED, or could not run (its messages are above)"); status=1; fi
  cp "$main_log" "$CLEMBED_CTEST_LOG"
  rm -f "$main_log"
else
  extra+=("not run: the sanitizer build (./tools/check.sh --sanitize) and the fuzz run (--fuzz): CI=true ./tools/check.sh adds both")
fi
clembed_summary build full "${extra[@]}" || status=1
exit "$status"
