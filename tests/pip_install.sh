#!/usr/bin/env bash
# `pip install ./python` as a pip user installs the package: from a copy of the
# repository's sources with no library in python/clembed/, into a fresh virtual
# environment, the package's own build (python/setup.py) building libclembed with
# CMake and putting it inside the package. Offline here (--no-build-isolation
# --no-index, Debian's setuptools and wheel); with network, plain
# `pip install ./python` takes its build backend from PyPI the same way. Then,
# outside the source tree and with no CLEMBED_LIBRARY or PYTHONPATH, it imports
# the package, checks that the library it loaded lies inside the installed
# package, and runs one embed. Usage: pip_install.sh REPOSITORY_ROOT
# Exit 77 (skipped) when /usr/bin/python3 lacks venv, setuptools, wheel or NumPy.
set -euo pipefail
root="$(cd "${1:?usage: pip_install.sh REPOSITORY_ROOT}" && pwd)"
py=/usr/bin/python3
if ! "$py" -c "import venv, ensurepip, setuptools, wheel, numpy" 2>/dev/null; then
  echo "pip_install: $py lacks venv, ensurepip, setuptools, wheel or numpy: skipped"
  exit 77
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/clembed_pip.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# the sources as a clone has them: no build folders, no library placed in the package
(cd "$root" && tar --exclude='./build*' --exclude='./.venv' --exclude='./.git' --exclude='*/__pycache__' \
  --exclude='./python/clembed/libclembed*' --exclude='./python/build' --exclude='./python/*.egg-info' -cf - .) |
  (mkdir -p "$work/src" && cd "$work/src" && tar xf -)
"$py" -m venv --system-site-packages "$work/venv"
CLEMBED_BUILD_JOBS="${CLEMBED_BUILD_JOBS:-2}" PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$work/venv/bin/pip" install -q --no-build-isolation --no-index "$work/src/python"
cd "$work"
env -u CLEMBED_LIBRARY -u PYTHONPATH "$work/venv/bin/python" - "$work/venv" <<'PY'
import os, sys
import numpy as np
import clembed

path = os.path.realpath(clembed.library_path)
venv = os.path.realpath(sys.argv[1])
pkg = os.path.dirname(os.path.realpath(clembed.__file__))
assert pkg.startswith(venv), "the package was imported from %s, not the venv" % pkg
assert os.path.dirname(path) == pkg, "the library %s is not inside the installed package %s" % (path, pkg)
try:
    ctx = clembed.Context()
except clembed.Error as e:
    print("pip_install: installed, but no OpenCL device: %s" % e)
    sys.exit(77 if os.environ.get("CLEMBED_ALLOW_NO_DEVICE") == "1" else 1)
W = np.arange(12, dtype=np.float32).reshape(4, 3)
out = ctx.embed(ctx.matrix(W), np.array([3, 0])).numpy()
assert np.array_equal(out, W[[3, 0]]), out
print("pip_install: clembed %s with its library %s" % (clembed.__version__, path))
PY
