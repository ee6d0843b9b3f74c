#!/usr/bin/env bash
# mpirun on this machine, set up as the tests run it (tests/mpi/CMakeLists.txt), so
# that an MPI program of clembed's runs as written, as root too:
#
#   ./tools/mpirun.sh -n 4 build/examples/example_train_mpi [steps] [device]
#   ./tools/mpirun.sh -n 2 build/bench_mpi --rows 1000000
#
# Every argument goes to mpirun unchanged. For Open MPI it sets, where the
# environment does not already set them (a value you export wins):
#   OMPI_MCA_btl=self,vader                     shared memory and loopback only (no
#   OMPI_MCA_btl_vader_single_copy_mechanism=none   network, no ptrace, which containers
#   OMPI_MCA_plm=isolated                           refuse), the local launcher (no ssh)
#   OMPI_MCA_rmaps_base_oversubscribe=1         more ranks than cores
#   OMPI_ALLOW_RUN_AS_ROOT=1, ..._CONFIRM=1     as root only (mpirun --allow-run-as-root)
#   HWLOC_COMPONENTS=-opencl                    hwloc does not open the OpenCL devices in
#                                               MPI_Init (slow on POCL, errors on Oclgrind)
# These keep every rank on this machine: on a cluster, run your own mpirun.
# Exit status: mpirun's; 127 when there is no mpirun (Debian: openmpi-bin libopenmpi-dev,
# then rebuild: CMake builds libclembed_mpi and the MPI example only where it finds MPI).
set -euo pipefail
if [ "$#" -eq 0 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [ "$#" -eq 0 ] && exit 1
  exit 0
fi
mpirun="$(command -v mpirun || command -v mpiexec || true)"
if [ -z "$mpirun" ]; then
  echo "mpirun.sh: no mpirun or mpiexec on PATH: install Open MPI (Debian: apt-get install openmpi-bin" \
    "libopenmpi-dev), then rebuild (./tools/quickstart.sh) so that CMake builds libclembed_mpi and its example" >&2
  exit 127
fi
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export OMPI_MCA_plm="${OMPI_MCA_plm:-isolated}"
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
export HWLOC_COMPONENTS="${HWLOC_COMPONENTS:--opencl}"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
fi
exec "$mpirun" "$@"
