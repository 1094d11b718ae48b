"""Espresso's per-tensor compression strategy ("Hi-Speed DNN Training with Espresso", Algorithms 1 and 2): for every
gradient, send it dense or compress it with one of the profiled compressors, chosen
by F(S), the iteration time the what-if simulator replays for the whole strategy S,
never by a tensor's communication or compression time alone.

Algorithm 1 (GPU decisions): gradients by size, largest first, equal sizes the one
ready later in the backward pass first (Espresso's "closer to the output layer",
Espresso's Algorithm 1); each takes the best of {its current choice, every option} with
the others fixed; after every decision the uncompressed gradients communicated
before the stream's last bubble are dropped, since compressing them only widens it.

Algorithm 2 (CPU offloading): the gradients Algorithm 1 compresses on the GPU, in
groups of equal size and compressor, each ordered earliest-ready first (Lemma 1: the
q to offload are a prefix); every combination of prefix lengths is replayed, which
is Theorem 1's prod(|G_i| + 1) evaluations.

The options are the profile's compressors: 'spec' measured on the CPU, 'spec@gpu'
on the GPU that trains the model. On CPU-only workers there is no device choice and
Algorithm 2 has nothing to do. Espresso's hierarchical and divisible communication
schemes are not options: tfcomp's engines run one flat collective per payload
(allreduce, or allgather for compressed payloads that do not sum).
"""
import copy
import dataclasses
import itertools
import math
import time
from typing import Dict, List, Optional, Tuple

from tfcomp.costs.network import collective_s
from tfcomp.analysis.model.fusion_policies import BucketFusion
from tfcomp.analysis.model.profile import Profile
from tfcomp.plan import file as plan_file
from tfcomp.analysis.model.simulator import (CollectiveCosts, Progress, TensorCompression, advance, bucket_loads,
                                       profile_network, replay, tensor_compression)

DENSE = None  # a gradient's choice when it is sent as it is
MAX_OFFLOAD_EVALUATIONS = 100_000  # beyond this, Algorithm 2 searches one group at a time
_TIE_S = 1e-12  # an option must beat the current choice by more than this


class Replay:
    """F(S) for strategies that differ from the current one in one gradient. The
    buckets hold per-stream sums and the streams' progress before each bucket is
    kept, so trying an option touches one bucket and replays from it on."""

    def __init__(self, model, network: CollectiveCosts, options: Dict[Optional[str], List[TensorCompression]], fusion,
                 *, overlap=True, start=DENSE):
        self.model, self.network, self.options, self.overlap = model, network, options, overlap
        self.choice: List[Optional[str]] = [start] * len(model.gradients)
        self.loads = bucket_loads(model, options[start], fusion)
        self.position = {i: b for b, load in enumerate(self.loads) for i in load.indices}
        self.evaluations = 0
        self._current = None  # (F, the progress before every bucket) of the current strategy

    def _replay(self, *, begin=0, reference=None, checkpoints=None, timeline=None):
        """F of the strategy in the buckets; with reference (the current strategy's
        checkpoints), one that differs from the current strategy in bucket `begin` only."""
        self.evaluations += 1
        at = copy.copy(reference[begin]) if reference is not None else Progress()
        sync = advance(self.model, self.loads, self.network, at, begin=begin, overlap=self.overlap,
                       timeline=timeline, checkpoints=checkpoints, reference=reference)
        if sync is None:  # the change was absorbed before the last bucket
            return self._current[0]
        return self.model.single_step_s + max(0.0, sync - self.model.backward_s)

    def sends_as_dense(self, i, option):
        """Whether option sends gradient i as dense does: it can only cost more then
        (the exchange sends tensors a compressor does not take dense)."""
        return option is not DENSE and self.options[option][i].transfers == self.options[DENSE][i].transfers

    def iteration_s(self):
        """F of the current strategy."""
        if self._current is None:
            checkpoints = []
            self._current = (self._replay(checkpoints=checkpoints), checkpoints)
        return self._current[0]

    def trial(self, i, option):
        """F with gradient i's choice replaced by option, the strategy left as it was."""
        self.iteration_s()
        b = self.position[i]
        load = self.loads[b]
        kept = load.snapshot()
        load.add(self.options[self.choice[i]][i], -1.0)
        load.add(self.options[option][i])
        try:
            return self._replay(begin=b, reference=self._current[1])
        finally:
            load.restore(kept)

    def set(self, i, option):
        self.set_all({i: option})

    def set_all(self, choices):
        for i, c in choices.items():
            if self.choice[i] != c:
                load = self.loads[self.position[i]]
                load.add(self.options[self.choice[i]][i], -1.0)
                load.add(self.options[c][i])
                self.choice[i] = c
                self._current = None

    def before_last_bubble(self):
        """Gradients whose bucket's collectives all end before the stream's last idle gap."""
        timeline = []
        self._replay(timeline=timeline)
        gaps = [k for k in range(1, len(timeline)) if timeline[k][0] > timeline[k - 1][1] + _TIE_S]
        if not gaps:
            return set()
        last = gaps[-1]
        buckets = {b for _, _, b in timeline[:last]} - {b for _, _, b in timeline[last:]}
        return {i for b in buckets for i in self.loads[b].indices}


@dataclasses.dataclass(frozen=True)
class StrategyPlan:
    """A planned strategy and what the simulator predicts for it and its alternatives."""
    model: str
    workers: int
    gradients: Tuple[Tuple[str, float, float], ...]  # (name, bytes, ready_s), backward order
    choices: Dict[str, Optional[str]]  # gradient name -> profile compressor name, None for dense
    iteration_s: float
    dense_s: float
    singles: Dict[str, float]  # each candidate compressor on every gradient
    upper_bound_s: float  # the fastest of these strategies with compression costing nothing
    savings: Dict[str, float]  # compressed gradient -> seconds lost if it went dense instead
    order: Tuple[str, ...]  # Algorithm 1's processing order
    removed: Tuple[str, ...]  # dropped before a decision (communicated before a bubble)
    start: str  # the strategy Algorithm 1 started from: no compression, or a single compressor
    evaluations: int  # Algorithm 1's replays
    offload_evaluations: int  # Algorithm 2's replays
    offload_groups: Tuple[int, ...]  # |G_i| of Algorithm 2's groups
    offload_note: str
    planning_s: float

    @property
    def best_single(self):
        """(name, seconds) of the fastest single compressor, dense included."""
        return min([("dense", self.dense_s), *self.singles.items()], key=lambda kv: kv[1])

    def to_dict(self):
        return {**plan_file.header(), **dataclasses.asdict(self),
                "gradients": [list(g) for g in self.gradients]}


def plan(profile: Profile, workers, candidates=None, *, link=None, allgather_link=None, fusion=None,
         overlap=True, offload=True, max_offload_evaluations=MAX_OFFLOAD_EVALUATIONS, burst_s=0.0):
    """Espresso's strategy for this profile on `workers` workers (links: the profile's
    measured ones unless given). candidates: profile compressor names (default: all).
    burst_s: the link's token bucket, in seconds at its bandwidth (CollectiveCosts.burst_s;
    0: a plain link)."""
    started = time.perf_counter()
    model = profile.model
    names = list(profile.compressors) if candidates is None else list(candidates)
    compressors = [profile.compressor(n) for n in names]
    if not compressors:
        raise ValueError("no compressor to plan with: the profile has none and none were named")
    network = dataclasses.replace(profile_network(profile, workers, link, allgather_link), burst_s=burst_s)
    fusion = fusion or BucketFusion()
    options = {DENSE: [TensorCompression.dense(g.nbytes) for g in model.gradients]}
    for c in compressors:
        options[c.name] = [tensor_compression(c, g) for g in model.gradients]
    gpu = [c.name for c in compressors if c.device == "gpu"]
    first = gpu or [c.name for c in compressors]  # Algorithm 1 decides among the GPU options where there are any

    order = sorted(range(len(model.gradients)), key=lambda i: (-model.gradients[i].nbytes,
                                                              -model.gradients[i].ready_s, i))
    singles = {n: _uniform(model, network, options, fusion, n, overlap) for n in names}
    dense = _uniform(model, network, options, fusion, DENSE, overlap)
    sim = Replay(model, network, options, fusion, overlap=overlap)
    dropped = _algorithm1(sim, order, [DENSE, *first])
    start = "no compression"
    evaluations = sim.evaluations
    # Espresso starts from no compression only. Where every tensor's collectives are
    # alike (one allgather instead of many), no single switch pays but all together
    # do: so the best single compressor is a second start, and the faster plan wins.
    best_single = min(first, key=singles.get)
    if singles[best_single] < sim.iteration_s() - _TIE_S:
        other = Replay(model, network, options, fusion, overlap=overlap, start=best_single)
        other_dropped = _algorithm1(other, order, [DENSE, *first])
        evaluations += other.evaluations
        if other.iteration_s() < sim.iteration_s() - _TIE_S:
            sim, dropped, start = other, other_dropped, best_single
    evaluations += 1  # the comparison just made
    note, groups, offload_evaluations = _offload(sim, compressors, offload, max_offload_evaluations)
    iteration = sim.iteration_s()
    choices = list(sim.choice)
    savings = {model.gradients[i].name: sim.trial(i, DENSE) - iteration
               for i, c in enumerate(choices) if c is not DENSE}
    upper = _upper_bound(model, network, options, fusion, overlap, choices)
    return StrategyPlan(
        model=model.name, workers=network.workers,
        gradients=tuple((g.name, g.nbytes, g.ready_s) for g in model.gradients),
        choices={g.name: c for g, c in zip(model.gradients, choices)},
        iteration_s=iteration, dense_s=dense, singles=singles, upper_bound_s=upper,
        savings=savings, order=tuple(model.gradients[i].name for i in order),
        removed=tuple(model.gradients[i].name for i in dropped), start=start, evaluations=evaluations,
        offload_evaluations=offload_evaluations, offload_groups=groups, offload_note=note,
        planning_s=time.perf_counter() - started)


def _algorithm1(sim, order, options):
    """Algorithm 1 on sim's strategy; the gradients dropped as communicated before a bubble."""
    removed, dropped = set(), []

    def remove():
        for i in sorted(sim.before_last_bubble()):
            if sim.choice[i] is DENSE and i not in removed:
                removed.add(i)
                dropped.append(i)

    remove()
    for i in order:
        if i in removed:
            continue
        current = best = sim.choice[i]
        best_s = sim.iteration_s()
        for option in options:
            if option == current or sim.sends_as_dense(i, option):
                continue
            seconds = sim.trial(i, option)
            if seconds < best_s - _TIE_S:
                best, best_s = option, seconds
        if best != current:  # an unchanged strategy has no new bubble
            sim.set(i, best)
            remove()
    return dropped


def offload_groups(model, choices, cpu_twin):
    """Algorithm 2's groups: the GPU-compressed gradients that have a CPU twin, by (size,
    compressor), each ordered farthest from the output layer first (earliest ready)."""
    groups = {}
    for i, c in enumerate(choices):
        if c is not DENSE and c in cpu_twin:
            groups.setdefault((model.gradients[i].nbytes, c), []).append(i)
    return [sorted(members, key=lambda i: (model.gradients[i].ready_s, i)) for _, members in sorted(groups.items())]


def _offload(sim, compressors, offload, max_evaluations):
    """Algorithm 2 on the strategy in sim; (note, group sizes, evaluations)."""
    if not any(c.device == "gpu" for c in compressors):
        return "every compressor was measured on the CPU: no GPU to offload from", (), 0
    cpu = {c.name for c in compressors if c.device == "cpu"}
    cpu_twin = {c.name: c.spec for c in compressors if c.device == "gpu" and c.spec in cpu}
    if not offload:
        return "CPU offloading not searched (offload=False)", (), 0
    groups = offload_groups(sim.model, sim.choice, cpu_twin)
    if not groups:
        return "no GPU-compressed gradient has its compressor measured on the CPU too", (), 0
    sizes = tuple(len(g) for g in groups)
    exhaustive = math.prod(s + 1 for s in sizes)
    on_gpu = list(sim.choice)

    def assignment(prefixes):
        """The first u gradients of each group compressed on the CPU, the rest on the GPU."""
        return {i: (cpu_twin[on_gpu[i]] if k < u else on_gpu[i]) for g, u in zip(groups, prefixes)
                for k, i in enumerate(g)}

    evaluated = []

    def offloaded(prefixes):
        evaluated.append(prefixes)
        sim.set_all(assignment(prefixes))
        return sim.iteration_s()

    if exhaustive <= max_evaluations:
        best = min(itertools.product(*(range(s + 1) for s in sizes)), key=offloaded)
        note = f"Algorithm 2: {exhaustive} offloading combinations replayed (Theorem 1)"
    else:
        best, best_s = [0] * len(groups), offloaded([0] * len(groups))
        improved = True
        while improved:
            improved = False
            for k, size in enumerate(sizes):
                for u in range(size + 1):
                    trial = best[:k] + [u] + best[k + 1:]
                    seconds = offloaded(trial)
                    if seconds < best_s - _TIE_S:
                        best, best_s, improved = trial, seconds, True
        note = (f"Algorithm 2: {exhaustive} combinations are too many to replay; searched one group "
                "at a time instead")
    sim.set_all(assignment(best))
    return note, sizes, len(evaluated)


def _uniform(model, network, options, fusion, option, overlap):
    """F with every gradient given the same option."""
    return replay(model, bucket_loads(model, options[option], fusion), network, overlap=overlap).iteration_s


def _upper_bound(model, network, options, fusion, overlap, planned):
    """Espresso's upper bound (compression that costs nothing and takes no compute time):
    the fastest, with free compression, of dense, each single compressor, the planned
    strategy and the strategy that sends every gradient its fewest bytes."""
    def wire_s(tc):
        return sum(collective_s(t.collective, t.nbytes, network.workers, network.link(t.collective))
                   for t in tc.transfers)

    fewest = [min(options, key=lambda o: wire_s(options[o][i])) for i in range(len(model.gradients))]
    strategies = [[o] * len(model.gradients) for o in options] + [list(planned), fewest]
    best = math.inf
    for strategy in strategies:
        loads = bucket_loads(model, [options[o][i] for i, o in enumerate(strategy)], fusion)
        for load in loads:
            load.free()
        best = min(best, replay(model, loads, network, overlap=overlap).iteration_s)
    return best
