"""tfcomp.Auto's Keras callback: profile dense steps, plan, switch, check (tfcomp.auto).

Every worker runs the same steps and takes each decision from numbers averaged over
the workers, so all switch at the same step to the same plan.
"""
import json
import statistics
import tempfile
import time
import zlib

import tensorflow as tf
from absl import logging

from tfcomp import keras_in_use, optimizers
from tfcomp.auto import DENSE, PLANNED, PROFILING


class AutoCallback(tf.keras.callbacks.Callback):
    """Auto.callback(): pass it to model.fit."""

    def __init__(self, auto):
        super().__init__()
        self.auto = auto
        auto.callback_attached = True
        self._tmp = tempfile.TemporaryDirectory(prefix="tfcomp-auto-")
        self._cycle = None  # the profiling in progress: {"n", "dense", "timeline"}
        self._check = None  # the check of a new plan in progress: {"n", "times"}
        self._window = []  # the kept plan's recent step times (replan_every)
        self._start = True  # what to do is decided at the first step, after every restore
        self._began = None  # when this step began (each step is timed from batch begin to end)
        self._codecs = {}  # candidate label -> CompressorProfile, measured once (measure.profile fills it)
        self._decision = {}  # what profiling measured and predicted, for every trial's record
        self._gradients = []  # (name, shape, dtype) in the profile's order
        self._pending = []  # trials still to measure: (label, choices, predicted seconds)
        self._measured = []  # trials measured: {"label", "choices", "ms", "predicted_ms"}

    # ---- Keras

    def on_train_begin(self, logs=None):
        auto = self.auto
        if auto.exchange is None or auto.workers is None:
            raise ValueError("this tfcomp.Auto is not the compression= of a tfcomp strategy or Horovod optimizer: "
                             "pass it there, and its callback() to model.fit")
        auto.attach(self.model.optimizer)  # a BackupAndRestore restore fills the record before the first step
        self._start = True

    def on_train_batch_begin(self, batch, logs=None):
        if self._start:
            self._start = False
            if self.auto.phase == PROFILING and self._cycle is None:
                self._begin_cycle()
            elif self.auto.phase == PLANNED and "plan_ms" not in self.auto.decision and self._check is None:
                self._check = {"n": 0, "times": []}  # resumed before the plan was checked
        if self._cycle is not None:
            self._cycle["timeline"].on_train_batch_begin(batch)
        self._began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        duration = None if self._began is None else time.perf_counter() - self._began
        self._began = None
        auto = self.auto
        if self._cycle is not None:
            cycle = self._cycle
            cycle["timeline"].on_train_batch_end(batch)
            cycle["n"] += 1
            if auto.warmup_steps < cycle["n"] <= auto.warmup_steps + auto.profile_steps and duration is not None:
                cycle["dense"].append(duration)
            if cycle["n"] == auto.warmup_steps + auto.profile_steps + auto.timeline_steps:
                self._plan()
        elif self._check is not None:
            self._check["n"] += 1
            if self._check["n"] > auto.warmup_steps and duration is not None:
                self._check["times"].append(duration)
            if len(self._check["times"]) == auto.check_steps:
                self._finish_check()
        elif auto.phase == PLANNED and auto.replan_every and duration is not None:
            self._window.append(duration)
            if len(self._window) == auto.replan_every:
                self._watch_drift()

    def on_train_end(self, logs=None):
        if self._cycle is not None:  # profiling stopped with the fit; start it again at the next
            self._cycle["timeline"].on_train_end()
            self._cycle = None
        self._start = True

    # ---- profiling and planning

    def _begin_cycle(self):
        from tfcomp.callbacks import Timeline  # pylint: disable=import-outside-toplevel
        auto = self.auto
        timeline = Timeline(self._tmp.name, start_step=auto.warmup_steps + auto.profile_steps,
                            num_steps=auto.timeline_steps, worker=f"worker{auto.workers.rank}")
        timeline.set_model(self.model)
        timeline.on_train_begin()
        self._cycle = {"n": 0, "dense": [], "timeline": timeline}

    def _retrace(self):
        """The train function traced anew with what the exchange now runs, from zeroed state.

        The checkpoint's record of each tensor's compressor changes now, not at the next trace:
        a decision taken on an epoch's last step is saved by that epoch's backup, and a run
        resumed from it must find its state recorded for the choices it restores (the state
        is zero either way)."""
        # pylint: disable=import-outside-toplevel
        from tfcomp.plan_record import RECORD_ATTRIBUTE
        from tfcomp.state import STATE_ATTRIBUTE
        state = getattr(self.model.optimizer, STATE_ATTRIBUTE, None)
        if state is not None:
            state.zero()
        record = getattr(self.model.optimizer, RECORD_ATTRIBUTE, None)
        if record is not None and self._gradients:
            exchange = self.auto.exchange
            exchange.bind_optimizer(self.model.optimizer)  # momentum="auto" resolved, as the trace will
            record.record(exchange.choices([(s, d) for _, s, d in self._gradients],
                                           [n for n, _, _ in self._gradients]))
        self.model.train_function = self.model.make_train_function(force=True)

    def _plan(self):
        # pylint: disable=import-outside-toplevel
        from tfcomp.analysis import from_timeline, measure, planner
        auto, workers = self.auto, self.auto.workers
        cycle, self._cycle = self._cycle, None
        cycle["timeline"].on_train_end()  # writes the trace and puts Keras' train function back
        started = time.perf_counter()
        model = from_timeline.model_profile(str(cycle["timeline"].paths()["trace"])).ready_at_backward_end()
        variables = {keras_in_use.tensor_name(v): v for v in self.model.trainable_variables}
        missing = [g.name for g in model.gradients if g.name not in variables]
        if missing:
            raise RuntimeError(f"tfcomp.Auto: the Timeline recorded gradients of no trainable variable: {missing[:3]}")
        gradients = [(g.name, tuple(variables[g.name].shape), variables[g.name].dtype) for g in model.gradients]
        links, half_extra = self._links()
        # Timed as the plan will run them: momentum="auto" resolved against this optimizer.
        candidates = {label: optimizers.resolve(c, self.model.optimizer, advise=False)
                      for label, c in auto.candidates.items()}
        profile = measure.profile(model, gradients, links, candidates, workers.num_workers, auto.runs,
                                  measured=self._codecs, half_extra=half_extra).averaged(workers.mean,
                                                                                         order=list(variables))
        dense_s = workers.mean([statistics.median(cycle["dense"])])[0]
        result = planner.plan(profile, workers.num_workers)
        choices = {name: label for name, label in result.choices.items() if label is not None}
        agreed = workers.gather_int(zlib.crc32(json.dumps(sorted(choices.items())).encode()))
        if len(set(agreed)) != 1:
            raise RuntimeError(f"tfcomp.Auto: the workers planned differently from averaged inputs (plan "
                               f"fingerprints {agreed}); this is a defect in tfcomp, please report it")
        decision = {"step": int(self.model.optimizer.iterations.numpy()), "dense_ms": 1e3 * dense_s,
                    "predicted_ms": 1e3 * result.iteration_s, "predicted_dense_ms": 1e3 * result.dense_s,
                    "profiling_s": time.perf_counter() - started, "traces": auto.exchange.traces,
                    "link_gbps": 8e-9 * profile.allreduce.bandwidth_bytes_per_s}
        trials = self._trials(result, gradients)
        if trials:  # dense again, in the conditions of the trials: the reference they must beat
            trials.append((DENSE, {}, result.dense_s))
        if not trials:
            auto.decide(DENSE, reason="the planner found nothing predicted faster than dense",
                        settled_step=decision["step"], **decision)
            logging.info("tfcomp.Auto: staying dense: nothing is predicted faster (dense %.1f ms/step measured)",
                         1e3 * dense_s)
            return
        self._gradients = gradients
        self._pending = trials
        self._measured = []
        logging.info("tfcomp.Auto at step %d: dense measured %.1f ms/step (predicted %.1f); measuring %s, "
                     "%d steps each", decision["step"], decision["dense_ms"], decision["predicted_dense_ms"],
                     ", ".join(f"{label} (predicted {1e3 * s:.1f} ms)" for label, _, s in trials), auto.check_steps)
        self._decision = decision
        self._next_trial()

    def _trials(self, result, gradients):
        """[(label, choices, predicted seconds)] to measure, fastest predicted first: the plan
        and the single candidates predicted faster than dense, each only once as the exchange
        would run it, at most auto.trials of them."""
        options = [("plan", {n: c for n, c in result.choices.items() if c is not None}, result.iteration_s)]
        options += sorted(((label, {name: label for name, _, _ in gradients}, seconds)
                           for label, seconds in result.singles.items()), key=lambda option: option[2])
        trials, seen = [], set()
        for label, choices, seconds in options:
            runs = self._runs_as(choices, gradients)
            if seconds >= result.dense_s or not choices or runs in seen:
                continue
            seen.add(runs)
            trials.append((label, choices, seconds))
        return trials[:self.auto.trials]

    def _runs_as(self, choices, gradients):
        """What the exchange would send each tensor with, under these choices (as text)."""
        from tfcomp.exchange import Exchange  # pylint: disable=import-outside-toplevel
        from tfcomp.plan import Plan  # pylint: disable=import-outside-toplevel
        plan = Plan({name: self.auto.candidates[label] for name, label in choices.items()})
        exchange = Exchange(plan, min_compress_elements=self.auto.exchange.min_compress_elements)
        return json.dumps(exchange.choices([(s, d) for _, s, d in gradients], [n for n, _, _ in gradients]),
                          sort_keys=True, default=str)

    def _next_trial(self):
        auto = self.auto
        label, choices, seconds = self._pending.pop(0)
        auto.decide(PLANNED, choices, trial=label, **dict(self._decision, predicted_ms=1e3 * seconds))
        self._retrace()
        self._check = {"n": 0, "times": [], "label": label, "predicted_ms": 1e3 * seconds}
        logging.info("tfcomp.Auto: measuring %s (%d tensors compressed) over %d steps%s", label, len(choices),
                     auto.check_steps, "\n" + self._table(self._gradients) if choices else "")

    def _table(self, gradients):
        exchange = self.auto.exchange
        return exchange.configured.table([(s, d) for _, s, d in gradients], [n for n, _, _ in gradients],
                                         self.auto.workers.num_workers,
                                         min_compress_elements=exchange.min_compress_elements)

    def _links(self):
        """({collective: Link}, the float16 allreduce's extra cost: None for a given network)."""
        # pylint: disable=import-outside-toplevel
        from tfcomp.analysis import link_probe
        from tfcomp.analysis.costs import COLLECTIVES, Link
        auto, workers = self.auto, self.auto.workers
        if auto.network is not None:
            link = Link.from_gbit(auto.network.bandwidth_gbps, alpha_s=auto.network.latency_us * 1e-6)
            return {kind: link for kind in COLLECTIVES}, None
        samples = link_probe.probe(workers.engine, auto.probe_max_bytes, auto.runs, strategy=workers.strategy)
        return link_probe.fitted_links(samples, workers.num_workers), link_probe.half_extra(samples)

    # ---- checking and drift

    def _finish_check(self):
        auto = self.auto
        check, self._check = self._check, None
        measured_s = auto.workers.mean([statistics.median(check["times"])])[0]
        self._measured.append({"label": check.get("label", "plan"), "choices": dict(auto.choices),
                               "ms": 1e3 * measured_s, "predicted_ms": auto.decision.get("predicted_ms")})
        if self._pending:
            self._next_trial()
            return
        # The reference is the dense trial, timed after the others: the dense steps profiled at
        # the start of training ran slower than later ones (allocator and runtime warm-up), and a
        # plan that only beat them could be slower than dense (measured: 0.84x under Horovod).
        # A run resumed in its trials has no dense trial: then the profiled steps are the reference.
        dense_trial = [t for t in self._measured if not t["choices"]]
        dense_ms = dense_trial[0]["ms"] if dense_trial else auto.decision["dense_ms"]
        trials = [{k: v for k, v in t.items() if k != "choices"} for t in self._measured]
        compressed = [t for t in self._measured if t["choices"]]
        best = min(compressed, key=lambda t: t["ms"]) if compressed else None
        self._measured = []
        decision = {k: v for k, v in auto.decision.items()
                    if k not in ("plan_ms", "reason", "trial", "settled_step", "predicted_ms")}
        decision.update(trials=trials, dense_ms=dense_ms, profiled_dense_ms=auto.decision["dense_ms"])
        now = int(self.model.optimizer.iterations.numpy())
        if best is None or not auto.beats_dense(best["ms"], dense_ms):
            measured = ", ".join("{} measured {:.1f} ms/step".format(t["label"], t["ms"])
                                 for t in trials if t["label"] != DENSE)
            reason = (f"{measured}: not {auto.margin:.0%} faster than the {dense_ms:.1f} ms dense steps "
                      f"measured {'after them' if dense_trial else 'before'}" if best else
                      "resumed in its dense trial, with no compressed trial measured since the restart")
            logging.warning("tfcomp.Auto: back to dense for good: %s", reason)
            switch = bool(auto.choices)  # the dense trial, if it ran last, already runs dense
            auto.decide(DENSE, reason=reason, plan_ms=best["ms"] if best else None,
                        predicted_ms=best["predicted_ms"] if best else None,
                        settled_step=now + (auto.warmup_steps if switch else 0), **decision)
            if switch:
                self._retrace()
            return
        decision.update(predicted_ms=best["predicted_ms"])
        switch = best["choices"] != auto.choices
        auto.decide(PLANNED, best["choices"], trial=best["label"], plan_ms=best["ms"],
                    settled_step=now + (auto.warmup_steps if switch else 0), **decision)
        if switch:
            self._retrace()
        self._window = []
        logging.info("tfcomp.Auto: keeping %s: %.1f ms/step measured against dense's %.1f ms (%.2fx)%s",
                     best["label"], best["ms"], dense_ms, dense_ms / best["ms"],
                     "; switched back to it" if switch else "")

    def _watch_drift(self):
        auto = self.auto
        window, self._window = self._window, []
        measured = auto.workers.mean([statistics.median(window)])[0]
        baseline = auto.decision["plan_ms"] / 1e3
        if abs(measured / baseline - 1) <= auto.drift:
            return
        logging.info("tfcomp.Auto: the plan's step time moved from %.1f to %.1f ms: profiling and planning again",
                     1e3 * baseline, 1e3 * measured)
        auto.decide(PROFILING, reason=f"drifted from {1e3 * baseline:.1f} to {1e3 * measured:.1f} ms/step")
        self._retrace()
        self._begin_cycle()


def _without(decision, *keys):
    return {k: v for k, v in decision.items() if k not in keys}
