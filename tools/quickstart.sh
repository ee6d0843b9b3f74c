#!/usr/bin/env bash
# Sets up (installs what is missing, builds) and runs the main job: the
# tutorial demo on the default OpenCL device. With --python first, also sets up
# the Python package in .venv (tools/python_setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/setup.sh
source "$here/setup.sh"
cd "$CLEMBED_ROOT"
clembed_setup build -DCLEMBED_BUILD_TESTS=OFF
if [ "${1:-}" = "--python" ]; then
  shift
  "$here/python_setup.sh" --build build
fi
./build/clembed devices
exec ./build/clembed demo "$@"
