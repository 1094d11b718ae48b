"""Agarwal et al.'s closed-form communication costs and step-time models ("On the
Utility of Gradient Compression in Distributed Training Systems": Table 1, Eq. (1),
Section 4.1 and Appendix B).

Units throughout: bytes, seconds, bytes per second. A Link's bandwidth is in
bytes/s, so 10 Gbit/s is 1.25e9 (Link.from_gbit).
"""
import dataclasses
import math

from tfcomp.costs.checks import check_number, check_workers

ALLREDUCE = "allreduce"
ALLGATHER = "allgather"
COLLECTIVES = (ALLREDUCE, ALLGATHER)


@dataclasses.dataclass(frozen=True)
class Link:
    """Latency alpha (seconds per message) and bandwidth (bytes/s) of one collective."""
    alpha_s: float
    bandwidth_bytes_per_s: float

    def __post_init__(self):
        check_number(self.alpha_s, "link latency alpha_s (seconds)")
        check_number(self.bandwidth_bytes_per_s, "link bandwidth_bytes_per_s (bytes per second)", positive=True)

    @classmethod
    def from_gbit(cls, gbit_per_s, alpha_s=0.0):
        """A link of gbit_per_s Gbit/s (decimal: 1 Gbit/s = 1.25e8 bytes/s)."""
        check_number(gbit_per_s, "link bandwidth (Gbit/s)", positive=True)
        return cls(alpha_s, gbit_per_s * 1e9 / 8)

    @property
    def beta_s_per_byte(self):
        """Inverse bandwidth, P1 Table 1's beta."""
        return 1.0 / self.bandwidth_bytes_per_s


def transmission_time(nbytes, link):
    """nbytes sent once over the link, nbytes / BW: how P3 quotes a whole model's
    transmission time at 100 Gbit/s (Zhang et al., Section 3, with model sizes in MiB)."""
    return check_number(nbytes, "nbytes") / link.bandwidth_bytes_per_s


# Agarwal et al., Table 1 and Eq. (1). With one worker there is nothing to
# exchange, so every collective costs 0 (the PS and allgather forms would say 2*alpha).

def ring_allreduce(nbytes, p, link):
    """Eq. (1): 2 alpha (p-1) + 2 b (p-1) / (p BW). The 2 on alpha is as Eq. (1) writes it,
    though Appendix C measures alpha as a small allreduce's time over (p-1)."""
    return _ring_allreduce_s(check_number(nbytes, "nbytes"), check_workers(p), link)


def _ring_allreduce_s(nbytes, p, link):
    return 2 * link.alpha_s * (p - 1) + 2 * nbytes * (p - 1) / (p * link.bandwidth_bytes_per_s)


def tree_allreduce(nbytes, p, link):
    """Table 1: 2 alpha log p + 2 beta (log p) n, log base 2 (the paper names no base)."""
    nbytes, p = check_number(nbytes, "nbytes"), check_workers(p)
    log_p = math.log2(p)
    return 2 * link.alpha_s * log_p + 2 * link.beta_s_per_byte * log_p * nbytes


def parameter_server(nbytes, p, link):
    """Table 1: 2 alpha + 2 beta (p-1) n."""
    nbytes, p = check_number(nbytes, "nbytes"), check_workers(p)
    if p == 1:
        return 0.0
    return 2 * link.alpha_s + 2 * link.beta_s_per_byte * (p - 1) * nbytes


def allgather(nbytes, p, link):
    """Appendix B (MSTop-K): 2 alpha + g (p-1) / BW, g the bytes each worker sends.
    P1's SignSGD form drops the 2 alpha; a link with alpha_s=0 gives it exactly."""
    return _allgather_s(check_number(nbytes, "nbytes"), check_workers(p), link)


def _allgather_s(nbytes, p, link):
    if p == 1:
        return 0.0
    return 2 * link.alpha_s + nbytes * (p - 1) / link.bandwidth_bytes_per_s


COLLECTIVE_COSTS = {ALLREDUCE: ring_allreduce, ALLGATHER: allgather}
_UNCHECKED_COSTS = {ALLREDUCE: _ring_allreduce_s, ALLGATHER: _allgather_s}


def collective_s(collective, nbytes, p, link):
    """A collective call's seconds, its arguments taken as checked (the simulator's inner loop)."""
    return _UNCHECKED_COSTS[collective](nbytes, p, link)


@dataclasses.dataclass(frozen=True)
class Network:
    """The link between workers as users give it (tfcomp.Network): bandwidth in
    Gbit/s, one-way latency in microseconds. Its collectives cost what the
    functions above say of its Link."""
    bandwidth_gbps: float = 10.0
    latency_us: float = 50.0

    def __post_init__(self):
        if self.bandwidth_gbps <= 0 or self.latency_us < 0:
            raise ValueError(f"need bandwidth_gbps > 0 and latency_us >= 0, got {self}")

    @property
    def link(self):
        return Link.from_gbit(self.bandwidth_gbps, self.latency_us * 1e-6)

    def collective_seconds(self, kind, nbytes, num_workers):
        """One collective of nbytes per worker: kind is "allreduce" (ring) or "allgather"
        (or a tfcomp Collective)."""
        return COLLECTIVE_COSTS[getattr(kind, "value", kind)](nbytes, num_workers, self.link)


HALF = "float16"  # the payload dtype whose allreduce the engine may sum more slowly (Profile.half_allreduce_extra)
HALF_ALLREDUCE = "allreduce_float16"  # the link probe's samples of it


@dataclasses.dataclass(frozen=True)
class Transfer:
    """One collective call: its kind and the bytes each worker puts in; half: an
    allreduce of float16 payloads."""
    collective: str
    nbytes: float
    half: bool = False

    def __post_init__(self):
        if self.collective not in COLLECTIVES:
            raise ValueError(f"collective must be one of {COLLECTIVES}, got {self.collective!r}")
        check_number(self.nbytes, f"{self.collective} payload bytes")
        if self.half and self.collective != ALLREDUCE:
            raise ValueError("only an allreduce sums float16 payloads (half=True)")

    def cost(self, p, link, allgather_link=None):
        """Seconds on the wire; allgather_link, where given, prices allgathers."""
        if self.collective == ALLGATHER and allgather_link is not None:
            link = allgather_link
        return COLLECTIVE_COSTS[self.collective](self.nbytes, p, link)


def bucket_split(model_bytes, bucket_bytes):
    """(k, b_last): model_bytes = (k-1) * bucket_bytes + b_last, 0 < b_last <= bucket_bytes
    (Agarwal et al., Section 4.1)."""
    model_bytes = check_number(model_bytes, "model_bytes", positive=True)
    bucket_bytes = check_number(bucket_bytes, "bucket_bytes", positive=True)
    k = math.ceil(model_bytes / bucket_bytes)
    return k, model_bytes - (k - 1) * bucket_bytes


def syncsgd_time(t_comp, model_bytes, p, link, bucket_bytes, gamma=1.0):
    """Backward pass plus synchronisation of dense syncSGD with buckets and overlap, P1 section 4.1
    (Agarwal et al., Section 4.1): T_obs = max(gamma T_comp, (k-1) T_comm(b)) + T_comm(b_last),
    T_comm the ring allreduce of Eq. (1)."""
    t_comp = check_number(t_comp, "t_comp (backward seconds)")
    gamma = check_number(gamma, "gamma (backward slowdown under overlap)", positive=True)
    k, b_last = bucket_split(model_bytes, bucket_bytes)
    overlapped = (k - 1) * ring_allreduce(bucket_bytes, p, link)
    return max(gamma * t_comp, overlapped) + ring_allreduce(b_last, p, link)


def compressed_time(t_comp, t_encode_decode, transfers, p, link, allgather_link=None):
    """Compression after the backward pass, payloads in one bucket per transfer, P1 Appendix B
    (Agarwal et al., Appendix B): T_obs = T_comp + T_encode-decode + sum of T_comm over the transfers
    (PowerSGD: P then Q; MSTop-K: values and indices)."""
    t_comp = check_number(t_comp, "t_comp (backward seconds)")
    t_encode_decode = check_number(t_encode_decode, "t_encode_decode (seconds)")
    return t_comp + t_encode_decode + sum(t.cost(p, link, allgather_link) for t in transfers)


# What each of tfcomp's compressor families sends per step for one float32 tensor
# (Agarwal et al., Appendix B; the ACP-SGD paper, Section II; sizes as tfcomp's payload_specs make them).

FLOAT32_BYTES = 4


def dense_transfers(elements):
    """NoCompression: the tensor itself, allreduced."""
    return (Transfer(ALLREDUCE, elements * FLOAT32_BYTES),)


def fp16_transfers(elements):
    """FP16: half the bytes, still allreduce-compatible (a float16 allreduce)."""
    return (Transfer(ALLREDUCE, elements * 2, half=True),)


def randomk_transfers(elements, keep_fraction):
    """RandomK: the workers draw the same indices (shared seed), so only the values
    travel, and they sum: allreduce-compatible."""
    return (Transfer(ALLREDUCE, _kept(elements, keep_fraction) * FLOAT32_BYTES),)


def powersgd_transfers(rows, cols, rank):
    """PowerSGD: two allreduce rounds, P (rows x rank) then Q (cols x rank)."""
    return (Transfer(ALLREDUCE, rows * rank * FLOAT32_BYTES), Transfer(ALLREDUCE, cols * rank * FLOAT32_BYTES))


def acpsgd_transfers(rows, cols, rank):
    """ACP-SGD: one factor per step, P and Q alternating; per step, their mean
    (tfcomp's ACPSGD.payload_bytes averages the two phases too)."""
    return (Transfer(ALLREDUCE, (rows + cols) * rank * FLOAT32_BYTES / 2),)


def sign_transfers(elements, with_scale=False):
    """SignSGD: one bit per element packed into 32-bit words (g/32), allgathered since
    the majority vote does not sum; EF-SignSGD adds its float32 scale."""
    words = math.ceil(elements / 32)
    return (Transfer(ALLGATHER, words * 4 + (FLOAT32_BYTES if with_scale else 0)),)


def sparse_transfers(elements, keep_fraction, index_bytes=4):
    """TopK, DGC, DRAGONN: values and indices, allgathered (indices differ per worker);
    tfcomp fuses both into one allgather, where P1's MSTop-K form counts two."""
    kept = _kept(elements, keep_fraction)
    return (Transfer(ALLGATHER, kept * (FLOAT32_BYTES + index_bytes)),)


def _kept(elements, keep_fraction):
    keep_fraction = check_number(keep_fraction, "keep_fraction", positive=True)
    if keep_fraction > 1:
        raise ValueError(f"keep_fraction is the fraction of elements sent, in (0, 1], got {keep_fraction!r}")
    return max(1, math.ceil(elements * keep_fraction))
