"""A link's latency and bandwidth from timed collectives: least squares of the
cost model's own form (costs.ring_allreduce, costs.allgather) over message
sizes, so that the fitted Link predicts those collectives back."""
import numpy as np

from tfcomp.costs.checks import check_workers
from tfcomp.costs.network import ALLGATHER, ALLREDUCE, Link


def _coefficients(collective, p):
    """(latency multiplier, seconds-per-byte multiplier of 1/BW): t = a*alpha + b*n/BW."""
    if collective == ALLREDUCE:
        return 2 * (p - 1), 2 * (p - 1) / p
    if collective == ALLGATHER:
        return 2, p - 1
    raise ValueError(f"collective must be {ALLREDUCE!r} or {ALLGATHER!r}, got {collective!r}")


def fit_link(samples, collective, p):
    """(Link, relative RMS error of the fit) from samples [(bytes per worker, seconds)]
    of one collective among p workers. Needs two sizes at least."""
    p = check_workers(p)
    if p < 2:
        raise ValueError("a link is measured between two workers at least")
    sizes = np.array([float(n) for n, _ in samples])
    seconds = np.array([float(t) for _, t in samples])
    if len(set(sizes.tolist())) < 2 or np.any(seconds <= 0) or np.any(sizes < 0):
        raise ValueError(f"need positive times at two sizes at least, got {samples!r}")
    # A message that took longer than a larger one waited for something other than the link
    # (Horovod holds small tensors for its fusion cycle): only the lower envelope is fitted.
    envelope = [i for i in range(len(sizes)) if not np.any((sizes > sizes[i]) & (seconds < seconds[i]))]
    if len(set(sizes[envelope].tolist())) >= 2:
        sizes, seconds = sizes[envelope], seconds[envelope]
    a, b = _coefficients(collective, p)
    # Absolute errors: the large messages, whose time is mostly transfer, set the
    # bandwidth; a token bucket (tc tbf) lets small ones through at line rate anyway.
    design = np.stack([np.ones_like(sizes), sizes], axis=1)
    (intercept, slope), *_ = np.linalg.lstsq(design, seconds, rcond=None)
    if slope <= 0:
        raise ValueError(f"the times do not grow with the size; no bandwidth to fit from {samples!r}")
    link = Link(max(intercept, 0.0) / a, b / slope)
    predicted = max(intercept, 0.0) + slope * sizes
    return link, float(np.sqrt(np.mean(((predicted - seconds) / seconds) ** 2)))
