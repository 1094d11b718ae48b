"""Seconds as a function of bytes, from a few measurements: Zhang et al.'s AddEst
(vector-add time, linearly interpolated) and the per-size encode and decode times
of a compressor. Plain Python: `python -m tfcomp.analysis
predict` imports no numpy, so that it answers as a fresh process in under 100 ms.

Measured times are noisy where they are small: a vector add of 1 KB measured slower
than one of 2.6 KB. Where physics says the cost cannot fall as the size grows (a
vector add, an encode, a decode, a scan), the model answers from monotone(), the
isotonic fit of the measured points, so that sending fewer bytes never predicts a
slower step."""
import bisect

from tfcomp.costs.checks import is_number


class SizeTable:
    """Piecewise-linear seconds(bytes) through measured (bytes, seconds) points.

    Below the smallest size it answers the smallest measurement (a kernel's
    fixed cost does not shrink); above the largest it extends the last segment,
    or scales a lone measurement (the cost of touching every byte grows linearly).
    """

    def __init__(self, points, what="size table"):
        self.what = what
        points = [tuple(p) if isinstance(p, (list, tuple)) else p for p in points]
        if not points:
            raise ValueError(f"{what}: needs at least one (bytes, seconds) measurement")
        for p in points:
            if not isinstance(p, tuple) or len(p) != 2 or not all(is_number(x) for x in p):
                raise ValueError(f"{what}: each measurement must be a pair of finite numbers "
                                 f"(bytes, seconds), got {p!r}")
        sizes = [float(p[0]) for p in points]
        seconds = [float(p[1]) for p in points]
        if sizes[0] <= 0 or any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError(f"{what}: sizes must be positive and strictly increasing, got {sizes}")
        if any(t < 0 for t in seconds):
            raise ValueError(f"{what}: times must be >= 0, got {seconds}")
        self.sizes, self.seconds = sizes, seconds
        self._monotone = None

    @classmethod
    def zero(cls, what="size table"):
        """A table that answers 0 s for every size (a cost left out of the model)."""
        return cls([(1, 0.0)], what)

    def monotone(self):
        """This table where its measurements never fall as the size grows, else its isotonic
        fit: the non-decreasing seconds nearest the measured ones in least squares (pool
        adjacent violators, every measurement weighted alike), at the same sizes. Piecewise
        linear between non-decreasing points and extended as any table is, it answers a
        non-decreasing seconds(bytes) everywhere. Computed once per table."""
        if self._monotone is None:
            seconds = self.seconds
            if all(b >= a for a, b in zip(seconds, seconds[1:])):
                self._monotone = self
            else:
                fitted = SizeTable(list(zip(self.sizes, isotonic(seconds))), f"{self.what} (isotonic fit)")
                fitted._monotone = fitted
                self._monotone = fitted
        return self._monotone

    def points(self):
        return [[b, s] for b, s in zip(self.sizes, self.seconds)]

    def __call__(self, nbytes):
        if not is_number(nbytes) or nbytes < 0:
            raise ValueError(f"{self.what}: size must be a finite number of bytes >= 0, got {nbytes!r}")
        return self.seconds_at(nbytes)

    def seconds_at(self, nbytes):
        """__call__ without the argument check (the simulator's inner loop)."""
        sizes, seconds = self.sizes, self.seconds
        if nbytes <= sizes[0]:
            return seconds[0]
        if nbytes <= sizes[-1]:
            k = bisect.bisect_left(sizes, nbytes)
            return seconds[k - 1] + (seconds[k] - seconds[k - 1]) * (nbytes - sizes[k - 1]) / (sizes[k] - sizes[k - 1])
        if len(sizes) == 1:  # no segment to extend: proportional to size
            return seconds[0] * nbytes / sizes[0]
        slope = (seconds[-1] - seconds[-2]) / (sizes[-1] - sizes[-2])
        return seconds[-1] + slope * (nbytes - sizes[-1])

    def __repr__(self):
        return f"SizeTable({self.points()!r}, what={self.what!r})"



def isotonic(values):
    """The non-decreasing sequence nearest values in least squares, each weighted alike
    (pool adjacent violators: a run that falls is replaced by its mean, until none does)."""
    blocks = []  # [sum, count] of pooled runs, their means non-decreasing
    for v in values:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] > blocks[-1][0] * blocks[-2][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out = []
    for total, count in blocks:
        mean = total / count
        out += [max(mean, out[-1]) if out else mean] * count  # no float rounding below the run before
    return out
