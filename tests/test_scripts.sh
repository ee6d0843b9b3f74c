#!/usr/bin/env bash
# The set-up scripts (tools/setup.sh, quickstart.sh, check.sh), with stand-ins
# for the commands that change the machine:
# 1. a user who is not root, whose sudo asks for a password, and who lacks only
#    the optional packages (clinfo, oclgrind, mesa-opencl-icd): set-up goes on
#    without them, calling neither apt-get nor a sudo that would prompt; a
#    missing required package still stops it;
# 2. quickstart.sh then check.sh in one copy of the sources: check.sh configures
#    the tests ON although quickstart's cache has them OFF, and runs ctest with
#    --no-tests=error; and ctest --no-tests=error really fails where no test is
#    configured;
#    root whose apt-get cannot find one optional package: the others are still
#    installed (each on its own), the one is named;
# 3. check.sh --quick runs ctest without the Oclgrind, rusticl, install,
#    set-up-script and large labels and with CLEMBED_TEST_SMALL=1, and prints a
#    progress line naming the test still running while one runs;
# 4. check.sh ends with a summary: ctest's counts, the tests skipped, every
#    suite CMake did not configure with its reason, what --quick leaves out; a
#    run whose every test was skipped fails.
#   test_scripts.sh SOURCE_DIR
set -u
src=$(cd "${1:?usage: test_scripts.sh SOURCE_DIR}" && pwd)
cmake_real=${CMAKE_COMMAND:-$(command -v cmake)}
ctest_real=$(dirname "$cmake_real")/ctest
[ -x "$ctest_real" ] || ctest_real=$(command -v ctest)
work=$(mktemp -d "${TMPDIR:-/tmp}/clembed-scripts.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
failures=0
fail() {
  failures=$((failures + 1))
  echo "FAILED: $*" >&2
}

# ------------------------------------------------ 1. optional packages
shims=$work/shims
mkdir -p "$shims"
cat >"$shims/id" <<'SH'
#!/bin/sh
if [ "${1:-}" = -u ]; then echo 1000; else exec /usr/bin/id "$@"; fi
SH
cat >"$shims/dpkg-query" <<'SH'
#!/bin/sh
# the last argument is the package; those in $FAKE_MISSING are not installed
for p; do :; done
for m in $FAKE_MISSING; do [ "$m" = "$p" ] && exit 1; done
printf 'install ok installed'
SH
cat >"$shims/sudo" <<'SH'
#!/bin/sh
echo "sudo $*" >>"$SHIM_LOG"
echo "sudo: a password is required" >&2
exit 1
SH
cat >"$shims/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$SHIM_LOG"
exit 1
SH
chmod +x "$shims"/*
export SHIM_LOG=$work/shim.log

setup_run() { # FAKE_MISSING value; prints stderr to $work/setup.err; returns the status
  : >"$SHIM_LOG"
  FAKE_MISSING="$1" PATH="$shims:$PATH" bash -c 'source "$1/tools/setup.sh"; clembed_install_packages' _ "$src" \
    >"$work/setup.out" 2>"$work/setup.err"
}

setup_run "clinfo oclgrind mesa-opencl-icd"
rc=$?
[ "$rc" -eq 0 ] || fail "non-root without clinfo/oclgrind: set-up refused (status $rc): $(cat "$work/setup.err")"
grep -q "clinfo" "$work/setup.err" || fail "the missing optional packages are not named: $(cat "$work/setup.err")"
if grep -q "apt-get" "$SHIM_LOG"; then fail "apt-get was run for optional packages: $(cat "$SHIM_LOG")"; fi
if grep -v "^sudo -n true" "$SHIM_LOG" | grep -q sudo; then
  fail "sudo was asked (a password prompt) for optional packages: $(cat "$SHIM_LOG")"
fi

setup_run "pocl-opencl-icd clinfo"
rc=$?
[ "$rc" -ne 0 ] || fail "a missing required package (pocl-opencl-icd) did not stop the set-up"
grep -q "pocl-opencl-icd" "$work/setup.err" || fail "the missing required package is not named: $(cat "$work/setup.err")"

setup_run ""
rc=$?
[ "$rc" -eq 0 ] || fail "nothing missing: set-up failed (status $rc): $(cat "$work/setup.err")"
[ ! -s "$SHIM_LOG" ] || fail "nothing missing, yet: $(cat "$SHIM_LOG")"

# root, and an apt-get that cannot find oclgrind: the rest is installed each on its own
root_shims=$work/root_shims
mkdir -p "$root_shims"
cat >"$root_shims/id" <<'SH'
#!/bin/sh
if [ "${1:-}" = -u ]; then echo 0; else exec /usr/bin/id "$@"; fi
SH
cat >"$root_shims/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$SHIM_LOG"
for a; do [ "$a" = oclgrind ] && { echo "E: Unable to locate package oclgrind" >&2; exit 100; }; done
exit 0
SH
chmod +x "$root_shims"/*
: >"$SHIM_LOG"
FAKE_MISSING="clinfo oclgrind python3-pytest" PATH="$root_shims:$shims:$PATH" bash -c \
  'source "$1/tools/setup.sh"; CLEMBED_OPTIONAL_PACKAGES+=(python3-pytest); clembed_install_packages;
   echo "left out: ${CLEMBED_NOT_INSTALLED[*]}"' _ "$src" >"$work/setup.out" 2>"$work/setup.err"
rc=$?
[ "$rc" -eq 0 ] || fail "root with one optional package unavailable: set-up failed ($rc): $(cat "$work/setup.err")"
grep -q "install .*python3-pytest" "$SHIM_LOG" || fail "python3-pytest was not installed on its own: $(cat "$SHIM_LOG")"
grep -q "^left out: oclgrind$" "$work/setup.out" ||
  fail "the package apt-get lacks is not the one left out: $(cat "$work/setup.out" "$work/setup.err")"
grep -q "oclgrind not installed" "$work/setup.err" || fail "the left-out package is not named: $(cat "$work/setup.err")"
[ "$(grep -c "apt-get update" "$SHIM_LOG")" -eq 1 ] || fail "apt-get update ran more than once: $(cat "$SHIM_LOG")"

# ------------------------------------------- 2. quickstart then check
copy=$work/src
mkdir -p "$copy"
for f in CMakeLists.txt cmake cl include src tools tests examples python; do cp -R "$src/$f" "$copy/"; done
rm -rf "$copy/build" "$copy/build-"*
bin=$work/bin
mkdir -p "$bin"
# cmake configures for real, skips builds; ctest records its arguments
cat >"$bin/cmake" <<SH
#!/bin/sh
for a; do [ "\$a" = --build ] && { echo "cmake \$*" >>"$work/cmake.log"; exit 0; }; done
exec "$cmake_real" "\$@"
SH
cat >"$bin/ctest" <<SH
#!/bin/sh
echo "ctest \$*" >>"$work/ctest.log"
exit 0
SH
chmod +x "$bin"/*
# quickstart stops at running the tool, which is not built here
(cd "$copy" && PATH="$bin:$PATH" bash tools/quickstart.sh >"$work/quickstart.log" 2>&1)
cache=$copy/build/CMakeCache.txt
grep -q '^CLEMBED_BUILD_TESTS:BOOL=OFF' "$cache" 2>/dev/null ||
  fail "quickstart.sh did not configure build/ with the tests OFF: $(tail -5 "$work/quickstart.log")"
(cd "$copy/build" && "$ctest_real" --no-tests=error >"$work/ctest_none.log" 2>&1)
rc=$?
[ "$rc" -ne 0 ] || fail "ctest --no-tests=error ran no test and exited 0: $(cat "$work/ctest_none.log")"

# a suite left out for the summary to name: MPI, as if CMake found none (the cache keeps it)
"$cmake_real" -S "$copy" -B "$copy/build" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=TRUE >/dev/null 2>&1 ||
  fail "configuring build/ without MPI failed"
(cd "$copy" && env -u CI PATH="$bin:$PATH" bash tools/check.sh >"$work/check.log" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "check.sh (with builds skipped) exited $rc: $(tail -20 "$work/check.log")"
grep -q '^CLEMBED_BUILD_TESTS:BOOL=ON' "$cache" ||
  fail "check.sh left CLEMBED_BUILD_TESTS OFF in the cache quickstart.sh made"
grep -q -- '--no-tests=error' "$work/ctest.log" 2>/dev/null ||
  fail "check.sh ran ctest without --no-tests=error: $(cat "$work/ctest.log" 2>/dev/null)"
n=$(cd "$copy/build" && "$ctest_real" -N 2>/dev/null | sed -n 's/^Total Tests: //p')
[ "${n:-0}" -gt 0 ] || fail "after check.sh, build/ has no test configured"

# ------------------------------------------- 3. check.sh --quick, and its progress lines
# a ctest that takes a few seconds over a test, as a long one does
cat >"$bin/ctest" <<SH
#!/bin/sh
echo "ctest \$* small=\${CLEMBED_TEST_SMALL:-}" >>"$work/ctest.log"
echo "      Start  1: test_slow"
sleep 3
echo " 1/1 Test  #1: test_slow ........   Passed    3.00 sec"
exit 0
SH
chmod +x "$bin/ctest"
: >"$work/ctest.log"
(cd "$copy" && env -u CI PATH="$bin:$PATH" CLEMBED_PROGRESS_SECONDS=1 bash tools/check.sh --quick \
  >"$work/quick.log" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "check.sh --quick (with builds skipped) exited $rc: $(tail -20 "$work/quick.log")"
for want in "--no-tests=error" "-LE oclgrind|rusticl|large|install|scripts|mpi|exhaustive|slow" "small=1"; do
  grep -qF -- "$want" "$work/ctest.log" ||
    fail "check.sh --quick ran ctest without '$want': $(cat "$work/ctest.log")"
done
grep -q "^check: 0 min 0[1-3] s: 0 of ? tests done; running: test_slow" "$work/quick.log" ||
  fail "check.sh printed no progress line while a test ran: $(cat "$work/quick.log")"

# ------------------------------------------- 4. the summary
# every "-- ...: no ..." line of the configure (a suite left out, and why) is in the summary
grep -q "^check: -* summary" "$work/check.log" || fail "check.sh printed no summary: $(tail -20 "$work/check.log")"
while IFS= read -r line; do
  grep -qF "check:   not configured: ${line#-- }" "$work/check.log" ||
    fail "the summary does not say '${line#-- }': $(sed -n '/summary/,$p' "$work/check.log")"
done < <(grep -E '^-- .*: no ' "$copy/build/clembed-configure.log")
grep -q "^check:   not configured: MPI not found: no libclembed_mpi" "$work/check.log" ||
  fail "the summary does not say that MPI was not found: $(sed -n '/summary/,$p' "$work/check.log")"
grep -q "^check:   left out by --quick: .*oclgrind" "$work/quick.log" ||
  fail "--quick's summary does not name what it leaves out: $(sed -n '/summary/,$p' "$work/quick.log")"
grep -q "^check:   the sanitizer build .* and the fuzz run" "$work/check.log" ||
  fail "a plain run's summary does not say the sanitizer and fuzz runs are left to CI: $(sed -n '/summary/,$p' "$work/check.log")"
# ctest's counts and its skipped tests; a run whose every test is skipped fails
cat >"$bin/ctest" <<SH
#!/bin/sh
case " \$* " in *" -N "*) echo "Total Tests: 2"; exit 0 ;; esac
echo "100% tests passed, 0 tests failed out of 2"
echo
echo "The following tests did not run:"
printf '\t  1 - test_a (Skipped)\n'
[ -n "\${ALL_SKIPPED:-}" ] && printf '\t  2 - test_b (Skipped)\n'
exit 0
SH
chmod +x "$bin/ctest"
(cd "$copy" && env -u CI PATH="$bin:$PATH" bash tools/check.sh --quick >"$work/skip.log" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "check.sh --quick with one test of two skipped exited $rc: $(tail -20 "$work/skip.log")"
grep -q "^check: ctest (quick run, build): 2 tests: 1 passed, 0 failed, 1 skipped" "$work/skip.log" &&
  grep -q "^check:     1 - test_a (Skipped)" "$work/skip.log" ||
  fail "the summary does not count and name the skipped test: $(sed -n '/summary/,$p' "$work/skip.log")"
(cd "$copy" && env -u CI PATH="$bin:$PATH" ALL_SKIPPED=1 bash tools/check.sh --quick >"$work/skip.log" 2>&1)
rc=$?
[ "$rc" -ne 0 ] || fail "check.sh --quick passed a run whose every test was skipped: $(tail -20 "$work/skip.log")"
grep -q "no test ran" "$work/skip.log" || fail "an all-skipped run does not say so: $(tail -20 "$work/skip.log")"

if [ "$failures" -ne 0 ]; then
  echo "test_scripts: $failures failed"
  exit 1
fi
echo "test_scripts: all passed (build/ holds ${n} tests after quickstart.sh then check.sh)"
