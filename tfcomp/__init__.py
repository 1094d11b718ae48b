"""tfcomp: gradient compression for TensorFlow/Keras data-parallel training.

The names below load on first use (PEP 562), so `import tfcomp.analysis`
predicts from a saved profile without importing TensorFlow.
"""
import importlib
import importlib.util

__version__ = "0.1.0"

_COMPRESSORS = ("NoCompression", "FP16", "SignSGD", "EFSignSGD", "TopK", "RandomK", "DGC", "DRAGONN", "PowerSGD",
                "ACPSGD")
_SUBMODULES = ("callbacks", "distribute")

# Other names and the module that holds them.
_CLASSES = {"Plan": "tfcomp.plan.plan", "Auto": "tfcomp.auto.core", "Network": "tfcomp.costs.network",
            "FrozenVarianceAdam": "tfcomp.keras.frozen_adam"}

__all__ = list(_SUBMODULES + _COMPRESSORS) + list(_CLASSES)


def __getattr__(name):
    if name in _COMPRESSORS:
        return getattr(importlib.import_module("tfcomp.compressors"), name)
    if name in _CLASSES:
        return getattr(importlib.import_module(_CLASSES[name]), name)
    # Any submodule (tfcomp.exchange.step, tfcomp.compressors, ...), as the eager imports once made them.
    if not name.startswith("_") and importlib.util.find_spec(f"tfcomp.{name}") is not None:
        return importlib.import_module(f"tfcomp.{name}")
    raise AttributeError(f"module 'tfcomp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
