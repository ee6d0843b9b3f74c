#!/usr/bin/env bash
# clembed as a subproject: a parent project that adds it with add_subdirectory
# and sets no build type keeps an empty CMAKE_BUILD_TYPE (clembed sets its
# default only when it is the top-level project), gets neither clembed's tests
# nor its tool, and builds and runs a consumer linked to clembed::clembed.
#   run.sh SOURCE_DIR
# Exit status: 0 ok, 77 skipped (no device and CLEMBED_ALLOW_NO_DEVICE=1), else a failure.
set -eu
src=${1:?usage: run.sh SOURCE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
cmake=${CMAKE_COMMAND:-cmake}
work=$(mktemp -d "${TMPDIR:-/tmp}/clembed-subproject.XXXXXX")
trap 'rm -rf "$work"' EXIT
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)

echo "== configure the parent project (no CMAKE_BUILD_TYPE)"
"$cmake" -S "$here" -B "$work/build" -DCLEMBED_SOURCE_DIR="$src" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cache=$work/build/CMakeCache.txt
bt=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
if [ -n "$bt" ]; then
  echo "the parent's CMAKE_BUILD_TYPE is '$bt': clembed wrote its default into the parent's cache"
  exit 1
fi
for opt in CLEMBED_BUILD_TESTS CLEMBED_BUILD_TOOLS; do
  v=$(sed -n "s/^$opt:BOOL=//p" "$cache")
  if [ "$v" != OFF ]; then echo "$opt is '$v' in a subproject, expected OFF"; exit 1; fi
done
echo "CMAKE_BUILD_TYPE empty, CLEMBED_BUILD_TESTS and CLEMBED_BUILD_TOOLS OFF"

echo "== build and run the parent's consumer"
"$cmake" --build "$work/build" -j "$jobs" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
set +e
"$work/build/parent_consumer"
rc=$?
set -e
echo "consumer exit status $rc"
exit $rc
