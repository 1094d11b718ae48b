"""Builds tfcomp and its op library.

Every C++ kernel under custom_ops/ (the *.cc files outside tests/, not the
CUDA *.cu.cc ones) is compiled with g++ and TensorFlow's own tf.sysconfig flags
into one shared library, tfcomp/_tfcomp_ops.so. TensorFlow must already be
installed, so install with `pip install --no-build-isolation .` (or `-e .`).
With TFCOMP_OPS_VERSIONED_NAME=1 the library is tfcomp/_tfcomp_ops.tf<version>.so
instead, so that one checkout holds a library for each stack it is installed
in (`make build STACK=current`; tfcomp/ops.py prefers the one for its TensorFlow).
The CUDA build of the same library is `make build-gpu` (see README).
"""
import concurrent.futures
import functools
import os
import pathlib
import shlex
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def library_name(tensorflow_version):
    if os.environ.get("TFCOMP_OPS_VERSIONED_NAME") == "1":
        return f"_tfcomp_ops.tf{tensorflow_version}.so"
    return "_tfcomp_ops.so"


def op_sources():
    """The CPU sources of every op family, in a stable order."""
    found = []
    for path in sorted((ROOT / "custom_ops").rglob("*.cc")):
        rel = path.relative_to(ROOT)
        if path.name.endswith(".cu.cc") or "tests" in rel.parts:
            continue
        found.append(str(rel))
    return found


@functools.lru_cache(maxsize=None)
def tensorflow_flags():
    """(version, compile flags, link flags) of the installed TensorFlow."""
    try:
        import tensorflow as tf
    except ImportError as err:
        sys.exit("tfcomp's op library is compiled against the installed TensorFlow, which "
                 f"could not be imported ({err}). Install TensorFlow first (requirements/base.txt "
                 "or requirements/current/base.txt), then `pip install --no-build-isolation .`, "
                 "or run `make build`.")
    # The build marker (custom_ops/build_info.cc) names the TensorFlow compiled against.
    version = f'-DTFCOMP_TENSORFLOW_VERSION="{tf.__version__}"'
    return tf.__version__, [*tf.sysconfig.get_compile_flags(), version], tf.sysconfig.get_link_flags()


class BuildOpLibrary(build_ext):
    """Compiles the op library with g++ (objects in parallel, then one link)."""

    def get_ext_filename(self, ext_name):
        tensorflow_version, _, _ = tensorflow_flags()
        return os.path.join(*ext_name.split(".")[:-1], library_name(tensorflow_version))

    def build_extension(self, ext):
        output = pathlib.Path(self.get_ext_fullpath(ext.name))
        _, compile_flags, link_flags = tensorflow_flags()
        cxx = os.environ.get("CXX", "g++")
        cflags = ["-O3", "-fPIC", "-Wall", "-Wno-sign-compare", f"-I{ROOT}", *compile_flags]
        objects_dir = pathlib.Path(self.build_temp) / "ops"
        objects_dir.mkdir(parents=True, exist_ok=True)

        def compile_one(source):
            obj = objects_dir / (source.replace("/", "_") + ".o")
            self.run_command_line([cxx, *cflags, "-c", str(ROOT / source), "-o", str(obj)])
            return str(obj)

        jobs = int(os.environ.get("TFCOMP_BUILD_JOBS", os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            objects = list(pool.map(compile_one, ext.sources))
        output.parent.mkdir(parents=True, exist_ok=True)
        self.run_command_line([cxx, "-shared", *objects, "-o", str(output),
                               "-Wl,--no-undefined", *link_flags])

    @staticmethod
    def run_command_line(command):
        print(shlex.join(command), flush=True)
        subprocess.run(command, check=True)


setup(
    name="tfcomp",
    version="0.1.0",
    description="Gradient compression for TensorFlow/Keras data-parallel training",
    packages=find_packages(include=["tfcomp", "tfcomp.*"]),
    ext_modules=[Extension("tfcomp._tfcomp_ops", sources=op_sources())],
    cmdclass={"build_ext": BuildOpLibrary},
    python_requires="==3.11.*",
    # The two stacks tfcomp is tested on: requirements/base.txt and requirements/current/base.txt.
    # absl-py: logging and the analysis command line; matplotlib: the Timeline's and the
    # what-if sweep's plots (both import it where they plot, at the end of training).
    install_requires=["tensorflow>=2.15.1,<2.22", "absl-py>=1.0", "numpy", "matplotlib>=3.5"],
    zip_safe=False,
)
