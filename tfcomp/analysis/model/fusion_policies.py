"""When gradients leave for the collective stream, and in which groups: the fusion
policies the what-if simulator replays (Zhang et al., "Is Network the Bottleneck of Distributed Training?", Section 3).

A policy maps gradients (each with nbytes and ready_s, in backward order) to a
list of (dispatch time, [gradient indices]) in dispatch order.
"""
import dataclasses
import math

from tfcomp.costs.checks import check_number
from tfcomp.exchange.buckets import DEFAULT_BUCKET_BYTES, buckets

HOROVOD_CYCLE_S = 0.005  # Zhang et al.'s 5 ms window: Horovod's cycle time
HOROVOD_FUSION_BYTES = 64 * 2**20  # Zhang et al.'s "64 MB": Horovod's fusion threshold (64 MiB)


@dataclasses.dataclass(frozen=True)
class BucketFusion:
    """tfcomp's exchange: consecutive gradients in backward order packed into buckets of at
    most bucket_bytes (tfcomp.exchange.buckets.buckets); a bucket leaves when its last gradient is ready."""
    bucket_bytes: float = DEFAULT_BUCKET_BYTES

    def __post_init__(self):
        check_number(self.bucket_bytes, "bucket_bytes", positive=True)

    def dispatch(self, gradients):
        groups = buckets([g.nbytes for g in gradients], self.bucket_bytes)
        return [(max(gradients[i].ready_s for i in group), group) for group in groups]


@dataclasses.dataclass(frozen=True)
class CycleFusion:
    """Horovod's: every cycle_s the gradients that became ready since the last cycle leave,
    packed into buffers of at most buffer_bytes. The cycle's phase is Horovod's: its
    background loop starts a cycle when the first gradient is ready (Zhang et al.'s 5 ms
    window; the paper does not say where the cycle stands), so cycles begin at
    t0, t0 + cycle_s, t0 + 2 cycle_s, ..., t0 the first gradient's ready time, and each
    gradient leaves at the first cycle that begins at or after it is ready."""
    cycle_s: float = HOROVOD_CYCLE_S
    buffer_bytes: float = HOROVOD_FUSION_BYTES

    def __post_init__(self):
        check_number(self.cycle_s, "cycle_s", positive=True)
        check_number(self.buffer_bytes, "buffer_bytes", positive=True)

    def dispatch(self, gradients):
        first = min(g.ready_s for g in gradients)
        by_tick = {}
        for i, g in enumerate(gradients):
            tick = math.ceil(round((g.ready_s - first) / self.cycle_s, 9))  # 0.03 / 0.005 is 5.999...
            by_tick.setdefault(tick, []).append(i)
        out = []
        for tick, indices in sorted(by_tick.items()):
            for group in buckets([gradients[i].nbytes for i in indices], self.buffer_bytes):
                out.append((first + tick * self.cycle_s, [indices[j] for j in group]))
        return out
