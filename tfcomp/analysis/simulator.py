"""Zhang et al.'s what-if simulator (seed-notes.md 3.1-3.2, P3): one worker's measured
backward pass replayed against any link, worker count and compressor.

Gradients leave as the fusion policy dispatches them. Each bucket is encoded, then
its collectives run on one FIFO stream (alpha-beta cost, plus (N-1) AddEst(S/N) of
vector adds for an allreduce), then it is decoded. Encoding, the collectives and
decoding are three serial streams, so buckets pipeline through them; none of them
slows the backward pass (P1's gamma is left out here).

    t_sync    = when the last bucket is decoded (seconds after backward began)
    overhead  = max(0, t_sync - t_back)
    iteration = forward + backward + overhead + apply
    f_sim     = single-worker step / iteration = t_batch / (t_batch + t_overhead)
"""
import dataclasses
from typing import Dict, Optional, Tuple

from tfcomp.analysis.checks import check_number, check_workers
from tfcomp.analysis.costs import ALLGATHER, ALLREDUCE, Link, Transfer
from tfcomp.analysis.fusion_policies import BucketFusion
from tfcomp.analysis.profile import CompressorProfile, ModelProfile, Profile
from tfcomp.analysis.tables import SizeTable


@dataclasses.dataclass(frozen=True)
class TensorCompression:
    """What compressing one gradient costs: its transfers (one a round) and compute times."""
    transfers: Tuple[Transfer, ...]
    encode_s: float = 0.0
    decode_s: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "transfers", tuple(self.transfers))
        check_number(self.encode_s, "encode_s")
        check_number(self.decode_s, "decode_s")


def compression_from_profile(compressor: CompressorProfile, model: ModelProfile):
    """{gradient name: TensorCompression} from a compressor's measured tables."""
    return {g.name: TensorCompression(compressor.payloads[g.name], compressor.encode(g.nbytes),
                                      compressor.decode(g.nbytes))
            for g in model.gradients}


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


def simulate(model: ModelProfile, workers, link: Link, *, allgather_link: Optional[Link] = None,
             addest: Optional[SizeTable] = None, fusion=None,
             compression: Optional[Dict[str, TensorCompression]] = None, compression_ratio=1.0, overlap=True):
    """One training step of model on `workers` workers (seed-notes.md 3.2).

    link prices allreduces (and allgathers unless allgather_link is given). addest
    is the vector-add time per size (none: free). fusion is a policy from
    fusion_policies (default: tfcomp's 25 MiB buckets). compression gives every
    gradient's transfers and encode/decode times; without it each gradient is
    allreduced dense, its bandwidth term divided by compression_ratio, the vector
    adds not (Zhang et al.'s what-if, seed-notes.md 3.1). overlap=False sends
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
    addest = addest or SizeTable.zero("AddEst")
    fusion = fusion or BucketFusion()
    links = {ALLREDUCE: link, ALLGATHER: allgather_link or link}

    def plan(g):
        if compression is not None:
            return compression[g.name]
        return TensorCompression((Transfer(ALLREDUCE, g.nbytes),))

    encode_free = stream_free = decode_free = 0.0
    totals = dict(encode=0.0, transfer=0.0, vector_add=0.0, decode=0.0)
    dispatched = fusion.dispatch(model.gradients)
    for ready, indices in dispatched:
        members = [plan(model.gradients[i]) for i in indices]
        ready = model.backward_s if not overlap else ready
        encode = sum(m.encode_s for m in members)
        encode_free = max(ready, encode_free) + encode
        done = encode_free
        for r in range(max(len(m.transfers) for m in members)):
            for collective in (ALLREDUCE, ALLGATHER):  # a round's payloads fuse per collective
                nbytes = sum(m.transfers[r].nbytes for m in members
                             if r < len(m.transfers) and m.transfers[r].collective == collective)
                if nbytes == 0:
                    continue
                wire = Transfer(collective, nbytes / ratio).cost(workers, links[collective])
                adds = (workers - 1) * addest(nbytes / workers) if collective == ALLREDUCE and workers > 1 else 0.0
                stream_free = max(done, stream_free) + wire + adds
                done = stream_free
                totals["transfer"] += wire
                totals["vector_add"] += adds
        decode = sum(m.decode_s for m in members)
        decode_free = max(done, decode_free) + decode
        totals["encode"] += encode
        totals["decode"] += decode

    sync = max(encode_free, stream_free, decode_free)
    exposed = max(0.0, sync - model.backward_s)
    iteration = model.single_step_s + exposed
    return SimResult(iteration_s=iteration, single_s=model.single_step_s,
                     scaling_factor=model.single_step_s / iteration, forward_s=model.forward_s,
                     backward_s=model.backward_s, apply_s=model.apply_s, sync_s=sync, exposed_s=exposed,
                     buckets=len(dispatched), encode_s=totals["encode"], transfer_s=totals["transfer"],
                     vector_add_s=totals["vector_add"], decode_s=totals["decode"])


def simulate_profile(profile: Profile, workers, *, compressor=None, link=None, allgather_link=None, **options):
    """simulate() fed from a saved profile; compressor names a profiled compressor (None: dense).
    For a what-if, link replaces the measured links (both, unless allgather_link is given too)."""
    compression = None
    if compressor is not None:
        compression = compression_from_profile(profile.compressor(compressor), profile.model)
    return simulate(profile.model, workers, link or profile.allreduce,
                    allgather_link=allgather_link or (profile.allgather if link is None else None),
                    addest=profile.addest, compression=compression, **options)
