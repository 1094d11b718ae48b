"""compression=tfcomp.Auto(): measures, plans and keeps a per-tensor plan while training
(core: decisions and their record; trials: interleaved timing; callback: the Keras side)."""
from tfcomp.auto.core import Auto

__all__ = ["Auto"]
