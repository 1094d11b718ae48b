"""Which Keras `tf.keras` is in this process, and the internal modules of it
that tfcomp's engines read.

On TensorFlow 2.15 tf.keras is Keras 2.15 (the `keras` package). From 2.16 on
it is Keras 3 (also `keras`), or Keras 2 as the `tf_keras` package where
TF_USE_LEGACY_KERAS=1 was set before TensorFlow was imported. The
tf.distribute engine, the Timeline and tfcomp.Auto work with all three. The
Horovod engine (which wraps Keras 2's optimizers) needs Keras 2: it refuses
Keras 3 when it is constructed (UnsupportedKeras), never at import.
"""
import dataclasses
import functools
import importlib

LEGACY_KERAS_HINT = ("on TensorFlow 2.16 and later, install tf-keras (the same version as TensorFlow) and "
                     "set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, or use the pinned "
                     "tensorflow==2.15.1 stack.")


class UnsupportedKeras(RuntimeError):
    """The Keras in use is one an engine of tfcomp cannot hook."""


@dataclasses.dataclass(frozen=True)
class Keras:
    package: str  # "keras" or "tf_keras": the package tf.keras resolves to
    version: str

    @property
    def major(self):
        return int(self.version.split(".")[0])

    @property
    def name(self):
        return f"{'tf-keras' if self.package == 'tf_keras' else 'Keras'} {self.version}"

    def internal(self, module):
        """One of Keras 2's internal modules, e.g. internal("optimizers.utils")."""
        return importlib.import_module(f"{self.package}.src.{module}")

    def owns(self, obj):
        """Whether obj's class is, or derives from, one of this Keras' (not another Keras' in the process)."""
        return any(cls.__module__.split(".")[0] == self.package for cls in type(obj).__mro__)


def tensor_name(variable):
    """The name tfcomp keys a variable's gradient (and its compressor state and plan entry) by:
    the tf.Variable's name. A Keras 3 variable wraps one, named by the variable's path
    ("sequential/dense/kernel:0"), while its own name is the last part alone ("kernel")."""
    wrapped = getattr(variable, "value", None)
    if wrapped is not None and not callable(wrapped) and hasattr(wrapped, "name"):
        return wrapped.name
    return variable.name


@functools.lru_cache(maxsize=None)
def in_use():
    """The Keras that tf.keras is in this process."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    package = tf.keras.optimizers.SGD.__module__.split(".")[0]
    return Keras(package, importlib.import_module(package).__version__)


def require_keras2(what, needs, optimizer=None):
    """Raises UnsupportedKeras, in one sentence with what to do, unless tf.keras is Keras 2 (and the
    optimizer, if given, is one of its optimizers); needs says what of Keras 2 `what` uses."""
    keras = in_use()
    if keras.major >= 3:
        raise UnsupportedKeras(f"{what} {needs}, and tf.keras here is {keras.name}: {LEGACY_KERAS_HINT}")
    if optimizer is not None and not keras.owns(optimizer):
        raise UnsupportedKeras(
            f"{what} was given a {type(optimizer).__module__}.{type(optimizer).__name__}, which is not "
            f"from tf.keras ({keras.name}): build the model and optimizer with tf.keras.")
    return keras
