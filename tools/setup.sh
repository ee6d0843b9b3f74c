#!/usr/bin/env bash
# Shared by tools/check.sh and tools/quickstart.sh: installs what is missing
# (Debian/Ubuntu packages through apt-get), then configures and builds clembed.
#   clembed_setup BUILD_DIR [extra cmake arguments...]
set -euo pipefail

CLEMBED_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# What building and running clembed needs (quickstart's main job: the demo on POCL).
CLEMBED_PACKAGES=(gcc make cmake pkg-config ocl-icd-opencl-dev opencl-headers ocl-icd-libopencl1
                  pocl-opencl-icd)
# Optional: clinfo, and the other OpenCL implementations the tests also run on
# (Oclgrind, Mesa's rusticl). Installed when that needs no password (root, or
# sudo without one); otherwise named, and the run goes on without them.
CLEMBED_OPTIONAL_PACKAGES=(clinfo oclgrind mesa-opencl-icd)

# The packages of the list named $1 that are not installed, one a line.
clembed_missing_packages() {
  local -n list="$1"
  command -v dpkg-query >/dev/null 2>&1 || return 0
  local p
  for p in "${list[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# apt-get install "$@" as root, through sudo, or not at all (returns 1).
# With CLEMBED_NO_PROMPT=1, sudo is used only when it asks for no password.
clembed_apt_install() {
  local sudo=""
  if ! command -v apt-get >/dev/null 2>&1; then return 1; fi
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || return 1
    if [ "${CLEMBED_NO_PROMPT:-0}" = 1 ]; then sudo -n true 2>/dev/null || return 1; fi
    sudo="sudo"
  fi
  echo "setup: installing $*"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq || return 1
  $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null || return 1
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
    # the optional ones along with them, since this asks for rights anyway
    if ! clembed_apt_install "${missing[@]}" "${optional[@]}"; then
      echo "setup: installing ${missing[*]} failed; install them by hand" >&2
      return 1
    fi
    return 0
  fi
  if [ "${#optional[@]}" -gt 0 ]; then
    if ! CLEMBED_NO_PROMPT=1 clembed_apt_install "${optional[@]}"; then
      echo "setup: optional ${optional[*]} not installed (the tests on Oclgrind and rusticl are left out;" \
        "install them as root to add them)" >&2
    fi
  fi
  return 0
}

clembed_setup() {
  local build="$1"
  shift
  clembed_install_packages
  local jobs
  jobs="$(nproc 2>/dev/null || echo 2)"
  cmake -S "$CLEMBED_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
  cmake --build "$build" -j "$jobs"
}
