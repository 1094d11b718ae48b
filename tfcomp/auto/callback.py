"""tfcomp.Auto's Keras callback: profile dense steps, plan, switch, check (tfcomp.auto.core).

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

from tfcomp.auto import trials as auto_trials
from tfcomp.keras import version as keras_in_use
from tfcomp.keras import optimizers
from tfcomp.auto.phases import AUDIT, DENSE, PLANNED, PROFILING


class AutoCallback(tf.keras.callbacks.Callback):
    """Auto.callback(): pass it to model.fit."""

    def __init__(self, auto):
        super().__init__()
        self.auto = auto
        auto.callback_attached = True
        self._tmp = tempfile.TemporaryDirectory(prefix="tfcomp-auto-")
        self._cycle = None  # the profiling in progress: {"n", "dense", "timeline"}
        self._measuring = None  # the trials in progress: {"configs", "blocks", "at", "n", "dense"}
        self._window = []  # the kept plan's recent step times (replan_every)
        self._start = True  # what to do is decided at the first step, after every restore
        self._began = None  # when this step began (each step is timed from batch begin to end)
        self._codecs = {}  # candidate label -> CompressorProfile, measured once (measure.profile fills it)
        self._decision = {}  # what profiling measured and predicted, for every trial's record
        self._gradients = []  # (name, shape, dtype) in the profile's order
        self._predicted = {}  # configuration label -> the planner's predicted seconds ("plan", DENSE, singles)
        self._traced = {}  # what a configuration runs (_key) -> its trial config, train function kept
        self._leaving_audit = False  # resumed during an audit: back to the kept configuration after this step

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
            if "audit_of" in self.auto.decision and self._measuring is None:
                self._leaving_audit = True
            elif self.auto.phase == PROFILING and self._cycle is None:
                self._begin_cycle()
            elif self.auto.phase == PLANNED and "plan_ms" not in self.auto.decision and self._measuring is None:
                self._resume_trial()
        if self._cycle is not None:
            self._cycle["timeline"].on_train_batch_begin(batch)
        self._began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        duration = None if self._began is None else time.perf_counter() - self._began
        self._began = None
        auto = self.auto
        if self._leaving_audit:
            self._leave_audit()
        elif self._cycle is not None:
            cycle = self._cycle
            cycle["timeline"].on_train_batch_end(batch)
            cycle["n"] += 1
            if auto.untimed_steps < cycle["n"] <= auto.untimed_steps + auto.profile_steps and duration is not None:
                cycle["dense"].append(duration)
            if cycle["n"] == auto.untimed_steps + auto.profile_steps + auto.timeline_steps:
                self._plan()
        elif self._measuring is not None:
            self._trial_step(duration)
        elif auto.phase in (PLANNED, DENSE) and auto.replan_every and duration is not None:
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
        timeline = Timeline(self._tmp.name, start_step=auto.untimed_steps + auto.profile_steps,
                            num_steps=auto.timeline_steps, worker=f"worker{auto.workers.rank}")
        timeline.set_model(self.model)
        timeline.on_train_begin()
        self._cycle = {"n": 0, "dense": [], "timeline": timeline}

    def _retrace(self):
        """The train function traced anew with what the exchange now runs, from zeroed state."""
        self._prepare_state()
        state = self._state()
        if state is not None:
            state.begin_trace()
        self.model.make_train_function(force=True)  # sets model.train_function (Keras 3 returns None)

    def _reuse(self, config):
        """Back to a trial's train function traced before, with its own state variables zeroed."""
        if config["variables"] is not None:
            self._state().use(config["variables"])
        self._prepare_state()
        self.model.train_function = config["function"]

    def _state(self):
        from tfcomp.state.variables import STATE_ATTRIBUTE  # pylint: disable=import-outside-toplevel
        return getattr(self.model.optimizer, STATE_ATTRIBUTE, None)

    def _prepare_state(self):
        """Zeroes the compressor state for what the exchange now runs, and records its choices.

        The checkpoint's record of each tensor's compressor changes now, not at the next trace:
        a decision taken on an epoch's last step is saved by that epoch's backup, and a run
        resumed from it must find its state recorded for the choices it restores (the state
        is zero either way)."""
        from tfcomp.state.record import RECORD_ATTRIBUTE  # pylint: disable=import-outside-toplevel
        state = self._state()
        if state is not None:
            state.zero()
        record = getattr(self.model.optimizer, RECORD_ATTRIBUTE, None)
        if record is not None and self._gradients:
            exchange = self.auto.exchange
            optimizers.bind_exchange(exchange, self.model.optimizer)  # momentum="auto" resolved, as the trace will
            record.record(exchange.choices([(s, d) for _, s, d in self._gradients],
                                           [n for n, _, _ in self._gradients]))

    def _plan(self):
        # pylint: disable=import-outside-toplevel
        from tfcomp.analysis.measure import from_timeline
        from tfcomp.analysis.measure import codecs as measure
        from tfcomp.analysis.model import planner
        auto, workers = self.auto, self.auto.workers
        cycle, self._cycle = self._cycle, None
        cycle["timeline"].on_train_end()  # writes the trace and puts Keras' train function back
        started = time.perf_counter()
        model = from_timeline.model_profile(str(cycle["timeline"].paths()["trace"]))
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
        self._gradients = gradients
        self._predicted = {"plan": result.iteration_s, DENSE: result.dense_s, **result.singles}
        trials = self._trials(result, gradients)
        if trials:  # dense again, in the conditions of the trials: the reference they must beat
            trials.append((DENSE, {}, result.dense_s))
        if not trials:
            auto.decide(DENSE, reason="the planner found nothing predicted faster than dense",
                        settled_step=decision["step"], **decision)
            logging.info("tfcomp.Auto: staying dense: nothing is predicted faster (dense %.1f ms/step measured)",
                         1e3 * dense_s)
            if auto.audit_steps:  # dense runs Keras' own train function, traced for profiling
                self._traced[DENSE] = {"function": self.model.train_function, "variables": None}
                self._start_audit()
            return
        self._decision = decision
        logging.info("tfcomp.Auto at step %d: dense measured %.1f ms/step (predicted %.1f); measuring %s, "
                     "%d steps each in %d rounds", decision["step"], decision["dense_ms"],
                     decision["predicted_dense_ms"], ", ".join(f"{label} (predicted {1e3 * s:.1f} ms)"
                                                               for label, _, s in trials),
                     auto.check_steps, auto.rounds)
        # Dense's train function is Keras' own, traced for profiling (the Timeline put it back).
        self._start_trials(trials, len(trials) - 1,
                           {len(trials) - 1: {"function": self.model.train_function, "variables": None}})

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

    def _key(self, choices):
        """What a configuration runs, as text: equal for configurations the exchange runs alike."""
        return DENSE if not choices else self._runs_as(choices, self._gradients)

    def _runs_as(self, choices, gradients):
        """What the exchange would send each tensor with, under these choices (as text)."""
        from tfcomp.exchange.step import Exchange  # pylint: disable=import-outside-toplevel
        from tfcomp.plan.plan import Plan  # pylint: disable=import-outside-toplevel
        plan = Plan({name: self.auto.candidates[label] for name, label in choices.items()})
        exchange = Exchange(plan, min_compress_elements=self.auto.exchange.min_compress_elements)
        return json.dumps(exchange.choices([(s, d) for _, s, d in gradients], [n for n, _, _ in gradients]),
                          sort_keys=True, default=str)

    def _start_trials(self, trials, dense, traced=None, audit=None, steps=None):
        """Runs [(label, choices, predicted seconds)] interleaved (tfcomp.auto.trials); dense:
        the index of the dense one, or None (a run resumed in its trials: then the one trial
        runs already, and the dense steps profiled before the restart are the reference).
        traced: {index: {"function", "variables"} of a train function traced before};
        audit: None for trials that decide, else what the audit checks ({"kept", "index", "step"})."""
        configs = [{"label": label, "choices": choices, "predicted_ms": None if seconds is None else 1e3 * seconds,
                    "function": None, "variables": None, "visited": False} for label, choices, seconds in trials]
        for index, earlier in (traced or {}).items():
            configs[index].update(function=earlier["function"], variables=earlier["variables"])
        running, first_skip = None, auto_trials.SETTLE_STEPS
        if dense is None:
            running, first_skip = 0, self.auto.untimed_steps  # its train function is traced at its first step
            configs[0].update(function=self.model.train_function, visited=True)
        self._measuring = {"configs": configs, "dense": dense, "at": -1, "running": running, "audit": audit,
                           "blocks": auto_trials.schedule(len(configs), dense, steps or self.auto.check_steps,
                                                          self.auto.rounds)}
        self._next_block(first_skip)

    def _resume_trial(self):
        decision = self.auto.decision
        self._start_trials([(decision.get("trial", "plan"), dict(self.auto.choices),
                             decision.get("predicted_ms", 0.0) / 1e3)], None)

    def _next_block(self, first_skip=0):
        measuring = self._measuring
        measuring["at"] += 1
        block = measuring["blocks"][measuring["at"]]
        skip = first_skip if measuring["at"] == 0 else 0
        if block.config != measuring["running"]:
            config = measuring["configs"][block.config]
            if measuring["audit"] is not None:  # saved as such: a run resumed in it goes back to the kept one
                self.auto.decide(PLANNED, config["choices"], record=False, trial=config["label"],
                                 audit_of=measuring["audit"]["kept"])
            else:
                self.auto.decide(PLANNED, config["choices"], record=not config["visited"], trial=config["label"],
                                 **dict(self._decision, predicted_ms=config["predicted_ms"]))
            if not config["visited"] and config["choices"] and measuring["audit"] is None:
                logging.info("tfcomp.Auto: measuring %s (%d tensors compressed)\n%s", config["label"],
                             len(config["choices"]), self._table(self._gradients))
            config["visited"] = True
            skip = max(skip, self._run(config))
            measuring["running"] = block.config
        measuring["n"], measuring["skip"] = 0, skip

    def _run(self, config):
        """Switches to a trial's train function (traced at its first run, kept for the next):
        the steps to leave untimed after the switch."""
        skip = self._settle_steps(config)
        if config["function"] is None:
            self._retrace()
            config["function"] = self.model.train_function
        else:
            self._reuse(config)
        return skip

    def _settle_steps(self, config):
        return auto_trials.SETTLE_STEPS if config["function"] is not None else self.auto.untimed_steps

    def _trial_step(self, duration):
        measuring = self._measuring
        running = measuring["configs"][measuring["running"]]
        if running["variables"] is None and self._state() is not None:
            running["variables"] = self._state().in_use()  # its first step traced it
        block = measuring["blocks"][measuring["at"]]
        measuring["n"] += 1
        if measuring["n"] > measuring["skip"] and duration is not None:
            block.times.append(duration)
        if len(block.times) == block.steps:
            if measuring["at"] + 1 < len(measuring["blocks"]):
                self._next_block()
            else:
                self._finish_trials()

    def _table(self, gradients):
        exchange = self.auto.exchange
        return exchange.configured.table([(s, d) for _, s, d in gradients], [n for n, _, _ in gradients],
                                         self.auto.workers.num_workers,
                                         min_compress_elements=exchange.min_compress_elements)

    def _links(self):
        """({collective: Link}, the float16 allreduce's extra cost: None for a given network)."""
        # pylint: disable=import-outside-toplevel
        from tfcomp.analysis.measure import link_probe
        from tfcomp.costs.network import COLLECTIVES, Link
        auto, workers = self.auto, self.auto.workers
        if auto.network is not None:
            link = Link.from_gbit(auto.network.bandwidth_gbps, alpha_s=auto.network.latency_us * 1e-6)
            return {kind: link for kind in COLLECTIVES}, None
        samples = link_probe.probe(workers.engine, auto.probe_max_bytes, auto.runs, strategy=workers.strategy)
        return link_probe.fitted_links(samples, workers.num_workers), link_probe.half_extra(samples)

    # ---- checking and drift

    def _finish_trials(self):
        auto, measuring, self._measuring = self.auto, self._measuring, None
        configs, dense = measuring["configs"], measuring["dense"]
        blocks = measuring["blocks"]
        block_ms = [1e3 * t for t in auto.workers.mean([statistics.median(b.times) for b in blocks])]
        reference_ms = None if measuring["audit"] is not None else auto.decision["dense_ms"]
        # Without a dense trial (resumed in the trials), the dense steps profiled before are the reference.
        results = auto_trials.verdict(len(configs), blocks, block_ms, dense, reference_ms=reference_ms)
        trials = [{"label": c["label"], "predicted_ms": c["predicted_ms"], **r} for c, r in zip(configs, results)]
        self._traced.update((self._key(c["choices"]), c) for c in configs if c["function"] is not None)
        if measuring["audit"] is not None:
            self._finish_audit(measuring, trials)
            return
        self._keep_fastest(measuring, trials)
        if auto.audit_steps:
            self._start_audit()

    def _keep_fastest(self, measuring, trials):
        """Keeps the fastest trial against dense if it beat dense by the margin, else dense."""
        auto, configs, dense = self.auto, measuring["configs"], measuring["dense"]
        dense_ms = trials[dense]["ms"] if dense is not None else auto.decision["dense_ms"]
        compressed = [i for i, c in enumerate(configs) if c["choices"]]
        best = min(compressed, key=lambda i: trials[i]["vs_dense"]) if compressed else None
        decision = {k: v for k, v in auto.decision.items()
                    if k not in ("plan_ms", "reason", "trial", "settled_step", "predicted_ms")}
        decision.update(trials=trials, dense_ms=dense_ms, profiled_dense_ms=auto.decision["dense_ms"])
        now = int(self.model.optimizer.iterations.numpy())
        if best is None or not auto.beats_dense(trials[best]["vs_dense"]):
            measured = ", ".join("{} {:.1f} ms/step ({:.2f}x dense's)".format(t["label"], t["ms"], t["vs_dense"])
                                 for t in trials if t["label"] != DENSE)
            reason = (f"{measured}: not {auto.margin:.0%} faster than dense ({dense_ms:.1f} ms/step, "
                      f"{'measured in the same rounds' if dense is not None else 'profiled before'})" if best
                      is not None else "resumed in its dense trial, with no compressed trial measured since the "
                                       "restart")
            logging.warning("tfcomp.Auto: back to dense %s: %s",
                            "until its step time drifts" if auto.replan_every else "for good", reason)
            switch = bool(configs[measuring["running"]]["choices"])  # the last block ran a compressed trial
            skip = 0 if not switch else auto.untimed_steps if dense is None else self._settle_steps(configs[dense])
            auto.decide(DENSE, reason=reason, plan_ms=trials[best]["ms"] if best is not None else None,
                        predicted_ms=trials[best]["predicted_ms"] if best is not None else None,
                        settled_step=now + skip, **decision)
            self._window = []
            if switch and dense is None:
                self._retrace()
            elif switch:
                self._run(configs[dense])
            return
        kept = trials[best]
        decision.update(predicted_ms=kept["predicted_ms"])
        switch = measuring["running"] != best
        auto.decide(PLANNED, configs[best]["choices"], trial=kept["label"], plan_ms=kept["ms"],
                    settled_step=now + (self._settle_steps(configs[best]) if switch else 0), **decision)
        if switch:
            self._run(configs[best])
        self._window = []
        logging.info("tfcomp.Auto: keeping %s: %.1f ms/step, %.2fx dense's steps in the same rounds (%.1f ms)%s",
                     kept["label"], kept["ms"], kept["vs_dense"], dense_ms, "; switched back to it" if switch else "")

    # ---- audit

    def _start_audit(self):
        """The configuration just kept, dense and every single candidate, timed interleaved."""
        auto = self.auto
        names = [name for name, _, _ in self._gradients]
        options = [(DENSE, {})] + [(label, {name: label for name in names}) for label in auto.candidates]
        options.append(("plan", dict(auto.choices)))  # only if it runs as none of the others does
        option_keys = [self._key(choices) for _, choices in options]
        configs, keys = [], []
        for (label, choices), key in zip(options, option_keys):
            if key not in keys:
                keys.append(key)
                configs.append((label, choices, self._predicted.get(label)))
        kept = keys.index(option_keys[-1])
        now = int(self.model.optimizer.iterations.numpy())
        logging.info("tfcomp.Auto: auditing its choice (%s) against %s, %d steps each in %d rounds",
                     configs[kept][0], ", ".join(c[0] for i, c in enumerate(configs) if i != kept),
                     auto.audit_steps, auto.rounds)
        saved = {k: v for k, v in auto.saved().items() if k != "candidates"}
        self._start_trials(configs, 0, {i: self._traced[k] for i, k in enumerate(keys) if k in self._traced},
                           audit={"kept": saved, "index": kept, "step": now}, steps=auto.audit_steps)

    def _finish_audit(self, measuring, trials):
        auto, audit = self.auto, measuring["audit"]
        summary = auto_trials.regret(trials, audit["index"])
        now = int(self.model.optimizer.iterations.numpy())
        self._decide_kept(audit["kept"])
        config = measuring["configs"][audit["index"]]
        skip = self._run(config) if measuring["running"] != audit["index"] else 0
        auto.history.append({"phase": AUDIT, "step": now, "started_step": audit["step"], "settled_step": now + skip,
                             "kept": config["label"], "fastest": trials[summary["fastest"]]["label"],
                             "regret": summary["regret"], "vs_dense": summary["vs_dense"], "trials": trials})
        logging.info("tfcomp.Auto audit: %s; the kept %s at %.2fx dense's steps, %+.1f%% against the fastest (%s)",
                     ", ".join("{} {:.1f} ms ({:.2f}x)".format(t["label"], t["ms"], t["vs_dense"]) for t in trials),
                     config["label"], summary["vs_dense"], 100 * summary["regret"], trials[summary["fastest"]]["label"])

    def _leave_audit(self):
        """Resumed during an audit: back to the configuration kept, without finishing it. Not
        before the first step has run what the checkpoint holds: its compressor state is
        restored when that step's trace creates it, and checked against what runs then."""
        self._leaving_audit = False
        kept = self.auto.decision["audit_of"]
        logging.info("tfcomp.Auto: resumed during its audit; back to the configuration kept (%s, %d tensors "
                     "compressed), the audit left unfinished", kept["phase"], len(kept["choices"]))
        self._decide_kept(kept)
        self._retrace()

    def _decide_kept(self, kept):
        """Hands the exchange the decision the audit checked (Auto.saved() without candidates)."""
        self.auto.decide(kept["phase"], kept["choices"], record=False, **kept["decision"])

    def _watch_drift(self):
        auto = self.auto
        window, self._window = self._window, []
        measured = auto.workers.mean([statistics.median(window)])[0]
        # Dense kept (no candidate won) is watched as a plan is: a slower link may make one win.
        baseline = auto.decision["plan_ms" if auto.phase == PLANNED else "dense_ms"] / 1e3
        if abs(measured / baseline - 1) <= auto.drift:
            return
        logging.info("tfcomp.Auto: the plan's step time moved from %.1f to %.1f ms: profiling and planning again",
                     1e3 * baseline, 1e3 * measured)
        auto.decide(PROFILING, reason=f"drifted from {1e3 * baseline:.1f} to {1e3 * measured:.1f} ms/step",
                    step=int(self.model.optimizer.iterations.numpy()))
        self._retrace()
        self._begin_cycle()

