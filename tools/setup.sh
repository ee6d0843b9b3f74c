#!/usr/bin/env bash
# Shared by tools/check.sh and tools/quickstart.sh: installs what is missing
# (Debian/Ubuntu packages through apt-get), then configures and builds clembed.
#   clembed_setup BUILD_DIR [extra cmake arguments...]
set -euo pipefail

CLEMBED_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLEMBED_PACKAGES=(gcc make cmake pkg-config ocl-icd-opencl-dev opencl-headers ocl-icd-libopencl1
                  pocl-opencl-icd clinfo oclgrind)

clembed_install_packages() {
  local missing=()
  if command -v dpkg-query >/dev/null 2>&1; then
    for p in "${CLEMBED_PACKAGES[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
  fi
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: missing ${missing[*]} and no apt-get: install them by hand" >&2
    return 1
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "setup: missing ${missing[*]}; run as root or install them by hand" >&2
      return 1
    fi
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
