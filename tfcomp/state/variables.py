"""Compressor state (residuals, factors, the step counter) as tf.Variables in
one trackable, so that tf.train.Checkpoint, model.save and BackupAndRestore
carry it when it is attached to the optimizer. A restart must not lose
error-feedback memory.

Residuals differ from worker to worker, yet tf.distribute restores every
worker from the chief's checkpoint. So the per-tensor state is saved as every
worker's values stacked, [K, ...], gathered across workers at save time (as
tf.distribute does for its own sync-on-read variables, every worker takes part
in a save), and each worker restores its own row. Horovod's convention is the
opposite (rank 0 alone writes checkpoints), so there each worker saves only its
own values, tagged with its rank: a worker that restores another rank's save
keeps the state all workers share (PowerSGD's factors, the step) and starts
its own error-feedback memory (PER_WORKER_STATE) from zero, with a warning;
per-rank checkpoints lose nothing. The engine builds all
per-tensor variables before it attaches the state to the optimizer, so a
restore that waited for the state (Keras restores before the first step)
finds them.
"""
import contextlib
import re

import tensorflow as tf
from absl import logging
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.trackable import data_structures
from tensorflow.python.training.saving import saveable_object

from tfcomp.state import keras3 as keras3_saving
from tfcomp.state.record import RECORD_ATTRIBUTE, PlanRecord


STATE_ATTRIBUTE = "tfcomp_state"  # where the state hangs on the optimizer (and in checkpoints)
#: State names whose values differ from worker to worker (error-feedback memory);
#: every other state variable holds the same value on every worker.
PER_WORKER_STATE = ("residual", "velocity")
_SAVED_BY = "tfcomp-saved-by"  # [rank, num_workers] of the worker that saved its own rows


def state_of(owner, specs, choices=None, **state_options):
    """owner's CompressionState: on first use created (CompressionState(**state_options)),
    built with specs and hung on owner (an optimizer) so that its checkpoints carry it.

    It is built before it is attached, so that a restore waiting for it (Keras
    restores before the first step) finds every variable. choices (the
    exchange's {tensor name: compressor config}) are attached first, as a
    tfcomp.state.record.PlanRecord: a restore made under other choices fails
    there, naming the tensor, before any state is read. Later calls with other
    choices (tfcomp.Auto's switch) change what the record saves from then on.
    """
    state = getattr(owner, STATE_ATTRIBUTE, None)
    record = getattr(owner, RECORD_ATTRIBUTE, None)
    if state is not None and record is not None and choices is not None:
        record.record(choices)  # tfcomp.Auto switched: checkpoints from now on carry the new choices
    if state is None:
        with tf.init_scope():
            if choices is not None:
                attach(owner, PlanRecord(choices), RECORD_ATTRIBUTE)
            state = CompressionState(**state_options)
            state.build(specs)
            attach(owner, state, STATE_ATTRIBUTE)
    return state


def attach(owner, trackable_child, name):
    setattr(owner, name, trackable_child)
    trackable = tf.__internal__.tracking
    if isinstance(owner, trackable.Trackable) and not isinstance(owner, trackable.AutoTrackable):
        # Keras' legacy optimizers (and tensorflow-addons') track dependencies explicitly.
        owner._track_trackable(trackable_child, name=name, overwrite=True)  # pylint: disable=protected-access
    keras3_saving.apply_pending(owner, name, trackable_child)  # a Keras 3 load that came before it


def _key(tensor_name):
    # Letters and digits only, others as _hex, so distinct names keep distinct keys;
    # checkpoint keys escape "." and "/", and not the same way on save and restore.
    return re.sub(r"[^0-9A-Za-z]", lambda m: f"_{ord(m.group()):02x}", tensor_name)


def _path(key, state_name):
    return f"{key}--{state_name}"


@contextlib.contextmanager
def worker_local_variables(device=None):
    """Variables created here belong to this worker alone: not mirrored by an
    enclosing tf.distribute strategy scope, because residuals differ per worker."""
    def plain(next_creator, **kwargs):
        del next_creator  # the strategy's creator would mirror the variable
        return resource_variable_ops.default_variable_creator_v2(None, **kwargs)

    with tf.init_scope(), tf.variable_creator_scope(plain), tf.device(device):
        yield


class CompressionState(tf.Module):
    """Per-tensor state variables, created on first use and found again by name.

    gather(tensor) -> [num_workers, ...] stacks every worker's tensor (None for
    a single worker); rank is this worker's row. With own_rows=True (Horovod)
    nothing is gathered: each worker saves its own values and its rank.
    """

    def __init__(self, name="tfcomp_state", device=None, gather=None, num_workers=1, rank=0,
                 own_rows=False):
        super().__init__(name=name)
        self._device = device
        self._own_rows = own_rows
        self._gather = gather or (lambda t: t[None])
        self._num_workers = num_workers
        self._rank = rank
        with worker_local_variables(device):
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        # Saved through _serialize_to_tensors, not as children: see the module doc.
        self._tensors = data_structures.NoDependency({})  # every variable made, for a switch back
        # What the running train function reads (what is saved and restored): since begin_trace(),
        # what its trace asked for, or what use() named.
        self._live = data_structures.NoDependency({})

    def get(self, tensor_name):
        """{state name: tf.Variable} for one tensor, or None if it has none yet."""
        return self._tensors.get(_key(tensor_name))

    def build(self, specs_by_tensor):
        """Creates (zeros) the missing state of {tensor name: {state name: (shape, dtype)}}."""
        for tensor_name, specs in specs_by_tensor.items():
            self.tensor_state(tensor_name, specs)

    def tensor_state(self, tensor_name, specs):
        """{state name: tf.Variable} for one tensor, each created (zeros) on first call,
        and made anew where a compressor switched by tfcomp.Auto needs another shape."""
        key = _key(tensor_name)
        states = self._tensors.setdefault(key, {})
        live = self._live.setdefault(key, {})
        for name, (shape, dtype) in specs.items():
            known = states.get(name)
            if known is None or known.shape != tf.TensorShape(shape) or known.dtype != tf.as_dtype(dtype):
                with worker_local_variables(self._device):
                    states[name] = tf.Variable(tf.zeros(shape, dtype), trainable=False, name=f"{key}/{name}")
            live[name] = states[name]
        return states

    def begin_trace(self):
        """A train function is traced anew (tfcomp.Auto's switch): from now on only what its
        trace asks for is saved and restored, not the state of the compressors it replaced."""
        self._live.clear()

    def in_use(self):
        """Which variables each tensor's state names stand for now: after a train function's
        trace, the ones it reads (tfcomp.Auto keeps this beside each function it may run again)."""
        return {key: dict(states) for key, states in self._live.items()}

    def use(self, in_use):
        """Stands for a train function's variables again (what in_use() returned after its
        trace) before that function runs again: where a compressor traced since needed
        another shape, zero() and checkpoints must reach the variables this one reads."""
        self._tensors.clear()
        self._tensors.update({key: dict(states) for key, states in in_use.items()})
        self._live.clear()
        self._live.update({key: dict(states) for key, states in in_use.items()})

    def zero(self):
        """Every state variable back to zeros (the step counter kept): where tfcomp.Auto
        switches compressors, one's residuals mean nothing to another."""
        for states in self._tensors.values():
            for variable in states.values():
                variable.assign(tf.zeros_like(variable))

    def _serialize_to_tensors(self):
        variables = {_path(key, name): var for key, states in self._live.items()
                     for name, var in states.items()}
        if not tf.executing_eagerly():
            # Traced into a SavedModel's save function, whose graph cannot reach
            # these untracked variables. (The SavedModel's variables file is
            # written eagerly and holds them.)
            return {}
        if self._own_rows:
            saved = {path: var.read_value() for path, var in variables.items()}
            saved[_SAVED_BY] = tf.constant([self._rank, self._num_workers], tf.int64)
            return saved
        # Callables: the gather (a collective) runs when saving, never when a
        # restore only asks which tensors there are.
        return {path: saveable_object.SaveSpec(lambda var=var: self._gather(var.read_value()), "", path,
                                               dtype=var.dtype, device=var.device)
                for path, var in variables.items()}

    def _restore_from_tensors(self, restored_tensors):
        if self._own_rows:
            return self._restore_own_rows(dict(restored_tensors))
        assigns = []
        for path, stacked in restored_tensors.items():
            saved_workers = stacked.shape[0]
            if saved_workers is not None and saved_workers != self._num_workers:
                raise ValueError(
                    f"the checkpoint holds tfcomp state of {saved_workers} workers, this run has "
                    f"{self._num_workers}: error-feedback residuals cannot be split differently. "
                    f"Resume with {saved_workers} workers.")
            key, name = path.rsplit("--", 1)
            assigns.append(self._live[key][name].assign(stacked[self._rank]))
        return tf.group(assigns)

    def _restore_own_rows(self, restored):
        saved_by = restored.pop(_SAVED_BY)
        if tf.executing_eagerly():
            saved_rank, saved_workers = saved_by.numpy().tolist()
            if saved_workers != self._num_workers:
                raise ValueError(
                    f"the checkpoint holds tfcomp state saved by one of {saved_workers} workers, this run "
                    f"has {self._num_workers}: error-feedback residuals cannot be split differently. "
                    f"Resume with {saved_workers} workers.")
            if saved_rank != self._rank and any(p.rsplit("--", 1)[1] in PER_WORKER_STATE for p in restored):
                logging.warning(
                    "tfcomp: rank %d restores state saved by rank %d: its error-feedback memory restarts "
                    "from zero. Write a checkpoint per rank to keep every rank's.", self._rank, saved_rank)
        same_rank = tf.equal(saved_by[0], self._rank)
        assigns = []
        for path, value in restored.items():
            key, name = path.rsplit("--", 1)
            if name in PER_WORKER_STATE:
                value = tf.where(same_rank, value, tf.zeros_like(value))
            assigns.append(self._live[key][name].assign(value))
        return tf.group(assigns)
