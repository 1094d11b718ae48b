"""Espresso's per-tensor compression strategy ("Hi-Speed DNN Training with Espresso", Algorithms 1 and 2): for every
gradient, send it dense or compress it with one of the profiled compressors, chosen
by F(S), the iteration time the what-if simulator replays for the whole strategy S,
never by a tensor's communication or compression time alone.

Algorithm 1 (decisions): gradients by size, largest first, equal sizes the one ready
later in the backward pass first (Espresso's "closer to the output layer", Espresso's
Algorithm 1); each takes the best of {its current choice, every option} with the
others fixed; after every decision the uncompressed gradients communicated before
the stream's last bubble are dropped, since compressing them only widens it. The
options are every candidate on every device it was measured on: Espresso decides
among the GPU options here and leaves the CPU to Algorithm 2, which offloads only
what is already compressed, so a profile measured on both devices could plan
slower than its CPU options alone. It starts from no compression (Espresso's start)
and again from the fastest single option, on either device, where that beats the
first plan: where every tensor's collectives are alike, no single switch pays but
all together do. A trial stops as soon as the streams show it cannot beat the
gradient's best option so far (each stream's time only grows).

Algorithm 2 (CPU offloading): the gradients the plan compresses on the GPU whose
compressor was measured on the CPU too, in groups of equal size and compressor, each
ordered earliest-ready first (Lemma 1: the q to offload are a prefix). Theorem 1
counts prod(|G_i| + 1) prefix combinations: where that count is at most
max_offload_evaluations every combination is replayed (in Gray-code order, so each
differs from the one before in one gradient and replays from that gradient's bucket
on); beyond it, each group's prefix length is searched with the others fixed, group
after group, for at most offload_passes passes: at most offload_passes * sum(|G_i| + 1)
replays, where the exhaustive search grows as the product.

The planner returns the fastest of its strategy, dense and every single option (each
candidate on each device), all replayed alike, and says which won (StrategyPlan.winner):
Algorithms 1 and 2 are a local search and can end slower than a single option. It
counts every replay it makes (StrategyPlan.replays) against a bound computed from
the profile before it starts (StrategyPlan.replay_bound): a replay costs O(buckets).

The options are the profile's compressors: 'spec' measured on the CPU, 'spec@gpu'
on the GPU that trains the model. On CPU-only workers there is no device choice and
Algorithm 2 has nothing to do. Espresso's hierarchical and divisible communication
schemes are not options: tfcomp's engines run one flat collective per payload
(allreduce, or allgather for compressed payloads that do not sum).
"""
import dataclasses
import math
import time
from typing import Dict, List, Optional, Tuple

from tfcomp.costs.network import collective_s
from tfcomp.analysis.model.fusion_policies import BucketFusion
from tfcomp.analysis.model.profile import Profile
from tfcomp.plan import file as plan_file
from tfcomp.analysis.model.simulator import (CollectiveCosts, Progress, TensorCompression, advance, bucket_loads,
                                             bucket_row, profile_network, replay,
                                             tensor_compression, trial_sync)

DENSE = None  # a gradient's choice when it is sent as it is
MAX_OFFLOAD_EVALUATIONS = 512  # Theorem 1's count up to which Algorithm 2 replays every combination
OFFLOAD_PASSES = 2  # beyond it, passes of the group-at-a-time search
STARTS = 2  # Algorithm 1's starting points: no compression, the fastest single option
PLAN = "plan"  # StrategyPlan.winner when Algorithms 1 and 2's strategy is the fastest
_TIE_S = 1e-12  # an option must beat the current choice by more than this


class Replay:
    """F(S) for strategies that differ from the current one in one gradient. The
    buckets hold per-stream sums and the streams' progress before each bucket is
    kept, so trying an option touches one bucket and replays from it on; so does
    changing one gradient's choice."""

    def __init__(self, model, network: CollectiveCosts, options: Dict[Optional[str], List[TensorCompression]], fusion,
                 *, overlap=True, start=DENSE):
        self.model, self.network, self.options, self.overlap = model, network, options, overlap
        self.choice: List[Optional[str]] = [start] * len(model.gradients)
        self.loads = bucket_loads(model, options[start], fusion)
        self.position = {i: b for b, load in enumerate(self.loads) for i in load.indices}
        self.replays = 0  # every replay this made, whole or from a bucket on
        # The current strategy: F, the progress before every bucket, the stream's collective
        # calls (start, end, bucket), and what trial_sync reads (of every bucket, and of the
        # progress before each); None until replayed.
        self._current = None
        self._rows = self._streams = None
        # (bucket, a member's transfers, what replaces them) -> the bucket's collectives then, while unchanged
        self._priced = {}

    def _replay(self, *, begin=0, at=None, reference=None, checkpoints=None, timeline=None):
        """F of the strategy in the buckets, replayed from bucket `begin` on from `at`
        (None: from the start); with reference (the current strategy's checkpoints), one
        that differs from the current strategy in bucket `begin` only, and None once the
        streams stand where the reference's stood (the rest would replay alike)."""
        self.replays += 1
        sync = advance(self.model, self.loads, self.network, Progress() if at is None else at, begin=begin,
                       overlap=self.overlap, timeline=timeline, checkpoints=checkpoints, reference=reference)
        if sync is None:
            return None
        return self.model.single_step_s + max(0.0, sync - self.model.backward_s)

    def sends_as_dense(self, i, option):
        """Whether option sends gradient i as dense does: it can only cost more then
        (the exchange sends tensors a compressor does not take dense)."""
        if option is DENSE:
            return False
        mine, dense = self.options[option][i].transfers, self.options[DENSE][i].transfers
        return mine is dense or mine == dense

    def iteration_s(self):
        """F of the current strategy."""
        if self._current is None:
            checkpoints, timeline = [], []
            self._keep(self._replay(checkpoints=checkpoints, timeline=timeline), checkpoints, timeline)
        return self._current[0]

    def _keep(self, seconds, checkpoints, timeline, changed=None):
        """The current strategy's replay; changed: the buckets that changed since the last (None: all)."""
        self._current = (seconds, checkpoints, timeline)
        if changed is None or self._rows is None:
            self._rows = [bucket_row(load, self.network) for load in self.loads]
        else:
            for b in changed:
                self._rows[b] = bucket_row(self.loads[b], self.network)
        self._streams = [(c.stream_free, c.encode_free, c.decode_free, c.shift, c.compute_decode)
                         for c in checkpoints]

    def trial(self, i, option, beat=None):
        """F with gradient i's choice replaced by option, the strategy left as it was; with
        beat, a number no larger than F instead wherever F >= beat - _TIE_S."""
        current = self._current[0] if self._current is not None else self.iteration_s()
        b = self.position[i]
        load = self.loads[b]
        checkpoints = self._current[1]
        if self.network.burst_s:  # the token bucket's replay: change the bucket, replay, put it back
            kept = load.snapshot()
            load.add(self.options[self.choice[i]][i], -1.0)
            load.add(self.options[option][i])
            try:
                seconds = self._replay(begin=b, at=checkpoints[b].copy(), reference=checkpoints)
                return current if seconds is None else seconds
            finally:
                load.restore(kept)
        old, new = self.options[self.choice[i]][i], self.options[option][i]
        encode_s, decode_s = load.encode_s, load.decode_s
        compute_encode_s, compute_decode_s = load.compute_encode_s, load.compute_decode_s
        if old.on_compute_stream:  # as BucketLoad.add(old, -1.0) then add(new) would sum them
            compute_encode_s += -1.0 * old.encode_s
            compute_decode_s += -1.0 * old.decode_s
        else:
            encode_s += -1.0 * old.encode_s
            decode_s += -1.0 * old.decode_s
        if new.on_compute_stream:
            compute_encode_s += new.encode_s
            compute_decode_s += new.decode_s
        else:
            encode_s += new.encode_s
            decode_s += new.decode_s
        # an option's twin on the other device sends alike, and so do gradients of a size (_compressions)
        key = (b, id(old.transfers), id(new.transfers))
        priced = self._priced.get(key)
        if priced is None:
            priced = self._priced[key] = load.collectives_with(self.network, old, new)
        self.replays += 1
        cutoff = math.inf if beat is None else beat - _TIE_S - self.model.single_step_s + self.model.backward_s
        sync = trial_sync(self.model, self._rows, self.network, checkpoints[b], b,
                          (load.ready_s, encode_s, decode_s, compute_encode_s, compute_decode_s, priced),
                          self._streams, self.overlap, cutoff)
        return current if sync is None else self.model.single_step_s + max(0.0, sync - self.model.backward_s)

    def set(self, i, option):
        self.set_all({i: option})

    def set_all(self, choices):
        """Changes the current strategy; replays it from the first bucket that changed on."""
        changed = set()
        for i, c in choices.items():
            if self.choice[i] != c:
                load = self.loads[self.position[i]]
                load.add(self.options[self.choice[i]][i], -1.0)
                load.add(self.options[c][i])
                self.choice[i] = c
                changed.add(self.position[i])
        if changed:
            self._priced.clear()
        if not changed or self._current is None:
            if changed:
                self._current = None
            return
        begin = min(changed)
        before, old, old_timeline = self._current
        checkpoints, timeline = old[:begin], [call for call in old_timeline if call[2] < begin]
        seconds = self._replay(begin=begin, at=old[begin].copy(), checkpoints=checkpoints, timeline=timeline,
                               reference=old if len(changed) == 1 else None)
        if seconds is None:  # the streams came back to where they stood: the rest is as it was
            resumed = len(checkpoints)
            checkpoints += old[resumed:]
            timeline += [call for call in old_timeline if call[2] >= resumed]
            seconds = before
        self._keep(seconds, checkpoints, timeline, changed)

    def before_last_bubble(self):
        """Gradients whose bucket's collectives all end before the stream's last idle gap."""
        self.iteration_s()
        timeline = self._current[2]
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
    iteration_s: float  # the returned strategy's: never above dense_s or any of singles
    dense_s: float
    singles: Dict[str, float]  # each candidate (on each device it was measured on) on every gradient
    upper_bound_s: float  # the fastest of these strategies with compression costing nothing
    savings: Dict[str, float]  # compressed gradient -> seconds lost if it went dense instead
    order: Tuple[str, ...]  # Algorithm 1's processing order
    removed: Tuple[str, ...]  # dropped before a decision (communicated before a bubble)
    start: str  # the strategy Algorithm 1 started from: no compression, or a single option
    evaluations: int  # Algorithm 1's replays
    offload_evaluations: int  # the offloading combinations Algorithm 2 replayed
    offload_groups: Tuple[int, ...]  # |G_i| of Algorithm 2's groups
    offload_note: str
    planning_s: float
    winner: str = PLAN  # PLAN (Algorithms 1 and 2's strategy), "dense" or the single option returned
    algorithms_s: float = math.nan  # F of Algorithms 1 and 2's strategy, whether it won or not
    planned: Optional[Dict[str, Optional[str]]] = None  # Algorithms 1 and 2's strategy, as choices
    replays: int = 0  # every replay made, Algorithms 1 and 2 and the comparisons
    replay_bound: int = 0  # the most replays plan() makes for this profile and these options

    @property
    def best_single(self):
        """(name, seconds) of the fastest single compressor, dense included."""
        return min([("dense", self.dense_s), *self.singles.items()], key=lambda kv: kv[1])

    def to_dict(self):
        return {**plan_file.header(), **dataclasses.asdict(self),
                "gradients": [list(g) for g in self.gradients]}


def plan(profile: Profile, workers, candidates=None, *, link=None, allgather_link=None, fusion=None,
         overlap=True, offload=True, max_offload_evaluations=MAX_OFFLOAD_EVALUATIONS, offload_passes=OFFLOAD_PASSES,
         burst_s=0.0):
    """Espresso's strategy for this profile on `workers` workers (links: the profile's
    measured ones unless given), or the single option or dense where one of them
    replays faster. candidates: profile compressor names (default: all). burst_s:
    the link's token bucket, in seconds at its bandwidth (CollectiveCosts.burst_s;
    0: a plain link). max_offload_evaluations: Theorem 1's count up to which
    Algorithm 2 replays every combination; offload_passes: the passes of its
    group-at-a-time search beyond."""
    started = time.perf_counter()
    model = profile.model
    names = list(profile.compressors) if candidates is None else list(candidates)
    compressors = [profile.compressor(n) for n in names]
    if not compressors:
        raise ValueError("no compressor to plan with: the profile has none and none were named")
    network = dataclasses.replace(profile_network(profile, workers, link, allgather_link), burst_s=burst_s)
    fusion = _Dispatched((fusion or BucketFusion()).dispatch(model.gradients))  # the buckets, found once
    transfers = {}  # equal transfers made one object (Replay.trial's memo)
    options = {DENSE: [_canonical(TensorCompression.dense(g.nbytes), transfers) for g in model.gradients]}
    for c in compressors:
        options[c.name] = _compressions(c, model.gradients, network.workers, transfers)
    moves = [DENSE, *names]  # every candidate on every device it was measured on
    count = len(model.gradients)

    order = sorted(range(count), key=lambda i: (-model.gradients[i].nbytes, -model.gradients[i].ready_s, i))
    singles = {n: _uniform(model, network, options, fusion, n, overlap) for n in names}
    dense = _uniform(model, network, options, fusion, DENSE, overlap)
    replays = len(names) + 1
    sim = Replay(model, network, options, fusion, overlap=overlap)
    dropped = _algorithm1(sim, order, moves)
    start = "no compression"
    evaluations = sim.replays
    best_single = min(names, key=singles.get)
    if singles[best_single] < sim.iteration_s() - _TIE_S:
        other = Replay(model, network, options, fusion, overlap=overlap, start=best_single)
        other_dropped = _algorithm1(other, order, moves)
        evaluations += other.replays
        if other.iteration_s() < sim.iteration_s() - _TIE_S:
            sim, dropped, start = other, other_dropped, best_single
    mark = sim.replays
    note, groups, offload_evaluations, offload_bound = _offload(sim, compressors, offload, max_offload_evaluations,
                                                                offload_passes)
    replays += evaluations + sim.replays - mark
    planned = list(sim.choice)
    algorithms_s = _strategy_s(model, network, options, fusion, planned, overlap)
    replays += 1
    # The fastest of the plan, dense and every single option, all replayed alike (ties: the plan, then dense).
    contenders = [(PLAN, algorithms_s, planned), ("dense", dense, [DENSE] * count),
                  *((n, singles[n], [n] * count) for n in names)]
    winner, iteration, choices = min(contenders, key=lambda c: c[1])
    final, mark = sim, sim.replays
    if winner != PLAN:
        final, mark = Replay(model, network, options, fusion, overlap=overlap, start=choices[0]), 0
    base = final.iteration_s()
    savings = {model.gradients[i].name: final.trial(i, DENSE) - base for i, c in enumerate(choices) if c is not DENSE}
    replays += final.replays - mark
    upper = _upper_bound(model, network, options, fusion, overlap, choices)
    replays += len(options) + 2
    return StrategyPlan(
        model=model.name, workers=network.workers,
        gradients=tuple((g.name, g.nbytes, g.ready_s) for g in model.gradients),
        choices={g.name: c for g, c in zip(model.gradients, choices)},
        iteration_s=iteration, dense_s=dense, singles=singles, upper_bound_s=upper,
        savings=savings, order=tuple(model.gradients[i].name for i in order),
        removed=tuple(model.gradients[i].name for i in dropped), start=start, evaluations=evaluations,
        offload_evaluations=offload_evaluations, offload_groups=groups, offload_note=note,
        planning_s=time.perf_counter() - started, winner=winner, algorithms_s=algorithms_s,
        planned={g.name: c for g, c in zip(model.gradients, planned)}, replays=replays,
        replay_bound=replay_bound(count, len(moves), offload_bound))


def replay_bound(gradients, options, offload_replays):
    """The most replays plan() makes with this many gradients and options (dense
    included) and Algorithm 2's bound (_offload): the singles and dense; per start
    of Algorithm 1, its first replay, then per gradient a trial of every other
    option and a change; the search's strategy replayed whole; the winner's first
    replay and a trial per compressed gradient (savings); the upper bound's
    strategies."""
    algorithm1 = STARTS * (1 + gradients * options)
    return options + algorithm1 + offload_replays + 1 + 1 + gradients + options + 2


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
            seconds = sim.trial(i, option, beat=best_s)
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


def gray_code(sizes):
    """The prefix-length combinations of groups of these sizes, each length 0..size, in
    reflected mixed-radix Gray-code order after all zeros: (group, its new length) per
    step, every step changing one group's length by one."""
    length, step = [0] * len(sizes), [1] * len(sizes)
    for _ in range(math.prod(s + 1 for s in sizes) - 1):
        k = 0
        while not 0 <= length[k] + step[k] <= sizes[k]:
            step[k] = -step[k]
            k += 1
        length[k] += step[k]
        yield k, length[k]


def _offload(sim, compressors, offload, max_evaluations, passes):
    """Algorithm 2 on the strategy in sim; (note, group sizes, combinations evaluated,
    the most replays it could have made)."""
    if not any(c.device == "gpu" for c in compressors):
        return "every compressor was measured on the CPU: no GPU to offload from", (), 0, 0
    cpu = {c.name for c in compressors if c.device == "cpu"}
    cpu_twin = {c.name: c.spec for c in compressors if c.device == "gpu" and c.spec in cpu}
    if not offload:
        return "CPU offloading not searched (offload=False)", (), 0, 0
    groups = offload_groups(sim.model, sim.choice, cpu_twin)
    if not groups:
        return "no GPU-compressed gradient has its compressor measured on the CPU too", (), 0, 0
    sizes = tuple(len(g) for g in groups)
    combinations = math.prod(s + 1 for s in sizes)
    on_gpu = list(sim.choice)
    lengths = [0] * len(groups)  # each group's prefix on the CPU, as sim now holds it

    def move(k, length):
        """Group k's first `length` gradients on the CPU, the rest on the GPU: one replay."""
        g = groups[k]
        sim.set_all({g[j]: cpu_twin[on_gpu[g[j]]] if j < length else on_gpu[g[j]]
                     for j in range(min(length, lengths[k]), max(length, lengths[k]))})
        lengths[k] = length
        return sim.iteration_s()

    best, best_s = [0] * len(groups), sim.iteration_s()
    evaluated = 1
    if combinations <= max_evaluations:
        for k, length in gray_code(sizes):
            seconds = move(k, length)
            evaluated += 1
            if seconds < best_s - _TIE_S:
                best, best_s = list(lengths), seconds
        note = f"Algorithm 2: {combinations} offloading combinations replayed (Theorem 1)"
        bound = combinations + len(groups)
    else:
        for _ in range(passes):
            improved = False
            for k, size in enumerate(sizes):  # every other group at its best length
                here = best[k]
                for length in [*range(here - 1, -1, -1), *range(here + 1, size + 1)]:
                    seconds = move(k, length)  # from 0 to here + 1: one replay too
                    evaluated += 1
                    if seconds < best_s - _TIE_S:
                        best, best_s, improved = list(lengths), seconds, True
                move(k, best[k])
            if not improved:
                break
        note = (f"Algorithm 2: {combinations} combinations (Theorem 1) are too many to replay; searched each "
                f"group's prefix with the others fixed, {evaluated} combinations")
        bound = passes * sum(s + 1 for s in sizes) + len(groups)
    for k, length in enumerate(best):
        if lengths[k] != length:
            move(k, length)
    return note, sizes, evaluated, bound


@dataclasses.dataclass(frozen=True)
class _Dispatched:
    """A fusion policy whose dispatch (the same for every strategy: it reads sizes and
    ready times only) was computed once."""
    buckets: list

    def dispatch(self, gradients):
        del gradients
        return self.buckets


def _compressions(compressor, gradients, workers, transfers):
    """[tensor_compression(compressor, g, workers) for g in gradients], each of a size and
    payload computed once (a model's gradients come in few sizes), equal transfers made
    one object through `transfers`, {transfers: themselves} (Replay.trial's memo)."""
    out, seen = [], {}
    for g in gradients:
        key = (g.nbytes, compressor.payloads[g.name])
        if key not in seen:
            seen[key] = _canonical(tensor_compression(compressor, g, workers), transfers)
        out.append(seen[key])
    return out


def _canonical(tc, transfers):
    """tc with its transfers the one object of `transfers`, {transfers: themselves}, equal to them."""
    known = transfers.setdefault(tc.transfers, tc.transfers)
    return tc if known is tc.transfers else dataclasses.replace(tc, transfers=known)


def _strategy_s(model, network, options, fusion, strategy, overlap):
    """F of a strategy, replayed whole as the singles and simulate() replay it."""
    return replay(model, bucket_loads(model, [options[o][i] for i, o in enumerate(strategy)], fusion), network,
                  overlap=overlap).iteration_s


def _uniform(model, network, options, fusion, option, overlap):
    """F with every gradient given the same option."""
    return replay(model, bucket_loads(model, options[option], fusion), network, overlap=overlap).iteration_s


def _upper_bound(model, network, options, fusion, overlap, planned):
    """Espresso's upper bound (compression that costs nothing and takes no compute time):
    the fastest, with free compression, of dense, each single compressor, the planned
    strategy and the strategy that sends every gradient its fewest bytes."""
    priced = {}

    def wire_s(tc):
        if tc.transfers not in priced:
            priced[tc.transfers] = sum(collective_s(t.collective, t.nbytes, network.workers,
                                                    network.link(t.collective)) for t in tc.transfers)
        return priced[tc.transfers]

    fewest = [min(options, key=lambda o: wire_s(options[o][i])) for i in range(len(model.gradients))]
    strategies = [[o] * len(model.gradients) for o in options] + [list(planned), fewest]
    best = math.inf
    for strategy in strategies:
        loads = bucket_loads(model, [options[o][i] for i, o in enumerate(strategy)], fusion)
        for load in loads:
            load.free()
        best = min(best, replay(model, loads, network, overlap=overlap).iteration_s)
    return best
