"""Loads tfcomp's one op library and checks the arguments the op wrappers pass it
(see tfcomp.ops)."""
import functools
import operator
import os
import pathlib
import re

import tensorflow as tf

LIBRARY_PATH = pathlib.Path(__file__).resolve().parent.parent / "_tfcomp_ops.so"
REBUILD_HINT = ("Rebuild it from the tfcomp checkout with `make build` (`make build STACK=current` "
                "on the current-TensorFlow stack), or `pip install --no-build-isolation -e .`.")
FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)  # every op takes these

_BUILD_INFO = re.compile(rb"tfcomp-build-info: tensorflow=([^ ;]+) cuda=([01]);")


class OpLibraryError(RuntimeError):
    """tfcomp's op library is missing, stale or cannot be loaded."""


def library_path():
    if "TFCOMP_OPS_LIBRARY" in os.environ:
        return pathlib.Path(os.environ["TFCOMP_OPS_LIBRARY"])
    for_this_tensorflow = LIBRARY_PATH.with_name(f"_tfcomp_ops.tf{tf.__version__}.so")
    return for_this_tensorflow if for_this_tensorflow.is_file() else LIBRARY_PATH


def build_info(path):
    """(tensorflow version, built with CUDA) read from the library file."""
    match = _BUILD_INFO.search(pathlib.Path(path).read_bytes())
    if match is None:
        raise OpLibraryError(f"{path} is not a tfcomp op library (no build marker). {REBUILD_HINT}")
    return match.group(1).decode(), match.group(2) == b"1"


@functools.lru_cache(maxsize=None)
def library():
    """The loaded op library module (loaded once per process)."""
    path = library_path()
    if not path.is_file():
        raise OpLibraryError(f"tfcomp's op library is missing: {path} does not exist. {REBUILD_HINT}")
    built_against, _ = build_info(path)
    if built_against != tf.__version__:
        raise OpLibraryError(
            f"{path} was built against TensorFlow {built_against}, but TensorFlow "
            f"{tf.__version__} is installed. {REBUILD_HINT}")
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, OSError) as err:
        raise OpLibraryError(f"could not load {path}: {err}. {REBUILD_HINT}") from err


def check_dtype(dtype, what):
    if dtype not in FLOAT_DTYPES:
        names = ", ".join(d.name for d in FLOAT_DTYPES)
        raise TypeError(f"{what} must be one of {names}, got {dtype.name}")


# Integer inputs are converted without a target dtype and then checked: TensorFlow's
# own conversion to an op's input dtype casts a NumPy array silently (int64 indices
# wrap to int32, float words truncate), which would turn a wrong input into a wrong
# answer instead of an error.
def integer_tensor(x, what, dtypes=None):
    x = tf.convert_to_tensor(x)
    if dtypes is None:
        if not x.dtype.is_integer:
            raise TypeError(f"{what} must be an integer tensor, got {x.dtype.name}")
    elif x.dtype not in dtypes:
        names = " or ".join(d.name for d in dtypes)
        raise TypeError(f"{what} must be {names}, got {x.dtype.name}")
    return x


def count_tensor(n, what="n"):
    return tf.cast(integer_tensor(n, what), tf.int64)


def seed_tensor(seed, what):
    return tf.cast(integer_tensor(seed, what), tf.int64)


def int_attr(value, what):
    """A Python int from an int-like value (not a float, which would be truncated)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {value!r}") from None
