"""The package's build: pyproject.toml holds the metadata; this builds libclembed from the
repository's C sources (the directory above this one) with CMake and puts it inside the
package, so that `pip install ./python` gives a package that finds its library next to
itself (no CLEMBED_LIBRARY), kernels included (they are embedded in the library).

- A libclembed already in clembed/ (tools/python_setup.sh copies one there) is used as it is.
- Else CMake (cmake on PATH) configures and builds the target `clembed` in a folder
  beside build/lib: a C compiler, the OpenCL headers and the ICD loader's development
  files are needed (Debian: gcc ocl-icd-opencl-dev opencl-headers). CLEMBED_CMAKE_ARGS
  adds arguments to the configure step; CLEMBED_BUILD_JOBS sets the build's jobs.
- The wheel is platform-specific (it carries a shared library).
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _cmake() -> str:
    found = shutil.which("cmake")
    if not found:
        sys.exit("clembed: building the library needs CMake on PATH: apt-get install cmake (or pip install cmake)")
    return found


class BuildWithLibrary(build_py):
    """build_py, then libclembed into the built package."""

    def run(self) -> None:
        super().run()
        dest = os.path.join(self.build_lib, "clembed")
        if glob.glob(os.path.join(HERE, "clembed", "libclembed.so*")):
            return  # a library placed in the source (tools/python_setup.sh): build_py copied it
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            sys.exit("clembed: no library in clembed/ and no C sources at %s to build one from" % ROOT)
        tmp = os.path.join(os.path.abspath(self.build_lib), "..", "clembed-cmake")
        cmake = _cmake()
        args = [cmake, "-S", ROOT, "-B", tmp, "-DCMAKE_BUILD_TYPE=Release", "-DCLEMBED_BUILD_TESTS=OFF",
                "-DCLEMBED_BUILD_TOOLS=OFF"] + shlex.split(os.environ.get("CLEMBED_CMAKE_ARGS", ""))
        subprocess.check_call(args)
        jobs = os.environ.get("CLEMBED_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call([cmake, "--build", tmp, "--target", "clembed", "-j", jobs])
        libs = [p for p in glob.glob(os.path.join(tmp, "libclembed.so*")) if not os.path.islink(p)]
        if not libs:
            sys.exit("clembed: the CMake build made no libclembed.so in %s" % tmp)
        os.makedirs(dest, exist_ok=True)
        # the one file, under the name the package looks for first (its soname)
        from importlib.util import module_from_spec, spec_from_file_location
        spec = spec_from_file_location("_clembed_version", os.path.join(HERE, "clembed", "_version.py"))
        version = module_from_spec(spec)
        spec.loader.exec_module(version)  # type: ignore[union-attr]
        major, minor = version.__version__.split(".")[:2]
        soname = "libclembed.so.%s" % (major if major != "0" else "0.%s" % minor)
        shutil.copy2(libs[0], os.path.join(dest, soname))


class BinaryDistribution(Distribution):
    """A distribution with a shared library inside: a platform wheel."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
