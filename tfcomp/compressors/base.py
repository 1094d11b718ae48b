"""The compressor API, independent of any engine.

A compressor turns one gradient (and its state) into fixed-capacity payload
tensors, each tagged with the collective it needs. It never calls a
collective: it returns a Round, the exchange runs the round's collectives for
all tensors at once (fused), and hands the results to the round's `finish`,
which returns the averaged gradient or, for multi-round algorithms such as
PowerSGD (P, then Q), the next Round.

Payload shapes must be known when the step is traced (fixed capacity), so all
workers' payloads agree, allgather needs no size exchange and tf.function
never retraces.
"""
import dataclasses
import enum
import functools
import inspect
import zlib
from typing import Callable, Sequence, Union

import tensorflow as tf


class Collective(enum.Enum):
    ALLREDUCE = "allreduce"  # elementwise sum over workers, same shape back
    ALLGATHER = "allgather"  # every worker's payload, stacked: [K, *shape]


@dataclasses.dataclass(frozen=True)
class PayloadSpec:
    shape: tuple
    dtype: tf.DType
    collective: Collective

    @property
    def nbytes(self):
        size = 1
        for d in self.shape:
            size *= d
        return size * self.dtype.size


@dataclasses.dataclass(frozen=True)
class Payload:
    tensor: tf.Tensor
    collective: Collective


@dataclasses.dataclass(frozen=True)
class Round:
    """Payloads to exchange, and what to do with what comes back.

    finish receives one tensor per payload, in order: the sum over workers for
    ALLREDUCE, the stacked [K, *shape] tensor for ALLGATHER. It returns the
    averaged gradient, or the next Round.
    """
    payloads: Sequence[Payload]
    finish: Callable[[list], Union[tf.Tensor, "Round"]]


@dataclasses.dataclass(frozen=True)
class TensorContext:
    """What a compressor may know about the tensor it compresses."""
    name: str
    num_workers: int
    step: tf.Tensor  # int64 scalar, the same on every worker
    global_seed: int = 0
    average: bool = True  # False: the engine asks for the sum over workers
    phase: int = 0  # which of the compressor's phases this step runs (step % phases)
    batch: int = None  # same-shape tensors stacked on a leading axis (compressors that batch)
    members: tuple = ()  # their names, in stacking order

    def from_sum(self, summed):
        """The result the engine asked for, from the sum over workers."""
        return summed / tf.cast(self.num_workers, summed.dtype) if self.average else summed

    def from_stacked(self, stacked):
        """The result the engine asked for, from the workers' [K, ...] contributions."""
        return tf.reduce_mean(stacked, axis=0) if self.average else tf.reduce_sum(stacked, axis=0)

    def seed(self, salt=0, name=None):
        """A stateless-RNG seed shared by all workers: (tensor name, step, global seed)."""
        name = self.name if name is None else name
        name_hash = zlib.crc32(f"{self.global_seed}/{salt}/{name}".encode()) & 0x7FFFFFFF
        return tf.stack([tf.constant(name_hash, tf.int64), tf.cast(self.step, tf.int64)])


#: A compressor's warmup_steps that asks for one epoch of dense steps first: the
#: exchange resolves it (tfcomp.exchange.step.Exchange.warmup_steps).
EPOCH = "epoch"

#: Keyword arguments a compressor also takes by a shorter or better-known name
#: (PowerSGD(rank=4), "PowerSGD:rank=4"; start_powerSGD_iter is PyTorch's hook's name).
KNOB_ALIASES = {"rank": "matrix_approximation_rank", "start_powerSGD_iter": "warmup_steps"}


def checked_warmup_steps(owner, value):
    """warmup_steps as a compressor takes it: an integer >= 0, or EPOCH."""
    if value == EPOCH or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise ValueError(f"{owner}: warmup_steps is the dense steps before compression starts, an integer >= 0 "
                     f"or {EPOCH!r} (one epoch), got {value!r}")


def _taking_aliases(cls, init):
    """init, also taking KNOB_ALIASES' names for the knobs it has."""
    params = inspect.signature(init).parameters
    aliases = {alias: knob for alias, knob in KNOB_ALIASES.items() if knob in params}
    if not aliases:
        return init

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        for alias, knob in aliases.items():
            if alias in kwargs:
                if knob in kwargs:
                    raise TypeError(f"{cls.__name__}: {alias}= is {knob}=; pass one of them")
                kwargs[knob] = kwargs.pop(alias)
        init(self, *args, **kwargs)
    return __init__


class Compressor:
    """Base class. Subclasses define payload_specs, compress and, if stateful, state_specs.

    A compressor's constructor arguments are its public attributes of the same
    names, so that its repr constructs it and config() describes it."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _taking_aliases(cls, cls.__dict__["__init__"])

    #: Whether the exchange applies efficiency-aware tensor selection by default.
    efficiency_aware = False
    #: Steps cycle through this many phases (ACP-SGD alternates P and Q); each
    #: phase has payloads of its own fixed shapes.
    phases = 1
    #: Dense steps the exchange runs before this compressor starts (EPOCH: one epoch).
    warmup_steps = 0
    #: Whether the exchange may hand this compressor same-shape tensors stacked
    #: (TensorContext.batch; its state then gains the leading axis too).
    batches_same_shape = False

    def accepts(self, shape, dtype):
        """(False, why) for tensors this compressor would not make smaller; they go dense."""
        return True, ""

    #: One payload spec list per round (PowerSGD has two rounds).
    def payload_specs(self, shape, dtype):
        raise NotImplementedError

    def state_specs(self, shape, dtype):
        """{name: (shape, dtype)} of the per-tensor state variables (residuals, factors)."""
        return {}

    def compress(self, grad, state, ctx):
        """Returns the first Round for grad, given its state variables and TensorContext."""
        raise NotImplementedError

    def payload_bytes(self, shape, dtype):
        """Bytes this worker sends into the collectives per step for one tensor."""
        return sum(spec.nbytes for specs in self.payload_specs(shape, dtype) for spec in specs)

    def compression_rate(self, shape, dtype):
        """Payload bytes over dense bytes (1.0 = no saving)."""
        dense = tf.TensorShape(shape).num_elements() * tf.as_dtype(dtype).size
        return self.payload_bytes(shape, dtype) / max(dense, 1)

    def config(self):
        """The knobs that define this compressor (its public attributes), for checking workers agree."""
        knobs = {k: v for k, v in sorted(vars(self).items()) if not k.startswith("_")}
        return {"name": type(self).__name__, **knobs}

    def arguments(self):
        """{argument: value} that construct this compressor again: type(self)(**arguments())."""
        params = inspect.signature(type(self).__init__).parameters
        return {name: getattr(self, name) for name, p in params.items()
                if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    def __repr__(self):
        knobs = ", ".join(f"{k}={v!r}" for k, v in self.arguments().items())
        return f"{type(self).__name__}({knobs})"
