"""An in-process K-worker engine: K threads, one per worker, each running the
same Exchange as a real engine, with collectives that meet at a barrier.

Every worker computes a collective's result from all workers' inputs in rank
order, so results are bitwise identical across workers, as with a real ring.

Two ways to run: `step` runs the exchange eagerly (simple, about 100 ms a step
for a small MLP); `run` calls per-worker tf.functions built around
`collectives(rank)`, whose collectives meet at the barrier when the function
runs (inside numpy_function), so a whole training step is one graph per worker
(several times faster; what benchmarks.convergence uses).
"""
import os
import threading

import numpy as np
import tensorflow as tf

from tfcomp.exchange.step import Exchange
from tfcomp.exchange.fusion import WIRE_DTYPES
from tfcomp.state.variables import CompressionState


MEETING_TIMEOUT_S = 300


def inter_op_threads():
    """The threads TensorFlow runs a graph's ops on (its default: one per CPU)."""
    configured = tf.config.threading.get_inter_op_parallelism_threads()
    return configured or len(os.sched_getaffinity(0))


class _Meeting:
    """Where the K workers' threads swap their buffers for one collective."""

    def __init__(self, num_workers):
        self.num_workers = num_workers
        # A worker that never arrives (a bug, or a graph short of threads) fails the
        # step instead of hanging it; tracing a first step can take a while.
        self.barrier = threading.Barrier(num_workers, timeout=MEETING_TIMEOUT_S)
        self.slots = [None] * num_workers
        self.log = []  # (collective, bytes of one buffer sent by one worker), per buffer

    def swap(self, rank, kind, buffers):
        """Every worker's buffers (tensors, or arrays inside a running graph), in rank order."""
        self.slots[rank] = buffers
        self.barrier.wait()
        everyone = list(self.slots)
        if rank == 0:
            self.log.extend((kind, int(np.prod(b.shape)) * tf.as_dtype(b.dtype).size) for b in buffers)
        self.barrier.wait()  # nobody overwrites a slot before all have read them
        return everyone


def _on_the_wire(kind, buffers):
    """buffers, if the real engines' collectives can move their dtypes."""
    for b in buffers:
        if b.dtype not in WIRE_DTYPES:
            raise TypeError(f"{kind} of a {b.dtype.name} buffer: TensorFlow's collectives take "
                            f"{', '.join(d.name for d in WIRE_DTYPES)}")
    return buffers


class _WorkerCollectives:
    def __init__(self, rank, meeting):
        self.rank = rank
        self.meeting = meeting
        self.num_workers = meeting.num_workers

    def allreduce(self, buffers):
        everyone = self.meeting.swap(self.rank, "allreduce", _on_the_wire("allreduce", buffers))
        return [tf.add_n([worker[i] for worker in everyone]) for i in range(len(buffers))]

    def allgather(self, buffers):
        everyone = self.meeting.swap(self.rank, "allgather", _on_the_wire("allgather", buffers))
        return [tf.concat([worker[i] for worker in everyone], 0) for i in range(len(buffers))]


class _RuntimeCollectives(_WorkerCollectives):
    """The same collectives as graph ops: each meets the other workers when the
    graph runs, so a tf.function traced once serves every step."""

    def _meet(self, kind, buffers, combine):
        _on_the_wire(kind, buffers)

        @tf.autograph.experimental.do_not_convert  # plain Python, run when the graph runs
        def swap(*arrays):
            everyone = self.meeting.swap(self.rank, kind, arrays)
            return [combine([worker[i] for worker in everyone]) for i in range(len(arrays))]

        return tf.numpy_function(swap, list(buffers), [b.dtype for b in buffers], stateful=True,
                                 name=f"emulated_{kind}")

    def allreduce(self, buffers):
        outputs = self._meet("allreduce", buffers, _sum_in_rank_order)
        for out, b in zip(outputs, buffers):
            out.set_shape(b.shape)
        return outputs

    def allgather(self, buffers):
        outputs = self._meet("allgather", buffers, np.concatenate)
        for out, b in zip(outputs, buffers):
            out.set_shape([b.shape[0] * self.num_workers] + b.shape[1:].as_list())
        return outputs


def _sum_in_rank_order(arrays):
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    return total


class Emulator:
    """K workers in one process, each with its own CompressionState.

        emu = Emulator(2, tfcomp.EFSignSGD)
        averaged = emu.step([grads_of_worker0, grads_of_worker1], names)
    """

    def __init__(self, num_workers, compression=None, **exchange_options):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.exchange = Exchange(compression, **exchange_options)
        self.states = [CompressionState(name=f"worker{r}_state") for r in range(num_workers)]
        self.meeting = _Meeting(num_workers)

    @property
    def traffic(self):
        """[(collective, bytes one worker sent)] for every fused buffer so far."""
        return list(self.meeting.log)

    def collectives(self, rank):
        """Worker rank's collectives as graph ops, for tf.functions that `run` calls."""
        return _RuntimeCollectives(rank, self.meeting)

    def run(self, functions, args_per_worker):
        """Calls functions[rank](*args_per_worker[rank]) for every rank at once, one
        thread each (their collectives meet while they run); returns their results.

        A worker waiting at a collective holds one of TensorFlow's inter-op threads,
        so K workers need at least K of them, or the last one never arrives."""
        if inter_op_threads() < self.num_workers:
            raise RuntimeError(
                f"{self.num_workers} emulated workers in compiled steps need at least {self.num_workers} "
                f"inter-op threads; TensorFlow has {inter_op_threads()}. Call "
                f"tf.config.threading.set_inter_op_parallelism_threads({self.num_workers + 1}) before "
                "TensorFlow runs its first op, or use fewer workers.")
        return self._on_every_worker(lambda rank: functions[rank](*args_per_worker[rank]))

    def step(self, grads_per_worker, names, reduce_op="mean"):
        """Runs one exchange on every worker; returns each worker's reduced gradients."""
        if len(grads_per_worker) != self.num_workers:
            raise ValueError(f"expected gradients of {self.num_workers} workers, got {len(grads_per_worker)}")
        return self._on_every_worker(lambda rank: self.exchange.reduce(
            grads_per_worker[rank], names, self.states[rank], _WorkerCollectives(rank, self.meeting), reduce_op))

    def _on_every_worker(self, work):
        results = [None] * self.num_workers
        errors = []

        def run(rank):
            try:
                results[rank] = work(rank)
            except BaseException as err:  # surfaced below; the barrier releases the others
                errors.append(err)
                self.meeting.barrier.abort()

        threads = [threading.Thread(target=run, args=(r,)) for r in range(self.num_workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.meeting.barrier.reset()
            raise errors[0]
        return results
