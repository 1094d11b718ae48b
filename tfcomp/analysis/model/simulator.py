"""The what-if simulator of Zhang et al., "Is Network the Bottleneck of Distributed
Training?" (Section 3): one worker's measured backward pass replayed against any link, worker count and compressor.

Gradients leave as the fusion policy dispatches them. Each bucket is encoded, then
its collectives run on one FIFO stream (alpha-beta cost, plus (N-1) AddEst(S/N) of
vector adds for an allreduce), then it is decoded. Encoding, the collectives and
decoding are three serial streams, so buckets pipeline through them; none of them
slows the backward pass (P1's gamma is left out here).

A gradient compressed on the compute stream (a compressor profiled on the GPU that
trains the model: Espresso's contention, its Section 4 timeline models) is encoded there as soon
as it is computed, so every gradient after it is ready that much later, and decoded
there once both its collectives and the backward pass are done. Bucket membership
stays as the fusion policy chose it from the measured ready times.

The measured tables are read through their isotonic fits (SizeTable.monotone: a vector
add, an encode, a decode or a scan of more bytes never takes less time), so fewer
bytes on the wire never predict a slower step. A compressor whose payload is
allgathered decodes every worker's copy: its decode grows linearly with the workers
from the count the profile measured it at (CompressorProfile.decode_s).

    t_sync    = when the last bucket is decoded (seconds after backward began)
    overhead  = max(0, t_sync - t_back)
    iteration = forward + backward + overhead + apply
    f_sim     = single-worker step / iteration = t_batch / (t_batch + t_overhead)
"""
import dataclasses
import functools
import math
from typing import Dict, List, Optional, Tuple

from tfcomp.costs.checks import check_number, check_workers
from tfcomp.costs.network import ALLGATHER, ALLREDUCE, Link, Transfer, collective_s
from tfcomp.analysis.model.fusion_policies import BucketFusion
from tfcomp.analysis.model.profile import CompressorProfile, ModelProfile, Profile
from tfcomp.costs.tables import SizeTable


@dataclasses.dataclass(frozen=True)
class TensorCompression:
    """What compressing one gradient costs: its transfers (one a round) and compute times;
    on_compute_stream: encoded and decoded on the stream that computes the backward pass."""
    transfers: Tuple[Transfer, ...]
    encode_s: float = 0.0
    decode_s: float = 0.0
    on_compute_stream: bool = False

    def __post_init__(self):
        object.__setattr__(self, "transfers", tuple(self.transfers))
        check_number(self.encode_s, "encode_s")
        check_number(self.decode_s, "decode_s")

    @functools.cached_property
    def keys(self):
        """Its transfers' keys in a bucket (BucketLoad.wire)."""
        return tuple(_key(r, t) for r, t in enumerate(self.transfers))

    @classmethod
    def dense(cls, nbytes):
        """The gradient allreduced as it is."""
        return cls((Transfer(ALLREDUCE, nbytes),))


def compression_from_profile(compressor: CompressorProfile, model: ModelProfile, workers=None):
    """{gradient name: TensorCompression} from a compressor's measured tables, on `workers`
    workers (None: decode as measured; CompressorProfile.decode_s)."""
    return {g.name: tensor_compression(compressor, g, workers) for g in model.gradients}


def tensor_compression(compressor: CompressorProfile, gradient, workers=None):
    """A gradient's TensorCompression under a compressor: encode and decode from the isotonic
    fits of its tables (SizeTable.monotone), decode linear in the workers for allgathered
    payloads (CompressorProfile.decode_s)."""
    transfers = compressor.payloads[gradient.name]
    # checked already: the tables' fits and decode_s answer finite seconds >= 0
    out = object.__new__(TensorCompression)
    object.__setattr__(out, "__dict__", {
        "transfers": transfers, "encode_s": compressor.encode.monotone().seconds_at(gradient.nbytes),
        "decode_s": compressor.decode_s(gradient.nbytes, transfers, workers),
        "on_compute_stream": compressor.device == "gpu"})
    return out


@dataclasses.dataclass(frozen=True)
class SimResult:
    iteration_s: float
    single_s: float  # one worker, no communication
    scaling_factor: float  # f_sim = single_s / iteration_s, in (0, 1]
    forward_s: float
    backward_s: float
    apply_s: float
    sync_s: float  # t_sync, seconds after the backward pass began
    exposed_s: float  # communication and compression the backward pass did not hide
    buckets: int
    encode_s: float  # totals over the buckets, hidden or not
    transfer_s: float
    vector_add_s: float
    decode_s: float


_NO_BYTES = 0.5  # payloads are whole bytes: less than half a byte left is float rounding, not a payload


class BucketLoad:
    """One dispatched bucket under a plan: its members' summed encode and decode
    times per stream and its payload bytes per (round, collective)."""
    __slots__ = ("ready_s", "indices", "encode_s", "decode_s", "compute_encode_s", "compute_decode_s", "wire", "half",
                 "_costs", "_costs_for", "_by_key")

    def __init__(self, ready_s, indices):
        self.ready_s, self.indices = ready_s, list(indices)
        self.clear()

    def clear(self):
        self.encode_s = self.decode_s = self.compute_encode_s = self.compute_decode_s = 0.0
        self.wire = {}  # 2 * round + (1 for allgather, 0 for allreduce) -> bytes
        self.half = {}  # the same keys -> the float16 bytes among them (allreduce only)
        self._costs = self._costs_for = self._by_key = None

    def collectives(self, network, compression_ratio=1.0):
        """[(seconds on the wire, of which latency, seconds of vector adds)] of the bucket's
        collective calls in the order the stream runs them; kept until the payloads change."""
        if self._costs_for is None or self._costs_for[0] is not network or self._costs_for[1] != compression_ratio:
            self._by_key = _collectives(self.wire, self.half, network, compression_ratio)
            self._costs = [self._by_key[key] for key in sorted(self._by_key)]
            self._costs_for = (network, compression_ratio)
        return self._costs

    def collectives_with(self, network, removed: TensorCompression, added: TensorCompression):
        """collectives() with one member's compression `removed` replaced by `added`, the
        bucket left as it is: the collectives neither touches are priced once."""
        if removed.transfers is added.transfers or removed.transfers == added.transfers:
            return self.collectives(network)
        self.collectives(network)
        wire, half = {}, {}  # the touched keys' bytes, as add(removed, -1.0) then add(added) leave them
        for key in removed.keys + added.keys:
            if key not in wire:
                wire[key] = self.wire.get(key, 0.0)
                half[key] = self.half.get(key, 0.0)
        _add_transfers(wire, half, removed.transfers, -1.0, keep=True)
        _add_transfers(wire, half, added.transfers, 1.0, keep=True)
        by_key = dict(self._by_key)
        for key, nbytes in wire.items():
            if nbytes > _NO_BYTES:
                by_key[key] = _collective(key, nbytes, half[key] if half[key] > _NO_BYTES else 0.0, network, 1.0)
            else:
                by_key.pop(key, None)
        return [by_key[key] for key in sorted(by_key)]

    def add(self, tc: TensorCompression, sign=1.0):
        """Counts one member's compression in (sign=-1: takes it out again)."""
        self._costs_for = None
        if tc.on_compute_stream:
            self.compute_encode_s += sign * tc.encode_s
            self.compute_decode_s += sign * tc.decode_s
        else:
            self.encode_s += sign * tc.encode_s
            self.decode_s += sign * tc.decode_s
        _add_transfers(self.wire, self.half, tc.transfers, sign)

    def free(self):
        """Compression costs nothing here from now on (Espresso's upper bound)."""
        self.encode_s = self.decode_s = self.compute_encode_s = self.compute_decode_s = 0.0

    def snapshot(self):
        return (self.encode_s, self.decode_s, self.compute_encode_s, self.compute_decode_s, dict(self.wire),
                dict(self.half), self._costs, self._costs_for, self._by_key)

    def restore(self, snapshot):
        (self.encode_s, self.decode_s, self.compute_encode_s, self.compute_decode_s, self.wire, self.half,
         self._costs, self._costs_for, self._by_key) = snapshot


def _key(r, transfer):
    """A transfer's key in a bucket: 2 * round + (1 for allgather, 0 for allreduce), which
    sorts by round, allreduce before allgather."""
    return 2 * r + (transfer.collective != ALLREDUCE)


def _add_transfers(wire, half, transfers, sign, keep=False):
    """Counts one member's transfers into a bucket's bytes per key (sign=-1: takes them out
    again). A key left with less than a byte goes (the last payload of its kind taken out:
    no collective, and no latency, left), or with keep, stays at 0."""
    for r, t in enumerate(transfers):
        key = 2 * r + (t.collective != ALLREDUCE)
        _count_bytes(wire, key, sign * t.nbytes, keep)
        if t.half:
            _count_bytes(half, key, sign * t.nbytes, keep)


def _count_bytes(counts, key, added, keep):
    nbytes = counts.get(key, 0.0) + added
    if nbytes > _NO_BYTES:
        counts[key] = nbytes
    elif keep:
        counts[key] = 0.0
    else:
        counts.pop(key, None)


def _collectives(wire, half, network, compression_ratio):
    """{key: (seconds on the wire, of which latency, vector adds)} of a bucket's bytes per key."""
    return {key: _collective(key, nbytes, half.get(key, 0.0), network, compression_ratio)
            for key, nbytes in wire.items()}


def _collective(key, nbytes, half_bytes, network, compression_ratio):
    """(seconds on the wire, of which latency, vector adds) of one collective call of nbytes, half_bytes
    of them float16 (an allreduce's)."""
    workers = network.workers
    if key % 2:
        link = network.allgather
        return (collective_s(ALLGATHER, nbytes / compression_ratio, workers, link),
                collective_s(ALLGATHER, 0.0, workers, link), 0.0)
    link = network.allreduce
    adds = 0.0
    if workers > 1:
        adds = (workers - 1) * network.addest.seconds_at(nbytes / workers)
        if half_bytes:
            adds += network.half_extra.seconds_at(half_bytes)
    return (collective_s(ALLREDUCE, nbytes / compression_ratio, workers, link),
            collective_s(ALLREDUCE, 0.0, workers, link), adds)


def no_half_extra():
    return SizeTable.zero("float16 allreduce extra")


@dataclasses.dataclass(frozen=True)
class CollectiveCosts:
    """What the collectives cost: workers, a link per collective, the vector adds.

    burst_s: the link's token bucket (a shaper such as tc tbf, or a cloud's burst
    allowance), in seconds of transfer at its bandwidth: that much of the collectives'
    bandwidth term goes through at line rate (taken as free) while the bucket holds
    tokens, which refill at one second per second. The bucket is full when the
    backward pass starts (the forward pass refills it). 0: a plain link.

    half_extra: what an allreduce of float16 payloads costs beyond one of float32 of
    the same bytes, per float16 bytes (Profile.half_allreduce_extra: Horovod sums
    float16 on the CPU no faster per element than float32)."""
    workers: int
    allreduce: Link
    allgather: Link
    addest: SizeTable
    burst_s: float = 0.0
    start_s: float = 0.0  # no bucket leaves earlier (seconds after the backward pass began)
    half_extra: SizeTable = dataclasses.field(default_factory=no_half_extra)
    #: A last collective, after every bucket's and every bucket's encoding, that the step
    #: waits for: its seconds (tfcomp's non-finite flag, finite_check).
    finish_s: float = 0.0

    def __post_init__(self):
        check_number(self.burst_s, "burst_s")
        check_number(self.start_s, "start_s")
        check_number(self.finish_s, "finish_s")
        # a vector add of more bytes never takes less time: the measured points' isotonic fit
        object.__setattr__(self, "addest", self.addest.monotone())

    def link(self, collective):
        return self.allreduce if collective == ALLREDUCE else self.allgather


def bucket_loads(model: ModelProfile, plan: List[TensorCompression], fusion) -> List[BucketLoad]:
    """The fusion policy's buckets, in dispatch order, loaded with plan (one entry per gradient)."""
    loads = [BucketLoad(ready, indices) for ready, indices in fusion.dispatch(model.gradients)]
    for load in loads:
        for i in load.indices:
            load.add(plan[i])
    return loads


@dataclasses.dataclass
class Progress:
    """The streams after some buckets of a replay: where replay can pick up again."""
    shift: float = 0.0  # compute-stream encoding so far, in dispatch order
    encode_free: float = 0.0
    stream_free: float = 0.0
    decode_free: float = 0.0
    encode: float = 0.0
    transfer: float = 0.0
    vector_add: float = 0.0
    decode: float = 0.0
    compute_decode: tuple = ()  # (collectives done, seconds) of buckets decoded on the compute stream
    tokens_s: Optional[float] = None  # the link's token bucket after the last collective (None: full)
    tokens_at: float = 0.0  # when that collective ended

    def copy(self):
        """A copy to go on from (copy.copy's speed matters here: the planner makes one per trial)."""
        out = Progress.__new__(Progress)
        out.__dict__.update(self.__dict__)
        return out

    def same_streams(self, other):
        return (self.stream_free == other.stream_free and self.encode_free == other.encode_free
                and self.decode_free == other.decode_free and self.shift == other.shift
                and self.compute_decode == other.compute_decode and self.tokens_s == other.tokens_s
                and self.tokens_at == other.tokens_at)

    def burst_through(self, shaped_s, start, burst_s):
        """The part of shaped_s seconds of transfer, starting at `start`, that the token
        bucket lets through at line rate; takes those tokens."""
        if not burst_s:
            return 0.0
        tokens = burst_s if self.tokens_s is None else min(burst_s, self.tokens_s + start - self.tokens_at)
        covered = min(shaped_s, tokens)
        self.tokens_s = tokens - covered
        return covered


def replay(model: ModelProfile, loads: List[BucketLoad], network: CollectiveCosts, *, compression_ratio=1.0,
           overlap=True, timeline=None):
    """One step's SimResult from its loaded buckets. timeline, a list, receives
    (start, end, bucket position) for every collective call on the stream."""
    at = Progress()
    sync = advance(model, loads, network, at, compression_ratio=compression_ratio, overlap=overlap,
                   timeline=timeline)
    exposed = max(0.0, sync - model.backward_s)
    iteration = model.single_step_s + exposed
    return SimResult(iteration_s=iteration, single_s=model.single_step_s,
                     scaling_factor=model.single_step_s / iteration, forward_s=model.forward_s,
                     backward_s=model.backward_s, apply_s=model.apply_s, sync_s=sync, exposed_s=exposed,
                     buckets=len(loads), encode_s=at.encode, transfer_s=at.transfer,
                     vector_add_s=at.vector_add, decode_s=at.decode)


def advance(model, loads, network, at: Progress, *, begin=0, compression_ratio=1.0, overlap=True,
            timeline=None, checkpoints=None, reference=None):
    """Replays buckets begin.. on from the streams' progress `at` (updated in place);
    returns t_sync. checkpoints, a list, receives a copy of the progress before each.
    reference: the checkpoints of another replay of these buckets, differing before
    bucket begin + 1 only; once the streams stand where they stood there, the rest
    would replay alike, and advance returns None."""
    burst_s, start_s = network.burst_s, network.start_s
    for b in range(begin, len(loads)):
        if reference is not None and b > begin and at.same_streams(reference[b]):
            return None
        if checkpoints is not None:
            checkpoints.append(at.copy())
        load = loads[b]
        at.shift += load.compute_encode_s
        ready = max((load.ready_s + at.shift) if overlap else model.backward_s, start_s)
        at.encode_free = max(ready, at.encode_free) + load.encode_s
        done = at.encode_free
        for wire, latency, adds in load.collectives(network, compression_ratio):
            start = max(done, at.stream_free)
            if burst_s:
                wire -= at.burst_through(wire - latency, start, burst_s)
            at.stream_free = done = start + wire + adds
            if burst_s:
                at.tokens_at = done
            if timeline is not None:
                timeline.append((start, at.stream_free, b))
            at.transfer += wire
            at.vector_add += adds
        at.decode_free = max(done, at.decode_free) + load.decode_s
        if load.compute_decode_s:
            at.compute_decode += ((done, load.compute_decode_s),)
        at.encode += load.encode_s + load.compute_encode_s
        at.decode += load.decode_s + load.compute_decode_s
    sync = max(at.encode_free, at.stream_free, at.decode_free)
    if network.finish_s:
        sync = max(sync, max(at.encode_free, at.stream_free) + network.finish_s)
    if at.shift or at.compute_decode:
        compute_free = model.backward_s + at.shift  # the backward pass, lengthened by compute-stream encoding
        for done, seconds in at.compute_decode:
            compute_free = max(done, compute_free) + seconds
        sync = max(sync, compute_free)
    return sync


def bucket_row(load: BucketLoad, network):
    """What trial_sync reads of a bucket: (ready_s, encode_s, decode_s, compute_encode_s,
    compute_decode_s, collectives)."""
    return (load.ready_s, load.encode_s, load.decode_s, load.compute_encode_s, load.compute_decode_s,
            load.collectives(network))


def trial_sync(model, rows, network, at: Progress, begin, changed, reference, overlap=True, cutoff=math.inf):
    """advance() from bucket begin on over rows (bucket_row of every bucket), bucket begin's
    replaced by changed; the same arithmetic in the same order, without advance's totals,
    timeline, checkpoints and token bucket (network.burst_s must be 0): the planner's inner
    loop. reference: (stream_free, encode_free, decode_free, shift, compute_decode) before
    every bucket of another replay of these rows differing in bucket begin only; None once
    the streams stand where they stood there (the rest would replay alike). cutoff: a t_sync
    not worth knowing beyond; once the streams show t_sync will reach it (every stream's
    time only grows), that lower bound is returned instead."""
    shift, encode_free, stream_free, decode_free = at.shift, at.encode_free, at.stream_free, at.decode_free
    compute_decode = at.compute_decode
    start_s, backward_s = network.start_s, model.backward_s
    row = changed
    for b in range(begin, len(rows)):
        if b > begin:
            r = reference[b]
            if (stream_free == r[0] and encode_free == r[1] and decode_free == r[2] and shift == r[3]
                    and compute_decode == r[4]):
                return None
            bound = backward_s + shift
            if stream_free > bound:
                bound = stream_free
            if encode_free > bound:
                bound = encode_free
            if decode_free > bound:
                bound = decode_free
            if bound >= cutoff:
                return bound
            row = rows[b]
        ready_s, encode_s, decode_s, compute_encode_s, compute_decode_s, collectives = row
        shift += compute_encode_s
        ready = (ready_s + shift) if overlap else backward_s
        if start_s > ready:
            ready = start_s
        encode_free = (ready if ready >= encode_free else encode_free) + encode_s
        done = encode_free
        for wire, _, adds in collectives:
            stream_free = done = (done if done >= stream_free else stream_free) + wire + adds
        decode_free = (done if done >= decode_free else decode_free) + decode_s
        if compute_decode_s:
            compute_decode += ((done, compute_decode_s),)
    sync = max(encode_free, stream_free, decode_free)
    if network.finish_s:
        sync = max(sync, max(encode_free, stream_free) + network.finish_s)
    if shift or compute_decode:
        compute_free = backward_s + shift
        for done, seconds in compute_decode:
            compute_free = max(done, compute_free) + seconds
        sync = max(sync, compute_free)
    return sync


def simulate(model: ModelProfile, workers, link: Link, *, allgather_link: Optional[Link] = None,
             addest: Optional[SizeTable] = None, fusion=None,
             compression: Optional[Dict[str, TensorCompression]] = None, compression_ratio=1.0, overlap=True,
             burst_s=0.0, start_s=0.0, half_extra: Optional[SizeTable] = None, finish_s=0.0):
    """One training step of model on `workers` workers (Zhang et al., Section 3's simulator).

    link prices allreduces (and allgathers unless allgather_link is given). addest
    is the vector-add time per size (none: free). fusion is a policy from
    fusion_policies (default: tfcomp's 25 MiB buckets). compression gives every
    gradient's transfers and encode/decode times; without it each gradient is
    allreduced dense, its bandwidth term divided by compression_ratio, the vector
    adds not (Zhang et al.'s what-if, Section 3). overlap=False sends
    everything after the backward pass (P1 Appendix B's placement).
    """
    workers = check_workers(workers)
    ratio = check_number(compression_ratio, "compression_ratio", positive=True)
    if compression is not None and ratio != 1.0:
        raise ValueError("give either a compressor's per-tensor compression or a compression_ratio "
                         "for dense gradients, not both")
    if compression is not None:
        missing = [g.name for g in model.gradients if g.name not in compression]
        if missing:
            raise ValueError(f"compression has no entry for gradients {missing[:5]} of model {model.name!r}")
        plan = [compression[g.name] for g in model.gradients]
    else:
        plan = [TensorCompression.dense(g.nbytes) for g in model.gradients]
    network = CollectiveCosts(workers, link, allgather_link or link, addest or SizeTable.zero("AddEst"), burst_s,
                              start_s, half_extra or no_half_extra(), finish_s)
    loads = bucket_loads(model, plan, fusion or BucketFusion())
    return replay(model, loads, network, compression_ratio=ratio, overlap=overlap)


def profile_network(profile: Profile, workers, link=None, allgather_link=None):
    """The CollectiveCosts of a saved profile; link replaces the measured links (both, unless
    allgather_link is given too)."""
    return CollectiveCosts(check_workers(workers), link or profile.allreduce,
                   allgather_link or (profile.allgather if link is None else link), profile.addest,
                   half_extra=profile.half_allreduce_extra or no_half_extra())


def strategy_compression(profile: Profile, choices, workers=None):
    """{gradient name: TensorCompression} of a per-gradient strategy, {gradient name:
    profiled compressor name, or None for dense} (a planner's choices), on `workers`
    workers; gradients it does not name go dense."""
    compressors = {name: profile.compressor(name) for name in set(choices.values()) if name is not None}
    return {g.name: TensorCompression.dense(g.nbytes) if choices.get(g.name) is None
            else tensor_compression(compressors[choices[g.name]], g, workers) for g in profile.model.gradients}


def simulate_profile(profile: Profile, workers, *, compressor=None, strategy=None, link=None, allgather_link=None,
                     finite_check=False, **options):
    """simulate() fed from a saved profile; compressor names a profiled compressor (None: dense),
    or strategy gives each gradient its own (strategy_compression's choices). For a what-if,
    link replaces the measured links (both, unless allgather_link is given too). finite_check:
    the step runs tfcomp's exchange with its non-finite check (finite_check_costs)."""
    if compressor is not None and strategy is not None:
        raise ValueError("give a compressor for every gradient or a per-gradient strategy, not both")
    compression = None
    if compressor is not None:
        compression = compression_from_profile(profile.compressor(compressor), profile.model, workers)
    if strategy is not None:
        compression = strategy_compression(profile, strategy, workers)
    network = profile_network(profile, workers, link, allgather_link)
    if finite_check:
        compression, options["finish_s"] = finite_check_costs(
            profile, compression or {g.name: TensorCompression.dense(g.nbytes) for g in profile.model.gradients},
            workers, network.allreduce)
    return simulate(profile.model, workers, network.allreduce, allgather_link=network.allgather,
                    addest=profile.addest, compression=compression, half_extra=network.half_extra, **options)


def finite_check_costs(profile: Profile, compression, workers, link: Link):
    """What tfcomp's non-finite check (check_finite, its default) adds to a compressed step:
    (compression with each gradient's scan for NaN and Inf (the profile's finite_scan)
    added to its encoding, as each bucket scans its own gradients before it compresses;
    seconds of the one float32 flag allreduced among the workers after every bucket's
    collectives, which the step's results wait for: CollectiveCosts.finish_s)."""
    if profile.finite_scan is None:
        raise ValueError("the profile has no finite_scan (recorded before tfcomp measured it): record it again "
                         "to predict tfcomp's exchange with its finite check")
    table = profile.finite_scan.monotone()  # a scan of more bytes never takes less time
    scanned = {g.name: dataclasses.replace(compression[g.name],
                                           encode_s=compression[g.name].encode_s + table.seconds_at(g.nbytes))
               for g in profile.model.gradients}
    flag = collective_s(ALLREDUCE, 4.0, check_workers(workers), link) if workers > 1 else 0.0
    return scanned, flag


def burst_seconds(burst_bytes, link: Link):
    """A token bucket of burst_bytes as seconds of transfer at the link's bandwidth."""
    return check_number(burst_bytes, "burst bytes") / link.bandwidth_bytes_per_s
