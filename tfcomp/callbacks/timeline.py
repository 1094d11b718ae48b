"""tfcomp.callbacks.Timeline: each step's phases, timed inside the compiled step."""
import contextlib
import json
import os
import pathlib

import tensorflow as tf

from tfcomp.autograph import converted_like_the_caller
from tfcomp.keras import version as keras_in_use
from tfcomp.callbacks import keras3_step, plot, probe, summary, trace
from tfcomp.callbacks.segments import PHASES, step_record

_MISSING = object()


class Timeline(tf.keras.callbacks.Callback):
    """Records when each phase of a training step starts and ends on this worker:
    input, forward_backward, compress, communicate (each collective), decompress,
    apply (the optimizer) and metrics (Keras' metrics and the cross-worker log
    reduction), and when each gradient was ready.

        model.fit(ds, callbacks=[tfcomp.callbacks.Timeline("timeline/")])

    Timestamps are tf.timestamp() ops inside the step, ordered by control
    dependencies; the callback reads them once per recorded step. Steps
    start_step .. start_step + num_steps - 1 (counted from 0 over the whole fit)
    run an instrumented copy of the train function; every other step runs
    Keras' own, untouched. At train end each worker writes, under path (a
    directory, or a name ending in .json whose stem prefixes the files):
    WORKER.trace.json (Chrome trace events, for ui.perfetto.dev or
    chrome://tracing), WORKER.csv (per step and phase) and WORKER.png (stacked
    time per phase per step); WORKER is this worker's task in TF_CONFIG
    ("worker1"), Horovod's rank ("rank1"), or `worker=`. tensorboard_dir adds
    the per-phase times as TensorBoard scalars.

    In a custom loop, wrap the step function's body before tf.function traces
    it, and call record() after each step and write() at the end:

        step = tf.function(timeline.wrap(step_body, optimizer=optimizer))
        for batch in ds:
            step(batch)
            timeline.record()
        timeline.write()

    record() then reads the marks from a variable, a host read per step (0.1-0.4
    ms); with wrap(..., return_marks=True) the step returns them instead:
    `outputs, marks = step(batch)`, then `timeline.record(marks)`.

    By default (serialize=True) phases are serialised where they could overlap
    (compression waits for every gradient, each collective for the one before),
    so that each is timed alone; the overhead benchmark
    (benchmarks/timeline_overhead/) measures what that costs. With
    serialize=False the step runs as it does unrecorded, the exchange's buckets
    overlapping backward and one another: each gradient and each collective is
    stamped by itself (waiting for nothing else), the trace shows every bucket's
    collectives on a track of their own, records[i].collectives lists them, and
    the phases are input, forward_backward (to the last gradient), communicate
    (the exchange left after it: "exchange"), apply and metrics. On a GPU the
    timestamps are taken when the host runs the op, which for kernels queued
    on the GPU may be before they finish.
    """

    def __init__(self, path, start_step=1, num_steps=100, worker=None, tensorboard_dir=None,
                 capacity=probe.DEFAULT_CAPACITY, serialize=True):
        super().__init__()
        if start_step < 0 or num_steps < 1:
            raise ValueError(f"need start_step >= 0 and num_steps >= 1, got {start_step}, {num_steps}")
        self.path = pathlib.Path(path)
        self.start_step = start_step
        self.num_steps = num_steps
        self.tensorboard_dir = tensorboard_dir
        self.worker, self.worker_index = _worker_name(worker)
        self._snapshots = []  # (step, Recorder.snapshot()): decoded into records when asked for
        self._records = []
        self._recorder = probe.Recorder(capacity, serialize=serialize)
        self._step = 0
        self._keras_function = None
        self._instrumented = None
        self._marks = None  # what the instrumented train function returned for this step
        self._writer = None
        self._supports_tf_logs = True  # Keras need not copy the logs to the host for this callback

    # ---- where the files go

    def paths(self):
        """{"trace": ..., "csv": ..., "png": ...} for this worker."""
        if self.path.suffix == ".json":
            stem = self.path.with_suffix("")
            base = stem.parent / f"{stem.name}.{self.worker}"
        else:
            base = self.path / self.worker
        return {"trace": base.with_name(base.name + ".trace.json"), "csv": base.with_name(base.name + ".csv"),
                "png": base.with_name(base.name + ".png")}

    # ---- the instrumented step

    def wrap(self, body, optimizer=None, model=None, return_marks=False):
        """body, recording its phases whenever it is traced (or run eagerly).
        return_marks: the wrapped body returns (outputs, marks) for record(marks)."""
        recorder = self._recorder

        def instrumented(*args, **kwargs):
            with recorder.tracing():
                recorder.mark("step_begin")
                with _patched_optimizer(optimizer, recorder), _patched_train_step(model, recorder):
                    if model is None:
                        recorder.mark("data_ready", after=(args, kwargs))
                    outputs = converted_like_the_caller(body)(*args, **kwargs)
                recorder.mark("step_end", after=outputs)
            return (outputs, recorder.stored()) if return_marks else outputs

        return instrumented

    def in_window(self, step=None):
        step = self._step if step is None else step
        return self.start_step <= step < self.start_step + self.num_steps

    def record(self, marks=None):
        """After a step has run: reads its marks if it is in the window; counts the step.
        Only the read happens here, inside the step's host time; records decodes them.
        marks: what a body wrapped with return_marks returned, else the marks are read."""
        if self.in_window():
            self._snapshots.append((self._step, self._recorder.snapshot(marks)))
            if self.tensorboard_dir:
                self._scalars(self.records[-1])
        self._step += 1

    @property
    def records(self):
        """The recorded steps so far, as segments.StepRecord."""
        for step, snapshot in self._snapshots[len(self._records):]:
            self._records.append(step_record(step, self._recorder.decode(snapshot)))
        return self._records

    def write(self):
        """Writes this worker's trace, CSV and plot; returns their paths."""
        paths = self.paths()
        paths["trace"].parent.mkdir(parents=True, exist_ok=True)
        trace.write(paths["trace"], self.records, self.worker_index, self.worker)
        summary.write(paths["csv"], self.records, self.worker)
        plot.write(paths["png"], self.records, self.worker)
        if self._writer is not None:
            self._writer.flush()
        return paths

    # ---- Keras

    def on_train_begin(self, logs=None):
        self._step = 0
        self._snapshots, self._records = [], []
        if _steps_per_execution(self.model) != 1:
            raise ValueError("tfcomp.callbacks.Timeline records one step per call of the train "
                             "function; compile the model with steps_per_execution=1")
        if getattr(self.model, "jit_compile", False):
            raise ValueError("tfcomp.callbacks.Timeline's timestamps cannot be XLA-compiled; "
                             "compile the model with jit_compile=False")
        self._keras_function = self.model.train_function
        # The instrumented step also returns its marks: the host then reads a tensor it
        # already has, not the variable (a read op that costs ~0.1-0.4 ms per step).
        # Run eagerly, the marks are kept in Python and it returns None.
        if keras_in_use.in_use().major >= 3:
            with_marks = keras3_step.train_function(self.model, self.wrap)
        else:
            function = self._keras_function
            python_function = getattr(function, "python_function", None)
            body = self.wrap(python_function or function, optimizer=self.model.optimizer, model=self.model,
                             return_marks=True)
            with_marks = tf.function(body, reduce_retracing=True) if python_function else body

        def instrumented(*args, **kwargs):
            outputs, self._marks = with_marks(*args, **kwargs)
            return outputs

        self._instrumented = instrumented

    def on_train_batch_begin(self, batch, logs=None):
        self.model.train_function = self._instrumented if self.in_window() else self._keras_function

    def on_train_batch_end(self, batch, logs=None):
        marks, self._marks = self._marks, None
        self.record(marks)

    def on_train_end(self, logs=None):
        self.model.train_function = self._keras_function
        self.write()

    def _scalars(self, record):
        if not self.tensorboard_dir:
            return
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(os.path.join(self.tensorboard_dir, self.worker))
        with self._writer.as_default(step=record.step):
            for phase, (seconds, _, _) in record.phase_totals().items():
                tf.summary.scalar(f"timeline/{phase}_ms", 1e3 * seconds)
            tf.summary.scalar("timeline/step_ms", 1e3 * record.duration)


def _steps_per_execution(model):
    value = getattr(model, "_steps_per_execution", None)  # Keras 2: a variable
    if value is None:
        value = getattr(model, "steps_per_execution", 1)  # Keras 3: an int
    return int(value.numpy()) if hasattr(value, "numpy") else int(value)


def _worker_name(worker):
    """(name for files and the trace, index for the trace's pid)."""
    if worker is not None:
        return str(worker), 0
    config = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task")
    if config:
        return f"{config['type']}{config['index']}", int(config["index"])
    for variable in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if variable in os.environ:
            return f"rank{os.environ[variable]}", int(os.environ[variable])
    return "worker0", 0


@contextlib.contextmanager
def _instance_attribute(owner, name, value):
    previous = vars(owner).get(name, _MISSING)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if previous is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, previous)


@contextlib.contextmanager
def _patched_train_step(model, recorder):
    """model.train_step marks when its data is there (Keras calls it inside strategy.run)."""
    if model is None:
        yield
        return
    original = model.train_step

    def train_step(data):
        recorder.mark("data_ready", after=data)
        return original(data)

    with _instance_attribute(model, "train_step", train_step):
        yield


def _aggregated(recorder, grads):
    """grads (None entries kept), marked as aggregated once all are computed; what uses
    them starts after the mark."""
    grads = list(grads)
    return recorder.gate(grads, recorder.mark("aggregated", after=[g for g in grads if g is not None]))


@contextlib.contextmanager
def _patched_optimizer(optimizer, recorder):
    """optimizer.apply_gradients marks when the gradients are ready and when they are
    applied; aggregate_gradients (Keras' optimizers) when they are aggregated."""
    if optimizer is None:
        yield
        return
    apply_gradients = optimizer.apply_gradients

    def apply(grads_and_vars, *args, **kwargs):
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        grads = recorder.gradients_ready([g for g, _ in pairs], [keras_in_use.tensor_name(v) for _, v in pairs])
        result = apply_gradients(list(zip(grads, [v for _, v in pairs])), *args, **kwargs)
        # Reads of the variables run after their updates (same resource), so this mark does too.
        recorder.mark("applied", after=[result, *[tf.identity(v) for _, v in pairs]])
        return result

    with contextlib.ExitStack() as stack:
        stack.enter_context(_instance_attribute(optimizer, "apply_gradients", apply))
        # Keras 2's optimizers aggregate in aggregate_gradients, Keras 3's (TensorFlow backend) in
        # _all_reduce_sum_gradients: (gradient, variable) pairs in and out.
        aggregation = next((name for name in ("aggregate_gradients", "_all_reduce_sum_gradients")
                            if hasattr(optimizer, name)), None)
        if aggregation is not None:
            aggregate_gradients = getattr(optimizer, aggregation)

            def aggregate(grads_and_vars):
                aggregated = list(aggregate_gradients(grads_and_vars))
                return list(zip(_aggregated(recorder, [g for g, _ in aggregated]), [v for _, v in aggregated]))

            stack.enter_context(_instance_attribute(optimizer, aggregation, aggregate))
        if hasattr(optimizer, "_allreduce_grads") and hasattr(optimizer, "_allreduce"):
            # Horovod's own DistributedOptimizer allreduces in compute_gradients, before
            # apply_gradients sees the gradients: its gradients are ready on the way in.
            horovod_allreduce = optimizer._allreduce  # pylint: disable=protected-access

            def allreduce(grads, variables):
                pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
                ready = iter(recorder.gradients_ready([g for g, _ in pairs],
                                                      [keras_in_use.tensor_name(v) for _, v in pairs]))
                return _aggregated(recorder, horovod_allreduce([g if g is None else next(ready) for g in grads],
                                                               variables))

            stack.enter_context(_instance_attribute(optimizer, "_allreduce", allreduce))
        yield


__all__ = ["Timeline", "PHASES"]
