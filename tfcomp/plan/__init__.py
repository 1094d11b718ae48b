"""tfcomp.Plan (a compressor per tensor), its text table and its file format.

Plan loads on first use (PEP 562), so that tfcomp.plan.file, which the
TensorFlow-free analysis tools write plans with, imports without TensorFlow."""
import importlib

__all__ = ["Plan"]


def __getattr__(name):
    if name == "Plan":
        return importlib.import_module("tfcomp.plan.plan").Plan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
