"""Builds torch_tpu with CMake (the project's only build system).

`pip install --no-build-isolation .` (or `-e .`) compiles, against the torch
already installed in this interpreter, the C runtime (libtpu_runtime.so), the
CPython module torch_tpu._C (C) and the PyTorch bridge torch_tpu._bridge (C++).
"""
import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def run(self):
        pkg_dir = os.path.join(ROOT, "torch_tpu") if self.inplace else os.path.join(
            os.path.abspath(self.build_lib), "torch_tpu")
        os.makedirs(pkg_dir, exist_ok=True)
        build_dir = os.path.join(ROOT, "build", "cmake-py")
        jobs = str(os.cpu_count() or 2)
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DTPU_PACKAGE_DIR={pkg_dir}",
            "-DTPU_BUILD_TESTS=OFF",
        ], env=env)
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs], env=env)

    def get_outputs(self):
        return []


setup(
    ext_modules=[Extension("torch_tpu._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
