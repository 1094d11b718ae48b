"""The steps every engine runs around the exchange, written once for
tfcomp.distribute and tfcomp.horovod.

At start-up: the workers check that they run the same exchange, share their
compression profile (tensor selection), start the peer watch and serve a
controller (tfcomp.Auto) its hooks.Workers. Per step: the exchange is bound to
the optimizer that applies the gradients, the compressor state is found (or
built) on it, the peer watch is told which step runs, and the exchange runs
with the engine's collectives.

An engine subclasses Engine and supplies only what differs between engines:
its rank and number of workers, how it gathers ints and averages floats across
the workers (collectives every worker joins, run eagerly), where its workers'
peer watches listen, and, per step, its collectives and where the compressor
state lives.
"""
import abc
import json
import os

import tensorflow as tf

from tfcomp.engines import agreement, peers
from tfcomp.exchange import hooks
from tfcomp.keras import version as keras_in_use
from tfcomp.keras.optimizers import advise_on_settings, bind_exchange
from tfcomp.state import variables as state_lib


class Engine(abc.ABC):
    """What an engine does the same way as every other around its exchange.

    exchange: the tfcomp.exchange.step.Exchange it runs; rank: this worker's
    rank; num_workers: how many workers exchange gradients.
    """

    kind = None  # the engine's name, as a controller's hooks.Workers gives it
    worker_word = "task"  # what the engine calls a worker, in the disagreement message
    strategy = None  # tf.distribute's strategy, for a controller's link probe

    def __init__(self, exchange, rank, num_workers):
        self.exchange = exchange
        self.rank = rank
        self.num_workers = num_workers
        self.peer_watch = None  # a tfcomp.engines.peers.PeerWatch, from start(watch_peers=True)
        if exchange.controller is None:  # a controller's candidates are its own choice
            advise_on_settings(exchange.compressors())

    # What each engine supplies.

    @abc.abstractmethod
    def gather_ints(self, values):
        """Every worker's list of ints (as long as this worker's), in rank order."""

    @abc.abstractmethod
    def mean_floats(self, values):
        """Every worker's list of floats (as long as this worker's), averaged."""

    @abc.abstractmethod
    def peer_identity(self):
        """Ints that tell this worker from every other (for the peer watch)."""

    @abc.abstractmethod
    def describe_peer(self, identity):
        """(name, address, host its peer watch is reached at) of the worker with this peer_identity."""

    on_peer_loss = None  # called with the tfcomp.engines.peers.Loss when a worker is lost

    # Written once.

    def gather_int(self, value):
        """Every worker's int, in rank order."""
        return [row[0] for row in self.gather_ints([value])]

    def start(self, watch_peers=True):
        """The start-up every engine runs once its collectives work: the workers must run
        the same exchange (or all fail here, not in a step), tensor selection decides from
        their averaged profile, and a controller gets what it needs of the engine."""
        agreement.check_workers_agree(self.exchange, self.gather_int, self.rank, worker_word=self.worker_word)
        agreement.share_compression_profile(self.exchange, self.mean_floats)
        self.peer_watch = self._watch_peers() if watch_peers and self.num_workers > 1 else None
        if self.exchange.controller is not None:
            self.exchange.controller.workers = hooks.Workers(self.kind, self.rank, self.num_workers,
                                                             self.mean_floats, self.gather_int, strategy=self.strategy)

    def learn_steps_per_epoch(self, steps):
        """Tells the exchange how many steps an epoch of this worker's training data is
        (None: not known), where its dense warm-up asks for an epoch and the step is not
        traced yet. Every worker must say the same, or the warm-up would end at different
        steps on different workers: a ValueError on every worker otherwise."""
        if not self.exchange.asks_for_an_epoch or self.exchange.traces:
            return
        said = [int(s) for s in self.gather_int(-1 if steps is None else steps)]
        if len(set(said)) != 1:
            words = ", ".join("not known" if s < 0 else str(s) for s in said)
            raise ValueError(f"the workers' training data differ in steps per epoch ({self.worker_word} order: "
                             f"{words}), so a dense warm-up of one epoch would end at different steps on "
                             "different workers. Give every worker the same dataset (tf.distribute shards it), "
                             "or pass steps_per_epoch= (or warmup_steps=) to the strategy.")
        self.exchange.learn_steps_per_epoch(steps)

    def _watch_peers(self):
        mine = list(self.peer_identity())
        listener, port = peers.listen(self.describe_peer(mine)[2])
        rows = self.gather_ints([*mine, port, os.getpid()])
        n = len(mine)
        workers, hosts = [], []
        for rank, row in enumerate(rows):
            name, address, host = self.describe_peer(row[:n])
            workers.append(peers.Peer(rank, name, address, row[n + 1]))
            hosts.append(host)
        key = peers.job_key(json.dumps(rows).encode(), hosts)
        return peers.PeerWatch([row[:n] for row in rows].index(mine), workers, listener, hosts,
                               [row[n] for row in rows], key, on_loss=self.on_peer_loss)

    def payload_bytes(self, variables):
        """Bytes one worker sends per step for these (trainable) variables."""
        return self.exchange.payload_bytes([(v.shape, v.dtype) for v in variables], self.num_workers,
                                           [keras_in_use.tensor_name(v) for v in variables])

    def reduce_gradients(self, grads, variables, owner, collectives, reduce_op, device=None, **state_options):
        """The gradients of variables reduced ("mean" or "sum") across workers through the
        exchange, in order (None stays None).

        owner: the optimizer that applies them, which holds the compressor state (so its
        checkpoints carry it). collectives: the engine's, for this step. device: where the
        exchange runs and its state lives (None: wherever TensorFlow places them).
        state_options: the engine's tfcomp.state.variables.CompressionState options
        (gather=, own_rows=).
        """
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return list(grads)
        flat = [grads[i] for i in present]
        names = [keras_in_use.tensor_name(variables[i]) for i in present]
        shapes = [(g.shape, g.dtype) for g in flat]
        bind_exchange(self.exchange, owner)  # before state_specs: momentum="auto" decides the state
        state = state_lib.state_of(owner, self.exchange.state_specs(shapes, names, self.num_workers),
                                   self.exchange.choices(shapes, names), device=device,
                                   num_workers=self.num_workers, rank=self.rank, **state_options)
        with tf.device(device or ""):
            if self.peer_watch is not None:
                with tf.control_dependencies([self.peer_watch.mark_step(state.step, device)]):
                    flat = [tf.identity(g) for g in flat]
            reduced = self.exchange.reduce(flat, names, state, collectives, reduce_op)
        out = list(grads)
        for i, r in zip(present, reduced):
            out[i] = r
        return out
