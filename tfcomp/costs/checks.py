"""Argument checks shared by the analysis modules: bad inputs fail with a message
that names the input, not deep inside a formula."""
import math


def is_number(x):
    """A finite int or float (bool excluded)."""
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x)


def check_number(value, what, *, positive=False):
    """value as a float, or ValueError: it must be finite and >= 0 (> 0 where positive)."""
    if not is_number(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    return float(value)


def check_workers(p):
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"the number of workers must be an integer >= 1, got {p!r}")
    return p
