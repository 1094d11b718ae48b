"""What each tensor's compressor state was made by, saved beside the state.

The compressor state (tfcomp.state.variables) holds residuals, factors and velocities
whose meaning depends on the compressor that made them: restoring a tensor's
PowerSGD residual under EFSignSGD would be wrong. So checkpoints also carry
{tensor name: compressor config (None: dense)}, and a restore under another
per-tensor choice (another compressor, tfcomp.Plan, momentum or eligibility
option) fails, naming the first tensor that differs.

The record is a checkpoint dependency of its own, attached to the owner (the
optimizer) before the state is, so that a restore waiting for it checks it
before the state's variables are read. Checkpoints written before the record
existed have none, and load as they did.
"""
import json

import tensorflow as tf

RECORD_ATTRIBUTE = "tfcomp_plan"  # where the record hangs on the optimizer (and in checkpoints)
_KEY = "choices"


class PlanRecord(tf.Module):
    """{tensor name: compressor config} in the order of the tensors, saved as JSON."""

    def __init__(self, choices):
        super().__init__(name=RECORD_ATTRIBUTE)
        self.record(choices)

    def record(self, choices):
        """What checkpoints save from now on (tfcomp.Auto switched)."""
        self.text = json.dumps(dict(choices), default=str)  # text, which tf.Module does not wrap

    def _serialize_to_tensors(self):
        if not tf.executing_eagerly():
            return {}  # traced into a SavedModel's save function; the eager save writes it
        return {_KEY: tf.constant(self.text)}

    def _restore_from_tensors(self, restored_tensors):
        if tf.executing_eagerly() and _KEY in restored_tensors:
            check_same_choices(json.loads(restored_tensors[_KEY].numpy().decode()), json.loads(self.text))
        return tf.no_op()


def check_same_choices(saved, running):
    """Raises ValueError naming the first tensor whose compressor differs."""
    for name in list(running) + [n for n in saved if n not in running]:
        if name not in saved or name not in running or saved[name] != running[name]:
            raise ValueError(
                f"the checkpoint's tfcomp compressor state was made with {_describe(saved, name)} for tensor "
                f"{name!r}; this run uses {_describe(running, name)}. Restoring it under another compressor "
                f"would be wrong: resume with the compression (tfcomp.Plan, compressor, momentum and "
                f"exchange options) the checkpoint was written with, or start from weights alone.")


def _describe(choices, name):
    if name not in choices:
        return "no entry (no such tensor)"
    config = choices[name]
    if config is None:
        return "dense"
    knobs = ", ".join(f"{k}={v!r}" for k, v in config.items() if k != "name")
    return f"{config.get('name')}({knobs})"
