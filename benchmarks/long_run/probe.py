"""What a long run watches in each worker: resident memory, traces of the train
step, TensorFlow functions and the ops of the train function's graph."""
import gc
import inspect
import statistics
import time

import tensorflow as tf
from tensorflow.python.eager import context


def _status(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line")


def rss_kib():
    """This process's resident set size (VmRSS in /proc/self/status), in KiB."""
    return _status("VmRSS")


def thread_count():
    """This process's threads (Threads in /proc/self/status)."""
    return _status("Threads")


def context_function_count():
    """TensorFlow functions registered in the eager context: every traced
    concrete function, whichever tf.function traced it, adds its own."""
    return len(context.context().list_function_names())


def traced_functions(train_function, depth=4):
    """The tf.functions behind a Keras train function, outermost first.

    Keras 2's train function is a tf.function itself. Keras 3's is a Python
    function that calls two, held in its closure (one over the iterator, one
    over a batch; a wrapper of Keras' sits between), so they are found by
    following closures a few levels deep.
    """
    if train_function is None:
        return []
    if hasattr(train_function, "experimental_get_tracing_count"):
        return [train_function]
    found = []
    for cell in (getattr(train_function, "__closure__", None) or ()) if depth else ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if inspect.isfunction(value) or hasattr(value, "experimental_get_tracing_count"):
            found += [f for f in traced_functions(value, depth - 1) if f not in found]
    return found


def tracing_count(train_function):
    """Traces of the tf.functions behind a train function (None: none found,
    as while a tfcomp.Auto profiling cycle's Timeline wraps it in a plain one)."""
    functions = traced_functions(train_function)
    return sum(f.experimental_get_tracing_count() for f in functions) if functions else None


def graph_op_count(functions):
    """Ops in all concrete functions of the given tf.functions, the bodies of
    the functions they call (strategy.run's replica function, conds, ...) included."""
    total = 0
    for function in functions:
        for concrete in function._list_all_concrete_functions():  # pylint: disable=protected-access
            graph_def = concrete.graph.as_graph_def()
            total += len(graph_def.node) + sum(len(f.node_def) for f in graph_def.library.function)
    return total


def count_traces(model):
    """Makes model.train_step count its calls, and returns the counter.

    Keras calls train_step only while tracing the train function, once per
    replica and trace, so the count goes up on every trace, also of a train
    function Keras rebuilt (which a tf.function's own tracing count misses).
    """
    counter = {"traces": 0}
    train_step = model.train_step

    def counted_train_step(data):
        counter["traces"] += 1
        return train_step(data)

    model.train_step = counted_train_step
    return counter


class LongRunProbe(tf.keras.callbacks.Callback):
    """Samples a worker every sample_every steps; counts ops at warm-up and at the end.

    A sample: step (steps done), RSS in KiB, threads, train_step traces, the train
    function's own tracing count, eager-context functions, wall seconds since
    training began, the loss and the median step time since the last sample
    (with step_times). With progress=True it prints a line every
    progress_every steps.
    """

    def __init__(self, trace_counter, total_steps, warmup_steps, sample_every, progress_every, label,
                 progress=True, retrace_every_step=False, step_times=None):
        super().__init__()
        self.counter = trace_counter
        self.total_steps, self.warmup_steps = total_steps, warmup_steps
        self.sample_every, self.progress_every = sample_every, progress_every
        self.label, self.progress = label, progress
        self.retrace_every_step = retrace_every_step
        self.step_times = step_times  # seconds of each step so far (a StepTimes' list), or None
        self.samples = []
        self.ops = {}
        self.concrete_functions = {}
        self._start = None
        self._steps_done = 0

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()
        self._sample(0, None)

    def on_train_batch_end(self, batch, logs=None):
        step = self._steps_done = batch + 1
        if step % self.sample_every == 0 or step == self.warmup_steps:
            self._sample(step, logs)
        if step == self.warmup_steps:
            self._count_ops("warmup")
        if self.progress and step % self.progress_every == 0:
            last = self.samples[-1]
            print(f"long_run: {self.label} step {step}/{self.total_steps}  rss {last['rss_kib'] / 1024:.1f} MiB  "
                  f"threads {last['threads']}  "
                  f"traces {last['traces']}  tf functions {last['context_functions']}  "
                  f"{1e3 * last['seconds'] / step:.1f} ms/step", flush=True)
        if self.retrace_every_step:
            # Checks the checks: Keras builds a new train function, which traces on the next step.
            self.model.make_train_function(force=True)

    def on_train_end(self, logs=None):
        if not self.samples or self.samples[-1]["step"] != self._steps_done:
            self._sample(self._steps_done, logs)
        self._count_ops("end")

    def _sample(self, step, logs):
        train_function = self.model.train_function
        traces = tracing_count(train_function)
        self.samples.append({
            "step": step, "rss_kib": rss_kib(), "threads": thread_count(), "traces": self.counter["traces"],
            "python_objects": len(gc.get_objects()),  # growth here is Python's; RSS growth without it is not
            "train_function_tracing_count": 0 if train_function is None else traces,
            "context_functions": context_function_count(),
            "seconds": time.perf_counter() - self._start, "unix_time": time.time(),
            "loss": float(logs["loss"]) if logs and "loss" in logs else None,
            "step_ms": self._recent_step_ms()})

    def _recent_step_ms(self):
        """Median milliseconds of the steps since the last sample (None: not timed)."""
        recent = (self.step_times or [])[-self.sample_every:]
        return 1e3 * statistics.median(recent) if recent else None

    def _count_ops(self, when):
        functions = traced_functions(self.model.train_function)
        if not functions:  # wrapped by a Timeline (see tracing_count)
            self.ops[when] = self.concrete_functions[when] = None
            return
        self.ops[when] = graph_op_count(functions)
        self.concrete_functions[when] = sum(
            len(f._list_all_concrete_functions()) for f in functions)  # pylint: disable=protected-access
