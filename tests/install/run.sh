#!/usr/bin/env bash
# Installs clembed (library, header, CMake package, clembed.pc, the clembed
# tool and its benchmark clembed-bench) into a temporary prefix, then, with the
# build tree gone, as a user would:
# runs the installed tool (it finds its library through its relative RPATH,
# with no LD_LIBRARY_PATH), and builds and runs a consumer with
# find_package(clembed) and another with `pkg-config --cflags --libs clembed`.
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
  -DCLEMBED_BUILD_TESTS=OFF -DCLEMBED_BUILD_TOOLS=ON \
  -DCMAKE_INSTALL_PREFIX="$work/prefix" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/build" -j "$jobs" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$cmake" --install "$work/build" >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }

# the installed files a consumer needs, and the licence
for f in include/clembed.h bin/clembed bin/clembed-bench share/doc/clembed/LICENSE; do
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
[ "$rc" -eq 0 ] || exit $rc

echo "== run the installed clembed (no LD_LIBRARY_PATH)"
unset LD_LIBRARY_PATH
"$work/prefix/bin/clembed" --version || { echo "the installed clembed does not start"; exit 1; }
"$work/prefix/bin/clembed" positional --length 3 --dim 4 -o "$work/pe.npy" ||
  { echo "the installed clembed positional failed"; exit 1; }
[ -s "$work/pe.npy" ] || { echo "the installed clembed wrote no output"; exit 1; }
# `clembed bench` runs the installed clembed-bench beside it (the tool itself links no bench code)
"$work/prefix/bin/clembed" bench --list >"$work/bench.txt" || { echo "the installed clembed bench --list failed"; exit 1; }
grep -q "one-token" "$work/bench.txt" || { echo "clembed bench --list printed no row"; cat "$work/bench.txt"; exit 1; }
if command -v nm >/dev/null 2>&1 && nm "$work/prefix/bin/clembed" 2>/dev/null | grep -qw ceiling_isa; then
  echo "the installed clembed links the bench's ceilings"; exit 1
fi

echo "== build and run a consumer with pkg-config"
pc=$(find "$work/prefix" -name clembed.pc | head -n 1)
[ -n "$pc" ] || { echo "no clembed.pc in the prefix"; find "$work/prefix"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
flags=$(pkg-config --cflags --libs clembed) || { echo "pkg-config --cflags --libs clembed failed"; exit 1; }
echo "pkg-config --cflags --libs clembed: $flags"
version=$(sed -n 's/^#define CLEMBED_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' "$src/include/clembed.h" | paste -sd.)
[ "$(pkg-config --modversion clembed)" = "$version" ] ||
  { echo "clembed.pc has the wrong version: $(pkg-config --modversion clembed)"; exit 1; }
grep -q "SPDX: MIT" "$pc" || { echo "clembed.pc does not name the licence"; exit 1; }
cmp -s "$src/LICENSE" "$work/prefix/share/doc/clembed/LICENSE" || { echo "the installed LICENSE differs"; exit 1; }
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -o "$work/pc_consumer" "$here/main.c" $flags ||
  { echo "compiling against pkg-config's flags failed"; exit 1; }
libdir=$(pkg-config --variable=libdir clembed)
set +e
LD_LIBRARY_PATH="$libdir" "$work/pc_consumer"
rc=$?
set -e
echo "pkg-config consumer exit status $rc"
exit $rc
