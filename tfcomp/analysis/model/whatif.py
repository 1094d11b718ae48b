"""Zhang et al.'s what-if analysis: every (compute speed-up, compressor or dense, worker
count, bandwidth) simulated from one profile, and where each compressor's speed-up
over dense crosses 1 (its crossover bandwidth); with compression_ratios, Zhang et al.'s
dense-compression what-if too (Section 3): dense gradients whose bandwidth term is
divided by the ratio, the vector adds not, compression costing nothing. numpy, no
TensorFlow."""
import dataclasses

import numpy as np

from tfcomp.analysis.model.profile import GradientProfile, ModelProfile, Profile
from tfcomp.analysis.model.simulator import compression_from_profile, finite_check_costs, simulate
from tfcomp.costs.tables import SizeTable
from tfcomp.analysis.model.links import DENSE, links

TIE = 1e-9  # a speed-up this close to 1 is a tie, on neither side of a crossover


def faster_compute(profile, speedup):
    """The profile on an accelerator `speedup` times faster: forward, backward (and each
    gradient's ready time), apply, encode, decode and the finite scan divided by it;
    links and AddEst kept."""
    if speedup == 1:
        return profile
    m = profile.model
    model = ModelProfile(m.name, m.forward_s / speedup, m.backward_s / speedup, m.apply_s / speedup,
                         [GradientProfile(g.name, g.nbytes, g.ready_s / speedup) for g in m.gradients])
    compressors = {name: dataclasses.replace(c, encode=_divided(c.encode, speedup), decode=_divided(c.decode, speedup),
                                             decode_per_worker=c.decode_per_worker and _divided(c.decode_per_worker,
                                                                                                speedup))
                   for name, c in profile.compressors.items()}
    scan = profile.finite_scan and _divided(profile.finite_scan, speedup)
    return Profile(model, profile.allreduce, profile.allgather, profile.addest, compressors, scan,
                   profile.half_allreduce_extra)


def _divided(table, speedup):
    return SizeTable([(b, s / speedup) for b, s in table.points()], table.what)


def ratio_name(ratio):
    """How a sweep names dense gradients compressed `ratio` times (Zhang et al.'s what-if)."""
    return f"ratio {ratio:g}x"


@dataclasses.dataclass(frozen=True)
class Sweep:
    """Step times of every configuration, indexed [compute speed-up, name, workers, bandwidth];
    names[0] is dense, then the compressors, then ratio_name(r) for each compression ratio."""
    bandwidths_gbps: tuple
    workers: tuple
    compute_speedups: tuple
    names: tuple
    iteration_s: np.ndarray
    single_s: np.ndarray  # one worker, per compute speed-up
    compression_ratios: tuple = ()

    @property
    def compressors(self):
        """The compressors' names (dense and the compression ratios apart)."""
        return self.names[1:len(self.names) - len(self.compression_ratios)]

    def ratio_curves(self):
        """(ratios, scaling factors [compute speed-up, ratio, workers, bandwidth]): dense as
        ratio 1, then each compression ratio ascending (Zhang et al.'s what-if)."""
        order = sorted(range(len(self.compression_ratios)), key=lambda k: self.compression_ratios[k])
        first = 1 + len(self.compressors)
        rows = [0] + [first + k for k in order if self.compression_ratios[k] != 1]
        ratios = (1.0, *(self.compression_ratios[k] for k in order if self.compression_ratios[k] != 1))
        return ratios, self.scaling_factor[:, rows]

    @property
    def configurations(self):
        return self.iteration_s.size

    @property
    def scaling_factor(self):
        return self.single_s[:, None, None, None] / self.iteration_s

    @property
    def speedup(self):
        """Dense step time over each one's, on the same link, workers and compute."""
        return self.iteration_s[:, :1] / self.iteration_s

    def crossovers(self):
        """[(compute speed-up, compressor, workers, crossings, description)] for every compressor:
        crossings as crossovers() finds them, description as describe_crossings() words them."""
        out = []
        for s, speedup in enumerate(self.compute_speedups):
            for c, name in enumerate(self.compressors, start=1):
                for w, workers in enumerate(self.workers):
                    curve = self.speedup[s, c, w]
                    crossings = crossovers(self.bandwidths_gbps, curve)
                    out.append((speedup, name, workers, crossings, describe_crossings(crossings, curve)))
        return out


def sweep(profile, bandwidths_gbps, workers, compressors, compute_speedups=(1.0,), *, latency_us=None, fusion=None,
          compression_ratios=()):
    """Simulates every configuration (simulate_profile's inputs, the compression plans
    built once per compressor, compute speed-up and, where decode grows with the
    workers, worker count). compression_ratios: Zhang et al.'s dense-compression
    what-if at each ratio (simulate's compression_ratio), beside the compressors."""
    ratios = tuple(compression_ratios)
    names = (DENSE, *compressors, *(ratio_name(r) for r in ratios))
    shape = (len(compute_speedups), len(names), len(workers), len(bandwidths_gbps))
    iteration, single = np.empty(shape), np.empty(len(compute_speedups))
    first_ratio = 1 + len(compressors)
    for s, speedup in enumerate(compute_speedups):
        scaled = faster_compute(profile, speedup)
        single[s] = scaled.model.single_step_s
        link_pairs = [links(scaled, gbps, latency_us) for gbps in bandwidths_gbps]
        for c, name in enumerate(names):
            compressor = scaled.compressor(name) if 0 < c < first_ratio else None
            ratio = ratios[c - first_ratio] if c >= first_ratio else 1.0
            checked = compressor is not None and scaled.finite_scan is not None
            compression = None
            for w, p in enumerate(workers):
                if compressor is not None and (compression is None or compressor.decode_workers is not None):
                    compression = compression_from_profile(compressor, scaled.model, p)
                for b, (link, gather) in enumerate(link_pairs):
                    run, finish = compression, 0.0
                    if checked:
                        run, finish = finite_check_costs(scaled, compression, p, link)
                    iteration[s, c, w, b] = simulate(scaled.model, p, link, allgather_link=gather,
                                                     addest=scaled.addest, fusion=fusion, compression=run,
                                                     compression_ratio=ratio, finish_s=finish,
                                                     half_extra=scaled.half_allreduce_extra).iteration_s
    return Sweep(tuple(bandwidths_gbps), tuple(workers), tuple(compute_speedups), names, iteration, single, ratios)


def crossovers(bandwidths_gbps, speedup):
    """[(Gbit/s, side)] where speedup (over ascending bandwidths) crosses 1, interpolated
    linearly in log bandwidth; side is 'below' where compression is faster below that
    bandwidth, 'above' otherwise. Ties with dense are skipped: 1.2, 1, 0.9 crosses once."""
    log_b, excess = np.log(np.asarray(bandwidths_gbps, dtype=float)), np.asarray(speedup, dtype=float) - 1
    keep = np.abs(excess) > TIE
    log_b, excess = log_b[keep], excess[keep]
    out = []
    for i in np.flatnonzero(np.sign(excess[:-1]) != np.sign(excess[1:])):
        t = excess[i] / (excess[i] - excess[i + 1])
        out.append((float(np.exp(log_b[i] + t * (log_b[i + 1] - log_b[i]))), "below" if excess[i] > 0 else "above"))
    return out


def describe_crossings(crossings, speedup):
    """A table cell: the crossover bandwidths, or which side of dense the compressor stays on."""
    if crossings:
        return "; ".join(f"{gbps:.3g} (faster {side})" for gbps, side in crossings)
    above = np.asarray(speedup) - 1
    if np.all(np.abs(above) <= TIE):
        return "none: ties with dense at every bandwidth swept"
    side = "faster" if np.all(above >= -TIE) else "slower"
    return f"none: {side} at every bandwidth swept"
