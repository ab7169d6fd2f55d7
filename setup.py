"""Builds the extension module ferry._ferry with CMake (pyproject.toml holds the metadata).

The CMake build is the repository's own, at the flags `make build` uses (Release, -Werror), in
build-python/ next to build/, with ccache when it is installed and CCACHE_BASEDIR at the source
root: the library's objects are then cache hits of a `make build` of the same sources, wherever
the tree is. FERRY_JOBS sets the build's parallelism (default: the machine's cores);
FERRY_CMAKE_ARGS adds CMake arguments (e.g. -DFERRY_CUDA=OFF).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
(ROOT / "build-python").mkdir(exist_ok=True)  # egg_base below


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(os.environ.get("FERRY_PIP_BUILD_DIR", ROOT / "build-python"))
        env = dict(os.environ)
        args = ["-DCMAKE_BUILD_TYPE=Release", "-DFERRY_WERROR=ON", "-DFERRY_BUILD_TESTS=OFF",
                f"-DPython_EXECUTABLE={sys.executable}", f"-DFERRY_PYTHON={sys.executable}"]
        if shutil.which("ccache"):
            args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
            env["CCACHE_BASEDIR"] = str(ROOT)  # the clone's root, not an inherited one it may lie outside
        args += shlex.split(os.environ.get("FERRY_CMAKE_ARGS", ""))
        jobs = os.environ.get("FERRY_JOBS") or str(os.cpu_count() or 2)
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build)] + args, check=True, env=env,
                       stdout=subprocess.DEVNULL if not self.verbose else None)
        subprocess.run(["cmake", "--build", str(build), "--target", "ferry_python", "-j", jobs], check=True, env=env)
        built = sorted((build / "python" / "ferry").glob("_ferry*.so"))
        if not built:
            raise RuntimeError(f"the CMake build left no _ferry*.so in {build / 'python' / 'ferry'}")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], dest)
        # Backend modules (libferry_backend_cuda.so, ...) go beside the extension: ferry opens them
        # from there when their device is asked for (docs/cuda.md).
        for module in sorted((build / "python" / "ferry").glob("libferry_backend_*.so")):
            shutil.copyfile(module, dest.parent / module.name)


setup(ext_modules=[Extension("ferry._ferry", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": str(Path("build-python") / "setuptools")},
               "egg_info": {"egg_base": "build-python"}})
