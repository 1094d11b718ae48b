"""compression=tfcomp.Auto(): the exchange measures, plans and applies a per-tensor
plan itself (the per-tensor strategies of "Hi-Speed DNN Training with Espresso"), and
keeps it only while it is faster than dense.

    auto = tfcomp.Auto()
    strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(compression=auto)
    ...
    model.fit(dataset, epochs=..., callbacks=[auto.callback()])

The training runs dense first. Its callback (tfcomp.auto.callback) times dense steps,
records a few with the Timeline, probes the link with the engine's collectives,
times every candidate's encode and decode on the model's gradients, averages all of
it over the workers and plans with tfcomp.analysis.model.planner. Predictions can be
10-40% off, so it then measures: dense, the plan and the single candidates predicted
fastest run in interleaved blocks of a few steps (tfcomp.auto.trials; each train function
traced once and kept, so a switch back costs no trace), and each is judged against the
dense block of the same round. The fastest is kept if it beat dense by margin (5%); else it
stays dense and says why.
With replan_every, a plan (or dense, where dense was kept) whose step time drifts from what
it measured at first is profiled and planned afresh; without it, the decision stands. With
audit_steps, the choice is checked right after it is made: the configuration kept, dense
and every single candidate run interleaved as the trials did, with fresh steps, and the history records how much slower the kept one was
than the fastest of them (its regret); then the kept one runs on.

The decision is saved with the optimizer's checkpoints (an AutoRecord), so a resumed
run takes it up without profiling again.
"""
import json

import tensorflow as tf
from absl import logging

from tfcomp.compressors.registry import resolve, short_repr
from tfcomp.compressors.cast import NoCompression
from tfcomp.auto.callback import AutoCallback
from tfcomp.auto.phases import PLANNED, PROFILING
from tfcomp.exchange.hooks import Controller
from tfcomp.plan.plan import Plan
from tfcomp.costs.network import Network

RECORD_ATTRIBUTE = "tfcomp_auto"  # where the record hangs on the optimizer (and in checkpoints)


def default_candidates():
    # The compressors that trained like dense at their defaults on every task and optimizer of
    # the convergence benchmark (benchmarks/results/convergence_defaults.md); TopK did too, and
    # sends what DGC sends with a slower selection.
    from tfcomp.compressors import ACPSGD, DGC, FP16  # pylint: disable=import-outside-toplevel
    return (FP16(), DGC(), ACPSGD())


class Auto(Controller):
    """compression= that plans itself. See the module doc.

    candidates: the compressors a tensor may get (classes or instances; default FP16,
        DGC and ACPSGD at their defaults, which trained like dense everywhere in the
        convergence benchmark); dense is always an option.
    network: None to plan for the link the workers measure, or a tfcomp.Network
        (bandwidth_gbps, latency_us) to plan for that link instead.
    profile_steps: dense steps timed for the baseline, and the Timeline records
        timeline_steps more after them.
    untimed_steps: steps left untimed after each switch of the train function
        (tracing, allocator warm-up), and at the start.
    check_steps: the steps each trial (dense included) is timed for in all (default
        profile_steps), split over its rounds.
    trials: how many compressed configurations are measured before one is kept: the
        plan, then the single candidates predicted fastest (each only if predicted
        faster than dense and not sent as one already measured is); dense is measured
        beside them. The fastest against dense is kept if it is margin faster, else dense.
    rounds: the trials run interleaved, a block of check_steps / rounds steps each per
        round (dense first, every other round in reverse), each switch back to a train
        function traced before followed by one untimed step; a trial's speed is the
        median over rounds of its block's median over dense's of the same round.
    margin: a compressed trial is kept only if it measured at least this fraction
        faster than dense (default 0.05). Where the best compressed trial is within
        the margin of dense, compression is a wash on this machine and dense is the
        safe choice (at most margin of regret).
    audit_steps: 0, or after each decision time the configuration kept, dense and every
        single candidate (a candidate on every tensor) this many steps each, in rounds
        interleaved as the trials are, and add an AUDIT entry to the history: each one's
        ms and speed against dense, and the kept one's regret over the fastest. The
        decision stands (the audit only measures); its compressor state starts from zero
        after the audit, as after any switch. A run resumed during its audit goes back
        to the kept configuration without finishing it.
    replan_every: None, or every this many steps compare the plan's step time (dense's,
        where dense was kept) with what it measured at first, and profile and plan again
        where it moved by more than drift (a fraction).
    probe_max_bytes, runs: the largest link-probe message per worker, and the timed
        runs of each probe and codec measurement (medians are kept).
    """

    def __init__(self, candidates=None, network=None, profile_steps=20, untimed_steps=5, timeline_steps=5,
                 check_steps=None, trials=3, rounds=4, margin=0.05, audit_steps=0, replan_every=None, drift=0.25,
                 probe_max_bytes=4 << 20, runs=5):
        candidates = default_candidates() if candidates is None else tuple(candidates)
        compressors = []
        for c in candidates:
            compressor = resolve(c)
            if isinstance(compressor, NoCompression):
                raise ValueError("Auto: dense is always an option; leave NoCompression out of candidates")
            compressors.append(compressor)
        if not compressors:
            raise ValueError("Auto: give at least one candidate compressor")
        self.candidates = {short_repr(c): c for c in compressors}
        if len(self.candidates) != len(compressors):
            raise ValueError(f"Auto: candidates must differ; got {[short_repr(c) for c in compressors]}")
        if network is not None and not isinstance(network, Network):
            raise ValueError(f"Auto: network must be None (measure the link) or a tfcomp.Network, got {network!r}")
        for name, value, least in (("profile_steps", profile_steps, 1), ("untimed_steps", untimed_steps, 1),
                                   ("timeline_steps", timeline_steps, 1), ("trials", trials, 1), ("runs", runs, 1)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"Auto: {name} must be an integer >= {least}, got {value!r}")
        check_steps = profile_steps if check_steps is None else check_steps
        if not isinstance(check_steps, int) or check_steps < 1:
            raise ValueError(f"Auto: check_steps must be an integer >= 1, got {check_steps!r}")
        if not isinstance(rounds, int) or not 1 <= rounds <= check_steps:
            raise ValueError(f"Auto: rounds must be an integer in [1, check_steps={check_steps}], got {rounds!r}")
        if not isinstance(audit_steps, int) or not (audit_steps == 0 or rounds <= audit_steps):
            raise ValueError(f"Auto: audit_steps must be 0 or an integer >= rounds={rounds}, got {audit_steps!r}")
        if replan_every is not None and (not isinstance(replan_every, int) or replan_every < 2):
            raise ValueError(f"Auto: replan_every must be None or an integer >= 2, got {replan_every!r}")
        if not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise ValueError(f"Auto: margin must be a fraction in [0, 1), got {margin!r}")
        if not 0 < drift:
            raise ValueError(f"Auto: drift must be > 0, got {drift!r}")
        self.network = network
        self.profile_steps, self.untimed_steps, self.timeline_steps = profile_steps, untimed_steps, timeline_steps
        self.check_steps, self.trials, self.replan_every, self.drift = check_steps, trials, replan_every, drift
        self.rounds, self.audit_steps = rounds, audit_steps
        self.margin = float(margin)
        self.probe_max_bytes, self.runs = probe_max_bytes, runs
        self.phase = PROFILING
        self.choices = {}  # tensor name -> candidate label, for the tensors the plan compresses
        self.decision = {}  # what was measured and predicted when the choice was made
        self.history = []  # one entry per decision, for logs and tests
        self.exchange = None  # the Exchange that runs this Auto's choices (set by the exchange)
        self.workers = None  # a Workers, set by the engine
        self.callback_attached = False

    def config(self):
        """What every worker must agree on."""
        return {"name": "Auto", "candidates": [c.config() for c in self.candidates.values()],
                "network": None if self.network is None else [self.network.bandwidth_gbps, self.network.latency_us],
                "profile_steps": self.profile_steps, "untimed_steps": self.untimed_steps,
                "timeline_steps": self.timeline_steps, "check_steps": self.check_steps, "trials": self.trials,
                "rounds": self.rounds, "audit_steps": self.audit_steps,
                "margin": self.margin, "replan_every": self.replan_every, "drift": self.drift}

    def __repr__(self):
        return f"Auto(candidates=[{', '.join(self.candidates)}], phase={self.phase!r})"

    def beats_dense(self, vs_dense):
        """Whether a compressed trial whose steps took vs_dense times dense's is kept."""
        return vs_dense <= 1 - self.margin

    def current(self):
        """What the exchange runs now: a tfcomp.Plan, or NoCompression (profiling or dense)."""
        if self.phase != PLANNED or not self.choices:
            return NoCompression()
        return Plan({name: self.candidates[label] for name, label in self.choices.items()})

    def callback(self):
        """The Keras callback that profiles, plans, switches and checks (model.fit)."""
        return AutoCallback(self)

    def check_can_trace(self):
        if not self.callback_attached:
            raise ValueError("tfcomp.Auto switches the train function itself, which it can only do under "
                             "Keras' model.fit with its callback: model.fit(..., callbacks=[auto.callback()]). "
                             "In a custom training loop, plan with `python -m tfcomp.analysis plan` and pass "
                             "the tfcomp.Plan it writes (tfcomp.Plan.load) instead.")

    def decide(self, phase, choices=None, record=True, **decision):
        """Hands the exchange what it now runs (the caller switches the train function) and,
        with record, adds the decision to the history (a trial's later blocks do not)."""
        unknown = sorted({label for label in (choices or {}).values()} - set(self.candidates))
        if unknown:
            raise ValueError(f"Auto: the decision names compressors that are not candidates: {unknown}")
        self.phase, self.choices, self.decision = phase, dict(choices or {}), decision
        if record:
            self.history.append({"phase": phase, "compressed": len(self.choices), **decision})
        if self.exchange is not None:
            self.exchange.use(self.current())

    def attach(self, owner):
        """Hangs an AutoRecord on owner (the optimizer) once, so that its checkpoints carry
        the decision and a restore hands it back before the first step is traced."""
        if owner is None or getattr(owner, RECORD_ATTRIBUTE, None) is not None:
            return
        from tfcomp.state.variables import attach  # pylint: disable=import-outside-toplevel
        with tf.init_scope():
            attach(owner, AutoRecord(self), RECORD_ATTRIBUTE)

    def restore(self, saved):
        """Takes up a decision a checkpoint carried (AutoRecord)."""
        if saved.get("candidates") != list(self.candidates):
            raise ValueError(f"the checkpoint's tfcomp.Auto chose among {saved.get('candidates')}; this run's Auto "
                             f"has candidates {list(self.candidates)}. Resume with the same candidates.")
        if saved["phase"] == PROFILING:
            return
        logging.info("tfcomp.Auto: resuming the checkpoint's decision (%s, %d tensors compressed)", saved["phase"],
                     len(saved["choices"]))
        self.decide(saved["phase"], saved["choices"], restored=True, **saved.get("decision", {}))

    def saved(self):
        return {"phase": self.phase, "choices": self.choices, "decision": self.decision,
                "candidates": list(self.candidates)}


class AutoRecord(tf.Module):
    """Auto's decision, saved as JSON text with the optimizer."""

    _KEY = "decision"

    def __init__(self, auto):
        super().__init__(name=RECORD_ATTRIBUTE)
        self._auto = auto

    def _serialize_to_tensors(self):
        if not tf.executing_eagerly():
            return {}  # traced into a SavedModel's save function; the eager save writes it
        return {self._KEY: tf.constant(json.dumps(self._auto.saved(), default=str))}

    def _restore_from_tensors(self, restored_tensors):
        if tf.executing_eagerly() and self._KEY in restored_tensors:
            self._auto.restore(json.loads(restored_tensors[self._KEY].numpy().decode()))
        return tf.no_op()

