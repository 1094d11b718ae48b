"""Keras callbacks: tfcomp.callbacks.Timeline records each step's phases
(compute, compress, communicate, decompress, apply) on each worker."""
from tfcomp.callbacks.segments import PHASES
from tfcomp.callbacks.timeline import Timeline

__all__ = ["Timeline", "PHASES"]
