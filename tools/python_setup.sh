#!/usr/bin/env bash
# The Python package in one command, on Debian 12 (or Ubuntu), as root or as a user
# (with sudo for what apt must install):
#
#   tools/python_setup.sh [--venv DIR] [--build DIR | --library PATH] [--python PATH]
#                         [--fresh] [--no-apt] [--no-check]
#
# 1. installs what is missing through apt-get: python3-venv python3-pip python3-wheel
#    python3-setuptools python3-numpy (and, when it builds the library, what the C build
#    needs, as tools/setup.sh does);
# 2. takes the library: --library PATH, else BUILD_DIR/libclembed.so (default build/),
#    else builds it there (tools/setup.sh);
# 3. makes a virtual environment DIR (default .venv in the repository) with Debian's
#    interpreter, /usr/bin/python3 (not whatever `python3` is first on PATH, which may be
#    another Python without apt's NumPy), and --system-site-packages, so it sees apt's
#    NumPy (and python3-pyopencl, python3-matplotlib when installed);
# 4. installs the package from a copy of python/ with the library inside it, with
#    `pip install --no-build-isolation --no-index`: nothing comes from the network, and
#    `import clembed` finds its library next to itself (no CLEMBED_LIBRARY needed);
# 5. imports it and runs one embed on the default device (--no-check: not).
#
# --fresh removes DIR first; --no-apt installs nothing (a missing package is an error
# naming it); --python PATH uses another interpreter (it needs NumPy, venv and wheel).
# Exit status: 0 done, 1 failed (the message says why), 77 installed but no OpenCL
# device and CLEMBED_ALLOW_NO_DEVICE=1.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tools/setup.sh
source "$here/setup.sh"

venv="$CLEMBED_ROOT/.venv"
build="$CLEMBED_ROOT/build"
library=""
python=/usr/bin/python3
fresh=0
apt=1
check=1
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv="${2:?--venv needs a directory}"; shift 2 ;;
    --build) build="${2:?--build needs a directory}"; shift 2 ;;
    --library) library="${2:?--library needs a path}"; shift 2 ;;
    --python) python="${2:?--python needs a path}"; shift 2 ;;
    --fresh) fresh=1; shift ;;
    --no-apt) apt=0; shift ;;
    --no-check) check=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "python_setup: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
done
fail() { echo "python_setup: $*" >&2; exit 1; }

# 1. Debian's packages for a virtual environment that builds a wheel offline
CLEMBED_PYTHON_PACKAGES=(python3 python3-venv python3-pip python3-wheel python3-setuptools python3-numpy)
mapfile -t missing < <(clembed_missing_packages CLEMBED_PYTHON_PACKAGES)
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$apt" = 1 ] || fail "missing ${missing[*]} (--no-apt): apt-get install ${missing[*]}"
  clembed_apt_install "${missing[@]}" ||
    fail "cannot install ${missing[*]}: run as root, or as a user with sudo, or install them by hand"
fi
[ -x "$python" ] || fail "no interpreter $python (--python PATH names another)"
echo "python_setup: interpreter $python ($("$python" -c 'import sys; print("Python", sys.version.split()[0])'))"
"$python" -c "import numpy, venv, wheel" 2>/dev/null ||
  fail "$python lacks NumPy, venv or wheel: apt-get install python3-numpy python3-venv python3-wheel (Debian's /usr/bin/python3), or pass --python"

# 2. the library
if [ -z "$library" ]; then
  if [ ! -e "$build/libclembed.so" ]; then
    if [ "$apt" = 1 ]; then
      clembed_setup "$build" -DCLEMBED_BUILD_TESTS=OFF
    else
      cmake -S "$CLEMBED_ROOT" -B "$build" -DCLEMBED_BUILD_TESTS=OFF && cmake --build "$build" -j "$(nproc)"
    fi
  fi
  library="$build/libclembed.so"
fi
[ -e "$library" ] || fail "no library at $library"
library="$(readlink -f "$library")"
echo "python_setup: library $library"

# 3. the virtual environment, with apt's packages visible
if [ "$fresh" = 1 ]; then rm -rf "$venv"; fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv" || fail "$python -m venv failed (python3-venv installed?)"
fi
"$venv/bin/python" -c "import numpy" 2>/dev/null ||
  fail "$venv does not see NumPy: it was not made with --system-site-packages from $python (use --fresh)"

# 4. the package with its library, from a copy of python/ (the source tree stays clean)
work="$(mktemp -d "${TMPDIR:-/tmp}/clembed-python.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -r "$CLEMBED_ROOT/python" "$work/src"
rm -rf "$work/src/tests" "$work/src/build" "$work/src/clembed/__pycache__"
cp "$library" "$work/src/clembed/libclembed.so"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install -q --no-build-isolation --no-index \
  --no-deps --force-reinstall "$work/src" || fail "pip install of the package failed"

# 5. one embed, with the library the package carries
if [ "$check" = 1 ]; then
  set +e
  env -u CLEMBED_LIBRARY "$venv/bin/python" - <<'EOF'
import os, sys
import numpy as np
import clembed
print("python_setup: clembed %s, library %s" % (clembed.__version__, clembed.library_path))
try:
    ctx = clembed.default_context()
except clembed.NoDeviceError as e:
    print("python_setup: installed, but no OpenCL device: %s" % e, file=sys.stderr)
    sys.exit(77 if os.environ.get("CLEMBED_ALLOW_NO_DEVICE") == "1" else 1)
W = np.arange(12, dtype=np.float32).reshape(4, 3)
out = clembed.embed(W, np.array([[2, 0], [3, 3]]), scale=2.0)
assert out.shape == (2, 2, 3) and np.array_equal(out, 2 * W[[[2, 0], [3, 3]]]), out
print("python_setup: one embed on %s: ok" % ctx.device_name)
EOF
  rc=$?
  set -e
  [ "$rc" = 0 ] || exit "$rc"
fi
echo "python_setup: done. Run Python as $venv/bin/python (or: source $venv/bin/activate)"
