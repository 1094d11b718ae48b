"""Carries what tfcomp checkpoints with the optimizer in Keras 3's own saving.

Keras 3 saves (model.save to .keras, save_weights, BackupAndRestore) by asking
each Keras object for its own variables (save_own_variables(store) and
load_own_variables(store), keras/src/saving/saving_lib.py), so the compressor
state, the plan record and tfcomp.Auto's record that tfcomp hangs on the
optimizer (tfcomp.state.variables.attach) would not be in them, and a resumed run would
lose every error-feedback residual. install() makes Keras 3's optimizers save
them beside their own variables, under "<attribute>:<name>" keys, and load
them back. Keras loads before the first step, and the state is built when the
train step is first traced, so a load that finds no state yet is kept on the
optimizer and applied when tfcomp attaches the object (apply_pending), as
tf.train.Checkpoint's deferred restoration does in Keras 2.
"""
import numpy as np
import tensorflow as tf

from tfcomp.keras import version as keras_in_use

#: What tfcomp hangs on an optimizer, in restore order: the records (which refuse
#: another compression) before the state they describe.
CARRIED = ("tfcomp_plan", "tfcomp_auto", "tfcomp_state")  # plan_record, auto and state's RECORD_/STATE_ATTRIBUTE
_SEPARATOR = ":"
_TEXT = ":utf8"  # a string tensor, stored as its bytes (Keras' stores hold numbers only)
_VARIABLE = "@"  # before the name of a variable the object tracks as a dependency
_PENDING = "_tfcomp_pending_restore"


def install():
    """Patches Keras 3's BaseOptimizer once per process; optimizers that carry nothing of
    tfcomp's save and load exactly as before."""
    base = keras_in_use.in_use().internal("optimizers.base_optimizer").BaseOptimizer
    if getattr(base, "_tfcomp_saving", False):
        return
    save, load = base.save_own_variables, base.load_own_variables

    def save_own_variables(self, store):
        save(self, store)
        for attribute in CARRIED:
            child = getattr(self, attribute, None)
            if child is not None:
                for name, tensor in _tensors_of(child).items():
                    key, value = _stored(f"{attribute}{_SEPARATOR}{name}", tensor)
                    store[key] = value

    def load_own_variables(self, store):
        ours = [key for key in store.keys() if _SEPARATOR in key]
        load(self, _StoreWithout(store, set(ours)))
        restored = {}
        for key in ours:
            attribute, name = key.split(_SEPARATOR, 1)
            value = store[key]
            if name.endswith(_TEXT):
                name, value = name[:-len(_TEXT)], np.asarray(value, np.uint8).tobytes()
            restored.setdefault(attribute, {})[name] = tf.constant(value)
        for attribute in CARRIED:
            if attribute in restored:
                child = getattr(self, attribute, None)
                if child is None:
                    _pending(self)[attribute] = restored[attribute]
                else:
                    _restore(child, restored[attribute])

    base.save_own_variables = save_own_variables
    base.load_own_variables = load_own_variables
    base._tfcomp_saving = True  # pylint: disable=protected-access


def apply_pending(owner, attribute, child):
    """Restores child from what a Keras 3 load kept for it on owner, if anything."""
    pending = getattr(owner, _PENDING, None)
    if pending and attribute in pending:
        _restore(child, pending.pop(attribute))


def _tensors_of(child):
    """{name: tensor}: what the child saves itself, and its variables that checkpoints
    carry as dependencies (the state's step counter)."""
    tensors = dict(child._serialize_to_tensors())  # pylint: disable=protected-access
    for name, dependency in _variables_of(child).items():
        tensors[_VARIABLE + name] = dependency.read_value()
    return tensors


def _restore(child, tensors):
    """Restores what child saves now, as tf.train.Checkpoint does: a stored tensor it no longer
    saves (the state of a compressor tfcomp.Auto tried and dropped) is left out."""
    variables = _variables_of(child)
    saved_now = set(child._serialize_to_tensors())  # pylint: disable=protected-access
    for name, value in tensors.items():
        if name.startswith(_VARIABLE) and name[len(_VARIABLE):] in variables:
            variables[name[len(_VARIABLE):]].assign(value)
    child._restore_from_tensors({name: value for name, value in tensors.items()  # pylint: disable=protected-access
                                 if name in saved_now})


def _variables_of(child):
    return {name: dependency for name, dependency in child._trackable_children(save_type="checkpoint").items()  # pylint: disable=protected-access
            if isinstance(dependency, tf.Variable)}


def _pending(owner):
    pending = getattr(owner, _PENDING, None)
    if pending is None:
        pending = {}
        object.__setattr__(owner, _PENDING, pending)  # not tracked: nothing to save
    return pending


def _stored(key, tensor):
    tensor = getattr(tensor, "tensor", tensor)  # a SaveSpec: reading it runs the gather across workers
    if tensor.dtype == tf.string:
        return key + _TEXT, np.frombuffer(tensor.numpy(), np.uint8)
    return key, tensor.numpy()


class _StoreWithout:
    """A Keras store seen without some keys (Keras' own load counts the keys)."""

    def __init__(self, store, hidden):
        self._store, self._hidden = store, hidden

    def keys(self):
        return [key for key in self._store.keys() if key not in self._hidden]

    def __len__(self):
        return len(self.keys())

    def __contains__(self, key):
        return key not in self._hidden and key in self._store

    def __getitem__(self, key):
        if key in self._hidden:
            raise KeyError(key)
        return self._store[key]
