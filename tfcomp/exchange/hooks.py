"""What features built on the exchange attach through, so that the exchange knows
none of them:

- a Controller (tfcomp.Auto) decides, while training, what an exchange runs;
- a PerTensor choice (tfcomp.Plan) gives each tensor a compressor of its own;
- an observer (the Timeline's Recorder) is told, while a step is traced, when
  gradients are ready and each phase ends, and times the collectives.
"""
import contextlib
import dataclasses
import threading
from typing import Callable


class PerTensor:
    """A compressor per tensor, chosen by name (tfcomp.Plan implements it)."""

    def choose(self, name):
        """The compressor for tensor `name` (a NoCompression for dense)."""
        raise NotImplementedError

    def compressors(self):
        """Every distinct compressor it can choose (dense included), in order."""
        raise NotImplementedError

    def with_compressors(self, convert):
        """The same choice with convert(compressor) in place of every compressor but dense."""
        raise NotImplementedError

    def config(self):
        """JSON-able data every worker must agree on."""
        raise NotImplementedError


class Controller:
    """Decides what an exchange runs while training (tfcomp.Auto implements it). The
    exchange runs current() from its construction on, and again from the next trace
    after the controller calls exchange.use(...)."""

    exchange = None  # the Exchange it controls, set by the exchange
    workers = None  # a Workers, set by the engine

    def current(self):
        """What the exchange runs now: a PerTensor choice or a compressor."""
        raise NotImplementedError

    def config(self):
        """JSON-able data every worker must agree on."""
        raise NotImplementedError

    def attach(self, owner):
        """Called with the optimizer the exchanged gradients go to (checkpoints hang there)."""

    def check_can_trace(self):
        """Raises ValueError where a step cannot be traced under this controller."""


@dataclasses.dataclass
class Workers:
    """What a controller needs of its engine, which fills this in: the workers' count and
    this one's rank, mean(list of floats) -> the workers' mean and gather_int(int) ->
    every worker's int, as collectives all workers join, and what the link probe takes."""
    engine: str
    rank: int
    num_workers: int
    mean: Callable[[list], list]
    gather_int: Callable[[int], list]
    strategy: object = None  # tf.distribute's strategy, for the link probe


_active = None  # the observer of the step being traced (any thread: merge_call runs elsewhere)
_local = threading.local()  # a per-thread override (the in-process emulator's workers)


def observer():
    """The observer of the step being traced, or None."""
    return getattr(_local, "observer", None) or _active


@contextlib.contextmanager
def observing(observer_, this_thread_only=False):
    """Makes observer_ the one the exchange reports to while a step is traced (or run eagerly)."""
    global _active  # pylint: disable=global-statement
    if this_thread_only:
        previous, _local.observer = getattr(_local, "observer", None), observer_
    else:
        previous, _active = _active, observer_
    try:
        yield observer_
    finally:
        if this_thread_only:
            _local.observer = previous
        else:
            _active = previous
