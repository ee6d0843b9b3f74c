#!/usr/bin/env bash
# Installs clembed into a temporary prefix and builds and runs a consumer
# project against it with find_package(clembed), as a user would:
#   run.sh SOURCE_DIR
# Exit status: 0 ok, 77 skipped (the consumer found no device and
# CLEMBED_ALLOW_NO_DEVICE=1), anything else a failure.
set -eu
src=${1:?usage: run.sh SOURCE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
cmake=${CMAKE_COMMAND:-cmake}
work=$(mktemp -d "${TMPDIR:-/tmp}/clembed-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)

echo "== configure, build and install clembed into $work/prefix"
"$cmake" -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DCLEMBED_BUILD_TESTS=OFF -DCLEMBED_BUILD_TOOLS=OFF \
  -DCMAKE_INSTALL_PREFIX="$work/prefix" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/build" -j "$jobs" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$cmake" --install "$work/build" >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }

# the installed files a consumer needs
for f in include/clembed.h; do
  [ -f "$work/prefix/$f" ] || { echo "missing $f in the prefix"; exit 1; }
done
cfg=$(find "$work/prefix" -name clembedConfig.cmake | head -n 1)
[ -n "$cfg" ] || { echo "no clembedConfig.cmake in the prefix"; find "$work/prefix"; exit 1; }
ls "$(dirname "$cfg")"
lib=$(find "$work/prefix" -name 'libclembed*' | head -n 1)
[ -n "$lib" ] || { echo "no libclembed in the prefix"; find "$work/prefix"; exit 1; }
# the build tree is gone before the consumer is built: nothing may point into it
rm -rf "$work/build"

echo "== configure and build the consumer with CMAKE_PREFIX_PATH=$work/prefix"
"$cmake" -S "$here" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log"; exit 1; }
"$cmake" --build "$work/consumer" >>"$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; exit 1; }

echo "== run the consumer"
set +e
"$work/consumer/consumer"
rc=$?
set -e
echo "consumer exit status $rc"
exit $rc
