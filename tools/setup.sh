#!/usr/bin/env bash
# Shared by tools/check.sh and tools/quickstart.sh: installs what is missing
# (Debian/Ubuntu packages through apt-get), then configures and builds clembed.
#   clembed_setup BUILD_DIR [extra cmake arguments...]
set -euo pipefail

CLEMBED_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# What building and running clembed needs (quickstart's main job: the demo on POCL).
CLEMBED_PACKAGES=(gcc make cmake pkg-config ocl-icd-opencl-dev opencl-headers ocl-icd-libopencl1
                  pocl-opencl-icd)
# Optional: clinfo, the other OpenCL implementations the tests also run on
# (Oclgrind, Mesa's rusticl), and Open MPI (libclembed_mpi, its example
# build/examples/example_train_mpi and its tests). Installed when that needs no
# password (root, or sudo without one), each on its own where the whole list
# cannot be (a package this release lacks); otherwise named, and the run goes on
# without them. CLEMBED_NOT_INSTALLED lists those left out.
CLEMBED_OPTIONAL_PACKAGES=(clinfo oclgrind mesa-opencl-icd libopenmpi-dev openmpi-bin)
CLEMBED_NOT_INSTALLED=()

# The packages of the list named $1 that are not installed, one a line.
clembed_missing_packages() {
  local -n list="$1"
  command -v dpkg-query >/dev/null 2>&1 || return 0
  local p
  for p in "${list[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# apt-get install "$@" as root, through sudo, or not at all. Returns 0 when
# installed, 1 when apt-get failed (a package it cannot find), 2 when it could
# not be run (no apt-get, no rights). With CLEMBED_NO_PROMPT=1, sudo is used
# only when it asks for no password. apt-get update runs once per shell.
clembed_apt_install() {
  local sudo=""
  if ! command -v apt-get >/dev/null 2>&1; then return 2; fi
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || return 2
    if [ "${CLEMBED_NO_PROMPT:-0}" = 1 ]; then sudo -n true 2>/dev/null || return 2; fi
    sudo="sudo"
  fi
  echo "setup: installing $*"
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "${CLEMBED_APT_UPDATED:-}" ]; then
    $sudo apt-get update -qq || return 1
    CLEMBED_APT_UPDATED=1
  fi
  $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null || return 1
}

# The optional packages "$@": all at once, else each on its own (apt-get
# refuses a whole list for one package it cannot find); those left out are
# added to CLEMBED_NOT_INSTALLED and named on stderr.
clembed_install_optional() {
  [ "$#" -gt 0 ] || return 0
  local p rc=0 left=()
  CLEMBED_NO_PROMPT=1 clembed_apt_install "$@" || rc=$?
  if [ "$rc" -eq 1 ] && [ "$#" -gt 1 ]; then
    for p in "$@"; do CLEMBED_NO_PROMPT=1 clembed_apt_install "$p" || left+=("$p"); done
  elif [ "$rc" -ne 0 ]; then
    left=("$@")
  fi
  if [ "${#left[@]}" -gt 0 ]; then
    CLEMBED_NOT_INSTALLED+=("${left[@]}")
    echo "setup: optional ${left[*]} not installed ($([ "$rc" -eq 2 ] && echo "no apt-get, or not root and no sudo without a password" || echo "apt-get could not install them")): the tests that need them are left out; install them as root to add them" >&2
  fi
  return 0
}

clembed_install_packages() {
  local missing=() optional=()
  mapfile -t missing < <(clembed_missing_packages CLEMBED_PACKAGES)
  mapfile -t optional < <(clembed_missing_packages CLEMBED_OPTIONAL_PACKAGES)
  if [ "${#missing[@]}" -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
      echo "setup: missing ${missing[*]} and no apt-get: install them by hand" >&2
      return 1
    fi
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
      echo "setup: missing ${missing[*]}; run as root or install them by hand" >&2
      return 1
    fi
    # the optional ones along with them, since this asks for rights anyway; where
    # the whole list fails, the required ones alone, then each optional one
    if clembed_apt_install "${missing[@]}" "${optional[@]}"; then return 0; fi
    if ! clembed_apt_install "${missing[@]}"; then
      echo "setup: installing ${missing[*]} failed; install them by hand" >&2
      return 1
    fi
  fi
  clembed_install_optional "${optional[@]}"
  return 0
}

clembed_setup() {
  local build="$1"
  shift
  clembed_install_packages
  local jobs
  jobs="$(nproc 2>/dev/null || echo 2)"
  # the configure output is kept in BUILD_DIR/clembed-configure.log (check.sh's summary
  # names what it left out: "-- ...: no `python` tests")
  mkdir -p "$build"
  cmake -S "$CLEMBED_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" | tee "$build/clembed-configure.log"
  cmake --build "$build" -j "$jobs"
}
