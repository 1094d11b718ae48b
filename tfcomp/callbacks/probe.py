"""Timestamps taken inside the compiled step, for tfcomp.callbacks.Timeline.

While a step function is traced under `Recorder.tracing()`, the code that knows
a phase boundary (the step wrapper, the Keras optimizer wrappers, the exchange)
calls `mark(kind, after=tensors)`: a `tf.timestamp()` that runs once `after`
is computed, written into a slot of one worker-local float64 variable. The
step fills its slots in one write at its end: slot 0 says which trace wrote
them, slot 1 when the step began (a timestamp before all others); marks in a
tf.cond branch are written in the branch, so those of a branch that did not
run keep an older value, from before the step began, and are read as not run
(no reset of the slots each step). TensorFlow's automatic control
dependencies run resource-less stateful ops (the timestamps) in program
order, so the marks of a step are ordered. Ops after a boundary are gated on
its mark (`gate`) where phases could otherwise run at the same time, so that
phases do not overlap.

When no Recorder is active, `current()` is None and nothing is added to the
graph.
"""
import contextlib
import dataclasses

import numpy as np
import tensorflow as tf

from tfcomp.exchange import hooks
from tfcomp.exchange.fusion import nbytes

DEFAULT_CAPACITY = 4096  # slots per step: 32 KiB read per recorded step

current = hooks.observer  # the Recorder of the step being traced, or None


@dataclasses.dataclass
class Mark:
    kind: str  # a phase boundary (see segments.py), or "tensor_ready": one gradient's stamp
    meta: dict
    boundary: bool = True  # False: a free stamp (Recorder.stamp), on a track of its own


_ANCHOR = []  # the variable free stamps read: see Recorder.stamp


def _anchor():
    if not _ANCHOR:
        from tfcomp.state.variables import worker_local_variables  # pylint: disable=import-outside-toplevel
        with worker_local_variables():
            _ANCHOR.append(tf.Variable(0.0, trainable=False, name="tfcomp_timeline_anchor"))
    return _ANCHOR[0]


@tf.function(autograph=False)
def _free_timestamp(value):
    """tf.timestamp() once value is computed, in a call that reads a variable nobody
    writes: a stateful op with a resource input, which the automatic control
    dependencies order only after writes to that resource (never), where a bare
    tf.timestamp() would wait for every stateful op before it. value is used in
    the result (less than any time), so the graph keeps the dependency."""
    with tf.control_dependencies([value]):
        stamp = tf.timestamp()
    v = tf.cast(value, tf.float64)
    below = -tf.abs(tf.where(tf.math.is_finite(v), v, tf.zeros_like(v))) - 1.0
    return tf.maximum(stamp, below) + 0.0 * tf.cast(_anchor().read_value(), tf.float64)


def _flat(tensors):
    return [t for t in tf.nest.flatten(tensors, expand_composites=True) if isinstance(t, (tf.Tensor, tf.Variable))]


def _computed(tensors):
    """What a stamp taken once tensors exist depends on: one element read from each. A
    control dependency on a function call's output (Horovod's allreduce is a
    PartitionedCall) did not wait for the function's body; a read of the value does."""
    if tf.executing_eagerly():
        return _flat(tensors)
    return [t if isinstance(t, tf.Variable) else tf.reshape(t, [-1])[:1] for t in _flat(tensors)]


class Recorder:
    """Allocates mark slots while a step is traced and reads them after it ran."""

    def __init__(self, capacity=DEFAULT_CAPACITY, serialize=True):
        self.capacity = capacity
        self.serialize = serialize  # False: the step runs as unrecorded, the exchange stamped freely
        self.bucket = None  # the exchange's bucket being traced, for its collectives' stamps
        self.traces = []  # one list of Marks per traced step function; slot i+2 holds mark i
        self._marks = None
        self._variable = None
        self._bucket_variables = {}  # bucket -> where its tf.cond branches write (serialize=False)
        self._eager_values = None
        self._gradients_seen = False
        self._graph, self._pending = None, []

    @contextlib.contextmanager
    def tracing(self, this_thread_only=False):
        """Around the body of a step function while it is traced (or runs eagerly)."""
        self._marks = []
        self.traces.append(self._marks)
        self._gradients_seen = False
        self._eager_values = {0: float(len(self.traces))} if tf.executing_eagerly() else None
        self._graph, self._pending = None, []
        if self._eager_values is None:
            self._graph = tf.compat.v1.get_default_graph()
            self._pending.append((1, tf.timestamp()))  # the step began: runs before every other mark
        with hooks.observing(self, this_thread_only):
            yield self
        if self._pending:  # the marks of the step's own graph, in one write at its end
            slots, stamps = zip(*self._pending)
            updates = tf.concat([tf.constant([float(len(self.traces))], tf.float64), tf.stack(stamps)], 0)
            self._storage().scatter_nd_update([[0]] + [[s] for s in slots], updates)

    def mark(self, kind, after=(), **meta):
        """A timestamp taken once `after` is computed; returns the timestamp tensor."""
        with tf.control_dependencies(_computed(after)):
            stamp = tf.timestamp()
        self._write([self._allocate(Mark(kind, meta))], [stamp])
        return stamp

    def stamp(self, kind, after, **meta):
        """A free timestamp, taken once `after` is computed and waiting for nothing else
        (no other mark, no collective): what the step runs does not change. Not a phase
        boundary: segments leave it out; the trace puts it on a track of its own."""
        values = [tf.reshape(t, [-1])[:1] for t in _flat(after) if isinstance(t, tf.Tensor)]
        if tf.executing_eagerly() or not values:
            stamp = tf.timestamp()
        else:
            stamp = _free_timestamp(tf.concat([tf.cast(v, tf.float32) for v in values], 0)[0])
        self._write([self._allocate(Mark(kind, meta, boundary=False))], [stamp])
        return stamp

    def boundary(self, kind, tensors, after=None, **meta):
        """tensors, after an exchange phase boundary: serialised, marked (once `after`,
        by default tensors, is computed) and gated; otherwise unchanged."""
        if not self.serialize:
            return tensors
        return self.gate(tensors, self.mark(kind, after=tensors if after is None else after, **meta))

    def gate(self, tensors, stamp):
        """tensors, computed only after stamp: ops that use them start after the mark."""
        if tf.executing_eagerly():
            return tensors
        with tf.control_dependencies([stamp]):
            return tf.nest.map_structure(
                lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, tensors)

    def gradients_ready(self, grads, names, plan=None, by_exchange=False):
        """Stamps each gradient when it is computed (the first time a step's gradients are
        seen), then marks that all are ready and gates them; returns the gated gradients.

        Per-gradient stamps are taken in the order the backward pass created the
        gradients' ops; the automatic control dependencies chain them in that
        order, so a stamp is the time its gradient was ready or a little later.
        plan: {name: (compressor, payload bytes)}, from the exchange (by_exchange).
        """
        first = not self._gradients_seen
        self._gradients_seen = True
        if not first and not by_exchange:  # the exchange has run already (Horovod's engine)
            return grads
        dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        plan_meta = {n: {"compressor": c, "payload_bytes": b} for n, (c, b) in (plan or {}).items()}
        if not self.serialize:  # each gradient stamped freely; nothing waits for all of them
            if first:
                for g, n in zip(dense, names):
                    self.stamp("tensor_ready", [g], **_tensor_info(g, n))
            if plan_meta:
                self._allocate(Mark("plan", {"plan": plan_meta}, boundary=False))
            return list(grads)
        if first:
            infos = [_tensor_info(g, n) for g, n in zip(dense, names)]
            if tf.executing_eagerly():  # already computed: only the sizes are worth recording
                for info in infos:
                    self._allocate(Mark("tensor_ready", info))
            else:
                order = sorted(range(len(dense)), key=lambda i: dense[i].op._id)  # pylint: disable=protected-access
                stamps = []
                for i in order:
                    with tf.control_dependencies(_computed([dense[i]])):
                        stamps.append(tf.timestamp())
                self._write([self._allocate(Mark("tensor_ready", infos[i])) for i in order], stamps)
        kind = "gradients_ready" if first else "exchange_begin"
        stamp = self.mark(kind, after=dense, exchange=by_exchange, plan=plan_meta)
        return self.gate(list(grads), stamp)

    def timed(self, collectives):
        """collectives whose every allreduce/allgather call is marked (with its bytes)."""
        return TimedCollectives(collectives, self)

    def read(self):
        """[(Mark, seconds or None)] of the last step: its trace's marks that ran."""
        return self.decode(self.snapshot())

    def stored(self):
        """In the step function, after its tracing() block: the slots as written by the
        step. A step that returns them saves the host a read of the variable."""
        return None if self._eager_values is not None else self._storage().read_value()

    def snapshot(self, stored=None):
        """The last step's marks, cheap to take (decode() later): (trace, values).
        stored: what the step returned from stored(), else the variable is read."""
        if self._eager_values is not None:
            trace = int(self._eager_values[0])
            return trace, [self._eager_values.get(i + 2, -1.0) for i in range(len(self.traces[trace - 1]))]
        array = (self._variable if stored is None else stored).numpy()
        for variable in self._bucket_variables.values():  # a slot holds its latest stamp in one of them
            array = np.maximum(array, variable.numpy())
        marks = self.traces[int(array[0]) - 1]
        values = array[1:len(marks) + 2].copy()
        values[values < values[0]] = -1.0  # written by an earlier step: did not run in this one
        return int(array[0]), values[1:]

    def decode(self, snapshot):
        """[(Mark, seconds or None)] of a snapshot."""
        trace, values = snapshot
        return [(m, v if v >= 0 else None) for m, v in zip(self.traces[trace - 1], list(values))]

    def _allocate(self, mark):
        if self._marks is None:
            raise RuntimeError("Recorder.mark outside Recorder.tracing()")
        self._marks.append(mark)
        slot = len(self._marks) + 1
        if slot >= self.capacity:
            raise ValueError(f"this step has more than {self.capacity - 2} timeline marks; pass a larger "
                             f"capacity to tfcomp.callbacks.Timeline")
        return slot

    def _write(self, slots, stamps):
        if not slots:
            return
        if self._eager_values is not None:
            for slot, stamp in zip(slots, stamps):
                self._eager_values[slot] = float(stamp)
            return
        if tf.compat.v1.get_default_graph() is self._graph:
            self._pending.extend(zip(slots, stamps))
        else:  # a tf.cond branch's graph: written there, if the branch runs
            # Unserialised, each bucket's branches write a variable of their own: branches that
            # write one variable would be ordered, the buckets' exchanges with them.
            where = None if self.serialize else self.bucket
            self._storage(where).scatter_nd_update([[s] for s in slots], tf.stack(stamps))

    def _storage(self, bucket=None):
        if bucket is not None:
            if bucket not in self._bucket_variables:
                self._bucket_variables[bucket] = self._new_slots(f"tfcomp_timeline_marks_bucket{bucket}")
            return self._bucket_variables[bucket]
        if self._variable is None:
            self._variable = self._new_slots("tfcomp_timeline_marks")
        return self._variable

    def _new_slots(self, name):
        from tfcomp.state.variables import worker_local_variables  # pylint: disable=import-outside-toplevel
        with worker_local_variables():
            return tf.Variable(tf.fill([self.capacity], tf.constant(-1.0, tf.float64)), trainable=False, name=name)


def _tensor_info(grad, name):
    return {"name": name, "shape": grad.shape.as_list(), "dtype": grad.dtype.name, "bytes": nbytes(grad)}


class TimedCollectives:
    """An engine's collectives with each call marked: begin (after its input buffers,
    which are gated on the mark) and end (after its outputs)."""

    def __init__(self, inner, recorder):
        self._inner = inner
        self._recorder = recorder
        self.num_workers = inner.num_workers
        self._calls = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def allreduce(self, buffers):
        return self._call("allreduce", self._inner.allreduce, buffers)

    def allgather(self, buffers):
        return self._call("allgather", self._inner.allgather, buffers)

    def _call(self, kind, run, buffers):
        sizes = [nbytes(b) for b in buffers]
        meta = dict(collective=kind, index=self._calls, bytes=sum(sizes), buffer_bytes=sizes,
                    workers=self.num_workers)
        self._calls += 1
        recorder = self._recorder
        if not recorder.serialize:  # its payloads ready, and its results: free stamps
            # The collective waits for its own begin stamp (taken once its payloads are ready,
            # waiting for nothing else), so a begin is never stamped after the collective ended.
            begin = recorder.stamp("collective_begin", buffers, bucket=recorder.bucket, **meta)
            outputs = run(recorder.gate(list(buffers), begin))
            recorder.stamp("collective_end", outputs, bucket=recorder.bucket, index=meta["index"])
            return outputs
        outputs = run(recorder.gate(list(buffers), recorder.mark("collective_begin", after=buffers, **meta)))
        return recorder.gate(outputs, recorder.mark("collective_end", after=outputs))
