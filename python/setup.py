"""Builds itera's Python package: setuptools drives CMake (docs/python.md). Offline, from a checkout:

    pip install --no-build-isolation ./python

Where the compiled module itera._itera comes from, first match:

    ITERA_PREBUILT_DIR=DIR  a standalone build of python/ against itera libraries built elsewhere
                            (scripts/device_python.sh prepare): the GPU host's way
    ITERA_BUILD_DIR=DIR     an itera build folder configured with -DITERA_BUILD_PYTHON=ON: its target
                            itera_python is built there (nothing configured again)
    (neither)               the repository (this folder's parent) configured in build/ under this
                            folder, and the target itera_python built there

ITERA_CMAKE_ARGS adds configure arguments (e.g. "-DITERA_ENABLE_CUDA=OFF"); CMAKE_BUILD_PARALLEL_LEVEL
sets the build's jobs (default: every core). The module is built for the interpreter running pip.
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


def _fail(message):
    sys.stderr.write(f"itera: {message}\n")
    raise SystemExit(1)


def _pybind11_args():
    try:
        import pybind11
    except ImportError:
        return []  # Debian's pybind11-dev: CMake finds it where it looks by default
    return [f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"]


def _cmake_major():
    try:
        out = subprocess.run(["cmake", "--version"], capture_output=True, text=True).stdout
        return int(out.split()[2].split(".")[0])
    except (OSError, IndexError, ValueError):
        return 0


def _run(args):
    print("itera:", " ".join(shlex.quote(a) for a in args), flush=True)
    result = subprocess.run(args)
    if result.returncode != 0:
        _fail(f"{args[0]} {args[1]} failed (exit {result.returncode}); its output is above")


class CMakeBuild(build_ext):
    def _configure(self, source, build, extra):
        # Every time, also over an earlier build's folder: the arguments (the interpreter, the prebuilt
        # folder) may have changed; CMake keeps what it found and rebuilds only what changed.
        args = ["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if _cmake_major() >= 4:
            # CMake 4 refuses packages that still declare a minimum below 3.5 (older pybind11 releases).
            args += ["-DCMAKE_POLICY_VERSION_MINIMUM=3.5"]
        args += _pybind11_args() + extra + shlex.split(os.environ.get("ITERA_CMAKE_ARGS", ""))
        _run(args)

    def _build(self, build):
        args = ["cmake", "--build", build, "--target", "itera_python"]
        if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            args += ["--parallel", str(os.cpu_count() or 2)]
        _run(args)
        listing = os.path.join(build, "itera_module.txt")
        if not os.path.exists(listing):
            listing = os.path.join(build, "python", "itera_module.txt")
        if not os.path.exists(listing):
            _fail(f"{build} built no Python module: was it configured with -DITERA_BUILD_PYTHON=ON, with pybind11 "
                  f"found? (its configure output says why not)")
        with open(listing) as f:
            return f.read().strip()

    def _module(self):
        temp = os.path.abspath(self.build_temp)
        prebuilt = os.environ.get("ITERA_PREBUILT_DIR")
        existing = os.environ.get("ITERA_BUILD_DIR")
        if prebuilt:
            prebuilt = os.path.abspath(prebuilt)
            if not os.path.exists(os.path.join(prebuilt, "itera_prebuilt.cmake")):
                _fail(f"ITERA_PREBUILT_DIR={prebuilt} holds no itera_prebuilt.cmake: make it with "
                      f"`scripts/device_python.sh prepare`")
            build = os.path.join(temp, "itera-prebuilt")
            self._configure(HERE, build, [f"-DITERA_PREBUILT_DIR={prebuilt}"])
            return self._build(build)
        if existing:
            existing = os.path.abspath(existing)
            if not os.path.exists(os.path.join(existing, "CMakeCache.txt")):
                _fail(f"ITERA_BUILD_DIR={existing} is not a configured CMake build folder")
            return self._build(existing)
        if not os.path.exists(os.path.join(ROOT, "include", "itera", "user", "session.hpp")):
            _fail(f"{ROOT} is not an itera checkout: build the package from the repository (pip install ./python), "
                  f"or set ITERA_PREBUILT_DIR / ITERA_BUILD_DIR")
        build = os.path.join(temp, "itera")
        self._configure(ROOT, build, ["-DITERA_BUILD_PYTHON=ON", "-DITERA_BUILD_TESTS=OFF",
                                      "-DITERA_BUILD_BENCHMARKS=OFF"])
        return self._build(build)

    def build_extension(self, ext):
        module = self._module()
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        if not module.endswith(suffix):
            _fail(f"{module} was built for another Python than {sys.executable} (its suffix is not {suffix}): "
                  f"configure that build with -DPython3_EXECUTABLE={sys.executable}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(module, target)
        shutil.copymode(module, target)


setup(ext_modules=[CMakeExtension("itera._itera")], cmdclass={"build_ext": CMakeBuild})
