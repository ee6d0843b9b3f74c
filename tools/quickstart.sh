#!/usr/bin/env bash
# Sets up (installs what is missing, builds the library, the clembed tool and the
# examples in build/) and runs the main job: the tutorial demo on the default OpenCL
# device; then names the examples it built and the commands that run them
# (build/examples/example_train_adam, example_train_bags, and, where Open MPI is
# installed, example_train_mpi through tools/mpirun.sh). With --python first, also
# sets up the Python package in .venv (tools/python_setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/setup.sh
source "$here/setup.sh"
cd "$CLEMBED_ROOT"
clembed_setup build -DCLEMBED_BUILD_TESTS=OFF -DCLEMBED_BUILD_EXAMPLES=ON
if [ "${1:-}" = "--python" ]; then
  shift
  "$here/python_setup.sh" --build build
fi
./build/clembed devices
status=0
./build/clembed demo "$@" || status=$?
echo
echo "quickstart: the examples, built in build/examples/:"
for e in example_train_adam example_train_bags; do
  if [ -x "build/examples/$e" ]; then echo "  ./build/examples/$e"; fi
done
if [ -x build/examples/example_train_mpi ]; then
  echo "  ./tools/mpirun.sh -n 4 build/examples/example_train_mpi   (mpirun set up for this machine, root too)"
else
  echo "  (no example_train_mpi: CMake found no MPI; install Open MPI, Debian: openmpi-bin libopenmpi-dev," \
    "and run this again)"
fi
exit "$status"
